/*
 * The resident control kernel, host side (DetShare section 4.2).
 *
 * One RCK per runtime when ds_runtime_config.rck = DS_RCK_ON: a one-thread
 * kernel (src/rck/device_kernels.cu, ds_rck) launched at creation on its own
 * stream of its own green context, over the last group of the SM split. The
 * default pool's LOW (latency-sensitive) tiers are taken from the low end of
 * the split, so that group is one no LS tier uses; a pool whose LOW tiers
 * cover it gets no RCK (DS_ERR_NOT_SUPPORTED). It runs ds__rck_device_pass
 * (rck_block.h) in a loop:
 *  - mirrors the gate bits of its control block into the device gate words
 *    the streams wait on (DS_GATES_RCK);
 *  - timestamps every gate boundary a stream passes with %globaltimer and
 *    pushes (slot, sequence, time) into a ring the scheduler drains here:
 *    two consecutive boundaries around one kernel give that kernel's
 *    duration, a profile sample without events;
 *  - beats a heartbeat every 100 us. A missing heartbeat is a watchdog event
 *    (on_congestion, ds_runtime_stats.heartbeat_misses) after
 *    heartbeat_timeout_ms, and a presumed device fault after fault_presume_ms:
 *    a trap or illegal address stops every kernel of the context, the RCK
 *    included, well before the driver reports the fault (docs/device-facts.md;
 *    the times are in docs/results/h200/gpu-suite.txt, `fault::`). On a GPU a
 *    thread of its own watches the heartbeat and makes no driver call: while
 *    the driver recovers from a fault its calls block (the scheduler's
 *    cuEventQuery did, for hundreds of ms), so a watchdog that calls it would
 *    learn nothing sooner. On the simulated
 *    device in virtual time the scheduler pass watches it (exact tests).
 * Its costs (ds_rck_mode in detshare.h): it blocks device-wide synchronization
 * and frees of the primary context while it runs, takes a block slot on one
 * SM, and keeps one hardware queue busy (counted in max_closed_gates).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rck/rck.h"

#include "core/clock.h"
#include "core/fault.h"
#include "core/gate.h"
#include "core/handles.h"
#include "core/pool.h"
#include "core/probe.h"
#include "core/profile.h"
#include "core/registry.h"
#include "core/relaxed.h"
#include "core/runtime.h"
#include "core/sched.h"
#include "core/vctx.h"
#include "seam/alloc.h"
#include "seam/driver.h"
#include "seam/log.h"
#include "rck/rck_block.h"

/* Heartbeat period the RCK is told (ns). */
#define DS__RCK_BEAT_NS 100000ull
/* How long start-up waits for the RCK to run before going on without. */
#define DS__RCK_START_WAIT_US 1000000.0

struct ds__rck {
    struct ds_runtime *rt;
    CUgreenCtx green;
    CUstream stream;
    uint32_t group, sm_count;
    ds__rck_block *cb; /* host address of the pinned block */
    CUdeviceptr cb_dev;
    CUdeviceptr words; /* device memory: gates | bounds | seen, max_vctx words each */
    CUdeviceptr gates, bounds, seen;
    /* per vCtx slot (the pass only): the last boundary seen */
    struct rck_slot {
        struct ds_vctx *v;
        uint32_t last_seq;
        uint64_t last_ns;
        uint64_t last_closes;
    } *slot;
    /* the heartbeat's watcher: its own thread in real time, the pass in the
     * simulator's virtual time (one of them only) */
    pthread_t watch;
    int watch_started;
    _Atomic int watch_stop;
    uint64_t last_hb;
    _Atomic double last_hb_change_us; /* read by ds_runtime_get_stats too */
    double started_us;
    _Atomic int running;
    int miss_reported, resident_warned;
    _Atomic uint32_t misses;    /* silences seen by the watcher */
    _Atomic double miss_age_us; /* how long the latest had lasted */
    /* the scheduler pass (one at a time) */
    uint32_t misses_raised; /* silences on_congestion was raised for */
    uint32_t tail;
    _Atomic uint64_t boundaries, samples;
};

