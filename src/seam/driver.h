/*
 * The driver seam. Everything above it calls the CUDA driver through a table
 * of function pointers, filled either from libcuda.so.1 (dlopen +
 * cuGetProcAddress, once, under pthread_once; driver.c) or by the simulated
 * device. The library never links libcuda.
 *
 * Model: NCCL 2.20 src/misc/cudawrap.cc.
 */
#ifndef DS_SEAM_DRIVER_H
#define DS_SEAM_DRIVER_H

#include <cuda.h>

#include "detshare/detshare.h"
#include "seam/log.h"

/* Lowest driver the runtime accepts: cuGreenCtxStreamCreate arrived in 12.5. */
#define DS__MIN_DRIVER_VERSION 12050

/*
 * X(name, cuda_version, required): every driver entry point used.
 * `name` is the cuda.h spelling (macros like cuMemAlloc -> cuMemAlloc_v2 apply
 * to the field type and name alike); the string passed to cuGetProcAddress is
 * the unexpanded name with the version that selects the ABI. The simulated
 * device implements each as ds__sim_<name>, with the same prototype.
 */
#define DS__DRIVER_SYMBOLS(X)                        \
    X(cuInit, 2000, 1)                               \
    X(cuDriverGetVersion, 2020, 1)                   \
    X(cuGetErrorName, 6000, 1)                       \
    X(cuGetErrorString, 6000, 1)                     \
    X(cuDeviceGetCount, 2000, 1)                     \
    X(cuDeviceGet, 2000, 1)                          \
    X(cuDeviceGetName, 2000, 1)                      \
    X(cuDeviceGetAttribute, 2000, 1)                 \
    X(cuDeviceGetPCIBusId, 4010, 1)                  \
    X(cuDevicePrimaryCtxRetain, 7000, 1)             \
    X(cuDevicePrimaryCtxRelease, 11000, 1)           \
    X(cuCtxSetCurrent, 4000, 1)                      \
    X(cuCtxGetCurrent, 4000, 1)                      \
    X(cuCtxGetStreamPriorityRange, 5050, 1)          \
    X(cuDeviceGetDevResource, 12040, 1)              \
    X(cuDevSmResourceSplitByCount, 12040, 1)         \
    X(cuDevResourceGenerateDesc, 12040, 1)           \
    X(cuGreenCtxCreate, 12040, 1)                    \
    X(cuGreenCtxDestroy, 12040, 1)                   \
    X(cuCtxFromGreenCtx, 12040, 1)                   \
    X(cuGreenCtxStreamCreate, 12050, 1)              \
    X(cuStreamDestroy, 4000, 1)                      \
    X(cuStreamSynchronize, 2000, 1)                  \
    X(cuStreamQuery, 2000, 1)                        \
    X(cuStreamWaitEvent, 3020, 1)                    \
    X(cuEventCreate, 2000, 1)                        \
    X(cuEventDestroy, 4000, 1)                       \
    X(cuEventRecord, 2000, 1)                        \
    X(cuEventQuery, 2000, 1)                         \
    X(cuEventSynchronize, 2000, 1)                   \
    X(cuEventElapsedTime, 12080, 1)                  \
    X(cuLaunchKernel, 4000, 1)                       \
    X(cuModuleLoadData, 2000, 1)                     \
    X(cuModuleUnload, 2000, 1)                       \
    X(cuModuleGetFunction, 2000, 1)                  \
    X(cuMemAlloc, 3020, 1)                           \
    X(cuMemFree, 3020, 1)                            \
    X(cuMemcpyHtoD, 3020, 1)                         \
    X(cuMemcpyDtoH, 3020, 1)                         \
    X(cuMemsetD32, 3020, 1)                          \
    X(cuStreamWaitValue32, 12000, 0)                 \
    X(cuStreamWriteValue32, 12000, 0)                \
    X(cuStreamGetGreenCtx, 12040, 0)                 \
    /* tenant memory: the virtual memory management API and               \
     * kernel-parameter layout; optional, ds_mem_* answer NOT_SUPPORTED */ \
    X(cuMemGetAllocationGranularity, 10020, 0)       \
    X(cuMemAddressReserve, 10020, 0)                 \
    X(cuMemAddressFree, 10020, 0)                    \
    X(cuMemCreate, 10020, 0)                         \
    X(cuMemRelease, 10020, 0)                        \
    X(cuMemMap, 10020, 0)                            \
    X(cuMemUnmap, 10020, 0)                          \
    X(cuMemSetAccess, 10020, 0)                      \
    X(cuFuncGetParamInfo, 12040, 0)                  \
    X(cuMemcpyHtoDAsync, 3020, 0)                    \
    X(cuMemcpyDtoHAsync, 3020, 0)                    \
    /* gates and the RCK: pinned host memory mapped into the               \
     * device; optional, gates are off without them */                    \
    X(cuMemHostAlloc, 2020, 0)                       \
    X(cuMemHostGetDevicePointer, 3020, 0)            \
    X(cuMemFreeHost, 2000, 0)                        \
    /* graphs (ds_graph_*): capture per pCtx, instantiate, launch;          \
     * optional, ds_graph_* answer NOT_SUPPORTED without them */            \
    X(cuStreamBeginCapture, 10010, 0)                \
    X(cuStreamEndCapture, 10000, 0)                  \
    X(cuGraphInstantiateWithFlags, 11040, 0)         \
    X(cuGraphUpload, 11010, 0)                       \
    X(cuGraphLaunch, 10000, 0)                       \
    X(cuGraphExecDestroy, 10000, 0)                  \
    X(cuGraphDestroy, 10000, 0)                      \
    X(cuGraphGetNodes, 10000, 0)                     \
    X(cuGraphNodeGetType, 10000, 0)                  \
    X(cuGraphKernelNodeGetParams, 12000, 0)          \
    X(cuGraphKernelNodeSetParams, 12000, 0)          \
    /* segments (automatic cuts): clone a template, drop what is outside \
     * a segment; optional, graphs stay one segment per piece without */   \
    X(cuGraphClone, 10000, 0)                        \
    X(cuGraphNodeFindInClone, 10000, 0)              \
    X(cuGraphDestroyNode, 10000, 0)                  \
    X(cuGraphGetEdges, 12030, 0)                     \
    X(cuFuncGetName, 12030, 0)                       \
    X(cuMemGetInfo, 3020, 0)                         \
    X(cuThreadExchangeStreamCaptureMode, 10010, 0)

