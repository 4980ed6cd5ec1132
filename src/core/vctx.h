/*
 * A virtual context: its state, and its lifecycle (vctx.c: create, destroy,
 * statistics). Other files work on it: remap.c, where it runs (binding
 * table, remaps with an event hand-off, the policy actions); marks.c, what
 * it has in flight (marks, windows, harvest); dispatch.c, the hot path
 * (ds_launch, sections), one unit-preparation routine for every kind of
 * unit.
 *
 * Ownership: a vCtx's hot fields are written only by its owner thread;
 * `pending` (the requested binding) and the policy-set fields (window,
 * track_all, gate interval) are written by any thread.
 */
#ifndef DS_CORE_VCTX_H
#define DS_CORE_VCTX_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/copy.h"
#include "seam/driver.h"
#include "core/gate.h"
#include "core/marks.h"
#include "core/remap.h"
#include "core/requests.h"
#include "core/sched.h"
#include "core/vgroup.h"
#include "memory/tenant_memory.h"

struct ds_runtime;

struct ds_vctx {
    /* hot: read by every ds_launch */
    _Atomic uint32_t magic;
    _Atomic uint32_t bound; /* binding in use: written by the owner, read by
                               policies, the scheduler and *_get_* (relaxed) */
    CUstream stream;
    const ds__driver *cu;
    struct ds_runtime *rt;
    _Atomic uint32_t pending;   /* requested binding (== bound when none) */
    _Atomic int section_open;   /* owner writes; scheduler and policies read */
    _Atomic uint32_t window_us; /* 0 = unbounded */
    _Atomic int track_all;      /* mark after every unit (any thread sets it) */
    _Atomic int launching;      /* track_all only: inside ds_launch/acquire */
    int grouped;                /* a rank of a vCtx group (grp below), set at creation:
                                   on the hot path's first cache line */
    ds__vmarks marks;           /* marks.c: work in flight */
    ds__vgate gate;             /* gate.c */

    /* counters (single writer: the owner thread; relaxed stores) */
    _Atomic uint64_t launches, sections, remaps, holds, graph_launches, graph_units;
    _Atomic uint32_t streams_created;

    ds__vwatch watch; /* sched.c: activity and watchdog (the pass) */
    ds__vyield yield; /* remap.c: yields of a best-effort vCtx */

    /* cold */
    uint32_t slot;
    ds_vctx_class cls;
    ds_phase phase;
    int stream_priority;
    uint32_t slo_us;
    uint32_t weight;
    CUevent handoff;
    /* created lazily by the owner; read by fault attribution (relaxed) */
    _Atomic(CUstream) streams[DS_MAX_PCTX][2];
    char name[64];
    ds__memreg mem; /* mem.c, memory/tenant_memory.c: allocations, quota, working set */
    ds__vcopy copy; /* copy.c */
    ds__vreq req;   /* requests.c: request latencies */
    struct ds_graph *graphs; /* graph.c: its graphs (owner thread) */
    uint32_t graphs_made;    /* graph.c: graphs created so far (owner thread) */
    /* graph.c: a capture stream per pCtx, kept for the vCtx's life (owner
     * thread): libraries key per-stream state (PyTorch's allocator pools,
     * cuBLAS workspaces) by stream, and a destroyed stream's handle may
     * come back for another */
    CUstream capture_streams[DS_MAX_PCTX];
    ds__vmember grp; /* vgroup.c: its vCtx group, if any */
};

/* A rank > 0 of a vCtx group: its placement is rank 0's, so policy actions
 * on it are accepted and ignored. */
static inline int ds__vgroup_follower(const struct ds_vctx *v) { return v->grp.g && v->grp.rank; }

/* vctx.c: destroys a vCtx whose handle was validated; caller holds no lock. */
ds_status ds__vctx_teardown(struct ds_vctx *v);

#endif /* DS_CORE_VCTX_H */
