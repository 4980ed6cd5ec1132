/*
 * What the files of slo_aware share: the policy's state, the scan of the
 * live vCtxs that a decision works from, the small reads every rule uses, and
 * the functions one file calls in another. The files stand in floors:
 * slo_aware.c (the hooks) calls slo_aware_tiers.c (the LS tier's size), which
 * calls slo_aware_modes.c (when BE may share LS's SMs), and each of them calls
 * slo_aware_place.c (the scans and placements), which calls none of them.
 * Internal to the policy: hidden like every name of src/policy/ but the
 * ds_builtin_ tables, and written against the public view alone (policy.h).
 */
#ifndef DS_POLICY_SLO_STATE_H
#define DS_POLICY_SLO_STATE_H

#include <stdatomic.h>
#include <stdint.h>

#include <detshare/policy.h>

#include "sizing.h"

/* A (low, high) pair of pool indices (< DS_MAX_PCTX) in one word, published
 * with one atomic store. */
static inline uint32_t tiers_pack(uint32_t low, uint32_t high) { return low | high << 16; }
static inline uint32_t tiers_low(uint32_t packed) { return packed & 0xffffu; }
static inline uint32_t tiers_high(uint32_t packed) { return packed >> 16; }

typedef struct slo_state {
    _Atomic int confined;
    _Atomic uint32_t tiers;       /* tiers_pack(LS tier, its complement): what placements use */
    _Atomic uint32_t fixed_tiers; /* the ls_sms tier and its complement */
    _Atomic uint32_t decode_tiers; /* the decode_sms tier and its complement (start_tiers) */
    _Atomic uint32_t idle_us, be_window_us, gate_interval_us;
    _Atomic uint32_t right_size, shrink_requests, dwell_us;
    _Atomic uint32_t prefill_whole; /* LS prefill: prefill_pctx(), prefill_urgent() */
    _Atomic uint32_t prefill_press; /* LS prefill's overdrawn TTFT budget presses LS's tier down */
    _Atomic uint32_t reserve_allowed; /* the reserve parameter: 0, reserve mode never (choose_mode) */
    double pf_budget;               /* LS prefill's error budget (tick only; prefill_pressed) */
    uint64_t pf_req, pf_over;       /* its request counts when last updated */
    uint64_t pf_start_req, pf_start_over; /* ... when sizing started */
    _Atomic double target;
    _Atomic int reset;    /* sizing restarts at the next tick */
    _Atomic int unsettled; /* a BE vCtx may still be bound off the complement: LS launches check */
    _Atomic double left_us;    /* BE's work queued before it rebound on the complement has passed its window
                                  (runtime clock: the tick that saw it bound there plus its window) */
    _Atomic double settled_us; /* ... and has run (plus its longest unit) */
    _Atomic double drain_until_us; /* BE confined from the whole GPU: its gated leftovers there may run until */
    _Atomic int ls_track;          /* LS vCtxs have track_all on (this policy set it) */
    _Atomic int moving;            /* a step up waits for BE to leave the SMs LS gains (written by the tick);
                                      BE's window is then half of be_window_us alone */
    _Atomic double track_since_us; /* runtime clock when ls_track was last turned on */
    _Atomic int may_expand;        /* the units of BE vCtxs active lately fit half of LS's slack at best
                                      (resume_be, each tick) */
    _Atomic int reserve;           /* LS urgent on the whole GPU, BE on the complement (see choose_mode) */
    _Atomic int mode_restart;      /* activation: choose_mode measures LS again (busy share, requests) */
    int top_missed;                /* LS grew past its largest tier's reach (size_ls; tick only): reserve */
    uint64_t top_base_over;        /* ... and of them over their SLO */
    uint64_t top_base;             /* LS's requests (summed) at activation: ls_misses_on_top counts from it
                                      (UINT64_MAX: not read yet) */
    double busy_share;             /* LS's share of time serving requests, decaying (choose_mode; tick only) */
    double busy_sum_us, time_sum_us; /* its decaying sums: time serving requests, time */
    double busy_at_us;             /* runtime clock of its last update (-1: none yet) */
    double busy_logged_us;         /* runtime clock of its last debug line */
    uint32_t busy_n;               /* LS vCtxs and their request counts at that update */
    ds_vctx_t busy_vs[DS_POLICY_LIST_MAX];
    uint64_t busy_req[DS_POLICY_LIST_MAX];
    int want_gates; /* BE yields through gates (not in slo_aware_nogates); needs the runtime's gates on */
    ds_sizing sz;     /* the sizing rule's state: written by the tick only, restarted through `reset` */
    uint32_t lad_low[DS_SIZING_MAX_LEVELS], lad_high[DS_SIZING_MAX_LEVELS]; /* its ladder: LS's tier, BE's */
} slo_state;

static inline int gates_on(const slo_state *s, const ds_policy_view *view)
{
    return s->want_gates && ds_view_gate_mode(view) != DS_GATES_OFF;
}

static inline uint32_t tiers(slo_state *s) { return atomic_load_explicit(&s->tiers, memory_order_relaxed); }
static inline uint32_t low_tier(slo_state *s) { return tiers_low(tiers(s)); }
static inline uint32_t high_tier(slo_state *s) { return tiers_high(tiers(s)); }
static inline uint32_t idle_us(slo_state *s) { return atomic_load_explicit(&s->idle_us, memory_order_relaxed); }
static inline uint32_t window_expanded(slo_state *s)
{
    return atomic_load_explicit(&s->be_window_us, memory_order_relaxed);
}

