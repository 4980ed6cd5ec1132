// Kernels of suite `gpu` (tests/gpu). Compiled by nvcc into a fatbin that
// tests/gpu/meson.build embeds with tools/embed-fatbin.py (symbol gpu_test_fatbin);
// the tests load it with cuModuleLoadData in the runtime's primary context.
// Every kernel is extern "C" so cuModuleGetFunction finds it by name.
#include "gpu_kernels.h"

static __device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ unsigned int smid()
{
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

static __device__ __forceinline__ void spin_for(long long ns)
{
    if (ns <= 0)
        return;
    unsigned long long t0 = globaltimer();
    while ((long long)(globaltimer() - t0) < ns) {
    }
}

// Invariant 1: writes back the launch configuration and the parameters exactly
// as this kernel received them.
extern "C" __global__ void echo(echo_out *out, int a, double b, echo_struct s)
{
    extern __shared__ unsigned char dyn[];
    unsigned int dsmem;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dsmem));
    atomicAdd(&out->threads, 1ull);
    bool first_thread = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
    if (first_thread)
        atomicAdd(&out->blocks, 1ull);
    if (!first_thread || blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0)
        return;
    unsigned int smem_ok = 1;
    if (dsmem > 0) {
        volatile unsigned char *last = dyn + dsmem - 1;
        *last = 0x5a;
        smem_ok = *last == 0x5a;
    }
    out->grid[0] = gridDim.x;
    out->grid[1] = gridDim.y;
    out->grid[2] = gridDim.z;
    out->block[0] = blockDim.x;
    out->block[1] = blockDim.y;
    out->block[2] = blockDim.z;
    out->dynamic_smem = dsmem;
    out->a = a;
    out->b = b;
    out->s = s;
    out->smem_ok = smem_ok;
    __threadfence();
    out->done = ECHO_DONE;
}

// Order: one thread takes the next log position and writes its id there,
// then holds the stream for spin_ns.
extern "C" __global__ void append(int *counter, int *log, int id, long long spin_ns)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    int old = atomicAdd(counter, 1);
    if (old >= 0 && old < APPEND_LOG_CAP)
        log[old] = id;
    __threadfence();
    spin_for(spin_ns);
}

// Sections: writer spins first, then writes (a reader running early sees the
// sentinel); readers read first, then spin, then write (a writer running late
// overwrites nothing they depend on, but they read the sentinel).
extern "C" __global__ void sec_write(int *buf, int slot, int value, long long spin_ns)
{
    spin_for(spin_ns);
    buf[slot] = value;
    __threadfence();
}

extern "C" __global__ void sec_derive(int *buf, int src, int dst, long long spin_ns)
{
    int v = *(volatile int *)&buf[src];
    spin_for(spin_ns);
    buf[dst] = v * 3 + 1;
    __threadfence();
}

extern "C" __global__ void sec_check(int *buf, int a, int b, int dst, long long spin_ns)
{
    int va = *(volatile int *)&buf[a];
    int vb = *(volatile int *)&buf[b];
    spin_for(spin_ns);
    buf[dst] = vb * 2 + va;
    __threadfence();
}

// Teardown: one block spins for ns, then sets *done (if given).
extern "C" __global__ void spin(long long ns, unsigned int *done)
{
    if (threadIdx.x != 0)
        return;
    spin_for(ns);
    if (done) {
        __threadfence();
        atomicExch(done, 1u);
    }
}

// Isolation, best-effort side: every block records its SM and its start,
// thread 0 spins ns while the others wait at the barrier (the whole block
// stays resident), then the block records its end.
extern "C" __global__ void __launch_bounds__(1024) be_spin(be_record *rec, long long ns)
{
    if (threadIdx.x == 0) {
        unsigned long long t0 = globaltimer();
        atomicMin(&rec->first_start, t0);
        unsigned int s = smid();
        atomicOr(&rec->sm_bitmap[(s / 32) % 8], 1u << (s % 32));
        spin_for(ns);
    }
    __syncthreads();
    if (threadIdx.x == 0)
        atomicMax(&rec->last_end, globaltimer());
}

