/**
 * \file detshare/detshare.h
 * \brief libdetshare core API: runtime, virtual contexts, launches, sections,
 *        remaps, gates, statistics and tenant memory.
 *
 * Include as `#include <detshare/detshare.h>` with the CUDA toolkit's include
 * folder on the include path (for cuda.h types); link with `-ldetshare`
 * (pkg-config `detshare`). libcuda is never linked: it is loaded at run time.
 * Thread-safety, errors and device faults are described once, on the
 * \ref index "main page".
 */
/**
 * \mainpage libdetshare API reference
 *
 * libdetshare shares one NVIDIA GPU between tenants deterministically. Each
 * tenant holds virtual contexts (vCtx, ::ds_vctx_t). The runtime
 * (::ds_runtime_t) keeps a pool of physical contexts (pCtx: CUDA green
 * contexts over chosen SM sets) and moves each vCtx between them at kernel
 * boundaries, never changing a kernel's launch configuration: the function,
 * grid, block, shared memory and parameters that reach the driver are exactly
 * what the caller passed (docs/design.md, invariant 1). Where a vCtx runs is
 * decided by a policy (detshare/policy.h; DetShare, section 4.4); the runtime
 * carries the decisions out with event hand-offs that keep each vCtx's work
 * in program order (docs/design.md, invariant 2).
 *
 * \section ds_headers Headers
 *  - detshare/detshare.h: status codes, logging, the runtime and its pool,
 *    vCtxs, ds_launch(), sections, remaps, statistics, tenant memory and copies.
 *  - detshare/policy.h: the policy plug-in ABI (::ds_policy_ops), the
 *    read-only view hooks get, and the actions a policy takes (remap, urgency,
 *    windows, gates).
 *  - detshare/sim.h: the simulated device (::DS_DEVICE_SIM), a GPU model in
 *    virtual time for tests and for machines without a GPU.
 *
 * \section ds_start A first program
 * \code{.c}
 * #include <stdio.h>
 * #include <detshare/detshare.h>
 *
 * int run(CUfunction kernel, void **params)   // kernel from cuModuleGetFunction
 * {
 *     ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;   // the GPU, default pool and policy
 *     ds_runtime_t rt;
 *     if (ds_runtime_create(&cfg, &rt) != DS_SUCCESS) {
 *         fprintf(stderr, "detshare: %s\n", ds_last_error_message());
 *         return 1;
 *     }
 *     ds_vctx_attr attr = DS_VCTX_ATTR_INIT;
 *     attr.name = "inference";
 *     attr.cls = DS_CLASS_LATENCY_SENSITIVE;
 *     attr.slo_us = 500;                                 // latency objective in us
 *     ds_vctx_t v;
 *     ds_status st = ds_vctx_create(rt, &attr, &v);
 *     if (st == DS_SUCCESS) {
 *         ds_dim3 grid = {128, 1, 1}, block = {256, 1, 1};
 *         st = ds_launch(v, kernel, grid, block, 0, params, NULL);
 *         if (st == DS_SUCCESS)
 *             st = ds_vctx_synchronize(v);
 *         ds_vctx_destroy(v);
 *     }
 *     if (st != DS_SUCCESS)
 *         fprintf(stderr, "detshare: %s\n", ds_last_error_message());
 *     ds_runtime_destroy(rt);
 *     return st != DS_SUCCESS;
 * }
 * \endcode
 * Work that does not go through ds_launch() (cuBLAS, PyTorch, copies) runs in
 * a section: ds_vctx_acquire_stream() returns the vCtx's current stream,
 * ds_vctx_release_stream() ends the section.
 *
 * \section ds_threads Thread-safety
 * Stated once for the whole API; each function's note repeats what applies
 * to it.
 *  - ds_runtime_create() may be called from any thread. ds_runtime_destroy()
 *    must not run concurrently with any other call on that runtime or its
 *    vCtxs: call it after every tenant thread has stopped using them.
 *  - A vCtx is owned by one thread at a time (its tenant thread): ds_launch(),
 *    ds_vctx_acquire_stream(), ds_vctx_release_stream(),
 *    ds_vctx_synchronize(), ds_memcpy_async() and ds_vctx_destroy() must not
 *    run concurrently on the same vCtx. Different vCtxs may be used from
 *    different threads concurrently; the launch path takes no lock.
 *  - ds_vctx_create(), ds_vctx_remap(), the policy actions and gate actions of
 *    detshare/policy.h (ds_vctx_set_urgent(), ds_vctx_set_window(),
 *    ds_vctx_set_gate_interval(), ds_vctx_gate_close(), ds_vctx_gate_open()),
 *    ds_policy_register(), ds_runtime_set_policy() and every query
 *    (ds_runtime_info_get(), ds_runtime_get_stats(), ds_vctx_get_stats(),
 *    ds_vctx_get_pctx(), ds_vctx_get_name(), ds_runtime_get_policy(),
 *    ds_pctx_probe_sms()) are safe from any thread while the vCtx and its
 *    runtime live.
 *  - ds_log_set_handler(), ds_status_string(), ds_status_name(),
 *    ds_last_error_message() and ds_version(): any thread.
 *  - Tenant memory: ds_mem_alloc(), ds_mem_free(), ds_vctx_set_mem_quota(),
 *    ds_vctx_get_mem_stats() and ds_mem_working_set() are safe from any thread
 *    (a lock per vCtx, which ds_launch() takes only on its timed launches
 *    while the vCtx has allocations), but not concurrently with
 *    ds_vctx_destroy() of that vCtx. ds_memcpy_async() belongs to the owner
 *    thread, like ds_launch().
 *  - detshare/sim.h: every function is safe from any thread.
 *
 * \section ds_errors Errors
 * Every function that can fail returns a ::ds_status; output parameters are
 * written only on ::DS_SUCCESS. The first function that detects an error logs
 * one line through the caller's log handler (ds_log_set_handler()) and keeps
 * the detail (what was found, which argument, which driver call) in a
 * thread-local message, ds_last_error_message(). The library never aborts,
 * exits, prints, or changes the environment (docs/design.md, invariant 4).
 *
 * \section ds_faults Device faults
 * A kernel that traps or touches an illegal address poisons the device's
 * (shared) context for the whole process (CUDA Driver API, "Error
 * Handling": sticky errors such as CUDA_ERROR_ILLEGAL_ADDRESS). The first
 * call or scheduler pass that sees such a sticky driver error marks the
 * runtime faulted (with the scheduler thread running, its health check
 * queries the context every 1 ms); with the resident control kernel
 * (::DS_RCK_ON) a stopped heartbeat lets the runtime presume the fault before
 * the driver reports it (ds_runtime_config::fault_presume_ms). From then on
 * ds_launch(), sections, ds_vctx_remap(), ds_vctx_synchronize(),
 * ds_vctx_gate_close(), ds_mem_alloc(), ds_memcpy_async(), ds_runtime_poll()
 * and both destroy functions return ::DS_ERR_DEVICE_FAULT, naming the vCtx
 * whose kernel faulted where it can be known (the simulated device knows; on
 * a GPU the vCtxs with work in flight are named). Destroying a faulted
 * runtime still releases every object and returns; it never waits on the
 * dead context.
 *
 * \section ds_groups vCtx groups (several GPUs)
 * A job that spans GPUs (the ranks of a tensor-parallel model, the replicas
 * of a data-parallel training job) runs one vCtx per rank, each created on
 * its GPU's runtime with the same ds_vctx_attr::group name and
 * ds_vctx_attr::group_ranks and its own ds_vctx_attr::group_rank. Its ranks
 * are placed as one: rank 0's policy decides each unit (a kernel, a section,
 * a graph segment) and every rank applies that decision at the same unit
 * index, so rank r's k-th unit runs on the tier (the pCtx of the same SM
 * count and anchor in its own pool), urgency, window and gate interval of
 * rank 0's k-th unit. A rank's own policy still sees its launches (it
 * places the other vCtxs around it) but does not place it: the actions that
 * place a rank > 0 (ds_vctx_remap(), ds_vctx_set_urgent(),
 * ds_vctx_set_window(), ds_vctx_place(), ds_vctx_set_gate_interval()) are
 * accepted and ignored, while closing its gate still holds it where it is
 * (a hold, not a placement). Rank 0 runs at most 256
 * units ahead of the slowest rank. The ranks must launch the same sequence
 * of units: work that one rank does alone goes through another vCtx. A
 * graph cut from its measuring step (ds_graph_attr::segment_us) is cut on
 * every rank where rank 0 cut it, so that the ranks' steps are the same
 * units: the ranks' graphs pair by creation order on their vCtx, and a rank
 * whose step has other cut points keeps its own cut (logged). A rank > 0's
 * measuring step waits for rank 0's cut (bounded by the teardown timeout).
 * Every wait on another rank is bounded by the teardown timeout
 * (::DS_ERR_TIMEOUT, naming the rank); a rank that destroyed its vCtx, or
 * whose process died, fails the others' next launch that needs it at once
 * (::DS_ERR_PEER_LOST), while decisions already made stay usable, so ranks
 * that end at different times do not fail. docs/usage.md, "Several GPUs in
 * one process", shows a two-rank group.
 *
 * \section ds_env Environment
 * Read once per process (at first use), range-checked, and logged at
 * ::DS_LOG_INFO by the first ds_runtime_create() when set; an invalid value is logged at
 * ::DS_LOG_WARN and the default kept.
 *  - `DS_LOG_LEVEL` (0-4): overrides the level given to ds_log_set_handler().
 *  - `DS_SAMPLE_PERIOD` (0-1000000, default 256): every this many ds_launch()
 *    calls of a vCtx, one is timed with events (see ::ds_vctx_stats for every
 *    unit that is timed); 0 times no launch.
 *  - `DS_TEARDOWN_TIMEOUT_MS` (1-3600000, default 10000): the teardown
 *    timeout when ds_runtime_config::teardown_timeout_ms is 0.
 *  - `DS_LIBCUDA` (default `libcuda.so.1`): the CUDA driver library to load.
 *  - `CUDA_DEVICE_MAX_CONNECTIONS` (1-32, default 8): read, never changed. The
 *    CUDA driver gives the process that many hardware queues; set it before
 *    the process's first CUDA call (ds_runtime_info::max_connections).
 *
 * \section ds_figures Measured costs
 * The headers state only what the code does and the constants it uses. Costs
 * measured on a GPU (launch overhead, remap, gate latency, scheduler CPU) are
 * measured by bench/overhead and published in docs/results/h200/overhead.json;
 * the RCK's costs and hazards by tools/devprobe in
 * docs/results/h200/devprobe.jsonl. docs/benchmarks.md describes the benchmarks,
 * docs/device-facts.md the driver and device behaviour the design relies on,
 * docs/design.md the design and its invariants.
 */
