/*
 * libdetshare: deterministic GPU sharing through virtual contexts.
 *
 * Tenants hold virtual contexts (vCtx). The runtime keeps a pool of physical
 * contexts (pCtx: CUDA green contexts over chosen SM sets) and moves each vCtx
 * between them at kernel boundaries, never changing a kernel's launch
 * configuration (DESIGN.md, invariant 1).
 *
 * Thread-safety, stated once for the whole API:
 *  - ds_runtime_create / ds_runtime_destroy: call from one thread; destroy only
 *    after every tenant thread has stopped using the runtime's vCtxs.
 *  - A vCtx is owned by one thread at a time (its tenant thread): ds_launch,
 *    sections, ds_vctx_synchronize and ds_vctx_destroy must not run
 *    concurrently on the same vCtx. Different vCtxs may be used from different
 *    threads concurrently without any lock in the library.
 *  - ds_vctx_remap, the gate actions (ds_vctx_gate_close / _open,
 *    ds_vctx_set_gate_interval, detshare/policy.h) and every *_get_* / *_info /
 *    *_stats query are safe from any thread.
 *  - ds_log_set_handler, ds_status_string, ds_last_error_message: any thread.
 *  - Tenant memory: ds_mem_alloc, ds_mem_free, ds_vctx_set_mem_quota,
 *    ds_vctx_get_mem_stats and ds_mem_working_set are safe from any thread
 *    (a lock per vCtx, never taken by ds_launch except on its sampled
 *    launches); ds_memcpy_async belongs to the owner thread like ds_launch.
 *
 * Errors: every function returns a ds_status. Output parameters are written
 * only on DS_SUCCESS. The first function that detects an error logs one line
 * through the caller's log handler (ds_log_set_handler) and keeps the detail
 * in a thread-local message (ds_last_error_message). The library never
 * aborts, exits, prints or changes the environment.
 *
 * Device faults: a kernel that traps or touches an illegal address poisons
 * the device's (shared) context for the whole process. The first call or
 * scheduler pass that sees such a sticky driver error marks the runtime
 * faulted (within about 1 ms with the scheduler thread running); from then on
 * ds_launch, sections, ds_vctx_remap, ds_vctx_synchronize, ds_runtime_poll
 * and both destroy functions return DS_ERR_DEVICE_FAULT, naming the vCtx
 * whose kernel faulted where it can be known (the simulated device knows; on
 * a GPU the vCtxs with work in flight are named). Destroying a faulted
 * runtime still releases every object and returns; it never waits on the
 * dead context.
 */
#ifndef DETSHARE_DETSHARE_H
#define DETSHARE_DETSHARE_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DS_VERSION_MAJOR 0
#define DS_VERSION_MINOR 1
#define DS_VERSION_PATCH 0
#define DS_VERSION_CODE (DS_VERSION_MAJOR * 10000 + DS_VERSION_MINOR * 100 + DS_VERSION_PATCH)

/** Version of the attribute-struct ABI. Structs carry {size, magic, version}. */
#define DS_ABI_VERSION 1u
#define DS_ABI_MAGIC 0x44534831u /* "DSH1" */

#if defined(__GNUC__)
#define DS_API __attribute__((visibility("default")))
#else
#define DS_API
#endif

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/** X(name, value, description): the one list every status comes from. */
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
    X(DS_ERR_OUT_OF_MEMORY, 9, "out of host memory")                                       \
    X(DS_ERR_INVALID_LAUNCH, 10, "launch configuration outside the device's limits")      \
    X(DS_ERR_BUSY, 11, "operation not allowed now (a section is open)")                   \
    X(DS_ERR_TIMEOUT, 12, "work did not finish within the time limit")                    \
    X(DS_ERR_NOT_FOUND, 13, "no such object")                                              \
    X(DS_ERR_ALREADY_EXISTS, 14, "an object with that name already exists")               \
    X(DS_ERR_LIMIT, 15, "a configured limit was reached")                                  \
    X(DS_ERR_DEVICE_FAULT, 16, "the device context faulted")                               \
    X(DS_ERR_INTERNAL, 17, "internal error (a bug in libdetshare)")                      \
    X(DS_ERR_MEMORY_QUOTA, 18, "the vCtx's device-memory quota would be exceeded")

typedef enum ds_status {
#define DS__STATUS_ENUM(name, value, desc) name = value,
    DS_STATUS_LIST(DS__STATUS_ENUM)
#undef DS__STATUS_ENUM
} ds_status;

/** Static description of a status ("success", ...); "unknown status" for values
 *  outside the list. Never NULL. Thread-safe. */
DS_API const char *ds_status_string(ds_status status);

/** Name of a status ("DS_ERR_NO_DRIVER"); "DS_STATUS_UNKNOWN" otherwise. */
DS_API const char *ds_status_name(ds_status status);

/** Detail of the last error raised on the calling thread (what was found, which
 *  argument, which driver call), or "" if none. Valid until the next failing
 *  libdetshare call on this thread. Thread-safe (thread-local). */
