// Device code of bench/overhead (docs/benchmarks.md, W4). Compiled by nvcc into a
// fatbin that bench/overhead/meson.build embeds with tools/embed-fatbin.py
// (symbol overhead_fatbin); overhead.c loads it with cuModuleLoadData in the
// primary context the library created.

// launch_ratio: nothing to do, so the host-side cost of a launch is all there is.
extern "C" __global__ void empty(void) {}

static __device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// remap device gap: when kernel i started and ended (%globaltimer, ns).
// ts[2*i] = start, ts[2*i+1] = end.
extern "C" __global__ void stamp(unsigned long long *ts, int i)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    unsigned long long t0 = globaltimer();
    ts[2 * i] = t0;
    ts[2 * i + 1] = globaltimer();
}

// Holds a stream for ns so the kernels queued behind it are all submitted
// before the device reaches them (the gaps then measure the device, not the
// host's submission rate).
extern "C" __global__ void spin(long long ns)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    unsigned long long t0 = globaltimer();
    while ((long long)(globaltimer() - t0) < ns) {
    }
}

// gate_us: the gated kernel writes value to a flag in pinned host memory
// mapped into the device; the host polls it.
extern "C" __global__ void host_flag(volatile unsigned int *flag, unsigned int value)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    *flag = value;
    __threadfence_system();
}
