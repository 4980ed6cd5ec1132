/*
 * vCtx groups: membership (a table of names in the process, or a POSIX
 * shared-memory object per group across processes) and the decision ring
 * (vgroup.h says what it guarantees).
 *
 * One layout serves both kinds: the process table allocates it, a shared
 * group maps it. Everything the ranks exchange after joining is atomic words
 * in it; joining and leaving take its mutex, which is process-shared and
 * robust (a process that dies holding it leaves it recoverable,
 * pthread_mutexattr_setrobust(3)).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/gate.h"
#include "core/relaxed.h"
#include "core/remap.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "core/vgroup.h"
#include "seam/alloc.h"
#include "seam/log.h"

#define SH_MAGIC 0x50524756u /* "VGRP" */
#define SH_READY 1u
#define SH_RETIRED 2u
#define RANK_FREE 0u
#define RANK_JOINED 1u
#define RANK_LEFT 2u
/* How long a process opening a shared group waits for its creator to
 * finish initialising it. */
#define INIT_WAIT_MS 2000.0

/* One decision: where rank 0's unit `seq - 1` ran. */
typedef struct vslot {
    _Atomic uint64_t seq; /* unit + 1 once published */
    _Atomic uint32_t pctx, urgent, window_us, gate_us, kind, pad;
} vslot;

/* Rank 0's cut of one measuring step (vgroup.h, graph cuts): written
 * under a sequence word (0 while written, then the step's key + 1), read by
 * copying and checking the word again. */
#define CUTS 16u
typedef struct vcut {
    _Atomic uint64_t tag;
    _Atomic uint32_t natoms, ncut;
    _Atomic uint16_t first[DS_GRAPH_MAX_SEGMENTS];
} vcut;

struct ds__vgroup_shared {
    uint32_t magic;
    uint32_t layout; /* sizeof(struct ds__vgroup_shared) of its creator */
    _Atomic uint32_t state;
    uint32_t ranks;
    pthread_mutex_t mu;
    char name[DS_VCTX_GROUP_NAME_MAX + 1];
    _Atomic uint32_t rank_state[DS_VCTX_GROUP_MAX_RANKS];
    _Atomic int32_t pid[DS_VCTX_GROUP_MAX_RANKS];
    _Atomic uint64_t done[DS_VCTX_GROUP_MAX_RANKS]; /* units published (rank 0) or followed */
    /* rank 0's pool, written before its rank_state turns JOINED */
    uint32_t pool_n, pool_full;
    uint32_t pool_sms[DS_MAX_PCTX];
    uint32_t pool_anchor[DS_MAX_PCTX];
    vslot slot[DS__VGROUP_RING];
    _Atomic uint32_t cut_next; /* rank 0 */
    vcut cut[CUTS];
};
typedef struct ds__vgroup_shared vshared;

/* ------------------------------------------------------------------------ */
/* the process's groups                                                      */

typedef struct entry {
    struct entry *next;
    vshared *g;
    uint32_t refs;
} entry;

static pthread_mutex_t g_table_mu = PTHREAD_MUTEX_INITIALIZER;
static entry *g_table;

static int name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > DS_VCTX_GROUP_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return 0;
    }
    return 1;
}

static int mutex_init(pthread_mutex_t *mu)
{
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a))
        return -1;
    int r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!r)
        r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!r)
        r = pthread_mutex_init(mu, &a);
    pthread_mutexattr_destroy(&a);
    return r ? -1 : 0;
}

/* Locks a group's mutex; a holder that died left it consistent enough
 * (every field it guards is written in one store). */
static void group_lock(vshared *g)
{
    if (pthread_mutex_lock(&g->mu) == EOWNERDEAD)
        pthread_mutex_consistent(&g->mu);
}

static void shared_init(vshared *g, const char *name, uint32_t ranks)
{
    g->layout = (uint32_t)sizeof *g;
    g->ranks = ranks;
    snprintf(g->name, sizeof g->name, "%s", name);
    g->magic = SH_MAGIC;
}

/* ------------------------------------------------------------------------ */
/* liveness                                                                  */

