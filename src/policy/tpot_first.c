/*
 * tpot_first: for LLM serving tenants whose work is marked prefill or decode
 * (launch hint, else the vCtx's phase attribute, else LS = decode and BE =
 * prefill). Decode runs at the highest stream priority on the larger tier;
 * prefill on a LOW tier whose SMs decode never uses: the one nearest
 * ls_sms / 2, or while a latency-sensitive prefill is live the one nearest
 * prefill_sms (prefill is bound by compute, decode by memory bandwidth).
 *  - Best-effort prefill: while decode is active (work in flight, or seen
 *    within idle_us) its work in flight is held to half a BE window
 *    (be_window_us), trading time-to-first-token for time-per-output-token.
 *  - Latency-sensitive prefill (its slo_us a TTFT, its requests the TTFTs the
 *    engine records): never held, at the highest priority too, and its tier
 *    is sized from its attainment by slo_aware's sizing rule (sizing.c: an
 *    error budget grows it, a probe with headroom shrinks it), TPOT first:
 *    once decode's requests since the last change are clearly over its
 *    target's allowance, prefill's tier steps down and sizing starts there.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include <detshare/policy.h>

#include "ladder.h"
#include "sizing.h"

/* Most vCtxs one decision looks at. */

/* A (low, high) pair of pool indices (< DS_MAX_PCTX) in one word, published
 * with one atomic store. */
static uint32_t tiers_pack(uint32_t low, uint32_t high) { return low | high << 16; }
static uint32_t tiers_low(uint32_t packed) { return packed & 0xffffu; }
static uint32_t tiers_high(uint32_t packed) { return packed >> 16; }

enum { P_LS_SMS, P_PREFILL_SMS, P_IDLE_US, P_BE_WINDOW_US, P_COUNT };

static const ds_policy_param tpot_params[P_COUNT] = {
    [P_LS_SMS] = {.name = "ls_sms",
                  .help = "prefill runs on the LOW tier nearest half this count of SMs, decode on its complement",
                  .def = 64, .min = 1, .max = 256, .integer = 1},
    [P_PREFILL_SMS] = {.name = "prefill_sms",
                       .help = "while a latency-sensitive prefill (its SLO a TTFT) is live, prefill's tier starts on "
                               "the LOW tier nearest this count of SMs, decode on its complement",
                       .def = 96, .min = 1, .max = 256, .integer = 1},
    [P_IDLE_US] = {.name = "idle_us",
                   .help = "decode idle this long (us) no longer holds prefill back",
                   .def = 2000, .min = 0, .max = 1e9, .integer = 1},
    [P_BE_WINDOW_US] = {.name = "be_window_us",
                        .help = "prefill's work in flight (us) is held to half of this while decode is active",
                        .def = 2000, .min = 1, .max = 1e9, .integer = 1},
};

/* A clear TPOT miss (decode's lates since the last change this many
 * standard deviations, Poisson, and one request over the target's
 * allowance): the rule of a failed probe in sizing.c. */
#define TPOT_MISS_SD 2.0
/* Decode's requests judged before a TPOT miss may move prefill's tier. */
#define TPOT_MISS_MIN 16
/* After a TPOT miss prefill grows no further than the level it stepped down
 * to, until decode has had this many requests within its target's allowance
 * (one standard deviation, Poisson). */
#define TPOT_CAP_HOLD 256

typedef struct tpot_state {
    _Atomic uint32_t tiers; /* tiers_pack(prefill, decode) */
    _Atomic uint32_t fixed; /* tiers_pack from ls_sms: where sizing starts */
    _Atomic uint32_t fixed_ls; /* ... from prefill_sms, while an LS prefill is live (start_tiers) */
    _Atomic uint32_t idle_us, be_window_us;
    _Atomic int reset;      /* sizing starts again at the next tick */
    /* the tick's own (the scheduler thread, or the thread calling ds_runtime_poll) */
    ds_sizing z;
    uint32_t nlev, lad_low[DS_SIZING_MAX_LEVELS], lad_high[DS_SIZING_MAX_LEVELS];
    uint64_t dec_req, dec_over; /* decode's counts when judging it on this tier began */
    int cap;                    /* highest level prefill may grow to after a TPOT miss (-1: none) */
    uint64_t cap_req, cap_over; /* decode's counts when the cap was set */
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
    atomic_init(&s->reset, 1);
    *state = s;
    return DS_SUCCESS;
}

