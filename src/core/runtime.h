/*
 * A runtime: the state of every core module, assembled. Each module's state
 * struct and functions live in its own header; this header includes only
 * the state types struct ds_runtime embeds (pool.h, registry.h, sched.h,
 * fault.h, gate.h), and declares the runtime's lifecycle (runtime.c). A file
 * includes the headers of the functions it calls.
 *
 * Core calls nothing above it by name: the device through the driver and
 * device-ops tables (driver.h), policies through their ops tables
 * (registry.h), the RCK through the gate writer and scheduler hook it
 * registers (gate.h, sched.h). src/detshare.c plugs them in.
 */
#ifndef DS_CORE_RUNTIME_H
#define DS_CORE_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/fault.h"
#include "core/gate.h"
#include "core/pool.h"
#include "core/registry.h"
#include "core/sched.h"
#include "seam/driver.h"

struct ds__copier;
struct ds__profiles;
struct ds_vctx;

/* What the library plugs into core at creation (src/detshare.c). */
typedef struct ds__plugins {
    const ds_policy_ops *const *policies; /* NULL-terminated: registered in order */
    const unsigned char *device_image;    /* fatbin holding ds_probe_smid */
    ds_status (*rck_start)(struct ds_runtime *rt); /* DS_RCK_ON; NULL = none */
} ds__plugins;

struct ds_runtime {
    uint32_t magic;
    const ds__driver *cu;
    const ds__devops *ops;
    CUdevice dev;
    const unsigned char *device_image;
    CUcontext primary;
    /* device limits, for validating launches without a driver round trip */
    uint32_t max_grid[3];
    uint32_t max_block[3];
    uint32_t max_threads_per_block;
    uint32_t max_smem_optin;
    int prio_least, prio_greatest;
    uint32_t teardown_timeout_ms;
    uint32_t sample_period;
    uint32_t heartbeat_timeout_ms, fault_presume_ms;

    ds_runtime_info info; /* filled at creation, read-only afterwards */

    /* pool.c */
    CUdevResource groups[DS_MAX_GROUPS];
    uint32_t num_groups;
    ds__pctx pctx[DS_MAX_PCTX];
    uint32_t num_pctx;
    uint32_t full_pctx; /* index of the whole-GPU pCtx */

    /* vctx.c: the vCtx table */
    pthread_mutex_t lock; /* vCtx table (create, destroy), lazily loaded module */
    _Atomic(struct ds_vctx *) *vctx; /* slots; read lock-free by the scheduler */
    uint32_t max_vctx;
    uint32_t live_vctx;
    uint64_t vctx_serial;

    /* probe.c */
    CUmodule module; /* the device image, loaded on first use */
    CUfunction probe_fn;
    CUdeviceptr probe_buf; /* the probe's SM bitmap, kept until destroy */

    ds__registry reg;              /* registry.c */
    struct ds__profiles *profiles; /* profile.c */
    ds__sched sched;               /* sched.c */
    void *topology; /* topology.c: hwloc_topology_t, kept for pinning the scheduler */
    void *cpuset;   /* ... hwloc_bitmap_t of CPUs local to the GPU, or NULL */
    ds__fault fault;               /* fault.c */
    ds__gates gates;               /* gate.c */
    struct ds__copier *copier;     /* copy.c, started on first use */
};

/* runtime.c: validates a caller's config into *full (defaults filled); then
 * creates the runtime on `backend` (owned by the runtime from the call on,
 * closed on failure) with `plugins`. */
ds_status ds__runtime_config(const ds_runtime_config *config, ds_runtime_config *full);
ds_status ds__runtime_create(const ds_runtime_config *cfg, const ds__backend *backend, const ds__plugins *plugins,
                             ds_runtime_t *out);
/* The backend a runtime runs on (its device-ops table and device). */
static inline const ds__devops *ds__runtime_devops(const struct ds_runtime *rt, CUdevice *dev)
{
    *dev = rt->dev;
    return rt->ops;
}

#endif /* DS_CORE_RUNTIME_H */
