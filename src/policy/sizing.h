/*
 * slo_aware's sizing rule (rules 2 and 3 of slo_aware.c's header) as a pure
 * state machine: request counts, time and a few facts about the runtime come
 * in as arguments, a decision comes out. No runtime, no atomics, no clock:
 * slo_aware.c applies the decision (moves, BE's placement, logs) and the
 * replay of GPU traces (bench/dsbench/replay_sizing.py, through
 * libdssizing) runs the same code on recorded requests.
 *
 * The ladder is a list of levels by SM count (level 0 the smallest); with
 * has_full its top level is the whole GPU (LS beside BE). Every count is
 * cumulative (LS's requests, late requests and runs of late requests, summed
 * over its vCtxs with an SLO): the rule keeps its own bases.
 */
#ifndef DS_POLICY_SIZING_H
#define DS_POLICY_SIZING_H

#include <stddef.h>
#include <stdint.h>

#define DS_SIZING_MAX_LEVELS 33 /* DS_MAX_PCTX LOW tiers and the whole GPU */

/* The rule's parameters. target, shrink_requests and dwell_us may change
 * between steps; the ladder and start are read when sizing starts. The
 * probe_*, cap_sd, dispersion_*, held_long, forget_within_sd and
 * overload_stay fields are the rule's constants, here so that a replay can
 * try variants: ds_sizing_config_default gives slo_aware's. */
typedef struct ds_sizing_config {
    uint32_t nlev;                           /* levels on the ladder (at most DS_SIZING_MAX_LEVELS) */
    uint32_t sms[DS_SIZING_MAX_LEVELS];      /* SMs of each level (0: not known; headroom then holds) */
    int has_full;                            /* the top level is the whole GPU */
    uint32_t start;                          /* the level sizing starts on */
    double target;                           /* share of requests within the SLO */
    uint32_t shrink_requests;                /* judged requests on a level before a step down */
    double dwell_us;                         /* least time on a level before a step down */
    uint32_t request_window;                 /* requests in LS's sliding p99 (DS_REQUEST_WINDOW) */
    double probe_fail_sd, probe_hold_sd;     /* a probe fails / holds at this many SDs (Poisson) */
    uint32_t probe_hold, probe_max;          /* ... after these many x shrink_requests */
    double cap_sd;                           /* an overload's clear excess, in SDs */
    double dispersion_prior, dispersion_max; /* the late count's dispersion (1 and 1: none) */
    int descent;                             /* step down past several levels: 0 never, 1 until the first step
                                                up, 2 always */
    double held_long;                        /* x shrink_requests after which a step down has held for long:
                                                its failures are forgotten and growth from it does not back
                                                off (0: never) */
    double forget_within_sd;                 /* ... only while its lates since it was entered are within the
                                                target's allowance plus this many SDs (Poisson; negative:
                                                however many) */
    uint32_t overload_stay;                  /* x shrink_requests on the largest level before an overload's
                                                check of the level below (its reference share) */
} ds_sizing_config;

/* What the runtime saw since the last step. */
typedef enum ds_sizing_phase {
    DS_SIZING_JUDGE, /* the requests count against the level */
    DS_SIZING_HOLD,  /* not judged: BE is on its way off LS's SMs (a move, or settling) */
    DS_SIZING_MOVED, /* a step up's move just finished: LS is on the level now, judged after a grace */
} ds_sizing_phase;

typedef struct ds_sizing_input {
    uint64_t req, over, runs; /* LS's requests, late ones, runs of late ones (cumulative) */
    double p99_share;         /* the worst LS window p99 over its SLO */
    double now_us;
    ds_sizing_phase phase;
    int full_allowed;         /* the whole GPU level may be taken now (BE's units fit LS's slack) */
    int reserving;            /* reserve mode: LS urgent on the whole GPU, steps move BE alone */
    int may_expand;           /* BE's units fit half of LS's slack (reserve mode possible) */
    int pressed;              /* a latency-sensitive tenant beside LS misses its own target (LS prefill's
                                 TTFTs): a step down needs a quarter of the requests and no dwell */
} ds_sizing_input;

