// graphprobe: can kernel nodes of a graph the application captured be
// re-bound to another (green) context? Prints one JSON line per case.
//
// The driver documents CUDA_KERNEL_NODE_PARAMS_v2.ctx as honoured only when
// the node names a CUkernel in `kern` with `func` NULL (cuda.h, CUDA 13.0).
// For kernels launched three ways (cudart <<<>>>, a cuLibrary CUkernel through
// cuLaunchKernel, a cuModule CUfunction) and for a cuBLAS GEMM, the probe
// captures a graph on a primary-context stream, prints what the kernel nodes
// hold (func, kern, ctx), then tries to re-bind a clone of the template to a
// 16-SM green context (func NULL, kern kept, ctx set) and counts the SMs the
// instantiation touches (a %smid-recording kernel) or times it (cuBLAS: 16
// SMs are several times slower than 132).
//
// Build: nvcc -O2 -arch=sm_90 graphprobe.cu -lcuda -lcublas -o graphprobe
// Run:   ./graphprobe   (one JSON line per case; results in
//        docs/results/h200/graphs/graphprobe.json)
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        CUresult r_ = (x);                                                                     \
        if (r_ != CUDA_SUCCESS) {                                                              \
            const char *n_ = "?";                                                              \
            cuGetErrorName(r_, &n_);                                                           \
            printf("{\"fatal\":\"%s -> %s\",\"line\":%d}\n", #x, n_, __LINE__);                 \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static const char *en(CUresult r)
{
    const char *n = "?";
    cuGetErrorName(r, &n);
    return n;
}

__global__ void smid_kernel(unsigned *seen)
{
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    if (threadIdx.x == 0)
        seen[s] = 1;
    // long enough that blocks spread over every SM the context has
    long long t0 = clock64();
    while (clock64() - t0 < 20000) {
    }
}

static const char *k_ptx = R"PTX(
.version 8.0
.target sm_90
.address_size 64
.visible .entry smid_ptx(.param .u64 seen)
{
  .reg .u32 %r<4>; .reg .u64 %rd<4>; .reg .pred %p<2>; .reg .u64 %t<4>;
  ld.param.u64 %rd1, [seen];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %smid;
  mov.u32 %r2, %tid.x;
  setp.ne.u32 %p1, %r2, 0;
  @%p1 bra WAIT;
  mul.wide.u32 %rd2, %r1, 4;
  add.u64 %rd3, %rd1, %rd2;
  mov.u32 %r3, 1;
  st.global.u32 [%rd3], %r3;
WAIT:
  mov.u64 %t1, %clock64;
LOOP:
  mov.u64 %t2, %clock64;
  sub.u64 %t3, %t2, %t1;
  setp.lt.u64 %p1, %t3, 20000;
  @%p1 bra LOOP;
  ret;
}
)PTX";

static CUcontext g_primary, g_green16;
static CUstream g_pstream, g_gstream16, g_gstream_rest;
static unsigned *g_seen;
static int g_num_sm;

static int count_seen(void)
{
    unsigned h[1024];
    cuMemcpyDtoH(h, (CUdeviceptr)g_seen, sizeof(unsigned) * g_num_sm);
    int n = 0;
    for (int i = 0; i < g_num_sm; i++)
        n += h[i] != 0;
    return n;
}

static int run_exec_sms(CUgraphExec ex, CUstream s)
{
    cuMemsetD32((CUdeviceptr)g_seen, 0, 1024);
    CK(cuCtxSynchronize());
    CUresult r = cuGraphLaunch(ex, s);
    if (r != CUDA_SUCCESS)
        return -(int)r;
    CK(cuStreamSynchronize(s));
    return count_seen();
}

typedef void (*capture_fn)(CUstream s);

static void cap_cudart(CUstream s) { smid_kernel<<<2048, 128, 0, (cudaStream_t)s>>>(g_seen); }

static CUkernel g_kern;
static CUfunction g_modfunc;
static void cap_library(CUstream s)
{
    void *args[] = {&g_seen};
    CK(cuLaunchKernel((CUfunction)g_kern, 2048, 1, 1, 128, 1, 1, 0, s, args, NULL));
}
static void cap_module(CUstream s)
{
    void *args[] = {&g_seen};
    CK(cuLaunchKernel(g_modfunc, 2048, 1, 1, 128, 1, 1, 0, s, args, NULL));
}

static CUgraph capture(capture_fn fn, CUstream s)
{
    CUgraph g;
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    fn(s);
    CK(cuStreamEndCapture(s, &g));
    return g;
}

static void describe(const char *name, CUgraph g)
{
    size_t n = 0;
    CK(cuGraphGetNodes(g, NULL, &n));
    CUgraphNode nodes[64];
    if (n > 64)
        n = 64;
    CK(cuGraphGetNodes(g, nodes, &n));
    int kn = 0, with_kern = 0, with_func = 0, ctx_primary = 0, ctx_green = 0, ctx_other = 0;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CK(cuGraphNodeGetType(nodes[i], &t));
        if (t != CU_GRAPH_NODE_TYPE_KERNEL)
            continue;
        CUDA_KERNEL_NODE_PARAMS p;
        CK(cuGraphKernelNodeGetParams(nodes[i], &p));
        kn++;
        with_kern += p.kern != NULL;
        with_func += p.func != NULL;
        if (p.ctx == g_primary)
            ctx_primary++;
        else if (p.ctx == g_green16)
            ctx_green++;
        else
            ctx_other++;
    }
    printf("{\"probe\":\"describe\",\"case\":\"%s\",\"nodes\":%zu,\"kernel_nodes\":%d,\"with_kern\":%d,"
           "\"with_func\":%d,\"ctx_primary\":%d,\"ctx_green16\":%d,\"ctx_other\":%d}\n",
           name, n, kn, with_kern, with_func, ctx_primary, ctx_green, ctx_other);
}

