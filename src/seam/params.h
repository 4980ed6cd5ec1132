/*
 * Every environment override goes through DS__PARAMS: read once (pthread_once),
 * validated against a range, logged at INFO when set (WARN when invalid, and
 * the default is kept). Model: NCCL src/include/param.h.
 */
#ifndef DS_SEAM_PARAMS_H
#define DS_SEAM_PARAMS_H

#include <stdint.h>

/* X(name, env, default, min, max, description) for integers;
 * S(name, env, default, description) for strings. */
#define DS__PARAMS_INT(X)                                                                      \
    X(log_level, "DS_LOG_LEVEL", -1, -1, 4, "log level override 0-4 (-1: as ds_log_set_handler set)") \
    X(sample_period, "DS_SAMPLE_PERIOD", 256, 0, 1000000,                                      \
      "time every Nth ds_launch of a vCtx with events (0: never)")                             \
    X(teardown_timeout_ms, "DS_TEARDOWN_TIMEOUT_MS", 10000, 1, 3600000,                       \
      "bound on waiting for in-flight work at vCtx/runtime destroy")                           \
    X(max_connections, "CUDA_DEVICE_MAX_CONNECTIONS", 8, 1, 32,                               \
      "read only: hardware queues (connections) the CUDA driver gives this process")

#define DS__PARAMS_STR(S) S(libcuda, "DS_LIBCUDA", "libcuda.so.1", "CUDA driver library to dlopen")

#define DS__PARAM_DECL_INT(name, env, def, lo, hi, desc) int64_t ds__param_##name(void);
#define DS__PARAM_DECL_STR(name, env, def, desc) const char *ds__param_##name(void);
DS__PARAMS_INT(DS__PARAM_DECL_INT)
DS__PARAMS_STR(DS__PARAM_DECL_STR)
#undef DS__PARAM_DECL_INT
#undef DS__PARAM_DECL_STR

/* Strict integer parse: whole string, base 10, within [lo, hi]. 0 on success. */
int ds__param_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Logs (once per process) every parameter that was set in the environment. */
void ds__params_log_once(void);

#endif /* DS_SEAM_PARAMS_H */
