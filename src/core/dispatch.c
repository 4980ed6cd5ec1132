/*
 * The hot path: ds_launch, and sections (ds_vctx_acquire_stream /
 * ds_vctx_release_stream). Both go through one unit-preparation routine
 * (prepare) and one accounting routine (account), so the policy's decision,
 * gate holds, remaps, windows, sampling, gates and marks apply to every unit
 * alike.
 *
 * Lock-free end to end: it reads the vCtx (owned by the calling thread), the
 * active policy pointer and the profile table; the policy's on_launch and
 * whatever it triggers (remaps, windows, gate closes) are atomic stores and
 * compare-and-swaps. It allocates nothing and makes no system call besides
 * the driver's. It blocks only when the policy holds it, its gate is closed
 * or its window is full, all of them the policy's intent; while it waits it
 * only learns that work finished (marks.c), it runs no hook.
 */
#include "core/clock.h"
#include "core/fault.h"
#include "core/gate.h"
#include "core/graph.h"
#include "core/handles.h"
#include "core/marks.h"
#include "core/profile.h"
#include "core/registry.h"
#include "core/relaxed.h"
#include "core/remap.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "core/vgroup.h"
#include "memory/tenant_memory.h"
#include "seam/driver.h"
#include "seam/log.h"

/* Launches with no profile are timed at most once every this many launches. */
#define DS__EXPLORE_EVERY 8
/* An untimed mark at least every this many launches (bounds untracked work). */
#define DS__MARK_EVERY 64
/* Predicted work between marks when the vCtx has no window. */
#define DS__MARK_QUANTUM_US 2000.0

/* A section's dimensions, for the policy and the profile ({0, 0, 0}). */
static const ds_dim3 k_section_dim = {0, 0, 0};

/* What a unit is. */
enum { UNIT_KERNEL, UNIT_SECTION, UNIT_GRAPH };

/* One unit on its way to the device. */
typedef struct unit {
    int kind;
    CUfunction f;   /* the kernel; NULL for a section or a graph */
    CUfunction key; /* profile key: f, the vCtx for its sections, the tagged graph */
    struct ds_graph *graph;
    ds_dim3 grid, block;
    uint32_t smem;
    const ds_launch_hints *hints;
    int must_launch; /* a segment after a step's first: launched whatever
                        its preparation says */
    double pred;    /* predicted duration (us), 0 when unknown */
    uint32_t known; /* samples behind pred */
    int timed;
    ds__mark *slot; /* timed: the mark whose start was recorded */
    uint32_t gi;    /* gate interval in force for this unit */
} unit;

