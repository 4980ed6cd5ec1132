/*
 * Internal state of a runtime, its pCtx pool and its vCtxs.
 *
 * Ownership: the runtime owns the pool (built once in pool.c) and the vCtx
 * table (vctx.c). A vCtx's hot fields are written only by its owner thread;
 * `pending` (the remap request) is the one field other threads write.
 */
#ifndef DS_CORE_RUNTIME_H
#define DS_CORE_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/driver.h"
#include "core/log.h"
#include "detshare/policy.h"
#include "migrate/memory.h"

#define DS__RT_MAGIC 0x54524453u   /* "SDRT" */
#define DS__VCTX_MAGIC 0x58434453u /* "SDCX" */
#define DS__DEAD_MAGIC 0xDEADD5D5u

/* Marks: events recorded after some launches so that completion (and, for
 * timed marks, duration) is known without an event per kernel. */
#define DS__MARKS 16

struct ds__profiles;

/* A registered policy (ops copied, state from ops.init). */
typedef struct ds__policy {
    ds_policy_ops ops;
    char name[32];
    void *state;
} ds__policy;

typedef struct ds__pctx {
    uint32_t sm_count;
    ds_tier_anchor anchor;
    uint64_t group_mask;
    int32_t complement;
    CUgreenCtx green;
    CUcontext ctx; /* cuCtxFromGreenCtx(green) */
} ds__pctx;

struct ds_runtime {
    uint32_t magic;
    const ds__driver *cu;
    ds_device_kind kind;
    CUdevice dev;
    CUcontext primary;
    /* device limits, for validating launches without a driver round trip */
    uint32_t max_grid[3];
    uint32_t max_block[3];
    uint32_t max_threads_per_block;
    uint32_t max_smem_optin;
    int prio_least, prio_greatest;
    uint32_t teardown_timeout_ms;
    uint32_t sample_period;

    ds_runtime_info info; /* filled at creation, read-only afterwards */
    int dev_open;         /* simulated device created / CUDA device selected */
    int virtual_time;     /* simulated device in DS_SIM_CLOCK_VIRTUAL: time moves
                             only when the host waits (no wall-clock watchers) */

    CUdevResource groups[DS_MAX_GROUPS];
    uint32_t num_groups;
    ds__pctx pctx[DS_MAX_PCTX];
    uint32_t num_pctx;
    uint32_t full_pctx; /* index of the whole-GPU pCtx */

    pthread_mutex_t lock; /* vCtx table, lazily loaded module */
    _Atomic(struct ds_vctx *) *vctx; /* slots; read lock-free by the scheduler */
    uint32_t max_vctx;
    uint32_t live_vctx;
    uint64_t vctx_serial;

    CUmodule module; /* embedded device code (probe, RCK), loaded on first use */
    CUfunction probe_fn;
    CUdeviceptr probe_buf; /* the probe's SM bitmap, kept until destroy */

    /* policies (registry.c) */
    _Atomic(ds__policy *) active;
    ds__policy policies[DS_MAX_POLICIES];
    /* tunables of the built-in policies (ds_runtime_config) */
    uint32_t ls_sms, idle_us, be_window_us;
    _Atomic uint32_t num_policies;
    pthread_mutex_t policy_lock; /* registration and switching */

    /* scheduler (sched.c) */
    struct ds__profiles *profiles;
    pthread_t sched_thread;
    int sched_started;
    atomic_int sched_stop;
    uint32_t sched_period_us;
    double last_tick_us;
    atomic_flag poll_busy;
    void *topology; /* hwloc_topology_t, kept for pinning the scheduler */
    void *cpuset;   /* hwloc_bitmap_t of CPUs local to the GPU, or NULL */
    double clock0_ms;

    /* Device fault (fault.c). A sticky driver error poisons the whole CUDA
     * context: `faulted` goes 0 -> 1 once, after fault_msg (who faulted,
     * what was seen where) is written by the one thread that won
     * fault_claim; readers load `faulted` (relaxed on the hot path, acquire
     * before reading fault_msg). Never cleared: a faulted context stays
     * faulted for the process. */
    _Atomic int faulted;
    atomic_flag fault_claim;
    CUresult fault_code;
    char fault_msg[1024];
    CUstream health_stream; /* idle stream the scheduler queries for faults */

    struct ds__copier *copier; /* copy scheduler (copy.c), started on first use */
    double last_health_us;

