/*
 * Suite `gpu` entry point. A GPU test without a GPU is a skip, never a pass:
 * before running anything, try to open the CUDA device through the library;
 * if there is no driver, no device or too old a driver, print why and exit 77
 * (meson's skip code). Model: liburing test/helpers.h (T_EXIT_SKIP).
 *
 * The tests then run one at a time (jobs = 1): they saturate the GPU and
 * measure timings, so two of them at once would disturb each other.
 */
#include <criterion/criterion.h>
#include <criterion/options.h>
#include <stdio.h>

#include "gpu_fixture.h"

#define EXIT_SKIP 77

int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    /* --help, --version, --list: answered without touching the GPU. */
    if (!criterion_handle_args(argc, argv, true)) {
        criterion_finalize(tests);
        return 0;
    }

    ds_runtime_t rt = NULL;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    ds_status st = ds_runtime_create(&cfg, &rt);
    if (gpu_status_is_no_device(st)) {
        printf("SKIP: no GPU: %s\n", ds_last_error_message());
        fflush(stdout);
        criterion_finalize(tests);
        return EXIT_SKIP;
    }
    if (st != DS_SUCCESS) {
        /* A GPU is there but the library cannot use it: that is a failure. */
        fprintf(stderr, "FAIL: ds_runtime_create(DS_DEVICE_CUDA) -> %s: %s\n", ds_status_name(st),
                ds_last_error_message());
        criterion_finalize(tests);
        return 1;
    }
    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    if (ds_runtime_info_get(rt, &info) == DS_SUCCESS)
        printf("gpu suite on %s: %u SMs, driver %d, %u pCtxs (pool built in %.2f ms)\n",
               info.device_name, info.sm_count, info.driver_version, info.num_pctx,
               info.pool_build_ms);
    st = ds_runtime_destroy(rt);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "FAIL: ds_runtime_destroy -> %s: %s\n", ds_status_name(st), ds_last_error_message());
        criterion_finalize(tests);
        return 1;
    }
    fflush(stdout);

    criterion_options.jobs = 1;
    int ok = criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return ok ? 0 : 1;
}
