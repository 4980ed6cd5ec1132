/*
 * vCtx lifecycle: creation (with the policy placing it before its first
 * stream), synchronisation, statistics, teardown.
 */
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/copy.h"
#include "core/fault.h"
#include "core/gate.h"
#include "core/graph.h"
#include "core/handles.h"
#include "core/marks.h"
#include "core/mem.h"
#include "core/registry.h"
#include "core/relaxed.h"
#include "core/remap.h"
#include "core/requests.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "memory/tenant_memory.h"
#include "seam/alloc.h"
#include "seam/driver.h"
#include "seam/log.h"

/* ds_launch reads the fields before `marks` on every launch: one cache line */
_Static_assert(offsetof(struct ds_vctx, grouped) + sizeof(int) <= 64, "the hot fields outgrew a cache line");

/* ------------------------------------------------------------------------ */
/* synchronize, stats                                                        */

ds_status ds_vctx_synchronize(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_synchronize"));
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, "ds_vctx_synchronize");
    if (atomic_load_explicit(&v->pending, memory_order_relaxed) != DS__LD(v->bound))
        ds__binding_apply(v);
    ds__marks_flush(v);
    CUresult r = v->cu->cuStreamSynchronize(v->stream);
    if (r != CUDA_SUCCESS) {
        if (ds__fault_note(v->rt, r, v, "cuStreamSynchronize"))
            return ds__fault_status(v->rt, "ds_vctx_synchronize");
        return ds__fail(DS_ERR_DRIVER, "ds_vctx_synchronize('%s'): %s", v->name, ds__cu_error_name(v->cu, r));
    }
    ds__marks_settle(v);
    return DS_SUCCESS;
}

ds_status ds_vctx_get_stats(ds_vctx_t v, ds_vctx_stats *stats)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_get_stats"));
    DS__TRY(ds__check_abi_grown(stats, DS__OLD_SIZES(DS_VCTX_STATS_SIZE_V1, DS_VCTX_STATS_SIZE_V2, DS_VCTX_STATS_SIZE_V3,
                                                      DS_VCTX_STATS_SIZE_V4), sizeof *stats,
                                "ds_vctx_stats"));
    size_t asked = stats->size, size = asked < sizeof *stats ? asked : sizeof *stats;
    ds_vctx_stats *caller = stats, full = DS_VCTX_STATS_INIT;
    stats = &full;
    stats->launches = atomic_load_explicit(&v->launches, memory_order_relaxed);
    stats->sections = atomic_load_explicit(&v->sections, memory_order_relaxed);
    stats->remaps = atomic_load_explicit(&v->remaps, memory_order_relaxed);
    stats->sampled_kernels = atomic_load_explicit(&v->marks.sampled, memory_order_relaxed);
    stats->kernel_time_ns = atomic_load_explicit(&v->marks.kernel_time_ns, memory_order_relaxed);
    uint32_t bound = DS__LD(v->bound);
    stats->pctx = DS__BIND_PCTX(bound);
    stats->streams = atomic_load_explicit(&v->streams_created, memory_order_relaxed);
    stats->holds = atomic_load_explicit(&v->holds, memory_order_relaxed);
    stats->window_us = atomic_load_explicit(&v->window_us, memory_order_relaxed);
    stats->inflight_us = ds__marks_inflight(&v->marks);
    stats->urgent = (int)DS__BIND_URGENT(bound);
    stats->gate_interval_us = atomic_load_explicit(&v->gate.interval_us, memory_order_relaxed);
    stats->gate_closed = atomic_load_explicit(&v->gate.closed, memory_order_relaxed);
    stats->gates = atomic_load_explicit(&v->gate.placed, memory_order_relaxed);
    stats->gate_closes = atomic_load_explicit(&v->gate.closes, memory_order_relaxed);
    stats->gate_closed_us = atomic_load_explicit(&v->gate.closed_us, memory_order_relaxed);
    stats->gate_holds = atomic_load_explicit(&v->gate.holds, memory_order_relaxed);
    stats->overruns = atomic_load_explicit(&v->watch.overruns, memory_order_relaxed);
    stats->graph_launches = atomic_load_explicit(&v->graph_launches, memory_order_relaxed);
    DS__REQUESTS_READ(stats, &v->req);
    stats->group_units = DS__LD(v->grp.unit);
    stats->group_wait_us = DS__LD(v->grp.wait_ms) * 1e3;
    ds__yield_read(v, &stats->yields, &stats->yield_p50_us, &stats->yield_p99_us, &stats->yield_max_us);
    memcpy(caller, &full, size);
    caller->size = asked;
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
        for (int u = 0; u < 2; u++)
            if (DS__LD(v->streams[i][u])) {
                /* pending work completes first (driver); on a faulted
                 * context the driver may refuse: nothing more to do */
                cu->cuStreamDestroy(DS__LD(v->streams[i][u]));
                DS__ST(v->streams[i][u], NULL);
            }
    for (uint32_t i = 0; i < DS_MAX_PCTX; i++)
        if (v->capture_streams[i]) {
            cu->cuStreamDestroy(v->capture_streams[i]);
            v->capture_streams[i] = NULL;
        }
    if (v->handoff)
        cu->cuEventDestroy(v->handoff);
    ds__gate_reach_fini(v);
    for (int i = 0; i < DS__MARKS; i++) {
        if (v->marks.ring[i].start)
            cu->cuEventDestroy(v->marks.ring[i].start);
        if (v->marks.ring[i].end)
            cu->cuEventDestroy(v->marks.ring[i].end);
    }
}