    /* Gates (src/rck/gate.c): one control word per vCtx slot at gate_words
     * (the device address streams wait on). DS_GATES_HOST: pinned host words
     * (gate_host), written by whoever opens or closes; DS_GATES_RCK: device
     * words the RCK mirrors from its control block. */
    ds_gate_mode gate_mode; /* resolved: HOST, RCK or OFF */
    pthread_mutex_t gate_lock; /* close/open transitions (never on the launch path) */
    uint32_t gate_interval_us;
    uint32_t *gate_host;
    CUdeviceptr gate_words;
    uint32_t max_closed_gates;     /* connections - 1 - (RCK's queue) */
    _Atomic uint32_t gates_closed; /* closed now */
    _Atomic uint32_t copy_waits;   /* vCtx streams waiting on a copy gate now */
    _Atomic uint64_t gate_refusals, gate_expiries;
    struct ds__rck *rck; /* src/rck/rck.c; NULL unless DS_RCK_ON */
    uint32_t heartbeat_timeout_ms, fault_presume_ms;
    /* watchdog (sched.c): events of every vCtx, destroyed ones included */
    _Atomic uint64_t overruns, heartbeat_misses;
};

/* One mark: an event after a launch, with the vCtx's cumulative predicted
 * work at that point. Owner fills a FREE slot and publishes it PENDING;
 * whoever harvests (scheduler or owner, under harvest_busy) frees it. */
typedef struct ds__mark {
    _Atomic int state; /* 0 FREE, 1 PENDING */
    CUevent start;     /* recorded before the kernel when timed */
    CUevent end;
    int timed;
    double cum_pred_us;
    double pred_us;
    CUfunction f;
    ds_dim3 grid, block;
    uint32_t pctx;
} ds__mark;

/* One gate of a vCtx as its owner placed it, for turning the RCK's boundary
 * timestamps into profile samples: `seq` is written last (release), after
 * the gate's first unit is known; `units` grows until the next gate. */
#define DS__GATE_LOG 64
typedef struct ds__gate_entry {
    _Atomic uint32_t seq;
    _Atomic uint32_t units; /* kernels and sections after this gate */
    uint64_t closes;        /* the vCtx's gate_closes when placed */
    CUfunction f;           /* first unit; NULL for a section */
    ds_dim3 grid, block;
    uint32_t pctx;
} ds__gate_entry;

/* Relaxed load / store of a field shared between threads. On x86-64 and
 * AArch64 both are plain loads and stores of an aligned word: no lock prefix,
 * no fence, so the hot path pays nothing for them. */
#define DS__LD(field) atomic_load_explicit(&(field), memory_order_relaxed)
#define DS__ST(field, value) atomic_store_explicit(&(field), (value), memory_order_relaxed)

/* binding = pCtx index | urgent << 16 */
#define DS__BIND(pctx, urgent) ((uint32_t)(pctx) | ((uint32_t)((urgent) != 0) << 16))
#define DS__BIND_PCTX(b) ((b) & 0xffffu)
#define DS__BIND_URGENT(b) ((b) >> 16)

struct ds_vctx {
    /* hot: read by every ds_launch */
    _Atomic uint32_t magic;
    _Atomic uint32_t bound; /* binding in use: written by the owner, read by
                               policies, the scheduler and *_get_* (relaxed) */
    CUstream stream;
    const ds__driver *cu;
    struct ds_runtime *rt;
    _Atomic uint32_t pending; /* requested binding (== bound when none) */
    uint32_t sample_countdown;
    _Atomic int section_open;   /* owner writes; scheduler and policies read */
    _Atomic uint32_t window_us; /* 0 = unbounded */
    _Atomic int track_all;      /* mark after every launch (temporal; set by the
                                   policy on any thread, read by the owner) */
    _Atomic int launching;      /* track_all only: inside ds_launch/acquire */
    double since_mark_us;       /* predicted work since the last mark */
    uint32_t unmarked;          /* launches/sections since the last mark */
    uint32_t explore_countdown; /* launches until an unprofiled kernel may be timed */
    _Atomic uint32_t marks_pending;
    _Atomic double submitted_us; /* cumulative predicted work submitted (owner) */
    _Atomic double completed_us; /* ... known finished (harvester) */
    _Atomic double unit_us;      /* longest recent kernel/section, predicted (owner) */
    _Atomic uint64_t launches;
    _Atomic(CUevent) last_mark; /* latest recorded mark event (for holds) */
    /* gates: closed/interval are read by every ds_launch; any thread writes */
    _Atomic int gate_closed;
    _Atomic uint32_t gate_interval_us; /* DS_GATES_NONE: no gates */
    _Atomic int gate_rearm;            /* interval changed: the next unit gets a gate */
    double since_gate_us;              /* owner: predicted work since its last gate */
    uint32_t gate_seq;                 /* owner: boundary sequence (RCK) */

