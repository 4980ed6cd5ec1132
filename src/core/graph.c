/*
 * Graphs that follow their vCtx. A CUDA graph runs in the context its kernel
 * nodes were captured in, whatever stream launches it, and an instantiated
 * graph cannot be re-targeted (measured on an H100 and an H200:
 * docs/device-facts.md). So a ds_graph holds one instantiation per pCtx:
 *
 *  - by capture (ds_graph_create): the caller's capture function runs once
 *    per pCtx on a fresh stream of that pCtx's green context, with that
 *    context current;
 *  - by re-binding (ds_graph_from_cuda_graph): every kernel node of the
 *    application's graph is pointed at the pCtx's context through its
 *    CUkernel (CUDA_KERNEL_NODE_PARAMS::ctx is honoured only with `func`
 *    NULL and `kern` set; cuda.h, CUDA 13.0), instantiated, and restored.
 *
 * Every instantiation is compared with the first (the reference): the same
 * nodes in the same order, the same types, and for kernel nodes the same
 * kernel, grid, block and dynamic shared memory (docs/design.md, invariant
 * 1: a kernel's launch configuration never depends on where it runs).
 *
 * Everything here runs on the owner thread of the graph's vCtx, off the hot
 * path; ds_graph_launch (dispatch.c) reads an instantiation lock-free.
 */
#include "core/clock.h"
#include "core/fault.h"
#include "core/graph.h"
#include "core/handles.h"
#include "core/pool.h"
#include "core/profile.h"
#include "core/segment.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "seam/alloc.h"
#include "seam/driver.h"
#include "seam/log.h"

#include <stdio.h>
#include <string.h>


ds_status ds__graph_check(const struct ds_graph *g, const char *fn)
{
    if (!g)
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: graph handle is NULL", fn);
    uint32_t m = atomic_load_explicit(&g->magic, memory_order_relaxed);
    if (m != DS__GRAPH_MAGIC)
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: graph handle %p is %s", fn, (const void *)g,
                        m == DS__DEAD_MAGIC ? "destroyed (or its vCtx was)" : "not a graph");
    return DS_SUCCESS;
}

static int have_graph_api(const ds__driver *cu)
{
    return cu->cuStreamBeginCapture && cu->cuStreamEndCapture && cu->cuGraphInstantiateWithFlags &&
           cu->cuGraphLaunch && cu->cuGraphExecDestroy && cu->cuGraphDestroy && cu->cuGraphGetNodes &&
           cu->cuGraphNodeGetType && cu->cuGraphKernelNodeGetParams;
}


static int have_cut_api(const ds__driver *cu)
{
    return cu->cuGraphClone && cu->cuGraphNodeFindInClone && cu->cuGraphDestroyNode && cu->cuGraphGetEdges;
}

/* Where the automatic cut measures the step: the finest segments, at most
 * this many (consecutive ones are taken together beyond it). */
#define DS__CALIB_MAX_ATOMS 4096u

/* ------------------------------------------------------------------------ */
/* templates and the check                                                   */

/* The nodes of `graph` in index order (ds__malloc'd array in *out, count in *n). */
static ds_status graph_nodes(const struct ds_graph *g, CUgraph graph, CUgraphNode **out, size_t *n)
{
    const ds__driver *cu = g->rt->cu;
    size_t count = 0;
    DS__CU(g->rt, cuGraphGetNodes(graph, NULL, &count));
    *out = NULL;
    *n = count;
    if (!count)
        return DS_SUCCESS;
    CUgraphNode *nodes = ds__calloc(count, sizeof *nodes);
    if (!nodes)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %zu nodes", g->name, count);
    CUresult r = cu->cuGraphGetNodes(graph, nodes, &count);
    if (r != CUDA_SUCCESS) {
        ds__free(nodes);
        return ds__fail(ds__cu_status(r), "graph '%s': cuGraphGetNodes -> %s", g->name, ds__cu_error_name(cu, r));
    }
    *out = nodes;
    *n = count;
    return DS_SUCCESS;
}

static void tpl_clear(const struct ds_graph *g, ds__tpl *t)
{
    if (t->owned && t->graph)
        g->rt->cu->cuGraphDestroy(t->graph);
    ds__free(t->nodes);
    memset(t, 0, sizeof *t);
}

static void tpls_clear(const struct ds_graph *g, ds__tpl *t, uint32_t n)
{
    for (uint32_t i = 0; t && i < n; i++)
        tpl_clear(g, &t[i]);
}

/* The node signature of a template; checks that every kernel node runs in
 * `ctx` (ctx NULL: not checked). */
static ds_status signature(const struct ds_graph *g, const ds__tpl *t, size_t n, CUcontext ctx, uint32_t p,
                           uint32_t piece, ds__gnode **out, uint32_t *kernels, int *memory)
{
    const ds__driver *cu = g->rt->cu;
    ds__gnode *sig = ds__calloc(n, sizeof *sig);
    if (!sig)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %zu nodes", g->name, n);
    ds_status st = DS_SUCCESS;
    uint32_t k = 0;
    *memory = 0;
    for (size_t i = 0; i < n && st == DS_SUCCESS; i++) {
        CUresult r = cu->cuGraphNodeGetType(t->nodes[i], &sig[i].type);
        if (r == CUDA_SUCCESS && (sig[i].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || sig[i].type == CU_GRAPH_NODE_TYPE_MEM_FREE))
            *memory = 1;
        if (r == CUDA_SUCCESS && sig[i].type == CU_GRAPH_NODE_TYPE_KERNEL) {
            CUDA_KERNEL_NODE_PARAMS kp;
            memset(&kp, 0, sizeof kp);
            r = cu->cuGraphKernelNodeGetParams(t->nodes[i], &kp);
            if (r == CUDA_SUCCESS) {
                sig[i].func = kp.func;
                sig[i].kern = kp.kern;
                sig[i].grid[0] = kp.gridDimX, sig[i].grid[1] = kp.gridDimY, sig[i].grid[2] = kp.gridDimZ;
                sig[i].block[0] = kp.blockDimX, sig[i].block[1] = kp.blockDimY, sig[i].block[2] = kp.blockDimZ;
                sig[i].smem = kp.sharedMemBytes;
                k++;
                if (ctx && kp.ctx != ctx)
                    st = ds__fail(DS_ERR_CAPTURE,
                                  "graph '%s': kernel node %zu of piece %u captured on pCtx %u runs in another "
                                  "context (work enqueued on a stream other than the one the capture function was "
                                  "handed, or forked from it into another context)",
                                  g->name, i, piece, p);
            }
        }
        if (r != CUDA_SUCCESS)
            st = ds__fail(ds__cu_status(r), "graph '%s': reading node %zu: %s", g->name, i,
                          ds__cu_error_name(cu, r));
    }
    if (st != DS_SUCCESS) {
        ds__free(sig);
        return st;
    }
    *out = sig;
    *kernels = k;
    return DS_SUCCESS;
}

/* Same kernel: the same CUkernel where both have one, else the same
 * CUfunction, else the same name (a CUfunction is per context). */
static int same_kernel(const ds__driver *cu, const ds__gnode *a, const ds__gnode *b)
{
    if (a->kern && b->kern)
        return a->kern == b->kern;
    if (a->func == b->func)
        return 1;
    const char *na = NULL, *nb = NULL;
    return cu->cuFuncGetName && cu->cuFuncGetName(&na, a->func) == CUDA_SUCCESS &&
           cu->cuFuncGetName(&nb, b->func) == CUDA_SUCCESS && na && nb && strcmp(na, nb) == 0;
}