typedef enum ds_sizing_kind {
    DS_SIZING_STAY,         /* nothing to do */
    DS_SIZING_START,        /* sizing began on level `to` */
    DS_SIZING_UP,           /* step up to `to` (the target was missed, or a probe failed) */
    DS_SIZING_DOWN,         /* step down to `to`: a probe (BE keeps the larger complement while `probing`) */
    DS_SIZING_PROBE_HELD,   /* the probe held: BE takes the level's complement */
    DS_SIZING_CAP_CHECK,    /* overload: step down to `to` to check it does as well as `from` */
    DS_SIZING_CAP_UP,       /* overload: `from` is clearly worse than the reference; step up to `to` */
    DS_SIZING_CAPPED,       /* overload: `from` is the cap (confirm: it was a probe, BE takes the rest) */
    DS_SIZING_TOP_MISSED,   /* the largest LOW level misses the target: reserve mode is the next resort */
} ds_sizing_kind;

typedef struct ds_sizing_action {
    ds_sizing_kind kind;
    int from, to;     /* levels before and after */
    int warn_top;     /* first miss on the largest level in this overload (log it) */
    int confirm;      /* CAPPED: the capped level was a probe */
    int capped_worse; /* CAP_UP: LS left a capped level (not a failed check) */
    double n, late;   /* judged requests and late ones on `from` */
    double ref_share; /* the overload's reference late share */
} ds_sizing_action;

typedef struct ds_sizing {
    ds_sizing_config cfg;
    int lvl;                                   /* -1: not started */
    double entered_us;                         /* time of the last change */
    uint64_t base_req, base_over;              /* counts when judging on this level began */
    int grace;                                 /* requests not to judge after a change */
    int by_shrink;                             /* entered by a step down */
    int probing;                               /* BE still on the larger level's complement */
    int grown;                                 /* stepped up since sizing began */
    uint32_t fails[DS_SIZING_MAX_LEVELS];      /* probes of each level that grew back */
    uint64_t retry_req[DS_SIZING_MAX_LEVELS];  /* no step down to it before this many requests */
    int warned_top;                            /* the top level's miss was reported */
    int cap;                                   /* overload: highest level LS grows to (-1: the top) */
    int cap_probe;                             /* this level checks that the one above does not pay */
    double ref_share;                          /* late share of the largest level missed on */
    int cap_failed[DS_SIZING_MAX_LEVELS];      /* an overload check of the level failed */
    double budget;                             /* late requests LS may still have (the error budget) */
    uint64_t seen_req, seen_over;              /* counts when the budget was last updated */
    uint64_t start_over, start_runs;           /* counts when sizing began */
    double dispersion;                         /* of the late count since (late_dispersion) */
} ds_sizing;

/* slo_aware's constants in cfg's rule fields, an empty ladder, target 0.99. */
void ds_sizing_config_default(ds_sizing_config *cfg);
/* Not started: the first step starts sizing (lvl -1). */
void ds_sizing_init(ds_sizing *z, const ds_sizing_config *cfg);
/* One decision from the counts in `in`; the state moves with it. */
ds_sizing_action ds_sizing_step(ds_sizing *z, const ds_sizing_input *in);
/* The budget's most, in late requests. */
double ds_sizing_budget_max(const ds_sizing *z);
/* `late` of n is clearly over a late share: `sd` standard deviations
 * (Poisson) and one request over its count. */
int ds_sizing_clearly_over(double share, double n, double late, double sd);
/* Whether level k is the whole GPU. */
int ds_sizing_is_full(const ds_sizing *z, int k);
/* For callers through a foreign-function interface (libdssizing): the
 * current level, and sizeof of ds_sizing (0), ds_sizing_config (1),
 * ds_sizing_input (2) and ds_sizing_action (3), 0 for another `which`. */
int ds_sizing_level(const ds_sizing *z);
size_t ds_sizing_size(int which);

#endif
