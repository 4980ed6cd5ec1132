/* Tenant memory on the simulated device: ds_mem_alloc / ds_mem_free
 * over the VMM API, the per-vCtx quota and its accounting, release at vCtx
 * teardown, and kernel-parameter introspection (the working set). */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sim/sim_internal.h"

#define GRAN ((uint64_t)2 << 20) /* the simulated device's granularity */

static void vmm_counts(size_t c[3])
{
    ds__sim_vmm_counts(&c[0], &c[1], &c[2]);
}

static ds_mem_stats mem_stats(ds_vctx_t v)
{
    ds_mem_stats s = DS_MEM_STATS_INIT;
    cr_assert_eq(ds_vctx_get_mem_stats(v, &s), DS_SUCCESS, "%s", ds_last_error_message());
    return s;
}

Test(memory, alloc_is_usable_rounded_and_accounted)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    size_t before[3], during[3], after[3];
    vmm_counts(before);
    CUdeviceptr p = 0;
    cr_assert_eq(ds_mem_alloc(v, 1000, &p), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_neq(p, 0);
    cr_assert_eq(p % GRAN, 0, "reservations are granularity-aligned");
    vmm_counts(during);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(during[i], before[i] + 1, "one reservation, one physical allocation, one mapping");
    /* simulated device memory is host memory: zero-filled, read/write */
    unsigned char *h = (unsigned char *)(uintptr_t)p;
    cr_assert_eq(h[0], 0);
    cr_assert_eq(h[GRAN - 1], 0);
    h[5] = 42;
    cr_assert_eq(h[5], 42);
    ds_mem_stats s = mem_stats(v);
    cr_assert_eq(s.bytes_allocated, GRAN, "charged rounded up to the granularity");
    cr_assert_eq(s.allocations, 1);
    cr_assert_eq(s.granularity, GRAN);
    cr_assert_eq(s.quota_bytes, 0);
    cr_assert_eq(ds_mem_free(v, p), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_mem_free(v, p), DS_ERR_NOT_FOUND, "double free is refused");
    vmm_counts(after);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(after[i], before[i]);
    s = mem_stats(v);
    cr_assert_eq(s.bytes_allocated, 0);
    cr_assert_eq(s.allocations, 0);
    cr_assert_eq(s.peak_bytes, GRAN);
    cr_assert_eq(s.total_allocations, 1);
    ds_vctx_destroy(v);
    ds_runtime_destroy(rt);
}

