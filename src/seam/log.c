/* Status strings, the caller-set log handler and the thread-local last error. */
#include "seam/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "seam/params.h"

const char *ds_status_string(ds_status status)
{
    switch (status) {
#define DS__STATUS_STR(name, value, desc) \
    case name:                            \
        return desc;
        DS_STATUS_LIST(DS__STATUS_STR)
#undef DS__STATUS_STR
    }
    return "unknown status";
}

const char *ds_status_name(ds_status status)
{
    switch (status) {
#define DS__STATUS_NAME(name, value, desc) \
    case name:                             \
        return #name;
        DS_STATUS_LIST(DS__STATUS_NAME)
#undef DS__STATUS_NAME
    }
    return "DS_STATUS_UNKNOWN";
}

int ds_version(void) { return DS_VERSION_CODE; }

/* The handler and its argument change together: publish them as one struct. */
typedef struct ds__log_sink {
    ds_log_fn fn;
    void *user;
} ds__log_sink;

static ds__log_sink g_sinks[2];
static _Atomic(ds__log_sink *) g_sink = NULL;
static atomic_int g_level = DS_LOG_WARN;
static atomic_int g_sink_gen = 0;

ds_status ds_log_set_handler(ds_log_fn fn, void *user, ds_log_level level)
{
    if ((int)level < DS_LOG_NONE || (int)level > DS_LOG_DEBUG)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_log_set_handler: level %d outside 0-4", (int)level);
    /* Two slots, alternated: a reader that loaded the old pointer keeps a
     * consistent pair unless the handler is replaced twice during one message. */
    int gen = atomic_fetch_add(&g_sink_gen, 1) & 1;
    g_sinks[gen].fn = fn;
    g_sinks[gen].user = user;
    atomic_store(&g_sink, fn ? &g_sinks[gen] : NULL);
    int env = ds__param_log_level();
    atomic_store(&g_level, env >= 0 ? env : (int)level);
    return DS_SUCCESS;
}

int ds__log_enabled(ds_log_level level)
{
    if (atomic_load_explicit(&g_sink, memory_order_acquire) == NULL)
        return 0;
    int lim = atomic_load_explicit(&g_level, memory_order_relaxed);
    return (int)level <= lim;
}

static void deliver(ds_log_level level, const char *msg)
{
    ds__log_sink *s = atomic_load_explicit(&g_sink, memory_order_acquire);
    if (s && s->fn)
        s->fn(level, msg, s->user);
}

static void vlog(ds_log_level level, const char *fmt, va_list ap)
{
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    deliver(level, buf);
}

void ds__log(ds_log_level level, const char *fmt, ...)
{
    if (!ds__log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void ds_log_message(ds_log_level level, const char *fmt, ...)
{
    if (!fmt || !ds__log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

static _Thread_local char t_last_error[512];

const char *ds_last_error_message(void) { return t_last_error; }

static ds_status vfail(ds_log_level level, ds_status status, const char *fmt, va_list ap)
{
    int n = snprintf(t_last_error, sizeof t_last_error, "%s: ", ds_status_name(status));
    if (n < 0 || (size_t)n >= sizeof t_last_error)
        n = 0;
    vsnprintf(t_last_error + n, sizeof t_last_error - (size_t)n, fmt, ap);
    if (ds__log_enabled(level))
        deliver(level, t_last_error);
    return status;
}

ds_status ds__fail(ds_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ds_status s = vfail(status == DS_ERR_TIMEOUT ? DS_LOG_WARN : DS_LOG_ERROR, status, fmt, ap);
    va_end(ap);
    return s;
}

ds_status ds__fail_at(ds_log_level level, ds_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ds_status s = vfail(level, status, fmt, ap);
    va_end(ap);
    return s;
}

ds_status ds__check_abi_grown(const void *p, const size_t *old_sizes, size_t size, const char *what)
{
    size_t given = p ? ((const struct { size_t size; uint32_t magic; uint32_t version; } *)p)->size : 0;
    for (const size_t *o = old_sizes; p && *o; o++)
        if (given == *o)
            size = *o;
    return ds__check_abi(p, size, what);
}

ds_status ds__check_abi(const void *p, size_t min_size, const char *what)
{
    typedef struct {
        size_t size;
        uint32_t magic;
        uint32_t version;
    } hdr;
    const hdr *h = p;
    if (!h)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "%s is NULL", what);
    if (h->magic != DS_ABI_MAGIC)
        return ds__fail(DS_ERR_ABI_MISMATCH, "%s: bad magic 0x%08x (initialise it with its _INIT macro)",
                        what, h->magic);
    if (h->version == 0 || h->version > DS_ABI_VERSION)
        return ds__fail(DS_ERR_ABI_MISMATCH, "%s: version %u, this library supports 1-%u", what,
                        h->version, DS_ABI_VERSION);
    if (h->size < min_size) {
        /* older, smaller forms: ds__check_abi_grown */
        return ds__fail(DS_ERR_ABI_MISMATCH, "%s: size %zu, expected %zu", what, h->size, min_size);
    }
    if (h->size > min_size) {
        const unsigned char *extra = (const unsigned char *)p + min_size;
        size_t n = h->size - min_size;
        if (n > 4096)
            return ds__fail(DS_ERR_ABI_MISMATCH, "%s: size %zu is implausible (expected %zu)", what,
                            h->size, min_size);
        for (size_t i = 0; i < n; i++)
            if (extra[i])
                return ds__fail(DS_ERR_ABI_MISMATCH,
                                "%s: size %zu > %zu with non-zero fields this library does not know",
                                what, h->size, min_size);
    }
    return DS_SUCCESS;
}
