/*
 * The serving engine's scheduler: iteration-level continuous batching as in
 * SGLang and vLLM (a waiting queue in arrival order, a running batch of at
 * most max_batch requests, chunked prefill with a token budget per
 * iteration, one decode step for every running request per iteration), run
 * in one of these modes:
 *
 *   single        one vCtx and one thread: each iteration queues a prefill
 *                 chunk (if any request waits) and a decode step (if any
 *                 runs) on the same stream, then synchronizes. What an
 *                 engine does without multiplexing.
 *   pdmux_static  a prefill vCtx on one thread and a decode vCtx on another,
 *                 running concurrently; the pdmux_static plug-in places them
 *                 on the SM split SGLang's adjust_stream_groups picks
 *                 (pdmux.h), re-chosen when a prefill chunk starts or ends and
 *                 when the running batch empties.
 *   slo_aware     the same two threads; the library's default policy places
 *                 them: decode is latency-sensitive with the TPOT SLO, prefill
 *                 latency-sensitive with the TTFT SLO (both carry their
 *                 ds_phase; prefill records each request's TTFT).
 *   slo_aware_nogates  the same under slo_aware without gates (BE bounded by
 *                 its window alone).
 *   tpot_first    the same two threads under the tpot_first policy.
 *   priority      the same two threads under the priority policy: decode
 *                 (LS) at the highest stream priority on the whole GPU,
 *                 prefill (and the trainer) on the whole GPU at normal
 *                 priority. Beside the BE tenant only.
 *   static@N      the same two threads under the static policy with ls_sms N:
 *                 decode on the LOW tier of N SMs, prefill (and the trainer)
 *                 on its complement. Beside the BE tenant only.
 *
 * In every two-thread mode decode records each step's inter-token interval
 * as a request on its vCtx (whose slo_us is the TPOT SLO): slo_aware sizes
 * decode's tier from their SLO attainment; the other policies ignore them.
 * Prefill records each request's TTFT on its vCtx (slo_us the TTFT SLO).
 *
 * A request holds a KV slot from its first prefill chunk to its last token.
 * Times are host CLOCK_MONOTONIC: a request's first token is "out" when the
 * host has it (after the prefill chunk that finished its prompt was
 * synchronized), each later token when its decode step was synchronized.
 *
 * Optionally a best-effort trainer (W1's BE tenant, bench/colocate) runs
 * beside the serving vCtxs on its own thread and vCtx for the whole run.
 *
 * A run may begin with settle requests: served like the others, in the same
 * arrival stream, but not measured, so that a policy sizing from what it has
 * recorded (slo_aware) has sized before the window opens at the first
 * measured request's arrival.
 */
#ifndef SERVE_LOOP_H
#define SERVE_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include <detshare/detshare.h>

#include "../colocate/workload.h"
#include "engine.h"
#include "pdmux.h"
#include "trace.h"

typedef enum serve_mode {
    MODE_SINGLE,
    MODE_PDMUX,
    MODE_SLO_AWARE,
    MODE_SLO_NOGATES,
    MODE_TPOT_FIRST,
    /* The co-located right-sizing comparison's baselines (beside the BE
     * tenant only): `priority` and `static@N` for N in SERVE_LADDER_SMS. */
    MODE_PRIORITY,
    MODE_STATIC_FIRST,
    MODE_STATIC_LAST = MODE_STATIC_FIRST + 5,
    MODE_COUNT
} serve_mode;

/** The LOW tiers (SMs) of the static@N modes, each with its HIGH complement
 *  in serve's pool; slo_aware's right-sizing walks them too. */
#define SERVE_LADDER_STEPS 6
extern const uint32_t SERVE_LADDER_SMS[SERVE_LADDER_STEPS]; /* 16, 32, 48, 64, 80, 96 */

/** "single", "pdmux_static", "slo_aware", "slo_aware_nogates", "tpot_first",
 *  "priority", "static@16" ... "static@96". */
