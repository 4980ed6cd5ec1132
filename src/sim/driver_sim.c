/*
 * The simulated driver table: every entry point of DS__DRIVER_SYMBOLS with the
 * exact cuda.h prototype, implemented over the engine (engine.h). This file
 * (devices, contexts, green contexts, streams, events, modules, the table),
 * driver_sim_mem.c (memory) and driver_sim_graph.c (capture and graphs) call
 * the engine; the engine never calls back.
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
 * Shape: an entry point that touches a device is a SIM_LOCKED definition
 * (driver_sim_call.h): checks that need no device, a target, a body that
 * states only the entry point's own work on the locked device.
 */
#include "seam/alloc.h"
#include "seam/log.h"
#include "sim/driver_sim_call.h"

#include <stdio.h>
#include <string.h>

/* The calling thread's current context (a SIM_H_CTX handle, 0 = none). */
static _Thread_local uint64_t tl_ctx;

uint64_t ds__sim_current_ctx(void)
{
    return tl_ctx;
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
/* The shape: find the device, lock it, find the target                      */
/* ------------------------------------------------------------------------ */

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

CUresult ds__sim_call_begin(sim_target t, unsigned flags, sim_call *c)
{
    *c = (sim_call){ 0 };
    if ((flags & SIM_VMM_BYTES) && (!t.by_handle || (t.h && sim_h_kind(t.h) == t.kind)))
        c->vmm_bytes = ds__sim_vmm_device_bytes(t.by_handle ? sim_h_slot(t.h) : t.slot);
    CUresult r = target_acquire(&t, c);
    if (r == CUDA_SUCCESS && (flags & SIM_STICKY) && c->d->fault) {
        r = c->d->fault;
        ds__sim_dev_release(c->d);
    }
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

/* *pStr: the name (text 0) or the description (text 1) of a code the
 * simulated driver uses; NULL and CUDA_ERROR_INVALID_VALUE for another. */
static CUresult error_lookup(CUresult error, const char **pStr, int text)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define SIM_ERR_CASE(code, desc)     \
    case code:                       \
        *pStr = text ? desc : #code; \
        return CUDA_SUCCESS;
        SIM_ERRORS(SIM_ERR_CASE)
#undef SIM_ERR_CASE
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

const char *ds__sim_cu_name(CUresult r)
{
    const char *s;
    return error_lookup(r, &s, 0) == CUDA_SUCCESS ? s : "CUDA_ERROR_UNKNOWN";
}

CUresult ds__sim_cuGetErrorName(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, 0);
}

CUresult ds__sim_cuGetErrorString(CUresult error, const char **pStr)
{
    return error_lookup(error, pStr, 1);
}

/* ------------------------------------------------------------------------ */
/* Driver, devices, contexts                                                 */
/* ------------------------------------------------------------------------ */

CUresult ds__sim_cuInit(unsigned int Flags)
{
    return Flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult ds__sim_cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 13000;
    return CUDA_SUCCESS;
}

CUresult ds__sim_cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = ds__sim_dev_count();
    return CUDA_SUCCESS;
}

/* The ordinal-th live simulated device; equal to the ordinal unless devices
 * created earlier were destroyed in between. */
