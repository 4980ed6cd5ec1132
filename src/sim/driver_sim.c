/*
 * The simulated driver table: every entry point of DS__DRIVER_SYMBOLS with the
 * exact cuda.h prototype, implemented over the engine (engine.h). This file
 * calls the engine; the engine never calls back.
 *
 * Conventions (each mirrors the real driver where it is documented):
 *  - NULL output pointers and NULL inputs give CUDA_ERROR_INVALID_VALUE.
 *  - Bad CUcontext / CUgreenCtx handles: CUDA_ERROR_INVALID_CONTEXT; bad
 *    streams, events, modules, functions: CUDA_ERROR_INVALID_HANDLE; bad
 *    CUdevice: CUDA_ERROR_INVALID_DEVICE; bad resources or descriptors:
 *    CUDA_ERROR_INVALID_VALUE / _INVALID_RESOURCE_TYPE / _CONFIGURATION.
 *  - Calls that name no device (cuMemAlloc, cuEventCreate, cuModuleLoadData,
 *    NULL-stream calls with no other handle) use the calling thread's current
 *    context (cuCtxSetCurrent) and give CUDA_ERROR_INVALID_CONTEXT without one.
 *  - The NULL stream (also CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) is the
 *    default stream of the current green context when one of this device is
 *    current, else the device's default stream over all SMs. Every simulated
 *    stream is non-blocking, so the NULL stream has no implicit
 *    synchronization with other streams (green-context streams never do).
 *  - A stream whose green context was destroyed keeps running its work but
 *    answers CUDA_ERROR_CONTEXT_IS_DESTROYED (also to cuStreamDestroy) and is
 *    freed with the device, as the driver documents for cuGreenCtxDestroy.
 *  - Events and streams of different simulated devices cannot be mixed
 *    (CUDA_ERROR_INVALID_HANDLE).
 *
 * Shape: an entry point checks the arguments that need no device, then calls
 * sim_locked() with a target (how its device is found: a CUdevice, a handle,
 * a stream, the current context) and a body; sim_locked() looks the device up,
 * locks it, finds the target's object and stream, optionally answers the
 * device's sticky fault, runs the body and unlocks. A body states only the
 * entry point's own work, on the locked device.
 */
#include "seam/alloc.h"
#include "sim/driver_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "seam/log.h"

/* The calling thread's current context (a SIM_H_CTX handle, 0 = none). */
static _Thread_local uint64_t tl_ctx;

#define HV(x) ((uint64_t)(uintptr_t)(x))

static int is_null_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

static sim_stream *default_stream(sim_dev *d)
{
    if (tl_ctx && sim_h_slot(tl_ctx) == d->slot) {
        sim_ctx *c = ds__sim_handle_get(d, tl_ctx, SIM_H_CTX);
        if (c && c->green)
            return c->green->default_stream;
    }
    return d->default_stream;
}

CUresult ds__sim_stream_resolve(sim_dev *d, CUstream hs, sim_stream **out)
{
    if (is_null_stream(hs)) {
        *out = default_stream(d);
        return CUDA_SUCCESS;
    }
    sim_stream *s = ds__sim_handle_get(d, HV(hs), SIM_H_STREAM);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->orphaned)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = s;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* The wrapper: find the device, lock it, run the body, unlock               */
/* ------------------------------------------------------------------------ */

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

/* sim_locked flag: answer the device's sticky fault, if any, instead of
 * running the body (checked after the lookups). */
#define SIM_STICKY 1u

/* What a body gets: the locked device, the target's object and stream, and
 * the entry point's own arguments. */
typedef struct sim_call {
    sim_dev *d;
    void *obj;     /* the handle's object (the sim_ctx for on_current) */
    sim_stream *s; /* the resolved stream, when the target names one */
    void *arg;
} sim_call;

typedef CUresult (*sim_body)(sim_call *c);

static sim_target on_slot(int slot, CUresult bad)
{
    return (sim_target){ .slot = slot, .bad = bad };
}

static sim_target on_device(CUdevice dev)
{
    return on_slot(dev, CUDA_ERROR_INVALID_DEVICE);
}

static sim_target on_handle(uint64_t h, unsigned kind, CUresult bad)
{
    return (sim_target){ .by_handle = 1, .h = h, .kind = kind, .bad = bad };
}

static sim_target on_green(CUgreenCtx g) { return on_handle(HV(g), SIM_H_GREEN, CUDA_ERROR_INVALID_CONTEXT); }
static sim_target on_event(CUevent e) { return on_handle(HV(e), SIM_H_EVENT, CUDA_ERROR_INVALID_HANDLE); }
static sim_target on_module(CUmodule m) { return on_handle(HV(m), SIM_H_MODULE, CUDA_ERROR_INVALID_HANDLE); }
static sim_target on_func(CUfunction f) { return on_handle(HV(f), SIM_H_FUNC, CUDA_ERROR_INVALID_HANDLE); }
/* A CUfunction, or a CUkernel passed as one (cuLaunchKernel, cuFuncGetName):
 * the object is the sim_func either way. */
static sim_target on_func_or_kernel(CUfunction f)
{
    return sim_h_kind(HV(f)) == SIM_H_KERNEL ? on_handle(HV(f), SIM_H_KERNEL, CUDA_ERROR_INVALID_HANDLE)
                                             : on_func(f);
}

/* The calling thread's current context (for calls that name no device). */
static sim_target on_current(void)
{
    return on_handle(tl_ctx, SIM_H_CTX, CUDA_ERROR_INVALID_CONTEXT);
}

/* ... and also resolve a stream argument on the target's device. */
static sim_target with_stream(sim_target t, CUstream hs)
{
    t.resolve = 1;
    t.stream = hs;
    return t;
}

/* The device a stream argument belongs to (the current context's for the
 * NULL stream), with the stream resolved. */
static sim_target on_stream(CUstream hs)
{
    if (is_null_stream(hs))
        return with_stream(on_current(), hs);
    uint64_t h = HV(hs);
    /* not a stream handle: slot -1 fails the lookup with `bad` */
    int slot = sim_h_kind(h) == SIM_H_STREAM ? sim_h_slot(h) : -1;
    return with_stream(on_slot(slot, CUDA_ERROR_INVALID_HANDLE), hs);
}

static CUresult target_acquire(const sim_target *t, sim_call *c)
{
    if (!t->by_handle) {
        if (ds__sim_dev_acquire(t->slot, &c->d) != CUDA_SUCCESS)
            return t->bad;
    } else {
        if (!t->h || sim_h_kind(t->h) != t->kind)
            return t->bad;
        if (ds__sim_dev_acquire(sim_h_slot(t->h), &c->d) != CUDA_SUCCESS)
            return t->bad;
        c->obj = ds__sim_handle_get(c->d, t->h, t->kind);
        if (!c->obj) {
            ds__sim_dev_release(c->d);
            return t->bad;
        }
    }
    if (t->resolve) {
        CUresult r = ds__sim_stream_resolve(c->d, t->stream, &c->s);
        if (r != CUDA_SUCCESS) {
            ds__sim_dev_release(c->d);
            return r;
        }
    }
    return CUDA_SUCCESS;
}

/* The one acquire/release path of every entry point that touches a device.
 * body NULL: only check that the target exists. */
static CUresult sim_locked(sim_target t, unsigned flags, sim_body body, void *arg)
{
    sim_call c = { .arg = arg };
    CUresult r = target_acquire(&t, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if ((flags & SIM_STICKY) && c.d->fault)
        r = c.d->fault;
    else if (body)
        r = body(&c);
    ds__sim_dev_release(c.d);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

#define SIM_ERRORS(X)                                                                 \
    X(CUDA_SUCCESS, "no error")                                                       \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                   \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                      \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                             \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                               \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                     \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                            \
    X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                     \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                           \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                        \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                           \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                 \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                       \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")         \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch") \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                            \
    X(CUDA_ERROR_INVALID_RESOURCE_TYPE, "invalid resource type")                      \
    X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "invalid resource configuration")    \
    X(CUDA_ERROR_ILLEGAL_STATE,                                                       \
      "the operation cannot be performed in the present state")                       \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,                                          \
      "operation not permitted when stream is capturing")                             \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,                                          \
      "operation failed due to a previous error during capture")                      \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,                                         \
      "attempt to terminate a thread-local capture sequence from another thread")     \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

