/*
 * colocate: the main job of libdetshare (W1 in docs/benchmarks.md). A latency-sensitive
 * (LS) tenant serving decode-like requests beside a best-effort (BE) training
 * loop, each on its own thread and vCtx, measured under several
 * configurations in one run so that the ratios compare like with like:
 *
 *   ls_alone   LS only, whole GPU               (the LS baseline)
 *   be_alone   BE only, whole GPU, same window  (the BE baseline)
 * and LS beside BE under each of the library's policies (detshare/policy.h),
 * made the runtime's active policy with ds_runtime_set_policy; the policy
 * places the vCtxs (nothing here picks a pCtx or a stream priority):
 *   shared     both on the whole GPU, same stream priority (MPS-like)
 *   priority   both on the whole GPU, LS at the highest stream priority
 *   static     LS on the LOW tier nearest --ls-sms SMs, BE on its complement
 *              (a fixed disjoint split, MIG-like)
 *   temporal   one tenant on the GPU at a time, switched at kernel boundaries
 *   slo_aware  (the library's default) LS on the --ls-sms tier at the highest
 *              priority; BE yields while LS's SLO is at risk (its gate
 *              closes, so its queued work stops at the next kernel boundary,
 *              and it is confined to the complement), on the whole GPU while
 *              LS is idle
 *   slo_aware_nogates  the same bounding BE with its window alone (no
 *              gates): what the gates add
 *   tpot_first LS as decode (attr.phase), BE as prefill on a tier of
 *              --ls-sms / 2 SMs
 * The alone baselines run under "manual" (the runtime moves nothing; both
 * tenants are created on the whole GPU).
 *
 * The LS vCtx carries an SLO (ds_vctx_attr.slo_us) in every configuration:
 * SLO_FACTOR times its mean service time alone, or --ls-slo-us.
 *
 * LS requests arrive as a seeded Poisson process whose rate keeps LS busy
 * --ls-load of the time when alone (rate = load / mean service time, measured
 * first); the same arrival sequence is replayed in every configuration.
 *
 * Output: a JSON file (--out) shaped as docs/benchmarks.md (W1) says, and a table, printed
 * last. With --sweep L1,L2,... the co-located configurations (and ls_alone,
 * the LS baseline of each load) run at each LS load with --requests requests
 * per point (default SWEEP_REQUESTS_CUDA on a GPU), be_alone once, and the
 * file holds `sweep: {load: {config: {ls_p99_norm, be_tput_norm, ...}}}`
 * instead of `configs` (tools/plot_results.py draws it). Without a GPU it runs on the simulated device and says so. Besides
 * docs/benchmarks.md's figures each configuration records its "policy"; where each
 * tenant ran (ls_pctx / be_pctx: the pCtx most of its requests / steps were
 * bound to, *_pctx_share: the share per pCtx, *_urgent_share: on the
 * highest-priority stream; sampled after each submission in the window);
 * ls_over_slo_frac; and from ds_vctx_stats at the end of the configuration
 * (warm-up included) ls_remaps, ls_holds, be_remaps, be_holds, be_gates,
 * be_gate_closes, be_gate_closed_ms, be_gate_holds. The library
 * counts a hold per wait of its hold loop, not per held launch.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>

#include "bench.h"
#include "run.h"
#include "workload.h"

#ifndef COLOCATE_SOURCE_DIR
#define COLOCATE_SOURCE_DIR "."
#endif

#define CALIBRATION_WARMUP 50
#define CALIBRATION_SAMPLES 200
#define LS_WARMUP_PER_CONFIG 10
#define DEFAULT_REQUESTS_CUDA 2000
#define DEFAULT_REQUESTS_SIM 300 /* keeps the simulated run well under 30 s on 2 cores */
/* SMs of the LS tier (ds_runtime_config.ls_sms; the library's own default).
 * 64 rather than 32: on the simulated device LS alone on 32 SMs already
 * takes longer than its SLO, and slo_aware there only throttles BE below
 * `static`; --ls-sms 32 gives the narrower split. */
#define DEFAULT_LS_SMS 64
#define SLO_FACTOR 3.0 /* default LS SLO: this many times its mean service time alone */
/* --sweep: LS requests per load (the minimum for a p99 on a GPU) and
 * the longest be_alone window (be_alone runs once, with the first point's
 * window up to this). */
#define SWEEP_REQUESTS_CUDA 1000
#define SWEEP_REQUESTS_SIM 80
#define SWEEP_MAX_LOADS 16
#define SWEEP_BE_ALONE_MAX_US 1.5e6

typedef struct options {
    ds_device_kind device;
    uint64_t seed;
    const char *out;
    double ls_load;
    uint32_t ls_sms;
    uint32_t ls_slo_us; /* 0: SLO_FACTOR x the measured service time */
    size_t requests;    /* 0: the device's default */
    const char *configs;
    double sweep[SWEEP_MAX_LOADS]; /* --sweep loads, ascending as given */
    size_t sweep_n;                /* 0: no sweep (one load, --ls-load) */
} options;

/* ------------------------------------------------------------------------ */
/* configurations                                                            */

enum { TENANT_LS = 1, TENANT_BE = 2 };

typedef struct colo_config {
    const char *name;
    unsigned tenants;
    const char *policy; /* made active for this configuration */
    const char *what;
} colo_config;

