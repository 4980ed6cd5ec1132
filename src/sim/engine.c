/*
 * The simulated device's engine: device registry, handle tables, the clock,
 * the block scheduler, waits, memory and the kernel trace (engine.h). It calls
 * nothing of the driver face (driver_sim*.c), which is built on it.
 *
 * Model (see detshare/sim.h and docs/design.md, section 5):
 *  - Each SM has DS__SIM_SM_UNITS (8) capacity units; a block of a kernel with
 *    blocks_per_sm = o takes 8 / o of them for block_us.
 *  - A stream is a FIFO of ops that run strictly in order. The kernel at the
 *    head of its stream is "activated" and joins the active list, ordered by
 *    stream priority (numerically lower first) and then activation order.
 *  - Dispatch walks the active list in that order; each kernel places as many
 *    blocks as fit on the free SMs of its stream's SM set, lowest SM first. A
 *    kernel stays in the list (ahead of later ones) until all its blocks are
 *    out: this is the head-of-line blocking of same-priority streams. A later
 *    kernel may still use SMs (or capacity left on an SM) the earlier ones
 *    cannot use.
 *  - Blocks of one kernel dispatched in one instant end together: they form
 *    one batch in a min-heap keyed by (end time, insertion order), so the
 *    simulation is deterministic and a saturated GPU costs one heap entry per
 *    kernel per wave, not one per block.
 *  - Processing an instant: complete every batch ending then (in insertion
 *    order), settle the streams (record events, release satisfied waits, write
 *    values, activate kernels; repeated until nothing changes), then dispatch.
 */
#include "seam/alloc.h"
#include "sim/engine.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "seam/log.h"

_Static_assert(sizeof(void *) == 8, "the simulated device encodes handles in 64-bit pointers");
_Static_assert(DS_MAX_SMS <= 65536, "batch entries keep SM ids in 16 bits");

/* ------------------------------------------------------------------------ */
/* Registry                                                                  */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER; /* a device's users reached 0 */
static sim_dev *g_dev[DS__SIM_MAX_DEVICES];
static uint64_t g_serial;
static uint32_t g_gen;

static uint32_t next_gen(void)
{
    uint32_t g;
    do {
        g = __atomic_add_fetch(&g_gen, 1u, __ATOMIC_RELAXED);
    } while (g == 0);
    return g;
}

/* ------------------------------------------------------------------------ */
/* Time                                                                      */
/* ------------------------------------------------------------------------ */

static struct timespec mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t;
}

static double ts_us(const struct timespec *t)
{
    return (double)t->tv_sec * 1e6 + (double)t->tv_nsec / 1e3;
}

static struct timespec ts_from_us(double us)
{
    struct timespec t;
    if (us < 0)
        us = 0;
    double s = floor(us / 1e6);
    t.tv_sec = (time_t)s;
    t.tv_nsec = (long)((us - s * 1e6) * 1e3);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec += 1;
        t.tv_nsec -= 1000000000L;
    }
    if (t.tv_nsec < 0)
        t.tv_nsec = 0;
    return t;
}

/* REALTIME: simulated time of the wall clock now. */
static double real_now(const sim_dev *d)
{
    struct timespec t = mono_now();
    return (ts_us(&t) - ts_us(&d->t0)) / d->cfg.time_scale;
}

/* REALTIME: wall deadline at which simulated time reaches t_us. */
static struct timespec wall_of(const sim_dev *d, double t_us)
{
    return ts_from_us(ts_us(&d->t0) + t_us * d->cfg.time_scale);
}

static int ts_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* ------------------------------------------------------------------------ */
/* Handles                                                                   */
/* ------------------------------------------------------------------------ */

uint64_t ds__sim_handle_new(sim_dev *d, unsigned kind, void *obj)
{
    uint32_t idx;
    if (d->h_free) {
        idx = d->h_free - 1;
        d->h_free = d->h[idx].next_free;
    } else {
        if (d->h_len == (1u << 20))
            return 0;
        if (d->h_len == d->h_cap) {
            uint32_t cap = d->h_cap ? d->h_cap * 2 : 64;
            sim_hentry *n = ds__realloc(d->h, (size_t)cap * sizeof *n);
            if (!n)
                return 0;
            d->h = n;
            d->h_cap = cap;
        }
        idx = d->h_len++;
    }
    sim_hentry *e = &d->h[idx];
    e->obj = obj;
    e->kind = kind;
    e->gen = next_gen();
    e->next_free = 0;
    return ((uint64_t)kind << 60) | ((uint64_t)(unsigned)d->slot << 52) | ((uint64_t)idx << 32) | e->gen;
}

static sim_hentry *handle_entry(const sim_dev *d, uint64_t h, unsigned kind)
{
    if (!h || sim_h_kind(h) != kind || sim_h_slot(h) != d->slot)
        return NULL;
    uint32_t idx = (uint32_t)((h >> 32) & 0xfffffu);
    if (idx >= d->h_len)
        return NULL;
    sim_hentry *e = &d->h[idx];
    if (e->kind != kind || e->gen != (uint32_t)h)
        return NULL;
    return e;
}

void *ds__sim_handle_get(const sim_dev *d, uint64_t h, unsigned kind)
{
    sim_hentry *e = handle_entry(d, h, kind);
    return e ? e->obj : NULL;
}

void ds__sim_handle_free(sim_dev *d, uint64_t h)
{
    sim_hentry *e = handle_entry(d, h, sim_h_kind(h));
    if (!e)
        return;
    e->obj = NULL;
    e->kind = SIM_H_FREE;
    e->gen = 0;
    e->next_free = d->h_free;
    d->h_free = (uint32_t)(e - d->h) + 1;
}

/* ------------------------------------------------------------------------ */
/* Trace                                                                     */
/* ------------------------------------------------------------------------ */

static ds_sim_kernel_record *trace_slot(const sim_dev *d, uint64_t seq)
{
    uint64_t idx = seq % d->cfg.trace_capacity;
    ds_sim_kernel_record *chunk = d->trace[idx / DS__SIM_TRACE_CHUNK];
    return chunk ? &chunk[idx % DS__SIM_TRACE_CHUNK] : NULL;
}

/* The record of kernel seq if it is still kept. */
static ds_sim_kernel_record *trace_rec(sim_dev *d, uint64_t seq)
{
    uint64_t cap = d->cfg.trace_capacity;
    if (!cap || !d->trace || seq < d->trace_first || seq >= d->trace_next || d->trace_next - seq > cap)
        return NULL;
    return trace_slot(d, seq);
}

/* Makes room for the records of the next n sequence numbers; CUDA_SUCCESS or
 * CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult trace_reserve_n(sim_dev *d, uint64_t n)
{
    uint64_t cap = d->cfg.trace_capacity;
    if (!cap)
        return CUDA_SUCCESS;
    size_t nchunks = (size_t)((cap + DS__SIM_TRACE_CHUNK - 1) / DS__SIM_TRACE_CHUNK);
    if (!d->trace && !(d->trace = ds__calloc(nchunks, sizeof *d->trace)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (n > cap)
        n = cap;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t idx = (d->trace_next + k) % cap;
        ds_sim_kernel_record **chunk = &d->trace[idx / DS__SIM_TRACE_CHUNK];
        if (!*chunk && !(*chunk = ds__calloc(DS__SIM_TRACE_CHUNK, sizeof **chunk)))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static CUresult trace_reserve(sim_dev *d)
{
    return trace_reserve_n(d, 1);
}

void ds__sim_trace_get(sim_dev *d, ds_sim_kernel_record *out, size_t cap, size_t *count)
{
    uint64_t first = d->trace_first;
    uint64_t keep = d->cfg.trace_capacity;
    if (d->trace_next > keep && d->trace_next - keep > first)
        first = d->trace_next - keep;
    size_t n = 0;
    for (uint64_t s = first; s < d->trace_next && n < cap; s++) {
        const ds_sim_kernel_record *r = trace_rec(d, s);
        if (r)
            out[n++] = *r;
    }
    *count = n;
}

int ds__sim_trace_since(sim_dev *d, uint64_t from, ds_sim_kernel_record *out, size_t cap,
                        size_t *count, uint64_t *next)
{
    uint64_t keep = d->cfg.trace_capacity;
    *count = 0;
    *next = d->trace_next;
    if (from < d->trace_first || (d->trace_next > keep && from < d->trace_next - keep))
        return from < d->trace_next ? -1 : 0;
    size_t n = 0;
    for (uint64_t s = from; s < d->trace_next && n < cap; s++) {
        const ds_sim_kernel_record *r = trace_rec(d, s);
        if (!r)
            return -1;
        out[n++] = *r;
    }
    *count = n;
    return 0;
}

void ds__sim_trace_clear(sim_dev *d)
{
    d->trace_first = d->trace_next;
}

/* ------------------------------------------------------------------------ */
/* SM capacity and the batch heap                                            */
/* ------------------------------------------------------------------------ */