const char *ds__sim_cu_name(CUresult r)
{
    switch (r) {
#define SIM_ERR_NAME(code, text) \
    case code:                   \
        return #code;
        SIM_ERRORS(SIM_ERR_NAME)
#undef SIM_ERR_NAME
    default:
        return "CUDA_ERROR_UNKNOWN";
    }
}

static CUresult sim_cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define SIM_ERR_NAME(code, text) \
    case code:                   \
        *pStr = #code;           \
        return CUDA_SUCCESS;
        SIM_ERRORS(SIM_ERR_NAME)
#undef SIM_ERR_NAME
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult sim_cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define SIM_ERR_TEXT(code, text) \
    case code:                   \
        *pStr = text;            \
        return CUDA_SUCCESS;
        SIM_ERRORS(SIM_ERR_TEXT)
#undef SIM_ERR_TEXT
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ------------------------------------------------------------------------ */
/* Driver, devices, contexts                                                 */
/* ------------------------------------------------------------------------ */

static CUresult sim_cuInit(unsigned int Flags)
{
    return Flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult sim_cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 13000;
    return CUDA_SUCCESS;
}

static CUresult sim_cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = ds__sim_dev_count();
    return CUDA_SUCCESS;
}

/* The ordinal-th live simulated device; equal to the ordinal unless devices
 * created earlier were destroyed in between. */
static CUresult sim_cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int slot = ds__sim_dev_nth(ordinal);
    if (slot < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = slot;
    return CUDA_SUCCESS;
}

typedef struct {
    char *name;
    int len;
} name_args;

static CUresult device_name(sim_call *c)
{
    const name_args *a = c->arg;
    snprintf(a->name, (size_t)a->len, "Simulated GPU (%u SMs)", c->d->cfg.sm_count);
    return CUDA_SUCCESS;
}

static CUresult sim_cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_device(dev), 0, device_name, &(name_args){ name, len });
}

typedef struct {
    int *pi;
    CUdevice_attribute attrib;
} attr_args;

static CUresult device_attribute(sim_call *c)
{
    const attr_args *a = c->arg;
    int v;
    switch (a->attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = (int)c->d->cfg.sm_count; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = (int)DS__SIM_MAX_GRID_X; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = (int)DS__SIM_MAX_GRID_YZ; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = (int)DS__SIM_MAX_BLOCK_XY; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = (int)DS__SIM_MAX_BLOCK_Z; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = (int)DS__SIM_MAX_THREADS; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = (int)DS__SIM_MAX_SMEM; break;
    default: v = 0; break; /* compute capability 0.0, PCI ids 0, the rest 0 */
    }
    *a->pi = v;
    return CUDA_SUCCESS;
}

static CUresult sim_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_device(dev), 0, device_attribute, &(attr_args){ pi, attrib });
}

static const char sim_pci_id[] = "0000:00:00.0";

static CUresult device_pci_id(sim_call *c)
{
    memcpy(c->arg, sim_pci_id, sizeof sim_pci_id);
    return CUDA_SUCCESS;
}

static CUresult sim_cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    if (!pciBusId || len < (int)sizeof sim_pci_id)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_device(dev), 0, device_pci_id, pciBusId);
}

static CUresult primary_retain(sim_call *c)
{
    c->d->primary_refs++;
    *(CUcontext *)c->arg = (CUcontext)(uintptr_t)c->d->primary.handle;
    return CUDA_SUCCESS;
}

static CUresult sim_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_device(dev), 0, primary_retain, pctx);
}

static CUresult primary_release(sim_call *c)
{
    if (c->d->primary_refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    c->d->primary_refs--;
    return CUDA_SUCCESS;
}

static CUresult sim_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return sim_locked(on_device(dev), 0, primary_release, NULL);
}

static CUresult ctx_make_current(sim_call *c)
{
    tl_ctx = ((const sim_ctx *)c->obj)->handle;
    return CUDA_SUCCESS;
}

static CUresult sim_cuCtxSetCurrent(CUcontext ctx)
{
    if (!ctx) {
        tl_ctx = 0;
        return CUDA_SUCCESS;
    }
    return sim_locked(on_handle(HV(ctx), SIM_H_CTX, CUDA_ERROR_INVALID_CONTEXT), 0, ctx_make_current,
                      NULL);
}

static CUresult sim_cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)(uintptr_t)tl_ctx;
    return CUDA_SUCCESS;
}

static CUresult sim_cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    if (leastPriority)
        *leastPriority = DS__SIM_PRIO_LEAST;
    if (greatestPriority)
        *greatestPriority = DS__SIM_PRIO_GREATEST;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* SM resources and green contexts                                           */
/* ------------------------------------------------------------------------ */

/* What a simulated CUdevResource keeps in _internal_padding. */
#define SIM_RES_MAGIC 0x53525344u /* "DSRS" */
typedef struct res_internal {
    uint32_t magic;
    int32_t slot;
    uint64_t serial; /* device instance (slots are reused after destroy) */
    uint64_t split;  /* 0: the whole device; else the split call it came from */
    sim_smset mask;
} res_internal;
_Static_assert(sizeof(res_internal) <= sizeof(((CUdevResource *)0)->_internal_padding),
               "res_internal must fit CUdevResource._internal_padding");

static void res_write(CUdevResource *r, const sim_dev *d, uint64_t split, const sim_smset *mask,
                      unsigned min_part, unsigned align)
{
    res_internal ri = { SIM_RES_MAGIC, d->slot, d->serial, split, *mask };
    memset(r, 0, sizeof *r);
    r->type = CU_DEV_RESOURCE_TYPE_SM;
    r->sm.smCount = sim_set_count(mask);
    r->sm.minSmPartitionSize = min_part;
    r->sm.smCoscheduledAlignment = align;
    memcpy(r->_internal_padding, &ri, sizeof ri);
}

