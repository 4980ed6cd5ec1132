/*
 * Suite `gpu`: what the `span` kernels (kernels.cu) record, as test_policy.c
 * and test_graph.c read it: sets of SMs, span records and their times, and
 * slo_aware's promise checked on the records of a best-effort (BE) and a
 * latency-sensitive (LS) tenant.
 */
#ifndef DS_TESTS_GPU_SETS_H
#define DS_TESTS_GPU_SETS_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_fixture.h"

#define WORDS (DS_MAX_SMS / 64)
#define US 1000ll /* ns */
#define MS 1000000ll

/* ------------------------------------------------------------------------ */
/* SM sets                                                                   */

typedef struct smset {
    uint64_t w[WORDS];
} smset;

/* The SMs a span record's kernel ran on. */
smset set_of(const span_record *r);
uint32_t set_count(const smset *s);
/* SMs in both a and b. */
uint32_t set_common(const smset *a, const smset *b);
/* SMs of a outside b. */
uint32_t set_outside(const smset *a, const smset *b);
int set_equal(const smset *a, const smset *b);
void set_add(smset *acc, const smset *s);
/* "0-7,16-23" (for the log). */
const char *set_str(const smset *s, char *buf, size_t n);

/* The SMs pCtx `idx` runs on (ds_pctx_probe_sms), asserted to be its size. */
smset probe_tier(gpu_env *e, int idx);

/* ------------------------------------------------------------------------ */
/* span records                                                              */

/* n records in device memory, reset (start ~0, everything else 0). */
CUdeviceptr spans_alloc(gpu_env *e, uint32_t n);
void spans_reset(gpu_env *e, CUdeviceptr d, uint32_t n);
/* Copies of n records (caller frees) / of one. */
span_record *spans_read(gpu_env *e, CUdeviceptr d, uint32_t n);
span_record span_read1(gpu_env *e, CUdeviceptr d);

/* ds_launch of `span` on v into recs[idx], each block spinning ns. */
ds_status launch_span(gpu_env *e, ds_vctx_t v, CUdeviceptr recs, int idx, ds_dim3 grid, ds_dim3 block,
                      long long ns, const ds_launch_hints *hints);

uint32_t blocks_of(ds_dim3 g);
/* Asserts record i of a kernel of `blocks` blocks ran to completion
 * (messages "<what> <i>: ..."). */
void assert_complete(const span_record *r, uint32_t i, uint32_t blocks, const char *what);

double dur_us(const span_record *r);
/* Signed a - b of two %globaltimer values, in us. */
double diff_us(unsigned long long a, unsigned long long b);

/* Median and maximum of n values (n >= 1); sorts v. */
void med_max(double *v, size_t n, double *med, double *max);

/* ------------------------------------------------------------------------ */
/* slo_aware: BE confined off the LS tier while LS is active                 */

/* The tiers of slo_aware with its defaults (ls_sms 64). */
typedef struct slo_tiers {
    int low;           /* LS's: the LOW pCtx nearest ls_sms */
    int high;          /* its complement, where BE is confined */
    uint32_t full;     /* the whole GPU */
    uint32_t high_sms; /* SMs of `high` */
    smset ls_set;      /* SMs of `low`, probed */
} slo_tiers;

/* Opens e under slo_aware (idle_us 2000; ls_sms, be_window_us,
 * scheduler_period_us: defaults) and finds its tiers, logged as `who`. */
slo_tiers slo_open(gpu_env *e, const char *who);

/* Asserts LS's n records complete (`blocks` blocks each) and on its tier's
 * SMs only, and LS's vCtx on its tier at the end (ls_pctx). */
void slo_assert_ls(const slo_tiers *t, const span_record *rl, uint32_t n, uint32_t blocks, uint32_t ls_pctx);

/* BE's units (kernels, graph steps) that ended before LS became active
 * (ls_on): how many, how many on more than the complement's SMs, and the
 * longest one's duration. */
typedef struct slo_be_before {
    int count, expanded;
    double longest_us;
} slo_be_before;
slo_be_before slo_be_before_ls(const slo_tiers *t, const span_record *rb, uint32_t nbe, unsigned long long ls_on);

/* The bounds slo_assert_be checks, and how its messages tell them. */
typedef struct slo_bounds {
    const char *unit;         /* one BE launch: "kernel", "step" */
    double window_us;         /* be_window_us */
    double one_us;            /* one BE unit */
    double expand_by_us;      /* BE expanded by then after LS stopped */
    const char *expand_limit; /* how expand_by_us was made */
} slo_bounds;

/* What slo_assert_be found (times in us after LS became active / stopped). */
typedef struct slo_be_split {
    uint32_t on_ls;           /* units started on LS's SMs while LS was active */
    uint32_t max_on_ls;       /* the most allowed: ceil(window_us / one_us) + 1 */
    int confined;             /* units started while LS was active, after the last one on its SMs */
    int expanded_after;       /* units started past expand_by_us after LS stopped */
    double last_on_ls_us;     /* start of the last unit on an LS SM while LS was active (-1: none) */
    double first_expanded_us; /* start of the first unit on more than the complement after LS stopped (-1: none) */
    uint32_t min_expanded;    /* SMs of the smallest unit past expand_by_us (UINT32_MAX: none) */
} slo_be_split;

/* Asserts slo_aware's promise on BE's records, LS active from ls_on to
 * ls_off: while LS was active, at most the unit running when it became active
 * and one window of units (ceil(window_us / one_us)) ran on the LS tier's SMs
 * (they drain only while LS has nothing in flight: counted, not timed); one
 * started more than expand_by_us after LS stopped runs on more than the
 * complement's SMs. */
slo_be_split slo_assert_be(const slo_tiers *t, const span_record *rb, uint32_t nbe, unsigned long long ls_on,
                           unsigned long long ls_off, const slo_bounds *b);

#endif /* DS_TESTS_GPU_SETS_H */
