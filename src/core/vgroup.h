/*
 * vCtx groups (vgroup.c): the ranks of one job on several GPUs (the ranks of
 * a tensor-parallel model, the replicas of a data-parallel training job),
 * each a vCtx of its own runtime, placed as one. Rank 0's policy decides
 * each unit; every rank applies that decision at the same unit index, so
 * rank r's k-th unit runs on the tier, window and gate interval of rank 0's
 * k-th unit. A group lives in one process (a table of names) or across the
 * processes of one host (POSIX shared memory named after the group; no
 * daemon). docs/design.md, "vCtx groups", says why the decision is rank 0's
 * and what the ranks' own policies still do.
 *
 * The exchange is a ring of DS__VGROUP_RING decisions: rank 0 publishes
 * unit k in slot k % RING (a release store of its sequence word) and may run
 * at most RING units ahead of the slowest rank; rank r waits for slot k
 * (acquire). Every wait is bounded by the caller's runtime's teardown
 * timeout (DS_ERR_TIMEOUT, naming the rank waited for); a rank that left or
 * whose process died makes the others' next wait for it fail at once
 * (DS_ERR_PEER_LOST). Decisions already published stay usable after their
 * publisher left, so ranks that finish at different times do not fail.
 */
#ifndef DS_CORE_VGROUP_H
#define DS_CORE_VGROUP_H

#include <stdatomic.h>
#include <stdint.h>

#include "seam/driver.h"

struct ds_vctx;
struct ds__vgroup_shared;

/* Decisions in flight between rank 0 and the slowest rank. */
#define DS__VGROUP_RING 256u

/* What a unit is, as the group sees it: published with each decision, so
 * that ranks whose programs differ are told (once) rather than silently
 * paired with another kind of unit. */
#define DS__VGROUP_KERNEL 1u
#define DS__VGROUP_SECTION 2u
#define DS__VGROUP_GRAPH 3u

/* A vCtx's membership: set at creation; `unit` and `wait_ms` are written by
 * the owner thread and read by ds_vctx_get_stats (relaxed). */
typedef struct ds__vmember {
    struct ds__vgroup_shared *g; /* NULL: not in a group */
    void *entry;                 /* the process table's entry (a group of this process) */
    uint32_t rank;
    int shared;                  /* across processes */
    _Atomic uint64_t unit;       /* units this rank has decided or followed */
    int map_ready;               /* map[] filled from rank 0's pool */
    uint8_t map[DS_MAX_PCTX];    /* rank 0's pCtx index -> this runtime's */
    int told;                    /* a unit-kind mismatch was logged */
    uint32_t theirs;             /* rank > 0: the kind of rank 0's unit it followed last */
    uint32_t cuts;               /* rank > 0: rank 0's cuts waited for (the i-th is rank 0's i-th publish
                                  * where both measure the same graphs in the same order) */
    _Atomic double wait_ms;      /* time spent waiting on the other ranks */
} ds__vmember;

/* ds_vctx_create: joins the group named in attr (after the vCtx's runtime
 * and name are set, before it is visible). */
ds_status ds__vgroup_join(struct ds_vctx *v, const char *name, uint32_t rank, uint32_t ranks, uint32_t flags);
/* ds_vctx_destroy: leaves (the last member frees or unlinks the group). */
void ds__vgroup_leave(struct ds_vctx *v);

/* Rank 0, before deciding unit `unit`: waits until the slowest rank is
 * within the ring (DS_ERR_TIMEOUT, DS_ERR_PEER_LOST). */
ds_status ds__vgroup_room(struct ds_vctx *v, const char *fn);
/* Rank 0, after the unit's binding was applied: publishes where it runs. */
void ds__vgroup_publish(struct ds_vctx *v, uint32_t kind);
/* Rank > 0: waits for rank 0's decision of its next unit and makes it this
 * vCtx's (pending binding, window, gate interval); DS_ERR_TIMEOUT,
 * DS_ERR_PEER_LOST. */
ds_status ds__vgroup_follow(struct ds_vctx *v, uint32_t kind, const char *fn);
/* Rank > 0: a unit launched although following failed (a graph step's
 * later segment) still takes its index. */
void ds__vgroup_skip(struct ds_vctx *v);

/* Graph cuts. A graph cut from a measuring step (segment_us) is cut where
 * rank 0's was, so that the ranks' steps are the same units: a cut measured
 * on each GPU can differ (other clocks, other co-tenants), and unpaired
 * units would leave a rank that cut finer a step behind. The ranks' graphs
 * pair by creation order (`ordinal`) and measuring step (`measure`, the
 * graph's measuring steps before this one). */

/* Rank 0, after its measuring step: publishes the cut (first atom of each
 * segment, increasing; ncut 0: it made none, so the others stop waiting). */
void ds__vgroup_cut_publish(struct ds_vctx *v, uint32_t ordinal, uint32_t measure, const uint32_t *cut, uint32_t ncut,
                            uint32_t natoms);
/* Rank > 0, after launching its own measuring step: waits for rank 0's cut
 * of the same graph and step (bounded by the teardown timeout), writes it to
 * cut[] (natoms entries at most) and returns its length; 0 where there is
 * none to adopt (rank 0's unit was not a graph's, it left, it measured other
 * atoms, the wait timed out, rank 0 is more cuts ahead than its table
 * holds), logged: the caller cuts from its own times. */
uint32_t ds__vgroup_cut_wait(struct ds_vctx *v, const char *graph, uint32_t ordinal, uint32_t measure,
                             uint32_t natoms, uint32_t *cut);

#endif /* DS_CORE_VGROUP_H */
