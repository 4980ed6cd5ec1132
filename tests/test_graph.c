/* Graphs that follow their vCtx (ds_graph_*), on the simulated device: the
 * simulated driver runs a graph's kernels in the context they were captured
 * in, as a GPU does (docs/device-facts.md), so a graph that did not follow
 * its vCtx would show up here on the wrong SMs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <detshare/policy.h>

#include "common.h"

/* ---- helpers ---------------------------------------------------------------- */

typedef struct step {
    ds_runtime_t rt;
    CUfunction k[3];
    int nk;          /* kernels per capture */
    uint32_t blocks; /* grid of each */
    int id;          /* the first parameter of every kernel (seen in the trace) */
    int calls;       /* capture calls so far */
    int fail_at;     /* call number (1-based) that returns nonzero; 0 = none */
    int vary_at;     /* call number that captures a different grid; 0 = none */
    int empty_at;    /* call number that enqueues nothing on the stream */
    CUstream other;  /* a stream that is not the capture stream, for empty_at */
} step;

static int capture_step(CUstream s, void *user)
{
    step *st = user;
    st->calls++;
    if (st->fail_at == st->calls)
        return 7;
    CUstream on = st->empty_at == st->calls ? st->other : s;
    for (int i = 0; i < st->nk; i++) {
        int id = st->id * 10 + i;
        void *params[] = {&id};
        uint32_t blocks = st->vary_at == st->calls ? st->blocks + 1 : st->blocks;
        ds_status r = ds_sim_launch_on_stream(st->rt, on, st->k[i], t_dim(blocks), t_dim(128), params);
        if (r != DS_SUCCESS)
            return 100 + (int)r;
    }
    return 0;
}

static CUfunction id_kernel(ds_runtime_t rt, const char *name, double block_us)
{
    const uint32_t sizes[1] = {sizeof(int)};
    return t_sim_kernel(rt, name, block_us, 1, sizes);
}

static int rec_id(const ds_sim_kernel_record *r)
{
    int id;
    memcpy(&id, r->params, sizeof id);
    return id;
}

static ds_runtime_info rt_info(ds_runtime_t rt)
{
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(rt, &in), DS_SUCCESS);
    return in;
}

static ds_graph_stats g_stats(ds_graph_t g)
{
    ds_graph_stats s = DS_GRAPH_STATS_INIT;
    cr_assert_eq(ds_graph_get_stats(g, &s), DS_SUCCESS, "%s", ds_last_error_message());
    return s;
}

static size_t trace_count(ds_runtime_t rt)
{
    size_t n;
    free(t_trace(rt, &n));
    return n;
}