/* Has rank r gone (left; with `probe`, or its process died: a system call,
 * made only while waiting)? Marks a dead process's rank as left, so that
 * the next look is one load. */
static int rank_gone(vshared *g, uint32_t r, int probe)
{
    uint32_t s = atomic_load_explicit(&g->rank_state[r], memory_order_acquire);
    if (s == RANK_LEFT)
        return 1;
    if (s != RANK_JOINED || !probe)
        return 0;
    pid_t pid = atomic_load_explicit(&g->pid[r], memory_order_relaxed);
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
        uint32_t joined = RANK_JOINED;
        if (atomic_compare_exchange_strong(&g->rank_state[r], &joined, RANK_LEFT))
            ds__log(DS_LOG_WARN, "vCtx group '%s': the process of rank %u (pid %d) died", g->name, r, (int)pid);
        return 1;
    }
    return 0;
}

/* A pause in a wait on another rank: wall time (the ranks' devices have
 * clocks of their own), short at first. */
static void pause_wait(uint32_t *spins)
{
    if (++*spins < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, *spins < 1024 ? 20000 : 200000};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------ */
/* join / leave                                                              */

/* Under g->mu: may `rank` join? Resets a group whose every member has gone
 * (a shared group left behind by processes that died). */
static ds_status admit(vshared *g, const char *name, uint32_t rank, uint32_t ranks, int shared)
{
    uint32_t live = 0, gone = 0, first_gone = 0;
    for (uint32_t r = 0; r < g->ranks; r++) {
        uint32_t s = atomic_load(&g->rank_state[r]);
        if (s == RANK_JOINED && !rank_gone(g, r, shared))
            live++;
        else if (s != RANK_FREE && !gone++)
            first_gone = r;
    }
    if (gone && !live) { /* what is left is a dead group's: start afresh */
        for (uint32_t r = 0; r < g->ranks; r++) {
            atomic_store(&g->rank_state[r], RANK_FREE);
            atomic_store(&g->done[r], 0);
        }
        for (uint32_t i = 0; i < DS__VGROUP_RING; i++)
            atomic_store(&g->slot[i].seq, 0);
        g->ranks = ranks;
        ds__log(DS_LOG_INFO, "vCtx group '%s': every earlier member had gone; starting it afresh", name);
        gone = 0;
    }
    if (g->ranks != ranks)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "vCtx group '%s' has %u ranks, ds_vctx_attr.group_ranks is %u", name,
                        g->ranks, ranks);
    if (gone)
        return ds__fail(DS_ERR_PEER_LOST,
                        "vCtx group '%s': rank %u has left or died; destroy the other ranks' vCtxs before the "
                        "name is used again",
                        name, first_gone);
    if (atomic_load(&g->rank_state[rank]) == RANK_JOINED)
        return ds__fail(DS_ERR_ALREADY_EXISTS, "vCtx group '%s': rank %u has joined already", name, rank);
    return DS_SUCCESS;
}

/* Under g->mu: makes v rank `rank` of g. */
static void enter(struct ds_vctx *v, vshared *g, uint32_t rank)
{
    if (rank == 0) {
        const struct ds_runtime *rt = v->rt;
        g->pool_n = rt->num_pctx;
        g->pool_full = rt->full_pctx;
        for (uint32_t i = 0; i < rt->num_pctx; i++) {
            g->pool_sms[i] = rt->pctx[i].sm_count;
            g->pool_anchor[i] = (uint32_t)rt->pctx[i].anchor;
        }
    }
    atomic_store(&g->done[rank], 0);
    atomic_store(&g->pid[rank], (int32_t)getpid());
    atomic_store_explicit(&g->rank_state[rank], RANK_JOINED, memory_order_release);
}

