/*
 * The baselines, expressed as policies so they run side by side with the
 * reference policies in one binary (docs/benchmarks.md, W1/W2):
 *   manual   - the runtime never moves a vCtx (bindings only via ds_vctx_remap)
 *   shared   - everyone on the whole GPU, same stream priority (MPS-like)
 *   priority - whole GPU, latency-sensitive vCtxs on the highest stream priority
 *   static   - LS on a fixed LOW tier, BE on its complement, never changed (MIG-like)
 *   temporal - one vCtx on the GPU at a time, switched at kernel boundaries
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

static ds_decision here(void) { return (ds_decision){.kind = DS_DISPATCH_HERE}; }

static ds_decision on_launch_here(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)st;
    (void)view;
    (void)ev;
    return here();
}

static int is_ls(const ds_policy_view *view, ds_vctx_t v)
{
    ds_vctx_state vs;
    return ds_policy_state(view, v, &vs) && vs.cls == DS_CLASS_LATENCY_SENSITIVE;
}

/* ---- manual ------------------------------------------------------------- */

const ds_policy_ops ds_builtin_manual = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "manual",
    .on_launch = on_launch_here,
};

/* ---- shared / priority -------------------------------------------------- */

static void place_shared(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)st;
    ds_vctx_place(v, ds_view_full_pctx(view), 0, 0);
}

static void place_priority(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)st;
    ds_vctx_place(v, ds_view_full_pctx(view), is_ls(view, v), 0);
}

static void shared_activate(void *st, const ds_policy_view *view) { ds_policy_for_each(view, place_shared, st); }

static void priority_activate(void *st, const ds_policy_view *view)
{
    ds_policy_for_each(view, place_priority, st);
}

const ds_policy_ops ds_builtin_shared = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "shared",
    .on_activate = shared_activate,
    .on_vctx_create = place_shared,
    .on_launch = on_launch_here,
};

const ds_policy_ops ds_builtin_priority = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "priority",
    .on_activate = priority_activate,
    .on_vctx_create = place_priority,
    .on_launch = on_launch_here,
};

/* ---- static ------------------------------------------------------------- */

typedef struct static_state {
    _Atomic uint32_t tiers; /* tiers_pack(LS tier, its complement) */
    _Atomic uint32_t gen;   /* bumped by each ls_sms; placed: the one the vCtxs were placed for */
    _Atomic uint32_t placed;
    _Atomic uint32_t ls_whole; /* LS urgent on the whole GPU (BE stays on the complement) */
} static_state;

enum { STATIC_LS_SMS, STATIC_LS_WHOLE_GPU }; /* static_params' indices */

static const ds_policy_param static_params[] = {
    {.name = "ls_sms", .help = "SMs of the latency-sensitive LOW tier: the LOW tier nearest this count; BE gets "
                               "its complement",
     .def = 64, .min = 1, .max = 256, .integer = 1},
    {.name = "ls_whole_gpu", .help = "1: LS runs urgent (greatest stream priority) on the whole GPU instead of its "
                                     "LOW tier, BE stays on the complement: LS keeps ls_sms SMs to itself and has "
                                     "priority over BE on the rest",
     .def = 0, .min = 0, .max = 1, .integer = 1},
};

static ds_status static_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    (void)rt;
    static_state *s = calloc(1, sizeof *s);
    if (!s)
        return DS_ERR_OUT_OF_MEMORY;
    *state = s;
    return DS_SUCCESS;
}

static void static_fini(void *state) { free(state); }

static void static_param(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    static_state *s = st;
    if (index == STATIC_LS_WHOLE_GPU) {
        atomic_store(&s->ls_whole, value != 0);
        atomic_fetch_add(&s->gen, 1);
        return;
    }
    if (index != STATIC_LS_SMS)
        return;
    uint32_t low, high;
    ds_policy_ls_tiers(view, (uint32_t)value, &low, &high);
    atomic_store(&s->tiers, tiers_pack(low, high));
    atomic_fetch_add(&s->gen, 1); /* the next launch while active places every vCtx again */
}

static void place_static(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    static_state *s = st;
    uint32_t tiers = atomic_load(&s->tiers);
    if (!is_ls(view, v))
        ds_vctx_place(v, tiers_high(tiers), 0, 0);
    else if (atomic_load(&s->ls_whole))
        ds_vctx_place(v, ds_view_full_pctx(view), 1, 0);
    else
        ds_vctx_place(v, tiers_low(tiers), 0, 0);
}

static void static_activate(void *st, const ds_policy_view *view)
{
    static_state *s = st;
    atomic_store(&s->placed, atomic_load(&s->gen));
    ds_policy_for_each(view, place_static, st);
}

/* An ls_sms set while static is active applies from the next launch: every
 * vCtx is placed on the new tiers (one relaxed load per launch otherwise).
 * Before, a new value reached only vCtxs created after it, so a benchmark
 * that activated static and then set ls_sms ran on the previous tiers. */
static ds_decision static_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)ev;
    static_state *s = st;
    uint32_t gen = atomic_load_explicit(&s->gen, memory_order_relaxed);
    uint32_t placed = atomic_load_explicit(&s->placed, memory_order_relaxed);
    if (gen != placed && atomic_compare_exchange_strong(&s->placed, &placed, gen))
        ds_policy_for_each(view, place_static, st);
    return (ds_decision){.kind = DS_DISPATCH_HERE};
}

const ds_policy_ops ds_builtin_static = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "static",
    .init = static_init,
    .fini = static_fini,
    .on_activate = static_activate,
    .on_vctx_create = place_static,
    .on_launch = static_launch,
    .params = static_params,
    .num_params = sizeof static_params / sizeof static_params[0],
    .on_param = static_param,
};