Test(memory, argument_and_handle_errors)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t w = t_vctx(rt, "w", DS_CLASS_BEST_EFFORT, 0, -1);
    CUdeviceptr p = 0;
    cr_assert_eq(ds_mem_alloc(NULL, 1, &p), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_mem_alloc(v, 0, &p), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_mem_alloc(v, 1, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_mem_alloc(v, SIZE_MAX, &p), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_mem_alloc(v, 1, &p), DS_SUCCESS);
    cr_assert_eq(ds_mem_free(w, p), DS_ERR_NOT_FOUND, "another vCtx's allocation");
    cr_assert_eq(ds_mem_free(v, p + 256), DS_ERR_NOT_FOUND, "not the start");
    cr_assert_eq(ds_mem_free(v, p), DS_SUCCESS);
    ds_mem_stats bad = DS_MEM_STATS_INIT;
    bad.magic = 0;
    cr_assert_eq(ds_vctx_get_mem_stats(v, &bad), DS_ERR_ABI_MISMATCH);
    cr_assert_eq(ds_vctx_get_mem_stats(v, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_vctx_set_mem_quota(NULL, 1), DS_ERR_INVALID_HANDLE);
    ds_vctx_destroy(v);
    ds_vctx_destroy(w);
    ds_runtime_destroy(rt);
}

Test(memory, quota_enforced_nothing_leaked_free_then_alloc_succeeds)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t other = t_vctx(rt, "other", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_vctx_set_mem_quota(v, 3 * GRAN), DS_SUCCESS);
    CUdeviceptr a = 0, b = 0, c = 0;
    cr_assert_eq(ds_mem_alloc(v, GRAN, &a), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_mem_alloc(v, 2 * GRAN - 7, &b), DS_SUCCESS, "%s", ds_last_error_message());
    size_t before[3], after[3];
    vmm_counts(before);
    c = 0xdead;
    cr_assert_eq(ds_mem_alloc(v, 1, &c), DS_ERR_MEMORY_QUOTA);
    cr_assert_eq(c, 0xdead, "output untouched on failure");
    cr_assert(strstr(ds_last_error_message(), "quota") != NULL, "%s", ds_last_error_message());
    cr_assert_eq(ds_mem_alloc(v, 5 * GRAN, &c), DS_ERR_MEMORY_QUOTA);
    vmm_counts(after);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(after[i], before[i], "a refused allocation leaves no driver object");
    ds_mem_stats s = mem_stats(v);
    cr_assert_eq(s.bytes_allocated, 3 * GRAN);
    cr_assert_eq(s.allocations, 2);
    cr_assert_eq(s.quota_bytes, 3 * GRAN);
    cr_assert_eq(s.quota_refusals, 2);
    /* the quota is per vCtx */
    CUdeviceptr o = 0;
    cr_assert_eq(ds_mem_alloc(other, 4 * GRAN, &o), DS_SUCCESS);
    /* free, then the same request fits */
    cr_assert_eq(ds_mem_free(v, a), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(v, 1, &c), DS_SUCCESS, "%s", ds_last_error_message());
    s = mem_stats(v);
    cr_assert_eq(s.bytes_allocated, 3 * GRAN);
    cr_assert_eq(s.peak_bytes, 3 * GRAN);
    cr_assert_eq(s.total_allocations, 3);
    /* lowering the quota frees nothing but refuses more */
    cr_assert_eq(ds_vctx_set_mem_quota(v, GRAN), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(v, 1, &a), DS_ERR_MEMORY_QUOTA);
    cr_assert_eq(ds_vctx_set_mem_quota(v, 0), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(v, 1, &a), DS_SUCCESS, "no quota");
    ds_vctx_destroy(v);
    ds_vctx_destroy(other);
    ds_runtime_destroy(rt);
}

Test(memory, destroy_frees_every_allocation_and_logs_it)
{
    t_log_capture(DS_LOG_INFO);
    ds_runtime_t rt = t_sim_runtime(0);
    size_t before[3], after[3];
    vmm_counts(before);
    ds_vctx_t v = t_vctx(rt, "leaky", DS_CLASS_BEST_EFFORT, 0, -1);
    CUdeviceptr p;
    for (int i = 0; i < 5; i++)
        cr_assert_eq(ds_mem_alloc(v, GRAN, &p), DS_SUCCESS);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "%s", ds_last_error_message());
    vmm_counts(after);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(after[i], before[i], "nothing left after ds_vctx_destroy");
    cr_assert(strstr(t_log_last(), "leaky") && strstr(t_log_last(), "5 allocation"), "%s", t_log_last());
    /* and through ds_runtime_destroy */
    v = t_vctx(rt, "leaky2", DS_CLASS_BEST_EFFORT, 0, -1);
    cr_assert_eq(ds_mem_alloc(v, 3 * GRAN, &p), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
    vmm_counts(after);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(after[i], before[i], "nothing left after ds_runtime_destroy");
}

/* A struct parameter holding pointers, as a kernel argument. */
typedef struct {
    int32_t n;
    int32_t flags;
    CUdeviceptr in;   /* offset 8 */
    double scale;
    CUdeviceptr out;  /* offset 24 */
} args_t;