static ds_status join_local(struct ds_vctx *v, const char *name, uint32_t rank, uint32_t ranks)
{
    pthread_mutex_lock(&g_table_mu);
    entry *e = g_table;
    while (e && strcmp(e->g->name, name) != 0)
        e = e->next;
    int created = 0;
    if (!e) {
        e = ds__calloc(1, sizeof *e);
        vshared *g = e ? ds__calloc(1, sizeof *g) : NULL;
        if (!g || mutex_init(&g->mu)) {
            ds__free(g);
            ds__free(e);
            pthread_mutex_unlock(&g_table_mu);
            return ds__fail(DS_ERR_OUT_OF_MEMORY, "vCtx group '%s': %zu bytes", name, sizeof *g);
        }
        shared_init(g, name, ranks);
        e->g = g;
        e->next = g_table;
        g_table = e;
        created = 1;
    }
    group_lock(e->g);
    ds_status st = admit(e->g, name, rank, ranks, 0);
    if (st == DS_SUCCESS) {
        enter(v, e->g, rank);
        e->refs++;
        v->grp.g = e->g;
        v->grp.entry = e;
    }
    pthread_mutex_unlock(&e->g->mu);
    if (st != DS_SUCCESS && created) {
        g_table = e->next;
        pthread_mutex_destroy(&e->g->mu);
        ds__free(e->g);
        ds__free(e);
    }
    pthread_mutex_unlock(&g_table_mu);
    return st;
}

static void shm_name(char *out, size_t n, const char *name) { snprintf(out, n, "/detshare.vgroup.%s", name); }

/* Maps the shared group `name`, creating it if it does not exist. */
static ds_status map_shared(const char *name, uint32_t ranks, vshared **out)
{
    char path[96];
    shm_name(path, sizeof path, name);
    size_t size = sizeof(vshared);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    int creator = fd >= 0;
    if (!creator && errno == EEXIST)
        fd = shm_open(path, O_RDWR, 0600);
    if (fd < 0)
        return ds__fail(DS_ERR_NOT_SUPPORTED, "vCtx group '%s': shm_open(%s): %s", name, path, strerror(errno));
    double deadline = ds__wall_ms() + INIT_WAIT_MS;
    if (creator) {
        if (ftruncate(fd, (off_t)size) != 0) {
            int e = errno;
            close(fd);
            shm_unlink(path);
            return ds__fail(DS_ERR_OUT_OF_MEMORY, "vCtx group '%s': ftruncate(%zu): %s", name, size, strerror(e));
        }
    } else { /* its creator may not have sized it yet */
        struct stat sb;
        uint32_t spins = 0;
        while (fstat(fd, &sb) == 0 && (size_t)sb.st_size < size && ds__wall_ms() < deadline)
            pause_wait(&spins);
        if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != size) {
            close(fd);
            return ds__fail(DS_ERR_INVALID_ARGUMENT,
                            "vCtx group '%s': %s is %lld bytes, this library's groups are %zu (another version of "
                            "libdetshare, or a creator that died: remove it)",
                            name, path, (long long)sb.st_size, size);
        }
    }
    vshared *g = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (g == MAP_FAILED)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "vCtx group '%s': mmap: %s", name, strerror(errno));
    if (creator) {
        if (mutex_init(&g->mu)) {
            munmap(g, size);
            shm_unlink(path);
            return ds__fail(DS_ERR_NOT_SUPPORTED, "vCtx group '%s': no process-shared robust mutex", name);
        }
        shared_init(g, name, ranks);
        atomic_store_explicit(&g->state, SH_READY, memory_order_release);
    } else {
        uint32_t spins = 0;
        while (atomic_load_explicit(&g->state, memory_order_acquire) == 0 && ds__wall_ms() < deadline)
            pause_wait(&spins);
        if (atomic_load_explicit(&g->state, memory_order_acquire) == 0 || g->magic != SH_MAGIC ||
            g->layout != size) {
            munmap(g, size);
            return ds__fail(DS_ERR_TIMEOUT,
                            "vCtx group '%s': %s was never initialised (its creator died?): remove it", name, path);
        }
    }
    *out = g;
    return DS_SUCCESS;
}