static inline void add_us(_Atomic double *c, double by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

/* Longest recent unit, predicted: a decaying max, so one long kernel is
 * remembered for about a hundred launches. */
static inline void note_unit(struct ds_vctx *v, double pred)
{
    double u = atomic_load_explicit(&v->marks.unit_us, memory_order_relaxed) * 0.98;
    atomic_store_explicit(&v->marks.unit_us, pred > u ? pred : u, memory_order_relaxed);
}

static inline void predict(const struct ds_vctx *v, unit *u)
{
    const struct ds_runtime *rt = v->rt;
    u->known = ds__profile_get(rt->profiles, u->key, u->grid, u->block,
                               rt->pctx[DS__BIND_PCTX(DS__LD(v->bound))].sm_count, &u->pred, NULL);
    if (!u->known)
        u->pred = u->hints ? u->hints->expected_us : 0;
}

/* ------------------------------------------------------------------------ */
/* the policy's decision                                                     */

static void hold_wait(struct ds_vctx *v, const ds_decision *d)
{
    struct ds_vctx *w = d->wait_for;
    if (w && w->magic == DS__VCTX_MAGIC && ds__marks_wait_latest(w, v))
        return;
    ds__sleep_us(v->rt, d->hold_us ? d->hold_us : 20);
}

/* Asks the active policy where ev goes; carries out REMAP and HOLD. */
static ds_status decide(struct ds_vctx *v, ds__policy *pol, ds_launch_event *ev)
{
    struct ds_runtime *rt = v->rt;
    double held_since = -1;
    for (;;) {
        ds_decision d = pol->ops.on_launch(pol->state, (const ds_policy_view *)rt, ev);
        if (DS__LIKELY(d.kind == DS_DISPATCH_HERE))
            return DS_SUCCESS;
        if (d.kind == DS_DISPATCH_REMAP) {
            if (d.pctx < rt->num_pctx)
                atomic_store_explicit(&v->pending, DS__BIND(d.pctx, d.urgent), memory_order_release);
            return DS_SUCCESS;
        }
        if (held_since < 0) {
            held_since = ds__wall_ms();
            ds__bump(&v->holds, 1); /* one held unit, however long it waits */
        } else if (ds__wall_ms() - held_since > rt->teardown_timeout_ms) {
            return ds__fail(DS_ERR_TIMEOUT, "vCtx '%s' held by policy '%s' for over %u ms", v->name, pol->name,
                            rt->teardown_timeout_ms);
        }
        hold_wait(v, &d);
        if (DS__UNLIKELY(ds__faulted(rt)))
            return ds__fault_status(rt, ev->is_section ? "ds_vctx_acquire_stream (held)" : "ds_launch (held)");
        ds__policy *now = atomic_load_explicit(&rt->reg.active, memory_order_acquire);
        if (!now)
            return DS_SUCCESS;
        pol = now;
    }
}

/* ------------------------------------------------------------------------ */
/* one unit                                                                  */

/* What the policy's on_launch sees of a unit. */
static inline ds_launch_event launch_event(struct ds_vctx *v, const unit *u)
{
    return (ds_launch_event){v,       u->f, u->grid, u->block, u->smem, u->hints ? u->hints->phase : DS_PHASE_NONE,
                             u->pred, u->kind == UNIT_SECTION, v->cls, u->graph};
}

/* A unit of a vCtx group's rank (vgroup.h): rank 0 decides as any vCtx
 * would, once the slowest rank is within the ring, and publishes where the
 * unit runs; a rank > 0 shows the unit to its own policy (which places the
 * vCtxs around it) and takes rank 0's decision for the same unit index. A
 * unit that is launched whatever happens (must_launch) keeps the ranks'
 * indices aligned even when its preparation failed. */
static __attribute__((noinline)) ds_status grouped_bind(struct ds_vctx *v, unit *u, ds__policy *pol, const char *fn)
{
    struct ds_runtime *rt = v->rt;
    uint32_t kind = u->kind == UNIT_KERNEL    ? DS__VGROUP_KERNEL
                    : u->kind == UNIT_SECTION ? DS__VGROUP_SECTION
                                              : DS__VGROUP_GRAPH;
    ds_launch_event ev = launch_event(v, u);
    ds_status st;
    if (v->grp.rank) {
        if (pol)
            (void)pol->ops.on_launch(pol->state, (const ds_policy_view *)rt, &ev);
        st = ds__vgroup_follow(v, kind, fn);
        if (st != DS_SUCCESS) {
            if (u->must_launch)
                ds__vgroup_skip(v);
            return st;
        }
    } else {
        st = ds__vgroup_room(v, fn);
        if (st == DS_SUCCESS && pol)
            st = decide(v, pol, &ev);
        if (st != DS_SUCCESS) {
            if (u->must_launch)
                ds__vgroup_publish(v, kind);
            return st;
        }
    }
    if (DS__UNLIKELY(atomic_load_explicit(&v->gate.closed, memory_order_relaxed)))
        st = ds__gate_hold(v, fn, ds_runtime_poll);
    if (st == DS_SUCCESS && atomic_load_explicit(&v->pending, memory_order_relaxed) != DS__LD(v->bound)) {
        ds__binding_apply(v);
        predict(v, u);
    }
    if (!v->grp.rank && (st == DS_SUCCESS || u->must_launch))
        ds__vgroup_publish(v, kind);
    return st;
}

/* Everything before a unit is submitted, in this order: the policy's
 * decision; the gate hold (before a remap could add a hand-off wait behind a
 * closed gate: one blocked stream per gated vCtx at most); the remap
 * (prepare_bind: from here on the pCtx is known); the window; sampling; the
 * gate (before the timed start: a closed gate is never kernel time); the
 * timed start (prepare_submit). On return v->stream is where the unit goes. */
static inline __attribute__((always_inline)) ds_status prepare_bind(struct ds_vctx *v, unit *u, const char *fn)
{
    struct ds_runtime *rt = v->rt;
    predict(v, u);
    ds__policy *pol = atomic_load_explicit(&rt->reg.active, memory_order_acquire);
    if (DS__UNLIKELY(v->grouped))
        return grouped_bind(v, u, pol, fn);
    if (DS__LIKELY(pol != NULL)) {
        ds_launch_event ev = launch_event(v, u);
        DS__TRY(decide(v, pol, &ev));
    }
    if (DS__UNLIKELY(atomic_load_explicit(&v->gate.closed, memory_order_relaxed)))
        DS__TRY(ds__gate_hold(v, fn, ds_runtime_poll));
    if (DS__UNLIKELY(atomic_load_explicit(&v->pending, memory_order_relaxed) != DS__LD(v->bound))) {
        ds__binding_apply(v); /* on failure the unit goes where the vCtx is */
        predict(v, u);
    }
    return DS_SUCCESS;
}

static inline __attribute__((always_inline)) ds_status prepare_submit(struct ds_vctx *v, unit *u, const char *fn)
{
    struct ds_runtime *rt = v->rt;
    if (atomic_load_explicit(&v->window_us, memory_order_relaxed)) {
        ds__marks_window_wait(v, u->pred);
        if (DS__UNLIKELY(ds__faulted(rt)))
            return ds__fault_status(rt, fn);
    }
    ds__binding_context(v);

    /* Timed: every section; every sample_period-th launch, and kernels
     * or graphs without a profile (at most one in DS__EXPLORE_EVERY). */
    if (u->kind == UNIT_SECTION) {
        u->timed = 1;
    } else {
        u->timed = 0;
        if (DS__UNLIKELY(--v->marks.sample_countdown == 0)) {
            v->marks.sample_countdown = rt->sample_period ? rt->sample_period : UINT32_MAX;
            u->timed = rt->sample_period != 0;
        }
        if (DS__UNLIKELY(u->known < 4 && rt->sample_period && v->marks.explore_countdown == 0)) {
            u->timed = 1;
            v->marks.explore_countdown = DS__EXPLORE_EVERY;
        } else if (v->marks.explore_countdown) {
            v->marks.explore_countdown--;
        }
    }
    u->gi = atomic_load_explicit(&v->gate.interval_us, memory_order_relaxed);
    if (DS__UNLIKELY(u->gi != DS_GATES_NONE) && ds__gate_due(&v->gate, u->gi))
        ds__gate_place(v, u->f, u->grid, u->block);
    u->slot = u->timed ? ds__marks_slot(v) : NULL;
    if (u->slot && v->cu->cuEventRecord(u->slot->start, v->stream) != CUDA_SUCCESS)
        u->slot = NULL;
    return DS_SUCCESS;
}

static inline __attribute__((always_inline)) ds_status prepare(struct ds_vctx *v, unit *u, const char *fn)
{
    DS__TRY(prepare_bind(v, u, fn));
    return prepare_submit(v, u, fn);
}

/* After the unit was submitted: the work accounting, the gate's unit count
 * and the marks. A section is always marked, a kernel when timed or when
 * enough went by unmarked. */
static inline __attribute__((always_inline)) void account(struct ds_vctx *v, const unit *u)
{
    add_us(&v->marks.submitted_us, u->pred);
    note_unit(v, u->pred);
    if (DS__UNLIKELY(u->gi != DS_GATES_NONE))
        ds__gate_count_unit(&v->gate, u->pred);
    v->marks.since_us += u->pred;
    v->marks.unmarked++;
    if (u->slot) {
        ds__marks_publish(v, u->slot, 1, u->pred, u->key, u->graph, u->grid, u->block);
        return;
    }
    uint32_t w = atomic_load_explicit(&v->window_us, memory_order_relaxed);
    double quantum = w ? w / 4.0 : DS__MARK_QUANTUM_US;
    if (DS__UNLIKELY(u->kind == UNIT_SECTION || DS__LD(v->track_all) || v->marks.since_us >= quantum ||
                     v->marks.unmarked >= DS__MARK_EVERY))
        ds__marks_flush(v);
}

/* ------------------------------------------------------------------------ */
/* kernels                                                                   */

static ds_status bad_launch(const struct ds_vctx *v, ds_dim3 g, ds_dim3 b, uint32_t smem)
{
    const struct ds_runtime *rt = v->rt;
    return ds__fail(DS_ERR_INVALID_LAUNCH,
                    "ds_launch('%s'): grid (%u,%u,%u) block (%u,%u,%u) smem %u; device limits grid "
                    "(%u,%u,%u) block (%u,%u,%u) threads %u smem %u, every dimension >= 1",
                    v->name, g.x, g.y, g.z, b.x, b.y, b.z, smem, rt->max_grid[0], rt->max_grid[1],
                    rt->max_grid[2], rt->max_block[0], rt->max_block[1], rt->max_block[2],
                    rt->max_threads_per_block, rt->max_smem_optin);
}

static ds_status launch_slow_checks(struct ds_vctx *v, CUfunction f, const ds_launch_hints *hints)
{
    if (!f)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_launch('%s'): function is NULL", v->name);
    if (hints)
        DS__TRY(ds__check_abi(hints, sizeof *hints, "ds_launch_hints"));
    return DS_SUCCESS;
}

static ds_status launch(struct ds_vctx *v, CUfunction f, ds_dim3 grid, ds_dim3 block, uint32_t smem, void **params,
                        const ds_launch_hints *hints)
{
    unit u = {.kind = UNIT_KERNEL, .f = f, .key = f, .grid = grid, .block = block, .smem = smem, .hints = hints};
    DS__TRY(prepare(v, &u, "ds_launch"));
    CUresult r = v->cu->cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, v->stream,
                                       params, NULL);
    if (DS__UNLIKELY(r != CUDA_SUCCESS)) {
        if (ds__fault_note(v->rt, r, v, "cuLaunchKernel"))
            return ds__fault_status(v->rt, "ds_launch");
        return ds__fail(r == CUDA_ERROR_INVALID_VALUE ? DS_ERR_INVALID_LAUNCH : DS_ERR_DRIVER,
                        "ds_launch('%s'): cuLaunchKernel -> %s", v->name, ds__cu_error_name(v->cu, r));
    }
    ds__bump(&v->launches, 1);
    if (DS__UNLIKELY(u.timed && atomic_load_explicit(&v->mem.count, memory_order_relaxed)))
        ds__memreg_sample(&v->mem, v->cu, f, params); /* working set: sampled launches only */
    account(v, &u);
    return DS_SUCCESS;
}

