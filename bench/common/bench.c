/* Shared benchmark helpers: see bench.h. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* time                                                                      */

static ds_runtime_t g_sim_clock; /* bench_clock_sim */

void bench_clock_sim(ds_runtime_t rt) { g_sim_clock = rt; }

ds_runtime_t bench_clock_sim_rt(void) { return g_sim_clock; }

int bench_turn_reserve(uint32_t *ticket)
{
    *ticket = 0;
    if (!g_sim_clock)
        return 0;
    BENCH_DS_CHECK(ds_sim_thread_reserve(g_sim_clock, ticket));
    return 0;
}

int bench_turn_attach(uint32_t ticket)
{
    if (ticket)
        BENCH_DS_CHECK(ds_sim_thread_attach(g_sim_clock, ticket));
    return 0;
}

void bench_turn_release(uint32_t ticket)
{
    if (ticket && ds_sim_thread_release(g_sim_clock, ticket) != DS_SUCCESS)
        fprintf(stderr, "ds_sim_thread_release(%u): %s\n", ticket, ds_last_error_message());
}

void bench_pause_us(uint32_t us)
{
    if (g_sim_clock) {
        bench_sleep_until_ns(bench_now_ns() + (uint64_t)us * 1000u);
        return;
    }
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

static void *poller_main(void *arg)
{
    bench_poller *p = arg;
    if (bench_turn_attach(p->turn) == 0)
        while (!atomic_load(&p->stop)) {
            ds_runtime_poll(g_sim_clock);
            bench_pause_us(p->period_us);
        }
    atomic_store(&p->done, 1);
    bench_turn_release(p->turn);
    return NULL;
}

int bench_poller_start(bench_poller *p, uint32_t period_us)
{
    p->started = 0;
    atomic_store(&p->stop, 0);
    atomic_store(&p->done, 0);
    p->period_us = period_us ? period_us : 100;
    if (!g_sim_clock)
        return 0;
    if (bench_turn_reserve(&p->turn))
        return -1;
    int e = pthread_create(&p->th, NULL, poller_main, p);
    if (e != 0) {
        fprintf(stderr, "pthread_create (scheduler poller): %s\n", strerror(e));
        bench_turn_release(p->turn);
        return -1;
    }
    p->started = 1;
    return 0;
}

void bench_poller_stop(bench_poller *p)
{
    if (!p->started)
        return;
    atomic_store(&p->stop, 1);
    while (!atomic_load(&p->done))
        bench_pause_us(p->period_us);
    pthread_join(p->th, NULL);
    p->started = 0;
}

uint64_t bench_now_ns(void)
{
    if (g_sim_clock) {
        double us = 0;
        if (ds_sim_now_us(g_sim_clock, &us) != DS_SUCCESS)
            return 0;
        return (uint64_t)llround(us * 1e3);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void bench_sleep_until_ns(uint64_t t_ns)
{
    if (g_sim_clock) {
        ds_sim_sleep_until(g_sim_clock, (double)t_ns / 1e3);
        return;
    }
    const uint64_t spin_ns = 200000;
    if (bench_now_ns() + spin_ns < t_ns) {
        uint64_t wake = t_ns - spin_ns;
        struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
    while (bench_now_ns() < t_ns)
        ;
}

/* ------------------------------------------------------------------------ */
/* random numbers                                                            */

float bench_bf16_to_float(uint16_t bits)
{
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint64_t bench_mix64(uint64_t x)
{
    uint64_t z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = *x;
    *x += 0x9e3779b97f4a7c15ull;
    return bench_mix64(z);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void bench_rng_seed(bench_rng *r, uint64_t seed)
{
    /* splitmix64 never yields an all-zero state, which xoshiro cannot leave. */
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t bench_rng_next(bench_rng *r)
{
    uint64_t *s = r->s;
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double bench_rng_uniform(bench_rng *r)
{
    /* 53 random bits: k / 2^53 is in [0, 1); 1 - that is in (0, 1]. */
    return 1.0 - (double)(bench_rng_next(r) >> 11) * 0x1.0p-53;
}

double bench_rng_exponential(bench_rng *r, double mean)
{
    return -mean * log(bench_rng_uniform(r));
}

void bench_poisson_arrivals(uint64_t seed, double rate_per_s, size_t n, double *out_us)
{
    bench_rng r;
    bench_rng_seed(&r, seed);
    const double mean_gap_us = 1e6 / rate_per_s;
    double t = 0.0;
    for (size_t i = 0; i < n; i++) {
        t += bench_rng_exponential(&r, mean_gap_us);
        out_us[i] = t;
    }
}

/* ------------------------------------------------------------------------ */
/* statistics                                                                */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return NAN;
    double h = (double)(n - 1) * p;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n)
        return sorted[n - 1];
    return sorted[lo] + (h - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

int bench_summarize(const double *x, size_t n, bench_summary *out)
{
    *out = (bench_summary){n, NAN, NAN, NAN, NAN, NAN};
    if (n == 0)
        return 0;
    double *s = malloc(n * sizeof *s);
    if (!s) {
        fprintf(stderr, "bench_summarize: out of memory for %zu samples\n", n);
        return -1;
    }
    memcpy(s, x, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += s[i];
    out->mean = sum / (double)n;
    out->min = s[0];
    out->max = s[n - 1];
    out->p50 = bench_percentile(s, n, 0.50);
    out->p99 = bench_percentile(s, n, 0.99);
    free(s);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* provenance                                                                */

static void copy_str(char *out, size_t cap, const char *s)
{
    snprintf(out, cap, "%s", s);
}

void bench_commit(const char *source_dir, char *out, size_t cap)
{
    const char *env = getenv("DS_COMMIT");
    if (env && *env) {
        copy_str(out, cap, env);
        return;
    }
    copy_str(out, cap, "unknown");
    if (!source_dir || strchr(source_dir, '\''))
        return; /* cannot quote it safely for the shell */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --short HEAD 2>/dev/null", source_dir);
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    char line[128] = "";
    int ok = fgets(line, sizeof line, p) != NULL;
    if (pclose(p) != 0 || !ok)
        return;
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0])
        copy_str(out, cap, line);
}

void bench_date_utc(char *out, size_t cap)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    if (strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0 && cap > 0)
        out[0] = '\0';
}

static int needs_quotes(const char *a)
{
    return *a == '\0' || strpbrk(a, " \t\n'\"\\$`*?;&|<>()") != NULL;
}

void bench_command(int argc, char **argv, char *out, size_t cap)
{
    size_t len = 0;
    if (cap == 0)
        return;
    out[0] = '\0';
    for (int i = 0; i < argc && len + 1 < cap; i++) {
        const char *a = argv[i];
        if (i > 0)
            out[len++] = ' ';
        int q = needs_quotes(a);
        if (q && len + 1 < cap)
            out[len++] = '\'';
        for (; *a && len + 5 < cap; a++) {
            if (*a == '\'' && q) { /* close, escaped quote, reopen */
                memcpy(out + len, "'\\''", 4);
                len += 4;
            } else {
                out[len++] = *a;
            }
        }
        if (q && len + 1 < cap)
            out[len++] = '\'';
        out[len] = '\0';
    }
}

/* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..." */
static int kernel_module_version(char *out, size_t cap)
{
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (!f)
        return -1;
    char line[512];
    int found = -1;
    if (fgets(line, sizeof line, f)) {
        /* The first token that looks like a version: the words before it vary
         * ("Kernel Module for x86_64  580.159.04" on some installs). */
        const char *k = strstr(line, "Kernel Module");
        char ver[64];
        int used = 0;
        for (const char *p = k; p && sscanf(p, " %63s%n", ver, &used) == 1; p += used) {
            if (ver[0] >= '0' && ver[0] <= '9' && strchr(ver, '.')) {
                copy_str(out, cap, ver);
                found = 0;
                break;
            }
        }
    }
    fclose(f);
    return found;
}

void bench_driver_string(int cuda_driver_version, char *out, size_t cap)
{
    if (cuda_driver_version <= 0) {
        copy_str(out, cap, "simulated");
        return;
    }
    int major = cuda_driver_version / 1000, minor = (cuda_driver_version % 1000) / 10;
    char module[64];
    if (kernel_module_version(module, sizeof module) == 0)
        snprintf(out, cap, "%s (CUDA %d.%d)", module, major, minor);
    else
        snprintf(out, cap, "CUDA %d.%d", major, minor);
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                      */

static void json_indent(bench_json *j)
{
    fputc('\n', j->f);
    for (int i = 0; i < j->depth; i++)
        fputs("  ", j->f);
}

static void json_escaped(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* Comma, new line and "key": before a member (no key inside an array). */
static void json_member(bench_json *j, const char *key)
{
    if (j->has_items[j->depth])
        fputc(',', j->f);
    j->has_items[j->depth] = 1;
    json_indent(j);
    if (key && !j->is_array[j->depth]) {
        json_escaped(j->f, key);
        fputs(": ", j->f);
    }
}

void bench_json_begin(bench_json *j, FILE *f)
{
    memset(j, 0, sizeof *j);
    j->f = f;
    fputc('{', f);
}

void bench_json_object(bench_json *j, const char *key)
{
    if (j->depth + 1 >= BENCH_JSON_MAX_DEPTH)
        return; /* deeper than any benchmark writes: a bug, keep the file parsable */
    json_member(j, key);
    fputc('{', j->f);
    j->has_items[++j->depth] = 0;
    j->is_array[j->depth] = 0;
}

void bench_json_array(bench_json *j, const char *key)
{
    if (j->depth + 1 >= BENCH_JSON_MAX_DEPTH)
        return;
    json_member(j, key);
    fputc('[', j->f);
    j->has_items[++j->depth] = 0;
    j->is_array[j->depth] = 1;
}

void bench_json_end(bench_json *j)
{
    int had = j->has_items[j->depth], array = j->is_array[j->depth];
    j->depth--;
    if (had)
        json_indent(j);
    fputc(array ? ']' : '}', j->f);
}

void bench_json_number_array(bench_json *j, const char *key, const double *v, size_t n)
{
    json_member(j, key);
    fputc('[', j->f);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputs(", ", j->f);
        if (isfinite(v[i]))
            fprintf(j->f, "%.6g", v[i]);
        else
            fputs("null", j->f);
    }
    fputc(']', j->f);
}

int bench_json_finish(bench_json *j)
{
    while (j->depth > 0)
        bench_json_end(j);
    fputs(j->has_items[0] ? "\n}\n" : "}\n", j->f);
    fflush(j->f);
    return ferror(j->f) ? -1 : 0;
}

void bench_json_string(bench_json *j, const char *key, const char *value)
{
    json_member(j, key);
    json_escaped(j->f, value);
}

void bench_json_number(bench_json *j, const char *key, double value)
{
    json_member(j, key);
    if (isfinite(value))
        fprintf(j->f, "%.10g", value);
    else
        fputs("null", j->f);
}

void bench_json_int(bench_json *j, const char *key, long long value)
{
    json_member(j, key);
    fprintf(j->f, "%lld", value);
}

void bench_json_uint(bench_json *j, const char *key, unsigned long long value)
{
    json_member(j, key);
    fprintf(j->f, "%llu", value);
}

void bench_json_bool(bench_json *j, const char *key, int value)
{
    json_member(j, key);
    fputs(value ? "true" : "false", j->f);
}

void bench_json_null(bench_json *j, const char *key)
{
    json_member(j, key);
    fputs("null", j->f);
}

void bench_json_provenance(bench_json *j, const char *benchmark, const ds_runtime_info *info,
                           const char *source_dir, const char *command, int simulated)
{
    char commit[128], date[64], driver[128];
    bench_commit(source_dir, commit, sizeof commit);
    bench_date_utc(date, sizeof date);
    bench_driver_string(info->driver_version, driver, sizeof driver);
    bench_json_string(j, "benchmark", benchmark);
    bench_json_string(j, "device", info->device_name);
    bench_json_string(j, "driver", driver);
    bench_json_int(j, "sms", info->sm_count);
    bench_json_string(j, "commit", commit);
    bench_json_string(j, "command", command);
    bench_json_string(j, "date", date);
    bench_json_bool(j, "simulated", simulated);
}

/* ------------------------------------------------------------------------ */
/* runtime                                                                   */

const char *bench_anchor_name(ds_tier_anchor anchor)
{
    static const char *names[] = {"low", "high", "full"};
    return (unsigned)anchor < 3 ? names[anchor] : "?";
}

void bench_print_pool(const ds_runtime_info *info, int simulated)
{
    printf("device: %s%s, %u SMs; pool:", info->device_name, simulated ? " [SIMULATED]" : "", info->sm_count);
    for (uint32_t i = 0; i < info->num_pctx; i++)
        printf(" %u=%u%s", i, info->pctx[i].sm_count, bench_anchor_name(info->pctx[i].anchor));
    printf("\n");
    fflush(stdout);
}

void bench_log_to_stderr(ds_log_level level, const char *message, void *user)
{
    (void)user;
    static const char *names[] = {"none", "error", "warn", "info", "debug"};
    const char *name = (unsigned)level < 5 ? names[level] : "log";
    fprintf(stderr, "detshare %s: %s\n", name, message);
}

void bench_log_from_env(const char *var)
{
    const char *lv = getenv(var);
    ds_log_set_handler(bench_log_to_stderr, NULL, lv && !strcmp(lv, "info") ? DS_LOG_INFO : DS_LOG_WARN);
}

static int no_gpu(ds_status st)
{
    return st == DS_ERR_NO_DRIVER || st == DS_ERR_NO_DEVICE || st == DS_ERR_DRIVER_TOO_OLD;
}

static int cuda_required;

void bench_require_cuda(void) { cuda_required = 1; }

static int runtime_open(const ds_runtime_config *cfg, const ds_sim_config *sim_in, ds_runtime_t *rt,
                        int *simulated, int turns)
{
    ds_runtime_config c = *cfg;
    ds_sim_config vsim = *sim_in;
    const ds_sim_config *sim = sim_in;
    if (turns) { /* on the simulator: virtual time, passes from bench_poller */
        vsim.clock = DS_SIM_CLOCK_VIRTUAL;
        sim = &vsim;
        if (c.device == DS_DEVICE_SIM)
            c.scheduler_period_us = -1;
    }
    c.sim = c.device == DS_DEVICE_SIM ? sim : NULL;
    ds_status st = ds_runtime_create(&c, rt);
    if (c.device == DS_DEVICE_CUDA && no_gpu(st) && cuda_required) {
        fprintf(stderr, "no GPU: %s; --device cuda was given, so no simulated run (leave --device out, or give "
                        "--device sim, to run on the simulated device)\n", ds_last_error_message());
        return -1;
    }
    if (c.device == DS_DEVICE_CUDA && no_gpu(st)) {
        printf("no GPU: %s; running on the simulated device\n", ds_last_error_message());
        c.device = DS_DEVICE_SIM;
        c.sim = sim;
        if (turns)
            c.scheduler_period_us = -1;
        st = ds_runtime_create(&c, rt);
    }
    if (st != DS_SUCCESS) {
        fprintf(stderr, "ds_runtime_create (%s device) -> %s: %s\n",
                c.device == DS_DEVICE_SIM ? "simulated" : "CUDA", ds_status_name(st),
                ds_last_error_message());
        return -1;
    }
    *simulated = c.device == DS_DEVICE_SIM;
    if (*simulated)
        printf("SIMULATED DEVICE: numbers below are from the simulator, not a GPU\n");
    if (*simulated && turns)
        bench_clock_sim(*rt);
    return 0;
}

int bench_runtime_open(const ds_runtime_config *cfg, const ds_sim_config *sim, ds_runtime_t *rt,
                       int *simulated)
{
    return runtime_open(cfg, sim, rt, simulated, 0);
}

int bench_runtime_open_turns(const ds_runtime_config *cfg, const ds_sim_config *sim, ds_runtime_t *rt,
                             int *simulated)
{
    return runtime_open(cfg, sim, rt, simulated, 1);
}

int bench_sim_kernel(ds_runtime_t rt, const char *name, double block_us, uint32_t blocks_per_sm,
                     uint32_t num_params, const uint32_t *param_sizes, CUfunction *out)
{
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    d.name = name;
    d.block_us = block_us;
    d.blocks_per_sm = blocks_per_sm;
    d.num_params = num_params; /* above DS_SIM_MAX_PARAMS: refused by ds_sim_kernel_create */
    for (uint32_t i = 0; i < num_params && i < DS_SIM_MAX_PARAMS; i++)
        d.param_sizes[i] = param_sizes[i];
    ds_status st = ds_sim_kernel_create(rt, &d, out);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "ds_sim_kernel_create(%s) -> %s: %s\n", name, ds_status_name(st), ds_last_error_message());
        return -1;
    }
    return 0;
}

int bench_version_flag(const char *prog, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--version") == 0) {
            int v = ds_version();
            printf("%s %d.%d.%d (libdetshare %d.%d.%d)\n", prog, DS_VERSION_MAJOR, DS_VERSION_MINOR, DS_VERSION_PATCH,
                   v / 10000, v / 100 % 100, v % 100);
            return 1;
        }
    return 0;
}

int bench_out_writable(const char *prog, const char *path)
{
    struct stat st;
    int existed = stat(path, &st) == 0;
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "%s: --out %s: cannot write it: %s\n", prog, path, strerror(errno));
        return -1;
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "%s: --out %s: cannot write it: %s\n", prog, path, strerror(errno));
        return -1;
    }
    if (!existed)
        remove(path);
    return 0;
}

int bench_parse_u64(const char *prog, const char *flag, const char *s, uint64_t min, uint64_t max,
                    uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
        fprintf(stderr, "%s: %s: '%s' is not an integer in %llu-%llu\n", prog, flag, s, (unsigned long long)min,
                (unsigned long long)max);
        return -1;
    }
    *out = v;
    return 0;
}
