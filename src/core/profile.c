#include "core/profile.h"
#include "seam/alloc.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Open addressing, never shrinks; when full, new keys are not profiled
 * (callers fall back to hints). 8192 distinct kernel shapes per runtime. */
#define SLOTS 8192u

typedef struct entry {
    _Atomic uint64_t hash; /* 0 = empty; published last (release) */
    CUfunction f;
    ds_dim3 g, b;
    uint32_t sms;
    _Atomic uint32_t n;
    _Atomic double mean;
    _Atomic double dev;
} entry;

struct ds__profiles {
    entry e[SLOTS];
    uint32_t used;
    pthread_mutex_t lock; /* writers: harvests of different vCtxs run concurrently */
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t key_hash(CUfunction f, ds_dim3 g, ds_dim3 b, uint32_t sms)
{
    uint64_t h = mix(0, (uint64_t)(uintptr_t)f);
    h = mix(h, ((uint64_t)g.x << 32) | g.y);
    h = mix(h, ((uint64_t)g.z << 32) | b.x);
    h = mix(h, ((uint64_t)b.y << 32) | b.z);
    h = mix(h, sms);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h ? h : 1;
}

static int same(const entry *e, CUfunction f, ds_dim3 g, ds_dim3 b, uint32_t sms)
{
    return e->f == f && e->sms == sms && e->g.x == g.x && e->g.y == g.y && e->g.z == g.z &&
           e->b.x == b.x && e->b.y == b.y && e->b.z == b.z;
}

ds__profiles *ds__profiles_create(void)
{
    ds__profiles *p = ds__calloc(1, sizeof(ds__profiles));
    if (p)
        pthread_mutex_init(&p->lock, NULL);
    return p;
}

void ds__profiles_destroy(ds__profiles *p)
{
    if (p)
        pthread_mutex_destroy(&p->lock);
    ds__free(p);
}

static const entry *find(const ds__profiles *p, uint64_t h, CUfunction f, ds_dim3 g, ds_dim3 b,
                         uint32_t sms)
{
    for (uint32_t i = 0; i < SLOTS; i++) {
        const entry *e = &p->e[(h + i) & (SLOTS - 1)];
        uint64_t eh = atomic_load_explicit(&e->hash, memory_order_acquire);
        if (eh == 0)
            return NULL;
        if (eh == h && same(e, f, g, b, sms))
            return e;
    }
    return NULL;
}

static void add_locked(ds__profiles *p, CUfunction f, ds_dim3 g, ds_dim3 b, uint32_t sms, double us)
{
    uint64_t h = key_hash(f, g, b, sms);
    entry *e = (entry *)find(p, h, f, g, b, sms);
    if (!e) {
        if (p->used >= SLOTS * 3 / 4)
            return;
        uint32_t i = 0;
        while (atomic_load_explicit(&p->e[(h + i) & (SLOTS - 1)].hash, memory_order_relaxed))
            i++;
        e = &p->e[(h + i) & (SLOTS - 1)];
        e->f = f;
        e->g = g;
        e->b = b;
        e->sms = sms;
        atomic_store_explicit(&e->mean, us, memory_order_relaxed);
        atomic_store_explicit(&e->dev, us / 8, memory_order_relaxed);
        atomic_store_explicit(&e->n, 1, memory_order_relaxed);
        p->used++;
        atomic_store_explicit(&e->hash, h, memory_order_release);
        return;
    }
    /* RFC 6298: dev += (|x - mean| - dev) / 4; mean += (x - mean) / 8. The
     * first samples weigh more so that the estimate settles quickly. */
    uint32_t n = atomic_load_explicit(&e->n, memory_order_relaxed) + 1;
    double mean = atomic_load_explicit(&e->mean, memory_order_relaxed);
    double dev = atomic_load_explicit(&e->dev, memory_order_relaxed);
    double a = n < 8 ? 1.0 / n : 0.125;
    double b4 = n < 4 ? 1.0 / n : 0.25;
    dev += (fabs(us - mean) - dev) * b4;
    mean += (us - mean) * a;
    atomic_store_explicit(&e->mean, mean, memory_order_relaxed);
    atomic_store_explicit(&e->dev, dev, memory_order_relaxed);
    atomic_store_explicit(&e->n, n, memory_order_relaxed);
}

uint32_t ds__profile_get(const ds__profiles *p, CUfunction f, ds_dim3 g, ds_dim3 b, uint32_t sms,
                         double *mean_us, double *tail_us)
{
    if (!p)
        return 0;
    const entry *e = find(p, key_hash(f, g, b, sms), f, g, b, sms);
    if (!e)
        return 0;
    double mean = atomic_load_explicit(&e->mean, memory_order_relaxed);
    if (mean_us)
        *mean_us = mean;
    if (tail_us)
        *tail_us = mean + 4.0 * atomic_load_explicit(&e->dev, memory_order_relaxed);
    return atomic_load_explicit(&e->n, memory_order_relaxed);
}

void ds__profile_add(ds__profiles *p, CUfunction f, ds_dim3 g, ds_dim3 b, uint32_t sms, double us)
{
    if (!p || !(us >= 0) || !isfinite(us))
        return;
    pthread_mutex_lock(&p->lock);
    add_locked(p, f, g, b, sms, us);
    pthread_mutex_unlock(&p->lock);
}
