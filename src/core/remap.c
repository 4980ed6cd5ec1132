/*
 * Where a vCtx runs (remap.h): its binding (pCtx + urgent stream), the
 * streams it has per binding, remaps with an event hand-off at kernel
 * boundaries, and the policy actions that request them. Every action is a
 * relaxed or compare-and-swap store on the vCtx, read by its owner at its
 * next unit: lock-free and safe from any thread, hooks included.
 */
#include "core/clock.h"
#include "core/fault.h"
#include "core/handles.h"
#include "core/pool.h"
#include "core/relaxed.h"
#include "core/remap.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "seam/driver.h"
#include "seam/log.h"

#include <math.h>
#include <stdlib.h>

int ds__binding_priority(const struct ds_runtime *rt, int priority)
{
    /* CUDA: numerically lower is more urgent; least is the default (0). */
    long p = (long)rt->prio_least - (long)priority;
    if (p < rt->prio_greatest)
        p = rt->prio_greatest;
    if (p > rt->prio_least)
        p = rt->prio_least;
    return (int)p;
}

void ds__binding_context(struct ds_vctx *v)
{
    CUcontext cur;
    if (DS__UNLIKELY(v->cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != v->rt->primary))
        v->cu->cuCtxSetCurrent(v->rt->primary);
}

ds_status ds__binding_stream(struct ds_vctx *v, uint32_t binding, CUstream *out)
{
    uint32_t p = DS__BIND_PCTX(binding), u = DS__BIND_URGENT(binding);
    CUstream s = DS__LD(v->streams[p][u]);
    if (!s) {
        int prio = u ? v->rt->prio_greatest : v->stream_priority;
        DS__TRY(ds__pool_stream_create(v->rt, p, prio, &s));
        DS__ST(v->streams[p][u], s);
        atomic_fetch_add_explicit(&v->streams_created, 1, memory_order_relaxed);
    }
    *out = s;
    return DS_SUCCESS;
}

/* The hand-off: orders `to` after everything submitted to `from` so far:
 * records `ev` on `from` and makes `to` wait on it (cuStreamWaitEvent holds
 * across green contexts). `ev` may be reused at once: a wait captures the
 * record it saw. Returns the failing CUresult, CUDA_SUCCESS otherwise. */
static CUresult handoff(const ds__driver *cu, CUevent ev, CUstream from, CUstream to)
{
    CUresult r = cu->cuEventRecord(ev, from);
    if (r == CUDA_SUCCESS)
        r = cu->cuStreamWaitEvent(to, ev, 0);
    return r;
}

/* The new stream waits on an event recorded on the old one, so everything
 * already submitted runs before anything submitted next: the caller's work is
 * never reordered, and never lost to a failed remap. */
ds_status ds__binding_apply(struct ds_vctx *v)
{
    uint32_t to = atomic_load_explicit(&v->pending, memory_order_acquire);
    uint32_t bound = DS__LD(v->bound);
    if (to == bound || DS__LD(v->section_open))
        return DS_SUCCESS;
    CUstream next;
    ds_status st = ds__binding_stream(v, to, &next);
    if (st == DS_SUCCESS) {
        CUresult r = handoff(v->cu, v->handoff, v->stream, next);
        if (r == CUDA_SUCCESS) {
            v->stream = next;
            DS__ST(v->bound, to);
            ds__bump(&v->remaps, 1);
            uint32_t ys = DS__YIELD_REQUESTED;
            const struct ds_runtime *rt = v->rt;
            /* a yield being timed: its hand-off event says when the work
             * left behind finished (a move that is not down drops it) */
            if (atomic_load_explicit(&v->yield.state, memory_order_relaxed) == ys)
                atomic_compare_exchange_strong(&v->yield.state, &ys,
                                               rt->pctx[DS__BIND_PCTX(to)].sm_count <
                                                       rt->pctx[DS__BIND_PCTX(bound)].sm_count
                                                   ? DS__YIELD_MOVED
                                                   : DS__YIELD_NONE);
            return DS_SUCCESS;
        }
        st = ds__fail(DS_ERR_DRIVER, "vCtx '%s': remap %u -> %u hand-off: %s", v->name, DS__BIND_PCTX(bound),
                      DS__BIND_PCTX(to), ds__cu_error_name(v->cu, r));
    }
    /* Keep `pending` unless another request arrived meanwhile. */
    atomic_compare_exchange_strong(&v->pending, &to, bound);
    ds__log(DS_LOG_WARN, "vCtx '%s' stays on pCtx %u: %s", v->name, DS__BIND_PCTX(bound), ds_last_error_message());
    return st;
}

static uint64_t yield_next_gate(struct ds_vctx *v);

