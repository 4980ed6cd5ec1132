/*
 * Host allocation failures. The test replaces the library's allocator
 * (ds_replace_allocator) with one that counts its calls and fails the Nth
 * malloc/calloc/realloc, and runs ds_runtime_create, ds_vctx_create,
 * ds_policy_register and ds_mem_alloc for N = 1, 2, ... until the call makes
 * fewer than N allocations and succeeds. Every failed call must return
 * DS_ERR_OUT_OF_MEMORY, write no output, give back every allocation it had
 * made (the test counts outstanding allocations itself; LeakSanitizer checks
 * again in CI) and leave the runtime usable. Model: libuv's
 * test/test-loop-oom.c.
 *
 * Only allocations made through the replaced functions are counted: the
 * Criterion runner's own go to the C library's allocator. Each test restores
 * the C library's allocator at its end, when no runtime is alive.
 */
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <detshare/policy.h>

#include "common.h"

/* Far more allocations than any of the calls makes: a loop that reaches it
 * means a call keeps failing whatever N is. */
#define MAX_N 100000

/* --- the counting allocator ---------------------------------------------- */

#define HDR_MAGIC 0x4f4f4d21u /* "OOM!" */

typedef union hdr {
    max_align_t align;
    struct {
        size_t size;
        uint32_t magic;
    } h;
} hdr;

static atomic_ulong g_calls;   /* malloc + calloc + realloc calls since arm() */
static atomic_ulong g_fail_at; /* the call that fails (1-based); 0 = none */
static atomic_ulong g_failed;  /* calls failed on purpose since arm() */
static atomic_long g_live;     /* allocations made and not yet freed */

/* One more allocation call: 1 if this one is to fail. */
static int fail_this(void)
{
    unsigned long n = atomic_fetch_add(&g_calls, 1) + 1;
    if (n == atomic_load(&g_fail_at)) {
        atomic_fetch_add(&g_failed, 1);
        return 1;
    }
    return 0;
}

static void *wrap(hdr *h, size_t size)
{
    if (!h)
        return NULL;
    h->h.size = size;
    h->h.magic = HDR_MAGIC;
    atomic_fetch_add(&g_live, 1);
    return h + 1;
}

static hdr *header_of(void *p)
{
    hdr *h = (hdr *)p - 1;
    if (h->h.magic != HDR_MAGIC) {
        /* Memory of another allocator reached ours (or a double free):
         * cr_assert may not work on a library thread. */
        fprintf(stderr, "test_oom: %p was not allocated by the test's allocator\n", p);
        abort();
    }
    return h;
}

static void *t_malloc(size_t size)
{
    if (fail_this() || size > SIZE_MAX - sizeof(hdr))
        return NULL;
    return wrap(malloc(sizeof(hdr) + size), size);
}

static void *t_calloc(size_t count, size_t size)
{
    if (fail_this() || (size && count > (SIZE_MAX - sizeof(hdr)) / size))
        return NULL;
    return wrap(calloc(1, sizeof(hdr) + count * size), count * size);
}

static void *t_realloc(void *p, size_t size)
{
    if (fail_this() || size > SIZE_MAX - sizeof(hdr))
        return NULL;
    if (!p)
        return wrap(malloc(sizeof(hdr) + size), size);
    hdr *h = realloc(header_of(p), sizeof(hdr) + size);
    if (!h)
        return NULL;
    h->h.size = size;
    return h + 1;
}

static void t_free(void *p)
{
    hdr *h = header_of(p);
    h->h.magic = 0;
    free(h);
    atomic_fetch_sub(&g_live, 1);
}

static void install(void)
{
    cr_assert_eq(ds_replace_allocator(t_malloc, t_realloc, t_calloc, t_free), DS_SUCCESS, "%s",
                 ds_last_error_message());
}

