/* Suite `gpu` fixture (see gpu_fixture.h). */
#include "gpu_fixture.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int gpu_status_is_no_device(ds_status st)
{
    return st == DS_ERR_NO_DRIVER || st == DS_ERR_NO_DEVICE || st == DS_ERR_DRIVER_TOO_OLD;
}

static void log_stderr(ds_log_level level, const char *msg, void *user)
{
    (void)user;
    static const char *names[] = {"none", "error", "warn", "info", "debug"};
    fprintf(stderr, "detshare %s: %s\n", level <= DS_LOG_DEBUG ? names[level] : "?", msg);
}

void gpu_log_to_stderr(void)
{
    ds_log_set_handler(log_stderr, NULL, DS_LOG_WARN);
}

static CUfunction get_fn(gpu_env *e, const char *name)
{
    CUfunction f = NULL;
    CUresult r = e->cu->cuModuleGetFunction(&f, e->module, name);
    cr_assert_eq(r, CUDA_SUCCESS, "cuModuleGetFunction(%s) -> %s", name, ds__cu_error_name(e->cu, r));
    cr_assert_not_null(f, "cuModuleGetFunction(%s) gave NULL", name);
    return f;
}

static void load_kernels(gpu_env *e)
{
    GPU_CU(e, cuModuleLoadData(&e->module, gpu_test_fatbin));
    e->echo = get_fn(e, "echo");
    e->append = get_fn(e, "append");
    e->sec_write = get_fn(e, "sec_write");
    e->sec_derive = get_fn(e, "sec_derive");
    e->sec_check = get_fn(e, "sec_check");
    e->spin = get_fn(e, "spin");
    e->be_spin = get_fn(e, "be_spin");
    e->ls_stamp = get_fn(e, "ls_stamp");
    e->span = get_fn(e, "span");
    e->gate_fill = get_fn(e, "gate_fill");
    e->host_flag = get_fn(e, "host_flag");
    e->trap_after = get_fn(e, "trap_after");
}

void gpu_open(gpu_env *e, const ds_runtime_config *cfg)
{
    memset(e, 0, sizeof *e);
    gpu_log_to_stderr();
    ds_runtime_config c = DS_RUNTIME_CONFIG_INIT;
    c.device = DS_DEVICE_CUDA;
    if (cfg) {
        cr_assert_eq(cfg->size, sizeof c, "ds_runtime_config not initialised with DS_RUNTIME_CONFIG_INIT");
        c = *cfg;
    }
    if (!c.policy)
        c.policy = "manual"; /* the tests place vCtxs themselves */
    cr_assert_eq(c.device, DS_DEVICE_CUDA, "suite gpu runs on the CUDA device only");
    ds_status st = ds_runtime_create(&c, &e->rt);
    if (gpu_status_is_no_device(st))
        cr_skip_test("no GPU: %s", ds_last_error_message());
    cr_assert_eq(st, DS_SUCCESS, "ds_runtime_create -> %s: %s", ds_status_name(st), ds_last_error_message());
    cr_assert_not_null(e->rt);

    st = ds__driver_cuda(&e->cu);
    cr_assert_eq(st, DS_SUCCESS, "ds__driver_cuda -> %s: %s", ds_status_name(st), ds_last_error_message());
    cr_assert_not_null(e->cu);

    e->info = (ds_runtime_info)DS_RUNTIME_INFO_INIT;
    GPU_DS(ds_runtime_info_get(e->rt, &e->info));

    /* ds_runtime_create left the primary context current on this thread;
     * the module must live in it (DEVICE-FACTS: a primary-context CUfunction
     * launches on green-context streams). */
    CUcontext cur = NULL;
    GPU_CU(e, cuCtxGetCurrent(&cur));
    cr_assert_not_null(cur, "no context current after ds_runtime_create");
    load_kernels(e);

    const char *policy = NULL;
    GPU_DS(ds_runtime_get_policy(e->rt, &policy));
    cr_assert_str_eq(policy, c.policy, "runtime created with policy '%s', asked '%s'", policy, c.policy);
}