ds_status ds_launch(ds_vctx_t v, CUfunction f, ds_dim3 grid, ds_dim3 block, uint32_t smem, void **params,
                    const ds_launch_hints *hints)
{
    if (DS__UNLIKELY(!v || v->magic != DS__VCTX_MAGIC))
        return ds__vctx_check(v, "ds_launch");
    const struct ds_runtime *rt = v->rt;
    /* a faulted context: one relaxed load, a plain mov */
    if (DS__UNLIKELY(ds__faulted(rt)))
        return ds__fault_status(v->rt, "ds_launch");
    if (DS__UNLIKELY(!f || (hints && (hints->magic != DS_ABI_MAGIC || hints->size != sizeof *hints))))
        DS__TRY(launch_slow_checks(v, f, hints));
    if (DS__UNLIKELY(grid.x - 1u >= rt->max_grid[0] || grid.y - 1u >= rt->max_grid[1] ||
                     grid.z - 1u >= rt->max_grid[2] || block.x - 1u >= rt->max_block[0] ||
                     block.y - 1u >= rt->max_block[1] || block.z - 1u >= rt->max_block[2] ||
                     (uint64_t)block.x * block.y * block.z > rt->max_threads_per_block ||
                     smem > rt->max_smem_optin))
        return bad_launch(v, grid, block, smem);
    if (!DS__LD(v->track_all))
        return launch(v, f, grid, block, smem, params, hints);
    /* track_all's hand-over protocol (ds_vctx_state.launching): visible
     * "launching" around the decision and the mark, sequentially consistent */
    atomic_store(&v->launching, 1);
    ds_status st = launch(v, f, grid, block, smem, params, hints);
    atomic_store(&v->launching, 0);
    return st;
}

