// Device code of the colocate example (docs/benchmarks.md, W1), compiled by nvcc into
// a fatbin, embedded with tools/embed-fatbin.py and loaded with cuModuleLoadData
// in the device's primary context (workload_cuda.c). Launched through ds_launch.
// bench/pairs builds the same file into its own fatbin.
//
// Every reduction has a fixed order (bench/common/kernels.cuh): the output
// bits never depend on the pCtx or on co-tenants (docs/design.md, invariant 1).
#include <cuda_bf16.h>
#include <stdint.h>

#include "../common/kernels.cuh"

#define MAX_THREADS 1024

// ---------------------------------------------------------------------------
// initialisation: random, non-zero data (bench/common/kernels.cuh)

extern "C" __global__ void colo_fill_bf16(__nv_bfloat16 *p, unsigned long long n, unsigned long long seed,
                                          float scale)
{
    ex::fill(p, n, [=](unsigned long long i) { return __float2bfloat16_rn(ex::value(seed, i, scale)); });
}

// p[i] = offset + scale * u, u in (-1, 1): non-zero when offset == 0 or
// |scale| < |offset|.
extern "C" __global__ void colo_fill_f32(float *p, unsigned long long n, unsigned long long seed, float scale,
                                         float offset)
{
    ex::fill(p, n, [=](unsigned long long i) { return offset + ex::value(seed, i, scale); });
}

// ---------------------------------------------------------------------------
// latency-sensitive tenant: one block per row of the batch

// y = x / rms(x) * gamma over rows of `hidden` bf16 values, accumulated in fp32.
extern "C" __global__ void __launch_bounds__(MAX_THREADS)
colo_rmsnorm(const __nv_bfloat16 *x, const __nv_bfloat16 *gamma, __nv_bfloat16 *y, int hidden, float eps)
{
    __shared__ float red[MAX_THREADS];
    const __nv_bfloat16 *row = x + (size_t)blockIdx.x * hidden;
    __nv_bfloat16 *out = y + (size_t)blockIdx.x * hidden;
    float s = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float v = __bfloat162float(row[i]);
        s += v * v;
    }
    const float inv = rsqrtf(ex::block_sum(s, red) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out[i] = __float2bfloat16(__bfloat162float(row[i]) * inv * __bfloat162float(gamma[i]));
}

// probs = softmax(logits) per row of `vocab` fp32 values.
extern "C" __global__ void __launch_bounds__(MAX_THREADS)
colo_softmax(const float *logits, float *probs, int vocab)
{
    ex::softmax_rows<MAX_THREADS>(logits, probs, vocab);
}

// token[row] = index of the largest value of the row; ties go to the lowest
// index, so the answer is unique.
extern "C" __global__ void __launch_bounds__(MAX_THREADS)
colo_argmax(const float *probs, int *token, int vocab)
{
    ex::argmax_rows<MAX_THREADS>(probs, token, vocab);
}

// ---------------------------------------------------------------------------
// best-effort tenant: optimizer-like elementwise and reduction kernels

// AdamW over n parameters; bc1 = 1 - beta1^t and bc2 = 1 - beta2^t come from
// the host (bias correction of step t). Vectorized as PyTorch's fused
// optimizers are (16-byte loads, so each thread keeps 64 bytes in flight): a
// memory-bound kernel written this way reaches the memory bandwidth with a
// fraction of the SMs, which is what lets a memory-bound tenant share the
// GPU with a compute-bound one (docs/benchmarks.md, W2). Buffers must be 16-byte aligned
// (cuMemAlloc gives 256); the n % 4 tail is done with scalar accesses.
__device__ __forceinline__ void adamw_one(float &p, float &m, float &v, float g, float lr, float beta1, float beta2,
                                          float eps, float weight_decay, float bc1, float bc2)
{
    m = beta1 * m + (1.f - beta1) * g;
    v = beta2 * v + (1.f - beta2) * g * g;
    p -= lr * ((m / bc1) / (sqrtf(v / bc2) + eps) + weight_decay * p);
}

