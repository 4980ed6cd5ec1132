// Device code of the serve benchmark's CUDA engine (engine_cuda.c; docs/benchmarks.md,
// W5): a Llama-3-8B-shaped decoder's own kernels, compiled by nvcc into a
// fatbin, embedded with tools/embed-fatbin.py and loaded with cuModuleLoadData
// in the device's primary context. The GEMMs are cuBLAS's; everything else is
// here and goes through ds_launch (or is captured into the decode graphs).
//
// Layouts (bf16 unless said otherwise, row-major):
//   activations   x[token][4096]; qkv[token][6144] = q (32 heads x 128) | k (8 x 128) | v (8 x 128);
//                 gate_up[token][2 * 14336] = gate | up
//   KV cache      k, v: [slot][kv head][position][128] for one layer (the host
//                 passes the layer's base); max_ctx positions per slot
//   prefill tiles int4 {first token in the chunk, rows (<= 64), position of
//                 the first row, slot}: 64 consecutive query tokens of one
//                 segment, built by the host
//
// Determinism: every launch configuration is a constant of the shapes (rows,
// bucket, tiles), never of the SMs a pCtx has; every reduction has a fixed
// order (bench/common/kernels.cuh), and no kernel uses atomics. The output
// bits therefore never depend on where the vCtx runs (docs/design.md,
// invariant 1).
#include <cuda_bf16.h>
#include <stdint.h>

#include "../common/kernels.cuh"

#define HIDDEN 4096
#define HEADS 32
#define KV_HEADS 8
#define HEAD_DIM 128
#define QKV_DIM ((HEADS + 2 * KV_HEADS) * HEAD_DIM) // 6144
#define MLP 14336
#define GQA (HEADS / KV_HEADS)                       // query heads per KV head

// Softmax scale 1/sqrt(128), times log2(e): the attention kernels work with
// exp2 of scores in base-2 units.
#define SCORE_SCALE_LOG2 (0.08838834764831845f * 1.4426950408889634f)

// Decode attention: splits per (request, KV head) (flash-decoding). Shared
// with engine_cuda.c, which sizes the partial buffers (SERVE_DECODE_SPLITS).
#define DECODE_SPLITS 16
#define DECODE_THREADS 128
#define DECODE_UNROLL 4 // positions per group and step: 8 x 16 B in flight per thread

typedef __nv_bfloat16 bf16;

// 8 bf16 <-> fp32 through one 16-byte vector.
__device__ __forceinline__ void unpack8(uint4 v, float *f)
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 p = __bfloat1622float2(h[i]);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}

__device__ __forceinline__ uint4 pack8(const float *f)
{
    uint4 v;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++)
        h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
}

// ---------------------------------------------------------------------------
// initialisation and staging

// p[i] = offset + scale * u, u in (-1, 1) from (seed, i) (bench/common/kernels.cuh).
extern "C" __global__ void serve_fill_bf16(bf16 *p, unsigned long long n, unsigned long long seed, float scale,
                                           float offset)
{
    ex::fill(p, n, [=](unsigned long long i) { return __float2bfloat16_rn(offset + ex::value(seed, i, scale)); });
}