/* ------------------------------------------------------------------------ */
/* sections                                                                  */

ds_status ds_vctx_acquire_stream(ds_vctx_t v, CUstream *stream)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_acquire_stream"));
    if (!stream)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_acquire_stream('%s'): stream is NULL", v->name);
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, "ds_vctx_acquire_stream");
    if (DS__LD(v->section_open))
        return ds__fail(DS_ERR_BUSY, "ds_vctx_acquire_stream('%s'): a section is already open", v->name);
    int track_all = DS__LD(v->track_all);
    if (track_all)
        atomic_store(&v->launching, 1);
    /* A section is one unit, predicted from the vCtx's own past sections
     * (profile key: the vCtx). */
    unit u = {.kind = UNIT_SECTION, .key = (CUfunction)v, .grid = k_section_dim, .block = k_section_dim};
    ds_status st = prepare(v, &u, "ds_vctx_acquire_stream");
    if (st == DS_SUCCESS) {
        v->marks.section_slot = u.slot;
        v->marks.section_pred_us = u.pred;
        DS__ST(v->section_open, 1);
        *stream = v->stream;
    }
    if (track_all)
        atomic_store(&v->launching, 0);
    return st;
}

ds_status ds_vctx_release_stream(ds_vctx_t v)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_release_stream"));
    if (!DS__LD(v->section_open))
        return ds__fail(DS_ERR_BUSY, "ds_vctx_release_stream('%s'): no section is open", v->name);
    unit u = {.kind = UNIT_SECTION,
              .key = (CUfunction)v,
              .grid = k_section_dim,
              .block = k_section_dim,
              .pred = v->marks.section_pred_us,
              .timed = 1,
              .slot = v->marks.section_slot,
              .gi = atomic_load_explicit(&v->gate.interval_us, memory_order_relaxed)};
    account(v, &u);
    v->marks.section_slot = NULL;
    DS__ST(v->section_open, 0);
    ds__bump(&v->sections, 1);
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, "ds_vctx_release_stream"); /* closed, but its work is lost */
    return DS_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* graphs                                                                    */