DS_API const char *ds_last_error_message(void);

/** Library version as DS_VERSION_CODE of the built library. */
DS_API int ds_version(void);

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum ds_log_level {
    DS_LOG_NONE = 0,
    DS_LOG_ERROR = 1,
    DS_LOG_WARN = 2,
    DS_LOG_INFO = 3,
    DS_LOG_DEBUG = 4,
} ds_log_level;

/** Log handler: one line (no trailing newline) at a level. Called from the
 *  thread that raised the message; must be thread-safe and must not call back
 *  into libdetshare. */
typedef void (*ds_log_fn)(ds_log_level level, const char *message, void *user_data);

/**
 * Sets the process-wide log handler and the most verbose level delivered.
 * \param[in] fn     handler, or NULL to drop every message (the default: the
 *                   library prints nothing on its own).
 * \param[in] user   passed back to fn.
 * \param[in] level  messages above this level are not formatted at all.
 *                   The environment variable DS_LOG_LEVEL (0-4), if set,
 *                   overrides it.
 * \return DS_SUCCESS, or DS_ERR_INVALID_ARGUMENT for a level outside 0-4.
 * \note Thread-safe; takes effect for messages raised after it returns.
 */
DS_API ds_status ds_log_set_handler(ds_log_fn fn, void *user, ds_log_level level);

/* ------------------------------------------------------------------------ */
/* Runtime                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct ds_runtime *ds_runtime_t; /**< opaque runtime handle */
typedef struct ds_vctx *ds_vctx_t;       /**< opaque virtual-context handle */

/** Which device a runtime drives. */
typedef enum ds_device_kind {
    DS_DEVICE_CUDA = 0, /**< the real GPU through libcuda.so.1 (loaded at run time) */
    DS_DEVICE_SIM = 1,  /**< the simulated device (detshare/sim.h), virtual time */
} ds_device_kind;

/** Where a pCtx's SM groups are taken from in the device's split. */
typedef enum ds_tier_anchor {
    DS_ANCHOR_LOW = 0,  /**< groups 0, 1, 2, ...: the latency-sensitive side */
    DS_ANCHOR_HIGH = 1, /**< the last groups downward (remainder group first):
                             the complement side */
    DS_ANCHOR_FULL = 2, /**< every group: the whole GPU */
} ds_tier_anchor;

/** One pCtx of the pool. */
typedef struct ds_tier_spec {
    uint32_t sm_count;     /**< SMs wanted (>= 1); rounded up to whole groups,
                                the result is logged and shown in ds_runtime_info.
                                Ignored for DS_ANCHOR_FULL. */
    ds_tier_anchor anchor; /**< which end of the split the groups come from */
} ds_tier_spec;

struct ds_sim_config; /* detshare/sim.h */

/**
 * Who writes a gate's control word. A gate is a stream wait
 * (cuStreamWaitValue32, "== 0") placed at a kernel boundary of a vCtx's
 * queued work; closing it (ds_vctx_gate_close) stops that work at its next
 * gate without the host racing the driver. Measured on an H200 (driver
 * 580.159.04, docs/results/overhead.json): from the decision to the gated
 * kernel visibly running, host-written words 6.7 us median, RCK-mirrored
 * words 9.0 us.
 */
typedef enum ds_gate_mode {
    DS_GATES_AUTO = 0, /**< the faster of the two on the measured GPUs: DS_GATES_HOST */
    DS_GATES_HOST = 1, /**< words in pinned host memory mapped into the device, written
                            by the host (the thread that decides) */
    DS_GATES_RCK = 2,  /**< words in device memory, written by the resident control kernel
                            from a host-mapped control block; needs DS_RCK_ON */
    DS_GATES_OFF = 3,  /**< no gates: policies bound BE work with windows alone */
} ds_gate_mode;

/**
 * The resident control kernel (RCK; DetShare section 4.2): one persistent
 * thread per runtime, on a green context over the last SM group of the split
 * (an SM group no LOW tier includes). It mirrors gate words (DS_GATES_RCK),
 * timestamps gate boundaries with %globaltimer (fed to the profiles) and beats
 * a heartbeat that the scheduler's watchdog reads: a kernel that traps stops
 * it within about 0.5 ms, long before the driver reports the fault.
 * Costs and hazards, measured on an H200 (docs/results/devprobe.jsonl):
 *  - while it runs, cuCtxSynchronize / cudaDeviceSynchronize and cuMemFree /
 *    cudaFree of the device's primary context block until the runtime is
 *    destroyed (a persistent kernel is never "done"): enable it only in
 *    processes that synchronize streams or events, never the whole device,
 *    and that free device memory after ds_runtime_destroy;
 *  - it takes a block slot on one SM: cuBLAS bf16 GEMMs on the whole GPU ran
 *    13% (8192^3) and 24% (4096^3) longer while it was resident;
 *  - it keeps one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS) busy.
 */
