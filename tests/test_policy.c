/* Policies on the simulated device: each policy's defining behaviour, the
 * plug-in ABI, live switching, windows and the scheduler's hooks. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/policy.h>

#include "common.h"

enum { LS_SMS = 64 };

/* A runtime in virtual time with the scheduler driven by the test
 * (ds_runtime_poll), so that every run is exactly reproducible. */
static ds_runtime_t policy_runtime(const char *policy)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, NULL);
    cfg.policy = policy; /* NULL: the library's default */
    cfg.ls_sms = LS_SMS;
    cfg.idle_us = 2000;
    cfg.be_window_us = 2000;
    return t_runtime_create(&cfg);
}

static double now_us(ds_runtime_t rt)
{
    double t = 0;
    ds_sim_now_us(rt, &t);
    return t;
}

/* SMs below LS_SMS form the LS tier (groups from the low end). */
static int touches_ls_tier(const ds_sim_kernel_record *r) { return (r->sm_mask[0] & ~0ull) != 0; }

static int count_sms(const ds_sim_kernel_record *r) { return (int)t_popcount(r->sm_mask); }

/* ---- registry ------------------------------------------------------------ */

static ds_decision to_pctx1(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)view;
    (void)ev;
    int *calls = st;
    (*calls)++;
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = 1};
}

/* An unknown name in ds_runtime_config.policy: DS_ERR_NOT_FOUND from
 * ds_runtime_create, a message naming that call and the valid names, and no
 * runtime handed out. */
Test(policy, unknown_policy_at_create_names_the_valid_ones)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "slo-aware");
    ds_runtime_t rt = (ds_runtime_t)&sim;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_NOT_FOUND);
    const char *msg = ds_last_error_message();
    cr_assert(strstr(msg, "ds_runtime_create"), "%s", msg);
    cr_assert(!strstr(msg, "ds_runtime_set_policy"), "%s", msg);
    cr_assert(strstr(msg, "'slo-aware'") && strstr(msg, "slo_aware, tpot_first, shared"), "%s", msg);
    cr_assert_eq(rt, (ds_runtime_t)&sim, "output untouched on failure");
}

Test(policy, builtins_default_and_errors)
{
    ds_runtime_t rt = policy_runtime(NULL);
    const char *name = NULL;
    cr_assert_eq(ds_runtime_get_policy(rt, &name), DS_SUCCESS);
    cr_assert_str_eq(name, "slo_aware", "the default policy");
    static const char *builtins[] = {"slo_aware", "tpot_first",        "shared",  "priority", "static",
                                     "temporal",  "slo_aware_nogates", "balance", "manual"};
    for (int i = 0; i < 9; i++) {
        cr_assert_eq(ds_runtime_set_policy(rt, builtins[i]), DS_SUCCESS, "%s", builtins[i]);
        ds_runtime_get_policy(rt, &name);
        cr_assert_str_eq(name, builtins[i]);
    }
    cr_assert_eq(ds_runtime_set_policy(rt, "nope"), DS_ERR_NOT_FOUND);
    cr_assert(strstr(ds_last_error_message(), "registered: slo_aware, tpot_first,"), "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_set_policy(rt, NULL), DS_ERR_INVALID_ARGUMENT);

    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "shared";
    ops.on_launch = to_pctx1;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_ALREADY_EXISTS);
    ops.name = "custom";
    ops.on_launch = NULL;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_INVALID_ARGUMENT, "on_launch is required");
    ops.on_launch = to_pctx1;
    ops.name = NULL;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_INVALID_ARGUMENT);
    ops.name = "";
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_INVALID_ARGUMENT);
    ops.name = "custom";
    ops.size = 16;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_ABI_MISMATCH);
    ops.size = sizeof ops;
    ops.version = 99;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_ABI_MISMATCH);
    ops.version = DS_ABI_VERSION;
    cr_assert_eq(ds_policy_register(rt, NULL, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_policy_register(NULL, &ops, NULL), DS_ERR_INVALID_HANDLE);
    char names[DS_MAX_POLICIES][16];
    int added = 0;
    ds_status st = DS_SUCCESS;
    for (int i = 0; i < DS_MAX_POLICIES && st == DS_SUCCESS; i++) {
        snprintf(names[i], sizeof names[i], "p%d", i);
        ops.name = names[i];
        st = ds_policy_register(rt, &ops, NULL);
        added += st == DS_SUCCESS;
    }
    cr_assert_eq(st, DS_ERR_LIMIT);
    cr_assert_eq(added, DS_MAX_POLICIES - 9); /* 9 built-ins */
    ds_runtime_destroy(rt);
}

