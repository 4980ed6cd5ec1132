/*
 * Virtual contexts: creation, the ds_launch hot path, sections, remaps with an
 * event hand-off, synchronisation, sampled kernel timing and teardown.
 *
 * Hot path (DESIGN invariant 3): ds_launch reads only the vCtx (owned by the
 * calling thread) and its runtime's read-only limits; it takes no lock,
 * allocates nothing and makes no system call besides the driver's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/runtime.h"

static inline void bump(_Atomic uint64_t *c, uint64_t by)
{
    /* single writer: a plain load + store, no locked instruction */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

static int stream_priority(const struct ds_runtime *rt, int priority)
{
    /* CUDA: numerically lower is more urgent; least is the default (0). */
    long p = (long)rt->prio_least - (long)priority;
    if (p < rt->prio_greatest)
        p = rt->prio_greatest;
    if (p > rt->prio_least)
        p = rt->prio_least;
    return (int)p;
}

/* ------------------------------------------------------------------------ */
/* remap                                                                     */

/* Owner thread, at a kernel boundary: moves the vCtx to the requested pCtx.
 * The new stream waits on an event recorded on the old one, so everything
 * already submitted runs before anything submitted next (invariant 2). On a
 * driver failure the vCtx stays where it was (the request is dropped and
 * logged): the caller's work is never lost to a failed remap. */
static ds_status apply_remap(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    uint32_t to = atomic_load_explicit(&v->pending, memory_order_acquire);
    if (to == v->bound || v->section_open)
        return DS_SUCCESS;
    ds_status st = DS_SUCCESS;
    if (!v->streams[to]) {
        DS__TRY_GOTO(ds__pool_stream_create(rt, to, v->stream_priority, &v->streams[to]), st, drop);
        atomic_fetch_add_explicit(&v->streams_created, 1, memory_order_relaxed);
    }
    CUresult r = v->cu->cuEventRecord(v->handoff, v->stream);
    if (r == CUDA_SUCCESS)
        r = v->cu->cuStreamWaitEvent(v->streams[to], v->handoff, 0);
    if (r != CUDA_SUCCESS) {
        st = ds__fail(DS_ERR_DRIVER, "vCtx '%s': remap %u -> %u hand-off: %s", v->name, v->bound, to,
                      ds__cu_error_name(v->cu, r));
        goto drop;
    }
    v->stream = v->streams[to];
    v->bound = to;
    bump(&v->remaps, 1);
    return DS_SUCCESS;
drop:
    /* Keep `pending` unless another request arrived meanwhile. */
    atomic_compare_exchange_strong(&v->pending, &to, v->bound);
    ds__log(DS_LOG_WARN, "vCtx '%s' stays on pCtx %u: %s", v->name, v->bound, ds_last_error_message());
    return st;
}

ds_status ds_vctx_remap(ds_vctx_t v, uint32_t pctx_index)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_remap"));
    if (pctx_index >= v->rt->num_pctx)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_remap('%s'): pCtx %u, pool has %u", v->name,
                        pctx_index, v->rt->num_pctx);
    atomic_store_explicit(&v->pending, pctx_index, memory_order_release);
    return DS_SUCCESS;
}

ds_status ds_vctx_get_pctx(ds_vctx_t v, uint32_t *pctx_index)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_get_pctx"));
    if (!pctx_index)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_get_pctx: pctx_index is NULL");
    *pctx_index = v->bound;
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* sampled timing                                                            */

static void harvest(struct ds_vctx *v, ds__sample_slot *s)
{
    float ms = 0.f;
    if (v->cu->cuEventElapsedTime(&ms, s->start, s->end) == CUDA_SUCCESS && ms >= 0.f) {
        bump(&v->kernel_time_ns, (uint64_t)((double)ms * 1e6));
        bump(&v->sampled_kernels, 1);
    }
    s->busy = 0;
}

static void harvest_done(struct ds_vctx *v)
{
    for (int i = 0; i < DS__SAMPLE_SLOTS; i++) {
        ds__sample_slot *s = &v->samples[i];
        if (s->busy && v->cu->cuEventQuery(s->end) == CUDA_SUCCESS)
            harvest(v, s);
    }
}

/* Every sample_period-th launch: events around the kernel. If the slot's last
 * sample has not finished yet, this launch goes untimed. */