/** ds_vctx_set_gate_interval / ds_vctx_stats.gate_interval_us: the vCtx gets no gates. */
#define DS_GATES_NONE 0xffffffffu
/** ds_runtime_config.fault_presume_ms: never presume a fault, wait for the driver. */
#define DS_FAULT_PRESUME_NEVER 0xffffffffu

typedef enum ds_rck_mode {
    DS_RCK_OFF = 0, /**< the default */
    DS_RCK_ON = 1,
} ds_rck_mode;

/** Runtime configuration. Initialise with DS_RUNTIME_CONFIG_INIT, then set fields. */
typedef struct ds_runtime_config {
    size_t size;      /**< sizeof(ds_runtime_config) */
    uint32_t magic;   /**< DS_ABI_MAGIC */
    uint32_t version; /**< DS_ABI_VERSION */
    ds_device_kind device;            /**< default DS_DEVICE_CUDA */
    int device_ordinal;               /**< CUDA device ordinal, default 0 */
    const ds_tier_spec *tiers;        /**< pool layout; NULL = default layout */
    uint32_t num_tiers;               /**< entries in tiers (<= DS_MAX_PCTX) */
    uint32_t max_vctx;                /**< vCtxs alive at once; 0 = 64 */
    uint32_t teardown_timeout_ms;     /**< bound on waiting for in-flight work in
                                           ds_vctx_destroy / ds_runtime_destroy;
                                           0 = DS_TEARDOWN_TIMEOUT_MS or 10000 */
    const struct ds_sim_config *sim;  /**< DS_DEVICE_SIM only; NULL = defaults */
    const char *policy;               /**< active policy at creation (detshare/policy.h);
                                           NULL = "slo_aware" */
    int32_t scheduler_period_us;      /**< scheduler thread's pass period; 0 = 100 us;
                                           < 0 = no thread (call ds_runtime_poll) */
    uint32_t ls_sms;                  /**< SMs of the latency-sensitive LOW tier the
                                           built-in policies use (nearest tier); 0 = 64 */
    uint32_t idle_us;                 /**< slo_aware: LS idle this long lets BE expand;
                                           0 = 2000 */
    uint32_t be_window_us;            /**< BE window while it shares SMs with LS (slo_aware),
                                           temporal's slice; 0 = 2000 */
    ds_gate_mode gates;               /**< who writes the gate words; default DS_GATES_AUTO */
    ds_rck_mode rck;                  /**< the resident control kernel; default DS_RCK_OFF
                                           (read its costs and hazards at ds_rck_mode) */
    uint32_t gate_interval_us;        /**< predicted work between two gates of a vCtx that
                                           policies gate (ds_vctx_set_gate_interval); 0 = 100 */
    uint32_t heartbeat_timeout_ms;    /**< DS_RCK_ON: an RCK heartbeat missing this long is
                                           a watchdog event (on_congestion, statistics); 0 = 10 */
    uint32_t fault_presume_ms;        /**< DS_RCK_ON: a heartbeat missing this long makes the
                                           runtime presume a device fault before the driver
                                           reports it (DS_ERR_DEVICE_FAULT); 0 = 50;
                                           DS_FAULT_PRESUME_NEVER = wait for the driver */
} ds_runtime_config;

/** Size of ds_runtime_config before `gates` (version 1 as first published):
 *  still accepted, the newer fields take their defaults. */
#define DS_RUNTIME_CONFIG_SIZE_V1 offsetof(ds_runtime_config, gates)

#define DS_RUNTIME_CONFIG_INIT \
    { .size = sizeof(ds_runtime_config), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, \
      .device = DS_DEVICE_CUDA }

/** Most pCtxs a pool holds. */
#define DS_MAX_PCTX 32
/** Most SM groups a split may produce that the runtime tracks. */
#define DS_MAX_GROUPS 64
/** Largest SM count the SM-set bitmaps hold. */
#define DS_MAX_SMS 256

/**
 * Creates a runtime for one device: loads the driver (DS_DEVICE_CUDA), retains
 * the device's primary context, reads the SM resource, splits it once into
 * groups of minSmPartitionSize SMs and builds the pCtx pool (one green context
 * per tier). The pool is never rebuilt; its build time is in ds_runtime_info.
 * \param[in]  config  NULL for defaults, else an initialised ds_runtime_config.
 * \param[out] out     the runtime, on success only.
 * \return DS_SUCCESS; DS_ERR_INVALID_ARGUMENT (out NULL, bad tier spec, too
 *         many tiers); DS_ERR_ABI_MISMATCH (config size/magic/version);
 *         DS_ERR_NO_DRIVER; DS_ERR_DRIVER_TOO_OLD; DS_ERR_NO_DEVICE;
 *         DS_ERR_NOT_SUPPORTED (device cannot split SMs); DS_ERR_DRIVER;
 *         DS_ERR_OUT_OF_MEMORY.
 * \note Green contexts: CUDA Driver API, "Green Contexts" (CUDA 12.4+).
 *       Warns (log) when CUDA_DEVICE_MAX_CONNECTIONS is below what the pool and
 *       max_vctx need; the setting is read, never changed: set it in the
 *       environment before the process's first CUDA call.
 */
