/*
 * Built-in policies. They are ordinary ds_policy_ops tables registered at
 * runtime creation, but being in-tree they may read the runtime's tunables and
 * use the two internal helpers below.
 */
#ifndef DS_POLICY_BUILTIN_H
#define DS_POLICY_BUILTIN_H

#include "core/runtime.h"

/* NULL-terminated; registry.c registers them in this order. */
extern const ds_policy_ops *const ds__builtin_policies[];

extern const ds_policy_ops ds__policy_manual;
extern const ds_policy_ops ds__policy_shared;
extern const ds_policy_ops ds__policy_priority;
extern const ds_policy_ops ds__policy_static;
extern const ds_policy_ops ds__policy_temporal;
extern const ds_policy_ops ds__policy_slo_aware;
extern const ds_policy_ops ds__policy_slo_aware_nogates;
extern const ds_policy_ops ds__policy_tpot_first;
extern const ds_policy_ops ds__policy_balance;

#define DS__RT(view) ((struct ds_runtime *)(view))

/* Requests a binding (pCtx + urgent stream) and a window in one step. */
static inline void ds__place(struct ds_vctx *v, uint32_t pctx, int urgent, uint32_t window_us)
{
    atomic_store_explicit(&v->window_us, window_us, memory_order_relaxed);
    atomic_store_explicit(&v->pending, DS__BIND(pctx, urgent), memory_order_release);
}

/* Gate interval (DS_GATES_NONE: none), also for a vCtx being created (whose
 * handle the public ds_vctx_set_gate_interval does not accept yet). Only
 * called by policies of a runtime whose gates are on. */
static inline void ds__set_gates(struct ds_vctx *v, uint32_t interval_us) { ds__gate_interval_set(v, interval_us); }

/* Work submitted and not known finished, in predicted us (>= 0). */
static inline double ds__inflight(const struct ds_vctx *v)
{
    double d = atomic_load_explicit(&v->submitted_us, memory_order_relaxed) -
               atomic_load_explicit(&v->completed_us, memory_order_relaxed);
    return d > 0 ? d : 0;
}

/* True when marks of the vCtx are still pending or a section is open. Exact
 * for vCtxs with track_all (a mark after every launch), a lower bound else. */
static inline int ds__busy(const struct ds_vctx *v)
{
    return atomic_load_explicit(&v->marks_pending, memory_order_relaxed) > 0 ||
           DS__LD(v->section_open);
}

/* Applies `place_one` to every live vCtx (policy activation). */
void ds__place_all(const ds_policy_view *view, void (*place_one)(const ds_policy_view *, struct ds_vctx *));

/* LS tier and its complement from the runtime's ls_sms tunable. */
void ds__ls_tiers(struct ds_runtime *rt, uint32_t sms, uint32_t *low, uint32_t *high);

#endif