    /* counters (single writer: the owner thread; relaxed stores) */
    _Atomic uint64_t sections;
    _Atomic uint64_t remaps;
    _Atomic uint64_t sampled_kernels;
    _Atomic uint64_t kernel_time_ns;
    _Atomic uint32_t streams_created;
    _Atomic uint64_t holds;
    _Atomic uint64_t gates, gate_closes, gate_holds, gate_closed_us;
    _Atomic uint32_t gate_expiries; /* times the runtime reopened its gate (expiry, hold timeout) */
    _Atomic uint64_t overruns;
    _Atomic double gate_closed_at_us;   /* runtime clock of the last close */
    _Atomic double gate_closed_wall_ms; /* wall clock (ds__wall_ms) of the last close: expiry */
    _Atomic double gate_opened_at_us; /* ... of the last open (watchdog) */

    /* marks ring */
    ds__mark marks[DS__MARKS];
    uint32_t mark_head;         /* owner */
    uint32_t mark_tail;         /* harvester */
    atomic_flag harvest_busy;
    ds__mark *section_slot;     /* open section's timed mark */
    double section_pred_us;

    /* scheduler-side activity tracking: written by the pass in progress
     * (ds_runtime_poll, one at a time), read by policies on any thread */
    _Atomic uint64_t seen_launches;
    _Atomic double last_active_us; /* runtime clock when work was last seen in flight */
    double last_congestion_us;     /* last on_congestion raised (the pass only) */
    double watch_cum_us;           /* watchdog (the pass only): the oldest pending mark, */
    double watch_since_us;         /* ... when the pass first saw it, */
    double overrun_cum_us;         /* ... and the mark last reported overrunning */
    /* RCK boundary records (the pass only) */
    uint32_t rck_base;             /* gate_seq at creation: older records are not its */
    uint32_t rck_last_seq;
    uint64_t rck_last_ns;
    uint64_t rck_last_closes;
    ds__gate_entry glog[DS__GATE_LOG]; /* owner writes, the pass reads */

    /* cold */
    uint32_t slot;
    ds_vctx_class cls;
    ds_phase phase;
    int stream_priority;
    uint32_t slo_us;
    uint32_t weight;
    CUevent handoff;
    /* created lazily by the owner; read by fault attribution (relaxed) */
    _Atomic(CUstream) streams[DS_MAX_PCTX][2];
    char name[64];
    /* ds_mem_alloc allocations, quota, working set (mem.c, migrate/memory.c) */
    ds__memreg mem;
    /* ds_memcpy_async (copy.c): gate word, arbiter tenant, last sequence
     * (owner thread); stats written by the copy thread */
    CUdeviceptr copy_word;
    int copy_tenant;
    uint32_t copy_seq;
    _Atomic uint64_t copies, copy_bytes, copy_wait_ns;
    _Atomic uint32_t copies_pending; /* queued, gate not yet opened */
};

/* mem.c: scans a sampled launch's parameters for the vCtx's allocations
 * (owner thread, only when v->mem.count != 0); frees every allocation left
 * at teardown, logging what it freed. */
void ds__mem_sample(struct ds_vctx *v, CUfunction f, void **params);
void ds__mem_release_all(struct ds_vctx *v);

/* copy.c: at vCtx teardown (after its stream drained), cancels its copies
 * not done and frees its gate word; at runtime destroy (after every vCtx),
 * stops the copy thread. ds__copy_history: tenant ids of the chunks put on
 * the link so far, in order (tests). */
void ds__copy_vctx_teardown(struct ds_vctx *v);
void ds__copy_stop(struct ds_runtime *rt);
size_t ds__copy_history(struct ds_runtime *rt, int *tenants, size_t cap);

/* pool.c */
ds_status ds__pool_build(struct ds_runtime *rt, const ds_tier_spec *tiers, uint32_t num_tiers);
void ds__pool_destroy(struct ds_runtime *rt);

/* A green context over the split groups in `mask` (outside the pool), and
 * the SMs those groups hold. */
ds_status ds__pool_green(struct ds_runtime *rt, uint64_t mask, CUgreenCtx *out);
uint32_t ds__pool_mask_sms(const struct ds_runtime *rt, uint64_t mask);

