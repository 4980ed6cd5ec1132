/*
 * Virtual contexts: creation, the ds_launch hot path, sections, bindings
 * (remaps with an event hand-off), windows, marks, synchronisation, teardown.
 *
 * Hot path (DESIGN invariant 3): ds_launch reads the vCtx (owned by the
 * calling thread), the active policy pointer and the profile table; it takes
 * no lock, allocates nothing and makes no system call besides the driver's.
 * It blocks only when the policy holds it or its window is full; both are
 * the policy's intent.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/profile.h"
#include "core/runtime.h"
#include "migrate/handoff.h"

/* Launches with no profile are timed at most once every this many launches. */
#define DS__EXPLORE_EVERY 8
/* An untimed mark at least every this many launches (bounds untracked work). */
#define DS__MARK_EVERY 64
/* Predicted work between marks when the vCtx has no window. */
#define DS__MARK_QUANTUM_US 2000.0

static inline void bump(_Atomic uint64_t *c, uint64_t by)
{
    /* single writer: a plain load + store, no locked instruction */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

static inline void add_us(_Atomic double *c, double by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

/* Longest recent unit of work (kernel or section), predicted: a decaying max,
 * so one long kernel is remembered for about a hundred launches. */
static inline void note_unit(struct ds_vctx *v, double pred)
{
    double u = atomic_load_explicit(&v->unit_us, memory_order_relaxed) * 0.98;
    atomic_store_explicit(&v->unit_us, pred > u ? pred : u, memory_order_relaxed);
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

static inline void ensure_context(struct ds_vctx *v)
{
    CUcontext cur;
    if (DS__UNLIKELY(v->cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != v->rt->primary))
        v->cu->cuCtxSetCurrent(v->rt->primary);
}

/* ------------------------------------------------------------------------ */
/* bindings                                                                  */

static ds_status stream_for(struct ds_vctx *v, uint32_t binding, CUstream *out)
{
    uint32_t p = DS__BIND_PCTX(binding), u = DS__BIND_URGENT(binding);
    CUstream s = DS__LD(v->streams[p][u]);
    if (!s) {
        int prio = u ? v->rt->prio_greatest : v->stream_priority;
        DS__TRY(ds__pool_stream_create(v->rt, p, prio, &s));
        DS__ST(v->streams[p][u], s);
        atomic_fetch_add_explicit(&v->streams_created, 1, memory_order_relaxed);
    }
    *out = s;
    return DS_SUCCESS;
}

/* Owner thread, at a kernel boundary: moves the vCtx to the requested binding.
 * The new stream waits on an event recorded on the old one, so everything
 * already submitted runs before anything submitted next (invariant 2). On a
 * driver failure the vCtx stays where it was (the request is dropped and
 * logged): the caller's work is never lost to a failed remap. */
static ds_status apply_binding(struct ds_vctx *v)
{
    uint32_t to = atomic_load_explicit(&v->pending, memory_order_acquire);
    uint32_t bound = DS__LD(v->bound);
    if (to == bound || DS__LD(v->section_open))
        return DS_SUCCESS;
    CUstream next;
    ds_status st = stream_for(v, to, &next);
    if (st == DS_SUCCESS) {
        CUresult r = ds__migrate_handoff(v->cu, v->handoff, v->stream, next);
        if (r == CUDA_SUCCESS) {
            v->stream = next;
            DS__ST(v->bound, to);
            bump(&v->remaps, 1);
            return DS_SUCCESS;
        }
        st = ds__fail(DS_ERR_DRIVER, "vCtx '%s': remap %u -> %u hand-off: %s", v->name,
                      DS__BIND_PCTX(bound), DS__BIND_PCTX(to), ds__cu_error_name(v->cu, r));
    }
    /* Keep `pending` unless another request arrived meanwhile. */
    atomic_compare_exchange_strong(&v->pending, &to, bound);
    ds__log(DS_LOG_WARN, "vCtx '%s' stays on pCtx %u: %s", v->name, DS__BIND_PCTX(bound),
            ds_last_error_message());
    return st;
}

/* Sets the pCtx or the urgency half of the requested binding. */
static void request(struct ds_vctx *v, int64_t pctx, int urgent)
{
    uint32_t cur = atomic_load_explicit(&v->pending, memory_order_relaxed), next;
    do {
        next = DS__BIND(pctx >= 0 ? (uint32_t)pctx : DS__BIND_PCTX(cur),
                        urgent >= 0 ? urgent : (int)DS__BIND_URGENT(cur));
    } while (!atomic_compare_exchange_weak_explicit(&v->pending, &cur, next, memory_order_release,
                                                    memory_order_relaxed));
}

ds_status ds_vctx_remap(ds_vctx_t v, uint32_t pctx_index)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_remap"));
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, "ds_vctx_remap");
    if (pctx_index >= v->rt->num_pctx)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_remap('%s'): pCtx %u, pool has %u", v->name,
                        pctx_index, v->rt->num_pctx);
    request(v, pctx_index, -1);
    return DS_SUCCESS;
}