/* Re-binds every kernel node of a clone of g to ctx; mode 0: func NULL + kern
 * + ctx; mode 1: func kept + ctx (the documented-ignored way). Returns the
 * instantiation or NULL, with the first failing status in *why. */
static CUgraphExec rebind(CUgraph g, CUcontext ctx, int mode, CUresult *why, int *nk, int *nokern)
{
    CUgraph c;
    *why = cuGraphClone(&c, g);
    if (*why)
        return NULL;
    size_t n = 0;
    cuGraphGetNodes(c, NULL, &n);
    CUgraphNode nodes[64];
    if (n > 64)
        n = 64;
    cuGraphGetNodes(c, nodes, &n);
    *nk = *nokern = 0;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        cuGraphNodeGetType(nodes[i], &t);
        if (t != CU_GRAPH_NODE_TYPE_KERNEL)
            continue;
        CUDA_KERNEL_NODE_PARAMS p;
        cuGraphKernelNodeGetParams(nodes[i], &p);
        (*nk)++;
        if (mode == 0) {
            if (!p.kern) {
                (*nokern)++;
                continue;
            }
            p.func = NULL;
        }
        p.ctx = ctx;
        *why = cuGraphKernelNodeSetParams(nodes[i], &p);
        if (*why)
            return NULL;
    }
    CUgraphExec ex = NULL;
    *why = cuGraphInstantiate(&ex, c, 0);
    return *why ? NULL : ex;
}

static void smid_case(const char *name, capture_fn fn)
{
    CUgraph g = capture(fn, g_pstream);
    describe(name, g);
    CUgraphExec orig;
    CK(cuGraphInstantiate(&orig, g, 0));
    int base = run_exec_sms(orig, g_pstream);
    for (int mode = 0; mode < 2; mode++) {
        CUresult why;
        int nk, nokern;
        CUgraphExec ex = rebind(g, g_green16, mode, &why, &nk, &nokern);
        int on_p = ex ? run_exec_sms(ex, g_pstream) : -1;
        int on_rest = ex ? run_exec_sms(ex, g_gstream_rest) : -1;
        printf("{\"probe\":\"rebind\",\"case\":\"%s\",\"how\":\"%s\",\"status\":\"%s\",\"kernel_nodes\":%d,"
               "\"nodes_without_kern\":%d,\"sms_before\":%d,\"sms_on_primary_stream\":%d,"
               "\"sms_on_116sm_stream\":%d,\"goal_sms\":16}\n",
               name, mode == 0 ? "func NULL, kern, ctx" : "func kept, ctx", en(why), nk, nokern, base, on_p, on_rest);
        if (ex)
            cuGraphExecDestroy(ex);
    }
    /* the exec-level path: cuGraphExecKernelNodeSetParams with kern + ctx */
    {
        size_t n = 8;
        CUgraphNode nodes[8];
        cuGraphGetNodes(g, nodes, &n);
        CUresult why = CUDA_ERROR_NOT_FOUND;
        for (size_t i = 0; i < n; i++) {
            CUgraphNodeType t;
            cuGraphNodeGetType(nodes[i], &t);
            if (t != CU_GRAPH_NODE_TYPE_KERNEL)
                continue;
            CUDA_KERNEL_NODE_PARAMS p;
            cuGraphKernelNodeGetParams(nodes[i], &p);
            if (p.kern)
                p.func = NULL;
            p.ctx = g_green16;
            why = cuGraphExecKernelNodeSetParams(orig, nodes[i], &p);
        }
        int sms = why == CUDA_SUCCESS ? run_exec_sms(orig, g_pstream) : -1;
        printf("{\"probe\":\"exec_rebind\",\"case\":\"%s\",\"status\":\"%s\",\"sms\":%d,\"goal_sms\":16}\n", name,
               en(why), sms);
    }
    cuGraphExecDestroy(orig);
    cuGraphDestroy(g);
}