static CUresult launch_sampled(struct ds_vctx *v, CUfunction f, ds_dim3 g, ds_dim3 b, uint32_t smem,
                               void **params)
{
    v->sample_countdown = v->rt->sample_period ? v->rt->sample_period : UINT32_MAX;
    if (!v->rt->sample_period)
        return v->cu->cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, smem, v->stream, params, NULL);
    ds__sample_slot *s = &v->samples[v->sample_head];
    if (s->busy) {
        if (v->cu->cuEventQuery(s->end) != CUDA_SUCCESS)
            return v->cu->cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, smem, v->stream, params, NULL);
        harvest(v, s);
    }
    v->sample_head = (v->sample_head + 1) % DS__SAMPLE_SLOTS;
    int timed = v->cu->cuEventRecord(s->start, v->stream) == CUDA_SUCCESS;
    CUresult r = v->cu->cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, smem, v->stream, params, NULL);
    if (r == CUDA_SUCCESS && timed && v->cu->cuEventRecord(s->end, v->stream) == CUDA_SUCCESS)
        s->busy = 1;
    return r;
}

/* ------------------------------------------------------------------------ */
/* launch                                                                    */

static ds_status bad_launch(const struct ds_vctx *v, ds_dim3 g, ds_dim3 b, uint32_t smem)
{
    const struct ds_runtime *rt = v->rt;
    return ds__fail(DS_ERR_INVALID_LAUNCH,
                    "ds_launch('%s'): grid (%u,%u,%u) block (%u,%u,%u) smem %u; device limits grid "
                    "(%u,%u,%u) block (%u,%u,%u) threads %u smem %u, every dimension >= 1",
                    v->name, g.x, g.y, g.z, b.x, b.y, b.z, smem, rt->max_grid[0], rt->max_grid[1],
                    rt->max_grid[2], rt->max_block[0], rt->max_block[1], rt->max_block[2],
                    rt->max_threads_per_block, rt->max_smem_optin);
}

static ds_status launch_slow_checks(struct ds_vctx *v, CUfunction f, const ds_launch_hints *hints)
{
    if (!f)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_launch('%s'): function is NULL", v->name);
    if (hints)
        DS__TRY(ds__check_abi(hints, sizeof *hints, "ds_launch_hints"));
    return DS_SUCCESS;
}

ds_status ds_launch(ds_vctx_t v, CUfunction f, ds_dim3 grid, ds_dim3 block, uint32_t smem,
                    void **params, const ds_launch_hints *hints)
{
    if (DS__UNLIKELY(!v || v->magic != DS__VCTX_MAGIC))
        return ds__vctx_check(v, "ds_launch");
    const struct ds_runtime *rt = v->rt;
    if (DS__UNLIKELY(!f || (hints && (hints->magic != DS_ABI_MAGIC || hints->size != sizeof *hints))))
        DS__TRY(launch_slow_checks(v, f, hints));
    if (DS__UNLIKELY(grid.x - 1u >= rt->max_grid[0] || grid.y - 1u >= rt->max_grid[1] ||
                     grid.z - 1u >= rt->max_grid[2] || block.x - 1u >= rt->max_block[0] ||
                     block.y - 1u >= rt->max_block[1] || block.z - 1u >= rt->max_block[2] ||
                     (uint64_t)block.x * block.y * block.z > rt->max_threads_per_block ||
                     smem > rt->max_smem_optin))
        return bad_launch(v, grid, block, smem);
    if (DS__UNLIKELY(atomic_load_explicit(&v->pending, memory_order_relaxed) != v->bound))
        apply_remap(v); /* on failure the launch proceeds on the old pCtx */

    CUcontext cur;
    if (DS__UNLIKELY(v->cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != rt->primary))
        v->cu->cuCtxSetCurrent(rt->primary);

    CUresult r;
    if (DS__LIKELY(--v->sample_countdown != 0))
        r = v->cu->cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, v->stream,
                                  params, NULL);
    else
        r = launch_sampled(v, f, grid, block, smem, params);
    if (DS__UNLIKELY(r != CUDA_SUCCESS))
        return ds__fail(r == CUDA_ERROR_INVALID_VALUE ? DS_ERR_INVALID_LAUNCH : DS_ERR_DRIVER,
                        "ds_launch('%s'): cuLaunchKernel -> %s", v->name, ds__cu_error_name(v->cu, r));
    bump(&v->launches, 1);
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* sections                                                                  */

ds_status ds_vctx_acquire_stream(ds_vctx_t v, CUstream *stream)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_acquire_stream"));
    if (!stream)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_acquire_stream('%s'): stream is NULL", v->name);
    if (v->section_open)
        return ds__fail(DS_ERR_BUSY, "ds_vctx_acquire_stream('%s'): a section is already open", v->name);
    if (atomic_load_explicit(&v->pending, memory_order_relaxed) != v->bound)
        apply_remap(v);
    CUcontext cur;
    if (v->cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != v->rt->primary)
        v->cu->cuCtxSetCurrent(v->rt->primary);
    v->section_open = 1;
    *stream = v->stream;
    return DS_SUCCESS;
}