ds_status ds_vctx_set_urgent(ds_vctx_t v, int urgent)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_set_urgent"));
    request(v, -1, urgent != 0);
    return DS_SUCCESS;
}

ds_status ds_vctx_set_window(ds_vctx_t v, uint32_t window_us)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_set_window"));
    atomic_store_explicit(&v->window_us, window_us, memory_order_relaxed);
    return DS_SUCCESS;
}

ds_status ds_vctx_get_pctx(ds_vctx_t v, uint32_t *pctx_index)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_get_pctx"));
    if (!pctx_index)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_get_pctx: pctx_index is NULL");
    *pctx_index = DS__BIND_PCTX(DS__LD(v->bound));
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* marks                                                                     */

static inline ds__mark *free_slot(struct ds_vctx *v)
{
    ds__mark *m = &v->marks[v->mark_head];
    return atomic_load_explicit(&m->state, memory_order_acquire) == 0 ? m : NULL;
}

/* Records m's end event after everything submitted so far and publishes it.
 * `m->start` was recorded before the kernel when timed. */
static void publish(struct ds_vctx *v, ds__mark *m, int timed, double pred, CUfunction f, ds_dim3 g,
                    ds_dim3 b)
{
    if (v->cu->cuEventRecord(m->end, v->stream) != CUDA_SUCCESS)
        return; /* untracked: the next mark covers this work */
    m->timed = timed;
    m->pred_us = pred;
    m->cum_pred_us = atomic_load_explicit(&v->submitted_us, memory_order_relaxed);
    m->f = f;
    m->grid = g;
    m->block = b;
    m->pctx = DS__BIND_PCTX(DS__LD(v->bound));
    atomic_store_explicit(&v->last_mark, m->end, memory_order_relaxed);
    atomic_fetch_add_explicit(&v->marks_pending, 1, memory_order_relaxed);
    atomic_store_explicit(&m->state, 1, memory_order_release);
    v->mark_head = (v->mark_head + 1) % DS__MARKS;
    v->since_mark_us = 0;
    v->unmarked = 0;
}

/* An untimed mark after the latest work, if any work is unmarked. */
static void flush_mark(struct ds_vctx *v)
{
    if (!v->unmarked)
        return;
    ds__mark *m = free_slot(v);
    if (m)
        publish(v, m, 0, 0, NULL, (ds_dim3){0, 0, 0}, (ds_dim3){0, 0, 0});
}

static inline double inflight(const struct ds_vctx *v)
{
    return atomic_load_explicit(&v->submitted_us, memory_order_relaxed) -
           atomic_load_explicit(&v->completed_us, memory_order_relaxed);
}

/* Blocks until `m` (a pending mark of v) finished, then harvests v. */
static void wait_mark(struct ds_vctx *v, CUevent ev)
{
    CUresult r = v->cu->cuEventSynchronize(ev);
    if (DS__UNLIKELY(r != CUDA_SUCCESS))
        ds__fault_note(v->rt, r, v, "cuEventSynchronize (window or hold)");
    ds__harvest(v);
}

/* Window: keeps the vCtx's predicted work in flight under window_us by
 * waiting for the oldest marks that need to finish. */
