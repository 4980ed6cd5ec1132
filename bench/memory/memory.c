/*
 * Fair host<->device copies between tenants (ds_memcpy_async).
 *
 *   memory_bench [--device cuda|sim] [--share-mib N] [--be-mib N]
 *                [--ls-copies N] [--seed N] [--out FILE]
 *
 * 1. share: two BE vCtxs, weights 1 and 3, each copy --share-mib MiB host to
 *    device at once. When the weight-3 tenant's copy completes, the weight-1
 *    tenant should have moved a quarter of the bytes moved in all:
 *    share_error = |share_w1 - 0.25| / 0.25.
 * 2. LS copies: an LS vCtx copies 1 MiB host to device --ls-copies times
 *    (each waited for), alone, then while a BE vCtx streams --be-mib MiB in
 *    256 MiB copies. ls_copy_p99_norm = p99 under BE load / p99 alone;
 *    ls_copy_p99_vs_unscheduled_alone = p99 under BE load / the p99 of the
 *    same copy alone without the scheduler (the strict reading).
 *    On a GPU the same runs with plain cudaMemcpyAsync on each vCtx's stream
 *    (no copy scheduler): baseline_ls_copy_p99_norm. While the LS vCtx
 *    copies, the BE vCtx's chunks are 512 KiB instead of 2 MiB.
 * The simulated device runs in real time (time_scale 1) with its modelled
 * 25 GB/s link; its numbers are simulated, and its copy latencies include the
 * host's page faults on first touch of the simulated device memory (a 2 MiB
 * chunk can take about 0.5 ms of host time), so only the GPU's
 * ls_copy_p99_norm means anything. Result JSON: --out (default
 * memory.json); the table is printed last.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MIB ((size_t)1 << 20)

typedef struct opts {
    int sim;
    uint64_t share_mib, be_mib, ls_copies, seed;
    const char *out;
} opts;

static int simulated;

static void *host_alloc(size_t n)
{
    void *p = NULL;
    if (!simulated && cudaMallocHost(&p, n) == cudaSuccess)
        return p;
    return calloc(1, n);
}

static void host_free(void *p)
{
    if (!simulated && cudaFreeHost(p) == cudaSuccess)
        return;
    free(p);
}

static ds_status vctx(ds_runtime_t rt, const char *name, ds_vctx_class cls, uint32_t weight, ds_vctx_t *out)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = name;
    a.cls = cls;
    a.weight = weight;
    return ds_vctx_create(rt, &a, out);
}

/* ---- 1. weighted shares ------------------------------------------------- */

static int run_share(ds_runtime_t rt, const opts *o, double *share_w1, double *share_error)
{
    ds_vctx_t a, b;
    BENCH_DS_CHECK(vctx(rt, "be_w1", DS_CLASS_BEST_EFFORT, 1, &a));
    BENCH_DS_CHECK(vctx(rt, "be_w3", DS_CLASS_BEST_EFFORT, 3, &b));
    size_t n = o->share_mib * MIB;
    CUdeviceptr da, db;
    BENCH_DS_CHECK(ds_mem_alloc(a, n, &da));
    BENCH_DS_CHECK(ds_mem_alloc(b, n, &db));
    void *ha = host_alloc(n), *hb = host_alloc(n);
    if (!ha || !hb)
        return fprintf(stderr, "host memory\n"), -1;
    BENCH_DS_CHECK(ds_memcpy_async(a, da, ha, n, DS_COPY_HOST_TO_DEVICE));
    BENCH_DS_CHECK(ds_memcpy_async(b, db, hb, n, DS_COPY_HOST_TO_DEVICE));
    BENCH_DS_CHECK(ds_vctx_synchronize(b));
    ds_mem_stats sa = DS_MEM_STATS_INIT, sb = DS_MEM_STATS_INIT;
    BENCH_DS_CHECK(ds_vctx_get_mem_stats(a, &sa));
    BENCH_DS_CHECK(ds_vctx_get_mem_stats(b, &sb));
    BENCH_DS_CHECK(ds_vctx_synchronize(a));
    *share_w1 = (double)sa.copy_bytes / (double)(sa.copy_bytes + sb.copy_bytes);
    *share_error = fabs(*share_w1 - 0.25) / 0.25;
    host_free(ha);
    host_free(hb);
    BENCH_DS_CHECK(ds_vctx_destroy(a));
    BENCH_DS_CHECK(ds_vctx_destroy(b));
    return 0;
}

/* ---- 2. LS copy latency beside a streaming BE tenant -------------------- */

typedef struct be_arg {
    ds_vctx_t v;
    CUdeviceptr d;
    void *h;
    size_t chunk, total;
    int scheduled;
    atomic_int stop;
    int rc;
} be_arg;