static ds_status join_shared(struct ds_vctx *v, const char *name, uint32_t rank, uint32_t ranks)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        vshared *g = NULL;
        DS__TRY(map_shared(name, ranks, &g));
        group_lock(g);
        if (atomic_load(&g->state) == SH_RETIRED) { /* its last member is unlinking it: open anew */
            pthread_mutex_unlock(&g->mu);
            munmap(g, sizeof *g);
            sched_yield();
            continue;
        }
        ds_status st = admit(g, name, rank, ranks, 1);
        if (st == DS_SUCCESS) {
            enter(v, g, rank);
            v->grp.g = g;
            v->grp.shared = 1;
        }
        pthread_mutex_unlock(&g->mu);
        if (st != DS_SUCCESS)
            munmap(g, sizeof *g);
        return st;
    }
    return ds__fail(DS_ERR_BUSY, "vCtx group '%s': retired under us eight times", name);
}

ds_status ds__vgroup_join(struct ds_vctx *v, const char *name, uint32_t rank, uint32_t ranks, uint32_t flags)
{
    if (!name_ok(name))
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_vctx_attr.group '%s': 1 to %u characters of A-Z a-z 0-9 _ - .", name,
                        DS_VCTX_GROUP_NAME_MAX);
    if (ranks < 2 || ranks > DS_VCTX_GROUP_MAX_RANKS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "vCtx group '%s': group_ranks %u, expected 2 to %u", name, ranks,
                        DS_VCTX_GROUP_MAX_RANKS);
    if (rank >= ranks)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "vCtx group '%s': group_rank %u, expected 0 to %u", name, rank,
                        ranks - 1);
    if (flags & ~(uint32_t)DS_VCTX_GROUP_SHARED)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "vCtx group '%s': unknown group_flags 0x%x", name, flags);
    v->grp.rank = rank;
    ds_status st = flags & DS_VCTX_GROUP_SHARED ? join_shared(v, name, rank, ranks) : join_local(v, name, rank, ranks);
    if (st == DS_SUCCESS)
        ds__log(DS_LOG_DEBUG, "vCtx '%s' is rank %u of %u of group '%s'%s", v->name, rank, ranks, name,
                v->grp.shared ? " (shared across processes)" : "");
    return st;
}

void ds__vgroup_leave(struct ds_vctx *v)
{
    vshared *g = v->grp.g;
    if (!g)
        return;
    if (v->grp.shared) {
        group_lock(g);
        atomic_store_explicit(&g->rank_state[v->grp.rank], RANK_LEFT, memory_order_release);
        /* the last live member removes it (ranks whose processes died never
         * leave) */
        uint32_t live = 0;
        for (uint32_t r = 0; r < g->ranks; r++)
            live += atomic_load(&g->rank_state[r]) == RANK_JOINED && !rank_gone(g, r, 1);
        if (!live) {
            char path[96];
            shm_name(path, sizeof path, g->name);
            atomic_store(&g->state, SH_RETIRED);
            shm_unlink(path);
        }
        pthread_mutex_unlock(&g->mu);
        munmap(g, sizeof *g);
    } else {
        pthread_mutex_lock(&g_table_mu);
        entry *e = v->grp.entry;
        group_lock(g);
        atomic_store_explicit(&g->rank_state[v->grp.rank], RANK_LEFT, memory_order_release);
        pthread_mutex_unlock(&g->mu);
        if (--e->refs == 0) {
            for (entry **p = &g_table; *p; p = &(*p)->next)
                if (*p == e) {
                    *p = e->next;
                    break;
                }
            pthread_mutex_destroy(&g->mu);
            ds__free(g);
            ds__free(e);
        }
        pthread_mutex_unlock(&g_table_mu);
    }
    v->grp.g = NULL;
}

/* ------------------------------------------------------------------------ */
/* the decision ring                                                         */

static void add_ms(_Atomic double *c, double by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by, memory_order_relaxed);
}

static const char *kind_name(uint32_t k)
{
    return k == DS__VGROUP_KERNEL ? "a kernel" : k == DS__VGROUP_SECTION ? "a section" : "a graph segment";
}

