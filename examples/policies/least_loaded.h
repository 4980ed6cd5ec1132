/* least_loaded: a libdetshare policy plug-in written against the installed
 * public headers only (<detshare/detshare.h>, <detshare/policy.h>).
 *
 * It splits the GPU in two disjoint halves, the pool's LOW tier nearest
 * split_sms and its HIGH complement, and places every vCtx on one of them:
 *
 *  - a vCtx that is not yet on either half (a new one starts on the whole
 *    GPU) is moved there at its first kernel: to the half with the least
 *    predicted work in flight (the sum of ds_vctx_view::inflight_us of the
 *    other vCtxs bound or moving there); on a tie the half with fewer vCtxs,
 *    then the one with more SMs;
 *  - a latency-sensitive vCtx (DS_CLASS_LATENCY_SENSITIVE) runs on its
 *    urgent stream (the device's highest stream priority), so its blocks go
 *    ahead of best-effort work queued on the same half; the others on their
 *    normal stream;
 *  - a vCtx already on a half stays there: placement is decided once, when
 *    the vCtx starts, so its work is never moved under it;
 *  - activated on a live runtime, it places the vCtxs that are not on a half
 *    yet the same way, one after the other.
 *
 * When the pool has no such pair (custom ds_runtime_config::tiers), every
 * vCtx runs on the whole GPU, latency-sensitive ones on the urgent stream.
 *
 * Use: least_loaded_register(rt, 0), then ds_runtime_set_policy(rt,
 * LEAST_LOADED_NAME). examples/policies/main.c shows it on the simulated
 * device, README.md there how to build it outside the tree.
 */
#ifndef LEAST_LOADED_H
#define LEAST_LOADED_H

#include <stdint.h>

#include <detshare/detshare.h>

/** The name the policy registers under (ds_runtime_set_policy()). */
#define LEAST_LOADED_NAME "least_loaded"

/**
 * Registers "least_loaded" with rt (it does not activate it).
 * split_sms: SMs wanted on the LOW half (the nearest LOW tier of the pool is
 * taken); 0 = half of the whole-GPU pCtx's SMs.
 * Returns ds_policy_register()'s status (DS_ERR_ALREADY_EXISTS if registered
 * already, DS_ERR_OUT_OF_MEMORY if its state cannot be allocated).
 */
ds_status least_loaded_register(ds_runtime_t rt, uint32_t split_sms);

#endif /* LEAST_LOADED_H */
