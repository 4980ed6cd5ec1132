/*
 * What a remap must carry. On one GPU that is program order only: memory is
 * shared by every green context of the device (docs/device-facts.md), so the vCtx's
 * buffers stay where they are and only its stream changes. Moving a vCtx to
 * another GPU (virtual addresses kept, working set copied lazily) will live
 * here too (docs/design.md, section 6).
 */
#ifndef DS_MIGRATE_HANDOFF_H
#define DS_MIGRATE_HANDOFF_H

#include "seam/driver.h"

/* Orders `to` after everything submitted to `from` so far: records `ev` on
 * `from` and makes `to` wait on it (cuStreamWaitEvent holds across green
 * contexts). `ev` may be reused at once: a wait captures the record it saw.
 * Returns the failing CUresult, CUDA_SUCCESS otherwise. */
CUresult ds__migrate_handoff(const ds__driver *cu, CUevent ev, CUstream from, CUstream to);

#endif