static ds_status compare(const struct ds_graph *g, const ds__piece *ref, const ds__gnode *sig, uint32_t n, uint32_t p,
                         uint32_t piece)
{
    if (n != ref->nodes)
        return ds__fail(DS_ERR_CAPTURE,
                        "graph '%s': pCtx %u captured %u nodes, the first instantiation %u (piece %u): the capture "
                        "function must enqueue the same work on every pCtx",
                        g->name, p, n, ref->nodes, piece);
    for (uint32_t i = 0; i < n; i++) {
        const ds__gnode *a = &ref->ref[i], *b = &sig[i];
        const char *what = NULL;
        if (a->type != b->type)
            what = "node type";
        else if (a->type == CU_GRAPH_NODE_TYPE_KERNEL) {
            if (!same_kernel(g->rt->cu, a, b))
                what = "kernel";
            else if (memcmp(a->grid, b->grid, sizeof a->grid) || memcmp(a->block, b->block, sizeof a->block))
                what = "grid or block";
            else if (a->smem != b->smem)
                what = "dynamic shared memory";
        }
        if (what)
            return ds__fail(DS_ERR_CAPTURE,
                            "graph '%s': node %u of piece %u captured on pCtx %u differs from the first "
                            "instantiation in its %s (grid %u,%u,%u block %u,%u,%u vs %u,%u,%u / %u,%u,%u): a "
                            "kernel's launch must not depend on where it runs",
                            g->name, i, piece, p, what, b->grid[0], b->grid[1], b->grid[2], b->block[0],
                            b->block[1], b->block[2], a->grid[0], a->grid[1], a->grid[2], a->block[0], a->block[1],
                            a->block[2]);
    }
    return DS_SUCCESS;
}

/* Node index of handle h among nodes[] (linear: only at capture time). */
static int64_t node_index(const CUgraphNode *nodes, size_t n, CUgraphNode h)
{
    for (size_t i = 0; i < n; i++)
        if (nodes[i] == h)
            return (int64_t)i;
    return -1;
}

