/*
 * Fair host<->device copies: ds_memcpy_async and the
 * runtime's copy scheduler thread. The arbitration (chunking, weighted fair
 * queueing, LS first) is memory/copy_queue.c; this file owns the thread, the
 * copy stream and the ordering with each vCtx's stream:
 *  - before: an event recorded on the vCtx's stream at submission; the job
 *    is handed to the arbiter only once that event has completed (polled),
 *    so a tenant's kernels never hold the link;
 *  - after: the vCtx's stream waits (cuStreamWaitValue32, GEQ) on a word
 *    of device memory that the copy stream writes (cuStreamWriteValue32)
 *    after the copy's last chunk, with the copy's sequence number.
 * One chunk is on the link at a time (issued, then its event waited on).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/copy.h"
#include "core/fault.h"
#include "core/handles.h"
#include "core/pool.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "memory/copy_queue.h"
#include "seam/alloc.h"
#include "seam/driver.h"
#include "seam/log.h"

/* Poll period for jobs waiting on their vCtx's earlier work, after yielding
 * the device's poll_yields times (about a millisecond on a GPU). */
#define DS__COPY_POLL_US 20.0

typedef struct ds__copy_job {
    ds__copy_req req; /* first: the arbiter hands back &req */
    struct ds__copy_job *next_pending;
    struct ds_vctx *v;
    int tenant;
    CUevent before;
    ds_copy_kind kind;
    CUdeviceptr device;
    void *host;
    uint32_t seq;
} ds__copy_job;

struct ds__copier {
    struct ds_runtime *rt;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int stop;
    ds__copyq q;
    ds__copy_job *pending; /* submitted, waiting for their vCtx's earlier work */
    int busy_tenant;       /* tenant whose chunk is on the link, -1 */
    CUstream stream;
    CUevent done;
    double bytes_per_us; /* for wait accounting and the simulated link */
    /* chunk history (tenant ids), for tests */
    int hist[4096];
    size_t nhist;
};

static void job_free(const ds__driver *cu, ds__copy_job *j)
{
    if (j->before)
        cu->cuEventDestroy(j->before);
    ds__free(j);
}

/* Copies whose gate the vCtx's stream waits on. A vCtx with any counts once
 * in rt->gates.copy_waits: its stream (one hardware queue) is blocked until they
 * are done, which closing gates must leave room for (src/core/gate.c). */
static void pending_add(struct ds_vctx *v, uint32_t n)
{
    if (atomic_fetch_add_explicit(&v->copy.pending, n, memory_order_relaxed) == 0)
        atomic_fetch_add_explicit(&v->rt->gates.copy_waits, 1, memory_order_relaxed);
}

static void pending_sub(struct ds_vctx *v, uint32_t n)
{
    if (n && atomic_fetch_sub_explicit(&v->copy.pending, n, memory_order_relaxed) == n)
        atomic_fetch_sub_explicit(&v->rt->gates.copy_waits, 1, memory_order_relaxed);
}

/* Copy thread: writes the gate of a finished (or failed) job. */
static void open_gate(struct ds__copier *c, ds__copy_job *j)
{
    const ds__driver *cu = c->rt->cu;
    CUresult r = cu->cuStreamWriteValue32(c->stream, j->v->copy.word, j->seq, 0);
    if (r != CUDA_SUCCESS && !ds__fault_note(c->rt, r, NULL, "cuStreamWriteValue32 (copy gate)"))
        ds__log(DS_LOG_ERROR, "vCtx '%s': copy gate %u: %s", j->v->name, j->seq, ds__cu_error_name(cu, r));
    pending_sub(j->v, 1);
}