void gpu_prepare(gpu_env *e)
{
    memset(e, 0, sizeof *e);
    gpu_log_to_stderr();
    ds_status st = ds__driver_cuda(&e->cu);
    if (gpu_status_is_no_device(st))
        cr_skip_test("no GPU: %s", ds_last_error_message());
    cr_assert_eq(st, DS_SUCCESS, "ds__driver_cuda -> %s: %s", ds_status_name(st), ds_last_error_message());
    int n = 0;
    if (e->cu->cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
        cr_skip_test("no GPU: no CUDA device");
    GPU_CU(e, cuDeviceGet(&e->dev, 0));
    GPU_CU(e, cuDevicePrimaryCtxRetain(&e->primary, e->dev));
    GPU_CU(e, cuCtxSetCurrent(e->primary));
    load_kernels(e);
}

void gpu_start(gpu_env *e, const ds_runtime_config *cfg)
{
    ds_runtime_config c = *cfg;
    if (!c.policy)
        c.policy = "manual";
    cr_assert_eq(c.device, DS_DEVICE_CUDA, "suite gpu runs on the CUDA device only");
    GPU_DS(ds_runtime_create(&c, &e->rt));
    e->info = (ds_runtime_info)DS_RUNTIME_INFO_INIT;
    GPU_DS(ds_runtime_info_get(e->rt, &e->info));
}

void gpu_stop(gpu_env *e, ds_status want)
{
    ds_runtime_t rt = e->rt;
    e->rt = NULL;
    if (rt)
        GPU_DS_EQ(ds_runtime_destroy(rt), want);
}

void gpu_finish(gpu_env *e)
{
    gpu_stop(e, DS_SUCCESS);
    GPU_CU(e, cuCtxSetCurrent(e->primary));
    GPU_CU(e, cuModuleUnload(e->module));
    e->module = NULL;
    GPU_CU(e, cuDevicePrimaryCtxRelease(e->dev));
}

void gpu_close(gpu_env *e)
{
    if (e->module) {
        GPU_CU(e, cuModuleUnload(e->module));
        e->module = NULL;
    }
    if (e->rt) {
        ds_runtime_t rt = e->rt;
        e->rt = NULL;
        GPU_DS(ds_runtime_destroy(rt));
    }
}

CUdeviceptr gpu_alloc(gpu_env *e, size_t bytes)
{
    CUdeviceptr p = 0;
    GPU_CU(e, cuMemAlloc(&p, bytes));
    cr_assert_neq(p, 0);
    gpu_fill32(e, p, 0, bytes / 4);
    return p;
}

void gpu_fill32(gpu_env *e, CUdeviceptr p, uint32_t value, size_t words)
{
    GPU_CU(e, cuMemsetD32(p, value, words));
    /* The memset went to the primary context's NULL stream; the vCtxs'
     * non-blocking streams do not order against it: wait here. */
    GPU_CU(e, cuStreamSynchronize(NULL));
}

void gpu_free(gpu_env *e, CUdeviceptr p)
{
    if (p)
        GPU_CU(e, cuMemFree(p));
}

void gpu_read(gpu_env *e, void *dst, CUdeviceptr src, size_t bytes)
{
    GPU_CU(e, cuMemcpyDtoH(dst, src, bytes));
}

void gpu_write(gpu_env *e, CUdeviceptr dst, const void *src, size_t bytes)
{
    GPU_CU(e, cuMemcpyHtoD(dst, src, bytes));
    /* From pageable memory the copy may still be in flight on the NULL
     * stream, which the vCtxs' non-blocking streams do not wait for. */
    GPU_CU(e, cuStreamSynchronize(NULL));
}

static ds_vctx_t vctx_create(gpu_env *e, const ds_vctx_attr *a)
{
    ds_vctx_t v = NULL;
    GPU_DS(ds_vctx_create(e->rt, a, &v));
    cr_assert_not_null(v);
    return v;
}

ds_vctx_t gpu_vctx(gpu_env *e, const char *name, ds_vctx_class cls, int32_t initial_pctx)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = name;
    a.cls = cls;
    a.initial_pctx = initial_pctx;
    return vctx_create(e, &a);
}

ds_vctx_t gpu_vctx_slo(gpu_env *e, const char *name, ds_vctx_class cls, ds_phase phase, uint32_t slo_us)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = name;
    a.cls = cls;
    a.phase = phase;
    a.slo_us = slo_us;
    return vctx_create(e, &a);
}

uint32_t gpu_full_pctx(const gpu_env *e)
{
    for (uint32_t i = 0; i < e->info.num_pctx; i++)
        if (e->info.pctx[i].anchor == DS_ANCHOR_FULL)
            return i;
    cr_assert_fail("the pool has no FULL pCtx");
    return 0;
}

uint32_t gpu_bound_pctx(ds_vctx_t v)
{
    uint32_t p = UINT32_MAX;
    GPU_DS(ds_vctx_get_pctx(v, &p));
    return p;
}

void gpu_thread_fail(gpu_thread_err *f, ds_status st, const char *fmt, ...)
{
    if (f->st != DS_SUCCESS)
        return;
    f->st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
}

uint64_t gpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double gpu_now_ms(void)
{
    return (double)gpu_now_ns() / 1e6;
}

void gpu_sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void gpu_sleep_until_ns(uint64_t t)
{
    uint64_t now = gpu_now_ns();
    if (t > now)
        gpu_sleep_us((unsigned)((t - now) / 1000));
}

int gpu_find_low(const ds_runtime_info *info, uint32_t want_sms)
{
    int best = -1;
    for (uint32_t i = 0; i < info->num_pctx; i++) {
        const ds_pctx_info *p = &info->pctx[i];
        if (p->anchor != DS_ANCHOR_LOW || p->complement < 0)
            continue;
        if (p->sm_count == want_sms)
            return (int)i;
        if (best < 0 || p->sm_count < info->pctx[best].sm_count)
            best = (int)i;
    }
    return best;
}

int gpu_low_nearest(const ds_runtime_info *info, uint32_t want_sms)
{
    int best = -1;
    uint32_t best_d = UINT32_MAX;
    for (uint32_t i = 0; i < info->num_pctx; i++) {
        const ds_pctx_info *p = &info->pctx[i];
        if (p->anchor != DS_ANCHOR_LOW)
            continue;
        uint32_t d = p->sm_count > want_sms ? p->sm_count - want_sms : want_sms - p->sm_count;
        if (d < best_d) {
            best_d = d;
            best = (int)i;
        }
    }
    return best;
}