#ifndef DETSHARE_DETSHARE_H
#define DETSHARE_DETSHARE_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * \defgroup ds_version_group Version and ABI
 * \brief Library version and the attribute-struct ABI header.
 * \{
 */

/** Major version of this header. */
#define DS_VERSION_MAJOR 0
/** Minor version of this header. */
#define DS_VERSION_MINOR 2
/** Patch version of this header. */
#define DS_VERSION_PATCH 0
/** Version of this header as one number: major * 10000 + minor * 100 + patch
 *  (0.2.0 is 200). Compare with ds_version() for the library actually loaded. */
#define DS_VERSION_CODE (DS_VERSION_MAJOR * 10000 + DS_VERSION_MINOR * 100 + DS_VERSION_PATCH)

/** Version of the attribute-struct ABI. Every attribute, statistics and ops
 *  struct starts with {size, magic, version}: fill them with the struct's
 *  `_INIT` macro. A struct larger than the library knows is accepted when the
 *  extra bytes are zero; a wrong magic or a version outside 1 to
 *  DS_ABI_VERSION is ::DS_ERR_ABI_MISMATCH. */
#define DS_ABI_VERSION 1u
/** Magic of the attribute-struct header ("DSH1"). */
#define DS_ABI_MAGIC 0x44534831u /* "DSH1" */

/** Marks the functions the library exports (default ELF visibility with GCC
 *  and Clang; the library is built with hidden visibility otherwise). */
#if defined(__GNUC__)
#define DS_API __attribute__((visibility("default")))
#else
#define DS_API
#endif

/** \} */

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/**
 * \defgroup ds_status_group Status codes and errors
 * \brief ::ds_status, its names and descriptions, the last error's detail.
 * \{
 */

/** X(name, value, description): the one list every status comes from
 *  (::ds_status, ds_status_string() and ds_status_name() are generated from
 *  it; the Python binding's table is checked against it). Values never
 *  change; new statuses are appended. */
#define DS_STATUS_LIST(X)                                                                  \
    X(DS_SUCCESS, 0, "success")                                                            \
    X(DS_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                      \
    X(DS_ERR_INVALID_HANDLE, 2, "NULL, foreign or destroyed handle")                       \
    X(DS_ERR_ABI_MISMATCH, 3, "attribute struct has a wrong size, magic or version")      \
    X(DS_ERR_NO_DRIVER, 4, "CUDA driver library (libcuda.so.1) not found or unusable")    \
    X(DS_ERR_DRIVER_TOO_OLD, 5, "CUDA driver too old (green contexts need 12.5 or later)") \
    X(DS_ERR_NO_DEVICE, 6, "no such CUDA device")                                          \
    X(DS_ERR_NOT_SUPPORTED, 7, "not supported by this device, driver or build")           \
    X(DS_ERR_DRIVER, 8, "a CUDA driver call failed")                                       \
    X(DS_ERR_OUT_OF_MEMORY, 9, "out of memory")                                            \
    X(DS_ERR_INVALID_LAUNCH, 10, "launch configuration outside the device's limits")      \
    X(DS_ERR_BUSY, 11, "operation not allowed now (a section is open)")                   \
    X(DS_ERR_TIMEOUT, 12, "work did not finish within the time limit")                    \
    X(DS_ERR_NOT_FOUND, 13, "no such object")                                              \
    X(DS_ERR_ALREADY_EXISTS, 14, "an object with that name already exists")               \
    X(DS_ERR_LIMIT, 15, "a configured limit was reached")                                  \
    X(DS_ERR_DEVICE_FAULT, 16, "the device context faulted")                               \
    X(DS_ERR_INTERNAL, 17, "internal error (a bug in libdetshare)")                      \
    X(DS_ERR_MEMORY_QUOTA, 18, "the vCtx's device-memory quota would be exceeded")       \
    X(DS_ERR_CAPTURE, 19, "graph capture failed or captured work that cannot follow the vCtx") \
    X(DS_ERR_PEER_LOST, 20, "a rank of the vCtx's group left or its process died")

/** Result of every libdetshare function that can fail (values from
 *  ::DS_STATUS_LIST). The detail of a failure is in ds_last_error_message(). */
typedef enum ds_status {
#define DS__STATUS_ENUM(name, value, desc) name = value,
    DS_STATUS_LIST(DS__STATUS_ENUM)
#undef DS__STATUS_ENUM
} ds_status;

/** \var DS_SUCCESS
 *  The call did what it says; output parameters are written. */
/** \var DS_ERR_INVALID_ARGUMENT
 *  An argument or a field of an attribute struct is NULL, out of range or
 *  inconsistent with another; ds_last_error_message() names it. */
/** \var DS_ERR_INVALID_HANDLE
 *  A runtime or vCtx handle is NULL, not a libdetshare handle, or destroyed
 *  (destroyed handles are recognised for the last 1024 objects destroyed in
 *  the process; beyond that, detection is best effort). */
/** \var DS_ERR_ABI_MISMATCH
 *  An attribute struct's {size, magic, version} header does not match this
 *  library: initialise the struct with its `_INIT` macro (see ::DS_ABI_VERSION). */
/** \var DS_ERR_NO_DRIVER
 *  The CUDA driver library (`DS_LIBCUDA`, default libcuda.so.1) could not be
 *  loaded, or lacks a required entry point. */
/** \var DS_ERR_DRIVER_TOO_OLD
 *  The CUDA driver is older than 12.5 (cuGreenCtxStreamCreate). */
/** \var DS_ERR_NO_DEVICE
 *  No CUDA device, or ds_runtime_config::device_ordinal is not one. */
/** \var DS_ERR_NOT_SUPPORTED
 *  The device, driver or runtime configuration cannot do this (e.g. gates
 *  with ::DS_GATES_OFF, the VMM API missing, a simulated-device call on a
 *  CUDA runtime). */
/** \var DS_ERR_DRIVER
 *  A CUDA driver call failed with a non-sticky error; ds_last_error_message()
 *  names the call and the CUresult. */
/** \var DS_ERR_OUT_OF_MEMORY
 *  Memory could not be allocated: host memory (through the allocator of
 *  ds_replace_allocator()), a host thread, or a driver call answered
 *  CUDA_ERROR_OUT_OF_MEMORY (device memory, or the driver's own); the message
 *  names which. */
/** \var DS_ERR_INVALID_LAUNCH
 *  A grid or block dimension is 0 or above the device's limit, the block has
 *  too many threads, the dynamic shared memory is above the device's opt-in
 *  limit, or the driver refused the configuration (CUDA_ERROR_INVALID_VALUE). */
/** \var DS_ERR_BUSY
 *  Not allowed in the vCtx's current state: a section is already open
 *  (ds_vctx_acquire_stream()), or none is open (ds_vctx_release_stream()). */
/** \var DS_ERR_TIMEOUT
 *  A wait bounded by the runtime's teardown timeout ran out: work still
 *  running at destroy, a launch held by the policy, a launch waiting at a
 *  closed gate, or a grouped vCtx's launch waiting for another rank (rank 0's
 *  decision, or a rank 256 units behind). Logged at
 *  ::DS_LOG_WARN rather than ERROR. */
/** \var DS_ERR_NOT_FOUND
 *  No object of that name or address: an unknown policy name, an address
 *  that is not a live allocation. */
/** \var DS_ERR_ALREADY_EXISTS
 *  A policy of that name is already registered with the runtime, or the rank
 *  of a vCtx group (ds_vctx_attr::group_rank) has joined already. */
/** \var DS_ERR_LIMIT
 *  A fixed or configured limit was reached (ds_runtime_config::max_vctx,
 *  ::DS_MAX_POLICIES, hardware queues for closed gates, copying vCtxs,
 *  simulated devices alive). */
/** \var DS_ERR_DEVICE_FAULT
 *  The device context faulted (see \ref ds_faults "Device faults"); the
 *  runtime is unusable for the rest of the process, only destroy is left. */
/** \var DS_ERR_INTERNAL
 *  A bug in libdetshare: please report it with ds_last_error_message(). */
/** \var DS_ERR_MEMORY_QUOTA
 *  ds_mem_alloc() would take the vCtx past its device-memory quota
 *  (ds_vctx_set_mem_quota()); nothing was allocated. */
/** \var DS_ERR_CAPTURE
 *  A graph capture (ds_graph_create(), or a lazy instantiation in
 *  ds_graph_launch()) failed: the capture function returned nonzero or broke
 *  the capture, captured no work, captured kernels into another context (work
 *  on a stream other than the one it was handed), or captured different work
 *  on different pCtxs. Nothing was kept from the failed capture. */
/** \var DS_ERR_PEER_LOST
 *  A vCtx group (ds_vctx_attr::group) lost a rank: the rank this launch
 *  needed (rank 0 for its decision, or a rank that has not followed this far)
 *  destroyed its vCtx or its process died, or ds_vctx_create() joined a group
 *  that had lost one. Nothing was launched; destroy the vCtx. */

/**
 * \brief Static description of a status.
 * \param[in] status  any value.
 * \return "success", "invalid argument", ... (the description in
 *         ::DS_STATUS_LIST); "unknown status" for a value outside the list.
 *         Never NULL; static storage.
 * \note Thread-safe.
 */
DS_API const char *ds_status_string(ds_status status);

/**
 * \brief Name of a status.
 * \param[in] status  any value.
 * \return the enumerator's name ("DS_ERR_NO_DRIVER"), or "DS_STATUS_UNKNOWN"
 *         for a value outside the list. Never NULL; static storage.
 * \note Thread-safe.
 */
DS_API const char *ds_status_name(ds_status status);

/**
 * \brief Detail of the last error raised on the calling thread.
 *
 * What was found, which argument, which driver call, prefixed with the
 * status name ("DS_ERR_INVALID_ARGUMENT: ds_launch('a'): function is NULL").
 * \return the message, or "" if no error was raised on this thread yet.
 *         Never NULL. Overwritten by the next error raised on this thread
 *         (usually by a failing call; a call that recovers from an internal
 *         failure, such as a dropped remap in ds_launch(), may also replace
 *         it while returning ::DS_SUCCESS).
 * \note Thread-safe (thread-local storage).
 */
DS_API const char *ds_last_error_message(void);

/**
 * \brief Version of the library actually loaded.
 * \return ::DS_VERSION_CODE as the library was built (0.2.0 is 200).
 * \note Thread-safe.
 */
DS_API int ds_version(void);

/** \} */

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * \defgroup ds_log_group Logging
 * \brief The caller's log handler; the library prints nothing on its own.
 * \{
 */

/** Severity of a log message; a handler set with a level receives that level
 *  and the more severe ones (lower values). */
typedef enum ds_log_level {
    DS_LOG_NONE = 0,  /**< deliver nothing */
    DS_LOG_ERROR = 1, /**< errors, when they are raised (timeouts, a missing driver
                           or device, and repeats go to lower levels) */
    DS_LOG_WARN = 2,  /**< degraded but working (gates off, a remap dropped, a
                           timeout, a missing hardware queue) */
    DS_LOG_INFO = 3,  /**< configuration and decisions (pool layout, environment
                           settings, policy switches, watchdog events; no CUDA
                           driver or device, expected on machines without a GPU) */
    DS_LOG_DEBUG = 4, /**< repeats (each call on a faulted runtime, refused closes) */
} ds_log_level;

/**
 * \brief Log handler: receives one line (no trailing newline) at a level.
 *
 * Called on the thread that raised the message, which may be a tenant thread
 * inside any libdetshare call or one of the runtime's threads (scheduler,
 * copy, RCK watcher). Must be thread-safe and must not call back into
 * libdetshare.
 * \param[in] level      severity, never ::DS_LOG_NONE.
 * \param[in] message    the line (at most 511 bytes), valid during the call only.
 * \param[in] user_data  the `user` pointer given to ds_log_set_handler().
 */
typedef void (*ds_log_fn)(ds_log_level level, const char *message, void *user_data);

/**
 * \brief Sets the process-wide log handler and the most verbose level delivered.
 * \param[in] fn     handler, or NULL to drop every message (the default: the
 *                   library prints nothing on its own).
 * \param[in] user   passed back to fn as `user_data`.
 * \param[in] level  messages above this level are not formatted at all. The
 *                   environment variable `DS_LOG_LEVEL` (0-4), if set,
 *                   overrides it.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_ARGUMENT for a level outside 0-4
 *         (nothing changed).
 * \note Thread-safe; takes effect for messages raised after it returns.
 *       Replacing the handler twice while another thread delivers a message
 *       may give that message a mismatched fn and user pair.
 */
DS_API ds_status ds_log_set_handler(ds_log_fn fn, void *user, ds_log_level level);

/**
 * \brief Logs a message through the process's log handler, as the library's
 *        own messages are (for policies and other plug-ins).
 * \param[in] level  its level; dropped (not formatted) when the handler's
 *                   level filters it out or no handler is set.
 * \param[in] fmt    printf format; the line is cut at 511 bytes.
 * \note Thread-safe; never blocks on anything but the handler itself.
 */
DS_API void ds_log_message(ds_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/** \} */

/**
 * \defgroup ds_alloc_group Host memory
 * \brief Replacing the allocator the library takes its host memory from.
 * \{
 */

/** malloc(3)-compatible: `size` bytes or NULL. */
typedef void *(*ds_malloc_fn)(size_t size);
/** realloc(3)-compatible. */
typedef void *(*ds_realloc_fn)(void *ptr, size_t size);
/** calloc(3)-compatible: `count` * `size` zeroed bytes or NULL. */
typedef void *(*ds_calloc_fn)(size_t count, size_t size);
/** free(3)-compatible (never called with NULL). */
typedef void (*ds_free_fn)(void *ptr);

/**
 * \brief Replaces the functions the library allocates host memory with.
 *
 * Every heap allocation of the runtime (runtimes, vCtxs, profiles, copy
 * jobs, the simulated device) goes through them; device memory does not.
 * When one returns NULL the call that needed it fails with
 * ::DS_ERR_OUT_OF_MEMORY and releases what it had taken. Policies' own state
 * is theirs to allocate. The model is libuv's uv_replace_allocator().
 * \param[in] malloc_fn   replaces malloc.
 * \param[in] realloc_fn  replaces realloc.
 * \param[in] calloc_fn   replaces calloc.
 * \param[in] free_fn     replaces free.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_ARGUMENT (a function NULL; nothing
 *         changed); ::DS_ERR_BUSY (a runtime is alive: memory of one allocator
 *         would reach the other; nothing changed).
 * \note Call it before the first ds_runtime_create() or after the last
 *       ds_runtime_destroy(); not concurrently with either.
 */
DS_API ds_status ds_replace_allocator(ds_malloc_fn malloc_fn, ds_realloc_fn realloc_fn,
                                      ds_calloc_fn calloc_fn, ds_free_fn free_fn);

/** \} */

/* ------------------------------------------------------------------------ */
/* Runtime                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * \defgroup ds_runtime_group Runtime and pCtx pool
 * \brief Creating a runtime on a device, its configuration, its pool of
 *        physical contexts, and what it runs on.
 * \{
 */

typedef struct ds_runtime *ds_runtime_t; /**< opaque runtime handle: one device, its pCtx pool,
                                              policies and scheduler */
typedef struct ds_vctx *ds_vctx_t;       /**< opaque virtual-context (vCtx) handle: one tenant's
                                              ordered stream of work */

/** Which device a runtime drives. */
typedef enum ds_device_kind {
    DS_DEVICE_CUDA = 0, /**< the real GPU through libcuda.so.1 (loaded at run time) */
    DS_DEVICE_SIM = 1,  /**< the simulated device (detshare/sim.h), virtual time */
} ds_device_kind;

/** Where a pCtx's SM groups are taken from in the device's split (the split
 *  into groups of minSmPartitionSize SMs, made once at creation). */
typedef enum ds_tier_anchor {
    DS_ANCHOR_LOW = 0,  /**< groups 0, 1, 2, ...: the latency-sensitive side */
    DS_ANCHOR_HIGH = 1, /**< the last groups downward (remainder group first):
                             the complement side */
    DS_ANCHOR_FULL = 2, /**< every group: the whole GPU */
} ds_tier_anchor;

/** One pCtx of the pool, as requested in ds_runtime_config::tiers. */
typedef struct ds_tier_spec {
    uint32_t sm_count;     /**< SMs wanted, 1 to the device's SM count; rounded up
                                to whole groups of the split (logged at INFO), the
                                result shown in ds_runtime_info. Ignored for
                                ::DS_ANCHOR_FULL. */
    ds_tier_anchor anchor; /**< which end of the split the groups come from */
} ds_tier_spec;

struct ds_sim_config; /* detshare/sim.h */

/**
 * Who writes a gate's control word. A gate is a stream wait
 * (cuStreamWaitValue32, "== 0"; CUDA Driver API, "Stream Memory Operations")
 * placed at a kernel boundary of a vCtx's queued work; closing it
 * (ds_vctx_gate_close()) stops that work at its next gate without the host
 * racing the driver (DetShare, section 4.2). The latency from the decision to
 * the gated kernel running is measured by bench/overhead (gate_us_host,
 * gate_us_rck); see docs/results/h200/overhead.json.
 */
typedef enum ds_gate_mode {
    DS_GATES_AUTO = 0, /**< ::DS_GATES_HOST (the faster writer in those
                            measurements); ::DS_GATES_OFF, with a warning, when
                            the driver lacks stream memory operations or host
                            memory mapped into the device, or the pinned words
                            cannot be allocated */
    DS_GATES_HOST = 1, /**< words in pinned host memory mapped into the device, written
                            by the host (the thread that decides) */
    DS_GATES_RCK = 2,  /**< words in device memory, written by the resident control kernel
                            from a host-mapped control block; needs ::DS_RCK_ON */
    DS_GATES_OFF = 3,  /**< no gates: policies bound BE work with windows alone */
} ds_gate_mode;

/** ds_vctx_set_gate_interval() / ds_vctx_stats::gate_interval_us: the vCtx gets no gates. */
#define DS_GATES_NONE 0xffffffffu
/** ds_runtime_config::fault_presume_ms: never presume a fault, wait for the driver. */
#define DS_FAULT_PRESUME_NEVER 0xffffffffu

/**
 * The resident control kernel (RCK; DetShare, section 4.2): one persistent
 * one-thread kernel per runtime, on a green context over the last SM group of
 * the split (a group no ::DS_ANCHOR_LOW tier may include). It mirrors gate
 * words (::DS_GATES_RCK), timestamps gate boundaries with \%globaltimer (two
 * consecutive boundaries around one kernel give that kernel's duration, a
 * profile sample without events) and beats a heartbeat every 100 us that a
 * watchdog reads: a kernel that traps stops it, usually long before the
 * driver reports the fault (ds_runtime_config::heartbeat_timeout_ms,
 * ds_runtime_config::fault_presume_ms).
 *
 * Hazards (measured by tools/devprobe, docs/results/h200/devprobe.jsonl; see
 * docs/device-facts.md):
 *  - while it runs, cuCtxSynchronize / cudaDeviceSynchronize and cuMemFree /
 *    cudaFree of the device's primary context block until the runtime is
 *    destroyed (a persistent kernel is never "done"): enable it only in
 *    processes that synchronize streams or events, never the whole device,
 *    and that free device memory after ds_runtime_destroy();
 *  - it takes a block slot on one SM, which slows kernels that need every SM
 *    (the cost is in the same results);
 *  - it keeps one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS) busy, one
 *    fewer for closed gates (ds_runtime_stats::max_closed_gates).
 */
typedef enum ds_rck_mode {
    DS_RCK_OFF = 0, /**< no RCK (the default) */
    DS_RCK_ON = 1,  /**< start the RCK at ds_runtime_create() */
} ds_rck_mode;

/** Runtime configuration. Initialise with ::DS_RUNTIME_CONFIG_INIT, then set
 *  fields; a zero field takes its default. */
typedef struct ds_runtime_config {
    size_t size;      /**< sizeof(ds_runtime_config) (or ::DS_RUNTIME_CONFIG_SIZE_V1) */
    uint32_t magic;   /**< ::DS_ABI_MAGIC */
    uint32_t version; /**< ::DS_ABI_VERSION */
    ds_device_kind device;            /**< default ::DS_DEVICE_CUDA */
    int device_ordinal;               /**< device ordinal, default 0: ::DS_DEVICE_CUDA, 0 to
                                           the CUDA device count - 1; ::DS_DEVICE_SIM, 0 only
                                           (each runtime has one simulated device) */
    const ds_tier_spec *tiers;        /**< pool layout, num_tiers entries; NULL (with
                                           num_tiers 0) = the default layout: the whole
                                           GPU, then for k = 2, 4 and half the groups a
                                           LOW tier of k groups and its HIGH complement
                                           (on 132 SMs in groups of 8: 132, 16 + 116,
                                           32 + 100, 64 + 68). A whole-GPU pCtx is added
                                           when no tier covers every group. */
    uint32_t num_tiers;               /**< entries in tiers, 1 to ::DS_MAX_PCTX; 0 with NULL tiers */
    uint32_t max_vctx;                /**< vCtxs alive at once, at most 4096; 0 = 64 */
    uint32_t teardown_timeout_ms;     /**< bound (ms, wall-clock time, also on the
                                           simulated device) on waiting for in-flight work
                                           in ds_vctx_destroy() / ds_runtime_destroy() on a
                                           GPU, on a launch held by a policy or at a closed
                                           gate, and on a gate staying closed; 0 =
                                           `DS_TEARDOWN_TIMEOUT_MS` or 10000 */
    const struct ds_sim_config *sim;  /**< ::DS_DEVICE_SIM only; NULL = ::DS_SIM_CONFIG_INIT */
    const char *policy;               /**< name of the active policy at creation
                                           (detshare/policy.h; a built-in, since none other
                                           is registered yet); NULL = "slo_aware" */
    int32_t scheduler_period_us;      /**< period of the scheduler thread's passes (us);
                                           0 = 100; < 0 = no thread (call ds_runtime_poll()) */
    uint32_t ls_sms;                  /**< SMs of the latency-sensitive LOW tier the
                                           built-in policies use (slo_aware, static; half
                                           of it for tpot_first's prefill tier): the LOW
                                           tier nearest in SM count; 0 = 64. While a
                                           latency-sensitive prefill is live, the policy
                                           parameters slo_aware.decode_sms (32) and
                                           tpot_first.prefill_sms (96) set the start
                                           instead */
    uint32_t idle_us;                 /**< slo_aware, tpot_first: LS (decode) idle this long
                                           (us) counts as idle, and BE may expand to the
                                           whole GPU; 0 = each policy's default (slo_aware
                                           0: as soon as LS has nothing in flight;
                                           tpot_first 2000) */
    uint32_t be_window_us;            /**< window (us) the built-in policies give BE work
                                           (slo_aware, tpot_first, balance), and temporal's
                                           slice; 0 = 2000 */
    ds_gate_mode gates;               /**< who writes the gate words; default ::DS_GATES_AUTO */
    ds_rck_mode rck;                  /**< the resident control kernel; default ::DS_RCK_OFF
                                           (read its costs and hazards at ::ds_rck_mode) */
    uint32_t gate_interval_us;        /**< predicted work (us) between two gates of a vCtx
                                           that the built-in policies gate
                                           (ds_vctx_set_gate_interval()); 0 = 100 */
    uint32_t heartbeat_timeout_ms;    /**< ::DS_RCK_ON: an RCK heartbeat missing this long
                                           (ms) is a watchdog event (on_congestion,
                                           ds_runtime_stats::heartbeat_misses); 0 = 10 */
    uint32_t fault_presume_ms;        /**< ::DS_RCK_ON: a heartbeat missing this long (ms)
                                           makes the runtime presume a device fault before
                                           the driver reports it (::DS_ERR_DEVICE_FAULT);
                                           0 = 50; ::DS_FAULT_PRESUME_NEVER = wait for the
                                           driver */
} ds_runtime_config;

/** Size of ds_runtime_config before `gates` (version 1 as first published):
 *  still accepted as ds_runtime_config::size; the newer fields take their
 *  defaults. */
#define DS_RUNTIME_CONFIG_SIZE_V1 offsetof(ds_runtime_config, gates)

/** Initialiser of ::ds_runtime_config: header filled, every other field 0
 *  (its default). */
#define DS_RUNTIME_CONFIG_INIT \
    { .size = sizeof(ds_runtime_config), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, \
      .device = DS_DEVICE_CUDA }

/** Most pCtxs a pool holds. */
#define DS_MAX_PCTX 32
/** Most SM groups a split may produce that the runtime tracks (the remainder
 *  group included; further groups are merged into the remainder). */
#define DS_MAX_GROUPS 64
/** Largest SM count the SM-set bitmaps hold (::ds_pctx_info, ds_pctx_probe_sms(),
 *  detshare/sim.h). */
#define DS_MAX_SMS 256

/**
 * \brief Creates a runtime for one device.
 *
 * Loads the driver (::DS_DEVICE_CUDA: `DS_LIBCUDA`, once per process),
 * retains the device's primary context, reads the SM resource, splits it once
 * into groups of minSmPartitionSize SMs (cuDevSmResourceSplitByCount) and
 * builds the pCtx pool, one green context per tier (CUDA Driver API, "Green
 * Contexts", CUDA 12.4+; streams of a green context need 12.5). The pool is
 * never rebuilt; its layout and build time are in ds_runtime_info. Then it
 * sets up gates (ds_runtime_config::gates), starts the RCK
 * (ds_runtime_config::rck), registers the built-in policies, activates
 * ds_runtime_config::policy and starts the scheduler thread.
 *
 * CUDA_DEVICE_MAX_CONNECTIONS is read, never changed: a warning is logged
 * when it leaves no hardware queue for a closed gate, and ds_vctx_create()
 * warns when the live vCtxs outnumber the queues. Set it in the environment
 * before the process's first CUDA call.
 * \param[in]  config  NULL for defaults, else a ::DS_RUNTIME_CONFIG_INIT-
 *                     initialised ds_runtime_config (read during the call only).
 * \param[out] out     the runtime, on success only.
 * \return ::DS_SUCCESS;
 *  - ::DS_ERR_INVALID_ARGUMENT: out NULL; device not a ::ds_device_kind;
 *    tiers and num_tiers not both set or both 0, or more than ::DS_MAX_PCTX
 *    tiers; a tier with a bad anchor or an sm_count of 0 or above the
 *    device's SMs; ::DS_MAX_PCTX tiers none of which covers the whole GPU;
 *    max_vctx above 4096; gates or rck out of range; ::DS_GATES_RCK without
 *    ::DS_RCK_ON; a ds_sim_config field out of range (detshare/sim.h);
 *    device_ordinal negative, or not 0 on ::DS_DEVICE_SIM;
 *  - ::DS_ERR_ABI_MISMATCH: config's or config->sim's header;
 *  - ::DS_ERR_NO_DRIVER, ::DS_ERR_DRIVER_TOO_OLD: libcuda missing, lacking a
 *    required entry point, or older than 12.5;
 *  - ::DS_ERR_NO_DEVICE: no CUDA device, or device_ordinal not below the CUDA
 *    device count;
 *  - ::DS_ERR_NOT_SUPPORTED: the device has too few SMs to split; gates
 *    ::DS_GATES_HOST or ::DS_GATES_RCK asked for explicitly but the driver
 *    lacks stream memory operations or mapped host memory; ::DS_RCK_ON with
 *    such a driver, or with a ::DS_ANCHOR_LOW tier that includes the last
 *    SM group;
 *  - ::DS_ERR_NOT_FOUND: config->policy names no registered policy;
 *  - ::DS_ERR_LIMIT: ::DS_DEVICE_SIM with 64 simulated devices alive;
 *  - ::DS_ERR_DRIVER: a driver call failed (cuInit, context, split, green
 *    context, stream, the pinned gate words of an explicit ::DS_GATES_HOST,
 *    the RCK's launch);
 *  - ::DS_ERR_OUT_OF_MEMORY: host memory, the scheduler thread, or a built-in
 *    policy's state.
 *
 * On failure everything created so far is released.
 * \note Thread-safe: any thread may create runtimes.
 */
DS_API ds_status ds_runtime_create(const ds_runtime_config *config, ds_runtime_t *out);

/**
 * \brief Destroys a runtime and every vCtx still alive in it.
 *
 * Stops the scheduler thread, opens every closed gate, destroys the remaining
 * vCtxs (waiting up to the teardown timeout for their work, freeing their
 * allocations and cancelling their copies not yet started), stops the copy
 * thread and the RCK, calls every registered policy's fini, destroys the
 * pool's streams and green contexts, and releases the primary context.
 * Handles of the runtime and its vCtxs become invalid; later calls with them
 * return ::DS_ERR_INVALID_HANDLE.
 * \param[in] rt  the runtime.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_TIMEOUT if some
 *         vCtx's work was still running at the deadline (it was still torn
 *         down; the driver finishes that work and frees its streams
 *         afterwards); ::DS_ERR_DRIVER if a vCtx's work failed with a
 *         non-sticky error (torn down anyway); ::DS_ERR_DEVICE_FAULT if the
 *         context had faulted (torn down anyway, without waiting). The first
 *         such status of the vCtxs is returned.
 * \note Not concurrently with any other call on this runtime or its vCtxs.
 */
DS_API ds_status ds_runtime_destroy(ds_runtime_t rt);

/** One pCtx as seen by ds_runtime_info_get() and ds_view_pctx(). */
typedef struct ds_pctx_info {
    uint32_t index;        /**< pool index: what ds_vctx_remap() takes */
    uint32_t sm_count;     /**< SMs in this pCtx */
    ds_tier_anchor anchor; /**< end of the split its groups come from */
    uint64_t group_mask;   /**< bit g set: split group g belongs to this pCtx */
    int32_t complement;    /**< index of the pCtx whose groups are exactly the
                                others (disjoint, covering the rest), or -1 */
} ds_pctx_info;

/** What the runtime is running on (ds_runtime_info_get()). */
typedef struct ds_runtime_info {
    size_t size; /**< sizeof(ds_runtime_info) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    ds_device_kind device;         /**< the device kind the runtime drives */
    char device_name[256];         /**< cuDeviceGetName; "Simulated GPU (N SMs)" on
                                        the simulated device */
    int driver_version;            /**< cuDriverGetVersion, e.g. 13000 for CUDA 13.0; 0 on
                                        the simulated device */
    int compute_capability;        /**< major*10+minor; 0 on the simulated device */
    uint32_t sm_count;             /**< SMs of the device */
    uint32_t min_partition_sms;    /**< minSmPartitionSize: SMs per group of the split */
    uint32_t sm_alignment;         /**< smCoscheduledAlignment */
    uint32_t num_groups;           /**< groups from the one split (remainder included) */
    uint32_t group_sm_count[DS_MAX_GROUPS]; /**< SMs of each group, num_groups entries */
    uint32_t num_pctx;             /**< pCtxs in the pool */
    ds_pctx_info pctx[DS_MAX_PCTX]; /**< the pool, num_pctx entries, by index */
    double pool_build_ms;          /**< wall time (ms) to split and build the pool */
    uint32_t max_connections;      /**< CUDA_DEVICE_MAX_CONNECTIONS in force (8 if unset) */
    uint32_t connections_needed;   /**< streams that may be blocked or long-queued at
                                        once now: the runtime's own stream, the RCK's,
                                        one per live vCtx */
    int stream_priority_least;     /**< device's stream-priority range: least urgent (e.g. 0) */
    int stream_priority_greatest;  /**< most urgent (e.g. -5) */
    char local_cpus[256];          /**< CPUs local to the GPU (hwloc list syntax, "0-15");
                                        "?" if hwloc could not tell */
    int numa_node;                 /**< NUMA node local to the GPU, -1 if unknown */
} ds_runtime_info;

/** Initialiser of ::ds_runtime_info (header filled). */
#define DS_RUNTIME_INFO_INIT { .size = sizeof(ds_runtime_info), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * \brief Describes the device and the pool.
 * \param[in]  rt    the runtime.
 * \param[out] info  a ::DS_RUNTIME_INFO_INIT-initialised struct, filled.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (info NULL); ::DS_ERR_ABI_MISMATCH (info's header).
 * \note Thread-safe; takes the runtime's lock briefly.
 */
DS_API ds_status ds_runtime_info_get(ds_runtime_t rt, ds_runtime_info *info);

/**
 * \brief Measures which SMs a pCtx's kernels actually run on.
 *
 * Launches the embedded probe kernel (it reads \%smid) on a private stream of
 * the pCtx, 8 blocks of 32 threads per SM of the pCtx, each spinning 20 us,
 * waits for it and returns the set of SM ids its blocks ran on. The simulated
 * device implements the same kernel.
 * \param[in]  rt          the runtime.
 * \param[in]  pctx_index  pool index, below ds_runtime_info::num_pctx.
 * \param[out] sm_bitmap   ::DS_MAX_SMS / 64 words; bit s (word s / 64, bit
 *                         s % 64) set if SM s ran a block.
 * \param[out] count       number of distinct SMs seen.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (pctx_index out of range, NULL outputs); ::DS_ERR_DRIVER (loading
 *         the probe, its stream, launch, wait or copy failed).
 * \note Thread-safe; blocks the calling thread until the probe finishes and
 *       holds the runtime's lock meanwhile (ds_vctx_create() waits). The
 *       first call loads the embedded module and allocates 32 bytes of
 *       device memory, kept until ds_runtime_destroy().
 */
DS_API ds_status ds_pctx_probe_sms(ds_runtime_t rt, uint32_t pctx_index,
                                   uint64_t sm_bitmap[DS_MAX_SMS / 64], uint32_t *count);

/** \} */

/* ------------------------------------------------------------------------ */
/* Virtual contexts                                                          */
/* ------------------------------------------------------------------------ */

/**
 * \defgroup ds_vctx_group Virtual contexts, launches and sections
 * \brief Creating vCtxs, launching on them, sections, remaps, waiting.
 * \{
 */

/** What a kernel is part of, for policies (detshare/policy.h; tpot_first). */
typedef enum ds_phase {
    DS_PHASE_NONE = 0,    /**< not an LLM phase, or unknown */
    DS_PHASE_PREFILL = 1, /**< LLM prefill (time to first token) */
    DS_PHASE_DECODE = 2,  /**< LLM decode (time per output token) */
} ds_phase;

/** Service class of a vCtx, for policies. */
typedef enum ds_vctx_class {
    DS_CLASS_BEST_EFFORT = 0,       /**< throughput work (training) */
    DS_CLASS_LATENCY_SENSITIVE = 1, /**< work with an SLO (inference) */
} ds_vctx_class;

/** Attributes of a new vCtx (ds_vctx_create()). Initialise with
 *  ::DS_VCTX_ATTR_INIT, then set fields. */
typedef struct ds_vctx_attr {
    size_t size; /**< sizeof(ds_vctx_attr) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    const char *name;          /**< copied (up to 63 bytes kept); NULL = "vctx<N>", N the
                                    runtime's creation count */
    ds_vctx_class cls;         /**< default ::DS_CLASS_BEST_EFFORT */
    int priority;              /**< 0 = normal; > 0 more urgent: the vCtx's streams get
                                    stream priority least - priority, clamped to the
                                    device's range (ds_runtime_info) */
    uint32_t slo_us;           /**< latency objective per request/kernel in us; 0 = none.
                                    An LS vCtx whose predicted work in flight exceeds it
                                    raises on_congestion (detshare/policy.h) */
    uint32_t weight;           /**< share weight, >= 1; 0 means 1. Weights the vCtx's
                                    ds_memcpy_async() chunks on the link; policies see
                                    it in ds_vctx_view */
    int32_t initial_pctx;      /**< pool index to bind first; -1 = the whole-GPU pCtx.
                                    The active policy may place it elsewhere. */
    ds_phase phase;            /**< LLM phase of the vCtx's work (tpot_first), default none */
    /* ds_vctx_attr grew here (::DS_VCTX_ATTR_SIZE_V1 is the size before). */
    const char *group;         /**< NULL: no group. Else the name (1 to
                                    ::DS_VCTX_GROUP_NAME_MAX characters of A-Z a-z 0-9
                                    _ - .) of the vCtx group this vCtx is a rank of: the
                                    ranks of one job on several GPUs, one vCtx per rank,
                                    each of its own runtime (see \ref ds_groups) */
    uint32_t group_ranks;      /**< ranks in the group, 2 to ::DS_VCTX_GROUP_MAX_RANKS;
                                    every rank gives the same */
    uint32_t group_rank;       /**< this vCtx's rank, 0 to group_ranks - 1; rank 0's
                                    policy decides where every rank's units run */
    uint32_t group_flags;      /**< 0: the group's ranks are in this process;
                                    ::DS_VCTX_GROUP_SHARED: in processes of this host */
} ds_vctx_attr;

/** Size of ::ds_vctx_attr before `group`: still accepted, as no group. */
#define DS_VCTX_ATTR_SIZE_V1 offsetof(ds_vctx_attr, group)
/** Longest vCtx group name (ds_vctx_attr::group), in characters. */
#define DS_VCTX_GROUP_NAME_MAX 47u
/** Most ranks in a vCtx group. */
#define DS_VCTX_GROUP_MAX_RANKS 64u
/** ds_vctx_attr::group_flags: the group spans the processes of one host,
 *  through a POSIX shared-memory object named `/detshare.vgroup.<group>`
 *  (shm_open(3)), made by its first rank and removed by its last. */
#define DS_VCTX_GROUP_SHARED 1u

/** Initialiser of ::ds_vctx_attr: best effort, weight 1, the whole GPU. */
#define DS_VCTX_ATTR_INIT \
    { .size = sizeof(ds_vctx_attr), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, \
      .cls = DS_CLASS_BEST_EFFORT, .weight = 1, .initial_pctx = -1 }

/**
 * \brief Creates a vCtx.
 *
 * Binds it to attr->initial_pctx, calls the active policy's on_vctx_create
 * (where the built-in policies place it), then creates its first stream
 * (non-blocking, at its stream priority) in the pCtx it was placed on, plus
 * the events it uses for remap hand-offs and timing. A stream in another pCtx (or the urgent stream)
 * is created the first time the vCtx is bound there. Logs a warning when the
 * live vCtxs plus the runtime's stream outnumber CUDA_DEVICE_MAX_CONNECTIONS.
 * \param[in]  rt    the runtime.
 * \param[in]  attr  NULL for ::DS_VCTX_ATTR_INIT, else an initialised
 *                   ds_vctx_attr (read during the call only).
 * \param[out] out   the vCtx, on success only.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE (rt); ::DS_ERR_ABI_MISMATCH
 *         (attr's header); ::DS_ERR_INVALID_ARGUMENT (out NULL; cls, phase or
 *         initial_pctx out of range; group's name, group_ranks,
 *         group_rank or group_flags out of range; group_ranks unlike the
 *         group's; a shared group's object of another size);
 *         ::DS_ERR_LIMIT (max_vctx vCtxs alive);
 *         ::DS_ERR_DRIVER (event or stream creation failed);
 *         ::DS_ERR_OUT_OF_MEMORY; with a group: ::DS_ERR_ALREADY_EXISTS (that
 *         rank has joined), ::DS_ERR_PEER_LOST (the group lost a rank and
 *         others are still in it), ::DS_ERR_NOT_SUPPORTED (shm_open failed),
 *         ::DS_ERR_TIMEOUT (a shared group's creator never initialised it).
 * \note Thread-safe: any thread, concurrently with other calls on the runtime
 *       (but not with ds_runtime_destroy()). The calling thread becomes the vCtx's owner; ownership may be handed
 *       to another thread between calls.
 */
DS_API ds_status ds_vctx_create(ds_runtime_t rt, const ds_vctx_attr *attr, ds_vctx_t *out);

/**
 * \brief Destroys a vCtx.
 *
 * Closes an open section (logged), calls the policy's on_vctx_destroy, opens
 * its gate, waits up to the runtime's teardown timeout for its work, cancels
 * its copies not done, frees its remaining ds_mem_alloc() allocations
 * (logged), then destroys its streams and events.
 * \param[in] vctx  the vCtx; invalid afterwards, whatever the status.
 * \return ::DS_SUCCESS (all work finished); ::DS_ERR_INVALID_HANDLE;
 *         ::DS_ERR_TIMEOUT (work still running at the deadline: logged with
 *         the vCtx's name; the vCtx is destroyed anyway, the driver completes
 *         the work); ::DS_ERR_DRIVER (its work failed with a non-sticky error;
 *         destroyed anyway); ::DS_ERR_DEVICE_FAULT (the context had faulted;
 *         destroyed anyway, without waiting).
 * \note Owner thread; not concurrently with any other call on this vCtx
 *       (memory calls included). Safe against calls on other vCtxs.
 */
DS_API ds_status ds_vctx_destroy(ds_vctx_t vctx);

/** Grid or block dimensions, as cuLaunchKernel takes them. */
typedef struct ds_dim3 { uint32_t x, /**< x extent, >= 1 */ y, /**< y extent, >= 1 */ z; /**< z extent, >= 1 */ } ds_dim3;

/** Optional per-launch hints; NULL is fine. They never alter the launch. */
typedef struct ds_launch_hints {
    size_t size; /**< sizeof(ds_launch_hints) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    uint32_t expected_us; /**< caller's estimate of the kernel's duration in us, 0 = unknown;
                               used as its prediction (windows, gates, policies) while
                               the profile has no sample of it on the vCtx's pCtx */
    ds_phase phase;       /**< LLM phase of this kernel, passed to the policy as
                               ds_launch_event::phase */
} ds_launch_hints;

/** Initialiser of ::ds_launch_hints (no estimate, no phase). */
#define DS_LAUNCH_HINTS_INIT \
    { .size = sizeof(ds_launch_hints), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, .phase = DS_PHASE_NONE }

/**
 * \brief Launches a kernel on the vCtx, exactly as given.
 *
 * Launches on the stream of the vCtx's bound pCtx, on the calling thread,
 * with exactly the given function, grid, block, shared memory and parameters
 * (nothing is sliced, padded or reordered: docs/design.md, invariant 1). In
 * order:
 *  1. the active policy's on_launch decides: launch here, remap first, or
 *     hold (the thread waits and asks again);
 *  2. if the vCtx's gate is closed, the thread waits until it opens;
 *  3. a remap requested with ds_vctx_remap() or by the policy takes effect,
 *     before this kernel, with an event hand-off that keeps program order (if
 *     the hand-off fails, the remap is dropped, logged, and the kernel runs
 *     where the vCtx was);
 *  4. with a window (ds_vctx_set_window()), the thread waits while the
 *     predicted work in flight plus this kernel's would exceed it;
 *  5. a gate is placed if one is due (ds_vctx_set_gate_interval()), then a
 *     timing event if this launch is timed (see ::ds_vctx_stats), then the
 *     kernel (cuLaunchKernel).
 * \param[in] vctx              the vCtx (owned by the calling thread).
 * \param[in] f                 kernel, loaded in the device's primary context
 *                              (cuModuleGetFunction) or a CUkernel cast to
 *                              CUfunction; on the simulated device, from
 *                              ds_sim_kernel_create().
 * \param[in] grid              grid dimensions, each >= 1 and within the
 *                              device's limits.
 * \param[in] block             block dimensions, each >= 1, within the
 *                              device's limits and its threads per block.
 * \param[in] shared_mem_bytes  dynamic shared memory in bytes, at most the
 *                              device's opt-in maximum per block (above 48 KiB
 *                              the kernel must allow it with cuFuncSetAttribute).
 * \param[in] params            as cuLaunchKernel's kernelParams (`extra` is not
 *                              supported); NULL for a kernel without parameters.
 * \param[in] hints             NULL or ::DS_LAUNCH_HINTS_INIT-initialised.
 * \return ::DS_SUCCESS (queued); ::DS_ERR_INVALID_HANDLE;
 *         ::DS_ERR_INVALID_ARGUMENT (f NULL); ::DS_ERR_ABI_MISMATCH (hints'
 *         header); ::DS_ERR_INVALID_LAUNCH (zero or oversized dimensions or
 *         shared memory, or the driver returned CUDA_ERROR_INVALID_VALUE);
 *         ::DS_ERR_DRIVER (the driver refused otherwise; detail in
 *         ds_last_error_message()); ::DS_ERR_TIMEOUT (the policy held it
 *         longer than the teardown timeout, or it waited at the vCtx's closed
 *         gate longer than that and the runtime reopened the gate: either way
 *         the kernel was NOT launched, launch it again; in a vCtx group, also
 *         a wait for another rank, see \ref ds_groups); ::DS_ERR_PEER_LOST
 *         (vCtx group: a rank this launch needs has left or died; not
 *         launched); ::DS_ERR_DEVICE_FAULT
 *         (the context faulted, see \ref ds_faults "Device faults").
 * \note Owner thread. Hot path: no lock, no allocation, no system call besides
 *       the driver's (docs/design.md, invariant 3), and no blocking except
 *       where the policy, the window or a closed gate says so, or, for a
 *       rank of a vCtx group, where another rank is behind (it then yields
 *       and sleeps, in wall time). Two exceptions: the first launch bound to a pCtx (or urgency) the vCtx
 *       has not used yet creates its stream there, and a timed launch while
 *       the vCtx has allocations scans the parameters under the vCtx's memory
 *       lock (ds_mem_stats::working_set_bytes). Makes the device's primary
 *       context current on the calling thread if another context is current.
 */
DS_API ds_status ds_launch(ds_vctx_t vctx, CUfunction f, ds_dim3 grid, ds_dim3 block,
                           uint32_t shared_mem_bytes, void **params,
                           const ds_launch_hints *hints);

/**
 * \brief Opens a section: the vCtx's current stream, for work that does not
 *        go through ds_launch() (cuBLAS, PyTorch, copies).
 *
 * A section is one unit for the policy (on_launch with
 * ds_launch_event::is_section set, predicted from the vCtx's own past
 * sections), the gate, remaps and timing: the policy's decision, a closed
 * gate, a pending remap and a due gate are handled here as in ds_launch()
 * (the window is not waited for), and every section is timed from here to
 * ds_vctx_release_stream() when a mark slot is free. Work on the stream is ordered with the vCtx's ds_launch()
 * work before and after the section. No remap happens while the section is
 * open (requests wait for the next boundary).
 * \param[in]  vctx    the vCtx (owned by the calling thread).
 * \param[out] stream  the stream, valid until ds_vctx_release_stream(); do not
 *                     destroy it or keep using it after the release.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (stream NULL); ::DS_ERR_BUSY (a section is already open);
 *         ::DS_ERR_TIMEOUT (held by the policy, or waited at the closed gate,
 *         longer than the teardown timeout, or a vCtx group's wait; no
 *         section was opened); ::DS_ERR_PEER_LOST (vCtx group, as in
 *         ds_launch()); ::DS_ERR_DEVICE_FAULT.
 * \note Owner thread.
 */
DS_API ds_status ds_vctx_acquire_stream(ds_vctx_t vctx, CUstream *stream);

/**
 * \brief Closes the open section.
 *
 * Records the section's end (its timing mark), counts its predicted duration
 * as submitted work, and lets pending remaps take effect at the next boundary.
 * \param[in] vctx  the vCtx (owned by the calling thread).
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_BUSY (no section
 *         open); ::DS_ERR_DEVICE_FAULT (the section is closed, but its work
 *         is lost).
 * \note Owner thread.
 */
DS_API ds_status ds_vctx_release_stream(ds_vctx_t vctx);

/**
 * \brief Requests that the vCtx move to another pCtx.
 *
 * Takes effect at the vCtx's next kernel boundary on its owner thread (its
 * next ds_launch(), ds_vctx_acquire_stream() or ds_vctx_synchronize(), not
 * while a section is open): the new stream waits on an event recorded on the
 * old one, so program order holds (docs/design.md, invariant 2). Never changes
 * a launch. A later request, or the active policy (on_launch returning
 * ::DS_DISPATCH_REMAP, or its own placement), replaces an unapplied one; under
 * any policy but "manual" the policy may move the vCtx again. The urgency
 * half of the binding (ds_vctx_set_urgent()) is kept.
 * \param[in] vctx        the vCtx.
 * \param[in] pctx_index  pool index, below ds_runtime_info::num_pctx.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (index out of range); ::DS_ERR_DEVICE_FAULT.
 * \note Thread-safe: any thread may call it (a scheduler, a policy hook);
 *       non-blocking.
 */
DS_API ds_status ds_vctx_remap(ds_vctx_t vctx, uint32_t pctx_index);

/**
 * \brief pCtx the vCtx's work goes to now.
 * \param[in]  vctx        the vCtx.
 * \param[out] pctx_index  pool index of its bound pCtx. A remap requested but
 *                         not yet applied at a kernel boundary is not shown.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (pctx_index NULL).
 * \note Thread-safe (a relaxed read).
 */
DS_API ds_status ds_vctx_get_pctx(ds_vctx_t vctx, uint32_t *pctx_index);

/**
 * \brief Waits for all of the vCtx's work.
 *
 * Applies a pending remap first unless a section is open, then waits on the
 * current stream (cuStreamSynchronize). Earlier streams are chained into the
 * current one by the remap hand-offs, and copies by their gates, so this
 * covers everything the vCtx ever submitted (ds_launch(), sections,
 * ds_memcpy_async()). Finished work is then accounted (statistics,
 * on_completion).
 * \param[in] vctx  the vCtx (owned by the calling thread).
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_DRIVER (a kernel
 *         failed with a non-sticky error; detail in ds_last_error_message());
 *         ::DS_ERR_DEVICE_FAULT.
 * \note Owner thread. Blocks until the work is done: work queued behind the
 *       vCtx's closed gate waits until the gate opens (ds_vctx_gate_open(),
 *       the policy, or the scheduler pass reopening it after the teardown
 *       timeout; without a scheduler thread, only another thread's
 *       ds_vctx_gate_open() or ds_runtime_poll() can).
 */
DS_API ds_status ds_vctx_synchronize(ds_vctx_t vctx);

/** \} */

/**
 * \defgroup ds_graph_group CUDA graphs that follow their vCtx
 * \brief A graph captured once per pCtx and launched as one unit.
 *
 * A CUDA graph runs in the context its kernel nodes were captured in,
 * whatever stream launches it (measured on an H100 and an H200:
 * docs/device-facts.md, "CUDA graphs and green contexts"). A graph replayed
 * on a vCtx's stream, inside a section or not, therefore keeps the SMs of the
 * pCtx it was captured on after the vCtx is remapped: a best-effort graph
 * captured on the whole GPU keeps all SMs after its vCtx is confined. A
 * ds_graph_t holds one instantiation per pCtx instead, made by calling the
 * caller's capture function on a stream of that pCtx, and ds_graph_launch()
 * launches the instantiation of the pCtx the vCtx is bound to. Every
 * instantiation has the same nodes, kernels and launch configurations
 * (checked), so a graph's output never depends on where it ran
 * (docs/design.md, invariant 1).
 *
 * A graph belongs to the vCtx that created it: its launches are ordered by
 * that vCtx's program order across remaps (hand-off events), which also keeps
 * the instantiations, whose kernels share the buffers the capture function
 * used, from running concurrently.
 *
 * <b>Segments.</b> A step may be cut into segments, each launched as its own
 * unit (the policy's decision, remap, window, gate and profile apply per
 * segment), so that a long step can be moved, gated or windowed between its
 * pieces as a kernel stream can. Cuts come from two sources:
 *  - pieces: ds_graph_cut() called by the capture function, or the graphs of
 *    ds_graph_from_cuda_graphs() (a piecewise CUDA graph: SGLang's, vLLM's,
 *    PyTorch's CUDAGraphSequence), each piece at least one segment;
 *  - automatic cuts (ds_graph_attr::segment_us): the first launch runs the
 *    step once as its finest segments (every place the DAG can be cut, see
 *    below), times each with events, and waits for it; the cuts then group
 *    consecutive ones into segments whose measured time is at most
 *    segment_us (a single node longer than that is a segment of its own).
 *    The bound is meant for the largest pCtx of the set, where a
 *    best-effort step shares the SMs of latency-sensitive work and must
 *    yield within a segment: launch the graph first there; measured on
 *    fewer SMs the segments come out shorter than needed (an upper bound of
 *    their time on more), and on smaller pCtxs they take longer than the
 *    bound in proportion. Every pCtx's segments are then instantiated.
 *    Segment durations after that are measured per segment and pCtx like
 *    any unit's (ds_graph_get_segment()).
 * A cut is placed only where the captured DAG narrows to one node: every node
 * before it reaches that node, so the segments run in order without losing
 * concurrency inside a fork; a graph that never narrows (independent streams
 * for the whole step) or that allocates or frees memory inside (memory nodes)
 * stays one segment per piece, said in ds_graph_stats::uncut. Segments keep
 * every node, kernel and launch configuration: a segmented step computes the
 * same bits as the whole one.
 * \{
 */

/** A graph with one instantiation per pCtx (ds_graph_create()). */
typedef struct ds_graph *ds_graph_t;

/**
 * The capture function of ds_graph_create(): enqueues one step's work on
 * `stream`, which is being captured (cuStreamBeginCapture, thread-local
 * mode), in the green context of the pCtx being instantiated; that context
 * is current on the calling thread during the call. `stream` is the vCtx's
 * capture stream for that pCtx: the same stream for every capture of the
 * vCtx there, kept until the vCtx is destroyed (libraries that key state by
 * stream, such as PyTorch's allocator and cuBLAS workspaces, see one stream
 * per pCtx).
 *
 * It must enqueue the same work every time it is called (the runtime checks
 * nodes, kernels and launch configurations), on `stream` or on streams forked
 * from it through events (their kernels must also run in `stream`'s context),
 * must follow CUDA's capture rules (no synchronization of the device or of a
 * capturing stream; an allocation only where the capture mode allows it, as
 * PyTorch's allocator does by switching the thread to relaxed mode), and must
 * not call any ds_ function on the graph's vCtx. Kernel arguments are
 * captured by value: the buffers they point to are shared by every
 * instantiation and must live as long as the graph.
 * \param[in] stream  the capturing stream.
 * \param[in] user    ds_graph_create()'s `user`.
 * \return 0 on success; anything else fails the capture (the value is logged).
 */
typedef int (*ds_graph_capture_fn)(CUstream stream, void *user);

/** ds_graph_attr::flags: instantiate on every pCtx of the graph's set in
 *  ds_graph_create() (default: at the first launch on each pCtx). */
#define DS_GRAPH_EAGER 1u

/** Graph attributes (ds_graph_create(), ds_graph_from_cuda_graph()). */
typedef struct ds_graph_attr {
    size_t size;            /**< sizeof(ds_graph_attr) */
    uint32_t magic;         /**< ::DS_ABI_MAGIC */
    uint32_t version;       /**< ::DS_ABI_VERSION */
    const char *name;       /**< for logs and errors (copied); NULL: "graph" */
    uint32_t flags;         /**< ::DS_GRAPH_EAGER or 0 */
    const uint32_t *pctxs;  /**< the pool indices the graph may run on (copied);
                                 NULL: every pCtx of the pool. A launch while the
                                 vCtx is bound elsewhere fails with
                                 ::DS_ERR_NOT_FOUND */
    uint32_t num_pctxs;     /**< entries in pctxs (0 with NULL) */
    uint32_t segment_us;    /**< automatic cuts: the bound (us) on a segment's
                                 duration on the largest pCtx of the set (see
                                 the group's Segments); 0 (default): no
                                 automatic cuts, a segment per piece (see
                                 ds_graph_cut()); else ::DS_GRAPH_SEGMENT_MIN_US
                                 to ::DS_GRAPH_SEGMENT_MAX_US */
} ds_graph_attr;

/** Size of ::ds_graph_attr before `segment_us`: still accepted, as segment_us 0. */
#define DS_GRAPH_ATTR_SIZE_V1 offsetof(ds_graph_attr, segment_us)
/** Smallest nonzero ds_graph_attr::segment_us (us): below it a segment's
 *  launch (about 5 us of host and device time) would not be small beside it. */
#define DS_GRAPH_SEGMENT_MIN_US 100u
/** Largest ds_graph_attr::segment_us (us): 10 s. */
#define DS_GRAPH_SEGMENT_MAX_US 10000000u
/** Most segments one graph may have. */
#define DS_GRAPH_MAX_SEGMENTS 4096u

/** Initialiser of ::ds_graph_attr (header filled, lazy, whole pool). */
#define DS_GRAPH_ATTR_INIT { .size = sizeof(ds_graph_attr), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * \brief Makes a graph of the vCtx by capture, one instantiation per pCtx.
 *
 * For each pCtx of the graph's set (all of them now with ::DS_GRAPH_EAGER,
 * else each at the first ds_graph_launch() bound there), the runtime makes
 * the pCtx's green context current, begins a thread-local capture on the
 * vCtx's capture stream of that pCtx (created at its first capture), calls
 * `fn(stream, user)`, ends the capture, restores the calling thread's current
 * context, and instantiates the graph and uploads it (cuGraphUpload). The first
 * instantiation is the reference: every later one must have the same number
 * of nodes, in capture order, of the same types, and every kernel node the
 * same kernel (the same CUkernel, CUfunction or function name), grid, block
 * and dynamic shared memory; every kernel node must run in the pCtx's own
 * context.
 * \param[in]  vctx  the vCtx that will launch it (owned by the calling thread).
 * \param[in]  fn    the capture function (see ::ds_graph_capture_fn); kept and
 *                   called again for lazy instantiations until
 *                   ds_graph_destroy().
 * \param[in]  user  passed to fn; must stay valid as long as fn may be called.
 * \param[in]  attr  a ::DS_GRAPH_ATTR_INIT-initialised struct, or NULL for the
 *                   defaults.
 * \param[out] out   the graph, written on success only.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE (vctx); ::DS_ERR_INVALID_ARGUMENT
 *         (fn or out NULL, a pCtx index out of range or repeated, pctxs and
 *         num_pctxs not both set or both 0, unknown flags);
 *         ::DS_ERR_ABI_MISMATCH (attr's header); ::DS_ERR_CAPTURE (with ::DS_GRAPH_EAGER: fn returned nonzero, the
 *         capture was invalidated, captured no work, captured work in another
 *         context, or captured different work on different pCtxs);
 *         ::DS_ERR_NOT_SUPPORTED (the driver has no graph API);
 *         ::DS_ERR_OUT_OF_MEMORY; ::DS_ERR_DRIVER; ::DS_ERR_DEVICE_FAULT. On
 *         failure nothing is left behind: every instantiation made so far is
 *         destroyed.
 * \note Owner thread. Blocks for the captures and instantiations (about a
 *       millisecond per pCtx per hundred nodes; ds_graph_get_stats()).
 */
DS_API ds_status ds_graph_create(ds_vctx_t vctx, ds_graph_capture_fn fn, void *user,
                                 const ds_graph_attr *attr, ds_graph_t *out);

/**
 * \brief Makes a graph of the vCtx from a graph the application captured
 *        (e.g. PyTorch's `CUDAGraph.raw_cuda_graph()`), one instantiation
 *        per pCtx, all made now.
 *
 * A kernel node can be moved to another context only when it names its
 * kernel as a CUkernel (launches through the CUDA runtime, cuBLAS, PyTorch,
 * or cuLibraryGetKernel) and not only as a CUfunction from cuModuleGetFunction:
 * the driver honours CUDA_KERNEL_NODE_PARAMS::ctx only with `func` NULL and
 * `kern` set (cuda.h, CUDA 13.0; measured on an H200: docs/device-facts.md).
 * For each pCtx the runtime sets every kernel node's context to the pCtx's,
 * instantiates, uploads, and finally restores the nodes' original kernels
 * and contexts: `graph` is borrowed during the call, left as it was, and may
 * be destroyed by the caller afterwards; the memory its kernels use (for
 * PyTorch, the graph's memory pool: keep the CUDAGraph object) must live as
 * long as the returned graph. Node types other than kernel, memset,
 * memcpy, host, empty, event record/wait and memory alloc/free (a child graph,
 * a conditional node) are refused.
 * \param[in]  vctx   the vCtx that will launch it (owned by the calling thread).
 * \param[in]  graph  the graph; not modified when the call returns.
 * \param[in]  attr   as for ds_graph_create() (::DS_GRAPH_EAGER implied), or NULL.
 * \param[out] out    the graph, written on success only.
 * \return as ds_graph_create(), and ::DS_ERR_NOT_SUPPORTED when a kernel
 *         node has no CUkernel (a cuModuleGetFunction kernel) or a node's type
 *         is refused: the message says to capture through ds_graph_create()
 *         instead; ::DS_ERR_INVALID_ARGUMENT (graph NULL or has no node).
 * \note Owner thread. Do not use `graph` from another thread during the call.
 */
DS_API ds_status ds_graph_from_cuda_graph(ds_vctx_t vctx, CUgraph graph, const ds_graph_attr *attr,
                                          ds_graph_t *out);

/**
 * \brief Makes one graph of the vCtx from a sequence of graphs that together
 *        form one step (a piecewise CUDA graph: SGLang's piecewise runner,
 *        vLLM's piecewise backend, PyTorch's CUDAGraphSequence), each graph a
 *        piece: at least one segment, launched in the order given.
 *
 * As ds_graph_from_cuda_graph() for each piece (kernel nodes re-bound per
 * pCtx through their CUkernel, the caller's graphs left as they were); with
 * ds_graph_attr::segment_us, pieces are further cut by measurement.
 * \param[in]  vctx    the vCtx that will launch it (owned by the calling thread).
 * \param[in]  graphs  the pieces in launch order (borrowed during the call).
 * \param[in]  count   pieces, 1 to ::DS_GRAPH_MAX_SEGMENTS.
 * \param[in]  attr    as for ds_graph_create() (::DS_GRAPH_EAGER implied), or NULL.
 * \param[out] out     the graph, written on success only.
 * \return as ds_graph_from_cuda_graph(); ::DS_ERR_INVALID_ARGUMENT (graphs NULL,
 *         an entry NULL or with no node, count 0 or over the limit).
 * \note Owner thread.
 */
DS_API ds_status ds_graph_from_cuda_graphs(ds_vctx_t vctx, const CUgraph *graphs, uint32_t count,
                                           const ds_graph_attr *attr, ds_graph_t *out);

/**
 * \brief Inside a capture function: ends the current piece of the step here;
 *        the work enqueued after it starts the next one.
 *
 * Ends the capture of `stream`, keeps what it captured as a piece, and
 * begins a new capture on `stream` (the same mode). Every stream forked from
 * `stream` must have been joined back into it before (else CUDA refuses to
 * end the capture). A cut at the very start, or right after another cut,
 * makes no empty piece.
 * \param[in] stream  the stream the capture function was handed.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_ARGUMENT (not called from a capture
 *         function of ds_graph_create() on this thread, or on another stream);
 *         ::DS_ERR_CAPTURE (ending or beginning the capture failed: the
 *         capture fails, and the capture function should return nonzero);
 *         ::DS_ERR_OUT_OF_MEMORY.
 * \note The thread running the capture function.
 */
DS_API ds_status ds_graph_cut(CUstream stream);

/**
 * \brief Launches the graph on its vCtx: one unit, like a kernel.
 *
 * The active policy sees it in on_launch (ds_launch_event::graph set, its
 * own profile key, the prediction learned from its timed launches); a policy
 * hold, a closed gate, a pending remap, the window and gate placement apply
 * as for ds_launch(), then the instantiation of the pCtx the vCtx is bound to
 * is launched (cuGraphLaunch) on the vCtx's stream, made first if the graph
 * is lazy and has none there (the capture function runs on this thread).
 * Program order with the vCtx's other work holds across remaps. Inside an open
 * section the graph goes to the section's stream, like a ds_launch() there.
 * \param[in] vctx  the vCtx that created the graph (owned by the calling thread).
 * \param[in] graph the graph.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE (vctx, or graph NULL or
 *         destroyed); ::DS_ERR_INVALID_ARGUMENT (the graph belongs to another
 *         vCtx or another runtime); ::DS_ERR_NOT_FOUND (the vCtx is bound to a pCtx outside the
 *         graph's set; nothing was launched); ::DS_ERR_CAPTURE (a lazy
 *         instantiation failed as in ds_graph_create(); nothing was launched,
 *         and the next launch there tries again); ::DS_ERR_TIMEOUT (held by
 *         the policy or its gate longer than the teardown timeout, or a vCtx
 *         group's wait); ::DS_ERR_PEER_LOST (vCtx group, as in ds_launch();
 *         a step's later segments are launched anyway, logged);
 *         ::DS_ERR_OUT_OF_MEMORY; ::DS_ERR_DRIVER; ::DS_ERR_DEVICE_FAULT.
 * \note Owner thread. Lock-free and allocation-free once the pCtx's
 *       instantiation exists (the same path as ds_launch()).
 */
DS_API ds_status ds_graph_launch(ds_vctx_t vctx, ds_graph_t graph);

/**
 * \brief Destroys the graph's instantiations and the graph.
 *
 * Refused while work the graph's vCtx submitted is still running (the
 * graph's launches may be among it): synchronize the vCtx first
 * (ds_vctx_synchronize()). ds_vctx_destroy() destroys the graphs its vCtx
 * still has, after waiting for its work.
 * \param[in] graph  the graph.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE (NULL or destroyed);
 *         ::DS_ERR_BUSY (work of its vCtx is in flight; the graph is kept);
 *         ::DS_ERR_DEVICE_FAULT (destroyed anyway).
 * \note The owner thread of the graph's vCtx.
 */
DS_API ds_status ds_graph_destroy(ds_graph_t graph);

/** One pCtx's instantiation (ds_graph_stats::pctx). */
typedef struct ds_graph_pctx_stats {
    int instantiated;       /**< nonzero once the pCtx has an instantiation */
    uint32_t nodes;         /**< nodes of the instantiated graph */
    uint32_t kernel_nodes;  /**< of which kernel nodes */
    double capture_us;      /**< wall time of the capture function's call (us) */
    double instantiate_us;  /**< wall time of cuGraphInstantiate plus cuGraphUpload (us) */
    int64_t device_bytes;   /**< drop in the device's free memory across the
                                 instantiation and upload (bytes; approximate:
                                 other threads' allocations count too, and the
                                 driver allocates in 2 MiB pages) */
    uint64_t launches;      /**< launches of this instantiation (steps) */
} ds_graph_pctx_stats;

/** ds_graph_stats::uncut: why automatic cuts made no cut. */
typedef enum ds_graph_uncut {
    DS_GRAPH_UNCUT_NONE = 0,      /**< cut as asked, or segment_us 0 */
    DS_GRAPH_UNCUT_PENDING = 1,   /**< not yet: the first launch measures the step */
    DS_GRAPH_UNCUT_NO_CUT = 2,    /**< the DAG never narrows to one node */
    DS_GRAPH_UNCUT_MEMORY = 3,    /**< the graph allocates or frees memory (memory nodes) */
    DS_GRAPH_UNCUT_FITS = 4,      /**< every piece already fits segment_us */
    DS_GRAPH_UNCUT_NO_API = 5     /**< the driver lacks cuGraphClone, cuGraphGetEdges ... */
} ds_graph_uncut;

/** A graph's statistics (ds_graph_get_stats()). */
typedef struct ds_graph_stats {
    size_t size;         /**< sizeof(ds_graph_stats) */
    uint32_t magic;      /**< ::DS_ABI_MAGIC */
    uint32_t version;    /**< ::DS_ABI_VERSION */
    uint32_t num_pctx;   /**< entries of pctx (the pool's size) */
    uint64_t launches;   /**< ds_graph_launch() calls that launched */
    ds_graph_pctx_stats pctx[DS_MAX_PCTX]; /**< by pool index; pCtxs outside
                                                the graph's set stay zero */
    uint32_t pieces;       /**< pieces (ds_graph_cut(), ds_graph_from_cuda_graphs()) */
    uint32_t segments;     /**< segments a step is launched as (pieces until the
                                automatic cut is made) */
    uint32_t segment_us;   /**< ds_graph_attr::segment_us */
    uint32_t uncut;        /**< a ::ds_graph_uncut */
    uint32_t cut_points;   /**< places the DAG could be cut (all pieces) */
    uint32_t calibrated_pctx; /**< pool index the automatic cut was measured on */
    double step_us;        /**< the measured step (automatic cuts; us), 0 before */
    double longest_segment_us; /**< its longest segment in the measuring step (us) */
} ds_graph_stats;

/** Size of ::ds_graph_stats before `pieces`: still accepted, filled up to it. */
#define DS_GRAPH_STATS_SIZE_V1 offsetof(ds_graph_stats, pieces)

/** Initialiser of ::ds_graph_stats (header filled). */
#define DS_GRAPH_STATS_INIT { .size = sizeof(ds_graph_stats), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * \brief Reads a graph's statistics: per pCtx, whether it is instantiated,
 *        its node counts, capture and instantiation time, device memory and
 *        launches.
 * \param[in]  graph  the graph.
 * \param[out] stats  a ::DS_GRAPH_STATS_INIT-initialised struct.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (stats NULL); ::DS_ERR_ABI_MISMATCH (stats' header).
 * \note Any thread while the graph lives (relaxed reads).
 */
DS_API ds_status ds_graph_get_stats(ds_graph_t graph, ds_graph_stats *stats);

/** One segment of a graph (ds_graph_get_segment()). */
typedef struct ds_graph_segment {
    size_t size;          /**< sizeof(ds_graph_segment) */
    uint32_t magic;       /**< ::DS_ABI_MAGIC */
    uint32_t version;     /**< ::DS_ABI_VERSION */
    uint32_t piece;       /**< the piece it belongs to */
    uint32_t nodes;       /**< its nodes */
    uint32_t kernel_nodes; /**< of which kernel nodes */
    double calibrated_us; /**< its time in the measuring step (us; 0: not measured) */
    double measured_us[DS_MAX_PCTX]; /**< its duration per pCtx from its timed
                                          launches (us, the profile's estimate);
                                          0 where not measured yet */
    uint32_t samples[DS_MAX_PCTX];   /**< timed launches behind measured_us */
} ds_graph_segment;

/** Initialiser of ::ds_graph_segment (header filled). */
#define DS_GRAPH_SEGMENT_INIT { .size = sizeof(ds_graph_segment), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * \brief Reads one segment of a graph: its piece, nodes, and its measured
 *        duration per pCtx.
 * \param[in]  graph  the graph.
 * \param[in]  index  the segment, 0 to ds_graph_stats::segments - 1.
 * \param[out] out    a ::DS_GRAPH_SEGMENT_INIT-initialised struct.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT (out
 *         NULL, index out of range); ::DS_ERR_ABI_MISMATCH.
 * \note The owner thread of the graph's vCtx (the segments change once, at
 *       the automatic cut).
 */
DS_API ds_status ds_graph_get_segment(ds_graph_t graph, uint32_t index, ds_graph_segment *out);

/** \} */

/**
 * \defgroup ds_stats_group Statistics
 * \brief Per-vCtx and runtime-wide counters.
 * \{
 */

/**
 * Per-vCtx counters (ds_vctx_get_stats()).
 *
 * <b>Which work is timed.</b> A unit (kernel or section) is timed when it is
 * bracketed by a pair of events (a timed mark) whose elapsed time
 * (cuEventElapsedTime) becomes a profile sample. That is:
 *  1. every `DS_SAMPLE_PERIOD`-th ds_launch() of the vCtx (default 256; 0:
 *     none of 1 and 2);
 *  2. a ds_launch() whose (function, grid, block) has fewer than 4 profile
 *     samples on the SM count of the pCtx it runs on, at most one in any 9
 *     consecutive launches of the vCtx (exploration, so that new kernels get
 *     a prediction quickly);
 *  3. every section (ds_vctx_acquire_stream() to ds_vctx_release_stream()),
 *     whatever `DS_SAMPLE_PERIOD`;
 *
 * each only when one of the vCtx's 16 mark slots is free (else that unit is
 * not timed; the choice is not retried). Other launches get at most an
 * untimed mark (one event, completion only): after 2000 us of predicted work
 * (a quarter of the window when one is set) or 64 launches since the last
 * mark, after every launch under a policy that tracks every launch
 * (temporal), and before the vCtx waits (window, a hold on its own work,
 * synchronize). With ::DS_GATES_RCK, the RCK's boundary timestamps add
 * profile samples without events (ds_runtime_stats::rck_profile_samples, not
 * counted here).
 */
typedef struct ds_vctx_stats {
    size_t size; /**< sizeof(ds_vctx_stats) (or ::DS_VCTX_STATS_SIZE_V1) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    uint64_t launches;        /**< kernels launched through ds_launch() */
    uint64_t sections;        /**< sections closed */
    uint64_t remaps;          /**< binding changes carried out (pCtx or urgency) */
    uint64_t sampled_kernels; /**< timed units (kernels and sections, see above) whose
                                   duration was measured so far */
    uint64_t kernel_time_ns;  /**< summed elapsed time (ns) between those units' start
                                   and end events */
    uint32_t pctx;            /**< bound pCtx */
    uint32_t streams;         /**< streams this vCtx has created (one per pCtx and urgency used) */
    uint64_t holds;           /**< launches (or sections) a policy held before dispatch */
    uint32_t window_us;       /**< bound on predicted work in flight (us), 0 = none */
    int urgent;               /**< running on its highest-priority stream */
    double inflight_us;       /**< predicted work (us) submitted and not known finished */
    uint32_t gate_interval_us; /**< predicted us between its gates; ::DS_GATES_NONE: no gates */
    int gate_closed;          /**< its gate is closed now */
    uint64_t gates;           /**< gates placed in its streams */
    uint64_t gate_closes;     /**< times its gate was closed */
    uint64_t gate_closed_us;  /**< time its gate spent closed (us), closures that ended */
    uint64_t gate_holds;      /**< launches or sections that waited for its gate to open */
    uint64_t overruns;        /**< watchdog: tracked work that ran past 4 times its
                                   prediction plus 10 ms */
    uint64_t graph_launches;  /**< graphs launched through ds_graph_launch() (not
                                   counted in `launches`) */
    uint64_t requests;        /**< requests ended or recorded (ds_vctx_request_end(),
                                   ds_vctx_request_record()) */
    uint64_t requests_over_slo; /**< of them, slower than ds_vctx_attr::slo_us (none
                                     without an SLO) */
    uint64_t requests_over_slo_runs; /**< runs of consecutive requests over the SLO (in
                                          the order they were ended or recorded): the
                                          requests over it that follow one within it,
                                          or come first. requests_over_slo divided by
                                          this is the mean run length, how much late
                                          requests bunch up */
    uint32_t request_window;  /**< requests in the sliding window: the last
                                   ::DS_REQUEST_WINDOW (fewer before that many) */
    uint32_t request_window_over_slo; /**< of those, slower than the SLO */
    double request_p50_us;    /**< median request latency (us) over the window; 0 while empty */
    double request_p99_us;    /**< 99th percentile (nearest rank) over the window (us);
                                   0 while empty */
    uint64_t yields;          /**< times a best-effort vCtx was asked onto a pCtx
                                   with fewer SMs (ds_vctx_place(), ds_vctx_remap():
                                   a policy's yield to latency-sensitive work)
                                   while it had work in flight, and that work left
                                   the larger pCtx's SMs */
    double yield_p50_us;      /**< median time (us) from that request until its work
                                   left the SMs: the work submitted there finished,
                                   or, with gates, its stream reached its next gate
                                   while the gate was closed (the work queued
                                   behind waits off the SMs); over the last 256
                                   yields; resolution: one scheduler pass
                                   (ds_runtime_config::scheduler_period_us) */
    double yield_p99_us;      /**< 99th percentile (nearest rank) of the same (us) */
    double yield_max_us;      /**< the longest of the same (us) */
    uint64_t group_units;     /**< in a vCtx group (ds_vctx_attr::group): units this
                                   rank decided (rank 0) or followed; 0 outside one */
    double group_wait_us;     /**< host time (us, wall clock) its launches waited for
                                   the other ranks: rank 0 for room in the decision
                                   ring, a rank > 0 for rank 0's decisions */
} ds_vctx_stats;

/** Size of ds_vctx_stats before `gate_interval_us`: still accepted as
 *  ds_vctx_stats::size, filled up to that size. */
#define DS_VCTX_STATS_SIZE_V1 offsetof(ds_vctx_stats, gate_interval_us)
/** Size of ds_vctx_stats before `requests` (the second release): likewise. */
#define DS_VCTX_STATS_SIZE_V2 offsetof(ds_vctx_stats, requests)
/** Size of ds_vctx_stats before `yields` (release 0.2): likewise. */
#define DS_VCTX_STATS_SIZE_V3 offsetof(ds_vctx_stats, yields)
/** Size of ::ds_vctx_stats before `group_units`: still accepted. */
#define DS_VCTX_STATS_SIZE_V4 offsetof(ds_vctx_stats, group_units)

/** Initialiser of ::ds_vctx_stats (header filled). */
#define DS_VCTX_STATS_INIT { .size = sizeof(ds_vctx_stats), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * \brief Reads the vCtx's counters.
 * \param[in]  vctx   the vCtx.
 * \param[out] stats  a ::DS_VCTX_STATS_INIT-initialised struct, filled (up to
 *                    its size).
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (stats NULL); ::DS_ERR_ABI_MISMATCH (stats' header).
 * \note Thread-safe: any thread; no lock (relaxed reads, so values may lag by
 *       a launch and need not be mutually consistent).
 */
DS_API ds_status ds_vctx_get_stats(ds_vctx_t vctx, ds_vctx_stats *stats);

/**
 * \name Request latency accounting
 * A request is what the application answers one of its clients with (a
 * decode step, a batch, an RPC): the application marks where each begins and
 * ends, or records a latency it measured itself (from the request's arrival
 * in its own queue, say). The runtime keeps per vCtx the totals, the count
 * over the vCtx's SLO (ds_vctx_attr::slo_us), and the last
 * ::DS_REQUEST_WINDOW latencies with their median and 99th percentile
 * (nearest rank), in ds_vctx_stats and in the policy view (ds_vctx_state):
 * slo_aware sizes a latency-sensitive vCtx's tier from them
 * (detshare/policy.h). Latencies are in us on the runtime's clock (the
 * simulated clock on ::DS_DEVICE_SIM). Nothing here touches the GPU or the
 * launch path.
 * \{
 */

/** Requests in the sliding window of ds_vctx_stats::request_p50_us and
 *  request_p99_us. */
#define DS_REQUEST_WINDOW 256

/** A begun request (ds_vctx_request_begin()): its start time; never 0. */
typedef uint64_t ds_request_t;

/**
 * \brief Marks the beginning of one request of vctx.
 * \param[in]  vctx  the vCtx that serves it.
 * \param[out] req   its start, to hand to ds_vctx_request_end(); set to 0 on failure.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT (req NULL).
 * \note Thread-safe, lock-free (one clock read); requests may overlap.
 */
DS_API ds_status ds_vctx_request_begin(ds_vctx_t vctx, ds_request_t *req);

/**
 * \brief Marks the end of a request begun on vctx: its latency (now minus its
 *        start) joins the vCtx's accounting.
 * \param[in]  vctx        the vCtx.
 * \param[in]  req         what ds_vctx_request_begin() returned.
 * \param[out] latency_us  its latency (us); may be NULL; 0 on failure.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT (req
 *         0 or later than now: not a begun request of this runtime; nothing is
 *         recorded).
 * \note Thread-safe: writers of one vCtx serialise for one insertion into a
 *       sorted window (a spin of well under a microsecond); readers never wait.
 */
DS_API ds_status ds_vctx_request_end(ds_vctx_t vctx, ds_request_t req, double *latency_us);

/**
 * \brief Records one request of vctx whose latency the application measured.
 * \param[in] vctx        the vCtx.
 * \param[in] latency_us  its latency (us), finite, 0 to 1e12.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (latency out of range or not a number; nothing is recorded).
 * \note Thread-safe, as ds_vctx_request_end().
 */
DS_API ds_status ds_vctx_request_record(ds_vctx_t vctx, double latency_us);

/** \} */

/** Runtime-wide figures of gates, the RCK and the watchdog (ds_runtime_get_stats()). */
typedef struct ds_runtime_stats {
    size_t size; /**< sizeof(ds_runtime_stats) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    ds_gate_mode gates;          /**< gate writer in force (AUTO resolved; OFF when
                                      the driver lacks what gates need) */
    int rck_running;             /**< 1 while the RCK is resident (started, not
                                      stopped); whether it still beats is
                                      heartbeat_age_us */
    uint32_t rck_sm_count;       /**< SMs of the group the RCK runs on, 0 without it */
    uint64_t rck_beats;          /**< heartbeats the RCK wrote */
    double heartbeat_age_us;     /**< time (us) since the watchdog last saw the
                                      heartbeat advance; -1 without the RCK or before
                                      its first beat was seen */
    uint64_t heartbeat_misses;   /**< watchdog events: heartbeat missing for
                                      heartbeat_timeout_ms */
    uint64_t overruns;           /**< watchdog events: work far past its profile
                                      (sum of every vCtx's, destroyed ones included) */
    uint64_t boundaries;         /**< gate boundaries the RCK timestamped */
    uint64_t rck_profile_samples; /**< kernel durations the profiles took from them */
    uint32_t gates_closed;       /**< gates closed now */
    uint32_t max_closed_gates;   /**< gates that may be closed now, closed ones
                                      included: CUDA_DEVICE_MAX_CONNECTIONS - 2 (one
                                      queue stays free for every other stream, one
                                      is margin), less one for the RCK and one per
                                      vCtx whose stream waits on a copy now (6 with
                                      the default 8 and neither) */
    uint64_t gate_refusals;      /**< closes refused for want of connections */
    uint64_t gate_expiries;      /**< gates the runtime reopened because they stayed
                                      closed, or a launch waited at them, longer than
                                      the teardown timeout */
} ds_runtime_stats;

/** Initialiser of ::ds_runtime_stats (header filled). */
#define DS_RUNTIME_STATS_INIT { .size = sizeof(ds_runtime_stats), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * \brief Reads the runtime's gate, RCK and watchdog figures.
 * \param[in]  rt     the runtime.
 * \param[out] stats  a ::DS_RUNTIME_STATS_INIT-initialised struct, filled.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (stats NULL); ::DS_ERR_ABI_MISMATCH (stats' header).
 * \note Thread-safe: any thread; no lock (relaxed reads).
 */
DS_API ds_status ds_runtime_get_stats(ds_runtime_t rt, ds_runtime_stats *stats);

/**
 * \brief Name given at creation.
 * \param[in]  vctx  the vCtx.
 * \param[out] name  the name (NUL-terminated, at most 63 bytes); the string
 *                   lives as long as the vCtx.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (name NULL).
 * \note Thread-safe.
 */
DS_API ds_status ds_vctx_get_name(ds_vctx_t vctx, const char **name);

/** \} */

/* ------------------------------------------------------------------------ */
/* Tenant memory                                                             */
/* ------------------------------------------------------------------------ */

/**
 * \defgroup ds_mem_group Tenant memory and copies
 * \brief Device memory per vCtx (quota, accounting, working set) and fair
 *        host-device copies.
 * \{
 */

/** Memory accounting of one vCtx (ds_vctx_get_mem_stats()). Byte figures count
 *  mapped bytes: each allocation rounded up to the allocation granularity. */
typedef struct ds_mem_stats {
    size_t size; /**< sizeof(ds_mem_stats) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    uint64_t bytes_allocated;   /**< bytes mapped for the vCtx now (allocations in
                                     progress included) */
    uint64_t allocations;       /**< live allocations */
    uint64_t peak_bytes;        /**< highest bytes_allocated so far */
    uint64_t quota_bytes;       /**< quota in force (bytes), 0 = none */
    uint64_t total_allocations; /**< successful ds_mem_alloc() calls so far */
    uint64_t quota_refusals;    /**< ds_mem_alloc() calls refused with ::DS_ERR_MEMORY_QUOTA */
    uint64_t granularity;       /**< allocation granularity in bytes (0 until the
                                     first ds_mem_alloc()) */
    uint64_t working_set_bytes; /**< mapped bytes of the allocations that the
                                     parameters of the last working_set_window
                                     scanned launches pointed into */
    uint32_t working_set_window; /**< scanned launches that window spans (16) */
    uint64_t sampled_launches;  /**< launches scanned so far: the timed launches of
                                     ds_launch() (cases 1 and 2 at ::ds_vctx_stats)
                                     made while the vCtx had allocations, with
                                     parameters and a parameter layout the driver
                                     knows */
    uint64_t copies;            /**< ds_memcpy_async() copies finished (a copy that
                                     failed on the copy thread counts too) */
    uint64_t copy_bytes;        /**< bytes those copies moved over the link */
    uint64_t copy_wait_ns;      /**< summed time (ns) the vCtx's ready chunks waited
                                     for the link behind other tenants' chunks */
} ds_mem_stats;

/** Initialiser of ::ds_mem_stats (header filled). */
#define DS_MEM_STATS_INIT { .size = sizeof(ds_mem_stats), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * \brief Allocates device memory for a vCtx, charged to its quota.
 *
 * Through the CUDA virtual memory management API (CUDA Driver API, "Virtual
 * Memory Management"): reserves an address range (cuMemAddressReserve),
 * creates pinned device memory (cuMemCreate) of `bytes` rounded up to the
 * allocation granularity (cuMemGetAllocationGranularity, minimum), maps it
 * (cuMemMap) and grants the device read/write access (cuMemSetAccess). The
 * rounded size is charged to the vCtx's quota before any driver call, and the
 * allocation is entered in the vCtx's registry, which kernel-parameter
 * introspection (ds_mem_working_set()) uses. On the simulated device the
 * granularity is 2 MiB and the memory is host memory, zero-filled, readable
 * and writable by the host at the returned address.
 * \param[in]  vctx   the vCtx the memory is charged to.
 * \param[in]  bytes  bytes wanted, >= 1.
 * \param[out] out    device address of the allocation (on success only).
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (bytes 0, out NULL, size overflow); ::DS_ERR_MEMORY_QUOTA (the
 *         rounded size would take the vCtx past its quota: nothing was
 *         allocated); ::DS_ERR_NOT_SUPPORTED (the driver lacks the VMM entry
 *         points or returned CUDA_ERROR_NOT_SUPPORTED); ::DS_ERR_OUT_OF_MEMORY
 *         (device memory exhausted, or host memory for the registry: whatever
 *         was done is undone); ::DS_ERR_DRIVER (another VMM call failure,
 *         undone likewise);
 *         ::DS_ERR_DEVICE_FAULT.
 * \note Thread-safe: any thread may allocate and free for any live vCtx, but
 *       not concurrently with ds_vctx_destroy() of that vCtx. Not for hot
 *       paths: several driver calls and the vCtx's memory lock.
 */
DS_API ds_status ds_mem_alloc(ds_vctx_t vctx, size_t bytes, CUdeviceptr *out);

/**
 * \brief Frees an allocation of ds_mem_alloc().
 *
 * Unmaps it (cuMemUnmap), releases the physical memory (cuMemRelease) and the
 * address range (cuMemAddressFree), and returns its bytes to the vCtx's
 * quota. The caller must make sure no queued work still uses it (e.g.
 * ds_vctx_synchronize() first). On a faulted runtime the allocation is only
 * dropped from the accounting (the driver frees it with the context).
 * \param[in] vctx  the vCtx that allocated it.
 * \param[in] ptr   the address ds_mem_alloc() returned for this vCtx.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_FOUND (ptr is
 *         not the start of a live allocation of this vCtx); ::DS_ERR_DRIVER (a
 *         release call failed; the allocation is dropped from the registry
 *         and the quota all the same).
 * \note Thread-safe as ds_mem_alloc().
 */
DS_API ds_status ds_mem_free(ds_vctx_t vctx, CUdeviceptr ptr);

/**
 * \brief Sets the vCtx's device-memory quota.
 *
 * The most bytes (mapped, i.e. rounded to the granularity) its live
 * ds_mem_alloc() allocations may total. Lowering it below what is allocated
 * frees nothing; later allocations fail until enough is freed.
 * \param[in] vctx   the vCtx.
 * \param[in] bytes  quota in bytes; 0 = no quota (the default).
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE.
 * \note Thread-safe (any thread); takes the vCtx's memory lock briefly.
 */
DS_API ds_status ds_vctx_set_mem_quota(ds_vctx_t vctx, uint64_t bytes);

/**
 * \brief Reads the vCtx's memory accounting, working-set and copy figures.
 * \param[in]  vctx   the vCtx.
 * \param[out] stats  a ::DS_MEM_STATS_INIT-initialised struct, filled.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT
 *         (stats NULL); ::DS_ERR_ABI_MISMATCH (stats' header).
 * \note Thread-safe (any thread); takes the vCtx's memory lock briefly.
 */
DS_API ds_status ds_vctx_get_mem_stats(ds_vctx_t vctx, ds_mem_stats *stats);

/**
 * \brief Working set of a launch, without launching: which of the vCtx's
 *        allocations the parameters point into.
 *
 * Each parameter's bytes are scanned at 8-byte-aligned offsets within the
 * parameter for values inside a live allocation of this vCtx (anywhere in its
 * mapped range), so pointers at any parameter position, pointers with an
 * offset, and pointers inside struct parameters are found without knowing
 * the kernel's signature. A value that happens to fall in an allocation (an
 * integer) is counted too: the result is a superset of the allocations that
 * pointers in the parameters reach directly (memory reached through pointers
 * stored in device memory is not seen). Parameter sizes come from
 * cuFuncGetParamInfo (CUDA 12.4+; the simulated device knows them from
 * ds_sim_kernel_desc); at most the first 128 parameters are scanned. The same
 * scan runs on ds_launch()'s timed launches and feeds
 * ds_mem_stats::working_set_bytes; this call does not change those figures.
 * \param[in]  vctx    the vCtx whose allocations are looked for.
 * \param[in]  f       kernel, as for ds_launch().
 * \param[in]  params  as for ds_launch() (kernelParams); NULL = no parameters.
 * \param[out] out     up to cap allocation base addresses, ascending; may be
 *                     NULL when cap is 0.
 * \param[in]  cap     entries out has room for.
 * \param[out] n       number of allocations found (all, even past cap).
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_INVALID_ARGUMENT (f
 *         or n NULL, out NULL with cap > 0); ::DS_ERR_NOT_SUPPORTED (the
 *         driver cannot give f's parameter layout: no cuFuncGetParamInfo, or
 *         it refuses f); ::DS_ERR_OUT_OF_MEMORY.
 * \note Thread-safe (any thread); takes the vCtx's memory lock.
 */
DS_API ds_status ds_mem_working_set(ds_vctx_t vctx, CUfunction f, void **params, CUdeviceptr *out,
                                    size_t cap, size_t *n);

/** Direction of a ds_memcpy_async() copy over the host-device link. */
typedef enum ds_copy_kind {
    DS_COPY_HOST_TO_DEVICE = 0, /**< host buffer to device memory (cuMemcpyHtoDAsync) */
    DS_COPY_DEVICE_TO_HOST = 1, /**< device memory to host buffer (cuMemcpyDtoHAsync) */
} ds_copy_kind;

/**
 * \brief Copies between host and device memory in the vCtx's program order,
 *        sharing the link fairly between tenants.
 *
 * The copy runs after all work the vCtx submitted before this call, and work
 * it submits afterwards (ds_launch(), sections, later copies) runs after the
 * copy: the vCtx's stream waits on a gate word (cuStreamWaitValue32) that the
 * copy opens when done. The runtime's copy thread (started by the first call)
 * splits copies into chunks (2 MiB; 512 KiB for best-effort vCtxs while a
 * latency-sensitive vCtx of the runtime has used ds_memcpy_async()) and puts
 * one chunk at a time on the link: latency-sensitive vCtxs' chunks first (in
 * submission order), best-effort vCtxs' chunks by weighted fair queueing on
 * ds_vctx_attr::weight (start-time fair queueing, Goyal, Vin and Cheng,
 * SIGCOMM 1996), so two backlogged BE tenants of weights 1 and 3 get a
 * quarter and three quarters of the chunks, and an LS copy waits for at most
 * the one BE chunk on the link. A copy's first chunk is only queued once the
 * work before it in the vCtx has finished, so a tenant's kernels never hold
 * the link. Bytes moved and time waited are in ::ds_mem_stats. On the
 * simulated device the link is modelled at 25 GB/s in simulated time.
 * \param[in] vctx    the vCtx (owned by the calling thread).
 * \param[in] device  device address (ds_mem_alloc() or cuMemAlloc memory),
 *                    bytes long.
 * \param[in] host    host buffer, bytes long; it must stay valid and, for
 *                    host-to-device, unchanged until the copy is done
 *                    (ds_vctx_synchronize()); pinned memory (cuMemHostAlloc)
 *                    lets the GPU copy truly asynchronously.
 * \param[in] bytes   bytes to copy; 0 is a no-op.
 * \param[in] kind    direction.
 * \return ::DS_SUCCESS (queued); ::DS_ERR_INVALID_HANDLE;
 *         ::DS_ERR_INVALID_ARGUMENT (device 0, host NULL, kind out of range);
 *         ::DS_ERR_NOT_SUPPORTED (the driver lacks cuMemcpyHtoDAsync,
 *         cuMemcpyDtoHAsync or stream memory operations); ::DS_ERR_LIMIT (64
 *         vCtxs of the runtime already copy); ::DS_ERR_DRIVER (the copy
 *         thread's stream or event, the vCtx's gate word, or queuing the
 *         wait failed); ::DS_ERR_OUT_OF_MEMORY (host memory, the copy thread);
 *         ::DS_ERR_DEVICE_FAULT. A copy that fails later on the copy thread is
 *         logged and its gate opened, so the vCtx never hangs; the error shows
 *         as a device fault if sticky.
 * \note Owner thread of the vCtx (like ds_launch()). Not a hot path: an event,
 *       a gate and a heap allocation per copy; the vCtx's first copy also
 *       allocates its 4-byte gate word. A vCtx with copies pending blocks one
 *       hardware queue, counted against closed gates
 *       (ds_runtime_stats::max_closed_gates). Destroying the vCtx waits for
 *       its copies up to the teardown timeout, then cancels those not started.
 */
DS_API ds_status ds_memcpy_async(ds_vctx_t vctx, CUdeviceptr device, void *host, size_t bytes,
                                 ds_copy_kind kind);

/** \} */

#ifdef __cplusplus
}
#endif

#endif /* DETSHARE_DETSHARE_H */