// Isolation, latency-sensitive side: when did the one block start, and where.
extern "C" __global__ void ls_stamp(ls_record *rec)
{
    if (threadIdx.x != 0)
        return;
    rec->start = globaltimer();
    rec->smid = smid();
    __threadfence();
    rec->done = 1;
}

// The body of `span` and `span_slot`, into record r. Thread 0 of every block
// records the block's start (the kernel's start is the earliest) and its SM,
// spins ns while the other threads wait at the barrier (the whole block stays
// resident), then counts the block finished; the last block to finish
// records the kernel's end. Works for any 1-D block size up to 1024.
static __device__ __forceinline__ void span_into(span_record *r, long long ns)
{
    if (threadIdx.x == 0) {
        atomicMin(&r->start, globaltimer());
        unsigned int s = smid();
        atomicOr(&r->sm_bitmap[(s / 32) % 8], 1u << (s % 32));
        spin_for(ns);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned int total = gridDim.x * gridDim.y * gridDim.z;
        unsigned int before = atomicAdd(&r->blocks, 1u);
        if (before == total - 1) {
            // Every other block counted itself after its spin: now is after them all.
            atomicExch(&r->end, globaltimer());
            __threadfence();
        }
    }
}

// Policies: one record per launch (recs[idx]).
extern "C" __global__ void __launch_bounds__(1024) span(span_record *recs, int idx, long long ns)
{
    span_into(&recs[idx], ns);
}

// Faults (test_fault.c): spins delay_ns, then traps. A trap poisons the whole
// CUDA context (a sticky CUDA_ERROR_LAUNCH_FAILED or _ILLEGAL_INSTRUCTION).
extern "C" __global__ void trap_after(long long delay_ns)
{
    spin_for(delay_ns);
    __trap();
}

// Stress (tests/stress/stress_gpu.c): one thread checks that the vCtx's
// launches arrive in program order: seq must be *last + 1.
extern "C" __global__ void seq_check(unsigned long long *last, unsigned long long seq, unsigned int *errors)
{
    if (*last + 1ull != seq)
        atomicAdd(errors, 1u);
    *last = seq;
}

// Gates (test_gates.c): a best-effort kernel that fills the GPU (1024-thread
// blocks, two per SM). Block 0 appends id to the log when it starts, so the
// counter says how many of a vCtx's kernels have started; every block holds
// its SM for ns.
extern "C" __global__ void __launch_bounds__(1024) gate_fill(int *counter, int *log, int id, long long ns)
{
    if (threadIdx.x == 0) {
        if (blockIdx.x == 0) {
            int old = atomicAdd(counter, 1);
            if (old >= 0 && old < APPEND_LOG_CAP)
                log[old] = id;
            __threadfence();
        }
        spin_for(ns);
    }
    __syncthreads();
}

// Gates: the latency-sensitive side's start, seen by the host. flag is pinned
// host memory mapped into the device: the host polls it.
extern "C" __global__ void host_flag(volatile unsigned int *flag, unsigned int value)
{
    if (threadIdx.x != 0)
        return;
    *flag = value;
    __threadfence_system();
}

// Graphs (test_graph.c): the record slot of one graph launch, for graphs whose
// kernel arguments are fixed at capture. One thread: cursor[1] = cursor[0]
// (clamped to cap - 1), then cursor[0] + 1. The next node of the same graph
// reads cursor[1] (kernels of one stream see each other's writes).
extern "C" __global__ void graph_slot(unsigned int *cursor, unsigned int cap)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    unsigned int i = cursor[0];
    cursor[1] = i < cap ? i : cap - 1u;
    cursor[0] = i + 1u;
    __threadfence();
}

// Graphs: `span` into recs[cursor[1]], the slot graph_slot chose for this launch.
extern "C" __global__ void __launch_bounds__(1024)
span_slot(span_record *recs, const unsigned int *cursor, long long ns)
{
    span_into(&recs[*(volatile const unsigned int *)&cursor[1]], ns);
}
