/*
 * Loads the CUDA driver at run time: dlopen(libcuda.so.1), then every entry
 * point through cuGetProcAddress with the ABI version we were written for,
 * once per process under pthread_once. Model: NCCL 2.20 src/misc/cudawrap.cc.
 */
#include "seam/driver.h"

#include <dlfcn.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "seam/log.h"
#include "seam/params.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static ds__driver g_cuda;
static ds_status g_status = DS_ERR_INTERNAL;
static ds_log_level g_level = DS_LOG_ERROR;
static char g_detail[400];
static char g_origin[300];

typedef CUresult (*ds__get_proc_v2)(const char *, void **, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult *);

static void load_once(void)
{
    const char *path = ds__param_libcuda();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        g_status = DS_ERR_NO_DRIVER;
        g_level = DS_LOG_INFO; /* expected on machines without a GPU */
        const char *e = dlerror();
        snprintf(g_detail, sizeof g_detail, "dlopen(\"%s\") failed: %s", path, e ? e : "?");
        return;
    }
    char where[256] = "";
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
        snprintf(where, sizeof where, "%s", lm->l_name);
    snprintf(g_origin, sizeof g_origin, "%s at %s", path, where[0] ? where : "?");

    ds__get_proc_v2 gpa = (ds__get_proc_v2)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        g_status = DS_ERR_DRIVER_TOO_OLD;
        snprintf(g_detail, sizeof g_detail,
                 "%s has no cuGetProcAddress_v2 (CUDA 12.0+ driver needed; %d or later for green contexts)",
                 g_origin, DS__MIN_DRIVER_VERSION);
        dlclose(h);
        return;
    }
    /* The version first, so that an old driver is reported as such rather
     * than as a missing symbol. */
    CUresult (*get_version)(int *) = NULL;
    CUdriverProcAddressQueryResult q;
    if (gpa("cuDriverGetVersion", (void **)&get_version, 2020, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS ||
        !get_version) {
        g_status = DS_ERR_NO_DRIVER;
        snprintf(g_detail, sizeof g_detail, "%s: cuDriverGetVersion not found", g_origin);
        dlclose(h);
        return;
    }
    int ver = 0;
    if (get_version(&ver) != CUDA_SUCCESS || ver < DS__MIN_DRIVER_VERSION) {
        g_status = DS_ERR_DRIVER_TOO_OLD;
        snprintf(g_detail, sizeof g_detail, "%s reports CUDA driver version %d.%d; libdetshare needs %d.%d or later (green contexts)",
                 g_origin, ver / 1000, (ver % 1000) / 10, DS__MIN_DRIVER_VERSION / 1000,
                 (DS__MIN_DRIVER_VERSION % 1000) / 10);
        dlclose(h);
        return;
    }
#define DS__LOAD(name, v, req)                                                                     \
    {                                                                                              \
        void *fp = NULL;                                                                           \
        CUresult r = gpa(#name, &fp, v, CU_GET_PROC_ADDRESS_DEFAULT, &q);                          \
        if (r != CUDA_SUCCESS || q != CU_GET_PROC_ADDRESS_SUCCESS || !fp) {                        \
            fp = NULL;                                                                             \
            if (req) {                                                                             \
                g_status = DS_ERR_NO_DRIVER;                                                       \
                snprintf(g_detail, sizeof g_detail, "%s (version %d): required entry point %s (ABI %d) missing", \
                         g_origin, ver, #name, v);                                                 \
                dlclose(h);                                                                        \
                memset(&g_cuda, 0, sizeof g_cuda);                                                 \
                return;                                                                            \
            }                                                                                      \
        }                                                                                          \
        memcpy(&g_cuda.name, &fp, sizeof fp);                                                      \
    }
    DS__DRIVER_SYMBOLS(DS__LOAD)
#undef DS__LOAD
    g_cuda.version = ver;
    g_cuda.origin = g_origin;
    CUresult r = g_cuda.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *n = NULL;
        g_cuda.cuGetErrorName(r, &n);
        g_status = r == CUDA_ERROR_NO_DEVICE ? DS_ERR_NO_DEVICE : DS_ERR_DRIVER;
        g_level = r == CUDA_ERROR_NO_DEVICE ? DS_LOG_INFO : DS_LOG_ERROR;
        snprintf(g_detail, sizeof g_detail, "%s (version %d): cuInit failed: %s", g_origin, ver,
                 n ? n : "?");
        return; /* keep the library loaded: the table is valid, the device is not */
    }
    g_status = DS_SUCCESS;
    /* The handle is kept for the life of the process: driver state outlives
     * any one runtime, and unloading libcuda under live contexts is unsafe. */
}

ds_status ds__driver_cuda(const ds__driver **out)
{
    pthread_once(&g_once, load_once);
    if (g_status != DS_SUCCESS)
        return ds__fail_at(g_level, g_status, "%s", g_detail);
    *out = &g_cuda;
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* the CUDA backend's device ops                                             */

static double cuda_now_us(CUdevice dev)
{
    (void)dev;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void cuda_sleep_us(CUdevice dev, double us)
{
    (void)dev;
    if (us <= 0)
        return;
    struct timespec ts = {(time_t)(us / 1e6), (long)(fmod(us, 1e6) * 1e3)};
    nanosleep(&ts, NULL);
}

/* The driver reports a sticky error, not which kernel raised it. */
static int cuda_fault_stream(CUdevice dev, CUstream *stream)
{
    (void)dev;
    (void)stream;
    return 0;
}

/* Host<->device copies are paced at 25 GB/s (PCIe 5.0 x16 measures about
 * that; the pacing only orders tenants, the copies run at the link's speed). */
const ds__devops ds__cuda_devops = {
    .name = "CUDA",
    .now_us = cuda_now_us,
    .sleep_us = cuda_sleep_us,
    .fault_stream = cuda_fault_stream,
    .link_wait = NULL,
    .link_bytes_per_us = 25000.0,
    .poll_yields = 2000,
    .virtual_clock = 0,
    .no_pci_reason = NULL,
    .close = NULL,
};
