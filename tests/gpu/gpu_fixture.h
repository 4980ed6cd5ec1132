/*
 * Suite `gpu` fixture: a runtime on the real CUDA device, the driver table the
 * library loaded (ds__driver_cuda), and the suite's own kernels (kernels.cu,
 * embedded as gpu_test_fatbin) loaded into the runtime's primary context.
 *
 * Criterion runs every test in its own process (BoxFort re-executes the test
 * binary), so each test opens and closes its own fixture: nothing set up in
 * main() reaches a test.
 */
#ifndef DS_TESTS_GPU_FIXTURE_H
#define DS_TESTS_GPU_FIXTURE_H

#include <criterion/criterion.h>
#include <stdint.h>

#include "seam/driver.h"
#include "detshare/detshare.h"
#include "detshare/policy.h"
#include "gpu_kernels.h"

extern const unsigned char gpu_test_fatbin[];
extern const size_t gpu_test_fatbin_size;

typedef struct gpu_env {
    ds_runtime_t rt;
    const ds__driver *cu;
    ds_runtime_info info;
    CUmodule module;
    CUfunction echo, append, sec_write, sec_derive, sec_check, spin, be_spin, ls_stamp, span;
    CUfunction gate_fill, host_flag, trap_after;
    CUdevice dev;       /* gpu_prepare only: */
    CUcontext primary;  /* the primary context the fixture retained */
} gpu_env;

/* True for the statuses that mean "no usable GPU here" (a skip, not a failure). */
int gpu_status_is_no_device(ds_status st);

/* Routes the library's log to stderr at WARN (DS_LOG_LEVEL overrides). */
void gpu_log_to_stderr(void);

/*
 * Creates the runtime (cfg NULL: defaults, device CUDA), fetches the driver
 * table and loads the kernels. Skips the test (cr_skip_test) when no GPU is
 * usable; fails it (cr_assert) on any other error.
 * The policy is "manual" unless cfg names one: with it the runtime never moves
 * a vCtx, so the tests that place vCtxs by hand (initial_pctx, ds_vctx_remap)
 * keep their meaning although the runtime's default policy (slo_aware) places
 * vCtxs itself. Everything else in cfg is kept (the scheduler thread runs).
 */
void gpu_open(gpu_env *e, const ds_runtime_config *cfg);

/* Unloads the module and destroys the runtime, asserting DS_SUCCESS. */
void gpu_close(gpu_env *e);

/*
 * For runtimes with the resident control kernel (DS_RCK_ON): while it runs, a
 * module load, a device allocation or a whole-context sync may wait for it
 * (docs/results/h200/devprobe.jsonl), so everything is made before the runtime.
 * gpu_prepare: the driver, the primary context (retained by the fixture) and
 * the module with every kernel, no runtime yet (skips without a GPU); the
 * test allocates what it needs; gpu_start creates the runtime (cfg as in
 * gpu_open). gpu_finish destroys the runtime first (the RCK stops), then
 * unloads the module and releases the context; the test frees its memory
 * between gpu_stop and gpu_finish, or leaves it to the process's end.
 */
void gpu_prepare(gpu_env *e);
void gpu_start(gpu_env *e, const ds_runtime_config *cfg);
/* Destroys the runtime, asserting `want`. */
void gpu_stop(gpu_env *e, ds_status want);
void gpu_finish(gpu_env *e);

/* Device memory, zeroed/filled and made visible before any vCtx stream uses
 * it (the fill runs on the primary context's NULL stream, which the vCtxs'
 * non-blocking streams do not wait for, so it is synchronised here). */
CUdeviceptr gpu_alloc(gpu_env *e, size_t bytes);
void gpu_fill32(gpu_env *e, CUdeviceptr p, uint32_t value, size_t words);
void gpu_free(gpu_env *e, CUdeviceptr p);
/* Synchronous copy to the host (call after the producing vCtx synchronised). */
void gpu_read(gpu_env *e, void *dst, CUdeviceptr src, size_t bytes);
/* Copy from the host, complete (and visible to the vCtxs' streams) on return. */
void gpu_write(gpu_env *e, CUdeviceptr dst, const void *src, size_t bytes);