DS_API ds_status ds_runtime_create(const ds_runtime_config *config, ds_runtime_t *out);

/**
 * Destroys the runtime: destroys remaining vCtxs (waiting up to the teardown
 * timeout for their work), the pool's streams and green contexts, and releases
 * the primary context. Handles of the runtime and its vCtxs become invalid;
 * later calls with them return DS_ERR_INVALID_HANDLE.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_TIMEOUT if some vCtx's work
 *         was still running at the deadline (it was still torn down; the
 *         driver finishes that work and frees its streams afterwards);
 *         DS_ERR_DEVICE_FAULT if the context had faulted (torn down anyway).
 */
DS_API ds_status ds_runtime_destroy(ds_runtime_t rt);

/** One pCtx as seen by ds_runtime_info. */
typedef struct ds_pctx_info {
    uint32_t index;        /**< pool index: what ds_vctx_remap takes */
    uint32_t sm_count;     /**< SMs in this pCtx */
    ds_tier_anchor anchor;
    uint64_t group_mask;   /**< bit g set: split group g belongs to this pCtx */
    int32_t complement;    /**< index of the pCtx whose groups are exactly the
                                others (disjoint, covering the rest), or -1 */
} ds_pctx_info;

/** What the runtime is running on. */
typedef struct ds_runtime_info {
    size_t size; uint32_t magic; uint32_t version;
    ds_device_kind device;
    char device_name[256];
    int driver_version;            /**< e.g. 13000; 0 on the simulated device */
    int compute_capability;        /**< major*10+minor; 0 on the simulated device */
    uint32_t sm_count;             /**< SMs of the device */
    uint32_t min_partition_sms;    /**< minSmPartitionSize */
    uint32_t sm_alignment;         /**< smCoscheduledAlignment */
    uint32_t num_groups;           /**< groups from the one split (remainder included) */
    uint32_t group_sm_count[DS_MAX_GROUPS];
    uint32_t num_pctx;
    ds_pctx_info pctx[DS_MAX_PCTX];
    double pool_build_ms;          /**< wall time to split and build the pool */
    uint32_t max_connections;      /**< CUDA_DEVICE_MAX_CONNECTIONS in force (8 if unset) */
    uint32_t connections_needed;   /**< streams that may be blocked or long-queued at
                                        once with max_vctx tenants */
    int stream_priority_least;     /**< device range, e.g. 0 */
    int stream_priority_greatest;  /**< e.g. -5 */
    char local_cpus[256];          /**< CPUs local to the GPU (hwloc list syntax, "0-15") */
    int numa_node;                 /**< NUMA node local to the GPU, -1 if unknown */
} ds_runtime_info;

#define DS_RUNTIME_INFO_INIT { .size = sizeof(ds_runtime_info), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/** Fills *info. \return DS_SUCCESS, DS_ERR_INVALID_HANDLE, DS_ERR_INVALID_ARGUMENT
 *  (info NULL), DS_ERR_ABI_MISMATCH. Thread-safe. */
DS_API ds_status ds_runtime_info_get(ds_runtime_t rt, ds_runtime_info *info);

/**
 * Measures which SMs a pCtx's kernels actually run on: launches a probe kernel
 * (reads %smid) with many blocks on a private stream of the pCtx and returns
 * the set of SM ids seen.
 * \param[out] sm_bitmap  DS_MAX_SMS/64 words; bit s set if SM s ran a block.
 * \param[out] count      number of distinct SMs seen.
 * \return DS_SUCCESS, DS_ERR_INVALID_HANDLE, DS_ERR_INVALID_ARGUMENT (index out
 *         of range, NULL outputs), DS_ERR_DRIVER.
 * \note Blocks the calling thread until the probe finishes (about 1 ms).
 */
DS_API ds_status ds_pctx_probe_sms(ds_runtime_t rt, uint32_t pctx_index,
                                   uint64_t sm_bitmap[DS_MAX_SMS / 64], uint32_t *count);

/* ------------------------------------------------------------------------ */
/* Virtual contexts                                                          */
/* ------------------------------------------------------------------------ */

/** What a kernel is part of, for policies (detshare/policy.h). */
typedef enum ds_phase {
    DS_PHASE_NONE = 0,
    DS_PHASE_PREFILL = 1,
    DS_PHASE_DECODE = 2,
} ds_phase;

typedef enum ds_vctx_class {
    DS_CLASS_BEST_EFFORT = 0,       /**< throughput work (training) */
    DS_CLASS_LATENCY_SENSITIVE = 1, /**< work with an SLO (inference) */
} ds_vctx_class;

