/*
 * The baselines, expressed as policies so they run side by side with the
 * reference policies in one binary (docs/benchmarks.md, W1/W2):
 *   manual   - the runtime never moves a vCtx (bindings only via ds_vctx_remap)
 *   shared   - everyone on the whole GPU, same stream priority (MPS-like)
 *   priority - whole GPU, latency-sensitive vCtxs on the highest stream priority
 *   static   - LS on a fixed LOW tier, BE on its complement, never changed (MIG-like)
 *   temporal - one vCtx on the GPU at a time, switched at kernel boundaries
 */
#include <stdlib.h>

#include "policy/builtin.h"

static ds_decision here(void) { return (ds_decision){.kind = DS_DISPATCH_HERE}; }

static ds_decision on_launch_here(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)st;
    (void)view;
    (void)ev;
    return here();
}

void ds__place_all(const ds_policy_view *view, void (*place_one)(const ds_policy_view *, struct ds_vctx *))
{
    ds_vctx_t vs[256];
    uint32_t n = ds_view_vctxs(view, vs, 256);
    for (uint32_t i = 0; i < n && i < 256; i++)
        place_one(view, vs[i]);
}

/* ---- manual ------------------------------------------------------------- */

const ds_policy_ops ds__policy_manual = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "manual",
    .on_launch = on_launch_here,
};

/* ---- shared / priority -------------------------------------------------- */

static void place_shared(const ds_policy_view *view, struct ds_vctx *v)
{
    ds__place(v, ds_view_full_pctx(view), 0, 0);
}

static void place_priority(const ds_policy_view *view, struct ds_vctx *v)
{
    ds__place(v, ds_view_full_pctx(view), v->cls == DS_CLASS_LATENCY_SENSITIVE, 0);
}

static void shared_activate(void *st, const ds_policy_view *view)
{
    (void)st;
    ds__place_all(view, place_shared);
}

static void shared_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)st;
    place_shared(view, v);
}

static void priority_activate(void *st, const ds_policy_view *view)
{
    (void)st;
    ds__place_all(view, place_priority);
}

static void priority_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)st;
    place_priority(view, v);
}

const ds_policy_ops ds__policy_shared = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "shared",
    .on_activate = shared_activate,
    .on_vctx_create = shared_create,
    .on_launch = on_launch_here,
};

const ds_policy_ops ds__policy_priority = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "priority",
    .on_activate = priority_activate,
    .on_vctx_create = priority_create,
    .on_launch = on_launch_here,
};

/* ---- static ------------------------------------------------------------- */

static void place_static(const ds_policy_view *view, struct ds_vctx *v)
{
    uint32_t low, high;
    ds__ls_tiers(DS__RT(view), DS__RT(view)->ls_sms, &low, &high);
    ds__place(v, v->cls == DS_CLASS_LATENCY_SENSITIVE ? low : high, 0, 0);
}

static void static_activate(void *st, const ds_policy_view *view)
{
    (void)st;
    ds__place_all(view, place_static);
}

static void static_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)st;
    place_static(view, v);
}

const ds_policy_ops ds__policy_static = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "static",
    .on_activate = static_activate,
    .on_vctx_create = static_create,
    .on_launch = on_launch_here,
};

/* ---- temporal ------------------------------------------------------------
 * One owner at a time. The owner keeps the GPU until another vCtx wants it
 * and either the owner's slice (be_window_us) has passed or the owner is idle;
 * each vCtx's window is one slice, so a turn on the device lasts at most about
 * two slices (the slice plus the drain of what was queued in it).
 * A vCtx that is not the owner is held until the previous owner's work has
 * drained (every launch is marked: track_all), then takes ownership.
 * Revoking an idle owner races with that owner starting a launch; both sides
 * use the Dekker pattern on (owner, v->launching) with sequentially consistent
 * atomics, so exactly one of them proceeds. */

typedef struct temporal {
    _Atomic(struct ds_vctx *) owner;
    _Atomic(struct ds_vctx *) last;   /* previous owner, whose work must drain */
    _Atomic(struct ds_vctx *) want;   /* a vCtx waiting for the GPU */
    _Atomic double since_us;          /* when the owner took the GPU */
} temporal;

