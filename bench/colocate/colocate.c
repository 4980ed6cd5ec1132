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
 *   static@N   the same on the LOW tier of N SMs (N = 16, 32, 48, 64, 80, 96:
 *              the pool's ladder; policy static, parameter ls_sms = N)
 *   temporal   one tenant on the GPU at a time, switched at kernel boundaries
 *   slo_aware  (the library's default) LS on a LOW tier at the highest
 *              priority, the tier sized from the SLO attainment of LS's
 *              recorded requests (parameters right_size, target: --target);
 *              BE yields while LS's SLO is at risk (its gate closes, so its
 *              queued work stops at the next kernel boundary, and it is
 *              confined to the complement), on the whole GPU while LS is idle
 *   slo_aware_nogates  the same bounding BE with its window alone (no
 *              gates): what the gates add
 *   tpot_first LS as decode (attr.phase), BE as prefill on a tier of
 *              --ls-sms / 2 SMs
 * The alone baselines run under "manual" (the runtime moves nothing; both
 * tenants are created on the whole GPU). Without --configs a single-load run
 * has every configuration but static@N; a sweep has priority, static@N for
 * each N and slo_aware.
 *
 * Pool: the runtime is created with explicit tiers (ds_runtime_config.tiers):
 * the whole GPU, then for each N of the ladder a LOW tier of N SMs and its
 * HIGH complement (device SMs - N: 116, 100, 84, 68, 52, 36 on 132 SMs). A
 * first runtime with the default pool reads the device's SMs and split; LOW
 * tiers that would leave the complement less than one group are dropped.
 *
 * The LS vCtx carries an SLO (ds_vctx_attr.slo_us) in every configuration:
 * SLO_FACTOR times its mean service time alone, or --ls-slo-us.
 *
 * LS requests arrive as a seeded Poisson process whose rate keeps LS busy
 * --ls-load of the time when alone (rate = load / mean service time, measured
 * first); the same arrival sequence is replayed in every configuration. Each
 * configuration first serves LS_WARMUP_PER_CONFIG requests back to back, then
 * --settle requests (by default on a GPU, at least a second's worth) drawn
 * at the same rate from a seed derived from --seed (the same in every
 * configuration), BE running: an adaptive policy reaches its steady state
 * before the window. Every settle and window request is
 * recorded with ds_vctx_request_record (latency from its arrival, queueing
 * included: what slo_aware sizes the LS tier from); only the window's
 * requests make the figures.
 *
 * Per request the LS thread notes due (arrival), wake (back from its sleep),
 * submitted (ls_submit returned) and done (ds_vctx_synchronize returned);
 * start = max(due, the previous request's done). Latency = done - due =
 * queue wait (start - due) + submit delay (submitted - start: host time
 * before the work is queued) + device (done - submitted). Besides those the
 * figures give the wake delay (wake - due, the queue wait included) and the
 * enqueue time (submitted - wake: ls_submit, policy holds included).
 *
 * Output: a JSON file (--out) shaped as docs/benchmarks.md (W1) says, and a
 * table, printed last. Each configuration records its "policy"; the LS latency
 * (ls_p50_us, ls_p99_us, ls_p99_norm = over ls_alone's p99), ls_attainment (1
 * - ls_over_slo_frac, the share of window requests within the SLO), how
 * late requests cluster (ls_late_run_mean: late requests per run of
 * consecutive ones, in arrival order; null without any), the
 * delays above (ls_submit_delay_p50_us/p99_us/max_us, ls_wake_delay_p99_us,
 * ls_enqueue_p99_us, ls_queue_wait_p99_us, ls_device_p99_us); BE throughput
 * (be_tput_norm = over be_alone's); where each tenant ran (ls_pctx / be_pctx:
 * the pCtx most of its requests / steps were bound to, *_pctx_share: the share
 * per pCtx, *_urgent_share: on the highest-priority stream; sampled after each
 * submission in the window); and from ds_vctx_stats at the end of the
 * configuration (warm-up and settle included) ls_remaps, ls_holds, be_remaps,
 * be_holds, be_gates, be_gate_closes, be_gate_closed_ms, be_gate_holds. The
 * library counts a hold per wait of its hold loop, not per held launch.
 *
 * --sweep L1,L2,... runs at each LS load, --reps times (seed --seed + r for
 * repetition r): per repetition be_alone once (the first load's window, at
 * most SWEEP_BE_ALONE_MAX_US), then at each load ls_alone and the co-located
 * configurations on that repetition's arrivals, their order rotated by a
 * third (1/reps) of the list from one repetition to the next, so that no
 * configuration always runs last (the GPU warms over a load's run, which a
 * fixed order would charge to the same configuration). Each repetition's figures are
 * normalized by its own baselines; the file holds `sweep: {load: {config:
 * {figure, figure_min, figure_max, figure_reps, ...}}}` (the median over the
 * repetitions, their range and the list) instead of `configs`, and
 * dsbench plot-results draws it.
 *
 * Verdict (per load in a sweep, for the one load otherwise; common/verdict.h):
 * each configuration's LS attainment as Wilson's 95% interval over the window
 * requests of all repetitions (within the SLO, of all); a baseline
 * (co-located configuration other than slo_aware) clearly meets --target when
 * the interval's lower end reaches it, slo_aware meets it when the upper end
 * does. ok = (slo_aware meets the target or no baseline clearly meets it) and
 * (its median be_tput_norm is at least the best clearly meeting baseline's
 * minus VERDICT_BE_TOLERANCE, or none clearly meets) and no baseline
 * dominates it (as good on both median ls_p99_norm and median be_tput_norm,
 * and better on one with the ranges over the repetitions apart:
 * docs/benchmarks.md's rule for claims from tails; with one run, plain
 * dominance).
 *
 * --be persistent replaces BE's training step with one persistent kernel per
 * step (workload.h) whose blocks each keep their SM for --be-block-ms:
 * running blocks are never preempted, so under priority (and shared,
 * temporal) an LS kernel waits for BE's blocks to end, while the policies
 * that keep BE on other SMs (static, slo_aware) leave LS as it was alone.
 *
 * Without a GPU it runs on the simulated device and says so.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>

#include "bench.h"
#include "verdict.h"
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
/* --settle: LS requests per configuration before the window (recorded for the
 * policy, never measured). */
#define DEFAULT_SETTLE_CUDA 600
#define DEFAULT_SETTLE_SIM 40
/* ... and by default on a GPU at least this long (s) of arrivals at the
 * load's rate: slo_aware counts requests, and at 50% load 600 of them last
 * 0.2 s, too few for its overload check (2 x 2 x shrink_requests judged
 * requests on the top tier and the one below) to end before the window
 * (H200, W1 at commit 9ce7bc7: LS moved in the window at 40 and 50%). */
#define DEFAULT_SETTLE_MIN_S_CUDA 1.0
/* The settle schedule's seed: derived from the window's, so it is another
 * sequence of the same process. */
#define SETTLE_SEED_SALT 0x5e771e5e771eull
/* SMs of the LS tier (ds_runtime_config.ls_sms; the library's own default).
 * 64 rather than 32: on the simulated device LS alone on 32 SMs already
 * takes longer than its SLO, and slo_aware there only throttles BE below
 * `static`; --ls-sms 32 gives the narrower split. */
#define DEFAULT_LS_SMS 64
/* Default LS SLO: this many times its mean service time alone. 4 rather than
 * 3: at 20% load LS alone already queues past 3x on 0.3-0.4% of its requests
 * (a Poisson stream of ~200 us requests), which left no tier beside BE room
 * for a 99% attainment target; --ls-slo-us sets any other. */
#define SLO_FACTOR 4.0
#define DEFAULT_TARGET 0.99 /* --target: slo_aware's attainment target, and the verdict's */
/* Verdict: slo_aware's be_tput_norm may trail the best baseline meeting the
 * target by this much. */
/* --sweep: LS requests per load on a GPU (3000: a p99 from its 30 largest, and
 * an attainment near 0.99 with a binomial standard deviation of 0.18 points;
 * with 1000, 0.31, and a split at
 * the target read from 98.4 to 99.8% between repetitions: W1 at 20% load,
 * colocate_sweep_low_9595f95.json, in git history), the
 * repetitions (BENCH rule: medians over at least 3 seeds), and the longest
 * be_alone window (be_alone runs once per repetition, with the first point's
 * window up to this). */
#define SWEEP_REQUESTS_CUDA 3000
#define SWEEP_REQUESTS_SIM 80
#define SWEEP_REPS_CUDA 3
#define SWEEP_REPS_SIM 1
#define SWEEP_MAX_LOADS 16
#define SWEEP_MAX_REPS 100
#define SWEEP_BE_ALONE_MAX_US 1.5e6

/* The pool's ladder: SMs of its LOW tiers (each with its HIGH complement). */
static const uint32_t LADDER[] = {16, 32, 48, 64, 80, 96};
#define LADDER_N (sizeof LADDER / sizeof LADDER[0])

#define MAX_PARAMS 16 /* --param flags */

/* --be-block-ms: one persistent block's duration alone on the whole GPU. */
#define DEFAULT_BE_BLOCK_MS 3.0
#define MAX_BE_BLOCK_MS 100.0

/* One --param POLICY:NAME=VALUE, split when parsed. */
typedef struct policy_param {
    char policy[64], name[64];
    const char *value, *given; /* given: the flag's value as written */
} policy_param;

typedef struct options {
    ds_device_kind device;
    uint64_t seed;
    const char *out;
    double ls_load;
    uint32_t ls_sms;
    uint32_t ls_slo_us; /* 0: SLO_FACTOR x the measured service time */
    size_t requests;    /* 0: the device's default */
    long long settle;   /* -1: the device's default */
    size_t reps;        /* 0: the device's default (--sweep only) */
    double target;
    const char *configs;
    double sweep[SWEEP_MAX_LOADS]; /* --sweep loads, ascending as given */
    size_t sweep_n;                /* 0: no sweep (one load, --ls-load) */
    policy_param params[MAX_PARAMS]; /* --param POLICY:NAME=VALUE, applied in order */
    size_t params_n;
    const char *trace_dir; /* --trace-dir: per-request CSVs (colo_env.trace_path); NULL: none */
    colo_be_config be;     /* --be, --be-block-ms */
    int be_block_ms_given;
} options;

/* ------------------------------------------------------------------------ */
/* configurations                                                            */

enum { TENANT_LS = 1, TENANT_BE = 2 };
enum { SET_SINGLE = 1, SET_SWEEP = 2 }; /* default set of a single-load run, of a sweep */

typedef struct colo_config {
    const char *name;
    unsigned tenants;
    const char *policy; /* made active for this configuration */
    uint32_t ls_sms;    /* policy static: its ls_sms (0: --ls-sms) */
    unsigned sets;      /* SET_*: in which default sets */
    const char *what;
} colo_config;

static const colo_config CONFIGS[] = {
    {"ls_alone", TENANT_LS, "manual", 0, 0, "LS alone, whole GPU"},
    {"be_alone", TENANT_BE, "manual", 0, 0, "BE alone, whole GPU"},
    {"shared", TENANT_LS | TENANT_BE, "shared", 0, SET_SINGLE,
     "policy shared: whole GPU, same stream priority (MPS-like)"},
    {"priority", TENANT_LS | TENANT_BE, "priority", 0, SET_SINGLE | SET_SWEEP,
     "policy priority: whole GPU, LS at the highest stream priority"},
    {"static", TENANT_LS | TENANT_BE, "static", 0, SET_SINGLE,
     "policy static: LS on the LOW tier nearest --ls-sms, BE on its complement (MIG-like)"},
    {"static@16", TENANT_LS | TENANT_BE, "static", 16, SET_SWEEP,
     "policy static, ls_sms 16: LS on the LOW tier of 16 SMs"},
    {"static@32", TENANT_LS | TENANT_BE, "static", 32, SET_SWEEP,
     "policy static, ls_sms 32: LS on the LOW tier of 32 SMs"},
    {"static@48", TENANT_LS | TENANT_BE, "static", 48, SET_SWEEP,
     "policy static, ls_sms 48: LS on the LOW tier of 48 SMs"},
    {"static@64", TENANT_LS | TENANT_BE, "static", 64, SET_SWEEP,
     "policy static, ls_sms 64: LS on the LOW tier of 64 SMs"},
    {"static@80", TENANT_LS | TENANT_BE, "static", 80, SET_SWEEP,
     "policy static, ls_sms 80: LS on the LOW tier of 80 SMs"},
    {"static@96", TENANT_LS | TENANT_BE, "static", 96, SET_SWEEP,
     "policy static, ls_sms 96: LS on the LOW tier of 96 SMs"},
    {"temporal", TENANT_LS | TENANT_BE, "temporal", 0, SET_SINGLE,
     "policy temporal: one tenant on the GPU at a time"},
    {"slo_aware", TENANT_LS | TENANT_BE, "slo_aware", 0, SET_SINGLE | SET_SWEEP,
     "policy slo_aware (default): LS urgent on a LOW tier sized from its attainment; BE yields (gates)"},
    {"slo_aware_nogates", TENANT_LS | TENANT_BE, "slo_aware_nogates", 0, SET_SINGLE,
     "policy slo_aware_nogates: slo_aware bounding BE with its window alone, no gates"},
    {"tpot_first", TENANT_LS | TENANT_BE, "tpot_first", 0, SET_SINGLE,
     "policy tpot_first: LS as decode on the larger tier, urgent; BE as prefill on --ls-sms/2 SMs"},
};
#define NUM_CONFIGS (sizeof CONFIGS / sizeof CONFIGS[0])
enum { CONFIG_LS_ALONE = 0, CONFIG_BE_ALONE = 1 };

static int colocated(size_t i) { return CONFIGS[i].tenants == (TENANT_LS | TENANT_BE); }

static int is_static(size_t i) { return !strcmp(CONFIGS[i].policy, "static"); }

static size_t config_index(const char *name)
{
    size_t i = 0;
    while (i < NUM_CONFIGS && strcmp(CONFIGS[i].name, name))
        i++;
    return i;
}

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
            "  --seed N            seed of the LS arrival process (default 1; the settle requests use a seed\n"
            "                      derived from it)\n"
            "  --out FILE          write the JSON result there (W1 in docs/benchmarks.md); checked\n"
            "                      writable before the run\n"
            "  --ls-load X         LS busy fraction when alone, 0 < X < 1 (default 0.20)\n"
            "  --ls-sms N          SMs of the LS tier the policies use (ds_runtime_config.ls_sms,\n"
            "                      nearest LOW pCtx; configuration static; default %d)\n"
            "  --ls-slo-us N       LS SLO in us (ds_vctx_attr.slo_us; default %.0fx its service time alone)\n"
            "  --requests N        LS requests measured per configuration (default %d on a GPU, %d simulated)\n"
            "  --settle N          LS requests per configuration before the window, at the same rate,\n"
            "                      recorded for the policy but not measured (default %d and at least %g s\n"
            "                      of arrivals on a GPU, %d simulated)\n"
            "  --target X          SLO attainment target, 0.5 <= X < 1: slo_aware's parameter target and\n"
            "                      the verdict's (default %.2f)\n"
            "  --param P:NAME=V    set policy P's parameter NAME to V (ds_policy_param_set) before the\n"
            "                      configurations run, after --target; repeatable (at most %d), e.g.\n"
            "                      --param slo_aware:right_size=0 (an unknown NAME is refused with the\n"
            "                      policy's list of parameters)\n"
            "  --configs a,b,...   subset of the configurations; ls_alone and be_alone are added\n"
            "                      when a co-located one needs them for its ratios (default: all but\n"
            "                      static@N; with --sweep: priority, static@N for each N, slo_aware)\n"
            "  --sweep L1,L2,...   run the configurations at each LS load (0 < L < 1), --requests\n"
            "                      per load (default %d on a GPU, %d simulated); --out gets\n"
            "                      sweep: {load: {config: {ls_p99_norm, be_tput_norm, ls_attainment, ...}}}\n"
            "                      (medians over the repetitions, with _min, _max and _reps) and verdict: {load}\n"
            "  --reps R            --sweep only: repetitions, seed --seed + r for the r-th (default %d on a\n"
            "                      GPU, %d simulated); each is normalized by its own ls_alone and be_alone\n"
            "  --be KIND           what BE runs: training (default: cuBLAS GEMMs and an optimizer step,\n"
            "                      blocks of tens to hundreds of us) or persistent (one persistent kernel per\n"
            "                      step, grid = the device's SMs x blocks per SM, each block looping over\n"
            "                      tiles for --be-block-ms: blocks that keep their SMs, never preempted)\n"
            "  --be-block-ms X     --be persistent: one block's duration alone on the whole GPU, in ms,\n"
            "                      0 < X < %g (default %g; calibrated at start on a GPU)\n"
            "  --trace-dir DIR     write each LS request of every configuration (settle and window) to\n"
            "                      DIR/LOAD_REP_CONFIG.csv (REP from 1): phase, index, due_us, latency_us,\n"
            "                      over_slo, pctx, sms; DIR is created if missing\n"
            "  --help              this text\n"
            "figures (per configuration): ls_p50_us, ls_p99_us, ls_p99_norm (over ls_alone's p99),\n"
            "  ls_attainment (share of window requests within the SLO), be_tput_norm (over be_alone's),\n"
            "  ls_submit_delay_p50_us/p99_us/max_us (host time from max(arrival, previous done) to the work\n"
            "  queued), ls_wake_delay_p99_us, ls_enqueue_p99_us, ls_queue_wait_p99_us, ls_device_p99_us\n"
            "configurations (the pool's ladder: LOW tiers of 16, 32, 48, 64, 80, 96 SMs with complements):\n",
            DEFAULT_LS_SMS, SLO_FACTOR, DEFAULT_REQUESTS_CUDA, DEFAULT_REQUESTS_SIM, DEFAULT_SETTLE_CUDA,
            DEFAULT_SETTLE_MIN_S_CUDA, DEFAULT_SETTLE_SIM, DEFAULT_TARGET, MAX_PARAMS, SWEEP_REQUESTS_CUDA,
            SWEEP_REQUESTS_SIM, SWEEP_REPS_CUDA, SWEEP_REPS_SIM, MAX_BE_BLOCK_MS, DEFAULT_BE_BLOCK_MS);
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        fprintf(f, "  %-17s %s\n", CONFIGS[i].name, CONFIGS[i].what);
}

static int parse_u64(const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    return bench_parse_u64("colocate", flag, s, min, max, out);
}

/* A number in (lo, hi) (or [lo, hi) with lo_closed). */
static int parse_fraction(const char *flag, const char *s, double lo, int lo_closed, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !((lo_closed ? v >= lo : v > lo) && v < hi)) {
        fprintf(stderr, "colocate: %s: '%s' is not a number in %c%g, %g)\n", flag, s, lo_closed ? '[' : '(', lo,
                hi);
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
        if (len == 0 || len >= sizeof buf || o->sweep_n == SWEEP_MAX_LOADS) {
            fprintf(stderr, "colocate: --sweep: '%s' is not a list of up to %d loads\n", s, SWEEP_MAX_LOADS);
            return -1;
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (parse_fraction("--sweep", buf, 0.0, 0, 1.0, &o->sweep[o->sweep_n]))
            return -1;
        o->sweep_n++;
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
    static const char *const with_value[] = {"--device",   "--seed",   "--out",     "--ls-load", "--ls-sms",
                                             "--ls-slo-us", "--requests", "--configs", "--sweep",   "--settle",
                                             "--reps",     "--target",   "--param",   "--trace-dir",
                                             "--be",       "--be-block-ms"};
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
        if (!strcmp(val, "cuda"))
            bench_require_cuda();
    } else if (!strcmp(flag, "--seed")) {
        return parse_u64(flag, val, 0, UINT64_MAX - SWEEP_MAX_REPS, &o->seed);
    } else if (!strcmp(flag, "--out")) {
        o->out = val;
    } else if (!strcmp(flag, "--ls-load")) {
        return parse_fraction(flag, val, 0.0, 0, 1.0, &o->ls_load);
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
    } else if (!strcmp(flag, "--settle")) {
        if (parse_u64(flag, val, 0, 100000000, &u))
            return -1;
        o->settle = (long long)u;
    } else if (!strcmp(flag, "--reps")) {
        if (parse_u64(flag, val, 1, SWEEP_MAX_REPS, &u))
            return -1;
        o->reps = (size_t)u;
    } else if (!strcmp(flag, "--target")) {
        return parse_fraction(flag, val, 0.5, 1, 1.0, &o->target);
    } else if (!strcmp(flag, "--sweep")) {
        return parse_sweep(val, o);
    } else if (!strcmp(flag, "--trace-dir")) {
        o->trace_dir = val;
    } else if (!strcmp(flag, "--be")) {
        if (strcmp(val, "training") && strcmp(val, "persistent")) {
            fprintf(stderr, "colocate: --be: '%s' is neither training nor persistent\n", val);
            return -1;
        }
        o->be.kind = !strcmp(val, "persistent") ? COLO_BE_PERSISTENT : COLO_BE_TRAINING;
    } else if (!strcmp(flag, "--be-block-ms")) {
        double ms;
        if (parse_fraction(flag, val, 0.0, 0, MAX_BE_BLOCK_MS, &ms))
            return -1;
        o->be.block_ms = ms;
        o->be_block_ms_given = 1;
    } else if (!strcmp(flag, "--param")) {
        const char *colon = strchr(val, ':'), *eq = colon ? strchr(colon, '=') : NULL;
        if (o->params_n == MAX_PARAMS) {
            fprintf(stderr, "colocate: --param: at most %d\n", MAX_PARAMS);
            return -1;
        }
        policy_param *pp = &o->params[o->params_n];
        if (!colon || colon == val || !eq || eq == colon + 1 || !eq[1] ||
            (size_t)(colon - val) >= sizeof pp->policy || (size_t)(eq - colon - 1) >= sizeof pp->name) {
            fprintf(stderr, "colocate: --param: '%s' is not POLICY:NAME=VALUE\n", val);
            return -1;
        }
        snprintf(pp->policy, sizeof pp->policy, "%.*s", (int)(colon - val), val);
        snprintf(pp->name, sizeof pp->name, "%.*s", (int)(eq - colon - 1), colon + 1);
        pp->value = eq + 1;
        pp->given = val;
        o->params_n++;
    } else { /* --configs */
        o->configs = val;
    }
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.device = DS_DEVICE_CUDA, .seed = 1, .ls_load = 0.20, .ls_sms = DEFAULT_LS_SMS, .settle = -1,
                   .target = DEFAULT_TARGET, .be = {COLO_BE_TRAINING, DEFAULT_BE_BLOCK_MS}};
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
    if (o->be_block_ms_given && o->be.kind != COLO_BE_PERSISTENT) {
        fprintf(stderr, "colocate: --be-block-ms applies to --be persistent only\n");
        return -1;
    }
    if (o->reps && !o->sweep_n) {
        fprintf(stderr, "colocate: --reps applies to --sweep only (repeat single-load runs with --seed)\n");
        return -1;
    }
    return 0;
}

