/*
 * overhead: what libdetshare costs on the host and the device (docs/benchmarks.md, W4,
 * the parts that exist now).
 *
 *  launch_ratio  ds_launch vs raw cuLaunchKernel of the same empty kernel on
 *                the SAME stream (the vCtx's, taken from a section), in
 *                rounds of three batches in an order drawn from --seed (so
 *                that drift cancels): raw, ds_launch under the policy
 *                "manual" (the mechanism's cost: launch_ratio,
 *                launch_added_ns) and ds_launch under the default policy
 *                "slo_aware" deciding for a best-effort vCtx
 *                (launch_ratio_slo_aware, launch_added_ns_slo_aware); the
 *                policy is switched with ds_runtime_set_policy between
 *                batches, outside the timed region. Each batch is timed on
 *                the host with CLOCK_MONOTONIC and divided by its size; the
 *                figures are the median (and p99) of those per-batch means;
 *                the added ns are medians of the paired differences
 *                (ds batch - raw batch of the same round).
 *  remap_us      host time of ds_launch calls that carry a pending remap
 *                (alternating between a LOW pCtx and its complement), timed
 *                one by one, minus the median of plain ds_launch calls timed
 *                the same way in the same loop.
 *  remap gap     device time between a kernel's end and the next kernel's
 *                start when they run on two pCtxs with the event hand-off
 *                between them (%globaltimer in the kernels; on the simulated
 *                device the simulator's trace). Every chunk of kernels is
 *                queued behind a 20 ms spin so the device never waits for the
 *                host. plain_gap is the same without remaps, for reference.
 *                Both remap figures run under "manual" (the runtime is
 *                created with it): a policy would otherwise move the vCtx.
 *  gate_us_host, gate_us_rck  from the decision to open a closed gate
 *                (ds_vctx_gate_open called) to the gated kernel visibly
 *                running: the kernel writes a flag in pinned host memory the
 *                host polls. Each trial queues a 300-us spin and then the
 *                flag kernel on a vCtx with a gate before every kernel,
 *                closes the gate while the spin runs, opens it 500 us later.
 *                gate_us_host on this runtime (host-written gate words, the
 *                default); gate_us_rck on a second runtime created with the
 *                resident control kernel and RCK-written gates (made after
 *                every device allocation of this program: while the RCK runs,
 *                a whole-context sync or free would wait for it). gate_ref is
 *                the plain launch-to-flag time, for reference. Not on the
 *                simulated device (it runs no code: no flag to see).
 *  sched_cpu_idle_pct  the scheduler thread's CPU use while idle: process
 *                CPU time (CLOCK_PROCESS_CPUTIME_ID) over 1 s of wall time
 *                with the runtime idle under slo_aware and the main thread
 *                asleep, as a percent of one core.
 *  graph_launch_added_ns  ds_graph_launch vs raw cuGraphLaunch of the same
 *                graph (one empty-kernel node; graph10_*: ten) on the SAME
 *                stream (the vCtx's, on its first pCtx), the raw one an
 *                instantiation captured on a stream of that pCtx's green
 *                context; measured last, like launch_ratio: rounds of one
 *                batch per path in a random order, under "manual"
 *                (graph_launch_added_ns) and "slo_aware"
 *                (graph_launch_added_ns_slo_aware), medians of the paired
 *                per-launch differences. Batches of GRAPH_BATCH launches: a
 *                graph launch keeps the device busier than an empty kernel,
 *                and a full queue or a window wait would be timed as launch
 *                cost. On the
 *                simulated device only ds_graph_launch's own cost (no raw
 *                graph path there): the added figures are null.
 *  graph_instantiate_us_per_100_nodes, graph_capture_us_per_100_nodes,
 *  graph_device_bytes_per_pctx  graphs of 100 and 1000 empty-kernel nodes
 *                made eagerly over the whole pool (ds_graph_create with
 *                DS_GRAPH_EAGER): ds_graph_get_stats' capture_us and
 *                instantiate_us per pCtx, per 100 nodes, and device_bytes;
 *                the headline keys are medians over the pCtxs of the
 *                1000-node graph, graph_instantiation holds both sizes per pCtx.
 *
 * Raw driver calls come through cudart's cudaGetDriverEntryPointByVersion
 * (the program links cudart, never libcuda), after the library has created
 * the runtime and so the device's primary context.
 *
 * usage: overhead [--device cuda|sim] [--seed N] [--out FILE] [--launches N]
 *                 [--batch N] [--remaps N] [--gap-samples N] [--graph-launches N]
 * Without a GPU it says so in one line and runs on the simulated device; the
 * figures are then the library's own host overhead over the simulator's
 * launch path, labelled simulated.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#ifndef OVERHEAD_SOURCE_DIR
#define OVERHEAD_SOURCE_DIR "."
#endif

extern const unsigned char overhead_fatbin[];
extern const size_t overhead_fatbin_size;

/* ------------------------------------------------------------------------ */
/* options                                                                   */

/* Graph launches per timed batch (graph_launch_added_ns): small enough that
 * a batch of 10-node graphs stays well inside slo_aware's 2 ms window for a
 * best-effort vCtx (a window wait would be timed as launch cost). */
#define GRAPH_BATCH 50u

typedef struct options {
    ds_device_kind device;
    uint64_t seed;
    const char *out;
    uint64_t launches;    /* per path (ds_launch, raw) */
    uint32_t batch;       /* launches per timed batch; the stream is synchronised after each */
    uint32_t remaps;      /* timed remapped ds_launch calls */
    uint32_t gap_samples; /* device gaps wanted (remapped and plain each) */
    uint64_t graph_launches; /* per graph and path (ds_graph_launch, raw cuGraphLaunch); 0 = launches / 5 */
} options;

static void usage(FILE *f)
{
    fprintf(f, "usage: overhead [--device cuda|sim] [--seed N] [--out FILE] [--launches N]\n"
               "                [--batch N] [--remaps N] [--gap-samples N] [--graph-launches N]\n"
               "  --launches N     empty-kernel launches through each path (default 100000)\n"
               "  --batch N        launches per timed batch (default 1000)\n"
               "  --remaps N       timed ds_launch calls that carry a remap (default 10000)\n"
               "  --gap-samples N  device gaps measured (default 2000)\n"
               "  --graph-launches N  launches of each graph (1 and 10 nodes) through each path\n"
               "                   (ds_graph_launch, raw cuGraphLaunch), in batches of %u\n"
               "                   (default: --launches / 5)\n"
               "  --out FILE       JSON results (default overhead.json)\n",
            GRAPH_BATCH);
}

