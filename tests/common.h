/* Helpers shared by the unit tests (simulated device, log capture). */
#ifndef DS_TESTS_COMMON_H
#define DS_TESTS_COMMON_H

#include <criterion/criterion.h>
#include <detshare/detshare.h>
#include <detshare/sim.h>

/* A runtime on a fresh simulated device in virtual time (132 SMs unless
 * sm_count != 0), default pool. Asserts success. */
ds_runtime_t t_sim_runtime(uint32_t sm_count);

/* A configuration for a simulated device (`sim`, which must outlive the
 * runtime's creation) whose scheduler passes the test drives
 * (ds_runtime_poll), under `policy` (NULL: "manual"). The caller sets the
 * rest and creates the runtime (t_runtime_create). */
ds_runtime_config t_polled_config(const ds_sim_config *sim, const char *policy);
/* ds_runtime_create, asserting success. */
ds_runtime_t t_runtime_create(const ds_runtime_config *cfg);

/* Same with explicit tiers. Returns the status (out written on success). */
ds_status t_sim_runtime_tiers(const ds_tier_spec *tiers, uint32_t n, ds_runtime_t *out);

/* A simulated kernel: `blocks_per_sm` 1, block_us, params of the given sizes. */
CUfunction t_sim_kernel(ds_runtime_t rt, const char *name, double block_us, uint32_t nparams,
                        const uint32_t *param_sizes);

/* A vCtx on pCtx `pctx` (-1 = full GPU) with a class and priority. */
ds_vctx_t t_vctx(ds_runtime_t rt, const char *name, ds_vctx_class cls, int priority, int32_t pctx);

/* A latency-sensitive vCtx named "ls" with an SLO of slo_us. */
ds_vctx_t t_ls_vctx(ds_runtime_t rt, uint32_t slo_us);

/* BE units slo_aware runs before it counts BE's unit as known
 * (BE_UNIT_LAUNCHES in src/policy/slo_aware_modes.c): tests that expect BE to
 * expand run this many first. */
#define T_SLO_BE_UNITS 256

/* Index of the first pCtx with this anchor and SM count; asserts it exists. */
uint32_t t_pctx(ds_runtime_t rt, ds_tier_anchor anchor, uint32_t sm_count);

/* Every kernel record of the device (caller frees). */
ds_sim_kernel_record *t_trace(ds_runtime_t rt, size_t *count);

/* Record of the kernel launched with a given name (last one), asserts found. */
const ds_sim_kernel_record *t_find(const ds_sim_kernel_record *recs, size_t n, const char *name);

/* Log capture: installs a handler that keeps the last message and counts them. */
void t_log_capture(ds_log_level level);
const char *t_log_last(void);
int t_log_count(ds_log_level level);

/* Runs fn(a) and fn(b) on two threads at once and joins both (a device, or
 * a rank, per thread). */
void t_run_pair(void *(*fn)(void *), void *a, void *b);

/* The simulated device's clock (us, ds_sim_now_us; 0 on failure). */
double t_sim_now(ds_runtime_t rt);

/* ds_vctx_get_stats, asserting success. */
ds_vctx_stats t_vctx_stats(ds_vctx_t v);

/* Number of SMs set in a record's sm_mask. */
uint32_t t_popcount(const uint64_t *mask);

/* Wall-clock bounds hold for the plain build; ASan and TSan builds (CI runs
 * the unit suite under both) are several times slower by design. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define T_SANITIZER_SLOWDOWN 20.0
#else
#define T_SANITIZER_SLOWDOWN 1.0
#endif

static inline ds_dim3 t_dim(uint32_t x) { return (ds_dim3){x, 1, 1}; }

#endif
