/*
 * The simulated driver's CUDA graphs: stream capture, templates, executables
 * (driver_sim_call.h gives the entry points' shape).
 *
 * What the simulated driver models of CUDA graphs is what libdetshare uses
 * and what was measured on an H100 and an H200 (tools/devprobe/graphprobe.cu):
 *  - Capture records kernel launches only. A kernel launched on a capturing
 *    stream becomes a kernel node (function, dimensions, a copy of the
 *    argument values) bound to the capturing stream's context: the green
 *    context's CUcontext, or the primary context. Any other work on the
 *    stream (event record or wait, value operations, asynchronous copies,
 *    synchronize, query, graph launch or upload) fails with
 *    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture. Other
 *    streams are unaffected (every simulated stream is non-blocking, so the
 *    legacy stream's implicit synchronization never reaches a capture).
 *  - A graph runs in the context its kernel nodes were captured in, whatever
 *    stream launches it: cuGraphLaunch orders the nodes with the stream's
 *    other work, but each kernel's blocks go to the SMs of its node's context
 *    (measured: a graph captured on a 16-SM green context, launched on a
 *    116-SM green context's stream or on a primary-context stream, ran on the
 *    same 16 SMs).
 *  - A node's context can be changed only by naming the kernel through
 *    `kern` with `func` NULL (cuGraphKernelNodeSetParams); with `func` set,
 *    `ctx` is ignored and the node takes the calling thread's current
 *    context (measured: re-bound that way under the primary context, the
 *    node ran on every SM). Nodes carry `kern` only for kernels that have a
 *    CUkernel (cudart and cuLibrary launches; here ds_sim_kernel_create
 *    kernels), never for cuModuleGetFunction functions.
 *  - Launches of one executable graph are serialized (cuGraphLaunch: "each
 *    launch is ordered behind ... any previous launches of hGraphExec").
 *  - An executable holds device memory (DS__SIM_EXEC_BYTES + a node's
 *    DS__SIM_EXEC_NODE_BYTES each) until cuGraphExecDestroy; cuMemGetInfo
 *    shows it.
 * Capture modes: GLOBAL and THREAD_LOCAL captures must be ended by the
 * thread that began them (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD); the
 * restrictions GLOBAL puts on other threads' unsafe calls are not modelled
 * (cuThreadExchangeStreamCaptureMode only keeps each thread's mode).
 *  - Edges: a captured graph is the chain of its nodes in capture order
 *    (one stream); cuGraphGetEdges reports that chain over the nodes a
 *    graph has now, so a graph cut out of a chain by cuGraphDestroyNode
 *    is still a chain (on the GPU, destroying a node in the middle of a
 *    chain would leave its neighbours unconnected; libdetshare removes only
 *    a prefix and a suffix). Fork and join shapes are tested on the cutting
 *    function itself (tests/test_segment.c), not through the simulator.
 *  - cuGraphClone copies the nodes (new handles, remembered for
 *    cuGraphNodeFindInClone).
 * Bad CUgraph, CUgraphNode and CUgraphExec handles give
 * CUDA_ERROR_INVALID_VALUE (the only error cuda.h documents for them).
 */
#include "sim/driver_sim_call.h"

#include <string.h>

/* Only a created stream can capture: the NULL stream (legacy, per-thread, a
 * green context's default stream reached through it) cannot. */