static const colo_config CONFIGS[] = {
    {"ls_alone", TENANT_LS, "manual", "LS alone, whole GPU"},
    {"be_alone", TENANT_BE, "manual", "BE alone, whole GPU"},
    {"shared", TENANT_LS | TENANT_BE, "shared", "policy shared: whole GPU, same stream priority (MPS-like)"},
    {"priority", TENANT_LS | TENANT_BE, "priority", "policy priority: whole GPU, LS at the highest stream priority"},
    {"static", TENANT_LS | TENANT_BE, "static",
     "policy static: LS on the LOW tier nearest --ls-sms, BE on its complement (MIG-like)"},
    {"temporal", TENANT_LS | TENANT_BE, "temporal", "policy temporal: one tenant on the GPU at a time"},
    {"slo_aware", TENANT_LS | TENANT_BE, "slo_aware",
     "policy slo_aware (default): LS on the --ls-sms tier, urgent; BE yields (gate closed, confined to the "
     "complement) while the LS SLO is at risk"},
    {"slo_aware_nogates", TENANT_LS | TENANT_BE, "slo_aware_nogates",
     "policy slo_aware_nogates: slo_aware bounding BE with its window alone, no gates"},
    {"tpot_first", TENANT_LS | TENANT_BE, "tpot_first",
     "policy tpot_first: LS as decode on the larger tier, urgent; BE as prefill on --ls-sms/2 SMs"},
};
#define NUM_CONFIGS (sizeof CONFIGS / sizeof CONFIGS[0])
enum { CONFIG_LS_ALONE = 0, CONFIG_BE_ALONE = 1 };

static void plan_defaults(colo_plan *plan, const colo_config *c, uint32_t ls_slo_us)
{
    plan->run_ls = (c->tenants & TENANT_LS) != 0;
    plan->run_be = (c->tenants & TENANT_BE) != 0;
    plan->policy = c->policy;
    plan->ls = (ds_vctx_attr)DS_VCTX_ATTR_INIT;
    plan->ls.name = "ls";
    plan->ls.cls = DS_CLASS_LATENCY_SENSITIVE;
    plan->ls.slo_us = ls_slo_us;
    /* tpot_first would treat an LS vCtx without a phase as decode anyway;
     * say so. BE stays without a phase (prefill-like to tpot_first). */
    if (!strcmp(c->policy, "tpot_first"))
        plan->ls.phase = DS_PHASE_DECODE;
    plan->be = (ds_vctx_attr)DS_VCTX_ATTR_INIT;
    plan->be.name = "be";
    plan->be.cls = DS_CLASS_BEST_EFFORT;
}

/* ------------------------------------------------------------------------ */
/* command line                                                              */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: colocate [options]\n"
            "  --device cuda|sim   device (default cuda; without a GPU: the simulator)\n"
            "  --seed N            seed of the LS arrival process (default 1)\n"
            "  --out FILE          write the JSON result there (W1 in docs/benchmarks.md)\n"
            "  --ls-load X         LS busy fraction when alone, 0 < X < 1 (default 0.20)\n"
            "  --ls-sms N          SMs of the LS tier the policies use (ds_runtime_config.ls_sms,\n"
            "                      nearest LOW pCtx; default %d)\n"
            "  --ls-slo-us N       LS SLO in us (ds_vctx_attr.slo_us; default %.0fx its service time alone)\n"
            "  --requests N        LS requests per configuration (default %d on a GPU, %d simulated)\n"
            "  --configs a,b,...   subset of the configurations; ls_alone and be_alone are added\n"
            "                      when a co-located one needs them for its ratios\n"
            "  --sweep L1,L2,...   run the configurations at each LS load (0 < L < 1), --requests\n"
            "                      per load (default %d on a GPU, %d simulated); --out gets\n"
            "                      sweep: {load: {config: {ls_p99_norm, be_tput_norm, ...}}}\n"
            "  --help              this text\n"
            "configurations:\n",
            DEFAULT_LS_SMS, SLO_FACTOR, DEFAULT_REQUESTS_CUDA, DEFAULT_REQUESTS_SIM, SWEEP_REQUESTS_CUDA,
            SWEEP_REQUESTS_SIM);
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        fprintf(f, "  %-17s %s\n", CONFIGS[i].name, CONFIGS[i].what);
}

static int parse_u64(const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    return bench_parse_u64("colocate", flag, s, min, max, out);
}

static int parse_load(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0.0 && v < 1.0)) {
        fprintf(stderr, "colocate: --ls-load: '%s' is not a number strictly between 0 and 1\n", s);
        return -1;
    }
    *out = v;
    return 0;
}

