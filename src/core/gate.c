/*
 * Gates (DetShare section 4.2, cooperative preemption at kernel
 * boundaries). A gate is a cuStreamWaitValue32(word == 0) that the owner
 * thread puts in its vCtx's stream before a kernel or section, once the vCtx
 * has a gate interval and that much predicted work went by since its last
 * gate ("windows decide where gates go": policies derive the interval from
 * the window). Closing the vCtx's gate writes 1 to its word, so the queued
 * work stops at its next gate without the host racing the driver; opening
 * writes 0 and the work resumes in program order.
 *
 * Who writes the word (ds_gate_mode): DS_GATES_HOST puts the words in pinned
 * host memory mapped into the device and the deciding thread stores to them;
 * DS_GATES_RCK puts them in device memory and the resident control kernel
 * mirrors them from its control block (src/rck/rck.c). Host-written words
 * honour a decision sooner (gate_us_host against gate_us_rck in
 * docs/results/h200/overhead.json), so AUTO means HOST.
 *
 * Hardware queues: a stream waiting at a closed gate blocks the hardware
 * queue (connection) its work is on, and once every connection but none is
 * blocked, every other stream of the process stalls behind them
 * (docs/device-facts.md, hardware queues). So a closed gate must block one
 * queue at most: the owner thread waits at its next launch while its gate is
 * closed (no hand-off waits pile up behind it), and the runtime refuses a
 * close that would leave no connection free (DS_ERR_LIMIT).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/fault.h"
#include "core/gate.h"
#include "core/handles.h"
#include "core/relaxed.h"
#include "core/remap.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "seam/driver.h"
#include "seam/log.h"

static const char *mode_name(ds_gate_mode m)
{
    switch (m) {
    case DS_GATES_HOST:
        return "host-written";
    case DS_GATES_RCK:
        return "RCK-written";
    case DS_GATES_OFF:
        return "off";
    default:
        return "auto";
    }
}

/* Gates are unavailable: explicit requests fail, AUTO degrades with a warning. */
static ds_status unavailable(struct ds_runtime *rt, ds_gate_mode asked, const char *why)
{
    if (asked != DS_GATES_AUTO)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "ds_runtime_config.gates = %s: %s", mode_name(asked), why);
    ds__log(DS_LOG_WARN, "gates are off: %s", why);
    rt->gates.mode = DS_GATES_OFF;
    return DS_SUCCESS;
}

ds_status ds__gates_init(struct ds_runtime *rt, ds_gate_mode asked, int rck_on)
{
    const ds__driver *cu = rt->cu;
    ds_gate_mode mode = asked == DS_GATES_AUTO ? DS_GATES_HOST : asked;
    rt->gates.mode = DS_GATES_OFF;
    rt->gates.max_closed = 0;
    if (mode == DS_GATES_OFF)
        return DS_SUCCESS;
    if (mode == DS_GATES_RCK && !rck_on)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_runtime_config.gates = DS_GATES_RCK needs ds_runtime_config.rck = DS_RCK_ON");
    if (!cu->cuStreamWaitValue32 || !cu->cuStreamWriteValue32)
        return unavailable(rt, asked, "the driver has no stream memory operations (cuStreamWaitValue32)");
    if (mode == DS_GATES_HOST) {
        if (!cu->cuMemHostAlloc || !cu->cuMemHostGetDevicePointer || !cu->cuMemFreeHost)
            return unavailable(rt, asked, "the driver cannot map host memory into the device (cuMemHostAlloc)");
        void *p = NULL;
        size_t bytes = (size_t)rt->max_vctx * sizeof(uint32_t);
        CUresult r = cu->cuCtxSetCurrent(rt->primary);
        if (r == CUDA_SUCCESS)
            r = cu->cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
        if (r == CUDA_SUCCESS) {
            memset(p, 0, bytes);
            rt->gates.host = p;
            r = cu->cuMemHostGetDevicePointer(&rt->gates.words, p, 0);
        }
        if (r != CUDA_SUCCESS) {
            char why[160];
            snprintf(why, sizeof why, "pinned gate words (%zu bytes): %s", bytes, ds__cu_error_name(cu, r));
            /* out of memory is no reason to run without gates */
            if (asked == DS_GATES_AUTO && r != CUDA_ERROR_OUT_OF_MEMORY)
                return unavailable(rt, asked, why);
            return ds__fail(ds__cu_status(r), "gates: %s", why);
        }
    }
    /* DS_GATES_RCK: the writer (the RCK) sets gate_words (it runs after this, so
     * that nothing is allocated once the RCK is resident).
     * Queues: one stays free for every other stream, one is margin for a
     * remap hand-off racing a close, and the RCK keeps one busy. */
    uint32_t reserved = 2u + (rck_on ? 1u : 0u);
    uint32_t conn = rt->info.max_connections;
    rt->gates.max_closed = conn > reserved ? conn - reserved : 0;
    rt->gates.mode = mode;
    if (!rt->gates.max_closed)
        ds__log(DS_LOG_WARN,
                "gates: CUDA_DEVICE_MAX_CONNECTIONS=%u leaves no hardware queue for a closed gate%s: every "
                "close will be refused. Set it higher (up to 32) before the process's first CUDA call",
                conn, rck_on ? " beside the RCK's" : "");
    else
        ds__log(DS_LOG_INFO, "gates: %s, up to %u closed at once (CUDA_DEVICE_MAX_CONNECTIONS=%u)",
                mode_name(mode), rt->gates.max_closed, conn);
    return DS_SUCCESS;
}