/* Reads a resource made by this simulator; CUDA_SUCCESS or the error. */
static CUresult res_read(const CUdevResource *r, res_internal *ri)
{
    if (r->type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    memcpy(ri, r->_internal_padding, sizeof *ri);
    if (ri->magic != SIM_RES_MAGIC || ri->slot < 0 || ri->slot >= DS__SIM_MAX_DEVICES ||
        sim_set_count(&ri->mask) != r->sm.smCount)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult device_resource(sim_call *c)
{
    const sim_dev *d = c->d;
    res_write(c->arg, d, 0, &d->all, d->cfg.min_partition_sms, d->cfg.sm_alignment);
    return CUDA_SUCCESS;
}

static CUresult sim_cuDeviceGetDevResource(CUdevice device, CUdevResource *resource,
                                           CUdevResourceType type)
{
    if (!resource)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    return sim_locked(on_device(device), 0, device_resource, resource);
}

/*
 * Splitting rule (deterministic model of cuDevSmResourceSplitByCount):
 *  - min partition P and alignment A are the device's (minSmPartitionSize,
 *    smCoscheduledAlignment); with CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING
 *    they drop to min(P, 2) and min(A, 2).
 *  - group size m = max(minCount, P) rounded up to a multiple of A.
 *  - n = SMs of the input; groups g = n / m, leftover r = n - g*m.
 *  - If 0 < r < P and g >= 2, one group is given back to the leftover
 *    (g - 1 groups, leftover r + m): the leftover is never a fragment smaller
 *    than a minimum partition when there are groups to spare. This stands in
 *    for the GPC structure of the real chip, where 132 SMs split by 8 give 15
 *    groups + 12, 128 by 8 give 16 + 0, and 132 by 2 with
 *    IGNORE_SM_COSCHEDULING give 66 + 0 (docs/device-facts.md).
 *  - Groups are consecutive runs of the input's SMs in ascending SM order; when
 *    result has room for fewer groups (*nbGroups), only that many are made and
 *    every other SM goes to `remaining`. `remaining` (which may hold 0 SMs)
 *    comes from the same split, so it can be combined with the groups in
 *    cuDevResourceGenerateDesc.
 *  - Only a device resource (cuDeviceGetDevResource) may be split: split
 *    outputs cannot be split again (as the driver documents).
 */
typedef struct {
    CUdevResource *result;
    unsigned *nbGroups;
    CUdevResource *remaining;
    unsigned useFlags, minCount;
    const res_internal *ri; /* the input */
} split_args;

static CUresult sm_split(sim_call *c)
{
    const split_args *a = c->arg;
    sim_dev *d = c->d;
    const res_internal *ri = a->ri;
    if (ri->serial != d->serial)
        return CUDA_ERROR_INVALID_VALUE;
    if (ri->split != 0)
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    unsigned n_in = sim_set_count(&ri->mask);
    if (a->minCount > n_in)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned part = d->cfg.min_partition_sms, align = d->cfg.sm_alignment;
    if (a->useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) {
        part = part < 2 ? part : 2;
        align = align < 2 ? align : 2;
    }
    unsigned m = a->minCount > part ? a->minCount : part;
    m = (m + align - 1) / align * align;
    unsigned groups = m <= n_in ? n_in / m : 0;
    unsigned left = n_in - groups * m;
    if (left != 0 && left < part && groups >= 2)
        groups--;

    unsigned make = groups;
    if (a->result && *a->nbGroups < make)
        make = *a->nbGroups;
    uint64_t split = ++d->split_counter;
    unsigned sms[DS_MAX_SMS], k = 0;
    for (unsigned sm = 0; sm < DS_MAX_SMS; sm++)
        if (sim_set_has(&ri->mask, sm))
            sms[k++] = sm;
    unsigned used = 0;
    if (a->result) {
        for (unsigned g = 0; g < make; g++) {
            sim_smset gm = { { 0 } };
            for (unsigned i = 0; i < m; i++)
                sim_set_add(&gm, sms[used++]);
            res_write(&a->result[g], d, split, &gm, part, align);
        }
    }
    if (a->remaining) {
        sim_smset rm = { { 0 } };
        for (unsigned i = a->result ? used : groups * m; i < n_in; i++)
            sim_set_add(&rm, sms[i]);
        res_write(a->remaining, d, split, &rm, part, align);
    }
    *a->nbGroups = a->result ? make : groups;
    return CUDA_SUCCESS;
}

static CUresult sim_cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
                                                const CUdevResource *input,
                                                CUdevResource *remaining, unsigned int useFlags,
                                                unsigned int minCount)
{
    if (!nbGroups || !input)
        return CUDA_ERROR_INVALID_VALUE;
    if (useFlags & ~(unsigned)(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
                               CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE))
        return CUDA_ERROR_INVALID_VALUE;
    if (result && *nbGroups == 0)
        return CUDA_ERROR_INVALID_VALUE;
    res_internal ri;
    CUresult r = res_read(input, &ri);
    if (r != CUDA_SUCCESS)
        return r;
    return sim_locked(on_slot(ri.slot, CUDA_ERROR_INVALID_VALUE), 0, sm_split,
                      &(split_args){ result, nbGroups, remaining, useFlags, minCount, &ri });
}

typedef struct {
    CUdevResourceDesc *phDesc;
    const CUdevResource *resources;
    unsigned nbResources;
    const res_internal *first;
} desc_args;

static CUresult generate_desc(sim_call *c)
{
    const desc_args *a = c->arg;
    sim_dev *d = c->d;
    sim_smset mask = { { 0 } };
    for (unsigned i = 0; i < a->nbResources; i++) {
        res_internal ri;
        CUresult r = res_read(&a->resources[i], &ri);
        if (r != CUDA_SUCCESS)
            return r;
        if (ri.slot != d->slot || ri.serial != d->serial ||
            (a->nbResources > 1 && (ri.split == 0 || ri.split != a->first->split)) ||
            sim_set_intersects(&mask, &ri.mask))
            return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        sim_set_or(&mask, &ri.mask);
    }
    if (sim_set_empty(&mask))
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    sim_desc *desc = ds__calloc(1, sizeof *desc);
    uint64_t h = desc ? ds__sim_handle_new(d, SIM_H_DESC, desc) : 0;
    if (!h) {
        ds__free(desc);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    desc->handle = h;
    desc->mask = mask;
    *a->phDesc = (CUdevResourceDesc)(uintptr_t)h;
    return CUDA_SUCCESS;
}

static CUresult sim_cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
                                              unsigned int nbResources)
{
    if (!phDesc || !resources || nbResources == 0)
        return CUDA_ERROR_INVALID_VALUE;
    res_internal first;
    CUresult r = res_read(&resources[0], &first);
    if (r != CUDA_SUCCESS)
        return r;
    return sim_locked(on_slot(first.slot, CUDA_ERROR_INVALID_VALUE), 0, generate_desc,
                      &(desc_args){ phDesc, resources, nbResources, &first });
}

typedef struct {
    CUgreenCtx *phCtx;
    CUdevResourceDesc desc;
} green_args;

static CUresult green_create(sim_call *c)
{
    const green_args *a = c->arg;
    sim_dev *d = c->d;
    sim_desc *ds = ds__sim_handle_get(d, HV(a->desc), SIM_H_DESC);
    if (!ds)
        return CUDA_ERROR_INVALID_VALUE;
    sim_green *g = ds__calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->mask = ds->mask;
    g->handle = ds__sim_handle_new(d, SIM_H_GREEN, g);
    g->ctx.green = g;
    g->ctx.handle = g->handle ? ds__sim_handle_new(d, SIM_H_CTX, &g->ctx) : 0;
    g->default_stream = g->ctx.handle ? ds__sim_stream_new(d, g, &g->mask, 0) : NULL;
    if (!g->default_stream) {
        ds__sim_handle_free(d, g->ctx.handle);
        ds__sim_handle_free(d, g->handle);
        ds__free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->primary_refs++; /* a green context retains the primary context */
    *a->phCtx = (CUgreenCtx)(uintptr_t)g->handle;
    return CUDA_SUCCESS;
}

static CUresult sim_cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                     unsigned int flags)
{
    if (!phCtx || !(flags & CU_GREEN_CTX_DEFAULT_STREAM) ||
        (flags & ~(unsigned)CU_GREEN_CTX_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_device(dev), 0, green_create, &(green_args){ phCtx, desc });
}

static CUresult green_destroy(sim_call *c)
{
    sim_dev *d = c->d;
    sim_green *g = c->obj;
    for (sim_stream *s = d->streams_head; s; s = s->next) {
        if (s->green == g && s != g->default_stream) {
            s->orphaned = 1;
            s->green = NULL;
        }
    }
    g->default_stream->green = NULL;
    ds__sim_stream_release(d, g->default_stream); /* pending work still completes */
    ds__sim_handle_free(d, g->ctx.handle);
    ds__sim_handle_free(d, g->handle);
    ds__free(g);
    if (d->primary_refs)
        d->primary_refs--;
    return CUDA_SUCCESS;
}

static CUresult sim_cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    return sim_locked(on_green(hCtx), 0, green_destroy, NULL);
}

static CUresult green_context(sim_call *c)
{
    *(CUcontext *)c->arg = (CUcontext)(uintptr_t)((const sim_green *)c->obj)->ctx.handle;
    return CUDA_SUCCESS;
}

static CUresult sim_cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    if (!pContext)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_green(hCtx), 0, green_context, pContext);
}

