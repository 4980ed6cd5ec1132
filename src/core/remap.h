/*
 * Remapping (remap.c): where a vCtx runs and how it moves. A binding packs a
 * pCtx index and the urgent flag into one word; each vCtx holds the binding
 * in use (`bound`) and the one requested (`pending`). Any thread requests a
 * remap (the policy actions below are relaxed or compare-and-swap stores);
 * the vCtx's owner thread applies it at its next unit, with an event
 * hand-off that keeps program order.
 *
 * What a remap must carry: on one GPU that is program order only. Memory is
 * shared by every green context of the device (docs/device-facts.md), so the
 * vCtx's buffers stay where they are and only its stream changes. Moving a
 * vCtx to another GPU (virtual addresses kept, working set copied lazily)
 * will live here too (docs/design.md, section 6).
 */
#ifndef DS_CORE_REMAP_H
#define DS_CORE_REMAP_H

#include <stdatomic.h>
#include <stdint.h>

#include "seam/driver.h"

/* binding = pCtx index | urgent << 16 */
#define DS__BIND(pctx, urgent) ((uint32_t)(pctx) | ((uint32_t)((urgent) != 0) << 16))
#define DS__BIND_PCTX(b) ((b) & 0xffffu)
#define DS__BIND_URGENT(b) ((b) >> 16)

struct ds_runtime;
struct ds_vctx;

/* Yields (ds_vctx_stats::yields): a best-effort vCtx asked to move to a pCtx
 * with fewer SMs while it has work in flight, timed from the request until
 * its work where it was has finished: the hand-off event its owner recorded
 * when it moved completed, or, if the owner launched nothing meanwhile, the
 * vCtx's work in flight drained. Seen by the scheduler pass: the resolution
 * is one pass. */
#define DS__YIELD_NONE 0u
#define DS__YIELD_REQUESTED 1u
#define DS__YIELD_MOVED 2u
#define DS__YIELD_SAMPLES 256u
typedef struct ds__vyield {
    _Atomic uint32_t state;
    _Atomic double t0_us;   /* the request (runtime clock) */
    _Atomic uint64_t gate;  /* with gates: the gate the stream stops at next
                               (reached: the work on the SMs ended), 0: none */
    _Atomic uint64_t count; /* yields timed (the scheduler writes) */
    _Atomic double max_us;
    _Atomic double samples[DS__YIELD_SAMPLES]; /* the last ones, a ring */
} ds__vyield;

/* Owner thread, at a kernel boundary: moves the vCtx to its requested
 * binding (event hand-off). On a driver failure the vCtx stays where it
 * was, the request is dropped and logged. */
ds_status ds__binding_apply(struct ds_vctx *v);
/* The vCtx's stream for `binding`, created on first use (owner thread). */
ds_status ds__binding_stream(struct ds_vctx *v, uint32_t binding, CUstream *out);
/* The CUDA stream priority for a ds_vctx_attr priority. */
int ds__binding_priority(const struct ds_runtime *rt, int priority);
/* Makes the runtime's primary context current on the calling thread. */
void ds__binding_context(struct ds_vctx *v);
/* The scheduler pass: times a yield whose work has finished. */
void ds__yield_poll(struct ds_vctx *v, double now_us);
/* ds_vctx_get_stats: count, median, p99 (nearest rank) and max (us). */
void ds__yield_read(struct ds_vctx *v, uint64_t *count, double *p50, double *p99, double *max);

#endif /* DS_CORE_REMAP_H */