static void tpot_fini(void *state) { free(state); }

static void tpot_param(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    tpot_state *s = st;
    uint32_t u = (uint32_t)value;
    switch (index) {
    case P_LS_SMS:
    case P_PREFILL_SMS: { /* the next tick moves prefill and decode to the start (start_tiers) */
        uint32_t prefill, decode;
        ds_policy_ls_tiers(view, index == P_LS_SMS ? u / 2 : u, &prefill, &decode);
        atomic_store(index == P_LS_SMS ? &s->fixed : &s->fixed_ls, tiers_pack(prefill, decode));
        atomic_store(&s->reset, 1);
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

/* Prefill with an SLO of its own (a TTFT): never held, sized (the file's comment). */
static int prefill_ls(const ds_vctx_state *v, ds_phase hint)
{
    return v->cls == DS_CLASS_LATENCY_SENSITIVE && phase_of(v, hint) == DS_PHASE_PREFILL;
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
        ds_vctx_place(v, tiers_low(tiers), prefill_ls(&vs, DS_PHASE_NONE), 0);
}

/* A latency-sensitive prefill restarts sizing from prefill_sms's tier. */
static void tpot_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    tpot_state *s = st;
    place(st, view, v);
    ds_vctx_state vs;
    if (ds_policy_state(view, v, &vs) && prefill_ls(&vs, DS_PHASE_NONE))
        atomic_store(&s->reset, 1);
}

static void tpot_activate(void *st, const ds_policy_view *view)
{
    tpot_state *s = st;
    atomic_store(&s->tiers, atomic_load(&s->fixed));
    atomic_store(&s->reset, 1);
    ds_policy_for_each(view, place, st);
}


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
    if (!decode && !prefill_ls(&me, ev->phase) && me.inflight_us > half_window && decode_active(s, view, ev->vctx))
        return (ds_decision){.kind = DS_DISPATCH_HOLD, .wait_for = ev->vctx, .hold_us = 50};
    uint32_t tiers = atomic_load_explicit(&s->tiers, memory_order_relaxed);
    uint32_t want = decode ? tiers_high(tiers) : tiers_low(tiers);
    int urgent = decode || prefill_ls(&me, ev->phase);
    if (me.pending_pctx == want && !me.urgent == !urgent)
        return (ds_decision){.kind = DS_DISPATCH_HERE};
    return (ds_decision){.kind = DS_DISPATCH_REMAP, .pctx = want, .urgent = urgent};
}

static int is_prefill_ls(const ds_vctx_state *st) { return prefill_ls(st, DS_PHASE_NONE); }

/* Where prefill's tier starts: prefill_sms's while a latency-sensitive
 * prefill is live, else ls_sms's. */
static uint32_t start_tiers(tpot_state *s, const ds_policy_view *view)
{
    return atomic_load(ds_policy_any(view, is_prefill_ls) ? &s->fixed_ls : &s->fixed);
}

/* The LOW tiers with a complement, by SM count: prefill's ladder (decode on
 * each one's complement); sizing starts on start_tiers's tier. */
static void build_ladder(tpot_state *s, const ds_policy_view *view, ds_sizing_config *cfg)
{
    ds_sizing_config_default(cfg);
    uint32_t nlev = ds_policy_low_ladder(view, s->lad_low, s->lad_high, DS_SIZING_MAX_LEVELS);
    s->nlev = cfg->nlev = nlev;
    for (uint32_t k = 0; k < nlev; k++)
        cfg->sms[k] = ds_view_pctx(view, s->lad_low[k])->sm_count;
    uint32_t start = tiers_low(start_tiers(s, view));
    while (cfg->start + 1 < nlev && s->lad_low[cfg->start] != start)
        cfg->start++;
}

static int is_decode(const ds_vctx_state *st) { return phase_of(st, DS_PHASE_NONE) == DS_PHASE_DECODE; }

/* Prefill on ladder level k (decode on its complement); `why` for the log. */
static void set_level(tpot_state *s, const ds_policy_view *view, int k, const char *why, uint64_t dec_req,
                      uint64_t dec_over)
{
    uint32_t was = atomic_load(&s->tiers), now = tiers_pack(s->lad_low[k], s->lad_high[k]);
    s->dec_req = dec_req, s->dec_over = dec_over;
    if (was == now)
        return;
    atomic_store(&s->tiers, now);
    ds_log_message(DS_LOG_INFO, "tpot_first: prefill tier %u -> %u SMs, decode %u SMs (%s)",
                   ds_view_pctx(view, tiers_low(was))->sm_count, ds_view_pctx(view, s->lad_low[k])->sm_count,
                   ds_view_pctx(view, s->lad_high[k])->sm_count, why);
    ds_policy_for_each(view, place, s);
}

/* Sizing starts again on level k (its budget full, its probes forgotten). */
static void restart_at(tpot_state *s, const ds_sizing_input *in, int k)
{
    ds_sizing_config cfg = s->z.cfg;
    cfg.start = (uint32_t)k;
    ds_sizing_init(&s->z, &cfg);
    ds_sizing_input first = *in;
    ds_sizing_step(&s->z, &first);
}

/* Sizes prefill's tier from its TTFT attainment, TPOT first (the file's
 * comment); nothing while no latency-sensitive prefill records requests. */
static void tpot_tick(void *st, const ds_policy_view *view, double now_us)
{
    tpot_state *s = st;
    ds_sizing_input pf = {0}, dec = {0};
    ds_policy_sum_requests(view, is_decode, &dec);
    if (atomic_exchange(&s->reset, 0)) {
        ds_sizing_config cfg;
        build_ladder(s, view, &cfg);
        ds_sizing_init(&s->z, &cfg);
        s->dec_req = dec.req, s->dec_over = dec.over;
        s->cap = -1;
        uint32_t start = start_tiers(s, view);
        if (atomic_exchange(&s->tiers, start) != start)
            ds_policy_for_each(view, place, s); /* prefill and decode to the start's tiers */
    }
    if (s->nlev < 2 || !ds_policy_sum_requests(view, is_prefill_ls, &pf))
        return;
    double share = 1.0 - s->z.cfg.target, n = (double)(dec.req - s->dec_req), late = (double)(dec.over - s->dec_over);
    int lvl = ds_sizing_level(&s->z);
    pf.now_us = now_us;
    if (lvl > 0 && n >= TPOT_MISS_MIN && ds_sizing_clearly_over(share, n, late, TPOT_MISS_SD)) {
        restart_at(s, &pf, lvl - 1); /* TPOT first: prefill gives decode a step, and grows no further */
        s->cap = lvl - 1, s->cap_req = dec.req, s->cap_over = dec.over;
        set_level(s, view, lvl - 1, "decode misses its TPOT target", dec.req, dec.over);
        return;
    }
    double cn = (double)(dec.req - s->cap_req), clate = (double)(dec.over - s->cap_over);
    if (s->cap >= 0 && cn >= TPOT_CAP_HOLD && !ds_sizing_clearly_over(share, cn, clate, 1.0))
        s->cap = -1; /* decode met its target for a while: prefill may grow again */
    pf.phase = DS_SIZING_JUDGE;
    ds_sizing_action a = ds_sizing_step(&s->z, &pf);
    if ((a.kind == DS_SIZING_UP || a.kind == DS_SIZING_CAP_UP) && s->cap >= 0 && a.to > s->cap) {
        restart_at(s, &pf, a.from); /* held at the cap: sizing goes on from where it is */
        return;
    }
    switch (a.kind) {
    case DS_SIZING_START: set_level(s, view, a.to, "start", dec.req, dec.over); break;
    case DS_SIZING_UP:
    case DS_SIZING_CAP_UP: set_level(s, view, a.to, "prefill misses its TTFT target", dec.req, dec.over); break;
    case DS_SIZING_DOWN:
    case DS_SIZING_CAP_CHECK: set_level(s, view, a.to, "prefill has headroom", dec.req, dec.over); break;
    default: break;
    }
}

const ds_policy_ops ds_builtin_tpot_first = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "tpot_first",
    .init = tpot_init,
    .fini = tpot_fini,
    .on_activate = tpot_activate,
    .on_vctx_create = tpot_create,
    .on_launch = tpot_launch,
    .on_tick = tpot_tick,
    .tick_us = 1000,
    .params = tpot_params,
    .num_params = P_COUNT,
    .on_param = tpot_param,
};
