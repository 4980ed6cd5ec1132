/*
 * Internal state of a runtime, its pCtx pool and its vCtxs.
 *
 * Ownership: the runtime owns the pool (built once in pool.c) and the vCtx
 * table (vctx.c). A vCtx's hot fields are written only by its owner thread;
 * `pending` (the remap request) is the one field other threads write.
 */
#ifndef DS_CORE_RUNTIME_H
#define DS_CORE_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/driver.h"
#include "core/log.h"

#define DS__RT_MAGIC 0x54524453u   /* "SDRT" */
#define DS__VCTX_MAGIC 0x58434453u /* "SDCX" */
#define DS__DEAD_MAGIC 0xDEADD5D5u

/* Sampled timing ring per vCtx (events created once, reused). */
#define DS__SAMPLE_SLOTS 4

typedef struct ds__pctx {
    uint32_t sm_count;
    ds_tier_anchor anchor;
    uint64_t group_mask;
    int32_t complement;
    CUgreenCtx green;
    CUcontext ctx; /* cuCtxFromGreenCtx(green) */
} ds__pctx;

struct ds_runtime {
    uint32_t magic;
    const ds__driver *cu;
    ds_device_kind kind;
    CUdevice dev;
    CUcontext primary;
    /* device limits, for validating launches without a driver round trip */
    uint32_t max_grid[3];
    uint32_t max_block[3];
    uint32_t max_threads_per_block;
    uint32_t max_smem_optin;
    int prio_least, prio_greatest;
    uint32_t teardown_timeout_ms;
    uint32_t sample_period;

    ds_runtime_info info; /* filled at creation, read-only afterwards */
    int dev_open;         /* simulated device created / CUDA device selected */

    CUdevResource groups[DS_MAX_GROUPS];
    uint32_t num_groups;
    ds__pctx pctx[DS_MAX_PCTX];
    uint32_t num_pctx;
    uint32_t full_pctx; /* index of the whole-GPU pCtx */

    pthread_mutex_t lock; /* vCtx table, lazily loaded module */
    struct ds_vctx **vctx;
    uint32_t max_vctx;
    uint32_t live_vctx;
    uint64_t vctx_serial;

    CUmodule module; /* embedded device code (probe, RCK), loaded on first use */
    CUfunction probe_fn;
};

typedef struct ds__sample_slot {
    CUevent start, end;
    int busy;
} ds__sample_slot;

struct ds_vctx {
    /* hot: read by every ds_launch */
    uint32_t magic;
    uint32_t bound; /* pCtx index in use */
    CUstream stream;
    const ds__driver *cu;
    struct ds_runtime *rt;
    _Atomic uint32_t pending; /* requested pCtx (== bound when none) */
    uint32_t sample_countdown;
    int section_open;
    _Atomic uint64_t launches;

    /* counters (single writer: the owner thread; relaxed stores) */
    _Atomic uint64_t sections;
    _Atomic uint64_t remaps;
    _Atomic uint64_t sampled_kernels;
    _Atomic uint64_t kernel_time_ns;
    _Atomic uint32_t streams_created;

    /* cold */
    uint32_t slot;
    ds_vctx_class cls;
    int stream_priority;
    uint32_t slo_us;
    uint32_t weight;
    CUevent handoff;
    CUstream streams[DS_MAX_PCTX];
    ds__sample_slot samples[DS__SAMPLE_SLOTS];
    uint32_t sample_head;
    char name[64];
};

/* pool.c */
ds_status ds__pool_build(struct ds_runtime *rt, const ds_tier_spec *tiers, uint32_t num_tiers);
void ds__pool_destroy(struct ds_runtime *rt);

/* Creates a stream of pCtx `index` (non-blocking, given priority). */
ds_status ds__pool_stream_create(struct ds_runtime *rt, uint32_t index, int priority, CUstream *out);

/* vctx.c: destroys a vCtx whose handle was validated; caller holds no lock. */
ds_status ds__vctx_teardown(struct ds_vctx *v);

/* Validates a runtime handle (NULL, wrong magic, destroyed). */
static inline ds_status ds__rt_check(const struct ds_runtime *rt, const char *fn)
{
    if (DS__UNLIKELY(!rt))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: runtime handle is NULL", fn);
    if (DS__UNLIKELY(rt->magic != DS__RT_MAGIC))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: runtime handle %p is %s", fn, (const void *)rt,
                        rt->magic == DS__DEAD_MAGIC ? "destroyed" : "not a runtime");
    return DS_SUCCESS;
}

static inline ds_status ds__vctx_check(const struct ds_vctx *v, const char *fn)
{
    if (DS__UNLIKELY(!v))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: vCtx handle is NULL", fn);
    if (DS__UNLIKELY(v->magic != DS__VCTX_MAGIC))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: vCtx handle %p is %s", fn, (const void *)v,
                        v->magic == DS__DEAD_MAGIC ? "destroyed (or its runtime was)" : "not a vCtx");
    return DS_SUCCESS;
}

/* Records a failed driver call: DS_ERR_DRIVER with the call's text. */
#define DS__CU(rt_, call)                                                                          \
    do {                                                                                           \
        CUresult ds__r_ = (rt_)->cu->call;                                                         \
        if (DS__UNLIKELY(ds__r_ != CUDA_SUCCESS))                                                  \
            return ds__fail(DS_ERR_DRIVER, "%s:%d %s -> %s", __FILE__, __LINE__, #call,            \
                            ds__cu_error_name((rt_)->cu, ds__r_));                                 \
    } while (0)

/* handles.c: keeps destroyed handles' memory (magic DS__DEAD_MAGIC) in a
 * bounded FIFO so that a stale handle reads "destroyed" instead of freed
 * memory; the oldest entry is freed when the FIFO is full. */
void ds__quarantine(void *p);

/* The simulated device a runtime runs on (sim.c's public functions use it). */
ds_status ds__runtime_sim_device(ds_runtime_t rt, CUdevice *dev);

/* topology.c: CPUs and NUMA node local to the device, through hwloc. */
void ds__topology_query(struct ds_runtime *rt);

#endif /* DS_CORE_RUNTIME_H */