void ds__gates_fini(struct ds_runtime *rt)
{
    if (rt->gates.host)
        rt->cu->cuMemFreeHost(rt->gates.host);
    rt->gates.host = NULL;
    rt->gates.words = 0;
    rt->gates.mode = DS_GATES_OFF;
}

static void write_word(struct ds_runtime *rt, uint32_t slot, uint32_t closed)
{
    if (rt->gates.mode == DS_GATES_HOST)
        __atomic_store_n(&rt->gates.host[slot], closed, __ATOMIC_SEQ_CST);
    else if (rt->gates.mode == DS_GATES_RCK)
        rt->gates.writer.set(rt->gates.writer.self, slot, (int)closed);
}

/* Brings v's word in line with its gate state. Lock-free: whoever changes
 * the state writes the word after, and writes again if the state moved
 * meanwhile, so the last writer always writes the last state. */
static void sync_word(struct ds_vctx *v)
{
    int s = atomic_load_explicit(&v->gate.closed, memory_order_acquire), now;
    for (;;) {
        write_word(v->rt, v->slot, (uint32_t)s);
        now = atomic_load_explicit(&v->gate.closed, memory_order_acquire);
        if (now == s)
            return;
        s = now;
    }
}

/* Open -> closed, within the hardware-queue budget: a compare-and-swap on the
 * runtime's closed count reserves a queue, one on the vCtx's state claims the
 * transition. */
static ds_status close_gate(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    if (atomic_load_explicit(&v->gate.closed, memory_order_relaxed))
        return DS_SUCCESS;
    uint32_t c = atomic_load_explicit(&rt->gates.closed, memory_order_relaxed);
    do {
        uint32_t copies = atomic_load_explicit(&rt->gates.copy_waits, memory_order_relaxed);
        if (c + copies >= rt->gates.max_closed) { /* see ds__gates_init */
            uint64_t n = atomic_fetch_add_explicit(&rt->gates.refusals, 1, memory_order_relaxed);
            return ds__fail_at(n ? DS_LOG_DEBUG : DS_LOG_WARN, DS_ERR_LIMIT,
                               "ds_vctx_gate_close('%s'): %u gates closed and %u copies waiting already block "
                               "hardware queues; one more would leave fewer than two of "
                               "CUDA_DEVICE_MAX_CONNECTIONS=%u free (once none is, every stream stalls). The gate "
                               "stays open; set CUDA_DEVICE_MAX_CONNECTIONS higher before the process's first CUDA "
                               "call",
                               v->name, c, copies, rt->info.max_connections);
        }
    } while (!atomic_compare_exchange_weak_explicit(&rt->gates.closed, &c, c + 1, memory_order_relaxed,
                                                    memory_order_relaxed));
    /* written before the claim: a concurrent close writes about the same time */
    atomic_store_explicit(&v->gate.closed_at_us, ds__now_us(rt), memory_order_relaxed);
    atomic_store_explicit(&v->gate.closed_wall_ms, ds__wall_ms(), memory_order_relaxed);
    int open = 0;
    if (!atomic_compare_exchange_strong_explicit(&v->gate.closed, &open, 1, memory_order_acq_rel,
                                                 memory_order_relaxed)) {
        atomic_fetch_sub_explicit(&rt->gates.closed, 1, memory_order_relaxed); /* closed meanwhile */
        return DS_SUCCESS;
    }
    atomic_fetch_add_explicit(&v->gate.closes, 1, memory_order_relaxed);
    sync_word(v);
    return DS_SUCCESS;
}

