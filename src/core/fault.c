/*
 * Device faults. A kernel that traps or touches an illegal address leaves a
 * "sticky" error on its CUDA context: every later call in that context (and
 * every green context of the device's primary context) fails with it, for the
 * rest of the process (CUDA Driver API, "Error Handling": CUDA_ERROR_ILLEGAL_ADDRESS,
 * _LAUNCH_FAILED, ... "the context cannot be used anymore ... the process must
 * be terminated"). Tenants of one runtime share that context, so one tenant's
 * fault ends all of them: the first call that sees a sticky error (a tenant's
 * launch or synchronize, or the scheduler's query of a mark or of its health
 * stream) records it here; from then on every vCtx call returns
 * DS_ERR_DEVICE_FAULT, the scheduler thread stops its passes, and teardown
 * skips waiting on work that will never finish.
 */
#include <stdio.h>
#include <string.h>

#include "core/fault.h"
#include "core/handles.h"
#include "core/relaxed.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "seam/driver.h"
#include "seam/log.h"

int ds__cu_is_sticky(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
        return 1;
    default:
        return 0;
    }
}

/* Appends the names of the vCtxs whose work was in flight (the suspects when
 * the driver does not say which kernel faulted). */
static void suspects(struct ds_runtime *rt, char *buf, size_t cap)
{
    size_t n = 0;
    int count = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < rt->max_vctx && n + 1 < cap; i++) {
        struct ds_vctx *v = atomic_load_explicit(&rt->vctx[i], memory_order_acquire);
        if (!v || v->magic != DS__VCTX_MAGIC)
            continue;
        double inflight = atomic_load_explicit(&v->marks.submitted_us, memory_order_relaxed) -
                          atomic_load_explicit(&v->marks.completed_us, memory_order_relaxed);
        if (!atomic_load_explicit(&v->marks.pending, memory_order_relaxed) && inflight <= 0.5 &&
            !DS__LD(v->section_open))
            continue;
        int w = snprintf(buf + n, cap - n, "%s'%s'", count ? ", " : "", v->name);
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
        count++;
    }
    if (!count)
        snprintf(buf, cap, "none tracked");
}

/* The vCtx owning stream s (simulated device: the sim knows the stream). */
static struct ds_vctx *owner_of(struct ds_runtime *rt, CUstream s)
{
    if (!s)
        return NULL;
    for (uint32_t i = 0; i < rt->max_vctx; i++) {
        struct ds_vctx *v = atomic_load_explicit(&rt->vctx[i], memory_order_acquire);
        if (!v || v->magic != DS__VCTX_MAGIC)
            continue;
        for (uint32_t p = 0; p < DS_MAX_PCTX; p++)
            for (int u = 0; u < 2; u++)
                if (DS__LD(v->streams[p][u]) == s)
                    return v;
    }
    return NULL;
}

static void record(struct ds_runtime *rt, CUresult r, const char *culprit, struct ds_vctx *seen_by,
                   const char *where)
{
    rt->fault.code = r;
    snprintf(rt->fault.msg, sizeof rt->fault.msg,
             "device context faulted (%s): %s; first seen by %s%s%s in %s. Every vCtx of this runtime "
             "now returns DS_ERR_DEVICE_FAULT; the CUDA context stays unusable for the process",
             ds__cu_error_name(rt->cu, r), culprit, seen_by ? "vCtx '" : "the scheduler",
             seen_by ? seen_by->name : "", seen_by ? "'" : "", where);
    atomic_store_explicit(&rt->fault.faulted, 1, memory_order_release);
    ds__log(DS_LOG_ERROR, "%s", rt->fault.msg);
}

void ds__fault_presume(struct ds_runtime *rt, const char *why)
{
    if (atomic_flag_test_and_set_explicit(&rt->fault.claim, memory_order_acq_rel))
        return;
    char culprit[512], list[200];
    suspects(rt, list, sizeof list);
    snprintf(culprit, sizeof culprit, "presumed before the driver reports it: %s (vCtxs with work in flight: %s)",
             why, list);
    record(rt, CUDA_ERROR_LAUNCH_FAILED, culprit, NULL, "its watchdog");
}

int ds__fault_note(struct ds_runtime *rt, CUresult r, struct ds_vctx *seen_by, const char *where)
{
    if (!ds__cu_is_sticky(r))
        return 0;
    if (atomic_flag_test_and_set_explicit(&rt->fault.claim, memory_order_acq_rel))
        return 1; /* another thread records it */
    char culprit[320];
    CUstream fs = NULL;
    struct ds_vctx *c = NULL;
    if (rt->ops->fault_stream(rt->dev, &fs))
        c = owner_of(rt, fs);
    if (c) {
        snprintf(culprit, sizeof culprit, "a kernel of vCtx '%s' faulted", c->name);
    } else {
        char list[200];
        suspects(rt, list, sizeof list);
        snprintf(culprit, sizeof culprit,
                 "a kernel faulted; the driver does not say whose (vCtxs with work in flight: %s)", list);
    }
    record(rt, r, culprit, seen_by, where);
    return 1;
}

ds_status ds__fault_status(struct ds_runtime *rt, const char *fn)
{
    if (!atomic_load_explicit(&rt->fault.faulted, memory_order_acquire))
        return ds__fail(DS_ERR_DEVICE_FAULT, "%s: device context faulted", fn);
    /* logged once at ERROR when it happened; each later call at DEBUG */
    return ds__fail_at(DS_LOG_DEBUG, DS_ERR_DEVICE_FAULT, "%s: %s", fn, rt->fault.msg);
}
