/*
 * pairs: two best-effort training-like tenants sharing one GPU (docs/benchmarks.md, W2).
 * Each tenant runs on its own thread and vCtx a never-idle loop of steps of
 * one kind (workload.h): `compute` (cuBLAS GEMMs), `memory` (AdamW update and
 * gradient sum of squares over 256 MiB arrays) or `mix` (both). Every pair is
 * run under every policy of the library, both tenants DS_CLASS_BEST_EFFORT
 * without SLO or phase, so the policies place them as they place BE work:
 *
 *   temporal    one tenant on the GPU at a time (the baseline: ~1.0)
 *   shared      both on the whole GPU, same stream priority (MPS-like)
 *   priority    same as shared here (no tenant is latency-sensitive)
 *   static      BE goes to the complement of the LS tier: both tenants share
 *               those SMs and the LS tier stays idle
 *   slo_aware   no LS tenant: both BE expanded to the whole GPU with a window
 *   tpot_first  both treated as prefill: confined to the ls_sms/2 LOW tier
 *   balance     measures each tenant alone, both shared, and both ways round
 *               on every LOW tier + complement, and keeps the best (its
 *               ~225 ms of measuring is inside the measured window)
 *   split       (policy manual) tenant a on the LOW tier nearest ls_sms,
 *               tenant b on its complement: a fixed disjoint split (MIG-like)
 *
 * Before the pairs, each kind runs alone on every pCtx of the pool for a
 * quarter window (kinds.<kind>.alone_by_pctx): how much of its speed it keeps
 * on fewer SMs, which is what decides whether a split can pay.
 *
 * Figures: each tenant's steps/s over the same kind's steps/s alone on the
 * whole GPU (a_norm, b_norm; alone measured at the start and at the end of
 * the run, averaged) and sum_norm = a_norm + b_norm per policy and pair.
 * Runs of (policy, pair) go in a seeded random order so slow drift of the
 * machine does not favour one policy.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>

#include "bench.h"
#include "workload.h"

#ifndef PAIRS_SOURCE_DIR
#define PAIRS_SOURCE_DIR "."
#endif

#define WARMUP_STEPS 4
#define WINDOW_LEAD_NS 2000000ull
#define DEFAULT_SECONDS_CUDA 2.0
#define DEFAULT_SECONDS_SIM 0.25
#define DEFAULT_LS_SMS 64

static const char *const KIND_NAMES[KIND_COUNT] = {"compute", "memory", "mix"};
static const char *const KIND_WHAT[KIND_COUNT] = {
    "4 cuBLAS bf16 GEMMs 4096^3 per step (section)",
    "sum of squares over 256 MiB + AdamW over 64M fp32 parameters (4 x 256 MiB) per step (ds_launch)",
    "2 GEMMs 4096^3 + sum of squares and AdamW over 32M parameters per step",
};

typedef struct policy_cfg {
    const char *name, *policy, *what;
    int split;
} policy_cfg;

static const policy_cfg POLICIES[] = {
    {"temporal", "temporal", "one tenant on the GPU at a time (baseline)", 0},
    {"shared", "shared", "both on the whole GPU, same stream priority (MPS-like)", 0},
    {"priority", "priority", "stream priorities; both BE, so the same as shared", 0},
    {"static", "static", "BE on the complement of the LS tier: both tenants on those SMs", 0},
    {"slo_aware", "slo_aware", "no LS tenant: both BE on the whole GPU with a window", 0},
    {"tpot_first", "tpot_first", "both BE are prefill: confined to the ls_sms/2 LOW tier", 0},
    {"balance", "balance", "measures alone, shared and every tier split both ways; keeps the best", 0},
    {"split", "manual", "a on the LOW tier nearest ls_sms, b on its complement (MIG-like)", 1},
};
#define NUM_POLICIES (sizeof POLICIES / sizeof POLICIES[0])

typedef struct pair_def {
    pairs_kind a, b;
} pair_def;

#define MAX_PAIRS 6

typedef struct options {
    ds_device_kind device;
    uint64_t seed;
    const char *out;
    double seconds; /* 0: the device's default */
    uint32_t ls_sms;
    pair_def pairs[MAX_PAIRS];
    size_t num_pairs;
    int policy_on[NUM_POLICIES];
} options;

