/*
 * The scheduler: one thread per runtime, pinned (hwloc) to a CPU local to the
 * GPU. Each pass harvests finished marks (profiles, windows, on_completion),
 * tracks which vCtxs are active, raises on_congestion when a latency-sensitive
 * vCtx's queue predicts an SLO miss, and runs the policy's on_tick.
 * ds_runtime_poll is one pass; applications without the thread call it.
 */
#include <hwloc.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"
#include "core/fault.h"
#include "core/gate.h"
#include "core/handles.h"
#include "core/marks.h"
#include "core/profile.h"
#include "core/registry.h"
#include "core/relaxed.h"
#include "core/remap.h"
#include "core/runtime.h"
#include "core/sched.h"
#include "core/vctx.h"
#include "seam/driver.h"
#include "seam/log.h"

/* ------------------------------------------------------------------------ */
/* watchdog                                                                  */

/* Tracked work far past its profile: the oldest pending mark of v covers
 * `pred` us of predicted work, which started no earlier than the first pass
 * that saw this mark as the oldest pending one (so after the previous mark
 * was harvested; no clock on the launch or harvest path), or v's gate last
 * opened.
 * Past 4 x pred + 10 ms, on_congestion is raised once for that mark (late_us:
 * the time past pred) and counted. Work behind a closed gate or a pending
 * copy is not judged (it waits on purpose). Runs under harvest_busy, so that
 * nobody frees the mark while it is read. */
#define DS__WATCHDOG_FACTOR 4.0
#define DS__WATCHDOG_SLACK_US 10000.0

static void watchdog(struct ds_vctx *v, ds__policy *pol, const ds_policy_view *view, double now)
{
    if (DS__LD(v->gate.closed) || atomic_load_explicit(&v->copy.pending, memory_order_relaxed))
        return;
    if (atomic_flag_test_and_set_explicit(&v->marks.harvest_busy, memory_order_acquire))
        return;
    double late = -1, pred = 0;
    ds__mark *m = &v->marks.ring[v->marks.tail];
    double cum = atomic_load_explicit(&m->cum_pred_us, memory_order_relaxed);
    if (v->magic == DS__VCTX_MAGIC &&
        DS__MARK_STATE(atomic_load_explicit(&m->word, memory_order_acquire)) == DS__MARK_PENDING &&
        cum != v->watch.overrun_cum_us) {
        pred = cum - atomic_load_explicit(&v->marks.completed_us, memory_order_relaxed);
        if (cum != v->watch.cum_us) {
            v->watch.cum_us = cum;
            v->watch.since_us = now;
        }
        double start = v->watch.since_us;
        double opened = atomic_load_explicit(&v->gate.opened_at_us, memory_order_relaxed);
        if (opened > start)
            start = opened;
        if (pred > 0 && now - start > DS__WATCHDOG_FACTOR * pred + DS__WATCHDOG_SLACK_US) {
            late = now - start - pred;
            v->watch.overrun_cum_us = cum;
        }
    }
    atomic_flag_clear_explicit(&v->marks.harvest_busy, memory_order_release);
    if (late < 0)
        return;
    atomic_fetch_add_explicit(&v->watch.overruns, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&v->rt->sched.overruns, 1, memory_order_relaxed);
    /* a policy signal, not an error: a mispredicted section trips it too */
    ds__log(DS_LOG_INFO, "watchdog: vCtx '%s': work predicted at %.0f us has run %.0f us", v->name, pred,
            late + pred);
    if (pol && pol->ops.on_congestion)
        pol->ops.on_congestion(pol->state, view, v, late);
}

/* ------------------------------------------------------------------------ */
/* one pass                                                                  */