/* Marks the configurations named in list (without one: the default set of a
 * sweep or of a single-load run, less those `available` lacks), then the
 * baselines that the selected co-located ones are normalized by. available
 * NULL: all are. A configuration named but not available is an error. */
static int select_configs(const char *list, int sweep, const int *available, int selected[NUM_CONFIGS])
{
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        selected[i] = list == NULL && (CONFIGS[i].sets & (sweep ? SET_SWEEP : SET_SINGLE)) &&
                      (!available || available[i]);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        size_t i = 0;
        while (i < NUM_CONFIGS && !(strlen(CONFIGS[i].name) == len && !strncmp(CONFIGS[i].name, p, len)))
            i++;
        if (i == NUM_CONFIGS) {
            fprintf(stderr, "colocate: --configs: unknown configuration '%.*s' (see --help)\n", (int)len, p);
            return -1;
        }
        if (available && !available[i]) {
            fprintf(stderr, "colocate: --configs: %s: the device's pool has no LOW tier of %u SMs\n",
                    CONFIGS[i].name, CONFIGS[i].ls_sms);
            return -1;
        }
        selected[i] = 1;
        p += len + (p[len] == ',');
    }
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        if (selected[i] && colocated(i))
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
    size_t requests, settle;
    double settle_min_s; /* settle at least this long at the load's rate (0: exactly `settle`) */
    size_t settle_used;  /* settle requests of the last schedule drawn (env.settle), for the JSON */
    double load;         /* LS load of the configurations running now (the trace file's name) */
    size_t rep;          /* their repetition, from 0 (the trace file's name) */
    int target_applied; /* slo_aware took --target */
    const int *selected;
    const int *available;
    const colo_result *results;
    uint64_t reference_fingerprint;
    int reference_ok;
    colo_be_info be_info; /* the BE tenant as the workload made it */
    int be_output_same;   /* workload_ops.be_verify after the runs: 1, 0, -1 (not checked) */
    char command[4096];
} report;

