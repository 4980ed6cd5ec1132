/* Status strings, the log handler and the last-error message. */
#include <string.h>

#include "common.h"
#include "seam/log.h"

Test(status, every_status_has_a_name_and_a_description)
{
#define CHECK(name, value, desc)                                  \
    cr_assert_str_eq(ds_status_name(name), #name);                \
    cr_assert_str_eq(ds_status_string(name), desc);               \
    cr_assert_eq((int)name, value);
    DS_STATUS_LIST(CHECK)
#undef CHECK
}

Test(status, unknown_values_are_named_unknown)
{
    cr_assert_str_eq(ds_status_string((ds_status)9999), "unknown status");
    cr_assert_str_eq(ds_status_name((ds_status)-1), "DS_STATUS_UNKNOWN");
}

Test(status, version_matches_the_header)
{
    cr_assert_eq(ds_version(), DS_VERSION_CODE);
}

Test(log, silent_by_default_and_handler_gets_errors)
{
    cr_assert_str_eq(ds_last_error_message(), "");
    /* no handler: failing calls must not print or crash */
    cr_assert_eq(ds_vctx_destroy(NULL), DS_ERR_INVALID_HANDLE);
    cr_assert(strstr(ds_last_error_message(), "DS_ERR_INVALID_HANDLE") != NULL);
    t_log_capture(DS_LOG_ERROR);
    cr_assert_eq(ds_launch(NULL, NULL, t_dim(1), t_dim(1), 0, NULL, NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(t_log_count(DS_LOG_ERROR), 1);
    cr_assert(strstr(t_log_last(), "ds_launch") != NULL, "log: %s", t_log_last());
}

Test(log, level_filters_messages)
{
    t_log_capture(DS_LOG_NONE);
    cr_assert_eq(ds_vctx_destroy(NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(t_log_count(DS_LOG_ERROR), 0);
    t_log_capture(DS_LOG_DEBUG);
    ds__log(DS_LOG_DEBUG, "x=%d", 42);
    cr_assert_str_eq(t_log_last(), "x=42");
}

Test(log, bad_level_is_rejected)
{
    cr_assert_eq(ds_log_set_handler(NULL, NULL, (ds_log_level)7), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_log_set_handler(NULL, NULL, (ds_log_level)-1), DS_ERR_INVALID_ARGUMENT);
}

static void env_level(void) { setenv("DS_LOG_LEVEL", "1", 1); }

Test(log, env_overrides_level, .init = env_level)
{
    t_log_capture(DS_LOG_DEBUG);
    ds__log(DS_LOG_INFO, "hidden");
    cr_assert_eq(t_log_count(DS_LOG_INFO), 0);
    ds__log(DS_LOG_ERROR, "shown");
    cr_assert_str_eq(t_log_last(), "shown");
}

Test(abi, header_checks)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    cr_assert_eq(ds__check_abi(&a, sizeof a, "a"), DS_SUCCESS);
    a.magic = 0;
    cr_assert_eq(ds__check_abi(&a, sizeof a, "a"), DS_ERR_ABI_MISMATCH);
    a = (ds_vctx_attr)DS_VCTX_ATTR_INIT;
    a.version = DS_ABI_VERSION + 1;
    cr_assert_eq(ds__check_abi(&a, sizeof a, "a"), DS_ERR_ABI_MISMATCH);
    a = (ds_vctx_attr)DS_VCTX_ATTR_INIT;
    a.size = sizeof a - 8;
    cr_assert_eq(ds__check_abi(&a, sizeof a, "a"), DS_ERR_ABI_MISMATCH);
    /* a newer, larger struct is fine when the fields we do not know are zero */
    struct { ds_vctx_attr a; uint64_t future; } big = {DS_VCTX_ATTR_INIT, 0};
    big.a.size = sizeof big;
    cr_assert_eq(ds__check_abi(&big, sizeof big.a, "a"), DS_SUCCESS);
    big.future = 1;
    cr_assert_eq(ds__check_abi(&big, sizeof big.a, "a"), DS_ERR_ABI_MISMATCH);
    cr_assert_eq(ds__check_abi(NULL, sizeof a, "a"), DS_ERR_INVALID_ARGUMENT);
}