/* --sweep: comma-separated loads, each strictly between 0 and 1. */
static int parse_sweep(const char *s, options *o)
{
    o->sweep_n = 0;
    for (const char *p = s; *p;) {
        size_t len = strcspn(p, ",");
        char buf[32];
        char *end;
        if (len == 0 || len >= sizeof buf || o->sweep_n == SWEEP_MAX_LOADS) {
            fprintf(stderr, "colocate: --sweep: '%s' is not a list of up to %d loads\n", s, SWEEP_MAX_LOADS);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        errno = 0;
        double v = strtod(buf, &end);
        if (errno || end == buf || *end || !(v > 0.0 && v < 1.0)) {
            fprintf(stderr, "colocate: --sweep: '%s' is not a number strictly between 0 and 1\n", buf);
            return -1;
        }
        o->sweep[o->sweep_n++] = v;
        p += len + (p[len] == ',');
    }
    if (!o->sweep_n) {
        fprintf(stderr, "colocate: --sweep: empty list\n");
        return -1;
    }
    return 0;
}

/* One option; *i is advanced past its value. 1 for --help, -1 on error. */
static int parse_option(int argc, char **argv, int *i, options *o)
{
    static const char *const with_value[] = {"--device", "--seed",     "--out",      "--ls-load",
                                             "--ls-sms", "--ls-slo-us", "--requests", "--configs",
                                             "--sweep"};
    const char *flag = argv[*i];
    if (!strcmp(flag, "--help") || !strcmp(flag, "-h"))
        return 1;
    size_t known = 0;
    while (known < sizeof with_value / sizeof with_value[0] && strcmp(flag, with_value[known]))
        known++;
    if (known == sizeof with_value / sizeof with_value[0]) {
        fprintf(stderr, "colocate: unknown option %s (see --help)\n", flag);
        return -1;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "colocate: %s needs a value (see --help)\n", flag);
        return -1;
    }
    const char *val = argv[++*i];
    uint64_t u;
    if (!strcmp(flag, "--device")) {
        if (strcmp(val, "cuda") && strcmp(val, "sim")) {
            fprintf(stderr, "colocate: --device: '%s' is neither cuda nor sim\n", val);
            return -1;
        }
        o->device = !strcmp(val, "sim") ? DS_DEVICE_SIM : DS_DEVICE_CUDA;
    } else if (!strcmp(flag, "--seed")) {
        return parse_u64(flag, val, 0, UINT64_MAX, &o->seed);
    } else if (!strcmp(flag, "--out")) {
        o->out = val;
    } else if (!strcmp(flag, "--ls-load")) {
        return parse_load(val, &o->ls_load);
    } else if (!strcmp(flag, "--ls-sms")) {
        if (parse_u64(flag, val, 1, DS_MAX_SMS, &u))
            return -1;
        o->ls_sms = (uint32_t)u;
    } else if (!strcmp(flag, "--ls-slo-us")) {
        if (parse_u64(flag, val, 1, UINT32_MAX, &u))
            return -1;
        o->ls_slo_us = (uint32_t)u;
    } else if (!strcmp(flag, "--requests")) {
        if (parse_u64(flag, val, 1, 100000000, &u))
            return -1;
        o->requests = (size_t)u;
    } else if (!strcmp(flag, "--sweep")) {
        return parse_sweep(val, o);
    } else { /* --configs */
        o->configs = val;
    }
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){DS_DEVICE_CUDA, 1, NULL, 0.20, DEFAULT_LS_SMS, 0, 0, NULL, {0}, 0};
    for (int i = 1; i < argc; i++) {
        /* --flag=value is accepted too */
        char *eq = strncmp(argv[i], "--", 2) == 0 ? strchr(argv[i], '=') : NULL;
        char *pair[2];
        int rc;
        if (eq) {
            *eq = '\0';
            pair[0] = argv[i];
            pair[1] = eq + 1;
            int j = 0;
            rc = parse_option(2, pair, &j, o);
            *eq = '=';
        } else {
            rc = parse_option(argc, argv, &i, o);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* Marks the configurations named in list (all when NULL), then the baselines
 * that the selected co-located ones are normalized by. */
static int select_configs(const char *list, int selected[NUM_CONFIGS])
{
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        selected[i] = list == NULL;
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        size_t i = 0;
        while (i < NUM_CONFIGS && !(strlen(CONFIGS[i].name) == len && !strncmp(CONFIGS[i].name, p, len)))
            i++;
        if (i == NUM_CONFIGS) {
            fprintf(stderr, "colocate: --configs: unknown configuration '%.*s' (see --help)\n", (int)len, p);
            return -1;
        }
        selected[i] = 1;
        p += len + (p[len] == ',');
    }
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        if (selected[i] && CONFIGS[i].tenants == (TENANT_LS | TENANT_BE))
            selected[CONFIG_LS_ALONE] = selected[CONFIG_BE_ALONE] = 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* report                                                                    */

typedef struct report {
    const options *opt;
    const ds_runtime_info *info;
    int simulated;
    double service_us, rate_per_s;
    uint32_t slo_us;
    size_t requests;
    const int *selected;
    const colo_result *results;
    uint64_t reference_fingerprint;
    int reference_ok;
    char command[4096];
} report;

static double ls_p99_norm(const report *r, size_t i)
{
    return r->results[i].ls_latency_us.p99 / r->results[CONFIG_LS_ALONE].ls_latency_us.p99;
}

static double be_tput_norm(const report *r, size_t i)
{
    return r->results[i].be_steps_per_s / r->results[CONFIG_BE_ALONE].be_steps_per_s;
}

/* Where a tenant ran: the pCtx most samples were bound to, the share of
 * samples on each pCtx visited, and the share on the highest-priority stream. */
static void json_placement(bench_json *j, const char *prefix, const report *r, uint32_t pctx,
                           const colo_placement *p)
{
    char key[64];
    snprintf(key, sizeof key, "%s_pctx", prefix);
    bench_json_int(j, key, pctx);
    snprintf(key, sizeof key, "%s_sms", prefix);
    bench_json_int(j, key, r->info->pctx[pctx].sm_count);
    snprintf(key, sizeof key, "%s_pctx_share", prefix);
    bench_json_object(j, key);
    for (uint32_t k = 0; k < r->info->num_pctx && k < DS_MAX_PCTX; k++)
        if (p->pctx[k]) {
            char idx[16];
            snprintf(idx, sizeof idx, "%u", k);
            bench_json_number(j, idx, (double)p->pctx[k] / (double)p->samples);
        }
    bench_json_end(j);
    snprintf(key, sizeof key, "%s_urgent_share", prefix);
    bench_json_number(j, key, p->samples ? (double)p->urgent / (double)p->samples : NAN);
}

static void json_ls(bench_json *j, const report *r, size_t i)
{
    const colo_result *c = &r->results[i];
    json_placement(j, "ls", r, c->ls_pctx, &c->ls_place);
    bench_json_int(j, "ls_priority", c->ls_priority);
    bench_json_int(j, "ls_requests", (long long)c->ls_latency_us.n);
    bench_json_number(j, "ls_p50_us", c->ls_latency_us.p50);
    bench_json_number(j, "ls_p99_us", c->ls_latency_us.p99);
    bench_json_number(j, "ls_p99_norm", ls_p99_norm(r, i));
    bench_json_number(j, "ls_mean_us", c->ls_latency_us.mean);
    bench_json_number(j, "ls_max_us", c->ls_latency_us.max);
    bench_json_number(j, "ls_service_mean_us", c->ls_service_mean_us);
    /* Above 1 the LS queue grows for the whole run, and its percentiles
     * depend on --requests rather than on the configuration alone. */
    bench_json_number(j, "ls_utilization", c->ls_service_mean_us * 1e-6 * r->rate_per_s);
    bench_json_number(j, "ls_over_slo_frac", c->ls_over_slo_frac);
    bench_json_uint(j, "ls_remaps", c->ls_stats.remaps);
    bench_json_uint(j, "ls_holds", c->ls_stats.holds);
    if (c->ls_fingerprint_ok && r->reference_ok)
        bench_json_bool(j, "ls_output_bitwise_equal", c->ls_fingerprint == r->reference_fingerprint);
    else
        bench_json_null(j, "ls_output_bitwise_equal");
}

static void json_be(bench_json *j, const report *r, size_t i)
{
    const colo_result *c = &r->results[i];
    json_placement(j, "be", r, c->be_pctx, &c->be_place);
    bench_json_int(j, "be_priority", c->be_priority);
    bench_json_number(j, "be_steps", c->be_steps);
    bench_json_number(j, "be_steps_per_s", c->be_steps_per_s);
    bench_json_number(j, "be_tput_norm", be_tput_norm(r, i));
    bench_json_uint(j, "be_remaps", c->be_stats.remaps);
    bench_json_uint(j, "be_holds", c->be_stats.holds);
    bench_json_uint(j, "be_gates", c->be_stats.gates);
    bench_json_uint(j, "be_gate_closes", c->be_stats.gate_closes);
    bench_json_number(j, "be_gate_closed_ms", c->be_stats.gate_closed_us / 1e3);
    bench_json_uint(j, "be_gate_holds", c->be_stats.gate_holds);
}

static void json_header(bench_json *j, const report *r)
{
    char commit[128], date[64], driver[128];
    bench_commit(COLOCATE_SOURCE_DIR, commit, sizeof commit);
    bench_date_utc(date, sizeof date);
    bench_driver_string(r->info->driver_version, driver, sizeof driver);
    bench_json_string(j, "benchmark", "colocate");
    bench_json_string(j, "device", r->info->device_name);
    bench_json_string(j, "driver", driver);
    bench_json_int(j, "sms", r->info->sm_count);
    bench_json_string(j, "commit", commit);
    bench_json_string(j, "command", r->command);
    bench_json_string(j, "date", date);
    bench_json_bool(j, "simulated", r->simulated);
    bench_json_number(j, "ls_load", r->opt->ls_load);
    bench_json_number(j, "ls_service_us", r->service_us);
    bench_json_number(j, "ls_rate_per_s", r->rate_per_s);
    bench_json_int(j, "ls_slo_us", r->slo_us);
    char from[64];
    snprintf(from, sizeof from, "%gx ls_service_us", SLO_FACTOR);
    bench_json_string(j, "ls_slo_from", r->opt->ls_slo_us ? "--ls-slo-us" : from);
    bench_json_int(j, "requests", (long long)r->requests);
    bench_json_uint(j, "seed", r->opt->seed);
    bench_json_int(j, "ls_sms_requested", r->opt->ls_sms);
}

static int write_json(const report *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "colocate: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    bench_json j;
    bench_json_begin(&j, f);
    json_header(&j, r);
    bench_json_object(&j, "configs");
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        if (!r->selected[i])
            continue;
        bench_json_object(&j, CONFIGS[i].name);
        bench_json_string(&j, "description", CONFIGS[i].what);
        bench_json_string(&j, "policy", CONFIGS[i].policy);
        if (r->results[i].has_ls)
            json_ls(&j, r, i);
        if (r->results[i].has_be)
            json_be(&j, r, i);
        bench_json_number(&j, "window_s", r->results[i].window_s);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    int rc = bench_json_finish(&j);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "colocate: error writing %s\n", path);
        return -1;
    }
    return 0;
}