/* Back to the C library's allocator (no runtime may be alive). */
static void restore(void)
{
    cr_assert_eq(ds_replace_allocator(malloc, realloc, calloc, free), DS_SUCCESS,
                 "a runtime is still alive: %s", ds_last_error_message());
}

/* From now on, the nth allocation call fails (0: none does). */
static void arm(unsigned long n)
{
    atomic_store(&g_fail_at, 0);
    atomic_store(&g_calls, 0);
    atomic_store(&g_failed, 0);
    atomic_store(&g_fail_at, n);
}

/* Stops failing; returns how many allocation calls were made since arm(). */
static unsigned long disarm(void)
{
    atomic_store(&g_fail_at, 0);
    return atomic_load(&g_calls);
}

static long live(void) { return atomic_load(&g_live); }

/* Verdict on one call made with allocation n failing: 1 when the call
 * succeeded without meeting the failure (the loop is done), 0 when it failed
 * as it must (DS_ERR_OUT_OF_MEMORY, output untouched, and, unless
 * live_before < 0, nothing kept). */
static int judge(const char *call, unsigned long n, ds_status st, unsigned long calls, long live_before,
                 int out_untouched)
{
    if (st == DS_SUCCESS) {
        cr_assert_eq(atomic_load(&g_failed), 0,
                     "%s succeeded although its allocation %lu of %lu failed (the failure was ignored)", call,
                     n, calls);
        cr_assert_lt(calls, n, "%s: %lu allocation calls, none failed", call, calls);
        return 1;
    }
    cr_assert_eq(st, DS_ERR_OUT_OF_MEMORY, "%s with allocation %lu failing returned %s: %s", call, n,
                 ds_status_name(st), ds_last_error_message());
    cr_assert_eq(atomic_load(&g_failed), 1, "%s returned DS_ERR_OUT_OF_MEMORY but allocation %lu never came "
                 "(%lu calls)", call, n, calls);
    cr_assert(out_untouched, "%s wrote its output although it failed (allocation %lu)", call, n);
    if (live_before >= 0)
        cr_assert_eq(live(), live_before, "%s with allocation %lu failing kept %ld allocation(s)", call, n,
                     live() - live_before);
    return 0;
}

/* --- the runtime's use ----------------------------------------------------- */

static ds_runtime_config polled_config(ds_sim_config *sim)
{
    *sim = (ds_sim_config)DS_SIM_CONFIG_INIT;
    sim->trace_capacity = 64;
    return t_polled_config(sim, "manual");
}

static ds_vctx_attr vctx_attr(const char *name)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = name;
    a.cls = DS_CLASS_BEST_EFFORT;
    a.initial_pctx = -1;
    return a;
}

/* A vCtx runs a kernel to completion and goes away again. */
static void vctx_life(ds_runtime_t rt, CUfunction f, const char *after)
{
    ds_vctx_attr a = vctx_attr("check");
    ds_vctx_t v = NULL;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS, "after %s: ds_vctx_create: %s", after,
                 ds_last_error_message());
    cr_assert_eq(ds_launch(v, f, t_dim(4), t_dim(32), 0, NULL, NULL), DS_SUCCESS, "after %s: ds_launch: %s", after,
                 ds_last_error_message());
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS, "after %s: ds_vctx_synchronize: %s", after,
                 ds_last_error_message());
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "after %s: ds_vctx_destroy: %s", after, ds_last_error_message());
}

/* The runtime works (a vCtx's life), and gives back every allocation the
 * vCtx's life made. */
static void usable(ds_runtime_t rt, CUfunction f, const char *after)
{
    long before = live();
    vctx_life(rt, f, after);
    cr_assert_eq(live(), before, "after %s: a vCtx's life kept %ld allocation(s)", after, live() - before);
}

/*
 * A destroyed vCtx or runtime is not freed at once: the library keeps the
 * last destroyed objects (a bounded quarantine that turns a use after
 * destroy into DS_ERR_INVALID_HANDLE) and frees the oldest as a new one
 * comes. Until that ring is full every destroy looks like one allocation
 * kept, so the counting starts once vCtx lives leave the count unchanged
 * (this also makes what the runtime keeps after a first launch, the
 * kernel's profile, exist beforehand).
 */