Test(memory, working_set_finds_pointers_at_offsets_and_inside_structs)
{
    ds_runtime_t rt = t_sim_runtime(0);
    static const uint32_t sizes[] = {4, 8, sizeof(args_t), 8};
    CUfunction k = t_sim_kernel(rt, "k", 5.0, 4, sizes);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    ds_vctx_t w = t_vctx(rt, "w", DS_CLASS_BEST_EFFORT, 0, -1);
    CUdeviceptr a, b, c, unused, foreign;
    cr_assert_eq(ds_mem_alloc(v, GRAN, &a), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(v, 3 * GRAN, &b), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(v, 100, &c), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(v, GRAN, &unused), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(w, GRAN, &foreign), DS_SUCCESS);

    int32_t n = 7;
    CUdeviceptr p1 = a + 4096;                 /* a pointer with an offset */
    args_t s = {3, 0, b + 2 * GRAN + 8, 0.5, c + 200 /* rounding tail: still mapped */};
    CUdeviceptr p3 = foreign;                  /* w's: not in v's working set */
    void *params[] = {&n, &p1, &s, &p3};
    CUdeviceptr out[8];
    size_t found = 0;
    cr_assert_eq(ds_mem_working_set(v, k, params, out, 8, &found), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(found, 3);
    CUdeviceptr want[3] = {a, b, c};
    /* ascending */
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (want[j] < want[i]) {
                CUdeviceptr t = want[i];
                want[i] = want[j];
                want[j] = t;
            }
    for (int i = 0; i < 3; i++)
        cr_assert_eq(out[i], want[i]);
    /* capacity smaller than the set: the count is still complete */
    cr_assert_eq(ds_mem_working_set(v, k, params, out, 1, &found), DS_SUCCESS);
    cr_assert_eq(found, 3);
    cr_assert_eq(ds_mem_working_set(v, k, params, NULL, 0, &found), DS_SUCCESS);
    cr_assert_eq(found, 3);
    /* w's view: only its allocation */
    cr_assert_eq(ds_mem_working_set(w, k, params, out, 8, &found), DS_SUCCESS);
    cr_assert_eq(found, 1);
    cr_assert_eq(out[0], foreign);
    /* a pointer one past the end of a mapped range is outside */
    CUdeviceptr past = unused + GRAN;
    void *params2[] = {&n, &past, &(args_t){0}, &past};
    cr_assert_eq(ds_mem_working_set(v, k, params2, out, 8, &found), DS_SUCCESS);
    cr_assert(found == 0 || out[0] != unused);
    /* no parameters, argument errors */
    cr_assert_eq(ds_mem_working_set(v, k, NULL, out, 8, &found), DS_SUCCESS);
    cr_assert_eq(found, 0);
    cr_assert_eq(ds_mem_working_set(v, NULL, params, out, 8, &found), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_mem_working_set(v, k, params, NULL, 8, &found), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_mem_working_set(v, k, params, out, 8, NULL), DS_ERR_INVALID_ARGUMENT);
    /* the explicit call does not count as a sampled launch */
    cr_assert_eq(mem_stats(v).sampled_launches, 0);
    cr_assert_eq(mem_stats(v).working_set_bytes, 0);
    ds_vctx_destroy(v);
    ds_vctx_destroy(w);
    ds_runtime_destroy(rt);
}

Test(memory, sampled_launches_measure_the_recent_working_set)
{
    ds_runtime_t rt = t_sim_runtime(0);
    static const uint32_t sizes[] = {8, sizeof(args_t)};
    CUfunction k = t_sim_kernel(rt, "k", 2.0, 2, sizes);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    CUdeviceptr a, b, idle;
    cr_assert_eq(ds_mem_alloc(v, GRAN, &a), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(v, 2 * GRAN, &b), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(v, 4 * GRAN, &idle), DS_SUCCESS);
    CUdeviceptr pa = a;
    args_t s = {1, 0, b + 64, 1.0, 0};
    void *params[] = {&pa, &s};
    for (int i = 0; i < 1200; i++)
        cr_assert_eq(ds_launch(v, k, t_dim(4), t_dim(32), 0, params, NULL), DS_SUCCESS, "%s",
                     ds_last_error_message());
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS);
    ds_mem_stats m = mem_stats(v);
    cr_assert_geq(m.sampled_launches, 2, "sampled %llu", (unsigned long long)m.sampled_launches);
    cr_assert_eq(m.working_set_bytes, 3 * GRAN, "a and b, not idle: %llu",
                 (unsigned long long)m.working_set_bytes);
    cr_assert_eq(m.bytes_allocated, 7 * GRAN);
    cr_assert_eq(m.working_set_window, 16);
    /* the launches reached the driver unchanged: the sampled scan reads only */
    size_t nrec = 0;
    ds_sim_kernel_record *recs = t_trace(rt, &nrec);
    cr_assert_eq(nrec, 1200);
    cr_assert_eq(memcmp(recs[nrec - 1].params, &pa, 8), 0);
    free(recs);
    ds_vctx_destroy(v);
    ds_runtime_destroy(rt);
}