static CUresult stream_green(sim_call *c)
{
    *(CUgreenCtx *)c->arg = c->s->green ? (CUgreenCtx)(uintptr_t)c->s->green->handle : NULL;
    return CUDA_SUCCESS;
}

static CUresult sim_cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx *phCtx)
{
    if (!phCtx)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_stream(hStream), 0, stream_green, phCtx);
}

/* ------------------------------------------------------------------------ */
/* Streams                                                                   */
/* ------------------------------------------------------------------------ */

/* Work a capturing stream cannot take (an event record or wait, a value
 * operation, an asynchronous copy, a synchronize or query, a graph launch or
 * upload): as on the GPU, the call fails and the capture is invalidated
 * (cuStreamEndCapture then returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). */
static CUresult capture_refuse(sim_stream *s)
{
    s->capture_invalid = 1;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* The calling thread's capture interaction mode
 * (cuThreadExchangeStreamCaptureMode; a thread starts in global mode). Kept
 * and returned only: what a mode forbids other threads is not modelled. */
static _Thread_local int tl_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult sim_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    int old = tl_capture_mode;
    tl_capture_mode = (int)*mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
}

typedef struct {
    CUstream *phStream;
    int priority; /* clamped */
} stream_args;

static CUresult stream_create(sim_call *c)
{
    const stream_args *a = c->arg;
    sim_dev *d = c->d;
    sim_green *g = c->obj;
    sim_stream *s = ds__sim_stream_new(d, g, &g->mask, a->priority);
    if (s)
        s->handle = ds__sim_handle_new(d, SIM_H_STREAM, s);
    if (!s || !s->handle) {
        if (s)
            ds__sim_stream_release(d, s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *a->phStream = (CUstream)(uintptr_t)s->handle;
    return CUDA_SUCCESS;
}

static CUresult sim_cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx,
                                           unsigned int flags, int priority)
{
    if (!phStream || flags != CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    if (priority < DS__SIM_PRIO_GREATEST)
        priority = DS__SIM_PRIO_GREATEST;
    if (priority > DS__SIM_PRIO_LEAST)
        priority = DS__SIM_PRIO_LEAST;
    return sim_locked(on_green(greenCtx), SIM_STICKY, stream_create,
                      &(stream_args){ phStream, priority });
}

static CUresult stream_destroy(sim_call *c)
{
    sim_stream *s = c->obj;
    if (s->orphaned)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (s->capture) { /* a capture never ended: its recording goes */
        ds__sim_graph_free(c->d, s->capture);
        s->capture = NULL;
    }
    ds__sim_handle_free(c->d, s->handle);
    s->handle = 0;
    ds__sim_stream_release(c->d, s); /* freed once its work has completed */
    return CUDA_SUCCESS;
}

static CUresult sim_cuStreamDestroy(CUstream hStream)
{
    if (is_null_stream(hStream))
        return CUDA_ERROR_INVALID_HANDLE;
    return sim_locked(on_handle(HV(hStream), SIM_H_STREAM, CUDA_ERROR_INVALID_HANDLE), 0,
                      stream_destroy, NULL);
}

static CUresult stream_sync(sim_call *c)
{
    if (c->s->capture)
        return capture_refuse(c->s);
    return ds__sim_wait_stream(c->d, c->s);
}

static CUresult sim_cuStreamSynchronize(CUstream hStream)
{
    return sim_locked(on_stream(hStream), SIM_STICKY, stream_sync, NULL);
}

static CUresult stream_query(sim_call *c)
{
    if (c->s->capture)
        return capture_refuse(c->s);
    return ds__sim_stream_busy(c->s) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static CUresult sim_cuStreamQuery(CUstream hStream)
{
    return sim_locked(on_stream(hStream), SIM_STICKY, stream_query, NULL);
}

typedef struct {
    CUstream hStream;
    uint64_t he;
} wait_event_args;

/* The event is looked up before the stream is resolved (a bad event wins). */
static CUresult stream_wait_event(sim_call *c)
{
    const wait_event_args *a = c->arg;
    sim_dev *d = c->d;
    sim_stream *s = NULL;
    sim_event *ev = ds__sim_handle_get(d, a->he, SIM_H_EVENT);
    CUresult r = ev ? ds__sim_stream_resolve(d, a->hStream, &s) : CUDA_ERROR_INVALID_HANDLE;
    if (r != CUDA_SUCCESS)
        return r;
    if (d->fault)
        return d->fault;
    if (s->capture)
        return capture_refuse(s);
    if (!ev->last || ev->last->done)
        return CUDA_SUCCESS; /* never recorded or already completed: nothing to wait for */
    sim_op *op = ds__calloc(1, sizeof *op);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->kind = SIM_OP_WAIT_EVENT;
    op->inst = ev->last;
    op->inst->refs++;
    ds__sim_enqueue(d, s, op);
    return CUDA_SUCCESS;
}

static CUresult sim_cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t he = HV(hEvent);
    if (!he || sim_h_kind(he) != SIM_H_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    /* the stream's device; the event's for the NULL stream */
    int slot = is_null_stream(hStream) ? sim_h_slot(he) : sim_h_slot(HV(hStream));
    return sim_locked(on_slot(slot, CUDA_ERROR_INVALID_HANDLE), 0, stream_wait_event,
                      &(wait_event_args){ hStream, he });
}

/* ------------------------------------------------------------------------ */
/* Events                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    CUevent *phEvent;
    unsigned flags;
} event_args;

static CUresult event_create(sim_call *c)
{
    const event_args *a = c->arg;
    sim_event *ev = ds__calloc(1, sizeof *ev);
    uint64_t h = ev ? ds__sim_handle_new(c->d, SIM_H_EVENT, ev) : 0;
    if (!h) {
        ds__free(ev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ev->handle = h;
    ev->flags = a->flags;
    *a->phEvent = (CUevent)(uintptr_t)h;
    return CUDA_SUCCESS;
}

static CUresult sim_cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    if (!phEvent || (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                         CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_current(), 0, event_create, &(event_args){ phEvent, Flags });
}

static CUresult event_destroy(sim_call *c)
{
    sim_event *ev = c->obj;
    ds__sim_einst_unref(ev->last); /* a pending record still completes */
    ds__sim_handle_free(c->d, ev->handle);
    ds__free(ev);
    return CUDA_SUCCESS;
}

static CUresult sim_cuEventDestroy(CUevent hEvent)
{
    return sim_locked(on_event(hEvent), 0, event_destroy, NULL);
}

static CUresult event_record(sim_call *c)
{
    sim_event *ev = c->obj;
    if (c->s->capture)
        return capture_refuse(c->s);
    sim_op *op = ds__calloc(1, sizeof *op);
    sim_einst *e = ds__calloc(1, sizeof *e);
    if (!op || !e) {
        ds__free(op);
        ds__free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->refs = 2; /* the event and the op */
    ds__sim_einst_unref(ev->last);
    ev->last = e;
    op->kind = SIM_OP_RECORD;
    op->inst = e;
    ds__sim_enqueue(c->d, c->s, op);
    return CUDA_SUCCESS;
}

static CUresult sim_cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return sim_locked(with_stream(on_event(hEvent), hStream), SIM_STICKY, event_record, NULL);
}

static CUresult event_query(sim_call *c)
{
    const sim_event *ev = c->obj;
    return !ev->last || ev->last->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult sim_cuEventQuery(CUevent hEvent)
{
    return sim_locked(on_event(hEvent), SIM_STICKY, event_query, NULL);
}

static CUresult event_sync(sim_call *c)
{
    sim_event *ev = c->obj;
    return ev->last ? ds__sim_wait_einst(c->d, ev->last) : CUDA_SUCCESS;
}

static CUresult sim_cuEventSynchronize(CUevent hEvent)
{
    return sim_locked(on_event(hEvent), SIM_STICKY, event_sync, NULL);
}

typedef struct {
    float *ms;
    uint64_t he; /* the end event (the start one is the target) */
} elapsed_args;

static CUresult event_elapsed(sim_call *c)
{
    const elapsed_args *a = c->arg;
    const sim_event *s = c->obj, *e = ds__sim_handle_get(c->d, a->he, SIM_H_EVENT);
    if (!e || !s->last || !e->last || ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!s->last->done || !e->last->done)
        return CUDA_ERROR_NOT_READY;
    *a->ms = (float)((e->last->t_us - s->last->t_us) / 1000.0);
    return CUDA_SUCCESS;
}

static CUresult sim_cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t hs = HV(hStart), he = HV(hEnd);
    if (!he || sim_h_kind(he) != SIM_H_EVENT || sim_h_slot(he) != sim_h_slot(hs))
        return CUDA_ERROR_INVALID_HANDLE;
    return sim_locked(on_event(hStart), SIM_STICKY, event_elapsed,
                      &(elapsed_args){ pMilliseconds, he });
}

/* ------------------------------------------------------------------------ */
/* Kernels and modules                                                       */
/* ------------------------------------------------------------------------ */

typedef struct {
    unsigned grid[3], block[3], smem;
    CUstream hStream; /* as the caller passed it (kept in the trace) */
    void **params, **extra;
} launch_args;

static CUresult launch(sim_call *c)
{
    const launch_args *a = c->arg;
    return ds__sim_launch(c->d, c->obj, a->grid, a->block, a->smem, c->s, a->hStream, a->params,
                          a->extra);
}

static CUresult sim_cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams, void **extra)
{
    return sim_locked(with_stream(on_func_or_kernel(f), hStream), 0, launch,
                      &(launch_args){ { gridDimX, gridDimY, gridDimZ },
                                      { blockDimX, blockDimY, blockDimZ },
                                      sharedMemBytes,
                                      hStream,
                                      kernelParams,
                                      extra });
}

static CUresult module_load(sim_call *c)
{
    sim_dev *d = c->d;
    sim_module *m = ds__calloc(1, sizeof *m);
    sim_func *f = ds__calloc(1, sizeof *f);
    sim_func *k = ds__calloc(1, sizeof *k);
    if (m && f && k) {
        m->handle = ds__sim_handle_new(d, SIM_H_MODULE, m);
        f->handle = m->handle ? ds__sim_handle_new(d, SIM_H_FUNC, f) : 0;
        k->handle = f->handle ? ds__sim_handle_new(d, SIM_H_FUNC, k) : 0;
    }
    if (!m || !f || !k || !k->handle) {
        if (f && f->handle)
            ds__sim_handle_free(d, f->handle);
        if (m && m->handle)
            ds__sim_handle_free(d, m->handle);
        ds__free(m);
        ds__free(f);
        ds__free(k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    snprintf(k->name, sizeof k->name, "%s", DS__SIM_RCK_NAME);
    k->block_us = 1.0;    /* unused: it runs until told to stop */
    k->blocks_per_sm = 8; /* one unit: a one-thread block */
    k->num_params = 4;    /* (block, gates, bounds, seen), device pointers */
    for (int i = 0; i < 4; i++)
        k->param_sizes[i] = sizeof(CUdeviceptr);
    k->rck = 1;
    k->module = m;
    m->rck = k;
    snprintf(f->name, sizeof f->name, "%s", DS__SIM_PROBE_NAME);
    f->block_us = DS__SIM_PROBE_BLOCK_US;
    f->blocks_per_sm = DS__SIM_PROBE_BLOCKS_PER_SM;
    f->num_params = 2; /* (CUdeviceptr bitmap, unsigned long long spin_ns) */
    f->param_sizes[0] = sizeof(CUdeviceptr);
    f->param_sizes[1] = sizeof(unsigned long long);
    f->probe = 1;
    f->module = m;
    m->probe = f;
    *(CUmodule *)c->arg = (CUmodule)(uintptr_t)m->handle;
    return CUDA_SUCCESS;
}

/* Any image is accepted (the core passes its embedded fatbin); every module
 * holds the built-in probe kernel and the resident control kernel. */
static CUresult sim_cuModuleLoadData(CUmodule *module, const void *image)
{
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_current(), 0, module_load, module);
}

static CUresult module_unload(sim_call *c)
{
    sim_dev *d = c->d;
    sim_module *m = c->obj;
    /* pending launches keep what they need: nothing refers to f after this */
    ds__sim_handle_free(d, m->probe->handle);
    ds__free(m->probe);
    ds__sim_handle_free(d, m->rck->handle);
    ds__free(m->rck);
    ds__sim_handle_free(d, m->handle);
    ds__free(m);
    return CUDA_SUCCESS;
}

static CUresult sim_cuModuleUnload(CUmodule hmod)
{
    return sim_locked(on_module(hmod), 0, module_unload, NULL);
}

typedef struct {
    CUfunction *hfunc;
    const char *name;
} function_args;

static CUresult module_function(sim_call *c)
{
    const function_args *a = c->arg;
    const sim_module *m = c->obj;
    if (strcmp(a->name, DS__SIM_PROBE_NAME) == 0)
        *a->hfunc = (CUfunction)(uintptr_t)m->probe->handle;
    else if (strcmp(a->name, DS__SIM_RCK_NAME) == 0)
        *a->hfunc = (CUfunction)(uintptr_t)m->rck->handle;
    else
        return CUDA_ERROR_NOT_FOUND;
    return CUDA_SUCCESS;
}

static CUresult sim_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_module(hmod), 0, module_function, &(function_args){ hfunc, name });
}