CUresult ds__sim_cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int slot = ds__sim_dev_nth(ordinal);
    if (slot < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = slot;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuDeviceGetName, (char *name, int len, CUdevice dev), (name, len, dev),
           on_device(dev), 0,
           if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;)
{
    snprintf(name, (size_t)len, "Simulated GPU (%u SMs)", c->d->cfg.sm_count);
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuDeviceGetAttribute, (int *pi, CUdevice_attribute attrib, CUdevice dev), (pi, attrib, dev),
           on_device(dev), 0,
           if (!pi) return CUDA_ERROR_INVALID_VALUE;)
{
    int v;
    switch (attrib) {
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
    *pi = v;
    return CUDA_SUCCESS;
}

static const char sim_pci_id[] = "0000:00:00.0";

SIM_LOCKED(cuDeviceGetPCIBusId, (char *pciBusId, int len, CUdevice dev), (pciBusId, len, dev),
           on_device(dev), 0,
           if (!pciBusId || len < (int)sizeof sim_pci_id) return CUDA_ERROR_INVALID_VALUE;)
{
    memcpy(pciBusId, sim_pci_id, sizeof sim_pci_id);
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev), (pctx, dev),
           on_device(dev), 0,
           if (!pctx) return CUDA_ERROR_INVALID_VALUE;)
{
    c->d->primary_refs++;
    *pctx = (CUcontext)(uintptr_t)c->d->primary.handle;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuDevicePrimaryCtxRelease, (CUdevice dev), (dev), on_device(dev), 0)
{
    if (c->d->primary_refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    c->d->primary_refs--;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuCtxSetCurrent, (CUcontext ctx), (ctx),
           on_handle(HV(ctx), SIM_H_CTX, CUDA_ERROR_INVALID_CONTEXT), 0,
           if (!ctx) {
               tl_ctx = 0;
               return CUDA_SUCCESS;
           })
{
    tl_ctx = ((const sim_ctx *)c->obj)->handle;
    return CUDA_SUCCESS;
}

CUresult ds__sim_cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)(uintptr_t)tl_ctx;
    return CUDA_SUCCESS;
}

CUresult ds__sim_cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
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