/* ------------------------------------------------------------------------ */
/* one run: one or two tenants for one window                                */

typedef struct tenant_task {
    pairs_backend *be;
    pairs_tenant *t;
    ds_vctx_t v;
    atomic_int ready;
    atomic_int *stop, *failed;
    uint64_t start_ns;
    uint64_t *done_ns;
    size_t done_count, done_cap;
    uint64_t pctx_samples[DS_MAX_PCTX], samples;
    _Atomic uint64_t *t0_ns;
    uint64_t window_ns;
} tenant_task;

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static int record(tenant_task *k, uint64_t completed)
{
    uint64_t now = bench_now_ns();
    while (k->done_count < completed) {
        if (k->done_count == k->done_cap) {
            size_t cap = k->done_cap ? 2 * k->done_cap : 4096;
            uint64_t *p = realloc(k->done_ns, cap * sizeof *p);
            if (!p) {
                fprintf(stderr, "pairs: out of memory\n");
                return -1;
            }
            k->done_ns = p;
            k->done_cap = cap;
        }
        k->done_ns[k->done_count++] = now;
    }
    return 0;
}

static int tenant_body(tenant_task *k)
{
    if (k->be->thread_init(k->be))
        return -1;
    step_progress p = {0, 0};
    k->start_ns = bench_now_ns();
    while (!atomic_load(k->stop) && !atomic_load(k->failed)) {
        if (k->be->submit(k->t, k->v, &p))
            return -1;
        uint64_t t0 = atomic_load(k->t0_ns), now = bench_now_ns();
        ds_vctx_stats st = DS_VCTX_STATS_INIT;
        if (t0 && now >= t0 && now - t0 <= k->window_ns && ds_vctx_get_stats(k->v, &st) == DS_SUCCESS &&
            st.pctx < DS_MAX_PCTX) {
            k->pctx_samples[st.pctx]++;
            k->samples++;
        }
        if (k->be->retire(k->t, k->v, &p) || record(k, p.completed))
            return -1;
        if (p.completed >= WARMUP_STEPS)
            atomic_store(&k->ready, 1);
    }
    BENCH_DS_CHECK(ds_vctx_synchronize(k->v));
    return record(k, p.submitted);
}

static void *tenant_main(void *arg)
{
    tenant_task *k = arg;
    if (tenant_body(k))
        atomic_store(k->failed, 1);
    atomic_store(&k->ready, 1);
    return NULL;
}

/* Steps completed by time `at`, interpolated between the completions seen
 * around it (as in bench/colocate/run.c). */
static double progress_at(const tenant_task *k, uint64_t at)
{
    size_t n = 0;
    while (n < k->done_count && k->done_ns[n] <= at)
        n++;
    uint64_t prev = n ? k->done_ns[n - 1] : k->start_ns;
    if (n == k->done_count || at <= prev)
        return (double)n;
    size_t next = n;
    while (next + 1 < k->done_count && k->done_ns[next + 1] == k->done_ns[n])
        next++;
    double frac = (double)(at - prev) / (double)(k->done_ns[n] - prev);
    return (double)n + frac * (double)(next + 1 - n);
}

/* Warnings go to stderr; the balance policy's choice (an INFO line) is kept
 * for the run in progress. */
static pthread_mutex_t g_choice_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_choice[1024];

static void log_handler(ds_log_level level, const char *message, void *user)
{
    if (strncmp(message, "balance: ", 9) == 0) {
        pthread_mutex_lock(&g_choice_lock);
        snprintf(g_choice, sizeof g_choice, "%s", message + 9);
        pthread_mutex_unlock(&g_choice_lock);
        return;
    }
    if (level <= DS_LOG_WARN)
        bench_log_to_stderr(level, message, user);
}

static void take_choice(char *out, size_t cap)
{
    pthread_mutex_lock(&g_choice_lock);
    snprintf(out, cap, "%s", g_choice);
    g_choice[0] = 0;
    pthread_mutex_unlock(&g_choice_lock);
}

typedef struct run_env {
    ds_runtime_t rt;
    pairs_backend *be;
    const ds_runtime_info *info;
    double seconds;
    int32_t split_low, split_high; /* pCtxs of `split` */
} run_env;

