/**
 * \file detshare/policy.h
 * \brief libdetshare policy plug-in ABI: hooks, the read-only view, and the
 *        actions a policy takes (remap, urgency, windows, gates).
 *
 * The runtime is the mechanism (bindings, windows, event hand-offs, gates); a
 * policy decides (DetShare, section 4.4). A policy is a versioned table of
 * hooks (::ds_policy_ops) registered per runtime with ds_policy_register() and
 * selected by name (ds_runtime_config::policy at creation,
 * ds_runtime_set_policy() on a live runtime). Built in, registered at
 * creation in this order: "slo_aware" (the default; DetShare, sections 4.2
 * and 4.4), "tpot_first", the baselines "shared", "priority", "static",
 * "temporal", "manual" (the runtime never moves a vCtx: bindings change only
 * through ds_vctx_remap()), "slo_aware_nogates" (slo_aware bounding BE with
 * windows alone, never gates) and "balance" (two throughput tenants on the
 * complementary tiers that measure best). Their sources are in src/policy/,
 * written against this header; docs/benchmarks.md compares them.
 *
 * <b>Threads.</b> Hooks run on the thread that raised the event, must be cheap
 * and must not block:
 *  - on_launch: the tenant thread, inside ds_launch() / ds_vctx_acquire_stream()
 *    (the hot path), and again after each hold;
 *  - on_completion: the scheduler pass (the runtime's scheduler thread, or
 *    the caller of ds_runtime_poll()), or the caller of ds_vctx_synchronize()
 *    for that vCtx. With a scheduler thread, never inside ds_launch() or
 *    ds_vctx_acquire_stream(): a tenant thread waiting there (window, hold)
 *    only learns that work finished, and the pass reports it. Without one
 *    (ds_runtime_config::scheduler_period_us < 0) a tenant thread that cannot
 *    go on otherwise runs the pass itself: held at its closed gate, or at its
 *    window with every mark finished but not yet reported;
 *  - on_congestion, on_tick: the scheduler pass. Without a scheduler thread
 *    (ds_runtime_config::scheduler_period_us < 0) the pass also runs on a
 *    tenant thread held at its closed gate, since that thread cannot return
 *    to the application;
 *  - on_activate: the thread calling ds_runtime_set_policy() (or
 *    ds_runtime_create() for the first policy), under the runtime's policy
 *    lock; init and on_param likewise inside ds_policy_register() and
 *    ds_policy_param_set(). None of them may call ds_policy_register(),
 *    ds_runtime_set_policy() or ds_policy_param_set() (the lock is not
 *    recursive);
 *  - on_vctx_create / on_vctx_destroy: the thread creating / destroying the
 *    vCtx (ds_vctx_create(), ds_vctx_destroy(), ds_runtime_destroy());
 *  - fini: the thread in ds_runtime_destroy(), after every other hook.
 *
 * Hooks of one policy may therefore run concurrently; a policy guards its own
 * state (atomics). From any hook a policy may act with ds_vctx_place(),
 * ds_vctx_remap(), ds_vctx_set_urgent(), ds_vctx_set_window(),
 * ds_vctx_set_track_all() and the gate actions (all thread-safe, lock-free and
 * non-blocking). Reading the state goes through the ds_view_* accessors
 * (lock-free snapshots). The built-in policies use nothing else: each could
 * be written outside the library from this header alone.
 */
#ifndef DETSHARE_POLICY_H
#define DETSHARE_POLICY_H

