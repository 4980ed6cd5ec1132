// Device code embedded in libdetshare (compiled by nvcc into a fatbin for
// sm_90 plus PTX; see src/meson.build). Loaded with cuModuleLoadData in the
// device's primary context on first use.

// Which SMs does a pCtx run on? Each block marks its %smid in a bitmap, then
// spins spin_ns so that the blocks spread over every SM the pCtx has.
// bitmap: DS_MAX_SMS / 32 words, zeroed by the caller.
extern "C" __global__ void ds_probe_smid(unsigned int *bitmap, unsigned long long spin_ns)
{
    if (threadIdx.x != 0)
        return;
    unsigned int smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    atomicOr(&bitmap[smid / 32], 1u << (smid % 32));
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < spin_ns);
}

#include "rck_block.h"

// The resident control kernel (src/rck/rck.c): one thread, launched once per
// runtime (when ds_runtime_config.rck is DS_RCK_ON) on a green context over
// the last SM group of the split, which no LOW (latency-sensitive) tier
// includes. Runs ds__rck_device_pass until the host sets cb->stop.
extern "C" __global__ void ds_rck(ds__rck_block *cb, unsigned int *gates, const unsigned int *bounds,
                                  unsigned int *seen)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    ds__rck_local st = {0, 0, 0, 0, 0};
    for (;;) {
        unsigned long long now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (ds__rck_device_pass(cb, gates, bounds, seen, &st, now))
            break;
        __nanosleep(DS__RCK_PAUSE_NS);
    }
}
