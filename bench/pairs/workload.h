/*
 * What the tenants of the pairs benchmark (docs/benchmarks.md, W2) run, behind one
 * interface with two back ends:
 *  - workload_cuda.c: cuBLAS bf16 GEMMs in sections and the colocate
 *    example's own elementwise/reduction kernels (../colocate/kernels.cu)
 *    through ds_launch;
 *  - workload_sim.c: simulated kernels with the block counts of the real ones
 *    and block durations chosen so each takes about as long alone.
 *
 * One training-like step of each kind (every step is the same work, so steps
 * per second is the throughput):
 *   compute  PAIRS_COMPUTE_GEMMS bf16 GEMMs of PAIRS_GEMM_N^3    (section, cuBLAS)
 *   memory   gradient sum of squares over PAIRS_MEM_PARAMS fp32 (256 MiB read),
 *            then an AdamW update of PAIRS_MEM_PARAMS parameters
 *            (4 x 256 MiB arrays; 28 bytes moved per parameter) (ds_launch)
 *   mix      PAIRS_MIX_GEMMS GEMMs, then the memory step over PAIRS_MIX_PARAMS
 *
 * Launch configurations are constants, never derived from the SMs a pCtx has.
 * Every function returns 0, or -1 after printing what failed.
 */
#ifndef PAIRS_WORKLOAD_H
#define PAIRS_WORKLOAD_H

#include <stdint.h>

#include <detshare/detshare.h>

#define PAIRS_GEMM_N 4096
#define PAIRS_COMPUTE_GEMMS 4
#define PAIRS_MEM_PARAMS (64ull << 20) /* 256 MiB per fp32 array */
#define PAIRS_MIX_GEMMS 2
#define PAIRS_MIX_PARAMS (32ull << 20)
/* Elementwise/reduction grid: sized from the data as PyTorch's elementwise
 * kernels are (64M parameters = 16M float4s = 4 per thread), never from SMs.
 * Many small blocks keep the last wave short on any tier; the earlier grid of
 * 8 blocks per SM of a 132-SM GPU (1056) left a 1/8-full fifth wave on 32 SMs. */
#define PAIRS_GRID 16384u
#define PAIRS_THREADS 256u

typedef enum pairs_kind { KIND_COMPUTE = 0, KIND_MEMORY = 1, KIND_MIX = 2, KIND_COUNT } pairs_kind;

/** Steps [0, completed) have finished on the device; [completed, submitted)
 *  may still run. */
typedef struct step_progress {
    uint64_t submitted;
    uint64_t completed;
} step_progress;

typedef struct pairs_tenant pairs_tenant;
typedef struct pairs_backend pairs_backend;

struct pairs_backend {
    const char *name;
    /** First call on every tenant thread (binds cudart to the device). */
    int (*thread_init)(pairs_backend *b);
    /** Tenant state (buffers, cuBLAS handle) of `kind`; slot 0 or 1 so that a
     *  pair of the same kind gets two independent sets. Called on the main
     *  thread; the state lives until destroy. */
    int (*tenant_get)(pairs_backend *b, pairs_kind kind, int slot, pairs_tenant **out);
    /** Queues step p->submitted on v and counts it. */
    int (*submit)(pairs_tenant *t, ds_vctx_t v, step_progress *p);
    /** Blocks until fewer than two steps are in flight, updating p->completed. */
    int (*retire)(pairs_tenant *t, ds_vctx_t v, step_progress *p);
    void (*destroy)(pairs_backend *b);
};

int pairs_cuda_create(ds_runtime_t rt, int ordinal, pairs_backend **out);
int pairs_sim_create(ds_runtime_t rt, pairs_backend **out);

#endif /* PAIRS_WORKLOAD_H */