ds_status ds__vgroup_room(struct ds_vctx *v, const char *fn)
{
    vshared *g = v->grp.g;
    const uint64_t k = DS__LD(v->grp.unit);
    double t0 = -1;
    for (uint32_t r = 1; r < g->ranks; r++) {
        uint32_t spins = 0;
        for (;;) {
            uint64_t done = atomic_load_explicit(&g->done[r], memory_order_acquire);
            if (rank_gone(g, r, v->grp.shared && t0 >= 0)) {
                if (done > k)
                    break; /* it followed unit k before it went */
                return ds__fail(DS_ERR_PEER_LOST,
                                "%s('%s'): vCtx group '%s': rank %u left after %llu units; unit %llu would have "
                                "no follower",
                                fn, v->name, g->name, r, (unsigned long long)done, (unsigned long long)k);
            }
            /* a rank that has not joined yet: the group starts when all have */
            int joined = atomic_load_explicit(&g->rank_state[r], memory_order_acquire) == RANK_JOINED;
            if (joined && done + DS__VGROUP_RING > k)
                break;
            if (t0 < 0)
                t0 = ds__wall_ms();
            else if (ds__wall_ms() - t0 > v->rt->teardown_timeout_ms) {
                if (!joined)
                    return ds__fail(DS_ERR_TIMEOUT, "%s('%s'): vCtx group '%s': rank %u has not joined within %u ms",
                                    fn, v->name, g->name, r, v->rt->teardown_timeout_ms);
                return ds__fail(DS_ERR_TIMEOUT,
                                "%s('%s'): vCtx group '%s': rank %u has followed %llu units, rank 0 is at unit "
                                "%llu, and it has not moved for %u ms",
                                fn, v->name, g->name, r, (unsigned long long)done, (unsigned long long)k,
                                v->rt->teardown_timeout_ms);
            }
            pause_wait(&spins);
        }
    }
    if (t0 >= 0)
        add_ms(&v->grp.wait_ms, ds__wall_ms() - t0);
    return DS_SUCCESS;
}