// dst[i] = src[i] for i < n: a step's inputs from pinned host memory mapped
// into the device (src) to device memory, once, before the kernels that read
// them many times. Grid-stride, any grid.
extern "C" __global__ void serve_stage_i32(int *dst, const volatile int *src, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// ---------------------------------------------------------------------------
// embedding, RMSNorm, SwiGLU, argmax

// x[t] = table[tokens[t]]; grid = tokens, 128 threads (4 x 16 B each).
extern "C" __global__ void __launch_bounds__(128) serve_embed(const bf16 *table, const int *tokens, bf16 *x)
{
    const int t = blockIdx.x;
    int id = tokens[t];
    id = id < 0 ? 0 : id; // the host checks ids; never read outside the table
    const uint4 *src = reinterpret_cast<const uint4 *>(table + (size_t)id * HIDDEN);
    uint4 *dst = reinterpret_cast<uint4 *>(x + (size_t)t * HIDDEN);
#pragma unroll
    for (int i = 0; i < HIDDEN / 8 / 128; i++)
        dst[threadIdx.x + i * 128] = src[threadIdx.x + i * 128];
}

#define NORM_THREADS 512 // x 8 values = 4096

// y[r] = x[row] / rms(x[row]) * gamma, row = rows ? rows[r] : r (gather the
// rows the LM head needs); grid = output rows, NORM_THREADS threads, fp32
// with a fixed-order sum of squares.
extern "C" __global__ void __launch_bounds__(NORM_THREADS)
serve_rmsnorm(const bf16 *x, const int *rows, const bf16 *gamma, bf16 *y, float eps)
{
    __shared__ float red[NORM_THREADS];
    const int r = blockIdx.x;
    const int src_row = rows ? rows[r] : r;
    float v[8], g[8];
    unpack8(reinterpret_cast<const uint4 *>(x + (size_t)src_row * HIDDEN)[threadIdx.x], v);
    unpack8(reinterpret_cast<const uint4 *>(gamma)[threadIdx.x], g);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++)
        s += v[i] * v[i];
    const float inv = rsqrtf(ex::block_sum(s, red) / (float)HIDDEN + eps);
#pragma unroll
    for (int i = 0; i < 8; i++)
        v[i] = v[i] * inv * g[i];
    reinterpret_cast<uint4 *>(y + (size_t)r * HIDDEN)[threadIdx.x] = pack8(v);
}

// act[t][j] = silu(gate[t][j]) * up[t][j] in fp32; grid (MLP / 8 / 256 = 7,
// tokens), 256 threads, 8 values each.
extern "C" __global__ void __launch_bounds__(256) serve_swiglu(const bf16 *gate_up, bf16 *act)
{
    const int t = blockIdx.y;
    const int j = blockIdx.x * 256 + threadIdx.x; // 16-byte vector within the row
    const uint4 *row = reinterpret_cast<const uint4 *>(gate_up + (size_t)t * 2 * MLP);
    float g[8], u[8];
    unpack8(row[j], g);
    unpack8(row[MLP / 8 + j], u);
#pragma unroll
    for (int i = 0; i < 8; i++)
        g[i] = g[i] / (1.f + expf(-g[i])) * u[i];
    reinterpret_cast<uint4 *>(act + (size_t)t * MLP)[j] = pack8(g);
}

#define ARGMAX_THREADS 1024

// token[row] = index of the row's largest logit (fp32), ties to the lowest
// index; grid = rows, ARGMAX_THREADS threads. `token` may be pinned host
// memory mapped into the device: the step's output lands there directly.
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS) serve_argmax(const float *logits, int *token, int vocab)
{
    ex::argmax_rows<ARGMAX_THREADS>(logits, token, vocab);
}

// ---------------------------------------------------------------------------
// RoPE and the KV-cache write