/* The measuring step of a graph whose cut is pending: one unit, run as its
 * finest segments between events, waited for; then the graph is cut. */
static ds_status graph_launch_measuring(struct ds_vctx *v, struct ds_graph *g, unit *u, uint32_t p)
{
    ds__calib c;
    const uint32_t measure = g->measured++;
    DS__TRY(ds__graph_calib_begin(g, p, &c));
    ds_status st = prepare_submit(v, u, "ds_graph_launch");
    if (st == DS_SUCCESS)
        st = ds__graph_calib_run(g, &c, v->stream);
    if (st != DS_SUCCESS) {
        ds__graph_calib_free(g, &c);
        return st;
    }
    ds__bump(&g->launches_on[p], 1);
    ds__bump(&v->graph_launches, 1);
    ds__bump(&v->graph_units, 1);
    account(v, u);
    /* grouped: every rank cuts where rank 0 did (vgroup.h, graph cuts) */
    if (DS__UNLIKELY(v->grouped) && v->grp.rank)
        c.ncut = ds__vgroup_cut_wait(v, g->name, g->ordinal, measure, c.natoms, c.cut);
    st = ds__graph_calib_end(g, &c);
    if (DS__UNLIKELY(v->grouped) && !v->grp.rank)
        ds__vgroup_cut_publish(v, g->ordinal, measure, c.cut, st == DS_SUCCESS ? c.ncut : 0, c.natoms);
    ds__graph_calib_free(g, &c);
    return st;
}

/* A segment after the first: the step is under way, so it is launched
 * whatever happens; a hold or gate that times out is passed (logged), and
 * a pCtx that cannot run the segment (outside the graph's set, or its
 * capture failed) runs it on the step's first pCtx's instantiation, from
 * the vCtx's stream (a graph runs in the context it was instantiated for). */
static ds_status segment_prepare(struct ds_vctx *v, struct ds_graph *g, unit *u, uint32_t k, uint32_t p0,
                                 CUgraphExec *exec)
{
    ds_status st = prepare_bind(v, u, "ds_graph_launch (segment)");
    if (DS__UNLIKELY(st != DS_SUCCESS)) {
        if (ds__faulted(v->rt))
            return st;
        ds__log(DS_LOG_WARN, "ds_graph_launch('%s', '%s'): segment %u launched anyway: %s", v->name, g->name, k,
                ds_last_error_message());
    }
    uint32_t p = DS__BIND_PCTX(DS__LD(v->bound));
    *exec = atomic_load_explicit(&g->seg[k].exec[p], memory_order_acquire);
    if (DS__UNLIKELY(!*exec)) {
        if (((g->set >> p) & 1u) && ds__graph_ensure(g, p) == DS_SUCCESS)
            *exec = atomic_load_explicit(&g->seg[k].exec[p], memory_order_acquire);
        if (!*exec)
            *exec = atomic_load_explicit(&g->seg[k].exec[p0], memory_order_acquire);
    }
    return prepare_submit(v, u, "ds_graph_launch");
}