typedef struct {
    size_t index, *offset, *size;
} param_args;

/* Parameter layout of a simulated kernel: parameters in declaration order,
 * each at the next offset aligned to its size (a power of two up to 8) or
 * to 8 otherwise, as the CUDA ABI places scalars and pointer-holding structs. */
static CUresult func_param_info(sim_call *c)
{
    const param_args *a = c->arg;
    const sim_func *f = c->obj;
    if (a->index >= f->num_params)
        return CUDA_ERROR_INVALID_VALUE;
    size_t off = 0;
    for (size_t i = 0; i <= a->index; i++) {
        size_t sz = f->param_sizes[i];
        size_t al = (sz == 1 || sz == 2 || sz == 4) ? sz : 8;
        off = (off + al - 1) & ~(al - 1);
        if (i == a->index) {
            *a->offset = off;
            *a->size = sz;
        }
        off += sz;
    }
    return CUDA_SUCCESS;
}

static CUresult sim_cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                       size_t *paramSize)
{
    if (!paramOffset || !paramSize)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_func(func), 0, func_param_info,
                      &(param_args){ paramIndex, paramOffset, paramSize });
}

static CUresult func_name(sim_call *c)
{
    *(const char **)c->arg = ((const sim_func *)c->obj)->name; /* lives as long as the function */
    return CUDA_SUCCESS;
}

static CUresult sim_cuFuncGetName(const char **name, CUfunction hfunc)
{
    if (!name || !hfunc)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_func_or_kernel(hfunc), 0, func_name, name);
}

/* ------------------------------------------------------------------------ */
/* Memory (host memory standing in for device memory)                       */
/* ------------------------------------------------------------------------ */

static CUresult vmm_check(uintptr_t p, size_t n);

typedef struct {
    size_t n;
    int host; /* cuMemHostAlloc */
    void *p;  /* out */
} alloc_args;