static int edge_cmp(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The template's edges as sorted (from, to) index pairs. */
static ds_status edges_of(const struct ds_graph *g, const ds__tpl *t, size_t n, uint32_t **efrom, uint32_t **eto,
                          uint32_t *m)
{
    const ds__driver *cu = g->rt->cu;
    size_t count = 0;
    *efrom = *eto = NULL;
    *m = 0;
    DS__CU(g->rt, cuGraphGetEdges(t->graph, NULL, NULL, NULL, &count));
    if (!count)
        return DS_SUCCESS;
    CUgraphNode *from = ds__calloc(count, sizeof *from), *to = ds__calloc(count, sizeof *to);
    /* edge data must be asked for: without it the driver answers
     * CUDA_ERROR_LOSSY_QUERY for a graph with programmatic (port) edges,
     * as cuDNN's kernels in a PyTorch ResNet-50 step have (H100, CUDA
     * 13.0). A segment keeps the edges inside it as they are; an edge a
     * cut removes becomes plain stream order, stricter than any port edge */
    CUgraphEdgeData *data = ds__calloc(count, sizeof *data);
    uint64_t *pairs = ds__calloc(count, sizeof *pairs);
    uint32_t *f = ds__calloc(count, sizeof *f), *tt = ds__calloc(count, sizeof *tt);
    ds_status st = DS_SUCCESS;
    if (!from || !to || !data || !pairs || !f || !tt)
        st = ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %zu edges", g->name, count);
    CUresult r = st == DS_SUCCESS ? cu->cuGraphGetEdges(t->graph, from, to, data, &count) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        st = ds__fail(ds__cu_status(r), "graph '%s': cuGraphGetEdges -> %s", g->name, ds__cu_error_name(cu, r));
    for (size_t e = 0; st == DS_SUCCESS && e < count; e++) {
        int64_t a = node_index(t->nodes, n, from[e]), b = node_index(t->nodes, n, to[e]);
        if (a < 0 || b < 0)
            st = ds__fail(DS_ERR_INTERNAL, "graph '%s': edge %zu names a node the graph does not list", g->name, e);
        else
            pairs[e] = (uint64_t)a << 32 | (uint64_t)b;
    }
    if (st == DS_SUCCESS) {
        qsort(pairs, count, sizeof *pairs, edge_cmp);
        for (size_t e = 0; e < count; e++) {
            f[e] = (uint32_t)(pairs[e] >> 32);
            tt[e] = (uint32_t)pairs[e];
        }
        *efrom = f;
        *eto = tt;
        *m = (uint32_t)count;
        f = tt = NULL;
    }
    ds__free(from);
    ds__free(to);
    ds__free(data);
    ds__free(pairs);
    ds__free(f);
    ds__free(tt);
    return st;
}

/* Checks template t of piece i on pCtx p against the reference (or makes
 * the reference of it). The caller keeps t. */
static ds_status check_piece(struct ds_graph *g, const ds__tpl *t, size_t n, CUcontext ctx, uint32_t p, uint32_t i,
                             ds__piece *out_ref)
{
    if (!n)
        return ds__fail(DS_ERR_CAPTURE,
                        "graph '%s': the capture on pCtx %u holds no work (did the capture function enqueue its "
                        "work on the stream it was handed?)",
                        g->name, p);
    ds__gnode *sig = NULL;
    uint32_t kernels = 0;
    int memory = 0;
    DS__TRY(signature(g, t, n, ctx, p, i, &sig, &kernels, &memory));
    int want_edges = g->segment_us && have_cut_api(g->rt->cu);
    uint32_t *ef = NULL, *et = NULL, m = 0;
    ds_status st = want_edges ? edges_of(g, t, n, &ef, &et, &m) : DS_SUCCESS;
    if (st == DS_SUCCESS && g->pieces) {
        const ds__piece *ref = &g->pieces[i];
        st = compare(g, ref, sig, (uint32_t)n, p, i);
        if (st == DS_SUCCESS && want_edges &&
            (m != ref->nedges || (m && (memcmp(ef, ref->efrom, m * sizeof *ef) || memcmp(et, ref->eto, m * sizeof *et)))))
            st = ds__fail(DS_ERR_CAPTURE,
                          "graph '%s': piece %u captured on pCtx %u has other dependencies than the first "
                          "instantiation's (%u edges against %u): the capture function must enqueue the same work "
                          "in the same order on every pCtx",
                          g->name, i, p, m, ref->nedges);
    }
    if (st != DS_SUCCESS || g->pieces) {
        ds__free(sig);
        ds__free(ef);
        ds__free(et);
        return st;
    }
    memset(out_ref, 0, sizeof *out_ref);
    out_ref->ref = sig;
    out_ref->nodes = (uint32_t)n;
    out_ref->kernels = kernels;
    out_ref->efrom = ef;
    out_ref->eto = et;
    out_ref->nedges = m;
    out_ref->has_memory = memory;
    return DS_SUCCESS;
}

static void pieces_free(ds__piece *pc, uint32_t n)
{
    for (uint32_t i = 0; pc && i < n; i++) {
        ds__free(pc[i].ref);
        ds__free(pc[i].efrom);
        ds__free(pc[i].eto);
        ds__free(pc[i].order);
        ds__free(pc[i].cut);
    }
    ds__free(pc);
}

/* The reference made of the first pCtx's templates: pieces, their order and
 * cut points, one segment per piece, and whether the automatic cut is
 * pending. */
static ds_status adopt_reference(struct ds_graph *g, ds__piece *pc, uint32_t n)
{
    ds__seg *seg = ds__calloc(n, sizeof *seg);
    if (!seg)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %u segments", g->name, n);
    uint32_t points = 0;
    int memory = 0;
    for (uint32_t i = 0; i < n; i++) {
        seg[i].g = g;
        seg[i].piece = i;
        seg[i].count = pc[i].nodes;
        seg[i].kernels = pc[i].kernels;
        memory |= pc[i].has_memory;
        if (!g->segment_us || !have_cut_api(g->rt->cu) || pc[i].has_memory)
            continue;
        pc[i].order = ds__calloc(pc[i].nodes, sizeof *pc[i].order);
        pc[i].cut = ds__calloc(pc[i].nodes, sizeof *pc[i].cut);
        if (!pc[i].order || !pc[i].cut) {
            ds__free(seg);
            return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %u nodes", g->name, pc[i].nodes);
        }
        if (ds__dag_order(pc[i].nodes, pc[i].efrom, pc[i].eto, pc[i].nedges, pc[i].order, pc[i].cut) != 0) {
            ds__free(seg);
            return ds__fail(DS_ERR_CAPTURE, "graph '%s': piece %u's dependencies form a cycle or name unknown nodes",
                            g->name, i);
        }
        for (uint32_t k = 1; k < pc[i].nodes; k++)
            points += pc[i].cut[k];
    }
    g->pieces = pc;
    g->npieces = n;
    g->seg = seg;
    g->nseg = n;
    atomic_store_explicit(&g->pieces_pub, n, memory_order_relaxed);
    atomic_store_explicit(&g->cut_points, points, memory_order_relaxed);
    uint32_t uncut = DS_GRAPH_UNCUT_NONE;
    if (g->segment_us) {
        if (!have_cut_api(g->rt->cu))
            uncut = DS_GRAPH_UNCUT_NO_API;
        else if (memory)
            uncut = DS_GRAPH_UNCUT_MEMORY;
        else if (!points)
            uncut = DS_GRAPH_UNCUT_NO_CUT;
        else
            uncut = DS_GRAPH_UNCUT_PENDING;
        if (uncut != DS_GRAPH_UNCUT_PENDING)
            ds__log(DS_LOG_INFO, "graph '%s': not cut (%s): %u segment%s, one per piece", g->name,
                    uncut == DS_GRAPH_UNCUT_NO_API   ? "the driver lacks cuGraphClone or cuGraphGetEdges"
                    : uncut == DS_GRAPH_UNCUT_MEMORY ? "it allocates or frees memory inside"
                                                     : "its DAG never narrows to one node",
                    n, n == 1 ? "" : "s");
    }
    g->cut_pending = uncut == DS_GRAPH_UNCUT_PENDING;
    atomic_store_explicit(&g->uncut, uncut, memory_order_relaxed);
    atomic_store_explicit(&g->segments_pub, n, memory_order_relaxed);
    return DS_SUCCESS;
}

/* Makes the graph of segment k from template t: t itself when k is its
 * whole piece, else a clone without the nodes outside the segment (*made:
 * the clone, for the caller to destroy). */
static ds_status seg_graph(const struct ds_graph *g, uint32_t piece, uint32_t first, uint32_t count, const ds__tpl *t,
                           CUgraph *out, CUgraph *made)
{
    const ds__driver *cu = g->rt->cu;
    const ds__piece *pc = &g->pieces[piece];
    *made = NULL;
    if (first == 0 && count == pc->nodes) {
        *out = t->graph;
        return DS_SUCCESS;
    }
    CUgraph c = NULL;
    CUresult r = cu->cuGraphClone(&c, t->graph);
    for (uint32_t pos = 0; r == CUDA_SUCCESS && pos < pc->nodes; pos++) {
        if (pos >= first && pos < first + count)
            continue;
        CUgraphNode node = NULL;
        r = cu->cuGraphNodeFindInClone(&node, t->nodes[pc->order[pos]], c);
        if (r == CUDA_SUCCESS)
            r = cu->cuGraphDestroyNode(node);
    }
    if (r != CUDA_SUCCESS) {
        if (c)
            cu->cuGraphDestroy(c);
        return ds__fail(ds__cu_status(r), "graph '%s': cutting piece %u at [%u, %u): %s", g->name, piece, first,
                        first + count, ds__cu_error_name(cu, r));
    }
    *out = *made = c;
    return DS_SUCCESS;
}

static ds_status instantiate(const struct ds_graph *g, CUgraph graph, CUstream s, uint32_t p, uint32_t k,
                             CUgraphExec *out)
{
    const ds__driver *cu = g->rt->cu;
    CUgraphExec exec = NULL;
    CUresult r = cu->cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (r == CUDA_SUCCESS && cu->cuGraphUpload && s)
        r = cu->cuGraphUpload(exec, s);
    if (r != CUDA_SUCCESS) {
        if (exec)
            cu->cuGraphExecDestroy(exec);
        return ds__fail(ds__cu_status(r), "graph '%s': instantiating segment %u on pCtx %u: %s", g->name, k, p,
                        ds__cu_error_name(cu, r));
    }
    *out = exec;
    return DS_SUCCESS;
}

/* Instantiates every segment on pCtx p from p's templates and publishes
 * them; on failure destroys what it made for p. */
static ds_status materialize(struct ds_graph *g, uint32_t p, const ds__tpl *t, CUstream s, double capture_us)
{
    struct ds_runtime *rt = g->rt;
    const ds__driver *cu = rt->cu;
    size_t free0 = 0, free1 = 0, total = 0;
    int mem = cu->cuMemGetInfo && cu->cuMemGetInfo(&free0, &total) == CUDA_SUCCESS;
    double t0 = ds__wall_ms();
    ds_status st = DS_SUCCESS;
    uint32_t k = 0;
    for (; k < g->nseg && st == DS_SUCCESS; k++) {
        const ds__seg *sg = &g->seg[k];
        CUgraph graph = NULL, made = NULL;
        CUgraphExec exec = NULL;
        st = seg_graph(g, sg->piece, sg->first, sg->count, &t[sg->piece], &graph, &made);
        if (st == DS_SUCCESS)
            st = instantiate(g, graph, s, p, k, &exec);
        if (made)
            cu->cuGraphDestroy(made);
        if (st == DS_SUCCESS)
            atomic_store_explicit(&g->seg[k].exec[p], exec, memory_order_relaxed);
    }
    CUresult r = st == DS_SUCCESS && s ? cu->cuStreamSynchronize(s) : CUDA_SUCCESS;
    if (st == DS_SUCCESS && r != CUDA_SUCCESS)
        st = ds__fail(ds__cu_status(r), "graph '%s': uploading on pCtx %u: %s", g->name, p, ds__cu_error_name(cu, r));
    if (st != DS_SUCCESS) {
        for (uint32_t j = 0; j < g->nseg; j++) {
            CUgraphExec e = atomic_load_explicit(&g->seg[j].exec[p], memory_order_relaxed);
            if (e)
                cu->cuGraphExecDestroy(e);
            atomic_store_explicit(&g->seg[j].exec[p], NULL, memory_order_relaxed);
        }
        return st;
    }
    double t1 = ds__wall_ms();
    mem = mem && cu->cuMemGetInfo(&free1, &total) == CUDA_SUCCESS;
    ds_graph_pctx_stats *ps = &g->st[p];
    ps->instantiated = 1;
    ps->nodes = 0;
    ps->kernel_nodes = 0;
    for (uint32_t i = 0; i < g->npieces; i++) {
        ps->nodes += g->pieces[i].nodes;
        ps->kernel_nodes += g->pieces[i].kernels;
    }
    ps->capture_us = capture_us;
    ps->instantiate_us = (t1 - t0) * 1e3;
    ps->device_bytes = mem ? (int64_t)free0 - (int64_t)free1 : 0;
    atomic_store_explicit(&g->ready[p], 1, memory_order_release);
    ds__log(DS_LOG_DEBUG, "graph '%s' on pCtx %u: %u nodes (%u kernels) in %u segments, capture %.0f us, "
                          "instantiate %.0f us, %lld bytes",
            g->name, p, ps->nodes, ps->kernel_nodes, g->nseg, capture_us, ps->instantiate_us,
            (long long)ps->device_bytes);
    return DS_SUCCESS;
}

/* Takes p's templates (pieces, each with its nodes listed): checks them
 * against the reference (or makes them the reference), then instantiates
 * p's segments, or keeps the templates while the cut is pending. On
 * success the templates are owned by the graph; on failure the caller's. */
static ds_status adopt_templates(struct ds_graph *g, uint32_t p, ds__tpl *t, uint32_t n, const size_t *nn, CUcontext ctx,
                                 CUstream s, double capture_us, int *taken)
{
    *taken = 0;
    if (g->pieces && n != g->npieces)
        return ds__fail(DS_ERR_CAPTURE,
                        "graph '%s': the capture on pCtx %u made %u pieces, the first instantiation %u: the capture "
                        "function must cut its work (ds_graph_cut) at the same places on every pCtx",
                        g->name, p, n, g->npieces);
    ds__piece *pc = g->pieces ? NULL : ds__calloc(n, sizeof *pc);
    if (!g->pieces && !pc)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %u pieces", g->name, n);
    ds_status st = DS_SUCCESS;
    for (uint32_t i = 0; i < n && st == DS_SUCCESS; i++)
        st = check_piece(g, &t[i], nn[i], ctx, p, i, pc ? &pc[i] : NULL);
    if (st == DS_SUCCESS && pc) {
        st = adopt_reference(g, pc, n);
        if (st != DS_SUCCESS)
            pieces_free(pc, n);
        pc = NULL;
    }
    if (pc)
        pieces_free(pc, n);
    if (st != DS_SUCCESS)
        return st;
    if (g->cut_pending) {
        if (!g->tpl && !(g->tpl = ds__calloc((size_t)DS_MAX_PCTX * g->npieces, sizeof *g->tpl)))
            return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': templates", g->name);
        for (uint32_t i = 0; i < n; i++)
            g->tpl[p * g->npieces + i] = t[i];
        g->st[p].capture_us = capture_us;
        *taken = 1;
        return DS_SUCCESS;
    }
    st = materialize(g, p, t, s, capture_us);
    if (st == DS_SUCCESS) {
        tpls_clear(g, t, n);
        *taken = 1;
    }
    return st;
}

/* The vCtx's capture stream of pCtx p, created at its first use (owner
 * thread; kept until the vCtx is destroyed). */
static ds_status capture_stream(struct ds_graph *g, uint32_t p, CUstream *out)
{
    CUstream *s = &g->v->capture_streams[p];
    if (!*s)
        DS__TRY(ds__pool_stream_create(g->rt, p, g->rt->prio_least, s));
    *out = *s;
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* by capture                                                                */

/* The capture in progress on this thread (ds_graph_cut). */
typedef struct cap_state {
    const struct ds_graph *g;
    CUstream s;
    CUgraph *pieces;
    uint32_t n, cap;
    ds_status err;
} cap_state;
static _Thread_local cap_state *tl_cap;

/* Ends s's capture into a piece (an empty one is dropped). */
static ds_status cap_end(cap_state *c, CUresult *res)
{
    const ds__driver *cu = c->g->rt->cu;
    CUgraph graph = NULL;
    CUresult r = cu->cuStreamEndCapture(c->s, &graph);
    *res = r;
    if (r != CUDA_SUCCESS)
        return DS_ERR_CAPTURE;
    size_t count = 0;
    if (!graph || cu->cuGraphGetNodes(graph, NULL, &count) != CUDA_SUCCESS || !count) {
        if (graph)
            cu->cuGraphDestroy(graph);
        return DS_SUCCESS;
    }
    if (c->n == c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 8;
        CUgraph *np = cap <= DS_GRAPH_MAX_SEGMENTS ? ds__realloc(c->pieces, cap * sizeof *np) : NULL;
        if (!np) {
            cu->cuGraphDestroy(graph);
            return ds__fail(cap > DS_GRAPH_MAX_SEGMENTS ? DS_ERR_INVALID_ARGUMENT : DS_ERR_OUT_OF_MEMORY,
                            "graph '%s': more than %u pieces", c->g->name, DS_GRAPH_MAX_SEGMENTS);
        }
        c->pieces = np;
        c->cap = cap;
    }
    c->pieces[c->n++] = graph;
    return DS_SUCCESS;
}

ds_status ds_graph_cut(CUstream stream)
{
    cap_state *c = tl_cap;
    if (!c)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_graph_cut: no capture of ds_graph_create() is running on this thread (call it from "
                        "the capture function)");
    if (stream != c->s)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_graph_cut(graph '%s'): stream %p is not the capturing stream %p the capture function "
                        "was handed",
                        c->g->name, (void *)stream, (void *)c->s);
    if (c->err != DS_SUCCESS)
        return c->err;
    const ds__driver *cu = c->g->rt->cu;
    CUresult r = CUDA_SUCCESS;
    ds_status st = cap_end(c, &r);
    if (st == DS_ERR_CAPTURE)
        st = ds__fail(DS_ERR_CAPTURE,
                      "ds_graph_cut(graph '%s'): ending the piece failed: %s (every stream forked from the capturing "
                      "stream must be joined back before a cut)",
                      c->g->name, ds__cu_error_name(cu, r));
    /* the capture goes on in any case, so that the capture function's
     * remaining work is captured (and the whole capture then fails) */
    r = cu->cuStreamBeginCapture(c->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (st == DS_SUCCESS && r != CUDA_SUCCESS)
        st = ds__fail(DS_ERR_CAPTURE, "ds_graph_cut(graph '%s'): beginning the next piece: %s", c->g->name,
                      ds__cu_error_name(cu, r));
    if (st != DS_SUCCESS)
        c->err = st;
    return st;
}

/* Captures the step on pCtx p into templates and adopts them. */
static ds_status capture(struct ds_graph *g, uint32_t p)
{
    struct ds_runtime *rt = g->rt;
    const ds__driver *cu = rt->cu;
    CUstream s;
    DS__TRY(capture_stream(g, p, &s));
    CUcontext prev = NULL;
    cu->cuCtxGetCurrent(&prev);
    CUcontext ctx = rt->pctx[p].ctx;
    ds_status st = DS_SUCCESS;
    cap_state c = {.g = g, .s = s, .err = DS_SUCCESS};
    double t0 = ds__wall_ms();
    CUresult r = cu->cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS)
        r = cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r != CUDA_SUCCESS) {
        st = ds__fail(ds__cu_status(r), "graph '%s': beginning the capture on pCtx %u: %s", g->name, p,
                      ds__cu_error_name(cu, r));
    } else {
        cap_state *outer = tl_cap;
        tl_cap = &c;
        int rc = g->fn(s, g->user);
        tl_cap = outer;
        CUresult er = CUDA_SUCCESS;
        ds_status end = cap_end(&c, &er); /* always ended: the stream is ours */
        if (rc != 0)
            st = ds__fail(DS_ERR_CAPTURE, "graph '%s': the capture function returned %d on pCtx %u", g->name, rc, p);
        else if (c.err != DS_SUCCESS)
            st = c.err;
        else if (er == CUDA_ERROR_OUT_OF_MEMORY)
            st = ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': ending the capture on pCtx %u: out of memory", g->name,
                          p);
        else if (er != CUDA_SUCCESS)
            st = ds__fail(DS_ERR_CAPTURE,
                          "graph '%s': the capture on pCtx %u failed: %s (the capture function must not "
                          "synchronize, query or allocate, and must join every stream it forked)",
                          g->name, p, ds__cu_error_name(cu, er));
        else if (end != DS_SUCCESS)
            st = end;
        else if (!c.n)
            st = ds__fail(DS_ERR_CAPTURE,
                          "graph '%s': the capture on pCtx %u holds no work (did the capture function enqueue its "
                          "work on the stream it was handed?)",
                          g->name, p);
    }
    double capture_us = (ds__wall_ms() - t0) * 1e3;
    cu->cuCtxSetCurrent(prev);
    ds__tpl *t = c.n ? ds__calloc(c.n, sizeof *t) : NULL;
    size_t *nn = c.n ? ds__calloc(c.n, sizeof *nn) : NULL;
    if (st == DS_SUCCESS && (!t || !nn))
        st = ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %u pieces", g->name, c.n);
    for (uint32_t i = 0; i < c.n; i++) {
        if (t) {
            t[i].graph = c.pieces[i];
            t[i].owned = 1;
            if (st == DS_SUCCESS)
                st = graph_nodes(g, t[i].graph, &t[i].nodes, &nn[i]);
        } else {
            cu->cuGraphDestroy(c.pieces[i]);
        }
    }
    ds__free(c.pieces);
    int taken = 0;
    if (st == DS_SUCCESS)
        st = adopt_templates(g, p, t, c.n, nn, ctx, s, capture_us, &taken);
    if (!taken)
        tpls_clear(g, t, t ? c.n : 0);
    ds__free(t);
    ds__free(nn);
    return st;
}