static int plain_copy(ds_vctx_t v, CUdeviceptr d, void *h, size_t n)
{
    CUstream s;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(v, &s));
    cudaError_t e = cudaMemcpyAsync((void *)(uintptr_t)d, h, n, cudaMemcpyHostToDevice, (cudaStream_t)s);
    BENCH_DS_CHECK(ds_vctx_release_stream(v));
    if (e != cudaSuccess)
        return fprintf(stderr, "cudaMemcpyAsync: %s\n", cudaGetErrorString(e)), -1;
    return 0;
}

static void *be_main(void *p)
{
    be_arg *a = p;
    size_t moved = 0;
    while (moved < a->total && !atomic_load(&a->stop)) {
        size_t n = a->total - moved < a->chunk ? a->total - moved : a->chunk;
        int rc = a->scheduled ? (ds_memcpy_async(a->v, a->d, a->h, n, DS_COPY_HOST_TO_DEVICE) == DS_SUCCESS ? 0 : -1)
                              : plain_copy(a->v, a->d, a->h, n);
        if (rc || ds_vctx_synchronize(a->v) != DS_SUCCESS) {
            a->rc = -1;
            break;
        }
        moved += n;
    }
    return NULL;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* p99 of the LS vCtx's 1 MiB copies (us); with a BE tenant streaming if be. */
static int ls_p99(ds_runtime_t rt, const opts *o, int be, int scheduled, double *p99_us, double *p50_us)
{
    ds_vctx_t ls, bv = NULL;
    BENCH_DS_CHECK(vctx(rt, "ls", DS_CLASS_LATENCY_SENSITIVE, 1, &ls));
    CUdeviceptr dls;
    BENCH_DS_CHECK(ds_mem_alloc(ls, MIB, &dls));
    void *hls = host_alloc(MIB);
    be_arg a = {0};
    pthread_t th;
    if (be) {
        BENCH_DS_CHECK(vctx(rt, "be", DS_CLASS_BEST_EFFORT, 1, &bv));
        a.v = bv;
        a.chunk = 256 * MIB < o->be_mib * MIB ? 256 * MIB : o->be_mib * MIB;
        a.total = o->be_mib * MIB;
        a.scheduled = scheduled;
        BENCH_DS_CHECK(ds_mem_alloc(bv, a.chunk, &a.d));
        a.h = host_alloc(a.chunk);
        pthread_create(&th, NULL, be_main, &a);
        bench_sleep_until_ns(bench_now_ns() + 2000000); /* let the stream start */
    }
    double *lat = calloc(o->ls_copies, sizeof *lat);
    bench_rng rng;
    bench_rng_seed(&rng, o->seed);
    for (uint64_t i = 0; i < o->ls_copies; i++) {
        uint64_t t0 = bench_now_ns();
        if (scheduled)
            BENCH_DS_CHECK(ds_memcpy_async(ls, dls, hls, MIB, DS_COPY_HOST_TO_DEVICE));
        else if (plain_copy(ls, dls, hls, MIB))
            return -1;
        BENCH_DS_CHECK(ds_vctx_synchronize(ls));
        lat[i] = (double)(bench_now_ns() - t0) / 1e3;
        /* think time 0.2-1 ms */
        bench_sleep_until_ns(bench_now_ns() + 200000 + bench_rng_next(&rng) % 800000);
    }
    if (be) {
        atomic_store(&a.stop, 1);
        pthread_join(th, NULL);
        if (a.rc)
            return -1;
        host_free(a.h);
        BENCH_DS_CHECK(ds_vctx_destroy(bv));
    }
    qsort(lat, o->ls_copies, sizeof *lat, cmp_d);
    *p99_us = bench_percentile(lat, o->ls_copies, 0.99);
    *p50_us = bench_percentile(lat, o->ls_copies, 0.50);
    free(lat);
    host_free(hls);
    BENCH_DS_CHECK(ds_vctx_destroy(ls));
    return 0;
}

int main(int argc, char **argv)
{
    if (bench_version_flag("memory_bench", argc, argv))
        return 0;
    opts o = {0, 1024, 4096, 200, 1, "memory.json"};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return fprintf(stderr, "%s: %s needs a value\n", argv[0], f), 2;
        i++;
        if (!strcmp(f, "--device")) {
            o.sim = !strcmp(v, "sim");
            if (!strcmp(v, "cuda"))
                bench_require_cuda();
        }
        else if (!strcmp(f, "--out"))
            o.out = v;
        else if (!strcmp(f, "--share-mib")) {
            if (bench_parse_u64(argv[0], f, v, 2, 1 << 20, &o.share_mib)) return 2;
        } else if (!strcmp(f, "--be-mib")) {
            if (bench_parse_u64(argv[0], f, v, 1, 1 << 22, &o.be_mib)) return 2;
        } else if (!strcmp(f, "--ls-copies")) {
            if (bench_parse_u64(argv[0], f, v, 1, 1000000, &o.ls_copies)) return 2;
        } else if (!strcmp(f, "--seed")) {
            if (bench_parse_u64(argv[0], f, v, 0, UINT64_MAX, &o.seed)) return 2;
        } else
            return fprintf(stderr, "%s: unknown flag %s\n", argv[0], f), 2;
    }
    ds_log_set_handler(bench_log_to_stderr, NULL, DS_LOG_WARN);
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = o.sim ? DS_DEVICE_SIM : DS_DEVICE_CUDA;
    cfg.policy = "shared";
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.clock = DS_SIM_CLOCK_REALTIME; /* the modelled link paces in wall time */
    sim.time_scale = 1.0;
    ds_runtime_t rt;
    if (bench_runtime_open(&cfg, &sim, &rt, &simulated))
        return 1;
    double share_w1 = NAN, share_error = NAN, alone = NAN, loaded = NAN, base_alone = NAN, base_loaded = NAN;
    double alone50 = NAN, loaded50 = NAN, base_alone50 = NAN, base_loaded50 = NAN;
    if (run_share(rt, &o, &share_w1, &share_error) || ls_p99(rt, &o, 0, 1, &alone, &alone50) ||
        ls_p99(rt, &o, 1, 1, &loaded, &loaded50))
        return 1;
    if (!simulated &&
        (ls_p99(rt, &o, 0, 0, &base_alone, &base_alone50) || ls_p99(rt, &o, 1, 0, &base_loaded, &base_loaded50)))
        return 1;
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &info);
    FILE *f = fopen(o.out, "w");
    if (!f)
        return perror(o.out), 1;
    char commit[64], date[64], cmd[1024], drv[256];
    bench_commit(MEMORY_SOURCE_DIR, commit, sizeof commit);
    bench_date_utc(date, sizeof date);
    bench_command(argc, argv, cmd, sizeof cmd);
    bench_driver_string(info.driver_version, drv, sizeof drv);
    bench_json j;
    bench_json_begin(&j, f);
    bench_json_string(&j, "benchmark", "memory");
    bench_json_bool(&j, "simulated", simulated);
    bench_json_string(&j, "device", info.device_name);
    bench_json_string(&j, "driver", drv);
    bench_json_string(&j, "commit", commit);
    bench_json_string(&j, "date", date);
    bench_json_string(&j, "command", cmd);
    bench_json_object(&j, "config");
    bench_json_uint(&j, "share_mib", o.share_mib);
    bench_json_uint(&j, "be_mib", o.be_mib);
    bench_json_uint(&j, "ls_copies", o.ls_copies);
    bench_json_uint(&j, "chunk_bytes", 2 * MIB);
    bench_json_uint(&j, "chunk_bytes_be_beside_ls", 512 * 1024);
    bench_json_end(&j);
    bench_json_number(&j, "share_w1", share_w1);
    bench_json_number(&j, "share_error", share_error);
    bench_json_number(&j, "ls_copy_p99_alone_us", alone);
    bench_json_number(&j, "ls_copy_p99_loaded_us", loaded);
    bench_json_number(&j, "ls_copy_p99_norm", loaded / alone);
    /* the strict reading: against a copy alone with no scheduler at all */
    bench_json_number(&j, "ls_copy_p99_vs_unscheduled_alone", loaded / base_alone);
    bench_json_number(&j, "ls_copy_p50_alone_us", alone50);
    bench_json_number(&j, "ls_copy_p50_loaded_us", loaded50);
    bench_json_number(&j, "baseline_ls_copy_p50_alone_us", base_alone50);
    bench_json_number(&j, "baseline_ls_copy_p50_loaded_us", base_loaded50);
    bench_json_number(&j, "baseline_ls_copy_p99_alone_us", base_alone);
    bench_json_number(&j, "baseline_ls_copy_p99_loaded_us", base_loaded);
    bench_json_number(&j, "baseline_ls_copy_p99_norm", base_loaded / base_alone);
    if (bench_json_finish(&j))
        return fprintf(stderr, "%s: write error\n", o.out), 1;
    fclose(f);
    printf("%-34s %10s\n", "figure", "value");
    printf("%-34s %10.3f\n", "share_w1 (ideal 0.25)", share_w1);
    printf("%-34s %10.3f\n", "share_error", share_error);
    printf("%-34s %10.1f\n", "ls_copy_p99_alone_us", alone);
    printf("%-34s %10.1f\n", "ls_copy_p99_loaded_us", loaded);
    printf("%-34s %10.2f\n", "ls_copy_p99_norm", loaded / alone);
    printf("%-34s %10.2f\n", "ls_copy_p99_vs_unscheduled_alone", loaded / base_alone);
    printf("%-34s %10.1f\n", "ls_copy_p50_alone_us", alone50);
    printf("%-34s %10.1f\n", "ls_copy_p50_loaded_us", loaded50);
    printf("%-34s %10.1f\n", "baseline_ls_copy_p99_alone_us", base_alone);
    printf("%-34s %10.1f\n", "baseline_ls_copy_p99_loaded_us", base_loaded);
    printf("%-34s %10.2f\n", "baseline_ls_copy_p99_norm", base_loaded / base_alone);
    if (ds_runtime_destroy(rt) != DS_SUCCESS)
        return 1;
    return 0;
}