typedef struct tenant_result {
    double steps_per_s;
    char choice[1024]; /* tenant a's only: balance's logged choice, if any */
    uint32_t pctx_sms; /* SMs of the pCtx most of its steps ran on */
    double pctx_share;
} tenant_result;

static void summarize_tenant(const run_env *env, const tenant_task *k, uint64_t t0, tenant_result *r)
{
    uint64_t t1 = t0 + (uint64_t)(env->seconds * 1e9);
    r->steps_per_s = (progress_at(k, t1) - progress_at(k, t0)) / env->seconds;
    uint32_t best = 0;
    for (uint32_t i = 1; i < DS_MAX_PCTX; i++)
        if (k->pctx_samples[i] > k->pctx_samples[best])
            best = i;
    r->pctx_sms = env->info->pctx[best].sm_count;
    r->pctx_share = k->samples ? (double)k->pctx_samples[best] / (double)k->samples : NAN;
}

/* Runs tenant a (and b unless nb == 0) for one window under `policy`, each
 * tenant created on pctx[i] when pctx is not NULL. */
static int run_once(const run_env *env, const char *policy, const int32_t *pctx, const pairs_kind *kinds, int nb,
                    tenant_result *out)
{
    int n = nb ? 2 : 1;
    atomic_int stop = 0, failed = 0;
    _Atomic uint64_t t0_ns = 0;
    tenant_task tasks[2];
    pthread_t th[2];
    int started[2] = {0, 0};
    int rc = -1;
    memset(tasks, 0, sizeof tasks);
    if (ds_runtime_set_policy(env->rt, policy) != DS_SUCCESS) {
        fprintf(stderr, "pairs: ds_runtime_set_policy(%s) -> %s\n", policy, ds_last_error_message());
        return -1;
    }
    for (int i = 0; i < n; i++) {
        tenant_task *k = &tasks[i];
        k->be = env->be;
        k->stop = &stop;
        k->failed = &failed;
        k->t0_ns = &t0_ns;
        k->window_ns = (uint64_t)(env->seconds * 1e9);
        /* the same kind twice gets two independent sets of buffers */
        int slot = i == 1 && kinds[1] == kinds[0];
        if (env->be->tenant_get(env->be, kinds[i], slot, &k->t))
            goto done;
        ds_vctx_attr a = DS_VCTX_ATTR_INIT;
        a.name = i ? "b" : "a";
        a.cls = DS_CLASS_BEST_EFFORT;
        if (pctx)
            a.initial_pctx = pctx[i];
        ds_status st = ds_vctx_create(env->rt, &a, &k->v);
        if (st != DS_SUCCESS) {
            fprintf(stderr, "pairs: ds_vctx_create -> %s: %s\n", ds_status_name(st), ds_last_error_message());
            goto done;
        }
    }
    for (int i = 0; i < n; i++) {
        if (pthread_create(&th[i], NULL, tenant_main, &tasks[i]) != 0) {
            fprintf(stderr, "pairs: pthread_create failed\n");
            atomic_store(&failed, 1);
            break;
        }
        started[i] = 1;
    }
    for (int i = 0; i < n && !atomic_load(&failed); i++)
        while (!atomic_load(&tasks[i].ready) && !atomic_load(&failed))
            pause_us(100);
    uint64_t t0 = bench_now_ns() + WINDOW_LEAD_NS;
    atomic_store(&t0_ns, t0);
    if (!atomic_load(&failed))
        bench_sleep_until_ns(t0 + (uint64_t)(env->seconds * 1e9));
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++)
        if (started[i])
            pthread_join(th[i], NULL);
    if (!atomic_load(&failed)) {
        for (int i = 0; i < n; i++)
            summarize_tenant(env, &tasks[i], t0, &out[i]);
        take_choice(out[0].choice, sizeof out[0].choice);
        rc = 0;
    }
