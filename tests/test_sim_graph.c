/* CUDA graphs on the simulated device (src/sim): stream capture, kernel
 * nodes, re-binding a node's context, executables, launches and their SMs,
 * device memory, invalidation, teardown and host allocation failures. The
 * semantics are those measured on an H100 / H200 (tools/devprobe/graphprobe.cu):
 * a graph runs in the context its kernel nodes were captured in, whatever
 * stream launches it.
 *
 * Driver-level calls go through the simulated driver table; devices come from
 * a runtime on DS_DEVICE_SIM (for ds_sim_kernel_create and the trace), or
 * bare where the test destroys the device itself (sim_driver.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_driver.h"

TestSuite(sim_graph, .init = sd_init, .timeout = 60);

/* A simulated kernel (ds_sim_kernel_create: it has a CUkernel too) with one
 * 8-byte parameter when with_param. */
static CUfunction sd_kernel(simdev *s, const char *name, double block_us, int with_param)
{
    ds_sim_kernel_desc kd = DS_SIM_KERNEL_DESC_INIT;
    kd.name = name;
    kd.block_us = block_us;
    kd.num_params = with_param ? 1 : 0;
    kd.param_sizes[0] = 8;
    return sd_kernel_desc(s, &kd);
}

/* What most tests start from: a device (through a runtime unless GD_BARE), a
 * 16-SM green context over SM groups 0-1 with a stream and, with GD_116, a
 * 116-SM one over the rest with a stream. */
enum { GD_116 = 1, GD_BARE = 2 };

typedef struct gdev {
    simdev s;
    CUgreenCtx g16, g116;
    CUstream st16, st116;
} gdev;

static void gd_open(gdev *d, const ds_sim_config *cfg, int flags)
{
    if (flags & GD_BARE)
        sd_open_bare(&d->s, cfg);
    else
        sd_open(&d->s, cfg);
    d->g16 = sd_green(&d->s, 0, 1, 0);
    d->st16 = sd_stream(d->g16, 0);
    d->g116 = flags & GD_116 ? sd_green(&d->s, 2, 14, 1) : NULL;
    d->st116 = flags & GD_116 ? sd_stream(d->g116, 0) : NULL;
}

/* Destroys the streams and green contexts still set (a test that destroys one
 * itself sets it to NULL), then the device. */
static void gd_close(gdev *d)
{
    if (d->st16)
        CU(cu->cuStreamDestroy(d->st16));
    if (d->st116)
        CU(cu->cuStreamDestroy(d->st116));
    if (d->g16)
        CU(cu->cuGreenCtxDestroy(d->g16));
    if (d->g116)
        CU(cu->cuGreenCtxDestroy(d->g116));
    sd_close(&d->s);
}

/* The module's built-in probe kernel (a cuModuleGetFunction function) and its
 * arguments: a 32-byte SM bitmap (not cleared) and the spin count. */
typedef struct probe {
    CUmodule m;
    CUfunction pf;
    CUdeviceptr bm;
    unsigned long long spin;
    void *params[2];
} probe;

static void probe_open(probe *pr, unsigned long long spin)
{
    CU(cu->cuModuleLoadData(&pr->m, "not really a fatbin"));
    CU(cu->cuModuleGetFunction(&pr->pf, pr->m, "ds_probe_smid"));
    CU(cu->cuMemAlloc(&pr->bm, 32));
    pr->spin = spin;
    pr->params[0] = &pr->bm;
    pr->params[1] = &pr->spin;
}

static int name_is(const ds_sim_kernel_record *r, const void *name)
{
    return strcmp(r->name, name) == 0;
}

/* The last record of kernel `name`, asserting there is one. */
static ds_sim_kernel_record last_of(simdev *s, const char *name)
{
    size_t n = 0;
    ds_sim_kernel_record r;
    int found = sd_find_last(s, name_is, name, &r, &n);
    cr_assert(found, "no record of kernel '%s' in the trace (%zu records)", name, n);
    return r;
}

static size_t trace_count(simdev *s)
{
    size_t n = 0;
    free(sd_trace(s, &n));
    return n;
}

/* SMs first..first+count-1 exactly, in a record's sm_mask. */
static void assert_sms(const uint64_t *mask, unsigned first, unsigned count, const char *what)
{
    for (unsigned sm = 0; sm < DS_MAX_SMS; sm++) {
        int want = sm >= first && sm < first + count;
        int got = (int)((mask[sm / 64] >> (sm % 64)) & 1u);
        cr_assert_eq(got, want, "%s: SM %u %s, want SMs %u..%u", what, sm, got ? "ran" : "did not run", first,
                     first + count - 1);
    }
}

/* The probe bitmap (8 words, bit s = SM s ran). */
static void assert_bitmap(CUdeviceptr bm, unsigned first, unsigned count, const char *what)
{
    uint32_t words[8];
    CU(cu->cuMemcpyDtoH(words, bm, sizeof words));
    uint64_t mask[DS_MAX_SMS / 64] = { 0 };
    for (unsigned sm = 0; sm < 256; sm++)
        if (words[sm / 32] >> (sm % 32) & 1u)
            mask[sm / 64] |= 1ull << (sm % 64);
    assert_sms(mask, first, count, what);
}

static CUgraph capture_one(CUstream st, CUfunction f, unsigned grid, void **params)
{
    CUgraph g = NULL;
    CU(cu->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU(cu->cuLaunchKernel(f, grid, 1, 1, 32, 1, 1, 0, st, params, NULL));
    CU(cu->cuStreamEndCapture(st, &g));
    cr_assert_not_null(g);
    return g;
}

/* n launches of f (grid 1, no parameters) captured on st. */
static CUgraph capture_n(CUstream st, CUfunction f, int n)
{
    CUgraph g = NULL;
    CU(cu->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < n; i++)
        CU(cu->cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL));
    CU(cu->cuStreamEndCapture(st, &g));
    return g;
}

