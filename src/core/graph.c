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

/* ------------------------------------------------------------------------ */
/* the check                                                                 */

/* The nodes of `graph` (ds__malloc'd array in *out, count in *n). */
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

/* The node signature of `graph`; checks that every kernel node runs in `ctx`
 * (ctx NULL: not checked). */
static ds_status signature(const struct ds_graph *g, CUgraph graph, CUcontext ctx, uint32_t p, ds__gnode **out,
                           uint32_t *count, uint32_t *kernels)
{
    const ds__driver *cu = g->rt->cu;
    CUgraphNode *nodes;
    size_t n;
    DS__TRY(graph_nodes(g, graph, &nodes, &n));
    if (!n)
        return ds__fail(DS_ERR_CAPTURE,
                        "graph '%s': the capture on pCtx %u holds no work (did the capture function enqueue its "
                        "work on the stream it was handed?)",
                        g->name, p);
    ds__gnode *sig = ds__calloc(n, sizeof *sig);
    if (!sig) {
        ds__free(nodes);
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': %zu nodes", g->name, n);
    }
    ds_status st = DS_SUCCESS;
    uint32_t k = 0;
    for (size_t i = 0; i < n && st == DS_SUCCESS; i++) {
        CUresult r = cu->cuGraphNodeGetType(nodes[i], &sig[i].type);
        if (r == CUDA_SUCCESS && sig[i].type == CU_GRAPH_NODE_TYPE_KERNEL) {
            CUDA_KERNEL_NODE_PARAMS kp;
            memset(&kp, 0, sizeof kp);
            r = cu->cuGraphKernelNodeGetParams(nodes[i], &kp);
            if (r == CUDA_SUCCESS) {
                sig[i].func = kp.func;
                sig[i].kern = kp.kern;
                sig[i].grid[0] = kp.gridDimX, sig[i].grid[1] = kp.gridDimY, sig[i].grid[2] = kp.gridDimZ;
                sig[i].block[0] = kp.blockDimX, sig[i].block[1] = kp.blockDimY, sig[i].block[2] = kp.blockDimZ;
                sig[i].smem = kp.sharedMemBytes;
                k++;
                if (ctx && kp.ctx != ctx)
                    st = ds__fail(DS_ERR_CAPTURE,
                                  "graph '%s': kernel node %zu captured on pCtx %u runs in another context (work "
                                  "enqueued on a stream other than the one the capture function was handed, or "
                                  "forked from it into another context)",
                                  g->name, i, p);
            }
        }
        if (r != CUDA_SUCCESS)
            st = ds__fail(ds__cu_status(r), "graph '%s': reading node %zu: %s", g->name, i,
                          ds__cu_error_name(cu, r));
    }
    ds__free(nodes);
    if (st != DS_SUCCESS) {
        ds__free(sig);
        return st;
    }
    *out = sig;
    *count = (uint32_t)n;
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

static ds_status compare(const struct ds_graph *g, const ds__gnode *sig, uint32_t n, uint32_t p)
{
    if (n != g->ref_nodes)
        return ds__fail(DS_ERR_CAPTURE,
                        "graph '%s': pCtx %u captured %u nodes, the first instantiation %u: the capture function "
                        "must enqueue the same work on every pCtx",
                        g->name, p, n, g->ref_nodes);
    for (uint32_t i = 0; i < n; i++) {
        const ds__gnode *a = &g->ref[i], *b = &sig[i];
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
                            "graph '%s': node %u captured on pCtx %u differs from the first instantiation in its "
                            "%s (grid %u,%u,%u block %u,%u,%u vs %u,%u,%u / %u,%u,%u): a kernel's launch must not "
                            "depend on where it runs",
                            g->name, i, p, what, b->grid[0], b->grid[1], b->grid[2], b->block[0], b->block[1],
                            b->block[2], a->grid[0], a->grid[1], a->grid[2], a->block[0], a->block[1], a->block[2]);
    }
    return DS_SUCCESS;
}

