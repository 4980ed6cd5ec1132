/* Driver-level helpers for the simulated device (see sim_driver.h). */
#include "sim_driver.h"

#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h" /* the trace of a bare device */

const ds__driver *cu;

void sd_init(void) { cu = ds__sim_driver(); }

const char *cuname(CUresult r)
{
    const char *n = NULL;
    cu->cuGetErrorName(r, &n);
    return n ? n : "?";
}

static void sd_setup(simdev *s)
{
    CU(cu->cuDevicePrimaryCtxRetain(&s->primary, s->dev));
    CU(cu->cuCtxSetCurrent(s->primary));
    CUdevResource all;
    CU(cu->cuDeviceGetDevResource(s->dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    s->ngroups = 64;
    CU(cu->cuDevSmResourceSplitByCount(s->groups, &s->ngroups, &all, &s->rem, 0, 8));
}

void sd_open(simdev *s, const ds_sim_config *cfg)
{
    memset(s, 0, sizeof *s);
    ds_sim_config def = DS_SIM_CONFIG_INIT;
    ds_runtime_config rc = DS_RUNTIME_CONFIG_INIT;
    rc.device = DS_DEVICE_SIM;
    rc.sim = cfg ? cfg : &def;
    cr_assert_eq(ds_runtime_create(&rc, &s->rt), DS_SUCCESS, "ds_runtime_create(sim): %s",
                 ds_last_error_message());
    cr_assert_eq(ds__runtime_sim_device(s->rt, &s->dev), DS_SUCCESS);
    sd_setup(s);
}

void sd_open_bare(simdev *s, const ds_sim_config *cfg)
{
    memset(s, 0, sizeof *s);
    cr_assert_eq(ds__sim_device_create(cfg, &s->dev), DS_SUCCESS, "%s", ds_last_error_message());
    sd_setup(s);
}

void sd_close(simdev *s)
{
    CU(cu->cuCtxSetCurrent(NULL));
    CU(cu->cuDevicePrimaryCtxRelease(s->dev));
    if (s->rt)
        cr_assert_eq(ds_runtime_destroy(s->rt), DS_SUCCESS, "%s", ds_last_error_message());
    else
        ds__sim_device_destroy(s->dev);
}

CUgreenCtx sd_green(simdev *s, unsigned first, unsigned last, int with_rem)
{
    CUdevResource r[65];
    unsigned n = 0;
    for (unsigned g = first; g <= last && g < s->ngroups; g++)
        r[n++] = s->groups[g];
    if (with_rem)
        r[n++] = s->rem;
    CUdevResourceDesc desc = NULL;
    CUgreenCtx g = NULL;
    CU(cu->cuDevResourceGenerateDesc(&desc, r, n));
    CU(cu->cuGreenCtxCreate(&g, desc, s->dev, CU_GREEN_CTX_DEFAULT_STREAM));
    return g;
}

CUcontext ctx_of(CUgreenCtx g)
{
    CUcontext c = NULL;
    CU(cu->cuCtxFromGreenCtx(&c, g));
    return c;
}

CUstream sd_stream(CUgreenCtx g, int prio)
{
    CUstream st = NULL;
    CU(cu->cuGreenCtxStreamCreate(&st, g, CU_STREAM_NON_BLOCKING, prio));
    return st;
}

CUfunction sd_kernel_desc(simdev *s, const ds_sim_kernel_desc *kd)
{
    CUfunction f = NULL;
    cr_assert_eq(ds_sim_kernel_create(s->rt, kd, &f), DS_SUCCESS, "kernel %s: %s", kd->name,
                 ds_last_error_message());
    return f;
}

ds_sim_kernel_record *sd_trace(simdev *s, size_t *n)
{
    size_t cap = 4096;
    ds_sim_kernel_record *buf = calloc(cap, sizeof *buf);
    cr_assert_not_null(buf);
    if (s->rt) {
        cr_assert_eq(ds_sim_trace_get(s->rt, buf, cap, n), DS_SUCCESS);
    } else {
        sim_dev *d;
        cr_assert_eq(ds__sim_dev_acquire(s->dev, &d), CUDA_SUCCESS);
        ds__sim_trace_get(d, buf, cap, n);
        ds__sim_dev_release(d);
    }
    return buf;
}

int sd_find_last(simdev *s, sd_record_match match, const void *key, ds_sim_kernel_record *out, size_t *n)
{
    ds_sim_kernel_record *buf = sd_trace(s, n);
    int found = 0;
    for (size_t i = 0; i < *n; i++)
        if (match(&buf[i], key)) {
            *out = buf[i];
            found = 1;
        }
    free(buf);
    return found;
}
