/*
 * Copies (copy.c): ds_memcpy_async, scheduled fairly across tenants on one
 * copy thread, each tenant's stream held behind a copy gate until its copy
 * is done.
 */
#ifndef DS_CORE_COPY_H
#define DS_CORE_COPY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "seam/driver.h"

/* A vCtx's copies: gate word, arbiter tenant, last sequence (owner thread);
 * statistics written by the copy thread. */
typedef struct ds__vcopy {
    CUdeviceptr word;
    int tenant;
    uint32_t seq;
    _Atomic uint64_t done, bytes, wait_ns;
    _Atomic uint32_t pending; /* queued, gate not yet opened */
} ds__vcopy;

struct ds_runtime;
struct ds_vctx;

/* At vCtx teardown (after its stream drained): cancels its copies not done
 * and frees its gate word. At runtime destroy (after every vCtx): stops the
 * copy thread. ds__copy_history: tenant ids of the chunks put on the link so
 * far, in order (tests). */
void ds__copy_vctx_teardown(struct ds_vctx *v);
void ds__copy_stop(struct ds_runtime *rt);
size_t ds__copy_history(struct ds_runtime *rt, int *tenants, size_t cap);

#endif /* DS_CORE_COPY_H */
