/*
 * The simulator as core receives it (sim.h): the backend opener and the
 * simulator's device-ops tables, and the per-device functions behind them
 * (clock, sleeps, fault attribution, the RCK stall hook). Built on the engine
 * (engine.h); the driver table comes from driver_sim.c through
 * ds__sim_driver().
 */
#include "seam/log.h"
#include "sim/engine.h"

/* ------------------------------------------------------------------------ */
/* Per-device functions                                                      */
/* ------------------------------------------------------------------------ */

double ds__sim_now_us(CUdevice dev)
{
    sim_dev *d;
    if (ds__sim_dev_acquire(dev, &d) != CUDA_SUCCESS)
        return 0.0;
    double t = d->now_us;
    ds__sim_dev_release(d);
    return t;
}

CUresult ds__sim_fault(CUdevice dev, CUstream *stream)
{
    sim_dev *d;
    if (ds__sim_dev_acquire(dev, &d) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    CUresult r = d->fault;
    if (stream)
        *stream = (CUstream)(uintptr_t)d->fault_stream;
    ds__sim_dev_release(d);
    return r;
}

void ds__sim_sleep_us(CUdevice dev, double us)
{
    sim_dev *d;
    if (ds__sim_dev_acquire(dev, &d) != CUDA_SUCCESS)
        return;
    ds__sim_sleep_until(d, d->now_us + us);
    ds__sim_dev_release(d);
}

void ds__sim_rck_stall(CUdevice dev, int stalled)
{
    sim_dev *d;
    if (ds__sim_dev_acquire(dev, &d) != CUDA_SUCCESS)
        return;
    d->rck_stalled = stalled;
    d->changed = 1;
    ds__sim_dev_release(d);
}

/* ------------------------------------------------------------------------ */
/* Device-ops tables and the backend                                         */
/* ------------------------------------------------------------------------ */

static int sim_fault_stream(CUdevice dev, CUstream *stream)
{
    CUstream s = NULL;
    if (ds__sim_fault(dev, &s) == CUDA_SUCCESS)
        return 0;
    if (stream)
        *stream = s;
    return 1;
}

/* The simulator moves a copy's bytes instantly: the link's time is waited
 * out here, in simulated time. */
static void sim_link_wait(CUdevice dev, size_t bytes)
{
    ds__sim_sleep_us(dev, (double)bytes / DS__SIM_LINK_BYTES_PER_US);
}

/* Two tables that differ only in virtual_clock, so a device's table follows
 * its clock without an allocation per device. */
#define SIM_DEVOPS(virtual)                                       \
    {                                                             \
        .name = "simulated",                                      \
        .now_us = ds__sim_now_us,                                 \
        .sleep_us = ds__sim_sleep_us,                             \
        .fault_stream = sim_fault_stream,                         \
        .link_wait = sim_link_wait,                               \
        .link_bytes_per_us = DS__SIM_LINK_BYTES_PER_US,           \
        .poll_yields = 0, /* only sleeping moves simulated time */ \
        .virtual_clock = (virtual),                               \
        .no_pci_reason = "simulated device has no PCI location",  \
        .close = ds__sim_device_destroy,                          \
    }

static const ds__devops sim_ops_virtual = SIM_DEVOPS(1);
static const ds__devops sim_ops_realtime = SIM_DEVOPS(0);

#undef SIM_DEVOPS

int ds__sim_is_backend(const ds__devops *ops)
{
    return ops && (ops == &sim_ops_virtual || ops == &sim_ops_realtime);
}

ds_status ds__sim_backend_open(const ds_sim_config *cfg, ds__backend *out)
{
    if (!out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds__sim_backend_open: out is NULL");
    CUdevice dev;
    DS__TRY(ds__sim_device_create(cfg, &dev));
    /* cfg passed ds__sim_device_create's checks: its clock field is there */
    int virtual = !cfg || cfg->clock == DS_SIM_CLOCK_VIRTUAL;
    out->cu = ds__sim_driver();
    out->ops = virtual ? &sim_ops_virtual : &sim_ops_realtime;
    out->dev = dev;
    return DS_SUCCESS;
}