static void window_wait(struct ds_vctx *v, double pred)
{
    uint32_t w = atomic_load_explicit(&v->window_us, memory_order_relaxed);
    if (!w)
        return;
    for (int guard = 0; guard < 4 * DS__MARKS; guard++) {
        double in = inflight(v);
        if (in <= 0.5 || in + pred <= w)
            return;
        flush_mark(v);
        /* the first pending mark whose completion brings us under the window */
        double submitted = atomic_load_explicit(&v->submitted_us, memory_order_relaxed);
        CUevent target = NULL;
        for (uint32_t k = 0; k < DS__MARKS; k++) {
            ds__mark *m = &v->marks[(v->mark_head + k) % DS__MARKS];
            if (atomic_load_explicit(&m->state, memory_order_acquire) != 1)
                continue;
            target = m->end;
            if (submitted - m->cum_pred_us + pred <= w)
                break;
        }
        if (!target)
            return;
        wait_mark(v, target);
    }
}

/* ------------------------------------------------------------------------ */
/* policy decisions                                                          */

static void hold_wait(struct ds_vctx *v, const ds_decision *d)
{
    struct ds_vctx *w = d->wait_for;
    if (w && w->magic == DS__VCTX_MAGIC) {
        if (w == v)
            flush_mark(v);
        CUevent ev = atomic_load_explicit(&w->last_mark, memory_order_relaxed);
        if (ev && atomic_load_explicit(&w->marks_pending, memory_order_relaxed)) {
            wait_mark(w, ev);
            return;
        }
    }
    ds__sleep_us(v->rt, d->hold_us ? d->hold_us : 20);
}

