/*
 * The one shape of the simulated driver's entry points, shared by the files
 * of the driver face: driver_sim.c (devices, contexts, green contexts,
 * streams, events, modules; the table), driver_sim_mem.c (memory, stream
 * memory operations, virtual memory management) and driver_sim_graph.c
 * (capture and graphs). Private to those files.
 *
 * An entry point that touches a device is one SIM_LOCKED definition: its
 * cuda.h prototype, the checks that need no device, the target (how its
 * device is found: a CUdevice, a handle, a stream, the current context) and
 * its body. The shape (check, look the device up and lock it, find the
 * target's object and stream, answer the sticky fault, run the body, unlock,
 * return the status) is written once, in SIM_LOCKED and ds__sim_call_begin.
 * Entry points that need no device are plain functions.
 */
#ifndef DS_SIM_DRIVER_SIM_CALL_H
#define DS_SIM_DRIVER_SIM_CALL_H

#include "sim/driver_sim.h"

/* Every entry point of DS__DRIVER_SYMBOLS is ds__sim_<name>, declared here
 * with the exact cuda.h type (`__typeof__(name)` expands cuMemAlloc to
 * cuMemAlloc_v2 as the table's fields do; `ds__sim_##name` does not): a
 * definition with another prototype is a conflicting-types error, a missing
 * one an undefined symbol of the table (driver_sim.c). */
#define SIM_DECLARE(name, ver, req) __typeof__(name) ds__sim_##name;
DS__DRIVER_SYMBOLS(SIM_DECLARE)
#undef SIM_DECLARE

#define HV(x) ((uint64_t)(uintptr_t)(x))

static inline int is_null_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* The calling thread's current context (a SIM_H_CTX handle, 0 = none). */
uint64_t ds__sim_current_ctx(void);

/* How an entry point reaches its device. */
typedef struct sim_target {
    int by_handle; /* 0: the device of `slot`; 1: the device of handle h */
    int slot;      /* a CUdevice, or the slot a resource or stream names */
    uint64_t h;    /* must be a live object of kind `kind` on its device */
    unsigned kind;
    CUresult bad;  /* what a failed device or handle lookup returns */
    int resolve;   /* also resolve `stream` on the device (its error if not) */
    CUstream stream;
} sim_target;

static inline sim_target on_slot(int slot, CUresult bad)
{
    return (sim_target){ .slot = slot, .bad = bad };
}

static inline sim_target on_device(CUdevice dev) { return on_slot(dev, CUDA_ERROR_INVALID_DEVICE); }

static inline sim_target on_handle(uint64_t h, unsigned kind, CUresult bad)
{
    return (sim_target){ .by_handle = 1, .h = h, .kind = kind, .bad = bad };
}

/* on_green(CUgreenCtx), on_event(CUevent), ...: a handle argument of one
 * kind, and what a bad one gives. */
#define SIM_ON_HANDLE(fn, type, kind, bad) \
    static inline sim_target fn(type x) { return on_handle(HV(x), kind, bad); }
SIM_ON_HANDLE(on_green, CUgreenCtx, SIM_H_GREEN, CUDA_ERROR_INVALID_CONTEXT)
SIM_ON_HANDLE(on_event, CUevent, SIM_H_EVENT, CUDA_ERROR_INVALID_HANDLE)
SIM_ON_HANDLE(on_module, CUmodule, SIM_H_MODULE, CUDA_ERROR_INVALID_HANDLE)
SIM_ON_HANDLE(on_func, CUfunction, SIM_H_FUNC, CUDA_ERROR_INVALID_HANDLE)
/* Bad CUgraph, CUgraphNode and CUgraphExec handles give
 * CUDA_ERROR_INVALID_VALUE (the only error cuda.h documents for them). */
SIM_ON_HANDLE(on_graph, CUgraph, SIM_H_GRAPH, CUDA_ERROR_INVALID_VALUE)
SIM_ON_HANDLE(on_node, CUgraphNode, SIM_H_NODE, CUDA_ERROR_INVALID_VALUE)
SIM_ON_HANDLE(on_exec, CUgraphExec, SIM_H_EXEC, CUDA_ERROR_INVALID_VALUE)
#undef SIM_ON_HANDLE

/* A CUfunction, or a CUkernel passed as one (cuLaunchKernel, cuFuncGetName):
 * the object is the sim_func either way. */