ds_status ds_vctx_release_stream(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_release_stream"));
    if (!v->section_open)
        return ds__fail(DS_ERR_BUSY, "ds_vctx_release_stream('%s'): no section is open", v->name);
    v->section_open = 0;
    bump(&v->sections, 1);
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* synchronize, stats                                                        */

ds_status ds_vctx_synchronize(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_synchronize"));
    if (atomic_load_explicit(&v->pending, memory_order_relaxed) != v->bound)
        apply_remap(v);
    CUresult r = v->cu->cuStreamSynchronize(v->stream);
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_DRIVER, "ds_vctx_synchronize('%s'): %s", v->name, ds__cu_error_name(v->cu, r));
    harvest_done(v);
    return DS_SUCCESS;
}

ds_status ds_vctx_get_stats(ds_vctx_t v, ds_vctx_stats *stats)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_get_stats"));
    DS__TRY(ds__check_abi(stats, sizeof *stats, "ds_vctx_stats"));
    size_t size = stats->size;
    *stats = (ds_vctx_stats)DS_VCTX_STATS_INIT;
    stats->size = size;
    stats->launches = atomic_load_explicit(&v->launches, memory_order_relaxed);
    stats->sections = atomic_load_explicit(&v->sections, memory_order_relaxed);
    stats->remaps = atomic_load_explicit(&v->remaps, memory_order_relaxed);
    stats->sampled_kernels = atomic_load_explicit(&v->sampled_kernels, memory_order_relaxed);
    stats->kernel_time_ns = atomic_load_explicit(&v->kernel_time_ns, memory_order_relaxed);
    stats->pctx = v->bound;
    stats->streams = atomic_load_explicit(&v->streams_created, memory_order_relaxed);
    return DS_SUCCESS;
}

ds_status ds_vctx_get_name(ds_vctx_t v, const char **name)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_get_name"));
    if (!name)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_get_name: name is NULL");
    *name = v->name;
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* create / destroy                                                          */

static void free_driver_objects(struct ds_vctx *v)
{
    const ds__driver *cu = v->cu;
    for (uint32_t i = 0; i < DS_MAX_PCTX; i++)
        if (v->streams[i]) {
            cu->cuStreamDestroy(v->streams[i]); /* pending work completes first (driver) */
            v->streams[i] = NULL;
        }
    if (v->handoff)
        cu->cuEventDestroy(v->handoff);
    for (int i = 0; i < DS__SAMPLE_SLOTS; i++) {
        if (v->samples[i].start)
            cu->cuEventDestroy(v->samples[i].start);
        if (v->samples[i].end)
            cu->cuEventDestroy(v->samples[i].end);
    }
}

