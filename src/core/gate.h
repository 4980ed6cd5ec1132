/*
 * Gates: preemption at kernel boundaries (gate.c). A gate is a
 * cuStreamWaitValue32(word == 0) the owner thread puts in its vCtx's stream
 * before a unit; closing the vCtx's gate writes 1 to its word so its queued
 * work stops at its next gate, opening writes 0. The host writes the words
 * (DS_GATES_HOST) unless a gate writer registered (the RCK, DS_GATES_RCK).
 * Every transition is lock-free.
 */
#ifndef DS_CORE_GATE_H
#define DS_CORE_GATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "seam/driver.h"

/* A writer of the gate words other than the host (the RCK): set is lock-free;
 * bounds is the device address of the boundary words gates stamp, or 0;
 * slots learns the highest live vCtx slot + 1. */
typedef struct ds__gate_writer {
    void *self;
    void (*set)(void *self, uint32_t slot, int closed);
    CUdeviceptr (*bounds)(void *self);
    void (*slots)(void *self, uint32_t nslots);
} ds__gate_writer;

/* One gate of a vCtx as its owner placed it, for turning the writer's
 * boundary timestamps into profile samples: `seq` is written last (release),
 * after the gate's first unit is known; `units` grows until the next gate. */
#define DS__GATE_LOG 64
/* Gate-reached events kept per vCtx (the last this many gates). */
#define DS__GATE_REACH 8
typedef struct ds__gate_entry {
    _Atomic uint32_t seq;
    _Atomic uint32_t units; /* kernels and sections after this gate */
    uint64_t closes;        /* the vCtx's gate.closes when placed */
    CUfunction f;           /* first unit; NULL for a section */
    ds_dim3 grid, block;
    uint32_t pctx;
} ds__gate_entry;

/* A runtime's gates: one control word per vCtx slot at `words` (the device
 * address streams wait on); DS_GATES_HOST keeps them in pinned host memory
 * (`host`). */
typedef struct ds__gates {
    ds_gate_mode mode; /* resolved: HOST, RCK or OFF */
    uint32_t *host;
    CUdeviceptr words;
    uint32_t max_closed;           /* hardware queues a closed gate may block */
    _Atomic uint32_t closed;       /* gates closed now */
    _Atomic uint32_t copy_waits;   /* vCtx streams waiting on a copy gate now */
    _Atomic uint64_t refusals, expiries;
    ds__gate_writer writer;        /* set: DS_GATES_RCK */
} ds__gates;

/* A vCtx's gate. closed/interval are read by every unit; any thread writes
 * them. The owner alone writes since_us, seq and log. */
typedef struct ds__vgate {
    _Atomic int closed;
    _Atomic uint32_t interval_us; /* DS_GATES_NONE: no gates */
    _Atomic int rearm;            /* interval changed: the next unit gets a gate */
    double since_us;              /* owner: predicted work since its last gate */
    uint32_t seq;                 /* owner: boundary sequence */
    uint32_t base;                /* seq at creation: older boundaries are not its */
    _Atomic uint64_t placed, closes, holds, closed_us;
    _Atomic uint32_t expiries;         /* times the runtime reopened it */
    _Atomic double closed_at_us;       /* runtime clock of the last close */
    _Atomic double closed_wall_ms;     /* wall clock of the last close: expiry */
    _Atomic double opened_at_us;       /* runtime clock of the last open (watchdog) */
    ds__gate_entry log[DS__GATE_LOG];  /* owner writes, the pass reads */
    /* an event recorded just before each gate (gate i: reach[i % N]),
     * created at the first gate: says when the stream reached a gate, which
     * is when work stopped by a closed gate left the SMs (yields: remap.c) */
    CUevent reach[DS__GATE_REACH];
    _Atomic int reach_ready;
} ds__vgate;

struct ds_runtime;
struct ds_vctx;

/* init: resolves the gate mode and allocates the words (after the pool,
 * before a writer registers: nothing is allocated once the RCK is resident);
 * fini frees them (after the writer stopped). */
ds_status ds__gates_init(struct ds_runtime *rt, ds_gate_mode mode, int writer_coming);
void ds__gates_fini(struct ds_runtime *rt);
/* Owner thread, before a unit: a gate if one is due (f NULL for a section). */
void ds__gate_place(struct ds_vctx *v, CUfunction f, ds_dim3 grid, ds_dim3 block);
/* vctx.c, at teardown: destroys the gate-reached events. */
void ds__gate_reach_fini(struct ds_vctx *v);
/* Owner thread: is a gate due before the next unit (interval gi not
 * DS_GATES_NONE)? The first unit after the interval changed always gets one
 * (a policy turning gates back on wants the queue stoppable at once). */
static inline int ds__gate_due(ds__vgate *g, uint32_t gi)
{
    if (atomic_load_explicit(&g->rearm, memory_order_relaxed)) {
        atomic_store_explicit(&g->rearm, 0, memory_order_relaxed);
        return 1;
    }
    return g->since_us >= gi;
}
/* Any thread: sets the interval; a change re-arms the first gate. */
static inline void ds__gate_interval_set(ds__vgate *g, uint32_t interval_us)
{
    if (atomic_exchange_explicit(&g->interval_us, interval_us, memory_order_relaxed) != interval_us)
        atomic_store_explicit(&g->rearm, 1, memory_order_relaxed);
}
/* Owner thread: after a unit behind the latest gate. */
static inline void ds__gate_count_unit(ds__vgate *g, double pred)
{
    g->since_us += pred;
    ds__gate_entry *e = &g->log[g->seq % DS__GATE_LOG];
    atomic_store_explicit(&e->units, atomic_load_explicit(&e->units, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
/* Owner thread: waits while the vCtx's gate is closed. DS_ERR_TIMEOUT when the
 * wait lasts longer than the teardown timeout in wall time or the gate was
 * reopened by expiry meanwhile (the gate is then open, the unit not
 * submitted); DS_ERR_DEVICE_FAULT. Without a scheduler thread, each turn
 * runs `poll` (the scheduler's pass, ds_runtime_poll: what reopens gates
 * then), since this thread cannot return to the application to call it. */
ds_status ds__gate_hold(struct ds_vctx *v, const char *fn, ds_status (*poll)(ds_runtime_t rt));
/* Opens v's gate if closed (teardown, expiry); `why` goes to the log when
 * not NULL. */
void ds__gate_force_open(struct ds_vctx *v, const char *why);
/* Reopens v's gate when it has been closed for longer than the teardown
 * timeout in wall time (like every other wait the timeout bounds). */
void ds__gates_expire(struct ds_runtime *rt, struct ds_vctx *v);

#endif /* DS_CORE_GATE_H */