#include <detshare/detshare.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * \defgroup ds_policy_group Policies
 * \brief The plug-in ABI: events, decisions, the hook table, registration and
 *        switching.
 * \{
 */

/** Read-only view of a runtime's state handed to hooks. Opaque: read it only
 *  through the ds_view_* functions; valid for the life of the runtime. */
typedef struct ds_policy_view ds_policy_view;

/** What a kernel or section about to be dispatched is (on_launch). */
typedef struct ds_launch_event {
    ds_vctx_t vctx;          /**< the vCtx launching (its owner thread is the caller) */
    CUfunction function;     /**< the kernel; NULL for a section */
    ds_dim3 grid, /**< grid dimensions; {0, 0, 0} for a section */ block; /**< block dimensions;
                                  {0, 0, 0} for a section */
    uint32_t shared_mem_bytes; /**< dynamic shared memory in bytes; 0 for a section */
    ds_phase phase;          /**< ds_launch_hints::phase when hints were given, else
                                  ::DS_PHASE_NONE (the vCtx's attribute is
                                  ds_vctx_view::phase) */
    double predicted_us;     /**< profile mean (us) on the SM count of the vCtx's bound
                                  pCtx, else the hint's expected_us, else 0 (unknown);
                                  for a section, the mean of the vCtx's past sections */
    int is_section;          /**< nonzero for ds_vctx_acquire_stream() */
    ds_vctx_class cls;       /**< the vCtx's class (ds_vctx_attr::cls), so that a
                                  decision by class needs no view call */
    ds_graph_t graph;        /**< the graph for ds_graph_launch() (function NULL,
                                  grid and block {0, 0, 0}, predicted_us from the
                                  graph's own timed launches); NULL otherwise */
} ds_launch_event;

/** What on_launch decides. */
typedef enum ds_decision_kind {
    DS_DISPATCH_HERE = 0,  /**< launch on the current binding (a pending remap is
                                still applied) */
    DS_DISPATCH_REMAP = 1, /**< move to `pctx` first (event hand-off), then launch */
    DS_DISPATCH_HOLD = 2,  /**< do not launch yet: the tenant thread waits (for
                                `wait_for`'s submitted work, or hold_us) and asks again */
} ds_decision_kind;

/** on_launch's answer. */
typedef struct ds_decision {
    ds_decision_kind kind; /**< what to do */
    uint32_t pctx;        /**< ::DS_DISPATCH_REMAP: target pool index; out of range
                               = ignored, the launch goes ahead where it is */
    int urgent;           /**< ::DS_DISPATCH_REMAP: use the vCtx's highest-priority
                               stream (nonzero) or its normal one (0) */
    ds_vctx_t wait_for;   /**< ::DS_DISPATCH_HOLD: wait until this vCtx's work up to
                               its latest mark has finished (the launching vCtx's own
                               work is marked first, so all of it); NULL, a destroyed
                               vCtx, or one with nothing pending: sleep hold_us */
    uint32_t hold_us;     /**< ::DS_DISPATCH_HOLD without wait_for: sleep this long
                               (us; 0 = 20). A launch held longer than the teardown
                               timeout in all fails with ::DS_ERR_TIMEOUT */
} ds_decision;

/** A tracked point of a vCtx's work finished: everything the vCtx submitted up
 *  to that mark has completed (on_completion). Which units are timed is
 *  described at ::ds_vctx_stats. */
typedef struct ds_completion {
    ds_vctx_t vctx;       /**< whose work finished */
    CUfunction function;  /**< the timed kernel; NULL for a section, a graph or an untimed mark */
    ds_dim3 grid, /**< the timed kernel's grid; {0, 0, 0} otherwise */ block; /**< its block;
                                 {0, 0, 0} otherwise */
    uint32_t pctx;        /**< pCtx the vCtx was bound to when the mark was recorded */
    double duration_us;   /**< the timed kernel's or section's duration in us, measured
                               with events; -1 if not timed */
    double predicted_us;  /**< what the profile said at launch (us), 0 if unknown or for
                               an untimed mark */
    ds_graph_t graph;     /**< the timed graph (ds_graph_launch(); function NULL), else
                               NULL; it may have been destroyed since: compare it,
                               do not pass it to ds_graph_* */
} ds_completion;

/**
 * A policy: its name and hooks. Initialise with ::DS_POLICY_OPS_INIT, set the
 * name, on_launch and the hooks wanted, then ds_policy_register(). The table
 * is copied at registration. Every hook but on_launch is optional (NULL).
 * `state` is what init stored, or the registration's user_data without init.
 */
typedef struct ds_policy_ops {
    size_t size; /**< sizeof(ds_policy_ops) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    const char *name;      /**< unique per runtime, 1 to 31 bytes (a longer name is
                                refused with ::DS_ERR_INVALID_ARGUMENT); copied */
    /**
     * \brief Optional: called once, at registration.
     * \param[in]  user_data  ds_policy_register()'s user_data.
     * \param[in]  rt         the runtime registering the policy.
     * \param[out] state      what to pass to every hook.
     * \return ::DS_SUCCESS, or any status: registration then fails with it
     *         and the policy is not registered (fini is not called).
     */
    ds_status (*init)(void *user_data, ds_runtime_t rt, void **state);
    /**
     * \brief Optional: called at ds_runtime_destroy(), after the scheduler
     *        stopped and every vCtx was destroyed, for every registered
     *        policy, active or not.
     * \param[in] state  the policy's state.
     */
    void (*fini)(void *state);
    /**
     * \brief Optional: this policy became the active one (creation or
     *        switch): place every live vCtx as the policy wants.
     * \param[in] state  the policy's state.
     * \param[in] view   the runtime's view.
     */
    void (*on_activate)(void *state, const ds_policy_view *view);
    /**
     * \brief Optional: a vCtx is being created, before its first stream.
     *
     * The vCtx is not complete yet and ds_view_vctxs() does not list it, but
     * the actions (ds_vctx_place(), ds_vctx_remap(), ds_vctx_set_urgent(),
     * ds_vctx_set_window(), ds_vctx_set_track_all(),
     * ds_vctx_set_gate_interval()) and ds_view_vctx() / ds_view_vctx_state()
     * accept its handle during this call: place it here, and its first stream
     * is created where it will run.
     * \param[in] state  the policy's state.
     * \param[in] view   the runtime's view.
     * \param[in] vctx   the new vCtx.
     */
    void (*on_vctx_create)(void *state, const ds_policy_view *view, ds_vctx_t vctx);
    /**
     * \brief Optional: a vCtx is being destroyed (still valid during the call;
     *        its work may still be in flight).
     * \param[in] state  the policy's state.
     * \param[in] view   the runtime's view.
     * \param[in] vctx   the vCtx.
     */
    void (*on_vctx_destroy)(void *state, const ds_policy_view *view, ds_vctx_t vctx);
    /**
     * \brief REQUIRED: a kernel or section is about to be dispatched.
     *
     * Hot path: called on the tenant thread for every ds_launch() and
     * ds_vctx_acquire_stream(), and again after each hold.
     * \param[in] state  the policy's state.
     * \param[in] view   the runtime's view.
     * \param[in] ev     the kernel or section (valid during the call).
     * \return where it goes: here, remapped, or held (::ds_decision).
     */
    ds_decision (*on_launch)(void *state, const ds_policy_view *view, const ds_launch_event *ev);
    /**
     * \brief Optional: a tracked point of a vCtx's work finished.
     * \param[in] state  the policy's state.
     * \param[in] view   the runtime's view.
     * \param[in] c      what finished (valid during the call).
     */
    void (*on_completion)(void *state, const ds_policy_view *view, const ds_completion *c);
    /**
     * \brief Optional: vctx is late, or at risk of being late.
     *
     * Raised by the scheduler pass when:
     *  - a latency-sensitive vCtx with an SLO has more predicted work in
     *    flight than its slo_us (late_us: the excess), at most once per
     *    slo_us;
     *  - the watchdog saw vctx's tracked work run beyond 4 times its
     *    prediction plus 10 ms (late_us: the time past the prediction), once
     *    per mark; work behind a closed gate or a pending copy is not judged;
     *  - (with the RCK) the RCK's heartbeat has been missing for
     *    heartbeat_timeout_ms (late_us: how long), once per silence for every
     *    vCtx with work in flight.
     * \param[in] state    the policy's state.
     * \param[in] view     the runtime's view.
     * \param[in] vctx     the vCtx concerned.
     * \param[in] late_us  how late, in us (> 0).
     */
    void (*on_congestion)(void *state, const ds_policy_view *view, ds_vctx_t vctx, double late_us);
    /**
     * \brief Optional: called by the scheduler pass every tick_us.
     * \param[in] state   the policy's state.
     * \param[in] view    the runtime's view.
     * \param[in] now_us  runtime clock in us (ds_view_now_us()).
     */
    void (*on_tick)(void *state, const ds_policy_view *view, double now_us);
    uint32_t tick_us;      /**< period of on_tick in us; 0 = 1000. Ticks come from the
                                scheduler's passes, so no more often than
                                ds_runtime_config::scheduler_period_us */
    /* --- added in ABI version 1 after the first release: an ops table of
     *     ::DS_POLICY_OPS_SIZE_V1 bytes has no parameters --- */
    const struct ds_policy_param *params; /**< the policy's tunables, num_params
                                entries (copied at registration, names included);
                                NULL = none */
    uint32_t num_params;   /**< entries in params, at most ::DS_MAX_POLICY_PARAMS */
    /**
     * \brief Optional: parameter `index` of params now has `value`.
     *
     * Called at registration (after init) once per parameter with its value
     * (the default, or the ds_runtime_config field of the same name where the
     * runtime has one and it is set), and again on each successful
     * ds_policy_param_set(), on that caller's thread. The value is validated
     * already (range, integer). Keep it in the policy's state (atomics: hooks
     * read it concurrently).
     * \param[in] state  the policy's state.
     * \param[in] view   the runtime's view.
     * \param[in] index  index into params.
     * \param[in] value  the new value.
     */
    void (*on_param)(void *state, const ds_policy_view *view, uint32_t index, double value);
} ds_policy_ops;

/** Size of ::ds_policy_ops before `params`: tables of that size (built against
 *  the first release) are still accepted and have no parameters. */
#define DS_POLICY_OPS_SIZE_V1 offsetof(ds_policy_ops, params)

/** Most parameters one policy declares. */
#define DS_MAX_POLICY_PARAMS 16

/**
 * A numeric tunable of a policy, set by name with ds_policy_param_set()
 * ("slo_aware", "ls_sms", "64"). The runtime validates values against min,
 * max and integer before the policy sees them (on_param).
 */
typedef struct ds_policy_param {
    const char *name; /**< 1 to 31 bytes, unique within the policy; copied */
    const char *help; /**< one line: meaning and unit; may be NULL; not copied
                           (static storage) */
    double def;       /**< value at registration */
    double min;       /**< smallest accepted value */
    double max;       /**< largest accepted value */
    int integer;      /**< nonzero: only whole numbers are accepted */
} ds_policy_param;

/** Initialiser of ::ds_policy_ops (header filled, no name, no hooks). */
#define DS_POLICY_OPS_INIT { .size = sizeof(ds_policy_ops), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/** Most policies a runtime holds, the 9 built-ins included. */
#define DS_MAX_POLICIES 16

/**
 * \brief Registers a policy with a runtime.
 *
 * The ops table is copied (name included); init, if set, runs now on the
 * calling thread. The policy becomes selectable by name
 * (ds_runtime_set_policy()); registering does not activate it.
 * \param[in] rt         the runtime.
 * \param[in] ops        the policy (::DS_POLICY_OPS_INIT-initialised).
 * \param[in] user_data  passed to init, or used as the hooks' state without init.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_ABI_MISMATCH (ops'
 *         header); ::DS_ERR_INVALID_ARGUMENT (ops NULL, name NULL, empty or
 *         longer than 31 bytes, on_launch NULL); ::DS_ERR_ALREADY_EXISTS
 *         (name taken); ::DS_ERR_LIMIT (::DS_MAX_POLICIES registered);
 *         whatever ops->init returned (nothing registered).
 * \note Thread-safe with respect to other registrations and switches (the
 *       runtime's policy lock); a runtime's policies live until it is
 *       destroyed.
 */
DS_API ds_status ds_policy_register(ds_runtime_t rt, const ds_policy_ops *ops, void *user_data);

/**
 * \brief Sets a parameter of a registered policy, by name, from text.
 *
 * The text is parsed as a number (strtod: decimal, hexadecimal, exponent) and
 * must be within the parameter's [min, max] (and whole, for an integer
 * parameter); the policy then gets it through on_param, on this thread.
 * Works whether or not the policy is active; a value set before a policy is
 * activated is what it starts with.
 * \param[in] rt      the runtime.
 * \param[in] policy  a registered policy's name.
 * \param[in] name    one of its parameters' names.
 * \param[in] value   the value as text ("64", "2e3").
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (an argument NULL; value not a number, not whole for an integer
 *         parameter, or outside the range: the message gives the range and
 *         the parameter's help); ::DS_ERR_NOT_FOUND (no such policy, or no such
 *         parameter: the message lists the policy's parameters). On any error
 *         the parameter keeps its value.
 * \note Thread-safe (the runtime's policy lock); not from a hook.
 */
DS_API ds_status ds_policy_param_set(ds_runtime_t rt, const char *policy, const char *name, const char *value);

/**
 * \brief Current value of a policy's parameter.
 * \param[in]  rt      the runtime.
 * \param[in]  policy  a registered policy's name.
 * \param[in]  name    one of its parameters' names.
 * \param[out] value   the value.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (an argument NULL); ::DS_ERR_NOT_FOUND (no such policy or parameter).
 * \note Thread-safe, lock-free.
 */
DS_API ds_status ds_policy_param_get(ds_runtime_t rt, const char *policy, const char *name, double *value);

/**
 * \brief Makes the named policy the active one.
 *
 * Takes effect for launches that start after the switch (an atomic pointer
 * store); the new policy's on_activate then places the live vCtxs, on the
 * calling thread. Remaps keep program order, so no work is lost or reordered
 * by a switch. A hook of the previous policy may still be running; its state
 * stays valid until the runtime is destroyed.
 * \param[in] rt    the runtime.
 * \param[in] name  a registered policy's name.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (name NULL); ::DS_ERR_NOT_FOUND (no policy of that name; the
 *         active one stays).
 * \note Thread-safe (the runtime's policy lock); not from init or on_activate.
 */
DS_API ds_status ds_runtime_set_policy(ds_runtime_t rt, const char *name);

/**
 * \brief Name of the active policy.
 * \param[in]  rt    the runtime.
 * \param[out] name  the name (static storage of the runtime, valid until it is
 *                   destroyed).
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (name NULL).
 * \note Thread-safe.
 */
DS_API ds_status ds_runtime_get_policy(ds_runtime_t rt, const char **name);

/**
 * \brief One pass of the scheduler on the calling thread.
 *
 * For every live vCtx: harvests finished marks (profiles, windows,
 * on_completion), tracks activity (ds_vctx_view::idle_us), raises
 * on_congestion (see ::ds_policy_ops), runs the watchdog and reopens gates
 * closed longer than the teardown timeout. Then drains the RCK's boundary
 * records, checks the context's health (at most every 1 ms), and runs on_tick
 * when due. The scheduler thread calls it every
 * ds_runtime_config::scheduler_period_us; with a negative period there is no
 * thread and the application calls it instead.
 * \param[in] rt  the runtime.
 * \return ::DS_SUCCESS (also when another pass was running: this call then
 *         does nothing); ::DS_ERR_INVALID_HANDLE; ::DS_ERR_DEVICE_FAULT (the
 *         context faulted, before or during this pass).
 * \note Thread-safe: one pass at a time, concurrent callers return at once.
 */
DS_API ds_status ds_runtime_poll(ds_runtime_t rt);

/** \} */

/**
 * \defgroup ds_actions_group Policy actions
 * \brief What a policy (or the application) changes: urgency, windows.
 *
 * Thread-safe and non-blocking; applied at the vCtx's next kernel boundary on
 * its own thread. ds_vctx_remap() (detshare/detshare.h) is the third action;
 * the gate actions follow in their own group.
 * \{
 */

/**
 * \brief Runs the vCtx's next work on its highest-priority stream, or back on
 *        its normal one.
 *
 * The urgent stream, in the same pCtx, has the device's greatest stream
 * priority; the switch is a binding change like a remap (event hand-off,
 * counted in ds_vctx_stats::remaps).
 * \param[in] vctx    the vCtx.
 * \param[in] urgent  nonzero: urgent stream; 0: the vCtx's own priority.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE.
 * \note Thread-safe, non-blocking.
 */
DS_API ds_status ds_vctx_set_urgent(ds_vctx_t vctx, int urgent);

/**
 * \brief Bounds the vCtx's work in flight, in predicted microseconds.
 *
 * ds_launch() waits (for the vCtx's oldest marks to finish) while the
 * predicted work in flight plus the new kernel's would exceed the window, so
 * that a remap or a confinement takes effect within one window. A kernel
 * longer than the window still runs once nothing is in flight; work without
 * a prediction (no profile, no hint) counts as 0. Sections are held by the
 * window alike, with the vCtx's past sections as their prediction.
 * \param[in] vctx       the vCtx.
 * \param[in] window_us  the bound in us; 0 = unbounded (the default).
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE.
 * \note Thread-safe, non-blocking; read at the vCtx's next launch.
 */
DS_API ds_status ds_vctx_set_window(ds_vctx_t vctx, uint32_t window_us);

/**
 * \brief Places the vCtx in one step: pCtx, urgency and window.
 *
 * The same as ds_vctx_set_window() followed by a remap that also sets the
 * urgency (ds_vctx_remap() + ds_vctx_set_urgent()), published together so
 * that the owner's next kernel boundary sees the window with the binding.
 * \param[in] vctx       the vCtx.
 * \param[in] pctx       pool index.
 * \param[in] urgent     nonzero: the vCtx's highest-priority stream.
 * \param[in] window_us  bound on its predicted work in flight (us); 0 = none.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (pctx not below ds_view_num_pctx(); nothing changed).
 * \note Thread-safe, non-blocking; also on the vCtx being created, from
 *       on_vctx_create.
 */
DS_API ds_status ds_vctx_place(ds_vctx_t vctx, uint32_t pctx, int urgent, uint32_t window_us);

/**
 * \brief Marks the vCtx's work after every kernel and section, or only now
 *        and then (the default).
 *
 * With every unit marked, ds_vctx_state::busy is exact: it turns 0 as soon as
 * the vCtx's last unit is known finished, and ds_vctx_state::launching tells
 * whether its thread is inside ds_launch() or ds_vctx_acquire_stream()
 * (sequentially consistent, for hand-over protocols such as the built-in
 * "temporal"). Each mark costs one event record on the launching thread.
 * \param[in] vctx  the vCtx.
 * \param[in] on    nonzero: mark every unit.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE.
 * \note Thread-safe, non-blocking; also from on_vctx_create.
 */
DS_API ds_status ds_vctx_set_track_all(ds_vctx_t vctx, int on);

/** \} */

/**
 * \defgroup ds_gates_group Gates
 * \brief Preemption at kernel boundaries (DetShare, section 4.2).
 *
 * A gate is a stream wait (cuStreamWaitValue32 on the vCtx's control word;
 * CUDA Driver API, "Stream Memory Operations") placed before a kernel or
 * section of a vCtx that has a gate interval. Closing the gate stops the
 * vCtx's already-queued work at its next gate, device-side; its thread then
 * waits in its next ds_launch() or ds_vctx_acquire_stream() until the gate
 * opens, so a gated vCtx holds at most one stream (one hardware queue)
 * blocked (docs/design.md, invariant 5). Opening resumes the queued work in
 * program order; nothing is dropped or run twice. A gate closed for longer
 * than the runtime's teardown timeout is reopened by the runtime (logged,
 * ds_runtime_stats::gate_expiries), as is one a launch waited at for longer
 * than that (the launch then fails with ::DS_ERR_TIMEOUT), and destroying the
 * vCtx or the runtime opens it first: nothing waits forever. A kernel already
 * running is never interrupted. Yield = close the gate and ds_vctx_remap()
 * the vCtx: the queued work finishes where it was queued once the gate
 * reopens, later work runs on the new pCtx. Who writes the words:
 * ::ds_gate_mode.
 * \{
 */

/**
 * \brief Places gates in the vCtx's stream every interval_us of predicted work.
 *
 * A gate goes before a kernel or section once at least interval_us of
 * predicted work was submitted since the vCtx's last gate (0: before every
 * kernel and section; ::DS_GATES_NONE, the default: no gates). Read at the
 * vCtx's next launch or section; after a change to a gated interval, that
 * unit always gets a gate (so the queue is stoppable at once). Each gate costs one stream memory
 * operation on the launching thread (cuStreamWaitValue32; with ::DS_GATES_RCK
 * also a cuStreamWriteValue32 for the boundary timestamp).
 * \param[in] vctx         the vCtx.
 * \param[in] interval_us  predicted us between gates, 0, or ::DS_GATES_NONE.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED (the
 *         runtime's gates are off) for any interval but ::DS_GATES_NONE.
 * \note Thread-safe, non-blocking.
 */
DS_API ds_status ds_vctx_set_gate_interval(ds_vctx_t vctx, uint32_t interval_us);

/**
 * \brief Closes the vCtx's gate: its queued work stops entering the GPU at
 *        its next gate and its thread waits at its next launch.
 *
 * ::DS_GATES_HOST: the word is written now and the device sees it at its next
 * gate; ::DS_GATES_RCK: once the RCK mirrored it. Closing a closed gate does
 * nothing. A vCtx without gates (interval ::DS_GATES_NONE) has nothing queued
 * to stop on the device: closing its gate still holds its thread at its next
 * launch and counts toward the hardware-queue budget. Under slo_aware the
 * policy owns BE vCtxs' gates (it reopens them once LS is idle); drive gates
 * yourself under "manual" or a policy of your own.
 * \param[in] vctx  the vCtx.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED (gates
 *         off); ::DS_ERR_LIMIT (the gates closed now plus the vCtxs waiting
 *         on copies already reach ds_runtime_stats::max_closed_gates: closing
 *         it would leave fewer than two of the CUDA_DEVICE_MAX_CONNECTIONS
 *         hardware queues unblocked, and once none is, every stream of the
 *         process stalls; the gate stays open. Set CUDA_DEVICE_MAX_CONNECTIONS
 *         higher, up to 32, before the process's first CUDA call; see
 *         docs/device-facts.md); ::DS_ERR_DEVICE_FAULT.
 * \note Thread-safe (the runtime's gate lock, never taken on the launch path);
 *       non-blocking.
 */
DS_API ds_status ds_vctx_gate_close(ds_vctx_t vctx);

/**
 * \brief Opens the vCtx's gate: its queued work resumes in program order.
 * \param[in] vctx  the vCtx.
 * \return ::DS_SUCCESS (also when the gate was open); ::DS_ERR_INVALID_HANDLE.
 * \note Thread-safe (the runtime's gate lock); non-blocking.
 */
DS_API ds_status ds_vctx_gate_open(ds_vctx_t vctx);

/** \} */

/* --- the view ------------------------------------------------------------ */

/**
 * \defgroup ds_view_group The view
 * \brief Lock-free reads of a runtime's state for policies.
 *
 * Every ds_view_* function takes the view a hook was given, is safe from any
 * thread while the runtime lives, takes no lock and never blocks. Snapshots
 * of fields other threads write may lag slightly.
 * \{
 */

/** A vCtx as policies see it (ds_view_vctx()). */
typedef struct ds_vctx_view {
    ds_vctx_t vctx;           /**< the vCtx */
    ds_vctx_class cls;        /**< its class (ds_vctx_attr::cls) */
    ds_phase phase;           /**< attribute (launch hints may differ) */
    uint32_t slo_us, /**< its SLO in us, 0 = none (ds_vctx_attr::slo_us) */ weight; /**< its
                                   weight, >= 1 (ds_vctx_attr::weight) */
    uint32_t pctx;            /**< bound pCtx */
    uint32_t pending_pctx;    /**< requested (== pctx when none) */
    int urgent;               /**< the urgent stream is requested (applied at the next
                                   boundary, like pending_pctx) */
    uint32_t window_us;       /**< bound on work in flight (us), 0 = none */
    double inflight_us;       /**< predicted us submitted and not known finished */
    double queue_delay_us;    /**< predicted wait (us) of work submitted now behind the
                                   vCtx's own queue (= inflight_us) */
    double last_launch_us;    /**< runtime clock (us) of the last scheduler pass that saw
                                   the vCtx active (new launches or sections, work in
                                   flight, a section open); negative if none has */
    double idle_us;           /**< time (us) since then; since the runtime clock's zero
                                   if it was never seen active */
    uint64_t launches;        /**< kernels launched through ds_launch() */
} ds_vctx_view;

/** A vCtx's state in full, without the clock (ds_view_vctx_state()): what a
 *  policy reads on its hot path. Initialise with ::DS_VCTX_STATE_INIT. */
typedef struct ds_vctx_state {
    size_t size; /**< sizeof(ds_vctx_state) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    ds_vctx_class cls;        /**< its class */
    ds_phase phase;           /**< its phase attribute */
    uint32_t slo_us;          /**< its SLO in us, 0 = none */
    uint32_t weight;          /**< its weight, >= 1 */
    uint32_t pctx;            /**< bound pCtx */
    uint32_t pending_pctx;    /**< requested pCtx (== pctx when none) */
    int urgent;               /**< the urgent stream is requested */
    uint32_t window_us;       /**< bound on work in flight (us), 0 = none */
    double inflight_us;       /**< predicted us submitted and not known finished (>= 0) */
    double unit_us;           /**< its longest recent kernel or section, predicted (us):
                                   a decaying maximum that remembers one long unit for
                                   about a hundred launches */
    double last_active_us;    /**< runtime clock (us) when a scheduler pass last saw it
                                   active; negative if never */
    int busy;                 /**< tracked work in flight or a section open (exact with
                                   ds_vctx_set_track_all(), a lower bound otherwise) */
    int launching;            /**< with ds_vctx_set_track_all(): its thread is inside
                                   ds_launch() or ds_vctx_acquire_stream() (sequentially
                                   consistent load); 0 otherwise */
    int section_open;         /**< a section is open */
    int gate_closed;          /**< its gate is closed */
    uint32_t gate_interval_us; /**< its gate interval; ::DS_GATES_NONE = no gates */
    uint64_t launches;        /**< kernels launched */
    uint64_t sections;        /**< sections closed */
    uint64_t graph_launches;  /**< graphs launched (ds_graph_launch); not counted in launches */
    uint64_t requests;        /**< requests ended or recorded (ds_vctx_request_end(),
                                   ds_vctx_request_record()); read with acquire: the
                                   fields below are at least as new */
    uint64_t requests_over_slo; /**< of them, slower than slo_us */
    uint64_t requests_over_slo_runs; /**< runs of consecutive ones over slo_us (see
                                          ds_vctx_stats::requests_over_slo_runs) */
    uint32_t request_window;  /**< requests in the sliding window (at most ::DS_REQUEST_WINDOW) */
    uint32_t request_window_over_slo; /**< of those, slower than slo_us */
    double request_p50_us;    /**< median latency (us) over the window; 0 while empty */
    double request_p99_us;    /**< 99th percentile (nearest rank, us) over the window; 0 while empty */
    uint64_t graph_units;     /**< units its graph launches made: a step's segments
                                   (one per step for a graph that is not cut);
                                   launches + sections + graph_units counts every
                                   unit the policy decided */
} ds_vctx_state;

/** Size of ::ds_vctx_state before `graph_launches`: snapshots of that size
 *  (policies built against the first release) are still filled, without it. */
#define DS_VCTX_STATE_SIZE_V1 offsetof(ds_vctx_state, graph_launches)
/** Size of ::ds_vctx_state before `requests` (the second release): filled up to it. */
#define DS_VCTX_STATE_SIZE_V2 offsetof(ds_vctx_state, requests)
/** Size of ::ds_vctx_state before `graph_units` (release 0.2): filled up to it. */
#define DS_VCTX_STATE_SIZE_V3 offsetof(ds_vctx_state, graph_units)

/** Initialiser of ::ds_vctx_state. */
#define DS_VCTX_STATE_INIT { .size = sizeof(ds_vctx_state), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * \brief Snapshot of one vCtx's state (relaxed loads; no clock read).
 * \param[in]  view  the runtime's view.
 * \param[in]  vctx  a live vCtx of this runtime, or the one being created
 *                   (from on_vctx_create).
 * \param[out] out   a ::DS_VCTX_STATE_INIT-initialised snapshot.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE (logged at ::DS_LOG_DEBUG
 *         only: a hook racing a destroy sees it; it doubles as a quiet
 *         liveness check); ::DS_ERR_INVALID_ARGUMENT (out NULL);
 *         ::DS_ERR_ABI_MISMATCH (out's header).
 */
DS_API ds_status ds_view_vctx_state(const ds_policy_view *view, ds_vctx_t vctx, ds_vctx_state *out);

/**
 * \brief The runtime's gate mode as resolved at creation.
 * \param[in] view  the runtime's view.
 * \return ::DS_GATES_HOST, ::DS_GATES_RCK or ::DS_GATES_OFF (gate actions
 *         then fail with ::DS_ERR_NOT_SUPPORTED).
 */
DS_API ds_gate_mode ds_view_gate_mode(const ds_policy_view *view);

/**
 * \brief Gates closed now, across the runtime's vCtxs.
 * \param[in] view  the runtime's view.
 * \return ds_runtime_stats::gates_closed.
 */
DS_API uint32_t ds_view_gates_closed(const ds_policy_view *view);

/**
 * \brief Runtime clock.
 * \param[in] view  the runtime's view.
 * \return microseconds since the runtime was created (CLOCK_MONOTONIC); on the
 *         simulated device, simulated time.
 */
DS_API double ds_view_now_us(const ds_policy_view *view);
/**
 * \brief The runtime behind a view (for the public API: ds_runtime_info_get(), ...).
 * \param[in] view  the runtime's view.
 * \return the runtime handle.
 */
DS_API ds_runtime_t ds_view_runtime(const ds_policy_view *view);
/**
 * \brief Number of pCtxs in the pool.
 * \param[in] view  the runtime's view.
 * \return ds_runtime_info::num_pctx.
 */
DS_API uint32_t ds_view_num_pctx(const ds_policy_view *view);
/**
 * \brief One pCtx of the pool (as in ds_runtime_info::pctx).
 * \param[in] view   the runtime's view.
 * \param[in] index  pool index.
 * \return the pCtx (valid until the runtime is destroyed), or NULL if index
 *         is not below ds_view_num_pctx().
 */
DS_API const ds_pctx_info *ds_view_pctx(const ds_policy_view *view, uint32_t index);
/**
 * \brief The ::DS_ANCHOR_LOW pCtx nearest in SM count.
 * \param[in] view      the runtime's view.
 * \param[in] sm_count  SMs wanted.
 * \return index of the LOW pCtx whose SM count is nearest sm_count (the
 *         lowest index among equals), or -1 if the pool has none.
 */
DS_API int32_t ds_view_low_tier(const ds_policy_view *view, uint32_t sm_count);
/**
 * \brief The whole-GPU pCtx.
 * \param[in] view  the runtime's view.
 * \return index of the first pCtx that covers every SM group (the pool always
 *         has one).
 */
DS_API uint32_t ds_view_full_pctx(const ds_policy_view *view);
/**
 * \brief Live vCtxs.
 * \param[in]  view  the runtime's view.
 * \param[out] out   up to cap handles, in slot order; may be NULL to count.
 * \param[in]  cap   entries out has room for.
 * \return how many vCtxs are live (may exceed cap). A vCtx being created is
 *         not listed until ds_vctx_create() completes.
 */
DS_API uint32_t ds_view_vctxs(const ds_policy_view *view, ds_vctx_t *out, uint32_t cap);
/**
 * \brief Snapshot of one vCtx.
 * \param[in]  view  the runtime's view.
 * \param[in]  vctx  a live vCtx of this runtime.
 * \param[out] out   the snapshot.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (out NULL).
 */
DS_API ds_status ds_view_vctx(const ds_policy_view *view, ds_vctx_t vctx, ds_vctx_view *out);
/**
 * \brief Profile of (function, grid, block) on a pCtx's SM count.
 *
 * Profiles are kept per (function, grid, block, SM count): two pCtxs of equal
 * SM count share them. The mean is a moving average of the measured durations
 * (the n-th sample weighs 1/n, from the 8th on 1/8); the tail is
 * the mean plus 4 times the mean absolute deviation (the Jacobson/Karels
 * estimator of RFC 6298, section 2).
 * \param[in]  view     the runtime's view.
 * \param[in]  f        the kernel.
 * \param[in]  grid     its grid dimensions.
 * \param[in]  block    its block dimensions.
 * \param[in]  pctx     pool index whose SM count is looked up.
 * \param[out] mean_us  mean duration in us; may be NULL; untouched when 0 is
 *                      returned.
 * \param[out] tail_us  tail duration (about p99) in us; may be NULL;
 *                      untouched when 0 is returned.
 * \return 1 if known, 0 if never measured there (or pctx out of range).
 */
DS_API int ds_view_predict(const ds_policy_view *view, CUfunction f, ds_dim3 grid, ds_dim3 block,
                           uint32_t pctx, double *mean_us, double *tail_us);

/** \} */

/**
 * \defgroup ds_policy_helpers_group Helpers for policy authors
 * \brief Small inline functions over the view that most policies need (the
 *        built-in ones use them). They are not library symbols: each compiles
 *        into the policy, using only the functions above.
 * \{
 */

/** Most vCtxs ds_policy_list() and ds_policy_for_each() handle at once. */
#define DS_POLICY_LIST_MAX 256

/**
 * \brief Live vCtxs, at most `cap` of them (ds_view_vctxs() clamped).
 * \param[in]  view  the runtime's view.
 * \param[out] out   room for cap handles, in slot order.
 * \param[in]  cap   entries out has room for.
 * \return how many handles were written (<= cap).
 * \note Lock-free, like ds_view_vctxs().
 */
static inline uint32_t ds_policy_list(const ds_policy_view *view, ds_vctx_t *out, uint32_t cap)
{
    uint32_t n = ds_view_vctxs(view, out, cap);
    return n < cap ? n : cap;
}

/**
 * \brief Snapshot of a vCtx that may have been destroyed since it was listed.
 * \param[in]  view  the runtime's view.
 * \param[in]  vctx  a vCtx handle.
 * \param[out] out   the snapshot (its header is filled here).
 * \return 1 if vctx is live (or being created) and out holds its state; 0 if
 *         it is gone (ds_view_vctx_state()'s error, logged at ::DS_LOG_DEBUG).
 * \note Lock-free.
 */
static inline int ds_policy_state(const ds_policy_view *view, ds_vctx_t vctx, ds_vctx_state *out)
{
    *out = (ds_vctx_state)DS_VCTX_STATE_INIT;
    return ds_view_vctx_state(view, vctx, out) == DS_SUCCESS;
}

/**
 * \brief Calls fn for every live vCtx (up to ::DS_POLICY_LIST_MAX), e.g. to
 *        place them all from on_activate.
 * \param[in] view  the runtime's view.
 * \param[in] fn    called with arg, the view and each vCtx.
 * \param[in] arg   passed to fn.
 * \note Lock-free; fn runs on the calling thread.
 */
static inline void ds_policy_for_each(const ds_policy_view *view,
                                      void (*fn)(void *arg, const ds_policy_view *view, ds_vctx_t vctx), void *arg)
{
    ds_vctx_t vs[DS_POLICY_LIST_MAX];
    uint32_t n = ds_policy_list(view, vs, DS_POLICY_LIST_MAX);
    for (uint32_t i = 0; i < n; i++)
        fn(arg, view, vs[i]);
}

/**
 * \brief A latency-sensitive tier and its complement: the ::DS_ANCHOR_LOW
 *        pCtx nearest `sms` in SM count (ds_view_low_tier()) and the pCtx of
 *        exactly the other SMs (ds_pctx_info::complement).
 * \param[in]  view  the runtime's view.
 * \param[in]  sms   SMs wanted for the latency-sensitive tier.
 * \param[out] low   the LOW pCtx's index; the whole-GPU pCtx when the pool
 *                   has no LOW pCtx with a complement (nothing to split).
 * \param[out] high  its complement's index; likewise the whole-GPU pCtx.
 * \note Lock-free.
 */
static inline void ds_policy_ls_tiers(const ds_policy_view *view, uint32_t sms, uint32_t *low, uint32_t *high)
{
    int32_t l = ds_view_low_tier(view, sms);
    const ds_pctx_info *p = l < 0 ? NULL : ds_view_pctx(view, (uint32_t)l);
    if (!p || p->complement < 0) {
        *low = *high = ds_view_full_pctx(view);
        return;
    }
    *low = (uint32_t)l;
    *high = (uint32_t)p->complement;
}

/** \} */

#ifdef __cplusplus
}
#endif

#endif /* DETSHARE_POLICY_H */
