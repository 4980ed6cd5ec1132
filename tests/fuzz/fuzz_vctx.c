/* Fuzz target: ds_vctx_attr (header, name, class, priority, SLO, pCtx, phase). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ds_runtime_t rt;
    static CUfunction k;
    if (!rt) {
        rt = fz_runtime("slo_aware");
        k = fz_kernel(rt, 0);
    }
    fz f = {data, size};
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    fz_header(&f, &a.size, &a.magic, &a.version, sizeof a);
    char name[100];
    a.name = fz_bool(&f) ? fz_str(&f, name, sizeof name) : NULL;
    a.cls = (ds_vctx_class)(int32_t)fz_u32(&f) % 3;
    a.priority = (int)fz_u32(&f);
    a.slo_us = fz_u32(&f);
    a.weight = fz_u32(&f);
    a.initial_pctx = (int32_t)fz_u32(&f) % 12;
    a.phase = (ds_phase)((int32_t)fz_u32(&f) % 4);
    ds_vctx_t v = NULL;
    if (ds_vctx_create(rt, fz_bool(&f) ? &a : NULL, &v) != DS_SUCCESS)
        return 0;
    const char *got = NULL;
    ds_vctx_get_name(v, &got);
    /* gate actions in any order: the vCtx must end up running, torn down */
    ds_vctx_set_gate_interval(v, fz_bool(&f) ? fz_u32(&f) : DS_GATES_NONE);
    ds_launch(v, k, (ds_dim3){2, 1, 1}, (ds_dim3){64, 1, 1}, 0, NULL, NULL);
    for (uint8_t ops = fz_u8(&f) % 8; ops; ops--) {
        uint8_t op = fz_u8(&f) % 4;
        if (op == 0)
            ds_vctx_gate_close(v);
        else if (op == 1)
            ds_vctx_gate_open(v);
        else if (op == 2)
            ds_runtime_poll(rt);
        else
            ds_vctx_set_gate_interval(v, fz_u32(&f));
    }
    ds_vctx_stats st = DS_VCTX_STATS_INIT;
    if (fz_bool(&f))
        st.size = DS_VCTX_STATS_SIZE_V1;
    ds_vctx_get_stats(v, &st);
    ds_runtime_poll(rt);
    ds_vctx_destroy(v);
    return 0;
}