extern "C" __global__ void colo_adamw(float *p, float *m, float *v, const float *g, unsigned long long n, float lr,
                                      float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2)
{
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long nv = n / 4;
    float4 *p4 = reinterpret_cast<float4 *>(p), *m4 = reinterpret_cast<float4 *>(m);
    float4 *v4 = reinterpret_cast<float4 *>(v);
    const float4 *g4 = reinterpret_cast<const float4 *>(g);
    for (unsigned long long i = tid; i < nv; i += step) {
        const float4 gi = g4[i];
        float4 mi = m4[i], vi = v4[i], pi = p4[i];
        adamw_one(pi.x, mi.x, vi.x, gi.x, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        adamw_one(pi.y, mi.y, vi.y, gi.y, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        adamw_one(pi.z, mi.z, vi.z, gi.z, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        adamw_one(pi.w, mi.w, vi.w, gi.w, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
        m4[i] = mi;
        v4[i] = vi;
        p4[i] = pi;
    }
    const unsigned long long t = nv * 4 + tid;
    if (t < n)
        adamw_one(p[t], m[t], v[t], g[t], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}

// partial[block] = sum of x[i]^2 over the block's fixed strided slice:
// thread t sums its float4s i = t, t + step, ... four at a time (four
// independent 16-byte loads in flight), in a fixed order, then the n % 4
// tail element of global thread t (if any), then the block tree.
__device__ __forceinline__ float sq4(float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }

extern "C" __global__ void __launch_bounds__(MAX_THREADS)
colo_sumsq_partial(const float *x, unsigned long long n, float *partial)
{
    __shared__ float red[MAX_THREADS];
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long nv = n / 4;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float s = 0.f;
    unsigned long long i = tid;
    for (; i + 3 * step < nv; i += 4 * step) {
        const float4 a = x4[i], b = x4[i + step], c = x4[i + 2 * step], d = x4[i + 3 * step];
        s += sq4(a);
        s += sq4(b);
        s += sq4(c);
        s += sq4(d);
    }
    for (; i < nv; i += step)
        s += sq4(x4[i]);
    const unsigned long long t = nv * 4 + tid;
    if (t < n)
        s += x[t] * x[t];
    s = ex::block_sum(s, red);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

// out[0] = sum of partial[0..count), one block.
extern "C" __global__ void __launch_bounds__(MAX_THREADS)
colo_sumsq_final(const float *partial, unsigned int count, float *out)
{
    __shared__ float red[MAX_THREADS];
    float s = 0.f;
    for (unsigned int i = threadIdx.x; i < count; i += blockDim.x)
        s += partial[i];
    s = ex::block_sum(s, red);
    if (threadIdx.x == 0)
        out[0] = s;
}

// ---------------------------------------------------------------------------
// best-effort tenant, --be persistent: blocks that keep their SM for milliseconds

// A persistent tiled kernel, as Triton's persistent matmul tutorial lays one
// out: the grid is fixed (the whole device's SMs x the blocks that fit on
// one, workload_cuda.c, never the SMs of the pCtx it runs on) and each block
// loops over tiles tile = blockIdx.x, + gridDim.x, ... < num_tiles. A tile is
// COLO_PERSIST_THREADS (256, workload.h) values of `in`; each thread runs
// `iters` steps of eight independent fp32 FMA chains on its value (compute
// bound: the eight chains keep the FMA pipes busy at any occupancy) and
// writes their sum to `out`. Each output element is written by one thread in
// a fixed order, and depends on `in` and `iters` alone: the same bits on any
// pCtx, beside any co-tenant, and after every launch (a launch overwrites
// what the previous one wrote with the same values).
extern "C" __global__ void __launch_bounds__(256)
colo_persistent(const float *in, float *out, unsigned int num_tiles, unsigned int iters)
{
    for (unsigned int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const size_t i = (size_t)tile * blockDim.x + threadIdx.x;
        const float x = in[i];
        const float d = 1e-3f * x;
        float a0 = x, a1 = 0.5f * x, a2 = 0.25f * x, a3 = -x, a4 = 1.f + x, a5 = 1.f - x, a6 = 2.f * x,
              a7 = -0.5f * x;
        for (unsigned int k = 0; k < iters; k++) {
            a0 = fmaf(a0, 0.9990f, d);
            a1 = fmaf(a1, 0.9991f, d);
            a2 = fmaf(a2, 0.9992f, d);
            a3 = fmaf(a3, 0.9993f, d);
            a4 = fmaf(a4, 0.9994f, d);
            a5 = fmaf(a5, 0.9995f, d);
            a6 = fmaf(a6, 0.9996f, d);
            a7 = fmaf(a7, 0.9997f, d);
        }
        out[i] = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    }
}
