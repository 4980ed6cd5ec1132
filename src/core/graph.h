/*
 * Graphs that follow their vCtx (graph.c): one instantiation per pCtx and
 * segment, made by capture on a stream of that pCtx (or by re-binding the
 * kernel nodes of graphs the application captured), all checked against the
 * first one. A step is one or more pieces (ds_graph_cut(),
 * ds_graph_from_cuda_graphs()); with segment_us, pieces are cut further at
 * the first launch, from measured times (segment.c). ds_graph_launch is in
 * dispatch.c (the hot path).
 */
#ifndef DS_CORE_GRAPH_H
#define DS_CORE_GRAPH_H

#include <stdatomic.h>
#include <stdint.h>

#include "seam/driver.h"

#define DS__GRAPH_MAGIC 0x48524744u /* "DGRH" */

struct ds_vctx;
struct ds_runtime;
struct ds_graph;

/* What the check compares of one node (index order). */
typedef struct ds__gnode {
    CUgraphNodeType type;
    CUfunction func;
    CUkernel kern;
    unsigned grid[3], block[3], smem;
} ds__gnode;

/* A piece of the step, as the reference instantiation captured it. */
typedef struct ds__piece {
    ds__gnode *ref;    /* its nodes in index order (cuGraphGetNodes of the capture) */
    uint32_t nodes, kernels;
    uint32_t nedges;
    uint32_t *efrom, *eto; /* its edges as node indices, sorted (automatic cuts only) */
    uint32_t *order;   /* topological order of the node indices (segment.c) */
    uint8_t *cut;      /* cut[i]: the piece may be cut before order[i] */
    int has_memory;    /* memory alloc or free nodes: never cut */
} ds__piece;

/* A segment: positions [first, first + count) of its piece's order, one
 * unit of a step. Its address (tagged) is its profile key. */
typedef struct ds__seg {
    struct ds_graph *g;
    uint32_t piece, first, count;
    uint32_t kernels;
    double calibrated_us;
    _Atomic(CUgraphExec) exec[DS_MAX_PCTX];
} ds__seg;

/* A piece's template on one pCtx: the graph and its nodes in index order. */
typedef struct ds__tpl {
    CUgraph graph;
    CUgraphNode *nodes;
    int owned; /* the runtime destroys graph (a capture, or a clone) */
} ds__tpl;

struct ds_graph {
    _Atomic uint32_t magic;
    struct ds_vctx *v; /* owner: the vCtx that created it */
    struct ds_runtime *rt;
    ds_graph_capture_fn fn; /* NULL for ds_graph_from_cuda_graph(s) */
    void *user;
    uint32_t flags;
    uint32_t set; /* bit p: pCtx p may run it (DS_MAX_PCTX <= 32) */
    uint32_t segment_us;
    /* Written by the owner thread; the stats of a pCtx are written before
     * its `ready` flag is published (release), read after (acquire). */
    _Atomic int ready[DS_MAX_PCTX];
    ds_graph_pctx_stats st[DS_MAX_PCTX];
    _Atomic uint64_t launches_on[DS_MAX_PCTX]; /* steps begun there (owner); their sum is the total */
    /* the step: pieces (reference), segments (owner thread) */
    uint32_t npieces;
    ds__piece *pieces; /* NULL until the first capture */
    uint32_t nseg;
    ds__seg *seg;
    ds__seg whole;      /* the measuring step's unit (profile key) */
    ds__tpl *tpl;       /* [p * npieces + i]: templates kept while the cut is pending */
    int cut_pending;    /* segment_us set, pieces cuttable, not measured yet */
    /* stats of the pieces and the cut: the owner writes, ds_graph_get_stats
     * reads from any thread (relaxed) */
    _Atomic uint32_t uncut, segments_pub, pieces_pub, cut_points, calibrated_pctx;
    _Atomic double step_us, longest_us;
    struct ds_graph *next; /* the owner's list (owner thread) */
    uint32_t ordinal;      /* the owner's graphs made before it: pairs a vCtx group's ranks' graphs */
    uint32_t measured;     /* measuring steps begun (owner thread, dispatch.c) */
    char name[64];
};

/* A segment's profile key: its address, tagged (low bit set) so that it
 * is never a section's key (the vCtx) nor NULL. A completion names its graph
 * beside the key (ds__mark::graph): a CUfunction may have its low bit set
 * too (the simulated driver's handles do). */
static inline CUfunction ds__seg_key(const ds__seg *s)
{
    return (CUfunction)((uintptr_t)s | 1u);
}

/* Validates a graph handle (NULL, wrong magic, destroyed). */
ds_status ds__graph_check(const struct ds_graph *g, const char *fn);
/* Owner thread, at a step's first segment: pCtx p has its segments
 * instantiated (or, while the cut is pending, its templates), captured now
 * if the graph is lazy (DS_ERR_NOT_FOUND when p is outside its set). */
ds_status ds__graph_ensure(struct ds_graph *g, uint32_t p);

/* The measuring step (cut pending), around the unit's preparation in
 * dispatch.c: begin (before the timed start, after ds__graph_ensure) makes
 * the finest segments' instantiations on p; run launches them on `s` between events;
 * end (after the unit was accounted) waits for the step, cuts, and
 * instantiates the segments on every pCtx with templates. */
typedef struct ds__calib {
    uint32_t p, natoms;
    uint32_t *atom_piece, *atom_first, *atom_count; /* positions per atom */
    CUgraphExec *exec;
    CUevent *ev; /* natoms + 1 */
    /* the cut, as the first atom of each segment (increasing; natoms
     * entries at most): in, where ncut > 0, a cut to adopt (a vCtx group's
     * rank 0's, vgroup.h), used when it fits these atoms; out, the cut made */
    uint32_t *cut, ncut;
    int adopted; /* out: the cut given was used */
} ds__calib;
ds_status ds__graph_calib_begin(struct ds_graph *g, uint32_t p, ds__calib *c);
ds_status ds__graph_calib_run(struct ds_graph *g, ds__calib *c, CUstream s);
ds_status ds__graph_calib_end(struct ds_graph *g, ds__calib *c);
void ds__graph_calib_free(struct ds_graph *g, ds__calib *c);

/* vctx.c, at teardown after the vCtx's work finished: destroys its graphs. */
void ds__graph_destroy_all(struct ds_vctx *v);

#endif /* DS_CORE_GRAPH_H */