/* Asks the active policy where ev goes; carries out REMAP and HOLD. */
static ds_status decide(struct ds_vctx *v, ds__policy *pol, ds_launch_event *ev)
{
    struct ds_runtime *rt = v->rt;
    double held_since = -1;
    for (;;) {
        ds_decision d = pol->ops.on_launch(pol->state, (const ds_policy_view *)rt, ev);
        if (DS__LIKELY(d.kind == DS_DISPATCH_HERE))
            return DS_SUCCESS;
        if (d.kind == DS_DISPATCH_REMAP) {
            if (d.pctx < rt->num_pctx)
                atomic_store_explicit(&v->pending, DS__BIND(d.pctx, d.urgent), memory_order_release);
            return DS_SUCCESS;
        }
        if (held_since < 0) {
            held_since = ds__wall_ms();
            bump(&v->holds, 1); /* one held launch, however long it waits */
        } else if (ds__wall_ms() - held_since > rt->teardown_timeout_ms)
            return ds__fail(DS_ERR_TIMEOUT, "vCtx '%s' held by policy '%s' for over %u ms", v->name,
                            pol->name, rt->teardown_timeout_ms);
        hold_wait(v, &d);
        if (DS__UNLIKELY(ds__faulted(rt)))
            return ds__fault_status(rt, "ds_launch (held)");
        ds__policy *now = atomic_load_explicit(&rt->active, memory_order_acquire);
        if (!now)
            return DS_SUCCESS;
        pol = now;
    }
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

static inline uint32_t predict(const struct ds_vctx *v, CUfunction f, ds_dim3 g, ds_dim3 b, double *us)
{
    const struct ds_runtime *rt = v->rt;
    return ds__profile_get(rt->profiles, f, g, b, rt->pctx[DS__BIND_PCTX(DS__LD(v->bound))].sm_count, us, NULL);
}

static ds_status launch(struct ds_vctx *v, CUfunction f, ds_dim3 grid, ds_dim3 block, uint32_t smem,
                        void **params, const ds_launch_hints *hints)
{
    struct ds_runtime *rt = v->rt;
    double pred = 0;
    uint32_t known = predict(v, f, grid, block, &pred);
    if (!known && hints)
        pred = hints->expected_us;
    ds__policy *pol = atomic_load_explicit(&rt->active, memory_order_acquire);
    if (DS__LIKELY(pol != NULL)) {
        ds_launch_event ev = {v, f, grid, block, smem, hints ? hints->phase : DS_PHASE_NONE, pred, 0};
        DS__TRY(decide(v, pol, &ev));
    }
    /* A closed gate holds the thread before a remap could add a hand-off wait
     * behind it: one blocked stream per gated vCtx at most. */
    if (DS__UNLIKELY(atomic_load_explicit(&v->gate_closed, memory_order_relaxed)))
        DS__TRY(ds__gate_hold(v, "ds_launch"));
    if (DS__UNLIKELY(atomic_load_explicit(&v->pending, memory_order_relaxed) != DS__LD(v->bound))) {
        apply_binding(v); /* on failure the launch proceeds where the vCtx is */
        known = predict(v, f, grid, block, &pred);
        if (!known)
            pred = hints ? hints->expected_us : 0;
    }
    if (atomic_load_explicit(&v->window_us, memory_order_relaxed)) {
        window_wait(v, pred);
        if (DS__UNLIKELY(ds__faulted(rt)))
            return ds__fault_status(rt, "ds_launch");
    }
    ensure_context(v);

    /* Timed: every sample_period-th launch, and kernels without a profile
     * (at most one in DS__EXPLORE_EVERY launches). */
    int timed = 0;
    if (DS__UNLIKELY(--v->sample_countdown == 0)) {
        v->sample_countdown = rt->sample_period ? rt->sample_period : UINT32_MAX;
        timed = rt->sample_period != 0;
    }
    if (DS__UNLIKELY(known < 4 && rt->sample_period && v->explore_countdown == 0)) {
        timed = 1;
        v->explore_countdown = DS__EXPLORE_EVERY;
    } else if (v->explore_countdown) {
        v->explore_countdown--;
    }
    /* The gate goes before the timed start: a closed gate is never kernel time. */
    uint32_t gi = atomic_load_explicit(&v->gate_interval_us, memory_order_relaxed);
    if (DS__UNLIKELY(gi != DS_GATES_NONE) && ds__gate_due(v, gi))
        ds__gate_place(v, f, grid, block);
    ds__mark *slot = timed ? free_slot(v) : NULL;
    if (slot && v->cu->cuEventRecord(slot->start, v->stream) != CUDA_SUCCESS)
        slot = NULL;

    CUresult r = v->cu->cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem,
                                       v->stream, params, NULL);
    if (DS__UNLIKELY(r != CUDA_SUCCESS)) {
        if (ds__fault_note(rt, r, v, "cuLaunchKernel"))
            return ds__fault_status(rt, "ds_launch");
        return ds__fail(r == CUDA_ERROR_INVALID_VALUE ? DS_ERR_INVALID_LAUNCH : DS_ERR_DRIVER,
                        "ds_launch('%s'): cuLaunchKernel -> %s", v->name, ds__cu_error_name(v->cu, r));
    }
    bump(&v->launches, 1);
    add_us(&v->submitted_us, pred);
    note_unit(v, pred);
    if (DS__UNLIKELY(gi != DS_GATES_NONE))
        ds__gate_count_unit(v, pred);
    v->since_mark_us += pred;
    v->unmarked++;
    uint32_t w = atomic_load_explicit(&v->window_us, memory_order_relaxed);
    double quantum = w ? w / 4.0 : DS__MARK_QUANTUM_US;
    if (DS__UNLIKELY(timed && atomic_load_explicit(&v->mem.count, memory_order_relaxed)))
        ds__mem_sample(v, f, params); /* working set: sampled launches only */
    if (slot)
        publish(v, slot, 1, pred, f, grid, block);
    else if (DS__UNLIKELY(DS__LD(v->track_all) || v->since_mark_us >= quantum || v->unmarked >= DS__MARK_EVERY))
        flush_mark(v);
    return DS_SUCCESS;
}