/* The RCK's side of the block is read with acquire loads (it is written by the
 * device, or on the simulated device by another host thread). */
#define RCK_LD(r, field) __atomic_load_n(&(r)->cb->field, __ATOMIC_ACQUIRE)

static void *watch_main(void *arg);
static void gate_set(void *self, uint32_t slot, int closed);
static CUdeviceptr gate_bounds(void *self);
static void gate_slots(void *self, uint32_t nslots);
static void rck_pass(void *self, double now_us);
static void rck_stats(void *self, ds_runtime_stats *st, double now_us);
static void rck_stop(void *self);

static void rck_free(struct ds_runtime *rt, struct ds__rck *r)
{
    const ds__driver *cu = rt->cu;
    if (r->stream)
        cu->cuStreamDestroy(r->stream);
    if (r->words)
        cu->cuMemFree(r->words);
    if (r->cb)
        cu->cuMemFreeHost(r->cb);
    if (r->green)
        cu->cuGreenCtxDestroy(r->green);
    ds__free(r->slot);
    ds__free(r);
}

/* The last group of the split, if no LOW pCtx uses it. */
static ds_status pick_group(struct ds_runtime *rt, uint32_t *group)
{
    uint32_t g = rt->num_groups - 1;
    for (uint32_t i = 0; i < rt->num_pctx; i++)
        if (rt->pctx[i].anchor == DS_ANCHOR_LOW && (rt->pctx[i].group_mask & (1ull << g)))
            return ds__fail(DS_ERR_NOT_SUPPORTED,
                            "ds_runtime_config.rck: pCtx %u (a LOW tier of %u SMs) includes the last SM group, "
                            "the only place the RCK can run without taking SMs a latency-sensitive tier needs",
                            i, rt->pctx[i].sm_count);
    *group = g;
    return DS_SUCCESS;
}

static ds_status launch(struct ds_runtime *rt, struct ds__rck *r)
{
    const ds__driver *cu = rt->cu;
    if (!cu->cuMemHostAlloc || !cu->cuMemHostGetDevicePointer || !cu->cuMemFreeHost || !cu->cuStreamWaitValue32)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "ds_runtime_config.rck: the driver cannot map host memory into the "
                                              "device or lacks stream memory operations");
    /* Everything the runtime will ever load or allocate on the device comes
     * first: a module load or an allocation may wait for every running
     * kernel, and the RCK never finishes (docs/results/h200/devprobe.jsonl). */
    CUfunction fn;
    DS__TRY(ds__probe_prepare(rt));
    DS__TRY(ds__module_function(rt, "ds_rck", &fn));
    void *p = NULL;
    DS__CU(rt, cuMemHostAlloc(&p, sizeof(ds__rck_block), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    r->cb = p;
    memset(p, 0, sizeof(ds__rck_block));
    r->cb->beat_ns = DS__RCK_BEAT_NS;
    DS__CU(rt, cuMemHostGetDevicePointer(&r->cb_dev, p, 0));
    size_t words = (size_t)rt->max_vctx;
    DS__CU(rt, cuMemAlloc(&r->words, 3 * words * sizeof(uint32_t)));
    DS__CU(rt, cuMemsetD32(r->words, 0, 3 * words));
    r->gates = r->words;
    r->bounds = r->words + words * sizeof(uint32_t);
    r->seen = r->words + 2 * words * sizeof(uint32_t);
    DS__TRY(ds__pool_green(rt, 1ull << r->group, &r->green));
    DS__CU(rt, cuGreenCtxStreamCreate(&r->stream, r->green, CU_STREAM_NON_BLOCKING, rt->prio_greatest));
    void *params[] = {&r->cb_dev, &r->gates, &r->bounds, &r->seen};
    DS__CU(rt, cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, r->stream, params, NULL));
    return DS_SUCCESS;
}