static unsigned units_index(unsigned units)
{
    return units >= 8 ? 3 : units >= 4 ? 2 : units >= 2 ? 1 : 0;
}

static void sm_set_free(sim_dev *d, unsigned sm, unsigned f)
{
    d->free_units[sm] = (uint8_t)f;
    for (unsigned i = 0; i < 4; i++) {
        if (f >= (1u << i))
            sim_set_add(&d->avail[i], sm);
        else
            sim_set_del(&d->avail[i], sm);
    }
}

static int batch_before(const sim_batch *a, const sim_batch *b)
{
    return a->end_us < b->end_us || (a->end_us == b->end_us && a->order < b->order);
}

static int heap_push(sim_dev *d, sim_batch *b)
{
    if (d->heap_len == d->heap_cap) {
        size_t cap = d->heap_cap ? d->heap_cap * 2 : 256;
        sim_batch **n = ds__realloc(d->heap, cap * sizeof *n);
        if (!n)
            return 0;
        d->heap = n;
        d->heap_cap = cap;
    }
    size_t i = d->heap_len++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!batch_before(b, d->heap[p]))
            break;
        d->heap[i] = d->heap[p];
        i = p;
    }
    d->heap[i] = b;
    return 1;
}

static sim_batch *heap_pop(sim_dev *d)
{
    sim_batch *top = d->heap[0];
    sim_batch *last = d->heap[--d->heap_len];
    size_t n = d->heap_len, i = 0;
    while (n) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && batch_before(d->heap[c + 1], d->heap[c]))
            c++;
        if (!batch_before(d->heap[c], last))
            break;
        d->heap[i] = d->heap[c];
        i = c;
    }
    if (n)
        d->heap[i] = last;
    return top;
}

/* ------------------------------------------------------------------------ */
/* Streams and ops                                                           */
/* ------------------------------------------------------------------------ */

void ds__sim_einst_unref(sim_einst *e)
{
    if (e && --e->refs == 0)
        ds__free(e);
}

void ds__sim_op_free(sim_op *op)
{
    if (!op)
        return;
    ds__sim_einst_unref(op->inst);
    ds__free(op);
}

sim_stream *ds__sim_stream_new(sim_dev *d, sim_green *g, const sim_smset *mask, int prio)
{
    sim_stream *s = ds__calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->green = g;
    s->mask = *mask;
    s->priority = prio;
    s->prev = d->streams_tail;
    if (d->streams_tail)
        d->streams_tail->next = s;
    else
        d->streams_head = s;
    d->streams_tail = s;
    return s;
}

static void stream_free(sim_dev *d, sim_stream *s)
{
    if (s->capture)
        ds__sim_graph_free(d, s->capture); /* a capture never ended */
    ds__free(s);
}

static void stream_maybe_free(sim_dev *d, sim_stream *s)
{
    if (!s->released || s->head || s->waiters)
        return;
    if (s->prev)
        s->prev->next = s->next;
    else
        d->streams_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        d->streams_tail = s->prev;
    stream_free(d, s);
}

void ds__sim_stream_release(sim_dev *d, sim_stream *s)
{
    s->released = 1;
    stream_maybe_free(d, s);
}

int ds__sim_stream_busy(const sim_stream *s)
{
    return s->head != NULL;
}

static void stream_pop(sim_dev *d, sim_stream *s)
{
    sim_op *op = s->head;
    s->head = op->next;
    if (!s->head)
        s->tail = NULL;
    s->completed++;
    d->changed = 1;
    ds__sim_op_free(op);
}

static void activate(sim_dev *d, sim_op *op)
{
    op->activated = 1;
    op->act_seq = d->act_counter++;
    int prio = op->stream->priority;
    sim_op **link = &d->active;
    while (*link && (*link)->stream->priority <= prio)
        link = &(*link)->act_next;
    op->act_next = *link;
    *link = op;
}

static int value_satisfied(const sim_op *op)
{
    uint32_t v = __atomic_load_n(op->addr, __ATOMIC_ACQUIRE);
    switch (op->flags & 0x3u) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return (int32_t)(v - op->value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
        return v == op->value;
    case CU_STREAM_WAIT_VALUE_AND:
        return (v & op->value) != 0;
    default: /* CU_STREAM_WAIT_VALUE_NOR */
        return ~(v | op->value) != 0;
    }
}

/* Runs every zero-duration op that can run at `now`, activates kernels that
 * reached the head of their stream, until a pass changes nothing.
 * WAIT_VALUE32 ops look at memory only while *poll is set; a WRITE_VALUE32 op
 * sets it (see process_until). */
/* Resident control kernels: one pass each at the current instant, as the
 * device loop would (src/rck/rck_block.h). Returns 1 when a pass changed what
 * streams wait on (gate words mirrored) or a resident stopped. */
static void kernel_finish(sim_dev *d, sim_op *op, double end_us);

static int run_residents(sim_dev *d)
{
    if (d->fault || d->rck_stalled)
        return 0; /* a faulted context runs nothing, its RCK included */
    int changed = 0;
    uint64_t now_ns = (uint64_t)(d->now_us * 1e3);
    for (sim_op **link = &d->residents; *link;) {
        sim_op *op = *link;
        uint32_t gen = op->rck_st.gen;
        int stop = ds__rck_device_pass((volatile ds__rck_block *)(uintptr_t)op->rck_args[0],
                                       (volatile uint32_t *)(uintptr_t)op->rck_args[1],
                                       (const volatile uint32_t *)(uintptr_t)op->rck_args[2],
                                       (volatile uint32_t *)(uintptr_t)op->rck_args[3], &op->rck_st, now_ns);
        if (op->rck_st.gen != gen)
            changed = 1;
        if (!stop) {
            link = &op->res_next;
            continue;
        }
        *link = op->res_next;
        sm_set_free(d, op->res_sm, d->free_units[op->res_sm] + op->units);
        op->done = op->total;
        kernel_finish(d, op, d->now_us);
        changed = 1;
    }
    return changed;
}

static void settle(sim_dev *d, int *poll)
{
    int again;
    do {
        again = 0;
        if (d->residents && run_residents(d)) {
            *poll = 1; /* a device-side write, like WRITE_VALUE32's */
            again = 1;
        }
        sim_stream *s = d->streams_head;
        while (s) {
            sim_stream *next = s->next;
            while (s->head) {
                sim_op *op = s->head;
                if (op->kind == SIM_OP_KERNEL) {
                    if (!op->activated)
                        activate(d, op);
                    break;
                }
                if (op->kind == SIM_OP_RECORD) {
                    op->inst->done = 1;
                    op->inst->t_us = d->now_us;
                    again = 1;
                } else if (op->kind == SIM_OP_WAIT_EVENT) {
                    if (!op->inst->done)
                        break;
                } else if (op->kind == SIM_OP_WAIT_VALUE) {
                    if (!*poll || !value_satisfied(op))
                        break;
                } else if (op->kind == SIM_OP_COPY) {
                    /* instant in simulated time: the link is modelled by
                     * whoever paces the copies (core/copy.c) */
                    memcpy(op->dst, op->src, op->n);
                } else { /* SIM_OP_WRITE_VALUE */
                    __atomic_store_n(op->addr, op->value, __ATOMIC_RELEASE);
                    *poll = 1;
                    again = 1;
                }
                stream_pop(d, s);
            }
            if (!s->head)
                stream_maybe_free(d, s);
            s = next;
        }
    } while (again);
}

