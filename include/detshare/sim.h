/**
 * \file detshare/sim.h
 * \brief libdetshare simulated device: a GPU model in virtual time, for tests
 *        and for machines without a GPU.
 *
 * A runtime created with ds_runtime_config::device = ::DS_DEVICE_SIM drives a
 * simulated GPU behind the same driver seam as CUDA, so every function of
 * detshare/detshare.h and detshare/policy.h works on it unchanged. Each such
 * runtime gets its own device instance (at most 64 alive at once), its only
 * device: ds_runtime_config::device_ordinal must be 0. The model
 * has SMs, green-context SM partitions, streams with priorities, events, and
 * kernels made of blocks of a given duration, dispatched the way Hopper's
 * block scheduler does (a kernel's blocks go out in stream-priority order,
 * then first come first served), so head-of-line blocking and partition
 * isolation are observable without a GPU (docs/design.md describes the model).
 * CUDA graphs are captured and replayed as on the GPU: a graph's kernels run
 * on the SMs of the context they were captured in, whatever stream launches
 * it (kernels of ds_sim_kernel_create() also carry a CUkernel, like kernels
 * launched through the CUDA runtime, so their graph nodes can be re-bound;
 * module kernels cannot). Device memory is 80 GiB: cuMemAlloc and graph
 * instantiations (64 KiB plus 1 KiB per node) count against it.
 *
 * Time: in ::DS_SIM_CLOCK_VIRTUAL time only moves when the host waits (stream
 * or event synchronize, ds_sim_sleep_until()), so tests are exact and fast.
 * In ::DS_SIM_CLOCK_REALTIME one simulated microsecond is
 * ds_sim_config::time_scale wall-clock microseconds, for multi-threaded
 * programs (examples) that sleep and poll. Several threads on a virtual clock
 * repeat themselves exactly when they take turns (ds_sim_thread_reserve()).
 *
 * Thread-safety: every function is safe from any thread (one lock per device).
 */
#ifndef DETSHARE_SIM_H
#define DETSHARE_SIM_H

