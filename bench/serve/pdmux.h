/*
 * pdmux_static: SGLang's prefill/decode multiplexing on green contexts, as a
 * libdetshare policy plug-in (registered with ds_policy_register, built on the
 * public headers only), so the serve benchmark compares it with the library's
 * own policies on the same engine and the same pool.
 *
 * Followed: sgl-project/sglang, python/sglang/srt/multiplex/pdmux_context.py
 * (commit e5988975a9f3819425d3822b7b16f31a007e854f: divide_sm,
 * initialize_stream_groups) and multiplexing_mixin.py (commit
 * 03dff85f5100bcb788f43b068cee6429510844f5: adjust_stream_groups,
 * event_loop_pdmux). With the default sm_group_num 8 there are G = 8 stream
 * groups: group 0 = (whole GPU, whole GPU) for prefill-only iterations,
 * groups 1 .. G-2 = the divide_sm splits (prefill SMs, decode SMs), largest
 * prefill share first (112/20, 104/28, ..., 72/60 on 132 SMs), group G-1 =
 * (whole GPU, whole GPU) for decode-only iterations. While a prefill batch
 * and a decode batch are both live the group is
 *     max(1, min(G - 2, decode_bs * (G - 2) // decode_bs_divisor))
 * (decode_bs_divisor 36); decode only -> G - 1; nothing running -> 0.
 * SGLang re-chooses the group when a prefill batch starts, when one finishes
 * and when the running batch empties; so does the serve benchmark
 * (pdmux_adjust). SGLang synchronizes both streams at each change; here the
 * runtime moves each vCtx at its next kernel boundary instead, which can only
 * help the baseline.
 *
 * Vectors: vCtxs with phase DS_PHASE_PREFILL run on the group's prefill pCtx,
 * DS_PHASE_DECODE on its decode pCtx, anything else (a co-located trainer) on
 * the whole GPU; all at normal stream priority, as SGLang's streams are.
 */
#ifndef SERVE_PDMUX_H
#define SERVE_PDMUX_H

#include <stdatomic.h>
#include <stdint.h>

#include <detshare/detshare.h>

#define PDMUX_SM_GROUP_NUM 8      /* PDMuxConfig.sm_group_num default */
#define PDMUX_DECODE_BS_DIVISOR 36 /* PDMuxConfig.decode_bs_divisor default */
#define PDMUX_POLICY_NAME "pdmux_static"

typedef struct pdmux {
    uint32_t groups;                         /* G: stream groups, whole-GPU ones included */
    uint32_t prefill_sms[PDMUX_SM_GROUP_NUM]; /* per group */
    uint32_t decode_sms[PDMUX_SM_GROUP_NUM];
    uint32_t prefill_pctx[PDMUX_SM_GROUP_NUM]; /* pool index per group */
    uint32_t decode_pctx[PDMUX_SM_GROUP_NUM];
    uint32_t full_pctx;
    _Atomic uint32_t group;   /* the current stream group */
    _Atomic uint64_t changes; /* group changes so far */
} pdmux;

/**
 * SGLang's divide_sm for compute capability 9.x (8 SMs minimum per part,
 * multiples of 8): prefill shares x with x >= total - x and total - x >= 16,
 * thinned to at most `parts`, largest prefill first. Writes up to `parts`
 * prefill SM counts to out and returns how many (0: none possible).
 */
uint32_t pdmux_divide_sm(uint32_t total_sms, uint32_t parts, uint32_t *out);

/**
 * The pool tiers pdmux_static needs beside `base` (which it copies first):
 * for each divide_sm split a LOW tier of the prefill SMs and a HIGH tier of
 * the decode SMs. Returns the number written to out (<= cap), 0 if cap is too
 * small.
 */
uint32_t pdmux_pool_tiers(uint32_t total_sms, const ds_tier_spec *base, uint32_t nbase, ds_tier_spec *out,
                          uint32_t cap);

/** Finds the groups' pCtxs in rt's pool and registers the policy (not made
 *  active). 0, or -1 after printing what is missing. */
int pdmux_register(ds_runtime_t rt, pdmux *p);

/** SGLang's adjust_stream_groups: the group for a decode batch of decode_bs
 *  requests (0: none running) with or without a prefill batch live. */
uint32_t pdmux_group_for(const pdmux *p, uint32_t decode_bs, int prefill_live);

/** Makes `group` current: each vCtx moves to its pCtx of the group at its next
 *  kernel boundary. */
void pdmux_set_group(pdmux *p, uint32_t group);

#endif /* SERVE_PDMUX_H */