/* "3/32 83%": the pCtx run on most, its SMs, and its share of the samples
 * (left out when it is all of them). */
static void print_placement(char *buf, size_t cap, const report *r, int has, uint32_t pctx,
                            const colo_placement *p)
{
    if (!has) {
        snprintf(buf, cap, "-");
        return;
    }
    double share = p->samples ? (double)p->pctx[pctx] / (double)p->samples : 1.0;
    if (share > 0.995)
        snprintf(buf, cap, "%u/%u", pctx, r->info->pctx[pctx].sm_count);
    else
        snprintf(buf, cap, "%u/%u %.0f%%", pctx, r->info->pctx[pctx].sm_count, 100.0 * share);
}

/* One line per co-located configuration: what its two numbers mean against
 * the others of this run. `a` dominates `b` when it is at least as good on
 * both (LS tail and BE throughput) and better on one. */
static int dominates(const report *r, size_t a, size_t b)
{
    double pa = ls_p99_norm(r, a), pb = ls_p99_norm(r, b), ba = be_tput_norm(r, a), bb = be_tput_norm(r, b);
    return pa <= pb && ba >= bb && (pa < pb || ba > bb);
}

static void print_verdicts(const report *r)
{
    if (!r->selected[CONFIG_LS_ALONE] || !r->selected[CONFIG_BE_ALONE])
        return;
    printf("\nWhat the numbers say (one run: tails move between runs, see docs/benchmarks.md):\n");
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        if (!r->selected[i] || CONFIGS[i].tenants != (TENANT_LS | TENANT_BE))
            continue;
        printf("  %-17s LS p99 %.2fx alone, %.1f%% over the SLO; BE at %.0f%% of alone; ", CONFIGS[i].name,
               ls_p99_norm(r, i), 100.0 * r->results[i].ls_over_slo_frac, 100.0 * be_tput_norm(r, i));
        int n = 0;
        for (size_t j = 0; j < NUM_CONFIGS; j++) {
            if (j == i || !r->selected[j] || CONFIGS[j].tenants != (TENANT_LS | TENANT_BE) || !dominates(r, j, i))
                continue;
            printf("%s%s", n++ ? ", " : "beaten on both by ", CONFIGS[j].name);
        }
        printf("%s\n", n ? "" : "no other configuration is better on both");
    }
}

