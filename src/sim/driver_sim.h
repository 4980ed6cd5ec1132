/*
 * The simulated device's driver-API face (driver_sim.c, driver_sim_mem.c,
 * driver_sim_graph.c; their entry points' shape is driver_sim_call.h): the
 * cu* entry points behind ds__sim_driver(), built on the engine (engine.h),
 * plus what the driver owns beyond one device: the calling thread's current
 * context, device pointers of any device, and the process-wide virtual memory
 * management state (cuMemAddressReserve, cuMemCreate, cuMemMap, ...).
 */
#ifndef DS_SIM_DRIVER_SIM_H
#define DS_SIM_DRIVER_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "sim/engine.h"

/* Resolves a stream argument on the locked device d. NULL, CU_STREAM_LEGACY
 * and CU_STREAM_PER_THREAD mean the default stream of the calling thread's
 * current context when that is a green context of d, else d's default stream
 * (over all SMs). CUDA_ERROR_INVALID_HANDLE for a stream that is not a live
 * stream of d, CUDA_ERROR_CONTEXT_IS_DESTROYED for one whose green context was
 * destroyed. */
CUresult ds__sim_stream_resolve(sim_dev *d, CUstream hs, sim_stream **out);
/* "CUDA_ERROR_INVALID_VALUE", ... for the codes the simulated driver uses. */
const char *ds__sim_cu_name(CUresult r);

/* Finds [p, p+n) inside a live allocation of any device, or (remove 0) in a
 * mapping with read/write access. remove: frees the allocation (n ignored, p
 * must be the start). CUDA_ERROR_INVALID_VALUE if not found. Takes device
 * locks: call it with none held. */
CUresult ds__sim_mem_check(uintptr_t p, size_t n, int remove);

/* Virtual memory management: granularity of the simulated cuMemCreate /
 * cuMemAddressReserve, as on Hopper. */
#define DS__SIM_VMM_GRANULARITY ((size_t)2 << 20)
/* Live reservations, physical allocations and mappings, process-wide (tests
 * check that nothing leaks). */
void ds__sim_vmm_counts(size_t *reservations, size_t *physical, size_t *mappings);

#endif /* DS_SIM_DRIVER_SIM_H */