/* The templates of pCtx p exist or p's segments are instantiated. */
static int have_pctx(const struct ds_graph *g, uint32_t p)
{
    if (atomic_load_explicit(&g->ready[p], memory_order_relaxed))
        return 1;
    return g->tpl && g->tpl[p * g->npieces].graph;
}

static ds_status not_in_set(const struct ds_graph *g, uint32_t p)
{
    char list[DS_MAX_PCTX * 4 + 1] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < g->rt->num_pctx && len + 5 < sizeof list; i++)
        if ((g->set >> i) & 1u)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%u", len ? "," : "", i);
    return ds__fail(DS_ERR_NOT_FOUND, "ds_graph_launch: graph '%s' was made for pCtxs %s, and vCtx '%s' is on pCtx %u",
                    g->name, list, g->v->name, p);
}

ds_status ds__graph_ensure(struct ds_graph *g, uint32_t p)
{
    if (!((g->set >> p) & 1u))
        return not_in_set(g, p);
    if (have_pctx(g, p))
        return DS_SUCCESS;
    if (!g->fn) /* from_cuda_graph(s): every pCtx of the set was instantiated */
        return ds__fail(DS_ERR_INTERNAL, "graph '%s' has no instantiation for pCtx %u", g->name, p);
    return capture(g, p);
}

