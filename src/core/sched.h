/*
 * The scheduler (sched.c): one pass over the runtime at a time (its thread
 * every scheduler_period_us, or the application's ds_runtime_poll): harvests
 * marks, tracks activity, raises on_congestion, runs the watchdog, expires
 * gates, runs the hook a plug-in registered (the RCK), checks the context's
 * health and runs on_tick. The clock it keeps the zero of is clock.h's.
 */
#ifndef DS_CORE_SCHED_H
#define DS_CORE_SCHED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "seam/driver.h"

/* A hook of the scheduler (the RCK): pass runs at the end of every scheduler
 * pass, stats fills its part of ds_runtime_stats, stop runs first at
 * runtime teardown (before anything it reads is freed). */
typedef struct ds__sched_hook {
    void *self;
    void (*pass)(void *self, double now_us);
    void (*stats)(void *self, ds_runtime_stats *st, double now_us);
    void (*stop)(void *self);
} ds__sched_hook;

/* A runtime's scheduler. */
typedef struct ds__sched {
    pthread_t thread;
    int started;
    atomic_int stop;
    uint32_t period_us; /* 0: no thread */
    double last_tick_us;
    atomic_flag poll_busy; /* one pass at a time */
    double clock0_us;      /* ops->now_us at creation */
    CUstream health_stream; /* idle stream the pass queries for faults */
    double last_health_us;
    ds__sched_hook hook;
    /* watchdog: events of every vCtx, destroyed ones included */
    _Atomic uint64_t overruns, heartbeat_misses;
} ds__sched;

/* A vCtx as the pass tracks it: written by the pass in progress, read by
 * policies on any thread. */
typedef struct ds__vwatch {
    _Atomic uint64_t seen;         /* units the pass has seen */
    _Atomic double last_active_us; /* runtime clock when work was last seen in flight */
    double last_congestion_us;     /* last on_congestion raised */
    double cum_us;                 /* watchdog: the oldest pending mark, */
    double since_us;               /* ... when the pass first saw it, */
    double overrun_cum_us;         /* ... and the mark last reported overrunning */
    _Atomic uint64_t overruns;
} ds__vwatch;

struct ds_runtime;

/* init (profiles, clock) before the policies, start (the thread) after; stop
 * joins the thread (idempotent); fini also frees the profiles. */
ds_status ds__sched_init(struct ds_runtime *rt);
ds_status ds__sched_start(struct ds_runtime *rt);
void ds__sched_stop(struct ds_runtime *rt);
void ds__sched_fini(struct ds_runtime *rt);

#endif /* DS_CORE_SCHED_H */