/* Figures of one configuration's result, against the baselines of the same
 * load (and repetition). The first F_RANGED get _min, _max and _reps in a
 * sweep; the others, the median alone. */
typedef enum figure {
    F_P99_NORM,
    F_BE_NORM,
    F_ATTAIN,
    F_P99,
    F_P50,
    F_SUBMIT_P99,
    F_SUBMIT_P50,
    F_SUBMIT_MAX,
    F_WAKE_P99,
    F_ENQUEUE_P99,
    F_QUEUE_WAIT_P99,
    F_DEVICE_P99,
    F_UTILIZATION,
    F_OVER_SLO,
    F_LATE_RUN_MEAN,
    F_BE_STEPS,
    F_LS_SMS_MEAN,
    F_COUNT
} figure;
#define F_RANGED (F_SUBMIT_P99 + 1)

static const char *const FIGURE_KEYS[F_COUNT] = {
    [F_P99_NORM] = "ls_p99_norm",
    [F_BE_NORM] = "be_tput_norm",
    [F_ATTAIN] = "ls_attainment",
    [F_P99] = "ls_p99_us",
    [F_P50] = "ls_p50_us",
    [F_SUBMIT_P99] = "ls_submit_delay_p99_us",
    [F_SUBMIT_P50] = "ls_submit_delay_p50_us",
    [F_SUBMIT_MAX] = "ls_submit_delay_max_us",
    [F_WAKE_P99] = "ls_wake_delay_p99_us",
    [F_ENQUEUE_P99] = "ls_enqueue_p99_us",
    [F_QUEUE_WAIT_P99] = "ls_queue_wait_p99_us",
    [F_DEVICE_P99] = "ls_device_p99_us",
    [F_UTILIZATION] = "ls_utilization",
    [F_OVER_SLO] = "ls_over_slo_frac",
    [F_LATE_RUN_MEAN] = "ls_late_run_mean",
    [F_BE_STEPS] = "be_steps_per_s",
    [F_LS_SMS_MEAN] = "ls_sms_mean",
};

/* SMs of the pCtxs LS was bound to, weighted by its samples (NAN without any). */
static double sms_mean(const ds_runtime_info *info, const colo_placement *p)
{
    double sum = 0.0;
    for (uint32_t k = 0; k < info->num_pctx && k < DS_MAX_PCTX; k++)
        sum += (double)p->pctx[k] * info->pctx[k].sm_count;
    return p->samples ? sum / (double)p->samples : NAN;
}