/* ------------------------------------------------------------------------ */
/* the automatic cut: the measuring step                                     */

void ds__graph_calib_free(struct ds_graph *g, ds__calib *c)
{
    const ds__driver *cu = g->rt->cu;
    for (uint32_t a = 0; c->exec && a < c->natoms; a++)
        if (c->exec[a])
            cu->cuGraphExecDestroy(c->exec[a]);
    for (uint32_t a = 0; c->ev && a <= c->natoms; a++)
        if (c->ev[a])
            cu->cuEventDestroy(c->ev[a]);
    ds__free(c->exec);
    ds__free(c->ev);
    ds__free(c->atom_piece);
    ds__free(c->atom_first);
    ds__free(c->atom_count);
    ds__free(c->cut);
    memset(c, 0, sizeof *c);
}

ds_status ds__graph_calib_begin(struct ds_graph *g, uint32_t p, ds__calib *c)
{
    const ds__driver *cu = g->rt->cu;
    memset(c, 0, sizeof *c);
    if (!g->tpl || !g->tpl[p * g->npieces].graph)
        return ds__fail(DS_ERR_INTERNAL, "graph '%s' has no template for pCtx %u", g->name, p);
    /* atoms: the runs between allowed cuts, at most DS__CALIB_MAX_ATOMS
     * (consecutive runs taken together beyond) */
    uint32_t total = 0;
    for (uint32_t i = 0; i < g->npieces; i++)
        for (uint32_t pos = 0; pos < g->pieces[i].nodes; pos++)
            total += g->pieces[i].cut[pos];
    uint32_t stride = (total + DS__CALIB_MAX_ATOMS - 1) / DS__CALIB_MAX_ATOMS;
    uint32_t cap = total / stride + g->npieces + 1;
    c->p = p;
    c->atom_piece = ds__calloc(cap, sizeof *c->atom_piece);
    c->atom_first = ds__calloc(cap, sizeof *c->atom_first);
    c->atom_count = ds__calloc(cap, sizeof *c->atom_count);
    c->exec = ds__calloc(cap, sizeof *c->exec);
    c->ev = ds__calloc((size_t)cap + 1, sizeof *c->ev);
    c->cut = ds__calloc(cap, sizeof *c->cut);
    if (!c->atom_piece || !c->atom_first || !c->atom_count || !c->exec || !c->ev || !c->cut) {
        ds__graph_calib_free(g, c);
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %u atoms", g->name, cap);
    }
    for (uint32_t i = 0; i < g->npieces; i++) {
        const ds__piece *pc = &g->pieces[i];
        uint32_t seen = 0;
        for (uint32_t pos = 0; pos < pc->nodes; pos++) {
            if (pc->cut[pos] && seen++ % stride == 0) {
                c->atom_piece[c->natoms] = i;
                c->atom_first[c->natoms] = pos;
                c->natoms++;
            }
            c->atom_count[c->natoms - 1]++;
        }
    }
    ds_status st = DS_SUCCESS;
    for (uint32_t a = 0; a < c->natoms && st == DS_SUCCESS; a++) {
        CUgraph graph = NULL, made = NULL;
        st = seg_graph(g, c->atom_piece[a], c->atom_first[a], c->atom_count[a],
                       &g->tpl[p * g->npieces + c->atom_piece[a]], &graph, &made);
        if (st == DS_SUCCESS)
            st = instantiate(g, graph, NULL, p, a, &c->exec[a]);
        if (made)
            cu->cuGraphDestroy(made);
    }
    for (uint32_t a = 0; a <= c->natoms && st == DS_SUCCESS; a++) {
        CUresult r = cu->cuEventCreate(&c->ev[a], CU_EVENT_DEFAULT);
        if (r != CUDA_SUCCESS)
            st = ds__fail(ds__cu_status(r), "graph '%s': cuEventCreate -> %s", g->name, ds__cu_error_name(cu, r));
    }
    if (st != DS_SUCCESS)
        ds__graph_calib_free(g, c);
    return st;
}

ds_status ds__graph_calib_run(struct ds_graph *g, ds__calib *c, CUstream s)
{
    const ds__driver *cu = g->rt->cu;
    CUresult r = CUDA_SUCCESS;
    for (uint32_t a = 0; a < c->natoms && r == CUDA_SUCCESS; a++) {
        r = cu->cuEventRecord(c->ev[a], s);
        if (r == CUDA_SUCCESS)
            r = cu->cuGraphLaunch(c->exec[a], s);
    }
    if (r == CUDA_SUCCESS)
        r = cu->cuEventRecord(c->ev[c->natoms], s);
    if (r != CUDA_SUCCESS)
        return ds__fail(ds__cu_status(r), "graph '%s': the measuring step on pCtx %u: %s", g->name, c->p,
                        ds__cu_error_name(cu, r));
    return DS_SUCCESS;
}

/* The measuring step's own cut: per piece, atoms grouped under the bound;
 * the bound grows while the step would need more than the segment limit.
 * Writes c->cut; returns the number of segments. */
static uint32_t cut_by_time(const struct ds_graph *g, ds__calib *c, const double *t)
{
    double bound = g->segment_us;
    uint32_t nseg = 0;
    for (int tries = 0; tries < 32; tries++) {
        nseg = 0;
        for (uint32_t a0 = 0; a0 < c->natoms;) {
            uint32_t a1 = a0;
            while (a1 < c->natoms && c->atom_piece[a1] == c->atom_piece[a0])
                a1++;
            uint32_t n = ds__group_by_time(t + a0, a1 - a0, bound, c->cut + nseg);
            for (uint32_t k = 0; k < n; k++)
                c->cut[nseg + k] += a0;
            nseg += n;
            a0 = a1;
        }
        if (nseg <= DS_GRAPH_MAX_SEGMENTS)
            break;
        bound *= 2;
    }
    return nseg;
}

/* Does a cut given for these atoms fit them: at most the segment limit,
 * starting at atom 0, increasing, and cut wherever a piece begins (a
 * segment never spans two pieces)? */
static int cut_fits(const ds__calib *c)
{
    if (c->ncut == 0 || c->ncut > DS_GRAPH_MAX_SEGMENTS || c->ncut > c->natoms || c->cut[0] != 0)
        return 0;
    uint32_t k = 1;
    for (uint32_t a = 1; a < c->natoms; a++) {
        int starts_piece = c->atom_piece[a] != c->atom_piece[a - 1];
        int is_cut = k < c->ncut && c->cut[k] == a;
        if (k < c->ncut && c->cut[k] < a)
            return 0; /* not increasing */
        if (starts_piece && !is_cut)
            return 0;
        k += is_cut;
    }
    return k == c->ncut;
}