/* cuBLAS: captured on the primary stream, re-bound, timed. */
static cublasHandle_t g_blas;
static __nv_bfloat16 *g_a, *g_b, *g_c;
static const int N = 4096;
static void cap_gemm(CUstream s)
{
    float one = 1, zero = 0;
    cublasSetStream(g_blas, (cudaStream_t)s);
    cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, g_a, CUDA_R_16BF, N, g_b, CUDA_R_16BF, N, &zero,
                 g_c, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static float time_exec(CUgraphExec ex, CUstream s)
{
    CUevent a, b;
    cuEventCreate(&a, 0);
    cuEventCreate(&b, 0);
    for (int i = 0; i < 3; i++)
        cuGraphLaunch(ex, s);
    cuEventRecord(a, s);
    for (int i = 0; i < 10; i++)
        cuGraphLaunch(ex, s);
    cuEventRecord(b, s);
    cuEventSynchronize(b);
    float ms = 0;
    cuEventElapsedTime(&ms, a, b);
    cuEventDestroy(a);
    cuEventDestroy(b);
    return ms / 10;
}

static void gemm_case(void)
{
    CK(cuCtxSetCurrent(g_primary));
    cublasCreate(&g_blas);
    cudaMalloc(&g_a, (size_t)N * N * 2);
    cudaMalloc(&g_b, (size_t)N * N * 2);
    cudaMalloc(&g_c, (size_t)N * N * 2);
    cudaMemset(g_a, 0x3c, (size_t)N * N * 2);
    cudaMemset(g_b, 0x3c, (size_t)N * N * 2);
    cap_gemm(g_pstream); /* warm: workspace, kernel selection */
    cuStreamSynchronize(g_pstream);
    CUgraph g = capture(cap_gemm, g_pstream);
    describe("cublas_gemm", g);
    CUgraphExec orig;
    CK(cuGraphInstantiate(&orig, g, 0));
    float t_orig = time_exec(orig, g_pstream);
    /* the same GEMM captured on the 16-SM green stream: the reference time */
    CK(cuCtxSetCurrent(g_green16));
    CUgraph g16 = capture(cap_gemm, g_gstream16);
    describe("cublas_gemm_on_green16", g16);
    CUgraphExec ex16;
    CK(cuGraphInstantiate(&ex16, g16, 0));
    float t16 = time_exec(ex16, g_gstream16);
    CK(cuCtxSetCurrent(g_primary));
    for (int mode = 0; mode < 2; mode++) {
        CUresult why;
        int nk, nokern;
        CUgraphExec ex = rebind(g, g_green16, mode, &why, &nk, &nokern);
        float t = ex ? time_exec(ex, g_pstream) : -1;
        printf("{\"probe\":\"rebind\",\"case\":\"cublas_gemm\",\"how\":\"%s\",\"status\":\"%s\",\"kernel_nodes\":%d,"
               "\"nodes_without_kern\":%d,\"ms_132sm\":%.3f,\"ms_captured_on_16sm\":%.3f,\"ms_rebound\":%.3f}\n",
               mode == 0 ? "func NULL, kern, ctx" : "func kept, ctx", en(why), nk, nokern, t_orig, t16, t);
        if (ex)
            cuGraphExecDestroy(ex);
    }
}

int main(void)
{
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&g_primary, dev));
    CK(cuCtxSetCurrent(g_primary));
    cudaSetDevice(0);
    cudaFree(0);
    CK(cuDeviceGetAttribute(&g_num_sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CK(cuStreamCreate(&g_pstream, CU_STREAM_NON_BLOCKING));

    CUdevResource all, part[1], rest;
    CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    unsigned nb = 1;
    CK(cuDevSmResourceSplitByCount(part, &nb, &all, &rest, 0, 16));
    CUdevResourceDesc d16, drest;
    CK(cuDevResourceGenerateDesc(&d16, part, 1));
    CK(cuDevResourceGenerateDesc(&drest, &rest, 1));
    CUgreenCtx gc16, gcrest;
    CK(cuGreenCtxCreate(&gc16, d16, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CK(cuGreenCtxCreate(&gcrest, drest, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CK(cuCtxFromGreenCtx(&g_green16, gc16));
    CK(cuGreenCtxStreamCreate(&g_gstream16, gc16, CU_STREAM_NON_BLOCKING, 0));
    CK(cuGreenCtxStreamCreate(&g_gstream_rest, gcrest, CU_STREAM_NON_BLOCKING, 0));
    CK(cuMemAlloc((CUdeviceptr *)&g_seen, 4096));

    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, k_ptx, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernel(&g_kern, lib, "smid_ptx"));
    CUmodule mod;
    CK(cuModuleLoadData(&mod, k_ptx));
    CK(cuModuleGetFunction(&g_modfunc, mod, "smid_ptx"));

    smid_case("cudart_launch", cap_cudart);
    smid_case("culibrary_kernel", cap_library);
    smid_case("cumodule_function", cap_module);
    gemm_case();
    return 0;
}
