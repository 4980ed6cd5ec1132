#include "seam/params.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include "seam/log.h"

int ds__param_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !(*s == '-' || (*s >= '0' && *s <= '9')))
        return -1; /* no leading blanks or '+': the whole string is the number */
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int64_t)v;
    return 0;
}

enum { DS__P_UNSET = 0, DS__P_SET = 1, DS__P_INVALID = 2 };

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#define DS__PARAM_VAR_INT(name, env, def, lo, hi, desc) \
    static int64_t g_##name = def;                      \
    static int g_##name##_state;                        \
    static const char *g_##name##_raw;
#define DS__PARAM_VAR_STR(name, env, def, desc) \
    static const char *g_##name = def;          \
    static int g_##name##_state;
DS__PARAMS_INT(DS__PARAM_VAR_INT)
DS__PARAMS_STR(DS__PARAM_VAR_STR)

static void read_all(void)
{
    const char *v;
#define DS__PARAM_READ_INT(name, env, def, lo, hi, desc)             \
    if ((v = getenv(env)) != NULL) {                                 \
        g_##name##_raw = v;                                          \
        g_##name##_state = ds__param_parse_int(v, lo, hi, &g_##name) \
                               ? DS__P_INVALID : DS__P_SET;          \
    }
#define DS__PARAM_READ_STR(name, env, def, desc) \
    if ((v = getenv(env)) != NULL && *v) {       \
        g_##name = v;                            \
        g_##name##_state = DS__P_SET;            \
    }
    DS__PARAMS_INT(DS__PARAM_READ_INT)
    DS__PARAMS_STR(DS__PARAM_READ_STR)
}

#define DS__PARAM_GET_INT(name, env, def, lo, hi, desc) \
    int64_t ds__param_##name(void)                      \
    {                                                   \
        pthread_once(&g_once, read_all);                \
        return g_##name;                                \
    }
#define DS__PARAM_GET_STR(name, env, def, desc) \
    const char *ds__param_##name(void)          \
    {                                           \
        pthread_once(&g_once, read_all);        \
        return g_##name;                        \
    }
DS__PARAMS_INT(DS__PARAM_GET_INT)
DS__PARAMS_STR(DS__PARAM_GET_STR)

static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;

static void log_all(void)
{
    pthread_once(&g_once, read_all);
#define DS__PARAM_LOG_INT(name, env, def, lo, hi, desc)                                          \
    if (g_##name##_state == DS__P_SET)                                                           \
        ds__log(DS_LOG_INFO, "param %s=%lld (%s)", env, (long long)g_##name, desc);              \
    else if (g_##name##_state == DS__P_INVALID)                                                  \
        ds__log(DS_LOG_WARN, "param %s='%s' is not an integer in [%lld, %lld]; using %lld", env, \
                g_##name##_raw, (long long)(lo), (long long)(hi), (long long)(def));
#define DS__PARAM_LOG_STR(name, env, def, desc) \
    if (g_##name##_state == DS__P_SET)          \
        ds__log(DS_LOG_INFO, "param %s=%s (%s)", env, g_##name, desc);
    DS__PARAMS_INT(DS__PARAM_LOG_INT)
    DS__PARAMS_STR(DS__PARAM_LOG_STR)
}

void ds__params_log_once(void) { pthread_once(&g_log_once, log_all); }
