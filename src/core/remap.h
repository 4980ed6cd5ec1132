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

#include <stdint.h>

#include "seam/driver.h"

/* binding = pCtx index | urgent << 16 */
#define DS__BIND(pctx, urgent) ((uint32_t)(pctx) | ((uint32_t)((urgent) != 0) << 16))
#define DS__BIND_PCTX(b) ((b) & 0xffffu)
#define DS__BIND_URGENT(b) ((b) >> 16)

struct ds_runtime;
struct ds_vctx;

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

#endif /* DS_CORE_REMAP_H */