static void assert_on_pctx(ds_runtime_t rt, const ds_sim_kernel_record *r, uint32_t p)
{
    uint64_t want[DS_MAX_SMS / 64];
    uint32_t count = 0;
    cr_assert_eq(ds_pctx_probe_sms(rt, p, want, &count), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_gt(count, 0);
    for (unsigned w = 0; w < DS_MAX_SMS / 64; w++)
        cr_assert_eq(r->sm_mask[w] & ~want[w], 0, "'%s' (id %d) ran on SMs outside pCtx %u (word %u: %#llx vs %#llx)",
                     r->name, rec_id(r), p, w, (unsigned long long)r->sm_mask[w], (unsigned long long)want[w]);
    cr_assert_eq(t_popcount(r->sm_mask), count, "'%s' (id %d) used %u SMs of pCtx %u's %u", r->name, rec_id(r),
                 t_popcount(r->sm_mask), p, count);
}

/* ---- following the vCtx --------------------------------------------------------- */

static void follows_remaps(uint32_t flags)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = rt_info(rt);
    step st = {.rt = rt, .k = {id_kernel(rt, "g0", 20.0), id_kernel(rt, "g1", 5.0)}, .nk = 2, .blocks = 8 * 132};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.name = "step";
    a.flags = flags;
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(st.calls, flags & DS_GRAPH_EAGER ? (int)in.num_pctx : 0, "eager captures every pCtx now, lazy none");
    cr_assert_eq(trace_count(rt), 0, "capturing runs nothing");
    for (uint32_t round = 0; round < 2; round++)
        for (uint32_t p = 0; p < in.num_pctx; p++) {
            cr_assert_eq(ds_vctx_remap(v, p), DS_SUCCESS);
            cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS, "%s", ds_last_error_message());
        }
    cr_assert_eq(st.calls, (int)in.num_pctx, "one capture per pCtx, eager or lazy (%d)", st.calls);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 2u * 2u * in.num_pctx, "every node of every launch ran once (%zu)", n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(r[i].name, i % 2 ? "g1" : "g0");
        cr_assert_eq(r[i].grid.x, st.blocks, "the launch configuration is the captured one");
        assert_on_pctx(rt, &r[i], (uint32_t)(i / 2) % in.num_pctx);
        if (i)
            cr_assert_geq(r[i].start_us, r[i - 1].end_us, "node %zu started before node %zu ended", i, i - 1);
    }
    free(r);
    ds_graph_stats gs = g_stats(g);
    cr_assert_eq(gs.launches, 2u * in.num_pctx);
    cr_assert_eq(gs.num_pctx, in.num_pctx);
    for (uint32_t p = 0; p < in.num_pctx; p++) {
        cr_assert(gs.pctx[p].instantiated);
        cr_assert_eq(gs.pctx[p].nodes, 2);
        cr_assert_eq(gs.pctx[p].kernel_nodes, 2);
        cr_assert_eq(gs.pctx[p].launches, 2);
        cr_assert_gt(gs.pctx[p].device_bytes, 0, "the simulated device charges an instantiation's memory");
        cr_assert_geq(gs.pctx[p].instantiate_us, 0);
    }
    cr_assert_eq(t_vctx_stats(v).graph_launches, 2u * in.num_pctx);
    cr_assert_eq(t_vctx_stats(v).launches, 0, "graph launches are not kernel launches");
    cr_assert_eq(ds_graph_destroy(g), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(graph, eager_graph_runs_on_the_bound_pctx_after_every_remap) { follows_remaps(DS_GRAPH_EAGER); }
Test(graph, lazy_graph_runs_on_the_bound_pctx_after_every_remap) { follows_remaps(0); }

Test(graph, program_order_with_kernels_across_remaps)
{
    /* Kernels and graphs interleaved, remapped at random between units: one
     * vCtx is one ordered stream of work whatever its units are. */
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = rt_info(rt);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 50.0)}, .nk = 1, .blocks = 300, .id = 1};
    CUfunction k = id_kernel(rt, "k", 3.0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS, "%s", ds_last_error_message());
    uint64_t x = 0x1234;
    int want[200];
    for (int i = 0; i < 200; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        if ((x >> 33) % 3 == 0)
            cr_assert_eq(ds_vctx_remap(v, (uint32_t)((x >> 40) % in.num_pctx)), DS_SUCCESS);
        if ((x >> 20) % 2) {
            cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS, "%s", ds_last_error_message());
            want[i] = 10;
        } else {
            int id = 1000 + i;
            void *params[] = {&id};
            cr_assert_eq(ds_launch(v, k, t_dim(1 + (uint32_t)((x >> 45) % 400)), t_dim(64), 0, params, NULL),
                         DS_SUCCESS);
            want[i] = id;
        }
    }
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 200);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(rec_id(&r[i]), want[i], "unit %zu out of order", i);
        if (i)
            cr_assert_geq(r[i].start_us, r[i - 1].end_us, "unit %zu started before unit %zu ended", i, i - 1);
    }
    free(r);
    ds_runtime_destroy(rt);
}

/* ---- the policy sees a graph as one unit ---------------------------------------- */

typedef struct seen {
    _Atomic int graph_events, other_events, completions;
    ds_graph_t want;
    _Atomic int bad;
    uint32_t to;
} seen;

static ds_decision see_launch(void *state, const ds_policy_view *view, const ds_launch_event *ev)
{
    (void)view;
    seen *s = state;
    if (ev->graph) {
        s->graph_events++;
        if (ev->graph != s->want || ev->function || ev->is_section || ev->grid.x || ev->block.x)
            s->bad++;
    } else {
        s->other_events++;
    }
    ds_decision d = {DS_DISPATCH_REMAP, s->to, 0, NULL, 0};
    return d;
}