static ds_status create_events(struct ds_vctx *v)
{
    const ds__driver *cu = v->cu;
    CUresult r = cu->cuEventCreate(&v->handoff, CU_EVENT_DISABLE_TIMING);
    for (int i = 0; r == CUDA_SUCCESS && i < DS__MARKS; i++) {
        r = cu->cuEventCreate(&v->marks.ring[i].start, CU_EVENT_DEFAULT);
        if (r == CUDA_SUCCESS)
            r = cu->cuEventCreate(&v->marks.ring[i].end, CU_EVENT_BLOCKING_SYNC); /* marks.c, wait_event */
    }
    if (r != CUDA_SUCCESS)
        return ds__fail(ds__cu_status(r), "ds_vctx_create('%s'): cuEventCreate -> %s", v->name,
                        ds__cu_error_name(cu, r));
    return DS_SUCCESS;
}

ds_status ds_vctx_create(ds_runtime_t rt, const ds_vctx_attr *attr, ds_vctx_t *out)
{
    DS__TRY(ds__rt_check(rt, "ds_vctx_create"));
    ds_vctx_attr full = DS_VCTX_ATTR_INIT;
    const ds_vctx_attr *a = &full;
    if (attr) { /* an older, smaller form reads as no group */
        DS__TRY(ds__check_abi_grown(attr, DS__OLD_SIZES(DS_VCTX_ATTR_SIZE_V1), sizeof *attr, "ds_vctx_attr"));
        memcpy(&full, attr, attr->size < sizeof full ? attr->size : sizeof full);
    }
    if (!out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_create: out is NULL");
    if (a->cls != DS_CLASS_BEST_EFFORT && a->cls != DS_CLASS_LATENCY_SENSITIVE)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_attr.cls = %d", (int)a->cls);
    if (a->phase != DS_PHASE_NONE && a->phase != DS_PHASE_PREFILL && a->phase != DS_PHASE_DECODE)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_attr.phase = %d", (int)a->phase);
    if (a->initial_pctx < -1 || a->initial_pctx >= (int32_t)rt->num_pctx)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_attr.initial_pctx = %d, pool has %u",
                        a->initial_pctx, rt->num_pctx);

    struct ds_vctx *v = ds__calloc(1, sizeof *v);
    if (!v)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_vctx_create: %zu bytes", sizeof *v);
    v->rt = rt;
    v->cu = rt->cu;
    ds__memreg_init(&v->mem);
    v->cls = a->cls;
    v->phase = a->phase;
    v->slo_us = a->slo_us;
    v->weight = a->weight ? a->weight : 1;
    v->stream_priority = ds__binding_priority(rt, a->priority);
    uint32_t initial = DS__BIND(a->initial_pctx < 0 ? rt->full_pctx : (uint32_t)a->initial_pctx, 0);
    atomic_init(&v->bound, initial);
    atomic_init(&v->pending, initial);
    atomic_flag_clear(&v->marks.harvest_busy);
    v->marks.sample_countdown = rt->sample_period ? rt->sample_period : UINT32_MAX;
    atomic_init(&v->watch.last_active_us, -1e18);
    atomic_init(&v->gate.interval_us, DS_GATES_NONE);

    pthread_mutex_lock(&rt->lock);
    uint32_t slot = UINT32_MAX;
    for (uint32_t i = 0; i < rt->max_vctx; i++)
        if (!atomic_load_explicit(&rt->vctx[i], memory_order_relaxed)) {
            slot = i;
            break;
        }
    if (slot == UINT32_MAX) {
        pthread_mutex_unlock(&rt->lock);
        ds__memreg_fini(&v->mem);
        ds__free(v);
        return ds__fail(DS_ERR_LIMIT, "ds_vctx_create: %u vCtxs alive (ds_runtime_config.max_vctx)",
                        rt->max_vctx);
    }
    /* Reserved; the magic is set (and the scheduler and policies see it) only
     * once the vCtx is complete. */
    atomic_store_explicit(&rt->vctx[slot], v, memory_order_release);
    uint64_t serial = rt->vctx_serial++;
    uint32_t live = ++rt->live_vctx;
    if (rt->gates.writer.slots)
        rt->gates.writer.slots(rt->gates.writer.self, slot + 1);
    pthread_mutex_unlock(&rt->lock);
    v->slot = slot;
    /* RCK boundary sequences: records of the slot's earlier vCtxs are older */
    v->gate.seq = v->gate.base = (uint32_t)(serial << 16);
    if (a->name)
        snprintf(v->name, sizeof v->name, "%s", a->name);
    else
        snprintf(v->name, sizeof v->name, "vctx%llu", (unsigned long long)serial);

    ds_status st;
    /* a group rank before the policy places it: a rank > 0's placement is
     * rank 0's from its first unit on */
    if (a->group)
        DS__TRY_GOTO(ds__vgroup_join(v, a->group, a->group_rank, a->group_ranks, a->group_flags), st, fail);
    v->grouped = v->grp.g != NULL;

    ds__binding_context(v);
    DS__TRY_GOTO(create_events(v), st, fail);
    /* The policy places the new vCtx first, so that its first stream is
     * created where it will run; its actions accept the handle meanwhile. */
    atomic_store_explicit(&v->magic, DS__BORN_MAGIC, memory_order_release);
    ds__policy_vctx_event(rt, v, 1);
    atomic_store_explicit(&v->magic, 0, memory_order_release);
    DS__ST(v->bound, atomic_load_explicit(&v->pending, memory_order_acquire));
    DS__TRY_GOTO(ds__binding_stream(v, DS__LD(v->bound), &v->stream), st, fail);

    if (live + 1 > rt->info.max_connections)
        ds__log(DS_LOG_WARN,
                "vCtx '%s': %u vCtxs (plus the runtime's stream) now share %u hardware connections; a "
                "long-queued or gated vCtx can stall the others. Set CUDA_DEVICE_MAX_CONNECTIONS "
                "(up to 32) in the environment before the process's first CUDA call",
                v->name, live, rt->info.max_connections);
    atomic_store_explicit(&v->magic, DS__VCTX_MAGIC, memory_order_release);
    *out = v;
    return DS_SUCCESS;
fail:
    ds__vgroup_leave(v);
    free_driver_objects(v);
    pthread_mutex_lock(&rt->lock);
    atomic_store(&rt->vctx[slot], NULL);
    rt->live_vctx--;
    pthread_mutex_unlock(&rt->lock);
    ds__memreg_fini(&v->mem);
    /* the scheduler may have loaded the slot's pointer just before it was
     * cleared and still read the magic: keep the memory, as a destroy does */
    atomic_store(&v->magic, DS__DEAD_MAGIC);
    ds__quarantine(v);
    return st;
}