/* A graph's unit under the profile key of segment s. */
static inline unit graph_unit(struct ds_graph *g, const ds__seg *s, int must_launch)
{
    return (unit){.kind = UNIT_GRAPH,
                  .key = ds__seg_key(s),
                  .graph = g,
                  .grid = k_section_dim,
                  .block = k_section_dim,
                  .must_launch = must_launch};
}

/* A step: its segments, each a unit through prepare/account. The first
 * decides whether anything is launched (errors return with nothing
 * launched); later ones always launch (segment_prepare). */
static ds_status graph_launch(struct ds_vctx *v, struct ds_graph *g)
{
    unit u = graph_unit(g, g->seg && !g->cut_pending ? &g->seg[0] : &g->whole, 0);
    DS__TRY(prepare_bind(v, &u, "ds_graph_launch"));
    uint32_t p0 = DS__BIND_PCTX(DS__LD(v->bound));
    CUgraphExec exec = g->seg ? atomic_load_explicit(&g->seg[0].exec[p0], memory_order_acquire) : NULL;
    if (DS__UNLIKELY(!exec)) {
        DS__TRY(ds__graph_ensure(g, p0));
        if (g->cut_pending)
            return graph_launch_measuring(v, g, &u, p0);
        u.key = ds__seg_key(&g->seg[0]);
        exec = atomic_load_explicit(&g->seg[0].exec[p0], memory_order_acquire);
    }
    DS__TRY(prepare_submit(v, &u, "ds_graph_launch"));
    const uint32_t n = g->nseg;
    for (uint32_t k = 0;;) {
        CUresult r = v->cu->cuGraphLaunch(exec, v->stream);
        if (DS__UNLIKELY(r != CUDA_SUCCESS)) {
            if (ds__fault_note(v->rt, r, v, "cuGraphLaunch"))
                return ds__fault_status(v->rt, "ds_graph_launch");
            /* the timed start, if any, stays unpublished: the slot is reused */
            return ds__fail(ds__cu_status(r), "ds_graph_launch('%s', '%s'): cuGraphLaunch of segment %u of %u on "
                                              "pCtx %u -> %s%s",
                            v->name, g->name, k, n, DS__BIND_PCTX(DS__LD(v->bound)), ds__cu_error_name(v->cu, r),
                            k ? " (the step is incomplete)" : "");
        }
        if (k == 0) {
            ds__bump(&g->launches_on[p0], 1);
            ds__bump(&v->graph_launches, 1);
        }
        ds__bump(&v->graph_units, 1);
        account(v, &u);
        if (++k == n)
            return DS_SUCCESS;
        u = graph_unit(g, &g->seg[k], 1);
        DS__TRY(segment_prepare(v, g, &u, k, p0, &exec));
    }
}

static ds_status graph_foreign(const struct ds_vctx *v, const struct ds_graph *g)
{
    if (g->rt != v->rt)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_graph_launch('%s'): graph '%s' belongs to another runtime",
                        v->name, g->name);
    return ds__fail(DS_ERR_INVALID_ARGUMENT,
                    "ds_graph_launch('%s'): graph '%s' belongs to vCtx '%s' (a graph is launched by the vCtx that "
                    "made it: its buffers are ordered by that vCtx's program order)",
                    v->name, g->name, g->v->name);
}

ds_status ds_graph_launch(ds_vctx_t v, ds_graph_t g)
{
    if (DS__UNLIKELY(!v || v->magic != DS__VCTX_MAGIC))
        return ds__vctx_check(v, "ds_graph_launch");
    if (DS__UNLIKELY(ds__faulted(v->rt)))
        return ds__fault_status(v->rt, "ds_graph_launch");
    if (DS__UNLIKELY(!g || atomic_load_explicit(&g->magic, memory_order_relaxed) != DS__GRAPH_MAGIC))
        return ds__graph_check(g, "ds_graph_launch");
    if (DS__UNLIKELY(g->v != v))
        return graph_foreign(v, g);
    if (!DS__LD(v->track_all))
        return graph_launch(v, g);
    atomic_store(&v->launching, 1);
    ds_status st = graph_launch(v, g);
    atomic_store(&v->launching, 0);
    return st;
}