/* BE's "complement" is the whole GPU: LS is on the ladder's top step, and BE
 * shares every SM with it (held at its gate while LS has work in flight). */
static inline int shares_gpu(slo_state *s, const ds_policy_view *view)
{
    return high_tier(s) == ds_view_full_pctx(view);
}

/* The LS tier's tenants: latency-sensitive work but prefill. A
 * latency-sensitive prefill vCtx (its SLO a TTFT) runs beside BE on the
 * complement, above it in stream priority and never held: its chunks are far
 * longer than decode's slack, so it may not share decode's SMs, and holding
 * it (gates, a window) is what made TTFT miss. It counts as BE for what
 * decode's tier must leave room for (expansion, yields, moves). */
static inline int is_prefill_ls(const ds_vctx_state *st)
{
    return st->cls == DS_CLASS_LATENCY_SENSITIVE && st->phase == DS_PHASE_PREFILL;
}

static inline int is_ls(const ds_vctx_state *st) { return st->cls == DS_CLASS_LATENCY_SENSITIVE && !is_prefill_ls(st); }

/* SMs of pool index pctx (0 if there is none), for the log lines. */
static inline uint32_t step_sms(const ds_policy_view *view, uint32_t pctx)
{
    const ds_pctx_info *p = ds_view_pctx(view, pctx);
    return p ? p->sm_count : 0;
}

/* Work in flight (or a section open). */
static inline int in_flight(const ds_vctx_state *st) { return st->busy || st->inflight_us > 0.5; }

/* Active within idle_us of now (a vCtx never seen active is not). */
static inline int recently_active(const ds_vctx_state *st, double now, uint32_t idle)
{
    return st->last_active_us >= 0 && now - st->last_active_us < idle;
}

static inline int reserving(slo_state *s) { return atomic_load_explicit(&s->reserve, memory_order_relaxed); }

/* Where LS prefill runs (never gated): the whole GPU with prefill_whole,
 * beside decode's tier as a single engine's prefill has it (at 2 below
 * decode in stream priority, with BE); else the LS tier's complement,
 * beside BE. */
static inline uint32_t prefill_pctx(slo_state *s, const ds_policy_view *view)
{
    return atomic_load_explicit(&s->prefill_whole, memory_order_relaxed) ? ds_view_full_pctx(view) : high_tier(s);
}

static inline int prefill_urgent(slo_state *s)
{
    return atomic_load_explicit(&s->prefill_whole, memory_order_relaxed) != 2;
}

/* The live vCtxs as one decision sees them: one snapshot each. */
enum {
    VC_GONE = 1,  /* destroyed since listed */
    VC_LS = 2,    /* latency-sensitive */
    VC_YIELD = 4, /* BE that may be on LS's SMs with its gate open: a yield closes it */
    VC_FULL = 8,  /* BE bound, or about to be bound, on the whole GPU */
    VC_PREFILL = 16, /* a latency-sensitive prefill vCtx (is_prefill_ls): on prefill_pctx, never gated */
};

typedef struct slo_scan {
    uint32_t n;
    int ls_live; /* an LS vCtx is listed */
    int top;     /* LS on the whole GPU beside BE, or BE draining from it: every BE vCtx yields */
    uint32_t full; /* the whole GPU's pCtx */
    uint32_t prefill_pctx; /* where LS prefill belongs (prefill_pctx()) */
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    unsigned char fl[DS_POLICY_LIST_MAX];
    double unit[DS_POLICY_LIST_MAX]; /* a BE vCtx's ds_vctx_state.unit_us */
} slo_scan;

/* slo_aware_place.c: the scans, and the placements that every decision applies */
void ds_slo_scan_list(slo_scan *sc, slo_state *s, const ds_policy_view *view);
int ds_slo_scan_one(slo_scan *sc, const ds_policy_view *view, uint32_t i, uint32_t high, ds_vctx_state *st);
void ds_slo_scan_all(slo_scan *sc, slo_state *s, const ds_policy_view *view);
int ds_slo_scan_be_on_ls(slo_state *s, const ds_policy_view *view, slo_scan *sc, ds_vctx_t self,
                         const ds_vctx_state *me);
void ds_slo_place_be(slo_state *s, const ds_policy_view *view, ds_vctx_t v, double unit_us, int confined,
                     int ls_live, int gates, int prefill);
void ds_slo_track_all_ls(slo_state *s, const ds_policy_view *view, int on);
void ds_slo_set_confined(slo_state *s, const ds_policy_view *view, const slo_scan *sc, int confined, int yield);
void ds_slo_place_one_ls(slo_state *s, const ds_policy_view *view, ds_vctx_t v);
void ds_slo_place_ls(slo_state *s, const ds_policy_view *view, const slo_scan *sc);
void ds_slo_settle(slo_state *s, const ds_policy_view *view, double now);
void ds_slo_fit_windows(slo_state *s, const ds_policy_view *view);

/* slo_aware_modes.c: whether BE may share LS's SMs (expanded, reserve mode) */
int ds_slo_resume_be(slo_state *s, const ds_policy_view *view);
int ds_slo_expansion_safe(slo_state *s, const ds_policy_view *view, slo_scan *sc, double now_us, int wait_idle);
void ds_slo_choose_mode(slo_state *s, const ds_policy_view *view, double now);

/* slo_aware_tiers.c: the LS tier's size */
void ds_slo_size_ls(slo_state *s, const ds_policy_view *view, double now);

#endif