// For token t (slot tok_slot[t], position tok_pos[t]): rotates its 32 query
// heads in place in qkv and its 8 key heads (Llama rotate-half: pairs (i,
// i + 64), frequency theta^(-2i/128)), and writes the rotated keys and the
// values into the cache at (slot, head, position). Grid = tokens, 128
// threads: thread i always handles pair i % 64, so computes one sin/cos.
extern "C" __global__ void __launch_bounds__(128)
serve_rope_kv(bf16 *qkv, const int *tok_slot, const int *tok_pos, bf16 *kc, bf16 *vc, int max_ctx, float theta)
{
    const int t = blockIdx.x;
    const int slot = tok_slot[t], pos = tok_pos[t];
    bf16 *row = qkv + (size_t)t * QKV_DIM;
    const int i = threadIdx.x & 63;
    const float inv_freq = powf(theta, -(float)(2 * i) / (float)HEAD_DIM);
    float sn, cs;
    sincosf((float)pos * inv_freq, &sn, &cs);
    // heads 0..31 are q, 32..39 k; this thread takes heads threadIdx.x / 64 + 2n
    for (int head = threadIdx.x >> 6; head < HEADS + KV_HEADS; head += 2) {
        bf16 *h = row + head * HEAD_DIM;
        const float x1 = __bfloat162float(h[i]), x2 = __bfloat162float(h[i + 64]);
        const bf16 r1 = __float2bfloat16_rn(x1 * cs - x2 * sn);
        const bf16 r2 = __float2bfloat16_rn(x2 * cs + x1 * sn);
        if (head < HEADS) {
            h[i] = r1;
            h[i + 64] = r2;
        } else {
            bf16 *k = kc + (((size_t)slot * KV_HEADS + (head - HEADS)) * max_ctx + pos) * HEAD_DIM;
            k[i] = r1;
            k[i + 64] = r2;
        }
    }
    // values: 8 heads x 128 = 128 vectors of 16 bytes, one per thread
    const int vh = threadIdx.x >> 4, c = threadIdx.x & 15;
    const uint4 val = reinterpret_cast<const uint4 *>(row + (HEADS + KV_HEADS) * HEAD_DIM + vh * HEAD_DIM)[c];
    reinterpret_cast<uint4 *>(vc + (((size_t)slot * KV_HEADS + vh) * max_ctx + pos) * HEAD_DIM)[c] = val;
}

// ---------------------------------------------------------------------------
// prefill attention: flash-attention 2 on tensor cores (mma.sync m16n8k16
// bf16, fp32 accumulation), online softmax in fp32.
//
// Block = one tile of 64 query tokens of one segment x one query head; 4 warps,
// 16 query rows each. Keys come in tiles of 64 from the KV cache of the
// tile's slot (positions [0, pos0 + rows): earlier chunks' and this chunk's,
// the latter written by serve_rope_kv just before), K and V double-staged with
// cp.async so that V's load overlaps Q.K^T and the next K's load overlaps P.V.
// Shared memory: Q, K, V tiles of 64 x 128 bf16 (48 KiB, static), rows
// swizzled (16-byte chunk c of row r at chunk c ^ (r % 8)) so ldmatrix is
// free of bank conflicts.

#define PA_ROWS 64
#define PA_KEYS 64

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// Element offset of 16-byte chunk c (0..15) of row r in a swizzled 64 x 128 tile.
__device__ __forceinline__ int swz(int r, int c) { return r * HEAD_DIM + ((c ^ (r & 7)) << 3); }

// 16 bytes global -> shared; zero-filled when !valid (nothing is read then).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

// d += a (16 x 16, row-major fragment) . b (16 x 8, column-major fragment).
__device__ __forceinline__ void mma_bf16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

// Stages key/value rows [k0, k0 + 64) of one (slot, KV head) into a swizzled
// tile; rows at or past `len` are zeros (never read).
__device__ __forceinline__ void load_kv_tile(bf16 *tile, const bf16 *head, int k0, int len)
{
    for (int i = threadIdx.x; i < PA_KEYS * 16; i += 128) {
        const int r = i >> 4, c = i & 15;
        const bool valid = k0 + r < len;
        const bf16 *src = valid ? head + (size_t)(k0 + r) * HEAD_DIM + c * 8 : head;
        cp_async16(tile + swz(r, c), src, valid);
    }
}