typedef struct ds_vctx_attr {
    size_t size; uint32_t magic; uint32_t version;
    const char *name;          /**< copied (up to 63 bytes kept); NULL = "vctx<N>" */
    ds_vctx_class cls;         /**< default DS_CLASS_BEST_EFFORT */
    int priority;              /**< 0 = normal; > 0 more urgent. Mapped onto the
                                    device's stream-priority range, clamped. */
    uint32_t slo_us;           /**< latency objective per request/kernel in us; 0 = none */
    uint32_t weight;           /**< share weight, >= 1; 0 means 1 */
    int32_t initial_pctx;      /**< pool index to bind first; -1 = the full GPU.
                                    The active policy may place it elsewhere. */
    ds_phase phase;            /**< LLM phase of the vCtx's work (tpot_first), default none */
} ds_vctx_attr;

#define DS_VCTX_ATTR_INIT \
    { .size = sizeof(ds_vctx_attr), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, \
      .cls = DS_CLASS_BEST_EFFORT, .weight = 1, .initial_pctx = -1 }

/**
 * Creates a vCtx bound to attr->initial_pctx.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE (rt); DS_ERR_INVALID_ARGUMENT (out
 *         NULL, class or pCtx index out of range); DS_ERR_ABI_MISMATCH;
 *         DS_ERR_LIMIT (max_vctx reached); DS_ERR_DRIVER; DS_ERR_OUT_OF_MEMORY.
 * \note Thread-safe against other ds_vctx_create / ds_vctx_destroy calls.
 *       Creates one stream (about 4 us) in the initial pCtx; a stream in another
 *       pCtx is created the first time the vCtx is remapped there.
 */
DS_API ds_status ds_vctx_create(ds_runtime_t rt, const ds_vctx_attr *attr, ds_vctx_t *out);

/**
 * Destroys a vCtx: closes an open section, waits up to the runtime's teardown
 * timeout for its work, then destroys its streams and events.
 * \return DS_SUCCESS (all work finished); DS_ERR_INVALID_HANDLE; DS_ERR_TIMEOUT
 *         (work still running at the deadline: logged with the vCtx's name; the
 *         vCtx is destroyed anyway, the driver completes the work);
 *         DS_ERR_DEVICE_FAULT (the context had faulted; destroyed anyway).
 */
DS_API ds_status ds_vctx_destroy(ds_vctx_t vctx);

/** Grid or block dimensions. */
typedef struct ds_dim3 { uint32_t x, y, z; } ds_dim3;

/** Optional per-launch hints; NULL is fine. They never alter the launch. */
typedef struct ds_launch_hints {
    size_t size; uint32_t magic; uint32_t version;
    uint32_t expected_us; /**< caller's estimate of the kernel's duration, 0 = unknown */
    ds_phase phase;
} ds_launch_hints;

#define DS_LAUNCH_HINTS_INIT \
    { .size = sizeof(ds_launch_hints), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, .phase = DS_PHASE_NONE }

/**
 * Launches a kernel on the stream of the vCtx's bound pCtx, on the calling
 * thread, with exactly the given function, grid, block, shared memory and
 * parameters (nothing is sliced, padded or reordered: DESIGN invariant 1).
 * A remap requested with ds_vctx_remap takes effect here, before this kernel,
 * with an event hand-off that keeps program order.
 * \param[in] f                 kernel, loaded in the device's primary context
 *                              (cuModuleGetFunction) or a CUkernel cast to CUfunction.
 * \param[in] grid, block       dimensions, each >= 1 and within the device limits.
 * \param[in] shared_mem_bytes  dynamic shared memory in bytes.
 * \param[in] params            as cuLaunchKernel's kernelParams.
 * \param[in] hints             NULL or DS_LAUNCH_HINTS_INIT-initialised.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT (f NULL,
 *         hints ABI); DS_ERR_INVALID_LAUNCH (zero or oversized dimensions);
 *         DS_ERR_DRIVER (the driver refused; detail in ds_last_error_message);
 *         DS_ERR_TIMEOUT (the policy held it longer than the teardown timeout);
 *         DS_ERR_DEVICE_FAULT (the context faulted, see above).
 * \note Hot path: no lock, no allocation, no system call besides the driver's.
 *       Makes the device's primary context current on the calling thread if
 *       another context is current.
 */
DS_API ds_status ds_launch(ds_vctx_t vctx, CUfunction f, ds_dim3 grid, ds_dim3 block,
                           uint32_t shared_mem_bytes, void **params,
                           const ds_launch_hints *hints);

/**
 * Opens a section: returns the vCtx's current stream for work that does not go
 * through ds_launch (cuBLAS, PyTorch, copies). Work on it is ordered with the
 * vCtx's ds_launch work. No remap happens while the section is open.
 * \param[out] stream  the stream (valid until ds_vctx_release_stream).
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT (stream
 *         NULL); DS_ERR_BUSY (a section is already open); DS_ERR_DRIVER.
 */
DS_API ds_status ds_vctx_acquire_stream(ds_vctx_t vctx, CUstream *stream);

/** Closes the open section. \return DS_SUCCESS; DS_ERR_INVALID_HANDLE;
 *  DS_ERR_BUSY (no section open). */