/* Asserts that `result`, of type `type`, is `ok`; else fails naming the call
 * (`text`) and the result: `name` is an expression of the result, gpu_r_. */
#define GPU_ASSERT_RESULT(type, result, ok, text, name)                                         \
    do {                                                                                        \
        type gpu_r_ = (result);                                                                 \
        cr_assert_eq(gpu_r_, (ok), "%s:%d %s -> %s", __FILE__, __LINE__, text, name);           \
    } while (0)

/* Asserts a driver call (through the library's table) succeeded, naming it. */
#define GPU_CU(e, call)                                                                         \
    GPU_ASSERT_RESULT(CUresult, (e)->cu->call, CUDA_SUCCESS, #call, ds__cu_error_name((e)->cu, gpu_r_))

/* Asserts a libdetshare call returned DS_SUCCESS, with its detail. */
#define GPU_DS(call)                                                                            \
    do {                                                                                        \
        ds_status gpu_s_ = (call);                                                              \
        cr_assert_eq(gpu_s_, DS_SUCCESS, "%s:%d %s -> %s: %s", __FILE__, __LINE__, #call,       \
                     ds_status_name(gpu_s_), ds_last_error_message());                         \
    } while (0)

/* Asserts a libdetshare call returned `want`. */
#define GPU_DS_EQ(call, want)                                                                   \
    do {                                                                                        \
        ds_status gpu_s_ = (call);                                                              \
        cr_assert_eq(gpu_s_, (want), "%s:%d %s -> %s, want %s (%s)", __FILE__, __LINE__, #call, \
                     ds_status_name(gpu_s_), ds_status_name(want), ds_last_error_message());   \
    } while (0)

/* A vCtx with the given name, class and initial pCtx (-1: full GPU), priority 0. */
ds_vctx_t gpu_vctx(gpu_env *e, const char *name, ds_vctx_class cls, int32_t initial_pctx);
/* A vCtx with the given name, class, phase and SLO (0: none), on the full GPU
 * until the policy places it. */
ds_vctx_t gpu_vctx_slo(gpu_env *e, const char *name, ds_vctx_class cls, ds_phase phase, uint32_t slo_us);

/* Index of the pool's FULL pCtx (asserted to exist). */
uint32_t gpu_full_pctx(const gpu_env *e);
/* The pCtx v is bound to now. */
uint32_t gpu_bound_pctx(ds_vctx_t v);

/* The first failure of a thread that asserts nothing (Criterion's asserts
 * belong to the test's thread), kept for the test to report. */
typedef struct gpu_thread_err {
    ds_status st; /* DS_SUCCESS until a failure */
    char msg[256];
} gpu_thread_err;
#define GPU_THREAD_ERR_INIT {DS_SUCCESS, ""}
/* Keeps st and the message fmt makes, unless a failure is kept already. */
void gpu_thread_fail(gpu_thread_err *f, ds_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Monotonic clock in ns / ms. */
uint64_t gpu_now_ns(void);
double gpu_now_ms(void);
void gpu_sleep_us(unsigned us);
/* Sleeps until gpu_now_ns() reaches t (returns at once if it has). */
void gpu_sleep_until_ns(uint64_t t);

/* Deterministic generator for the tests' random choices (xorshift64*). */
typedef struct gpu_rng {
    uint64_t s;
} gpu_rng;
static inline uint64_t gpu_rng_next(gpu_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}
static inline uint32_t gpu_rng_below(gpu_rng *r, uint32_t n)
{
    return (uint32_t)(gpu_rng_next(r) % n);
}

/* Index of the smallest LOW pCtx that has a complement, preferring exactly
 * `want_sms` SMs; -1 if the pool has none. */
int gpu_find_low(const ds_runtime_info *info, uint32_t want_sms);

/* Index of the LOW pCtx whose SM count is nearest want_sms (the first of equals),
 * -1 if none: the tier the built-in policies take for ls_sms (ds_view_low_tier). */
int gpu_low_nearest(const ds_runtime_info *info, uint32_t want_sms);

#endif /* DS_TESTS_GPU_FIXTURE_H */
