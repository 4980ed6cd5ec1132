/*
 * Allocation registry of a vCtx and kernel-parameter introspection.
 *
 * The registry holds the vCtx's ds_mem_alloc allocations sorted by base
 * address, so that "which allocation holds address a" is a binary search.
 * It is what moving a vCtx to another GPU will need (its ranges, to remap
 * with the same virtual addresses, and its working set, to copy first).
 *
 * Locking: one mutex per registry guards the array and the working-set
 * marks. Inserts and removals (ds_mem_alloc / ds_mem_free, any thread) and
 * lookups (sampled launches on the owner thread, ds_mem_working_set, stats
 * from any thread, the scheduler) take it. ds_launch's common path never
 * does: it scans only on sampled launches and only when `count` (read
 * without the lock) is nonzero.
 */
#ifndef DS_MEMORY_TENANT_MEMORY_H
#define DS_MEMORY_TENANT_MEMORY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "seam/driver.h"

/* Sampled launches whose working sets make up the "recent" working set. */
#define DS__MEM_WS_WINDOW 16u

typedef struct ds__mem_entry {
    CUdeviceptr base;
    size_t bytes;       /* what the caller asked for */
    size_t mapped;      /* rounded up to the granularity: reserved, created, mapped */
    CUmemGenericAllocationHandle handle;
    uint64_t last_seen; /* sample number of the last scan that found it, 0 = never */
} ds__mem_entry;

typedef struct ds__memreg {
    pthread_mutex_t lock;
    ds__mem_entry *e; /* sorted by base, disjoint */
    size_t n, cap;
    uint64_t samples; /* sampled scans so far */
    _Atomic size_t count; /* == n, readable without the lock */
    /* accounting (bytes are mapped bytes); changed under lock, read relaxed */
    _Atomic uint64_t quota;     /* 0 = none */
    _Atomic uint64_t allocated; /* includes reservations in progress */
    _Atomic uint64_t peak;
    _Atomic uint64_t total_allocs;
    _Atomic uint64_t quota_refusals;
    _Atomic uint64_t granularity; /* learned at the first allocation */
} ds__memreg;

void ds__memreg_init(ds__memreg *r);
/* Frees the array (the caller released the driver objects first). */
void ds__memreg_fini(ds__memreg *r);

/* Charges `mapped` bytes against the quota: 0, or -1 (nothing charged) if
 * allocated + mapped would exceed a nonzero quota. */
int ds__memreg_charge(ds__memreg *r, size_t mapped);
/* Returns bytes charged by ds__memreg_charge (a failed allocation, a free). */
void ds__memreg_uncharge(ds__memreg *r, size_t mapped);

/* Inserts an allocation (its bytes already charged). DS_ERR_OUT_OF_MEMORY
 * if the array cannot grow (nothing inserted). */
ds_status ds__memreg_insert(ds__memreg *r, const ds__mem_entry *e);
/* Removes the allocation starting at base into *out: 0, or -1 if none. */
int ds__memreg_remove(ds__memreg *r, CUdeviceptr base, ds__mem_entry *out);
/* Removes the last allocation into *out (teardown): 0, or -1 if empty. */
int ds__memreg_pop(ds__memreg *r, ds__mem_entry *out);

/* Parameters a launch scan looks at (kernels with more are scanned in part). */
#define DS__MEM_MAX_PARAMS 128

/* Size of each kernel parameter, through cuFuncGetParamInfo (at most `cap`).
 * Returns the number of parameters, or -1 when the driver cannot tell
 * (no cuFuncGetParamInfo, or it refuses the function). */
int ds__mem_param_sizes(const ds__driver *cu, CUfunction f, size_t *sizes, int cap);

/* Working set of one launch: scans each parameter's bytes at 8-byte-aligned
 * offsets within the parameter for values inside a registered allocation
 * (pointers at offsets and inside structs are found without knowing the
 * kernel's signature). Writes up to cap distinct allocation bases to out
 * (ascending) and their number (all of them, even past cap) to *n; adds
 * their mapped bytes to *bytes if bytes is not NULL. mark != 0: counts one
 * sample and stamps the allocations found with it (recent working set).
 * Returns 0, or -1 (*n = 0) when mark == 0 and host memory ran out. */
int ds__memreg_scan(ds__memreg *r, void **params, const size_t *sizes, int nparams, int mark,
                    CUdeviceptr *out, size_t cap, size_t *n, uint64_t *bytes);

/* Scans a sampled launch's parameters for the registry's allocations (the
 * owner thread, only when r->count != 0): a marked scan of `cu`'s
 * parameter layout of f. */
void ds__memreg_sample(ds__memreg *r, const ds__driver *cu, CUfunction f, void **params);

/* Mapped bytes of the allocations found by the last DS__MEM_WS_WINDOW
 * sampled scans, and the number of sampled scans so far. */
void ds__memreg_recent(ds__memreg *r, uint64_t *bytes, uint64_t *samples);

#endif /* DS_MEMORY_TENANT_MEMORY_H */