static CUgraphNode only_node(CUgraph g)
{
    CUgraphNode node = NULL;
    size_t n = 1;
    CU(cu->cuGraphGetNodes(g, &node, &n));
    cr_assert_eq(n, 1);
    cr_assert_not_null(node);
    return node;
}

static CUgraphExec instantiate(CUgraph g)
{
    CUgraphExec e = NULL;
    CU(cu->cuGraphInstantiateWithFlags(&e, g, 0));
    cr_assert_not_null(e);
    return e;
}

/* ------------------------------------------------------------------------ */

/* The hazard measured on the GPU: a probe captured on a 16-SM green context's
 * stream runs on those 16 SMs when launched on another green context's stream
 * or on the primary context's NULL stream. */
Test(sim_graph, graph_runs_on_the_sms_of_its_capture_context)
{
    gdev d;
    gd_open(&d, NULL, GD_116);
    probe pr;
    probe_open(&pr, 1000);
    CU(cu->cuMemsetD32(pr.bm, 0, 8));

    size_t before = trace_count(&d.s);
    CUgraph graph = capture_one(d.st16, pr.pf, 2048, pr.params);
    cr_assert_eq(trace_count(&d.s), before, "a captured kernel does not run");
    assert_bitmap(pr.bm, 0, 0, "after capture");

    CUgraphNode node = only_node(graph);
    CUgraphNodeType type;
    CU(cu->cuGraphNodeGetType(node, &type));
    cr_assert_eq(type, CU_GRAPH_NODE_TYPE_KERNEL);
    CUDA_KERNEL_NODE_PARAMS p;
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    cr_assert_eq(p.func, pr.pf);
    cr_assert_null(p.kern, "a cuModuleGetFunction function carries no CUkernel");
    cr_assert_eq(p.ctx, ctx_of(d.g16), "the node's context is the capturing stream's");
    cr_assert_eq(p.gridDimX, 2048);
    cr_assert_eq(p.blockDimX, 32);
    cr_assert_eq(p.sharedMemBytes, 0);
    cr_assert_null(p.extra);
    cr_assert_not_null(p.kernelParams);
    cr_assert_neq(p.kernelParams[0], (void *)&pr.bm, "the node keeps its own copy of the arguments");
    cr_assert_eq(*(CUdeviceptr *)p.kernelParams[0], pr.bm);
    cr_assert_eq(*(unsigned long long *)p.kernelParams[1], pr.spin);

    CUgraphExec exec = instantiate(graph);
    CU(cu->cuGraphUpload(exec, d.st116));

    /* on the 116-SM green context's stream */
    CU(cu->cuGraphLaunch(exec, d.st116));
    CU(cu->cuStreamSynchronize(d.st116));
    assert_bitmap(pr.bm, 0, 16, "launched on the 116-SM stream");
    ds_sim_kernel_record r = last_of(&d.s, "ds_probe_smid");
    cr_assert_eq(r.stream, d.st116, "the trace names the stream that launched the graph");
    cr_assert_eq(r.function, pr.pf);
    cr_assert_eq(r.grid.x, 2048);
    assert_sms(r.sm_mask, 0, 16, "trace, 116-SM stream");

    /* on the primary context's NULL stream (every SM) */
    CU(cu->cuMemsetD32(pr.bm, 0, 8));
    CU(cu->cuGraphLaunch(exec, NULL));
    CU(cu->cuStreamSynchronize(NULL));
    assert_bitmap(pr.bm, 0, 16, "launched on the primary NULL stream");
    r = last_of(&d.s, "ds_probe_smid");
    cr_assert_null(r.stream);
    assert_sms(r.sm_mask, 0, 16, "trace, primary NULL stream");

    /* ... and on its own stream */
    CU(cu->cuMemsetD32(pr.bm, 0, 8));
    CU(cu->cuGraphLaunch(exec, d.st16));
    CU(cu->cuStreamSynchronize(d.st16));
    assert_bitmap(pr.bm, 0, 16, "launched on the capturing stream");

    CU(cu->cuGraphExecDestroy(exec));
    CU(cu->cuGraphDestroy(graph));
    CU_EXPECT(cu->cuGraphLaunch(exec, d.st16), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphNodeGetType(node, &type), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuMemFree(pr.bm));
    CU(cu->cuModuleUnload(pr.m));
    gd_close(&d);
}

/* A graph's kernels are ordered with the launching stream's other work even
 * though they run on other SMs; launches of one executable are serialized. */
Test(sim_graph, graph_launch_is_ordered_in_its_stream_and_per_executable)
{
    gdev d;
    gd_open(&d, NULL, GD_116);
    CUstream a = d.st116, b = sd_stream(d.g116, 0);
    CUfunction lng = sd_kernel(&d.s, "long", 1000, 0), node = sd_kernel(&d.s, "node", 100, 0);
    CUgraph graph = capture_one(d.st16, node, 16, NULL); /* one wave on 16 SMs: 100 us */
    CUgraphExec exec = instantiate(graph);
    double t0;
    cr_assert_eq(ds_sim_now_us(d.s.rt, &t0), DS_SUCCESS);

    CU(cu->cuLaunchKernel(lng, 1, 1, 1, 32, 1, 1, 0, a, NULL, NULL));
    CU(cu->cuGraphLaunch(exec, a)); /* behind "long" although its SMs are free */
    CU(cu->cuGraphLaunch(exec, b)); /* behind the launch on a */
    CU(cu->cuStreamSynchronize(b));
    CU(cu->cuStreamSynchronize(a));
    size_t n = 0;
    ds_sim_kernel_record *recs = sd_trace(&d.s, &n);
    const ds_sim_kernel_record *rl = NULL, *r1 = NULL, *r2 = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(recs[i].name, "long") == 0)
            rl = &recs[i];
        else if (strcmp(recs[i].name, "node") == 0)
            (r1 ? &r2 : &r1)[0] = &recs[i];
    }
    cr_assert(rl && r1 && r2, "records: long %p, node %p %p", (void *)rl, (void *)r1, (void *)r2);
    cr_assert_eq(r1->stream, a);
    cr_assert_eq(r2->stream, b);
    cr_assert_float_eq(r1->start_us, rl->end_us, 1e-9, "graph kernel started at %.1f, long ended %.1f",
                       r1->start_us, rl->end_us);
    cr_assert_float_eq(r2->start_us, r1->end_us, 1e-9, "second launch started at %.1f, first ended %.1f",
                       r2->start_us, r1->end_us);
    assert_sms(r1->sm_mask, 0, 16, "first launch");
    assert_sms(r2->sm_mask, 0, 16, "second launch");
    free(recs);
    CU(cu->cuGraphExecDestroy(exec));
    CU(cu->cuGraphDestroy(graph));
    CU(cu->cuStreamDestroy(b));
    gd_close(&d);
}

