/* Fuzz target: ds_launch arguments and hints, sections, remaps. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ds_runtime_t rt;
    static CUfunction k0, k2;
    static ds_vctx_t v;
    if (!rt) {
        rt = fz_runtime("slo_aware");
        k0 = fz_kernel(rt, 0);
        k2 = fz_kernel(rt, 2);
        if (ds_vctx_create(rt, NULL, &v) != DS_SUCCESS)
            __builtin_trap();
    }
    fz f = {data, size};
    for (int step = 0; step < 16 && f.n; step++) {
        uint8_t op = fz_u8(&f);
        if (op % 8 == 0) {
            ds_vctx_remap(v, fz_u8(&f) % 12);
            continue;
        }
        if (op % 8 == 1) {
            CUstream s;
            if (ds_vctx_acquire_stream(v, fz_bool(&f) ? &s : NULL) == DS_SUCCESS)
                ds_vctx_release_stream(v);
            continue;
        }
        ds_dim3 g = {fz_u32(&f), fz_u32(&f), fz_u32(&f)};
        ds_dim3 b = {fz_u32(&f), fz_u32(&f), fz_u32(&f)};
        if (fz_bool(&f)) { /* mostly valid shapes */
            g = (ds_dim3){1 + g.x % 300, 1 + g.y % 3, 1 + g.z % 2};
            b = (ds_dim3){1 + b.x % 1024, 1, 1};
        }
        /* A valid grid of billions of blocks is legal, but the simulator would
         * really run every wave: keep such shapes valid and cap their size, so
         * one input cannot take minutes (zero and oversized dimensions, what
         * validation must reject, are left as they are). */
        uint64_t blocks = (uint64_t)g.x * g.y * g.z;
        if (g.x && g.y && g.z && blocks > (1u << 20)) {
            g.y = g.y > 1024 ? 1024 : g.y;
            g.z = g.z > 1024 ? 1024 : g.z;
            g.x = (uint32_t)((1u << 20) / ((uint64_t)g.y * g.z)) + 1;
        }
        uint32_t smem = fz_bool(&f) ? fz_u32(&f) : 0;
        ds_launch_hints h = DS_LAUNCH_HINTS_INIT;
        fz_header(&f, &h.size, &h.magic, &h.version, sizeof h);
        h.expected_us = fz_u32(&f);
        h.phase = (ds_phase)(fz_u8(&f) % 4);
        uint64_t p0 = fz_u(&f, 8), p1 = fz_u(&f, 8);
        void *params[] = {&p0, fz_bool(&f) ? &p1 : NULL};
        CUfunction fn = op % 8 == 2 ? NULL : op & 16 ? k2 : k0;
        ds_launch(v, fn, g, b, smem, op & 32 ? params : NULL, op & 64 ? &h : NULL);
    }
    ds_runtime_poll(rt);
    ds_vctx_synchronize(v);
    return 0;
}