done:
    for (int i = 0; i < n; i++) {
        if (tasks[i].v && ds_vctx_destroy(tasks[i].v) != DS_SUCCESS) {
            fprintf(stderr, "pairs: ds_vctx_destroy: %s\n", ds_last_error_message());
            rc = -1;
        }
        free(tasks[i].done_ns);
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* command line                                                              */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pairs [options]\n"
            "  --device cuda|sim   device (default cuda; without a GPU: the simulator)\n"
            "  --seed N            seed of the order of the runs (default 1)\n"
            "  --out FILE          write the JSON result there (docs/benchmarks.md, W2)\n"
            "  --seconds X         measurement window per run (default %.1f on a GPU, %.2f simulated)\n"
            "  --pairs LIST        e.g. compute+compute,compute+memory (default: compute+compute,\n"
            "                      compute+memory,memory+memory,mix+mix); kinds: compute, memory, mix\n"
            "  --policies LIST     subset of the policies (temporal is always run: the baseline)\n"
            "  --ls-sms N          SMs of the LS tier static/tpot_first/split use (default %d)\n"
            "  --help              this text\n"
            "policies:\n",
            DEFAULT_SECONDS_CUDA, DEFAULT_SECONDS_SIM, DEFAULT_LS_SMS);
    for (size_t i = 0; i < NUM_POLICIES; i++)
        fprintf(f, "  %-10s %s\n", POLICIES[i].name, POLICIES[i].what);
    fprintf(f, "kinds:\n");
    for (int k = 0; k < KIND_COUNT; k++)
        fprintf(f, "  %-8s %s\n", KIND_NAMES[k], KIND_WHAT[k]);
}

static int kind_of(const char *s, size_t len, pairs_kind *out)
{
    for (int k = 0; k < KIND_COUNT; k++)
        if (strlen(KIND_NAMES[k]) == len && !strncmp(KIND_NAMES[k], s, len)) {
            *out = (pairs_kind)k;
            return 0;
        }
    fprintf(stderr, "pairs: unknown kind '%.*s' (compute, memory, mix)\n", (int)len, s);
    return -1;
}

static int parse_pairs(const char *list, options *o)
{
    o->num_pairs = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        const char *plus = memchr(p, '+', len);
        if (!plus) {
            fprintf(stderr, "pairs: --pairs: '%.*s' is not KIND+KIND\n", (int)len, p);
            return -1;
        }
        if (o->num_pairs == MAX_PAIRS) {
            fprintf(stderr, "pairs: --pairs: at most %d pairs\n", MAX_PAIRS);
            return -1;
        }
        pair_def *d = &o->pairs[o->num_pairs++];
        if (kind_of(p, (size_t)(plus - p), &d->a) || kind_of(plus + 1, len - (size_t)(plus - p) - 1, &d->b))
            return -1;
        p += len + (p[len] == ',');
    }
    if (!o->num_pairs) {
        fprintf(stderr, "pairs: --pairs: empty list\n");
        return -1;
    }
    return 0;
}