DS_API ds_status ds_vctx_release_stream(ds_vctx_t vctx);

/**
 * Requests that the vCtx move to pCtx pctx_index. Takes effect at the vCtx's
 * next kernel boundary (its next ds_launch, ds_vctx_acquire_stream or
 * ds_vctx_synchronize): the new stream waits on an event recorded on the old
 * one, so program order holds (DESIGN invariant 2). Never changes a launch.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT (index).
 * \note Thread-safe: any thread may call it (a scheduler, a policy).
 */
DS_API ds_status ds_vctx_remap(ds_vctx_t vctx, uint32_t pctx_index);

/** pCtx the vCtx is bound to now (after any pending remap was applied). */
DS_API ds_status ds_vctx_get_pctx(ds_vctx_t vctx, uint32_t *pctx_index);

/**
 * Waits for all of the vCtx's work. Earlier streams are chained into the
 * current one by the remap hand-off, so waiting on the current stream covers
 * everything the vCtx ever submitted. Applies a pending remap first unless a
 * section is open.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_DRIVER (a kernel failed;
 *         detail in ds_last_error_message).
 */
DS_API ds_status ds_vctx_synchronize(ds_vctx_t vctx);

/** Per-vCtx counters. kernel_time_ns covers sampled kernels only. */
typedef struct ds_vctx_stats {
    size_t size; uint32_t magic; uint32_t version;
    uint64_t launches;        /**< kernels launched through ds_launch */
    uint64_t sections;        /**< sections closed */
    uint64_t remaps;          /**< remaps carried out */
    uint64_t sampled_kernels; /**< launches timed with events (every DS_SAMPLE_PERIOD-th, default 256) */
    uint64_t kernel_time_ns;  /**< summed device time of the sampled kernels */
    uint32_t pctx;            /**< bound pCtx */
    uint32_t streams;         /**< streams this vCtx has created */
    uint64_t holds;           /**< launches (or sections) a policy held before dispatch */
    uint32_t window_us;       /**< bound on predicted work in flight, 0 = none */
    int urgent;               /**< running on its highest-priority stream */
    double inflight_us;       /**< predicted work submitted and not known finished */
    uint32_t gate_interval_us; /**< predicted us between its gates; DS_GATES_NONE: no gates */
    int gate_closed;          /**< its gate is closed now */
    uint64_t gates;           /**< gates placed in its streams */
    uint64_t gate_closes;     /**< times its gate was closed */
    uint64_t gate_closed_us;  /**< time its gate spent closed (us), closures that ended */
    uint64_t gate_holds;      /**< launches or sections that waited for its gate to open */
    uint64_t overruns;        /**< watchdog: tracked work that ran far past its profile */
} ds_vctx_stats;

/** Size of ds_vctx_stats before `gate_interval_us`: still accepted, filled up
 *  to that size. */
#define DS_VCTX_STATS_SIZE_V1 offsetof(ds_vctx_stats, gate_interval_us)

#define DS_VCTX_STATS_INIT { .size = sizeof(ds_vctx_stats), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/** Reads the counters. Safe from any thread (values may lag by a launch).
 *  \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT;
 *  DS_ERR_ABI_MISMATCH. */
DS_API ds_status ds_vctx_get_stats(ds_vctx_t vctx, ds_vctx_stats *stats);

/** Runtime-wide figures of gates, the RCK and the watchdog. */
typedef struct ds_runtime_stats {
    size_t size; uint32_t magic; uint32_t version;
    ds_gate_mode gates;          /**< gate writer in force (AUTO resolved; OFF when
                                      the driver lacks what gates need) */
    int rck_running;             /**< 1 while the RCK is resident (started, not
                                      stopped); whether it still beats is
                                      heartbeat_age_us */
    uint32_t rck_sm_count;       /**< SMs of the group the RCK runs on, 0 without it */
    uint64_t rck_beats;          /**< heartbeats the RCK wrote */
    double heartbeat_age_us;     /**< since the watchdog last saw the heartbeat
                                      advance; -1 without the RCK or before its
                                      first beat was seen */
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
                                      copy in flight (6 with the default 8) */
    uint64_t gate_refusals;      /**< closes refused for want of connections */
    uint64_t gate_expiries;      /**< gates the runtime reopened after they stayed
                                      closed for the teardown timeout */
} ds_runtime_stats;

#define DS_RUNTIME_STATS_INIT { .size = sizeof(ds_runtime_stats), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/** Reads the runtime's gate, RCK and watchdog figures. Safe from any thread.
 *  \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT (stats
 *  NULL); DS_ERR_ABI_MISMATCH. */
DS_API ds_status ds_runtime_get_stats(ds_runtime_t rt, ds_runtime_stats *stats);

/** Name given at creation. \return DS_SUCCESS; DS_ERR_INVALID_HANDLE;
 *  DS_ERR_INVALID_ARGUMENT. The string lives as long as the vCtx. */
DS_API ds_status ds_vctx_get_name(ds_vctx_t vctx, const char **name);