static void print_table(const report *r)
{
    printf("\n%-17s %-11s %-11s %10s %10s %8s %7s %10s %8s %6s %6s %8s\n", "config", "LS pCtx/SMs",
           "BE pCtx/SMs", "ls_p50_us", "ls_p99_us", "p99_norm", ">SLO", "be_steps/s", "be_norm", "ls_rm",
           "be_rm", "be_holds");
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        if (!r->selected[i])
            continue;
        const colo_result *c = &r->results[i];
        char ls[32], be[32];
        print_placement(ls, sizeof ls, r, c->has_ls, c->ls_pctx, &c->ls_place);
        print_placement(be, sizeof be, r, c->has_be, c->be_pctx, &c->be_place);
        printf("%-17s %-11s %-11s", CONFIGS[i].name, ls, be);
        if (c->has_ls)
            printf(" %10.1f %10.1f %8.2f %6.1f%%", c->ls_latency_us.p50, c->ls_latency_us.p99, ls_p99_norm(r, i),
                   100.0 * c->ls_over_slo_frac);
        else
            printf(" %10s %10s %8s %7s", "-", "-", "-", "-");
        if (c->has_be)
            printf(" %10.1f %8.3f", c->be_steps_per_s, be_tput_norm(r, i));
        else
            printf(" %10s %8s", "-", "-");
        char lr[24] = "-", br[24] = "-", bh[24] = "-";
        if (c->has_ls)
            snprintf(lr, sizeof lr, "%llu", (unsigned long long)c->ls_stats.remaps);
        if (c->has_be) {
            snprintf(br, sizeof br, "%llu", (unsigned long long)c->be_stats.remaps);
            snprintf(bh, sizeof bh, "%llu", (unsigned long long)c->be_stats.holds);
        }
        printf(" %6s %6s %8s\n", lr, br, bh);
    }
    printf("LS load %.2f: %zu requests at %.1f/s, %.1f us each alone, SLO %u us; ls_sms %u%s\n", r->opt->ls_load,
           r->requests, r->rate_per_s, r->service_us, r->slo_us, r->opt->ls_sms,
           r->simulated ? "  [SIMULATED DEVICE]" : "");
    printf("\n"
           "LS/BE pCtx/SMs  pCtx each tenant was bound to most of the time / its SMs (and the share of\n"
           "                the time, when not always)\n"
           "ls_p50_us/p99   LS request latency, arrival to completion: median, 99th percentile (us)\n"
           "p99_norm        ls_p99 / ls_alone's ls_p99: 1.00 = no interference, lower is better\n"
           ">SLO            share of LS requests slower than the SLO\n"
           "be_steps/s      BE training steps per second; be_norm = / be_alone's: 1.000 = full speed\n"
           "ls_rm, be_rm    remaps of each vCtx; be_holds: BE launches the policy held\n"
           "Best possible: p99_norm 1.00 with be_norm %.2f (BE keeps all the time LS leaves idle).\n",
           1.0 - r->opt->ls_load);
    print_verdicts(r);
}

