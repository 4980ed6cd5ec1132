/* Loading the driver at run time: missing, too old, incomplete, no device. */
#include <stdlib.h>
#include <string.h>

#include "common.h"

static ds_status create_cuda(void)
{
    ds_runtime_t rt = (ds_runtime_t)0x1;
    ds_status st = ds_runtime_create(NULL, &rt);
    cr_assert_eq(rt, (ds_runtime_t)0x1, "out must not be written on failure");
    return st;
}

static void no_driver(void) { setenv("DS_LIBCUDA", "/nonexistent/libcuda.so.1", 1); }

Test(driver, missing_library_is_no_driver, .init = no_driver)
{
    t_log_capture(DS_LOG_INFO);
    cr_assert_eq(create_cuda(), DS_ERR_NO_DRIVER);
    cr_assert(strstr(ds_last_error_message(), "/nonexistent/libcuda.so.1") != NULL, "%s",
              ds_last_error_message());
    cr_assert_geq(t_log_count(DS_LOG_INFO), 1, "reported through the handler");
    /* asking again gives the same answer (loaded once) */
    cr_assert_eq(create_cuda(), DS_ERR_NO_DRIVER);
}

static void old_driver(void) { setenv("DS_LIBCUDA", getenv("FAKE_CUDA_OLD"), 1); }

Test(driver, old_driver_is_too_old_and_names_the_version, .init = old_driver)
{
    cr_assert_eq(create_cuda(), DS_ERR_DRIVER_TOO_OLD);
    cr_assert(strstr(ds_last_error_message(), "11.8") != NULL, "%s", ds_last_error_message());
}

static void incomplete_driver(void) { setenv("DS_LIBCUDA", getenv("FAKE_CUDA_NOSYM"), 1); }

Test(driver, missing_required_symbol_is_named, .init = incomplete_driver)
{
    cr_assert_eq(create_cuda(), DS_ERR_NO_DRIVER);
    cr_assert(strstr(ds_last_error_message(), "cuGreenCtxCreate") != NULL, "%s", ds_last_error_message());
}

static void no_device(void) { setenv("DS_LIBCUDA", getenv("FAKE_CUDA_NODEV"), 1); }

Test(driver, driver_without_device_is_no_device, .init = no_device)
{
    cr_assert_eq(create_cuda(), DS_ERR_NO_DEVICE);
}

Test(driver, sim_does_not_need_the_driver, .init = no_driver)
{
    ds_runtime_t rt = t_sim_runtime(0);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}
