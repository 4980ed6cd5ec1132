/*
 * Public functions of detshare/sim.h: simulated kernels, direct launches,
 * the simulated clock and the kernel trace of a runtime's simulated device.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/handles.h"
#include "core/runtime.h" /* the backend a runtime runs on */
#include "seam/alloc.h"
#include "seam/log.h"
#include "sim/sim_internal.h"

ds_status ds__runtime_sim_device(ds_runtime_t rt, CUdevice *dev)
{
    DS__TRY(ds__rt_check(rt, "ds_sim"));
    CUdevice d = 0;
    if (!ds__sim_is_backend(ds__runtime_devops(rt, &d)))
        return ds__fail(DS_ERR_NOT_SUPPORTED, "runtime %p drives a CUDA device, not the simulated one", (void *)rt);
    *dev = d;
    return DS_SUCCESS;
}

static ds_status enter(ds_runtime_t rt, const char *fn, sim_dev **d)
{
    CUdevice dev = 0;
    DS__TRY(ds__runtime_sim_device(rt, &dev));
    if (ds__sim_dev_acquire(dev, d) != CUDA_SUCCESS)
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: the runtime's simulated device %d is gone",
                        fn, (int)dev);
    return DS_SUCCESS;
}

DS_API ds_status ds_sim_kernel_create(ds_runtime_t rt, const ds_sim_kernel_desc *desc,
                                      CUfunction *out)
{
    CUdevice dev = 0;
    DS__TRY(ds__runtime_sim_device(rt, &dev));
    if (!desc || !out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_kernel_create: %s is NULL",
                        !desc ? "desc" : "out");
    DS__TRY(ds__check_abi(desc, sizeof(ds_sim_kernel_desc), "ds_sim_kernel_desc"));
    if (!(desc->block_us > 0 && desc->block_us <= DS_SIM_MAX_BLOCK_US)) /* NAN fails too */
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_sim_kernel_create: block_us %g is not in (0, %g] (DS_SIM_MAX_BLOCK_US)",
                        desc->block_us, DS_SIM_MAX_BLOCK_US);
    uint32_t o = desc->blocks_per_sm;
    if (o != 0 && o != 1 && o != 2 && o != 4 && o != 8)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_sim_kernel_create: blocks_per_sm %u is not 1, 2, 4 or 8 (or 0)", o);
    if (desc->num_params > DS_SIM_MAX_PARAMS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_sim_kernel_create: num_params %u exceeds DS_SIM_MAX_PARAMS (%d)",
                        desc->num_params, DS_SIM_MAX_PARAMS);

    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_kernel_create", &d));
    ds_status st = DS_SUCCESS;
    sim_func *f = ds__calloc(1, sizeof *f);
    uint64_t h = f ? ds__sim_handle_new(d, SIM_H_FUNC, f) : 0;
    /* a CUkernel naming it too: a simulated kernel stands for one launched
     * through the CUDA runtime or cuLibrary, which on the GPU has both (a
     * graph's kernel node carries func and kern) */
    uint64_t k = h ? ds__sim_handle_new(d, SIM_H_KERNEL, f) : 0;
    if (!k) {
        if (h)
            ds__sim_handle_free(d, h);
        ds__free(f);
        st = ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_sim_kernel_create: out of memory");
    } else {
        f->handle = h;
        f->kern = k;
        const char *name = desc->name ? desc->name : "sim_kernel";
        strncpy(f->name, name, sizeof f->name - 1);
        f->block_us = desc->block_us;
        f->blocks_per_sm = o ? o : 1;
        f->num_params = desc->num_params;
        f->faults = desc->faults != 0;
        memcpy(f->param_sizes, desc->param_sizes, sizeof f->param_sizes);
        *out = (CUfunction)(uintptr_t)h;
    }
    ds__sim_dev_release(d);
    return st;
}