ds_status ds_launch(ds_vctx_t v, CUfunction f, ds_dim3 grid, ds_dim3 block, uint32_t smem,
                    void **params, const ds_launch_hints *hints)
{
    if (DS__UNLIKELY(!v || v->magic != DS__VCTX_MAGIC))
        return ds__vctx_check(v, "ds_launch");
    const struct ds_runtime *rt = v->rt;
    /* a faulted context: one relaxed load, a plain mov */
    if (DS__UNLIKELY(ds__faulted(rt)))
        return ds__fault_status(v->rt, "ds_launch");
    if (DS__UNLIKELY(!f || (hints && (hints->magic != DS_ABI_MAGIC || hints->size != sizeof *hints))))
        DS__TRY(launch_slow_checks(v, f, hints));
    if (DS__UNLIKELY(grid.x - 1u >= rt->max_grid[0] || grid.y - 1u >= rt->max_grid[1] ||
                     grid.z - 1u >= rt->max_grid[2] || block.x - 1u >= rt->max_block[0] ||
                     block.y - 1u >= rt->max_block[1] || block.z - 1u >= rt->max_block[2] ||
                     (uint64_t)block.x * block.y * block.z > rt->max_threads_per_block ||
                     smem > rt->max_smem_optin))
        return bad_launch(v, grid, block, smem);
    if (!DS__LD(v->track_all))
        return launch(v, f, grid, block, smem, params, hints);
    /* temporal's revocation protocol: visible "launching" around the decision
     * and the mark (sequentially consistent, see policy/baselines.c). */
    atomic_store(&v->launching, 1);
    ds_status st = launch(v, f, grid, block, smem, params, hints);
    atomic_store(&v->launching, 0);
    return st;
}

/* ------------------------------------------------------------------------ */
/* sections                                                                  */

static const ds_dim3 k_section_dim = {0, 0, 0};

ds_status ds_vctx_acquire_stream(ds_vctx_t v, CUstream *stream)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_acquire_stream"));
    if (!stream)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_acquire_stream('%s'): stream is NULL", v->name);
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, "ds_vctx_acquire_stream");
    if (DS__LD(v->section_open))
        return ds__fail(DS_ERR_BUSY, "ds_vctx_acquire_stream('%s'): a section is already open", v->name);
    int track_all = DS__LD(v->track_all);
    if (track_all)
        atomic_store(&v->launching, 1);
    /* A section is one unit for the policy, predicted from the vCtx's own
     * past sections (profile key: the vCtx). */
    double pred = 0;
    predict(v, (CUfunction)v, k_section_dim, k_section_dim, &pred);
    ds__policy *pol = atomic_load_explicit(&v->rt->active, memory_order_acquire);
    ds_status st = DS_SUCCESS;
    if (pol) {
        ds_launch_event ev = {v, NULL, k_section_dim, k_section_dim, 0, DS_PHASE_NONE, pred, 1};
        st = decide(v, pol, &ev);
    }
    if (st == DS_SUCCESS && atomic_load_explicit(&v->gate_closed, memory_order_relaxed))
        st = ds__gate_hold(v, "ds_vctx_acquire_stream");
    if (st == DS_SUCCESS) {
        if (atomic_load_explicit(&v->pending, memory_order_relaxed) != DS__LD(v->bound))
            apply_binding(v);
        ensure_context(v);
        uint32_t gi = atomic_load_explicit(&v->gate_interval_us, memory_order_relaxed);
        if (gi != DS_GATES_NONE && ds__gate_due(v, gi))
            ds__gate_place(v, NULL, k_section_dim, k_section_dim);
        /* Every section is timed: its start now, its end at release. */
        v->section_slot = free_slot(v);
        if (v->section_slot && v->cu->cuEventRecord(v->section_slot->start, v->stream) != CUDA_SUCCESS)
            v->section_slot = NULL;
        v->section_pred_us = pred;
        DS__ST(v->section_open, 1);
        *stream = v->stream;
    }
    if (track_all)
        atomic_store(&v->launching, 0);
    return st;
}

ds_status ds_vctx_release_stream(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_release_stream"));
    if (!DS__LD(v->section_open))
        return ds__fail(DS_ERR_BUSY, "ds_vctx_release_stream('%s'): no section is open", v->name);
    add_us(&v->submitted_us, v->section_pred_us);
    note_unit(v, v->section_pred_us);
    if (atomic_load_explicit(&v->gate_interval_us, memory_order_relaxed) != DS_GATES_NONE)
        ds__gate_count_unit(v, v->section_pred_us);
    v->unmarked++;
    if (v->section_slot)
        publish(v, v->section_slot, 1, v->section_pred_us, (CUfunction)v, k_section_dim, k_section_dim);
    else
        flush_mark(v);
    v->section_slot = NULL;
    DS__ST(v->section_open, 0);
    bump(&v->sections, 1);
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, "ds_vctx_release_stream"); /* closed, but its work is lost */
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* synchronize, stats                                                        */