static CUresult mem_alloc(sim_call *c)
{
    alloc_args *a = c->arg;
    return ds__sim_mem_alloc(c->d, a->n, a->host, &a->p);
}

typedef struct {
    uintptr_t p;
    size_t n;
    int remove;
} find_args;

static CUresult mem_find(sim_call *c)
{
    const find_args *a = c->arg;
    return ds__sim_mem_find(c->d, a->p, a->n, a->remove);
}

CUresult ds__sim_mem_check(uintptr_t p, size_t n, int remove)
{
    for (int slot = 0; slot < DS__SIM_MAX_DEVICES; slot++)
        if (sim_locked(on_slot(slot, CUDA_ERROR_INVALID_DEVICE), 0, mem_find,
                       &(find_args){ p, n, remove }) == CUDA_SUCCESS)
            return CUDA_SUCCESS;
    /* memory mapped through the virtual memory management API */
    return remove ? CUDA_ERROR_INVALID_VALUE : vmm_check(p, n);
}

static CUresult sim_cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    alloc_args a = { bytesize, 0, NULL };
    CUresult r = sim_locked(on_current(), 0, mem_alloc, &a);
    if (r == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)a.p;
    return r;
}

static CUresult sim_cuMemFree(CUdeviceptr dptr)
{
    if (!dptr)
        return CUDA_SUCCESS;
    return ds__sim_mem_check((uintptr_t)dptr, 0, 1);
}

/* Pinned host memory mapped into the device: on the simulated device host and
 * device memory are one, so it is an ordinary (zeroed) allocation whose host
 * and device addresses are the same. */
static CUresult sim_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (!pp || !bytesize || (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                                 CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    alloc_args a = { bytesize, 1, NULL };
    CUresult r = sim_locked(on_current(), 0, mem_alloc, &a);
    if (r == CUDA_SUCCESS)
        *pp = a.p;
    return r;
}

static CUresult sim_cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    if (!pdptr || !p || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ds__sim_mem_check((uintptr_t)p, 1, 0);
    if (r == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)(uintptr_t)p;
    return r;
}

static CUresult sim_cuMemFreeHost(void *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return ds__sim_mem_check((uintptr_t)p, 0, 1);
}

static CUresult sim_cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    if (!ByteCount)
        return CUDA_SUCCESS;
    if (!srcHost || !dstDevice)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ds__sim_mem_check((uintptr_t)dstDevice, ByteCount, 0);
    if (r == CUDA_SUCCESS)
        memcpy((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
    return r;
}

static CUresult sim_cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    if (!ByteCount)
        return CUDA_SUCCESS;
    if (!dstHost || !srcDevice)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ds__sim_mem_check((uintptr_t)srcDevice, ByteCount, 0);
    if (r == CUDA_SUCCESS)
        memcpy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount);
    return r;
}

static CUresult sim_cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    if (!N)
        return CUDA_SUCCESS;
    if (!dstDevice || dstDevice % 4 || N > SIZE_MAX / 4)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ds__sim_mem_check((uintptr_t)dstDevice, N * 4, 0);
    if (r == CUDA_SUCCESS) {
        uint32_t *p = (uint32_t *)(uintptr_t)dstDevice;
        for (size_t i = 0; i < N; i++)
            p[i] = ui;
    }
    return r;
}

/* ------------------------------------------------------------------------ */
/* Stream memory operations: value waits and writes, asynchronous copies     */
/* ------------------------------------------------------------------------ */

/* Enqueues a copy of the op in c->arg (filled by the entry point) on the
 * target's stream. */
static CUresult enqueue_op(sim_call *c)
{
    if (c->s->capture)
        return capture_refuse(c->s);
    sim_op *op = ds__calloc(1, sizeof *op);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *op = *(const sim_op *)c->arg;
    ds__sim_enqueue(c->d, c->s, op);
    return CUDA_SUCCESS;
}

static CUresult value_op(CUstream hStream, CUdeviceptr addr, cuuint32_t value, unsigned flags,
                         int kind)
{
    if (!addr || addr % 4)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_stream(hStream), SIM_STICKY, enqueue_op,
                      &(sim_op){ .kind = kind,
                                 .addr = (uint32_t *)(uintptr_t)addr,
                                 .value = value,
                                 .flags = flags });
}

static CUresult sim_cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                        unsigned int flags)
{
    if (flags & ~(unsigned)(0x3u | CU_STREAM_WAIT_VALUE_FLUSH))
        return CUDA_ERROR_INVALID_VALUE;
    return value_op(stream, addr, value, flags, SIM_OP_WAIT_VALUE);
}

static CUresult sim_cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags)
{
    if (flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
        return CUDA_ERROR_INVALID_VALUE;
    return value_op(stream, addr, value, flags, SIM_OP_WRITE_VALUE);
}

/* Asynchronous copies: checked at the call (the device range must be
 * allocated or mapped), carried out when they reach the stream's head, so
 * they are ordered with the stream's kernels, events and value operations. */
static CUresult copy_op(CUstream hStream, void *dst, const void *src, size_t n)
{
    return sim_locked(on_stream(hStream), SIM_STICKY, enqueue_op,
                      &(sim_op){ .kind = SIM_OP_COPY, .dst = dst, .src = src, .n = n });
}

static CUresult sim_cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream)
{
    if (!ByteCount)
        return CUDA_SUCCESS;
    if (!srcHost || !dstDevice)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ds__sim_mem_check((uintptr_t)dstDevice, ByteCount, 0);
    return r != CUDA_SUCCESS ? r : copy_op(hStream, (void *)(uintptr_t)dstDevice, srcHost, ByteCount);
}

static CUresult sim_cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    if (!ByteCount)
        return CUDA_SUCCESS;
    if (!dstHost || !srcDevice)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ds__sim_mem_check((uintptr_t)srcDevice, ByteCount, 0);
    return r != CUDA_SUCCESS ? r : copy_op(hStream, dstHost, (const void *)(uintptr_t)srcDevice, ByteCount);
}

/* ------------------------------------------------------------------------ */
/* Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap...) */
/* ------------------------------------------------------------------------ */

/*
 * Process-wide, under one mutex (never taken with a device lock held, and no
 * device lock is taken under it except to validate a device ordinal).
 * A reservation is an mmap(PROT_NONE) range of host address space; mapping a
 * physical allocation over part of it makes that part zero-filled host memory
 * (the pages are dropped at unmap, so a later map reads zeros), readable and
 * writable once cuMemSetAccess grants access. Kernels and launch parameters
 * can point into it, and cuMemcpyHtoD/DtoH accept it. Simplification: the
 * contents belong to the mapping, not to the physical handle (a handle mapped
 * twice does not alias), and only offset 0 / whole-handle maps are accepted.
 */
typedef struct sim_vres {
    uintptr_t base;
    size_t size;
} sim_vres;

typedef struct sim_vphys {
    size_t size;
    int device;
    uint32_t maps;    /* live mappings of it */
    int released;     /* cuMemRelease called: freed at its last unmap */
} sim_vphys;

typedef struct sim_vmap {
    uintptr_t base;
    size_t size;
    sim_vphys *phys;
    int access;       /* cuMemSetAccess granted read/write */
} sim_vmap;

static pthread_mutex_t g_vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_vres *g_vres;
static size_t g_nvres, g_capvres;
static sim_vmap *g_vmap;
static size_t g_nvmap, g_capvmap;
static sim_vphys **g_vphys;
static size_t g_nvphys, g_capvphys;

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    void *a = ds__realloc(*arr, c * elem);
    if (!a)
        return -1;
    *arr = a;
    *cap = c;
    return 0;
}

static CUresult vmm_prop_ok(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_device(prop->location.id), 0, NULL, NULL);
}

static CUresult sim_cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option)
{
    (void)option;
    if (!granularity)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = vmm_prop_ok(prop);
    if (r == CUDA_SUCCESS)
        *granularity = DS__SIM_VMM_GRANULARITY;
    return r;
}

