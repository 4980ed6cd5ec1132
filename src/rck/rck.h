/*
 * The resident control kernel, as the library's assembly sees it. Core never
 * calls it: ds__rck_start registers the RCK as the runtime's gate-word writer
 * (DS_GATES_RCK) and as a scheduler hook (boundary records, heartbeat,
 * statistics, stop).
 */
#ifndef DS_RCK_RCK_H
#define DS_RCK_RCK_H

#include "detshare/detshare.h"

struct ds_runtime;

/* Starts the RCK on a runtime whose pool and gates are built (DS_RCK_ON):
 * loads the device code, allocates everything it reads, launches it on the
 * last SM group, and registers its tables. DS_ERR_NOT_SUPPORTED (a LOW tier
 * covers the last group, or the driver lacks mapped host memory or stream
 * memory operations), DS_ERR_INVALID_ARGUMENT (max_vctx above what the RCK
 * covers), DS_ERR_OUT_OF_MEMORY, DS_ERR_DRIVER. */
ds_status ds__rck_start(struct ds_runtime *rt);

#endif /* DS_RCK_RCK_H */