typedef struct ds__driver {
#define DS__DRIVER_FIELD(name, ver, req) __typeof__(name) *name;
    DS__DRIVER_SYMBOLS(DS__DRIVER_FIELD)
#undef DS__DRIVER_FIELD
    int version;          /* cuDriverGetVersion, 0 for the simulated device */
    const char *origin;   /* "libcuda.so.1 at <path>" or "simulated device" */
} ds__driver;

/*
 * Loads libcuda once (pthread_once) and returns its table.
 * DS_ERR_NO_DRIVER: dlopen or a required symbol failed; DS_ERR_DRIVER_TOO_OLD:
 * version below DS__MIN_DRIVER_VERSION; DS_ERR_DRIVER: cuInit failed.
 * The detail (path tried, version found, missing symbol) is logged and kept in
 * ds_last_error_message on every call that fails.
 */
ds_status ds__driver_cuda(const ds__driver **out);

/*
 * The device-ops table: what differs between devices beyond the driver
 * calls. Core never asks which device it runs on; it calls these. `dev` is
 * the backend's CUdevice.
 */
typedef struct ds__devops {
    const char *name; /* "CUDA" or "simulated" (messages) */
    /* Monotonic device clock in us (the runtime subtracts its value at
     * creation). CUDA: CLOCK_MONOTONIC; simulated: simulated time. */
    double (*now_us)(CUdevice dev);
    /* Lets `us` of device time pass on the calling thread (CUDA: sleeps;
     * simulated: advances or waits for simulated time, running due work). */
    void (*sleep_us)(CUdevice dev, double us);
    /* Fault attribution: 1 and the stream whose kernel raised the device's
     * sticky fault when the device knows it, 0 otherwise (CUDA: never). */
    int (*fault_stream)(CUdevice dev, CUstream *stream);
    /* Called after a copy chunk of `bytes` finished on the device: waits out
     * what the link would still take (the simulator moves bytes instantly;
     * CUDA: NULL, the copy took its own time). */
    void (*link_wait)(CUdevice dev, size_t bytes);
    /* Host<->device bandwidth the copy scheduler paces with, bytes per us. */
    double link_bytes_per_us;
    /* Times a poller may sched_yield before it sleeps (0: only sleeping
     * moves the device's time, so yielding would spin). */
    uint32_t poll_yields;
    /* Time moves only when a host thread waits (a simulated virtual clock):
     * no wall-clock watcher may judge the device. */
    int virtual_clock;
    /* Why hwloc cannot place the device (no PCI location), or NULL. */
    const char *no_pci_reason;
    /* Releases the device instance (after every driver object is gone). */
    void (*close)(CUdevice dev);
} ds__devops;