Test(policy, custom_policy_changes_placement)
{
    ds_runtime_t rt = policy_runtime("shared");
    int calls = 0;
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "pin_low16";
    ops.on_launch = to_pctx1;
    cr_assert_eq(ds_policy_register(rt, &ops, &calls), DS_SUCCESS);
    CUfunction k = t_sim_kernel(rt, "k", 10.0, 0, NULL);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_launch(v, k, t_dim(264), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    cr_assert_eq(ds_runtime_set_policy(rt, "pin_low16"), DS_SUCCESS);
    cr_assert_eq(ds_launch(v, k, t_dim(264), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(v);
    cr_assert_eq(calls, 1);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(count_sms(&r[0]), 132, "shared: the whole GPU");
    cr_assert_eq(count_sms(&r[1]), 16, "the plug-in moved it to pCtx 1 (16 SMs)");
    free(r);
    ds_runtime_destroy(rt);
}

/* ---- baselines ----------------------------------------------------------- */

/* BE: a long kernel (16 waves of 1 ms blocks over the whole GPU); LS: one 10 us
 * block 100 us later. Returns LS's start minus its submission. */
static double ls_wait(const char *policy, double *be_end)
{
    ds_runtime_t rt = policy_runtime(policy);
    CUfunction bek = t_sim_kernel(rt, "be", 1000.0, 0, NULL);
    CUfunction lsk = t_sim_kernel(rt, "ls", 10.0, 0, NULL);
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t ls = t_vctx(rt, "ls", DS_CLASS_LATENCY_SENSITIVE, 0, -1);
    cr_assert_eq(ds_launch(be, bek, t_dim(16 * 132), t_dim(256), 0, NULL, NULL), DS_SUCCESS);
    ds_sim_sleep_until(rt, 100.0);
    cr_assert_eq(ds_launch(ls, lsk, t_dim(1), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(ls);
    ds_vctx_synchronize(be);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    const ds_sim_kernel_record *l = NULL; /* LS's first kernel */
    for (size_t i = 0; i < n && !l; i++)
        if (strcmp(r[i].name, "ls") == 0)
            l = &r[i];
    double wait = l->start_us - l->submit_us;
    *be_end = t_find(r, n, "be")->end_us;
    free(r);
    ds_runtime_destroy(rt);
    return wait;
}

Test(policy, shared_ls_waits_behind_a_running_be_kernel)
{
    double be_end;
    double w = ls_wait("shared", &be_end);
    cr_assert_geq(w + 100.0, be_end - 1000.0 - 1e-6, "LS waited %.0f us; BE ran until %.0f", w, be_end);
}

Test(policy, priority_ls_waits_for_one_block)
{
    double be_end;
    double w = ls_wait("priority", &be_end);
    cr_assert_leq(w, 1000.0 + 1e-6, "LS on the highest priority waits at most one BE block (%.0f)", w);
    cr_assert_gt(w, 0.0);
}

Test(policy, static_be_never_uses_ls_sms_even_while_ls_is_idle)
{
    ds_runtime_t rt = policy_runtime("static");
    CUfunction bek = t_sim_kernel(rt, "be", 100.0, 0, NULL);
    CUfunction lsk = t_sim_kernel(rt, "ls", 10.0, 0, NULL);
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t ls = t_vctx(rt, "ls", DS_CLASS_LATENCY_SENSITIVE, 0, -1);
    cr_assert_eq(ds_launch(ls, lsk, t_dim(64), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(ls); /* LS idle from here on */
    for (int i = 0; i < 50; i++) {
        cr_assert_eq(ds_launch(be, bek, t_dim(500), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
        ds_runtime_poll(rt);
    }
    ds_vctx_synchronize(be);
    ds_sim_sleep_until(rt, now_us(rt) + 10000.0);
    ds_runtime_poll(rt);
    cr_assert_eq(ds_launch(be, bek, t_dim(500), t_dim(128), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(be);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    int be_kernels = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(r[i].name, "be") == 0) {
            be_kernels++;
            cr_assert(!touches_ls_tier(&r[i]), "BE kernel %zu ran on an LS SM", i);
            cr_assert_eq(count_sms(&r[i]), 68, "BE on the 68-SM complement");
        } else {
            cr_assert_eq(count_sms(&r[i]), 64, "LS on its 64-SM tier");
        }
    }
    cr_assert_eq(be_kernels, 51);
    free(r);
    ds_runtime_destroy(rt);
}

/* static with an LS and a BE vCtx and one 10-us kernel, ls_sms set to 32
 * while active; each run() launches and waits for one kernel. */
typedef struct static_rig {
    ds_runtime_t rt;
    CUfunction k;
    ds_vctx_t ls, be;
} static_rig;

static static_rig static_open(void)
{
    static_rig g = {.rt = policy_runtime("static")};
    g.k = t_sim_kernel(g.rt, "k", 10.0, 0, NULL);
    g.be = t_vctx(g.rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    g.ls = t_vctx(g.rt, "ls", DS_CLASS_LATENCY_SENSITIVE, 0, -1);
    cr_assert_eq(ds_policy_param_set(g.rt, "static", "ls_sms", "32"), DS_SUCCESS);
    return g;
}

static void run(static_rig *g, ds_vctx_t v, uint32_t blocks)
{
    cr_assert_eq(ds_launch(v, g->k, t_dim(blocks), t_dim(32), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(v);
}

/* The kernels so far ran on these SM counts, in order; closes the rig. */
static void static_close(static_rig *g, const uint32_t *sms, size_t count)
{
    size_t n;
    ds_sim_kernel_record *r = t_trace(g->rt, &n);
    cr_assert_eq(n, count);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq((uint32_t)count_sms(&r[i]), sms[i], "kernel %zu on %u SMs, not %u", i, (uint32_t)count_sms(&r[i]), sms[i]);
    free(r);
    ds_runtime_destroy(g->rt);
}

/* An ls_sms set while static is active moves the live vCtxs at their next
 * launch (it reached only vCtxs created later before: colocate_arrivals'
 * static@32 and static@96 both ran on the tiers of the value before). */
Test(policy, static_ls_sms_set_while_active_moves_live_vctxs)
{
    static_rig g = static_open();
    run(&g, g.ls, 64);
    run(&g, g.be, 500);
    static_close(&g, (const uint32_t[]){32, 100}, 2); /* LS on the new tier, BE on its complement */
}

/* static's ls_whole_gpu: LS on the whole GPU (urgent), BE still on the
 * complement of ls_sms, so LS keeps its tier's SMs to itself. */
Test(policy, static_ls_whole_gpu_puts_ls_on_every_sm_and_be_on_the_complement)
{
    static_rig g = static_open();
    cr_assert_eq(ds_policy_param_set(g.rt, "static", "ls_whole_gpu", "1"), DS_SUCCESS);
    run(&g, g.ls, 264);
    run(&g, g.be, 500);
    cr_assert_eq(ds_policy_param_set(g.rt, "static", "ls_whole_gpu", "2"), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_policy_param_set(g.rt, "static", "ls_whole_gpu", "0"), DS_SUCCESS);
    run(&g, g.ls, 64);
    static_close(&g, (const uint32_t[]){132, 100, 32}, 3); /* whole GPU, complement, LS back on its tier */
}

Test(policy, temporal_two_tenants_never_overlap)
{
    ds_runtime_t rt = policy_runtime("temporal");
    CUfunction ka = t_sim_kernel(rt, "a", 50.0, 0, NULL);
    CUfunction kb = t_sim_kernel(rt, "b", 30.0, 0, NULL);
    ds_vctx_t a = t_vctx(rt, "a", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t b = t_vctx(rt, "b", DS_CLASS_LATENCY_SENSITIVE, 0, -1);
    /* One thread interleaves both tenants: each switch has to wait for the
     * other tenant's work to drain (the hold advances simulated time). */
    for (int i = 0; i < 60; i++) {
        ds_vctx_t v = (i / 3) % 2 ? b : a;
        cr_assert_eq(ds_launch(v, v == a ? ka : kb, t_dim(200), t_dim(64), 0, NULL, NULL), DS_SUCCESS,
                     "%s", ds_last_error_message());
    }
    ds_vctx_synchronize(a);
    ds_vctx_synchronize(b);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 60);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (strcmp(r[i].name, r[j].name) != 0)
                cr_assert(r[i].end_us <= r[j].start_us + 1e-6 || r[j].end_us <= r[i].start_us + 1e-6,
                          "%s [%.1f, %.1f] overlaps %s [%.1f, %.1f]", r[i].name, r[i].start_us, r[i].end_us,
                          r[j].name, r[j].start_us, r[j].end_us);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_get_stats(b, &st);
    cr_assert_gt(st.holds, 0, "b had to wait for a");
    free(r);
    ds_runtime_destroy(rt);
}

/* ---- slo_aware ----------------------------------------------------------- */

Test(policy, slo_aware_yields_to_each_ls_kernel_and_expands_between_them)
{
    ds_runtime_t rt = policy_runtime("slo_aware");
    /* policy_runtime seeds idle_us 2000: BE is to expand as soon as LS has nothing in flight */
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", "idle_us", "0"), DS_SUCCESS);
    CUfunction bek = t_sim_kernel(rt, "be", 100.0, 0, NULL);
    CUfunction lsk = t_sim_kernel(rt, "ls", 20.0, 0, NULL);
    ds_vctx_t ls = t_ls_vctx(rt, 1000);
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    /* The caller's estimate lets the window work before profiles exist; in
     * virtual time nothing finishes unless the BE thread waits on its window. */
    ds_launch_hints be_hint = DS_LAUNCH_HINTS_INIT;
    be_hint.expected_us = 200;

    /* Phase 1: BE alone for 10 ms after its first 256 units (its unit is
     * known only after them): it expands over the whole GPU. */
    double t_known = -1;
    for (int i = 0; t_known < 0 || now_us(rt) < t_known + 10000.0; i++) {
        cr_assert_eq(ds_launch(be, bek, t_dim(264), t_dim(128), 0, NULL, &be_hint), DS_SUCCESS);
        ds_runtime_poll(rt);
        if (i == T_SLO_BE_UNITS)
            t_known = now_us(rt);
    }
    /* Phase 2: LS becomes active. */
    double t_ls = now_us(rt);
    cr_assert_eq(ds_launch(ls, lsk, t_dim(64), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    ds_runtime_poll(rt);
    double next_ls = t_ls + 500.0;
    while (now_us(rt) < t_ls + 6000.0) { /* an LS request every 500 us */
        cr_assert_eq(ds_launch(be, bek, t_dim(264), t_dim(128), 0, NULL, &be_hint), DS_SUCCESS);
        if (now_us(rt) >= next_ls) {
            cr_assert_eq(ds_launch(ls, lsk, t_dim(64), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
            next_ls += 500.0;
        }
        ds_runtime_poll(rt);
    }
    ds_vctx_synchronize(ls);
    /* Phase 3: LS idle; BE runs on for 8 ms. */
    double t_idle = now_us(rt);
    while (now_us(rt) < t_idle + 8000.0) {
        cr_assert_eq(ds_launch(be, bek, t_dim(264), t_dim(128), 0, NULL, &be_hint), DS_SUCCESS);
        ds_runtime_poll(rt);
    }
    ds_vctx_synchronize(be);

    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    const ds_sim_kernel_record *l = NULL; /* LS's first kernel */
    for (size_t i = 0; i < n && !l; i++)
        if (strcmp(r[i].name, "ls") == 0)
            l = &r[i];
    int expanded_before = 0, between = 0, expanded_after = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(r[i].name, "ls") == 0) {
            cr_assert_leq(r[i].start_us - r[i].submit_us, 100.0 + 1e-6,
                          "every LS kernel waits at most one BE block (%.1f us at %.0f)",
                          r[i].start_us - r[i].submit_us, r[i].submit_us);
            continue;
        }
        if (r[i].end_us < t_ls && count_sms(&r[i]) == 132)
            expanded_before++;
        /* BE's units (100 us) fit LS's slack: BE may use LS's SMs between
         * LS kernels, but none starts on them while an LS kernel is in
         * flight (it yields at its next gate, one before every kernel) */
        if (r[i].start_us > t_ls && r[i].start_us < t_idle) {
            int beside_ls = 0;
            for (size_t j = 0; j < n; j++)
                if (strcmp(r[j].name, "ls") == 0 && r[i].start_us > r[j].submit_us + 1e-6 &&
                    r[i].start_us < r[j].end_us)
                    beside_ls = 1;
            if (beside_ls)
                cr_assert(!touches_ls_tier(&r[i]), "BE kernel at %.0f us on LS SMs while LS had work in flight",
                          r[i].start_us);
            else
                between += count_sms(&r[i]) == 132;
        }
        if (r[i].start_us > t_idle + 2000.0 + 2000.0 + 500.0 && count_sms(&r[i]) == 132)
            expanded_after++;
    }
    cr_assert_gt(expanded_before, 10, "BE used the whole GPU while LS was idle");
    cr_assert_gt(between, 5, "BE used the whole GPU between LS's kernels (%d)", between);
    cr_assert_gt(expanded_after, 3, "BE expanded again after LS's idle time");
    cr_assert_eq(count_sms(l) <= LS_SMS, 1, "LS ran on its tier (%d SMs)", count_sms(l));
    cr_assert_leq(l->start_us - l->submit_us, 100.0 + 1e-6,
                  "LS at the highest priority waited at most one BE block (%.1f us)", l->start_us - l->submit_us);
    free(r);
    ds_runtime_destroy(rt);
}

/* BE's first units are short and would fit an idle LS's slack; the rest are
 * long and never do. BE's unit counts as known only after 256 units, so BE
 * never leaves the complement: not on its first units (as it did when they
 * counted at once), and not after (its units are then known to be long). */
Test(policy, slo_aware_does_not_expand_on_bes_first_units)
{
    ds_runtime_t rt = policy_runtime("slo_aware");
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", "idle_us", "0"), DS_SUCCESS);
    CUfunction shortk = t_sim_kernel(rt, "be_short", 20.0, 0, NULL);
    CUfunction longk = t_sim_kernel(rt, "be_long", 2000.0, 0, NULL);
    t_ls_vctx(rt, 1000); /* idle: it never launches */
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 40;
    for (int i = 0; i < 200; i++) { /* 8 ms: 20 us blocks, two waves on the complement */
        cr_assert_eq(ds_launch(be, shortk, t_dim(132), t_dim(128), 0, NULL, &h), DS_SUCCESS);
        ds_runtime_poll(rt);
    }
    h.expected_us = 4000;
    for (int i = 0; i < 100; i++) {
        cr_assert_eq(ds_launch(be, longk, t_dim(132), t_dim(128), 0, NULL, &h), DS_SUCCESS);
        ds_runtime_poll(rt);
    }
    cr_assert_eq(ds_vctx_synchronize(be), DS_SUCCESS);
    ds_runtime_poll(rt);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    int whole = 0, kernels = 0;
    for (size_t i = 0; i < n; i++)
        if (!strncmp(r[i].name, "be_", 3)) {
            kernels++;
            whole += count_sms(&r[i]) == 132;
        }
    cr_assert_eq(kernels, 300);
    cr_assert_eq(whole, 0, "%d of BE's kernels ran on the whole GPU", whole);
    cr_assert_eq(t_vctx_stats(be).remaps, 0, "BE stayed on the complement");
    free(r);
    ds_runtime_destroy(rt);
}

/* ---- tpot_first ---------------------------------------------------------- */

Test(policy, tpot_first_decode_not_delayed_by_prefill)
{
    ds_runtime_t rt = policy_runtime("tpot_first");
    CUfunction pre = t_sim_kernel(rt, "prefill", 500.0, 0, NULL);
    CUfunction dec = t_sim_kernel(rt, "decode", 20.0, 0, NULL);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "prefill";
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.phase = DS_PHASE_PREFILL;
    ds_vctx_t p;
    cr_assert_eq(ds_vctx_create(rt, &a, &p), DS_SUCCESS);
    a.name = "decode";
    a.phase = DS_PHASE_DECODE;
    ds_vctx_t d;
    cr_assert_eq(ds_vctx_create(rt, &a, &d), DS_SUCCESS);
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(ds_launch(p, pre, t_dim(400), t_dim(256), 0, NULL, NULL), DS_SUCCESS);
        ds_runtime_poll(rt);
        cr_assert_eq(ds_launch(d, dec, t_dim(100), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
        ds_vctx_synchronize(d);
        ds_runtime_poll(rt);
    }
    ds_vctx_synchronize(p);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    int decodes = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(r[i].name, "decode") == 0) {
            decodes++;
            cr_assert_float_eq(r[i].start_us, r[i].submit_us, 1e-6, "decode %d waited %.1f us", decodes,
                               r[i].start_us - r[i].submit_us);
            cr_assert_eq(count_sms(&r[i]), 100, "decode on the larger tier");
        } else {
            cr_assert_eq(count_sms(&r[i]) <= 32, 1, "prefill confined (%d SMs)", count_sms(&r[i]));
        }
    }
    cr_assert_eq(decodes, 20);
    free(r);
    ds_runtime_destroy(rt);
}

/* tpot_first with a latency-sensitive prefill (its slo_us a TTFT) and decode
 * (a TPOT), each recording its requests: one prefill kernel and one decode
 * kernel, then `ttft` and `tpot` recorded `n` times, a tick after each. */
static void tp_log(ds_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)user;
    fprintf(stderr, "%s\n", msg);
}

static void tpot_requests(ds_runtime_t rt, ds_vctx_t p, ds_vctx_t d, CUfunction k, int n, double ttft, double tpot)
{
    for (int i = 0; i < n; i++) {
        cr_assert_eq(ds_launch(p, k, t_dim(8), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
        cr_assert_eq(ds_launch(d, k, t_dim(8), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
        cr_assert_eq(ds_vctx_request_record(p, ttft), DS_SUCCESS);
        cr_assert_eq(ds_vctx_request_record(d, tpot), DS_SUCCESS);
        ds_sim_sleep_until(rt, now_us(rt) + 1100.0); /* past a tick (1000 us) */
        ds_runtime_poll(rt);
        ds_vctx_synchronize(p);
        ds_vctx_synchronize(d);
    }
}

Test(policy, tpot_first_sizes_prefill_from_its_ttfts_with_tpot_first)
{
    if (getenv("T_TRACE"))
        ds_log_set_handler(tp_log, NULL, DS_LOG_INFO);
    ds_runtime_t rt = policy_runtime("tpot_first");
    CUfunction k = t_sim_kernel(rt, "k", 10.0, 0, NULL);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.name = "prefill";
    a.phase = DS_PHASE_PREFILL;
    a.slo_us = 100000;
    ds_vctx_t p, d;
    cr_assert_eq(ds_vctx_create(rt, &a, &p), DS_SUCCESS);
    a.name = "decode";
    a.phase = DS_PHASE_DECODE;
    a.slo_us = 5000;
    cr_assert_eq(ds_vctx_create(rt, &a, &d), DS_SUCCESS);
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(rt, &info), DS_SUCCESS);
#define SMS(v) info.pctx[t_vctx_stats(v).pctx].sm_count
    tpot_requests(rt, p, d, k, 1, 50000, 1000);
    /* prefill_sms 96: this pool's nearest LOW tier is 64 */
    cr_assert_eq(SMS(p), 64, "a latency-sensitive prefill starts on prefill_sms's tier (%u SMs)", SMS(p));
    cr_assert_eq(SMS(d), 68, "decode on the complement (%u)", SMS(d));
    cr_assert_eq(ds_policy_param_set(rt, "tpot_first", "prefill_sms", "32"), DS_SUCCESS); /* sizing from 32 */
    tpot_requests(rt, p, d, k, 4, 50000, 1000); /* both within: prefill stays on prefill_sms's tier */
    cr_assert_eq(SMS(p), 32, "prefill starts on 32 SMs (%u)", SMS(p));
    cr_assert_eq(SMS(d), 100, "decode on the complement (%u)", SMS(d));
    cr_assert(t_vctx_stats(p).urgent, "latency-sensitive prefill at the highest priority");
    tpot_requests(rt, p, d, k, 40, 200000, 1000); /* every TTFT late, TPOT within: prefill grows */
    cr_assert_eq(SMS(p), 64, "prefill grew to 64 SMs (%u)", SMS(p));
    cr_assert_eq(SMS(d), 68, "decode on its complement (%u)", SMS(d));
    tpot_requests(rt, p, d, k, 4, 200000, 9000); /* now TPOT clearly late too (4 of 38): TPOT first */
    cr_assert_eq(SMS(p), 32, "prefill gave decode a step back (%u)", SMS(p));
    cr_assert_eq(SMS(d), 100, "decode on its complement (%u)", SMS(d));
    tpot_requests(rt, p, d, k, 40, 200000, 1000); /* TTFT still late: prefill stays below the cap */
    cr_assert_eq(SMS(p), 32, "prefill held at the level TPOT allowed (%u)", SMS(p));
#undef SMS
    ds_vctx_destroy(p);
    ds_vctx_destroy(d);
    ds_runtime_destroy(rt);
}

/* ---- switching, windows, hooks ------------------------------------------- */

Test(policy, live_switch_loses_and_reorders_nothing)
{
    ds_runtime_t rt = policy_runtime("slo_aware");
    static const uint32_t sizes[] = {4};
    CUfunction k = t_sim_kernel(rt, "seq", 30.0, 1, sizes);
    ds_vctx_t ls = t_vctx(rt, "ls", DS_CLASS_LATENCY_SENSITIVE, 0, -1);
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    static const char *pols[] = {"shared", "static", "temporal", "slo_aware", "tpot_first", "priority", "manual"};
    for (int i = 0; i < 280; i++) {
        if (i % 20 == 0)
            cr_assert_eq(ds_runtime_set_policy(rt, pols[(i / 20) % 7]), DS_SUCCESS);
        int32_t seq = i;
        void *params[] = {&seq};
        ds_vctx_t v = i % 2 ? ls : be;
        cr_assert_eq(ds_launch(v, k, t_dim(1 + (uint32_t)i % 300), t_dim(64), 0, params, NULL), DS_SUCCESS,
                     "%s", ds_last_error_message());
        ds_runtime_poll(rt);
    }
    ds_vctx_synchronize(ls);
    ds_vctx_synchronize(be);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 280, "every launch reached the device once");
    double last_end[2] = {-1, -1};
    int32_t next[2] = {0, 1};
    for (size_t i = 0; i < n; i++) {
        int32_t seq;
        memcpy(&seq, r[i].params, 4);
        int who = seq % 2;
        cr_assert_eq(seq, next[who], "tenant %d: kernel %d arrived where %d was due", who, seq, next[who]);
        next[who] += 2;
        cr_assert_geq(r[i].start_us, last_end[who], "tenant %d: kernel %d overtook its predecessor", who, seq);
        last_end[who] = r[i].end_us;
    }
    free(r);
    ds_runtime_destroy(rt);
}

Test(policy, window_bounds_work_in_flight)
{
    ds_runtime_t rt = policy_runtime("manual");
    CUfunction k = t_sim_kernel(rt, "k", 200.0, 0, NULL);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    /* learn the kernel's duration first */
    for (int i = 0; i < 40; i++)
        ds_launch(v, k, t_dim(132), t_dim(64), 0, NULL, NULL);
    ds_vctx_synchronize(v);
    ds_runtime_poll(rt);
    ds_sim_trace_clear(rt);
    cr_assert_eq(ds_vctx_set_window(v, 1000), DS_SUCCESS);
    for (int i = 0; i < 60; i++)
        cr_assert_eq(ds_launch(v, k, t_dim(132), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(v);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 60);
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        int queued = 0; /* earlier kernels not finished when this one was submitted */
        for (size_t j = 0; j < i; j++)
            queued += r[j].end_us > r[i].submit_us + 1e-6;
        if (queued > worst)
            worst = queued;
    }
    cr_assert_leq(worst, 1000 / 200, "at most a window of work in flight (%d kernels of 200 us)", worst);
    cr_assert_geq(worst, 2, "but the window is used (%d)", worst);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_get_stats(v, &st);
    cr_assert_eq(st.window_us, 1000);
    free(r);
    ds_runtime_destroy(rt);
}

typedef struct hook_log {
    int completions, timed, ticks, congestions, creates, destroys, activations;
    double last_duration;
} hook_log;

static ds_decision hooks_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)st;
    (void)view;
    (void)ev;
    return (ds_decision){.kind = DS_DISPATCH_HERE};
}
static void hooks_completion(void *st, const ds_policy_view *view, const ds_completion *c)
{
    (void)view;
    hook_log *h = st;
    h->completions++;
    if (c->duration_us >= 0) {
        h->timed++;
        h->last_duration = c->duration_us;
    }
}
static void hooks_tick(void *st, const ds_policy_view *view, double now)
{
    (void)view;
    (void)now;
    ((hook_log *)st)->ticks++;
}
static void hooks_congestion(void *st, const ds_policy_view *view, ds_vctx_t v, double late)
{
    (void)view;
    (void)v;
    cr_assert_gt(late, 0.0);
    ((hook_log *)st)->congestions++;
}
static void hooks_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)view;
    (void)v;
    ((hook_log *)st)->creates++;
}
static void hooks_destroy(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)view;
    (void)v;
    ((hook_log *)st)->destroys++;
}
static void hooks_activate(void *st, const ds_policy_view *view)
{
    (void)view;
    ((hook_log *)st)->activations++;
}

Test(policy, hooks_see_completions_ticks_congestion_and_the_view)
{
    ds_runtime_t rt = policy_runtime("manual");
    hook_log h = {0};
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "observer";
    ops.on_launch = hooks_launch;
    ops.on_completion = hooks_completion;
    ops.on_tick = hooks_tick;
    ops.on_congestion = hooks_congestion;
    ops.on_vctx_create = hooks_create;
    ops.on_vctx_destroy = hooks_destroy;
    ops.on_activate = hooks_activate;
    ops.tick_us = 500;
    cr_assert_eq(ds_policy_register(rt, &ops, &h), DS_SUCCESS);
    cr_assert_eq(ds_runtime_set_policy(rt, "observer"), DS_SUCCESS);
    cr_assert_eq(h.activations, 1);
    CUfunction k = t_sim_kernel(rt, "k", 250.0, 0, NULL);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.slo_us = 300;
    ds_vctx_t v;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS);
    cr_assert_eq(h.creates, 1);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(ds_launch(v, k, t_dim(132), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(v);
    ds_runtime_poll(rt);
    cr_assert_geq(h.timed, 1, "an unprofiled kernel was timed");
    cr_assert_float_eq(h.last_duration, 250.0, 1e-3);
    const ds_policy_view *view = NULL;
    (void)view;
    /* now profiled: 8 launches queue 2 ms of predicted work against a 300 us SLO */
    for (int i = 0; i < 8; i++)
        ds_launch(v, k, t_dim(132), t_dim(64), 0, NULL, NULL);
    ds_runtime_poll(rt);
    cr_assert_geq(h.congestions, 1, "the LS queue predicts an SLO miss");
    for (int i = 0; i < 10; i++) {
        ds_sim_sleep_until(rt, now_us(rt) + 600.0);
        ds_runtime_poll(rt);
    }
    cr_assert_geq(h.ticks, 5);
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_get_stats(v, &st);
    cr_assert_geq(st.sampled_kernels, 1);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    cr_assert_eq(h.destroys, 1);
    ds_runtime_destroy(rt);
}

static ds_decision view_probe(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    int *ok = st;
    ds_vctx_view vv;
    *ok = ds_view_num_pctx(view) == 7 && ds_view_pctx(view, 1)->sm_count == 16 && ds_view_pctx(view, 7) == NULL &&
          ds_view_full_pctx(view) == 0 && ds_view_low_tier(view, 30) == 3 && ds_view_vctxs(view, NULL, 0) == 1 &&
          ds_view_vctx(view, ev->vctx, &vv) == DS_SUCCESS && vv.cls == DS_CLASS_LATENCY_SENSITIVE &&
          vv.slo_us == 700 && ev->is_section == (ev->function == NULL) && ds_view_runtime(view) != NULL;
    return (ds_decision){.kind = DS_DISPATCH_HERE};
}

Test(policy, view_accessors)
{
    ds_runtime_t rt = policy_runtime("manual");
    int ok = 0;
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "viewer";
    ops.on_launch = view_probe;
    cr_assert_eq(ds_policy_register(rt, &ops, &ok), DS_SUCCESS);
    cr_assert_eq(ds_runtime_set_policy(rt, "viewer"), DS_SUCCESS);
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.slo_us = 700;
    ds_vctx_t v;
    ds_vctx_create(rt, &a, &v);
    CUstream s;
    cr_assert_eq(ds_vctx_acquire_stream(v, &s), DS_SUCCESS);
    cr_assert_eq(ok, 1, "the view inside a section's decision");
    ds_vctx_release_stream(v);
    ok = 0;
    CUfunction k = t_sim_kernel(rt, "k", 5.0, 0, NULL);
    ds_launch(v, k, t_dim(1), t_dim(32), 0, NULL, NULL);
    cr_assert_eq(ok, 1, "the view inside a launch's decision");
    ds_runtime_destroy(rt);
}

Test(policy, slo_aware_keeps_be_confined_when_its_kernels_exceed_ls_slack)
{
    /* BE kernels of ~2 ms on the whole GPU against a 1 ms LS SLO: a returning
     * LS request would wait for one of them, so BE must stay confined even
     * after LS has been idle for long. */
    ds_runtime_t rt = policy_runtime("slo_aware");
    CUfunction bek = t_sim_kernel(rt, "be", 1000.0, 0, NULL);
    CUfunction lsk = t_sim_kernel(rt, "ls", 20.0, 0, NULL);
    ds_vctx_t ls = t_ls_vctx(rt, 1000);
    ds_vctx_t be = t_vctx(rt, "be", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
    h.expected_us = 2000;
    cr_assert_eq(ds_launch(be, bek, t_dim(264), t_dim(128), 0, NULL, &h), DS_SUCCESS);
    cr_assert_eq(ds_launch(ls, lsk, t_dim(64), t_dim(64), 0, NULL, NULL), DS_SUCCESS);
    ds_vctx_synchronize(ls);
    ds_runtime_poll(rt);
    double t_idle = now_us(rt);
    while (now_us(rt) < t_idle + 30000.0) {
        cr_assert_eq(ds_launch(be, bek, t_dim(264), t_dim(128), 0, NULL, &h), DS_SUCCESS);
        ds_runtime_poll(rt);
    }
    ds_vctx_synchronize(be);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    int late = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(r[i].name, "be") == 0 && r[i].start_us > t_idle + 4000.0) {
            cr_assert(!touches_ls_tier(&r[i]), "BE expanded at %.0f us with 2 ms kernels vs a 1 ms SLO",
                      r[i].start_us);
            late++;
        }
    cr_assert_gt(late, 5);
    free(r);
    ds_runtime_destroy(rt);
}

/* ------------------------------------------------------------------------ */
/* parameters                                                                */

static _Atomic int g_param_calls;
static _Atomic double g_param_last;

static void param_hook(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    (void)st;
    (void)view;
    cr_assert_eq(index, 0);
    atomic_fetch_add(&g_param_calls, 1);
    atomic_store(&g_param_last, value);
}

Test(policy, params_are_named_validated_and_seeded_from_the_config)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "slo_aware");
    cfg.ls_sms = 32; /* the old tunable seeds every parameter of that name */
    ds_runtime_t rt = t_runtime_create(&cfg);
    double x = 0;
    cr_assert_eq(ds_policy_param_get(rt, "slo_aware", "ls_sms", &x), DS_SUCCESS);
    cr_assert_eq(x, 32);
    cr_assert_eq(ds_policy_param_get(rt, "static", "ls_sms", &x), DS_SUCCESS);
    cr_assert_eq(x, 32);
    cr_assert_eq(ds_policy_param_get(rt, "slo_aware", "be_window_us", &x), DS_SUCCESS);
    cr_assert_eq(x, 2000, "unset tunables keep the parameter's default");

    t_log_capture(DS_LOG_ERROR);
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", "ls_sms", "64"), DS_SUCCESS);
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", "ls_sms", "0"), DS_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(t_log_last(), "outside"), "%s", t_log_last());
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", "ls_sms", "12.5"), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", "ls_sms", "64 SMs"), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", "ls_sms", ""), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", "nope", "1"), DS_ERR_NOT_FOUND);
    cr_assert(strstr(t_log_last(), "ls_sms"), "the message lists the parameters: %s", t_log_last());
    cr_assert_eq(ds_policy_param_set(rt, "nope", "ls_sms", "1"), DS_ERR_NOT_FOUND);
    cr_assert_eq(ds_policy_param_set(rt, "slo_aware", NULL, "1"), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_policy_param_set(NULL, "slo_aware", "ls_sms", "1"), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_policy_param_get(rt, "slo_aware", "ls_sms", NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_policy_param_get(rt, "slo_aware", "ls_sms", &x), DS_SUCCESS);
    cr_assert_eq(x, 64, "failed sets changed nothing");

    /* a policy of our own: on_param at registration and on every set */
    static const ds_policy_param params[] = {{"depth", "queue depth", 4, 1, 16, 1}};
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "with_params";
    ops.on_launch = to_pctx1;
    ops.params = params;
    ops.num_params = 1;
    ops.on_param = param_hook;
    atomic_store(&g_param_calls, 0);
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(atomic_load(&g_param_calls), 1);
    cr_assert_eq(atomic_load(&g_param_last), 4);
    cr_assert_eq(ds_policy_param_set(rt, "with_params", "depth", "0x8"), DS_SUCCESS);
    cr_assert_eq(atomic_load(&g_param_calls), 2);
    cr_assert_eq(atomic_load(&g_param_last), 8);

    /* bad declarations are refused at registration */
    static const ds_policy_param bad_range[] = {{"x", NULL, 20, 1, 16, 1}};
    static const ds_policy_param twice[] = {{"x", NULL, 1, 0, 2, 0}, {"x", NULL, 1, 0, 2, 0}};
    ops.name = "bad1";
    ops.params = bad_range;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_INVALID_ARGUMENT);
    ops.name = "bad2";
    ops.params = twice;
    ops.num_params = 2;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_INVALID_ARGUMENT);
    ds_runtime_destroy(rt);
}

/* An ops table built against the first release (no parameter fields) is
 * still accepted. */
Test(policy, ops_of_the_first_size_still_register)
{
    ds_runtime_t rt = policy_runtime("manual");
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.size = DS_POLICY_OPS_SIZE_V1;
    ops.name = "v1";
    ops.on_launch = to_pctx1;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_set_policy(rt, "v1"), DS_SUCCESS);
    ops.size = DS_POLICY_OPS_SIZE_V1 - 8;
    ops.name = "v0";
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_ERR_ABI_MISMATCH);
    ds_runtime_destroy(rt);
}

/* The actions accept the vCtx being created: a policy places it from
 * on_vctx_create, and its first stream is created there. */
static void place_on_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)st;
    uint32_t last = ds_view_num_pctx(view) - 1;
    cr_assert_eq(ds_vctx_place(v, last, 1, 500), DS_SUCCESS, "%s", ds_last_error_message());
    ds_vctx_state s = DS_VCTX_STATE_INIT;
    cr_assert_eq(ds_view_vctx_state(view, v, &s), DS_SUCCESS);
    cr_assert_eq(s.pending_pctx, last);
    cr_assert_eq(s.window_us, 500);
    cr_assert_eq(ds_view_vctxs(view, NULL, 0), 0, "not listed while being created");
}

Test(policy, on_vctx_create_places_the_new_vctx)
{
    ds_runtime_t rt = policy_runtime("manual");
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "placer";
    ops.on_launch = to_pctx1;
    ops.on_vctx_create = place_on_create;
    cr_assert_eq(ds_policy_register(rt, &ops, NULL), DS_SUCCESS);
    cr_assert_eq(ds_runtime_set_policy(rt, "placer"), DS_SUCCESS);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    uint32_t p = 0;
    cr_assert_eq(ds_vctx_get_pctx(v, &p), DS_SUCCESS);
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &info);
    cr_assert_eq(p, info.num_pctx - 1, "created where on_vctx_create placed it");
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    ds_vctx_get_stats(v, &st);
    cr_assert_eq(st.urgent, 1);
    cr_assert_eq(st.window_us, 500);
    cr_assert_eq(st.remaps, 0, "no remap: its first stream is on that pCtx");
    ds_runtime_destroy(rt);
}