/* rate: LS arrivals per second; NAN where the figure does not apply. */
static double figure_of(const ds_runtime_info *info, const colo_result *c, const colo_result *ls_alone,
                        const colo_result *be_alone, double rate, figure f)
{
    if (f == F_BE_NORM || f == F_BE_STEPS) {
        if (!c->has_be)
            return NAN;
        return f == F_BE_STEPS ? c->be_steps_per_s : c->be_steps_per_s / be_alone->be_steps_per_s;
    }
    if (!c->has_ls)
        return NAN;
    switch (f) {
    case F_P99_NORM: return c->ls_latency_us.p99 / ls_alone->ls_latency_us.p99;
    case F_ATTAIN: return 1.0 - c->ls_over_slo_frac;
    case F_P99: return c->ls_latency_us.p99;
    case F_P50: return c->ls_latency_us.p50;
    case F_SUBMIT_P99: return c->ls_submit_delay_us.p99;
    case F_SUBMIT_P50: return c->ls_submit_delay_us.p50;
    case F_SUBMIT_MAX: return c->ls_submit_delay_us.max;
    case F_WAKE_P99: return c->ls_wake_delay_us.p99;
    case F_ENQUEUE_P99: return c->ls_enqueue_us.p99;
    case F_QUEUE_WAIT_P99: return c->ls_queue_wait_us.p99;
    case F_DEVICE_P99: return c->ls_device_us.p99;
    /* Above 1 the LS queue grows for the whole run, and its percentiles
     * depend on --requests rather than on the configuration alone. */
    case F_UTILIZATION: return c->ls_service_mean_us * 1e-6 * rate;
    case F_OVER_SLO: return c->ls_over_slo_frac;
    case F_LATE_RUN_MEAN: return c->ls_late_run_mean;
    case F_LS_SMS_MEAN: return sms_mean(info, &c->ls_place);
    default: return NAN;
    }
}

static double single_figure(const report *r, size_t i, figure f)
{
    return figure_of(r->info, &r->results[i], &r->results[CONFIG_LS_ALONE], &r->results[CONFIG_BE_ALONE],
                     r->rate_per_s, f);
}

static double ls_p99_norm(const report *r, size_t i) { return single_figure(r, i, F_P99_NORM); }

static double be_tput_norm(const report *r, size_t i) { return single_figure(r, i, F_BE_NORM); }

/* ------------------------------------------------------------------------ */
/* verdict                                                                   */

/* `a` dominates `b`: at least as good on both (LS tail and BE throughput) and
 * better on one (the one-run lines under the table). */
static int dominates(double pa, double ba, double pb, double bb)
{
    return pa <= pb && ba >= bb && (pa < pb || ba > bb);
}

/* The verdict (common/verdict.h) over this run's configurations: the
 * co-located ones other than slo_aware are the baselines. */
typedef struct colo_verdict {
    verdict v;
    verdict_input in;
    const char *names[NUM_CONFIGS];
    int baseline[NUM_CONFIGS];
    ranged lat[NUM_CONFIGS], be[NUM_CONFIGS]; /* ls_p99_norm, be_tput_norm */
    double within[NUM_CONFIGS], total[NUM_CONFIGS]; /* LS window requests within the SLO, of all (every repetition) */
} colo_verdict;

/* The A/A check: `static` (the split of --ls-sms) is judged like slo_aware,
 * against the same baselines, where its twin static@N (the same split) is one
 * of them; how often a split fails against itself is the verdict's noise. */
static size_t aa_twin(const report *r)
{
    size_t copy = config_index("static");
    if (copy >= NUM_CONFIGS || !r->selected[copy])
        return NUM_CONFIGS;
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        if (i != copy && r->selected[i] && is_static(i) && CONFIGS[i].ls_sms == r->opt->ls_sms)
            return i;
    return NUM_CONFIGS;
}

/* Judges cv's figures (filled by the caller for the selected configurations):
 * `judged` (slo_aware, or `static` for the A/A check) against the other
 * co-located configurations, without slo_aware and `static` when they are not
 * judged. */
static void judge(const int *selected, double target, const char *judged, colo_verdict *cv)
{
    size_t slo = config_index("slo_aware"), copy = config_index("static"), s = config_index(judged);
    int aa = s == copy;
    if (s < NUM_CONFIGS && !selected[s])
        s = NUM_CONFIGS;
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        cv->names[i] = CONFIGS[i].name;
        cv->baseline[i] = selected[i] && colocated(i) && i != s && !(aa && i == slo);
    }
    cv->in = (verdict_input){.n = NUM_CONFIGS, .names = cv->names, .baseline = cv->baseline, .judged = s,
                             .lat = cv->lat, .be = cv->be, .within = cv->within, .total = cv->total,
                             .target = target, .key = aa ? "judged" : NULL};
    if (verdict_judge(&cv->in, &cv->v))
        fprintf(stderr, "colocate: the verdict cannot judge these figures (request counts or --target)\n");
}

static void json_verdict(bench_json *j, const char *key, const colo_verdict *cv)
{
    bench_json_object(j, key);
    verdict_json(j, &cv->in, &cv->v);
    bench_json_end(j);
}

/* One line: "verdict load 0.20 (target 0.99): baselines meeting ...". */
static void print_verdict(const char *label, const colo_verdict *cv)
{
    printf("verdict %s (target %.4g): ", label, cv->v.target);
    verdict_print(stdout, &cv->in, &cv->v);
    printf("\n");
}

/* ------------------------------------------------------------------------ */
/* single-load JSON and table                                                */

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
    bench_json_number(j, "ls_mean_us", c->ls_latency_us.mean);
    bench_json_number(j, "ls_max_us", c->ls_latency_us.max);
    bench_json_number(j, "ls_service_mean_us", c->ls_service_mean_us);
    for (int f = 0; f < F_COUNT; f++)
        if (f != F_BE_NORM && f != F_BE_STEPS)
            bench_json_number(j, FIGURE_KEYS[f], single_figure(r, i, (figure)f));
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

/* The pool as bench_print_pool shows it, and the SMs of its LOW tiers. */
static void json_pool(bench_json *j, const ds_runtime_info *info)
{
    char pool[1024] = "";
    size_t len = 0;
    double low[DS_MAX_PCTX];
    size_t n = 0;
    for (uint32_t i = 0; i < info->num_pctx && i < DS_MAX_PCTX; i++) {
        int w = snprintf(pool + len, sizeof pool - len, "%s%u=%u%s", i ? " " : "", i, info->pctx[i].sm_count,
                         bench_anchor_name(info->pctx[i].anchor));
        if (w > 0 && (size_t)w < sizeof pool - len)
            len += (size_t)w;
        if (info->pctx[i].anchor == DS_ANCHOR_LOW)
            low[n++] = info->pctx[i].sm_count;
    }
    bench_json_string(j, "pool", pool);
    bench_json_number_array(j, "ls_tiers", low, n);
}

/* What BE ran (--be): its kind, and for the persistent kernel its launch
 * shape and one block's duration alone on the whole GPU. */
static void json_be_workload(bench_json *j, const report *r)
{
    const colo_be_info *b = &r->be_info;
    int persistent = r->opt->be.kind == COLO_BE_PERSISTENT;
    bench_json_string(j, "be_workload", persistent ? "persistent" : "training");
    if (!persistent) {
        bench_json_null(j, "be_block_ms");
        return;
    }
    bench_json_number(j, "be_block_ms", b->block_ms);
    bench_json_number(j, "be_block_ms_requested", r->opt->be.block_ms);
    bench_json_string(j, "be_block_ms_from", r->simulated ? "the model (--be-block-ms)"
                                                          : "median of 9 launches alone on the whole GPU after "
                                                            "calibration (CUDA events; one wave = one block)");
    bench_json_int(j, "be_grid", b->grid);
    bench_json_int(j, "be_blocks_per_sm", b->blocks_per_sm);
    bench_json_int(j, "be_grid_sms", b->sm_count);
    bench_json_int(j, "be_threads", COLO_PERSIST_THREADS);
    bench_json_int(j, "be_tiles", b->tiles);
    bench_json_int(j, "be_tile_iters", b->tile_iters);
    if (r->be_output_same >= 0)
        bench_json_bool(j, "be_output_bitwise_equal", r->be_output_same == 1);
    else
        bench_json_null(j, "be_output_bitwise_equal");
}

/* Members shared by the single-load and the sweep files, after the provenance. */
static void json_common(bench_json *j, const report *r)
{
    bench_json_number(j, "ls_service_us", r->service_us);
    bench_json_int(j, "ls_slo_us", r->slo_us);
    char from[64];
    snprintf(from, sizeof from, "%gx ls_service_us", SLO_FACTOR);
    bench_json_string(j, "ls_slo_from", r->opt->ls_slo_us ? "--ls-slo-us" : from);
    bench_json_uint(j, "seed", r->opt->seed);
    bench_json_int(j, "ls_sms_requested", r->opt->ls_sms);
    bench_json_int(j, "settle_requests", (long long)r->settle);
    bench_json_number(j, "settle_min_s", r->settle_min_s);
    bench_json_number(j, "target", r->opt->target);
    bench_json_bool(j, "target_applied", r->target_applied);
    json_pool(j, r->info);
    json_be_workload(j, r);
}

static void json_header(bench_json *j, const report *r)
{
    bench_json_provenance(j, "colocate", r->info, COLOCATE_SOURCE_DIR, r->command, r->simulated);
    bench_json_number(j, "ls_load", r->opt->ls_load);
    bench_json_number(j, "ls_rate_per_s", r->rate_per_s);
    bench_json_int(j, "requests", (long long)r->requests);
    bench_json_int(j, "settle_requests_drawn", (long long)r->settle_used);
    json_common(j, r);
}

