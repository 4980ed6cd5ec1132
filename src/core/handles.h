/*
 * Handles (handles.c): what a handle's magic says (complete, being created,
 * destroyed), the checks every entry point makes of the handles it is given,
 * and the quarantine that keeps destroyed handles readable.
 */
#ifndef DS_CORE_HANDLES_H
#define DS_CORE_HANDLES_H

#include "core/runtime.h"
#include "core/vctx.h"
#include "seam/log.h"

#define DS__RT_MAGIC 0x54524453u /* "SDRT" */
#define DS__VCTX_MAGIC 0x58434453u /* "SDCX": complete */
#define DS__BORN_MAGIC 0x4e524f42u /* "BORN": being created (on_vctx_create) */
#define DS__DEAD_MAGIC 0xDEADD5D5u

/* Validates a runtime handle (NULL, wrong magic, destroyed). */
static inline ds_status ds__rt_check(const struct ds_runtime *rt, const char *fn)
{
    if (DS__UNLIKELY(!rt))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: runtime handle is NULL", fn);
    if (DS__UNLIKELY(rt->magic != DS__RT_MAGIC))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: runtime handle %p is %s", fn, (const void *)rt,
                        rt->magic == DS__DEAD_MAGIC ? "destroyed" : "not a runtime");
    return DS_SUCCESS;
}

/* Validates a vCtx handle (NULL, wrong magic, destroyed). */
static inline ds_status ds__vctx_check(const struct ds_vctx *v, const char *fn)
{
    if (DS__UNLIKELY(!v))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: vCtx handle is NULL", fn);
    if (DS__UNLIKELY(v->magic != DS__VCTX_MAGIC))
        return ds__fail(DS_ERR_INVALID_HANDLE, "%s: vCtx handle %p is %s", fn, (const void *)v,
                        v->magic == DS__DEAD_MAGIC ? "destroyed (or its runtime was)"
                        : v->magic == DS__BORN_MAGIC ? "still being created"
                                                     : "not a vCtx");
    return DS_SUCCESS;
}

/* The same, also accepting the vCtx being created (the policy actions and
 * view reads a policy may use from on_vctx_create). */
static inline ds_status ds__vctx_check_born(const struct ds_vctx *v, const char *fn)
{
    if (DS__LIKELY(v && (v->magic == DS__VCTX_MAGIC || v->magic == DS__BORN_MAGIC)))
        return DS_SUCCESS;
    return ds__vctx_check(v, fn);
}

/* Keeps destroyed handles' memory (magic DS__DEAD_MAGIC) in a
 * bounded FIFO so that a stale handle reads "destroyed" instead of freed
 * memory; the oldest entry is freed when the FIFO is full. */
void ds__quarantine(void *p);
/* Frees every quarantined object (before the allocator is replaced). */
void ds__quarantine_flush(void);
/* Runtimes alive (+1 created, -1 destroyed): ds_replace_allocator refuses
 * while any is. */
void ds__runtime_count(int delta);

#endif /* DS_CORE_HANDLES_H */