/* probe.c: loads the embedded device code into the primary context once
 * (caller holds rt->lock or is the only thread) and returns a function of it.
 * ds__probe_prepare: the probe kernel and its buffer, once (the RCK start
 * calls it first: a module load or an allocation may wait for every running
 * kernel, and the RCK never finishes). */
ds_status ds__module_function(struct ds_runtime *rt, const char *name, CUfunction *out);
ds_status ds__probe_prepare(struct ds_runtime *rt);

/* Creates a stream of pCtx `index` (non-blocking, given priority). */
ds_status ds__pool_stream_create(struct ds_runtime *rt, uint32_t index, int priority, CUstream *out);

/* vctx.c: destroys a vCtx whose handle was validated; caller holds no lock. */
ds_status ds__vctx_teardown(struct ds_vctx *v);

/* sched.c: init (profiles, clock) before the policies, start (the thread)
 * after; stop joins the thread (idempotent); fini also frees the profiles. */
ds_status ds__sched_init(struct ds_runtime *rt);
ds_status ds__sched_start(struct ds_runtime *rt);
void ds__sched_stop(struct ds_runtime *rt);
void ds__sched_fini(struct ds_runtime *rt);
/* Processes finished marks of v (profiles, windows, on_completion). Returns
 * without doing anything if another thread is harvesting v. */
void ds__harvest(struct ds_vctx *v);
/* Runtime clock in us: simulated time on the simulated device. */
double ds__now_us(struct ds_runtime *rt);
/* Lets time pass (simulated time advances on the simulated device). */
void ds__sleep_us(struct ds_runtime *rt, double us);
/* Host wall clock (CLOCK_MONOTONIC) in ms, whatever the device: for time
 * limits the caller waits out (hold and gate timeouts). */
double ds__wall_ms(void);

/* fault.c: sticky driver errors (CUDA_ERROR_ILLEGAL_ADDRESS, _LAUNCH_FAILED,
 * ...) poison the context. */
int ds__cu_is_sticky(CUresult r);
/* If r is sticky, records the runtime's fault (first caller wins; `seen_by`
 * is the vCtx whose call saw it, NULL for the scheduler; `where` names the
 * call) and returns 1; returns 0 otherwise. */
int ds__fault_note(struct ds_runtime *rt, CUresult r, struct ds_vctx *seen_by, const char *where);
/* DS_ERR_DEVICE_FAULT with the runtime's fault message, raised by `fn`. */
ds_status ds__fault_status(struct ds_runtime *rt, const char *fn);
/* The runtime has faulted (one relaxed load: cheap on the hot path). */
static inline int ds__faulted(const struct ds_runtime *rt)
{
    return atomic_load_explicit(&((struct ds_runtime *)rt)->faulted, memory_order_relaxed);
}

/* src/rck/gate.c. init: resolves the gate mode and allocates the words
 * (after the pool, before the RCK: nothing is allocated once it is resident);
 * fini frees them (after the RCK stopped). */
ds_status ds__gates_init(struct ds_runtime *rt, ds_gate_mode mode, int rck_on);
void ds__gates_fini(struct ds_runtime *rt);
/* Owner thread, before a launch or section: a gate if one is due. */
void ds__gate_place(struct ds_vctx *v, CUfunction f, ds_dim3 grid, ds_dim3 block);
/* Owner thread, for a vCtx whose interval gi is not DS_GATES_NONE: is a gate
 * due before the next unit? The first unit after the interval changed always
 * gets one (a policy turning gates back on wants the queue stoppable at once). */
static inline int ds__gate_due(struct ds_vctx *v, uint32_t gi)
{
    if (atomic_load_explicit(&v->gate_rearm, memory_order_relaxed)) {
        atomic_store_explicit(&v->gate_rearm, 0, memory_order_relaxed);
        return 1;
    }
    return v->since_gate_us >= gi;
}
/* Any thread: sets the interval; a change re-arms the first gate. */
static inline void ds__gate_interval_set(struct ds_vctx *v, uint32_t interval_us)
{
    if (atomic_exchange_explicit(&v->gate_interval_us, interval_us, memory_order_relaxed) != interval_us)
        atomic_store_explicit(&v->gate_rearm, 1, memory_order_relaxed);
}