static void single_verdict(const report *r, colo_verdict *cv)
{
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        double p = r->selected[i] ? ls_p99_norm(r, i) : NAN, b = r->selected[i] ? be_tput_norm(r, i) : NAN;
        cv->lat[i] = (ranged){p, p, p};
        cv->be[i] = (ranged){b, b, b};
        int counted = r->selected[i] && r->results[i].has_ls;
        cv->within[i] = counted ? (double)r->results[i].ls_within : NAN;
        cv->total[i] = counted ? (double)r->results[i].ls_counted : NAN;
    }
    judge(r->selected, r->opt->target, "slo_aware", cv);
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
        if (is_static(i))
            bench_json_int(&j, "static_ls_sms", CONFIGS[i].ls_sms ? CONFIGS[i].ls_sms : r->opt->ls_sms);
        if (r->results[i].has_ls)
            json_ls(&j, r, i);
        if (r->results[i].has_be)
            json_be(&j, r, i);
        bench_json_number(&j, "window_s", r->results[i].window_s);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    if (r->selected[CONFIG_LS_ALONE] && r->selected[CONFIG_BE_ALONE]) {
        colo_verdict v;
        single_verdict(r, &v);
        json_verdict(&j, "verdict", &v);
    }
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
 * the others of this run. */
static void print_verdicts(const report *r)
{
    if (!r->selected[CONFIG_LS_ALONE] || !r->selected[CONFIG_BE_ALONE])
        return;
    printf("\nWhat the numbers say (%s):\n",
           r->simulated ? "one run; the simulated device repeats these figures for this seed, other seeds move the tails"
                        : "one run: tails move between runs, see docs/benchmarks.md");
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        if (!r->selected[i] || !colocated(i))
            continue;
        printf("  %-17s LS p99 %.2fx alone, %.1f%% over the SLO; BE at %.0f%% of alone; ", CONFIGS[i].name,
               ls_p99_norm(r, i), 100.0 * r->results[i].ls_over_slo_frac, 100.0 * be_tput_norm(r, i));
        int n = 0;
        for (size_t j = 0; j < NUM_CONFIGS; j++) {
            if (j == i || !r->selected[j] || !colocated(j) ||
                !dominates(ls_p99_norm(r, j), be_tput_norm(r, j), ls_p99_norm(r, i), be_tput_norm(r, i)))
                continue;
            printf("%s%s", n++ ? ", " : "beaten on both by ", CONFIGS[j].name);
        }
        printf("%s\n", n ? "" : "no other configuration is better on both");
    }
    colo_verdict v;
    single_verdict(r, &v);
    print_verdict("(one run)", &v);
}

/* One line on what BE ran, under the tables. */
static void print_be_workload(const report *r)
{
    const colo_be_info *b = &r->be_info;
    if (r->opt->be.kind == COLO_BE_PERSISTENT)
        printf("BE: persistent kernel (--be persistent), %u blocks (%u SMs x %u), one block %.3f ms alone on the "
               "whole GPU%s\n",
               b->grid, b->sm_count, b->blocks_per_sm, b->block_ms, r->simulated ? " (model)" : "");
    else
        printf("BE: training step (--be training): cuBLAS GEMMs, gradient norm, AdamW\n");
}

/* Where each configuration's LS latency went (run.h): p99 of each span. */
static void print_anatomy(const report *r)
{
    printf("\nLS latency anatomy, us (p99 of each span; latency = queue wait + submit delay + device):\n"
           "%-17s %10s %10s %12s %12s %12s %10s %10s\n",
           "config", "latency", "queue_wait", "submit_p50", "submit_p99", "submit_max", "wake", "enqueue");
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        const colo_result *c = &r->results[i];
        if (!r->selected[i] || !c->has_ls)
            continue;
        printf("%-17s %10.1f %10.1f %12.1f %12.1f %12.1f %10.1f %10.1f  device %.1f\n", CONFIGS[i].name,
               c->ls_latency_us.p99, c->ls_queue_wait_us.p99, c->ls_submit_delay_us.p50, c->ls_submit_delay_us.p99,
               c->ls_submit_delay_us.max, c->ls_wake_delay_us.p99, c->ls_enqueue_us.p99, c->ls_device_us.p99);
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
    printf("LS load %.2f: %zu requests at %.1f/s (after %zu settle requests), %.1f us each alone, SLO %u us; "
           "ls_sms %u%s\n",
           r->opt->ls_load, r->requests, r->rate_per_s, r->settle, r->service_us, r->slo_us, r->opt->ls_sms,
           r->simulated ? "  [SIMULATED DEVICE]" : "");
    print_be_workload(r);
    print_anatomy(r);
    printf("\n"
           "LS/BE pCtx/SMs  pCtx each tenant was bound to most of the time / its SMs (and the share of\n"
           "                the time, when not always)\n"
           "ls_p50_us/p99   LS request latency, arrival to completion: median, 99th percentile (us)\n"
           "p99_norm        ls_p99 / ls_alone's ls_p99: 1.00 = no interference, lower is better\n"
           ">SLO            share of LS requests slower than the SLO (ls_attainment = 1 - it)\n"
           "be_steps/s      BE training steps per second; be_norm = / be_alone's: 1.000 = full speed\n"
           "ls_rm, be_rm    remaps of each vCtx; be_holds: BE launches the policy held\n"
           "queue_wait      behind the previous request; submit: host time before the work is queued;\n"
           "                wake: from arrival to the LS thread running; enqueue: ls_submit itself\n"
           "Best possible: p99_norm 1.00 with be_norm %.2f (BE keeps all the time LS leaves idle).\n",
           1.0 - r->opt->ls_load);
    print_verdicts(r);
}

/* ------------------------------------------------------------------------ */
/* main flow                                                                 */

static int open_workload(ds_runtime_t rt, report *r, workload **w)
{
    int rc = r->simulated ? workload_sim_create_be(rt, &r->opt->be, w)
                          : workload_cuda_create_be(rt, 0, &r->opt->be, w);
    if (rc == 0)
        r->be_info = (*w)->be_info;
    r->be_output_same = -1;
    return rc;
}

/* After the runs: whether BE's output kept its bits (workload_ops.be_verify). */
static int verify_be(const colo_env *env, report *r)
{
    if (env->work->ops->be_verify(env->work, &r->be_output_same))
        return -1;
    if (r->be_output_same == 0)
        fprintf(stderr, "colocate: BE's persistent kernel output changed between runs (not deterministic)\n");
    else if (r->be_output_same == 1)
        printf("BE persistent kernel output after every configuration: bitwise equal to calibration's\n");
    return 0;
}


static void print_progress(const char *prefix, const char *name, const colo_result *c, uint32_t slo_us)
{
    printf("%s%-17s done:", prefix, name);
    if (c->has_ls)
        printf(" LS p50 %.1f us, p99 %.1f us, max %.1f us, %.1f%% within %u us, %llu remaps;", c->ls_latency_us.p50,
               c->ls_latency_us.p99, c->ls_latency_us.max, 100.0 * (1.0 - c->ls_over_slo_frac), slo_us,
               (unsigned long long)c->ls_stats.remaps);
    if (c->has_be)
        printf(" BE %.1f steps/s, %llu remaps, %llu holds;", c->be_steps_per_s,
               (unsigned long long)c->be_stats.remaps, (unsigned long long)c->be_stats.holds);
    printf(" window %.2f s\n", c->window_s);
    fflush(stdout);
}

/* Runs configuration i: the static policy first gets its ls_sms (static@N's
 * N, or --ls-sms), before its vCtxs are created. */
static int run_config(const colo_env *env, const report *r, size_t i, colo_result *out)
{
    colo_plan plan;
    plan_defaults(&plan, &CONFIGS[i], r->slo_us);
    if (is_static(i)) {
        char sms[16];
        snprintf(sms, sizeof sms, "%u", CONFIGS[i].ls_sms ? CONFIGS[i].ls_sms : r->opt->ls_sms);
        BENCH_DS_CHECK(ds_policy_param_set(env->rt, "static", "ls_sms", sms));
    }
    colo_env e = *env;
    char path[4096];
    if (r->opt->trace_dir && (CONFIGS[i].tenants & TENANT_LS)) {
        snprintf(path, sizeof path, "%s/%.2f_%zu_%s.csv", r->opt->trace_dir, r->load, r->rep + 1, CONFIGS[i].name);
        e.trace_path = path;
    }
    if (colo_run(&e, &plan, out)) {
        fprintf(stderr, "colocate: configuration %s failed\n", CONFIGS[i].name);
        return -1;
    }
    return 0;
}