/* ------------------------------------------------------------------------ */
/* Copy arbiter (memory/copy_queue.c): fair shares of the link, LS first.        */
/* The link is modelled: 25 GB/s, one chunk on it at a time.                 */

#include "core/copy.h"
#include "core/runtime.h"
#include "memory/copy_queue.h"

#define LINK_BYTES_PER_US 25000.0 /* 25 GB/s */

/* Runs `chunks` chunks from time *now, advancing it by each chunk's link
 * time; counts chunks per tenant into per[] (from chunk `skip` on). */
static void run_link(ds__copyq *q, double *now, int chunks, int skip, uint64_t *per)
{
    for (int i = 0; i < chunks; i++) {
        ds__copy_chunk c;
        cr_assert_eq(ds__copyq_next(q, *now, LINK_BYTES_PER_US, &c), 1);
        if (i >= skip)
            per[c.tenant] += c.len;
        *now += (double)c.len / LINK_BYTES_PER_US;
    }
}

Test(copyq, weighted_shares_one_to_three)
{
    ds__copyq q;
    ds__copyq_init(&q, 0);
    int a = ds__copyq_tenant_add(&q, 1, 0), b = ds__copyq_tenant_add(&q, 3, 0);
    ds__copy_req ra = {.bytes = (uint64_t)4 << 30}, rb = {.bytes = (uint64_t)4 << 30};
    ds__copyq_submit(&q, a, &ra, 0);
    ds__copyq_submit(&q, b, &rb, 0);
    double now = 0;
    uint64_t per[DS__COPYQ_MAX_TENANTS] = {0};
    run_link(&q, &now, 400, 0, per);
    double share_a = (double)per[a] / (double)(per[a] + per[b]);
    cr_assert(share_a > 0.24 && share_a < 0.26, "A (weight 1) got %.3f of the link", share_a);
    /* and over every window of 40 chunks, within one chunk of 25% */
    uint64_t w[DS__COPYQ_MAX_TENANTS] = {0};
    run_link(&q, &now, 40, 0, w);
    cr_assert(w[a] >= 9 * q.chunk_bytes && w[a] <= 11 * q.chunk_bytes, "A: %llu chunks of 40",
              (unsigned long long)(w[a] / q.chunk_bytes));
    cr_assert_gt(q.t[a].wait_us, q.t[b].wait_us, "the lighter tenant waits more");
    cr_assert_eq(q.t[a].bytes_moved + q.t[b].bytes_moved, 440 * q.chunk_bytes);
}

Test(copyq, chunks_cover_each_request_exactly_once)
{
    ds__copyq q;
    ds__copyq_init(&q, 1 << 20);
    int a = ds__copyq_tenant_add(&q, 2, 0);
    ds__copy_req r1 = {.bytes = (5 << 20) + 3}, r2 = {.bytes = 1};
    ds__copyq_submit(&q, a, &r1, 0);
    ds__copyq_submit(&q, a, &r2, 0);
    uint64_t off = 0;
    ds__copy_chunk c;
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(ds__copyq_next(&q, 0, LINK_BYTES_PER_US, &c), 1);
        cr_assert_eq(c.req, &r1);
        cr_assert_eq(c.offset, off);
        off += c.len;
        cr_assert_eq(c.last, i == 5);
    }
    cr_assert_eq(off, r1.bytes);
    cr_assert_eq(ds__copyq_next(&q, 0, LINK_BYTES_PER_US, &c), 1);
    cr_assert(c.req == &r2 && c.len == 1 && c.last);
    cr_assert_eq(ds__copyq_next(&q, 0, LINK_BYTES_PER_US, &c), 0, "idle");
    cr_assert_eq(ds__copyq_tenant_remove(&q, a), 0);
}

