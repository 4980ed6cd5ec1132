/*
 * Pieces every libdetshare benchmark under bench/ shares (docs/benchmarks.md,
 * "Common rules"): a monotonic clock and a precise sleep, a seeded PRNG and
 * Poisson arrivals, percentiles, provenance strings for result files, a small
 * JSON writer, and opening a runtime with the fall-back to the simulated
 * device when there is no GPU.
 *
 * Functions that can fail return 0 on success and -1 after printing what
 * failed to stderr: these are programs, not the library.
 */
#ifndef DETSHARE_EXAMPLES_BENCH_H
#define DETSHARE_EXAMPLES_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <detshare/detshare.h>
#include <detshare/policy.h>
#include <detshare/sim.h>

/* On a failing libdetshare call: print the call, the status and the detail,
 * then `return -1` from the enclosing function. */
#define BENCH_DS_CHECK(call)                                                                   \
    do {                                                                                       \
        ds_status bench_st_ = (call);                                                          \
        if (bench_st_ != DS_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,                \
                    ds_status_name(bench_st_), ds_last_error_message());                      \
            return -1;                                                                         \
        }                                                                                      \
    } while (0)

/* ------------------------------------------------------------------------ */
/* time                                                                      */

/** CLOCK_MONOTONIC in nanoseconds (after bench_clock_sim(): simulated ns). */
uint64_t bench_now_ns(void);

/** Returns at t_ns (CLOCK_MONOTONIC) or at once if it has passed. Sleeps, then
 *  spins the last 200 us, because a timer wake-up alone is 50-100 us late and
 *  that lateness would count as request latency. */
void bench_sleep_until_ns(uint64_t t_ns);

/** From now on bench_now_ns() and bench_sleep_until_ns() read and wait on
 *  rt's simulated clock (rt on a DS_SIM_CLOCK_VIRTUAL device: a run repeats
 *  itself exactly, provided every thread that drives the device takes turns,
 *  bench_turn_*); NULL: the host's CLOCK_MONOTONIC again. Call it while no
 *  other thread uses the clock. */
void bench_clock_sim(ds_runtime_t rt);

/** The runtime bench_clock_sim() set, NULL while the clock is the host's. */
ds_runtime_t bench_clock_sim_rt(void);

/** Turns (ds_sim_thread_reserve() and friends) on the bench_clock_sim()
 *  device; with the host's clock they do nothing (*ticket 0). Reserve on the
 *  thread that starts the new one, before starting it; attach first thing on
 *  the new thread; release last (before it ends or blocks outside the
 *  simulator, e.g. in pthread_join). reserve and attach return 0, or -1 after
 *  printing the error. */
int bench_turn_reserve(uint32_t *ticket);
int bench_turn_attach(uint32_t ticket);
void bench_turn_release(uint32_t ticket);

/** Lets `us` pass: on the simulated clock a sleep on it, else nanosleep. */
void bench_pause_us(uint32_t us);

/** The runtime's scheduler pass at simulated instants, `period_us` apart,
 *  from a thread of its own that takes turns (the runtime was created with
 *  scheduler_period_us < 0 for the simulated clock); with the host's clock
 *  start does nothing. stop is called by the thread that started it (it
 *  waits on the clock for the poller to give its turn up, then joins it).
 *  start returns 0, or -1 after printing the error. */
typedef struct bench_poller {
    pthread_t th;
    uint32_t turn, period_us;
    atomic_int stop, done;
    int started;
} bench_poller;
int bench_poller_start(bench_poller *p, uint32_t period_us);
void bench_poller_stop(bench_poller *p);

/* ------------------------------------------------------------------------ */
/* random numbers (never rand(): results must repeat with --seed)            */

/** xoshiro256** state, seeded through splitmix64 (Blackman and Vigna,
 *  https://prng.di.unimi.it/). */
typedef struct bench_rng {
    uint64_t s[4];
} bench_rng;

void bench_rng_seed(bench_rng *r, uint64_t seed);
uint64_t bench_rng_next(bench_rng *r);
/** splitmix64's output function applied to x + 0x9e3779b97f4a7c15 (Steele,
 *  Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA
 *  2014): a stateless hash, for values that must depend on (seed, index)
 *  alone. */