static int run_configs(const colo_env *env, const report *r, const int *selected, colo_result *results)
{
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        if (!selected[i])
            continue;
        if (run_config(env, r, i, &results[i]))
            return -1;
        print_progress("", CONFIGS[i].name, &results[i], r->slo_us);
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

/* The schedules of r->requests window requests (seed) and r->settle settle
 * requests (a seed derived from it) for LS load `load`, both at the same rate
 * (the same seed at every load: the sequences differ only by their time
 * scale). *arrivals holds both; free it after the runs. */
static int draw_arrivals(colo_env *env, report *r, double load, uint64_t seed, double **arrivals)
{
    r->load = load;
    r->rate_per_s = load / (r->service_us * 1e-6);
    size_t settle = r->settle;
    double by_time = ceil(r->rate_per_s * r->settle_min_s);
    if (by_time > (double)settle)
        settle = (size_t)by_time;
    *arrivals = malloc((r->requests + settle) * sizeof **arrivals);
    if (!*arrivals) {
        fprintf(stderr, "colocate: out of memory for %zu arrivals\n", r->requests + settle);
        return -1;
    }
    bench_poisson_arrivals(seed, r->rate_per_s, r->requests, *arrivals);
    bench_poisson_arrivals(bench_mix64(seed ^ SETTLE_SEED_SALT), r->rate_per_s, settle, *arrivals + r->requests);
    env->arrival_us = *arrivals;
    env->requests = r->requests;
    env->window_us = (*arrivals)[r->requests - 1];
    env->settle_arrival_us = *arrivals + r->requests;
    env->settle = settle;
    r->settle_used = settle;
    return 0;
}

static void print_slo(const report *r)
{
    if (r->opt->ls_slo_us)
        printf("LS SLO (ds_vctx_attr.slo_us): %u us (--ls-slo-us)\n", r->slo_us);
    else
        printf("LS SLO (ds_vctx_attr.slo_us): %u us (%gx the service time alone)\n", r->slo_us, SLO_FACTOR);
}

/* Calibration, then the arrival schedule of --ls-load. */
static int make_schedule(colo_env *env, report *r, double **arrivals)
{
    if (calibrate_ls(env, r) || draw_arrivals(env, r, r->opt->ls_load, r->opt->seed, arrivals))
        return -1;
    printf("LS service alone %.1f us -> %.1f requests/s for load %.2f; window %.2f s per configuration, "
           "after %zu settle requests\n",
           r->service_us, r->rate_per_s, r->opt->ls_load, env->window_us / 1e6, env->settle);
    print_slo(r);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* --sweep                                                                   */

typedef struct sweep_data {
    size_t reps, loads;
    double *rate_per_s;     /* [load] */
    double *window_s;       /* [rep][load] */
    size_t *settle;         /* [load]: settle requests (the same in every repetition) */
    colo_result *be_alone;  /* [rep] */
    colo_result *results;   /* [rep][load][config] */
} sweep_data;

static colo_result *sweep_result(const sweep_data *d, size_t rep, size_t k, size_t i)
{
    return &d->results[(rep * d->loads + k) * NUM_CONFIGS + i];
}

static double sweep_figure(const report *r, const sweep_data *d, size_t rep, size_t k, size_t i, figure f)
{
    return figure_of(r->info, sweep_result(d, rep, k, i), sweep_result(d, rep, k, CONFIG_LS_ALONE),
                     &d->be_alone[rep], d->rate_per_s[k], f);
}

/* Median, minimum and maximum of the finite values of v[0..n) (NAN without any). */
static void stats_of(const double *v, size_t n, double *median, double *min, double *max)
{
    double finite[SWEEP_MAX_REPS];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            finite[m++] = v[i];
    bench_summary s;
    if (bench_summarize(finite, m, &s)) /* fails only out of memory */
        s = (bench_summary){0, NAN, NAN, NAN, NAN, NAN};
    *median = s.p50;
    if (min)
        *min = s.min;
    if (max)
        *max = s.max;
}

/* Figure f of configuration i at load k, per repetition (reps[]) and its median. */
static double sweep_median(const report *r, const sweep_data *d, size_t k, size_t i, figure f, double *reps,
                           double *min, double *max)
{
    double local[SWEEP_MAX_REPS], med;
    double *v = reps ? reps : local;
    for (size_t rep = 0; rep < d->reps; rep++)
        v[rep] = sweep_figure(r, d, rep, k, i, f);
    stats_of(v, d->reps, &med, min, max);
    return med;
}

/* The verdict at load k with `judged` (slo_aware, or `static` for the A/A check). */
static void sweep_verdict(const report *r, const sweep_data *d, size_t k, const char *judged, colo_verdict *cv)
{
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        cv->lat[i] = cv->be[i] = (ranged){NAN, NAN, NAN};
        cv->within[i] = cv->total[i] = NAN;
        if (!r->selected[i] || i == CONFIG_BE_ALONE)
            continue;
        cv->lat[i].med = sweep_median(r, d, k, i, F_P99_NORM, NULL, &cv->lat[i].min, &cv->lat[i].max);
        cv->be[i].med = sweep_median(r, d, k, i, F_BE_NORM, NULL, &cv->be[i].min, &cv->be[i].max);
        /* the attainment's counts: every window request of every repetition */
        cv->within[i] = cv->total[i] = 0.0;
        for (size_t rep = 0; rep < d->reps; rep++) {
            cv->within[i] += (double)sweep_result(d, rep, k, i)->ls_within;
            cv->total[i] += (double)sweep_result(d, rep, k, i)->ls_counted;
        }
    }
    judge(r->selected, r->opt->target, judged, cv);
}

static void json_sweep_config(bench_json *j, const report *r, const sweep_data *d, size_t k, size_t i)
{
    char key[64];
    bench_json_object(j, CONFIGS[i].name);
    bench_json_string(j, "policy", CONFIGS[i].policy);
    if (is_static(i))
        bench_json_int(j, "static_ls_sms", CONFIGS[i].ls_sms ? CONFIGS[i].ls_sms : r->opt->ls_sms);
    for (int f = 0; f < F_COUNT; f++) {
        double reps[SWEEP_MAX_REPS], min, max;
        bench_json_number(j, FIGURE_KEYS[f], sweep_median(r, d, k, i, (figure)f, reps, &min, &max));
        if (f >= F_RANGED)
            continue;
        snprintf(key, sizeof key, "%s_min", FIGURE_KEYS[f]);
        bench_json_number(j, key, min);
        snprintf(key, sizeof key, "%s_max", FIGURE_KEYS[f]);
        bench_json_number(j, key, max);
        snprintf(key, sizeof key, "%s_reps", FIGURE_KEYS[f]);
        bench_json_number_array(j, key, reps, d->reps);
    }
    bench_json_end(j);
}

/* The verdict at every load, `judged` (slo_aware, or `static` for the A/A
 * check) against the others, one object per load into the open object. */
static void json_sweep_verdicts(bench_json *j, const report *r, const sweep_data *d, const char *judged)
{
    for (size_t k = 0; k < d->loads; k++) {
        colo_verdict vd;
        char key[32];
        sweep_verdict(r, d, k, judged, &vd);
        snprintf(key, sizeof key, "%.2f", r->opt->sweep[k]);
        json_verdict(j, key, &vd);
    }
}

static int write_sweep_json(const report *r, const sweep_data *d, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "colocate: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    char key[32];
    double v[SWEEP_MAX_REPS], seeds[SWEEP_MAX_REPS];
    bench_json j;
    bench_json_begin(&j, f);
    bench_json_provenance(&j, "colocate_sweep", r->info, COLOCATE_SOURCE_DIR, r->command, r->simulated);
    json_common(&j, r);
    bench_json_int(&j, "requests_per_load", (long long)r->requests);
    bench_json_int(&j, "reps", (long long)d->reps);
    for (size_t rep = 0; rep < d->reps; rep++)
        seeds[rep] = (double)(r->opt->seed + rep);
    bench_json_number_array(&j, "seeds", seeds, d->reps);
    for (size_t rep = 0; rep < d->reps; rep++)
        v[rep] = d->be_alone[rep].be_steps_per_s;
    double med;
    stats_of(v, d->reps, &med, NULL, NULL);
    bench_json_number(&j, "be_alone_steps_per_s", med);
    bench_json_number_array(&j, "be_alone_steps_per_s_reps", v, d->reps);
    bench_json_number(&j, "be_alone_window_s", d->be_alone[0].window_s);
    bench_json_string(&j, "normalization",
                      "per repetition: ls_p99_norm over ls_alone's p99 at the same load, be_tput_norm over "
                      "be_alone; then the median over the repetitions (_min, _max: their range; _reps: each)");
    bench_json_string(&j, "order",
                      "at each load ls_alone first, then the co-located configurations, rotated by ceil(m / reps) "
                      "of their m from one repetition to the next");
    bench_json_object(&j, "points");
    for (size_t k = 0; k < d->loads; k++) {
        snprintf(key, sizeof key, "%.2f", r->opt->sweep[k]);
        bench_json_object(&j, key);
        bench_json_number(&j, "ls_rate_per_s", d->rate_per_s[k]);
        bench_json_int(&j, "settle_requests", (long long)d->settle[k]);
        for (size_t rep = 0; rep < d->reps; rep++)
            v[rep] = d->window_s[rep * d->loads + k];
        stats_of(v, d->reps, &med, NULL, NULL);
        bench_json_number(&j, "window_s", med);
        bench_json_number(&j, "ls_alone_p50_us", sweep_median(r, d, k, CONFIG_LS_ALONE, F_P50, NULL, NULL, NULL));
        bench_json_number(&j, "ls_alone_p99_us", sweep_median(r, d, k, CONFIG_LS_ALONE, F_P99, NULL, NULL, NULL));
        bench_json_end(&j);
    }
    bench_json_end(&j);
    bench_json_object(&j, "sweep");
    for (size_t k = 0; k < d->loads; k++) {
        snprintf(key, sizeof key, "%.2f", r->opt->sweep[k]);
        bench_json_object(&j, key);
        for (size_t i = 0; i < NUM_CONFIGS; i++)
            if (r->selected[i] && i != CONFIG_BE_ALONE)
                json_sweep_config(&j, r, d, k, i);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    bench_json_object(&j, "verdict");
    json_sweep_verdicts(&j, r, d, "slo_aware");
    bench_json_end(&j);
    size_t twin = aa_twin(r);
    if (twin < NUM_CONFIGS) {
        bench_json_object(&j, "verdict_aa");
        bench_json_string(&j, "twin", CONFIGS[twin].name);
        bench_json_string(&j, "what", "`static` (the split of --ls-sms) judged like slo_aware against the same "
                                      "baselines, its twin among them: a split against itself");
        json_sweep_verdicts(&j, r, d, "static");
        bench_json_end(&j);
    }
    int rc = bench_json_finish(&j);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "colocate: error writing %s\n", path);
        return -1;
    }
    return 0;
}