/* Everything submitted has finished: marks are all harvested and the
 * unmarked tail is done too. */
static void settle(struct ds_vctx *v)
{
    /* A harvest running on the scheduler finishes the marks if ours is skipped. */
    for (int i = 0; i < 100000 && atomic_load_explicit(&v->marks_pending, memory_order_acquire); i++) {
        ds__harvest(v);
        if (atomic_load_explicit(&v->marks_pending, memory_order_acquire))
            sched_yield();
    }
    if (!atomic_load_explicit(&v->marks_pending, memory_order_acquire))
        atomic_store_explicit(&v->completed_us, atomic_load_explicit(&v->submitted_us, memory_order_relaxed),
                              memory_order_relaxed);
}

ds_status ds_vctx_synchronize(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_synchronize"));
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, "ds_vctx_synchronize");
    if (atomic_load_explicit(&v->pending, memory_order_relaxed) != DS__LD(v->bound))
        apply_binding(v);
    flush_mark(v);
    CUresult r = v->cu->cuStreamSynchronize(v->stream);
    if (r != CUDA_SUCCESS) {
        if (ds__fault_note(v->rt, r, v, "cuStreamSynchronize"))
            return ds__fault_status(v->rt, "ds_vctx_synchronize");
        return ds__fail(DS_ERR_DRIVER, "ds_vctx_synchronize('%s'): %s", v->name, ds__cu_error_name(v->cu, r));
    }
    settle(v);
    return DS_SUCCESS;
}

ds_status ds_vctx_get_stats(ds_vctx_t v, ds_vctx_stats *stats)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_get_stats"));
    DS__TRY(ds__check_abi_grown(stats, DS_VCTX_STATS_SIZE_V1, sizeof *stats, "ds_vctx_stats"));
    size_t asked = stats->size, size = asked < sizeof *stats ? asked : sizeof *stats;
    ds_vctx_stats *caller = stats, full = DS_VCTX_STATS_INIT;
    stats = &full;
    stats->launches = atomic_load_explicit(&v->launches, memory_order_relaxed);
    stats->sections = atomic_load_explicit(&v->sections, memory_order_relaxed);
    stats->remaps = atomic_load_explicit(&v->remaps, memory_order_relaxed);
    stats->sampled_kernels = atomic_load_explicit(&v->sampled_kernels, memory_order_relaxed);
    stats->kernel_time_ns = atomic_load_explicit(&v->kernel_time_ns, memory_order_relaxed);
    uint32_t bound = DS__LD(v->bound);
    stats->pctx = DS__BIND_PCTX(bound);
    stats->streams = atomic_load_explicit(&v->streams_created, memory_order_relaxed);
    stats->holds = atomic_load_explicit(&v->holds, memory_order_relaxed);
    stats->window_us = atomic_load_explicit(&v->window_us, memory_order_relaxed);
    double in = inflight(v);
    stats->inflight_us = in > 0 ? in : 0;
    stats->urgent = (int)DS__BIND_URGENT(bound);
    stats->gate_interval_us = atomic_load_explicit(&v->gate_interval_us, memory_order_relaxed);
    stats->gate_closed = atomic_load_explicit(&v->gate_closed, memory_order_relaxed);
    stats->gates = atomic_load_explicit(&v->gates, memory_order_relaxed);
    stats->gate_closes = atomic_load_explicit(&v->gate_closes, memory_order_relaxed);
    stats->gate_closed_us = atomic_load_explicit(&v->gate_closed_us, memory_order_relaxed);
    stats->gate_holds = atomic_load_explicit(&v->gate_holds, memory_order_relaxed);
    stats->overruns = atomic_load_explicit(&v->overruns, memory_order_relaxed);
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
    if (v->handoff)
        cu->cuEventDestroy(v->handoff);
    for (int i = 0; i < DS__MARKS; i++) {
        if (v->marks[i].start)
            cu->cuEventDestroy(v->marks[i].start);
        if (v->marks[i].end)
            cu->cuEventDestroy(v->marks[i].end);
    }
}