ds_status ds_vctx_create(ds_runtime_t rt, const ds_vctx_attr *attr, ds_vctx_t *out)
{
    DS__TRY(ds__rt_check(rt, "ds_vctx_create"));
    ds_vctx_attr defaults = DS_VCTX_ATTR_INIT;
    const ds_vctx_attr *a = attr ? attr : &defaults;
    if (attr)
        DS__TRY(ds__check_abi(attr, sizeof *attr, "ds_vctx_attr"));
    if (!out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_create: out is NULL");
    if (a->cls != DS_CLASS_BEST_EFFORT && a->cls != DS_CLASS_LATENCY_SENSITIVE)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_attr.cls = %d", (int)a->cls);
    if (a->initial_pctx < -1 || a->initial_pctx >= (int32_t)rt->num_pctx)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_attr.initial_pctx = %d, pool has %u",
                        a->initial_pctx, rt->num_pctx);

    struct ds_vctx *v = calloc(1, sizeof *v);
    if (!v)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_vctx_create: %zu bytes", sizeof *v);
    v->rt = rt;
    v->cu = rt->cu;
    v->cls = a->cls;
    v->slo_us = a->slo_us;
    v->weight = a->weight ? a->weight : 1;
    v->stream_priority = stream_priority(rt, a->priority);
    v->bound = a->initial_pctx < 0 ? rt->full_pctx : (uint32_t)a->initial_pctx;
    atomic_init(&v->pending, v->bound);
    v->sample_countdown = rt->sample_period ? rt->sample_period : UINT32_MAX;

    ds_status st;
    pthread_mutex_lock(&rt->lock);
    uint32_t slot = UINT32_MAX;
    for (uint32_t i = 0; i < rt->max_vctx; i++)
        if (!rt->vctx[i]) {
            slot = i;
            break;
        }
    if (slot == UINT32_MAX) {
        pthread_mutex_unlock(&rt->lock);
        free(v);
        return ds__fail(DS_ERR_LIMIT, "ds_vctx_create: %u vCtxs alive (ds_runtime_config.max_vctx)",
                        rt->max_vctx);
    }
    rt->vctx[slot] = v; /* reserved; magic is set only once the vCtx is complete */
    uint64_t serial = rt->vctx_serial++;
    uint32_t live = ++rt->live_vctx;
    pthread_mutex_unlock(&rt->lock);
    v->slot = slot;
    if (a->name)
        snprintf(v->name, sizeof v->name, "%s", a->name);
    else
        snprintf(v->name, sizeof v->name, "vctx%llu", (unsigned long long)serial);

    CUcontext cur;
    if (rt->cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != rt->primary)
        rt->cu->cuCtxSetCurrent(rt->primary);
    const unsigned ev_flags = CU_EVENT_DISABLE_TIMING;
    CUresult r = rt->cu->cuEventCreate(&v->handoff, ev_flags);
    for (int i = 0; r == CUDA_SUCCESS && i < DS__SAMPLE_SLOTS; i++) {
        r = rt->cu->cuEventCreate(&v->samples[i].start, CU_EVENT_DEFAULT);
        if (r == CUDA_SUCCESS)
            r = rt->cu->cuEventCreate(&v->samples[i].end, CU_EVENT_DEFAULT);
    }
    if (r != CUDA_SUCCESS) {
        st = ds__fail(DS_ERR_DRIVER, "ds_vctx_create('%s'): cuEventCreate -> %s", v->name,
                      ds__cu_error_name(rt->cu, r));
        goto fail;
    }
    DS__TRY_GOTO(ds__pool_stream_create(rt, v->bound, v->stream_priority, &v->streams[v->bound]), st, fail);
    atomic_init(&v->streams_created, 1);
    v->stream = v->streams[v->bound];

    if (live + 1 > rt->info.max_connections)
        ds__log(DS_LOG_WARN,
                "vCtx '%s': %u vCtxs (plus the runtime's stream) now share %u hardware connections; a "
                "long-queued or gated vCtx can stall the others. Set CUDA_DEVICE_MAX_CONNECTIONS "
                "(up to 32) in the environment before the process's first CUDA call",
                v->name, live, rt->info.max_connections);
    v->magic = DS__VCTX_MAGIC;
    *out = v;
    return DS_SUCCESS;
fail:
    free_driver_objects(v);
    pthread_mutex_lock(&rt->lock);
    rt->vctx[slot] = NULL;
    rt->live_vctx--;
    pthread_mutex_unlock(&rt->lock);
    free(v);
    return st;
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Waits for the vCtx's work up to the teardown timeout. The simulated device
 * in virtual time only advances inside a synchronize, so it gets one. */
static ds_status drain(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    if (rt->kind == DS_DEVICE_SIM) {
        CUresult r = v->cu->cuStreamSynchronize(v->stream);
        return r == CUDA_SUCCESS ? DS_SUCCESS
                                 : ds__fail(DS_ERR_DRIVER, "vCtx '%s' teardown: %s", v->name,
                                            ds__cu_error_name(v->cu, r));
    }
    double deadline = mono_ms() + rt->teardown_timeout_ms;
    long sleep_ns = 20000;
    for (;;) {
        CUresult r = v->cu->cuStreamQuery(v->stream);
        if (r == CUDA_SUCCESS)
            return DS_SUCCESS;
        if (r != CUDA_ERROR_NOT_READY)
            return ds__fail(DS_ERR_DRIVER, "vCtx '%s' teardown: work failed: %s", v->name,
                            ds__cu_error_name(v->cu, r));
        if (mono_ms() >= deadline)
            return ds__fail(DS_ERR_TIMEOUT,
                            "vCtx '%s' destroyed with work still running after %u ms; the driver "
                            "finishes it and then frees the streams",
                            v->name, rt->teardown_timeout_ms);
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000)
            sleep_ns *= 2;
    }
}

ds_status ds__vctx_teardown(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    if (v->section_open) {
        ds__log(DS_LOG_WARN, "vCtx '%s' destroyed with a section open; closing it", v->name);
        v->section_open = 0;
    }
    ds_status st = drain(v);
    if (st == DS_SUCCESS)
        harvest_done(v);
    v->magic = DS__DEAD_MAGIC;
    free_driver_objects(v);
    pthread_mutex_lock(&rt->lock);
    rt->vctx[v->slot] = NULL;
    rt->live_vctx--;
    pthread_mutex_unlock(&rt->lock);
    ds__quarantine(v);
    return st;
}

ds_status ds_vctx_destroy(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_destroy"));
    return ds__vctx_teardown(v);
}
