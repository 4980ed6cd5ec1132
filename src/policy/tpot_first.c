/*
 * tpot_first: for LLM serving tenants whose work is marked prefill or decode
 * (launch hint, else the vCtx's phase attribute, else LS = decode and BE =
 * prefill). Decode runs at the highest stream priority on the larger tier;
 * prefill is confined to a small LOW tier (ls_sms / 2) whose SMs decode never
 * uses, and while decode is active (work in flight, or seen within idle_us)
 * prefill's work in flight is held to half a BE window (be_window_us),
 * trading time-to-first-token for time-per-output-token.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include <detshare/policy.h>

/* Most vCtxs one decision looks at. */

/* A (low, high) pair of pool indices (< DS_MAX_PCTX) in one word, published
 * with one atomic store. */
static uint32_t tiers_pack(uint32_t low, uint32_t high) { return low | high << 16; }
static uint32_t tiers_low(uint32_t packed) { return packed & 0xffffu; }
static uint32_t tiers_high(uint32_t packed) { return packed >> 16; }

enum { P_LS_SMS, P_IDLE_US, P_BE_WINDOW_US, P_COUNT };

static const ds_policy_param tpot_params[P_COUNT] = {
    [P_LS_SMS] = {.name = "ls_sms",
                  .help = "prefill runs on the LOW tier nearest half this count of SMs, decode on its complement",
                  .def = 64, .min = 1, .max = 256, .integer = 1},
    [P_IDLE_US] = {.name = "idle_us",
                   .help = "decode idle this long (us) no longer holds prefill back",
                   .def = 2000, .min = 0, .max = 1e9, .integer = 1},
    [P_BE_WINDOW_US] = {.name = "be_window_us",
                        .help = "prefill's work in flight (us) is held to half of this while decode is active",
                        .def = 2000, .min = 1, .max = 1e9, .integer = 1},
};

typedef struct tpot_state {
    _Atomic uint32_t tiers; /* tiers_pack(prefill, decode) */
    _Atomic uint32_t idle_us, be_window_us;
} tpot_state;

static ds_status tpot_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    (void)rt;
    tpot_state *s = calloc(1, sizeof *s);
    if (!s)
        return DS_ERR_OUT_OF_MEMORY;
    atomic_init(&s->idle_us, (uint32_t)tpot_params[P_IDLE_US].def);
    atomic_init(&s->be_window_us, (uint32_t)tpot_params[P_BE_WINDOW_US].def);
    *state = s;
    return DS_SUCCESS;
}

static void tpot_fini(void *state) { free(state); }

static void tpot_param(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    tpot_state *s = st;
    uint32_t u = (uint32_t)value;
    switch (index) {
    case P_LS_SMS: {
        uint32_t prefill, decode;
        ds_policy_ls_tiers(view, u / 2, &prefill, &decode);
        atomic_store(&s->tiers, tiers_pack(prefill, decode));
        break;
    }
    case P_IDLE_US: atomic_store(&s->idle_us, u); break;
    case P_BE_WINDOW_US: atomic_store(&s->be_window_us, u); break;
    default: break;
    }
}

static ds_phase phase_of(const ds_vctx_state *v, ds_phase hint)
{
    if (hint != DS_PHASE_NONE)
        return hint;
    if (v->phase != DS_PHASE_NONE)
        return v->phase;
    return v->cls == DS_CLASS_LATENCY_SENSITIVE ? DS_PHASE_DECODE : DS_PHASE_PREFILL;
}

static void place(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    tpot_state *s = st;
    ds_vctx_state vs;
    if (!ds_policy_state(view, v, &vs))
        return;
    uint32_t tiers = atomic_load(&s->tiers);
    if (phase_of(&vs, DS_PHASE_NONE) == DS_PHASE_DECODE)
        ds_vctx_place(v, tiers_high(tiers), 1, 0);
    else
        ds_vctx_place(v, tiers_low(tiers), 0, 0);
}

static void tpot_activate(void *st, const ds_policy_view *view) { ds_policy_for_each(view, place, st); }

static int decode_active(tpot_state *s, const ds_policy_view *view, ds_vctx_t self)
{
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    uint32_t idle = atomic_load_explicit(&s->idle_us, memory_order_relaxed);
    double now = -1;
    for (uint32_t i = 0; i < n; i++) {
        ds_vctx_state d;
        if (vs[i] == self || !ds_policy_state(view, vs[i], &d) ||
            phase_of(&d, DS_PHASE_NONE) != DS_PHASE_DECODE)
            continue;
        if (d.busy)
            return 1;
        if (now < 0)
            now = ds_view_now_us(view);
        if (d.last_active_us >= 0 && now - d.last_active_us < idle)
            return 1;
    }
    return 0;
}

static ds_decision tpot_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    tpot_state *s = st;
    ds_vctx_state me;
    if (!ds_policy_state(view, ev->vctx, &me))
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    int decode = phase_of(&me, ev->phase) == DS_PHASE_DECODE;
    uint32_t half_window = atomic_load_explicit(&s->be_window_us, memory_order_relaxed) / 2;
    if (!decode && me.inflight_us > half_window && decode_active(s, view, ev->vctx))
        return (ds_decision){.kind = DS_DISPATCH_HOLD, .wait_for = ev->vctx, .hold_us = 50};
    uint32_t tiers = atomic_load_explicit(&s->tiers, memory_order_relaxed);
    uint32_t want = decode ? tiers_high(tiers) : tiers_low(tiers);
    if (me.pending_pctx == want && !me.urgent == !decode)
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = want, .urgent = decode};
}

const ds_policy_ops ds_builtin_tpot_first = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "tpot_first",
    .init = tpot_init,
    .fini = tpot_fini,
    .on_activate = tpot_activate,
    .on_vctx_create = place,
    .on_launch = tpot_launch,
    .params = tpot_params,
    .num_params = P_COUNT,
    .on_param = tpot_param,
};