/* Copy thread: one chunk on the link, waited for. */
static CUresult issue_chunk(struct ds__copier *c, ds__copy_job *j, const ds__copy_chunk *k)
{
    const ds__driver *cu = c->rt->cu;
    CUresult r;
    if (j->kind == DS_COPY_HOST_TO_DEVICE)
        r = cu->cuMemcpyHtoDAsync(j->device + k->offset, (const char *)j->host + k->offset, k->len, c->stream);
    else
        r = cu->cuMemcpyDtoHAsync((char *)j->host + k->offset, j->device + k->offset, k->len, c->stream);
    if (r == CUDA_SUCCESS)
        r = cu->cuEventRecord(c->done, c->stream);
    if (r == CUDA_SUCCESS)
        r = cu->cuEventSynchronize(c->done);
    if (r == CUDA_SUCCESS && c->rt->ops->link_wait)
        c->rt->ops->link_wait(c->rt->dev, k->len);
    return r;
}

static void *copy_main(void *arg)
{
    struct ds__copier *c = arg;
    struct ds_runtime *rt = c->rt;
    const ds__driver *cu = rt->cu;
    ds__thread_capture_relaxed(cu);
    cu->cuCtxSetCurrent(rt->primary);
    unsigned idle_polls = 0;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->stop)
            break;
        /* hand ready jobs to the arbiter, in submission order */
        double now = ds__now_us(rt);
        for (ds__copy_job **pp = &c->pending; *pp;) {
            ds__copy_job *j = *pp;
            CUresult r = cu->cuEventQuery(j->before);
            if (r == CUDA_ERROR_NOT_READY) {
                pp = &j->next_pending;
                continue;
            }
            *pp = j->next_pending;
            ds__copyq_submit(&c->q, j->tenant, &j->req, now);
            idle_polls = 0;
        }
        ds__copy_chunk k;
        if (ds__copyq_next(&c->q, now, c->bytes_per_us, &k)) {
            ds__copy_job *j = (ds__copy_job *)k.req;
            c->busy_tenant = k.tenant;
            if (c->nhist < sizeof c->hist / sizeof c->hist[0])
                c->hist[c->nhist++] = k.tenant;
            pthread_mutex_unlock(&c->mu);
            CUresult r = issue_chunk(c, j, &k);
            if (r != CUDA_SUCCESS && !ds__fault_note(rt, r, j->v, "copy chunk"))
                ds__log(DS_LOG_ERROR, "vCtx '%s': copy of %llu bytes failed at offset %llu: %s", j->v->name,
                        (unsigned long long)j->req.bytes, (unsigned long long)k.offset,
                        ds__cu_error_name(cu, r));
            int finished = k.last;
            if (r != CUDA_SUCCESS && !k.last) {
                /* drop the rest of the job: the gate opens now */
                pthread_mutex_lock(&c->mu);
                ds__copyq_tenant_cancel(&c->q, j->tenant); /* its FIFO head is j */
                ds__copy_req *rest = j->req.next;
                pthread_mutex_unlock(&c->mu);
                /* later jobs of the tenant are requeued as they were */
                for (ds__copy_req *q = rest; q;) {
                    ds__copy_req *n = q->next;
                    pthread_mutex_lock(&c->mu);
                    ds__copyq_submit(&c->q, j->tenant, q, ds__now_us(rt));
                    pthread_mutex_unlock(&c->mu);
                    q = n;
                }
                finished = 1;
            }
            /* stats first: a tenant that sees its gate open sees them */
            pthread_mutex_lock(&c->mu);
            struct ds_vctx *v = j->v;
            const ds__copyq_tenant *t = &c->q.t[k.tenant];
            atomic_store_explicit(&v->copy.bytes, t->bytes_moved, memory_order_relaxed);
            atomic_store_explicit(&v->copy.wait_ns, (uint64_t)(t->wait_us * 1e3), memory_order_relaxed);
            if (finished)
                atomic_fetch_add_explicit(&v->copy.done, 1, memory_order_relaxed);
            pthread_mutex_unlock(&c->mu);
            if (finished) {
                open_gate(c, j);
                job_free(cu, j);
            }
            pthread_mutex_lock(&c->mu);
            c->busy_tenant = -1;
            pthread_cond_broadcast(&c->cv);
            continue;
        }
        if (c->pending) {
            /* A GPU takes a few us to reach the event just recorded: yield
             * for a while (a copy waits on nothing else), then sleep. */
            pthread_mutex_unlock(&c->mu);
            if (++idle_polls < rt->ops->poll_yields)
                sched_yield();
            else
                ds__sleep_us(rt, DS__COPY_POLL_US);
            pthread_mutex_lock(&c->mu);
            continue;
        }
        idle_polls = 0;
        pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The runtime's copier, started on first use (under rt->lock). */
