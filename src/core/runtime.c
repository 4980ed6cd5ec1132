/* Runtime lifecycle: driver, device, primary context, pool, teardown. */
#include <stdlib.h>
#include <string.h>

#include "core/copy.h"
#include "core/fault.h"
#include "core/gate.h"
#include "core/handles.h"
#include "core/pool.h"
#include "core/registry.h"
#include "core/runtime.h"
#include "core/sched.h"
#include "core/topology.h"
#include "core/vctx.h"
#include "seam/alloc.h"
#include "seam/driver.h"
#include "seam/log.h"
#include "seam/params.h"

static ds_status device_attr(struct ds_runtime *rt, CUdevice_attribute a, int *v)
{
    DS__CU(rt, cuDeviceGetAttribute(v, a, rt->dev));
    return DS_SUCCESS;
}

static ds_status read_device(struct ds_runtime *rt)
{
    static const CUdevice_attribute grid[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                               CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
    static const CUdevice_attribute block[3] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                                CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
    int v;
    for (int i = 0; i < 3; i++) {
        DS__TRY(device_attr(rt, grid[i], &v));
        rt->max_grid[i] = (uint32_t)v;
        DS__TRY(device_attr(rt, block[i], &v));
        rt->max_block[i] = (uint32_t)v;
    }
    DS__TRY(device_attr(rt, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &v));
    rt->max_threads_per_block = (uint32_t)v;
    DS__TRY(device_attr(rt, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &v));
    rt->max_smem_optin = (uint32_t)v;
    int major = 0, minor = 0;
    DS__TRY(device_attr(rt, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major));
    DS__TRY(device_attr(rt, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &minor));
    rt->info.compute_capability = major * 10 + minor;
    DS__CU(rt, cuDeviceGetName(rt->info.device_name, (int)sizeof rt->info.device_name, rt->dev));
    DS__CU(rt, cuCtxGetStreamPriorityRange(&rt->prio_least, &rt->prio_greatest));
    rt->info.stream_priority_least = rt->prio_least;
    rt->info.stream_priority_greatest = rt->prio_greatest;
    return DS_SUCCESS;
}

static ds_status open_device(struct ds_runtime *rt)
{
    rt->info.driver_version = rt->cu->version;
    DS__CU(rt, cuDevicePrimaryCtxRetain(&rt->primary, rt->dev));
    DS__CU(rt, cuCtxSetCurrent(rt->primary));
    return read_device(rt);
}

static void release(struct ds_runtime *rt)
{
    ds__sched_fini(rt);
    ds__policies_fini(rt);
    ds__topology_release(rt);
    pthread_mutex_destroy(&rt->reg.lock);
    if (rt->cu) {
        /* the RCK first: memory it reads (and any cuMemFree) waits for it */
        if (rt->sched.hook.stop)
            rt->sched.hook.stop(rt->sched.hook.self);
        rt->sched.hook = (ds__sched_hook){0};
        rt->gates.writer = (ds__gate_writer){0};
        ds__gates_fini(rt);
        if (rt->sched.health_stream)
            rt->cu->cuStreamDestroy(rt->sched.health_stream); /* may fail on a faulted context */
        if (rt->probe_buf)
            rt->cu->cuMemFree(rt->probe_buf);
        if (rt->module)
            rt->cu->cuModuleUnload(rt->module);
        ds__pool_destroy(rt);
        if (rt->primary) {
            CUresult r = rt->cu->cuDevicePrimaryCtxRelease(rt->dev);
            if (r != CUDA_SUCCESS)
                ds__log(DS_LOG_WARN, "cuDevicePrimaryCtxRelease -> %s", ds__cu_error_name(rt->cu, r));
        }
        if (rt->ops && rt->ops->close)
            rt->ops->close(rt->dev);
    }
    pthread_mutex_destroy(&rt->lock);
    ds__free(rt->vctx);
    rt->vctx = NULL;
    rt->magic = DS__DEAD_MAGIC;
    ds__quarantine(rt);
}

ds_status ds__runtime_config(const ds_runtime_config *config, ds_runtime_config *full)
{
    ds__params_log_once();
    *full = (ds_runtime_config)DS_RUNTIME_CONFIG_INIT;
    const ds_runtime_config *cfg = full;
    if (config) {
        DS__TRY(ds__check_abi_grown(config, DS__OLD_SIZES(DS_RUNTIME_CONFIG_SIZE_V1), sizeof *config,
                                    "ds_runtime_config"));
        memcpy(full, config, config->size < sizeof *full ? config->size : sizeof *full);
        full->size = sizeof *full;
    }
    if (cfg->num_tiers > DS_MAX_PCTX || (cfg->tiers == NULL) != (cfg->num_tiers == 0))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_config: tiers %p with num_tiers %u (1-%d, both or neither)",
                        (const void *)cfg->tiers, cfg->num_tiers, DS_MAX_PCTX);
    if (cfg->max_vctx > 4096)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_config.max_vctx = %u (at most 4096)", cfg->max_vctx);
    if ((unsigned)cfg->gates > DS_GATES_OFF)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_config.gates = %d (DS_GATES_AUTO, _HOST, _RCK or _OFF)",
                        (int)cfg->gates);
    if ((unsigned)cfg->rck > DS_RCK_ON)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_config.rck = %d (DS_RCK_OFF or DS_RCK_ON)",
                        (int)cfg->rck);
    if (cfg->gates == DS_GATES_RCK && cfg->rck != DS_RCK_ON)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_runtime_config.gates = DS_GATES_RCK needs ds_runtime_config.rck = DS_RCK_ON");
    return DS_SUCCESS;
}