SIM_LOCKED(cuDeviceGetDevResource, (CUdevice device, CUdevResource *resource, CUdevResourceType type),
           (device, resource, type),
           on_device(device), 0,
           if (!resource) return CUDA_ERROR_INVALID_VALUE;
           if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;)
{
    const sim_dev *d = c->d;
    res_write(resource, d, 0, &d->all, d->cfg.min_partition_sms, d->cfg.sm_alignment);
    return CUDA_SUCCESS;
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
SIM_LOCKED(cuDevSmResourceSplitByCount,
           (CUdevResource *result, unsigned int *nbGroups, const CUdevResource *input,
            CUdevResource *remaining, unsigned int useFlags, unsigned int minCount),
           (result, nbGroups, input, remaining, useFlags, minCount),
           on_slot(ri.slot, CUDA_ERROR_INVALID_VALUE), 0,
           if (!nbGroups || !input) return CUDA_ERROR_INVALID_VALUE;
           if (useFlags & ~(unsigned)(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
                                      CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE))
               return CUDA_ERROR_INVALID_VALUE;
           if (result && *nbGroups == 0) return CUDA_ERROR_INVALID_VALUE;
           res_internal ri;
           CUresult r = res_read(input, &ri);
           if (r != CUDA_SUCCESS) return r;)
{
    sim_dev *d = c->d;
    res_internal ri;
    res_read(input, &ri); /* read before the lock too: it names the device */
    if (ri.serial != d->serial)
        return CUDA_ERROR_INVALID_VALUE;
    if (ri.split != 0)
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    unsigned n_in = sim_set_count(&ri.mask);
    if (minCount > n_in)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned part = d->cfg.min_partition_sms, align = d->cfg.sm_alignment;
    if (useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) {
        part = part < 2 ? part : 2;
        align = align < 2 ? align : 2;
    }
    unsigned m = minCount > part ? minCount : part;
    m = (m + align - 1) / align * align;
    unsigned groups = m <= n_in ? n_in / m : 0;
    unsigned left = n_in - groups * m;
    if (left != 0 && left < part && groups >= 2)
        groups--;

    unsigned make = groups;
    if (result && *nbGroups < make)
        make = *nbGroups;
    uint64_t split = ++d->split_counter;
    unsigned sms[DS_MAX_SMS], k = 0;
    for (unsigned sm = 0; sm < DS_MAX_SMS; sm++)
        if (sim_set_has(&ri.mask, sm))
            sms[k++] = sm;
    unsigned used = 0;
    if (result) {
        for (unsigned g = 0; g < make; g++) {
            sim_smset gm = { { 0 } };
            for (unsigned i = 0; i < m; i++)
                sim_set_add(&gm, sms[used++]);
            res_write(&result[g], d, split, &gm, part, align);
        }
    }
    if (remaining) {
        sim_smset rm = { { 0 } };
        for (unsigned i = result ? used : groups * m; i < n_in; i++)
            sim_set_add(&rm, sms[i]);
        res_write(remaining, d, split, &rm, part, align);
    }
    *nbGroups = result ? make : groups;
    return CUDA_SUCCESS;
}

/* All resources must come from one split of the device (or be the one whole
 * device resource), without overlap; resources[0] names the device. */
SIM_LOCKED(cuDevResourceGenerateDesc,
           (CUdevResourceDesc *phDesc, CUdevResource *resources, unsigned int nbResources),
           (phDesc, resources, nbResources),
           on_slot(first.slot, CUDA_ERROR_INVALID_VALUE), 0,
           if (!phDesc || !resources || nbResources == 0) return CUDA_ERROR_INVALID_VALUE;
           res_internal first;
           CUresult r = res_read(&resources[0], &first);
           if (r != CUDA_SUCCESS) return r;)
{
    sim_dev *d = c->d;
    sim_smset mask = { { 0 } };
    uint64_t split0 = 0; /* resources[0]'s split */
    for (unsigned i = 0; i < nbResources; i++) {
        res_internal ri;
        CUresult r = res_read(&resources[i], &ri);
        if (r != CUDA_SUCCESS)
            return r;
        if (i == 0)
            split0 = ri.split;
        if (ri.slot != d->slot || ri.serial != d->serial ||
            (nbResources > 1 && (ri.split == 0 || ri.split != split0)) || sim_set_intersects(&mask, &ri.mask))
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
    *phDesc = (CUdevResourceDesc)(uintptr_t)h;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuGreenCtxCreate, (CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags),
           (phCtx, desc, dev, flags),
           on_device(dev), 0,
           if (!phCtx || !(flags & CU_GREEN_CTX_DEFAULT_STREAM) ||
               (flags & ~(unsigned)CU_GREEN_CTX_DEFAULT_STREAM))
               return CUDA_ERROR_INVALID_VALUE;)
{
    sim_dev *d = c->d;
    sim_desc *ds = ds__sim_handle_get(d, HV(desc), SIM_H_DESC);
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
    *phCtx = (CUgreenCtx)(uintptr_t)g->handle;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuGreenCtxDestroy, (CUgreenCtx hCtx), (hCtx), on_green(hCtx), 0)
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

SIM_LOCKED(cuCtxFromGreenCtx, (CUcontext *pContext, CUgreenCtx hCtx), (pContext, hCtx),
           on_green(hCtx), 0,
           if (!pContext) return CUDA_ERROR_INVALID_VALUE;)
{
    *pContext = (CUcontext)(uintptr_t)((const sim_green *)c->obj)->ctx.handle;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuStreamGetGreenCtx, (CUstream hStream, CUgreenCtx *phCtx), (hStream, phCtx),
           on_stream(hStream), 0,
           if (!phCtx) return CUDA_ERROR_INVALID_VALUE;)
{
    *phCtx = c->s->green ? (CUgreenCtx)(uintptr_t)c->s->green->handle : NULL;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Streams                                                                   */
/* ------------------------------------------------------------------------ */

/* The calling thread's capture interaction mode
 * (cuThreadExchangeStreamCaptureMode; a thread starts in global mode). Kept
 * and returned only: what a mode forbids other threads is not modelled. */
static _Thread_local int tl_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult ds__sim_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    int old = tl_capture_mode;
    tl_capture_mode = (int)*mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
}

/* The priority is clamped to the device's range. */
SIM_LOCKED(cuGreenCtxStreamCreate,
           (CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags, int priority),
           (phStream, greenCtx, flags, priority),
           on_green(greenCtx), SIM_STICKY,
           if (!phStream || flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
           if (priority < DS__SIM_PRIO_GREATEST) priority = DS__SIM_PRIO_GREATEST;
           if (priority > DS__SIM_PRIO_LEAST) priority = DS__SIM_PRIO_LEAST;)
{
    sim_dev *d = c->d;
    sim_green *g = c->obj;
    sim_stream *s = ds__sim_stream_new(d, g, &g->mask, priority);
    if (s)
        s->handle = ds__sim_handle_new(d, SIM_H_STREAM, s);
    if (!s || !s->handle) {
        if (s)
            ds__sim_stream_release(d, s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phStream = (CUstream)(uintptr_t)s->handle;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuStreamDestroy, (CUstream hStream), (hStream),
           on_handle(HV(hStream), SIM_H_STREAM, CUDA_ERROR_INVALID_HANDLE), 0,
           if (is_null_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;)
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

SIM_LOCKED(cuStreamSynchronize, (CUstream hStream), (hStream), on_stream(hStream), SIM_STICKY)
{
    return c->s->capture ? capture_refuse(c->s) : ds__sim_wait_stream(c->d, c->s);
}

SIM_LOCKED(cuStreamQuery, (CUstream hStream), (hStream), on_stream(hStream), SIM_STICKY)
{
    if (c->s->capture)
        return capture_refuse(c->s);
    return ds__sim_stream_busy(c->s) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

/* The target is the stream's device (the event's for the NULL stream); the
 * event is looked up before the stream is resolved (a bad event wins). */
SIM_LOCKED(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags),
           (hStream, hEvent, Flags),
           on_slot(slot, CUDA_ERROR_INVALID_HANDLE), 0,
           if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
           if (!hEvent || sim_h_kind(HV(hEvent)) != SIM_H_EVENT) return CUDA_ERROR_INVALID_HANDLE;
           int slot = sim_h_slot(is_null_stream(hStream) ? HV(hEvent) : HV(hStream));)
{
    sim_dev *d = c->d;
    sim_stream *s = NULL;
    sim_event *ev = ds__sim_handle_get(d, HV(hEvent), SIM_H_EVENT);
    CUresult r = ev ? ds__sim_stream_resolve(d, hStream, &s) : CUDA_ERROR_INVALID_HANDLE;
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

/* ------------------------------------------------------------------------ */
/* Events                                                                    */
/* ------------------------------------------------------------------------ */

SIM_LOCKED(cuEventCreate, (CUevent *phEvent, unsigned int Flags), (phEvent, Flags),
           on_current(), 0,
           if (!phEvent || (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                                CU_EVENT_INTERPROCESS)))
               return CUDA_ERROR_INVALID_VALUE;)
{
    sim_event *ev = ds__calloc(1, sizeof *ev);
    uint64_t h = ev ? ds__sim_handle_new(c->d, SIM_H_EVENT, ev) : 0;
    if (!h) {
        ds__free(ev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ev->handle = h;
    ev->flags = Flags;
    *phEvent = (CUevent)(uintptr_t)h;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuEventDestroy, (CUevent hEvent), (hEvent), on_event(hEvent), 0)
{
    sim_event *ev = c->obj;
    ds__sim_einst_unref(ev->last); /* a pending record still completes */
    ds__sim_handle_free(c->d, ev->handle);
    ds__free(ev);
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuEventRecord, (CUevent hEvent, CUstream hStream), (hEvent, hStream),
           with_stream(on_event(hEvent), hStream), SIM_STICKY)
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

SIM_LOCKED(cuEventQuery, (CUevent hEvent), (hEvent), on_event(hEvent), SIM_STICKY)
{
    const sim_event *ev = c->obj;
    return !ev->last || ev->last->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_LOCKED(cuEventSynchronize, (CUevent hEvent), (hEvent), on_event(hEvent), SIM_STICKY)
{
    sim_event *ev = c->obj;
    return ev->last ? ds__sim_wait_einst(c->d, ev->last) : CUDA_SUCCESS;
}

/* The target is the start event. */
SIM_LOCKED(cuEventElapsedTime, (float *pMilliseconds, CUevent hStart, CUevent hEnd),
           (pMilliseconds, hStart, hEnd),
           on_event(hStart), SIM_STICKY,
           if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
           if (!hEnd || sim_h_kind(HV(hEnd)) != SIM_H_EVENT || sim_h_slot(HV(hEnd)) != sim_h_slot(HV(hStart)))
               return CUDA_ERROR_INVALID_HANDLE;)
{
    const sim_event *s = c->obj, *e = ds__sim_handle_get(c->d, HV(hEnd), SIM_H_EVENT);
    if (!e || !s->last || !e->last || ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!s->last->done || !e->last->done)
        return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)((e->last->t_us - s->last->t_us) / 1000.0);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Kernels and modules                                                       */
/* ------------------------------------------------------------------------ */

/* hStream goes to the launch as the caller passed it (kept in the trace). */
SIM_LOCKED(cuLaunchKernel,
           (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
            unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
            unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra),
           (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
            kernelParams, extra),
           with_stream(on_func_or_kernel(f), hStream), 0)
{
    const unsigned grid[3] = { gridDimX, gridDimY, gridDimZ }, block[3] = { blockDimX, blockDimY, blockDimZ };
    return ds__sim_launch(c->d, c->obj, grid, block, sharedMemBytes, c->s, hStream, kernelParams, extra);
}

/* Any image is accepted (the core passes its embedded fatbin); every module
 * holds the built-in probe kernel and the resident control kernel. */
SIM_LOCKED(cuModuleLoadData, (CUmodule *module, const void *image), (module, image),
           on_current(), 0,
           if (!module || !image) return CUDA_ERROR_INVALID_VALUE;)
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
    *module = (CUmodule)(uintptr_t)m->handle;
    return CUDA_SUCCESS;
}

SIM_LOCKED(cuModuleUnload, (CUmodule hmod), (hmod), on_module(hmod), 0)
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

SIM_LOCKED(cuModuleGetFunction, (CUfunction *hfunc, CUmodule hmod, const char *name), (hfunc, hmod, name),
           on_module(hmod), 0,
           if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;)
{
    const sim_module *m = c->obj;
    if (strcmp(name, DS__SIM_PROBE_NAME) == 0)
        *hfunc = (CUfunction)(uintptr_t)m->probe->handle;
    else if (strcmp(name, DS__SIM_RCK_NAME) == 0)
        *hfunc = (CUfunction)(uintptr_t)m->rck->handle;
    else
        return CUDA_ERROR_NOT_FOUND;
    return CUDA_SUCCESS;
}

/* Parameter layout of a simulated kernel: parameters in declaration order,
 * each at the next offset aligned to its size (a power of two up to 8) or
 * to 8 otherwise, as the CUDA ABI places scalars and pointer-holding structs. */
SIM_LOCKED(cuFuncGetParamInfo, (CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize),
           (func, paramIndex, paramOffset, paramSize),
           on_func(func), 0,
           if (!paramOffset || !paramSize) return CUDA_ERROR_INVALID_VALUE;)
{
    const sim_func *f = c->obj;
    if (paramIndex >= f->num_params)
        return CUDA_ERROR_INVALID_VALUE;
    size_t off = 0;
    for (size_t i = 0; i <= paramIndex; i++) {
        size_t sz = f->param_sizes[i];
        size_t al = (sz == 1 || sz == 2 || sz == 4) ? sz : 8;
        off = (off + al - 1) & ~(al - 1);
        if (i == paramIndex) {
            *paramOffset = off;
            *paramSize = sz;
        }
        off += sz;
    }
    return CUDA_SUCCESS;
}

/* The name lives as long as the function. */
SIM_LOCKED(cuFuncGetName, (const char **name, CUfunction hfunc), (name, hfunc),
           on_func_or_kernel(hfunc), 0,
           if (!name || !hfunc) return CUDA_ERROR_INVALID_VALUE;)
{
    *name = ((const sim_func *)c->obj)->name;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

/* Every symbol of DS__DRIVER_SYMBOLS is a ds__sim_<name> with the exact
 * cuda.h type (declared in driver_sim_call.h, defined in this file,
 * driver_sim_mem.c or driver_sim_graph.c). `.name` expands macros
 * (cuMemAlloc -> cuMemAlloc_v2) like the table's field names do;
 * `ds__sim_##name` does not. */
#define SIM_ENTRY(name, ver, req) .name = ds__sim_##name,
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