/* ------------------------------------------------------------------------ */
/* main flow                                                                 */

static int open_workload(ds_runtime_t rt, int simulated, workload **w)
{
    return simulated ? workload_sim_create(rt, w) : workload_cuda_create(rt, 0, w);
}

static void print_progress(const char *name, const colo_result *c)
{
    printf("%-17s done:", name);
    if (c->has_ls)
        printf(" LS p50 %.1f us, p99 %.1f us, max %.1f us, %llu remaps;", c->ls_latency_us.p50,
               c->ls_latency_us.p99, c->ls_latency_us.max, (unsigned long long)c->ls_stats.remaps);
    if (c->has_be)
        printf(" BE %.1f steps/s, %llu remaps, %llu holds;", c->be_steps_per_s,
               (unsigned long long)c->be_stats.remaps, (unsigned long long)c->be_stats.holds);
    printf(" window %.2f s\n", c->window_s);
    fflush(stdout);
}

static int run_configs(const colo_env *env, const report *r, const int *selected, colo_result *results)
{
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        if (!selected[i])
            continue;
        colo_plan plan;
        plan_defaults(&plan, &CONFIGS[i], r->slo_us);
        if (colo_run(env, &plan, &results[i])) {
            fprintf(stderr, "colocate: configuration %s failed\n", CONFIGS[i].name);
            return -1;
        }
        print_progress(CONFIGS[i].name, &results[i]);
    }
    return 0;
}

/* Measures the LS service time alone on the whole GPU (policy "manual") and
 * sets the SLO from it. */
static int calibrate_ls(colo_env *env, report *r)
{
    colo_plan alone;
    plan_defaults(&alone, &CONFIGS[CONFIG_LS_ALONE], 0);
    BENCH_DS_CHECK(ds_runtime_set_policy(env->rt, alone.policy));
    if (colo_calibrate(env, &alone.ls, CALIBRATION_WARMUP, CALIBRATION_SAMPLES, &r->service_us,
                       &r->reference_fingerprint, &r->reference_ok))
        return -1;
    double slo = r->opt->ls_slo_us ? (double)r->opt->ls_slo_us : SLO_FACTOR * r->service_us;
    r->slo_us = slo >= 1.0 ? (uint32_t)(slo + 0.5) : 1u;
    return 0;
}

/* The arrival schedule of r->requests requests for LS load `load` (the same
 * seed at every load: the sequences differ only by their time scale). */
static int draw_arrivals(colo_env *env, report *r, double load, double **arrivals)
{
    r->rate_per_s = load / (r->service_us * 1e-6);
    *arrivals = malloc(r->requests * sizeof **arrivals);
    if (!*arrivals) {
        fprintf(stderr, "colocate: out of memory for %zu arrivals\n", r->requests);
        return -1;
    }
    bench_poisson_arrivals(r->opt->seed, r->rate_per_s, r->requests, *arrivals);
    env->arrival_us = *arrivals;
    env->requests = r->requests;
    env->window_us = (*arrivals)[r->requests - 1];
    return 0;
}