// out[token][h * 128 + d] for the tile's valid rows; grid (tiles, 32 heads),
// 128 threads. kc/vc: the layer's cache.
extern "C" __global__ void __launch_bounds__(128)
serve_prefill_attention(const bf16 *qkv, const int4 *tiles, const bf16 *kc, const bf16 *vc, bf16 *out, int max_ctx)
{
    __shared__ __align__(128) bf16 sQ[PA_ROWS * HEAD_DIM];
    __shared__ __align__(128) bf16 sK[PA_KEYS * HEAD_DIM];
    __shared__ __align__(128) bf16 sV[PA_KEYS * HEAD_DIM];

    const int4 tile = tiles[blockIdx.x];
    const int tok0 = tile.x, rows = tile.y, pos0 = tile.z, slot = tile.w;
    const int h = blockIdx.y, kvh = h / GQA;
    const int len = pos0 + rows; // keys [0, len)
    const int ntiles = (len + PA_KEYS - 1) / PA_KEYS;
    const bf16 *khead = kc + ((size_t)slot * KV_HEADS + kvh) * max_ctx * HEAD_DIM;
    const bf16 *vhead = vc + ((size_t)slot * KV_HEADS + kvh) * max_ctx * HEAD_DIM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t4 = lane & 3; // mma fragment row group and column pair
    const int mi = lane >> 3, mr = lane & 7; // ldmatrix: which 8x8 matrix this lane addresses, and its row

    // Q tile (zeros past `rows`) and the first K tile: one group each
    for (int i = threadIdx.x; i < PA_ROWS * 16; i += 128) {
        const int r = i >> 4, c = i & 15;
        const bool valid = r < rows;
        const bf16 *src = valid ? qkv + (size_t)(tok0 + r) * QKV_DIM + h * HEAD_DIM + c * 8 : qkv;
        cp_async16(sQ + swz(r, c), src, valid);
    }
    cp_async_commit();
    load_kv_tile(sK, khead, 0, len);
    cp_async_commit();

    uint32_t qf[8][4]; // this warp's 16 query rows as A fragments, 8 steps of 16 dims
    float o[16][4];    // 16 rows x 128 dims accumulator: 16 n-tiles of 8 dims
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f; // rows g and g + 8
#pragma unroll
    for (int n = 0; n < 16; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    const int row0 = warp * 16 + g, row1 = row0 + 8; // in the tile
    const int qpos0 = pos0 + row0, qpos1 = pos0 + row1;

    for (int j = 0; j < ntiles; j++) {
        // V(j) loads while S = Q K(j)^T is computed
        load_kv_tile(sV, vhead, j * PA_KEYS, len);
        cp_async_commit();
        cp_async_wait<1>(); // everything but V(j): Q and K(j)
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int ks = 0; ks < 8; ks++)
                ldmatrix_x4(qf[ks], sQ + swz(warp * 16 + mr + 8 * (mi & 1), ks * 2 + (mi >> 1)));
        }
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < 8; ks++) {
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t b[4];
                ldmatrix_x4(b, sK + swz(np * 16 + mr + 8 * (mi >> 1), ks * 2 + (mi & 1)));
                mma_bf16(s[2 * np], qf[ks], b[0], b[1]);
                mma_bf16(s[2 * np + 1], qf[ks], b[2], b[3]);
            }
        }
        __syncthreads(); // every warp is done with K(j)
        if (j + 1 < ntiles)
            load_kv_tile(sK, khead, (j + 1) * PA_KEYS, len);
        cp_async_commit(); // (an empty group on the last tile keeps the counting uniform)

        // scale, causal mask (only tiles that reach past the block's first query)
        const bool diag = (j + 1) * PA_KEYS - 1 > pos0;
#pragma unroll
        for (int n = 0; n < 8; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[n][e] * SCORE_SCALE_LOG2;
                if (diag) {
                    const int key = j * PA_KEYS + n * 8 + 2 * t4 + (e & 1);
                    if (key > (e < 2 ? qpos0 : qpos1))
                        v = -INFINITY;
                }
                s[n][e] = v;
            }
        }
        // online softmax: row max over the 4 lanes of a row, fixed xor order.
        // Key 0 is in tile 0 and visible to every row, so m is finite from
        // tile 0 on and no exp2 sees inf - inf.
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
            mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float a0 = exp2f(m0 - mn0), a1 = exp2f(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        uint32_t pf[4][4]; // P as A fragments: 4 steps of 16 keys
        float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const float p0 = exp2f(s[n][0] - mn0), p1 = exp2f(s[n][1] - mn0);
            const float p2 = exp2f(s[n][2] - mn1), p3 = exp2f(s[n][3] - mn1);
            ps0 += p0 + p1;
            ps1 += p2 + p3;
            pf[n >> 1][(n & 1) * 2 + 0] = pack_bf16x2(p0, p1);
            pf[n >> 1][(n & 1) * 2 + 1] = pack_bf16x2(p2, p3);
        }
        l0 = l0 * a0 + ps0; // per-lane partial sums; the 4 lanes are summed at the end
        l1 = l1 * a1 + ps1;
