/*
 * libdetshare policy plug-in ABI. The runtime is the mechanism (bindings,
 * windows, event hand-offs); a policy decides (DetShare, section 4.4).
 *
 * A policy is a versioned table of hooks registered per runtime with
 * ds_policy_register and selected by name (ds_runtime_config.policy at
 * creation, ds_runtime_set_policy on a live runtime). Built in: "slo_aware"
 * (the default), "tpot_first", and the baselines "shared", "priority",
 * "static", "temporal", "slo_aware_nogates" (slo_aware bounding BE with
 * windows alone, never gates), "balance" (two throughput tenants on the
 * complementary tiers that measure best, src/policy/balance.c), plus "manual"
 * (the runtime never moves a vCtx).
 *
 * Threads: hooks run on the thread that raised the event and must be cheap
 * and must not block:
 *  - on_launch: the tenant thread, inside ds_launch / ds_vctx_acquire_stream
 *    (the hot path);
 *  - on_completion, on_congestion, on_tick, on_activate: the runtime's
 *    scheduler thread (or the caller of ds_runtime_poll; without a scheduler
 *    thread, also a tenant thread held at its closed gate, which runs the
 *    pass itself since it cannot return to the application);
 *  - on_vctx_create / on_vctx_destroy: the thread creating / destroying.
 * Hooks of one policy may therefore run concurrently; a policy guards its own
 * state (atomics). From any hook a policy may act with ds_vctx_remap,
 * ds_vctx_set_urgent, ds_vctx_set_window and the gate actions (all
 * thread-safe, non-blocking).
 * Reading the state goes through the ds_view_* accessors (lock-free snapshots).
 */
#ifndef DETSHARE_POLICY_H
#define DETSHARE_POLICY_H

#include <detshare/detshare.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Read-only view of a runtime's state handed to hooks. */
typedef struct ds_policy_view ds_policy_view;

/** What a kernel or section about to be dispatched is. */
typedef struct ds_launch_event {
    ds_vctx_t vctx;
    CUfunction function;     /**< NULL for a section */
    ds_dim3 grid, block;
    uint32_t shared_mem_bytes;
    ds_phase phase;          /**< from the hints, else the vCtx's attribute */
    double predicted_us;     /**< profile mean on the current pCtx, else the
                                  hint's expected_us, else 0 (unknown) */
    int is_section;
} ds_launch_event;

typedef enum ds_decision_kind {
    DS_DISPATCH_HERE = 0,  /**< launch on the current binding */
    DS_DISPATCH_REMAP = 1, /**< move to `pctx` first (event hand-off), then launch */
    DS_DISPATCH_HOLD = 2,  /**< do not launch yet: the tenant thread waits (for
                                `wait_for`'s submitted work, or hold_us) and asks again */
} ds_decision_kind;

typedef struct ds_decision {
    ds_decision_kind kind;
    uint32_t pctx;        /**< DS_DISPATCH_REMAP: target pool index */
    int urgent;           /**< DS_DISPATCH_REMAP: use the vCtx's highest-priority stream */
    ds_vctx_t wait_for;   /**< DS_DISPATCH_HOLD: wait until this vCtx's work
                               submitted so far has finished (NULL: hold_us) */
    uint32_t hold_us;     /**< DS_DISPATCH_HOLD without wait_for: sleep this long */
} ds_decision;

/** A tracked point of a vCtx's work finished (scheduler thread). */
typedef struct ds_completion {
    ds_vctx_t vctx;
    CUfunction function;  /**< the timed kernel, or NULL for an untimed mark */
    ds_dim3 grid, block;
    uint32_t pctx;        /**< where it ran */
    double duration_us;   /**< measured with events, or -1 if not timed */
    double predicted_us;  /**< what the profile said at launch, 0 if unknown */
} ds_completion;