static void kernel_finish(sim_dev *d, sim_op *op, double end_us)
{
    ds_sim_kernel_record *r = trace_rec(d, op->seq);
    if (r)
        r->end_us = end_us;
    sim_stream *s = op->stream;
    /* ops of a stream run in order: a running kernel is its stream's head */
    if (s->head == op)
        stream_pop(d, s);
}

static void complete_batch(sim_dev *d, sim_batch *b)
{
    sim_op *op = b->op;
    for (uint32_t i = 0; i < b->n; i++) {
        unsigned sm = b->e[i].sm;
        sm_set_free(d, sm, d->free_units[sm] + (unsigned)b->e[i].count * op->units);
    }
    op->done += b->blocks;
    ds__free(b);
    if (op->done == op->total)
        kernel_finish(d, op, d->now_us);
}

/* A resident kernel's one block: the lowest SM of its stream with room; it
 * holds its units until the kernel stops (run_residents). */
static void dispatch_resident(sim_dev *d, sim_op *op)
{
    const sim_smset *avail = &d->avail[units_index(op->units)];
    for (unsigned w = 0; w < DS_MAX_SMS / 64; w++) {
        uint64_t bits = op->mask.w[w] & avail->w[w];
        if (!bits)
            continue;
        unsigned sm = w * 64 + (unsigned)__builtin_ctzll(bits);
        sm_set_free(d, sm, d->free_units[sm] - op->units);
        op->res_sm = sm;
        op->dispatched = op->total;
        op->started = 1;
        ds_sim_kernel_record *r = trace_rec(d, op->seq);
        if (r) {
            r->start_us = d->now_us;
            r->sm_mask[sm / 64] |= 1ull << (sm % 64);
        }
        op->res_next = d->residents;
        d->residents = op;
        d->changed = 1;
        return;
    }
}

/* Places as many blocks of op as fit, lowest SM first, as one batch. */
static void dispatch_kernel(sim_dev *d, sim_op *op)
{
    if (op->faults) {
        /* the first block faults: the context is poisoned (sticky) */
        d->fault = CUDA_ERROR_ILLEGAL_ADDRESS;
        d->fault_stream = op->stream->handle;
        d->changed = 1;
        ds_sim_kernel_record *fr = trace_rec(d, op->seq);
        if (fr)
            fr->start_us = d->now_us;
        return;
    }
    if (op->resident) {
        dispatch_resident(d, op);
        return;
    }
    unsigned u = op->units;
    const sim_smset *avail = &d->avail[units_index(u)];
    uint16_t sms[DS_MAX_SMS], counts[DS_MAX_SMS];
    uint32_t n = 0;
    uint64_t left = op->total - op->dispatched, blocks = 0;
    for (unsigned w = 0; w < DS_MAX_SMS / 64 && left; w++) {
        uint64_t bits = op->mask.w[w] & avail->w[w];
        while (bits && left) {
            unsigned sm = w * 64 + (unsigned)__builtin_ctzll(bits);
            bits &= bits - 1;
            uint64_t fit = d->free_units[sm] / u;
            uint64_t k = fit < left ? fit : left;
            sms[n] = (uint16_t)sm;
            counts[n] = (uint16_t)k;
            n++;
            blocks += k;
            left -= k;
        }
    }
    if (!n)
        return;
    sim_batch *b = ds__malloc(sizeof *b + n * sizeof b->e[0]);
    if (!b)
        return; /* out of memory: the blocks stay pending, retried later */
    b->end_us = d->now_us + op->block_us;
    b->order = d->batch_order++;
    b->op = op;
    b->blocks = blocks;
    b->n = n;
    for (uint32_t i = 0; i < n; i++) {
        b->e[i].sm = sms[i];
        b->e[i].count = counts[i];
    }
    if (!heap_push(d, b)) {
        ds__free(b);
        return;
    }
    ds_sim_kernel_record *r = trace_rec(d, op->seq);
    for (uint32_t i = 0; i < n; i++) {
        unsigned sm = sms[i];
        sm_set_free(d, sm, d->free_units[sm] - (unsigned)counts[i] * u);
        if (op->probe_bitmap)
            __atomic_fetch_or(&op->probe_bitmap[sm / 32], 1u << (sm % 32), __ATOMIC_RELAXED);
        if (r)
            r->sm_mask[sm / 64] |= 1ull << (sm % 64);
    }
    op->dispatched += blocks;
    if (!op->started) {
        op->started = 1;
        if (r)
            r->start_us = d->now_us;
    }
    d->changed = 1;
}

static void dispatch(sim_dev *d)
{
    if (d->fault)
        return; /* a faulted device runs nothing more */
    sim_op **link = &d->active;
    while (*link) {
        if (sim_set_empty(&d->avail[0]) || d->fault)
            return;
        sim_op *op = *link;
        dispatch_kernel(d, op);
        if (op->dispatched == op->total) {
            *link = op->act_next;
            op->act_next = NULL;
        } else {
            link = &op->act_next;
        }
    }
}

/* Processes everything that happens up to simulated time t, then sets the
 * clock to t (it never goes back).
 * Host memory that WAIT_VALUE32 ops watch is written by the host at some wall
 * time the simulator does not see. VIRTUAL: the host acts at `now`, so values
 * are polled at every instant. REALTIME: a host write is only known to have
 * happened by the wall time of this call, so values are polled at t, and at
 * earlier instants only once a simulated WRITE_VALUE32 has run in this call
 * (so device-side hand-offs keep their exact time). */
static void process_until(sim_dev *d, double t)
{
    int poll = d->cfg.clock == DS_SIM_CLOCK_VIRTUAL;
    settle(d, &poll);
    dispatch(d);
    while (d->heap_len && d->heap[0]->end_us <= t) {
        double te = d->heap[0]->end_us;
        if (te > d->now_us)
            d->now_us = te;
        while (d->heap_len && d->heap[0]->end_us == te)
            complete_batch(d, heap_pop(d));
        settle(d, &poll);
        dispatch(d);
    }
    if (t > d->now_us)
        d->now_us = t;
    if (!poll) {
        poll = 1;
        settle(d, &poll);
        dispatch(d);
    }
}

static void catch_up(sim_dev *d)
{
    double t = d->now_us;
    if (d->cfg.clock == DS_SIM_CLOCK_REALTIME) {
        double r = real_now(d);
        if (r > t)
            t = r;
    }
    process_until(d, t);
}

void ds__sim_kick(sim_dev *d)
{
    process_until(d, d->now_us);
}

void ds__sim_enqueue(sim_dev *d, sim_stream *s, sim_op *op)
{
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->enqueued++;
    d->changed = 1;
    ds__sim_kick(d);
}

/* ------------------------------------------------------------------------ */
/* Waits                                                                     */
/* ------------------------------------------------------------------------ */

static void timed_wait(sim_dev *d, const struct timespec *deadline)
{
    if (d->changed) {
        d->changed = 0;
        pthread_cond_broadcast(&d->cond);
    }
    int rc;
    do {
        rc = pthread_cond_timedwait(&d->cond, &d->mu, deadline);
    } while (rc == EINTR);
}

/* ------------------------------------------------------------------------ */
/* Turns                                                                     */
/* ------------------------------------------------------------------------ */
/*
 * With several host threads on one VIRTUAL device, "time moves when the host
 * waits" alone is not deterministic: whichever thread waits first moves the
 * clock for all, and threads acting at one instant interleave as the OS
 * schedules them. Threads that reserve a place in the turn order
 * (ds__sim_thread_reserve, then ds__sim_thread_attach on the thread itself)
 * run one at a time instead, a conservative discrete-event discipline:
 *  - A taking-part thread runs only while it holds the turn, and gives it up
 *    only by blocking in the simulator (a stream or event wait, a sleep, a
 *    launch's host cost) or by releasing its place.
 *  - The turn goes to the lowest place whose thread can go on at the current
 *    instant: just reserved, its sleep's end reached, its wait's condition
 *    met (or the device faulted or dying), or, for a thread that yielded
 *    (waiting on something of the host's, such as another taking-part
 *    thread's signal), once another thread has been given the turn since or
 *    the clock has moved. A turn back from a yield does not count as one
 *    given, so yielding threads never keep each other going at one instant. Places are numbered in the order
 *    they were reserved (the lowest free one), which is itself deterministic.
 *  - Only when no taking-part thread can go on does the clock move, to the
 *    next instant something happens: the earliest batch end or sleep end.
 * So what the threads see, and in which order they act, is a function of
 * the program and its inputs alone. Threads without a place still run
 * whenever they like; while any place is taken their waits never move the
 * clock (they wait, in wall time, for the taking-part threads to move it).
 * When every taking-part thread waits on something no simulated instant
 * brings (a value only a thread without a place will write), nobody holds the
 * turn and the waiters re-check every millisecond of wall time.
 */