static ds_status copier_get(struct ds_runtime *rt, struct ds__copier **out)
{
    pthread_mutex_lock(&rt->lock);
    struct ds__copier *c = rt->copier;
    ds_status st = DS_SUCCESS;
    if (!c) {
        c = ds__calloc(1, sizeof *c);
        if (!c) {
            pthread_mutex_unlock(&rt->lock);
            return ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_memcpy_async: copier");
        }
        c->rt = rt;
        c->busy_tenant = -1;
        c->bytes_per_us = rt->ops->link_bytes_per_us;
        ds__copyq_init(&c->q, 0);
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->cv, NULL);
        st = ds__pool_stream_create(rt, rt->full_pctx, rt->prio_least, &c->stream);
        if (st == DS_SUCCESS) {
            CUresult r = rt->cu->cuEventCreate(&c->done, CU_EVENT_DISABLE_TIMING);
            if (r != CUDA_SUCCESS)
                st = ds__fail(ds__cu_status(r), "ds_memcpy_async: cuEventCreate -> %s", ds__cu_error_name(rt->cu, r));
        }
        if (st == DS_SUCCESS && pthread_create(&c->thread, NULL, copy_main, c) != 0)
            st = ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_memcpy_async: cannot start the copy thread");
        if (st != DS_SUCCESS) {
            if (c->done)
                rt->cu->cuEventDestroy(c->done);
            if (c->stream)
                rt->cu->cuStreamDestroy(c->stream);
            pthread_cond_destroy(&c->cv);
            pthread_mutex_destroy(&c->mu);
            ds__free(c);
            pthread_mutex_unlock(&rt->lock);
            return st;
        }
        rt->copier = c;
    }
    pthread_mutex_unlock(&rt->lock);
    *out = c;
    return DS_SUCCESS;
}

ds_status ds_memcpy_async(ds_vctx_t v, CUdeviceptr device, void *host, size_t bytes, ds_copy_kind kind)
{
    DS__TRY(ds__vctx_check(v, "ds_memcpy_async"));
    struct ds_runtime *rt = v->rt;
    const ds__driver *cu = v->cu;
    if (!device || !host || (kind != DS_COPY_HOST_TO_DEVICE && kind != DS_COPY_DEVICE_TO_HOST))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_memcpy_async('%s'): %s", v->name,
                        !device ? "device address is 0" : !host ? "host is NULL" : "kind out of range");
    if (DS__UNLIKELY(ds__faulted(rt)))
        return ds__fault_status(rt, "ds_memcpy_async");
    if (!bytes)
        return DS_SUCCESS;
    if (!cu->cuMemcpyHtoDAsync || !cu->cuMemcpyDtoHAsync || !cu->cuStreamWaitValue32 ||
        !cu->cuStreamWriteValue32)
        return ds__fail(DS_ERR_NOT_SUPPORTED,
                        "ds_memcpy_async('%s'): the driver lacks asynchronous copies or stream memory operations",
                        v->name);
    struct ds__copier *c = NULL;
    DS__TRY(copier_get(rt, &c));
    CUcontext cur;
    if (cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != rt->primary)
        cu->cuCtxSetCurrent(rt->primary);
    if (!v->copy.word) {
        CUdeviceptr w = 0;
        CUresult r = cu->cuMemAlloc(&w, 4);
        if (r == CUDA_SUCCESS)
            r = cu->cuMemsetD32(w, 0, 1);
        if (r != CUDA_SUCCESS) {
            if (w)
                cu->cuMemFree(w);
            return ds__fail(DS_ERR_DRIVER, "ds_memcpy_async('%s'): gate word: %s", v->name,
                            ds__cu_error_name(cu, r));
        }
        pthread_mutex_lock(&c->mu);
        int t = ds__copyq_tenant_add(&c->q, v->weight, v->cls == DS_CLASS_LATENCY_SENSITIVE);
        pthread_mutex_unlock(&c->mu);
        if (t < 0) {
            cu->cuMemFree(w);
            return ds__fail(DS_ERR_LIMIT, "ds_memcpy_async('%s'): %d vCtxs already copy", v->name,
                            DS__COPYQ_MAX_TENANTS);
        }
        v->copy.tenant = t;
        v->copy.word = w;
    }
    ds__copy_job *j = ds__calloc(1, sizeof *j);
    if (!j)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_memcpy_async('%s'): job", v->name);
    j->req.bytes = bytes;
    j->v = v;
    j->tenant = v->copy.tenant;
    j->kind = kind;
    j->device = device;
    j->host = host;
    j->seq = v->copy.seq + 1;
    /* On the current stream: a later remap's hand-off event comes after the
     * gate, so the gate holds on the new stream too. */
    CUresult r = cu->cuEventCreate(&j->before, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS)
        r = cu->cuEventRecord(j->before, v->stream);
    if (r == CUDA_SUCCESS)
        r = cu->cuStreamWaitValue32(v->stream, v->copy.word, j->seq, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
        job_free(cu, j);
        if (ds__fault_note(rt, r, v, "ds_memcpy_async"))
            return ds__fault_status(rt, "ds_memcpy_async");
        return ds__fail(DS_ERR_DRIVER, "ds_memcpy_async('%s'): %s", v->name, ds__cu_error_name(cu, r));
    }
    v->copy.seq = j->seq;
    pending_add(v, 1);
    pthread_mutex_lock(&c->mu);
    j->next_pending = NULL;
    ds__copy_job **pp = &c->pending;
    while (*pp)
        pp = &(*pp)->next_pending;
    *pp = j;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return DS_SUCCESS;
}