#include <detshare/detshare.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * \defgroup ds_sim_group Simulated device
 * \brief Shape and clock of the simulated GPU, simulated kernels, direct
 *        launches, simulated time and the kernel trace.
 * \{
 */

/** How simulated time relates to wall-clock time. */
typedef enum ds_sim_clock {
    DS_SIM_CLOCK_VIRTUAL = 0,  /**< time moves only when the host waits: exact, fast */
    DS_SIM_CLOCK_REALTIME = 1, /**< time follows the wall clock, scaled by time_scale */
} ds_sim_clock;

/** Shape of the simulated GPU (ds_runtime_config::sim). Initialise with
 *  ::DS_SIM_CONFIG_INIT; a field out of range makes ds_runtime_create() fail
 *  with ::DS_ERR_INVALID_ARGUMENT (zero is not "default" here). */
typedef struct ds_sim_config {
    size_t size; /**< sizeof(ds_sim_config) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    uint32_t sm_count;            /**< SMs, 1 to ::DS_MAX_SMS; default 132 (as an H100 or H200) */
    uint32_t min_partition_sms;   /**< minSmPartitionSize (SMs per group of the split),
                                       1..::DS_MAX_SMS; default 8 */
    uint32_t sm_alignment;        /**< smCoscheduledAlignment, 1..::DS_MAX_SMS; default 8 */
    ds_sim_clock clock;           /**< default ::DS_SIM_CLOCK_VIRTUAL */
    double time_scale;            /**< ::DS_SIM_CLOCK_REALTIME: wall us per simulated us,
                                       > 0 and finite; default 1.0 (ignored in VIRTUAL) */
    double launch_overhead_us;    /**< ::DS_SIM_CLOCK_VIRTUAL: simulated host cost (us) by
                                       which each cuLaunchKernel advances the clock, >= 0;
                                       default 0 */
    uint32_t trace_capacity;      /**< kernel records kept (a ring, oldest dropped first);
                                       default 65536, 0 = none */
} ds_sim_config;

/** Initialiser of ::ds_sim_config: 132 SMs in groups of 8, virtual time, no
 *  launch cost, 65536 trace records. */
#define DS_SIM_CONFIG_INIT \
    { .size = sizeof(ds_sim_config), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, .sm_count = 132, \
      .min_partition_sms = 8, .sm_alignment = 8, .clock = DS_SIM_CLOCK_VIRTUAL, .time_scale = 1.0, \
      .launch_overhead_us = 0.0, .trace_capacity = 65536 }

/** Most kernel parameters a simulated kernel declares. */
#define DS_SIM_MAX_PARAMS 16
/** Bytes of parameters a trace record keeps. */
#define DS_SIM_PARAM_BYTES 256

/** Longest simulated block ds_sim_kernel_create() accepts, in simulated us
 *  (1000 s): longer ones are refused rather than left to overflow the clock. */
#define DS_SIM_MAX_BLOCK_US 1e9

/** A simulated kernel (ds_sim_kernel_create()). Each block runs block_us on one
 *  SM; blocks_per_sm of them fit on an SM at once (occupancy). */
typedef struct ds_sim_kernel_desc {
    size_t size; /**< sizeof(ds_sim_kernel_desc) */ uint32_t magic; /**< ::DS_ABI_MAGIC */ uint32_t version; /**< ::DS_ABI_VERSION */
    const char *name;                          /**< copied (up to 63 bytes kept); NULL =
                                                    "sim_kernel" */
    double block_us;                           /**< duration of one block in simulated us,
                                                    > 0 and at most ::DS_SIM_MAX_BLOCK_US */
    uint32_t blocks_per_sm;                    /**< 1, 2, 4 or 8; 0 = 1 */
    uint32_t num_params;                       /**< <= ::DS_SIM_MAX_PARAMS */
    uint32_t param_sizes[DS_SIM_MAX_PARAMS];   /**< bytes of each parameter (what
                                                    cuFuncGetParamInfo reports, and what a
                                                    trace record captures) */
    uint32_t faults;                           /**< nonzero: the kernel faults (an illegal
                                                    address) when its first block starts.
                                                    As on a GPU the error is sticky: from then
                                                    on every call on the device's streams,
                                                    events and launches returns
                                                    CUDA_ERROR_ILLEGAL_ADDRESS, no further
                                                    work runs and waits return at once;
                                                    destroy calls still free. Default 0. */
} ds_sim_kernel_desc;

/** Initialiser of ::ds_sim_kernel_desc: blocks of 10 us, one per SM, no
 *  parameters. */
#define DS_SIM_KERNEL_DESC_INIT \
    { .size = sizeof(ds_sim_kernel_desc), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, .block_us = 10.0, \
      .blocks_per_sm = 1 }

/** One kernel as the simulated device ran it (ds_sim_trace_get()). Times are
 *  simulated us since the device was created. */
typedef struct ds_sim_kernel_record {
    uint64_t seq;                 /**< launch order on the device, from 0 */
    CUfunction function;          /**< the kernel launched */
    char name[64];                /**< its name (ds_sim_kernel_desc::name) */
    CUstream stream;              /**< the stream it was launched on */
    ds_dim3 grid, /**< grid dimensions as launched */ block; /**< block dimensions as launched */
    uint32_t shared_mem_bytes;    /**< dynamic shared memory in bytes, as launched */
    uint32_t param_bytes;         /**< bytes captured in params (<= ::DS_SIM_PARAM_BYTES) */
    uint8_t params[DS_SIM_PARAM_BYTES]; /**< the parameters, concatenated in order */
    double submit_us;             /**< simulated time of cuLaunchKernel */
    double start_us;              /**< first block started; -1 if not yet */
    double end_us;                /**< last block finished; -1 if not yet */
    uint64_t sm_mask[DS_MAX_SMS / 64]; /**< SMs that ran at least one block (bit s of
                                            word s / 64) */
} ds_sim_kernel_record;

/**
 * \brief Creates a simulated kernel on the runtime's simulated device.
 * \param[in]  rt    a runtime on ::DS_DEVICE_SIM.
 * \param[in]  desc  a ::DS_SIM_KERNEL_DESC_INIT-initialised description (read
 *                   during the call only).
 * \param[out] out   the kernel, to pass to ds_launch() or
 *                   ds_sim_launch_on_stream(); it lives until the runtime is
 *                   destroyed.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED (the
 *         runtime is not on the simulated device); ::DS_ERR_INVALID_ARGUMENT
 *         (desc or out NULL, block_us not in (0, ::DS_SIM_MAX_BLOCK_US], blocks_per_sm not
 *         0, 1, 2, 4 or 8, num_params above ::DS_SIM_MAX_PARAMS);
 *         ::DS_ERR_ABI_MISMATCH (desc's header); ::DS_ERR_OUT_OF_MEMORY.
 * \note Thread-safe.
 */
DS_API ds_status ds_sim_kernel_create(ds_runtime_t rt, const ds_sim_kernel_desc *desc,
                                      CUfunction *out);

/**
 * \brief Launches a simulated kernel straight onto a stream, as cuBLAS or
 *        PyTorch would inside a section (ds_vctx_acquire_stream()).
 *
 * The launch bypasses libdetshare (no policy, no accounting), like any
 * library launching on a section's stream; no dynamic shared memory.
 * \param[in] rt      a runtime on ::DS_DEVICE_SIM.
 * \param[in] stream  a stream of that device (a section's), or NULL for the
 *                    device's default stream.
 * \param[in] f       a kernel of ds_sim_kernel_create() on this device.
 * \param[in] grid    grid dimensions, each >= 1, at most (2^31-1, 65535, 65535).
 * \param[in] block   block dimensions, each >= 1, at most (1024, 1024, 64)
 *                    and 1024 threads.
 * \param[in] params  as cuLaunchKernel's kernelParams, one pointer per declared
 *                    parameter; NULL for a kernel without parameters.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE (rt, or its device is gone);
 *         ::DS_ERR_NOT_SUPPORTED (not a simulated-device runtime);
 *         ::DS_ERR_INVALID_LAUNCH (dimensions); ::DS_ERR_INVALID_ARGUMENT (f
 *         not a kernel of this device, stream not usable on it, params NULL
 *         or holding NULL for a kernel with parameters);
 *         ::DS_ERR_OUT_OF_MEMORY; ::DS_ERR_DEVICE_FAULT (the device faulted
 *         earlier).
 * \note Thread-safe.
 */
DS_API ds_status ds_sim_launch_on_stream(ds_runtime_t rt, CUstream stream, CUfunction f,
                                         ds_dim3 grid, ds_dim3 block, void **params);

/**
 * \brief Current simulated time.
 * \param[in]  rt      a runtime on ::DS_DEVICE_SIM.
 * \param[out] now_us  simulated microseconds since the device was created.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED;
 *         ::DS_ERR_INVALID_ARGUMENT (now_us NULL).
 * \note Thread-safe.
 */
DS_API ds_status ds_sim_now_us(ds_runtime_t rt, double *now_us);

/**
 * \brief Advances simulated time to t_us (VIRTUAL) or sleeps until it
 *        (REALTIME). Work runs meanwhile.
 * \param[in] rt    a runtime on ::DS_DEVICE_SIM.
 * \param[in] t_us  simulated time to reach, in us; in the past: returns at once.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED;
 *         ::DS_ERR_INVALID_ARGUMENT (t_us not finite).
 * \note Thread-safe; blocks the calling thread in REALTIME.
 */
DS_API ds_status ds_sim_sleep_until(ds_runtime_t rt, double t_us);

/**
 * \brief Reserves a place in the turn order of a ::DS_SIM_CLOCK_VIRTUAL
 *        device, for the calling thread or a thread about to be started.
 *
 * Several host threads on one virtual-clock device are deterministic only if
 * they take turns: a thread that holds a place (ds_sim_thread_attach()) runs
 * only while it has the turn, and gives it up only by blocking in the
 * simulator (stream or event synchronize, ds_vctx_synchronize(),
 * ds_sim_sleep_until(), a policy's hold, ds_sim_thread_release()). The turn
 * goes to the lowest place whose thread can go on at the current simulated
 * instant; the clock moves only when none can, to the next batch end or
 * sleep end. What the taking-part threads see and the order in which they act
 * then depend on the program alone, never on the OS's thread timing. Such a
 * thread must not block anywhere else while it holds the turn (a mutex or
 * condition another taking-part thread releases, pthread_join() of one):
 * wait with ds_sim_sleep_until() instead. Threads without a place run as
 * before, but while any place is taken their waits do not move the clock.
 *
 * Reserve the place on the thread that starts the new one, before starting it
 * (places are numbered in the order reserved, and the number breaks ties), so
 * that the order does not depend on when the new thread gets going: from a
 * thread that takes turns itself, or, from one that does not, every place
 * before any of the threads starts.
 * \param[in]  rt      a runtime on ::DS_DEVICE_SIM with a virtual clock.
 * \param[out] ticket  the place (>= 1), for ds_sim_thread_attach() and
 *                     ds_sim_thread_release().
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED (a CUDA
 *         device, or ::DS_SIM_CLOCK_REALTIME); ::DS_ERR_INVALID_ARGUMENT
 *         (ticket NULL); ::DS_ERR_LIMIT (32 places taken).
 * \note Thread-safe.
 */
DS_API ds_status ds_sim_thread_reserve(ds_runtime_t rt, uint32_t *ticket);

/**
 * \brief The calling thread takes a reserved place and waits for its turn.
 * \param[in] rt      the runtime the place was reserved on.
 * \param[in] ticket  from ds_sim_thread_reserve().
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED;
 *         ::DS_ERR_INVALID_ARGUMENT (ticket not reserved, already taken, or
 *         the thread holds a place already).
 * \note Blocks until the thread's turn.
 */
DS_API ds_status ds_sim_thread_attach(ds_runtime_t rt, uint32_t ticket);

/**
 * \brief Gives a place up (the calling thread's own, or one reserved for a
 *        thread that never attached), passing the turn on. Call it before
 *        the thread ends or blocks outside the simulator.
 * \param[in] rt      the runtime the place was reserved on.
 * \param[in] ticket  from ds_sim_thread_reserve().
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED;
 *         ::DS_ERR_INVALID_ARGUMENT (not reserved, or another thread's).
 * \note Thread-safe.
 */
DS_API ds_status ds_sim_thread_release(ds_runtime_t rt, uint32_t ticket);

/**
 * \brief Gives the turn up until another taking-part thread has had one or
 *        simulated time has moved: how a thread that takes turns waits for
 *        something of the host's (another such thread's signal, a flag)
 *        instead of blocking on it. Check the condition again on return.
 * \param[in] rt  a runtime on which the calling thread takes turns.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED;
 *         ::DS_ERR_INVALID_ARGUMENT (the thread takes no turns there).
 */
DS_API ds_status ds_sim_thread_yield(ds_runtime_t rt);

/**
 * \brief Copies the kernel records kept, oldest first.
 *
 * Records of running kernels have end_us = -1 (and start_us = -1 before their
 * first block); with ::DS_RCK_ON the resident control kernel is one of them
 * ("ds_rck", one block, running until the runtime is destroyed). Kernels the
 * runtime launches itself (the ds_pctx_probe_sms() probe) are recorded too.
 * \param[in]  rt     a runtime on ::DS_DEVICE_SIM.
 * \param[out] out    room for cap records; may be NULL when cap is 0.
 * \param[in]  cap    records out has room for: the oldest cap records kept
 *                    are copied.
 * \param[out] count  number of records copied.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED;
 *         ::DS_ERR_INVALID_ARGUMENT (out NULL with cap > 0, count NULL).
 * \note Thread-safe.
 */
DS_API ds_status ds_sim_trace_get(ds_runtime_t rt, ds_sim_kernel_record *out, size_t cap,
                                  size_t *count);

/**
 * \brief Drops every kept record (sequence numbers keep counting).
 * \param[in] rt  a runtime on ::DS_DEVICE_SIM.
 * \return ::DS_SUCCESS; ::DS_ERR_INVALID_HANDLE; ::DS_ERR_NOT_SUPPORTED.
 * \note Thread-safe.
 */
DS_API ds_status ds_sim_trace_clear(ds_runtime_t rt);

/** \} */

#ifdef __cplusplus
}
#endif

#endif /* DETSHARE_SIM_H */
