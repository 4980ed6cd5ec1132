/*
 * Where the GPU sits: the CPUs and NUMA node nearest to it, through hwloc
 * (PCI bus id from the driver -> hwloc PCI object -> its first non-I/O
 * ancestor's cpuset and nodeset). Falls back to the whole machine when the
 * device has no PCI location (simulated device) or hwloc cannot see it (some
 * VMs), and says so in the log. Runtimes created at once in several
 * threads (one per GPU) load their topologies one at a time: hwloc's I/O
 * discovery goes through libudev, whose globals are not synchronized
 * (ThreadSanitizer saw two loads write one of them).
 */
#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>

#include "core/runtime.h"
#include "core/topology.h"
#include "seam/log.h"

void ds__topology_query(struct ds_runtime *rt)
{
    ds_runtime_info *in = &rt->info;
    snprintf(in->local_cpus, sizeof in->local_cpus, "?");
    in->numa_node = -1;
    static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return;
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    pthread_mutex_lock(&load_mu);
    int loaded = hwloc_topology_load(topo);
    pthread_mutex_unlock(&load_mu);
    if (loaded != 0) {
        ds__log(DS_LOG_INFO, "topology: hwloc_topology_load failed");
        hwloc_topology_destroy(topo);
        return;
    }
    hwloc_obj_t anchor = NULL;
    char bus[32] = "";
    if (!rt->ops->no_pci_reason &&
        rt->cu->cuDeviceGetPCIBusId(bus, (int)sizeof bus, rt->dev) == CUDA_SUCCESS) {
        unsigned dom = 0, b = 0, d = 0, f = 0;
        if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &f) == 4) {
            hwloc_obj_t pci = hwloc_get_pcidev_by_busid(topo, dom, b, d, f);
            if (pci)
                anchor = hwloc_get_non_io_ancestor_obj(topo, pci);
        }
    }
    if (!anchor) {
        anchor = hwloc_get_root_obj(topo);
        ds__log(DS_LOG_INFO, "topology: %s; using every CPU of the machine",
                rt->ops->no_pci_reason ? rt->ops->no_pci_reason : "hwloc does not see the GPU's PCI device");
    }
    hwloc_bitmap_list_snprintf(in->local_cpus, sizeof in->local_cpus, anchor->cpuset);
    if (anchor->nodeset && hwloc_bitmap_weight(anchor->nodeset) == 1)
        in->numa_node = hwloc_bitmap_first(anchor->nodeset);
    else if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) == 1)
        in->numa_node = (int)hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, 0)->os_index;
    rt->cpuset = hwloc_bitmap_dup(anchor->cpuset);
    rt->topology = topo;
}

void ds__topology_release(struct ds_runtime *rt)
{
    if (rt->cpuset)
        hwloc_bitmap_free((hwloc_bitmap_t)rt->cpuset);
    if (rt->topology)
        hwloc_topology_destroy((hwloc_topology_t)rt->topology);
    rt->cpuset = rt->topology = NULL;
}