static int parse_policies(const char *list, options *o)
{
    for (size_t i = 0; i < NUM_POLICIES; i++)
        o->policy_on[i] = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ","), i = 0;
        while (i < NUM_POLICIES && !(strlen(POLICIES[i].name) == len && !strncmp(POLICIES[i].name, p, len)))
            i++;
        if (i == NUM_POLICIES) {
            fprintf(stderr, "pairs: --policies: unknown policy '%.*s' (see --help)\n", (int)len, p);
            return -1;
        }
        o->policy_on[i] = 1;
        p += len + (p[len] == ',');
    }
    o->policy_on[0] = 1; /* temporal: the baseline */
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->device = DS_DEVICE_CUDA;
    o->seed = 1;
    o->ls_sms = DEFAULT_LS_SMS;
    if (parse_pairs("compute+compute,compute+memory,memory+memory,mix+mix", o))
        return -1;
    for (size_t i = 0; i < NUM_POLICIES; i++)
        o->policy_on[i] = 1;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h"))
            return 1;
        if (i + 1 >= argc) {
            fprintf(stderr, "pairs: %s: unknown option or missing value (see --help)\n", flag);
            return -1;
        }
        const char *val = argv[++i];
        uint64_t u;
        if (!strcmp(flag, "--device")) {
            if (strcmp(val, "cuda") && strcmp(val, "sim")) {
                fprintf(stderr, "pairs: --device: '%s' is neither cuda nor sim\n", val);
                return -1;
            }
            o->device = !strcmp(val, "sim") ? DS_DEVICE_SIM : DS_DEVICE_CUDA;
            if (!strcmp(val, "cuda"))
                bench_require_cuda();
        } else if (!strcmp(flag, "--seed")) {
            if (bench_parse_u64("pairs", flag, val, 0, UINT64_MAX, &o->seed))
                return -1;
        } else if (!strcmp(flag, "--out")) {
            o->out = val;
        } else if (!strcmp(flag, "--seconds")) {
            char *end;
            errno = 0;
            double s = strtod(val, &end);
            if (errno || end == val || *end || !(s >= 0.01 && s <= 600)) {
                fprintf(stderr, "pairs: --seconds: '%s' is not a number in [0.01, 600]\n", val);
                return -1;
            }
            o->seconds = s;
        } else if (!strcmp(flag, "--pairs")) {
            if (parse_pairs(val, o))
                return -1;
        } else if (!strcmp(flag, "--policies")) {
            if (parse_policies(val, o))
                return -1;
        } else if (!strcmp(flag, "--ls-sms")) {
            if (bench_parse_u64("pairs", flag, val, 1, DS_MAX_SMS, &u))
                return -1;
            o->ls_sms = (uint32_t)u;
        } else {
            fprintf(stderr, "pairs: unknown option %s (see --help)\n", flag);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* the whole run                                                             */

typedef struct pair_result {
    tenant_result a, b;
    double a_norm, b_norm, sum_norm;
} pair_result;

typedef struct report {
    const options *o;
    const ds_runtime_info *info;
    int simulated;
    double seconds;
    char command[4096];
    int kind_used[KIND_COUNT];
    double alone_start[KIND_COUNT], alone_end[KIND_COUNT], alone[KIND_COUNT];
    double by_pctx[KIND_COUNT][DS_MAX_PCTX]; /* steps/s alone on each pCtx */
    pair_result res[NUM_POLICIES][MAX_PAIRS];
    int32_t split_low, split_high;
} report;

static void pair_name(const pair_def *d, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s+%s", KIND_NAMES[d->a], KIND_NAMES[d->b]);
}

/* The LOW pCtx nearest sms and its complement, for `split`. */
static int find_split(const ds_runtime_info *info, uint32_t sms, int32_t *low, int32_t *high)
{
    int32_t best = -1;
    for (uint32_t i = 0; i < info->num_pctx; i++) {
        const ds_pctx_info *p = &info->pctx[i];
        if (p->anchor != DS_ANCHOR_LOW || p->complement < 0)
            continue;
        if (best < 0 || labs((long)p->sm_count - (long)sms) < labs((long)info->pctx[best].sm_count - (long)sms))
            best = (int32_t)i;
    }
    if (best < 0) {
        fprintf(stderr, "pairs: the pool has no LOW pCtx with a complement: no split\n");
        return -1;
    }
    *low = best;
    *high = info->pctx[best].complement;
    return 0;
}

static int measure_alone(const run_env *env, report *r, double *into, const char *when)
{
    for (int k = 0; k < KIND_COUNT; k++) {
        if (!r->kind_used[k])
            continue;
        pairs_kind kinds[1] = {(pairs_kind)k};
        tenant_result t;
        if (run_once(env, "manual", NULL, kinds, 0, &t)) {
            fprintf(stderr, "pairs: %s alone failed\n", KIND_NAMES[k]);
            return -1;
        }
        into[k] = t.steps_per_s;
        printf("%-8s alone (%s): %.1f steps/s on %u SMs\n", KIND_NAMES[k], when, t.steps_per_s, t.pctx_sms);
        fflush(stdout);
    }
    return 0;
}

/* Each used kind alone on every pCtx, for a quarter window each. */
static int measure_tiers(const run_env *env, report *r)
{
    run_env quarter = *env;
    quarter.seconds = env->seconds / 4;
    for (int k = 0; k < KIND_COUNT; k++) {
        if (!r->kind_used[k])
            continue;
        printf("%-8s alone by pCtx:", KIND_NAMES[k]);
        for (uint32_t i = 0; i < env->info->num_pctx; i++) {
            pairs_kind kinds[1] = {(pairs_kind)k};
            int32_t where[1] = {(int32_t)i};
            tenant_result t;
            if (run_once(&quarter, "manual", where, kinds, 0, &t)) {
                fprintf(stderr, "pairs: %s alone on pCtx %u failed\n", KIND_NAMES[k], i);
                return -1;
            }
            r->by_pctx[k][i] = t.steps_per_s;
            printf(" %u SMs %.1f", env->info->pctx[i].sm_count, t.steps_per_s);
        }
        printf(" steps/s\n");
        fflush(stdout);
    }
    return 0;
}

static int run_all(const run_env *env, report *r)
{
    const options *o = r->o;
    if (measure_alone(env, r, r->alone_start, "start") || measure_tiers(env, r))
        return -1;
    /* (policy, pair) in a seeded random order (Fisher-Yates) */
    size_t order[NUM_POLICIES * MAX_PAIRS], n = 0;
    for (size_t p = 0; p < NUM_POLICIES; p++)
        if (o->policy_on[p])
            for (size_t q = 0; q < o->num_pairs; q++)
                order[n++] = p * MAX_PAIRS + q;
    bench_rng rng;
    bench_rng_seed(&rng, o->seed);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(bench_rng_next(&rng) % i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        size_t p = order[i] / MAX_PAIRS, q = order[i] % MAX_PAIRS;
        const pair_def *d = &o->pairs[q];
        pairs_kind kinds[2] = {d->a, d->b};
        tenant_result t[2];
        int32_t split[2] = {env->split_low, env->split_high};
        if (run_once(env, POLICIES[p].policy, POLICIES[p].split ? split : NULL, kinds, 1, t)) {
            fprintf(stderr, "pairs: %s under %s failed\n", KIND_NAMES[d->a], POLICIES[p].name);
            return -1;
        }
        r->res[p][q].a = t[0];
        r->res[p][q].b = t[1];
        char name[64];
        pair_name(d, name, sizeof name);
        printf("[%zu/%zu] %-10s %-16s a %.1f steps/s (%u SMs), b %.1f steps/s (%u SMs)\n", i + 1, n,
               POLICIES[p].name, name, t[0].steps_per_s, t[0].pctx_sms, t[1].steps_per_s, t[1].pctx_sms);
        fflush(stdout);
    }
    if (measure_alone(env, r, r->alone_end, "end"))
        return -1;
    for (int k = 0; k < KIND_COUNT; k++)
        r->alone[k] = 0.5 * (r->alone_start[k] + r->alone_end[k]);
    for (size_t p = 0; p < NUM_POLICIES; p++)
        for (size_t q = 0; q < o->num_pairs; q++) {
            pair_result *x = &r->res[p][q];
            x->a_norm = x->a.steps_per_s / r->alone[o->pairs[q].a];
            x->b_norm = x->b.steps_per_s / r->alone[o->pairs[q].b];
            x->sum_norm = x->a_norm + x->b_norm;
        }
    return 0;
}

/* The policy with the largest sum_norm for pair q, over temporal's. */
static size_t best_policy(const report *r, size_t q)
{
    size_t best = 0;
    for (size_t p = 1; p < NUM_POLICIES; p++)
        if (r->o->policy_on[p] && r->res[p][q].sum_norm > r->res[best][q].sum_norm)
            best = p;
    return best;
}

static void json_tenant(bench_json *j, const char *prefix, const tenant_result *t, double norm)
{
    char key[64];
    snprintf(key, sizeof key, "%s_norm", prefix);
    bench_json_number(j, key, norm);
    snprintf(key, sizeof key, "%s_steps_per_s", prefix);
    bench_json_number(j, key, t->steps_per_s);
    snprintf(key, sizeof key, "%s_sms", prefix);
    bench_json_int(j, key, t->pctx_sms);
    snprintf(key, sizeof key, "%s_pctx_share", prefix);
    bench_json_number(j, key, t->pctx_share);
}

static int write_json(const report *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "pairs: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    const options *o = r->o;
    char commit[128], date[64], driver[128];
    bench_commit(PAIRS_SOURCE_DIR, commit, sizeof commit);
    bench_date_utc(date, sizeof date);
    bench_driver_string(r->info->driver_version, driver, sizeof driver);
    bench_json j;
    bench_json_begin(&j, f);
    bench_json_string(&j, "benchmark", "pairs");
    bench_json_string(&j, "device", r->info->device_name);
    bench_json_string(&j, "driver", driver);
    bench_json_int(&j, "sms", r->info->sm_count);
    bench_json_string(&j, "commit", commit);
    bench_json_string(&j, "command", r->command);
    bench_json_string(&j, "date", date);
    bench_json_bool(&j, "simulated", r->simulated);
    if (r->simulated)
        bench_json_string(&j, "simulated_note",
                          "the simulated device models block durations and occupancy only, not memory "
                          "bandwidth: it cannot show bandwidth contention, so memory-bound pairs here say "
                          "nothing about a GPU");
    bench_json_number(&j, "seconds", r->seconds);
    bench_json_uint(&j, "seed", o->seed);
    bench_json_int(&j, "ls_sms_requested", o->ls_sms);
    bench_json_int(&j, "split_a_sms", r->info->pctx[r->split_low].sm_count);
    bench_json_int(&j, "split_b_sms", r->info->pctx[r->split_high].sm_count);
    bench_json_object(&j, "kinds");
    for (int k = 0; k < KIND_COUNT; k++) {
        if (!r->kind_used[k])
            continue;
        bench_json_object(&j, KIND_NAMES[k]);
        bench_json_string(&j, "step", KIND_WHAT[k]);
        bench_json_number(&j, "alone_steps_per_s", r->alone[k]);
        bench_json_number(&j, "alone_steps_per_s_start", r->alone_start[k]);
        bench_json_number(&j, "alone_steps_per_s_end", r->alone_end[k]);
        bench_json_object(&j, "alone_by_pctx");
        for (uint32_t i = 0; i < r->info->num_pctx; i++) {
            const ds_pctx_info *pc = &r->info->pctx[i];
            char key[32];
            snprintf(key, sizeof key, "%u_%s", pc->sm_count, bench_anchor_name(pc->anchor));
            bench_json_object(&j, key);
            bench_json_int(&j, "pctx", i);
            bench_json_number(&j, "steps_per_s", r->by_pctx[k][i]);
            bench_json_number(&j, "norm", r->by_pctx[k][i] / r->alone[k]);
            bench_json_end(&j);
        }
        bench_json_end(&j);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    bench_json_object(&j, "policies");
    for (size_t p = 0; p < NUM_POLICIES; p++)
        if (o->policy_on[p])
            bench_json_string(&j, POLICIES[p].name, POLICIES[p].what);
    bench_json_end(&j);
    bench_json_object(&j, "configs");
    for (size_t p = 0; p < NUM_POLICIES; p++) {
        if (!o->policy_on[p])
            continue;
        bench_json_object(&j, POLICIES[p].name);
        for (size_t q = 0; q < o->num_pairs; q++) {
            char name[64];
            pair_name(&o->pairs[q], name, sizeof name);
            const pair_result *x = &r->res[p][q];
            bench_json_object(&j, name);
            bench_json_number(&j, "sum_norm", x->sum_norm);
            if (x->a.choice[0])
                bench_json_string(&j, "choice", x->a.choice);
            json_tenant(&j, "a", &x->a, x->a_norm);
            json_tenant(&j, "b", &x->b, x->b_norm);
            bench_json_end(&j);
        }
        bench_json_end(&j);
    }
    bench_json_end(&j);
    bench_json_object(&j, "best");
    for (size_t q = 0; q < o->num_pairs; q++) {
        char name[64];
        pair_name(&o->pairs[q], name, sizeof name);
        size_t b = best_policy(r, q);
        bench_json_object(&j, name);
        bench_json_string(&j, "policy", POLICIES[b].name);
        bench_json_number(&j, "sum_norm", r->res[b][q].sum_norm);
        bench_json_number(&j, "over_temporal", r->res[b][q].sum_norm / r->res[0][q].sum_norm);
        bench_json_end(&j);
    }
    bench_json_end(&j);
    int rc = bench_json_finish(&j);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "pairs: error writing %s\n", path);
        return -1;
    }
    return 0;
}

