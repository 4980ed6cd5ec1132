/* DS_PARAM: strict parsing, read once, invalid values keep the default. */
#include <stdlib.h>

#include "common.h"
#include "seam/params.h"

Test(params, parse_int_is_strict)
{
    int64_t v = -7;
    cr_assert_eq(ds__param_parse_int("42", 0, 100, &v), 0);
    cr_assert_eq(v, 42);
    cr_assert_eq(ds__param_parse_int("-1", -1, 4, &v), 0);
    cr_assert_eq(v, -1);
    v = 5;
    cr_assert_neq(ds__param_parse_int("", 0, 100, &v), 0);
    cr_assert_neq(ds__param_parse_int(NULL, 0, 100, &v), 0);
    cr_assert_neq(ds__param_parse_int("12abc", 0, 100, &v), 0);
    cr_assert_neq(ds__param_parse_int(" 12", 0, 100, &v), 0, "leading space is not a number here");
    cr_assert_neq(ds__param_parse_int("101", 0, 100, &v), 0);
    cr_assert_neq(ds__param_parse_int("99999999999999999999", 0, 100, &v), 0);
    cr_assert_eq(v, 5, "a failed parse leaves the output alone");
}

Test(params, defaults_without_environment)
{
    unsetenv("DS_SAMPLE_PERIOD");
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    cr_assert_eq(ds__param_sample_period(), 256);
    cr_assert_eq(ds__param_max_connections(), 8);
    cr_assert_str_eq(ds__param_libcuda(), "libcuda.so.1");
}

static void env_set(void)
{
    setenv("DS_SAMPLE_PERIOD", "7", 1);
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
    setenv("DS_TEARDOWN_TIMEOUT_MS", "not-a-number", 1);
}

Test(params, environment_read_once_and_logged, .init = env_set)
{
    t_log_capture(DS_LOG_INFO);
    cr_assert_eq(ds__param_sample_period(), 7);
    cr_assert_eq(ds__param_max_connections(), 32);
    cr_assert_eq(ds__param_teardown_timeout_ms(), 10000, "invalid value keeps the default");
    setenv("DS_SAMPLE_PERIOD", "9", 1);
    cr_assert_eq(ds__param_sample_period(), 7, "read once");
    ds__params_log_once();
    cr_assert_geq(t_log_count(DS_LOG_INFO), 2);
    cr_assert_eq(t_log_count(DS_LOG_WARN), 1, "the invalid DS_TEARDOWN_TIMEOUT_MS is reported");
}
