/*
 * Request arrivals for the serve benchmark: a CSV trace in the Azure LLM
 * inference trace's format (TIMESTAMP, ContextTokens, GeneratedTokens; the
 * project ships the 2023 "code" service's trace in data/traces/), replayed
 * with its inter-arrival times scaled by one factor to reach a target request
 * rate, or a Poisson process of that rate with the trace's lengths.
 */
#ifndef SERVE_TRACE_H
#define SERVE_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct serve_trace {
    double *t_s;       /* arrival time (s) from the first request, ascending */
    uint32_t *prompt;  /* ContextTokens */
    uint32_t *output;  /* GeneratedTokens */
    size_t n;
} serve_trace;

/** One request as the benchmark replays it. */
typedef struct serve_arrival {
    double at_us;    /* due time, us after the window opens */
    uint32_t prompt; /* prompt tokens */
    uint32_t output; /* output tokens (>= 1), the first one from prefill */
    uint32_t trace_index;
} serve_arrival;

/**
 * Reads a CSV with a header naming TIMESTAMP, ContextTokens and
 * GeneratedTokens (any order, other columns ignored). TIMESTAMP is either
 * "YYYY-MM-DD hh:mm:ss[.fraction]" (the Azure traces) or seconds as a number;
 * rows must be in arrival order. 0, or -1 after printing the file, line and
 * what is wrong.
 */
int serve_trace_load(const char *path, serve_trace *out);
void serve_trace_free(serve_trace *t);

typedef struct serve_window_info {
    double natural_rps; /* the window's own mean rate: (n - 1) / its span */
    double scale;       /* inter-arrival times were multiplied by this */
    size_t capped;      /* requests whose lengths were cut to fit max_ctx */
} serve_window_info;

/**
 * n requests from the trace's [offset, offset + n) (wrapping around the end)
 * arriving at rate_rps on average: with poisson == 0 the trace's arrival times
 * scaled by one factor (natural rate / rate_rps), otherwise a seeded Poisson
 * process; rate_rps <= 0 puts every arrival at 0 (a closed batch). Lengths as
 * recorded, except that prompt + output is cut to max_ctx (output first, then
 * prompt, keeping >= 1 of each). 0, or -1 (n == 0 or an empty trace).
 */
int serve_trace_window(const serve_trace *t, size_t offset, size_t n, double rate_rps, int poisson,
                       uint64_t seed, uint32_t max_ctx, serve_arrival *out, serve_window_info *info);

#endif /* SERVE_TRACE_H */