static void print_table(const report *r)
{
    const options *o = r->o;
    printf("\nsum_norm (a_norm + b_norm; each tenant's steps/s over its kind alone)\n%-11s", "policy");
    for (size_t q = 0; q < o->num_pairs; q++) {
        char name[64];
        pair_name(&o->pairs[q], name, sizeof name);
        printf(" %22s", name);
    }
    printf("\n");
    for (size_t p = 0; p < NUM_POLICIES; p++) {
        if (!o->policy_on[p])
            continue;
        printf("%-11s", POLICIES[p].name);
        for (size_t q = 0; q < o->num_pairs; q++) {
            const pair_result *x = &r->res[p][q];
            char cell[64];
            snprintf(cell, sizeof cell, "%.2f (%.2f+%.2f)", x->sum_norm, x->a_norm, x->b_norm);
            printf(" %22s", cell);
        }
        printf("\n");
    }
    printf("%-11s", "best");
    for (size_t q = 0; q < o->num_pairs; q++) {
        size_t b = best_policy(r, q);
        char cell[64];
        snprintf(cell, sizeof cell, "%s %.2fx", POLICIES[b].name, r->res[b][q].sum_norm / r->res[0][q].sum_norm);
        printf(" %22s", cell);
    }
    printf("\nalone steps/s:");
    for (int k = 0; k < KIND_COUNT; k++)
        if (r->kind_used[k])
            printf(" %s %.1f (start %.1f, end %.1f)", KIND_NAMES[k], r->alone[k], r->alone_start[k], r->alone_end[k]);
    printf("\n%.2f s per run; split = %u+%u SMs%s\n", r->seconds, r->info->pctx[r->split_low].sm_count,
           r->info->pctx[r->split_high].sm_count,
           r->simulated ? "  [SIMULATED DEVICE: no memory-bandwidth model]" : "");
}

