/*
 * Marks and the work accounting windows bound (see marks.h for a mark's
 * life). The owner thread publishes; any thread may learn that marks
 * finished (lock-free: a compare-and-swap on the mark's state word and a
 * monotonic maximum on completed_us); the harvester alone turns finished
 * marks into profile samples and on_completion calls and frees them.
 */
#include <sched.h>

#include "core/clock.h"
#include "core/fault.h"
#include "core/graph.h"
#include "core/handles.h"
#include "core/marks.h"
#include "core/profile.h"
#include "core/registry.h"
#include "core/relaxed.h"
#include "core/remap.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "seam/driver.h"
#include "seam/log.h"

static inline uint64_t gen_of(uint64_t w) { return w >> 2; }

static void reclaim(struct ds_vctx *v);

ds__mark *ds__marks_slot(struct ds_vctx *v)
{
    ds__mark *m = &v->marks.ring[v->marks.head];
    if (DS__LIKELY(DS__MARK_STATE(atomic_load_explicit(&m->word, memory_order_acquire)) == DS__MARK_FREE))
        return m;
    /* Ring full: reclaim finished marks unless the harvester is at it. */
    if (!atomic_flag_test_and_set_explicit(&v->marks.harvest_busy, memory_order_acquire)) {
        reclaim(v);
        atomic_flag_clear_explicit(&v->marks.harvest_busy, memory_order_release);
    }
    return DS__MARK_STATE(atomic_load_explicit(&m->word, memory_order_acquire)) == DS__MARK_FREE ? m : NULL;
}

void ds__marks_publish(struct ds_vctx *v, ds__mark *m, int timed, double pred, CUfunction f, struct ds_graph *graph,
                       ds_dim3 g, ds_dim3 b)
{
    if (v->cu->cuEventRecord(m->end, v->stream) != CUDA_SUCCESS)
        return; /* untracked: the next mark covers this work */
    double cum = atomic_load_explicit(&v->marks.submitted_us, memory_order_relaxed);
    uint64_t seq = atomic_load_explicit(&v->marks.last_seq, memory_order_relaxed) + 1;
    atomic_store_explicit(&m->seq, seq, memory_order_relaxed);
    m->timed = timed;
    m->pred_us = pred;
    atomic_store_explicit(&m->cum_pred_us, cum, memory_order_relaxed);
    m->f = f;
    m->graph = graph;
    m->grid = g;
    m->block = b;
    m->pctx = DS__BIND_PCTX(DS__LD(v->bound));
    atomic_store_explicit(&v->marks.last, m->end, memory_order_relaxed);
    /* release after the event: whoever reads this seq sees that event or a
     * later one, so waiting on the event never counts unfinished work */
    atomic_store_explicit(&v->marks.last_seq, seq, memory_order_release);
    atomic_fetch_add_explicit(&v->marks.pending, 1, memory_order_relaxed);
    uint64_t w = atomic_load_explicit(&m->word, memory_order_relaxed);
    atomic_store_explicit(&m->word, ((gen_of(w) + 1) << 2) | DS__MARK_PENDING, memory_order_release);
    v->marks.head = (v->marks.head + 1) % DS__MARKS;
    v->marks.since_us = 0;
    v->marks.unmarked = 0;
}

void ds__marks_flush(struct ds_vctx *v)
{
    if (!v->marks.unmarked)
        return;
    ds__mark *m = ds__marks_slot(v);
    if (m)
        ds__marks_publish(v, m, 0, 0, NULL, NULL, (ds_dim3){0, 0, 0}, (ds_dim3){0, 0, 0});
}