static void steady(ds_runtime_t rt, CUfunction f)
{
    int unchanged = 0;
    for (int i = 0; i < 20000 && unchanged < 3; i++) {
        long before = live();
        vctx_life(rt, f, "setup");
        unchanged = live() == before ? unchanged + 1 : 0;
    }
    cr_assert_eq(unchanged, 3, "20000 vCtx lives and the count of allocations still grows: %ld", live());
}

/* A runtime on the simulated device, made with the test's allocator in
 * place, and a kernel, at the steady state. */
static ds_runtime_t setup(CUfunction *f)
{
    install();
    ds_sim_config sim;
    ds_runtime_config cfg = polled_config(&sim);
    ds_runtime_t rt = t_runtime_create(&cfg);
    *f = t_sim_kernel(rt, "k", 5.0, 0, NULL);
    steady(rt, *f);
    usable(rt, *f, "setup");
    return rt;
}

static void teardown(ds_runtime_t rt)
{
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS, "%s", ds_last_error_message());
    restore();
}

/* --- the calls --------------------------------------------------------------- */

Test(oom, runtime_create)
{
    CUfunction f;
    cr_assert_eq(ds_runtime_destroy(setup(&f)), DS_SUCCESS, "%s", ds_last_error_message());
    for (unsigned long n = 1;; n++) {
        cr_assert_lt(n, MAX_N, "ds_runtime_create never succeeded");
        ds_sim_config sim;
        ds_runtime_config cfg = polled_config(&sim);
        ds_runtime_t rt = (ds_runtime_t)(uintptr_t)0x1;
        long before = live();
        arm(n);
        ds_status st = ds_runtime_create(&cfg, &rt);
        unsigned long calls = disarm();
        if (judge("ds_runtime_create", n, st, calls, before, rt == (ds_runtime_t)(uintptr_t)0x1)) {
            cr_log_info("ds_runtime_create: %lu allocation calls, each failure handled", calls);
            CUfunction f = t_sim_kernel(rt, "k", 5.0, 0, NULL);
            vctx_life(rt, f, "ds_runtime_create"); /* the kernel's profile stays */
            usable(rt, f, "ds_runtime_create");
            cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS, "%s", ds_last_error_message());
            cr_assert_eq(live(), before, "a runtime's life kept %ld allocation(s)", live() - before);
            break;
        }
    }
    restore();
}

Test(oom, vctx_create)
{
    CUfunction f;
    ds_runtime_t rt = setup(&f);
    for (unsigned long n = 1;; n++) {
        cr_assert_lt(n, MAX_N, "ds_vctx_create never succeeded");
        ds_vctx_attr a = vctx_attr("oom");
        ds_vctx_t v = (ds_vctx_t)(uintptr_t)0x1;
        long before = live();
        arm(n);
        ds_status st = ds_vctx_create(rt, &a, &v);
        unsigned long calls = disarm();
        if (judge("ds_vctx_create", n, st, calls, before, v == (ds_vctx_t)(uintptr_t)0x1)) {
            cr_log_info("ds_vctx_create: %lu allocation calls, each failure handled", calls);
            cr_assert_eq(ds_launch(v, f, t_dim(4), t_dim(32), 0, NULL, NULL), DS_SUCCESS, "%s",
                         ds_last_error_message());
            cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS, "%s", ds_last_error_message());
            cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "%s", ds_last_error_message());
            cr_assert_eq(live(), before, "a vCtx's life kept %ld allocation(s)", live() - before);
            break;
        }
        usable(rt, f, "a failed ds_vctx_create");
    }
    teardown(rt);
}

/* A policy of the test's: its state is its own (the C library's malloc, not
 * the runtime's allocator), counted here so that a state left behind by a
 * failed registration shows. */