static void see_completion(void *state, const ds_policy_view *view, const ds_completion *c)
{
    (void)view;
    seen *s = state;
    if (c->graph) {
        s->completions++;
        if (c->graph != s->want || c->function || c->duration_us < 0)
            s->bad++;
    }
}

Test(graph, policy_decides_a_graph_as_one_unit_and_switching_policies_keeps_order)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = rt_info(rt);
    seen s = {.to = in.num_pctx - 1};
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "see";
    ops.on_launch = see_launch;
    ops.on_completion = see_completion;
    cr_assert_eq(ds_policy_register(rt, &ops, &s), DS_SUCCESS, "%s", ds_last_error_message());
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 20.0)}, .nk = 1, .blocks = 132, .id = 2};
    CUfunction k = id_kernel(rt, "k", 2.0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, 0);
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS, "%s", ds_last_error_message());
    s.want = g;
    int id = 5;
    void *params[] = {&id};
    cr_assert_eq(ds_runtime_set_policy(rt, "see"), DS_SUCCESS);
    for (int i = 0; i < 40; i++) {
        if (i == 20) {
            cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
            cr_assert_eq(ds_runtime_set_policy(rt, "manual"), DS_SUCCESS);
            cr_assert_eq(ds_vctx_remap(v, 0), DS_SUCCESS);
        }
        cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS, "%s", ds_last_error_message());
        cr_assert_eq(ds_launch(v, k, t_dim(4), t_dim(32), 0, params, NULL), DS_SUCCESS);
    }
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(s.graph_events, 20, "on_launch saw each graph launch once while active (%d)", s.graph_events);
    cr_assert_eq(s.other_events, 20);
    cr_assert_eq(s.bad, 0, "every graph event named the graph, no function, no section, no dims");
    cr_assert_gt(s.completions, 0, "timed graph launches are reported with the graph");
    size_t n;
    ds_sim_kernel_record *r = t_trace(rt, &n);
    cr_assert_eq(n, 80);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(r[i].name, i % 2 ? "k" : "gk", "unit %zu out of order", i);
        if (i)
            cr_assert_geq(r[i].start_us, r[i - 1].end_us);
        if (!(i % 2))
            assert_on_pctx(rt, &r[i], i < 40 ? in.num_pctx - 1 : 0);
    }
    free(r);
    ds_runtime_destroy(rt);
}

/* ---- gates and windows ------------------------------------------------------------ */

typedef struct opener {
    ds_vctx_t v;
    ds_runtime_t rt;
    _Atomic int opened;
} opener;

static void *open_later(void *arg)
{
    opener *o = arg;
    /* wall-clock time: in virtual time a simulated sleep returns at once */
    struct timespec ts = {0, (long)(30e6 * T_SANITIZER_SLOWDOWN)}; /* 30 ms, 600 ms sanitized */
    nanosleep(&ts, NULL);
    atomic_store(&o->opened, 1);
    ds_vctx_gate_open(o->v);
    return NULL;
}

Test(graph, closed_gate_holds_a_graph_launch, .timeout = 30)
{
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    ds_runtime_config cfg = t_polled_config(&sim, "manual");
    cfg.gates = DS_GATES_HOST;
    ds_runtime_t rt = t_runtime_create(&cfg);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 10.0)}, .nk = 1, .blocks = 64, .id = 3};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_set_gate_interval(v, 0), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_gt(t_vctx_stats(v).gates, 0, "a gate was placed before the graph");
    cr_assert_eq(ds_vctx_gate_close(v), DS_SUCCESS);
    opener o = {v, rt, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, open_later, &o), 0);
    cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(atomic_load(&o.opened), 1, "ds_graph_launch returned before the gate opened");
    pthread_join(th, NULL);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(t_vctx_stats(v).gate_holds, 1);
    cr_assert_eq(trace_count(rt), 2);
    ds_runtime_destroy(rt);
}