const char *serve_mode_name(serve_mode m);
/** The policy made active for the mode. */
const char *serve_mode_policy(serve_mode m);
/** static@N: N (the policy's ls_sms); 0 for every other mode. */
uint32_t serve_mode_static_sms(serve_mode m);
/** Whether the mode runs only beside the BE tenant (priority, static@N). */
int serve_mode_colocated_only(serve_mode m);

typedef struct serve_env {
    ds_runtime_t rt;
    serve_engine *engine;
    pdmux *pd;              /* pdmux_static's state (registered) */
    workload *be;           /* W1's BE tenant, NULL if none was created */
    uint32_t tpot_slo_us;   /* ds_vctx_attr.slo_us of the decode vCtx (and single's) */
    uint32_t ttft_slo_us;   /* ds_vctx_attr.slo_us of the prefill vCtx (latency-sensitive: its
                               requests' TTFTs are recorded on it) */
    uint64_t token_seed;    /* prompt token ids */
} serve_env;

/** One request's outcome; times in us after the window opened (the first
 *  measured request's arrival). */
typedef struct serve_req_result {
    double arrival_us, first_us, done_us;
    uint32_t prompt, output;
    uint64_t token_hash; /* of its output tokens, in order */
} serve_req_result;

/** pCtx changes of one vCtx (sampled every TIMELINE_PERIOD_US). */
typedef struct serve_timeline {
    const char *name;
    size_t n, cap;
    double *t_ms; /* ms after the run started */
    uint32_t *pctx;
} serve_timeline;

#define SERVE_TIMELINES 4

typedef struct serve_outcome {
    serve_req_result *req;    /* n - settle entries, the caller's: the measured requests */
    double open_us;           /* the window opened: us after the run started (arr[settle].at_us) */
    double makespan_us;       /* window open to the last measured request's last token */
    double decode_bs_mean;    /* requests per decode step, of the steps whose tokens came out in the window */
    uint64_t decode_steps;    /* those steps as recorded on the decode vCtx (two-thread modes; else 0) */
    uint64_t decode_over_slo; /* of them, over its SLO (the TPOT SLO) */
    uint64_t pdmux_changes;   /* pdmux_static: group changes */
    double be_steps;          /* BE steps completed in the window (with_be) */
    double be_steps_per_s;
    ds_vctx_stats stats[3];   /* prefill (or single), decode, BE at the end of the run */
    serve_timeline timeline[SERVE_TIMELINES]; /* when record_timeline; free with serve_outcome_free */
    size_t timelines;
} serve_outcome;

/**
 * Serves arr[0..n) in `mode` (n <= 100000), beside the BE tenant if with_be;
 * arr[0..settle) are settle requests (settle < n), served but not measured:
 * the window opens at arr[settle].at_us, and out->req, makespan_us,
 * decode_bs_mean, decode_steps, decode_over_slo and be_steps cover it alone.
 * The mode's policy is made active first (static@N: its ls_sms set to N
 * before); the vCtxs are created, warmed up (each decode bucket once, one
 * prefill chunk), used and destroyed here. In the two-thread modes each decode
 * step is recorded on the decode vCtx as one request (ds_vctx_request_record)
 * whose latency is the inter-token interval the running requests saw: the
 * time from the previous step's tokens to this step's, or this step's own
 * duration for the first step after the batch was empty.
 * out->req must hold n - settle entries. 0, or -1 after printing what failed.
 */
int serve_run(const serve_env *env, serve_mode mode, int with_be, const serve_arrival *arr, size_t n,
              size_t settle, int record_timeline, serve_outcome *out);

/** The BE tenant alone on the whole GPU for window_us: its steps/s. */
int serve_be_alone(const serve_env *env, double window_us, double *steps_per_s);

void serve_outcome_free(serve_outcome *o);

#endif /* SERVE_LOOP_H */
