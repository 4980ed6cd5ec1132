/* policy_demo: the least_loaded policy (least_loaded.c) on the simulated
 * device, no GPU needed. Three tenants start one after the other:
 *
 *   training-a   best effort, 16 kernels of about 400 us
 *   training-b   best effort,  2 kernels of about 100 us
 *   inference    latency sensitive, 4 kernels of about 50 us
 *
 * and the program checks that the policy did what it says: training-a and
 * training-b on the two halves of the GPU (nothing is in flight when
 * training-a starts, so it gets the half with more SMs), inference on the half
 * with less predicted work in flight (training-b's) and on its urgent stream,
 * every kernel run on the SMs of its tenant's pCtx only. Prints what happened;
 * exits 1 if a check fails, 2 if a call fails.
 *
 * Built out of the tree with pkg-config: see README.md here.
 */
#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "least_loaded.h"

#define CHECK(call) do { ds_status s_ = (call); if (s_ != DS_SUCCESS) { \
    fprintf(stderr, "%s: %s: %s\n", #call, ds_status_string(s_), ds_last_error_message()); \
    exit(2); } } while (0)

#define TRACE_CAP 1024

typedef struct tenant {
    const char *name;
    ds_vctx_class cls;
    uint32_t kernels;  /* launched one after the other */
    uint32_t grid;     /* blocks: one wave on either half */
    double block_us;   /* each block's duration, also the kernel's expected_us */
    CUfunction fn;
    ds_vctx_t vctx;
    uint32_t pctx;     /* where the policy placed it */
    double inflight_us; /* its predicted work in flight once launched */
} tenant;

static int failures;

static void expect(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failures += !ok;
}

/* Every kernel of t ran on SMs of the set `allowed` only (and on some SM). */
static int ran_inside(const tenant *t, const ds_sim_kernel_record *rec, size_t n,
                      const uint64_t allowed[DS_MAX_SMS / 64], uint32_t *seen)
{
    int ok = 1;
    *seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (rec[i].function != t->fn)
            continue;
        uint64_t any = 0;
        for (int w = 0; w < DS_MAX_SMS / 64; w++) {
            any |= rec[i].sm_mask[w];
            if (rec[i].sm_mask[w] & ~allowed[w])
                ok = 0;
        }
        ok &= any != 0;
        (*seen)++;
    }
    return ok && *seen == t->kernels;
}