#pragma unroll
        for (int n = 0; n < 16; n++) {
            o[n][0] *= a0;
            o[n][1] *= a0;
            o[n][2] *= a1;
            o[n][3] *= a1;
        }

        cp_async_wait<1>(); // everything but K(j + 1): V(j)
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
#pragma unroll
            for (int dp = 0; dp < 8; dp++) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, sV + swz(kk * 16 + mr + 8 * (mi & 1), dp * 2 + (mi >> 1)));
                mma_bf16(o[2 * dp], pf[kk], b[0], b[1]);
                mma_bf16(o[2 * dp + 1], pf[kk], b[2], b[3]);
            }
        }
        __syncthreads(); // every warp is done with V(j)
    }
    cp_async_wait<0>();

    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.f / l0, inv1 = 1.f / l1;
#pragma unroll
    for (int n = 0; n < 16; n++) {
        const int d = h * HEAD_DIM + n * 8 + 2 * t4;
        if (row0 < rows)
            *reinterpret_cast<__nv_bfloat162 *>(out + (size_t)(tok0 + row0) * HIDDEN + d) =
                __floats2bfloat162_rn(o[n][0] * inv0, o[n][1] * inv0);
        if (row1 < rows)
            *reinterpret_cast<__nv_bfloat162 *>(out + (size_t)(tok0 + row1) * HIDDEN + d) =
                __floats2bfloat162_rn(o[n][2] * inv1, o[n][3] * inv1);
    }
}

// ---------------------------------------------------------------------------
// decode attention: flash-decoding. One query token per request, over
// positions [0, pos[b]] of its slot.
//
// serve_decode_attention: grid (DECODE_SPLITS, 8 KV heads, bucket rows), 128
// threads. The request's L = pos + 1 positions are cut into DECODE_SPLITS
// splits of ceil(L / DECODE_SPLITS) rounded up to 32 positions; blocks past
// the last non-empty split return at once. A block serves the 4 query heads
// of its KV head, so each K and V vector is loaded once for all 4: 8 groups of
// 16 threads, a group on one position at a time (each thread one 16-byte
// vector: 8 of the 128 dims), DECODE_UNROLL positions per step, online
// softmax per group, then the 8 groups merged in a fixed order. Writes the
// split's unnormalised output and its (max, sum) for serve_decode_combine.

__device__ __forceinline__ int decode_split_len(int L)
{
    const int per = (L + DECODE_SPLITS - 1) / DECODE_SPLITS;
    return (per + 31) / 32 * 32;
}