static _Thread_local struct {
    uint64_t serial; /* device (its serial) the thread takes turns on, 0: none */
    int place;
} g_self;

/* The calling thread's place on d, -1 if it has none. */
static int self_place(const sim_dev *d)
{
    return g_self.serial && g_self.serial == d->serial ? g_self.place : -1;
}

static int thr_runnable(const sim_dev *d, const sim_thr *t)
{
    switch (t->state) {
    case SIM_THR_READY:
        return 1;
    case SIM_THR_SLEEP:
        return t->wake_us <= d->now_us || d->dying;
    case SIM_THR_WAIT:
        return d->fault != CUDA_SUCCESS || d->dying || t->cond(d, t->arg);
    case SIM_THR_YIELD:
        return d->grants != t->mark || d->now_us > t->since_us || d->dying;
    default:
        return 0;
    }
}

/* Gives the turn to the lowest place that can go on, moving the clock to
 * the next instant while none can. */
static void turn_pass(sim_dev *d)
{
    for (;;) {
        for (int i = 0; i < DS__SIM_MAX_TURNS; i++) {
            if (thr_runnable(d, &d->thr[i])) {
                if (d->thr[i].state != SIM_THR_YIELD)
                    d->grants++;
                d->thr[i].state = SIM_THR_RUN;
                d->turn = i;
                pthread_cond_signal(&d->thr[i].cv);
                return;
            }
        }
        double next = INFINITY;
        if (d->heap_len)
            next = d->heap[0]->end_us;
        for (int i = 0; i < DS__SIM_MAX_TURNS; i++)
            if (d->thr[i].state == SIM_THR_SLEEP && d->thr[i].wake_us < next)
                next = d->thr[i].wake_us;
        if (!isfinite(next)) {
            d->turn = -1;
            return;
        }
        process_until(d, next);
    }
}


/* Waits (the lock dropped) until it is place p's turn or the device dies.
 * While nobody's turn it is, re-checks every millisecond of wall time. */
static void wait_turn(sim_dev *d, int p)
{
    if (d->turn < 0)
        turn_pass(d);
    while (d->turn != p && !d->dying) {
        if (d->turn < 0) {
            struct timespec now = mono_now();
            struct timespec deadline = ts_from_us(ts_us(&now) + 1000.0);
            int rc;
            do {
                rc = pthread_cond_timedwait(&d->thr[p].cv, &d->mu, &deadline);
            } while (rc == EINTR);
            if (d->turn < 0)
                turn_pass(d);
        } else {
            pthread_cond_wait(&d->thr[p].cv, &d->mu);
        }
    }
    d->thr[p].state = SIM_THR_RUN;
}

/* The caller (place p, holding the turn) has set its SLEEP, WAIT or YIELD
 * state: passes the turn on and returns once it is p's again. */
static void turn_block(sim_dev *d, int p)
{
    if (d->turn == p)
        d->turn = -1;
    if (d->changed) { /* threads without a place may be waiting on it */
        d->changed = 0;
        pthread_cond_broadcast(&d->cond);
    }
    turn_pass(d);
    wait_turn(d, p);
}

/* The calling thread's sleep until t_us under the turns (p its place). */
static void turn_sleep(sim_dev *d, int p, double t_us)
{
    if (t_us <= d->now_us)
        return;
    d->thr[p].state = SIM_THR_SLEEP;
    d->thr[p].wake_us = t_us;
    turn_block(d, p);
}

CUresult ds__sim_thread_yield(sim_dev *d)
{
    int p = self_place(d);
    if (p < 0)
        return CUDA_ERROR_INVALID_VALUE;
    d->thr[p].state = SIM_THR_YIELD;
    d->thr[p].mark = d->grants;
    d->thr[p].since_us = d->now_us;
    turn_block(d, p);
    return CUDA_SUCCESS;
}