int main(void)
{
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    /* No scheduler thread: nothing is harvested behind the program's back,
     * so the loads the policy sees are exactly what was launched. */
    cfg.scheduler_period_us = -1;
    ds_runtime_t rt;
    CHECK(ds_runtime_create(&cfg, &rt));

    CHECK(least_loaded_register(rt, 0));
    CHECK(ds_runtime_set_policy(rt, LEAST_LOADED_NAME));
    const char *active;
    CHECK(ds_runtime_get_policy(rt, &active));
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    CHECK(ds_runtime_info_get(rt, &info));
    printf("%s, %u pCtxs, policy %s\n", info.device_name, info.num_pctx, active);

    tenant t[3] = {
        {.name = "training-a", .cls = DS_CLASS_BEST_EFFORT, .kernels = 16, .grid = 64, .block_us = 400.0},
        {.name = "training-b", .cls = DS_CLASS_BEST_EFFORT, .kernels = 2, .grid = 64, .block_us = 100.0},
        {.name = "inference", .cls = DS_CLASS_LATENCY_SENSITIVE, .kernels = 4, .grid = 16, .block_us = 50.0},
    };
    for (int i = 0; i < 3; i++) {
        ds_sim_kernel_desc kd = DS_SIM_KERNEL_DESC_INIT;
        kd.name = t[i].name;
        kd.block_us = t[i].block_us;
        CHECK(ds_sim_kernel_create(rt, &kd, &t[i].fn));

        ds_vctx_attr attr = DS_VCTX_ATTR_INIT; /* starts on the whole GPU */
        attr.name = t[i].name;
        attr.cls = t[i].cls;
        CHECK(ds_vctx_create(rt, &attr, &t[i].vctx));
        ds_launch_hints hints = DS_LAUNCH_HINTS_INIT;
        hints.expected_us = (uint32_t)t[i].block_us; /* the prediction before any profile */
        for (uint32_t k = 0; k < t[i].kernels; k++)
            CHECK(ds_launch(t[i].vctx, t[i].fn, (ds_dim3){t[i].grid, 1, 1}, (ds_dim3){128, 1, 1}, 0, NULL,
                            &hints));

        ds_vctx_stats st = DS_VCTX_STATS_INIT;
        CHECK(ds_vctx_get_pctx(t[i].vctx, &t[i].pctx));
        CHECK(ds_vctx_get_stats(t[i].vctx, &st));
        t[i].inflight_us = st.inflight_us;
        printf("%-10s %-17s %2u kernels on pCtx %u (%3u SMs), %s stream, %5.0f us in flight\n", t[i].name,
               t[i].cls == DS_CLASS_LATENCY_SENSITIVE ? "latency-sensitive" : "best-effort", t[i].kernels,
               t[i].pctx, info.pctx[t[i].pctx].sm_count, st.urgent ? "urgent" : "normal", st.inflight_us);
    }

    /* What the policy promises (least_loaded.h). */
    const ds_pctx_info *a = &info.pctx[t[0].pctx], *b = &info.pctx[t[1].pctx];
    expect(a->anchor != DS_ANCHOR_FULL && b->anchor != DS_ANCHOR_FULL && a->complement == (int32_t)b->index,
           "training-a and training-b on the two halves: pCtx %u (%u SMs) and its complement, pCtx %u (%u SMs)",
           a->index, a->sm_count, b->index, b->sm_count);
    expect(a->sm_count >= b->sm_count, "training-a, first with nothing in flight, on the half with more SMs");
    const uint32_t lighter = t[0].inflight_us <= t[1].inflight_us ? t[0].pctx : t[1].pctx;
    expect(t[2].pctx == lighter,
           "inference on the half with less work in flight: pCtx %u (training-a %.0f us, training-b %.0f us)",
           lighter, t[0].inflight_us, t[1].inflight_us);

    for (int i = 2; i >= 0; i--) { /* the latency-sensitive tenant first: when was it done? */
        double now_us;
        ds_vctx_stats st = DS_VCTX_STATS_INIT;
        CHECK(ds_vctx_synchronize(t[i].vctx));
        CHECK(ds_sim_now_us(rt, &now_us));
        CHECK(ds_vctx_get_stats(t[i].vctx, &st));
        const int urgent = t[i].cls == DS_CLASS_LATENCY_SENSITIVE;
        expect(st.urgent == urgent && st.launches == t[i].kernels && st.remaps >= 1,
               "%-10s %s stream, %llu kernels launched, %llu remap(s), all done at %.0f us (simulated)",
               t[i].name, st.urgent ? "urgent" : "normal", (unsigned long long)st.launches,
               (unsigned long long)st.remaps, now_us);
    }

    /* Where the kernels really ran: the simulated device's trace against the
     * SMs each pCtx's probe kernel reaches. */
    ds_sim_kernel_record *rec = malloc(TRACE_CAP * sizeof *rec);
    if (!rec) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    size_t nrec;
    CHECK(ds_sim_trace_get(rt, rec, TRACE_CAP, &nrec));
    for (int i = 0; i < 3; i++) {
        uint64_t sms[DS_MAX_SMS / 64];
        uint32_t nsms, seen;
        CHECK(ds_pctx_probe_sms(rt, t[i].pctx, sms, &nsms));
        const int inside = ran_inside(&t[i], rec, nrec, sms, &seen);
        expect(inside, "%-10s %u of %u kernels ran on the %u SMs of pCtx %u only", t[i].name, seen, t[i].kernels,
               nsms, t[i].pctx);
    }
    free(rec);

    for (int i = 0; i < 3; i++)
        CHECK(ds_vctx_destroy(t[i].vctx));
    CHECK(ds_runtime_destroy(rt));
    printf("%s: %d check(s) failed\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