Test(graph, window_bounds_graphs_in_flight)
{
    /* Each graph is predicted (after its first timed launches) at its
     * measured length; a window of 2.5 graphs keeps at most 3 in flight. */
    ds_runtime_t rt = t_sim_runtime(0);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 400.0)}, .nk = 1, .blocks = 132, .id = 4};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS, "%s", ds_last_error_message());
    ds_vctx_set_track_all(v, 1);
    for (int i = 0; i < 8; i++) { /* learn the graph's length */
        cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS);
        cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    }
    cr_assert_eq(ds_vctx_set_window(v, 1000), DS_SUCCESS);
    double max_inflight = 0;
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS);
        double f = t_vctx_stats(v).inflight_us;
        max_inflight = f > max_inflight ? f : max_inflight;
    }
    cr_assert_leq(max_inflight, 1000 + 400 + 1, "predicted graph work in flight %.0f us", max_inflight);
    cr_assert_gt(max_inflight, 0, "graphs were predicted (%.0f)", max_inflight);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    ds_runtime_destroy(rt);
}

/* ---- bad input ---------------------------------------------------------------------- */

Test(graph, bad_arguments)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = rt_info(rt);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 1.0)}, .nk = 1, .blocks = 4};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_t g = (ds_graph_t)0x1;
    cr_assert_eq(ds_graph_create(NULL, capture_step, &st, NULL, &g), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_graph_create(v, NULL, &st, NULL, &g), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, NULL), DS_ERR_INVALID_ARGUMENT);
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.size = 8;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_ERR_ABI_MISMATCH);
    a = (ds_graph_attr)DS_GRAPH_ATTR_INIT;
    uint32_t bad[] = {0, in.num_pctx};
    a.pctxs = bad;
    a.num_pctxs = 2;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_ERR_INVALID_ARGUMENT);
    uint32_t dup[] = {0, 0};
    a.pctxs = dup;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_ERR_INVALID_ARGUMENT);
    a.num_pctxs = 0;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_ERR_INVALID_ARGUMENT);
    a = (ds_graph_attr)DS_GRAPH_ATTR_INIT;
    a.flags = 0x80;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(g, (ds_graph_t)0x1, "out untouched on failure");
    cr_assert_eq(st.calls, 0, "nothing captured for bad arguments");
    cr_assert_eq(ds_graph_launch(v, NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_graph_launch(NULL, NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_graph_destroy(NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_graph_get_stats(NULL, NULL), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_graph_from_cuda_graph(v, NULL, NULL, &g), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS);
    cr_assert_eq(ds_graph_get_stats(g, NULL), DS_ERR_INVALID_ARGUMENT);
    ds_graph_stats gs = DS_GRAPH_STATS_INIT;
    gs.magic = 0;
    cr_assert_eq(ds_graph_get_stats(g, &gs), DS_ERR_ABI_MISMATCH);
    cr_assert_eq(ds_graph_destroy(g), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g), DS_ERR_INVALID_HANDLE, "a destroyed graph");
    cr_assert_eq(ds_graph_destroy(g), DS_ERR_INVALID_HANDLE);
    cr_assert(strstr(ds_last_error_message(), "destroyed"), "%s", ds_last_error_message());
    ds_runtime_destroy(rt);
}

Test(graph, graph_of_another_vctx_or_runtime_is_refused)
{
    ds_runtime_t rt = t_sim_runtime(0), rt2 = t_sim_runtime(0);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 1.0)}, .nk = 1, .blocks = 4};
    ds_vctx_t a = t_vctx(rt, "a", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t b = t_vctx(rt, "b", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t c = t_vctx(rt2, "c", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(a, capture_step, &st, NULL, &g), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(b, g), DS_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(ds_last_error_message(), "belongs to vCtx 'a'"), "%s", ds_last_error_message());
    cr_assert_eq(ds_graph_launch(c, g), DS_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(ds_last_error_message(), "another runtime"), "%s", ds_last_error_message());
    cr_assert_eq(st.calls, 0, "refused before any capture");
    cr_assert_eq(trace_count(rt), 0);
    cr_assert_eq(ds_graph_launch(a, g), DS_SUCCESS, "the graph still works for its own vCtx");
    cr_assert_eq(ds_vctx_synchronize(a), DS_SUCCESS);
    cr_assert_eq(trace_count(rt), 1);
    ds_runtime_destroy(rt2);
    ds_runtime_destroy(rt);
}

Test(graph, failing_capture_function)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = rt_info(rt);
    t_log_capture(DS_LOG_ERROR);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 1.0)}, .nk = 1, .blocks = 4, .fail_at = 2};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, 0);
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.flags = DS_GRAPH_EAGER;
    ds_graph_t g = NULL;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_ERR_CAPTURE);
    cr_assert_null(g);
    cr_assert(strstr(ds_last_error_message(), "returned 7"), "%s", ds_last_error_message());
    cr_assert_eq(st.calls, 2, "stopped at the failing capture");
    cr_assert_eq(trace_count(rt), 0, "nothing ran");
    /* lazy: the launch fails, nothing is launched, the next one retries */
    st.calls = 0;
    st.fail_at = 1;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g), DS_ERR_CAPTURE);
    cr_assert_eq(trace_count(rt), 0);
    cr_assert_eq(g_stats(g).launches, 0);
    cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(trace_count(rt), 1);
    cr_assert_eq(g_stats(g).launches, 1);
    cr_assert(g_stats(g).pctx[0].instantiated);
    cr_assert_eq(ds_graph_destroy(g), DS_SUCCESS);
    (void)in;
    ds_runtime_destroy(rt);
}

