/*
 * Marks: events recorded after some units of a vCtx, so that completion (and,
 * for timed marks, duration) is known without an event per kernel; and the
 * vCtx's accounting of predicted work submitted and known finished, which
 * windows bound (marks.c).
 *
 * A mark's life: the owner fills a FREE slot and publishes it PENDING; any
 * thread that saw its event complete (a window or hold wait, the scheduler's
 * harvest) marks it DONE, counting it finished (a compare-and-swap on its
 * state word, which carries a generation so that a late DONE never lands on
 * a reused slot). Reclaiming a finished mark (under the harvest_busy
 * try-flag: the scheduler pass, or the owner when its ring is full) turns it
 * into a completion record in a small queue and frees the slot; the
 * scheduler pass (or ds_runtime_poll, ds_vctx_synchronize) drains the queue
 * into profile samples and on_completion calls. So the hot path never takes
 * the profile lock nor runs a hook.
 */
#ifndef DS_CORE_MARKS_H
#define DS_CORE_MARKS_H

#include <stdatomic.h>
#include <stdint.h>

#include "seam/driver.h"

struct ds_graph;

#define DS__MARKS 16

#define DS__MARK_FREE 0u
#define DS__MARK_PENDING 1u
#define DS__MARK_DONE 2u
/* state word = generation << 2 | state */
#define DS__MARK_STATE(w) ((uint32_t)((w) & 3u))

typedef struct ds__mark {
    _Atomic uint64_t word; /* generation << 2 | FREE, PENDING or DONE */
    CUevent start;         /* recorded before the unit when timed */
    CUevent end;
    int timed;
    _Atomic uint64_t seq;       /* the vCtx's publish order (1, 2, ...) */
    _Atomic double cum_pred_us; /* the vCtx's submitted_us when recorded */
    double pred_us;
    CUfunction f; /* the kernel; the vCtx itself for a section (its profile key) */
    ds_dim3 grid, block;
    uint32_t pctx;
    struct ds_graph *graph; /* a graph's unit: its graph (f is the segment's key) */
} ds__mark;

/* A finished mark, waiting for the harvester: what on_completion reports and
 * the profile sample (duration_us < 0: none). */
typedef struct ds__completion_rec {
    CUfunction f;
    ds_dim3 grid, block;
    uint32_t pctx;
    double duration_us, pred_us;
    struct ds_graph *graph;
} ds__completion_rec;
#define DS__COMPLETIONS 64

/* A vCtx's marks and work accounting. */
typedef struct ds__vmarks {
    ds__mark ring[DS__MARKS];
    uint32_t head;          /* owner: next slot to fill */
    uint32_t tail;          /* harvester: next slot to harvest */
    atomic_flag harvest_busy;
    _Atomic uint32_t pending;    /* PENDING marks (not known finished) */
    _Atomic(CUevent) last;       /* latest published mark's event (holds) */
    _Atomic uint64_t last_seq;   /* ... and its seq (written by the owner only) */
    double since_us;             /* owner: predicted work since the last mark */
    uint32_t unmarked;           /* owner: units since the last mark */
    uint32_t explore_countdown;  /* owner: launches until an unprofiled kernel may be timed */
    uint32_t sample_countdown;   /* owner: launches until the next sampled one */
    _Atomic double submitted_us; /* owner: cumulative predicted work submitted */
    _Atomic double completed_us; /* ... known finished (monotonic, any thread) */
    _Atomic double unit_us;      /* owner: longest recent unit, predicted (decaying max) */
    ds__mark *section_slot;      /* owner: the open section's timed mark */
    double section_pred_us;
    _Atomic uint64_t sampled, kernel_time_ns; /* harvester */
    /* finished marks not yet reported (under harvest_busy) */
    ds__completion_rec done[DS__COMPLETIONS];
    uint32_t done_head, done_tail;
} ds__vmarks;

struct ds_vctx;

/* Predicted us submitted and not known finished (>= 0). Any thread. */
double ds__marks_inflight(const ds__vmarks *m);

/* Owner thread. A FREE slot for the next mark, or NULL (ring full). */
ds__mark *ds__marks_slot(struct ds_vctx *v);
/* Records m's end event after everything submitted so far and publishes it
 * (m->start was recorded before the unit when timed). */
void ds__marks_publish(struct ds_vctx *v, ds__mark *m, int timed, double pred, CUfunction f, struct ds_graph *graph, ds_dim3 g,
                       ds_dim3 b);
/* An untimed mark after the latest work, if any work is unmarked. */
void ds__marks_flush(struct ds_vctx *v);
/* Waits until the vCtx's predicted work in flight plus `pred` fits its
 * window (or nothing of it is in flight). Lock-free apart from the driver's
 * event wait; never runs a hook. */
void ds__marks_window_wait(struct ds_vctx *v, double pred);
/* Any thread: waits for w's latest published mark (marking w's own first
 * when w is the caller's vCtx `self`) and counts what it covers finished.
 * Returns 0 if w had nothing to wait for. */
int ds__marks_wait_latest(struct ds_vctx *w, struct ds_vctx *self);
/* Harvester: turns finished marks into profile samples and on_completion
 * calls, then frees them. Returns at once if another thread harvests v. */
void ds__harvest(struct ds_vctx *v);
/* Everything submitted has finished (after a stream synchronize): marks
 * harvested, the unmarked tail counted finished. */
void ds__marks_settle(struct ds_vctx *v);

#endif /* DS_CORE_MARKS_H */