static ds_status create_events(struct ds_vctx *v)
{
    const ds__driver *cu = v->cu;
    CUresult r = cu->cuEventCreate(&v->handoff, CU_EVENT_DISABLE_TIMING);
    for (int i = 0; r == CUDA_SUCCESS && i < DS__MARKS; i++) {
        r = cu->cuEventCreate(&v->marks[i].start, CU_EVENT_DEFAULT);
        if (r == CUDA_SUCCESS)
            r = cu->cuEventCreate(&v->marks[i].end, CU_EVENT_DEFAULT);
    }
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_DRIVER, "ds_vctx_create('%s'): cuEventCreate -> %s", v->name,
                        ds__cu_error_name(cu, r));
    return DS_SUCCESS;
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
    v->stream_priority = stream_priority(rt, a->priority);
    uint32_t initial = DS__BIND(a->initial_pctx < 0 ? rt->full_pctx : (uint32_t)a->initial_pctx, 0);
    atomic_init(&v->bound, initial);
    atomic_init(&v->pending, initial);
    atomic_flag_clear(&v->harvest_busy);
    v->sample_countdown = rt->sample_period ? rt->sample_period : UINT32_MAX;
    atomic_init(&v->last_active_us, -1e18);
    atomic_init(&v->gate_interval_us, DS_GATES_NONE);

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
    ds__rck_slots(rt, slot + 1);
    pthread_mutex_unlock(&rt->lock);
    v->slot = slot;
    /* RCK boundary sequences: records of the slot's earlier vCtxs are older */
    v->gate_seq = v->rck_base = (uint32_t)(serial << 16);
    if (a->name)
        snprintf(v->name, sizeof v->name, "%s", a->name);
    else
        snprintf(v->name, sizeof v->name, "vctx%llu", (unsigned long long)serial);

    ensure_context(v);
    ds_status st;
    DS__TRY_GOTO(create_events(v), st, fail);
    /* The policy places the new vCtx first, so that its first stream is
     * created where it will run. */
    ds__policy_vctx_event(rt, v, 1);
    DS__ST(v->bound, atomic_load_explicit(&v->pending, memory_order_acquire));
    DS__TRY_GOTO(stream_for(v, DS__LD(v->bound), &v->stream), st, fail);

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
    free_driver_objects(v);
    pthread_mutex_lock(&rt->lock);
    atomic_store(&rt->vctx[slot], NULL);
    rt->live_vctx--;
    pthread_mutex_unlock(&rt->lock);
    ds__memreg_fini(&v->mem);
    ds__free(v);
    return st;
}

/* Waits for the vCtx's work up to the teardown timeout. The simulated device
 * in virtual time only advances inside a synchronize, so it gets one. */
static ds_status drain(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    if (ds__faulted(rt)) /* its work will never finish: do not wait */
        return ds__fault_status(rt, "ds_vctx_destroy");
    if (rt->kind == DS_DEVICE_SIM) {
        CUresult r = v->cu->cuStreamSynchronize(v->stream);
        if (r != CUDA_SUCCESS && ds__fault_note(rt, r, v, "cuStreamSynchronize (teardown)"))
            return ds__fault_status(rt, "ds_vctx_destroy");
        return r == CUDA_SUCCESS ? DS_SUCCESS
                                 : ds__fail(DS_ERR_DRIVER, "vCtx '%s' teardown: %s", v->name,
                                            ds__cu_error_name(v->cu, r));
    }
    double deadline = ds__wall_ms() + rt->teardown_timeout_ms;
    long sleep_ns = 20000;
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
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000)
            sleep_ns *= 2;
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
    /* teardown opens its gate: the queued work finishes (or is reported) */
    ds__gate_interval_set(v, DS_GATES_NONE);
    ds__gate_force_open(v, NULL);
    ds_status st = drain(v);
    /* From here on nobody harvests v: the scheduler sees the dead magic, and
     * a harvest already running finishes before we take the flag. */
    atomic_store(&v->magic, DS__DEAD_MAGIC);
    while (atomic_flag_test_and_set_explicit(&v->harvest_busy, memory_order_acquire))
        sched_yield();
    /* its work is finished (or the context is dead): its copies, its memory */
    ds__copy_vctx_teardown(v);
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
