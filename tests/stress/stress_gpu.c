/*
 * GPU stress, the short variant of tests/stress/test_stress.c on the
 * real device: V vCtxs on T threads issue N launches and sections in total
 * with random remaps (from the tenants and another thread) and policy switches
 * across the built-ins. Every launch is seq_check(last[v], seq, errors): the
 * device itself counts any launch of a vCtx that does not follow its
 * predecessor (lost, duplicated or reordered work). Writes a JSON summary
 * (launches, vctxs, threads, wall_s, errors; errors must be 0).
 *   stress_gpu [--out stress.json] [--launches 200000] [--threads 16] [--vctxs 32]
 * Set CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment (tools/gpu-run.sh does).
 * Exit 0 on success, 1 on errors, 77 without a GPU.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>

#include "seam/driver.h"

extern const unsigned char gpu_test_fatbin[];
extern const size_t gpu_test_fatbin_size;

enum { MAXV = 256, MAXT = 128 };

static ds_runtime_t g_rt;
static const ds__driver *g_cu;
static CUfunction g_fn;
static ds_vctx_t g_v[MAXV];
static CUdeviceptr g_last, g_err;
static uint64_t g_issued[MAXV];
static unsigned g_threads = 16, g_vctxs = 32;
static uint64_t g_per_thread;
static _Atomic int g_done, g_api_errors;
static _Atomic uint64_t g_remaps, g_switches;
static char g_first_error[512];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t rng(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1Dull;
}

static void api_error(const char *what, ds_status st)
{
    if (atomic_fetch_add(&g_api_errors, 1) == 0)
        snprintf(g_first_error, sizeof g_first_error, "%s: %s (%s)", what, ds_status_name(st),
                 ds_last_error_message());
}

static void *tenant(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg, per = g_vctxs / g_threads;
    uint64_t r = 0x9E3779B97F4A7C15ull * (id + 1);
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(g_rt, &info);
    for (uint64_t i = 0; i < g_per_thread; i++) {
        unsigned vi = id * per + (unsigned)(rng(&r) % per);
        uint64_t x = rng(&r);
        if (x % 64 == 0)
            ds_vctx_remap(g_v[vi], (uint32_t)(rng(&r) % info.num_pctx));
        CUdeviceptr last = g_last + vi * sizeof(unsigned long long);
        unsigned long long seq = g_issued[vi] + 1;
        void *params[] = {&last, &seq, &g_err};
        ds_status st;
        if ((x >> 32) % 16 == 0) {
            CUstream s;
            st = ds_vctx_acquire_stream(g_v[vi], &s);
            if (st == DS_SUCCESS) {
                CUresult cr = g_cu->cuLaunchKernel(g_fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
                st = ds_vctx_release_stream(g_v[vi]);
                if (cr != CUDA_SUCCESS)
                    st = DS_ERR_DRIVER;
            }
        } else {
            st = ds_launch(g_v[vi], g_fn, (ds_dim3){1, 1, 1}, (ds_dim3){1, 1, 1}, 0, params, NULL);
        }
        if (st != DS_SUCCESS) {
            api_error("launch", st);
            break;
        }
        g_issued[vi] = seq;
    }
    atomic_fetch_add(&g_done, 1);
    return NULL;
}

static void *disturber(void *arg)
{
    (void)arg;
    static const char *pol[] = {"slo_aware", "tpot_first", "shared", "priority", "static", "temporal", "manual"};
    uint64_t r = 99;
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(g_rt, &info);
    for (unsigned k = 0; atomic_load(&g_done) < (int)g_threads; k++) {
        ds_vctx_remap(g_v[rng(&r) % g_vctxs], (uint32_t)(rng(&r) % info.num_pctx));
        atomic_fetch_add(&g_remaps, 1);
        if (k % 10 == 0) {
            ds_status st = ds_runtime_set_policy(g_rt, pol[rng(&r) % 7]);
            if (st != DS_SUCCESS)
                api_error("ds_runtime_set_policy", st);
            atomic_fetch_add(&g_switches, 1);
        }
        struct timespec t = {0, 200000};
        nanosleep(&t, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *out = "stress.json";
    uint64_t total = 200000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--out"))
            out = argv[i + 1];
        else if (!strcmp(argv[i], "--launches"))
            total = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads"))
            g_threads = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--vctxs"))
            g_vctxs = (unsigned)atoi(argv[i + 1]);
    }
    if (!g_threads || g_threads > MAXT || g_vctxs > MAXV || g_vctxs % g_threads) {
        fprintf(stderr, "--threads must divide --vctxs (<= %d)\n", MAXV);
        return 2;
    }
    g_per_thread = total / g_threads;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    cfg.max_vctx = g_vctxs;
    ds_status st = ds_runtime_create(&cfg, &g_rt);
    if (st == DS_ERR_NO_DRIVER || st == DS_ERR_NO_DEVICE || st == DS_ERR_DRIVER_TOO_OLD) {
        printf("SKIP: no GPU: %s\n", ds_last_error_message());
        return 77;
    }
    if (st != DS_SUCCESS || ds__driver_cuda(&g_cu) != DS_SUCCESS) {
        fprintf(stderr, "ds_runtime_create: %s\n", ds_last_error_message());
        return 1;
    }
    CUmodule mod;
    if (g_cu->cuModuleLoadData(&mod, gpu_test_fatbin) != CUDA_SUCCESS ||
        g_cu->cuModuleGetFunction(&g_fn, mod, "seq_check") != CUDA_SUCCESS ||
        g_cu->cuMemAlloc(&g_last, MAXV * sizeof(unsigned long long)) != CUDA_SUCCESS ||
        g_cu->cuMemAlloc(&g_err, sizeof(unsigned)) != CUDA_SUCCESS ||
        g_cu->cuMemsetD32(g_last, 0, MAXV * 2) != CUDA_SUCCESS || g_cu->cuMemsetD32(g_err, 0, 1) != CUDA_SUCCESS) {
        fprintf(stderr, "module/memory setup failed\n");
        return 1;
    }
    for (unsigned i = 0; i < g_vctxs; i++) {
        ds_vctx_attr a = DS_VCTX_ATTR_INIT;
        char name[32];
        snprintf(name, sizeof name, "s%u", i);
        a.name = name;
        a.cls = i % 4 == 0 ? DS_CLASS_LATENCY_SENSITIVE : DS_CLASS_BEST_EFFORT;
        a.slo_us = i % 4 == 0 ? 500 : 0;
        if ((st = ds_vctx_create(g_rt, &a, &g_v[i])) != DS_SUCCESS) {
            fprintf(stderr, "ds_vctx_create: %s\n", ds_last_error_message());
            return 1;
        }
    }
    pthread_t th[MAXT], dt;
    double t0 = now_s();
    for (unsigned i = 0; i < g_threads; i++)
        pthread_create(&th[i], NULL, tenant, (void *)(uintptr_t)i);
    pthread_create(&dt, NULL, disturber, NULL);
    for (unsigned i = 0; i < g_threads; i++)
        pthread_join(th[i], NULL);
    pthread_join(dt, NULL);
    for (unsigned i = 0; i < g_vctxs; i++)
        if ((st = ds_vctx_synchronize(g_v[i])) != DS_SUCCESS)
            api_error("ds_vctx_synchronize", st);
    double wall = now_s() - t0;
    unsigned long long last[MAXV] = {0};
    unsigned dev_errors = 0;
    g_cu->cuMemcpyDtoH(last, g_last, sizeof last);
    g_cu->cuMemcpyDtoH(&dev_errors, g_err, sizeof dev_errors);
    uint64_t launches = 0, mismatched = 0;
    for (unsigned i = 0; i < g_vctxs; i++) {
        launches += g_issued[i];
        mismatched += last[i] != g_issued[i]; /* the last launch that ran is the last issued */
    }
    uint64_t errors = dev_errors + mismatched + (uint64_t)atomic_load(&g_api_errors);
    for (unsigned i = 0; i < g_vctxs; i++)
        ds_vctx_destroy(g_v[i]);
    g_cu->cuMemFree(g_last);
    g_cu->cuMemFree(g_err);
    g_cu->cuModuleUnload(mod);
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(g_rt, &info);
    ds_status dst = ds_runtime_destroy(g_rt);
    if (dst != DS_SUCCESS)
        errors++;
    FILE *f = fopen(out, "w");
    if (f) {
        char date[32];
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        const char *commit = getenv("DS_COMMIT");
        fprintf(f, "{\n  \"device\": \"%s\",\n  \"driver\": \"CUDA %d.%d\",\n  \"sms\": %u,\n"
                   "  \"commit\": \"%s\",\n  \"date\": \"%s\",\n  \"command\": \"stress_gpu\",\n",
                info.device_name, info.driver_version / 1000, (info.driver_version % 1000) / 10, info.sm_count,
                commit ? commit : "unknown", date);
        fprintf(f,
                "  \"launches\": %llu,\n  \"vctxs\": %u,\n  \"threads\": %u,\n  \"wall_s\": %.3f,\n"
                "  \"launches_per_s\": %.0f,\n  \"remap_requests\": %llu,\n  \"policy_switches\": %llu,\n"
                "  \"device_order_errors\": %u,\n  \"final_mismatches\": %llu,\n  \"api_errors\": %d,\n"
                "  \"errors\": %llu,\n  \"first_error\": \"%s\"\n}\n",
                (unsigned long long)launches, g_vctxs, g_threads, wall, launches / wall,
                (unsigned long long)atomic_load(&g_remaps), (unsigned long long)atomic_load(&g_switches),
                dev_errors, (unsigned long long)mismatched, atomic_load(&g_api_errors),
                (unsigned long long)errors, g_first_error);
        fclose(f);
    }
    printf("stress_gpu: %llu launches, %u vCtxs, %u threads, %.2f s, errors %llu %s\n",
           (unsigned long long)launches, g_vctxs, g_threads, wall, (unsigned long long)errors, g_first_error);
    return errors ? 1 : 0;
}