/* Predicted work (us) the vCtx submitted and is not known to have finished. */
static double yield_inflight(const struct ds_vctx *v)
{
    return atomic_load_explicit(&v->marks.submitted_us, memory_order_relaxed) -
           atomic_load_explicit(&v->marks.completed_us, memory_order_relaxed);
}

/* A best-effort vCtx asked onto fewer SMs while it has work in flight: a
 * yield starts (any thread; at most one timed at a time). */
static void yield_begin(struct ds_vctx *v, uint32_t pctx)
{
    struct ds_runtime *rt = v->rt;
    if (v->cls != DS_CLASS_BEST_EFFORT || pctx >= rt->num_pctx ||
        atomic_load_explicit(&v->yield.state, memory_order_relaxed) != DS__YIELD_NONE)
        return;
    uint32_t bound = DS__BIND_PCTX(DS__LD(v->bound));
    if (rt->pctx[pctx].sm_count >= rt->pctx[bound].sm_count || yield_inflight(v) <= 0.5)
        return;
    uint32_t none = DS__YIELD_NONE;
    atomic_store_explicit(&v->yield.t0_us, ds__now_us(rt), memory_order_relaxed);
    atomic_store_explicit(&v->yield.gate, yield_next_gate(v), memory_order_relaxed);
    atomic_compare_exchange_strong(&v->yield.state, &none, DS__YIELD_REQUESTED);
}

/* With gates, the gate the stream reaches next: the oldest of the last
 * DS__GATE_REACH gates placed whose reached event has not completed, or the
 * next one to be placed. A policy that yields closes the gate, so the work
 * queued behind it waits there off the SMs: the yield ends at that gate.
 * 0 when the vCtx has no gates. Any thread (cuEventQuery is thread-safe; an
 * event the owner records again meanwhile reads as not reached: later). */
static uint64_t yield_next_gate(struct ds_vctx *v)
{
    if (atomic_load_explicit(&v->gate.reach_ready, memory_order_acquire) <= 0 ||
        atomic_load_explicit(&v->gate.interval_us, memory_order_relaxed) == DS_GATES_NONE)
        return 0;
    uint64_t placed = atomic_load_explicit(&v->gate.placed, memory_order_relaxed);
    uint64_t lo = placed > DS__GATE_REACH - 1 ? placed - (DS__GATE_REACH - 1) : 1;
    for (uint64_t i = lo; i <= placed; i++)
        if (v->cu->cuEventQuery(v->gate.reach[i % DS__GATE_REACH]) == CUDA_ERROR_NOT_READY)
            return i;
    return placed + 1;
}

/* The gate the yield waits for was reached (or is older than the events
 * kept: long reached). */
static int yield_gate_reached(struct ds_vctx *v, uint64_t gate)
{
    uint64_t placed = atomic_load_explicit(&v->gate.placed, memory_order_relaxed);
    if (gate > placed)
        return 0; /* not placed yet */
    if (placed - gate >= DS__GATE_REACH - 1)
        return 1;
    return v->cu->cuEventQuery(v->gate.reach[gate % DS__GATE_REACH]) == CUDA_SUCCESS;
}

static void yield_sample(struct ds_vctx *v, double us)
{
    uint64_t n = atomic_load_explicit(&v->yield.count, memory_order_relaxed);
    atomic_store_explicit(&v->yield.samples[n % DS__YIELD_SAMPLES], us, memory_order_relaxed);
    if (us > atomic_load_explicit(&v->yield.max_us, memory_order_relaxed))
        atomic_store_explicit(&v->yield.max_us, us, memory_order_relaxed);
    atomic_store_explicit(&v->yield.count, n + 1, memory_order_release);
    atomic_store_explicit(&v->yield.state, DS__YIELD_NONE, memory_order_release);
}