ds_status ds__runtime_create(const ds_runtime_config *cfg, const ds__backend *backend, const ds__plugins *plugins,
                             ds_runtime_t *out)
{
    struct ds_runtime *rt = ds__calloc(1, sizeof *rt);
    if (!rt) {
        if (backend->ops->close)
            backend->ops->close(backend->dev);
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_runtime_create: %zu bytes", sizeof *rt);
    }
    rt->cu = backend->cu;
    rt->ops = backend->ops;
    rt->dev = backend->dev;
    rt->device_image = plugins->device_image;
    pthread_mutex_init(&rt->lock, NULL);
    pthread_mutex_init(&rt->reg.lock, NULL);
    atomic_flag_clear(&rt->sched.poll_busy);
    atomic_flag_clear(&rt->fault.claim);
    rt->heartbeat_timeout_ms = cfg->heartbeat_timeout_ms ? cfg->heartbeat_timeout_ms : 10;
    rt->fault_presume_ms = cfg->fault_presume_ms ? cfg->fault_presume_ms : 50;
    rt->sched.period_us = cfg->scheduler_period_us < 0 ? 0
                          : cfg->scheduler_period_us ? (uint32_t)cfg->scheduler_period_us : 100;
    rt->info = (ds_runtime_info)DS_RUNTIME_INFO_INIT;
    rt->info.device = cfg->device;
    rt->info.numa_node = -1;
    rt->max_vctx = cfg->max_vctx ? cfg->max_vctx : 64;
    rt->teardown_timeout_ms = cfg->teardown_timeout_ms ? cfg->teardown_timeout_ms
                                                        : (uint32_t)ds__param_teardown_timeout_ms();
    rt->sample_period = (uint32_t)ds__param_sample_period();
    rt->vctx = ds__calloc(rt->max_vctx, sizeof *rt->vctx);
    ds_status st = DS_SUCCESS;
    if (!rt->vctx) {
        st = ds__fail(DS_ERR_OUT_OF_MEMORY, "ds_runtime_create: vCtx table of %u", rt->max_vctx);
        goto fail;
    }
    DS__TRY_GOTO(open_device(rt), st, fail);
    DS__TRY_GOTO(ds__pool_build(rt, cfg->tiers, cfg->num_tiers), st, fail);
    DS__TRY_GOTO(ds__pool_stream_create(rt, rt->full_pctx, rt->prio_least, &rt->sched.health_stream), st, fail);

    rt->info.max_connections = (uint32_t)ds__param_max_connections();
    rt->info.connections_needed = 1; /* the runtime's own (probe) stream */
    ds__topology_query(rt);
    DS__TRY_GOTO(ds__sched_init(rt), st, fail);
    DS__TRY_GOTO(ds__gates_init(rt, cfg->gates, cfg->rck == DS_RCK_ON), st, fail);
    if (cfg->rck == DS_RCK_ON) {
        if (!plugins->rck_start) {
            st = ds__fail(DS_ERR_NOT_SUPPORTED, "ds_runtime_config.rck: this build has no RCK");
            goto fail;
        }
        DS__TRY_GOTO(plugins->rck_start(rt), st, fail);
        rt->info.connections_needed++; /* the RCK's queue stays busy */
    }
    rt->magic = DS__RT_MAGIC; /* policies' activation may call the public API */
    st = ds__policies_init(rt, plugins->policies, cfg);
    if (st == DS_SUCCESS)
        st = ds__sched_start(rt);
    if (st != DS_SUCCESS) {
        rt->magic = 0;
        goto fail;
    }
    ds__log(DS_LOG_INFO, "runtime on %s (%s): %u SMs, %u pCtxs, CUDA_DEVICE_MAX_CONNECTIONS=%u",
            rt->info.device_name, rt->cu->origin, rt->info.sm_count, rt->num_pctx,
            rt->info.max_connections);
    ds__runtime_count(1);
    *out = rt;
    return DS_SUCCESS;
fail:
    release(rt);
    return st;
}

ds_status ds_runtime_destroy(ds_runtime_t rt)
{
    DS__TRY(ds__rt_check(rt, "ds_runtime_destroy"));
    ds_status result = DS_SUCCESS;
    ds__sched_stop(rt); /* no scheduler pass from here on */
    /* every gate opens first, so that all queued work drains together */
    for (uint32_t i = 0; i < rt->max_vctx; i++) {
        struct ds_vctx *v = atomic_load(&rt->vctx[i]);
        if (v && v->magic == DS__VCTX_MAGIC)
            ds__gate_force_open(v, NULL);
    }
    for (uint32_t i = 0; i < rt->max_vctx; i++) {
        pthread_mutex_lock(&rt->lock);
        struct ds_vctx *v = atomic_load(&rt->vctx[i]);
        pthread_mutex_unlock(&rt->lock);
        if (v) {
            ds_status s = ds__vctx_teardown(v);
            if (s != DS_SUCCESS && result == DS_SUCCESS)
                result = s;
        }
    }
    ds__copy_stop(rt); /* after the vCtxs: their copies were done or cancelled */
    if (ds__faulted(rt) && result == DS_SUCCESS)
        result = ds__fault_status(rt, "ds_runtime_destroy"); /* torn down; the work was lost */
    release(rt);
    ds__runtime_count(-1);
    return result;
}

ds_status ds_runtime_info_get(ds_runtime_t rt, ds_runtime_info *info)
{
    DS__TRY(ds__rt_check(rt, "ds_runtime_info_get"));
    DS__TRY(ds__check_abi(info, sizeof *info, "ds_runtime_info"));
    size_t size = info->size;
    pthread_mutex_lock(&rt->lock);
    *info = rt->info;
    info->connections_needed = rt->info.connections_needed + rt->live_vctx;
    pthread_mutex_unlock(&rt->lock);
    info->size = size;
    return DS_SUCCESS;
}