/* Owner thread: after a launch or section behind the latest gate. */
static inline void ds__gate_count_unit(struct ds_vctx *v, double pred)
{
    v->since_gate_us += pred;
    ds__gate_entry *e = &v->glog[v->gate_seq % DS__GATE_LOG];
    atomic_store_explicit(&e->units, atomic_load_explicit(&e->units, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
/* Owner thread: waits while the vCtx's gate is closed. DS_ERR_TIMEOUT when the
 * wait lasts longer than the teardown timeout in wall time or the gate was
 * reopened by expiry meanwhile (the gate is then open, the unit not submitted);
 * DS_ERR_DEVICE_FAULT. */
ds_status ds__gate_hold(struct ds_vctx *v, const char *fn);
/* Opens v's gate if closed (teardown, expiry); `why` goes to the log when
 * not NULL. */
void ds__gate_force_open(struct ds_vctx *v, const char *why);
/* Reopens v's gate when it has been closed for longer than the teardown
 * timeout in wall time (like every other wait the timeout bounds). */
void ds__gates_expire(struct ds_runtime *rt, struct ds_vctx *v);

/* src/rck/rck.c (DS_RCK_ON): start after the pool, stop (bounded by the
 * teardown timeout; opens every gate) before anything is freed. The pass
 * drains boundary records into profiles and watches the heartbeat. */
ds_status ds__rck_start(struct ds_runtime *rt);
void ds__rck_stop(struct ds_runtime *rt);
void ds__rck_pass(struct ds_runtime *rt, double now_us);
/* Gate word of slot for DS_GATES_RCK: set or clear its bit, bump gate_gen. */
void ds__rck_gate_set(struct ds_runtime *rt, uint32_t slot, int closed);
/* Highest live slot + 1, for the RCK's scan (vCtx create/destroy). */
void ds__rck_slots(struct ds_runtime *rt, uint32_t nslots);
CUdeviceptr ds__rck_bounds(struct ds_runtime *rt);
void ds__rck_stats(struct ds_runtime *rt, ds_runtime_stats *st, double now_us);

/* registry.c */
ds_status ds__policies_init(struct ds_runtime *rt, const char *name);
void ds__policies_fini(struct ds_runtime *rt);
void ds__policy_vctx_event(struct ds_runtime *rt, struct ds_vctx *v, int created);

/* Validates a runtime handle (NULL, wrong magic, destroyed). */
static inline ds_status ds__rt_check(const struct ds_runtime *rt, const char *fn)
{
    if (DS__UNLIKELY(!rt))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: runtime handle is NULL", fn);
    if (DS__UNLIKELY(rt->magic != DS__RT_MAGIC))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: runtime handle %p is %s", fn, (const void *)rt,
                        rt->magic == DS__DEAD_MAGIC ? "destroyed" : "not a runtime");
    return DS_SUCCESS;
}

static inline ds_status ds__vctx_check(const struct ds_vctx *v, const char *fn)
{
    if (DS__UNLIKELY(!v))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: vCtx handle is NULL", fn);
    if (DS__UNLIKELY(v->magic != DS__VCTX_MAGIC))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: vCtx handle %p is %s", fn, (const void *)v,
                        v->magic == DS__DEAD_MAGIC ? "destroyed (or its runtime was)" : "not a vCtx");
    return DS_SUCCESS;
}

/* A fault the driver has not reported yet (the RCK's heartbeat stopped):
 * recorded like a sticky error, with `why` as the culprit. */
void ds__fault_presume(struct ds_runtime *rt, const char *why);

/* Records a failed driver call: DS_ERR_DRIVER with the call's text. */
#define DS__CU(rt_, call)                                                                          \
    do {                                                                                           \
        CUresult ds__r_ = (rt_)->cu->call;                                                         \
        if (DS__UNLIKELY(ds__r_ != CUDA_SUCCESS))                                                  \
            return ds__fail(DS_ERR_DRIVER, "%s:%d %s -> %s", __FILE__, __LINE__, #call,            \
                            ds__cu_error_name((rt_)->cu, ds__r_));                                 \
    } while (0)

/* handles.c: keeps destroyed handles' memory (magic DS__DEAD_MAGIC) in a
 * bounded FIFO so that a stale handle reads "destroyed" instead of freed
 * memory; the oldest entry is freed when the FIFO is full. */
void ds__quarantine(void *p);

/* The simulated device a runtime runs on (sim.c's public functions use it). */
ds_status ds__runtime_sim_device(ds_runtime_t rt, CUdevice *dev);

/* topology.c: CPUs and NUMA node local to the device, through hwloc; keeps
 * the topology and cpuset for pinning; ds__topology_release frees them. */
void ds__topology_query(struct ds_runtime *rt);
void ds__topology_release(struct ds_runtime *rt);

#endif /* DS_CORE_RUNTIME_H */