Test(copyq, latency_sensitive_first_waits_at_most_one_chunk)
{
    ds__copyq q;
    ds__copyq_init(&q, 0);
    int be = ds__copyq_tenant_add(&q, 8, 0), ls = ds__copyq_tenant_add(&q, 1, 1);
    ds__copy_req big = {.bytes = (uint64_t)4 << 30};
    ds__copyq_submit(&q, be, &big, 0);
    double now = 0, chunk_us = (double)q.chunk_bytes / LINK_BYTES_PER_US;
    uint64_t per[DS__COPYQ_MAX_TENANTS] = {0};
    for (int round = 0; round < 20; round++) {
        run_link(&q, &now, 7, 0, per);
        /* the LS copy arrives while a BE chunk is on the link */
        double submit = now - chunk_us * 0.3;
        ds__copy_req small = {.bytes = 1 << 20};
        ds__copyq_submit(&q, ls, &small, submit);
        ds__copy_chunk c;
        cr_assert_eq(ds__copyq_next(&q, now, LINK_BYTES_PER_US, &c), 1);
        cr_assert_eq(c.tenant, ls, "LS goes before the backlogged BE tenant");
        cr_assert(c.last, "a 1 MiB copy is one chunk");
        now += (double)c.len / LINK_BYTES_PER_US;
    }
    cr_assert_leq(q.t[ls].wait_us, 20 * chunk_us, "LS waited %.1f us over 20 copies", q.t[ls].wait_us);
}

Test(copyq, be_chunks_shrink_while_a_latency_sensitive_tenant_copies)
{
    ds__copyq q;
    ds__copyq_init(&q, 0);
    int be = ds__copyq_tenant_add(&q, 1, 0);
    ds__copy_req big = {.bytes = (uint64_t)64 << 20};
    ds__copyq_submit(&q, be, &big, 0);
    ds__copy_chunk c;
    cr_assert_eq(ds__copyq_next(&q, 0, LINK_BYTES_PER_US, &c), 1);
    cr_assert_eq(c.len, (uint64_t)2 << 20, "BE alone: 2 MiB chunks");
    int ls = ds__copyq_tenant_add(&q, 1, 1);
    cr_assert_eq(ds__copyq_next(&q, 0, LINK_BYTES_PER_US, &c), 1);
    cr_assert_eq(c.len, (uint64_t)512 << 10, "an LS tenant copies: BE chunks of 512 KiB");
    ds__copy_req small = {.bytes = 1 << 20};
    ds__copyq_submit(&q, ls, &small, 0);
    cr_assert_eq(ds__copyq_next(&q, 0, LINK_BYTES_PER_US, &c), 1);
    cr_assert_eq(c.tenant, ls);
    cr_assert_eq(c.len, (uint64_t)1 << 20, "LS chunks keep the full size");
    cr_assert_eq(ds__copyq_tenant_remove(&q, ls), 0);
    cr_assert_eq(ds__copyq_next(&q, 0, LINK_BYTES_PER_US, &c), 1);
    cr_assert_eq(c.len, (uint64_t)2 << 20, "LS gone: 2 MiB again");
}

Test(copyq, idle_time_earns_no_credit)
{
    ds__copyq q;
    ds__copyq_init(&q, 0);
    int a = ds__copyq_tenant_add(&q, 1, 0), b = ds__copyq_tenant_add(&q, 1, 0);
    ds__copy_req ra = {.bytes = (uint64_t)4 << 30}, rb = {.bytes = (uint64_t)4 << 30};
    ds__copyq_submit(&q, a, &ra, 0);
    double now = 0;
    uint64_t per[DS__COPYQ_MAX_TENANTS] = {0};
    run_link(&q, &now, 100, 0, per); /* A alone */
    ds__copyq_submit(&q, b, &rb, now);
    uint64_t after[DS__COPYQ_MAX_TENANTS] = {0};
    run_link(&q, &now, 20, 0, after);
    cr_assert(after[a] >= 9 * q.chunk_bytes && after[a] <= 11 * q.chunk_bytes,
              "equal weights share equally from B's arrival on (A got %llu of 20 chunks)",
              (unsigned long long)(after[a] / q.chunk_bytes));
}