Test(graph, different_work_on_different_pctxs_is_refused)
{
    ds_runtime_t rt = t_sim_runtime(0);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 1.0)}, .nk = 1, .blocks = 4, .vary_at = 2};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.flags = DS_GRAPH_EAGER;
    ds_graph_t g = NULL;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_ERR_CAPTURE);
    cr_assert(strstr(ds_last_error_message(), "grid or block"), "%s", ds_last_error_message());
    /* a different number of kernels */
    st.calls = 0;
    st.vary_at = 0;
    st.k[1] = id_kernel(rt, "gk2", 1.0);
    st.nk = 1;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS);
    cr_assert_eq(ds_vctx_remap(v, 0), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS);
    st.nk = 2;
    cr_assert_eq(ds_vctx_remap(v, 1), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g), DS_ERR_CAPTURE);
    cr_assert(strstr(ds_last_error_message(), "captured 2 nodes, the first instantiation 1"), "%s",
              ds_last_error_message());
    /* another kernel in the same place */
    st.nk = 1;
    st.k[0] = st.k[1];
    cr_assert_eq(ds_graph_launch(v, g), DS_ERR_CAPTURE);
    cr_assert(strstr(ds_last_error_message(), "kernel"), "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(trace_count(rt), 1, "only the good launch ran");
    ds_runtime_destroy(rt);
}

Test(graph, work_enqueued_elsewhere_is_refused)
{
    /* A capture function that launches on a stream other than the one it was
     * handed captures nothing (its work runs at once, elsewhere). */
    ds_runtime_t rt = t_sim_runtime(0);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 1.0)}, .nk = 1, .blocks = 4, .empty_at = 1, .other = NULL};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.flags = DS_GRAPH_EAGER;
    ds_graph_t g = NULL;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_ERR_CAPTURE);
    cr_assert(strstr(ds_last_error_message(), "holds no work"), "%s", ds_last_error_message());
    cr_assert_null(g);
    ds_runtime_destroy(rt);
}

Test(graph, pctx_outside_the_set_is_refused)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = rt_info(rt);
    cr_assert_geq(in.num_pctx, 2);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 1.0)}, .nk = 1, .blocks = 4};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, 0);
    uint32_t only[] = {0};
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.pctxs = only;
    a.num_pctxs = 1;
    a.flags = DS_GRAPH_EAGER;
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g), DS_SUCCESS);
    cr_assert_eq(st.calls, 1);
    cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS);
    cr_assert_eq(ds_vctx_remap(v, 1), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g), DS_ERR_NOT_FOUND);
    cr_assert(strstr(ds_last_error_message(), "made for pCtxs 0"), "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(trace_count(rt), 1);
    ds_graph_stats gs = g_stats(g);
    cr_assert(!gs.pctx[1].instantiated);
    cr_assert_eq(gs.launches, 1);
    ds_runtime_destroy(rt);
}