static atomic_int g_states;

static ds_status oom_init(void *user, ds_runtime_t rt, void **state)
{
    (void)user;
    (void)rt;
    *state = malloc(sizeof(atomic_int));
    if (!*state)
        return DS_ERR_OUT_OF_MEMORY;
    atomic_init((atomic_int *)*state, 0);
    atomic_fetch_add(&g_states, 1);
    return DS_SUCCESS;
}

static void oom_fini(void *state)
{
    free(state);
    atomic_fetch_sub(&g_states, 1);
}

static ds_decision oom_on_launch(void *state, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)view;
    (void)ev;
    atomic_fetch_add((atomic_int *)state, 1);
    ds_decision d = {.kind = DS_DISPATCH_HERE};
    return d;
}

#ifdef DS_MAX_POLICY_PARAMS
/* Parameters: the registration copies them, names included. */
static void oom_on_param(void *state, const ds_policy_view *view, uint32_t index, double value)
{
    (void)state;
    (void)view;
    (void)index;
    (void)value;
}

static const ds_policy_param oom_params[] = {
    {.name = "depth", .help = "a test parameter", .def = 4, .min = 1, .max = 64, .integer = 1},
    {.name = "ratio", .help = "another one", .def = 0.5, .min = 0, .max = 1, .integer = 0},
};
#endif

static ds_policy_ops oom_ops(void)
{
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "oom_test";
    ops.init = oom_init;
    ops.fini = oom_fini;
    ops.on_launch = oom_on_launch;
#ifdef DS_MAX_POLICY_PARAMS
    ops.params = oom_params;
    ops.num_params = 2;
    ops.on_param = oom_on_param;
#endif
    return ops;
}

Test(oom, policy_register)
{
    CUfunction f;
    ds_runtime_t rt = setup(&f);
    for (unsigned long n = 1;; n++) {
        cr_assert_lt(n, MAX_N, "ds_policy_register never succeeded");
        ds_policy_ops ops = oom_ops();
        long before = live();
        arm(n);
        ds_status st = ds_policy_register(rt, &ops, NULL);
        unsigned long calls = disarm();
        if (judge("ds_policy_register", n, st, calls, before, 1)) {
            cr_log_info("ds_policy_register: %lu allocation calls, each failure handled", calls);
            cr_assert_eq(atomic_load(&g_states), 1, "init ran once for the registered policy");
            cr_assert_eq(ds_runtime_set_policy(rt, "oom_test"), DS_SUCCESS, "%s", ds_last_error_message());
            usable(rt, f, "ds_policy_register");
            break;
        }
        cr_assert_eq(atomic_load(&g_states), 0,
                     "ds_policy_register failed at allocation %lu after init succeeded, without calling "
                     "fini: the policy's state is lost",
                     n);
        cr_assert_eq(ds_runtime_set_policy(rt, "oom_test"), DS_ERR_NOT_FOUND,
                     "a registration that failed at allocation %lu left the policy registered", n);
        cr_assert_eq(ds_runtime_set_policy(rt, "manual"), DS_SUCCESS, "%s", ds_last_error_message());
        usable(rt, f, "a failed ds_policy_register");
    }
    teardown(rt);
    cr_assert_eq(atomic_load(&g_states), 0, "fini ran at ds_runtime_destroy");
}

/* One allocation's life on a vCtx of its own: what the device keeps for
 * every allocation to come (its tables) exists afterwards. */
static void mem_warm(ds_runtime_t rt)
{
    ds_vctx_attr a = vctx_attr("warm");
    ds_vctx_t v = NULL;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS, "%s", ds_last_error_message());
    CUdeviceptr w = 0;
    cr_assert_eq(ds_mem_alloc(v, 1000, &w), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_mem_free(v, w), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "%s", ds_last_error_message());
}

/* A vCtx's first ds_mem_alloc also grows its table of allocations, which the
 * vCtx keeps until it is destroyed: each N gets a fresh vCtx, and what the
 * failed call took must be back once that vCtx is destroyed. */
