/* Suite `gpu`: SM sets and span records (see gpu_sets.h). */
#include "gpu_sets.h"
#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

smset set_of(const span_record *r)
{
    smset s;
    for (int i = 0; i < WORDS; i++)
        s.w[i] = (uint64_t)r->sm_bitmap[2 * i] | ((uint64_t)r->sm_bitmap[2 * i + 1] << 32);
    return s;
}

uint32_t set_count(const smset *s)
{
    uint32_t n = 0;
    for (int i = 0; i < WORDS; i++)
        n += (uint32_t)__builtin_popcountll(s->w[i]);
    return n;
}

uint32_t set_common(const smset *a, const smset *b)
{
    uint32_t n = 0;
    for (int i = 0; i < WORDS; i++)
        n += (uint32_t)__builtin_popcountll(a->w[i] & b->w[i]);
    return n;
}

uint32_t set_outside(const smset *a, const smset *b)
{
    uint32_t n = 0;
    for (int i = 0; i < WORDS; i++)
        n += (uint32_t)__builtin_popcountll(a->w[i] & ~b->w[i]);
    return n;
}

int set_equal(const smset *a, const smset *b)
{
    return memcmp(a->w, b->w, sizeof a->w) == 0;
}

void set_add(smset *acc, const smset *s)
{
    for (int i = 0; i < WORDS; i++)
        acc->w[i] |= s->w[i];
}

const char *set_str(const smset *s, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int b = 0; b < DS_MAX_SMS && len < n; b++) {
        if (!((s->w[b / 64] >> (b % 64)) & 1))
            continue;
        int e = b;
        while (e + 1 < DS_MAX_SMS && ((s->w[(e + 1) / 64] >> ((e + 1) % 64)) & 1))
            e++;
        int k = e > b ? snprintf(buf + len, n - len, "%s%d-%d", len ? "," : "", b, e)
                      : snprintf(buf + len, n - len, "%s%d", len ? "," : "", b);
        if (k < 0)
            break;
        len += (size_t)k;
        b = e;
    }
    return buf;
}

smset probe_tier(gpu_env *e, int idx)
{
    cr_assert_geq(idx, 0);
    cr_assert_lt((uint32_t)idx, e->info.num_pctx);
    smset s;
    uint32_t count = 0;
    memset(&s, 0, sizeof s);
    GPU_DS(ds_pctx_probe_sms(e->rt, (uint32_t)idx, s.w, &count));
    cr_assert_eq(count, set_count(&s));
    cr_assert_eq(count, e->info.pctx[idx].sm_count, "pCtx %d ran its probe on %u SMs, configured for %u", idx, count,
                 e->info.pctx[idx].sm_count);
    return s;
}

void spans_reset(gpu_env *e, CUdeviceptr d, uint32_t n)
{
    span_record *h = calloc(n, sizeof *h);
    cr_assert_not_null(h);
    for (uint32_t i = 0; i < n; i++)
        h[i].start = ~0ull;
    gpu_write(e, d, h, n * sizeof *h);
    free(h);
}

CUdeviceptr spans_alloc(gpu_env *e, uint32_t n)
{
    CUdeviceptr d = gpu_alloc(e, n * sizeof(span_record));
    spans_reset(e, d, n);
    return d;
}

span_record *spans_read(gpu_env *e, CUdeviceptr d, uint32_t n)
{
    span_record *h = calloc(n ? n : 1, sizeof *h);
    cr_assert_not_null(h);
    if (n)
        gpu_read(e, h, d, n * sizeof *h);
    return h;
}

span_record span_read1(gpu_env *e, CUdeviceptr d)
{
    span_record r;
    gpu_read(e, &r, d, sizeof r);
    return r;
}

ds_status launch_span(gpu_env *e, ds_vctx_t v, CUdeviceptr recs, int idx, ds_dim3 grid, ds_dim3 block,
                      long long ns, const ds_launch_hints *hints)
{
    void *params[] = {&recs, &idx, &ns};
    return ds_launch(v, e->span, grid, block, 0, params, hints);
}

uint32_t blocks_of(ds_dim3 g) { return g.x * g.y * g.z; }

void assert_complete(const span_record *r, uint32_t i, uint32_t blocks, const char *what)
{
    cr_assert_eq(r->blocks, blocks, "%s %u: %u of %u blocks finished", what, i, r->blocks, blocks);
    cr_assert_neq(r->start, ~0ull, "%s %u: no start recorded", what, i);
    cr_assert_geq(r->end, r->start, "%s %u: end %llu before start %llu", what, i, r->end, r->start);
}

double dur_us(const span_record *r) { return (double)(r->end - r->start) / 1e3; }