static void print_sweep_table(const report *r, const sweep_data *d)
{
    printf("\nls_p99_norm / be_tput_norm / ls_attainment %% per LS load (medians over %zu repetition%s; "
           "ls_alone p99 of the same load and repetition = 1)\n%-17s",
           d->reps, d->reps == 1 ? "" : "s", "config");
    for (size_t k = 0; k < d->loads; k++)
        printf(" %19.2f", r->opt->sweep[k]);
    printf("\n");
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        if (!r->selected[i] || i == CONFIG_BE_ALONE)
            continue;
        printf("%-17s", CONFIGS[i].name);
        for (size_t k = 0; k < d->loads; k++) {
            char cell[64];
            double p = sweep_median(r, d, k, i, F_P99_NORM, NULL, NULL, NULL);
            double b = sweep_median(r, d, k, i, F_BE_NORM, NULL, NULL, NULL);
            double a = sweep_median(r, d, k, i, F_ATTAIN, NULL, NULL, NULL);
            if (isfinite(b))
                snprintf(cell, sizeof cell, "%.2f/%.3f/%.1f", p, b, 100.0 * a);
            else
                snprintf(cell, sizeof cell, "%.2f/-/%.1f", p, 100.0 * a);
            printf(" %19s", cell);
        }
        printf("\n");
    }
    printf("cell: p99_norm/be_norm/attain%%  LS p99 over ls_alone's (1.00 = no interference) / BE steps/s over\n"
           "      be_alone's (1.000 = full speed, - without BE) / share of LS requests within the SLO, %%\n");
    double v[SWEEP_MAX_REPS], be;
    for (size_t rep = 0; rep < d->reps; rep++)
        v[rep] = d->be_alone[rep].be_steps_per_s;
    stats_of(v, d->reps, &be, NULL, NULL);
    printf("%zu requests per load after %zu settle, LS %.1f us alone, SLO %u us, BE alone %.1f steps/s; "
           "ls_sms %u%s\n",
           r->requests, r->settle, r->service_us, r->slo_us, be, r->opt->ls_sms,
           r->simulated ? "  [SIMULATED DEVICE]" : "");
    print_be_workload(r);
    printf("\nls_alone latency anatomy, us (medians over the repetitions; per request latency = queue wait + "
           "submit delay + device):\n");
    for (size_t k = 0; k < d->loads; k++) {
        size_t a = CONFIG_LS_ALONE;
        printf("  load %.2f: p99 %.1f; p99 of its parts: queue wait %.1f, submit delay %.1f (max %.1f; wake %.1f, "
               "enqueue %.1f), device %.1f\n",
               r->opt->sweep[k], sweep_median(r, d, k, a, F_P99, NULL, NULL, NULL),
               sweep_median(r, d, k, a, F_QUEUE_WAIT_P99, NULL, NULL, NULL),
               sweep_median(r, d, k, a, F_SUBMIT_P99, NULL, NULL, NULL),
               sweep_median(r, d, k, a, F_SUBMIT_MAX, NULL, NULL, NULL),
               sweep_median(r, d, k, a, F_WAKE_P99, NULL, NULL, NULL),
               sweep_median(r, d, k, a, F_ENQUEUE_P99, NULL, NULL, NULL),
               sweep_median(r, d, k, a, F_DEVICE_P99, NULL, NULL, NULL));
    }
    printf("\n");
    size_t twin = aa_twin(r);
    for (size_t k = 0; k < d->loads; k++) {
        colo_verdict vd;
        char label[64];
        sweep_verdict(r, d, k, "slo_aware", &vd);
        snprintf(label, sizeof label, "load %.2f", r->opt->sweep[k]);
        print_verdict(label, &vd);
        if (twin < NUM_CONFIGS) {
            sweep_verdict(r, d, k, "static", &vd);
            snprintf(label, sizeof label, "A/A, load %.2f, twin %s", r->opt->sweep[k], CONFIGS[twin].name);
            print_verdict(label, &vd);
        }
    }
}

/* The order of repetition `rep` (of `reps`) at each load: ls_alone, then the
 * selected co-located configurations rotated by rep x ceil(m / reps) of
 * their m. Returns how many were written. */
static size_t sweep_order(const report *r, size_t reps, size_t rep, size_t *order)
{
    size_t colo[NUM_CONFIGS], m = 0, n = 0;
    for (size_t i = 0; i < NUM_CONFIGS; i++)
        if (r->selected[i] && i != CONFIG_BE_ALONE && i != CONFIG_LS_ALONE)
            colo[m++] = i;
    if (r->selected[CONFIG_LS_ALONE])
        order[n++] = CONFIG_LS_ALONE;
    size_t shift = m ? rep * ((m + reps - 1) / reps) % m : 0;
    for (size_t j = 0; j < m; j++)
        order[n++] = colo[(j + shift) % m];
    return n;
}

/* One repetition: be_alone (the first load's window, at most
 * SWEEP_BE_ALONE_MAX_US), then at each load ls_alone and the selected
 * co-located configurations (in sweep_order's order), on the arrivals of
 * seed --seed + rep. */
static int sweep_rep(colo_env *env, report *r, sweep_data *d, size_t rep)
{
    const options *o = r->opt;
    uint64_t seed = o->seed + rep;
    double *arrivals = NULL;
    char prefix[48] = "";
    r->rep = rep;
    if (d->reps > 1) {
        snprintf(prefix, sizeof prefix, "[rep %zu] ", rep + 1);
        printf("== repetition %zu of %zu: seed %llu\n", rep + 1, d->reps, (unsigned long long)seed);
    }
    if (draw_arrivals(env, r, o->sweep[0], seed, &arrivals))
        return -1;
    if (env->window_us > SWEEP_BE_ALONE_MAX_US)
        env->window_us = SWEEP_BE_ALONE_MAX_US;
    int rc = run_config(env, r, CONFIG_BE_ALONE, &d->be_alone[rep]);
    free(arrivals);
    arrivals = NULL;
    if (rc)
        return -1;
    print_progress(prefix, "be_alone", &d->be_alone[rep], r->slo_us);
    for (size_t k = 0; k < d->loads; k++) {
        if (draw_arrivals(env, r, o->sweep[k], seed, &arrivals))
            return -1;
        d->rate_per_s[k] = r->rate_per_s;
        d->settle[k] = env->settle;
        d->window_s[rep * d->loads + k] = env->window_us / 1e6;
        printf("%s== load %.2f: %.1f requests/s, window %.2f s after %zu settle requests\n", prefix, o->sweep[k],
               r->rate_per_s, env->window_us / 1e6, env->settle);
        size_t order[NUM_CONFIGS], n = sweep_order(r, d->reps, rep, order);
        for (size_t j = 0; j < n && rc == 0; j++) {
            size_t i = order[j];
            colo_result *res = sweep_result(d, rep, k, i);
            rc = run_config(env, r, i, res);
            if (rc)
                fprintf(stderr, "colocate: (at load %.2f, seed %llu)\n", o->sweep[k], (unsigned long long)seed);
            else
                print_progress(prefix, CONFIGS[i].name, res, r->slo_us);
        }
        free(arrivals);
        arrivals = NULL;
        if (rc)
            return -1;
    }
    return 0;
}

/* Calibrates once, then runs the repetitions. */
static int run_sweep(const options *o, report *r, colo_env *env)
{
    sweep_data d = {.reps = o->reps, .loads = o->sweep_n};
    d.rate_per_s = calloc(d.loads, sizeof *d.rate_per_s);
    d.window_s = calloc(d.reps * d.loads, sizeof *d.window_s);
    d.settle = calloc(d.loads, sizeof *d.settle);
    d.be_alone = calloc(d.reps, sizeof *d.be_alone);
    d.results = calloc(d.reps * d.loads * NUM_CONFIGS, sizeof *d.results);
    int rc = -1;
    if (!d.rate_per_s || !d.window_s || !d.settle || !d.be_alone || !d.results) {
        fprintf(stderr, "colocate: out of memory\n");
        goto done;
    }
    if (calibrate_ls(env, r))
        goto done;
    printf("LS service alone %.1f us; SLO %u us; %zu requests per load after %zu settle (and %g s at least); "
           "%zu repetition%s\n", r->service_us, r->slo_us, r->requests, r->settle, r->settle_min_s, d.reps,
           d.reps == 1 ? "" : "s");
    for (size_t rep = 0; rep < d.reps; rep++)
        if (sweep_rep(env, r, &d, rep))
            goto done;
    if (verify_be(env, r))
        goto done;
    rc = 0;
    if (o->out) {
        rc = write_sweep_json(r, &d, o->out);
        if (rc == 0)
            printf("wrote %s\n", o->out);
    }
    if (rc == 0)
        print_sweep_table(r, &d);
done:
    free(d.rate_per_s);
    free(d.window_s);
    free(d.settle);
    free(d.be_alone);
    free(d.results);
    return rc;
}