void ds__vgroup_publish(struct ds_vctx *v, uint32_t kind)
{
    vshared *g = v->grp.g;
    const uint64_t k = DS__LD(v->grp.unit);
    DS__ST(v->grp.unit, k + 1);
    vslot *s = &g->slot[k % DS__VGROUP_RING];
    uint32_t b = DS__LD(v->bound);
    atomic_store_explicit(&s->pctx, DS__BIND_PCTX(b), memory_order_relaxed);
    atomic_store_explicit(&s->urgent, DS__BIND_URGENT(b), memory_order_relaxed);
    atomic_store_explicit(&s->window_us, atomic_load_explicit(&v->window_us, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&s->gate_us, atomic_load_explicit(&v->gate.interval_us, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&s->kind, kind, memory_order_relaxed);
    atomic_store_explicit(&s->seq, k + 1, memory_order_release);
    atomic_store_explicit(&g->done[0], k + 1, memory_order_release);
}

/* Rank 0's pCtx i as this runtime's: the same SMs and anchor, else the same
 * SMs, else the nearest SM count (fewer on a tie). */
static void build_map(struct ds_vctx *v)
{
    const vshared *g = v->grp.g;
    const struct ds_runtime *rt = v->rt;
    for (uint32_t i = 0; i < g->pool_n && i < DS_MAX_PCTX; i++) {
        uint32_t best = rt->full_pctx, best_score = UINT32_MAX;
        if (i == g->pool_full) {
            v->grp.map[i] = (uint8_t)rt->full_pctx;
            continue;
        }
        for (uint32_t j = 0; j < rt->num_pctx; j++) {
            uint32_t a = g->pool_sms[i], b = rt->pctx[j].sm_count;
            uint32_t score = (a > b ? a - b : b - a) * 4u + (b > a) * 2u + (g->pool_anchor[i] != (uint32_t)rt->pctx[j].anchor);
            if (score < best_score) {
                best_score = score;
                best = j;
            }
        }
        v->grp.map[i] = (uint8_t)best;
    }
    v->grp.map_ready = 1;
}

ds_status ds__vgroup_follow(struct ds_vctx *v, uint32_t kind, const char *fn)
{
    vshared *g = v->grp.g;
    const uint64_t k = DS__LD(v->grp.unit);
    vslot *s = &g->slot[k % DS__VGROUP_RING];
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != k + 1) {
        double t0 = ds__wall_ms();
        uint32_t spins = 0;
        while (atomic_load_explicit(&s->seq, memory_order_acquire) != k + 1) {
            if (rank_gone(g, 0, v->grp.shared) && atomic_load_explicit(&s->seq, memory_order_acquire) != k + 1)
                return ds__fail(DS_ERR_PEER_LOST,
                                "%s('%s'): vCtx group '%s': rank 0 left after deciding %llu units; unit %llu of "
                                "rank %u has no decision",
                                fn, v->name, g->name,
                                (unsigned long long)atomic_load_explicit(&g->done[0], memory_order_relaxed),
                                (unsigned long long)k, v->grp.rank);
            if (ds__wall_ms() - t0 > v->rt->teardown_timeout_ms)
                return ds__fail(DS_ERR_TIMEOUT,
                                "%s('%s'): vCtx group '%s': rank 0 has not decided unit %llu within %u ms (it has "
                                "decided %llu)",
                                fn, v->name, g->name, (unsigned long long)k, v->rt->teardown_timeout_ms,
                                (unsigned long long)atomic_load_explicit(&g->done[0], memory_order_relaxed));
            pause_wait(&spins);
        }
        add_ms(&v->grp.wait_ms, ds__wall_ms() - t0);
    }
    if (DS__UNLIKELY(!v->grp.map_ready))
        build_map(v);
    uint32_t p = atomic_load_explicit(&s->pctx, memory_order_relaxed);
    uint32_t urgent = atomic_load_explicit(&s->urgent, memory_order_relaxed);
    uint32_t window = atomic_load_explicit(&s->window_us, memory_order_relaxed);
    uint32_t gate = atomic_load_explicit(&s->gate_us, memory_order_relaxed);
    uint32_t theirs = atomic_load_explicit(&s->kind, memory_order_relaxed);
    atomic_store_explicit(&g->done[v->grp.rank], k + 1, memory_order_release); /* the slot is free again */
    DS__ST(v->grp.unit, k + 1);
    v->grp.theirs = theirs;
    if (DS__UNLIKELY(theirs != kind) && !v->grp.told) {
        v->grp.told = 1;
        ds__log(DS_LOG_WARN,
                "vCtx group '%s': rank %u's unit %llu is %s, rank 0's was %s: the ranks launch different "
                "sequences of units (their tiers still follow unit indices; said once)",
                g->name, v->grp.rank, (unsigned long long)k, kind_name(kind), kind_name(theirs));
    }
    uint32_t local = p < DS_MAX_PCTX ? v->grp.map[p] : v->rt->full_pctx;
    atomic_store_explicit(&v->window_us, window, memory_order_relaxed);
    ds__gate_interval_set(&v->gate, v->rt->gates.mode == DS_GATES_OFF ? DS_GATES_NONE : gate);
    atomic_store_explicit(&v->pending, DS__BIND(local, urgent), memory_order_release);
    return DS_SUCCESS;
}

void ds__vgroup_skip(struct ds_vctx *v)
{
    const uint64_t k = DS__LD(v->grp.unit);
    atomic_store_explicit(&v->grp.g->done[v->grp.rank], k + 1, memory_order_release);
    DS__ST(v->grp.unit, k + 1);
}

/* ------------------------------------------------------------------------ */
/* graph cuts                                                                */

static uint64_t cut_key(uint32_t ordinal, uint32_t measure) { return ((uint64_t)ordinal << 32 | measure) + 1; }

void ds__vgroup_cut_publish(struct ds_vctx *v, uint32_t ordinal, uint32_t measure, const uint32_t *cut, uint32_t ncut,
                            uint32_t natoms)
{
    vshared *g = v->grp.g;
    if (ncut > DS_GRAPH_MAX_SEGMENTS || natoms > UINT16_MAX)
        ncut = 0; /* cannot be told: the others cut their own */
    uint32_t i = atomic_fetch_add_explicit(&g->cut_next, 1, memory_order_relaxed) % CUTS;
    vcut *e = &g->cut[i];
    atomic_store_explicit(&e->tag, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&e->natoms, natoms, memory_order_relaxed);
    atomic_store_explicit(&e->ncut, ncut, memory_order_relaxed);
    for (uint32_t k = 0; k < ncut; k++)
        atomic_store_explicit(&e->first[k], (uint16_t)cut[k], memory_order_relaxed);
    atomic_store_explicit(&e->tag, cut_key(ordinal, measure), memory_order_release);
}

/* Copies entry e if it holds `key`: its ncut, or -1 (another key, or
 * rewritten while copied). */
static int64_t cut_copy(vcut *e, uint64_t key, uint32_t *natoms, uint32_t cap, uint32_t *cut)
{
    if (atomic_load_explicit(&e->tag, memory_order_acquire) != key)
        return -1;
    uint32_t n = atomic_load_explicit(&e->ncut, memory_order_relaxed);
    *natoms = atomic_load_explicit(&e->natoms, memory_order_relaxed);
    if (n > cap)
        n = 0; /* more segments than this rank has atoms: not this graph */
    for (uint32_t k = 0; k < n; k++)
        cut[k] = atomic_load_explicit(&e->first[k], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&e->tag, memory_order_relaxed) == key ? (int64_t)n : -1;
}

uint32_t ds__vgroup_cut_wait(struct ds_vctx *v, const char *graph, uint32_t ordinal, uint32_t measure,
                             uint32_t natoms, uint32_t *cut)
{
    vshared *g = v->grp.g;
    if (v->grp.theirs != DS__VGROUP_GRAPH) {
        ds__log(DS_LOG_WARN, "vCtx group '%s': rank %u measures graph '%s' where rank 0 ran %s: cut from its own times",
                g->name, v->grp.rank, graph, kind_name(v->grp.theirs));
        return 0;
    }
    const uint64_t key = cut_key(ordinal, measure);
    const uint32_t mine = v->grp.cuts++; /* rank 0's publish of this cut, counted the same way */
    double t0 = ds__wall_ms();
    uint32_t spins = 0, theirs_atoms = 0;
    const char *why = NULL;
    char ahead[128];
    int64_t n = -1;
    for (;;) {
        for (uint32_t i = 0; i < CUTS && n < 0; i++)
            n = cut_copy(&g->cut[i], key, &theirs_atoms, natoms, cut);
        if (n >= 0)
            break;
        if (rank_gone(g, 0, v->grp.shared)) {
            for (uint32_t i = 0; i < CUTS && n < 0; i++) /* published before it went? */
                n = cut_copy(&g->cut[i], key, &theirs_atoms, natoms, cut);
            if (n < 0)
                why = "rank 0 left before it published";
            break;
        }
        /* the table holds the last CUTS cuts: once rank 0 has published
         * CUTS more after this one, its entry is gone, and waiting out the
         * timeout would only stall this rank */
        uint32_t published = atomic_load_explicit(&g->cut_next, memory_order_acquire);
        if (published > mine && published - mine > CUTS) {
            snprintf(ahead, sizeof ahead,
                     "rank 0 has published %u cuts since, more than the table holds (%u): it was overwritten",
                     published - mine - 1, CUTS);
            why = ahead;
            break;
        }
        if (ds__wall_ms() - t0 > v->rt->teardown_timeout_ms) {
            why = "rank 0 published none within the teardown timeout (it may launch other graphs)";
            break;
        }
        pause_wait(&spins);
    }
    add_ms(&v->grp.wait_ms, ds__wall_ms() - t0);
    if (n > 0 && theirs_atoms != natoms) {
        why = "rank 0's step has other cut points (another graph?)";
        n = -1;
    } else if (n == 0) {
        why = "rank 0 made none";
        n = -1;
    }
    if (n < 0) {
        ds__log(DS_LOG_WARN, "vCtx group '%s': rank %u's graph '%s' (graph %u of its vCtx, measuring step %u) is cut "
                             "from its own times: %s",
                g->name, v->grp.rank, graph, ordinal + 1, measure + 1, why);
        return 0;
    }
    return (uint32_t)n;
}