typedef struct ds_policy_ops {
    size_t size; uint32_t magic; uint32_t version; /**< DS_POLICY_OPS_INIT */
    const char *name;      /**< unique per runtime, copied (<= 31 bytes kept) */
    /** Optional: called once at registration; *state is passed to every hook. */
    ds_status (*init)(void *user_data, ds_runtime_t rt, void **state);
    /** Optional: called at runtime destroy. */
    void (*fini)(void *state);
    /** Optional: this policy became the active one (creation or switch): place
     *  every live vCtx as the policy wants. */
    void (*on_activate)(void *state, const ds_policy_view *view);
    void (*on_vctx_create)(void *state, const ds_policy_view *view, ds_vctx_t vctx);
    void (*on_vctx_destroy)(void *state, const ds_policy_view *view, ds_vctx_t vctx);
    /** REQUIRED: a kernel or section is about to be dispatched. */
    ds_decision (*on_launch)(void *state, const ds_policy_view *view, const ds_launch_event *ev);
    void (*on_completion)(void *state, const ds_policy_view *view, const ds_completion *c);
    /** A measurement or prediction says vctx's SLO is at risk by late_us, or
     *  the watchdog saw vctx's tracked work run late_us past its profile,
     *  beyond 4x it plus 10 ms (a kernel far past its profile), or (with the
     *  RCK) the RCK's
     *  heartbeat has been missing for late_us (raised for every vCtx with work
     *  in flight). */
    void (*on_congestion)(void *state, const ds_policy_view *view, ds_vctx_t vctx, double late_us);
    void (*on_tick)(void *state, const ds_policy_view *view, double now_us);
    uint32_t tick_us;      /**< period of on_tick; 0 = 1000 */
} ds_policy_ops;

#define DS_POLICY_OPS_INIT { .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/** Most policies a runtime holds (built-ins included). */
#define DS_MAX_POLICIES 16

/**
 * Registers a policy with a runtime. The ops table is copied.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_ABI_MISMATCH (ops header);
 *         DS_ERR_INVALID_ARGUMENT (ops NULL, name NULL or empty, on_launch NULL);
 *         DS_ERR_ALREADY_EXISTS (name taken); DS_ERR_LIMIT (DS_MAX_POLICIES);
 *         whatever ops->init returned.
 * \note Thread-safe with respect to other registrations and switches.
 */
DS_API ds_status ds_policy_register(ds_runtime_t rt, const ds_policy_ops *ops, void *user_data);

/**
 * Makes the named policy the active one. Takes effect for launches that start
 * after it returns; the new policy's on_activate places the live vCtxs. Remaps
 * keep program order, so no work is lost or reordered by a switch.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT (name NULL);
 *         DS_ERR_NOT_FOUND.
 */
DS_API ds_status ds_runtime_set_policy(ds_runtime_t rt, const char *name);

/** Name of the active policy (static storage of the runtime). */
DS_API ds_status ds_runtime_get_policy(ds_runtime_t rt, const char **name);

/**
 * One pass of the scheduler on the calling thread: harvests completions
 * (profiles, windows, on_completion), runs congestion checks and on_tick when
 * due. The scheduler thread calls it in a loop; with
 * ds_runtime_config.scheduler_thread = 0 the application calls it instead.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE.
 */
DS_API ds_status ds_runtime_poll(ds_runtime_t rt);

/* --- actions (thread-safe, non-blocking; applied at the vCtx's next kernel
 *     boundary on its own thread) -------------------------------------- */

/** Runs the vCtx's next work on its highest-priority stream (urgent != 0) or
 *  its normal one. \return DS_SUCCESS; DS_ERR_INVALID_HANDLE. */
DS_API ds_status ds_vctx_set_urgent(ds_vctx_t vctx, int urgent);

/** Bounds the vCtx's work in flight to window_us predicted microseconds
 *  (0 = unbounded): ds_launch waits while more is in flight, so that a remap
 *  or confinement takes effect within one window. \return DS_SUCCESS;
 *  DS_ERR_INVALID_HANDLE. */
DS_API ds_status ds_vctx_set_window(ds_vctx_t vctx, uint32_t window_us);

/* --- gates: preemption at kernel boundaries (DetShare section 4.2) --------
 * A gate is a stream wait (cuStreamWaitValue32 on the vCtx's control word)
 * placed before a kernel or section of a vCtx that has a gate interval.
 * Closing the gate stops the vCtx's already-queued work at its next gate,
 * device-side; its thread then waits in its next ds_launch or
 * ds_vctx_acquire_stream until the gate opens, so a gated vCtx holds at most
 * one stream (one hardware queue) blocked. Opening resumes the queued work in
 * program order; nothing is dropped or run twice. A gate closed for longer
 * than the runtime's teardown timeout is reopened by the runtime (logged,
 * ds_runtime_stats.gate_expiries), and destroying the vCtx or the runtime
 * opens it first: nothing waits forever. A kernel already running is never
 * interrupted. Yield = close the gate and ds_vctx_remap the vCtx: the queued
 * work finishes where it was queued once the gate reopens, later work runs on
 * the new pCtx. */

