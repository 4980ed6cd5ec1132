/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c): a byte consumer and
 * a simulated runtime. Every target only calls the public API with
 * caller-provided structures built from the input, on the simulated device. */
#ifndef DS_FUZZ_COMMON_H
#define DS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>

typedef struct fz {
    const uint8_t *p;
    size_t n;
} fz;

static inline uint64_t fz_u(fz *f, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) {
        v = (v << 8) | (f->n ? *f->p : 0);
        if (f->n) {
            f->p++;
            f->n--;
        }
    }
    return v;
}
static inline uint32_t fz_u32(fz *f) { return (uint32_t)fz_u(f, 4); }
static inline uint8_t fz_u8(fz *f) { return (uint8_t)fz_u(f, 1); }
static inline int fz_bool(fz *f) { return fz_u8(f) & 1; }

/* A header that is mostly right, sometimes wrong (size, magic, version).
 * Sizes above `real` are not generated: the ABI lets a newer caller pass a
 * larger struct and the library reads (and requires zero) the extra bytes,
 * so claiming more than the memory holds is a caller bug, not an input. */
static inline void fz_header(fz *f, size_t *size, uint32_t *magic, uint32_t *version, size_t real)
{
    uint8_t m = fz_u8(f);
    *size = m % 8 == 1 ? real - 8 : m % 8 == 3 ? fz_u32(f) % real : real;
    *magic = m % 16 == 4 ? fz_u32(f) : DS_ABI_MAGIC;
    *version = m % 16 == 5 ? fz_u32(f) : DS_ABI_VERSION;
}

/* A NUL-terminated string of up to cap-1 input bytes. */
static inline const char *fz_str(fz *f, char *buf, size_t cap)
{
    size_t len = fz_u8(f) % cap;
    size_t i = 0;
    for (; i < len && f->n; i++)
        buf[i] = (char)fz_u8(f);
    buf[i] = 0;
    return buf;
}

/* A runtime on a small simulated device, no scheduler thread, short
 * teardown and hold timeouts. */
static inline ds_runtime_t fz_runtime(const char *policy)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.sm_count = 32;
    sim.trace_capacity = 256;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cfg.policy = policy;
    cfg.scheduler_period_us = -1;
    cfg.teardown_timeout_ms = 20;
    ds_runtime_t rt = NULL;
    if (ds_runtime_create(&cfg, &rt) != DS_SUCCESS)
        __builtin_trap();
    return rt;
}

static inline CUfunction fz_kernel(ds_runtime_t rt, uint32_t nparams)
{
    ds_sim_kernel_desc d = DS_SIM_KERNEL_DESC_INIT;
    d.name = "fz";
    d.block_us = 1;
    d.num_params = nparams;
    for (uint32_t i = 0; i < nparams; i++)
        d.param_sizes[i] = 8;
    CUfunction f = NULL;
    if (ds_sim_kernel_create(rt, &d, &f) != DS_SUCCESS)
        __builtin_trap();
    return f;
}

#endif