ds_status ds__rck_start(struct ds_runtime *rt)
{
    if (rt->max_vctx > DS__RCK_MAX_SLOTS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_config.rck: max_vctx %u, the RCK covers %u",
                        rt->max_vctx, DS__RCK_MAX_SLOTS);
    struct ds__rck *r = ds__calloc(1, sizeof *r);
    if (!r)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "RCK: %zu bytes", sizeof *r);
    r->slot = ds__calloc(rt->max_vctx, sizeof *r->slot);
    if (!r->slot) {
        ds__free(r);
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "RCK: %u slots", rt->max_vctx);
    }
    ds_status st = pick_group(rt, &r->group);
    if (st == DS_SUCCESS) {
        r->sm_count = ds__pool_mask_sms(rt, 1ull << r->group);
        st = launch(rt, r);
    }
    if (st != DS_SUCCESS) { /* nothing was launched, or the launch failed */
        rck_free(rt, r);
        return st;
    }
    r->rt = rt;
    rt->gates.writer = (ds__gate_writer){r, gate_set, gate_bounds, gate_slots};
    rt->sched.hook = (ds__sched_hook){r, rck_pass, rck_stats, rck_stop};
    rt->gates.words = r->gates; /* DS_GATES_RCK waits on these */
    r->started_us = ds__now_us(rt);
    /* Resident before any tenant work takes the SMs it needs. */
    while (RCK_LD(r, state) == DS__RCK_STATE_NONE && ds__now_us(rt) - r->started_us < DS__RCK_START_WAIT_US)
        ds__sleep_us(rt, 20);
    if (RCK_LD(r, state) == DS__RCK_STATE_RUNNING)
        ds__log(DS_LOG_INFO, "RCK resident on split group %u (%u SMs) after %.0f us", r->group, r->sm_count,
                ds__now_us(rt) - r->started_us);
    else
        ds__log(DS_LOG_WARN, "RCK launched on split group %u but not running after %.0f ms: the watchdog arms "
                             "once it runs", r->group, DS__RCK_START_WAIT_US / 1e3);
    if (!rt->ops->virtual_clock) { /* a GPU, or the simulator in real time */
        if (pthread_create(&r->watch, NULL, watch_main, r) == 0)
            r->watch_started = 1;
        else
            ds__log(DS_LOG_WARN, "RCK: no watchdog thread (pthread_create failed); the scheduler pass watches");
    }
    return DS_SUCCESS;
}

static void rck_stop(void *self)
{
    struct ds__rck *r = self;
    struct ds_runtime *rt = r->rt;
    if (r->watch_started) {
        atomic_store_explicit(&r->watch_stop, 1, memory_order_release);
        pthread_join(r->watch, NULL);
        r->watch_started = 0;
    }
    __atomic_store_n(&r->cb->stop, 1u, __ATOMIC_SEQ_CST);
    int done = 0;
    if (!ds__faulted(rt)) {
        /* It opens every gate, then exits; bounded like any teardown wait. */
        double t0 = ds__now_us(rt);
        for (;;) {
            CUresult q = rt->cu->cuStreamQuery(r->stream);
            if (q == CUDA_SUCCESS) {
                done = 1;
                break;
            }
            if (q != CUDA_ERROR_NOT_READY) {
                ds__fault_note(rt, q, NULL, "cuStreamQuery of the RCK's stream");
                break;
            }
            if (ds__now_us(rt) - t0 > rt->teardown_timeout_ms * 1e3) {
                ds__log(DS_LOG_WARN, "RCK did not stop within %u ms; its memory is left to the context",
                        rt->teardown_timeout_ms);
                break;
            }
            ds__sleep_us(rt, 50);
        }
    }
    if (done || ds__faulted(rt)) {
        rck_free(rt, r);
    } else {
        /* still running: freeing what it reads would be unsafe; the primary
         * context's release ends it */
        ds__free(r->slot);
        ds__free(r);
    }
}

/* Lock-free: the bit and the generation are separate atomics; the RCK
 * re-reads the bits whenever the generation moved, so a set racing another
 * is mirrored by whichever bump comes last. */