/**
 * Places gates in the vCtx's stream: before a kernel or section once at least
 * interval_us of predicted work was submitted since its last gate (0: before
 * every kernel and section; DS_GATES_NONE, the default: no gates). Takes effect
 * at its next launch. Each gate costs one stream operation (about a
 * microsecond of host time; two with DS_GATES_RCK).
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_NOT_SUPPORTED (the
 *         runtime's gates are off) for any interval but DS_GATES_NONE.
 */
DS_API ds_status ds_vctx_set_gate_interval(ds_vctx_t vctx, uint32_t interval_us);

/**
 * Closes the vCtx's gate: its queued work stops entering the GPU at its next
 * gate (DS_GATES_HOST: the device sees the write in a few microseconds;
 * DS_GATES_RCK: once the RCK mirrored it) and its thread waits at its next
 * launch. Closing a closed gate does nothing.
 * A vCtx without gates (interval DS_GATES_NONE) has nothing queued to stop on
 * the device: closing its gate still holds its thread at its next launch and
 * counts toward the hardware-queue budget. Under slo_aware the policy owns BE
 * vCtxs' gates (it reopens them once LS is idle); drive gates yourself under
 * "manual" or a policy of your own.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_NOT_SUPPORTED (gates
 *         off); DS_ERR_LIMIT (closing it would leave fewer than two of the
 *         CUDA_DEVICE_MAX_CONNECTIONS hardware queues unblocked, and once none
 *         is, every stream of the process stalls: the gate stays open; set
 *         CUDA_DEVICE_MAX_CONNECTIONS higher before the process's first CUDA
 *         call, see README); DS_ERR_DEVICE_FAULT.
 */
DS_API ds_status ds_vctx_gate_close(ds_vctx_t vctx);

/** Opens the vCtx's gate (nothing if open): its queued work resumes in program
 *  order. \return DS_SUCCESS; DS_ERR_INVALID_HANDLE. */
DS_API ds_status ds_vctx_gate_open(ds_vctx_t vctx);

/* --- the view ------------------------------------------------------------ */

/** A vCtx as policies see it. */
typedef struct ds_vctx_view {
    ds_vctx_t vctx;
    ds_vctx_class cls;
    ds_phase phase;           /**< attribute (launch hints may differ) */
    uint32_t slo_us, weight;
    uint32_t pctx;            /**< bound pCtx */
    uint32_t pending_pctx;    /**< requested (== pctx when none) */
    int urgent;
    uint32_t window_us;       /**< bound on work in flight, 0 = none */
    double inflight_us;       /**< predicted us submitted and not known finished */
    double queue_delay_us;    /**< predicted wait of work submitted now behind the
                                   vCtx's own queue (= inflight_us) */
    double last_launch_us;    /**< runtime clock of the last launch/section, -1 never */
    double idle_us;           /**< since the vCtx last had work in flight */
    uint64_t launches;
} ds_vctx_view;

/** Runtime clock in microseconds (simulated time on the simulated device). */
DS_API double ds_view_now_us(const ds_policy_view *view);
DS_API ds_runtime_t ds_view_runtime(const ds_policy_view *view);
/** Pool (same as ds_runtime_info's pctx entries). */
DS_API uint32_t ds_view_num_pctx(const ds_policy_view *view);
DS_API const ds_pctx_info *ds_view_pctx(const ds_policy_view *view, uint32_t index);
/** Index of the LOW pCtx whose SM count is nearest sm_count (-1 if none). */
DS_API int32_t ds_view_low_tier(const ds_policy_view *view, uint32_t sm_count);
/** Index of the whole-GPU pCtx. */
DS_API uint32_t ds_view_full_pctx(const ds_policy_view *view);
/** Live vCtxs: fills up to cap handles, returns how many are live. */
DS_API uint32_t ds_view_vctxs(const ds_policy_view *view, ds_vctx_t *out, uint32_t cap);
/** Snapshot of one vCtx. \return DS_SUCCESS; DS_ERR_INVALID_HANDLE. */
DS_API ds_status ds_view_vctx(const ds_policy_view *view, ds_vctx_t vctx, ds_vctx_view *out);
/** Profile of (function, grid, block) on pCtx pctx's tier: mean and tail (about
 *  p99) duration in us. \return 1 if known, 0 if never measured there. */
DS_API int ds_view_predict(const ds_policy_view *view, CUfunction f, ds_dim3 grid, ds_dim3 block,
                           uint32_t pctx, double *mean_us, double *tail_us);

#ifdef __cplusplus
}
#endif

#endif /* DETSHARE_POLICY_H */