/* Waits for the vCtx's work up to the teardown timeout (wall time), polling
 * its stream and letting device time pass between polls (a simulated clock
 * in virtual time moves only then). */
static ds_status drain(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    if (ds__faulted(rt)) /* its work will never finish: do not wait */
        return ds__fault_status(rt, "ds_vctx_destroy");
    double deadline = ds__wall_ms() + rt->teardown_timeout_ms;
    double pause_us = 20;
    for (;;) {
        CUresult r = v->cu->cuStreamQuery(v->stream);
        if (r == CUDA_SUCCESS)
            return DS_SUCCESS;
        if (r != CUDA_ERROR_NOT_READY && ds__fault_note(rt, r, v, "cuStreamQuery (teardown)"))
            return ds__fault_status(rt, "ds_vctx_destroy");
        if (r != CUDA_ERROR_NOT_READY)
            return ds__fail(DS_ERR_DRIVER, "vCtx '%s' teardown: work failed: %s", v->name,
                            ds__cu_error_name(v->cu, r));
        if (ds__wall_ms() >= deadline)
            return ds__fail(DS_ERR_TIMEOUT,
                            "vCtx '%s' destroyed with work still running after %u ms; the driver "
                            "finishes it and then frees the streams",
                            v->name, rt->teardown_timeout_ms);
        ds__sleep_us(rt, pause_us);
        if (pause_us < 1000)
            pause_us *= 2;
    }
}

ds_status ds__vctx_teardown(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    if (DS__LD(v->section_open)) {
        ds__log(DS_LOG_WARN, "vCtx '%s' destroyed with a section open; closing it", v->name);
        ds_vctx_release_stream(v);
    }
    ds__policy_vctx_event(rt, v, 0);
    /* it launches no more: its group's other ranks learn it now */
    ds__vgroup_leave(v);
    /* teardown opens its gate: the queued work finishes (or is reported) */
    ds__gate_interval_set(&v->gate, DS_GATES_NONE);
    ds__gate_force_open(v, NULL);
    ds_status st = drain(v);
    /* From here on nobody harvests v: the scheduler sees the dead magic, and
     * a harvest already running finishes before we take the flag. */
    atomic_store(&v->magic, DS__DEAD_MAGIC);
    while (atomic_flag_test_and_set_explicit(&v->marks.harvest_busy, memory_order_acquire))
        sched_yield();
    /* its work is finished (or the context is dead): its copies, its memory */
    ds__copy_vctx_teardown(v);
    ds__graph_destroy_all(v);
    ds__mem_release_all(v);
    ds__memreg_fini(&v->mem);
    free_driver_objects(v);
    pthread_mutex_lock(&rt->lock);
    atomic_store(&rt->vctx[v->slot], NULL);
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