/* Calibration, then the arrival schedule of --ls-load. */
static int make_schedule(colo_env *env, report *r, double **arrivals)
{
    if (calibrate_ls(env, r) || draw_arrivals(env, r, r->opt->ls_load, arrivals))
        return -1;
    printf("LS service alone %.1f us -> %.1f requests/s for load %.2f; window %.2f s per configuration\n",
           r->service_us, r->rate_per_s, r->opt->ls_load, env->window_us / 1e6);
    if (r->opt->ls_slo_us)
        printf("LS SLO (ds_vctx_attr.slo_us): %u us (--ls-slo-us)\n", r->slo_us);
    else
        printf("LS SLO (ds_vctx_attr.slo_us): %u us (%gx the service time alone)\n", r->slo_us, SLO_FACTOR);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* --sweep                                                                   */

typedef struct sweep_point {
    double load, rate_per_s, window_s;
    colo_result results[NUM_CONFIGS];
} sweep_point;

static double sweep_p99_norm(const sweep_point *pt, size_t i)
{
    return pt->results[i].ls_latency_us.p99 / pt->results[CONFIG_LS_ALONE].ls_latency_us.p99;
}

static double sweep_be_norm(const sweep_point *pt, size_t i, double be_alone)
{
    return pt->results[i].be_steps_per_s / be_alone;
}

static int write_sweep_json(const report *r, const sweep_point *pts, size_t n, const colo_result *be_alone,
                            const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "colocate: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    char commit[128], date[64], driver[128], from[64], key[32];
    bench_commit(COLOCATE_SOURCE_DIR, commit, sizeof commit);
    bench_date_utc(date, sizeof date);
    bench_driver_string(r->info->driver_version, driver, sizeof driver);
    bench_json j;
    bench_json_begin(&j, f);
    bench_json_string(&j, "benchmark", "colocate_sweep");
    bench_json_string(&j, "device", r->info->device_name);
    bench_json_string(&j, "driver", driver);
    bench_json_int(&j, "sms", r->info->sm_count);
    bench_json_string(&j, "commit", commit);
    bench_json_string(&j, "command", r->command);
    bench_json_string(&j, "date", date);
    bench_json_bool(&j, "simulated", r->simulated);
    bench_json_number(&j, "ls_service_us", r->service_us);
    bench_json_int(&j, "ls_slo_us", r->slo_us);
    snprintf(from, sizeof from, "%gx ls_service_us", SLO_FACTOR);
    bench_json_string(&j, "ls_slo_from", r->opt->ls_slo_us ? "--ls-slo-us" : from);
    bench_json_int(&j, "requests_per_load", (long long)r->requests);
    bench_json_uint(&j, "seed", r->opt->seed);
    bench_json_int(&j, "ls_sms_requested", r->opt->ls_sms);
    bench_json_number(&j, "be_alone_steps_per_s", be_alone->be_steps_per_s);
    bench_json_number(&j, "be_alone_window_s", be_alone->window_s);
    bench_json_string(&j, "normalization",
                      "ls_p99_norm: over ls_alone's p99 at the same load; be_tput_norm: over be_alone");
    bench_json_object(&j, "points");
    for (size_t k = 0; k < n; k++) {
        const sweep_point *pt = &pts[k];
        snprintf(key, sizeof key, "%.2f", pt->load);
        bench_json_object(&j, key);
        bench_json_number(&j, "ls_rate_per_s", pt->rate_per_s);
        bench_json_number(&j, "window_s", pt->window_s);
        bench_json_number(&j, "ls_alone_p50_us", pt->results[CONFIG_LS_ALONE].ls_latency_us.p50);
        bench_json_number(&j, "ls_alone_p99_us", pt->results[CONFIG_LS_ALONE].ls_latency_us.p99);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    bench_json_object(&j, "sweep");
    for (size_t k = 0; k < n; k++) {
        const sweep_point *pt = &pts[k];
        snprintf(key, sizeof key, "%.2f", pt->load);
        bench_json_object(&j, key);
        for (size_t i = 0; i < NUM_CONFIGS; i++) {
            const colo_result *c = &pt->results[i];
            if (!r->selected[i] || i == CONFIG_BE_ALONE)
                continue;
            bench_json_object(&j, CONFIGS[i].name);
            bench_json_string(&j, "policy", CONFIGS[i].policy);
            bench_json_number(&j, "ls_p99_norm", sweep_p99_norm(pt, i));
            bench_json_number(&j, "be_tput_norm", c->has_be ? sweep_be_norm(pt, i, be_alone->be_steps_per_s) : NAN);
            bench_json_number(&j, "ls_p50_us", c->ls_latency_us.p50);
            bench_json_number(&j, "ls_p99_us", c->ls_latency_us.p99);
            bench_json_number(&j, "ls_utilization", c->ls_service_mean_us * 1e-6 * pt->rate_per_s);
            bench_json_number(&j, "ls_over_slo_frac", c->ls_over_slo_frac);
            if (c->has_be)
                bench_json_number(&j, "be_steps_per_s", c->be_steps_per_s);
            bench_json_end(&j);
        }
        bench_json_end(&j);
    }
    bench_json_end(&j);
    int rc = bench_json_finish(&j);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "colocate: error writing %s\n", path);
        return -1;
    }
    return 0;
}

static void print_sweep_table(const report *r, const sweep_point *pts, size_t n, double be_alone)
{
    printf("\nls_p99_norm / be_tput_norm per LS load (ls_alone p99 of the same load = 1)\n%-6s", "load");
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        if (r->selected[i] && CONFIGS[i].tenants == (TENANT_LS | TENANT_BE))
            printf(" %15s", CONFIGS[i].name);
    printf("\n");
    for (size_t k = 0; k < n; k++) {
        printf("%-6.2f", pts[k].load);
        for (size_t i = 0; i < NUM_CONFIGS; i++) {
            if (!r->selected[i] || CONFIGS[i].tenants != (TENANT_LS | TENANT_BE))
                continue;
            char cell[48];
            snprintf(cell, sizeof cell, "%.2f/%.3f", sweep_p99_norm(&pts[k], i),
                     sweep_be_norm(&pts[k], i, be_alone));
            printf(" %15s", cell);
        }
        printf("\n");
    }
    printf("%zu requests per load, LS %.1f us alone, SLO %u us, BE alone %.1f steps/s; ls_sms %u%s\n",
           r->requests, r->service_us, r->slo_us, be_alone, r->opt->ls_sms,
           r->simulated ? "  [SIMULATED DEVICE]" : "");
}

/* Calibrates once, runs be_alone once, then at each load ls_alone and the
 * selected co-located configurations. */