Test(oom, mem_alloc_first)
{
    CUfunction f;
    ds_runtime_t rt = setup(&f);
    mem_warm(rt);
    for (unsigned long n = 1;; n++) {
        cr_assert_lt(n, MAX_N, "ds_mem_alloc never succeeded");
        long before = live();
        ds_vctx_attr a = vctx_attr("tenant");
        ds_vctx_t v = NULL;
        cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS, "%s", ds_last_error_message());
        CUdeviceptr p = 0x1;
        arm(n);
        ds_status st = ds_mem_alloc(v, 1000, &p);
        unsigned long calls = disarm();
        int done = judge("a vCtx's first ds_mem_alloc", n, st, calls, -1, p == 0x1);
        if (done) {
            cr_log_info("a vCtx's first ds_mem_alloc: %lu allocation calls, each failure handled", calls);
            cr_assert_eq(ds_mem_free(v, p), DS_SUCCESS, "%s", ds_last_error_message());
        }
        cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "%s", ds_last_error_message());
        cr_assert_eq(live(), before, "a vCtx whose first ds_mem_alloc %s (allocation %lu) kept %ld allocation(s) "
                     "after its destroy", done ? "succeeded" : "failed", n, live() - before);
        if (done)
            break;
    }
    usable(rt, f, "the ds_mem_alloc failures");
    teardown(rt);
}

/* A vCtx that has allocated before: a failed ds_mem_alloc gives back at once
 * what it took, is not accounted, and the vCtx allocates again. */
Test(oom, mem_alloc)
{
    CUfunction f;
    ds_runtime_t rt = setup(&f);
    ds_vctx_attr a = vctx_attr("tenant");
    ds_vctx_t v = NULL;
    mem_warm(rt);
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS, "%s", ds_last_error_message());
    CUdeviceptr w = 0;
    cr_assert_eq(ds_mem_alloc(v, 1000, &w), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_mem_free(v, w), DS_SUCCESS, "%s", ds_last_error_message());
    for (unsigned long n = 1;; n++) {
        cr_assert_lt(n, MAX_N, "ds_mem_alloc never succeeded");
        CUdeviceptr p = 0x1;
        long before = live();
        arm(n);
        ds_status st = ds_mem_alloc(v, 1000, &p);
        unsigned long calls = disarm();
        if (judge("ds_mem_alloc", n, st, calls, before, p == 0x1)) {
            cr_log_info("ds_mem_alloc: %lu allocation calls, each failure handled", calls);
            cr_assert_eq(ds_mem_free(v, p), DS_SUCCESS, "%s", ds_last_error_message());
            cr_assert_eq(live(), before, "an allocation's life kept %ld host allocation(s)", live() - before);
            break;
        }
        ds_mem_stats s = DS_MEM_STATS_INIT;
        cr_assert_eq(ds_vctx_get_mem_stats(v, &s), DS_SUCCESS, "%s", ds_last_error_message());
        cr_assert_eq(s.allocations, 0, "a failed ds_mem_alloc (allocation %lu) is accounted", n);
        cr_assert_eq(s.bytes_allocated, 0, "a failed ds_mem_alloc (allocation %lu) is charged", n);
        /* the vCtx still allocates */
        CUdeviceptr q = 0;
        cr_assert_eq(ds_mem_alloc(v, 1000, &q), DS_SUCCESS, "after a failed ds_mem_alloc (allocation %lu): %s", n,
                     ds_last_error_message());
        cr_assert_eq(ds_mem_free(v, q), DS_SUCCESS, "%s", ds_last_error_message());
        cr_assert_eq(live(), before, "a ds_mem_alloc + ds_mem_free after the failure kept %ld allocation(s)",
                     live() - before);
    }
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "%s", ds_last_error_message());
    usable(rt, f, "the ds_mem_alloc failures");
    teardown(rt);
}

