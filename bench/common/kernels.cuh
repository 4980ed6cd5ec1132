// Device code shared by the examples' kernels.cu files (colocate, whose
// kernels pairs also builds, and determinism): the hash that fills buffers,
// fixed-order block reductions, and the bodies of the fill, softmax and argmax
// kernels. Each kernels.cu keeps its own extern "C" __global__ entry points
// (the names the host code looks up with cuModuleGetFunction) as one-line
// wrappers around these bodies, so no kernel body is written twice.
//
// Every reduction has a fixed order: each thread walks a fixed strided slice
// in ascending order, then a shared-memory tree pairs thread t with
// t + stride. The order depends only on the launch configuration, which the
// host fixes (it never derives a grid from the SMs free at launch), so the
// output bits never depend on the pCtx or on co-tenants (docs/design.md,
// invariant 1).
#ifndef EXAMPLES_COMMON_KERNELS_CUH
#define EXAMPLES_COMMON_KERNELS_CUH

#include <stdint.h>

namespace ex {

// ---------------------------------------------------------------------------
// values: random, non-zero data (zeros would let hardware and libraries take
// shortcuts that real weights never allow)

// splitmix64 finaliser: a stateless hash, so buffers are filled in parallel
// with values that depend only on (seed, index).
__device__ __forceinline__ uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Uniform in (-1, 1) and never 0: (2k + 1) / 2^23 - 1 for k < 2^23 has an odd
// numerator over 2^23, exact in float.
__device__ __forceinline__ float unit_nonzero(uint64_t h)
{
    return ((float)(h >> 41) + 0.5f) * (2.0f / 8388608.0f) - 1.0f;
}

// Element i of the buffer filled from seed: scale * u, u in (-1, 1), u != 0.
__device__ __forceinline__ float value(unsigned long long seed, unsigned long long i, float scale)
{
    return scale * unit_nonzero(mix64(seed ^ mix64(i)));
}

// Grid-stride fill: p[i] = value_of(i) for i < n, each thread taking
// i = its global index, then steps of the whole grid. value_of is a device
// lambda, e.g. [=](unsigned long long i) { return ex::value(seed, i, scale); }.
template <typename T, typename ValueOf>
__device__ __forceinline__ void fill(T *p, unsigned long long n, ValueOf value_of)
{
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        p[i] = value_of(i);
}

// ---------------------------------------------------------------------------
// block reductions: blockDim.x a power of two, red[] holds blockDim.x floats;
// every thread gets the result

__device__ float block_sum(float v, float *red)
{
    const unsigned t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride)
            red[t] += red[t + stride];
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads(); // red may be reused right after
    return total;
}

__device__ float block_max(float v, float *red)
{
    const unsigned t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride)
            red[t] = fmaxf(red[t], red[t + stride]);
        __syncthreads();
    }
    const float m = red[0];
    __syncthreads();
    return m;
}

// ---------------------------------------------------------------------------
// per-row kernels: one block of THREADS (a power of two, the block size the
// host launches with) per row

// probs = softmax(logits) per row of `vocab` fp32 values. The sum of the
// exponentials is accumulated with __fadd_rn, so the compiler cannot fuse it
// with the exponential's last multiply: the same bits whatever it inlines.
template <unsigned THREADS>
__device__ __forceinline__ void softmax_rows(const float *logits, float *probs, int vocab)
{
    __shared__ float red[THREADS];
    const float *row = logits + (size_t)blockIdx.x * vocab;
    float *out = probs + (size_t)blockIdx.x * vocab;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        m = fmaxf(m, row[i]);
    m = block_max(m, red);
    float s = 0.f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        s = __fadd_rn(s, expf(row[i] - m));
    const float inv = 1.0f / block_sum(s, red);
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        out[i] = expf(row[i] - m) * inv;
}

// token[row] = index of the largest value of the row; ties go to the lowest
// index, so the answer is unique.
template <unsigned THREADS>
__device__ __forceinline__ void argmax_rows(const float *probs, int *token, int vocab)
{
    __shared__ float best_v[THREADS];
    __shared__ int best_i[THREADS];
    const float *row = probs + (size_t)blockIdx.x * vocab;
    const unsigned t = threadIdx.x;
    float bv = -INFINITY;
    int bi = vocab;
    for (int i = t; i < vocab; i += blockDim.x)
        if (row[i] > bv) { // ascending i: strict > keeps the lowest index
            bv = row[i];
            bi = i;
        }
    best_v[t] = bv;
    best_i[t] = bi;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            const float ov = best_v[t + stride];
            const int oi = best_i[t + stride];
            if (ov > best_v[t] || (ov == best_v[t] && oi < best_i[t])) {
                best_v[t] = ov;
                best_i[t] = oi;
            }
        }
        __syncthreads();
    }
    if (t == 0)
        token[blockIdx.x] = best_i[0];
}

} // namespace ex

#endif // EXAMPLES_COMMON_KERNELS_CUH