SIM_LOCKED(cuStreamBeginCapture, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode),
           on_stream(hStream), SIM_STICKY,
           if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
           if (is_null_stream(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;)
{
    sim_stream *s = c->s;
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE; /* already capturing */
    if (!(s->capture = ds__sim_graph_new()))
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->capture_invalid = 0;
    s->capture_mode = (int)mode;
    s->capture_thread = pthread_self();
    return CUDA_SUCCESS;
}

/* Ends the capture: the graph of its nodes in capture order (none: a valid,
 * empty graph), or, when it was invalidated, NULL and the recording freed. */
SIM_LOCKED(cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph),
           on_stream(hStream), SIM_STICKY,
           if (!phGraph) return CUDA_ERROR_INVALID_VALUE;)
{
    sim_stream *s = c->s;
    sim_graph *g = s->capture;
    if (!g)
        return CUDA_ERROR_ILLEGAL_STATE; /* not capturing */
    if (s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        !pthread_equal(s->capture_thread, pthread_self()))
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (s->capture_invalid) {
        s->capture = NULL;
        s->capture_invalid = 0;
        ds__sim_graph_free(c->d, g);
        *phGraph = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (!(g->handle = ds__sim_handle_new(c->d, SIM_H_GRAPH, g)))
        return CUDA_ERROR_OUT_OF_MEMORY; /* still capturing */
    s->capture = NULL;
    *phGraph = (CUgraph)(uintptr_t)g->handle;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuGraphDestroy, (CUgraph hGraph), (hGraph), on_graph(hGraph), 0)
{
    ds__sim_graph_free(c->d, c->obj); /* executables made from it keep their copies */
    return CUDA_SUCCESS;
}

/* cuda.h: nodes NULL -> the count; else *numNodes entries are filled, those
 * past the graph's nodes set to NULL, and *numNodes becomes the number
 * obtained. */
SIM_LOCKED(cuGraphGetNodes, (CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes), (hGraph, nodes, numNodes),
           on_graph(hGraph), 0,
           if (!numNodes) return CUDA_ERROR_INVALID_VALUE;)
{
    const sim_graph *g = c->obj;
    if (!nodes) {
        *numNodes = g->n;
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < *numNodes; i++)
        nodes[i] = i < g->n ? (CUgraphNode)(uintptr_t)g->nodes[i]->handle : NULL;
    if (*numNodes > g->n)
        *numNodes = g->n;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuGraphNodeGetType, (CUgraphNode hNode, CUgraphNodeType *type), (hNode, type),
           on_node(hNode), 0,
           if (!type) return CUDA_ERROR_INVALID_VALUE;)
{
    *type = CU_GRAPH_NODE_TYPE_KERNEL; /* the only kind recorded */
    return CUDA_SUCCESS;
}

/* kernelParams (or extra, for a node captured from a packed buffer) point to
 * the node's own copies, valid until the node's parameters are set again or
 * its graph is destroyed. */
SIM_LOCKED(cuGraphKernelNodeGetParams, (CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams),
           (hNode, nodeParams),
           on_node(hNode), 0,
           if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;)
{
    sim_gnode *n = c->obj;
    CUDA_KERNEL_NODE_PARAMS *p = nodeParams;
    memset(p, 0, sizeof *p);
    p->func = (CUfunction)(uintptr_t)n->func;
    p->kern = (CUkernel)(uintptr_t)n->kern;
    p->ctx = (CUcontext)(uintptr_t)n->ctx;
    p->gridDimX = n->grid[0];
    p->gridDimY = n->grid[1];
    p->gridDimZ = n->grid[2];
    p->blockDimX = n->block[0];
    p->blockDimY = n->block[1];
    p->blockDimZ = n->block[2];
    p->sharedMemBytes = n->smem;
    p->kernelParams = n->packed ? NULL : n->argv;
    p->extra = n->packed ? n->extra : NULL;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuGraphClone, (CUgraph *phGraphClone, CUgraph originalGraph), (phGraphClone, originalGraph),
           on_graph(originalGraph), 0,
           if (!phGraphClone) return CUDA_ERROR_INVALID_VALUE;)
{
    sim_graph *g;
    CUresult r = ds__sim_graph_clone(c->d, c->obj, &g);
    if (r == CUDA_SUCCESS)
        *phGraphClone = (CUgraph)(uintptr_t)g->handle;
    return r;
}

SIM_LOCKED(cuGraphNodeFindInClone, (CUgraphNode *phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph),
           (phNode, hOriginalNode, hClonedGraph),
           on_graph(hClonedGraph), 0,
           if (!phNode || !hOriginalNode) return CUDA_ERROR_INVALID_VALUE;)
{
    const sim_graph *g = c->obj;
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->orig == HV(hOriginalNode)) {
            *phNode = (CUgraphNode)(uintptr_t)g->nodes[i]->handle;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_LOCKED(cuGraphDestroyNode, (CUgraphNode hNode), (hNode), on_node(hNode), 0)
{
    ds__sim_node_destroy(c->d, c->obj);
    return CUDA_SUCCESS;
}

/* The chain of the graph's nodes (see the file's comment). cuda.h: from and
 * to NULL -> the count; else up to *numEdges entries, the rest NULL, and
 * *numEdges the number obtained; edgeData, when given, all default. */
SIM_LOCKED(cuGraphGetEdges, (CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
                             size_t *numEdges),
           (hGraph, from, to, edgeData, numEdges),
           on_graph(hGraph), 0,
           if (!numEdges || (!from) != (!to)) return CUDA_ERROR_INVALID_VALUE;)
{
    const sim_graph *g = c->obj;
    size_t edges = g->n ? g->n - 1 : 0;
    if (!from) {
        *numEdges = edges;
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < *numEdges; i++) {
        from[i] = i < edges ? (CUgraphNode)(uintptr_t)g->nodes[i]->handle : NULL;
        to[i] = i < edges ? (CUgraphNode)(uintptr_t)g->nodes[i + 1]->handle : NULL;
        if (edgeData)
            memset(&edgeData[i], 0, sizeof edgeData[i]);
    }
    if (*numEdges > edges)
        *numEdges = edges;
    return CUDA_SUCCESS;
}

/* The calling thread's current context if it is one of d's, else 0. */
static uint64_t current_ctx_of(const sim_dev *d)
{
    uint64_t ctx = ds__sim_current_ctx();
    return ds__sim_ctx_mask(d, ctx) ? ctx : 0;
}

/* func set: the node runs func in the calling thread's current context, ctx
 * ignored (as cuda.h documents and as measured). func NULL: kern names the
 * kernel and ctx the context (NULL: the current one); this is the re-binding
 * that works on the GPU. Dimensions, shared memory and argument values are
 * checked as for a launch, and copied. */
SIM_LOCKED(cuGraphKernelNodeSetParams, (CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams),
           (hNode, nodeParams),
           on_node(hNode), 0,
           if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;)
{
    sim_dev *d = c->d;
    sim_gnode *n = c->obj;
    const CUDA_KERNEL_NODE_PARAMS *p = nodeParams;
    const sim_func *f;
    uint64_t kern, ctx;
    if (p->func) {
        uint64_t hf = HV(p->func);
        f = ds__sim_handle_get(d, hf, sim_h_kind(hf) == SIM_H_KERNEL ? SIM_H_KERNEL : SIM_H_FUNC);
        if (!f)
            return CUDA_ERROR_INVALID_HANDLE;
        kern = f->kern;
        ctx = current_ctx_of(d);
    } else if (p->kern) {
        f = ds__sim_handle_get(d, HV(p->kern), SIM_H_KERNEL);
        if (!f)
            return CUDA_ERROR_INVALID_HANDLE;
        kern = f->kern;
        ctx = p->ctx ? HV(p->ctx) : current_ctx_of(d);
        if (!ds__sim_ctx_mask(d, ctx))
            return CUDA_ERROR_INVALID_CONTEXT;
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT; /* no current context of this device */
    const unsigned grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ };
    const unsigned block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
    CUresult r = ds__sim_launch_check(f, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
    if (r != CUDA_SUCCESS)
        return r;
    return ds__sim_node_set(n, f, kern, ctx, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
}

/* Every flag cuda.h defines is accepted and changes nothing here (the model
 * has no graph memory nodes, device launch or node priorities). */
SIM_LOCKED(cuGraphInstantiateWithFlags, (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags),
           (phGraphExec, hGraph, flags),
           on_graph(hGraph), SIM_STICKY | SIM_VMM_BYTES,
           const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                            CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                            CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                            CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
           if (!phGraphExec || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;)
{
    sim_exec *e;
    CUresult r = ds__sim_exec_new(c->d, c->obj, c->vmm_bytes, &e);
    if (r == CUDA_SUCCESS)
        *phGraphExec = (CUgraphExec)(uintptr_t)e->handle;
    return r;
}

SIM_LOCKED(cuGraphExecDestroy, (CUgraphExec hGraphExec), (hGraphExec), on_exec(hGraphExec), 0)
{
    ds__sim_exec_free(c->d, c->obj); /* launches in flight still complete */
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuGraphUpload, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream),
           with_stream(on_exec(hGraphExec), hStream), SIM_STICKY)
{
    return c->s->capture ? capture_refuse(c->s) : CUDA_SUCCESS; /* nothing to upload */
}

SIM_LOCKED(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream),
           with_stream(on_exec(hGraphExec), hStream), SIM_STICKY)
{
    return c->s->capture ? capture_refuse(c->s) : ds__sim_exec_launch(c->d, c->obj, c->s, hStream);
}