DS_API ds_status ds_sim_launch_on_stream(ds_runtime_t rt, CUstream stream, CUfunction f,
                                         ds_dim3 grid, ds_dim3 block, void **params)
{
    CUdevice dev = 0;
    DS__TRY(ds__runtime_sim_device(rt, &dev));
    const unsigned g[3] = { grid.x, grid.y, grid.z };
    const unsigned b[3] = { block.x, block.y, block.z };
    if (!ds__sim_dims_ok(g, b))
        return ds__fail(DS_ERR_INVALID_LAUNCH,
                        "ds_sim_launch_on_stream: grid (%u,%u,%u) block (%u,%u,%u) outside the "
                        "device limits (each >= 1; grid <= (2^31-1,65535,65535); block <= "
                        "(1024,1024,64) and 1024 threads)",
                        grid.x, grid.y, grid.z, block.x, block.y, block.z);
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_launch_on_stream", &d));
    ds_status st = DS_SUCCESS;
    sim_func *fn = ds__sim_handle_get(d, (uint64_t)(uintptr_t)f, SIM_H_FUNC);
    sim_stream *s = NULL;
    CUresult r;
    if (!fn) {
        st = ds__fail(DS_ERR_INVALID_ARGUMENT,
                      "ds_sim_launch_on_stream: f %p is not a kernel of this simulated device",
                      (void *)f);
    } else if ((r = ds__sim_stream_resolve(d, stream, &s)) != CUDA_SUCCESS) {
        st = ds__fail(DS_ERR_INVALID_ARGUMENT,
                      "ds_sim_launch_on_stream: stream %p is not usable on this simulated "
                      "device (%s)",
                      (void *)stream, ds__sim_cu_name(r));
    } else if ((r = ds__sim_launch(d, fn, g, b, 0, s, stream, params, NULL)) != CUDA_SUCCESS) {
        st = ds__fail(r == CUDA_ERROR_OUT_OF_MEMORY ? DS_ERR_OUT_OF_MEMORY
                      : r == d->fault             ? DS_ERR_DEVICE_FAULT
                                                  : DS_ERR_INVALID_ARGUMENT,
                      "ds_sim_launch_on_stream: launch of '%s' failed (%s%s)", fn->name,
                      ds__sim_cu_name(r),
                      r == CUDA_ERROR_INVALID_VALUE ? ": params NULL or one of them NULL?" : "");
    }
    ds__sim_dev_release(d);
    return st;
}

DS_API ds_status ds_sim_now_us(ds_runtime_t rt, double *now_us)
{
    CUdevice dev = 0;
    DS__TRY(ds__runtime_sim_device(rt, &dev));
    if (!now_us)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_now_us: now_us is NULL");
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_now_us", &d));
    *now_us = d->now_us;
    ds__sim_dev_release(d);
    return DS_SUCCESS;
}

DS_API ds_status ds_sim_sleep_until(ds_runtime_t rt, double t_us)
{
    CUdevice dev = 0;
    DS__TRY(ds__runtime_sim_device(rt, &dev));
    if (!isfinite(t_us))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_sleep_until: t_us %g is not finite", t_us);
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_sleep_until", &d));
    ds__sim_sleep_until(d, t_us);
    ds__sim_dev_release(d);
    return DS_SUCCESS;
}

DS_API ds_status ds_sim_trace_get(ds_runtime_t rt, ds_sim_kernel_record *out, size_t cap,
                                  size_t *count)
{
    CUdevice dev = 0;
    DS__TRY(ds__runtime_sim_device(rt, &dev));
    if (!count || (!out && cap > 0))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_trace_get: %s is NULL",
                        !count ? "count" : "out (with cap > 0)");
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_trace_get", &d));
    ds__sim_trace_get(d, out, cap, count);
    ds__sim_dev_release(d);
    return DS_SUCCESS;
}

DS_API ds_status ds_sim_trace_clear(ds_runtime_t rt)
{
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_trace_clear", &d));
    ds__sim_trace_clear(d);
    ds__sim_dev_release(d);
    return DS_SUCCESS;
}

DS_API ds_status ds_sim_thread_reserve(ds_runtime_t rt, uint32_t *ticket)
{
    if (!ticket)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_thread_reserve: ticket is NULL");
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_thread_reserve", &d));
    CUresult r = ds__sim_thread_reserve(d, ticket);
    ds__sim_dev_release(d);
    if (r == CUDA_ERROR_NOT_SUPPORTED)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "ds_sim_thread_reserve: the device's clock is REALTIME; threads "
                                              "take turns only in DS_SIM_CLOCK_VIRTUAL");
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_LIMIT, "ds_sim_thread_reserve: %d places taken already", DS__SIM_MAX_TURNS);
    return DS_SUCCESS;
}

DS_API ds_status ds_sim_thread_attach(ds_runtime_t rt, uint32_t ticket)
{
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_thread_attach", &d));
    CUresult r = ds__sim_thread_attach(d, ticket);
    ds__sim_dev_release(d);
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_sim_thread_attach: ticket %u is not a reserved, untaken place, or this thread "
                        "already holds one",
                        ticket);
    return DS_SUCCESS;
}

DS_API ds_status ds_sim_thread_release(ds_runtime_t rt, uint32_t ticket)
{
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_thread_release", &d));
    CUresult r = ds__sim_thread_release(d, ticket);
    ds__sim_dev_release(d);
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_sim_thread_release: ticket %u is not reserved, or another thread holds it", ticket);
    return DS_SUCCESS;
}

DS_API ds_status ds_sim_thread_yield(ds_runtime_t rt)
{
    sim_dev *d;
    DS__TRY(enter(rt, "ds_sim_thread_yield", &d));
    CUresult r = ds__sim_thread_yield(d);
    ds__sim_dev_release(d);
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_thread_yield: the calling thread takes no turns on this "
                                                 "device (ds_sim_thread_attach)");
    return DS_SUCCESS;
}
