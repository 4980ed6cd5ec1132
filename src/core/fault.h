/*
 * Device faults (fault.c). A sticky driver error (CUDA_ERROR_ILLEGAL_ADDRESS,
 * _LAUNCH_FAILED, ...) poisons the whole CUDA context: `faulted` goes 0 -> 1
 * once, after `msg` (who faulted, what was seen where) is written by the one
 * thread that won `claim`; readers load `faulted` (relaxed on the hot path,
 * acquire before reading msg). Never cleared.
 */
#ifndef DS_CORE_FAULT_H
#define DS_CORE_FAULT_H

#include <stdatomic.h>

#include "seam/driver.h"

typedef struct ds__fault {
    _Atomic int faulted;
    atomic_flag claim;
    CUresult code;
    char msg[1024];
} ds__fault;

struct ds_runtime;
struct ds_vctx;

int ds__cu_is_sticky(CUresult r);
/* If r is sticky, records the runtime's fault (first caller wins; `seen_by`
 * is the vCtx whose call saw it, NULL for the scheduler; `where` names the
 * call) and returns 1; returns 0 otherwise. The culprit comes from the
 * device-ops table's fault_stream when the device knows it. */
int ds__fault_note(struct ds_runtime *rt, CUresult r, struct ds_vctx *seen_by, const char *where);
/* A fault the driver has not reported yet (the RCK's heartbeat stopped):
 * recorded like a sticky error, with `why` as the culprit. */
void ds__fault_presume(struct ds_runtime *rt, const char *why);
/* DS_ERR_DEVICE_FAULT with the runtime's fault message, raised by `fn`. */
ds_status ds__fault_status(struct ds_runtime *rt, const char *fn);
/* The runtime has faulted (one relaxed load: cheap on the hot path). */
#define ds__faulted(rt) atomic_load_explicit(&(rt)->fault.faulted, memory_order_relaxed)

#endif /* DS_CORE_FAULT_H */