/* ds_replace_allocator may run again once the last runtime is destroyed, and
 * the next allocator must then not be handed memory of this one: by then
 * the library holds nothing of it. */
Test(oom, last_destroy_gives_everything_back)
{
    install();
    ds_sim_config sim;
    ds_runtime_config cfg = polled_config(&sim);
    ds_runtime_t rt = t_runtime_create(&cfg);
    CUfunction f = t_sim_kernel(rt, "k", 5.0, 0, NULL);
    vctx_life(rt, f, "a runtime's creation");
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS, "%s", ds_last_error_message());
    /* destroyed handles stay quarantined (stale-handle checks) until the
     * allocator is replaced, which frees them with the allocator they came
     * from */
    restore();
    cr_assert_eq(live(), 0,
                 "after the last ds_runtime_destroy and ds_replace_allocator the library still holds %ld "
                 "allocation(s) of the replaced allocator",
                 live());
}

/* A capture function for the graph test: one kernel on the capture stream;
 * remembers whether its own launch ran out of memory. */
typedef struct oom_step {
    ds_runtime_t rt;
    CUfunction f;
    int saw_oom;
} oom_step;

static int oom_capture(CUstream s, void *user)
{
    oom_step *st = user;
    ds_status r = ds_sim_launch_on_stream(st->rt, s, st->f, t_dim(4), t_dim(32), NULL);
    if (r == DS_ERR_OUT_OF_MEMORY)
        st->saw_oom = 1;
    return r != DS_SUCCESS;
}

/* ds_graph_create, eager over the pool: every allocation it makes (its own,
 * the simulated driver's capture and instantiations) fails in turn. The
 * status is DS_ERR_OUT_OF_MEMORY, or DS_ERR_CAPTURE when the allocation
 * that failed was the capture function's own launch (the caller's work
 * failed, and the caller knows why); either way no graph is left. */
Test(oom, graph_create)
{
    CUfunction f;
    ds_runtime_t rt = setup(&f);
    ds_vctx_attr a = vctx_attr("owner");
    ds_vctx_t v;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS);
    oom_step st = {rt, f, 0};
    ds_graph_attr ga = DS_GRAPH_ATTR_INIT;
    ga.flags = DS_GRAPH_EAGER;
    for (int warm = 0; warm < 3; warm++) { /* the quarantine at its steady state */
        ds_graph_t g;
        cr_assert_eq(ds_graph_create(v, oom_capture, &st, &ga, &g), DS_SUCCESS, "%s", ds_last_error_message());
        cr_assert_eq(ds_graph_destroy(g), DS_SUCCESS);
    }
    for (unsigned long n = 1;; n++) {
        cr_assert_lt(n, MAX_N, "ds_graph_create never succeeded");
        ds_graph_t g = (ds_graph_t)(uintptr_t)0x1;
        long before = live();
        st.saw_oom = 0;
        arm(n);
        ds_status s = ds_graph_create(v, oom_capture, &st, &ga, &g);
        unsigned long calls = disarm();
        if (s == DS_ERR_CAPTURE && st.saw_oom) {
            cr_assert_eq(g, (ds_graph_t)(uintptr_t)0x1, "output written on failure");
            cr_assert_eq(live(), before, "a failed capture (allocation %lu) kept %ld allocation(s)", n,
                         live() - before);
            continue;
        }
        if (judge("ds_graph_create", n, s, calls, before, g == (ds_graph_t)(uintptr_t)0x1)) {
            cr_log_info("ds_graph_create: %lu allocation calls, each failure handled", calls);
            cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS, "%s", ds_last_error_message());
            cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS, "%s", ds_last_error_message());
            cr_assert_eq(ds_graph_destroy(g), DS_SUCCESS, "%s", ds_last_error_message());
            break;
        }
    }
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "%s", ds_last_error_message());
    usable(rt, f, "the ds_graph_create failures");
    teardown(rt);
}