void ds__yield_poll(struct ds_vctx *v, double now_us)
{
    uint32_t st = atomic_load_explicit(&v->yield.state, memory_order_acquire);
    if (st == DS__YIELD_NONE)
        return;
    double t0 = atomic_load_explicit(&v->yield.t0_us, memory_order_relaxed);
    uint64_t gate = atomic_load_explicit(&v->yield.gate, memory_order_relaxed);
    /* stopped at a closed gate: off the SMs, whatever is queued behind it */
    if (gate && atomic_load_explicit(&v->gate.closed, memory_order_relaxed) && yield_gate_reached(v, gate)) {
        yield_sample(v, now_us - t0);
        return;
    }
    if (st == DS__YIELD_MOVED) {
        CUresult r = v->cu->cuEventQuery(v->handoff);
        if (r == CUDA_SUCCESS)
            yield_sample(v, now_us - t0);
        else if (r != CUDA_ERROR_NOT_READY)
            atomic_store_explicit(&v->yield.state, DS__YIELD_NONE, memory_order_relaxed);
        return;
    }
    /* not moved yet: its owner launched nothing since; done once its work
     * in flight is known finished (the pass harvested its marks first) */
    if (yield_inflight(v) <= 0.5) {
        uint32_t req = DS__YIELD_REQUESTED;
        if (atomic_load_explicit(&v->yield.state, memory_order_relaxed) == req)
            yield_sample(v, now_us - t0);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void ds__yield_read(struct ds_vctx *v, uint64_t *count, double *p50, double *p99, double *max)
{
    double s[DS__YIELD_SAMPLES];
    uint64_t n = atomic_load_explicit(&v->yield.count, memory_order_acquire);
    uint32_t k = n < DS__YIELD_SAMPLES ? (uint32_t)n : DS__YIELD_SAMPLES;
    for (uint32_t i = 0; i < k; i++)
        s[i] = atomic_load_explicit(&v->yield.samples[i], memory_order_relaxed);
    qsort(s, k, sizeof *s, cmp_double);
    *count = n;
    *p50 = k ? s[(k - 1) / 2] : 0;
    *p99 = k ? s[(uint32_t)ceil(0.99 * k) - 1] : 0;
    *max = atomic_load_explicit(&v->yield.max_us, memory_order_relaxed);
}

/* Sets the pCtx or the urgency half of the requested binding. */
static void request(struct ds_vctx *v, int64_t pctx, int urgent)
{
    if (ds__vgroup_follower(v)) /* placed by its group's rank 0 */
        return;
    if (pctx >= 0)
        yield_begin(v, (uint32_t)pctx);
    uint32_t cur = atomic_load_explicit(&v->pending, memory_order_relaxed), next;
    do {
        next = DS__BIND(pctx >= 0 ? (uint32_t)pctx : DS__BIND_PCTX(cur),
                        urgent >= 0 ? urgent : (int)DS__BIND_URGENT(cur));
    } while (!atomic_compare_exchange_weak_explicit(&v->pending, &cur, next, memory_order_release,
                                                    memory_order_relaxed));
}

static ds_status check_pctx(struct ds_vctx *v, uint32_t pctx, const char *fn)
{
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, fn);
    if (pctx >= v->rt->num_pctx)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "%s('%s'): pCtx %u, pool has %u", fn, v->name, pctx,
                        v->rt->num_pctx);
    return DS_SUCCESS;
}

ds_status ds_vctx_remap(ds_vctx_t v, uint32_t pctx_index)
{
    DS__TRY(ds__vctx_check_born(v, "ds_vctx_remap"));
    DS__TRY(check_pctx(v, pctx_index, "ds_vctx_remap"));
    request(v, pctx_index, -1);
    return DS_SUCCESS;
}

ds_status ds_vctx_set_urgent(ds_vctx_t v, int urgent)
{
    DS__TRY(ds__vctx_check_born(v, "ds_vctx_set_urgent"));
    request(v, -1, urgent != 0);
    return DS_SUCCESS;
}

ds_status ds_vctx_set_window(ds_vctx_t v, uint32_t window_us)
{
    DS__TRY(ds__vctx_check_born(v, "ds_vctx_set_window"));
    if (ds__vgroup_follower(v))
        return DS_SUCCESS;
    atomic_store_explicit(&v->window_us, window_us, memory_order_relaxed);
    return DS_SUCCESS;
}

ds_status ds_vctx_place(ds_vctx_t v, uint32_t pctx, int urgent, uint32_t window_us)
{
    DS__TRY(ds__vctx_check_born(v, "ds_vctx_place"));
    DS__TRY(check_pctx(v, pctx, "ds_vctx_place"));
    if (ds__vgroup_follower(v))
        return DS_SUCCESS;
    yield_begin(v, pctx);
    /* the window first: the owner reads it after it sees the new binding */
    atomic_store_explicit(&v->window_us, window_us, memory_order_relaxed);
    atomic_store_explicit(&v->pending, DS__BIND(pctx, urgent), memory_order_release);
    return DS_SUCCESS;
}

ds_status ds_vctx_set_track_all(ds_vctx_t v, int on)
{
    DS__TRY(ds__vctx_check_born(v, "ds_vctx_set_track_all"));
    DS__ST(v->track_all, on != 0);
    return DS_SUCCESS;
}

ds_status ds_vctx_get_pctx(ds_vctx_t v, uint32_t *pctx_index)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_get_pctx"));
    if (!pctx_index)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_get_pctx: pctx_index is NULL");
    *pctx_index = DS__BIND_PCTX(DS__LD(v->bound));
    return DS_SUCCESS;
}
