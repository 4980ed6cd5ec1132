/*
 * The simulated device as the core sees it: a driver table and device
 * instances. Each runtime on DS_DEVICE_SIM creates its own device instance, so
 * runtimes (and tests) never share simulated state.
 */
#ifndef DS_SIM_SIM_H
#define DS_SIM_SIM_H

#include "seam/driver.h"
#include "detshare/sim.h"

/* Modelled host<->device link of the simulated device: 25 GB/s, in bytes per
 * us (the device-ops table's link_bytes_per_us). */
#define DS__SIM_LINK_BYTES_PER_US 25000.0

/* Opens a simulated device as a backend (backend.c): creates a device
 * instance as ds__sim_device_create does and fills out->cu (the simulated
 * driver table), out->ops (the simulator's device-ops table, with
 * virtual_clock set for a DS_SIM_CLOCK_VIRTUAL device) and out->dev.
 * out->ops->close(out->dev) destroys the device. Errors as
 * ds__sim_device_create; *out is untouched on failure. */
ds_status ds__sim_backend_open(const ds_sim_config *cfg, ds__backend *out);

/* 1 if ops is one of the simulator's device-ops tables, else 0. */
int ds__sim_is_backend(const ds__devops *ops);

/* The simulated driver table (static, always available). */
const ds__driver *ds__sim_driver(void);

/* Creates a simulated device; *dev is the CUdevice the table's calls take.
 * cfg NULL = DS_SIM_CONFIG_INIT. DS_ERR_INVALID_ARGUMENT for a bad shape
 * (sm_count 0 or > DS_MAX_SMS, partition sizes 0), DS_ERR_OUT_OF_MEMORY. */
ds_status ds__sim_device_create(const ds_sim_config *cfg, CUdevice *dev);

/* Frees the device and everything created on it (streams, events, green
 * contexts, memory, kernels) that the caller did not free. */
void ds__sim_device_destroy(CUdevice dev);

/* Simulated time of a device in us (0 if the device is gone). */
double ds__sim_now_us(CUdevice dev);

/* Lets `us` of simulated time pass (VIRTUAL: advances the clock, running the
 * work due; REALTIME: sleeps). */
void ds__sim_sleep_us(CUdevice dev, double us);

/* The device's sticky fault (CUDA_SUCCESS if none) and, when faulted, the
 * stream the faulting kernel was launched on (NULL if unknown). */
CUresult ds__sim_fault(CUdevice dev, CUstream *stream);

/* The simulated device a runtime runs on, for the public ds_sim_* functions
 * (DS_ERR_NOT_SUPPORTED for a runtime on a CUDA device). */
ds_status ds__runtime_sim_device(ds_runtime_t rt, CUdevice *dev);

/* Test hook: while stalled, the device's resident control kernels stop their
 * passes (no heartbeat, no gate mirroring), as if their SM were taken. */
void ds__sim_rck_stall(CUdevice dev, int stalled);

#endif /* DS_SIM_SIM_H */