/* Checks graph against the reference (or makes it the reference), then
 * instantiates and uploads it on `s` and publishes the instantiation of p. */
static ds_status install(struct ds_graph *g, CUgraph graph, CUcontext ctx, uint32_t p, CUstream s, double capture_us)
{
    struct ds_runtime *rt = g->rt;
    const ds__driver *cu = rt->cu;
    ds__gnode *sig = NULL;
    uint32_t n = 0, kernels = 0;
    DS__TRY(signature(g, graph, ctx, p, &sig, &n, &kernels));
    ds_status st = g->ref ? compare(g, sig, n, p) : DS_SUCCESS;
    if (st != DS_SUCCESS) {
        ds__free(sig);
        return st;
    }
    size_t free0 = 0, free1 = 0, total = 0;
    int mem = cu->cuMemGetInfo && cu->cuMemGetInfo(&free0, &total) == CUDA_SUCCESS;
    double t0 = ds__wall_ms();
    CUgraphExec exec = NULL;
    CUresult r = cu->cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (r == CUDA_SUCCESS && cu->cuGraphUpload)
        r = cu->cuGraphUpload(exec, s);
    if (r == CUDA_SUCCESS)
        r = cu->cuStreamSynchronize(s);
    double t1 = ds__wall_ms();
    if (r != CUDA_SUCCESS) {
        if (exec)
            cu->cuGraphExecDestroy(exec);
        ds__free(sig);
        return ds__fail(ds__cu_status(r), "graph '%s': instantiating on pCtx %u: %s", g->name, p,
                        ds__cu_error_name(cu, r));
    }
    mem = mem && cu->cuMemGetInfo(&free1, &total) == CUDA_SUCCESS;
    if (!g->ref) {
        g->ref = sig;
        g->ref_nodes = n;
    } else {
        ds__free(sig);
    }
    ds_graph_pctx_stats *ps = &g->st[p];
    ps->instantiated = 1;
    ps->nodes = n;
    ps->kernel_nodes = kernels;
    ps->capture_us = capture_us;
    ps->instantiate_us = (t1 - t0) * 1e3;
    ps->device_bytes = mem ? (int64_t)free0 - (int64_t)free1 : 0;
    atomic_store_explicit(&g->exec[p], exec, memory_order_release);
    ds__log(DS_LOG_DEBUG, "graph '%s' on pCtx %u: %u nodes (%u kernels), capture %.0f us, instantiate %.0f us, %lld bytes",
            g->name, p, n, kernels, capture_us, ps->instantiate_us, (long long)ps->device_bytes);
    return DS_SUCCESS;
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
    CUgraph graph = NULL;
    double t0 = ds__wall_ms();
    CUresult r = cu->cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS)
        r = cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (r != CUDA_SUCCESS) {
        st = ds__fail(ds__cu_status(r), "graph '%s': beginning the capture on pCtx %u: %s", g->name, p,
                      ds__cu_error_name(cu, r));
    } else {
        int rc = g->fn(s, g->user);
        r = cu->cuStreamEndCapture(s, &graph); /* always ended: the stream is ours */
        if (rc != 0)
            st = ds__fail(DS_ERR_CAPTURE, "graph '%s': the capture function returned %d on pCtx %u", g->name, rc, p);
        else if (r == CUDA_ERROR_OUT_OF_MEMORY)
            st = ds__fail(DS_ERR_OUT_OF_MEMORY, "graph '%s': ending the capture on pCtx %u: out of memory", g->name,
                          p);
        else if (r != CUDA_SUCCESS)
            st = ds__fail(DS_ERR_CAPTURE,
                          "graph '%s': the capture on pCtx %u failed: %s (the capture function must not "
                          "synchronize, query or allocate, and must join every stream it forked)",
                          g->name, p, ds__cu_error_name(cu, r));
    }
    double capture_us = (ds__wall_ms() - t0) * 1e3;
    cu->cuCtxSetCurrent(prev);
    if (st == DS_SUCCESS && !graph)
        st = ds__fail(DS_ERR_CAPTURE, "graph '%s': the capture on pCtx %u returned no graph", g->name, p);
    if (st == DS_SUCCESS)
        st = install(g, graph, ctx, p, s, capture_us);
    if (graph)
        cu->cuGraphDestroy(graph);
    return st;
}