static CUresult sim_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags)
{
    (void)addr; /* a hint only, as on the driver */
    (void)flags;
    const size_t g = DS__SIM_VMM_GRANULARITY;
    if (!ptr || !size || size % g || (alignment && (alignment & (alignment - 1))))
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > g ? alignment : g;
    if (size > SIZE_MAX - align)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t raw = (uintptr_t)m, base = (raw + align - 1) & ~(uintptr_t)(align - 1);
    if (base > raw)
        munmap(m, base - raw);
    if (raw + size + align > base + size)
        munmap((void *)(base + size), raw + size + align - (base + size));
    pthread_mutex_lock(&g_vmm_mu);
    CUresult r = CUDA_SUCCESS;
    if (grow((void **)&g_vres, &g_capvres, g_nvres, sizeof *g_vres) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        g_vres[g_nvres++] = (sim_vres){ base, size };
    pthread_mutex_unlock(&g_vmm_mu);
    if (r != CUDA_SUCCESS)
        munmap((void *)base, size);
    else
        *ptr = (CUdeviceptr)base;
    return r;
}

static CUresult sim_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    for (size_t i = 0; i < g_nvres; i++)
        if (g_vres[i].base == (uintptr_t)ptr && g_vres[i].size == size) {
            int busy = 0;
            for (size_t k = 0; k < g_nvmap; k++)
                busy |= g_vmap[k].base >= g_vres[i].base && g_vmap[k].base < g_vres[i].base + size;
            if (busy)
                break; /* still mapped: the driver refuses */
            munmap((void *)g_vres[i].base, size);
            g_vres[i] = g_vres[--g_nvres];
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

static CUresult sim_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)flags;
    if (!handle || !size || size % DS__SIM_VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = vmm_prop_ok(prop);
    if (r != CUDA_SUCCESS)
        return r;
    sim_vphys *p = ds__calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->size = size;
    p->device = prop->location.id;
    pthread_mutex_lock(&g_vmm_mu);
    if (grow((void **)&g_vphys, &g_capvphys, g_nvphys, sizeof *g_vphys) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        g_vphys[g_nvphys++] = p;
    pthread_mutex_unlock(&g_vmm_mu);
    if (r != CUDA_SUCCESS)
        ds__free(p);
    else
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    return r;
}

/* g_vmm_mu held: index of a live physical allocation, or -1. */
static ptrdiff_t vphys_find(CUmemGenericAllocationHandle h)
{
    for (size_t i = 0; i < g_nvphys; i++)
        if ((CUmemGenericAllocationHandle)(uintptr_t)g_vphys[i] == h && !g_vphys[i]->released)
            return (ptrdiff_t)i;
    return -1;
}

static void vphys_drop(sim_vphys *p)
{
    for (size_t i = 0; i < g_nvphys; i++)
        if (g_vphys[i] == p) {
            g_vphys[i] = g_vphys[--g_nvphys];
            ds__free(p);
            return;
        }
}

static CUresult sim_cuMemRelease(CUmemGenericAllocationHandle handle)
{
    pthread_mutex_lock(&g_vmm_mu);
    ptrdiff_t i = vphys_find(handle);
    if (i >= 0) {
        sim_vphys *p = g_vphys[i];
        p->released = 1;
        if (!p->maps)
            vphys_drop(p);
    }
    pthread_mutex_unlock(&g_vmm_mu);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult sim_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags)
{
    if (!ptr || offset != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t b = (uintptr_t)ptr;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    ptrdiff_t pi = vphys_find(handle);
    int inside = 0, overlap = 0;
    for (size_t i = 0; i < g_nvres; i++)
        inside |= b >= g_vres[i].base && b - g_vres[i].base <= g_vres[i].size &&
                  size <= g_vres[i].size - (b - g_vres[i].base);
    for (size_t k = 0; k < g_nvmap; k++)
        overlap |= b < g_vmap[k].base + g_vmap[k].size && g_vmap[k].base < b + size;
    if (pi >= 0 && g_vphys[pi]->size == size && inside && !overlap) {
        if (grow((void **)&g_vmap, &g_capvmap, g_nvmap, sizeof *g_vmap) != 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            g_vmap[g_nvmap++] = (sim_vmap){ b, size, g_vphys[pi], 0 };
            g_vphys[pi]->maps++;
            r = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

static CUresult sim_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    if (!ptr || !size || !desc || !count)
        return CUDA_ERROR_INVALID_VALUE;
    int rw = 0;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        rw |= desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    uintptr_t b = (uintptr_t)ptr;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    /* the range must be covered by mappings: here, exactly one per call */
    for (size_t k = 0; k < g_nvmap; k++)
        if (g_vmap[k].base == b && g_vmap[k].size == size) {
            if (mprotect((void *)b, size, rw ? PROT_READ | PROT_WRITE : PROT_NONE) == 0) {
                g_vmap[k].access = rw;
                r = CUDA_SUCCESS;
            } else {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            }
            break;
        }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

static CUresult sim_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    uintptr_t b = (uintptr_t)ptr;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    for (size_t k = 0; k < g_nvmap; k++)
        if (g_vmap[k].base == b && g_vmap[k].size == size) {
            /* drop the pages (a later map reads zeros) and the access */
            madvise((void *)b, size, MADV_DONTNEED);
            mprotect((void *)b, size, PROT_NONE);
            sim_vphys *p = g_vmap[k].phys;
            g_vmap[k] = g_vmap[--g_nvmap];
            if (--p->maps == 0 && p->released)
                vphys_drop(p);
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

/* CUDA_SUCCESS if [p, p+n) lies in one mapping with read/write access. */
static CUresult vmm_check(uintptr_t p, size_t n)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_vmm_mu);
    for (size_t k = 0; k < g_nvmap; k++)
        if (g_vmap[k].access && p >= g_vmap[k].base && p - g_vmap[k].base <= g_vmap[k].size &&
            n <= g_vmap[k].size - (p - g_vmap[k].base)) {
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&g_vmm_mu);
    return r;
}

void ds__sim_vmm_counts(size_t *reservations, size_t *physical, size_t *mappings)
{
    pthread_mutex_lock(&g_vmm_mu);
    *reservations = g_nvres;
    *physical = g_nvphys;
    *mappings = g_nvmap;
    pthread_mutex_unlock(&g_vmm_mu);
}

/* ------------------------------------------------------------------------ */
/* Graphs: stream capture, templates, executables                           */
/* ------------------------------------------------------------------------ */

/*
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
 * Bad CUgraph, CUgraphNode and CUgraphExec handles give
 * CUDA_ERROR_INVALID_VALUE (the only error cuda.h documents for them).
 */

static sim_target on_graph(CUgraph g) { return on_handle(HV(g), SIM_H_GRAPH, CUDA_ERROR_INVALID_VALUE); }
static sim_target on_node(CUgraphNode n) { return on_handle(HV(n), SIM_H_NODE, CUDA_ERROR_INVALID_VALUE); }
static sim_target on_exec(CUgraphExec e) { return on_handle(HV(e), SIM_H_EXEC, CUDA_ERROR_INVALID_VALUE); }

static CUresult capture_begin(sim_call *c)
{
    sim_stream *s = c->s;
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE; /* already capturing */
    if (!(s->capture = ds__sim_graph_new()))
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->capture_invalid = 0;
    s->capture_mode = *(const int *)c->arg;
    s->capture_thread = pthread_self();
    return CUDA_SUCCESS;
}

/* Only a created stream can capture: the NULL stream (legacy, per-thread, a
 * green context's default stream reached through it) cannot. */
static CUresult sim_cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode)
{
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (is_null_stream(hStream))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    int m = (int)mode;
    return sim_locked(on_stream(hStream), SIM_STICKY, capture_begin, &m);
}

/* Ends the capture: the graph of its nodes in capture order (none: a valid,
 * empty graph), or, when it was invalidated, NULL and the recording freed. */
static CUresult capture_end(sim_call *c)
{
    sim_stream *s = c->s;
    CUgraph *out = c->arg;
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
        *out = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (!(g->handle = ds__sim_handle_new(c->d, SIM_H_GRAPH, g)))
        return CUDA_ERROR_OUT_OF_MEMORY; /* still capturing */
    s->capture = NULL;
    *out = (CUgraph)(uintptr_t)g->handle;
    return CUDA_SUCCESS;
}

static CUresult sim_cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_stream(hStream), SIM_STICKY, capture_end, phGraph);
}

static CUresult graph_destroy(sim_call *c)
{
    ds__sim_graph_free(c->d, c->obj); /* executables made from it keep their copies */
    return CUDA_SUCCESS;
}

static CUresult sim_cuGraphDestroy(CUgraph hGraph)
{
    return sim_locked(on_graph(hGraph), 0, graph_destroy, NULL);
}

typedef struct {
    CUgraphNode *nodes;
    size_t *num;
} nodes_args;

/* cuda.h: nodes NULL -> the count; else *num entries are filled, those past
 * the graph's nodes set to NULL, and *num becomes the number obtained. */
static CUresult graph_nodes(sim_call *c)
{
    const nodes_args *a = c->arg;
    const sim_graph *g = c->obj;
    if (!a->nodes) {
        *a->num = g->n;
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < *a->num; i++)
        a->nodes[i] = i < g->n ? (CUgraphNode)(uintptr_t)g->nodes[i]->handle : NULL;
    if (*a->num > g->n)
        *a->num = g->n;
    return CUDA_SUCCESS;
}

static CUresult sim_cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_graph(hGraph), 0, graph_nodes, &(nodes_args){ nodes, numNodes });
}

