#include "common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ds_status t_sim_runtime_tiers(const ds_tier_spec *tiers, uint32_t n, ds_runtime_t *out)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cfg.tiers = tiers;
    cfg.num_tiers = n;
    cfg.policy = "manual";
    return ds_runtime_create(&cfg, out);
}

ds_runtime_config t_polled_config(const ds_sim_config *sim, const char *policy)
{
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = sim;
    cfg.policy = policy ? policy : "manual";
    cfg.scheduler_period_us = -1;
    return cfg;
}

ds_runtime_t t_runtime_create(const ds_runtime_config *cfg)
{
    ds_runtime_t rt = NULL;
    cr_assert_eq(ds_runtime_create(cfg, &rt), DS_SUCCESS, "ds_runtime_create: %s", ds_last_error_message());
    return rt;
}

ds_runtime_t t_sim_runtime(uint32_t sm_count)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    if (sm_count)
        sim.sm_count = sm_count;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cfg.policy = "manual"; /* mechanism tests place vCtxs by hand */
    ds_runtime_t rt = NULL;
    ds_status st = ds_runtime_create(&cfg, &rt);
    cr_assert_eq(st, DS_SUCCESS, "ds_runtime_create(sim): %s", ds_last_error_message());
    return rt;
}

CUfunction t_sim_kernel(ds_runtime_t rt, const char *name, double block_us, uint32_t nparams,
                        const uint32_t *param_sizes)
{
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    d.name = name;
    d.block_us = block_us;
    d.num_params = nparams;
    for (uint32_t i = 0; i < nparams; i++)
        d.param_sizes[i] = param_sizes[i];
    CUfunction f = NULL;
    cr_assert_eq(ds_sim_kernel_create(rt, &d, &f), DS_SUCCESS, "%s", ds_last_error_message());
    return f;
}

ds_vctx_t t_vctx(ds_runtime_t rt, const char *name, ds_vctx_class cls, int priority, int32_t pctx)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = name;
    a.cls = cls;
    a.priority = priority;
    a.initial_pctx = pctx;
    ds_vctx_t v = NULL;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS, "%s", ds_last_error_message());
    return v;
}

ds_vctx_t t_ls_vctx(ds_runtime_t rt, uint32_t slo_us)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "ls";
    a.cls = DS_CLASS_LATENCY_SENSITIVE;
    a.slo_us = slo_us;
    ds_vctx_t v = NULL;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS, "%s", ds_last_error_message());
    return v;
}

uint32_t t_pctx(ds_runtime_t rt, ds_tier_anchor anchor, uint32_t sm_count)
{
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(rt, &in), DS_SUCCESS);
    for (uint32_t i = 0; i < in.num_pctx; i++)
        if (in.pctx[i].anchor == anchor && (anchor == DS_ANCHOR_FULL || in.pctx[i].sm_count == sm_count))
            return i;
    cr_assert_fail("no pCtx with anchor %d and %u SMs", (int)anchor, sm_count);
    return 0;
}

ds_sim_kernel_record *t_trace(ds_runtime_t rt, size_t *count)
{
    size_t n = 0;
    size_t cap = 1 << 16;
    ds_sim_kernel_record *r = calloc(cap, sizeof *r);
    cr_assert_not_null(r);
    cr_assert_eq(ds_sim_trace_get(rt, r, cap, &n), DS_SUCCESS);
    *count = n;
    return r;
}

const ds_sim_kernel_record *t_find(const ds_sim_kernel_record *recs, size_t n, const char *name)
{
    for (size_t i = n; i-- > 0;)
        if (strcmp(recs[i].name, name) == 0)
            return &recs[i];
    cr_assert_fail("kernel '%s' not in the trace", name);
    return NULL;
}

/* The runtime logs from any thread (the scheduler's expiry beside a tenant's
 * own error), so the capture is locked; t_log_last returns a copy. */
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_last[512], g_last_copy[512];
static int g_counts[5];

static void capture(ds_log_level level, const char *msg, void *user)
{
    (void)user;
    pthread_mutex_lock(&g_log_lock);
    snprintf(g_last, sizeof g_last, "%s", msg);
    if ((int)level >= 0 && (int)level < 5)
        g_counts[level]++;
    pthread_mutex_unlock(&g_log_lock);
}

void t_log_capture(ds_log_level level)
{
    pthread_mutex_lock(&g_log_lock);
    memset(g_counts, 0, sizeof g_counts);
    g_last[0] = 0;
    pthread_mutex_unlock(&g_log_lock);
    ds_log_set_handler(capture, NULL, level);
}

const char *t_log_last(void)
{
    pthread_mutex_lock(&g_log_lock);
    memcpy(g_last_copy, g_last, sizeof g_last_copy);
    pthread_mutex_unlock(&g_log_lock);
    return g_last_copy;
}

int t_log_count(ds_log_level level)
{
    pthread_mutex_lock(&g_log_lock);
    int n = g_counts[level];
    pthread_mutex_unlock(&g_log_lock);
    return n;
}

ds_vctx_stats t_vctx_stats(ds_vctx_t v)
{
    ds_vctx_stats s = DS_VCTX_STATS_INIT;
    cr_assert_eq(ds_vctx_get_stats(v, &s), DS_SUCCESS, "%s", ds_last_error_message());
    return s;
}

uint32_t t_popcount(const uint64_t *mask)
{
    uint32_t n = 0;
    for (int i = 0; i < DS_MAX_SMS / 64; i++)
        n += (uint32_t)__builtin_popcountll(mask[i]);
    return n;
}

void t_run_pair(void *(*fn)(void *), void *a, void *b)
{
    pthread_t ta, tb;
    cr_assert_eq(pthread_create(&ta, NULL, fn, a), 0);
    cr_assert_eq(pthread_create(&tb, NULL, fn, b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
}

double t_sim_now(ds_runtime_t rt)
{
    double t = 0;
    ds_sim_now_us(rt, &t);
    return t;
}