static inline sim_target on_func_or_kernel(CUfunction f)
{
    return sim_h_kind(HV(f)) == SIM_H_KERNEL ? on_handle(HV(f), SIM_H_KERNEL, CUDA_ERROR_INVALID_HANDLE)
                                             : on_func(f);
}

/* The calling thread's current context (for calls that name no device). */
static inline sim_target on_current(void)
{
    return on_handle(ds__sim_current_ctx(), SIM_H_CTX, CUDA_ERROR_INVALID_CONTEXT);
}

/* ... and also resolve a stream argument on the target's device. */
static inline sim_target with_stream(sim_target t, CUstream hs)
{
    t.resolve = 1;
    t.stream = hs;
    return t;
}

/* The device a stream argument belongs to (the current context's for the
 * NULL stream), with the stream resolved. */
static inline sim_target on_stream(CUstream hs)
{
    if (is_null_stream(hs))
        return with_stream(on_current(), hs);
    uint64_t h = HV(hs);
    /* not a stream handle: slot -1 fails the lookup with `bad` */
    int slot = sim_h_kind(h) == SIM_H_STREAM ? sim_h_slot(h) : -1;
    return with_stream(on_slot(slot, CUDA_ERROR_INVALID_HANDLE), hs);
}

/* Flags of a call: SIM_STICKY answers the device's sticky fault, if any,
 * instead of running the body (checked after the lookups); SIM_VMM_BYTES
 * measures, before the device is locked, the device memory the virtual
 * memory management API holds on the target's device (its mutex is never
 * taken under a device lock) into sim_call.vmm_bytes. */
#define SIM_STICKY 1u
#define SIM_VMM_BYTES 2u

/* What a body gets: the locked device, the target's object and stream. */
typedef struct sim_call {
    sim_dev *d;
    void *obj;        /* the handle's object (the sim_ctx for on_current) */
    sim_stream *s;    /* the resolved stream, when the target names one */
    size_t vmm_bytes; /* with SIM_VMM_BYTES */
} sim_call;

/* The one acquire path: finds and locks the target's device, its object and
 * stream (and answers the sticky fault under SIM_STICKY). CUDA_SUCCESS: the
 * device is held, release it with ds__sim_dev_release(c->d); else nothing is
 * held. */
CUresult ds__sim_call_begin(sim_target t, unsigned flags, sim_call *c);

/*
 * SIM_LOCKED(name, (prototype), (argument names), target, flags, checks...)
 * { body }
 * defines the entry point ds__sim_<name>(prototype): it runs `checks`
 * (statements that need no device; they may return, declare what `target`
 * uses, or adjust an argument), then the body that follows, as a function of
 * (sim_call *c, prototype) on the locked device of `target`, and returns the
 * body's status. A body uses the arguments it needs (unused ones are not
 * warned about in these files).
 */
#define SIM__LIST(...) __VA_ARGS__
#define SIM_LOCKED(name, params, args, target, flags, ...)                    \
    static CUresult sim_body_##name(sim_call *c, SIM__LIST params);           \
    CUresult ds__sim_##name params                                            \
    {                                                                         \
        __VA_ARGS__                                                           \
        sim_call sim__c;                                                      \
        CUresult sim__r = ds__sim_call_begin((target), (flags), &sim__c);     \
        if (sim__r == CUDA_SUCCESS) {                                         \
            sim__r = sim_body_##name(&sim__c, SIM__LIST args);                \
            ds__sim_dev_release(sim__c.d);                                    \
        }                                                                     \
        return sim__r;                                                        \
    }                                                                         \
    static CUresult sim_body_##name(sim_call *c, SIM__LIST params)

/* A body takes every argument of its entry point and uses those it needs. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* Work a capturing stream cannot take (an event record or wait, a value
 * operation, an asynchronous copy, a synchronize or query, a graph launch or
 * upload): as on the GPU, the call fails and the capture is invalidated
 * (cuStreamEndCapture then returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). */
static inline CUresult capture_refuse(sim_stream *s)
{
    s->capture_invalid = 1;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* Device memory held by the virtual memory management API's physical
 * allocations on the device of slot (cuMemCreate until the last unmap after
 * cuMemRelease; driver_sim_mem.c). Takes its mutex: call it with no device
 * lock held. */
size_t ds__sim_vmm_device_bytes(int slot);

#endif /* DS_SIM_DRIVER_SIM_CALL_H */