ds_status ds__graph_calib_end(struct ds_graph *g, ds__calib *c)
{
    struct ds_runtime *rt = g->rt;
    const ds__driver *cu = rt->cu;
    CUresult r = cu->cuEventSynchronize(c->ev[c->natoms]);
    if (r != CUDA_SUCCESS)
        return ds__fail(ds__cu_status(r), "graph '%s': waiting for the measuring step: %s", g->name,
                        ds__cu_error_name(cu, r));
    double *t = ds__calloc(c->natoms, sizeof *t);
    ds__seg *seg = ds__calloc(c->natoms, sizeof *seg);
    if (!t || !seg) {
        ds__free(t);
        ds__free(seg);
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %u atoms", g->name, c->natoms);
    }
    /* the bound is on the largest pCtx of the set, where a best-effort
     * step shares latency-sensitive work's SMs; measured on fewer SMs, a
     * segment's time there is an upper bound of its time on more, so the
     * times are used as measured */
    double step = 0;
    for (uint32_t a = 0; a < c->natoms && r == CUDA_SUCCESS; a++) {
        float ms = 0;
        r = cu->cuEventElapsedTime(&ms, c->ev[a], c->ev[a + 1]);
        t[a] = ms * 1e3;
        step += t[a];
    }
    if (r != CUDA_SUCCESS) {
        ds__free(t);
        ds__free(seg);
        return ds__fail(ds__cu_status(r), "graph '%s': reading the measuring step's events: %s", g->name,
                        ds__cu_error_name(cu, r));
    }
    c->adopted = c->ncut && cut_fits(c);
    if (c->ncut && !c->adopted)
        ds__log(DS_LOG_WARN, "graph '%s': the cut given (%u segments) does not fit its %u atoms (another step's "
                             "structure?): cut from this step's own times", g->name, c->ncut, c->natoms);
    if (!c->adopted)
        c->ncut = cut_by_time(g, c, t);
    double longest = 0;
    for (uint32_t k = 0; k < c->ncut; k++) {
        uint32_t b0 = c->cut[k], b1 = k + 1 < c->ncut ? c->cut[k + 1] : c->natoms;
        ds__seg *sg = &seg[k];
        sg->g = g;
        sg->piece = c->atom_piece[b0];
        sg->first = c->atom_first[b0];
        for (uint32_t b = b0; b < b1; b++) {
            sg->count += c->atom_count[b];
            sg->calibrated_us += t[b];
        }
        longest = sg->calibrated_us > longest ? sg->calibrated_us : longest;
    }
    const uint32_t nseg = c->ncut;
    for (uint32_t k = 0; k < nseg; k++) {
        const ds__piece *pc = &g->pieces[seg[k].piece];
        seg[k].kernels = 0;
        for (uint32_t pos = seg[k].first; pos < seg[k].first + seg[k].count; pos++)
            seg[k].kernels += pc->ref[pc->order[pos]].type == CU_GRAPH_NODE_TYPE_KERNEL;
    }
    ds__free(t);
    /* the pieces' segments had no instantiation (templates only) */
    ds__free(g->seg);
    g->seg = seg;
    g->nseg = nseg;
    g->cut_pending = 0;
    atomic_store_explicit(&g->step_us, step, memory_order_relaxed);
    atomic_store_explicit(&g->longest_us, longest, memory_order_relaxed);
    atomic_store_explicit(&g->calibrated_pctx, c->p, memory_order_relaxed);
    atomic_store_explicit(&g->segments_pub, nseg, memory_order_relaxed);
    atomic_store_explicit(&g->uncut, nseg == g->npieces ? DS_GRAPH_UNCUT_FITS : DS_GRAPH_UNCUT_NONE,
                          memory_order_relaxed);
    ds__log(DS_LOG_INFO, "graph '%s': step %.0f us on pCtx %u (%u SMs) cut into %u segments of at most %.0f us "
                         "(bound %u us%s)",
            g->name, step, c->p, rt->pctx[c->p].sm_count, nseg, longest, g->segment_us,
            c->adopted ? "; the cut given, not this step's own" : "");
    ds_status st = DS_SUCCESS;
    for (uint32_t p = 0; p < rt->num_pctx; p++) {
        ds__tpl *tp = g->tpl ? &g->tpl[p * g->npieces] : NULL;
        if (!tp || !tp->graph)
            continue;
        CUstream s = NULL;
        ds_status sp = capture_stream(g, p, &s);
        if (sp == DS_SUCCESS)
            sp = materialize(g, p, tp, s, g->st[p].capture_us);
        if (sp != DS_SUCCESS && st == DS_SUCCESS)
            st = sp; /* a lazy graph captures that pCtx again at its next launch there */
        tpls_clear(g, tp, g->npieces);
    }
    ds__free(g->tpl);
    g->tpl = NULL;
    return st;
}

/* ------------------------------------------------------------------------ */
/* lifecycle                                                                 */

static void graph_free(struct ds_graph *g)
{
    const ds__driver *cu = g->rt->cu;
    for (uint32_t k = 0; g->seg && k < g->nseg; k++)
        for (uint32_t p = 0; p < DS_MAX_PCTX; p++) {
            CUgraphExec e = atomic_load_explicit(&g->seg[k].exec[p], memory_order_relaxed);
            if (e)
                cu->cuGraphExecDestroy(e);
            atomic_store_explicit(&g->seg[k].exec[p], NULL, memory_order_relaxed);
        }
    if (g->tpl)
        tpls_clear(g, g->tpl, DS_MAX_PCTX * g->npieces);
    ds__free(g->tpl);
    g->tpl = NULL;
    pieces_free(g->pieces, g->npieces);
    g->pieces = NULL;
    /* segments are profile keys of completions still queued: freed with
     * the graph, after the quarantine */
    ds__quarantine(g->seg);
    g->seg = NULL;
    atomic_store(&g->magic, DS__DEAD_MAGIC);
    ds__quarantine(g);
}

/* A new graph of v with attr validated; not yet on v's list. */
static ds_status graph_new(struct ds_vctx *v, const ds_graph_attr *attr, const char *fn, struct ds_graph **out)
{
    struct ds_runtime *rt = v->rt;
    if (!have_graph_api(v->cu))
        return ds__fail(DS_ERR_NOT_SUPPORTED, "%s: the %s driver has no CUDA graph API (cuStreamBeginCapture, "
                                              "cuGraphInstantiateWithFlags, cuGraphKernelNodeGetParams_v2 ...)",
                        fn, rt->ops->name);
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    if (attr) {
        DS__TRY(ds__check_abi_grown(attr, DS__OLD_SIZES(DS_GRAPH_ATTR_SIZE_V1), sizeof *attr, "ds_graph_attr"));
        memcpy(&a, attr, attr->size < sizeof a ? attr->size : sizeof a);
        a.size = sizeof a;
    }
    if ((a.pctxs == NULL) != (a.num_pctxs == 0))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "%s: ds_graph_attr pctxs and num_pctxs must be both set or both 0",
                        fn);
    if (a.flags & ~DS_GRAPH_EAGER)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "%s: unknown ds_graph_attr flags 0x%x", fn, a.flags & ~DS_GRAPH_EAGER);
    if (a.segment_us && (a.segment_us < DS_GRAPH_SEGMENT_MIN_US || a.segment_us > DS_GRAPH_SEGMENT_MAX_US))
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "%s: ds_graph_attr segment_us %u out of range (0, or %u to %u us: a segment's launch costs "
                        "a few us)",
                        fn, a.segment_us, DS_GRAPH_SEGMENT_MIN_US, DS_GRAPH_SEGMENT_MAX_US);
    uint32_t set = 0;
    if (!a.pctxs) {
        set = rt->num_pctx >= 32 ? UINT32_MAX : (1u << rt->num_pctx) - 1;
    } else {
        for (uint32_t i = 0; i < a.num_pctxs; i++) {
            uint32_t p = a.pctxs[i];
            if (p >= rt->num_pctx)
                return ds__fail(DS_ERR_INVALID_ARGUMENT, "%s: pCtx %u out of range (the pool has %u)", fn, p,
                                rt->num_pctx);
            if ((set >> p) & 1u)
                return ds__fail(DS_ERR_INVALID_ARGUMENT, "%s: pCtx %u named twice", fn, p);
            set |= 1u << p;
        }
    }
    struct ds_graph *g = ds__calloc(1, sizeof *g);
    if (!g)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "%s: the graph", fn);
    g->v = v;
    g->rt = rt;
    g->flags = a.flags;
    g->set = set;
    g->segment_us = a.segment_us;
    g->whole.g = g;
    snprintf(g->name, sizeof g->name, "%s", a.name ? a.name : "graph");
    atomic_store(&g->magic, DS__GRAPH_MAGIC);
    *out = g;
    return DS_SUCCESS;
}