ds_status ds_runtime_poll(ds_runtime_t rt)
{
    DS__TRY(ds__rt_check(rt, "ds_runtime_poll"));
    if (DS__UNLIKELY(ds__faulted(rt)))
        return ds__fault_status(rt, "ds_runtime_poll");
    /* One pass at a time: a caller racing the scheduler thread just returns. */
    if (atomic_flag_test_and_set_explicit(&rt->sched.poll_busy, memory_order_acquire))
        return DS_SUCCESS;
    double now = ds__now_us(rt);
    ds__policy *pol = atomic_load_explicit(&rt->reg.active, memory_order_acquire);
    const ds_policy_view *view = (const ds_policy_view *)rt;
    for (uint32_t i = 0; i < rt->max_vctx; i++) {
        struct ds_vctx *v = atomic_load_explicit(&rt->vctx[i], memory_order_acquire);
        if (!v || v->magic != DS__VCTX_MAGIC)
            continue;
        ds__harvest(v);
        uint64_t seen = atomic_load_explicit(&v->launches, memory_order_relaxed) +
                        atomic_load_explicit(&v->sections, memory_order_relaxed) + (uint64_t)DS__LD(v->section_open);
        double inflight = atomic_load_explicit(&v->marks.submitted_us, memory_order_relaxed) -
                          atomic_load_explicit(&v->marks.completed_us, memory_order_relaxed);
        if (seen != DS__LD(v->watch.seen) || inflight > 0.5 || DS__LD(v->section_open)) {
            DS__ST(v->watch.seen, seen);
            DS__ST(v->watch.last_active_us, now);
        }
        /* Congestion: the LS vCtx's own queue already predicts an SLO miss. */
        if (v->cls == DS_CLASS_LATENCY_SENSITIVE && v->slo_us && inflight > v->slo_us && pol &&
            pol->ops.on_congestion && now - v->watch.last_congestion_us >= v->slo_us) {
            /* at most once per SLO period: the policy needs time to act */
            v->watch.last_congestion_us = now;
            pol->ops.on_congestion(pol->state, view, v, inflight - v->slo_us);
        }
        watchdog(v, pol, view, now);
        ds__yield_poll(v, now);
        ds__gates_expire(rt, v);
    }
    if (rt->sched.hook.pass)
        rt->sched.hook.pass(rt->sched.hook.self, now);
    /* A fault with no mark pending is still noticed: every ms, query an idle
     * stream of the context (a sticky error fails every call). */
    double wall = ds__wall_ms();
    if (rt->sched.health_stream && wall - rt->sched.last_health_us / 1e3 >= 1.0) {
        rt->sched.last_health_us = wall * 1e3;
        CUresult r = rt->cu->cuStreamQuery(rt->sched.health_stream);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
            ds__fault_note(rt, r, NULL, "cuStreamQuery of its health stream");
    }
    if (ds__faulted(rt)) {
        atomic_flag_clear_explicit(&rt->sched.poll_busy, memory_order_release);
        return ds__fault_status(rt, "ds_runtime_poll");
    }
    if (pol && pol->ops.on_tick) {
        uint32_t tick = pol->ops.tick_us ? pol->ops.tick_us : 1000;
        if (now - rt->sched.last_tick_us >= tick || now < rt->sched.last_tick_us) {
            rt->sched.last_tick_us = now;
            pol->ops.on_tick(pol->state, view, now);
        }
    }
    atomic_flag_clear_explicit(&rt->sched.poll_busy, memory_order_release);
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* thread                                                                    */

static void pin(struct ds_runtime *rt)
{
    if (!rt->topology || !rt->cpuset)
        return;
    hwloc_bitmap_t one = hwloc_bitmap_alloc();
    if (!one)
        return;
    /* The last local CPU: CPU 0 tends to take the machine's interrupts. */
    hwloc_bitmap_only(one, (unsigned)hwloc_bitmap_last((hwloc_const_bitmap_t)rt->cpuset));
    if (hwloc_set_cpubind((hwloc_topology_t)rt->topology, one, HWLOC_CPUBIND_THREAD) != 0)
        ds__log(DS_LOG_INFO, "scheduler: could not pin to a CPU near the GPU");
    hwloc_bitmap_free(one);
}

static void *sched_main(void *arg)
{
    struct ds_runtime *rt = arg;
    ds__thread_capture_relaxed(rt->cu);
    pin(rt);
    struct timespec ts = {0, (long)rt->sched.period_us * 1000};
    /* Runs until stopped, or until the context faults (nothing left to do). */
    while (!atomic_load_explicit(&rt->sched.stop, memory_order_acquire) && !ds__faulted(rt)) {
        ds_runtime_poll(rt);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

ds_status ds__sched_init(struct ds_runtime *rt)
{
    rt->profiles = ds__profiles_create();
    if (!rt->profiles)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "profiles");
    rt->sched.clock0_us = rt->ops->now_us(rt->dev);
    return DS_SUCCESS;
}

ds_status ds__sched_start(struct ds_runtime *rt)
{
    if (!rt->sched.period_us)
        return DS_SUCCESS; /* the application calls ds_runtime_poll */
    atomic_store(&rt->sched.stop, 0);
    int e = pthread_create(&rt->sched.thread, NULL, sched_main, rt);
    if (e != 0)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "scheduler thread: pthread_create failed (%d)", e);
    rt->sched.started = 1;
    return DS_SUCCESS;
}

void ds__sched_stop(struct ds_runtime *rt)
{
    if (rt->sched.started) {
        atomic_store_explicit(&rt->sched.stop, 1, memory_order_release);
        pthread_join(rt->sched.thread, NULL);
        rt->sched.started = 0;
    }
}

void ds__sched_fini(struct ds_runtime *rt)
{
    ds__sched_stop(rt);
    ds__profiles_destroy(rt->profiles);
    rt->profiles = NULL;
}