void ds__copy_vctx_teardown(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    struct ds__copier *c = rt->copier;
    if (!c || !v->copy.word)
        return;
    const ds__driver *cu = rt->cu;
    unsigned cancelled = 0;
    pthread_mutex_lock(&c->mu);
    while (c->busy_tenant == v->copy.tenant)
        pthread_cond_wait(&c->cv, &c->mu);
    for (ds__copy_job **pp = &c->pending; *pp;) {
        ds__copy_job *j = *pp;
        if (j->v != v) {
            pp = &j->next_pending;
            continue;
        }
        *pp = j->next_pending;
        job_free(cu, j);
        cancelled++;
    }
    for (ds__copy_req *q = ds__copyq_tenant_cancel(&c->q, v->copy.tenant); q;) {
        ds__copy_req *n = q->next;
        job_free(cu, (ds__copy_job *)q);
        cancelled++;
        q = n;
    }
    ds__copyq_tenant_remove(&c->q, v->copy.tenant);
    pthread_mutex_unlock(&c->mu);
    pending_sub(v, cancelled);
    if (cancelled && !ds__faulted(rt)) {
        /* open the gates of the cancelled copies so the stream can drain;
         * the word stays allocated (4 bytes) since the stream may still read it */
        cu->cuMemsetD32(v->copy.word, v->copy.seq, 1);
        ds__log(DS_LOG_WARN, "vCtx '%s' destroyed with %u copies not done; cancelled", v->name, cancelled);
    } else if (!ds__faulted(rt)) {
        cu->cuMemFree(v->copy.word);
    }
    v->copy.word = 0;
}

void ds__copy_stop(struct ds_runtime *rt)
{
    struct ds__copier *c = rt->copier;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    /* vCtxs are gone: their jobs were cancelled at their teardown */
    rt->cu->cuEventDestroy(c->done);
    rt->cu->cuStreamDestroy(c->stream);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    ds__free(c);
    rt->copier = NULL;
}

size_t ds__copy_history(struct ds_runtime *rt, int *tenants, size_t cap)
{
    struct ds__copier *c = rt->copier;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    size_t n = c->nhist < cap ? c->nhist : cap;
    memcpy(tenants, c->hist, n * sizeof *tenants);
    pthread_mutex_unlock(&c->mu);
    return n;
}