static int run_sweep(const options *o, const int *selected, report *r, colo_env *env)
{
    sweep_point *pts = calloc(o->sweep_n, sizeof *pts);
    colo_result be_alone;
    double *arrivals = NULL;
    int rc = -1;
    if (!pts) {
        fprintf(stderr, "colocate: out of memory\n");
        return -1;
    }
    if (calibrate_ls(env, r))
        goto done;
    printf("LS service alone %.1f us; SLO %u us; %zu requests per load\n", r->service_us, r->slo_us, r->requests);
    /* be_alone once: the first load's window, at most SWEEP_BE_ALONE_MAX_US */
    if (draw_arrivals(env, r, o->sweep[0], &arrivals))
        goto done;
    if (env->window_us > SWEEP_BE_ALONE_MAX_US)
        env->window_us = SWEEP_BE_ALONE_MAX_US;
    colo_plan plan;
    plan_defaults(&plan, &CONFIGS[CONFIG_BE_ALONE], r->slo_us);
    if (colo_run(env, &plan, &be_alone)) {
        fprintf(stderr, "colocate: be_alone failed\n");
        goto done;
    }
    print_progress("be_alone", &be_alone);
    free(arrivals);
    arrivals = NULL;
    for (size_t k = 0; k < o->sweep_n; k++) {
        sweep_point *pt = &pts[k];
        pt->load = o->sweep[k];
        if (draw_arrivals(env, r, pt->load, &arrivals))
            goto done;
        pt->rate_per_s = r->rate_per_s;
        pt->window_s = env->window_us / 1e6;
        printf("== load %.2f: %.1f requests/s, window %.2f s\n", pt->load, pt->rate_per_s, pt->window_s);
        for (size_t i = 0; i < NUM_CONFIGS; i++) {
            if (!selected[i] || i == CONFIG_BE_ALONE)
                continue;
            plan_defaults(&plan, &CONFIGS[i], r->slo_us);
            if (colo_run(env, &plan, &pt->results[i])) {
                fprintf(stderr, "colocate: configuration %s at load %.2f failed\n", CONFIGS[i].name, pt->load);
                goto done;
            }
            print_progress(CONFIGS[i].name, &pt->results[i]);
        }
        free(arrivals);
        arrivals = NULL;
    }
    rc = 0;
    if (o->out) {
        rc = write_sweep_json(r, pts, o->sweep_n, &be_alone, o->out);
        if (rc == 0)
            printf("wrote %s\n", o->out);
    }
    if (rc == 0)
        print_sweep_table(r, pts, o->sweep_n, be_alone.be_steps_per_s);
done:
    free(arrivals);
    free(pts);
    return rc;
}

static int run(const options *o, const int *selected, report *r, ds_runtime_t rt)
{
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    BENCH_DS_CHECK(ds_runtime_info_get(rt, &info));
    r->info = &info;
    bench_print_pool(&info, r->simulated);
    if (!r->requests && o->sweep_n)
        r->requests = r->simulated ? SWEEP_REQUESTS_SIM : SWEEP_REQUESTS_CUDA;
    if (!r->requests)
        r->requests = r->simulated ? DEFAULT_REQUESTS_SIM : DEFAULT_REQUESTS_CUDA;
    if (!r->simulated && r->requests < 1000)
        printf("note: %zu requests: a p99 needs at least 1000\n", r->requests);

    colo_env env = {rt, NULL, NULL, 0, 0.0, LS_WARMUP_PER_CONFIG};
    if (o->sweep_n) {
        int rc = open_workload(rt, r->simulated, &env.work);
        if (rc == 0)
            rc = run_sweep(o, selected, r, &env);
        if (env.work)
            env.work->ops->destroy(env.work);
        r->info = NULL;
        return rc;
    }
    colo_result results[NUM_CONFIGS];
    memset(results, 0, sizeof results);
    r->results = results;
    double *arrivals = NULL;
    int rc = open_workload(rt, r->simulated, &env.work);
    if (rc == 0)
        rc = make_schedule(&env, r, &arrivals);
    if (rc == 0)
        rc = run_configs(&env, r, selected, results);
    if (env.work)
        env.work->ops->destroy(env.work);
    if (rc == 0 && o->out && write_json(r, o->out) == 0)
        printf("wrote %s\n", o->out);
    else if (rc == 0 && o->out)
        rc = -1;
    if (rc == 0)
        print_table(r);
    free(arrivals);
    r->info = NULL;
    r->results = NULL;
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    int selected[NUM_CONFIGS];
    report r;
    memset(&r, 0, sizeof r);
    bench_command(argc, argv, r.command, sizeof r.command); /* before parsing edits argv */
    int prc = parse_args(argc, argv, &o);
    if (prc > 0) {
        usage(stdout);
        return 0;
    }
    if (prc < 0)
        return 2; /* the message already said what was wrong */
    if (select_configs(o.configs, selected))
        return 2;
    ds_log_set_handler(bench_log_to_stderr, NULL, DS_LOG_WARN);

    /* Simulated time runs with the wall clock: the tenants are threads that
     * sleep and poll, as they would on a GPU. */
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = DS_SIM_CLOCK_REALTIME;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = o.device;
    cfg.ls_sms = o.ls_sms;  /* the LS tier of static, slo_aware (and tpot_first's split) */
    cfg.policy = "manual"; /* each configuration makes its own policy active */
    ds_runtime_t rt;
    if (bench_runtime_open(&cfg, &sim, &rt, &r.simulated))
        return 1;
    r.opt = &o;
    r.selected = selected;
    r.requests = o.requests;
    int rc = run(&o, selected, &r, rt);
    ds_status st = ds_runtime_destroy(rt);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "colocate: ds_runtime_destroy -> %s: %s\n", ds_status_name(st), ds_last_error_message());
        rc = -1;
    }
    return rc == 0 ? 0 : 1;
}
