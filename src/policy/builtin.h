/*
 * Built-in policies. They are ordinary ds_policy_ops tables registered at
 * runtime creation, written against the public plug-in ABI
 * (<detshare/policy.h>) alone, as a policy from outside the library would be.
 * The helpers below are shared by them and use nothing else either.
 */
#ifndef DS_POLICY_BUILTIN_H
#define DS_POLICY_BUILTIN_H

#include <stdint.h>

#include <detshare/policy.h>

/* NULL-terminated, in registration order (builtin.c). */
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

/* Most vCtxs a built-in policy looks at in one decision. */
#define DS__POLICY_MAX_VCTX 256

/* Live vCtxs (ds_view_vctxs), at most DS__POLICY_MAX_VCTX of them. */
uint32_t ds__policy_vctxs(const ds_policy_view *view, ds_vctx_t vs[DS__POLICY_MAX_VCTX]);

/* Snapshot of a vCtx (ds_view_vctx_state): nonzero if the vCtx is live (or
 * being created, from on_vctx_create), 0 if it is gone. */
int ds__policy_vctx_state(const ds_policy_view *view, ds_vctx_t v, ds_vctx_state *out);

/* Applies `place_one` to every live vCtx (policy activation). */
void ds__policy_place_all(void *state, const ds_policy_view *view,
                          void (*place_one)(void *state, const ds_policy_view *view, ds_vctx_t v));

/* The latency-sensitive tier for `sms` SMs and its complement: the LOW tier
 * nearest in SM count and the pCtx made of the other groups. A pool without
 * such a pair gives the whole GPU for both (nothing to split). */
void ds__policy_ls_tiers(const ds_policy_view *view, uint32_t sms, uint32_t *low, uint32_t *high);

/* A (low, high) pair of pool indices (< DS_MAX_PCTX) in one word, so that a
 * policy can publish both with one atomic store. */
static inline uint32_t ds__policy_tiers_pack(uint32_t low, uint32_t high) { return low | high << 16; }
static inline uint32_t ds__policy_tiers_low(uint32_t packed) { return packed & 0xffffu; }
static inline uint32_t ds__policy_tiers_high(uint32_t packed) { return packed >> 16; }

#endif