Test(graph, destroy_while_in_flight_is_busy)
{
    ds_runtime_t rt = t_sim_runtime(0);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 5000.0)}, .nk = 1, .blocks = 132};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS);
    cr_assert_eq(ds_graph_destroy(g), DS_SUCCESS, "never launched: nothing in flight");
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS);
    cr_assert_eq(ds_graph_destroy(g), DS_ERR_BUSY);
    cr_assert(strstr(ds_last_error_message(), "ds_vctx_synchronize"), "%s", ds_last_error_message());
    cr_assert_eq(ds_graph_get_stats(g, &(ds_graph_stats)DS_GRAPH_STATS_INIT), DS_SUCCESS, "the graph is kept");
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(ds_graph_destroy(g), DS_SUCCESS);
    ds_runtime_destroy(rt);
}

Test(graph, vctx_destroy_takes_its_graphs)
{
    ds_runtime_t rt = t_sim_runtime(0);
    step st = {.rt = rt, .k = {id_kernel(rt, "gk", 100.0)}, .nk = 1, .blocks = 132};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_t g1, g2;
    ds_graph_attr a = DS_GRAPH_ATTR_INIT;
    a.flags = DS_GRAPH_EAGER;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, &a, &g1), DS_SUCCESS);
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g2), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g1), DS_SUCCESS);
    cr_assert_eq(ds_graph_launch(v, g2), DS_SUCCESS);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(trace_count(rt), 2, "the launched graphs finished before their vCtx went");
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

/* ---- the policy view counts graph launches ---------------------------------------- */

typedef struct view_seen {
    int graph_events;
    uint64_t graph_launches;   /* full snapshot at the last graph launch's decision */
    ds_status v1_status, short_status;
    uint64_t v1_sentinel;      /* a first-release snapshot leaves it alone */
} view_seen;

static ds_decision record_view(void *st, const ds_policy_view *view, const ds_launch_event *ev)
{
    view_seen *s = st;
    if (ev->graph) {
        s->graph_events++;
        ds_vctx_state full = DS_VCTX_STATE_INIT;
        cr_assert_eq(ds_view_vctx_state(view, ev->vctx, &full), DS_SUCCESS, "%s", ds_last_error_message());
        s->graph_launches = full.graph_launches;
        ds_vctx_state v1 = DS_VCTX_STATE_INIT;
        v1.size = DS_VCTX_STATE_SIZE_V1;
        v1.graph_launches = 0xfeedu;
        s->v1_status = ds_view_vctx_state(view, ev->vctx, &v1);
        s->v1_sentinel = v1.graph_launches;
        ds_vctx_state shorter = DS_VCTX_STATE_INIT;
        shorter.size = DS_VCTX_STATE_SIZE_V1 - 8;
        s->short_status = ds_view_vctx_state(view, ev->vctx, &shorter);
    }
    return (ds_decision){.kind = DS_DISPATCH_HERE};
}

Test(graph, policy_view_counts_graph_launches_and_fills_first_release_snapshots)
{
    ds_runtime_t rt = t_sim_runtime(0);
    view_seen seen = {0};
    ds_policy_ops ops = DS_POLICY_OPS_INIT;
    ops.name = "viewer";
    ops.on_launch = record_view;
    cr_assert_eq(ds_policy_register(rt, &ops, &seen), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_set_policy(rt, "viewer"), DS_SUCCESS);
    step st = {.rt = rt, .k = {id_kernel(rt, "g0", 5.0)}, .nk = 1, .blocks = 132};
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_graph_t g;
    cr_assert_eq(ds_graph_create(v, capture_step, &st, NULL, &g), DS_SUCCESS, "%s", ds_last_error_message());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(ds_graph_launch(v, g), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    cr_assert_eq(seen.graph_events, 3, "every graph launch is a decision (%d)", seen.graph_events);
    cr_assert_eq(seen.graph_launches, 2, "the third decision sees the two launches before it (%llu)",
                 (unsigned long long)seen.graph_launches);
    cr_assert_eq(seen.v1_status, DS_SUCCESS, "a first-release snapshot is still filled");
    cr_assert_eq(seen.v1_sentinel, 0xfeedu, "without the field it does not have");
    cr_assert_eq(seen.short_status, DS_ERR_ABI_MISMATCH);
    ds_vctx_stats vs = DS_VCTX_STATS_INIT;
    cr_assert_eq(ds_vctx_get_stats(v, &vs), DS_SUCCESS);
    cr_assert_eq(vs.graph_launches, 3);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}