ds_status ds__graph_exec_slow(struct ds_graph *g, uint32_t p, CUgraphExec *out)
{
    if (!((g->set >> p) & 1u)) {
        char list[DS_MAX_PCTX * 4 + 1] = "";
        size_t len = 0;
        for (uint32_t i = 0; i < g->rt->num_pctx && len + 5 < sizeof list; i++)
            if ((g->set >> i) & 1u)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%u", len ? "," : "", i);
        return ds__fail(DS_ERR_NOT_FOUND, "ds_graph_launch: graph '%s' was made for pCtxs %s, and vCtx '%s' is on pCtx %u",
                        g->name, list, g->v->name, p);
    }
    if (!g->fn) /* from_cuda_graph: every pCtx of the set was instantiated */
        return ds__fail(DS_ERR_INTERNAL, "graph '%s' has no instantiation for pCtx %u", g->name, p);
    DS__TRY(capture(g, p));
    *out = atomic_load_explicit(&g->exec[p], memory_order_relaxed);
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* lifecycle                                                                 */

static void graph_free(struct ds_graph *g)
{
    const ds__driver *cu = g->rt->cu;
    for (uint32_t p = 0; p < DS_MAX_PCTX; p++) {
        CUgraphExec e = atomic_load_explicit(&g->exec[p], memory_order_relaxed);
        if (e)
            cu->cuGraphExecDestroy(e);
        atomic_store_explicit(&g->exec[p], NULL, memory_order_relaxed);
    }
    ds__free(g->ref);
    g->ref = NULL;
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
        DS__TRY(ds__check_abi(attr, sizeof *attr, "ds_graph_attr"));
        a = *attr;
    }
    if ((a.pctxs == NULL) != (a.num_pctxs == 0))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "%s: ds_graph_attr pctxs and num_pctxs must be both set or both 0",
                        fn);
    if (a.flags & ~DS_GRAPH_EAGER)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "%s: unknown ds_graph_attr flags 0x%x", fn, a.flags & ~DS_GRAPH_EAGER);
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
    snprintf(g->name, sizeof g->name, "%s", a.name ? a.name : "graph");
    atomic_store(&g->magic, DS__GRAPH_MAGIC);
    *out = g;
    return DS_SUCCESS;
}