/* Re-binding a node: func NULL + kern + ctx moves it to ctx; func set ignores
 * ctx and takes the current context. Executables keep what they copied. */
Test(sim_graph, set_params_rebinds_through_kern_only)
{
    gdev d;
    gd_open(&d, NULL, GD_116);
    CUcontext c16 = ctx_of(d.g16), c116 = ctx_of(d.g116);
    CUfunction k = sd_kernel(&d.s, "k", 10, 1);
    uint64_t v = 7;
    void *params[1] = { &v };
    CUgraph graph = capture_one(d.st16, k, 132 * 4, params);
    CUgraphNode node = only_node(graph);
    CUDA_KERNEL_NODE_PARAMS p;
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    cr_assert_eq(p.func, k);
    cr_assert_not_null(p.kern, "a ds_sim_kernel_create kernel carries a CUkernel");
    cr_assert_eq(p.ctx, c16);
    const char *name = NULL;
    CU(cu->cuFuncGetName(&name, k));
    cr_assert_str_eq(name, "k");
    CU(cu->cuFuncGetName(&name, (CUfunction)p.kern));
    cr_assert_str_eq(name, "k");
    CUgraphExec before = instantiate(graph);

    /* func NULL, kern, ctx: the node moves to the 116-SM context */
    CUkernel kern = p.kern;
    p.func = NULL;
    p.ctx = c116;
    uint64_t v2 = 9;
    void *params2[1] = { &v2 };
    p.kernelParams = params2;
    CU(cu->cuGraphKernelNodeSetParams(node, &p));
    v2 = 1000; /* copied at the call */
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    cr_assert_eq(p.func, k);
    cr_assert_eq(p.kern, kern);
    cr_assert_eq(p.ctx, c116);
    cr_assert_eq(*(uint64_t *)p.kernelParams[0], 9);
    CUgraphExec moved = instantiate(graph);
    CU(cu->cuGraphLaunch(moved, d.st16));
    CU(cu->cuStreamSynchronize(d.st16));
    ds_sim_kernel_record r = last_of(&d.s, "k");
    assert_sms(r.sm_mask, 16, 116, "re-bound to the 116-SM context");
    uint64_t got;
    memcpy(&got, r.params, 8);
    cr_assert_eq(got, 9, "parameter %llu", (unsigned long long)got);
    /* the executable made before keeps the captured context and value */
    CU(cu->cuGraphLaunch(before, d.st16));
    CU(cu->cuStreamSynchronize(d.st16));
    r = last_of(&d.s, "k");
    assert_sms(r.sm_mask, 0, 16, "executable instantiated before the change");
    memcpy(&got, r.params, 8);
    cr_assert_eq(got, 7);

    /* func NULL, kern, ctx NULL: the calling thread's current context */
    CU(cu->cuCtxSetCurrent(c16));
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    p.func = NULL;
    p.ctx = NULL;
    CU(cu->cuGraphKernelNodeSetParams(node, &p)); /* its own kernelParams: fine */
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    cr_assert_eq(p.ctx, c16);
    cr_assert_eq(*(uint64_t *)p.kernelParams[0], 9);

    /* func set: ctx is ignored, the node takes the current context (the
     * primary: every SM, as measured) */
    CU(cu->cuCtxSetCurrent(d.s.primary));
    p.ctx = c116;
    CU(cu->cuGraphKernelNodeSetParams(node, &p));
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    cr_assert_eq(p.ctx, d.s.primary, "func set: ctx ignored, the current context taken");
    cr_assert_eq(p.func, k);
    CUgraphExec whole = instantiate(graph);
    CU(cu->cuGraphLaunch(whole, d.st16));
    CU(cu->cuStreamSynchronize(d.st16));
    r = last_of(&d.s, "k");
    assert_sms(r.sm_mask, 0, 132, "func set under the primary context");
    /* ... and under the 16-SM green context */
    CU(cu->cuCtxSetCurrent(c16));
    p.ctx = c116;
    CU(cu->cuGraphKernelNodeSetParams(node, &p));
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    cr_assert_eq(p.ctx, c16);
    CU(cu->cuCtxSetCurrent(d.s.primary));

    /* errors */
    CUDA_KERNEL_NODE_PARAMS bad = p;
    bad.func = NULL;
    bad.kern = NULL;
    CU_EXPECT(cu->cuGraphKernelNodeSetParams(node, &bad), CUDA_ERROR_INVALID_VALUE);
    bad.kern = (CUkernel)k; /* a CUfunction is not a CUkernel */
    CU_EXPECT(cu->cuGraphKernelNodeSetParams(node, &bad), CUDA_ERROR_INVALID_HANDLE);
    bad.kern = kern;
    bad.ctx = (CUcontext)kern;
    CU_EXPECT(cu->cuGraphKernelNodeSetParams(node, &bad), CUDA_ERROR_INVALID_CONTEXT);
    bad = p;
    bad.gridDimY = 0;
    CU_EXPECT(cu->cuGraphKernelNodeSetParams(node, &bad), CUDA_ERROR_INVALID_VALUE);
    bad = p;
    bad.kernelParams = NULL;
    CU_EXPECT(cu->cuGraphKernelNodeSetParams(node, &bad), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphKernelNodeSetParams(node, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphKernelNodeSetParams((CUgraphNode)graph, &p), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphKernelNodeGetParams(NULL, &p), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    cr_assert_eq(p.ctx, c16, "failed calls change nothing");

    /* a CUkernel launches like its function */
    size_t n0 = trace_count(&d.s);
    CU(cu->cuLaunchKernel((CUfunction)kern, 1, 1, 1, 32, 1, 1, 0, d.st16, params, NULL));
    CU(cu->cuStreamSynchronize(d.st16));
    cr_assert_eq(trace_count(&d.s), n0 + 1);
    r = last_of(&d.s, "k");
    cr_assert_eq(r.function, k);
    CU_EXPECT(cu->cuFuncGetName(&name, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuFuncGetName(NULL, k), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuFuncGetName(&name, (CUfunction)d.st16), CUDA_ERROR_INVALID_HANDLE);

    CU(cu->cuGraphExecDestroy(before));
    CU(cu->cuGraphExecDestroy(moved));
    CU(cu->cuGraphDestroy(graph)); /* before its executable: fine */
    CU(cu->cuGraphLaunch(whole, d.st16));
    CU(cu->cuStreamSynchronize(d.st16));
    CU(cu->cuGraphExecDestroy(whole));
    gd_close(&d);
}

/* Work a capturing stream cannot take fails and invalidates the capture. */
typedef enum {
    OP_EVENT_RECORD,
    OP_WAIT_EVENT,
    OP_WRITE_VALUE,
    OP_WAIT_VALUE,
    OP_COPY,
    OP_SYNC,
    OP_QUERY,
    OP_GRAPH_LAUNCH,
    OP_GRAPH_UPLOAD,
    OP_COUNT
} refused_op;

static uint32_t g_word;

Test(sim_graph, unsupported_work_invalidates_the_capture)
{
    gdev d;
    gd_open(&d, NULL, GD_116);
    CUstream st = d.st16, other = d.st116;
    CUfunction k = sd_kernel(&d.s, "k", 10, 0);
    CUevent ev;
    CU(cu->cuEventCreate(&ev, 0));
    CU(cu->cuEventRecord(ev, other));
    CUdeviceptr dp;
    CU(cu->cuMemAlloc(&dp, 64));
    uint32_t host = 0;
    CUgraph empty = NULL;
    CU(cu->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cu->cuStreamEndCapture(st, &empty));
    CUgraphExec exec = instantiate(empty);

    for (int op = 0; op < OP_COUNT; op++) {
        CU(cu->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        CU(cu->cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL));
        /* other streams keep working meanwhile */
        CU(cu->cuEventRecord(ev, other));
        CU(cu->cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, other, NULL, NULL));
        CU(cu->cuStreamSynchronize(other));
        CUresult r;
        switch (op) {
        case OP_EVENT_RECORD: r = cu->cuEventRecord(ev, st); break;
        case OP_WAIT_EVENT: r = cu->cuStreamWaitEvent(st, ev, 0); break;
        case OP_WRITE_VALUE: r = cu->cuStreamWriteValue32(st, (CUdeviceptr)(uintptr_t)&g_word, 1, 0); break;
        case OP_WAIT_VALUE: r = cu->cuStreamWaitValue32(st, (CUdeviceptr)(uintptr_t)&g_word, 0, 0); break;
        case OP_COPY: r = cu->cuMemcpyHtoDAsync(dp, &host, sizeof host, st); break;
        case OP_SYNC: r = cu->cuStreamSynchronize(st); break;
        case OP_QUERY: r = cu->cuStreamQuery(st); break;
        case OP_GRAPH_LAUNCH: r = cu->cuGraphLaunch(exec, st); break;
        default: r = cu->cuGraphUpload(exec, st); break;
        }
        cr_assert_eq(r, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "op %d on a capturing stream: %s", op,
                     cuname(r));
        CU_EXPECT(cu->cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL),
                  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        CUgraph g = (CUgraph)&host;
        CU_EXPECT(cu->cuStreamEndCapture(st, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        cr_assert_null(g, "op %d: an invalidated capture gives no graph", op);
        CU_EXPECT(cu->cuStreamEndCapture(st, &g), CUDA_ERROR_ILLEGAL_STATE);
    }
    /* the stream works normally again, and can capture again */
    CU(cu->cuEventRecord(ev, st));
    CU(cu->cuStreamSynchronize(st));
    CUgraph g = capture_one(st, k, 1, NULL);
    CU(cu->cuGraphDestroy(g));
    cr_assert_eq(g_word, 0, "no refused value write ran");
    CU(cu->cuGraphExecDestroy(exec));
    CU(cu->cuGraphDestroy(empty));
    CU(cu->cuEventDestroy(ev));
    CU(cu->cuMemFree(dp));
    gd_close(&d);
}

typedef struct {
    CUstream st;
    CUresult r;
    CUgraph g;
} ender_arg;

static void *ender(void *p)
{
    ender_arg *a = p;
    a->r = cu->cuStreamEndCapture(a->st, &a->g);
    return NULL;
}

static CUresult end_on_another_thread(CUstream st, CUgraph *g)
{
    ender_arg a = { st, CUDA_ERROR_UNKNOWN, NULL };
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, ender, &a), 0);
    pthread_join(t, NULL);
    *g = a.g;
    return a.r;
}

Test(sim_graph, capture_begin_and_end_rules)
{
    gdev d;
    gd_open(&d, NULL, 0);
    CUfunction k = sd_kernel(&d.s, "k", 10, 0);
    CUgraph g = NULL;
    /* only a created stream captures */
    CU_EXPECT(cu->cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CU_EXPECT(cu->cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CU_EXPECT(cu->cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL),
              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CU_EXPECT(cu->cuStreamBeginCapture((CUstream)k, CU_STREAM_CAPTURE_MODE_GLOBAL),
              CUDA_ERROR_INVALID_HANDLE);
    CU_EXPECT(cu->cuStreamBeginCapture(d.st16, (CUstreamCaptureMode)7), CUDA_ERROR_INVALID_VALUE);
    /* not capturing */
    CU_EXPECT(cu->cuStreamEndCapture(d.st16, &g), CUDA_ERROR_ILLEGAL_STATE);
    CU_EXPECT(cu->cuStreamEndCapture(NULL, &g), CUDA_ERROR_ILLEGAL_STATE);
    CU_EXPECT(cu->cuStreamEndCapture(d.st16, NULL), CUDA_ERROR_INVALID_VALUE);
    /* twice */
    CU(cu->cuStreamBeginCapture(d.st16, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU_EXPECT(cu->cuStreamBeginCapture(d.st16, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_ERROR_ILLEGAL_STATE);
    /* a thread-local capture is ended by its own thread */
    CU_EXPECT(end_on_another_thread(d.st16, &g), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    /* launch errors are reported as for a launch, and the capture goes on */
    CU_EXPECT(cu->cuLaunchKernel(k, 0, 1, 1, 32, 1, 1, 0, d.st16, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuLaunchKernel(k, 1, 1, 1, 2048, 1, 1, 0, d.st16, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuLaunchKernel(k, 3, 1, 1, 32, 1, 1, 0, d.st16, NULL, NULL));
    CU(cu->cuStreamEndCapture(d.st16, &g));
    size_t n = 0;
    CU(cu->cuGraphGetNodes(g, NULL, &n));
    cr_assert_eq(n, 1);
    CU(cu->cuGraphDestroy(g));
    /* a relaxed capture may be ended by any thread */
    CU(cu->cuStreamBeginCapture(d.st16, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cu->cuLaunchKernel(k, 3, 1, 1, 32, 1, 1, 0, d.st16, NULL, NULL));
    CU(end_on_another_thread(d.st16, &g));
    cr_assert_not_null(g);
    CU(cu->cuGraphDestroy(g));
    CU_EXPECT(cu->cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
    /* a stream destroyed while capturing takes its recording with it */
    CUstream st2 = sd_stream(d.g16, 0);
    CU(cu->cuStreamBeginCapture(st2, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cu->cuLaunchKernel(k, 3, 1, 1, 32, 1, 1, 0, st2, NULL, NULL));
    CU(cu->cuStreamDestroy(st2));
    /* the new error codes have names and texts */
    const CUresult codes[] = { CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                               CUDA_ERROR_ILLEGAL_STATE, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD };
    const char *names[] = { "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
                            "CUDA_ERROR_ILLEGAL_STATE", "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD" };
    for (int i = 0; i < 4; i++) {
        const char *nm = NULL, *txt = NULL;
        CU(cu->cuGetErrorName(codes[i], &nm));
        cr_assert_str_eq(nm, names[i]);
        CU(cu->cuGetErrorString(codes[i], &txt));
        cr_assert_not_null(txt);
    }
    gd_close(&d);
}

Test(sim_graph, get_nodes_counts_and_fills_in_capture_order)
{
    gdev d;
    gd_open(&d, NULL, 0);
    CUfunction k = sd_kernel(&d.s, "k", 10, 0);
    CUgraph g = NULL;
    CU(cu->cuStreamBeginCapture(d.st16, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (unsigned i = 1; i <= 3; i++)
        CU(cu->cuLaunchKernel(k, i, 1, 1, 32, 1, 1, 0, d.st16, NULL, NULL));
    CU(cu->cuStreamEndCapture(d.st16, &g));

    size_t n = 0;
    CU(cu->cuGraphGetNodes(g, NULL, &n));
    cr_assert_eq(n, 3);
    CUgraphNode nodes[5] = { 0 }, again[5] = { 0 };
    n = 2; /* fewer than the graph has: 2 filled, n kept */
    CU(cu->cuGraphGetNodes(g, nodes, &n));
    cr_assert_eq(n, 2);
    cr_assert(nodes[0] && nodes[1] && !nodes[2]);
    for (int i = 0; i < 5; i++)
        nodes[i] = (CUgraphNode)&n;
    n = 5; /* more: the rest set to NULL, n is the count */
    CU(cu->cuGraphGetNodes(g, nodes, &n));
    cr_assert_eq(n, 3);
    cr_assert(!nodes[3] && !nodes[4]);
    n = 5;
    CU(cu->cuGraphGetNodes(g, again, &n));
    for (unsigned i = 0; i < 3; i++) {
        cr_assert_eq(nodes[i], again[i], "node handles are stable");
        CUDA_KERNEL_NODE_PARAMS p;
        CU(cu->cuGraphKernelNodeGetParams(nodes[i], &p));
        cr_assert_eq(p.gridDimX, i + 1, "node %u has grid %u: capture order", i, p.gridDimX);
    }
    CU_EXPECT(cu->cuGraphGetNodes(g, nodes, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphGetNodes((CUgraph)d.st16, NULL, &n), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphGetNodes(NULL, NULL, &n), CUDA_ERROR_INVALID_VALUE);

    /* an empty capture is a valid graph of 0 nodes */
    CUgraph e = NULL;
    CU(cu->cuStreamBeginCapture(d.st16, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU(cu->cuStreamEndCapture(d.st16, &e));
    cr_assert_not_null(e);
    CU(cu->cuGraphGetNodes(e, NULL, &n));
    cr_assert_eq(n, 0);
    CUgraphExec ee = instantiate(e);
    size_t before = trace_count(&d.s);
    CU(cu->cuGraphLaunch(ee, d.st16));
    CU(cu->cuStreamSynchronize(d.st16));
    cr_assert_eq(trace_count(&d.s), before);
    CU_EXPECT(cu->cuGraphInstantiateWithFlags(&ee, e, 1ull << 40), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphInstantiateWithFlags(NULL, e, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphInstantiateWithFlags(&ee, (CUgraph)d.st16, 0), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuGraphExecDestroy(ee));
    CU_EXPECT(cu->cuGraphExecDestroy(ee), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuGraphDestroy(e));
    CU(cu->cuGraphDestroy(g));
    CU_EXPECT(cu->cuGraphNodeGetType(nodes[0], &(CUgraphNodeType){ 0 }), CUDA_ERROR_INVALID_VALUE);
    gd_close(&d);
}

/* A launch whose arguments came packed (CU_LAUNCH_PARAM_BUFFER_POINTER) gives
 * a node that reports them the same way (extra, kernelParams NULL). */
Test(sim_graph, packed_arguments_are_kept_as_extra)
{
    gdev d;
    gd_open(&d, NULL, 0);
    CUfunction k = sd_kernel(&d.s, "k", 10, 1);
    uint64_t buf = 0x1234;
    size_t size = sizeof buf;
    void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                      CU_LAUNCH_PARAM_END };
    CUgraph g = NULL;
    CU(cu->cuStreamBeginCapture(d.st16, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU(cu->cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, d.st16, NULL, extra));
    CU(cu->cuStreamEndCapture(d.st16, &g));
    buf = 0; /* the node copied the buffer */
    CUgraphNode node = only_node(g);
    CUDA_KERNEL_NODE_PARAMS p;
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    cr_assert_null(p.kernelParams);
    cr_assert_not_null(p.extra);
    cr_assert_eq(p.extra[0], CU_LAUNCH_PARAM_BUFFER_POINTER);
    cr_assert_neq(p.extra[1], (void *)&buf);
    cr_assert_eq(*(uint64_t *)p.extra[1], 0x1234);
    cr_assert_eq(p.extra[2], CU_LAUNCH_PARAM_BUFFER_SIZE);
    cr_assert_eq(*(size_t *)p.extra[3], sizeof buf);
    cr_assert_eq(p.extra[4], CU_LAUNCH_PARAM_END);
    CU(cu->cuGraphKernelNodeSetParams(node, &p)); /* its own buffer back */
    CUgraphExec e = instantiate(g);
    CU(cu->cuGraphLaunch(e, d.st16));
    CU(cu->cuStreamSynchronize(d.st16));
    ds_sim_kernel_record r = last_of(&d.s, "k");
    uint64_t got = 0;
    cr_assert_eq(r.param_bytes, 8);
    memcpy(&got, r.params, 8);
    cr_assert_eq(got, 0x1234);
    CU(cu->cuGraphExecDestroy(e));
    CU(cu->cuGraphDestroy(g));
    gd_close(&d);
}

Test(sim_graph, mem_get_info_counts_allocations_and_executables)
{
    gdev d;
    gd_open(&d, NULL, 0);
    CUfunction k = sd_kernel(&d.s, "k", 10, 0);
    size_t free0 = 0, total = 0, f = 0, t = 0;
    CU(cu->cuMemGetInfo(&free0, &total));
    cr_assert_eq(total, (size_t)80 << 30, "total %zu", total);
    cr_assert_leq(free0, total);

    CUgraph g = capture_n(d.st16, k, 3);
    CU(cu->cuMemGetInfo(&f, &t));
    cr_assert_eq(f, free0, "a template holds no device memory");
    CUgraphExec e1 = instantiate(g), e2 = instantiate(g);
    CU(cu->cuMemGetInfo(&f, &t));
    cr_assert_eq(t, total);
    cr_assert_eq(free0 - f, 2 * ((64u << 10) + 3 * (1u << 10)), "two 3-node executables hold %zu", free0 - f);
    CUdeviceptr dp;
    CU(cu->cuMemAlloc(&dp, 1 << 20));
    CU(cu->cuMemGetInfo(&f, &t));
    cr_assert_eq(free0 - f, 2 * ((64u << 10) + 3 * (1u << 10)) + (1u << 20));
    void *hp;
    CU(cu->cuMemHostAlloc(&hp, 1 << 20, 0));
    CU(cu->cuMemGetInfo(&f, &t));
    cr_assert_eq(free0 - f, 2 * ((64u << 10) + 3 * (1u << 10)) + (1u << 20),
                 "pinned host memory is not device memory");
    CU(cu->cuMemFreeHost(hp));
    CU(cu->cuMemFree(dp));
    CU(cu->cuGraphDestroy(g)); /* the executables live on */
    CU(cu->cuGraphExecDestroy(e1));
    CU(cu->cuMemGetInfo(&f, &t));
    cr_assert_eq(free0 - f, (64u << 10) + 3 * (1u << 10));
    CU(cu->cuGraphLaunch(e2, d.st16));
    CU(cu->cuGraphExecDestroy(e2)); /* with its launch in flight */
    CU(cu->cuStreamSynchronize(d.st16));
    CU(cu->cuMemGetInfo(&f, &t));
    cr_assert_eq(f, free0, "every executable's memory is back");
    CU_EXPECT(cu->cuMemGetInfo(NULL, &t), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuCtxSetCurrent(NULL));
    CU_EXPECT(cu->cuMemGetInfo(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
    CU(cu->cuCtxSetCurrent(d.s.primary));
    gd_close(&d);
}

/* One cuGraphLaunch costs one launch's host time in VIRTUAL time, whatever
 * its number of nodes; a faulting node makes the device's fault sticky. */
Test(sim_graph, launch_overhead_and_sticky_fault)
{
    ds_sim_config c = DS_SIM_CONFIG_INIT;
    c.launch_overhead_us = 2.5;
    gdev d;
    gd_open(&d, &c, 0);
    CUfunction k = sd_kernel(&d.s, "k", 10, 0);
    double t0, t1;
    cr_assert_eq(ds_sim_now_us(d.s.rt, &t0), DS_SUCCESS);
    CUgraph g = capture_n(d.st16, k, 4);
    cr_assert_eq(ds_sim_now_us(d.s.rt, &t1), DS_SUCCESS);
    cr_assert_float_eq(t1, t0, 1e-9, "capturing costs no launch time (%.1f -> %.1f)", t0, t1);
    CUgraphExec e = instantiate(g);
    CU(cu->cuGraphLaunch(e, d.st16));
    cr_assert_eq(ds_sim_now_us(d.s.rt, &t1), DS_SUCCESS);
    cr_assert_float_eq(t1, t0 + 2.5, 1e-9, "one graph launch: %.1f -> %.1f", t0, t1);
    CU(cu->cuStreamSynchronize(d.st16));
    ds_sim_kernel_record r = last_of(&d.s, "k");
    cr_assert_float_eq(r.submit_us, t0 + 2.5, 1e-9);
    cr_assert_float_eq(r.end_us, r.submit_us + 40.0, 1e-9, "4 kernels of 10 us in order: ended %.1f",
                       r.end_us);

    ds_sim_kernel_desc kd = DS_SIM_KERNEL_DESC_INIT;
    kd.name = "faulty";
    kd.faults = 1;
    CUfunction bad;
    cr_assert_eq(ds_sim_kernel_create(d.s.rt, &kd, &bad), DS_SUCCESS);
    CUgraph gb = capture_one(d.st16, bad, 1, NULL);
    CUgraphExec eb = instantiate(gb);
    CU(cu->cuGraphLaunch(eb, d.st16));
    CU_EXPECT(cu->cuStreamSynchronize(d.st16), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_EXPECT(cu->cuGraphLaunch(e, d.st16), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_EXPECT(cu->cuStreamBeginCapture(d.st16, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_ERROR_ILLEGAL_ADDRESS);
    /* destroy calls still free */
    CU(cu->cuGraphExecDestroy(eb));
    CU(cu->cuGraphExecDestroy(e));
    CU(cu->cuGraphDestroy(gb));
    CU(cu->cuGraphDestroy(g));
    CU_EXPECT(cu->cuStreamDestroy(d.st16), CUDA_SUCCESS);
    CU(cu->cuGreenCtxDestroy(d.g16));
    CU(cu->cuCtxSetCurrent(NULL));
    CU(cu->cuDevicePrimaryCtxRelease(d.s.dev));
    ds_status st2 = ds_runtime_destroy(d.s.rt);
    cr_assert(st2 == DS_SUCCESS || st2 == DS_ERR_DEVICE_FAULT, "ds_runtime_destroy: %s", ds_status_name(st2));
}

/* A graph whose context or function went away cannot run. */
Test(sim_graph, destroyed_context_or_module_fails_instantiate_and_launch)
{
    gdev d;
    gd_open(&d, NULL, GD_116);
    probe pr;
    probe_open(&pr, 0);
    CUgraph g = capture_one(d.st16, pr.pf, 2048, pr.params);
    CUgraphExec e = instantiate(g);
    CU(cu->cuStreamDestroy(d.st16));
    CU(cu->cuGreenCtxDestroy(d.g16));
    d.st16 = NULL; /* gone: not for gd_close */
    d.g16 = NULL;
    CUgraphExec e2;
    CU_EXPECT(cu->cuGraphInstantiateWithFlags(&e2, g, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_EXPECT(cu->cuGraphLaunch(e, d.st116), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    /* re-bound (func set, primary current) it runs again, on every SM */
    CUgraphNode node = only_node(g);
    CUDA_KERNEL_NODE_PARAMS p;
    CU(cu->cuGraphKernelNodeGetParams(node, &p));
    CU(cu->cuGraphKernelNodeSetParams(node, &p));
    CUgraphExec e3 = instantiate(g);
    CU(cu->cuMemsetD32(pr.bm, 0, 8));
    CU(cu->cuGraphLaunch(e3, d.st116));
    CU(cu->cuStreamSynchronize(d.st116));
    assert_bitmap(pr.bm, 0, 132, "re-bound to the primary context");
    CU(cu->cuModuleUnload(pr.m));
    CU_EXPECT(cu->cuGraphLaunch(e3, d.st116), CUDA_ERROR_INVALID_HANDLE);
    CU_EXPECT(cu->cuGraphInstantiateWithFlags(&e2, g, 0), CUDA_ERROR_INVALID_HANDLE);
    CU(cu->cuGraphExecDestroy(e));
    CU(cu->cuGraphExecDestroy(e3));
    CU(cu->cuGraphDestroy(g));
    CU(cu->cuMemFree(pr.bm));
    gd_close(&d);
}

/* Destroying the device frees what is left: templates, executables (one with
 * a launch in flight), a capture never ended (LeakSanitizer checks in CI). */
Test(sim_graph, graphs_freed_with_the_device)
{
    gdev d;
    gd_open(&d, NULL, GD_BARE);
    probe pr;
    probe_open(&pr, 0);
    CUstream cap = sd_stream(d.g16, 0);
    CUgraph g = capture_one(d.st16, pr.pf, 5000, pr.params);
    CUgraphExec e = instantiate(g);
    for (int i = 0; i < 3; i++)
        CU(cu->cuGraphLaunch(e, d.st16));
    CU(cu->cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cu->cuLaunchKernel(pr.pf, 4, 1, 1, 32, 1, 1, 0, cap, pr.params, NULL));
    CUgraphNode node = only_node(g);
    sd_close(&d.s); /* with its streams, graphs and module */
    CU_EXPECT(cu->cuGraphLaunch(e, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGraphNodeGetType(node, &(CUgraphNodeType){ 0 }), CUDA_ERROR_INVALID_VALUE);
}

/* --- host allocation failures ---------------------------------------------
 * The library's allocator is replaced by one that fails its nth call; each
 * graph call is made with n = 1, 2, ... until it succeeds without meeting
 * the failure. A failed call returns CUDA_ERROR_OUT_OF_MEMORY and keeps no
 * allocation. Only a bare device is used (no runtime may be alive while the
 * allocator is replaced). */

static atomic_ulong g_calls, g_fail_at;
static atomic_long g_live;

typedef union hdr {
    max_align_t align;
    size_t size;
} hdr;

static int fail_this(void)
{
    return atomic_fetch_add(&g_calls, 1) + 1 == atomic_load(&g_fail_at);
}

static void *wrap(hdr *h)
{
    if (!h)
        return NULL;
    atomic_fetch_add(&g_live, 1);
    return h + 1;
}

static void *t_malloc(size_t size) { return fail_this() ? NULL : wrap(malloc(sizeof(hdr) + size)); }
static void *t_calloc(size_t c, size_t size)
{
    if (fail_this() || (size && c > (SIZE_MAX - sizeof(hdr)) / size))
        return NULL;
    return wrap(calloc(1, sizeof(hdr) + c * size));
}
static void *t_realloc(void *p, size_t size)
{
    if (fail_this())
        return NULL;
    if (!p)
        return wrap(malloc(sizeof(hdr) + size));
    hdr *h = realloc((hdr *)p - 1, sizeof(hdr) + size);
    return h ? h + 1 : NULL;
}
static void t_free(void *p)
{
    if (!p)
        return;
    free((hdr *)p - 1);
    atomic_fetch_sub(&g_live, 1);
}

typedef CUresult (*oom_call)(void *arg);

/* Runs call with allocation n failing for n = 1, 2, ... */
static void oom_loop(const char *what, oom_call call, void *arg)
{
    for (unsigned long n = 1; n < 1000; n++) {
        long live = atomic_load(&g_live);
        atomic_store(&g_calls, 0);
        atomic_store(&g_fail_at, n);
        CUresult r = call(arg);
        atomic_store(&g_fail_at, 0);
        unsigned long calls = atomic_load(&g_calls);
        if (r == CUDA_SUCCESS) {
            if (calls < n)
                return;
            continue; /* the failure met an allocation the call can do without */
        }
        cr_assert_eq(r, CUDA_ERROR_OUT_OF_MEMORY, "%s with allocation %lu failing: %s", what, n, cuname(r));
        cr_assert_eq(atomic_load(&g_live), live, "%s with allocation %lu failing kept %ld allocation(s)", what,
                     n, atomic_load(&g_live) - live);
    }
    cr_assert_fail("%s never succeeded", what);
}

typedef struct {
    CUstream st;
    CUfunction pf;
    void **params;
    CUgraph g;
    CUgraphExec e;
    CUgraphNode node;
} oom_ctx;

static CUresult oom_begin(void *p)
{
    oom_ctx *c = p;
    return cu->cuStreamBeginCapture(c->st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}

static CUresult oom_capture(void *p)
{
    oom_ctx *c = p;
    return cu->cuLaunchKernel(c->pf, 64, 1, 1, 32, 1, 1, 0, c->st, c->params, NULL);
}

static CUresult oom_end(void *p)
{
    oom_ctx *c = p;
    return cu->cuStreamEndCapture(c->st, &c->g);
}

static CUresult oom_instantiate(void *p)
{
    oom_ctx *c = p;
    if (c->e) {
        CUresult r = cu->cuGraphExecDestroy(c->e);
        if (r != CUDA_SUCCESS)
            return r;
        c->e = NULL;
    }
    return cu->cuGraphInstantiateWithFlags(&c->e, c->g, 0);
}

static CUresult oom_launch(void *p)
{
    oom_ctx *c = p;
    CUresult r = cu->cuGraphLaunch(c->e, c->st);
    if (r == CUDA_SUCCESS) {
        atomic_store(&g_fail_at, 0);
        r = cu->cuStreamSynchronize(c->st);
    }
    return r;
}

static CUresult oom_set_params(void *p)
{
    oom_ctx *c = p;
    CUDA_KERNEL_NODE_PARAMS kp;
    CUresult r = cu->cuGraphKernelNodeGetParams(c->node, &kp);
    return r != CUDA_SUCCESS ? r : cu->cuGraphKernelNodeSetParams(c->node, &kp);
}

Test(sim_graph, out_of_host_memory_fails_cleanly)
{
    cr_assert_eq(ds_replace_allocator(t_malloc, t_realloc, t_calloc, t_free), DS_SUCCESS, "%s",
                 ds_last_error_message());
    gdev d;
    gd_open(&d, NULL, GD_BARE);
    probe pr;
    probe_open(&pr, 0);
    oom_ctx c = { .st = d.st16, .pf = pr.pf, .params = pr.params };
    /* a launch first: the trace's ring (a cache the device keeps for its
     * life) exists before allocations are failed */
    CU(cu->cuLaunchKernel(c.pf, 64, 1, 1, 32, 1, 1, 0, c.st, c.params, NULL));
    CU(cu->cuStreamSynchronize(c.st));
    oom_loop("cuStreamBeginCapture", oom_begin, &c);
    for (int i = 0; i < 12; i++) /* past the first growth of the node array */
        oom_loop("cuLaunchKernel (captured)", oom_capture, &c);
    oom_loop("cuStreamEndCapture", oom_end, &c);
    size_t n = 0;
    CU(cu->cuGraphGetNodes(c.g, NULL, &n));
    cr_assert_eq(n, 12);
    n = 1;
    CU(cu->cuGraphGetNodes(c.g, &c.node, &n));
    oom_loop("cuGraphInstantiateWithFlags", oom_instantiate, &c);
    oom_loop("cuGraphLaunch", oom_launch, &c);
    oom_loop("cuGraphKernelNodeSetParams", oom_set_params, &c);
    sd_close(&d.s); /* frees the graph, the executable, the stream */
    cr_assert_eq(atomic_load(&g_live), 0, "%ld allocation(s) outlived the device", atomic_load(&g_live));
    cr_assert_eq(ds_replace_allocator(malloc, realloc, calloc, free), DS_SUCCESS, "%s",
                 ds_last_error_message());
}