static void graph_link(struct ds_graph *g)
{
    g->next = g->v->graphs;
    g->v->graphs = g;
    g->ordinal = g->v->graphs_made++;
}

ds_status ds_graph_create(ds_vctx_t v, ds_graph_capture_fn fn, void *user, const ds_graph_attr *attr, ds_graph_t *out)
{
    DS__TRY(ds__vctx_check(v, "ds_graph_create"));
    if (!fn || !out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_create('%s'): %s is NULL", v->name, !fn ? "fn" : "out");
    if (ds__faulted(v->rt))
        return ds__fault_status(v->rt, "ds_graph_create");
    struct ds_graph *g;
    DS__TRY(graph_new(v, attr, "ds_graph_create", &g));
    g->fn = fn;
    g->user = user;
    if (g->flags & DS_GRAPH_EAGER) {
        for (uint32_t p = 0; p < v->rt->num_pctx; p++) {
            if (!((g->set >> p) & 1u))
                continue;
            ds_status st = capture(g, p);
            if (st != DS_SUCCESS) {
                graph_free(g);
                return st;
            }
        }
    }
    graph_link(g);
    *out = g;
    return DS_SUCCESS;
}

/* Node types a re-bound graph may hold: kernels follow the pCtx, the rest
 * does not run on SMs or does not depend on where it runs. */
static int rebind_type_ok(CUgraphNodeType t)
{
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return 1;
    default:
        return 0;
    }
}

/* Points every kernel node at ctx (NULL: back at its own) through its
 * CUkernel, with func NULL: with func set the driver ignores ctx. Returns
 * the first failure and the node's index in *at. */
static CUresult rebind(const ds__driver *cu, CUgraphNode *nodes, const CUDA_KERNEL_NODE_PARAMS *orig,
                       const CUgraphNodeType *types, size_t n, CUcontext ctx, size_t *at)
{
    for (size_t i = 0; i < n; i++) {
        if (types[i] != CU_GRAPH_NODE_TYPE_KERNEL)
            continue;
        CUDA_KERNEL_NODE_PARAMS kp = orig[i];
        kp.func = NULL;
        if (ctx)
            kp.ctx = ctx;
        CUresult r = cu->cuGraphKernelNodeSetParams(nodes[i], &kp);
        if (r != CUDA_SUCCESS) {
            *at = i;
            return r;
        }
    }
    return CUDA_SUCCESS;
}

/* One of the caller's graphs, read once: its nodes, types and kernel
 * parameters (restored after every re-binding). */
typedef struct app_piece {
    CUgraph graph;
    CUgraphNode *nodes;
    size_t n;
    CUDA_KERNEL_NODE_PARAMS *orig;
    CUgraphNodeType *types;
    int touched;
} app_piece;

static ds_status app_piece_read(struct ds_graph *g, app_piece *a, uint32_t i)
{
    const ds__driver *cu = g->rt->cu;
    const char *vn = g->v->name;
    ds_status st = graph_nodes(g, a->graph, &a->nodes, &a->n);
    if (st == DS_SUCCESS && !a->n)
        st = ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_from_cuda_graphs('%s'): graph %u has no node", vn, i);
    if (st == DS_SUCCESS) {
        a->orig = ds__calloc(a->n, sizeof *a->orig);
        a->types = ds__calloc(a->n, sizeof *a->types);
        if (!a->orig || !a->types)
            st = ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_graph_from_cuda_graphs: %zu nodes", a->n);
    }
    for (size_t k = 0; st == DS_SUCCESS && k < a->n; k++) {
        CUresult r = cu->cuGraphNodeGetType(a->nodes[k], &a->types[k]);
        if (r == CUDA_SUCCESS && a->types[k] == CU_GRAPH_NODE_TYPE_KERNEL)
            r = cu->cuGraphKernelNodeGetParams(a->nodes[k], &a->orig[k]);
        if (r != CUDA_SUCCESS)
            st = ds__fail(ds__cu_status(r), "ds_graph_from_cuda_graphs: reading node %zu of graph %u: %s", k, i,
                          ds__cu_error_name(cu, r));
        else if (!rebind_type_ok(a->types[k]))
            st = ds__fail(DS_ERR_NOT_SUPPORTED,
                          "ds_graph_from_cuda_graphs('%s'): node %zu of graph %u is of type %d (a child graph, a "
                          "conditional or another node that cannot be moved between pCtxs); capture the work "
                          "through ds_graph_create() instead",
                          vn, k, i, (int)a->types[k]);
        else if (a->types[k] == CU_GRAPH_NODE_TYPE_KERNEL && !a->orig[k].kern)
            st = ds__fail(DS_ERR_NOT_SUPPORTED,
                          "ds_graph_from_cuda_graphs('%s'): kernel node %zu of graph %u names its kernel only as a "
                          "CUfunction (cuModuleGetFunction), which the driver cannot move to another context; "
                          "capture the work through ds_graph_create() instead",
                          vn, k, i);
    }
    return st;
}

/* Re-binds the caller's pieces to pCtx p and adopts them as p's templates:
 * borrowed (instantiated now) or, while a cut may be pending, cloned. */
static ds_status app_pctx(struct ds_graph *g, app_piece *ap, uint32_t n, uint32_t p)
{
    struct ds_runtime *rt = g->rt;
    const ds__driver *cu = rt->cu;
    CUstream s = NULL;
    DS__TRY(capture_stream(g, p, &s));
    ds__tpl *t = ds__calloc(n, sizeof *t);
    size_t *nn = ds__calloc(n, sizeof *nn);
    ds_status st = t && nn ? DS_SUCCESS : ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %u pieces", g->name, n);
    /* a clone is needed only where a cut may come: decided by the first
     * pCtx's reference (segment_us set and the driver able to cut) */
    int clone = g->segment_us && have_cut_api(cu) && (!g->pieces || g->cut_pending);
    for (uint32_t i = 0; st == DS_SUCCESS && i < n; i++) {
        app_piece *a = &ap[i];
        size_t at = 0;
        a->touched = 1;
        CUresult r = rebind(cu, a->nodes, a->orig, a->types, a->n, rt->pctx[p].ctx, &at);
        if (r != CUDA_SUCCESS) {
            st = ds__fail(ds__cu_status(r), "ds_graph_from_cuda_graphs: re-binding kernel node %zu of graph %u to "
                                            "pCtx %u: %s",
                          at, i, p, ds__cu_error_name(cu, r));
            break;
        }
        nn[i] = a->n;
        t[i].nodes = ds__calloc(a->n, sizeof *t[i].nodes);
        if (!t[i].nodes) {
            st = ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %zu nodes", g->name, a->n);
            break;
        }
        if (!clone) {
            t[i].graph = a->graph;
            memcpy(t[i].nodes, a->nodes, a->n * sizeof *a->nodes);
            continue;
        }
        r = cu->cuGraphClone(&t[i].graph, a->graph);
        if (r == CUDA_SUCCESS)
            t[i].owned = 1;
        for (size_t k = 0; r == CUDA_SUCCESS && k < a->n; k++)
            r = cu->cuGraphNodeFindInClone(&t[i].nodes[k], a->nodes[k], t[i].graph);
        if (r != CUDA_SUCCESS)
            st = ds__fail(ds__cu_status(r), "ds_graph_from_cuda_graphs: cloning graph %u: %s", i,
                          ds__cu_error_name(cu, r));
    }
    int taken = 0;
    if (st == DS_SUCCESS)
        st = adopt_templates(g, p, t, n, nn, rt->pctx[p].ctx, s, 0, &taken);
    if (!taken && t)
        tpls_clear(g, t, n);
    ds__free(t);
    ds__free(nn);
    return st;
}