uint64_t bench_mix64(uint64_t x);
/** Uniform in (0, 1]: never 0, so log() of it is finite. */
double bench_rng_uniform(bench_rng *r);
/** Exponentially distributed with the given mean. */
double bench_rng_exponential(bench_rng *r, double mean);

/** Arrival times of a Poisson process of rate_per_s, in microseconds from 0:
 *  out_us[i] = sum of i+1 exponential gaps. Same seed, same sequence. */
void bench_poisson_arrivals(uint64_t seed, double rate_per_s, size_t n, double *out_us);

/** A bf16 value (its 16 bits) as a float: exact, bf16 being the top half of
 *  an IEEE 754 binary32. */
float bench_bf16_to_float(uint16_t bits);

/* ------------------------------------------------------------------------ */
/* statistics                                                                */

typedef struct bench_summary {
    size_t n;
    double mean, min, p50, p99, max;
} bench_summary;

/** p-quantile (p in [0, 1]) of sorted[0..n), linear interpolation between the
 *  two nearest order statistics (numpy's default). NAN if n == 0. */
double bench_percentile(const double *sorted, size_t n, double p);

/** Summary of x[0..n) (x is left as it was). Fields are NAN when n == 0. */
int bench_summarize(const double *x, size_t n, bench_summary *out);

/* ------------------------------------------------------------------------ */
/* provenance for result files                                               */

/** Commit of the source tree: $DS_COMMIT if set, else `git rev-parse --short
 *  HEAD` run in source_dir, else "unknown". */
void bench_commit(const char *source_dir, char *out, size_t cap);

/** Current UTC time, ISO 8601 ("2026-11-22T01:17:00Z"). */
void bench_date_utc(char *out, size_t cap);

/** argv joined by spaces; arguments holding spaces or quotes are single-quoted
 *  so the line can be pasted into a shell. Truncated to cap. */
void bench_command(int argc, char **argv, char *out, size_t cap);

/** "580.159.04 (CUDA 13.0)" from the CUDA driver version (cuDriverGetVersion
 *  style, 13000) and /proc/driver/nvidia/version where readable; "simulated"
 *  for version 0. */
void bench_driver_string(int cuda_driver_version, char *out, size_t cap);

/** "low", "high" or "full" for a pCtx's anchor, "?" for anything else. */
const char *bench_anchor_name(ds_tier_anchor anchor);

/** Prints "device: NAME[ [SIMULATED]], N SMs; pool: 0=132full 1=16low ..."
 *  and a newline to stdout, and flushes it. */
void bench_print_pool(const ds_runtime_info *info, int simulated);

/* ------------------------------------------------------------------------ */
/* JSON writer: one object tree, written as it goes                          */

#define BENCH_JSON_MAX_DEPTH 16

typedef struct bench_json {
    FILE *f;
    int depth;
    int has_items[BENCH_JSON_MAX_DEPTH];
    int is_array[BENCH_JSON_MAX_DEPTH];
} bench_json;

/** Starts the root object on f. */
void bench_json_begin(bench_json *j, FILE *f);
/** Opens an object member `key` (NULL for an element of an array). */
void bench_json_object(bench_json *j, const char *key);
/** Opens an array member `key`; inside it, every writer's key is ignored
 *  (pass NULL) and each call adds one element. */
void bench_json_array(bench_json *j, const char *key);
/** Closes the innermost open object or array. */
void bench_json_end(bench_json *j);
/** A member holding v[0..n) on one line (non-finite numbers as null). */
void bench_json_number_array(bench_json *j, const char *key, const double *v, size_t n);
/** Closes the root and flushes. 0, or -1 if the stream had an error. */
int bench_json_finish(bench_json *j);

void bench_json_string(bench_json *j, const char *key, const char *value);
/** Non-finite numbers are written as null (JSON has no NaN). */
void bench_json_number(bench_json *j, const char *key, double value);
void bench_json_int(bench_json *j, const char *key, long long value);
void bench_json_uint(bench_json *j, const char *key, unsigned long long value);
void bench_json_bool(bench_json *j, const char *key, int value);
void bench_json_null(bench_json *j, const char *key);