/* Closed -> open; returns 1 if this call opened it. */
static int open_gate(struct ds_vctx *v)
{
    struct ds_runtime *rt = v->rt;
    int closed = 1;
    if (!atomic_compare_exchange_strong_explicit(&v->gate.closed, &closed, 0, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return 0;
    atomic_fetch_sub_explicit(&rt->gates.closed, 1, memory_order_relaxed);
    double now = ds__now_us(rt);
    double held = now - atomic_load_explicit(&v->gate.closed_at_us, memory_order_relaxed);
    atomic_fetch_add_explicit(&v->gate.closed_us, held > 0 ? (uint64_t)held : 0, memory_order_relaxed);
    atomic_store_explicit(&v->gate.opened_at_us, now, memory_order_relaxed);
    sync_word(v);
    return 1;
}

ds_status ds_vctx_gate_close(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_gate_close"));
    struct ds_runtime *rt = v->rt;
    if (DS__UNLIKELY(ds__faulted(rt)))
        return ds__fault_status(rt, "ds_vctx_gate_close");
    if (rt->gates.mode == DS_GATES_OFF)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "ds_vctx_gate_close('%s'): gates are off (ds_runtime_config.gates)",
                        v->name);
    return close_gate(v);
}

ds_status ds_vctx_gate_open(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_gate_open"));
    open_gate(v);
    return DS_SUCCESS;
}

void ds__gate_force_open(struct ds_vctx *v, const char *why)
{
    if (open_gate(v) && why)
        ds__log(DS_LOG_WARN, "vCtx '%s': gate reopened by the runtime: %s", v->name, why);
}

/* Reopens v's gate on the runtime's behalf, counted as an expiry. */
static void expire(struct ds_vctx *v, const char *why)
{
    atomic_fetch_add_explicit(&v->rt->gates.expiries, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&v->gate.expiries, 1, memory_order_release);
    ds__gate_force_open(v, why);
}

void ds__gates_expire(struct ds_runtime *rt, struct ds_vctx *v)
{
    if (!atomic_load_explicit(&v->gate.closed, memory_order_relaxed))
        return;
    double closed_ms = ds__wall_ms() - atomic_load_explicit(&v->gate.closed_wall_ms, memory_order_relaxed);
    if (closed_ms <= rt->teardown_timeout_ms)
        return;
    char why[96];
    snprintf(why, sizeof why, "closed for %.0f ms, longer than the teardown timeout (%u ms)", closed_ms,
             rt->teardown_timeout_ms);
    expire(v, why);
}

ds_status ds_vctx_set_gate_interval(ds_vctx_t v, uint32_t interval_us)
{
    DS__TRY(ds__vctx_check_born(v, "ds_vctx_set_gate_interval"));
    if (interval_us != DS_GATES_NONE && v->rt->gates.mode == DS_GATES_OFF)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "ds_vctx_set_gate_interval('%s'): gates are off", v->name);
    if (ds__vgroup_follower(v)) /* its group's rank 0 sets it, unit by unit */
        return DS_SUCCESS;
    ds__gate_interval_set(&v->gate, interval_us);
    return DS_SUCCESS;
}

/* Owner thread, at its first gate: the gate-reached events (reach_ready 1;
 * -1 when they could not be made: yields are then timed without them). */
static void gate_reach_init(struct ds_vctx *v)
{
    const ds__driver *cu = v->cu;
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < DS__GATE_REACH && r == CUDA_SUCCESS; i++)
        r = cu->cuEventCreate(&v->gate.reach[i], CU_EVENT_DISABLE_TIMING);
    atomic_store_explicit(&v->gate.reach_ready, r == CUDA_SUCCESS ? 1 : -1, memory_order_release);
}

void ds__gate_reach_fini(struct ds_vctx *v)
{
    for (int i = 0; i < DS__GATE_REACH; i++)
        if (v->gate.reach[i]) {
            v->cu->cuEventDestroy(v->gate.reach[i]);
            v->gate.reach[i] = NULL;
        }
}

