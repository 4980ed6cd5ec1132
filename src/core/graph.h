/*
 * Graphs that follow their vCtx (graph.c): one instantiation per pCtx, made
 * by capture on a stream of that pCtx (or by re-binding the kernel nodes of
 * a graph the application captured), all checked against the first one.
 * ds_graph_launch is in dispatch.c (the hot path).
 */
#ifndef DS_CORE_GRAPH_H
#define DS_CORE_GRAPH_H

#include <stdatomic.h>
#include <stdint.h>

#include "seam/driver.h"

#define DS__GRAPH_MAGIC 0x48524744u /* "DGRH" */

struct ds_vctx;
struct ds_runtime;

/* What the check compares of one node (capture order). */
typedef struct ds__gnode {
    CUgraphNodeType type;
    CUfunction func;
    CUkernel kern;
    unsigned grid[3], block[3], smem;
} ds__gnode;

struct ds_graph {
    _Atomic uint32_t magic;
    struct ds_vctx *v; /* owner: the vCtx that created it */
    struct ds_runtime *rt;
    ds_graph_capture_fn fn; /* NULL for ds_graph_from_cuda_graph */
    void *user;
    uint32_t flags;
    uint32_t set; /* bit p: pCtx p may run it (DS_MAX_PCTX <= 32) */
    /* Written by the owner thread; the stats below an instantiation are
     * written before its exec is published (release), read after (acquire). */
    _Atomic(CUgraphExec) exec[DS_MAX_PCTX];
    ds_graph_pctx_stats st[DS_MAX_PCTX];
    _Atomic uint64_t launches_on[DS_MAX_PCTX]; /* owner thread; their sum is the total */
    ds__gnode *ref; /* the reference instantiation's nodes (NULL until one) */
    uint32_t ref_nodes;
    struct ds_graph *next; /* the owner's list (owner thread) */
    char name[64];
};

/* A graph's profile key: tagged (low bit set), so that a completion tells a
 * graph from a kernel (CUfunction handles and graphs are aligned). */
static inline CUfunction ds__graph_key(const struct ds_graph *g)
{
    return (CUfunction)((uintptr_t)g | 1u);
}
static inline struct ds_graph *ds__graph_of_key(CUfunction f)
{
    return ((uintptr_t)f & 1u) ? (struct ds_graph *)((uintptr_t)f & ~(uintptr_t)1) : NULL;
}

/* Validates a graph handle (NULL, wrong magic, destroyed). */
ds_status ds__graph_check(const struct ds_graph *g, const char *fn);
/* Owner thread: the instantiation for pCtx p, made now if the graph is lazy
 * (DS_ERR_NOT_FOUND when p is outside its set). */
ds_status ds__graph_exec_slow(struct ds_graph *g, uint32_t p, CUgraphExec *out);
/* vctx.c, at teardown after the vCtx's work finished: destroys its graphs. */
void ds__graph_destroy_all(struct ds_vctx *v);

#endif /* DS_CORE_GRAPH_H */
