/*
 * Where the GPU sits (topology.c): the CPUs and NUMA node local to the
 * device, through hwloc.
 */
#ifndef DS_CORE_TOPOLOGY_H
#define DS_CORE_TOPOLOGY_H

struct ds_runtime;

/* CPUs and NUMA node local to the device, through hwloc; keeps
 * the topology and cpuset for pinning; ds__topology_release frees them. */
void ds__topology_query(struct ds_runtime *rt);
void ds__topology_release(struct ds_runtime *rt);

#endif /* DS_CORE_TOPOLOGY_H */
