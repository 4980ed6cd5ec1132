/*
 * Status, logging and the thread-local last-error message.
 * The first function that detects an error calls ds__fail(): it formats the
 * detail once, keeps it for ds_last_error_message() and hands it to the
 * caller's log handler (if any, and if the level passes). Nothing is printed
 * by the library itself.
 */
#ifndef DS_SEAM_LOG_H
#define DS_SEAM_LOG_H

#include "detshare/detshare.h"

#if defined(__GNUC__)
#define DS__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define DS__LIKELY(x) __builtin_expect(!!(x), 1)
#define DS__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define DS__PRINTF(a, b)
#define DS__LIKELY(x) (x)
#define DS__UNLIKELY(x) (x)
#endif

/* Logs at `level` (cheap no-op when no handler or level filtered out). */
void ds__log(ds_log_level level, const char *fmt, ...) DS__PRINTF(2, 3);

/* Records `status` with a formatted detail as the thread's last error, logs it
 * at ERROR (WARN for DS_ERR_TIMEOUT) and returns `status`. */
ds_status ds__fail(ds_status status, const char *fmt, ...) DS__PRINTF(2, 3);

/* Same, at an explicit level (e.g. INFO for an expected fallback). */
ds_status ds__fail_at(ds_log_level level, ds_status status, const char *fmt, ...) DS__PRINTF(3, 4);

/* True when a message at `level` would reach a handler. */
int ds__log_enabled(ds_log_level level);

/* Propagate a failing status (already logged by whoever raised it). */
#define DS__TRY(expr)                               \
    do {                                            \
        ds_status ds__s_ = (expr);                  \
        if (DS__UNLIKELY(ds__s_ != DS_SUCCESS))     \
            return ds__s_;                          \
    } while (0)

/* Same, jumping to a cleanup label with `st` set. */
#define DS__TRY_GOTO(expr, st, label)               \
    do {                                            \
        (st) = (expr);                              \
        if (DS__UNLIKELY((st) != DS_SUCCESS))       \
            goto label;                             \
    } while (0)

/* Checks a size/magic/version header of a caller's attribute struct. The
 * struct may be larger (newer caller) only if the extra bytes are zero. */
ds_status ds__check_abi(const void *s, size_t min_size, const char *what);

/* The same for a struct that grew: its earlier published sizes, a list
 * ending in 0 (DS__OLD_SIZES), are accepted too. The caller copies
 * min(size, sizeof) bytes: an older input keeps the defaults of the newer
 * fields, an older output gets only the fields it has room for. */
ds_status ds__check_abi_grown(const void *s, const size_t *old_sizes, size_t size, const char *what);

/* The earlier sizes of a struct, for ds__check_abi_grown. */
#define DS__OLD_SIZES(...) ((const size_t[]){__VA_ARGS__, 0})

#endif /* DS_SEAM_LOG_H */