extern "C" __global__ void __launch_bounds__(DECODE_THREADS)
serve_decode_attention(const bf16 *qkv, const int *slots, const int *pos, const bf16 *kc, const bf16 *vc,
                       float *part_o, float *part_ml, int max_ctx)
{
    __shared__ float sm_o[8][GQA][HEAD_DIM];
    __shared__ float sm_m[8][GQA], sm_l[8][GQA];
    const int split = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int L = pos[b] + 1;
    const int per = decode_split_len(L);
    const int p_begin = split * per;
    if (p_begin >= L)
        return;
    const int p_end = min(L, p_begin + per);
    const int grp = threadIdx.x >> 4, c = threadIdx.x & 15;
    const size_t head = ((size_t)slots[b] * KV_HEADS + kvh) * max_ctx;
    const uint4 *kh = reinterpret_cast<const uint4 *>(kc + head * HEAD_DIM);
    const uint4 *vh = reinterpret_cast<const uint4 *>(vc + head * HEAD_DIM);

    float q[GQA][8];
#pragma unroll
    for (int j = 0; j < GQA; j++) {
        unpack8(reinterpret_cast<const uint4 *>(qkv + (size_t)b * QKV_DIM + (kvh * GQA + j) * HEAD_DIM)[c], q[j]);
#pragma unroll
        for (int d = 0; d < 8; d++)
            q[j][d] *= SCORE_SCALE_LOG2;
    }
    float acc[GQA][8], m[GQA], l[GQA];
#pragma unroll
    for (int j = 0; j < GQA; j++) {
        m[j] = -INFINITY;
        l[j] = 0.f;
#pragma unroll
        for (int d = 0; d < 8; d++)
            acc[j][d] = 0.f;
    }
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // The loop bound is the block's, not the group's: the shuffles below need
    // every lane of the warp (a group past p_end just sees no valid position).
    for (int base = p_begin; base < p_end; base += 8 * DECODE_UNROLL) {
        const int p0 = base + grp * DECODE_UNROLL;
        uint4 kv[DECODE_UNROLL], vv[DECODE_UNROLL];
#pragma unroll
        for (int u = 0; u < DECODE_UNROLL; u++) {
            const bool ok = p0 + u < p_end;
            kv[u] = ok ? kh[(size_t)(p0 + u) * 16 + c] : zero;
            vv[u] = ok ? vh[(size_t)(p0 + u) * 16 + c] : zero;
        }
        float sc[DECODE_UNROLL][GQA];
#pragma unroll
        for (int u = 0; u < DECODE_UNROLL; u++) {
            float k[8];
            unpack8(kv[u], k);
#pragma unroll
            for (int j = 0; j < GQA; j++) {
                float s = 0.f;
#pragma unroll
                for (int d = 0; d < 8; d++)
                    s += q[j][d] * k[d];
                // sum over the group's 16 lanes; xor pairs make every lane's sum identical
                s += __shfl_xor_sync(0xffffffffu, s, 8);
                s += __shfl_xor_sync(0xffffffffu, s, 4);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                sc[u][j] = p0 + u < p_end ? s : -INFINITY;
            }
        }
#pragma unroll
        for (int j = 0; j < GQA; j++) {
            float mx = m[j];
#pragma unroll
            for (int u = 0; u < DECODE_UNROLL; u++)
                mx = fmaxf(mx, sc[u][j]);
            if (mx == -INFINITY) // no valid position seen by this group yet
                continue;
            const float alpha = exp2f(m[j] - mx);
            m[j] = mx;
            l[j] *= alpha;
#pragma unroll
            for (int d = 0; d < 8; d++)
                acc[j][d] *= alpha;
#pragma unroll
            for (int u = 0; u < DECODE_UNROLL; u++) {
                const float p = exp2f(sc[u][j] - mx);
                float v[8];
                unpack8(vv[u], v);
                l[j] += p;
#pragma unroll
                for (int d = 0; d < 8; d++)
                    acc[j][d] += p * v[d];
            }
        }
    }
    // merge the 8 groups in a fixed order (a group may have seen no position: m = -inf)
#pragma unroll
    for (int j = 0; j < GQA; j++) {
#pragma unroll
        for (int d = 0; d < 8; d++)
            sm_o[grp][j][c * 8 + d] = acc[j][d];
        if (c == 0) {
            sm_m[grp][j] = m[j];
            sm_l[grp][j] = l[j];
        }
    }
    __syncthreads();
    const int d = threadIdx.x; // one of 128 dims
#pragma unroll
    for (int j = 0; j < GQA; j++) {
        float M = -INFINITY;
        for (int gi = 0; gi < 8; gi++)
            M = fmaxf(M, sm_m[gi][j]);
        float o = 0.f, sum = 0.f;
        for (int gi = 0; gi < 8; gi++) {
            const float mg = sm_m[gi][j];
            const float w = mg == -INFINITY ? 0.f : exp2f(mg - M);
            o += w * sm_o[gi][j][d];
            sum += w * sm_l[gi][j];
        }
        const int hq = kvh * GQA + j;
        const size_t idx = ((size_t)b * HEADS + hq) * DECODE_SPLITS + split;
        part_o[idx * HEAD_DIM + d] = o;
        if (d == 0) {
            part_ml[idx * 2] = M;
            part_ml[idx * 2 + 1] = sum;
        }
    }
}