static void gate_set(void *self, uint32_t slot, int closed)
{
    struct ds__rck *r = self;
    uint32_t *w = &r->cb->gate_bits[slot / 32];
    uint32_t bit = 1u << (slot % 32);
    if (closed)
        __atomic_fetch_or(w, bit, __ATOMIC_SEQ_CST);
    else
        __atomic_fetch_and(w, ~bit, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&r->cb->gate_gen, 1u, __ATOMIC_SEQ_CST);
}

static void gate_slots(void *self, uint32_t nslots)
{
    struct ds__rck *r = self;
    uint32_t cur = __atomic_load_n(&r->cb->nslots, __ATOMIC_RELAXED);
    while (nslots > cur && !__atomic_compare_exchange_n(&r->cb->nslots, &cur, nslots, 0, __ATOMIC_SEQ_CST,
                                                        __ATOMIC_RELAXED))
        ;
}

static CUdeviceptr gate_bounds(void *self) { return ((struct ds__rck *)self)->bounds; }

/* One boundary record: v's stream passed gate `seq` at t_ns. Two consecutive
 * boundaries around exactly one kernel, with the gate never closed between,
 * are that kernel's duration (plus the gate's own stream operations, about a
 * microsecond): a profile sample on the tier it ran on. */
static void boundary(struct ds_runtime *rt, struct ds__rck *r, const ds__rck_record *rec)
{
    if (rec->slot >= rt->max_vctx)
        return;
    struct ds_vctx *v = atomic_load_explicit(&rt->vctx[rec->slot], memory_order_acquire);
    if (!v || v->magic != DS__VCTX_MAGIC || (int32_t)(rec->seq - v->gate.base) <= 0)
        return; /* a record of the slot's previous vCtx */
    struct rck_slot *sl = &r->slot[rec->slot];
    if (sl->v != v)
        *sl = (struct rck_slot){.v = v};
    uint64_t closes = atomic_load_explicit(&v->gate.closes, memory_order_relaxed);
    if (sl->last_seq && rec->seq == sl->last_seq + 1 && closes == sl->last_closes && !DS__LD(v->gate.closed)) {
        const ds__gate_entry *e = &v->gate.log[sl->last_seq % DS__GATE_LOG];
        const ds__gate_entry *n = &v->gate.log[rec->seq % DS__GATE_LOG];
        if (atomic_load_explicit(&n->seq, memory_order_acquire) == rec->seq &&
            atomic_load_explicit(&e->seq, memory_order_acquire) == sl->last_seq &&
            atomic_load_explicit(&e->units, memory_order_relaxed) == 1 && e->f && e->closes == n->closes &&
            rec->t_ns > sl->last_ns) {
            double us = (double)(rec->t_ns - sl->last_ns) / 1e3;
            ds__profile_add(rt->profiles, e->f, e->grid, e->block, rt->pctx[e->pctx].sm_count, us);
            atomic_fetch_add_explicit(&r->samples, 1, memory_order_relaxed);
        }
    }
    sl->last_seq = rec->seq;
    sl->last_ns = rec->t_ns;
    sl->last_closes = closes;
}

/* The watcher: the heartbeat's age, a watchdog event once per silence
 * (counted here, on_congestion raised by the next scheduler pass), then past
 * fault_presume_ms a presumed device fault. No driver call. */
