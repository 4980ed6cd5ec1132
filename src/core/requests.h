/*
 * Request latency accounting of one vCtx (ds_vctx_request_begin/end/record):
 * totals, and the latencies of the last DS_REQUEST_WINDOW requests with
 * their median and 99th percentile, published for lock-free readers (stats,
 * the policy view).
 *
 * Writers (the threads that end or record requests) serialise on a spin
 * flag held for one insertion into a sorted array of at most
 * DS_REQUEST_WINDOW floats; readers never take it.
 */
#ifndef DS_CORE_REQUESTS_H
#define DS_CORE_REQUESTS_H

#include <stdatomic.h>
#include <stdint.h>

#include <detshare/detshare.h>

typedef struct ds__vreq {
    atomic_flag busy;                    /* writers only */
    float ring[DS_REQUEST_WINDOW];       /* latencies (us), oldest at `head` once full */
    float sorted[DS_REQUEST_WINDOW];     /* the same, ascending */
    uint32_t n, head;                    /* entries, next slot to overwrite */
    uint32_t over_in_window;             /* of them, over the SLO */
    int last_over;                       /* the last request added was over the SLO */
    _Atomic uint64_t count, over_slo;    /* totals */
    _Atomic uint64_t over_runs;          /* runs of consecutive requests over the SLO */
    _Atomic double p50_us, p99_us;       /* of the window (0 while empty) */
    _Atomic uint32_t window_n, window_over;
} ds__vreq;

/* Copies the published figures of `rq` (a const ds__vreq *) into *out, a
 * ds_vctx_stats or a ds_vctx_state (the same field names): the count first,
 * with acquire, so that the others are at least as new. */
#define DS__REQUESTS_READ(out, rq)                                                                           \
    do {                                                                                                     \
        (out)->requests = atomic_load_explicit(&(rq)->count, memory_order_acquire);                          \
        (out)->requests_over_slo = atomic_load_explicit(&(rq)->over_slo, memory_order_relaxed);              \
        (out)->requests_over_slo_runs = atomic_load_explicit(&(rq)->over_runs, memory_order_relaxed);        \
        (out)->request_window = atomic_load_explicit(&(rq)->window_n, memory_order_relaxed);                 \
        (out)->request_window_over_slo = atomic_load_explicit(&(rq)->window_over, memory_order_relaxed);     \
        (out)->request_p50_us = atomic_load_explicit(&(rq)->p50_us, memory_order_relaxed);                   \
        (out)->request_p99_us = atomic_load_explicit(&(rq)->p99_us, memory_order_relaxed);                   \
    } while (0)

struct ds_vctx;

/* Adds one request of `latency_us` (finite, >= 0) to v's accounting. */
void ds__requests_add(struct ds_vctx *v, double latency_us);

#endif /* DS_CORE_REQUESTS_H */
