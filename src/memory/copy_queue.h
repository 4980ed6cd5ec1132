/*
 * Copy arbiter for the host<->device link: weighted fair
 * queueing of chunked copies between vCtxs, latency-sensitive copies first.
 *
 * Driven by the runtime's copy scheduler thread (core/copy.c), which puts
 * the chunks it picks on the link one at a time.
 *
 * Algorithm: start-time fair queueing (Goyal, Vin, Cheng, "Start-time Fair
 * Queuing", SIGCOMM 1996) over fixed-size chunks. Each backlogged BE tenant's
 * head chunk has a start tag S = max(V, F_prev) and finish tag F = S +
 * len / weight; the chunk with the least start tag goes next and V becomes
 * its start tag. Over any window in which tenants stay backlogged, each gets
 * a share of the link's bytes proportional to its weight, within one chunk.
 * LS tenants are served before any BE tenant (strict priority, FIFO among
 * them by submission); an LS copy waits for at most one BE chunk already on
 * the link. While any LS tenant is registered, BE chunks are at most
 * ls_chunk_bytes (512 KiB: a 2 MiB chunk on the link lasts longer than a
 * 1 MiB LS copy itself; docs/results/h200/NOTES.md and docs/results/h200/memory.json
 * have the figures); without one, chunk_bytes (2 MiB), which wastes less of
 * the link between chunks.
 *
 * Thread-safety: none inside; the caller (the copy scheduler) serialises.
 */
#ifndef DS_MEMORY_COPY_QUEUE_H
#define DS_MEMORY_COPY_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#define DS__COPYQ_MAX_TENANTS 64
#define DS__COPYQ_CHUNK_DEFAULT ((uint64_t)2 << 20)
#define DS__COPYQ_LS_CHUNK_DEFAULT ((uint64_t)512 << 10)

typedef struct ds__copy_req {
    struct ds__copy_req *next;
    uint64_t bytes;   /* total */
    uint64_t offset;  /* bytes already handed out as chunks */
    double submit_us;
    double ready_us;  /* when its next chunk could have started */
    uint64_t seq;     /* submission order (LS FIFO) */
    void *user;
} ds__copy_req;

typedef struct ds__copyq_tenant {
    int live;
    int ls;
    uint32_t weight;
    double finish; /* F of its last chunk (virtual time) */
    ds__copy_req *head, *tail;
    uint64_t bytes_moved, chunks;
    double wait_us; /* summed time chunks were ready but not on the link */
} ds__copyq_tenant;

typedef struct ds__copyq {
    ds__copyq_tenant t[DS__COPYQ_MAX_TENANTS];
    double vtime;
    uint64_t chunk_bytes;
    uint64_t ls_chunk_bytes; /* BE chunk cap while an LS tenant is registered */
    uint32_t ls_tenants;
    uint64_t seq;
} ds__copyq;

/* One chunk handed to the link. */
typedef struct ds__copy_chunk {
    int tenant;
    ds__copy_req *req;
    uint64_t offset, len;
    int last; /* the request is complete once this chunk is */
} ds__copy_chunk;

/* chunk_bytes 0 = 2 MiB; the LS-present BE cap is min(512 KiB, chunk_bytes). */
void ds__copyq_init(ds__copyq *q, uint64_t chunk_bytes);
/* Registers a tenant: its id (>= 0), or -1 when the table is full. */
int ds__copyq_tenant_add(ds__copyq *q, uint32_t weight, int ls);
/* Drops a tenant with no queued request: 0, or -1 when it has some. */
int ds__copyq_tenant_remove(ds__copyq *q, int tenant);
/* Unqueues every request of a tenant (teardown); returns their list. */
ds__copy_req *ds__copyq_tenant_cancel(ds__copyq *q, int tenant);
void ds__copyq_set_weight(ds__copyq *q, int tenant, uint32_t weight);
/* Queues req (bytes >= 1, filled by the caller; next/offset are reset). */
void ds__copyq_submit(ds__copyq *q, int tenant, ds__copy_req *req, double now_us);
/* Picks the next chunk at time now_us: 1 and *out, or 0 when idle.
 * bytes_per_us is the link's bandwidth (bytes per us), used to know when the
 * request's next chunk could start, for the wait accounting (wait_us). */
int ds__copyq_next(ds__copyq *q, double now_us, double bytes_per_us, ds__copy_chunk *out);

#endif /* DS_MEMORY_COPY_QUEUE_H */