/* ------------------------------------------------------------------------ */
/* Tenant memory (issue 8)                                                   */
/* ------------------------------------------------------------------------ */

/** Memory accounting of one vCtx (ds_vctx_get_mem_stats). Byte figures count
 *  mapped bytes: each allocation rounded up to the allocation granularity. */
typedef struct ds_mem_stats {
    size_t size; uint32_t magic; uint32_t version;
    uint64_t bytes_allocated;   /**< bytes mapped for the vCtx now */
    uint64_t allocations;       /**< live allocations */
    uint64_t peak_bytes;        /**< highest bytes_allocated so far */
    uint64_t quota_bytes;       /**< quota in force, 0 = none */
    uint64_t total_allocations; /**< successful ds_mem_alloc calls so far */
    uint64_t quota_refusals;    /**< ds_mem_alloc calls refused with DS_ERR_MEMORY_QUOTA */
    uint64_t granularity;       /**< allocation granularity in bytes (0 until the
                                     first ds_mem_alloc) */
    uint64_t working_set_bytes; /**< mapped bytes of the allocations that the
                                     parameters of the last working_set_window
                                     sampled launches pointed into */
    uint32_t working_set_window; /**< sampled launches that window spans (16) */
    uint64_t sampled_launches;  /**< sampled launches scanned so far (those of
                                     ds_vctx_stats.sampled_kernels made while the
                                     vCtx had allocations and the driver knows
                                     parameter layouts) */
    uint64_t copies;            /**< ds_memcpy_async copies completed */
    uint64_t copy_bytes;        /**< bytes those copies moved over the link */
    uint64_t copy_wait_ns;      /**< summed time the vCtx's ready chunks waited
                                     for the link behind other tenants' chunks */
} ds_mem_stats;

#define DS_MEM_STATS_INIT { .size = sizeof(ds_mem_stats), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION }

/**
 * Allocates device memory for a vCtx through the CUDA virtual memory
 * management API: reserves an address range (cuMemAddressReserve), creates
 * pinned device memory (cuMemCreate) of `bytes` rounded up to the allocation
 * granularity (cuMemGetAllocationGranularity, minimum; 2 MiB on Hopper and on
 * the simulated device), maps it (cuMemMap) and grants the device read/write
 * access (cuMemSetAccess). The rounded size is charged to the vCtx's quota
 * before any driver call, and the allocation is entered in the vCtx's
 * registry, which kernel-parameter introspection and a future cross-GPU move
 * use. On the simulated device the memory is host memory, zero-filled,
 * readable and writable by the host at the returned address.
 * \param[in]  bytes  bytes wanted, >= 1.
 * \param[out] out    device address of the allocation (on success only).
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT (bytes 0,
 *         out NULL, size overflow); DS_ERR_MEMORY_QUOTA (the rounded size
 *         would take the vCtx past its quota: nothing was allocated);
 *         DS_ERR_NOT_SUPPORTED (the driver lacks the VMM entry points or the
 *         device refuses them); DS_ERR_DRIVER (a VMM call failed, e.g. device
 *         memory exhausted: everything done so far is undone);
 *         DS_ERR_OUT_OF_MEMORY (host memory for the registry);
 *         DS_ERR_DEVICE_FAULT.
 * \note Thread-safe: any thread may allocate and free for any live vCtx, but
 *       not concurrently with ds_vctx_destroy of that vCtx. Not for hot
 *       paths: several driver calls (tens of us on a GPU) and a lock.
 */
DS_API ds_status ds_mem_alloc(ds_vctx_t vctx, size_t bytes, CUdeviceptr *out);

/**
 * Frees an allocation of ds_mem_alloc: unmaps it (cuMemUnmap), releases the
 * physical memory (cuMemRelease) and the address range (cuMemAddressFree),
 * and returns its bytes to the vCtx's quota. The caller must make sure no
 * queued work still uses it (e.g. ds_vctx_synchronize first).
 * \param[in] ptr  the address ds_mem_alloc returned for this vCtx.
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_NOT_FOUND (ptr is not the
 *         start of a live allocation of this vCtx); DS_ERR_DRIVER (a release
 *         call failed; the allocation is dropped from the registry and the
 *         quota all the same).
 * \note Thread-safe as ds_mem_alloc.
 */
DS_API ds_status ds_mem_free(ds_vctx_t vctx, CUdeviceptr ptr);

/**
 * Sets the vCtx's device-memory quota: the most bytes (mapped, i.e. rounded
 * to the granularity) its live ds_mem_alloc allocations may total. Lowering
 * it below what is allocated frees nothing; later allocations fail until
 * enough is freed.
 * \param[in] bytes  quota in bytes; 0 = no quota (the default).
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE.
 * \note Thread-safe (any thread).
 */
DS_API ds_status ds_vctx_set_mem_quota(ds_vctx_t vctx, uint64_t bytes);

