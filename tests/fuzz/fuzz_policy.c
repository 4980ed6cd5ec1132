/* Fuzz target: a caller's ds_policy_ops table (header, name, hooks present or
 * not, tick) and the decisions its on_launch returns. */
#include "fuzz_common.h"

typedef struct fpol {
    uint8_t script[32];
    unsigned next;
    uint32_t num_pctx;
} fpol;

static ds_decision fz_on_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    fpol *p = st;
    (void)ev;
    uint8_t b = p->script[p->next++ % 32];
    ds_decision d = {0};
    d.kind = (ds_decision_kind)(b % 4); /* 3: not a kind */
    d.pctx = b & 0x80 ? (uint32_t)b : b % (ds_view_num_pctx(view) + 1);
    d.urgent = b & 0x40;
    d.hold_us = b % 50;
    return d;
}
static void fz_on_completion(void *st, const ds_policy_view *view, const ds_completion *c)
{
    (void)st;
    ds_vctx_view vv;
    ds_view_vctx(view, c->vctx, &vv);
}
static void fz_on_tick(void *st, const ds_policy_view *view, double now)
{
    (void)st;
    (void)now;
    ds_vctx_t vs[8];
    uint32_t n = ds_view_vctxs(view, vs, 8);
    for (uint32_t i = 0; i < n && i < 8; i++)
        ds_vctx_set_window(vs[i], 100 * i);
}
static void fz_on_activate(void *st, const ds_policy_view *view)
{
    (void)st;
    ds_vctx_t vs[8];
    uint32_t n = ds_view_vctxs(view, vs, 8);
    for (uint32_t i = 0; i < n && i < 8; i++)
        ds_vctx_remap(vs[i], ds_view_full_pctx(view));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    ds_runtime_t rt = fz_runtime("manual");
    fpol state = {0};
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    fz_header(&f, &ops.size, &ops.magic, &ops.version, sizeof ops);
    char name[48];
    uint8_t m = fz_u8(&f);
    ops.name = m & 1 ? fz_str(&f, name, sizeof name) : m & 2 ? "manual" : NULL;
    if (m & 4)
        ops.on_launch = fz_on_launch;
    if (m & 8)
        ops.on_completion = fz_on_completion;
    if (m & 16)
        ops.on_tick = fz_on_tick;
    if (m & 32)
        ops.on_activate = fz_on_activate;
    ops.tick_us = fz_u32(&f);
    for (int i = 0; i < 32; i++)
        state.script[i] = fz_u8(&f);
    if (ds_policy_register(rt, m & 64 ? &ops : NULL, &state) == DS_SUCCESS &&
        ds_runtime_set_policy(rt, ops.name) == DS_SUCCESS) {
        ds_vctx_t v = NULL;
        if (ds_vctx_create(rt, NULL, &v) == DS_SUCCESS) {
            CUfunction k = fz_kernel(rt, 0);
            for (int i = 0; i < 8; i++) {
                ds_launch(v, k, (ds_dim3){4, 1, 1}, (ds_dim3){32, 1, 1}, 0, NULL, NULL);
                ds_runtime_poll(rt);
            }
            ds_vctx_synchronize(v);
        }
    }
    ds_runtime_destroy(rt);
    return 0;
}