static void graph_link(struct ds_graph *g)
{
    g->next = g->v->graphs;
    g->v->graphs = g;
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

ds_status ds_graph_from_cuda_graph(ds_vctx_t v, CUgraph graph, const ds_graph_attr *attr, ds_graph_t *out)
{
    DS__TRY(ds__vctx_check(v, "ds_graph_from_cuda_graph"));
    if (!graph || !out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_from_cuda_graph('%s'): %s is NULL", v->name,
                        !graph ? "graph" : "out");
    struct ds_runtime *rt = v->rt;
    if (ds__faulted(rt))
        return ds__fault_status(rt, "ds_graph_from_cuda_graph");
    const ds__driver *cu = v->cu;
    if (!cu->cuGraphKernelNodeSetParams)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "ds_graph_from_cuda_graph: the driver has no cuGraphKernelNodeSetParams_v2");
    struct ds_graph *g;
    DS__TRY(graph_new(v, attr, "ds_graph_from_cuda_graph", &g));
    g->flags |= DS_GRAPH_EAGER;

    CUgraphNode *nodes = NULL;
    size_t n = 0;
    CUDA_KERNEL_NODE_PARAMS *orig = NULL;
    CUgraphNodeType *types = NULL;
    CUstream s = NULL;
    int touched = 0;
    ds_status st = graph_nodes(g, graph, &nodes, &n);
    if (st == DS_SUCCESS && !n)
        st = ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_from_cuda_graph('%s'): the graph has no node", v->name);
    if (st == DS_SUCCESS) {
        orig = ds__calloc(n, sizeof *orig);
        types = ds__calloc(n, sizeof *types);
        if (!orig || !types)
            st = ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_graph_from_cuda_graph: %zu nodes", n);
    }
    for (size_t i = 0; st == DS_SUCCESS && i < n; i++) {
        CUresult r = cu->cuGraphNodeGetType(nodes[i], &types[i]);
        if (r == CUDA_SUCCESS && types[i] == CU_GRAPH_NODE_TYPE_KERNEL)
            r = cu->cuGraphKernelNodeGetParams(nodes[i], &orig[i]);
        if (r != CUDA_SUCCESS)
            st = ds__fail(ds__cu_status(r), "ds_graph_from_cuda_graph: reading node %zu: %s", i,
                          ds__cu_error_name(cu, r));
        else if (!rebind_type_ok(types[i]))
            st = ds__fail(DS_ERR_NOT_SUPPORTED,
                          "ds_graph_from_cuda_graph('%s'): node %zu is of type %d (a child graph, a conditional or "
                          "another node that cannot be moved between pCtxs); capture the work through "
                          "ds_graph_create() instead",
                          v->name, i, (int)types[i]);
        else if (types[i] == CU_GRAPH_NODE_TYPE_KERNEL && !orig[i].kern)
            st = ds__fail(DS_ERR_NOT_SUPPORTED,
                          "ds_graph_from_cuda_graph('%s'): kernel node %zu names its kernel only as a CUfunction "
                          "(cuModuleGetFunction), which the driver cannot move to another context; capture the "
                          "work through ds_graph_create() instead",
                          v->name, i);
    }
    for (uint32_t p = 0; st == DS_SUCCESS && p < rt->num_pctx; p++) {
        if (!((g->set >> p) & 1u))
            continue;
        st = capture_stream(g, p, &s);
        if (st != DS_SUCCESS)
            break;
        touched = 1;
        size_t at = 0;
        CUresult r = rebind(cu, nodes, orig, types, n, rt->pctx[p].ctx, &at);
        if (r != CUDA_SUCCESS)
            st = ds__fail(ds__cu_status(r), "ds_graph_from_cuda_graph: re-binding kernel node %zu to pCtx %u: %s", at,
                          p, ds__cu_error_name(cu, r));
        else
            st = install(g, graph, rt->pctx[p].ctx, p, s, 0);
    }
    if (touched) { /* back to the caller's kernels and contexts */
        size_t at = 0;
        CUresult r = rebind(cu, nodes, orig, types, n, NULL, &at);
        if (r != CUDA_SUCCESS && st == DS_SUCCESS)
            st = ds__fail(ds__cu_status(r), "ds_graph_from_cuda_graph: restoring node %zu: %s", at,
                          ds__cu_error_name(cu, r));
    }
    ds__free(nodes);
    ds__free(orig);
    ds__free(types);
    if (st != DS_SUCCESS) {
        graph_free(g);
        return st;
    }
    graph_link(g);
    *out = g;
    return DS_SUCCESS;
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
    DS__TRY(ds__check_abi(stats, sizeof *stats, "ds_graph_stats"));
    stats->num_pctx = g->rt->num_pctx;
    stats->launches = graph_launches(g);
    for (uint32_t p = 0; p < DS_MAX_PCTX; p++) {
        ds_graph_pctx_stats ps;
        memset(&ps, 0, sizeof ps);
        if (atomic_load_explicit(&g->exec[p], memory_order_acquire))
            ps = g->st[p];
        ps.launches = atomic_load_explicit(&g->launches_on[p], memory_order_relaxed);
        stats->pctx[p] = ps;
    }
    return DS_SUCCESS;
}