/* ------------------------------------------------------------------------ */
/* ds_memcpy_async: program order with the vCtx's stream, fair link shares.  */

size_t ds__copy_history(struct ds_runtime *rt, int *tenants, size_t cap);

static ds_vctx_t vctx_w(ds_runtime_t rt, const char *name, ds_vctx_class cls, uint32_t weight)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = name;
    a.cls = cls;
    a.weight = weight;
    ds_vctx_t v = NULL;
    cr_assert_eq(ds_vctx_create(rt, &a, &v), DS_SUCCESS, "%s", ds_last_error_message());
    return v;
}

Test(memcpy, round_trip_in_program_order_with_kernels, .timeout = 60)
{
    ds_runtime_t rt = t_sim_runtime(0);
    static const uint32_t sizes[] = {8};
    CUfunction k = t_sim_kernel(rt, "k", 10.0, 1, sizes);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    size_t n = (5u << 20) + 123;
    CUdeviceptr d;
    cr_assert_eq(ds_mem_alloc(v, n, &d), DS_SUCCESS);
    unsigned char *src = malloc(n), *dst = calloc(1, n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    double t0 = 0;
    ds_sim_now_us(rt, &t0);
    cr_assert_eq(ds_memcpy_async(v, d, src, n, DS_COPY_HOST_TO_DEVICE), DS_SUCCESS, "%s",
                 ds_last_error_message());
    void *params[] = {&d};
    cr_assert_eq(ds_launch(v, k, t_dim(1), t_dim(32), 0, params, NULL), DS_SUCCESS);
    cr_assert_eq(ds_memcpy_async(v, d, dst, n, DS_COPY_DEVICE_TO_HOST), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(v), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(memcmp(src, dst, n), 0, "device round trip");
    size_t nrec = 0;
    ds_sim_kernel_record *recs = t_trace(rt, &nrec);
    const ds_sim_kernel_record *r = t_find(recs, nrec, "k");
    double link_us = (double)n / 25000.0;
    cr_assert_geq(r->start_us - t0, link_us * 0.99, "kernel started %.1f us after the copy began (link %.1f us)",
                  r->start_us - t0, link_us);
    free(recs);
    ds_mem_stats m = mem_stats(v);
    cr_assert_eq(m.copies, 2);
    cr_assert_eq(m.copy_bytes, 2 * n);
    cr_assert_eq(ds_memcpy_async(v, 0, dst, n, DS_COPY_DEVICE_TO_HOST), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_memcpy_async(v, d, NULL, n, DS_COPY_DEVICE_TO_HOST), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_memcpy_async(v, d, dst, n, (ds_copy_kind)7), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_memcpy_async(v, d, dst, 0, DS_COPY_DEVICE_TO_HOST), DS_SUCCESS);
    free(src);
    free(dst);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(memcpy, two_be_tenants_weights_one_and_three_share_the_link, .timeout = 60)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t a = vctx_w(rt, "a", DS_CLASS_BEST_EFFORT, 1), b = vctx_w(rt, "b", DS_CLASS_BEST_EFFORT, 3);
    size_t n = (size_t)64 << 20;
    CUdeviceptr da, db;
    cr_assert_eq(ds_mem_alloc(a, n, &da), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(b, n, &db), DS_SUCCESS);
    unsigned char *ha = calloc(1, n), *hb = calloc(1, n);
    cr_assert_eq(ds_memcpy_async(a, da, ha, n, DS_COPY_HOST_TO_DEVICE), DS_SUCCESS);
    cr_assert_eq(ds_memcpy_async(b, db, hb, n, DS_COPY_HOST_TO_DEVICE), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(a), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(b), DS_SUCCESS);
    int hist[128];
    size_t nh = ds__copy_history(rt, hist, 128);
    cr_assert_eq(nh, 64, "32 + 32 chunks of 2 MiB");
    /* window: from b's first chunk to b's last (both backlogged) */
    size_t first_b = nh, last_b = 0;
    /* the weight-3 tenant is the one that finishes first: the last chunk
     * that is not of the tenant finishing last */
    int tb = hist[0];
    for (size_t i = 0; i < nh; i++)
        if (hist[i] != hist[nh - 1])
            tb = hist[i];
    for (size_t i = 0; i < nh; i++)
        if (hist[i] == tb) {
            if (first_b == nh)
                first_b = i;
            last_b = i;
        }
    size_t in_window = last_b - first_b + 1, of_a = 0;
    for (size_t i = first_b; i <= last_b; i++)
        of_a += hist[i] != tb;
    double share_a = (double)of_a / (double)in_window;
    cr_assert(share_a > 0.20 && share_a < 0.30, "weight-1 tenant got %zu of %zu chunks (%.3f)", of_a, in_window,
              share_a);
    ds_mem_stats ma = mem_stats(a), mb = mem_stats(b);
    cr_assert_eq(ma.copy_bytes, n);
    cr_assert_eq(mb.copy_bytes, n);
    cr_assert_gt(ma.copy_wait_ns, mb.copy_wait_ns, "the lighter tenant waited longer");
    free(ha);
    free(hb);
    ds_runtime_destroy(rt);
}

Test(memcpy, latency_sensitive_copy_goes_first, .timeout = 60)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t be = vctx_w(rt, "be", DS_CLASS_BEST_EFFORT, 1), ls = vctx_w(rt, "ls", DS_CLASS_LATENCY_SENSITIVE, 1);
    size_t n = (size_t)64 << 20, small = (size_t)1 << 20;
    CUdeviceptr dbe, dls;
    cr_assert_eq(ds_mem_alloc(be, n, &dbe), DS_SUCCESS);
    cr_assert_eq(ds_mem_alloc(ls, small, &dls), DS_SUCCESS);
    unsigned char *h = calloc(1, n);
    cr_assert_eq(ds_memcpy_async(be, dbe, h, n, DS_COPY_HOST_TO_DEVICE), DS_SUCCESS);
    cr_assert_eq(ds_memcpy_async(ls, dls, h, small, DS_COPY_HOST_TO_DEVICE), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(ls), DS_SUCCESS);
    cr_assert_eq(ds_vctx_synchronize(be), DS_SUCCESS);
    int hist[512];
    size_t nh = ds__copy_history(rt, hist, 512);
    size_t pos = nh;
    for (size_t i = 0; i < nh; i++)
        if (hist[i] != hist[0]) {
            pos = i;
            break;
        }
    cr_assert_lt(pos, 8, "the LS chunk went on the link at position %zu of %zu", pos, nh);
    /* 64 MiB of BE: k 2 MiB chunks until the LS tenant registered (how many
     * is up to the copier thread's timing, at most the BE chunks ahead of the
     * LS chunk), 512 KiB ones after, and the LS chunk: 1 + k + (128 - 4k). */
    cr_assert(nh <= 129 && (129 - nh) % 3 == 0, "%zu chunks: not 2 MiB ones then 512 KiB ones", nh);
    cr_assert_leq((129 - nh) / 3, pos, "%zu 2 MiB BE chunks, but only %zu chunks went before the LS one",
                  (129 - nh) / 3, pos);
    free(h);
    ds_runtime_destroy(rt);
}

Test(memcpy, destroy_with_copies_queued_does_not_hang, .timeout = 60)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    size_t n = (size_t)32 << 20;
    CUdeviceptr d;
    cr_assert_eq(ds_mem_alloc(v, n, &d), DS_SUCCESS);
    unsigned char *h = calloc(1, n);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(ds_memcpy_async(v, d, h, n, DS_COPY_HOST_TO_DEVICE), DS_SUCCESS);
    cr_assert_eq(ds_vctx_destroy(v), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
    free(h);
}