/* A device as core receives it: the driver table, the device-ops table and
 * the device handle both take. */
typedef struct ds__backend {
    const ds__driver *cu;
    const ds__devops *ops;
    CUdevice dev;
} ds__backend;

/* The CUDA backend's device-ops table (driver.c). */
extern const ds__devops ds__cuda_devops;

/* The status of a failed driver call: DS_ERR_OUT_OF_MEMORY for
 * CUDA_ERROR_OUT_OF_MEMORY (device memory, or the driver's own host memory),
 * DS_ERR_DRIVER otherwise. */
static inline ds_status ds__cu_status(CUresult r)
{
    return r == CUDA_ERROR_OUT_OF_MEMORY ? DS_ERR_OUT_OF_MEMORY : DS_ERR_DRIVER;
}

/* Called first by every thread the library starts (scheduler, copier, RCK
 * watchdog): their queries and synchronizations touch only the library's
 * own streams and events, never a capturing stream, so the thread takes the
 * relaxed capture mode (cuThreadExchangeStreamCaptureMode, CUDA 10.1). In
 * the default global mode each such call would be a "potentially unsafe"
 * call that invalidates any global-mode capture the application has under
 * way on another thread (PyTorch's torch.cuda.graph default): measured on an
 * H200, the scheduler's 1 ms health query broke a torch capture made beside
 * a live runtime in 19 of 41 runs, 0 of 10 with this (docs/device-facts.md). */
static inline void ds__thread_capture_relaxed(const ds__driver *cu)
{
    if (cu->cuThreadExchangeStreamCaptureMode) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        cu->cuThreadExchangeStreamCaptureMode(&mode);
    }
}

/* Short text for a CUresult through the table (never NULL). */
static inline const char *ds__cu_error_name(const ds__driver *cu, CUresult r)
{
    const char *n = NULL;
    if (cu && cu->cuGetErrorName && cu->cuGetErrorName(r, &n) == CUDA_SUCCESS && n)
        return n;
    return "CUDA_ERROR_UNKNOWN";
}

/* Records a failed driver call (ds__cu_status) with the call's text, as
 * ds__fail (log.h) does; `rt_` is anything with the driver table in `cu`. */
#define DS__CU(rt_, call)                                                                          \
    do {                                                                                           \
        CUresult ds__r_ = (rt_)->cu->call;                                                         \
        if (DS__UNLIKELY(ds__r_ != CUDA_SUCCESS))                                                  \
            return ds__fail(ds__cu_status(ds__r_), "%s:%d %s -> %s", __FILE__, __LINE__, #call,    \
                            ds__cu_error_name((rt_)->cu, ds__r_));                                 \
    } while (0)

#endif /* DS_SEAM_DRIVER_H */
