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