static CUresult node_type(sim_call *c)
{
    *(CUgraphNodeType *)c->arg = CU_GRAPH_NODE_TYPE_KERNEL; /* the only kind recorded */
    return CUDA_SUCCESS;
}

static CUresult sim_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    if (!type)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_node(hNode), 0, node_type, type);
}

/* kernelParams (or extra, for a node captured from a packed buffer) point to
 * the node's own copies, valid until the node's parameters are set again or
 * its graph is destroyed. */
static CUresult node_get_params(sim_call *c)
{
    sim_gnode *n = c->obj;
    CUDA_KERNEL_NODE_PARAMS *p = c->arg;
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

static CUresult sim_cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_node(hNode), 0, node_get_params, nodeParams);
}

/* The calling thread's current context if it is one of d's, else 0. */
static uint64_t current_ctx_of(const sim_dev *d)
{
    return ds__sim_ctx_mask(d, tl_ctx) ? tl_ctx : 0;
}

/* func set: the node runs func in the calling thread's current context, ctx
 * ignored (as cuda.h documents and as measured). func NULL: kern names the
 * kernel and ctx the context (NULL: the current one); this is the re-binding
 * that works on the GPU. Dimensions, shared memory and argument values are
 * checked as for a launch, and copied. */
static CUresult node_set_params(sim_call *c)
{
    sim_dev *d = c->d;
    sim_gnode *n = c->obj;
    const CUDA_KERNEL_NODE_PARAMS *p = c->arg;
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

static CUresult sim_cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_locked(on_node(hNode), 0, node_set_params, (void *)(uintptr_t)nodeParams);
}

/* Device memory held by the virtual memory management API's physical
 * allocations on the device of slot (cuMemCreate until the last unmap after
 * cuMemRelease). Takes g_vmm_mu: call it with no device lock held. */
static size_t vmm_device_bytes(int slot)
{
    size_t n = 0;
    pthread_mutex_lock(&g_vmm_mu);
    for (size_t i = 0; i < g_nvphys; i++)
        if (g_vphys[i]->device == slot)
            n += g_vphys[i]->size;
    pthread_mutex_unlock(&g_vmm_mu);
    return n;
}

typedef struct {
    CUgraphExec *out;
    size_t vmm_bytes;
} instantiate_args;

static CUresult graph_instantiate(sim_call *c)
{
    const instantiate_args *a = c->arg;
    sim_exec *e;
    CUresult r = ds__sim_exec_new(c->d, c->obj, a->vmm_bytes, &e);
    if (r == CUDA_SUCCESS)
        *a->out = (CUgraphExec)(uintptr_t)e->handle;
    return r;
}

/* Every flag cuda.h defines is accepted and changes nothing here (the model
 * has no graph memory nodes, device launch or node priorities). */
static CUresult sim_cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                unsigned long long flags)
{
    const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                     CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                     CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                     CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    if (!phGraphExec || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t hg = HV(hGraph);
    size_t vmm = hg && sim_h_kind(hg) == SIM_H_GRAPH ? vmm_device_bytes(sim_h_slot(hg)) : 0;
    return sim_locked(on_graph(hGraph), SIM_STICKY, graph_instantiate,
                      &(instantiate_args){ phGraphExec, vmm });
}

static CUresult exec_destroy(sim_call *c)
{
    ds__sim_exec_free(c->d, c->obj); /* launches in flight still complete */
    return CUDA_SUCCESS;
}

static CUresult sim_cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    return sim_locked(on_exec(hGraphExec), 0, exec_destroy, NULL);
}

static CUresult exec_upload(sim_call *c)
{
    return c->s->capture ? capture_refuse(c->s) : CUDA_SUCCESS; /* nothing to upload */
}

static CUresult sim_cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    return sim_locked(with_stream(on_exec(hGraphExec), hStream), SIM_STICKY, exec_upload, NULL);
}

static CUresult exec_launch(sim_call *c)
{
    if (c->s->capture)
        return capture_refuse(c->s);
    return ds__sim_exec_launch(c->d, c->obj, c->s, *(CUstream *)c->arg);
}

static CUresult sim_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return sim_locked(with_stream(on_exec(hGraphExec), hStream), SIM_STICKY, exec_launch, &hStream);
}

typedef struct {
    size_t *free_bytes, *total_bytes;
    size_t vmm_bytes;
} mem_info_args;

/* free: the device's memory less what cuMemAlloc, executable graphs and
 * VMM physical allocations hold (cuMemHostAlloc memory is host memory). */
static CUresult mem_info(sim_call *c)
{
    const mem_info_args *a = c->arg;
    const sim_dev *d = c->d;
    size_t used = d->mem_alloc_bytes + d->mem_graph_bytes + a->vmm_bytes;
    *a->total_bytes = DS__SIM_MEM_TOTAL;
    *a->free_bytes = used < DS__SIM_MEM_TOTAL ? DS__SIM_MEM_TOTAL - used : 0;
    return CUDA_SUCCESS;
}

static CUresult sim_cuMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t ctx = tl_ctx;
    size_t vmm = ctx ? vmm_device_bytes(sim_h_slot(ctx)) : 0;
    return sim_locked(on_current(), SIM_STICKY, mem_info, &(mem_info_args){ free_bytes, total_bytes, vmm });
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

/* Every symbol of DS__DRIVER_SYMBOLS must have a sim_<name> above with the
 * exact cuda.h type (a mismatch is an incompatible-pointer error under
 * -Werror). `.name` expands macros (cuMemAlloc -> cuMemAlloc_v2) like the
 * table's field names do; `sim_##name` does not. */
#define SIM_ENTRY(name, ver, req) .name = sim_##name,
static const ds__driver sim_table = {
    DS__DRIVER_SYMBOLS(SIM_ENTRY)
    .version = 0,
    .origin = "simulated device",
};
#undef SIM_ENTRY

const ds__driver *ds__sim_driver(void)
{
    return &sim_table;
}
