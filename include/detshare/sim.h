/*
 * libdetshare simulated device: a GPU model in virtual time behind the same
 * driver seam as CUDA (src/core/driver.h). It models SMs, green-context SM
 * partitions, streams with priorities, events and kernels made of blocks of a
 * given duration, dispatched the way Hopper's block scheduler does (a kernel's
 * blocks go out in stream-priority order, then first come first served), so
 * head-of-line blocking and partition isolation are observable without a GPU.
 *
 * Time: in DS_SIM_CLOCK_VIRTUAL time only moves when the host waits (stream or
 * event synchronize, ds_sim_sleep_until), so tests are exact and fast. In
 * DS_SIM_CLOCK_REALTIME one simulated microsecond is time_scale wall-clock
 * microseconds, for multi-threaded programs (examples) that sleep and poll.
 *
 * Thread-safety: every function is safe from any thread (one lock per device).
 */
#ifndef DETSHARE_SIM_H
#define DETSHARE_SIM_H

#include <detshare/detshare.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_sim_clock {
    DS_SIM_CLOCK_VIRTUAL = 0,
    DS_SIM_CLOCK_REALTIME = 1,
} ds_sim_clock;

/** Shape of the simulated GPU. Initialise with DS_SIM_CONFIG_INIT. */
typedef struct ds_sim_config {
    size_t size; uint32_t magic; uint32_t version;
    uint32_t sm_count;            /**< default 132 (H100/H200) */
    uint32_t min_partition_sms;   /**< minSmPartitionSize, default 8 */
    uint32_t sm_alignment;        /**< smCoscheduledAlignment, default 8 */
    ds_sim_clock clock;           /**< default DS_SIM_CLOCK_VIRTUAL */
    double time_scale;            /**< REALTIME: wall us per simulated us, default 1.0 */
    double launch_overhead_us;    /**< simulated host cost per cuLaunchKernel, default 0 */
    uint32_t trace_capacity;      /**< kernel records kept (ring); default 65536, 0 = none */
} ds_sim_config;

#define DS_SIM_CONFIG_INIT \
    { .size = sizeof(ds_sim_config), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, .sm_count = 132, \
      .min_partition_sms = 8, .sm_alignment = 8, .clock = DS_SIM_CLOCK_VIRTUAL, .time_scale = 1.0, \
      .launch_overhead_us = 0.0, .trace_capacity = 65536 }

/** Most kernel parameters a simulated kernel declares. */
#define DS_SIM_MAX_PARAMS 16
/** Bytes of parameters a trace record keeps. */
#define DS_SIM_PARAM_BYTES 256

/** A simulated kernel. Each block runs block_us on one SM; blocks_per_sm of
 *  them fit on an SM at once (occupancy). */
typedef struct ds_sim_kernel_desc {
    size_t size; uint32_t magic; uint32_t version;
    const char *name;                          /**< copied */
    double block_us;                           /**< duration of one block, > 0 */
    uint32_t blocks_per_sm;                    /**< 1, 2, 4 or 8; 0 = 1 */
    uint32_t num_params;                       /**< <= DS_SIM_MAX_PARAMS */
    uint32_t param_sizes[DS_SIM_MAX_PARAMS];   /**< bytes of each parameter */
    uint32_t faults;                           /**< nonzero: the kernel faults (an illegal
                                                    address) when its first block starts.
                                                    As on a GPU the error is sticky: from then
                                                    on every call on the device's streams,
                                                    events and launches returns
                                                    CUDA_ERROR_ILLEGAL_ADDRESS, no further
                                                    work runs and waits return at once;
                                                    destroy calls still free. Default 0. */
} ds_sim_kernel_desc;

#define DS_SIM_KERNEL_DESC_INIT \
    { .size = sizeof(ds_sim_kernel_desc), .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION, .block_us = 10.0, \
      .blocks_per_sm = 1 }

/** One kernel as the simulated device ran it. */
typedef struct ds_sim_kernel_record {
    uint64_t seq;                 /**< launch order on the device, from 0 */
    CUfunction function;
    char name[64];
    CUstream stream;
    ds_dim3 grid, block;
    uint32_t shared_mem_bytes;
    uint32_t param_bytes;         /**< bytes captured in params (<= DS_SIM_PARAM_BYTES) */
    uint8_t params[DS_SIM_PARAM_BYTES]; /**< the parameters, concatenated in order */
    double submit_us;             /**< simulated time of cuLaunchKernel */
    double start_us;              /**< first block started; -1 if not yet */
    double end_us;                /**< last block finished; -1 if not yet */
    uint64_t sm_mask[DS_MAX_SMS / 64]; /**< SMs that ran at least one block */
} ds_sim_kernel_record;

/** Creates a simulated kernel on the runtime's simulated device.
 *  \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_NOT_SUPPORTED (runtime is
 *  not on the simulated device); DS_ERR_INVALID_ARGUMENT; DS_ERR_ABI_MISMATCH;
 *  DS_ERR_OUT_OF_MEMORY. The function lives until the runtime is destroyed. */
DS_API ds_status ds_sim_kernel_create(ds_runtime_t rt, const ds_sim_kernel_desc *desc,
                                      CUfunction *out);

/** Launches a simulated kernel straight onto a stream, as cuBLAS or PyTorch
 *  would inside a section (ds_vctx_acquire_stream).
 *  \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_NOT_SUPPORTED;
 *  DS_ERR_INVALID_ARGUMENT; DS_ERR_INVALID_LAUNCH. */
DS_API ds_status ds_sim_launch_on_stream(ds_runtime_t rt, CUstream stream, CUfunction f,
                                         ds_dim3 grid, ds_dim3 block, void **params);

/** Current simulated time in microseconds. */
DS_API ds_status ds_sim_now_us(ds_runtime_t rt, double *now_us);

/** Advances simulated time to t_us (VIRTUAL) or sleeps until it (REALTIME).
 *  Work runs meanwhile. Returns at once if t_us is in the past. */
DS_API ds_status ds_sim_sleep_until(ds_runtime_t rt, double t_us);

/** Copies the kernel records kept (oldest first) into out[0..cap), sets *count
 *  to the number copied. Records of running kernels have end_us = -1; with
 *  DS_RCK_ON the resident control kernel is one of them ("ds_rck", one block,
 *  running until the runtime is destroyed).
 *  \return DS_SUCCESS; DS_ERR_INVALID_HANDLE; DS_ERR_NOT_SUPPORTED;
 *  DS_ERR_INVALID_ARGUMENT (out NULL with cap > 0, count NULL). */
DS_API ds_status ds_sim_trace_get(ds_runtime_t rt, ds_sim_kernel_record *out, size_t cap,
                                  size_t *count);

/** Drops every kept record (sequence numbers keep counting). */
DS_API ds_status ds_sim_trace_clear(ds_runtime_t rt);

#ifdef __cplusplus
}
#endif

#endif /* DETSHARE_SIM_H */