/** The provenance members a result file starts with: "benchmark", "device",
 *  "driver", "sms" (from info), "commit" (bench_commit of source_dir),
 *  "command", "date" (now, UTC) and "simulated". */
void bench_json_provenance(bench_json *j, const char *benchmark, const ds_runtime_info *info,
                           const char *source_dir, const char *command, int simulated);

/* ------------------------------------------------------------------------ */
/* runtime                                                                   */

/** Log handler for ds_log_set_handler: "detshare <level>: <message>" on
 *  stderr. */
void bench_log_to_stderr(ds_log_level level, const char *message, void *user);

/** Installs bench_log_to_stderr: at DS_LOG_INFO when the environment
 *  variable `var` is "info" (the policies' decisions, slo_aware's tier
 *  changes among them), else at DS_LOG_WARN. */
void bench_log_from_env(const char *var);

/** Creates a simulated kernel (ds_sim_kernel_create) named `name`: each block
 *  runs block_us, blocks_per_sm blocks share an SM, and it takes num_params
 *  parameters of param_sizes[0..num_params) bytes (param_sizes may be NULL
 *  when num_params is 0). Prints the kernel's name and the error and returns
 *  -1 on failure. */
int bench_sim_kernel(ds_runtime_t rt, const char *name, double block_us, uint32_t blocks_per_sm,
                     uint32_t num_params, const uint32_t *param_sizes, CUfunction *out);

/* --version anywhere in argv: prints "<prog> <version> (libdetshare
 * <loaded library's version>)" on stdout and returns 1; 0 otherwise. */
int bench_version_flag(const char *prog, int argc, char **argv);

/* Whether --out's path can be written, checked before a run so that a typo
 * does not cost the whole run: opens it for appending (an existing file is
 * left as it is; one created here is removed again). 0, or -1 after printing
 * "<prog>: --out <path>: <why>" on stderr. */
int bench_out_writable(const char *prog, const char *path);

/* Strict unsigned parse of a flag's value (whole string, base 10, in
 * [min, max]); prints "<prog>: <flag>: ..." and returns -1 otherwise. */
int bench_parse_u64(const char *prog, const char *flag, const char *s, uint64_t min, uint64_t max,
                    uint64_t *out);

/* `--device cuda` given on the command line: bench_runtime_open then never
 * falls back to the simulated device (without the flag, the default CUDA
 * device falls back when there is no GPU, and says so). */
void bench_require_cuda(void);

/**
 * Creates a runtime from *cfg (device, tiers, ...; cfg->sim is replaced by
 * `sim`, the simulated device's shape and clock). When cfg->device is
 * DS_DEVICE_CUDA and there is no usable GPU (DS_ERR_NO_DRIVER, DS_ERR_NO_DEVICE,
 * DS_ERR_DRIVER_TOO_OLD), prints one line saying why and creates it on the
 * simulated device with `sim` instead, unless bench_require_cuda() was
 * called: then that line goes to stderr and it fails. On the simulated device, prints the
 * banner that says the numbers are simulated.
 * \param[out] simulated  1 if the runtime drives the simulated device.
 * \return 0, or -1 after printing the error.
 */
int bench_runtime_open(const ds_runtime_config *cfg, const ds_sim_config *sim, ds_runtime_t *rt,
                       int *simulated);

/** The same, for a benchmark whose threads take turns (bench_turn_*): on the
 *  simulated device the clock is DS_SIM_CLOCK_VIRTUAL whatever `sim` says,
 *  the runtime has no scheduler thread (bench_poller runs its passes at
 *  simulated instants) and bench_clock_sim() is set to it, so a run repeats
 *  itself exactly. */
int bench_runtime_open_turns(const ds_runtime_config *cfg, const ds_sim_config *sim, ds_runtime_t *rt,
                             int *simulated);

#endif /* DETSHARE_EXAMPLES_BENCH_H */