// out[b][h * 128 + d] = the splits of (b, h) merged in split order; grid (32
// heads, bucket rows), 128 threads.
extern "C" __global__ void __launch_bounds__(HEAD_DIM)
serve_decode_combine(const float *part_o, const float *part_ml, const int *pos, bf16 *out)
{
    const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
    const int L = pos[b] + 1;
    const int per = decode_split_len(L);
    const int nsplit = (L + per - 1) / per;
    const size_t base = ((size_t)b * HEADS + h) * DECODE_SPLITS;
    float M = -INFINITY;
    for (int s = 0; s < nsplit; s++)
        M = fmaxf(M, part_ml[(base + s) * 2]);
    float o = 0.f, sum = 0.f;
    for (int s = 0; s < nsplit; s++) {
        const float w = exp2f(part_ml[(base + s) * 2] - M);
        o += w * part_o[(base + s) * HEAD_DIM + d];
        sum += w * part_ml[(base + s) * 2 + 1];
    }
    out[(size_t)b * HIDDEN + h * HEAD_DIM + d] = __float2bfloat16_rn(o / sum);
}

// ---------------------------------------------------------------------------
// reference attention for serve_check: plain fp32 loops, no tensor cores, no
// online softmax. out[t][h * 128 + d] (fp32) for query token t at position
// tok_pos[t] of slot tok_slot[t] over positions [0, tok_pos[t]]. Grid
// (tokens, 32 heads), 128 threads: pass 1 the max score, pass 2 in chunks of
// 128 keys (one per thread) the exponentials, then each thread its dim.
extern "C" __global__ void __launch_bounds__(128)
serve_ref_attention(const bf16 *qkv, const int *tok_slot, const int *tok_pos, const bf16 *kc, const bf16 *vc,
                    float *out, int max_ctx)
{
    __shared__ float q[HEAD_DIM], e[128], red[128];
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int L = tok_pos[t] + 1;
    const size_t head = ((size_t)tok_slot[t] * KV_HEADS + h / GQA) * max_ctx;
    const bf16 *kh = kc + head * HEAD_DIM, *vh = vc + head * HEAD_DIM;
    q[tid] = __bfloat162float(qkv[(size_t)t * QKV_DIM + h * HEAD_DIM + tid]);
    __syncthreads();
    const float scale = 0.08838834764831845f;
    float mx = -INFINITY;
    for (int k = tid; k < L; k += 128) {
        float s = 0.f;
        for (int d = 0; d < HEAD_DIM; d++)
            s += q[d] * __bfloat162float(kh[(size_t)k * HEAD_DIM + d]);
        mx = fmaxf(mx, s * scale);
    }
    mx = ex::block_max(mx, red);
    float o = 0.f, sum = 0.f;
    for (int k0 = 0; k0 < L; k0 += 128) {
        const int k = k0 + tid;
        float ek = 0.f;
        if (k < L) {
            float s = 0.f;
            for (int d = 0; d < HEAD_DIM; d++)
                s += q[d] * __bfloat162float(kh[(size_t)k * HEAD_DIM + d]);
            ek = expf(s * scale - mx);
        }
        e[tid] = ek;
        __syncthreads();
        for (int i = 0; i < 128 && k0 + i < L; i++) {
            o += e[i] * __bfloat162float(vh[(size_t)(k0 + i) * HEAD_DIM + tid]);
            sum += e[i];
        }
        __syncthreads();
    }
    out[(size_t)t * HIDDEN + h * HEAD_DIM + tid] = o / sum;
}
