/*
 * One configuration of the colocate benchmark: the LS and BE tenant threads,
 * each on its own vCtx, and the measurement window they share.
 *
 * Timeline of colo_run:
 *   BE starts and runs BE_WARMUP_STEPS steps; LS starts and runs
 *   env->ls_warmup warm-up requests back to back, then env->settle "settle"
 *   requests on their own Poisson schedule (env->settle_arrival_us, from the
 *   same rate as the window's), BE running beside them: an adaptive policy
 *   reaches its steady state before anything is measured. Then the window
 *   opens at t0 (host monotonic clock). LS request i is due at t0 +
 *   arrival_us[i]; the LS thread sleeps until then (wake), queues the
 *   request's work (submitted) and waits for it with ds_vctx_synchronize
 *   (done). Its latency is done minus due, so time spent queued behind
 *   earlier requests counts. Every settle and window request is recorded with
 *   ds_vctx_request_record (latency from its due time), which is what the
 *   policy sees; only the window's requests make the figures. The window
 *   closes at t0 + window_us (the last arrival); BE throughput is the BE steps
 *   completed inside the window divided by its length. BE keeps running until
 *   LS is done, so LS never runs on an idle GPU in a co-located configuration.
 */
#ifndef COLOCATE_RUN_H
#define COLOCATE_RUN_H

#include <stddef.h>
#include <stdint.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>

#include "bench.h"
#include "workload.h"

typedef struct colo_env {
    ds_runtime_t rt;
    workload *work;
    const double *arrival_us; /* LS schedule, microseconds after t0, ascending */
    size_t requests;          /* entries in arrival_us */
    double window_us;         /* measurement window; arrival_us[requests - 1] */
    unsigned ls_warmup;       /* LS requests back to back before the settle, per configuration */
    const double *settle_arrival_us; /* settle schedule, microseconds after its own start, ascending */
    size_t settle;                   /* entries in settle_arrival_us (0: no settle) */
    /* NULL, or a file that colo_run writes (CSV, a header line first) with
     * one line per settle and window LS request, in arrival order: phase
     * (settle or window), index in its phase, due_us (after the phase's
     * start), latency_us (done - due), over_slo (0 or 1; 0 without an SLO),
     * pctx and sms (where LS's vCtx was bound right after the request was
     * queued). For offline study of a policy's decisions against the same
     * arrivals on each fixed split. */
    const char *trace_path;
} colo_env;

/** What one configuration runs: which tenants, the policy that places them
 *  (made the runtime's active policy before the vCtxs are created), and the
 *  tenants' attributes (class, SLO, phase; placement is the policy's). */
typedef struct colo_plan {
    int run_ls, run_be;
    const char *policy; /* NULL: leave the active policy as it is */
    ds_vctx_attr ls, be;
} colo_plan;

/** Where a tenant's work went, sampled once per LS request (after it was
 *  submitted) and once per BE step: the pCtx and stream of its last kernel. */
typedef struct colo_placement {
    uint64_t samples;
    uint64_t pctx[DS_MAX_PCTX]; /* samples bound to each pCtx */
    uint64_t urgent;            /* samples on the highest-priority stream */
} colo_placement;

typedef struct colo_result {
    int has_ls, has_be;
    uint32_t ls_pctx, be_pctx;    /* pCtx each vCtx ran on most (colo_placement) */
    int ls_priority, be_priority; /* ds_vctx_attr.priority they were created with */
    colo_placement ls_place, be_place;
    ds_vctx_stats ls_stats, be_stats; /* at the end of the configuration (warm-up included) */
    bench_summary ls_latency_us;  /* over env->requests requests: done - due */
    /* Where that latency went, per request (due: arrival; start: max(due, the
     * previous request's done); wake: the LS thread back from its sleep;
     * submitted: ls_submit returned; done: ds_vctx_synchronize returned).
     * latency = queue_wait + submit_delay + device. */
    bench_summary ls_queue_wait_us;   /* start - due: behind the previous request */
    bench_summary ls_submit_delay_us; /* submitted - start: host delay before the work is queued */
    bench_summary ls_wake_delay_us;   /* wake - due (the queue wait included, when there was one) */
    bench_summary ls_enqueue_us;      /* submitted - wake: ls_submit itself (policy holds included) */
    bench_summary ls_device_us;       /* done - submitted */
    double ls_over_slo_frac;      /* requests whose latency exceeded plan->ls.slo_us (0 without SLO) */
    size_t ls_within, ls_counted; /* requests within that SLO, of requests counted (the verdict's counts) */
    double ls_late_run_mean;      /* such requests per run of consecutive ones (arrival order); NAN: none */
    double ls_service_mean_us;    /* completion minus max(due time, previous completion) */
    uint64_t ls_fingerprint;      /* output hash of the last request */
    int ls_fingerprint_ok;        /* 0 where the device computes no data */
    double be_steps;              /* steps completed inside the window (interpolated) */
    double be_steps_per_s;
    double window_s;
} colo_result;

/** Runs one configuration. 0, or -1 after printing what failed. */
int colo_run(const colo_env *env, const colo_plan *plan, colo_result *out);

/**
 * Mean service time of one LS request alone on the whole GPU: `warmup`
 * requests, then `samples` requests back to back, each submitted and waited
 * for. Also the output fingerprint every configuration is compared with.
 * Runs on the calling thread.
 */
int colo_calibrate(const colo_env *env, const ds_vctx_attr *ls, unsigned warmup, unsigned samples,
                   double *mean_us, uint64_t *fingerprint, int *fingerprint_ok);

#endif /* COLOCATE_RUN_H */
