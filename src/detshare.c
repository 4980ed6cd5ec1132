/*
 * The library's front door: ds_runtime_create picks the device backend (the
 * CUDA driver or the simulated device), and hands core the backend's tables
 * with the plug-ins built into this library: the built-in policies, the
 * embedded device code and the resident control kernel. Core names none of
 * them; this file is the only place that knows all of them.
 */
#include "core/runtime.h"
#include "seam/driver.h"
#include "seam/log.h"
#include "rck/rck.h"
#include "sim/sim.h"

extern const unsigned char ds__device_fatbin[];

/* The built-in policies (src/policy/), each an ordinary ds_policy_ops table
 * written against <detshare/policy.h> alone, in the order the runtime
 * registers them at creation (the first one registered is not the default:
 * ds_runtime_config::policy picks, "slo_aware" when unset). */
extern const ds_policy_ops ds_builtin_slo_aware;
extern const ds_policy_ops ds_builtin_slo_aware_nogates;
extern const ds_policy_ops ds_builtin_tpot_first;
extern const ds_policy_ops ds_builtin_manual;
extern const ds_policy_ops ds_builtin_shared;
extern const ds_policy_ops ds_builtin_priority;
extern const ds_policy_ops ds_builtin_static;
extern const ds_policy_ops ds_builtin_temporal;
extern const ds_policy_ops ds_builtin_balance;

static const ds_policy_ops *const builtin_policies[] = {
    &ds_builtin_slo_aware, &ds_builtin_tpot_first, &ds_builtin_shared,
    &ds_builtin_priority,  &ds_builtin_static,     &ds_builtin_temporal,
    &ds_builtin_manual,    &ds_builtin_slo_aware_nogates, &ds_builtin_balance, NULL,
};

/* The CUDA backend: the driver loaded from libcuda and the device of that
 * ordinal. */
static ds_status open_cuda(const ds_runtime_config *cfg, ds__backend *b)
{
    DS__TRY(ds__driver_cuda(&b->cu));
    b->ops = &ds__cuda_devops;
    int count = 0;
    CUresult r = b->cu->cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_DRIVER, "cuDeviceGetCount -> %s", ds__cu_error_name(b->cu, r));
    if (cfg->device_ordinal < 0 || cfg->device_ordinal >= count)
        return ds__fail(DS_ERR_NO_DEVICE, "device ordinal %d: %d CUDA device(s) present (%s)", cfg->device_ordinal,
                        count, b->cu->origin);
    r = b->cu->cuDeviceGet(&b->dev, cfg->device_ordinal);
    if (r != CUDA_SUCCESS)
        return ds__fail(DS_ERR_DRIVER, "cuDeviceGet(%d) -> %s", cfg->device_ordinal, ds__cu_error_name(b->cu, r));
    return DS_SUCCESS;
}

ds_status ds_runtime_create(const ds_runtime_config *config, ds_runtime_t *out)
{
    if (!out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_create: out is NULL");
    ds_runtime_config cfg;
    DS__TRY(ds__runtime_config(config, &cfg));
    /* An ordinal names one device among those present: never negative, and
     * a runtime on the simulated device has exactly one, ordinal 0. The
     * CUDA device count is known only once the driver is loaded (open_cuda). */
    if (cfg.device_ordinal < 0)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_create: device_ordinal %d is negative",
                        cfg.device_ordinal);
    if (cfg.device == DS_DEVICE_SIM && cfg.device_ordinal != 0)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_runtime_create: device_ordinal %d on DS_DEVICE_SIM: a runtime has one simulated "
                        "device, ordinal 0",
                        cfg.device_ordinal);
    ds__backend backend = {0};
    if (cfg.device == DS_DEVICE_SIM)
        DS__TRY(ds__sim_backend_open(cfg.sim, &backend));
    else if (cfg.device == DS_DEVICE_CUDA)
        DS__TRY(open_cuda(&cfg, &backend));
    else
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_config.device = %d (DS_DEVICE_CUDA or DS_DEVICE_SIM)",
                        (int)cfg.device);
    const ds__plugins plugins = {
        .policies = builtin_policies,
        .device_image = ds__device_fatbin,
        .rck_start = ds__rck_start,
    };
    /* from here on core owns the backend (and closes it on failure) */
    return ds__runtime_create(&cfg, &backend, &plugins, out);
}