static void heartbeat_check(struct ds_runtime *rt, struct ds__rck *r, double now_us)
{
    if (RCK_LD(r, state) != DS__RCK_STATE_RUNNING) {
        if (!atomic_load(&r->running) && !r->resident_warned && now_us - r->started_us > DS__RCK_START_WAIT_US) {
            r->resident_warned = 1;
            ds__log(DS_LOG_WARN, "RCK still not resident %.0f ms after its launch", (now_us - r->started_us) / 1e3);
        }
        return;
    }
    uint64_t hb = RCK_LD(r, heartbeat_ns);
    if (!atomic_load(&r->running) || hb != r->last_hb) {
        r->last_hb = hb;
        atomic_store(&r->last_hb_change_us, now_us);
        atomic_store(&r->running, 1);
        r->miss_reported = 0;
        return;
    }
    double age_us = now_us - atomic_load(&r->last_hb_change_us);
    if (!r->miss_reported && age_us >= rt->heartbeat_timeout_ms * 1e3) {
        r->miss_reported = 1;
        atomic_fetch_add_explicit(&rt->sched.heartbeat_misses, 1, memory_order_relaxed);
        atomic_store(&r->miss_age_us, age_us);
        atomic_fetch_add(&r->misses, 1);
        ds__log(DS_LOG_WARN, "watchdog: the RCK's heartbeat has been missing for %.1f ms", age_us / 1e3);
    }
    if (rt->fault_presume_ms != DS_FAULT_PRESUME_NEVER && age_us >= rt->fault_presume_ms * 1e3) {
        char why[160];
        snprintf(why, sizeof why, "the RCK's heartbeat stopped %.1f ms ago (a kernel trapped or touched an illegal "
                                  "address)", age_us / 1e3);
        ds__fault_presume(rt, why);
    }
}

/* The watcher thread on a GPU: every 500 us, no driver call. */
static void *watch_main(void *arg)
{
    struct ds__rck *r = arg;
    ds__thread_capture_relaxed(r->rt->cu);
    struct timespec ts = {0, 500 * 1000};
    while (!atomic_load_explicit(&r->watch_stop, memory_order_acquire) && !ds__faulted(r->rt)) {
        heartbeat_check(r->rt, r, ds__now_us(r->rt));
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* A silence the watcher saw: on_congestion for every vCtx with work in flight. */
static void raise_misses(struct ds_runtime *rt, struct ds__rck *r)
{
    uint32_t seen = atomic_load(&r->misses);
    if (seen == r->misses_raised)
        return;
    r->misses_raised = seen;
    double age = atomic_load(&r->miss_age_us);
    for (uint32_t i = 0; i < rt->max_vctx; i++) {
        struct ds_vctx *v = atomic_load_explicit(&rt->vctx[i], memory_order_acquire);
        if (v && v->magic == DS__VCTX_MAGIC &&
            (atomic_load_explicit(&v->marks.pending, memory_order_relaxed) || DS__LD(v->section_open)))
            ds__policy_congestion(rt, v, age);
    }
}

static void rck_pass(void *self, double now_us)
{
    struct ds__rck *r = self;
    struct ds_runtime *rt = r->rt;
    if (!r->watch_started)
        heartbeat_check(rt, r, now_us);
    raise_misses(rt, r);
    if (RCK_LD(r, state) != DS__RCK_STATE_RUNNING)
        return;
    uint32_t head = RCK_LD(r, ring_head);
    if (head - r->tail > DS__RCK_RING)
        r->tail = head - DS__RCK_RING; /* overwritten: those boundaries give no sample */
    for (; r->tail != head; r->tail++) {
        ds__rck_record rec;
        const ds__rck_record *src = &r->cb->ring[r->tail % DS__RCK_RING];
        rec.slot = __atomic_load_n(&src->slot, __ATOMIC_RELAXED);
        rec.seq = __atomic_load_n(&src->seq, __ATOMIC_RELAXED);
        rec.t_ns = __atomic_load_n(&src->t_ns, __ATOMIC_RELAXED);
        atomic_fetch_add_explicit(&r->boundaries, 1, memory_order_relaxed);
        boundary(rt, r, &rec);
    }
}

static void rck_stats(void *self, ds_runtime_stats *st, double now_us)
{
    struct ds__rck *r = self;
    st->rck_running = RCK_LD(r, state) == DS__RCK_STATE_RUNNING;
    st->rck_sm_count = r->sm_count;
    st->rck_beats = RCK_LD(r, beats);
    st->heartbeat_age_us = atomic_load(&r->running) ? now_us - atomic_load(&r->last_hb_change_us) : -1;
    st->boundaries = atomic_load_explicit(&r->boundaries, memory_order_relaxed);
    st->rck_profile_samples = atomic_load_explicit(&r->samples, memory_order_relaxed);
}