static int parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 0) : 0;
    if (!s || !*s || errno || *end || v < lo || v > hi || s[0] == '-') {
        fprintf(stderr, "overhead: %s wants an integer in [%" PRIu64 ", %" PRIu64 "], got '%s'\n", flag, lo, hi,
                s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){DS_DEVICE_CUDA, 1, "overhead.json", 100000, 1000, 10000, 2000, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--device") && v) {
            if (!strcmp(v, "cuda")) {
                o->device = DS_DEVICE_CUDA;
                bench_require_cuda();
            }
            else if (!strcmp(v, "sim"))
                o->device = DS_DEVICE_SIM;
            else {
                fprintf(stderr, "overhead: --device cuda|sim, got '%s'\n", v);
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--seed") && v) {
            if (parse_u64(a, v, 0, UINT64_MAX, &o->seed))
                return -1;
            i++;
        } else if (!strcmp(a, "--out") && v) {
            o->out = v;
            i++;
        } else if (!strcmp(a, "--launches") && v) {
            if (parse_u64(a, v, 1, 100000000, &o->launches))
                return -1;
            i++;
        } else if (!strcmp(a, "--batch") && v) {
            if (parse_u64(a, v, 1, 100000, &x))
                return -1;
            o->batch = (uint32_t)x;
            i++;
        } else if (!strcmp(a, "--remaps") && v) {
            if (parse_u64(a, v, 2, 10000000, &x))
                return -1;
            o->remaps = (uint32_t)x;
            i++;
        } else if (!strcmp(a, "--gap-samples") && v) {
            if (parse_u64(a, v, 1, 10000000, &x))
                return -1;
            o->gap_samples = (uint32_t)x;
            i++;
        } else if (!strcmp(a, "--graph-launches") && v) {
            if (parse_u64(a, v, 1, 100000000, &o->graph_launches))
                return -1;
            i++;
        } else {
            fprintf(stderr, "overhead: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return -1;
        }
    }
    if (o->batch > o->launches)
        o->batch = (uint32_t)o->launches;
    if (!o->graph_launches)
        o->graph_launches = o->launches / 5 > GRAPH_BATCH ? o->launches / 5 : GRAPH_BATCH;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* the device: CUDA through cudart's entry points, or the simulator          */

typedef struct raw_driver {
    __typeof__(cuLaunchKernel) *cuLaunchKernel;
    __typeof__(cuStreamSynchronize) *cuStreamSynchronize;
    __typeof__(cuCtxGetCurrent) *cuCtxGetCurrent;
    __typeof__(cuModuleLoadData) *cuModuleLoadData;
    __typeof__(cuModuleUnload) *cuModuleUnload;
    __typeof__(cuModuleGetFunction) *cuModuleGetFunction;
    __typeof__(cuMemAlloc) *cuMemAlloc;
    __typeof__(cuMemFree) *cuMemFree;
    __typeof__(cuMemcpyDtoH) *cuMemcpyDtoH;
    __typeof__(cuGetErrorName) *cuGetErrorName;
    __typeof__(cuMemHostAlloc) *cuMemHostAlloc;
    __typeof__(cuMemHostGetDevicePointer) *cuMemHostGetDevicePointer;
    __typeof__(cuMemFreeHost) *cuMemFreeHost;
    /* graphs (graph_launch_added_ns): loaded by graph_open */
    __typeof__(cuCtxSetCurrent) *cuCtxSetCurrent;
    __typeof__(cuStreamGetGreenCtx) *cuStreamGetGreenCtx;
    __typeof__(cuCtxFromGreenCtx) *cuCtxFromGreenCtx;
    __typeof__(cuGreenCtxStreamCreate) *cuGreenCtxStreamCreate;
    __typeof__(cuStreamDestroy) *cuStreamDestroy;
    __typeof__(cuStreamBeginCapture) *cuStreamBeginCapture;
    __typeof__(cuStreamEndCapture) *cuStreamEndCapture;
    __typeof__(cuGraphInstantiateWithFlags) *cuGraphInstantiateWithFlags;
    __typeof__(cuGraphUpload) *cuGraphUpload;
    __typeof__(cuGraphLaunch) *cuGraphLaunch;
    __typeof__(cuGraphExecDestroy) *cuGraphExecDestroy;
    __typeof__(cuGraphDestroy) *cuGraphDestroy;
} raw_driver;

typedef struct env {
    const options *opt;
    ds_runtime_t rt;
    ds_runtime_info info;
    int simulated;
    raw_driver cu;
    CUmodule module;
    CUfunction empty, stamp, spin, host_flag;
    CUdeviceptr ts; /* 2 * chunk timestamps (CUDA only) */
    volatile unsigned int *flag; /* gate_us: pinned host word (CUDA only) */
    CUdeviceptr flag_dev;
    uint32_t chunk; /* kernels per gap chunk */
    ds_vctx_t v;
    CUstream stream;      /* the vCtx's stream on its first pCtx */
    uint32_t stream_pctx; /* that pCtx */
    uint32_t pctx_a, pctx_b;
} env;

static const char *cu_name(const env *e, CUresult r)
{
    const char *n = NULL;
    if (e->cu.cuGetErrorName && e->cu.cuGetErrorName(r, &n) == CUDA_SUCCESS && n)
        return n;
    return "CUDA_ERROR_UNKNOWN";
}

#define CU_CHECK(e, call)                                                                              \
    do {                                                                                               \
        CUresult cu_r_ = (e)->cu.call;                                                                 \
        if (cu_r_ != CUDA_SUCCESS) {                                                                   \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cu_name((e), cu_r_));      \
            return -1;                                                                                 \
        }                                                                                              \
    } while (0)

static int entry_version(const char *name, void *slot, int version)
{
    void *fp = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t r = cudaGetDriverEntryPointByVersion(name, &fp, version, cudaEnableDefault, &q);
    if (r != cudaSuccess || q != cudaDriverEntryPointSuccess || !fp) {
        fprintf(stderr, "overhead: cudaGetDriverEntryPointByVersion(%s) -> %s (query result %d)\n", name,
                cudaGetErrorName(r), (int)q);
        return -1;
    }
    memcpy(slot, &fp, sizeof fp);
    return 0;
}

static int entry(const char *name, void *slot)
{
    /* 12000: the ABI of each entry point as of CUDA 12.0 (cuMemAlloc is _v2). */
    return entry_version(name, slot, 12000);
}

static int cuda_open(env *e)
{
    cudaError_t r = cudaSetDevice(0);
    if (r != cudaSuccess) {
        fprintf(stderr, "overhead: cudaSetDevice(0) -> %s: %s\n", cudaGetErrorName(r), cudaGetErrorString(r));
        return -1;
    }
    if (entry("cuLaunchKernel", &e->cu.cuLaunchKernel) || entry("cuStreamSynchronize", &e->cu.cuStreamSynchronize) ||
        entry("cuCtxGetCurrent", &e->cu.cuCtxGetCurrent) || entry("cuModuleLoadData", &e->cu.cuModuleLoadData) ||
        entry("cuModuleUnload", &e->cu.cuModuleUnload) ||
        entry("cuModuleGetFunction", &e->cu.cuModuleGetFunction) || entry("cuMemAlloc", &e->cu.cuMemAlloc) ||
        entry("cuMemFree", &e->cu.cuMemFree) || entry("cuMemcpyDtoH", &e->cu.cuMemcpyDtoH) ||
        entry("cuGetErrorName", &e->cu.cuGetErrorName) || entry("cuMemHostAlloc", &e->cu.cuMemHostAlloc) ||
        entry("cuMemHostGetDevicePointer", &e->cu.cuMemHostGetDevicePointer) ||
        entry("cuMemFreeHost", &e->cu.cuMemFreeHost))
        return -1;
    CUcontext cur = NULL;
    CU_CHECK(e, cuCtxGetCurrent(&cur));
    if (!cur) {
        fprintf(stderr, "overhead: no CUDA context current after cudaSetDevice(0)\n");
        return -1;
    }
    CU_CHECK(e, cuModuleLoadData(&e->module, overhead_fatbin));
    CU_CHECK(e, cuModuleGetFunction(&e->empty, e->module, "empty"));
    CU_CHECK(e, cuModuleGetFunction(&e->stamp, e->module, "stamp"));
    CU_CHECK(e, cuModuleGetFunction(&e->spin, e->module, "spin"));
    CU_CHECK(e, cuModuleGetFunction(&e->host_flag, e->module, "host_flag"));
    CU_CHECK(e, cuMemAlloc(&e->ts, (size_t)2 * e->chunk * sizeof(unsigned long long)));
    void *p = NULL;
    CU_CHECK(e, cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    memset(p, 0, 64);
    e->flag = p;
    CU_CHECK(e, cuMemHostGetDevicePointer(&e->flag_dev, p, 0));
    return 0;
}

static int sim_open(env *e)
{
    /* The simulator runs no code: its kernels declare their parameters and a
     * duration, and the trace gives start and end in simulated time. */
    const uint32_t stamp_sizes[2] = {sizeof(CUdeviceptr), sizeof(int)};
    const uint32_t spin_sizes[1] = {sizeof(long long)};
    if (bench_sim_kernel(e->rt, "empty", 1.0, 1, 0, NULL, &e->empty) ||
        bench_sim_kernel(e->rt, "stamp", 2.0, 1, 2, stamp_sizes, &e->stamp) ||
        bench_sim_kernel(e->rt, "spin", 20000.0, 1, 1, spin_sizes, &e->spin))
        return -1;
    return 0;
}

/* The launch a program makes without libdetshare: cuLaunchKernel on CUDA,
 * the simulator's launch path on the simulated device. */
static inline int raw_launch(env *e, CUstream s, CUfunction f, void **params)
{
    if (e->simulated)
        return ds_sim_launch_on_stream(e->rt, s, f, (ds_dim3){1, 1, 1}, (ds_dim3){1, 1, 1}, params) == DS_SUCCESS
                   ? 0
                   : -1;
    return e->cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL) == CUDA_SUCCESS ? 0 : -1;
}

static int raw_failed(env *e, CUstream s, CUfunction f, void **params)
{
    /* Redo the failing call outside the timed loop to report it. */
    if (e->simulated) {
        ds_status st = ds_sim_launch_on_stream(e->rt, s, f, (ds_dim3){1, 1, 1}, (ds_dim3){1, 1, 1}, params);
        fprintf(stderr, "overhead: raw launch -> %s: %s\n", ds_status_name(st), ds_last_error_message());
    } else {
        CUresult r = e->cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
        fprintf(stderr, "overhead: cuLaunchKernel -> %s\n", cu_name(e, r));
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* measurements                                                              */

static const ds_dim3 ONE = {1, 1, 1};

/* launch_ratio and graph_launch_added_ns: one path through the library under
 * "manual" and "slo_aware" against the raw path, per-launch ns per batch. */
typedef struct paired_cost {
    bench_summary ds, slo, raw;      /* per-launch ns, per batch (manual, slo_aware, raw) */
    double added_p50, added_slo_p50; /* medians of paired differences; NAN without the raw path */
    double ratio, ratio_slo;         /* NAN without the raw path */
} paired_cost;

/* graph_launch_added_ns: one graph size. */
typedef struct graph_cost {
    uint32_t nodes;
    int raw;        /* the raw path was measured (CUDA only) */
    paired_cost pc; /* raw: cuGraphLaunch */
} graph_cost;

/* Instantiation: one graph size, made eagerly over the pool. */
typedef struct graph_inst {
    uint32_t nodes;
    double create_ms; /* wall time of ds_graph_create */
    uint32_t npctx;
    uint32_t graph_nodes[DS_MAX_PCTX];
    double capture_us[DS_MAX_PCTX], instantiate_us[DS_MAX_PCTX];
    int64_t device_bytes[DS_MAX_PCTX];
    bench_summary capture_per100, instantiate_per100, bytes; /* over the pCtxs */
} graph_inst;

#define GRAPH_SIZES 2
static const uint32_t GRAPH_LAUNCH_NODES[GRAPH_SIZES] = {1, 10};
static const uint32_t GRAPH_INST_NODES[GRAPH_SIZES] = {100, 1000};

typedef struct results {
    uint64_t launches_each;
    uint32_t batches;
    paired_cost launch; /* ds_launch vs raw launches */
    double sched_cpu_idle_pct, sched_cpu_wall_s;
    uint32_t remaps;
    bench_summary remap_call, plain_call; /* ns per call */
    double remap_us_p50, remap_us_p99;
    uint32_t gap_remap_n, gap_plain_n;
    bench_summary gap_remap, gap_plain; /* us */
    uint32_t gap_host_slow_chunks;      /* chunks submitted slower than the blocker lasted */
    uint32_t gate_trials;
    bench_summary gate_host, gate_rck, gate_ref; /* us */
    int gate_rck_ok;
    int graph_measured;    /* 0: the runtime has no graph support (graph_skip says why) */
    char graph_skip[256];
    uint32_t graph_batches; /* per graph size and path */
    graph_cost gcost[GRAPH_SIZES];
    graph_inst ginst[GRAPH_SIZES];
} results;

/* The variants of launch_ratio, timed in batches in a random order per round. */
enum { V_RAW, V_MANUAL, V_SLO, V_COUNT };
static const char *const VARIANT_POLICY[V_COUNT] = {NULL, "manual", "slo_aware"};

/* Makes the variant's policy active. Under "manual" the vCtx keeps no window
 * (slo_aware gives a best-effort vCtx one, and manual never resets it). */
static int use_variant(env *e, int variant)
{
    const char *pol = VARIANT_POLICY[variant];
    if (!pol)
        return 0;
    BENCH_DS_CHECK(ds_runtime_set_policy(e->rt, pol));
    if (variant == V_MANUAL)
        BENCH_DS_CHECK(ds_vctx_set_window(e->v, 0));
    return 0;
}

static int launch_batch(env *e, int variant, uint32_t n, void *unused)
{
    (void)unused;
    if (variant == V_RAW) {
        for (uint32_t i = 0; i < n; i++)
            if (raw_launch(e, e->stream, e->empty, NULL))
                return raw_failed(e, e->stream, e->empty, NULL);
        return 0;
    }
    for (uint32_t i = 0; i < n; i++)
        if (ds_launch(e->v, e->empty, ONE, ONE, 0, NULL, NULL) != DS_SUCCESS) {
            fprintf(stderr, "overhead: ds_launch (%s) -> %s\n", VARIANT_POLICY[variant], ds_last_error_message());
            return -1;
        }
    return 0;
}

/* paired_batches: one batch of `n` launches through `variant`'s path; 0, or
 * -1 with the failure reported. */
typedef int (*batch_fn)(env *e, int variant, uint32_t n, void *ctx);

/* Not measured: NAN throughout. */
static void paired_cost_reset(paired_cost *pc)
{
    pc->added_p50 = pc->added_slo_p50 = pc->ratio = pc->ratio_slo = NAN;
    bench_summarize(NULL, 0, &pc->ds);
    bench_summarize(NULL, 0, &pc->slo);
    bench_summarize(NULL, 0, &pc->raw);
}

/* The measurement of launch_ratio and graph_launch_added_ns: `nb` rounds of
 * one batch of B launches per path (V_RAW, V_MANUAL, V_SLO; V_RAW left out
 * unless `with_raw`) in an order drawn from rng, after three untimed rounds;
 * each batch timed on the host and divided by B, the vCtx synchronised after
 * each. Fills `out` (the added and ratio figures NAN without the raw path)
 * and leaves the policy "manual". `what` names the measurement in errors. */
static int paired_batches(env *e, bench_rng *rng, batch_fn batch, void *ctx, uint32_t B, uint32_t nb, int with_raw,
                          const char *what, paired_cost *out)
{
    double *t[V_COUNT] = {calloc(nb, sizeof(double)), calloc(nb, sizeof(double)), calloc(nb, sizeof(double))};
    double *diff = calloc(nb, sizeof *diff);
    int rc = -1;
    paired_cost_reset(out);
    if (!t[V_RAW] || !t[V_MANUAL] || !t[V_SLO] || !diff) {
        fprintf(stderr, "overhead: %s: out of memory for %u batches\n", what, nb);
        goto out;
    }
    /* Warm-up: the function's first launches load it (lazy loading), the
     * profile of the kernel fills, and the driver's and the caches' first
     * touches are not the steady state. */
    for (int w = 0; w < 3; w++)
        for (int v = 0; v < V_COUNT; v++) {
            if (v == V_RAW && !with_raw)
                continue;
            if (use_variant(e, v) || batch(e, v, B, ctx) || ds_vctx_synchronize(e->v) != DS_SUCCESS) {
                fprintf(stderr, "overhead: %s warm-up failed: %s\n", what, ds_last_error_message());
                goto out;
            }
        }
    for (uint32_t b = 0; b < nb; b++) {
        int order[V_COUNT] = {V_RAW, V_MANUAL, V_SLO};
        for (int k = V_COUNT - 1; k > 0; k--) { /* Fisher-Yates */
            int j = (int)(bench_rng_next(rng) % (uint64_t)(k + 1));
            int x = order[k];
            order[k] = order[j];
            order[j] = x;
        }
        for (int k = 0; k < V_COUNT; k++) {
            int v = order[k];
            if (v == V_RAW && !with_raw)
                continue;
            if (use_variant(e, v))
                goto out;
            uint64_t t0 = bench_now_ns();
            if (batch(e, v, B, ctx))
                goto out;
            uint64_t t1 = bench_now_ns();
            t[v][b] = (double)(t1 - t0) / B;
            /* Never let the launch queue fill: a full queue blocks the host
             * and that wait would be timed as launch cost. */
            if (ds_vctx_synchronize(e->v) != DS_SUCCESS) {
                fprintf(stderr, "overhead: ds_vctx_synchronize -> %s\n", ds_last_error_message());
                goto out;
            }
        }
    }
    /* Every path must have used the one stream: the vCtx may not have moved. */
    uint32_t bound = UINT32_MAX;
    if (ds_vctx_get_pctx(e->v, &bound) != DS_SUCCESS || bound != e->stream_pctx) {
        fprintf(stderr, "overhead: the vCtx moved from pCtx %u to %u during %s\n", e->stream_pctx, bound, what);
        goto out;
    }
    if (use_variant(e, V_MANUAL)) /* what the measurements after this run under */
        goto out;
    if (bench_summarize(t[V_MANUAL], nb, &out->ds) || bench_summarize(t[V_SLO], nb, &out->slo) ||
        bench_summarize(t[V_RAW], with_raw ? nb : 0, &out->raw))
        goto out;
    if (with_raw) {
        bench_summary d;
        for (uint32_t b = 0; b < nb; b++)
            diff[b] = t[V_MANUAL][b] - t[V_RAW][b];
        if (bench_summarize(diff, nb, &d))
            goto out;
        out->added_p50 = d.p50;
        for (uint32_t b = 0; b < nb; b++)
            diff[b] = t[V_SLO][b] - t[V_RAW][b];
        if (bench_summarize(diff, nb, &d))
            goto out;
        out->added_slo_p50 = d.p50;
        out->ratio = out->ds.p50 / out->raw.p50;
        out->ratio_slo = out->slo.p50 / out->raw.p50;
    }
    rc = 0;
out:
    for (int v = 0; v < V_COUNT; v++)
        free(t[v]);
    free(diff);
    return rc;
}

/* ds_launch under "manual" (the mechanism alone) and under "slo_aware" (the
 * default policy deciding every launch of a best-effort vCtx), against raw
 * launches on the same stream, in rounds of one batch each in a random order. */
static int launch_ratio(env *e, bench_rng *rng, results *res)
{
    const options *o = e->opt;
    const uint32_t B = o->batch;
    const uint32_t nb = (uint32_t)((o->launches + B - 1) / B);
    res->batches = nb;
    res->launches_each = (uint64_t)nb * B;
    return paired_batches(e, rng, launch_batch, NULL, B, nb, 1, "launch_ratio", &res->launch);
}

/* The scheduler thread's CPU use with nothing to do: process CPU time over
 * `wall_ms` of wall time while this thread sleeps and no vCtx has work, as a
 * percent of one core. Process time counts every thread (on CUDA the
 * driver's own threads too), so it bounds the scheduler's share from above. */
static int sched_cpu_idle(env *e, double wall_ms, results *res)
{
    BENCH_DS_CHECK(ds_vctx_synchronize(e->v));
    BENCH_DS_CHECK(ds_runtime_set_policy(e->rt, "slo_aware"));
    struct timespec c0, c1, until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    uint64_t w0 = bench_now_ns();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    /* Sleep only (bench_sleep_until_ns would spin its last 200 us). */
    uint64_t end_ns = (uint64_t)until.tv_sec * 1000000000ull + (uint64_t)until.tv_nsec + (uint64_t)(wall_ms * 1e6);
    until.tv_sec = (time_t)(end_ns / 1000000000ull);
    until.tv_nsec = (long)(end_ns % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    uint64_t w1 = bench_now_ns();
    double cpu_ns = (double)(c1.tv_sec - c0.tv_sec) * 1e9 + (double)(c1.tv_nsec - c0.tv_nsec);
    res->sched_cpu_wall_s = (double)(w1 - w0) / 1e9;
    res->sched_cpu_idle_pct = 100.0 * cpu_ns / (double)(w1 - w0);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* gate_us                                                                   */

#define GATE_TRIALS 300
#define GATE_WARM 20

/* Spins until the flag reads `value`; the elapsed ns, or -1 past 1 s. */
static double wait_flag(env *e, unsigned int value, uint64_t t0)
{
    while (*e->flag != value)
        if (bench_now_ns() - t0 > 1000000000ull)
            return -1;
    return (double)(bench_now_ns() - t0);
}

/* One runtime's gates: see gate_us at the top of this file. `ref` (may be
 * NULL) gets the plain launch-to-flag times on the same vCtx. */
static int gate_trials(env *e, ds_runtime_t rt, bench_summary *out, bench_summary *ref)
{
    static unsigned int value = 1;
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "gate";
    a.initial_pctx = (int32_t)e->pctx_a; /* the small LOW tier, as an LS vCtx */
    ds_vctx_t v = NULL;
    BENCH_DS_CHECK(ds_vctx_create(rt, &a, &v));
    int rc = -1;
    double *t = calloc(GATE_TRIALS, sizeof *t), *r = calloc(GATE_TRIALS, sizeof *r);
    if (!t || !r)
        goto out;
    long long spin_ns = 300000;
    void *ps[] = {&spin_ns};
    for (int i = 0; i < GATE_WARM + GATE_TRIALS; i++) {
        unsigned int want = value++;
        void *pf[] = {&e->flag_dev, &want};
        /* reference: a launch straight to the flag, no gate between */
        if (ds_vctx_set_gate_interval(v, DS_GATES_NONE) != DS_SUCCESS)
            goto fail;
        uint64_t t0 = bench_now_ns();
        if (ds_launch(v, e->host_flag, ONE, ONE, 0, pf, NULL) != DS_SUCCESS)
            goto fail;
        double d = wait_flag(e, want, t0);
        if (d < 0)
            goto lost;
        if (i >= GATE_WARM)
            r[i - GATE_WARM] = d / 1e3;
        /* gated: spin, [gate], flag; closed while the spin runs */
        want = value++;
        if (ds_vctx_set_gate_interval(v, 0) != DS_SUCCESS || ds_launch(v, e->spin, ONE, ONE, 0, ps, NULL) ||
            ds_launch(v, e->host_flag, ONE, ONE, 0, pf, NULL) != DS_SUCCESS ||
            ds_vctx_gate_close(v) != DS_SUCCESS)
            goto fail;
        bench_sleep_until_ns(bench_now_ns() + 800000); /* the spin is over, the flag kernel waits */
        if (*e->flag == want) {
            fprintf(stderr, "overhead: gate_us: the gated kernel ran while its gate was closed\n");
            goto out;
        }
        t0 = bench_now_ns();
        if (ds_vctx_gate_open(v) != DS_SUCCESS)
            goto fail;
        d = wait_flag(e, want, t0);
        if (d < 0)
            goto lost;
        if (i >= GATE_WARM)
            t[i - GATE_WARM] = d / 1e3;
        if (ds_vctx_synchronize(v) != DS_SUCCESS)
            goto fail;
    }
    if (bench_summarize(t, GATE_TRIALS, out) || (ref && bench_summarize(r, GATE_TRIALS, ref)))
        goto out;
    rc = 0;
    goto out;
lost:
    fprintf(stderr, "overhead: gate_us: the flag kernel did not run within 1 s\n");
    goto out;
fail:
    fprintf(stderr, "overhead: gate_us: %s\n", ds_last_error_message());
out:
    free(t);
    free(r);
    if (ds_vctx_destroy(v) != DS_SUCCESS)
        rc = -1;
    return rc;
}

static int gate_latency(env *e, results *res)
{
    if (e->simulated)
        return 0;
    /* slo_aware (left on by sched_cpu_idle) owns BE gates: it would reopen ours */
    BENCH_DS_CHECK(ds_runtime_set_policy(e->rt, "manual"));
    res->gate_trials = GATE_TRIALS;
    if (gate_trials(e, e->rt, &res->gate_host, &res->gate_ref))
        return -1;
    /* the RCK's runtime: after every allocation of this program (see top) */
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.policy = "manual";
    cfg.rck = DS_RCK_ON;
    cfg.gates = DS_GATES_RCK;
    ds_runtime_t rck = NULL;
    if (ds_runtime_create(&cfg, &rck) != DS_SUCCESS) {
        fprintf(stderr, "overhead: gate_us_rck: ds_runtime_create -> %s\n", ds_last_error_message());
        return 0; /* reported as null */
    }
    int rc = gate_trials(e, rck, &res->gate_rck, NULL);
    res->gate_rck_ok = rc == 0;
    if (ds_runtime_destroy(rck) != DS_SUCCESS)
        rc = -1;
    return rc;
}

static int remap_host(env *e, results *res)
{
    const uint32_t R = e->opt->remaps;
    const uint32_t warm = 64, sync_every = 256;
    double *rm = calloc(R, sizeof *rm), *pl = calloc(R, sizeof *pl);
    int rc = -1;
    if (!rm || !pl) {
        fprintf(stderr, "overhead: out of memory for %u remaps\n", R);
        goto out;
    }
    for (uint32_t i = 0; i < warm + R; i++) {
        uint32_t to = (i & 1) ? e->pctx_a : e->pctx_b;
        if (ds_vctx_remap(e->v, to) != DS_SUCCESS) {
            fprintf(stderr, "overhead: ds_vctx_remap -> %s\n", ds_last_error_message());
            goto out;
        }
        uint64_t t0 = bench_now_ns();
        ds_status s1 = ds_launch(e->v, e->empty, ONE, ONE, 0, NULL, NULL);
        uint64_t t1 = bench_now_ns();
        ds_status s2 = ds_launch(e->v, e->empty, ONE, ONE, 0, NULL, NULL);
        uint64_t t2 = bench_now_ns();
        if (s1 != DS_SUCCESS || s2 != DS_SUCCESS) {
            fprintf(stderr, "overhead: ds_launch -> %s\n", ds_last_error_message());
            goto out;
        }
        if (i >= warm) {
            rm[i - warm] = (double)(t1 - t0);
            pl[i - warm] = (double)(t2 - t1);
        }
        if ((i + 1) % sync_every == 0 && ds_vctx_synchronize(e->v) != DS_SUCCESS) {
            fprintf(stderr, "overhead: ds_vctx_synchronize -> %s\n", ds_last_error_message());
            goto out;
        }
    }
    if (ds_vctx_synchronize(e->v) != DS_SUCCESS) {
        fprintf(stderr, "overhead: ds_vctx_synchronize -> %s\n", ds_last_error_message());
        goto out;
    }
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    if (ds_vctx_get_stats(e->v, &st) != DS_SUCCESS || st.remaps < warm + R) {
        fprintf(stderr, "overhead: the vCtx counts %" PRIu64 " remaps, %u were asked: a remap failed\n", st.remaps,
                warm + R);
        goto out;
    }
    if (bench_summarize(rm, R, &res->remap_call) || bench_summarize(pl, R, &res->plain_call))
        goto out;
    res->remaps = R;
    res->remap_us_p50 = (res->remap_call.p50 - res->plain_call.p50) / 1e3;
    res->remap_us_p99 = (res->remap_call.p99 - res->plain_call.p50) / 1e3;
    rc = 0;
out:
    free(rm);
    free(pl);
    return rc;
}

static int cmp_seq(const void *a, const void *b)
{
    const ds_sim_kernel_record *x = a, *y = b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* One chunk: a 20 ms spin, then `n` stamp kernels, remapped between the two
 * pCtxs before each if `remap`. Appends n - 1 gaps (us) to gaps[*count].
 * Returns -1 on error, 1 if the host was slow to submit the chunk, else 0. */
static int gap_chunk(env *e, int remap, uint32_t n, double *gaps, uint32_t *count, ds_sim_kernel_record *recs)
{
    long long spin_ns = 20000000ll;
    void *ps[] = {&spin_ns};
    if (e->simulated)
        BENCH_DS_CHECK(ds_sim_trace_clear(e->rt));
    uint64_t t0 = bench_now_ns();
    BENCH_DS_CHECK(ds_launch(e->v, e->spin, ONE, ONE, 0, ps, NULL));
    for (uint32_t i = 0; i < n; i++) {
        if (remap)
            BENCH_DS_CHECK(ds_vctx_remap(e->v, (i & 1) ? e->pctx_a : e->pctx_b));
        int idx = (int)i;
        void *pst[] = {&e->ts, &idx};
        BENCH_DS_CHECK(ds_launch(e->v, e->stamp, ONE, ONE, 0, pst, NULL));
    }
    uint64_t submitted = bench_now_ns() - t0;
    BENCH_DS_CHECK(ds_vctx_synchronize(e->v));
    uint32_t got = 0;
    if (e->simulated) {
        size_t nrec = 0;
        BENCH_DS_CHECK(ds_sim_trace_get(e->rt, recs, (size_t)n + 16, &nrec));
        qsort(recs, nrec, sizeof *recs, cmp_seq);
        double prev_end = -1.0;
        for (size_t k = 0; k < nrec; k++) {
            if (recs[k].function != e->stamp)
                continue;
            if (recs[k].start_us < 0 || recs[k].end_us < 0) {
                fprintf(stderr, "overhead: simulated stamp kernel %" PRIu64 " did not run\n", recs[k].seq);
                return -1;
            }
            if (prev_end >= 0)
                gaps[(*count)++] = recs[k].start_us - prev_end;
            prev_end = recs[k].end_us;
            got++;
        }
    } else {
        unsigned long long *ts = malloc((size_t)2 * n * sizeof *ts);
        if (!ts) {
            fprintf(stderr, "overhead: out of memory\n");
            return -1;
        }
        CUresult r = e->cu.cuMemcpyDtoH(ts, e->ts, (size_t)2 * n * sizeof *ts);
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "overhead: cuMemcpyDtoH -> %s\n", cu_name(e, r));
            free(ts);
            return -1;
        }
        for (uint32_t i = 1; i < n; i++)
            gaps[(*count)++] = ((double)ts[2 * i] - (double)ts[2 * i - 1]) / 1e3;
        got = n;
        free(ts);
    }
    if (got != n) {
        fprintf(stderr, "overhead: %u of %u stamp kernels traced\n", got, n);
        return -1;
    }
    /* Submitting took longer than most of the blocker: the device may have
     * waited for the host within this chunk (simulated time has no such link). */
    return !e->simulated && submitted > 15000000ull ? 1 : 0;
}

static int remap_gap(env *e, results *res)
{
    const uint32_t want = e->opt->gap_samples;
    const uint32_t n = e->chunk;
    const uint32_t chunks = (want + (n - 1) - 1) / (n - 1);
    const uint32_t cap = chunks * (n - 1);
    double *gr = calloc(cap, sizeof *gr), *gp = calloc(cap, sizeof *gp);
    ds_sim_kernel_record *recs = e->simulated ? calloc((size_t)n + 16, sizeof *recs) : NULL;
    int rc = -1;
    if (!gr || !gp || (e->simulated && !recs)) {
        fprintf(stderr, "overhead: out of memory for %u gaps\n", cap);
        goto out;
    }
    uint32_t nr = 0, np = 0;
    /* warm: first visits, lazy loading of stamp and spin */
    uint32_t dummy_n = 0;
    double *dummy = calloc(n, sizeof *dummy);
    if (!dummy || gap_chunk(e, 1, n, dummy, &dummy_n, recs) < 0) {
        free(dummy);
        goto out;
    }
    free(dummy);
    for (uint32_t c = 0; c < chunks; c++) {
        int slow = gap_chunk(e, 1, n, gr, &nr, recs);
        if (slow < 0)
            goto out;
        res->gap_host_slow_chunks += (uint32_t)slow;
        /* plain: stay on one pCtx (the remap applies at the chunk's spin) */
        if (ds_vctx_remap(e->v, e->pctx_a) != DS_SUCCESS) {
            fprintf(stderr, "overhead: ds_vctx_remap -> %s\n", ds_last_error_message());
            goto out;
        }
        slow = gap_chunk(e, 0, n, gp, &np, recs);
        if (slow < 0)
            goto out;
        res->gap_host_slow_chunks += (uint32_t)slow;
    }
    if (bench_summarize(gr, nr, &res->gap_remap) || bench_summarize(gp, np, &res->gap_plain))
        goto out;
    res->gap_remap_n = nr;
    res->gap_plain_n = np;
    rc = 0;
out:
    free(gr);
    free(gp);
    free(recs);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* graphs                                                                    */

/* The raw graph calls (CUDA only), at the ABI of the cuda.h this is built
 * with: the green-context calls arrived after 12.0. */
static int graph_open(env *e)
{
    const int v = CUDA_VERSION;
    if (entry_version("cuCtxSetCurrent", &e->cu.cuCtxSetCurrent, v) ||
        entry_version("cuStreamGetGreenCtx", &e->cu.cuStreamGetGreenCtx, v) ||
        entry_version("cuCtxFromGreenCtx", &e->cu.cuCtxFromGreenCtx, v) ||
        entry_version("cuGreenCtxStreamCreate", &e->cu.cuGreenCtxStreamCreate, v) ||
        entry_version("cuStreamDestroy", &e->cu.cuStreamDestroy, v) ||
        entry_version("cuStreamBeginCapture", &e->cu.cuStreamBeginCapture, v) ||
        entry_version("cuStreamEndCapture", &e->cu.cuStreamEndCapture, v) ||
        entry_version("cuGraphInstantiateWithFlags", &e->cu.cuGraphInstantiateWithFlags, v) ||
        entry_version("cuGraphUpload", &e->cu.cuGraphUpload, v) ||
        entry_version("cuGraphLaunch", &e->cu.cuGraphLaunch, v) ||
        entry_version("cuGraphExecDestroy", &e->cu.cuGraphExecDestroy, v) ||
        entry_version("cuGraphDestroy", &e->cu.cuGraphDestroy, v))
        return -1;
    return 0;
}

/* The capture function of ds_graph_create: `nodes` empty kernels, each its
 * own node. */
typedef struct graph_job {
    env *e;
    uint32_t nodes;
} graph_job;

static int graph_capture(CUstream s, void *user)
{
    graph_job *j = user;
    for (uint32_t i = 0; i < j->nodes; i++)
        if (raw_launch(j->e, s, j->e->empty, NULL))
            return 1;
    return 0;
}

/* The raw path: `nodes` empty kernels captured (thread-local, as an
 * application captures) on a stream of its own in the green context of `s`
 * (the vCtx's stream), instantiated and uploaded on `s`. */
static int raw_graph(env *e, CUstream s, uint32_t nodes, CUgraphExec *out)
{
    CUgreenCtx gc = NULL;
    CUcontext gctx = NULL, prev = NULL;
    CUstream cs = NULL;
    CU_CHECK(e, cuStreamGetGreenCtx(s, &gc));
    if (!gc) {
        fprintf(stderr, "overhead: the vCtx's stream belongs to no green context\n");
        return -1;
    }
    CU_CHECK(e, cuCtxFromGreenCtx(&gctx, gc));
    CU_CHECK(e, cuCtxGetCurrent(&prev));
    CU_CHECK(e, cuGreenCtxStreamCreate(&cs, gc, CU_STREAM_NON_BLOCKING, 0));
    CUgraph g = NULL;
    const char *what = "cuCtxSetCurrent";
    CUresult r = e->cu.cuCtxSetCurrent(gctx);
    if (r == CUDA_SUCCESS) {
        what = "cuStreamBeginCapture";
        r = e->cu.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
        if (r == CUDA_SUCCESS) {
            what = "cuLaunchKernel under capture";
            for (uint32_t i = 0; r == CUDA_SUCCESS && i < nodes; i++)
                r = e->cu.cuLaunchKernel(e->empty, 1, 1, 1, 1, 1, 1, 0, cs, NULL, NULL);
            CUresult r2 = e->cu.cuStreamEndCapture(cs, &g);
            if (r == CUDA_SUCCESS && r2 != CUDA_SUCCESS) {
                what = "cuStreamEndCapture";
                r = r2;
            }
        }
        e->cu.cuCtxSetCurrent(prev);
    }
    *out = NULL;
    if (r == CUDA_SUCCESS) {
        what = "cuGraphInstantiateWithFlags";
        r = e->cu.cuGraphInstantiateWithFlags(out, g, 0);
    }
    if (r == CUDA_SUCCESS) {
        what = "cuGraphUpload";
        r = e->cu.cuGraphUpload(*out, s);
    }
    if (r == CUDA_SUCCESS) {
        what = "cuStreamSynchronize";
        r = e->cu.cuStreamSynchronize(s);
    }
    if (g)
        e->cu.cuGraphDestroy(g);
    e->cu.cuStreamDestroy(cs);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "overhead: raw graph of %u nodes: %s -> %s\n", nodes, what, cu_name(e, r));
        if (*out)
            e->cu.cuGraphExecDestroy(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* graph_batch's context: the graph through each path, on stream s. */
typedef struct graph_paths {
    CUstream s;
    ds_graph_t g;    /* ds_graph_launch */
    CUgraphExec raw; /* cuGraphLaunch (CUDA only; NULL: not measured) */
} graph_paths;

static int graph_batch(env *e, int variant, uint32_t n, void *ctx)
{
    const graph_paths *gp = ctx;
    if (variant == V_RAW) {
        for (uint32_t i = 0; i < n; i++) {
            CUresult r = e->cu.cuGraphLaunch(gp->raw, gp->s);
            if (r != CUDA_SUCCESS) {
                fprintf(stderr, "overhead: cuGraphLaunch -> %s\n", cu_name(e, r));
                return -1;
            }
        }
        return 0;
    }
    for (uint32_t i = 0; i < n; i++)
        if (ds_graph_launch(e->v, gp->g) != DS_SUCCESS) {
            fprintf(stderr, "overhead: ds_graph_launch (%s) -> %s\n", VARIANT_POLICY[variant], ds_last_error_message());
            return -1;
        }
    return 0;
}

/* As launch_ratio, for one graph: ds_graph_launch under "manual" and under
 * "slo_aware" against raw cuGraphLaunch (raw NULL: not measured) on stream s,
 * rounds of one batch each in a random order. */
static int graph_launch_cost(env *e, bench_rng *rng, CUstream s, ds_graph_t g, CUgraphExec raw, uint32_t nb,
                             graph_cost *out)
{
    graph_paths gp = {s, g, raw};
    out->raw = raw != NULL;
    return paired_batches(e, rng, graph_batch, &gp, GRAPH_BATCH, nb, raw != NULL, "graph launch", &out->pc);
}

/* A graph of `nodes` empty kernels made eagerly over the pool: the wall time
 * of ds_graph_create and ds_graph_get_stats' figures per pCtx. The first
 * call tells whether the runtime has graphs at all: DS_ERR_NOT_SUPPORTED
 * returns 1 (nothing measured, res->graph_skip says why). */
static int graph_instantiation(env *e, uint32_t nodes, graph_inst *gi, results *res)
{
    graph_job j = {e, nodes};
    char name[32];
    snprintf(name, sizeof name, "overhead-%u", nodes);
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.name = name;
    a.flags = DS_GRAPH_EAGER;
    ds_graph_t g = NULL;
    uint64_t t0 = bench_now_ns();
    ds_status st = ds_graph_create(e->v, graph_capture, &j, &a, &g);
    gi->create_ms = (double)(bench_now_ns() - t0) / 1e6;
    if (st == DS_ERR_NOT_SUPPORTED) {
        snprintf(res->graph_skip, sizeof res->graph_skip, "%s", ds_last_error_message());
        return 1;
    }
    if (st != DS_SUCCESS) {
        fprintf(stderr, "overhead: ds_graph_create(%u nodes, eager) -> %s: %s\n", nodes, ds_status_name(st),
                ds_last_error_message());
        return -1;
    }
    ds_graph_stats gs = DS_GRAPH_STATS_INIT;
    st = ds_graph_get_stats(g, &gs);
    ds_status st2 = ds_graph_destroy(g);
    if (st != DS_SUCCESS || st2 != DS_SUCCESS) {
        fprintf(stderr, "overhead: graph of %u nodes: stats -> %s, destroy -> %s: %s\n", nodes, ds_status_name(st),
                ds_status_name(st2), ds_last_error_message());
        return -1;
    }
    gi->nodes = nodes;
    gi->npctx = e->info.num_pctx;
    double cap[DS_MAX_PCTX], inst[DS_MAX_PCTX], bytes[DS_MAX_PCTX];
    for (uint32_t p = 0; p < gi->npctx; p++) {
        const ds_graph_pctx_stats *ps = &gs.pctx[p];
        if (!ps->instantiated || ps->nodes == 0) {
            fprintf(stderr, "overhead: the eager graph of %u nodes has no instantiation on pCtx %u\n", nodes, p);
            return -1;
        }
        gi->graph_nodes[p] = ps->nodes;
        gi->capture_us[p] = ps->capture_us;
        gi->instantiate_us[p] = ps->instantiate_us;
        gi->device_bytes[p] = ps->device_bytes;
        cap[p] = ps->capture_us * 100.0 / ps->nodes;
        inst[p] = ps->instantiate_us * 100.0 / ps->nodes;
        bytes[p] = (double)ps->device_bytes;
    }
    if (bench_summarize(cap, gi->npctx, &gi->capture_per100) ||
        bench_summarize(inst, gi->npctx, &gi->instantiate_per100) || bench_summarize(bytes, gi->npctx, &gi->bytes))
        return -1;
    return 0;
}

/* Everything about graphs, last (after the RCK runtime is gone: it makes
 * device allocations). On the vCtx's first pCtx and stream, under "manual"
 * but for the slo_aware batches. */
static int graph_overhead(env *e, bench_rng *rng, results *res)
{
    for (int k = 0; k < GRAPH_SIZES; k++) {
        graph_cost *c = &res->gcost[k];
        c->nodes = GRAPH_LAUNCH_NODES[k];
        paired_cost_reset(&c->pc);
        graph_inst *gi = &res->ginst[k];
        gi->nodes = GRAPH_INST_NODES[k];
        bench_summarize(NULL, 0, &gi->capture_per100);
        bench_summarize(NULL, 0, &gi->instantiate_per100);
        bench_summarize(NULL, 0, &gi->bytes);
    }
    if (use_variant(e, V_MANUAL))
        return -1;
    BENCH_DS_CHECK(ds_vctx_remap(e->v, e->stream_pctx));
    CUstream s = NULL;
    BENCH_DS_CHECK(ds_vctx_acquire_stream(e->v, &s));
    BENCH_DS_CHECK(ds_vctx_release_stream(e->v));
    BENCH_DS_CHECK(ds_vctx_synchronize(e->v));
    uint32_t bound = UINT32_MAX;
    BENCH_DS_CHECK(ds_vctx_get_pctx(e->v, &bound));
    if (bound != e->stream_pctx) {
        fprintf(stderr, "overhead: graphs: the vCtx is on pCtx %u, not %u\n", bound, e->stream_pctx);
        return -1;
    }
    for (int k = 0; k < GRAPH_SIZES; k++) {
        int r = graph_instantiation(e, GRAPH_INST_NODES[k], &res->ginst[k], res);
        if (r > 0) {
            fprintf(stderr, "overhead: graphs not measured: %s\n", res->graph_skip);
            return 0;
        }
        if (r < 0)
            return -1;
    }
    if (!e->simulated && graph_open(e))
        return -1;
    const uint32_t nb = (uint32_t)((e->opt->graph_launches + GRAPH_BATCH - 1) / GRAPH_BATCH);
    res->graph_batches = nb;
    for (int k = 0; k < GRAPH_SIZES; k++) {
        graph_job j = {e, GRAPH_LAUNCH_NODES[k]};
        char name[32];
        snprintf(name, sizeof name, "launch-%u", GRAPH_LAUNCH_NODES[k]);
        ds_graph_attr a = DS_GRAPH_ATTR_INIT;
        a.name = name;
        a.flags = DS_GRAPH_EAGER;
        ds_graph_t g = NULL;
        BENCH_DS_CHECK(ds_graph_create(e->v, graph_capture, &j, &a, &g));
        CUgraphExec raw = NULL;
        int rc = e->simulated ? 0 : raw_graph(e, s, GRAPH_LAUNCH_NODES[k], &raw);
        if (rc == 0)
            rc = graph_launch_cost(e, rng, s, g, raw, nb, &res->gcost[k]);
        if (ds_vctx_synchronize(e->v) != DS_SUCCESS || ds_graph_destroy(g) != DS_SUCCESS) {
            fprintf(stderr, "overhead: graph of %u nodes: %s\n", GRAPH_LAUNCH_NODES[k], ds_last_error_message());
            rc = -1;
        }
        if (raw)
            e->cu.cuGraphExecDestroy(raw);
        if (rc)
            return -1;
    }
    res->graph_measured = 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* output                                                                    */

/* A paired_cost's figures (NAN, written as null, where not measured) under
 * the keys WHATlaunch_ratio, WHATlaunch_added_ns (and _slo_aware),
 * ds_WHATlaunch_[slo_aware_]ns_p50/p99 and raw_WHATlaunch_ns_p50/p99. WHAT
 * is "" for ds_launch (launch_ratio, launch_added_ns, ..., ds_launch_ns_p50,
 * raw_launch_ns_p99), "graph_" and "graph10_" for the graphs
 * (graph_launch_added_ns, ..., raw_graph10_launch_ns_p99). */
static void write_json_paired(bench_json *j, const char *what, const paired_cost *pc)
{
    const struct {
        const char *path, *name;
        double value;
    } f[] = {
        {"", "launch_ratio", pc->ratio},
        {"", "launch_added_ns", pc->added_p50},
        {"", "launch_ratio_slo_aware", pc->ratio_slo},
        {"", "launch_added_ns_slo_aware", pc->added_slo_p50},
        {"ds_", "launch_slo_aware_ns_p50", pc->slo.p50},
        {"ds_", "launch_slo_aware_ns_p99", pc->slo.p99},
        {"ds_", "launch_ns_p50", pc->ds.p50},
        {"ds_", "launch_ns_p99", pc->ds.p99},
        {"raw_", "launch_ns_p50", pc->raw.p50},
        {"raw_", "launch_ns_p99", pc->raw.p99},
    };
    char key[96];
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        snprintf(key, sizeof key, "%s%s%s", f[i].path, what, f[i].name);
        bench_json_number(j, key, f[i].value);
    }
}

/* The graph figures (NAN, written as null, where not measured). */
static void write_json_graphs(bench_json *j, const env *e, const results *r)
{
    static const char *const what[GRAPH_SIZES] = {"graph_", "graph10_"};
    char key[96];
    for (int k = 0; k < GRAPH_SIZES; k++)
        write_json_paired(j, what[k], &r->gcost[k].pc);
    bench_json_int(j, "graph_launches_each", (long long)r->graph_batches * GRAPH_BATCH);
    bench_json_int(j, "graph_launch_batch", GRAPH_BATCH);
    /* headline instantiation figures: the 1000-node graph, medians over the pCtxs */
    const graph_inst *big = &r->ginst[GRAPH_SIZES - 1];
    bench_json_number(j, "graph_capture_us_per_100_nodes", big->capture_per100.p50);
    bench_json_number(j, "graph_instantiate_us_per_100_nodes", big->instantiate_per100.p50);
    bench_json_number(j, "graph_device_bytes_per_pctx", big->bytes.p50);
    if (!r->graph_measured) {
        char why[320];
        snprintf(why, sizeof why, "not measured: %s", r->graph_skip[0] ? r->graph_skip : "?");
        bench_json_string(j, "graph_how", why);
        return;
    }
    bench_json_string(j, "graph_how",
                      e->simulated
                          ? "simulated device: ds_graph_launch per-launch host ns only (no raw graph path); "
                            "instantiation per ds_graph_get_stats"
                          : "graph_launch_added_ns: ds_graph_launch vs cuGraphLaunch of an instantiation captured "
                            "on a stream of the same pCtx, same stream, batches in random order, median of paired "
                            "per-launch differences (graph: 1 empty-kernel node, graph10: 10); instantiation: "
                            "ds_graph_create(DS_GRAPH_EAGER) of 100 and 1000 empty-kernel nodes over the pool, "
                            "ds_graph_get_stats per pCtx, headline = 1000 nodes, median over pCtxs");
    bench_json_object(j, "graph_instantiation");
    for (int k = 0; k < GRAPH_SIZES; k++) {
        const graph_inst *gi = &r->ginst[k];
        snprintf(key, sizeof key, "nodes_%u", gi->nodes);
        bench_json_object(j, key);
        bench_json_int(j, "nodes", gi->nodes);
        bench_json_int(j, "pctxs", gi->npctx);
        bench_json_number(j, "create_ms", gi->create_ms);
        bench_json_number(j, "capture_us_per_100_nodes_p50", gi->capture_per100.p50);
        bench_json_number(j, "capture_us_per_100_nodes_max", gi->capture_per100.max);
        bench_json_number(j, "instantiate_us_per_100_nodes_p50", gi->instantiate_per100.p50);
        bench_json_number(j, "instantiate_us_per_100_nodes_max", gi->instantiate_per100.max);
        bench_json_number(j, "device_bytes_per_pctx_p50", gi->bytes.p50);
        bench_json_number(j, "device_bytes_per_pctx_max", gi->bytes.max);
        for (uint32_t p = 0; p < gi->npctx; p++) {
            snprintf(key, sizeof key, "pctx_%u", p);
            bench_json_object(j, key);
            bench_json_int(j, "sms", e->info.pctx[p].sm_count);
            bench_json_int(j, "graph_nodes", gi->graph_nodes[p]);
            bench_json_number(j, "capture_us", gi->capture_us[p]);
            bench_json_number(j, "instantiate_us", gi->instantiate_us[p]);
            bench_json_int(j, "device_bytes", (long long)gi->device_bytes[p]);
            bench_json_end(j);
        }
        bench_json_end(j);
    }
    bench_json_end(j);
}

static int write_json(const env *e, const results *r, int argc, char **argv)
{
    FILE *f = fopen(e->opt->out, "w");
    if (!f) {
        fprintf(stderr, "overhead: cannot write %s: %s\n", e->opt->out, strerror(errno));
        return -1;
    }
    char commit[128], date[64], command[2048], driver[128];
    bench_commit(OVERHEAD_SOURCE_DIR, commit, sizeof commit);
    bench_date_utc(date, sizeof date);
    bench_command(argc, argv, command, sizeof command);
    bench_driver_string(e->info.driver_version, driver, sizeof driver);
    bench_json j;
    bench_json_begin(&j, f);
    bench_json_string(&j, "benchmark", "overhead");
    bench_json_string(&j, "device", e->simulated ? "simulated" : e->info.device_name);
    bench_json_string(&j, "driver", driver);
    bench_json_int(&j, "sms", e->info.sm_count);
    bench_json_string(&j, "commit", commit);
    bench_json_string(&j, "command", command);
    bench_json_string(&j, "date", date);
    bench_json_bool(&j, "simulated", e->simulated);
    bench_json_int(&j, "seed", (long long)e->opt->seed);
    write_json_paired(&j, "", &r->launch);
    bench_json_int(&j, "launches_each", (long long)r->launches_each);
    bench_json_int(&j, "launch_batch", e->opt->batch);
    bench_json_string(&j, "launch_ratio_policy", "manual");
    bench_json_string(&j, "launch_ratio_slo_aware_vctx", "best-effort, on the whole GPU");
    /* ds_launch times every Nth launch with two events (DS_SAMPLE_PERIOD,
     * library default 32): part of its cost, so the setting goes with the figures. */
    const char *sp = getenv("DS_SAMPLE_PERIOD");
    if (sp && *sp)
        bench_json_string(&j, "env_DS_SAMPLE_PERIOD", sp);
    else
        bench_json_null(&j, "env_DS_SAMPLE_PERIOD");
    bench_json_number(&j, "remap_us", r->remap_us_p50);
    bench_json_number(&j, "remap_us_p99", r->remap_us_p99);
    bench_json_number(&j, "remap_launch_ns_p50", r->remap_call.p50);
    bench_json_number(&j, "plain_launch_call_ns_p50", r->plain_call.p50);
    bench_json_int(&j, "remaps", r->remaps);
    bench_json_number(&j, "remap_gap_us_p50", r->gap_remap.p50);
    bench_json_number(&j, "remap_gap_us_p99", r->gap_remap.p99);
    bench_json_number(&j, "plain_gap_us_p50", r->gap_plain.p50);
    bench_json_number(&j, "plain_gap_us_p99", r->gap_plain.p99);
    bench_json_int(&j, "gap_samples", r->gap_remap_n);
    bench_json_string(&j, "remap_policy", "manual");
    if (r->gate_trials) {
        bench_json_number(&j, "gate_us_host", r->gate_host.p50);
        bench_json_number(&j, "gate_us_host_p99", r->gate_host.p99);
        if (r->gate_rck_ok) {
            bench_json_number(&j, "gate_us_rck", r->gate_rck.p50);
            bench_json_number(&j, "gate_us_rck_p99", r->gate_rck.p99);
        } else {
            bench_json_null(&j, "gate_us_rck");
            bench_json_null(&j, "gate_us_rck_p99");
        }
        bench_json_number(&j, "gate_ref_launch_to_flag_us", r->gate_ref.p50);
        bench_json_number(&j, "gate_ref_launch_to_flag_us_p99", r->gate_ref.p99);
        bench_json_int(&j, "gate_trials", r->gate_trials);
        bench_json_string(&j, "gate_default", "host (DS_GATES_AUTO)");
        bench_json_string(&j, "gate_us_how",
                          "ds_vctx_gate_open call to the gated kernel's flag seen in pinned host memory; median "
                          "and p99 of the trials");
    } else {
        bench_json_null(&j, "gate_us_host");
        bench_json_null(&j, "gate_us_rck");
        bench_json_string(&j, "gate_us_how", "not measured on the simulated device (it runs no code)");
    }
    const char *ml = getenv("CUDA_MODULE_LOADING");
    if (ml && *ml)
        bench_json_string(&j, "env_CUDA_MODULE_LOADING", ml);
    else
        bench_json_null(&j, "env_CUDA_MODULE_LOADING");
    bench_json_number(&j, "sched_cpu_idle_pct", r->sched_cpu_idle_pct);
    bench_json_number(&j, "sched_cpu_idle_wall_s", r->sched_cpu_wall_s);
    bench_json_string(&j, "sched_cpu_idle_how",
                      "process CPU time (CLOCK_PROCESS_CPUTIME_ID, all threads) over the wall time, runtime idle "
                      "under slo_aware with one idle vCtx, main thread asleep; percent of one core");
    write_json_graphs(&j, e, r);
    bench_json_object(&j, "remap_pctx");
    bench_json_int(&j, "a", e->pctx_a);
    bench_json_int(&j, "a_sms", e->info.pctx[e->pctx_a].sm_count);
    bench_json_int(&j, "b", e->pctx_b);
    bench_json_int(&j, "b_sms", e->info.pctx[e->pctx_b].sm_count);
    bench_json_end(&j);
    int rc = bench_json_finish(&j);
    if (fclose(f) != 0 || rc != 0) {
        fprintf(stderr, "overhead: error writing %s\n", e->opt->out);
        return -1;
    }
    return 0;
}

static void print_table(const env *e, const results *r)
{
    printf("\n");
    printf("W4 overhead on %s%s, %u SMs\n", e->simulated ? "the SIMULATED device" : e->info.device_name,
           e->simulated ? " (simulated: library overhead over the simulator)" : "", e->info.sm_count);
    printf("  %-28s %14s %14s\n", "figure", "p50", "p99");
    printf("  %-28s %14.1f %14.1f\n", "ds_launch ns (manual)", r->launch.ds.p50, r->launch.ds.p99);
    printf("  %-28s %14.1f %14.1f\n", "raw launch ns/launch", r->launch.raw.p50, r->launch.raw.p99);
    printf("  %-28s %14.1f %14.1f\n", "ds_launch ns (slo_aware)", r->launch.slo.p50, r->launch.slo.p99);
    printf("  %-28s %14.4f %14s   (goal <= 1.05)\n", "launch_ratio (manual)", r->launch.ratio, "");
    printf("  %-28s %14.1f %14s\n", "launch_added_ns (manual)", r->launch.added_p50, "");
    printf("  %-28s %14.4f %14s\n", "launch_ratio_slo_aware", r->launch.ratio_slo, "");
    printf("  %-28s %14.1f %14s\n", "launch_added_ns_slo_aware", r->launch.added_slo_p50, "");
    printf("  %-28s %14.2f %14.2f\n", "remap_us (host, added)", r->remap_us_p50, r->remap_us_p99);
    printf("  %-28s %14.2f %14.2f\n", "remap gap us (device)", r->gap_remap.p50, r->gap_remap.p99);
    printf("  %-28s %14.2f %14.2f\n", "plain gap us (device)", r->gap_plain.p50, r->gap_plain.p99);
    printf("  %-28s %14.3f %14s   (process CPU, %.2f s idle)\n", "sched_cpu_idle_pct", r->sched_cpu_idle_pct, "",
           r->sched_cpu_wall_s);
    if (r->gate_trials) {
        printf("  %-28s %14.2f %14.2f\n", "gate_us_host", r->gate_host.p50, r->gate_host.p99);
        if (r->gate_rck_ok)
            printf("  %-28s %14.2f %14.2f\n", "gate_us_rck", r->gate_rck.p50, r->gate_rck.p99);
        printf("  %-28s %14.2f %14.2f   (no gate, reference)\n", "launch-to-flag us", r->gate_ref.p50,
               r->gate_ref.p99);
    }
    if (r->graph_measured) {
        for (int k = 0; k < GRAPH_SIZES; k++) {
            const graph_cost *c = &r->gcost[k];
            char label[64];
            snprintf(label, sizeof label, "ds_graph_launch ns (%u node%s)", c->nodes, c->nodes > 1 ? "s" : "");
            printf("  %-28s %14.1f %14.1f   (manual)\n", label, c->pc.ds.p50, c->pc.ds.p99);
            snprintf(label, sizeof label, "raw cuGraphLaunch ns (%u)", c->nodes);
            printf("  %-28s %14.1f %14.1f\n", label, c->pc.raw.p50, c->pc.raw.p99);
            snprintf(label, sizeof label, "%s_added_ns", k ? "graph10_launch" : "graph_launch");
            printf("  %-28s %14.1f %14s   (manual; slo_aware %.1f)\n", label, c->pc.added_p50, "", c->pc.added_slo_p50);
        }
        const graph_inst *gi = &r->ginst[GRAPH_SIZES - 1];
        printf("  %-28s %14.1f %14.1f   (p50, max over %u pCtxs; %u nodes)\n", "graph capture us/100 nodes",
               gi->capture_per100.p50, gi->capture_per100.max, gi->npctx, gi->nodes);
        printf("  %-28s %14.1f %14.1f\n", "graph instantiate us/100 n.", gi->instantiate_per100.p50,
               gi->instantiate_per100.max);
        printf("  %-28s %14.0f %14.0f\n", "graph device bytes/pCtx", gi->bytes.p50, gi->bytes.max);
        printf("  %-28s %14.2f %14s   (100 nodes: %.2f ms)\n", "graph create ms (eager)", gi->create_ms, "",
               r->ginst[0].create_ms);
    } else {
        printf("  graphs not measured: %s\n", r->graph_skip);
    }
    const char *sp = getenv("DS_SAMPLE_PERIOD");
    printf("  launches each %" PRIu64 " in %u batches of %u (DS_SAMPLE_PERIOD %s); %u remaps between pCtx %u "
           "(%u SMs) and %u (%u SMs); %u gaps\n",
           r->launches_each, r->batches, e->opt->batch, sp && *sp ? sp : "default", r->remaps, e->pctx_a,
           e->info.pctx[e->pctx_a].sm_count, e->pctx_b, e->info.pctx[e->pctx_b].sm_count, r->gap_remap_n);
}

/* ------------------------------------------------------------------------ */

static void pick_pctxs(env *e)
{
    /* The smallest LOW pCtx and its complement: the move a policy makes. */
    int low = -1;
    for (uint32_t i = 0; i < e->info.num_pctx; i++) {
        const ds_pctx_info *p = &e->info.pctx[i];
        if (p->anchor == DS_ANCHOR_LOW && p->complement >= 0 &&
            (low < 0 || p->sm_count < e->info.pctx[low].sm_count))
            low = (int)i;
    }
    if (low >= 0) {
        e->pctx_a = (uint32_t)low;
        e->pctx_b = (uint32_t)e->info.pctx[low].complement;
    } else {
        e->pctx_a = 0;
        e->pctx_b = 1;
    }
}

int main(int argc, char **argv)
{
    if (bench_version_flag("overhead", argc, argv))
        return 0;
    options opt;
    if (parse_args(argc, argv, &opt))
        return 2;
    ds_log_set_handler(bench_log_to_stderr, NULL, DS_LOG_WARN);

    env e;
    memset(&e, 0, sizeof e);
    e.opt = &opt;
    e.chunk = 256;
    if (e.chunk > opt.gap_samples + 1)
        e.chunk = opt.gap_samples + 1 < 2 ? 2 : opt.gap_samples + 1;
    bench_rng rng;
    bench_rng_seed(&rng, opt.seed);

    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = opt.device;
    /* "manual": the runtime never moves the vCtx, so the remaps measured are
     * only ours. launch_ratio switches to slo_aware for its second variant. */
    cfg.policy = "manual";
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.trace_capacity = e.chunk + 64; /* one gap chunk at a time (cleared before each) */
    if (bench_runtime_open(&cfg, &sim, &e.rt, &e.simulated))
        return 1;
    int rc = 1;
    e.info = (ds_runtime_info)DS_RUNTIME_INFO_INIT;
    if (ds_runtime_info_get(e.rt, &e.info) != DS_SUCCESS) {
        fprintf(stderr, "overhead: ds_runtime_info_get -> %s\n", ds_last_error_message());
        goto done;
    }
    if (e.info.num_pctx < 2) {
        fprintf(stderr, "overhead: the pool has %u pCtx; remaps need 2\n", e.info.num_pctx);
        goto done;
    }
    pick_pctxs(&e);
    if ((e.simulated ? sim_open(&e) : cuda_open(&e)) != 0)
        goto done;

    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = "overhead";
    if (ds_vctx_create(e.rt, &a, &e.v) != DS_SUCCESS) {
        fprintf(stderr, "overhead: ds_vctx_create -> %s\n", ds_last_error_message());
        goto done;
    }
    /* The vCtx's stream, taken from a section: raw launches go to the same
     * stream as ds_launch. */
    if (ds_vctx_acquire_stream(e.v, &e.stream) != DS_SUCCESS || ds_vctx_release_stream(e.v) != DS_SUCCESS ||
        ds_vctx_get_pctx(e.v, &e.stream_pctx) != DS_SUCCESS) {
        fprintf(stderr, "overhead: section -> %s\n", ds_last_error_message());
        goto done;
    }
    printf("overhead: %s, %u SMs, %u pCtxs; %" PRIu64 " launches per path in batches of %u, %u remaps, "
           "%u gap samples\n",
           e.simulated ? "simulated device" : e.info.device_name, e.info.sm_count, e.info.num_pctx, opt.launches,
           opt.batch, opt.remaps, opt.gap_samples);
    fflush(stdout);

    results res;
    memset(&res, 0, sizeof res);
    if (launch_ratio(&e, &rng, &res) || remap_host(&e, &res) || remap_gap(&e, &res) ||
        sched_cpu_idle(&e, 1000.0, &res) || gate_latency(&e, &res) || graph_overhead(&e, &rng, &res))
        goto done;
    if (res.gap_host_slow_chunks)
        fprintf(stderr, "overhead: warning: %u gap chunks took the host over 15 ms to submit; their gaps may "
                        "include host time\n",
                res.gap_host_slow_chunks);
    if (write_json(&e, &res, argc, argv))
        goto done;
    printf("wrote %s\n", opt.out);
    print_table(&e, &res);
    rc = 0;
done:
    if (e.v && ds_vctx_destroy(e.v) != DS_SUCCESS) {
        fprintf(stderr, "overhead: ds_vctx_destroy -> %s\n", ds_last_error_message());
        rc = 1;
    }
    if (!e.simulated) {
        if (e.ts && e.cu.cuMemFree)
            e.cu.cuMemFree(e.ts);
        if (e.flag && e.cu.cuMemFreeHost)
            e.cu.cuMemFreeHost((void *)e.flag);
        if (e.module && e.cu.cuModuleUnload)
            e.cu.cuModuleUnload(e.module);
    }
    if (e.rt && ds_runtime_destroy(e.rt) != DS_SUCCESS) {
        fprintf(stderr, "overhead: ds_runtime_destroy -> %s\n", ds_last_error_message());
        rc = 1;
    }
    return rc;
}