ds_status ds_graph_from_cuda_graphs(ds_vctx_t v, const CUgraph *graphs, uint32_t count, const ds_graph_attr *attr,
                                    ds_graph_t *out)
{
    DS__TRY(ds__vctx_check(v, "ds_graph_from_cuda_graphs"));
    if (!graphs || !out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_from_cuda_graphs('%s'): %s is NULL", v->name,
                        !graphs ? "graphs" : "out");
    if (!count || count > DS_GRAPH_MAX_SEGMENTS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_from_cuda_graphs('%s'): count %u (1 to %u)", v->name,
                        count, DS_GRAPH_MAX_SEGMENTS);
    for (uint32_t i = 0; i < count; i++)
        if (!graphs[i])
            return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_from_cuda_graphs('%s'): graph %u is NULL", v->name, i);
    struct ds_runtime *rt = v->rt;
    if (ds__faulted(rt))
        return ds__fault_status(rt, "ds_graph_from_cuda_graphs");
    const ds__driver *cu = v->cu;
    if (!cu->cuGraphKernelNodeSetParams)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "ds_graph_from_cuda_graphs: the driver has no cuGraphKernelNodeSetParams_v2");
    struct ds_graph *g;
    DS__TRY(graph_new(v, attr, "ds_graph_from_cuda_graphs", &g));
    g->flags |= DS_GRAPH_EAGER;
    app_piece *ap = ds__calloc(count, sizeof *ap);
    ds_status st = ap ? DS_SUCCESS : ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_graph_from_cuda_graphs: %u graphs", count);
    for (uint32_t i = 0; st == DS_SUCCESS && i < count; i++) {
        ap[i].graph = graphs[i];
        st = app_piece_read(g, &ap[i], i);
    }
    for (uint32_t p = 0; st == DS_SUCCESS && p < rt->num_pctx; p++)
        if ((g->set >> p) & 1u)
            st = app_pctx(g, ap, count, p);
    for (uint32_t i = 0; ap && i < count; i++) {
        app_piece *a = &ap[i];
        if (a->touched) { /* back to the caller's kernels and contexts */
            size_t at = 0;
            CUresult r = rebind(cu, a->nodes, a->orig, a->types, a->n, NULL, &at);
            if (r != CUDA_SUCCESS && st == DS_SUCCESS)
                st = ds__fail(ds__cu_status(r), "ds_graph_from_cuda_graphs: restoring node %zu of graph %u: %s", at,
                              i, ds__cu_error_name(cu, r));
        }
        ds__free(a->nodes);
        ds__free(a->orig);
        ds__free(a->types);
    }
    ds__free(ap);
    if (st != DS_SUCCESS) {
        graph_free(g);
        return st;
    }
    graph_link(g);
    *out = g;
    return DS_SUCCESS;
}

ds_status ds_graph_from_cuda_graph(ds_vctx_t v, CUgraph graph, const ds_graph_attr *attr, ds_graph_t *out)
{
    DS__TRY(ds__vctx_check(v, "ds_graph_from_cuda_graph"));
    if (!graph || !out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_from_cuda_graph('%s'): %s is NULL", v->name,
                        !graph ? "graph" : "out");
    return ds_graph_from_cuda_graphs(v, &graph, 1, attr, out);
}

static uint64_t graph_launches(const struct ds_graph *g)
{
    uint64_t n = 0;
    for (uint32_t p = 0; p < DS_MAX_PCTX; p++)
        n += atomic_load_explicit(&g->launches_on[p], memory_order_relaxed);
    return n;
}

static void unlink_graph(struct ds_graph *g)
{
    for (struct ds_graph **pp = &g->v->graphs; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            return;
        }
}

ds_status ds_graph_destroy(ds_graph_t g)
{
    DS__TRY(ds__graph_check(g, "ds_graph_destroy"));
    struct ds_vctx *v = g->v;
    struct ds_runtime *rt = g->rt;
    if (ds__faulted(rt)) {
        unlink_graph(g);
        graph_free(g);
        return ds__fault_status(rt, "ds_graph_destroy");
    }
    if (graph_launches(g)) {
        /* the vCtx's current stream is behind everything it submitted
         * (remap hand-offs chain the earlier ones into it) */
        CUresult r = v->cu->cuStreamQuery(v->stream);
        if (r == CUDA_ERROR_NOT_READY)
            return ds__fail(DS_ERR_BUSY,
                            "ds_graph_destroy('%s'): work of vCtx '%s' is in flight (the graph's launches may be "
                            "among it); call ds_vctx_synchronize() first",
                            g->name, v->name);
        if (r != CUDA_SUCCESS && ds__fault_note(rt, r, v, "cuStreamQuery")) {
            unlink_graph(g);
            graph_free(g);
            return ds__fault_status(rt, "ds_graph_destroy");
        }
    }
    unlink_graph(g);
    graph_free(g);
    return DS_SUCCESS;
}

void ds__graph_destroy_all(struct ds_vctx *v)
{
    while (v->graphs) {
        struct ds_graph *g = v->graphs;
        v->graphs = g->next;
        graph_free(g);
    }
}

ds_status ds_graph_get_stats(ds_graph_t g, ds_graph_stats *stats)
{
    DS__TRY(ds__graph_check(g, "ds_graph_get_stats"));
    if (!stats)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_get_stats('%s'): stats is NULL", g->name);
    DS__TRY(ds__check_abi_grown(stats, DS__OLD_SIZES(DS_GRAPH_STATS_SIZE_V1), sizeof *stats, "ds_graph_stats"));
    size_t asked = stats->size, size = asked < sizeof *stats ? asked : sizeof *stats;
    ds_graph_stats full = DS_GRAPH_STATS_INIT;
    full.num_pctx = g->rt->num_pctx;
    full.launches = graph_launches(g);
    for (uint32_t p = 0; p < DS_MAX_PCTX; p++) {
        ds_graph_pctx_stats ps;
        memset(&ps, 0, sizeof ps);
        if (atomic_load_explicit(&g->ready[p], memory_order_acquire))
            ps = g->st[p];
        ps.launches = atomic_load_explicit(&g->launches_on[p], memory_order_relaxed);
        full.pctx[p] = ps;
    }
    full.pieces = atomic_load_explicit(&g->pieces_pub, memory_order_relaxed);
    full.segments = atomic_load_explicit(&g->segments_pub, memory_order_relaxed);
    full.segment_us = g->segment_us;
    full.uncut = atomic_load_explicit(&g->uncut, memory_order_relaxed);
    full.cut_points = atomic_load_explicit(&g->cut_points, memory_order_relaxed);
    full.calibrated_pctx = atomic_load_explicit(&g->calibrated_pctx, memory_order_relaxed);
    full.step_us = atomic_load_explicit(&g->step_us, memory_order_relaxed);
    full.longest_segment_us = atomic_load_explicit(&g->longest_us, memory_order_relaxed);
    memcpy(stats, &full, size);
    stats->size = asked;
    return DS_SUCCESS;
}

ds_status ds_graph_get_segment(ds_graph_t g, uint32_t index, ds_graph_segment *out)
{
    DS__TRY(ds__graph_check(g, "ds_graph_get_segment"));
    if (!out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_get_segment('%s'): out is NULL", g->name);
    DS__TRY(ds__check_abi(out, sizeof *out, "ds_graph_segment"));
    if (index >= g->nseg)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_get_segment('%s'): segment %u of %u", g->name, index,
                        g->nseg);
    const ds__seg *sg = &g->seg[index];
    ds_graph_segment s = DS_GRAPH_SEGMENT_INIT;
    s.piece = sg->piece;
    s.nodes = sg->count;
    s.kernel_nodes = sg->kernels;
    s.calibrated_us = sg->calibrated_us;
    static const ds_dim3 zero = {0, 0, 0};
    for (uint32_t p = 0; p < g->rt->num_pctx; p++) {
        double us = 0;
        uint32_t n = ds__profile_get(g->rt->profiles, ds__seg_key(sg), zero, zero, g->rt->pctx[p].sm_count, &us, NULL);
        s.measured_us[p] = n ? us : 0;
        s.samples[p] = n;
    }
    *out = s;
    return DS_SUCCESS;
}