/* completed_us only grows: a monotonic maximum by compare-and-swap. */
static void complete_upto(struct ds_vctx *v, double cum)
{
    double cur = atomic_load_explicit(&v->marks.completed_us, memory_order_relaxed);
    while (cum > cur &&
           !atomic_compare_exchange_weak_explicit(&v->marks.completed_us, &cur, cum, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* PENDING -> DONE for the mark whose state word is still `w`: counts it
 * finished. Returns 0 if someone else did, or the slot was reused. */
static int mark_done(struct ds_vctx *v, ds__mark *m, uint64_t w)
{
    uint64_t done = (w & ~(uint64_t)3) | DS__MARK_DONE;
    if (!atomic_compare_exchange_strong_explicit(&m->word, &w, done, memory_order_acq_rel, memory_order_relaxed))
        return 0;
    atomic_fetch_sub_explicit(&v->marks.pending, 1, memory_order_relaxed);
    complete_upto(v, atomic_load_explicit(&m->cum_pred_us, memory_order_relaxed));
    return 1;
}

/* v's marks up to publish order `seq` finished: every PENDING one of them is
 * DONE (the vCtx's work runs in program order, so all of them finished).
 * Ordered by seq, not by predicted work: units without a prediction add
 * nothing to cum_pred_us, so later marks may share an earlier one's. */
static void done_upto(struct ds_vctx *v, uint64_t seq)
{
    for (uint32_t k = 0; k < DS__MARKS; k++) {
        ds__mark *m = &v->marks.ring[k];
        uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
        if (DS__MARK_STATE(w) == DS__MARK_PENDING && atomic_load_explicit(&m->seq, memory_order_relaxed) <= seq)
            mark_done(v, m, w);
    }
}

/* Waits for v's mark event `ev` (publish order `seq`) on behalf of `waiter`.
 * Mark end events are created with CU_EVENT_BLOCKING_SYNC (vctx.c), so
 * cuEventSynchronize sleeps until the GPU signals the event instead of
 * spinning on it, and a tenant's window wait costs the others nothing.
 * (H200, W1 at 40% load, 8 repetitions of 3000 requests, static@96 with and
 * without an 11 ms window for BE on its 36 SMs: with spinning waits LS's
 * attainment was 0.70 points lower, lower in 6 of 8, its p50 4.8 us higher;
 * with sleeping waits 0.40 points higher, lower in 2 of 8;
 * docs/results/h200/ls_cost/README.md, exp17-exp18.) The price is the wake-up
 * (microseconds) at the end of each wait: windows hold at least a unit of
 * queued work beyond it, and holds are where a policy chose to wait. LS's own
 * synchronize is a stream synchronize, which still spins. */
static void wait_event(struct ds_vctx *v, struct ds_vctx *waiter, CUevent ev, uint64_t seq)
{
    CUresult r = v->cu->cuEventSynchronize(ev);
    if (DS__UNLIKELY(r != CUDA_SUCCESS)) {
        ds__fault_note(v->rt, r, waiter, "cuEventSynchronize (window or hold)");
        return;
    }
    done_upto(v, seq);
}

int ds__marks_wait_latest(struct ds_vctx *w, struct ds_vctx *self)
{
    if (w == self)
        ds__marks_flush(w);
    /* event and cum are published together by the owner; a newer pair read
     * half-way only makes the wait longer, never counts unfinished work */
    uint64_t seq = atomic_load_explicit(&w->marks.last_seq, memory_order_acquire);
    CUevent ev = atomic_load_explicit(&w->marks.last, memory_order_relaxed);
    if (!ev || !atomic_load_explicit(&w->marks.pending, memory_order_relaxed))
        return 0;
    wait_event(w, self, ev, seq);
    return 1;
}

void ds__marks_window_wait(struct ds_vctx *v, double pred)
{
    uint32_t win = atomic_load_explicit(&v->window_us, memory_order_relaxed);
    if (!win)
        return;
    for (int guard = 0; guard < 4 * DS__MARKS; guard++) {
        double in = ds__marks_inflight(&v->marks);
        if (in <= 0.5 || in + pred <= win)
            return;
        ds__marks_flush(v);
        /* the oldest PENDING mark whose completion brings us under the window */
        double submitted = atomic_load_explicit(&v->marks.submitted_us, memory_order_relaxed);
        CUevent target = NULL;
        uint64_t target_seq = 0;
        for (uint32_t k = 0; k < DS__MARKS; k++) {
            ds__mark *m = &v->marks.ring[(v->marks.head + k) % DS__MARKS];
            if (DS__MARK_STATE(atomic_load_explicit(&m->word, memory_order_acquire)) != DS__MARK_PENDING)
                continue;
            target = m->end;
            target_seq = atomic_load_explicit(&m->seq, memory_order_relaxed);
            if (submitted - atomic_load_explicit(&m->cum_pred_us, memory_order_relaxed) + pred <= win)
                break;
        }
        if (!target) {
            /* No mark to wait for: the ring is full of finished marks nobody
             * harvested. Without a scheduler thread this thread is the one
             * that can (the documented exception); else the pass will. */
            if (!v->rt->sched.started)
                ds__harvest(v);
            else
                ds__sleep_us(v->rt, 20);
            continue;
        }
        wait_event(v, v, target, target_seq);
        if (DS__UNLIKELY(ds__faulted(v->rt)))
            return;
    }
}

double ds__marks_inflight(const ds__vmarks *m)
{
    double d = atomic_load_explicit(&m->submitted_us, memory_order_relaxed) -
               atomic_load_explicit(&m->completed_us, memory_order_relaxed);
    return d > 0 ? d : 0;
}

/* ------------------------------------------------------------------------ */
/* reclaim and harvest                                                       */

/* Under harvest_busy: every finished mark from the tail on becomes a
 * completion record and its slot is freed. No lock, no hook. */
static void reclaim(struct ds_vctx *v)
{
    for (;;) {
        ds__mark *m = &v->marks.ring[v->marks.tail];
        uint64_t w = atomic_load_explicit(&m->word, memory_order_acquire);
        if (DS__MARK_STATE(w) == DS__MARK_FREE)
            return;
        if (DS__MARK_STATE(w) == DS__MARK_PENDING) {
            CUresult r = v->cu->cuEventQuery(m->end);
            if (r == CUDA_ERROR_NOT_READY)
                return;
            if (r != CUDA_SUCCESS && !ds__fault_note(v->rt, r, v, "cuEventQuery of its mark") &&
                !ds__faulted(v->rt))
                ds__log(DS_LOG_WARN, "vCtx '%s': mark failed (%s); work before it may have faulted", v->name,
                        ds__cu_error_name(v->cu, r));
            mark_done(v, m, w); /* a waiter may have counted it meanwhile */
        }
        double dur = -1.0;
        float ms = 0.f;
        if (m->timed && v->cu->cuEventElapsedTime(&ms, m->start, m->end) == CUDA_SUCCESS && ms >= 0.f)
            dur = (double)ms * 1e3;
        if (v->marks.done_head - v->marks.done_tail < DS__COMPLETIONS) {
            ds__completion_rec *c = &v->marks.done[v->marks.done_head++ % DS__COMPLETIONS];
            *c = (ds__completion_rec){m->f, m->grid, m->block, m->pctx, dur, m->pred_us, m->graph};
        } else {
            ds__log(DS_LOG_DEBUG, "vCtx '%s': completion queue full, a mark goes unreported", v->name);
        }
        w = atomic_load_explicit(&m->word, memory_order_relaxed);
        atomic_store_explicit(&m->word, (w & ~(uint64_t)3) | DS__MARK_FREE, memory_order_release);
        v->marks.tail = (v->marks.tail + 1) % DS__MARKS;
    }
}

/* Under harvest_busy: completion records into profiles and on_completion. */
static void report(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    ds__policy *pol = atomic_load_explicit(&rt->reg.active, memory_order_acquire);
    while (v->marks.done_tail != v->marks.done_head) {
        ds__completion_rec c = v->marks.done[v->marks.done_tail++ % DS__COMPLETIONS];
        if (c.duration_us >= 0) {
            ds__bump(&v->marks.kernel_time_ns, (uint64_t)(c.duration_us * 1e3));
            atomic_fetch_add_explicit(&v->marks.sampled, 1, memory_order_relaxed);
            ds__profile_add(rt->profiles, c.f, c.grid, c.block, rt->pctx[c.pctx].sm_count, c.duration_us);
        }
        if (pol && pol->ops.on_completion) {
            /* sections are profiled under the vCtx's own key; report them as NULL */
            struct ds_graph *g = c.graph;
            ds_completion e = {v,           c.f == (CUfunction)v || g ? NULL : c.f,
                               c.grid,      c.block,
                               c.pctx,      c.duration_us,
                               c.pred_us,   g};
            pol->ops.on_completion(pol->state, (const ds_policy_view *)rt, &e);
        }
    }
}

void ds__harvest(struct ds_vctx *v)
{
    if (atomic_flag_test_and_set_explicit(&v->marks.harvest_busy, memory_order_acquire))
        return;
    if (v->magic == DS__VCTX_MAGIC) {
        reclaim(v);
        report(v);
    }
    atomic_flag_clear_explicit(&v->marks.harvest_busy, memory_order_release);
}

void ds__marks_settle(struct ds_vctx *v)
{
    /* A harvest running on the scheduler finishes the marks if ours is skipped. */
    for (int i = 0; i < 100000 && atomic_load_explicit(&v->marks.pending, memory_order_acquire); i++) {
        ds__harvest(v);
        if (atomic_load_explicit(&v->marks.pending, memory_order_acquire))
            sched_yield();
    }
    ds__harvest(v); /* DONE marks: their samples and completions */
    if (!atomic_load_explicit(&v->marks.pending, memory_order_acquire))
        complete_upto(v, atomic_load_explicit(&v->marks.submitted_us, memory_order_relaxed));
}