int main(int argc, char **argv)
{
    if (bench_version_flag("pairs", argc, argv))
        return 0;
    options o;
    report *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "pairs: out of memory\n");
        return 1;
    }
    bench_command(argc, argv, r->command, sizeof r->command);
    int prc = parse_args(argc, argv, &o);
    if (prc > 0) {
        usage(stdout);
        free(r);
        return 0;
    }
    if (prc < 0) {
        free(r);
        return 2;
    }
    ds_log_set_handler(log_handler, NULL, DS_LOG_INFO);
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = DS_SIM_CLOCK_REALTIME;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = o.device;
    cfg.ls_sms = o.ls_sms;
    cfg.policy = "manual";
    ds_runtime_t rt;
    if (bench_runtime_open(&cfg, &sim, &rt, &r->simulated)) {
        free(r);
        return 1;
    }
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    int rc = ds_runtime_info_get(rt, &info) == DS_SUCCESS ? 0 : -1;
    r->o = &o;
    r->info = &info;
    r->seconds = o.seconds > 0 ? o.seconds : r->simulated ? DEFAULT_SECONDS_SIM : DEFAULT_SECONDS_CUDA;
    for (size_t q = 0; q < o.num_pairs; q++)
        r->kind_used[o.pairs[q].a] = r->kind_used[o.pairs[q].b] = 1;
    run_env env = {rt, NULL, &info, r->seconds, 0, 0};
    if (rc == 0)
        rc = find_split(&info, o.ls_sms, &r->split_low, &r->split_high);
    env.split_low = r->split_low;
    env.split_high = r->split_high;
    if (rc == 0) {
        printf("device: %s%s, %u SMs; %.2f s per run; split %u+%u SMs\n", info.device_name,
               r->simulated ? " [SIMULATED]" : "", info.sm_count, r->seconds, info.pctx[r->split_low].sm_count,
               info.pctx[r->split_high].sm_count);
        rc = r->simulated ? pairs_sim_create(rt, &env.be) : pairs_cuda_create(rt, 0, &env.be);
    }
    if (rc == 0)
        rc = run_all(&env, r);
    if (env.be)
        env.be->destroy(env.be);
    if (rc == 0 && o.out) {
        rc = write_json(r, o.out);
        if (rc == 0)
            printf("wrote %s\n", o.out);
    }
    if (rc == 0)
        print_table(r);
    ds_status st = ds_runtime_destroy(rt);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "pairs: ds_runtime_destroy -> %s: %s\n", ds_status_name(st), ds_last_error_message());
        rc = -1;
    }
    free(r);
    return rc == 0 ? 0 : 1;
}