void ds__gate_place(struct ds_vctx *v, CUfunction f, ds_dim3 grid, ds_dim3 block)
{
    struct ds_runtime *rt = v->rt;
    const ds__driver *cu = v->cu;
    if (DS__UNLIKELY(!atomic_load_explicit(&v->gate.reach_ready, memory_order_relaxed)))
        gate_reach_init(v);
    if (atomic_load_explicit(&v->gate.reach_ready, memory_order_relaxed) > 0) {
        /* gate number placed + 1 is reached when this event completes */
        uint64_t n = atomic_load_explicit(&v->gate.placed, memory_order_relaxed) + 1;
        cu->cuEventRecord(v->gate.reach[n % DS__GATE_REACH], v->stream);
    }
    CUresult r = cu->cuStreamWaitValue32(v->stream, rt->gates.words + 4ull * v->slot, 0, CU_STREAM_WAIT_VALUE_EQ);
    if (r == CUDA_SUCCESS && rt->gates.mode == DS_GATES_RCK) {
        /* the boundary the RCK timestamps: the stream passed gate `seq` */
        uint32_t seq = v->gate.seq + 1;
        ds__gate_entry *e = &v->gate.log[seq % DS__GATE_LOG];
        atomic_store_explicit(&e->units, 0, memory_order_relaxed);
        e->closes = atomic_load_explicit(&v->gate.closes, memory_order_relaxed);
        e->f = f;
        e->grid = grid;
        e->block = block;
        e->pctx = DS__BIND_PCTX(DS__LD(v->bound));
        atomic_store_explicit(&e->seq, seq, memory_order_release);
        v->gate.seq = seq;
        r = cu->cuStreamWriteValue32(v->stream, rt->gates.writer.bounds(rt->gates.writer.self) + 4ull * v->slot, seq, 0);
    }
    if (DS__UNLIKELY(r != CUDA_SUCCESS)) {
        /* the work goes on ungated; a sticky error is the fault path's */
        if (!ds__fault_note(rt, r, v, "cuStreamWaitValue32 (gate)"))
            ds__log(DS_LOG_WARN, "vCtx '%s': gate not placed: %s", v->name, ds__cu_error_name(cu, r));
        return;
    }
    v->gate.since_us = 0;
    atomic_store_explicit(&v->gate.placed, atomic_load_explicit(&v->gate.placed, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

ds_status ds__gate_hold(struct ds_vctx *v, const char *fn, ds_status (*poll)(ds_runtime_t rt))
{
    struct ds_runtime *rt = v->rt;
    const double deadline_ms = ds__wall_ms() + rt->teardown_timeout_ms;
    const uint32_t expiries = atomic_load_explicit(&v->gate.expiries, memory_order_acquire);
    atomic_fetch_add_explicit(&v->gate.holds, 1, memory_order_relaxed);
    while (atomic_load_explicit(&v->gate.closed, memory_order_acquire)) {
        if (DS__UNLIKELY(ds__faulted(rt)))
            return ds__fault_status(rt, fn);
        ds__gates_expire(rt, v);
        /* Without a scheduler thread the application's ds_runtime_poll is
         * what reopens gates, and this thread cannot return to call it. */
        if (!rt->sched.started)
            poll(rt);
        /* Wall time, whatever the device clock does: a simulated clock may
         * run slower or faster than the wall. */
        double wall = ds__wall_ms();
        if (wall > deadline_ms) {
            expire(v, "a launch waited at it for longer than the teardown timeout");
            break;
        }
        /* At least 20 us of wall time per turn, so that a fast simulated
         * clock does not spin on the device's lock. */
        ds__sleep_us(rt, 20);
        double left_us = 20 - (ds__wall_ms() - wall) * 1e3;
        if (left_us > 0) {
            struct timespec ts = {0, (long)(left_us * 1e3)};
            nanosleep(&ts, NULL);
        }
    }
    if (atomic_load_explicit(&v->gate.expiries, memory_order_acquire) != expiries)
        return ds__fail(DS_ERR_TIMEOUT,
                        "%s('%s'): its gate stayed closed longer than the teardown timeout (%u ms) and "
                        "was reopened; this unit was not submitted, submit it again",
                        fn, v->name, rt->teardown_timeout_ms);
    return DS_SUCCESS;
}

ds_status ds_runtime_get_stats(ds_runtime_t rt, ds_runtime_stats *stats)
{
    DS__TRY(ds__rt_check(rt, "ds_runtime_get_stats"));
    DS__TRY(ds__check_abi(stats, sizeof *stats, "ds_runtime_stats"));
    size_t size = stats->size;
    *stats = (ds_runtime_stats)DS_RUNTIME_STATS_INIT;
    stats->size = size;
    stats->gates = rt->gates.mode;
    stats->heartbeat_age_us = -1;
    stats->heartbeat_misses = atomic_load_explicit(&rt->sched.heartbeat_misses, memory_order_relaxed);
    stats->overruns = atomic_load_explicit(&rt->sched.overruns, memory_order_relaxed);
    stats->gates_closed = atomic_load_explicit(&rt->gates.closed, memory_order_relaxed);
    uint32_t copies = atomic_load_explicit(&rt->gates.copy_waits, memory_order_relaxed);
    stats->max_closed_gates = rt->gates.max_closed > copies ? rt->gates.max_closed - copies : 0;
    stats->gate_refusals = atomic_load_explicit(&rt->gates.refusals, memory_order_relaxed);
    stats->gate_expiries = atomic_load_explicit(&rt->gates.expiries, memory_order_relaxed);
    if (rt->sched.hook.stats)
        rt->sched.hook.stats(rt->sched.hook.self, stats, ds__now_us(rt));
    return DS_SUCCESS;
}