/* ---- temporal ------------------------------------------------------------
 * One owner at a time. The owner keeps the GPU until another vCtx wants it
 * and either the owner's slice (be_window_us) has passed or the owner is idle;
 * each vCtx's window is one slice, so a turn on the device lasts at most about
 * two slices (the slice plus the drain of what was queued in it).
 * A vCtx that is not the owner is held until the previous owner's work has
 * drained (every unit is marked: ds_vctx_set_track_all), then takes
 * ownership. Revoking an idle owner races with that owner starting a launch;
 * both sides use the Dekker pattern on (owner, the owner's
 * ds_vctx_state::launching) with sequentially consistent atomics, so exactly
 * one of them proceeds. */

typedef struct temporal {
    _Atomic(ds_vctx_t) owner;
    _Atomic(ds_vctx_t) last;  /* previous owner, whose work must drain */
    _Atomic(ds_vctx_t) want;  /* a vCtx waiting for the GPU */
    _Atomic double since_us;  /* when the owner took the GPU */
    _Atomic uint32_t slice_us;
} temporal;

static const ds_policy_param temporal_params[] = {
    {.name = "be_window_us", .help = "time slice (us): the owner keeps the GPU this long while another vCtx "
                                     "waits; also each vCtx's window",
     .def = 2000, .min = 1, .max = 1e9, .integer = 1},
};

static ds_status temporal_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    (void)rt;
    temporal *t = calloc(1, sizeof *t);
    if (!t)
        return DS_ERR_OUT_OF_MEMORY;
    atomic_init(&t->slice_us, 2000);
    *state = t;
    return DS_SUCCESS;
}

static void temporal_fini(void *state) { free(state); }

static void temporal_param(void *st, const ds_policy_view *view, uint32_t index, double value)
{
    (void)view;
    temporal *t = st;
    if (index == 0)
        atomic_store(&t->slice_us, (uint32_t)value);
}

static void place_temporal(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    temporal *t = st;
    ds_vctx_set_track_all(v, 1);
    /* The slice is kept on the host, at launch; a window of one slice keeps
     * what the owner queued within it from running on long after it. */
    ds_vctx_place(v, ds_view_full_pctx(view), 0, atomic_load_explicit(&t->slice_us, memory_order_relaxed));
}

static void temporal_activate(void *st, const ds_policy_view *view)
{
    temporal *t = st;
    atomic_store(&t->owner, NULL);
    atomic_store(&t->want, NULL);
    atomic_store(&t->last, NULL);
    ds_policy_for_each(view, place_temporal, st);
}

static void temporal_destroy(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)view;
    temporal *t = st;
    ds_vctx_t x = v;
    atomic_compare_exchange_strong(&t->owner, &x, NULL);
    x = v;
    atomic_compare_exchange_strong(&t->last, &x, NULL);
    x = v;
    atomic_compare_exchange_strong(&t->want, &x, NULL);
}

static ds_decision hold_for(ds_vctx_t w)
{
    return (ds_decision){.kind = DS_DISPATCH_HOLD, .wait_for = w, .hold_us = 20};
}

static ds_decision temporal_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    temporal *t = st;
    ds_vctx_t v = ev->vctx;
    ds_vctx_t o = atomic_load(&t->owner);
    if (o == v) {
        ds_vctx_t w = atomic_load(&t->want);
        if (!w || w == v ||
            ds_view_now_us(view) - atomic_load(&t->since_us) <
                atomic_load_explicit(&t->slice_us, memory_order_relaxed))
            return here();
        /* Slice over and someone waits: hand over at this boundary. */
        atomic_store(&t->last, v);
        atomic_store(&t->owner, NULL);
        return hold_for(NULL);
    }
    ds_vctx_state os;
    if (o) {
        /* The owner may be idle: revoke it unless it is starting a launch.
         * Idle but not yet known idle (its last mark not harvested) counts as
         * busy: the hold below waits for that mark, and the next ask sees it. */
        if (ds_policy_state(view, o, &os) && !os.launching && !os.busy) {
            ds_vctx_t exp = o;
            if (atomic_compare_exchange_strong(&t->owner, &exp, NULL)) {
                if (ds_policy_state(view, o, &os) && os.launching) {
                    exp = NULL;
                    atomic_compare_exchange_strong(&t->owner, &exp, o); /* it won: give back */
                } else {
                    atomic_store(&t->last, o);
                }
            }
        }
        atomic_store(&t->want, v);
        return hold_for(atomic_load(&t->owner) ? o : NULL);
    }
    /* Nobody owns the GPU. A vCtx that has been waiting goes first, so that a
     * tenant that just handed over cannot take the GPU straight back. */
    ds_vctx_t w = atomic_load(&t->want);
    if (w && w != v && ds_policy_state(view, w, &os))
        return hold_for(NULL);
    /* Wait for the last owner's work, then take the GPU. */
    ds_vctx_t last = atomic_load(&t->last);
    if (last && last != v && ds_policy_state(view, last, &os) && os.busy)
        return hold_for(last);
    ds_vctx_t none = NULL;
    if (!atomic_compare_exchange_strong(&t->owner, &none, v))
        return hold_for(NULL);
    atomic_store(&t->since_us, ds_view_now_us(view));
    ds_vctx_t me = v;
    atomic_compare_exchange_strong(&t->want, &me, NULL);
    return here();
}

const ds_policy_ops ds_builtin_temporal = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "temporal",
    .init = temporal_init,
    .fini = temporal_fini,
    .on_activate = temporal_activate,
    .on_vctx_create = place_temporal,
    .on_vctx_destroy = temporal_destroy,
    .on_launch = temporal_launch,
    .params = temporal_params,
    .num_params = sizeof temporal_params / sizeof temporal_params[0],
    .on_param = temporal_param,
};