double diff_us(unsigned long long a, unsigned long long b)
{
    return (double)(long long)(a - b) / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void med_max(double *v, size_t n, double *med, double *max)
{
    qsort(v, n, sizeof *v, cmp_double);
    *med = v[n / 2];
    *max = v[n - 1];
}

slo_tiers slo_open(gpu_env *e, const char *who)
{
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.policy = "slo_aware"; /* ls_sms, be_window_us, scheduler_period_us: defaults */
    /* BE expands once LS has been idle 2 ms (the default, 0, expands it
     * between LS requests, which tests/test_slo_aware.c covers): these tests
     * check BE confined while LS is active and expanded after */
    cfg.idle_us = 2000;
    gpu_open(e, &cfg);
    slo_tiers t;
    t.low = gpu_low_nearest(&e->info, 64); /* ls_sms default */
    cr_assert_geq(t.low, 0, "the pool has no LOW pCtx");
    t.high = e->info.pctx[t.low].complement;
    cr_assert_geq(t.high, 0, "LOW pCtx %d has no complement", t.low);
    t.full = gpu_full_pctx(e);
    t.high_sms = e->info.pctx[t.high].sm_count;
    t.ls_set = probe_tier(e, t.low);
    char buf[512];
    cr_log_info("%s: LS tier pCtx %d (%u SMs: %s), BE confined to pCtx %d (%u SMs)", who, t.low,
                e->info.pctx[t.low].sm_count, set_str(&t.ls_set, buf, sizeof buf), t.high, t.high_sms);
    return t;
}

void slo_assert_ls(const slo_tiers *t, const span_record *rl, uint32_t n, uint32_t blocks, uint32_t ls_pctx)
{
    for (uint32_t i = 0; i < n; i++) {
        assert_complete(&rl[i], i, blocks, "LS kernel");
        smset s = set_of(&rl[i]);
        cr_assert_eq(set_outside(&s, &t->ls_set), 0, "LS kernel %u ran on %u SMs outside the LS tier", i,
                     set_outside(&s, &t->ls_set));
    }
    cr_assert_eq(ls_pctx, (uint32_t)t->low, "LS ended on pCtx %u, not its tier %d", ls_pctx, t->low);
}

slo_be_before slo_be_before_ls(const slo_tiers *t, const span_record *rb, uint32_t nbe, unsigned long long ls_on)
{
    slo_be_before b = {0, 0, 0};
    for (uint32_t i = 0; i < nbe; i++)
        if (rb[i].end < ls_on) {
            smset s = set_of(&rb[i]);
            b.count++;
            b.expanded += set_count(&s) > t->high_sms;
            if (dur_us(&rb[i]) > b.longest_us)
                b.longest_us = dur_us(&rb[i]);
        }
    return b;
}

slo_be_split slo_assert_be(const slo_tiers *t, const span_record *rb, uint32_t nbe, unsigned long long ls_on,
                           unsigned long long ls_off, const slo_bounds *b)
{
    slo_be_split r = {.max_on_ls = (uint32_t)ceil(b->window_us / b->one_us) + 1,
                      .last_on_ls_us = -1,
                      .first_expanded_us = -1,
                      .min_expanded = UINT32_MAX};
    /* while LS is active: the units on LS's SMs are the one running when it
     * became active and what BE had queued in its window; they may run
     * whenever LS has nothing in flight, so they are counted, not timed */
    for (uint32_t i = 0; i < nbe; i++) {
        smset s = set_of(&rb[i]);
        double since_on = diff_us(rb[i].start, ls_on), since_off = diff_us(rb[i].start, ls_off);
        if (since_on >= 0 && since_off < 0 && set_common(&s, &t->ls_set)) {
            r.on_ls++;
            r.last_on_ls_us = since_on;
        }
    }
    cr_assert_leq(r.on_ls, r.max_on_ls,
                  "BE ran %u %ss on the LS tier's SMs while LS was active (the last %.0f us after it became active): "
                  "more than the one running and a window of %.0f us of %.0f-us %ss (%u)",
                  r.on_ls, b->unit, r.last_on_ls_us, b->window_us, b->one_us, b->unit, r.max_on_ls);
    for (uint32_t i = 0; i < nbe; i++) {
        smset s = set_of(&rb[i]);
        double since_on = diff_us(rb[i].start, ls_on), since_off = diff_us(rb[i].start, ls_off);
        if (since_off >= 0 && r.first_expanded_us < 0 && set_count(&s) > t->high_sms)
            r.first_expanded_us = since_off;
        if (since_on > r.last_on_ls_us && since_off < 0)
            r.confined++;
        if (since_off > b->expand_by_us) {
            cr_assert_gt(set_count(&s), t->high_sms,
                         "BE %s %u started %.0f us after LS stopped (%s) on %u SMs: not expanded beyond the %u-SM "
                         "complement",
                         b->unit, i, since_off, b->expand_limit, set_count(&s), t->high_sms);
            r.expanded_after++;
            if (set_count(&s) < r.min_expanded)
                r.min_expanded = set_count(&s);
        }
    }
    return r;
}