static int run(const options *o, report *r, ds_runtime_t rt)
{
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    BENCH_DS_CHECK(ds_runtime_info_get(rt, &info));
    r->info = &info;
    bench_print_pool(&info, r->simulated);
    if (!r->requests && o->sweep_n)
        r->requests = r->simulated ? SWEEP_REQUESTS_SIM : SWEEP_REQUESTS_CUDA;
    if (!r->requests)
        r->requests = r->simulated ? DEFAULT_REQUESTS_SIM : DEFAULT_REQUESTS_CUDA;
    r->settle = o->settle >= 0 ? (size_t)o->settle : r->simulated ? DEFAULT_SETTLE_SIM : DEFAULT_SETTLE_CUDA;
    r->settle_min_s = o->settle >= 0 || r->simulated ? 0.0 : DEFAULT_SETTLE_MIN_S_CUDA;
    if (!r->simulated && r->requests < 1000)
        printf("note: %zu requests: a p99 needs at least 1000\n", r->requests);
    if (o->trace_dir && mkdir(o->trace_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "colocate: --trace-dir: cannot create %s: %s\n", o->trace_dir, strerror(errno));
        return -1;
    }

    colo_env env = {rt, NULL, NULL, 0, 0.0, LS_WARMUP_PER_CONFIG, NULL, 0, NULL};
    if (o->sweep_n) {
        options so = *o;
        if (!so.reps)
            so.reps = r->simulated ? SWEEP_REPS_SIM : SWEEP_REPS_CUDA;
        r->opt = &so;
        int rc = open_workload(rt, r, &env.work);
        if (rc == 0)
            rc = run_sweep(&so, r, &env);
        if (env.work)
            env.work->ops->destroy(env.work);
        r->opt = o;
        r->info = NULL;
        return rc;
    }
    colo_result results[NUM_CONFIGS];
    memset(results, 0, sizeof results);
    r->results = results;
    double *arrivals = NULL;
    int rc = open_workload(rt, r, &env.work);
    if (rc == 0)
        rc = make_schedule(&env, r, &arrivals);
    if (rc == 0)
        rc = run_configs(&env, r, r->selected, results);
    if (rc == 0)
        rc = verify_be(&env, r);
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

/* ------------------------------------------------------------------------ */
/* runtime: the pool's ladder                                                */

/* Tiers for a device of sm_count SMs split in groups of `group` SMs: the
 * whole GPU, then each LOW tier of LADDER that leaves its complement at
 * least one group (its SMs / group, rounded up, at most sm_count / group - 1)
 * and that differs from the previous one once rounded, with its HIGH
 * complement (the SMs the LOW tier, rounded up to whole groups, leaves).
 * in_pool[k]: LADDER[k] made it. Returns the number of tiers. */
static uint32_t ladder_tiers(uint32_t sm_count, uint32_t group, ds_tier_spec *tiers, int in_pool[LADDER_N])
{
    uint32_t n = 0, prev_groups = 0;
    if (!group)
        group = 1;
    tiers[n++] = (ds_tier_spec){sm_count, DS_ANCHOR_FULL};
    for (size_t k = 0; k < LADDER_N; k++) {
        uint32_t groups = (LADDER[k] + group - 1) / group;
        in_pool[k] = sm_count / group >= 1 && groups <= sm_count / group - 1 && groups != prev_groups;
        if (!in_pool[k])
            continue;
        prev_groups = groups;
        tiers[n++] = (ds_tier_spec){LADDER[k], DS_ANCHOR_LOW};
        tiers[n++] = (ds_tier_spec){sm_count - groups * group, DS_ANCHOR_HIGH};
    }
    return n;
}

/* A first runtime with the default pool (falling back to the simulated
 * device without a GPU) reads the device's SMs and split; the runtime used is
 * then created on the same device with the ladder's tiers. available[i]:
 * configuration i can run on this pool. */
static int open_runtime(ds_runtime_config *cfg, const ds_sim_config *sim, ds_runtime_t *rt, int *simulated,
                        int available[NUM_CONFIGS])
{
    ds_runtime_t probe;
    if (bench_runtime_open(cfg, sim, &probe, simulated))
        return -1;
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    ds_status st = ds_runtime_info_get(probe, &info);
    ds_status dst = ds_runtime_destroy(probe);
    if (st != DS_SUCCESS || dst != DS_SUCCESS) {
        fprintf(stderr, "colocate: reading the device's pool -> %s: %s\n",
                ds_status_name(st != DS_SUCCESS ? st : dst), ds_last_error_message());
        return -1;
    }
    ds_tier_spec tiers[1 + 2 * LADDER_N];
    int in_pool[LADDER_N];
    cfg->num_tiers = ladder_tiers(info.sm_count, info.min_partition_sms, tiers, in_pool);
    cfg->tiers = tiers;
    cfg->device = *simulated ? DS_DEVICE_SIM : DS_DEVICE_CUDA;
    cfg->sim = *simulated ? sim : NULL;
    if (*simulated)
        cfg->scheduler_period_us = -1; /* passes from run.c's waits, at simulated instants */
    st = ds_runtime_create(cfg, rt);
    cfg->tiers = NULL;
    cfg->num_tiers = 0;
    if (st != DS_SUCCESS) {
        fprintf(stderr, "colocate: ds_runtime_create with the ladder's tiers -> %s: %s\n", ds_status_name(st),
                ds_last_error_message());
        return -1;
    }
    for (size_t i = 0; i < NUM_CONFIGS; i++) {
        available[i] = 1;
        for (size_t k = 0; k < LADDER_N; k++)
            if (CONFIGS[i].ls_sms == LADDER[k])
                available[i] = in_pool[k];
    }
    for (size_t k = 0; k < LADDER_N; k++)
        if (!in_pool[k])
            printf("note: no LOW tier of %u SMs on this device (%u SMs in groups of %u): static@%u left out\n",
                   LADDER[k], info.sm_count, info.min_partition_sms, LADDER[k]);
    return 0;
}

/* ds_policy_param_set without the library's own error line: the callers
 * below report a refusal themselves (with the option that asked for it), so
 * it is printed once. */
static ds_status param_set(ds_runtime_t rt, const char *policy, const char *name, const char *value)
{
    ds_log_set_handler(NULL, NULL, DS_LOG_NONE);
    ds_status st = ds_policy_param_set(rt, policy, name, value);
    bench_log_from_env("COLOCATE_LOG");
    return st;
}

/* slo_aware's (and slo_aware_nogates') attainment target; a warning, not a
 * failure, where the policy has no such parameter. 1 if slo_aware took it. */
static int apply_target(ds_runtime_t rt, double target)
{
    static const char *const policies[] = {"slo_aware", "slo_aware_nogates"};
    char value[32];
    snprintf(value, sizeof value, "%.10g", target);
    int applied = 0;
    for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
        ds_status st = param_set(rt, policies[p], "target", value);
        if (st != DS_SUCCESS)
            fprintf(stderr, "colocate: warning: %s did not take target %s (%s); it runs with its own\n",
                    policies[p], value, ds_last_error_message());
        else if (p == 0)
            applied = 1;
    }
    return applied;
}

/* --param POLICY:NAME=VALUE, in order; an error where one is refused. */
static int apply_params(ds_runtime_t rt, const options *o)
{
    for (size_t k = 0; k < o->params_n; k++) {
        const char *policy = o->params[k].policy, *name = o->params[k].name, *value = o->params[k].value;
        if (param_set(rt, policy, name, value) != DS_SUCCESS) {
            fprintf(stderr, "colocate: --param %s: %s\n", o->params[k].given, ds_last_error_message());
            return -1;
        }
        printf("policy %s: %s = %s\n", policy, name, value);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (bench_version_flag("colocate", argc, argv))
        return 0;
    options o;
    int selected[NUM_CONFIGS], available[NUM_CONFIGS];
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
    if (select_configs(o.configs, o.sweep_n > 0, NULL, selected))
        return 2;
    if (o.out && bench_out_writable("colocate", o.out)) /* before the run, not after it */
        return 2;
    bench_log_from_env("COLOCATE_LOG"); /* info: the policies' decisions (slo_aware's tier changes) */

    /* Simulated time is virtual: the tenant threads take turns on the
     * device (ds_sim_thread_reserve), sleep and wait on its clock, and the
     * runtime's scheduler pass runs at simulated instants (run.c), so a run
     * repeats itself exactly for a seed. */
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = DS_SIM_CLOCK_VIRTUAL;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = o.device;
    cfg.ls_sms = o.ls_sms;  /* the LS tier of static, slo_aware (and tpot_first's split) */
    cfg.policy = "manual"; /* each configuration makes its own policy active */
    ds_runtime_t rt;
    if (open_runtime(&cfg, &sim, &rt, &r.simulated, available))
        return 1;
    if (r.simulated)
        bench_clock_sim(rt);
    if (select_configs(o.configs, o.sweep_n > 0, available, selected)) {
        ds_runtime_destroy(rt);
        return 2;
    }
    r.opt = &o;
    r.selected = selected;
    r.available = available;
    r.requests = o.requests;
    r.target_applied = apply_target(rt, o.target);
    if (apply_params(rt, &o)) {
        ds_runtime_destroy(rt);
        return 2;
    }
    int rc = run(&o, &r, rt);
    ds_status st = ds_runtime_destroy(rt);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "colocate: ds_runtime_destroy -> %s: %s\n", ds_status_name(st), ds_last_error_message());
        rc = -1;
    }
    return rc == 0 ? 0 : 1;
}