CUresult ds__sim_thread_reserve(sim_dev *d, uint32_t *ticket)
{
    if (d->cfg.clock != DS_SIM_CLOCK_VIRTUAL)
        return CUDA_ERROR_NOT_SUPPORTED;
    for (int i = 0; i < DS__SIM_MAX_TURNS; i++) {
        if (d->thr[i].state == SIM_THR_FREE) {
            d->thr[i].state = SIM_THR_READY;
            d->thr[i].attached = 0;
            d->nthr++;
            *ticket = (uint32_t)i + 1;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult ds__sim_thread_attach(sim_dev *d, uint32_t ticket)
{
    if (ticket == 0 || ticket > DS__SIM_MAX_TURNS || g_self.serial)
        return CUDA_ERROR_INVALID_VALUE;
    int p = (int)ticket - 1;
    if (d->thr[p].state == SIM_THR_FREE || d->thr[p].attached)
        return CUDA_ERROR_INVALID_VALUE;
    d->thr[p].attached = 1;
    g_self.serial = d->serial;
    g_self.place = p;
    wait_turn(d, p);
    return CUDA_SUCCESS;
}

CUresult ds__sim_thread_release(sim_dev *d, uint32_t ticket)
{
    if (ticket == 0 || ticket > DS__SIM_MAX_TURNS)
        return CUDA_ERROR_INVALID_VALUE;
    int p = (int)ticket - 1;
    if (d->thr[p].state == SIM_THR_FREE || (d->thr[p].attached && self_place(d) != p))
        return CUDA_ERROR_INVALID_VALUE;
    if (self_place(d) == p)
        g_self.serial = 0;
    d->thr[p].state = SIM_THR_FREE;
    d->thr[p].attached = 0;
    d->nthr--;
    if (d->turn == p || d->turn < 0) {
        d->turn = -1;
        if (d->nthr)
            turn_pass(d);
    }
    pthread_cond_broadcast(&d->cond);
    return CUDA_SUCCESS;
}

/* Runs the simulation until cond holds. VIRTUAL: jumps from one completion
 * instant to the next; when nothing is in flight (e.g. a stream held by a
 * WAIT_VALUE32 on host memory) it drops the lock and re-polls every 1 ms of
 * wall time, or as soon as another thread's call changes something. A thread
 * taking turns gives the turn up instead; one without a place, while others
 * take turns, waits for them to move the clock.
 * REALTIME: sleeps until the next completion's wall time (at most 1 ms). */
static CUresult wait_for(sim_dev *d, sim_cond_fn cond, const void *arg)
{
    for (;;) {
        catch_up(d);
        if (cond(d, arg))
            return CUDA_SUCCESS;
        if (d->fault)
            return d->fault;
        if (d->dying)
            return CUDA_ERROR_CONTEXT_IS_DESTROYED;
        int p = self_place(d);
        if (p >= 0) {
            d->thr[p].state = SIM_THR_WAIT;
            d->thr[p].cond = cond;
            d->thr[p].arg = arg;
            turn_block(d, p);
            continue;
        }
        struct timespec now = mono_now();
        struct timespec deadline = ts_from_us(ts_us(&now) + 1000.0);
        if (d->cfg.clock == DS_SIM_CLOCK_VIRTUAL) {
            if (d->heap_len && !d->nthr) {
                process_until(d, d->heap[0]->end_us);
                continue;
            }
        } else if (d->heap_len) {
            struct timespec w = wall_of(d, d->heap[0]->end_us);
            if (ts_before(&w, &deadline))
                deadline = w;
        }
        timed_wait(d, &deadline);
    }
}

typedef struct {
    const sim_stream *s;
    uint64_t target;
} stream_wait_arg;

static int stream_done(const sim_dev *d, const void *arg)
{
    (void)d;
    const stream_wait_arg *a = arg;
    return a->s->completed >= a->target;
}

CUresult ds__sim_wait_stream(sim_dev *d, sim_stream *s)
{
    stream_wait_arg a = { s, s->enqueued };
    s->waiters++;
    CUresult r = wait_for(d, stream_done, &a);
    s->waiters--;
    stream_maybe_free(d, s);
    return r;
}

static int einst_done(const sim_dev *d, const void *arg)
{
    (void)d;
    return ((const sim_einst *)arg)->done;
}

CUresult ds__sim_wait_einst(sim_dev *d, sim_einst *e)
{
    e->refs++;
    CUresult r = wait_for(d, einst_done, e);
    ds__sim_einst_unref(e);
    return r;
}

void ds__sim_sleep_until(sim_dev *d, double t_us)
{
    if (d->cfg.clock == DS_SIM_CLOCK_VIRTUAL) {
        int p = self_place(d);
        if (p >= 0) {
            turn_sleep(d, p, t_us);
            return;
        }
        /* without a place, while others take turns: wait for them to get
         * there (the clock is theirs to move) */
        while (d->nthr && d->now_us < t_us && !d->dying) {
            struct timespec now = mono_now();
            struct timespec deadline = ts_from_us(ts_us(&now) + 1000.0);
            timed_wait(d, &deadline);
            catch_up(d);
        }
        if (t_us > d->now_us && !d->dying)
            process_until(d, t_us);
        return;
    }
    for (;;) {
        catch_up(d);
        if (d->now_us >= t_us || d->dying)
            return;
        struct timespec dl = wall_of(d, t_us);
        timed_wait(d, &dl);
    }
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                    */
/* ------------------------------------------------------------------------ */

int ds__sim_dims_ok(const unsigned grid[3], const unsigned block[3])
{
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2])
        return 0;
    if (grid[0] > DS__SIM_MAX_GRID_X || grid[1] > DS__SIM_MAX_GRID_YZ || grid[2] > DS__SIM_MAX_GRID_YZ)
        return 0;
    if (block[0] > DS__SIM_MAX_BLOCK_XY || block[1] > DS__SIM_MAX_BLOCK_XY || block[2] > DS__SIM_MAX_BLOCK_Z)
        return 0;
    return (uint64_t)block[0] * block[1] * block[2] <= DS__SIM_MAX_THREADS;
}

/* The packed parameter buffer of a CU_LAUNCH_PARAM_* list: CUDA_SUCCESS with
 * *ptr (may be NULL) and *size (0 if none was given), or
 * CUDA_ERROR_INVALID_VALUE (unknown key, unterminated, NULL size pointer). */
static CUresult extra_buffer(void **extra, const void **ptr, size_t *size, int *have_size)
{
    *ptr = NULL;
    *size = 0;
    *have_size = 0;
    for (unsigned i = 0; i < 64; i++) {
        void *key = extra[i];
        if (key == CU_LAUNCH_PARAM_END)
            return CUDA_SUCCESS;
        if (i == 63)
            return CUDA_ERROR_INVALID_VALUE; /* unterminated */
        if (key == CU_LAUNCH_PARAM_BUFFER_POINTER) {
            *ptr = extra[++i];
        } else if (key == CU_LAUNCH_PARAM_BUFFER_SIZE) {
            const size_t *sp = extra[++i];
            if (!sp)
                return CUDA_ERROR_INVALID_VALUE;
            *size = *sp;
            *have_size = 1;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Copies the parameters (kernelParams by the declared sizes, or the
 * CU_LAUNCH_PARAM_BUFFER_POINTER buffer of `extra`) into buf, up to
 * DS_SIM_PARAM_BYTES. first8 gets the first 8 bytes of the full list. */
static CUresult capture_params(const sim_func *f, void **params, void **extra, uint8_t *buf,
                               uint32_t *nbytes, uint64_t *first8)
{
    uint32_t n = 0;
    *first8 = 0;
    if (params && extra)
        return CUDA_ERROR_INVALID_VALUE;
    if (params) {
        for (uint32_t i = 0; i < f->num_params; i++) {
            uint32_t sz = f->param_sizes[i];
            if (!sz)
                continue;
            if (!params[i])
                return CUDA_ERROR_INVALID_VALUE;
            if (i == 0)
                memcpy(first8, params[0], sz < 8 ? sz : 8);
            uint32_t take = DS_SIM_PARAM_BYTES - n < sz ? DS_SIM_PARAM_BYTES - n : sz;
            memcpy(buf + n, params[i], take);
            n += take;
        }
    } else if (extra) {
        const void *ptr;
        size_t size;
        int have_size;
        CUresult r = extra_buffer(extra, &ptr, &size, &have_size);
        if (r != CUDA_SUCCESS)
            return r;
        if (f->num_params && (!ptr || !have_size))
            return CUDA_ERROR_INVALID_VALUE;
        if (ptr && size) {
            memcpy(first8, ptr, size < 8 ? size : 8);
            n = size < DS_SIM_PARAM_BYTES ? (uint32_t)size : DS_SIM_PARAM_BYTES;
            memcpy(buf, ptr, n);
        }
    } else if (f->num_params) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *nbytes = n;
    return CUDA_SUCCESS;
}

/* What a checked launch carries to its op. */
typedef struct launch_data {
    uint8_t pbuf[DS_SIM_PARAM_BYTES];
    uint32_t pbytes;
    uint64_t first8;
    uint64_t rck_args[4];
} launch_data;

static CUresult launch_prepare(const sim_func *f, const unsigned grid[3], const unsigned block[3],
                               unsigned smem, void **params, void **extra, launch_data *ld)
{
    if (!ds__sim_dims_ok(grid, block) || smem > DS__SIM_MAX_SMEM)
        return CUDA_ERROR_INVALID_VALUE;
    ld->pbytes = 0;
    CUresult r = capture_params(f, params, extra, ld->pbuf, &ld->pbytes, &ld->first8);
    if (r != CUDA_SUCCESS)
        return r;
    if (f->probe && (!ld->first8 || ld->first8 % 4))
        return CUDA_ERROR_INVALID_VALUE; /* a GPU would fault: fail early instead */
    memset(ld->rck_args, 0, sizeof ld->rck_args);
    if (f->rck) {
        memcpy(ld->rck_args, ld->pbuf, sizeof ld->rck_args);
        for (int i = 0; i < 4; i++)
            if (!ld->rck_args[i] || ld->rck_args[i] % 4)
                return CUDA_ERROR_INVALID_VALUE;
        if ((uint64_t)grid[0] * grid[1] * grid[2] != 1)
            return CUDA_ERROR_INVALID_VALUE; /* one block: the model has no more */
    }
    return CUDA_SUCCESS;
}

CUresult ds__sim_launch_check(const sim_func *f, const unsigned grid[3], const unsigned block[3],
                              unsigned smem, void **params, void **extra)
{
    launch_data ld;
    return launch_prepare(f, grid, block, smem, params, extra, &ld);
}

/* Fills op (allocated, zeroed) as kernel f on stream s running on the SMs of
 * mask, gives it the next sequence number and its trace record (room was
 * reserved), and enqueues it. */
static void launch_enqueue(sim_dev *d, sim_op *op, const sim_func *f, const unsigned grid[3],
                           const unsigned block[3], unsigned smem, sim_stream *s,
                           const sim_smset *mask, CUstream caller_stream, const launch_data *ld)
{
    op->kind = SIM_OP_KERNEL;
    op->stream = s;
    op->mask = *mask;
    op->total = (uint64_t)grid[0] * grid[1] * grid[2];
    op->units = DS__SIM_SM_UNITS / (f->blocks_per_sm ? f->blocks_per_sm : 1);
    op->block_us = f->block_us;
    op->probe_bitmap = f->probe ? (uint32_t *)(uintptr_t)ld->first8 : NULL;
    op->faults = f->faults;
    op->resident = f->rck;
    memcpy(op->rck_args, ld->rck_args, sizeof ld->rck_args);
    op->seq = d->trace_next++;

    ds_sim_kernel_record *rec = trace_rec(d, op->seq);
    if (rec) {
        memset(rec, 0, sizeof *rec);
        rec->seq = op->seq;
        rec->function = (CUfunction)(uintptr_t)f->handle;
        memcpy(rec->name, f->name, sizeof rec->name);
        rec->stream = caller_stream;
        rec->grid = (ds_dim3){ grid[0], grid[1], grid[2] };
        rec->block = (ds_dim3){ block[0], block[1], block[2] };
        rec->shared_mem_bytes = smem;
        rec->param_bytes = ld->pbytes;
        memcpy(rec->params, ld->pbuf, ld->pbytes);
        rec->submit_us = d->now_us;
        rec->start_us = -1;
        rec->end_us = -1;
    }
    ds__sim_enqueue(d, s, op);
}

/* The host cost of one launch call, in VIRTUAL time. */
static void launch_overhead(sim_dev *d)
{
    if (d->cfg.clock == DS_SIM_CLOCK_VIRTUAL && d->cfg.launch_overhead_us > 0)
        ds__sim_sleep_until(d, d->now_us + d->cfg.launch_overhead_us);
}

static CUresult capture_kernel(sim_dev *d, sim_stream *s, const sim_func *f, const unsigned grid[3],
                               const unsigned block[3], unsigned smem, void **params, void **extra);

CUresult ds__sim_launch(sim_dev *d, const sim_func *f, const unsigned grid[3],
                        const unsigned block[3], unsigned smem, sim_stream *s,
                        CUstream caller_stream, void **params, void **extra)
{
    if (d->fault)
        return d->fault;
    launch_data ld;
    CUresult r = launch_prepare(f, grid, block, smem, params, extra, &ld);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->capture)
        return capture_kernel(d, s, f, grid, block, smem, params, extra);
    if (trace_reserve(d) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_op *op = ds__calloc(1, sizeof *op);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    launch_overhead(d);
    launch_enqueue(d, op, f, grid, block, smem, s, &s->mask, caller_stream, &ld);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Graphs: capture, kernel nodes, executables                                */
/* ------------------------------------------------------------------------ */

const sim_smset *ds__sim_ctx_mask(const sim_dev *d, uint64_t ctx)
{
    const sim_ctx *c = ds__sim_handle_get(d, ctx, SIM_H_CTX);
    if (!c)
        return NULL;
    return c->green ? &c->green->mask : &d->all;
}

sim_graph *ds__sim_graph_new(void)
{
    return ds__calloc(1, sizeof(sim_graph));
}

static void node_free_args(sim_gnode *n)
{
    ds__free(n->args);
    n->args = NULL;
}

void ds__sim_graph_free(sim_dev *d, sim_graph *g)
{
    for (size_t i = 0; i < g->n; i++) {
        ds__sim_handle_free(d, g->nodes[i]->handle);
        node_free_args(g->nodes[i]);
        ds__free(g->nodes[i]);
    }
    ds__free(g->nodes);
    if (g->handle)
        ds__sim_handle_free(d, g->handle);
    ds__free(g);
}

/* Points argv / extra of n at its own argument buffer (after n was set or
 * copied). */
static void node_link_args(sim_gnode *n, const uint32_t *offsets)
{
    memset(n->argv, 0, sizeof n->argv);
    memset(n->extra, 0, sizeof n->extra);
    if (n->packed) {
        n->extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
        n->extra[1] = n->args;
        n->extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
        n->extra[3] = &n->args_bytes;
        n->extra[4] = CU_LAUNCH_PARAM_END;
        return;
    }
    for (uint32_t i = 0; i < n->nargs; i++)
        n->argv[i] = n->args + offsets[i];
}

/* Offsets of the argument values of a kernelParams-form node: each slot
 * 8-byte aligned. Returns the buffer size. */
static size_t arg_offsets(const sim_func *f, uint32_t *offsets)
{
    size_t off = 0;
    for (uint32_t i = 0; i < f->num_params; i++) {
        offsets[i] = (uint32_t)off;
        off += ((size_t)f->param_sizes[i] + 7u) & ~(size_t)7u;
    }
    return off;
}

CUresult ds__sim_node_set(sim_gnode *n, const sim_func *f, uint64_t kern, uint64_t ctx,
                          const unsigned grid[3], const unsigned block[3], unsigned smem,
                          void **params, void **extra)
{
    uint32_t offsets[DS_SIM_MAX_PARAMS] = { 0 };
    size_t bytes;
    int packed = 0;
    const void *ptr = NULL;
    if (params) {
        bytes = arg_offsets(f, offsets);
    } else if (extra) {
        size_t size;
        int have_size;
        if (extra_buffer(extra, &ptr, &size, &have_size) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_VALUE; /* checked by the launch: not reached */
        bytes = ptr ? size : 0;
        packed = 1;
    } else {
        bytes = 0; /* a kernel without parameters */
    }
    /* the new values first: params may point into the node's current ones */
    uint8_t *args = ds__malloc(bytes ? bytes : 1);
    if (!args)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (packed) {
        if (bytes)
            memcpy(args, ptr, bytes);
    } else if (params) {
        for (uint32_t i = 0; i < f->num_params; i++)
            if (f->param_sizes[i])
                memcpy(args + offsets[i], params[i], f->param_sizes[i]);
    }
    node_free_args(n);
    n->args = args;
    n->args_bytes = bytes;
    n->packed = packed;
    n->nargs = packed ? 0 : f->num_params;
    node_link_args(n, offsets);
    n->func = f->handle;
    n->kern = kern;
    n->ctx = ctx;
    memcpy(n->grid, grid, sizeof n->grid);
    memcpy(n->block, block, sizeof n->block);
    n->smem = smem;
    return CUDA_SUCCESS;
}

/* Records a checked launch as a kernel node of s's capture. Its context is
 * the capturing stream's: the green context's CUcontext (as cuCtxFromGreenCtx
 * gives it), or the primary context. The capture costs no launch overhead: no
 * work reaches the device. */
static CUresult capture_kernel(sim_dev *d, sim_stream *s, const sim_func *f, const unsigned grid[3],
                               const unsigned block[3], unsigned smem, void **params, void **extra)
{
    sim_graph *g = s->capture;
    if (s->capture_invalid)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    sim_gnode *n = ds__calloc(1, sizeof *n);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t ctx = s->green ? s->green->ctx.handle : d->primary.handle;
    CUresult r = ds__sim_node_set(n, f, f->kern, ctx, grid, block, smem, params, extra);
    if (r == CUDA_SUCCESS && !(n->handle = ds__sim_handle_new(d, SIM_H_NODE, n)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && g->n == g->cap) { /* last: a failed call keeps nothing */
        size_t cap = g->cap ? g->cap * 2 : 8;
        sim_gnode **nn = ds__realloc(g->nodes, cap * sizeof *nn);
        if (nn) {
            g->nodes = nn;
            g->cap = cap;
        } else {
            ds__sim_handle_free(d, n->handle);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (r != CUDA_SUCCESS) {
        node_free_args(n);
        ds__free(n);
        return r;
    }
    n->owner = g;
    g->nodes[g->n++] = n;
    return CUDA_SUCCESS;
}

/* A copy of node src into dst (zeroed): its own argument values, no handle. */
static CUresult node_copy(sim_gnode *dst, const sim_gnode *src)
{
    uint8_t *args = ds__malloc(src->args_bytes ? src->args_bytes : 1);
    if (!args)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *dst = *src;
    dst->handle = 0;
    dst->owner = NULL;
    dst->orig = 0;
    if (src->args_bytes)
        memcpy(args, src->args, src->args_bytes);
    dst->args = args;
    uint32_t offsets[DS_SIM_MAX_PARAMS] = { 0 };
    for (uint32_t i = 0; i < src->nargs; i++)
        offsets[i] = (uint32_t)((uint8_t *)src->argv[i] - src->args);
    node_link_args(dst, offsets);
    return CUDA_SUCCESS;
}

CUresult ds__sim_graph_clone(sim_dev *d, const sim_graph *g, sim_graph **out)
{
    sim_graph *c = ds__sim_graph_new();
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    if (g->n && !(c->nodes = ds__calloc(g->n, sizeof *c->nodes)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    c->cap = g->n;
    for (size_t i = 0; i < g->n && r == CUDA_SUCCESS; i++) {
        sim_gnode *n = ds__calloc(1, sizeof *n);
        if (!n) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        r = node_copy(n, g->nodes[i]);
        if (r == CUDA_SUCCESS && !(n->handle = ds__sim_handle_new(d, SIM_H_NODE, n)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r != CUDA_SUCCESS) {
            node_free_args(n);
            ds__free(n);
            break;
        }
        n->owner = c;
        n->orig = g->nodes[i]->handle;
        c->nodes[c->n++] = n;
    }
    if (r == CUDA_SUCCESS && !(c->handle = ds__sim_handle_new(d, SIM_H_GRAPH, c)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        ds__sim_graph_free(d, c);
        return r;
    }
    *out = c;
    return CUDA_SUCCESS;
}

void ds__sim_node_destroy(sim_dev *d, sim_gnode *n)
{
    sim_graph *g = n->owner;
    for (size_t i = 0; g && i < g->n; i++)
        if (g->nodes[i] == n) {
            memmove(&g->nodes[i], &g->nodes[i + 1], (g->n - i - 1) * sizeof *g->nodes);
            g->n--;
            break;
        }
    ds__sim_handle_free(d, n->handle);
    node_free_args(n);
    ds__free(n);
}

static size_t free_device_bytes(const sim_dev *d, size_t other_bytes)
{
    size_t used = d->mem_alloc_bytes + d->mem_graph_bytes + other_bytes;
    return used < DS__SIM_MEM_TOTAL ? DS__SIM_MEM_TOTAL - used : 0;
}

void ds__sim_exec_free(sim_dev *d, sim_exec *e)
{
    for (size_t i = 0; i < e->n; i++)
        node_free_args(&e->nodes[i]);
    ds__free(e->nodes);
    d->mem_graph_bytes -= e->mem;
    ds__sim_einst_unref(e->last); /* a pending launch still completes */
    if (e->handle)
        ds__sim_handle_free(d, e->handle);
    ds__free(e);
}

CUresult ds__sim_exec_new(sim_dev *d, const sim_graph *g, size_t other_bytes, sim_exec **out)
{
    for (size_t i = 0; i < g->n; i++) {
        if (!ds__sim_handle_get(d, g->nodes[i]->func, SIM_H_FUNC))
            return CUDA_ERROR_INVALID_HANDLE; /* its module was unloaded */
        if (!ds__sim_ctx_mask(d, g->nodes[i]->ctx))
            return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    size_t mem = DS__SIM_EXEC_BYTES + g->n * DS__SIM_EXEC_NODE_BYTES;
    if (mem > free_device_bytes(d, other_bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_exec *e = ds__calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (g->n && !(e->nodes = ds__calloc(g->n, sizeof *e->nodes))) {
        ds__free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < g->n && r == CUDA_SUCCESS; i++) {
        r = node_copy(&e->nodes[i], g->nodes[i]);
        if (r == CUDA_SUCCESS)
            e->n = i + 1;
    }
    if (r == CUDA_SUCCESS && !(e->handle = ds__sim_handle_new(d, SIM_H_EXEC, e)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        ds__sim_exec_free(d, e); /* e->mem is 0 yet */
        return r;
    }
    e->mem = mem;
    d->mem_graph_bytes += mem;
    *out = e;
    return CUDA_SUCCESS;
}

/* The node's arguments as a launch takes them. */
static void node_launch_args(sim_gnode *n, void ***params, void ***extra)
{
    *params = n->packed ? NULL : n->argv;
    *extra = n->packed ? n->extra : NULL;
}

CUresult ds__sim_exec_launch(sim_dev *d, sim_exec *e, sim_stream *s, CUstream caller_stream)
{
    if (d->fault)
        return d->fault;
    /* every node is checked before any is enqueued */
    for (size_t i = 0; i < e->n; i++) {
        sim_gnode *n = &e->nodes[i];
        const sim_func *f = ds__sim_handle_get(d, n->func, SIM_H_FUNC);
        if (!f)
            return CUDA_ERROR_INVALID_HANDLE; /* its module was unloaded */
        if (!ds__sim_ctx_mask(d, n->ctx))
            return CUDA_ERROR_CONTEXT_IS_DESTROYED;
        void **params, **extra;
        node_launch_args(n, &params, &extra);
        CUresult r = ds__sim_launch_check(f, n->grid, n->block, n->smem, params, extra);
        if (r != CUDA_SUCCESS)
            return r;
    }
    if (!e->n)
        return CUDA_SUCCESS; /* an empty graph: nothing to run */
    /* ops: [wait for the previous launch], one per node, the completion */
    size_t nops = e->n + 2;
    sim_op **ops = ds__calloc(nops, sizeof *ops);
    sim_einst *done = ds__calloc(1, sizeof *done);
    int ok = ops && done && trace_reserve_n(d, e->n) == CUDA_SUCCESS;
    for (size_t i = 0; ok && i < nops; i++)
        ok = (ops[i] = ds__calloc(1, sizeof *ops[i])) != NULL;
    if (!ok) {
        for (size_t i = 0; ops && i < nops; i++)
            ds__free(ops[i]);
        ds__free(ops);
        ds__free(done);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* one launch call: one host cost, whatever the number of nodes */
    launch_overhead(d);
    if (e->last && !e->last->done) {
        ops[0]->kind = SIM_OP_WAIT_EVENT;
        ops[0]->inst = e->last;
        e->last->refs++;
        ds__sim_enqueue(d, s, ops[0]);
    } else {
        ds__free(ops[0]);
    }
    for (size_t i = 0; i < e->n; i++) {
        sim_gnode *n = &e->nodes[i];
        const sim_func *f = ds__sim_handle_get(d, n->func, SIM_H_FUNC);
        void **params, **extra;
        node_launch_args(n, &params, &extra);
        launch_data ld;
        launch_prepare(f, n->grid, n->block, n->smem, params, extra, &ld); /* checked above */
        launch_enqueue(d, ops[i + 1], f, n->grid, n->block, n->smem, s, ds__sim_ctx_mask(d, n->ctx),
                       caller_stream, &ld);
    }
    done->refs = 2; /* the executable and the op */
    ds__sim_einst_unref(e->last);
    e->last = done;
    ops[nops - 1]->kind = SIM_OP_RECORD;
    ops[nops - 1]->inst = done;
    ds__sim_enqueue(d, s, ops[nops - 1]);
    ds__free(ops);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

CUresult ds__sim_mem_alloc(sim_dev *d, size_t n, int host, void **out)
{
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    size_t rn = (n + 255u) & ~(size_t)255u;
    if (rn < n || (!host && rn > free_device_bytes(d, 0)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (d->n_allocs == d->cap_allocs) {
        size_t cap = d->cap_allocs ? d->cap_allocs * 2 : 16;
        sim_alloc *a = ds__realloc(d->allocs, cap * sizeof *a);
        if (!a)
            return CUDA_ERROR_OUT_OF_MEMORY;
        d->allocs = a;
        d->cap_allocs = cap;
    }
    void *p = aligned_alloc(256, rn);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(p, 0, rn);
    d->allocs[d->n_allocs++] = (sim_alloc){ p, n, host };
    if (!host)
        d->mem_alloc_bytes += n;
    *out = p;
    return CUDA_SUCCESS;
}

CUresult ds__sim_mem_find(sim_dev *d, uintptr_t p, size_t n, int remove)
{
    for (size_t i = 0; i < d->n_allocs; i++) {
        uintptr_t a = (uintptr_t)d->allocs[i].p;
        size_t an = d->allocs[i].n;
        int hit = remove ? p == a : (p >= a && p - a <= an && n <= an - (p - a));
        if (hit) {
            if (remove) {
                if (!d->allocs[i].host)
                    d->mem_alloc_bytes -= d->allocs[i].n;
                free(d->allocs[i].p);
                d->allocs[i] = d->allocs[--d->n_allocs];
            }
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

/* ------------------------------------------------------------------------ */
/* Devices                                                                   */
/* ------------------------------------------------------------------------ */

CUresult ds__sim_dev_acquire(int slot, sim_dev **out)
{
    if (slot < 0 || slot >= DS__SIM_MAX_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_mu);
    sim_dev *d = g_dev[slot];
    if (d)
        d->users++;
    pthread_mutex_unlock(&g_mu);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&d->mu);
    if (d->dying) {
        ds__sim_dev_release(d);
        return CUDA_ERROR_INVALID_DEVICE;
    }
    catch_up(d);
    *out = d;
    return CUDA_SUCCESS;
}

void ds__sim_dev_release(sim_dev *d)
{
    if (d->changed) {
        d->changed = 0;
        pthread_cond_broadcast(&d->cond);
    }
    pthread_mutex_unlock(&d->mu);
    pthread_mutex_lock(&g_mu);
    if (--d->users == 0)
        pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

int ds__sim_dev_count(void)
{
    int n = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < DS__SIM_MAX_DEVICES; i++)
        n += g_dev[i] != NULL;
    pthread_mutex_unlock(&g_mu);
    return n;
}

int ds__sim_dev_nth(int ordinal)
{
    int found = -1;
    pthread_mutex_lock(&g_mu);
    for (int i = 0, k = 0; i < DS__SIM_MAX_DEVICES && ordinal >= 0; i++) {
        if (g_dev[i] && k++ == ordinal) {
            found = i;
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return found;
}

static void dev_free(sim_dev *d)
{
    sim_stream *s = d->streams_head;
    while (s) {
        sim_stream *next = s->next;
        sim_op *op = s->head;
        while (op) {
            sim_op *n = op->next;
            ds__sim_op_free(op);
            op = n;
        }
        stream_free(d, s);
        s = next;
    }
    for (size_t i = 0; i < d->heap_len; i++)
        ds__free(d->heap[i]);
    ds__free(d->heap);
    for (uint32_t i = 0; i < d->h_len; i++) {
        sim_hentry *e = &d->h[i];
        switch (e->kind) {
        case SIM_H_EVENT: {
            sim_event *ev = e->obj;
            ds__sim_einst_unref(ev->last);
            ds__free(ev);
            break;
        }
        case SIM_H_GREEN:
        case SIM_H_MODULE:
        case SIM_H_FUNC:
        case SIM_H_DESC:
            ds__free(e->obj);
            break;
        case SIM_H_GRAPH: /* frees its nodes' entries too (kind FREE after) */
            ds__sim_graph_free(d, e->obj);
            break;
        case SIM_H_EXEC:
            ds__sim_exec_free(d, e->obj);
            break;
        default: /* contexts are embedded, streams were freed above, nodes
                    belong to their graph, a CUkernel to its function */
            break;
        }
    }
    ds__free(d->h);
    for (size_t i = 0; i < d->n_allocs; i++)
        free(d->allocs[i].p);
    ds__free(d->allocs);
    if (d->trace) {
        uint64_t cap = d->cfg.trace_capacity;
        for (uint64_t i = 0; i < (cap + DS__SIM_TRACE_CHUNK - 1) / DS__SIM_TRACE_CHUNK; i++)
            ds__free(d->trace[i]);
        ds__free(d->trace);
    }
    pthread_cond_destroy(&d->cond);
    for (int i = 0; i < DS__SIM_MAX_TURNS; i++)
        pthread_cond_destroy(&d->thr[i].cv);
    pthread_mutex_destroy(&d->mu);
    ds__free(d);
}

static ds_status check_config(const ds_sim_config *c)
{
    if (c->sm_count < 1 || c->sm_count > DS_MAX_SMS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_config.sm_count %u is outside 1..%u",
                        c->sm_count, (unsigned)DS_MAX_SMS);
    /* at most DS_MAX_SMS: the split's rounding up to the alignment would
     * overflow near 2^32 (a group larger than the device is allowed: the
     * split then refuses, as a real driver does) */
    if (c->min_partition_sms < 1 || c->min_partition_sms > DS_MAX_SMS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_config.min_partition_sms %u is outside 1..%u",
                        c->min_partition_sms, (unsigned)DS_MAX_SMS);
    if (c->sm_alignment < 1 || c->sm_alignment > DS_MAX_SMS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_config.sm_alignment %u is outside 1..%u",
                        c->sm_alignment, (unsigned)DS_MAX_SMS);
    if (c->clock != DS_SIM_CLOCK_VIRTUAL && c->clock != DS_SIM_CLOCK_REALTIME)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_sim_config.clock %d is not a ds_sim_clock",
                        (int)c->clock);
    if (c->clock == DS_SIM_CLOCK_REALTIME && !(c->time_scale > 0 && isfinite(c->time_scale)))
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_sim_config.time_scale %g must be > 0 and finite for DS_SIM_CLOCK_REALTIME",
                        c->time_scale);
    if (!(c->launch_overhead_us >= 0 && isfinite(c->launch_overhead_us)))
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_sim_config.launch_overhead_us %g must be >= 0 and finite",
                        c->launch_overhead_us);
    return DS_SUCCESS;
}

ds_status ds__sim_device_create(const ds_sim_config *cfg, CUdevice *dev)
{
    if (!dev)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds__sim_device_create: dev is NULL");
    ds_sim_config c = DS_SIM_CONFIG_INIT;
    if (cfg) {
        DS__TRY(ds__check_abi(cfg, sizeof(ds_sim_config), "ds_sim_config"));
        c = *cfg;
        c.size = sizeof c;
    }
    DS__TRY(check_config(&c));
    if (c.clock == DS_SIM_CLOCK_VIRTUAL)
        c.time_scale = c.time_scale > 0 && isfinite(c.time_scale) ? c.time_scale : 1.0;

    sim_dev *d = ds__calloc(1, sizeof *d);
    if (!d)
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "simulated device: out of memory");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cond, &ca);
    for (int i = 0; i < DS__SIM_MAX_TURNS; i++)
        pthread_cond_init(&d->thr[i].cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&d->mu, NULL);
    d->cfg = c;
    d->turn = -1;
    d->t0 = mono_now();
    for (unsigned sm = 0; sm < c.sm_count; sm++) {
        sim_set_add(&d->all, sm);
        sm_set_free(d, sm, DS__SIM_SM_UNITS);
    }

    pthread_mutex_lock(&g_mu);
    int slot = -1;
    for (int i = 0; i < DS__SIM_MAX_DEVICES; i++) {
        if (!g_dev[i]) {
            slot = i;
            break;
        }
    }
    if (slot < 0) {
        pthread_mutex_unlock(&g_mu);
        dev_free(d);
        return ds__fail(DS_ERR_LIMIT, "too many simulated devices alive (at most %d)",
                        DS__SIM_MAX_DEVICES);
    }
    d->slot = slot;
    d->serial = ++g_serial;
    d->primary.handle = ds__sim_handle_new(d, SIM_H_CTX, &d->primary);
    d->default_stream = ds__sim_stream_new(d, NULL, &d->all, 0);
    if (!d->primary.handle || !d->default_stream) {
        pthread_mutex_unlock(&g_mu);
        dev_free(d);
        return ds__fail(DS_ERR_OUT_OF_MEMORY, "simulated device: out of memory");
    }
    g_dev[slot] = d;
    pthread_mutex_unlock(&g_mu);
    ds__log(DS_LOG_DEBUG, "simulated device %d: %u SMs, partitions of %u aligned to %u, %s clock",
            slot, c.sm_count, c.min_partition_sms, c.sm_alignment,
            c.clock == DS_SIM_CLOCK_VIRTUAL ? "virtual" : "realtime");
    *dev = slot;
    return DS_SUCCESS;
}

void ds__sim_device_destroy(CUdevice dev)
{
    if (dev < 0 || dev >= DS__SIM_MAX_DEVICES)
        return;
    pthread_mutex_lock(&g_mu);
    sim_dev *d = g_dev[dev];
    g_dev[dev] = NULL;
    pthread_mutex_unlock(&g_mu);
    if (!d)
        return;
    /* wake threads waiting on it; they return CUDA_ERROR_CONTEXT_IS_DESTROYED */
    pthread_mutex_lock(&d->mu);
    d->dying = 1;
    pthread_cond_broadcast(&d->cond);
    for (int i = 0; i < DS__SIM_MAX_TURNS; i++)
        pthread_cond_broadcast(&d->thr[i].cv);
    pthread_mutex_unlock(&d->mu);
    pthread_mutex_lock(&g_mu);
    while (d->users)
        pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    dev_free(d);
}