static ds_status temporal_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    (void)rt;
    temporal *t = calloc(1, sizeof *t);
    if (!t)
        return DS_ERR_OUT_OF_MEMORY;
    *state = t;
    return DS_SUCCESS;
}

static void temporal_fini(void *state) { free(state); }

static void place_temporal(const ds_policy_view *view, struct ds_vctx *v)
{
    DS__ST(v->track_all, 1);
    /* The slice is kept on the host, at launch; a window of one slice keeps
     * what the owner queued within it from running on long after it. */
    ds__place(v, ds_view_full_pctx(view), 0, DS__RT(view)->be_window_us);
}

static void temporal_activate(void *st, const ds_policy_view *view)
{
    temporal *t = st;
    atomic_store(&t->owner, NULL);
    atomic_store(&t->want, NULL);
    atomic_store(&t->last, NULL);
    ds__place_all(view, place_temporal);
}

static void temporal_create(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)st;
    place_temporal(view, v);
}

static void temporal_destroy(void *st, const ds_policy_view *view, ds_vctx_t v)
{
    (void)view;
    temporal *t = st;
    struct ds_vctx *x = v;
    atomic_compare_exchange_strong(&t->owner, &x, NULL);
    x = v;
    atomic_compare_exchange_strong(&t->last, &x, NULL);
    x = v;
    atomic_compare_exchange_strong(&t->want, &x, NULL);
}

static ds_decision hold_for(struct ds_vctx *w)
{
    return (ds_decision){.kind = DS_DISPATCH_HOLD, .wait_for = w, .hold_us = 20};
}

static ds_decision temporal_launch(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    temporal *t = st;
    struct ds_vctx *v = ev->vctx;
    uint32_t slice = DS__RT(view)->be_window_us;
    struct ds_vctx *o = atomic_load(&t->owner);
    if (o == v) {
        struct ds_vctx *w = atomic_load(&t->want);
        if (!w || w == v || ds_view_now_us(view) - atomic_load(&t->since_us) < slice)
            return here();
        /* Slice over and someone waits: hand over at this boundary. */
        atomic_store(&t->last, v);
        atomic_store(&t->owner, NULL);
        return hold_for(NULL);
    }
    if (o) {
        /* The owner may be idle: revoke it unless it is starting a launch. */
        ds__harvest(o);
        if (!o->launching && !ds__busy(o)) {
            struct ds_vctx *exp = o;
            if (atomic_compare_exchange_strong(&t->owner, &exp, NULL)) {
                if (atomic_load(&o->launching)) {
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
    struct ds_vctx *w = atomic_load(&t->want);
    if (w && w != v && w->magic == DS__VCTX_MAGIC)
        return hold_for(NULL);
    /* Wait for the last owner's work, then take the GPU. */
    struct ds_vctx *last = atomic_load(&t->last);
    if (last && last != v) {
        ds__harvest(last);
        if (ds__busy(last))
            return hold_for(last);
    }
    struct ds_vctx *none = NULL;
    if (!atomic_compare_exchange_strong(&t->owner, &none, v))
        return hold_for(NULL);
    atomic_store(&t->since_us, ds_view_now_us(view));
    struct ds_vctx *me = v;
    atomic_compare_exchange_strong(&t->want, &me, NULL);
    return here();
}

const ds_policy_ops ds__policy_temporal = {
    .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION,
    .name = "temporal",
    .init = temporal_init,
    .fini = temporal_fini,
    .on_activate = temporal_activate,
    .on_vctx_create = temporal_create,
    .on_vctx_destroy = temporal_destroy,
    .on_launch = temporal_launch,
};

/* ---- shared helpers ------------------------------------------------------ */

void ds__ls_tiers(struct ds_runtime *rt, uint32_t sms, uint32_t *low, uint32_t *high)
{
    int32_t l = ds_view_low_tier((const ds_policy_view *)rt, sms);
    if (l < 0 || rt->pctx[l].complement < 0) {
        *low = *high = rt->full_pctx; /* a pool without LOW tiers: nothing to split */
        return;
    }
    *low = (uint32_t)l;
    *high = (uint32_t)rt->pctx[l].complement;
}