/** Reads the vCtx's memory accounting and working-set figures.
 *  \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT (stats
 *  NULL); DS_ERR_ABI_MISMATCH.
 *  \note Thread-safe (any thread); takes the vCtx's registry lock briefly. */
DS_API ds_status ds_vctx_get_mem_stats(ds_vctx_t vctx, ds_mem_stats *stats);

/**
 * Working set of a launch, without launching: which of the vCtx's
 * allocations the parameters point into. Each parameter's bytes are scanned
 * at 8-byte-aligned offsets within the parameter for values inside a live
 * allocation of this vCtx (anywhere in its mapped range), so pointers at any
 * parameter position, pointers with an offset, and pointers inside struct
 * parameters are found without knowing the kernel's signature. A value that
 * happens to fall in an allocation (an integer) is counted too: the result
 * is a superset, never a subset, of the allocations pointers reach through
 * the parameters (memory reached through pointers stored in device memory is
 * not seen). Parameter sizes come from cuFuncGetParamInfo (CUDA 12.4+; the
 * simulated device knows them from ds_sim_kernel_desc). The same scan runs
 * on ds_launch's sampled launches (every DS_SAMPLE_PERIOD-th) and feeds
 * ds_mem_stats.working_set_bytes; this call does not change those figures.
 * \param[in]  f       kernel, as for ds_launch.
 * \param[in]  params  as for ds_launch (kernelParams); NULL = no parameters.
 * \param[out] out     up to cap allocation base addresses, ascending; may be
 *                     NULL when cap is 0.
 * \param[out] n       number of allocations found (all, even past cap).
 * \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT (f or n
 *         NULL, out NULL with cap > 0); DS_ERR_NOT_SUPPORTED (the driver
 *         cannot give f's parameter layout: no cuFuncGetParamInfo);
 *         DS_ERR_OUT_OF_MEMORY.
 * \note Thread-safe (any thread); takes the vCtx's registry lock.
 */
DS_API ds_status ds_mem_working_set(ds_vctx_t vctx, CUfunction f, void **params, CUdeviceptr *out,
                                    size_t cap, size_t *n);

/** Direction of a ds_memcpy_async copy over the host<->device link. */
typedef enum ds_copy_kind {
    DS_COPY_HOST_TO_DEVICE = 0,
    DS_COPY_DEVICE_TO_HOST = 1,
} ds_copy_kind;

/**
 * Copies between host memory and device memory in the vCtx's program order,
 * with the link shared fairly between tenants. The copy runs after all work
 * the vCtx submitted before this call, and work it submits afterwards
 * (ds_launch, sections, later copies) runs after the copy: the vCtx's stream
 * waits on a gate (cuStreamWaitValue32) that the copy opens when done. The
 * runtime's copy scheduler thread (started by the first call) splits copies
 * into chunks (2 MiB; 512 KiB for best-effort vCtxs while any latency-
 * sensitive vCtx copies too) and puts one chunk at a time on the link: latency-
 * sensitive vCtxs' chunks first, best-effort vCtxs' chunks by weighted fair
 * queueing on ds_vctx_attr.weight (start-time fair queueing, Goyal et al.,
 * SIGCOMM 1996), so two backlogged BE tenants of weights 1 and 3 get 25% and
 * 75% of the chunks, and an LS copy waits for at most the one BE chunk on the
 * link. A copy's first chunk is only queued once the work before it in the
 * vCtx has finished, so a tenant's kernels never hold the link. Bytes moved
 * and time waited are in ds_mem_stats. On the simulated device the link is
 * modelled at 25 GB/s in simulated time.
 * \param[in] device  device address (ds_mem_alloc or cuMemAlloc memory).
 * \param[in] host    host buffer; it must stay valid and, for host-to-device,
 *                    unchanged until the copy is done (ds_vctx_synchronize);
 *                    pinned memory (cuMemHostAlloc) lets the GPU copy truly
 *                    asynchronously.
 * \param[in] bytes   bytes to copy; 0 is a no-op.
 * \return DS_SUCCESS (queued); DS_ERR_INVALID_HANDLE; DS_ERR_INVALID_ARGUMENT
 *         (device 0, host NULL, kind out of range); DS_ERR_NOT_SUPPORTED (the
 *         driver lacks cuMemcpy{HtoD,DtoH}Async or stream memory operations);
 *         DS_ERR_DRIVER; DS_ERR_OUT_OF_MEMORY; DS_ERR_DEVICE_FAULT. A copy that
 *         fails later on the copy thread is logged and its gate opened, so the
 *         vCtx never hangs; the error shows as a device fault if sticky.
 * \note Owner thread of the vCtx (like ds_launch). Not a hot path: an event,
 *       a gate and a heap allocation per copy. Destroying the vCtx waits for
 *       its copies up to the teardown timeout, then cancels those not started.
 */
DS_API ds_status ds_memcpy_async(ds_vctx_t vctx, CUdeviceptr device, void *host, size_t bytes,
                                 ds_copy_kind kind);

#ifdef __cplusplus
}
#endif

#endif /* DETSHARE_DETSHARE_H */
