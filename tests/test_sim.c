/* The simulated device (src/sim) at the driver seam: SM splits, green-context
 * isolation physics, streams, events, value gates, the probe kernel, the
 * kernel trace, both clocks, teardown with work in flight and threads.
 *
 * Driver-level calls go through the simulated driver table; devices come from
 * a runtime on DS_DEVICE_SIM (so that the public ds_sim_* functions reach
 * them), or bare where the test destroys the device itself (sim_driver.h). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/handles.h"
#include "core/runtime.h" /* struct ds_runtime, for a runtime that is not on the sim */
#include "seam/driver.h"
#include "sim/sim_internal.h" /* stream waiters, to order a teardown race */
#include "sim_driver.h"

TestSuite(sim, .init = sd_init, .timeout = 60);

static double wall_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000 * 1000 };
    nanosleep(&ts, NULL);
}

static CUfunction sd_kernel(simdev *s, const char *name, double block_us, uint32_t bpsm)
{
    ds_sim_kernel_desc kd = DS_SIM_KERNEL_DESC_INIT;
    kd.name = name;
    kd.block_us = block_us;
    kd.blocks_per_sm = bpsm;
    return sd_kernel_desc(s, &kd);
}

static CUresult launch(CUfunction f, unsigned grid, CUstream st)
{
    return cu->cuLaunchKernel(f, grid, 1, 1, 128, 1, 1, 0, st, NULL, NULL);
}

static int seq_is(const ds_sim_kernel_record *r, const void *seq)
{
    return r->seq == *(const uint64_t *)seq;
}

/* The trace record with sequence number seq; asserts it is kept. */
static ds_sim_kernel_record rec(simdev *s, uint64_t seq)
{
    size_t n = 0;
    ds_sim_kernel_record r;
    int found = sd_find_last(s, seq_is, &seq, &r, &n);
    cr_assert(found, "kernel record seq %llu is not in the trace (%zu records)",
              (unsigned long long)seq, n);
    return r;
}

static double now_us(simdev *s)
{
    double t = -1;
    cr_assert_eq(ds_sim_now_us(s->rt, &t), DS_SUCCESS);
    return t;
}

/* ------------------------------------------------------------------------ */

Test(sim, split_rule_and_resource_descriptors)
{
    simdev s;
    sd_open(&s, NULL);
    cr_assert_eq(s.ngroups, 15, "132 SMs by 8: %u groups", s.ngroups);
    cr_assert_eq(s.groups[0].sm.smCount, 8);
    cr_assert_eq(s.rem.sm.smCount, 12, "remainder %u", s.rem.sm.smCount);

    CUdevResource all, g2[128], rem2;
    unsigned n = 0;
    CU(cu->cuDeviceGetDevResource(s.dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    cr_assert_eq(all.sm.smCount, 132);
    cr_assert_eq(all.sm.minSmPartitionSize, 8);
    cr_assert_eq(all.sm.smCoscheduledAlignment, 8);
    /* IGNORE_SM_COSCHEDULING: minimum 2 SMs, no alignment */
    CU(cu->cuDevSmResourceSplitByCount(NULL, &n, &all, NULL,
                                       CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, 1));
    cr_assert_eq(n, 66, "IGNORE query: %u groups", n);
    n = 128;
    CU(cu->cuDevSmResourceSplitByCount(g2, &n, &all, &rem2,
                                       CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, 1));
    cr_assert_eq(n, 66);
    cr_assert_eq(g2[0].sm.smCount, 2);
    cr_assert_eq(rem2.sm.smCount, 0);
    /* only 2 groups wanted: the rest goes to the remainder */
    n = 2;
    CU(cu->cuDevSmResourceSplitByCount(g2, &n, &all, &rem2, 0, 8));
    cr_assert_eq(n, 2);
    cr_assert_eq(rem2.sm.smCount, 116, "2 groups -> remainder %u", rem2.sm.smCount);
    /* minCount 12 rounds up to 16: 8 groups would leave 4 -> 7 groups + 20 */
    n = 0;
    CU(cu->cuDevSmResourceSplitByCount(NULL, &n, &all, &rem2, 0, 12));
    cr_assert_eq(n, 7, "132 by 12: %u groups", n);
    cr_assert_eq(rem2.sm.smCount, 20, "132 by 12: remainder %u", rem2.sm.smCount);

    /* descriptor rules */
    CUdevResourceDesc desc;
    CUdevResource two[2] = { s.groups[0], s.groups[0] };
    CU_EXPECT(cu->cuDevResourceGenerateDesc(&desc, two, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
    two[1] = g2[1]; /* from another split call */
    CU_EXPECT(cu->cuDevResourceGenerateDesc(&desc, two, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
    n = 4;
    CU_EXPECT(cu->cuDevSmResourceSplitByCount(g2, &n, &s.groups[0], NULL, 0, 2),
              CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
    CU_EXPECT(cu->cuDevSmResourceSplitByCount(g2, &n, &all, NULL, 0, 133), CUDA_ERROR_INVALID_VALUE);
    CUdevResource junk;
    memset(&junk, 0, sizeof junk);
    junk.type = CU_DEV_RESOURCE_TYPE_SM;
    junk.sm.smCount = 8;
    CU_EXPECT(cu->cuDevResourceGenerateDesc(&desc, &junk, 1), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuDevResourceGenerateDesc(NULL, &junk, 1), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuDevResourceGenerateDesc(&desc, &s.rem, 1)); /* the remainder alone is usable */
    CUgreenCtx g;
    CU_EXPECT(cu->cuGreenCtxCreate(&g, desc, s.dev, 0), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuGreenCtxCreate(&g, desc, s.dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUstream st;
    CU_EXPECT(cu->cuGreenCtxStreamCreate(&st, g, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuGreenCtxDestroy(g));
    sd_close(&s);

    ds_sim_config c128 = DS_SIM_CONFIG_INIT;
    c128.sm_count = 128;
    sd_open(&s, &c128);
    cr_assert_eq(s.ngroups, 16, "128 SMs by 8: %u groups", s.ngroups);
    cr_assert_eq(s.rem.sm.smCount, 0);
    sd_close(&s);
}

/* Long kernel (16 waves of 132 blocks of 1000 us) then a 1-block kernel. */
typedef struct {
    double short_start;
    unsigned long_sms;
    double long_end;
} iso_outcome;

static iso_outcome isolation(int short_prio, int disjoint)
{
    simdev s;
    sd_open(&s, NULL);
    CUgreenCtx gl, gs;
    if (disjoint) {
        gl = sd_green(&s, 2, 14, 1); /* 13*8 + 12 = 116 SMs */
        gs = sd_green(&s, 0, 1, 0);  /* 16 SMs */
    } else {
        gl = gs = sd_green(&s, 0, 14, 1);
    }
    CUstream a = sd_stream(gl, 0), b = sd_stream(gs, short_prio);
    CUfunction lng = sd_kernel(&s, "long", 1000, 1), sh = sd_kernel(&s, "short", 10, 1);
    CU(launch(lng, 132 * 16, a));
    CU(launch(sh, 1, b));
    CU(cu->cuStreamSynchronize(b));
    ds_sim_kernel_record rs = rec(&s, 1);
    if (short_prio || disjoint) /* the long kernel is still running */
        CU_EXPECT(cu->cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    CU(cu->cuStreamSynchronize(a));
    ds_sim_kernel_record rl = rec(&s, 0);
    cr_assert_str_eq(rl.name, "long");
    cr_assert_str_eq(rs.name, "short");
    iso_outcome o = { rs.start_us, t_popcount(rl.sm_mask), rl.end_us };
    CU(cu->cuStreamDestroy(a));
    CU(cu->cuStreamDestroy(b));
    CU(cu->cuGreenCtxDestroy(gl));
    if (disjoint)
        CU(cu->cuGreenCtxDestroy(gs));
    sd_close(&s);
    return o;
}

Test(sim, isolation_shared_green_ctx_waits_behind_the_long_kernel)
{
    iso_outcome o = isolation(0, 0);
    cr_assert_geq(o.short_start, 15000.0, "short started at %.1f us", o.short_start);
    cr_assert_eq(o.long_sms, 132);
    cr_assert_float_eq(o.long_end, 16000.0, 1e-6, "long ended at %.1f us", o.long_end);
}

Test(sim, isolation_priority_stream_waits_one_block)
{
    iso_outcome o = isolation(-5, 0);
    cr_assert_float_eq(o.short_start, 1000.0, 1e-6, "short started at %.1f us", o.short_start);
    cr_assert_eq(o.long_sms, 132);
}

Test(sim, isolation_disjoint_green_ctxs_start_at_once)
{
    iso_outcome o = isolation(0, 1);
    cr_assert_float_eq(o.short_start, 0.0, 1e-9, "short started at %.1f us", o.short_start);
    cr_assert_eq(o.long_sms, 116, "long ran on %u SMs", o.long_sms);
}

Test(sim, events_hand_off_and_elapsed_time)
{
    simdev s;
    sd_open(&s, NULL);
    CUgreenCtx ga = sd_green(&s, 0, 1, 0), gb = sd_green(&s, 2, 14, 1);
    CUstream a = sd_stream(ga, 0), b = sd_stream(gb, 0);
    CUfunction k = sd_kernel(&s, "k", 300, 1);
    CUevent e0, e1, never;
    CU(cu->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CU(cu->cuEventCreate(&e1, CU_EVENT_DEFAULT));
    CU(cu->cuEventCreate(&never, CU_EVENT_DEFAULT));
    CU(cu->cuEventRecord(e0, a));
    CU(launch(k, 32, a)); /* 2 waves on 16 SMs: 600 us */
    CU(cu->cuEventRecord(e1, a));
    CU(cu->cuStreamWaitEvent(b, e1, 0));
    CU(cu->cuStreamWaitEvent(b, never, 0)); /* never recorded: no-op */
    CU(launch(k, 1, b));
    CU_EXPECT(cu->cuEventQuery(e1), CUDA_ERROR_NOT_READY);
    CU_EXPECT(cu->cuStreamQuery(b), CUDA_ERROR_NOT_READY);
    float ms = -1;
    CU_EXPECT(cu->cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_NOT_READY);
    CU_EXPECT(cu->cuEventElapsedTime(&ms, e0, never), CUDA_ERROR_INVALID_HANDLE);
    CU(cu->cuStreamSynchronize(b));
    ds_sim_kernel_record ra = rec(&s, 0), rb = rec(&s, 1);
    cr_assert_float_eq(ra.end_us, 600.0, 1e-9, "A's kernel ended at %.1f us", ra.end_us);
    cr_assert_geq(rb.start_us, ra.end_us, "B's kernel started at %.1f us, before A's end %.1f",
                  rb.start_us, ra.end_us);
    CU(cu->cuEventQuery(e1));
    CU(cu->cuEventElapsedTime(&ms, e0, e1));
    cr_assert(fabsf(ms - 0.6f) < 1e-6f, "cuEventElapsedTime(e0, e1) = %f ms, want 0.6", (double)ms);
    /* re-record behind work, then destroy the event with the record pending */
    CU(launch(k, 1, a));
    CU(cu->cuEventRecord(e0, a));
    CU_EXPECT(cu->cuEventQuery(e0), CUDA_ERROR_NOT_READY);
    CU(cu->cuEventDestroy(e0));
    CU(cu->cuEventSynchronize(e1));
    CU(cu->cuStreamSynchronize(a));
    CU_EXPECT(cu->cuEventQuery(e0), CUDA_ERROR_INVALID_HANDLE);
    CU(cu->cuEventDestroy(e1));
    CU(cu->cuEventDestroy(never));
    CU(cu->cuStreamDestroy(a));
    CU(cu->cuStreamDestroy(b));
    CU(cu->cuGreenCtxDestroy(ga));
    CU(cu->cuGreenCtxDestroy(gb));
    sd_close(&s);
}

Test(sim, trace_keeps_parameter_bytes_and_launch_fields)
{
    simdev s;
    sd_open(&s, NULL);
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUstream st = sd_stream(g, 0);
    ds_sim_kernel_desc kd = DS_SIM_KERNEL_DESC_INIT;
    kd.name = "params_kernel";
    kd.block_us = 7;
    kd.num_params = 4;
    kd.param_sizes[0] = 4;
    kd.param_sizes[1] = 8;
    kd.param_sizes[2] = 8;
    kd.param_sizes[3] = 3;
    CUfunction f;
    cr_assert_eq(ds_sim_kernel_create(s.rt, &kd, &f), DS_SUCCESS);
    int32_t p0 = -123456;
    double p1 = 3.14159265358979;
    CUdeviceptr p2 = 0xdeadbeefcafef00dull;
    unsigned char p3[3] = { 0xa1, 0xb2, 0xc3 };
    void *params[4] = { &p0, &p1, &p2, p3 };
    unsigned char want[23];
    memcpy(want, &p0, 4);
    memcpy(want + 4, &p1, 8);
    memcpy(want + 12, &p2, 8);
    memcpy(want + 20, p3, 3);
    CU(cu->cuLaunchKernel(f, 3, 2, 1, 32, 4, 2, 1024, st, params, NULL));
    ds_dim3 grid = { 5, 1, 1 }, block = { 64, 1, 1 };
    cr_assert_eq(ds_sim_launch_on_stream(s.rt, st, f, grid, block, params), DS_SUCCESS, "%s",
                 ds_last_error_message());
    CU(cu->cuStreamSynchronize(st));
    ds_sim_kernel_record r0 = rec(&s, 0), r1 = rec(&s, 1);
    cr_assert_eq(r0.param_bytes, 23);
    cr_assert_arr_eq(r0.params, want, 23, "cuLaunchKernel's parameters differ");
    cr_assert_eq(r1.param_bytes, 23);
    cr_assert_arr_eq(r1.params, want, 23, "ds_sim_launch_on_stream's parameters differ");
    cr_assert_eq(r0.function, f);
    cr_assert_eq(r0.stream, st);
    cr_assert_str_eq(r0.name, "params_kernel");
    cr_assert_eq(r0.grid.x, 3);
    cr_assert_eq(r0.grid.y, 2);
    cr_assert_eq(r0.grid.z, 1);
    cr_assert_eq(r0.block.x, 32);
    cr_assert_eq(r0.block.y, 4);
    cr_assert_eq(r0.block.z, 2);
    cr_assert_eq(r0.shared_mem_bytes, 1024);
    cr_assert_eq(r1.grid.x, 5);
    cr_assert_eq(r1.block.x, 64);
    cr_assert_float_eq(r0.start_us, 0.0, 1e-9);
    cr_assert_float_eq(r0.end_us, 7.0, 1e-9);
    cr_assert_float_eq(r1.start_us, 7.0, 1e-9);
    cr_assert_float_eq(r1.end_us, 14.0, 1e-9);

    /* bad launches */
    CU_EXPECT(cu->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, st, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, st, params, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuLaunchKernel(f, 1, 1, 1, 1024, 2, 1, 0, st, params, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 300000, st, params, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, st, params, NULL), CUDA_ERROR_INVALID_HANDLE);
    CU_EXPECT(cu->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)(uintptr_t)0x1234, params, NULL),
              CUDA_ERROR_INVALID_HANDLE);
    ds_dim3 zero = { 0, 1, 1 };
    cr_assert_eq(ds_sim_launch_on_stream(s.rt, st, f, zero, block, params), DS_ERR_INVALID_LAUNCH);
    cr_assert_eq(ds_sim_launch_on_stream(s.rt, st, f, grid, block, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_sim_launch_on_stream(s.rt, (CUstream)(uintptr_t)0x1234, f, grid, block, params),
                 DS_ERR_INVALID_ARGUMENT);
    /* bad kernel descriptions */
    CUfunction bad;
    kd.blocks_per_sm = 3;
    cr_assert_eq(ds_sim_kernel_create(s.rt, &kd, &bad), DS_ERR_INVALID_ARGUMENT);
    kd.blocks_per_sm = 1;
    kd.block_us = NAN;
    cr_assert_eq(ds_sim_kernel_create(s.rt, &kd, &bad), DS_ERR_INVALID_ARGUMENT);
    /* finite but beyond the documented maximum, and the limits themselves */
    const double bad_us[] = {1e300, INFINITY, -1.0, 0.0, DS_SIM_MAX_BLOCK_US * 1.000001};
    for (size_t i = 0; i < sizeof bad_us / sizeof bad_us[0]; i++) {
        kd.block_us = bad_us[i];
        cr_assert_eq(ds_sim_kernel_create(s.rt, &kd, &bad), DS_ERR_INVALID_ARGUMENT, "block_us %g accepted",
                     bad_us[i]);
        cr_assert(strstr(ds_last_error_message(), "block_us"), "%s", ds_last_error_message());
    }
    kd.block_us = DS_SIM_MAX_BLOCK_US;
    cr_assert_eq(ds_sim_kernel_create(s.rt, &kd, &bad), DS_SUCCESS, "%s", ds_last_error_message());
    kd.block_us = 1;
    kd.size = 3;
    cr_assert_eq(ds_sim_kernel_create(s.rt, &kd, &bad), DS_ERR_ABI_MISMATCH);
    /* runtimes that are not on the simulated device, bad arguments */
    struct ds_runtime notsim;
    memset(&notsim, 0, sizeof notsim);
    notsim.magic = DS__RT_MAGIC;
    notsim.info.device = DS_DEVICE_CUDA;
    notsim.ops = &ds__cuda_devops;
    double now;
    cr_assert_eq(ds_sim_now_us(&notsim, &now), DS_ERR_NOT_SUPPORTED);
    cr_assert_eq(ds_sim_now_us(NULL, &now), DS_ERR_INVALID_HANDLE);
    cr_assert_eq(ds_sim_now_us(s.rt, NULL), DS_ERR_INVALID_ARGUMENT);
    size_t cnt;
    cr_assert_eq(ds_sim_trace_get(s.rt, NULL, 3, &cnt), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_sim_trace_get(s.rt, NULL, 0, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_sim_trace_get(s.rt, NULL, 0, &cnt), DS_SUCCESS);
    cr_assert_eq(cnt, 0);
    /* clearing drops the records, sequence numbers keep counting */
    cr_assert_eq(ds_sim_trace_clear(s.rt), DS_SUCCESS);
    cr_assert_eq(ds_sim_launch_on_stream(s.rt, st, f, grid, block, params), DS_SUCCESS);
    ds_sim_kernel_record buf[4];
    cr_assert_eq(ds_sim_trace_get(s.rt, buf, 4, &cnt), DS_SUCCESS);
    cr_assert_eq(cnt, 1, "after clear: %zu records", cnt);
    cr_assert_eq(buf[0].seq, 2, "seq %llu", (unsigned long long)buf[0].seq);
    cr_assert_float_eq(buf[0].start_us, 14.0, 1e-9);
    cr_assert_float_eq(buf[0].end_us, -1.0, 1e-9, "a running kernel's end_us is -1");
    CU(cu->cuStreamSynchronize(st));
    CU(cu->cuStreamDestroy(st));
    CU(cu->cuGreenCtxDestroy(g));
    sd_close(&s);
}

static void probe(CUfunction pf, CUgreenCtx g, unsigned want, unsigned first_sm)
{
    CUstream st = sd_stream(g, 0);
    CUdeviceptr bm;
    CU(cu->cuMemAlloc(&bm, 32));
    CU(cu->cuMemsetD32(bm, 0, 8));
    unsigned long long spin = 1000;
    void *params[2] = { &bm, &spin };
    CU(cu->cuLaunchKernel(pf, 2048, 1, 1, 32, 1, 1, 0, st, params, NULL));
    CU(cu->cuStreamSynchronize(st));
    uint32_t words[8];
    CU(cu->cuMemcpyDtoH(words, bm, sizeof words));
    unsigned n = 0, lo = 256, hi = 0;
    for (unsigned i = 0; i < 256; i++)
        if (words[i / 32] >> (i % 32) & 1u) {
            n++;
            lo = i < lo ? i : lo;
            hi = i;
        }
    cr_assert_eq(n, want, "probe on a %u-SM green ctx: %u bits set", want, n);
    cr_assert_eq(lo, first_sm, "lowest SM %u, want %u", lo, first_sm);
    cr_assert_eq(hi, first_sm + want - 1, "highest SM %u, want %u", hi, first_sm + want - 1);
    CU(cu->cuMemFree(bm));
    CU(cu->cuStreamDestroy(st));
}

Test(sim, probe_kernel_sets_the_bits_of_its_green_ctx_sms)
{
    simdev s;
    sd_open(&s, NULL);
    CUmodule m;
    CUfunction pf, other;
    CU(cu->cuModuleLoadData(&m, "not really a fatbin"));
    CU(cu->cuModuleGetFunction(&pf, m, "ds_probe_smid"));
    CU_EXPECT(cu->cuModuleGetFunction(&other, m, "nope"), CUDA_ERROR_NOT_FOUND);
    CUgreenCtx g16 = sd_green(&s, 0, 1, 0), g116 = sd_green(&s, 2, 14, 1);
    CUgreenCtx grem = sd_green(&s, 1, 0, 1), gall = sd_green(&s, 0, 14, 1);
    probe(pf, g16, 16, 0);
    probe(pf, g116, 116, 16);
    probe(pf, grem, 12, 120);
    probe(pf, gall, 132, 0);
    CU(cu->cuGreenCtxDestroy(g16));
    CU(cu->cuGreenCtxDestroy(g116));
    CU(cu->cuGreenCtxDestroy(grem));
    CU(cu->cuGreenCtxDestroy(gall));
    CU(cu->cuModuleUnload(m));
    CU_EXPECT(cu->cuLaunchKernel(pf, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    sd_close(&s);
}

/* REALTIME: wall time never runs ahead of simulated time; the upper bounds are
 * generous (+50% on the best of 3 tries) for a loaded CI machine. */
Test(sim, realtime_clock_follows_the_wall_clock)
{
    const double kus = 10000.0, sleep_us = 10000.0;
    ds_sim_config c = DS_SIM_CONFIG_INIT;
    c.clock = DS_SIM_CLOCK_REALTIME;
    simdev s;
    sd_open(&s, &c);
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUstream st = sd_stream(g, 0);
    CUfunction k = sd_kernel(&s, "rt", kus, 1);
    double best = 1e30;
    for (int i = 0; i < 3; i++) {
        double t0 = wall_us();
        CU(launch(k, 132, st)); /* one wave */
        CU(cu->cuStreamSynchronize(st));
        double dt = wall_us() - t0;
        ds_sim_kernel_record r = rec(&s, (uint64_t)i);
        cr_assert_float_eq(r.end_us - r.start_us, kus, 1e-6, "simulated duration %.1f us",
                           r.end_us - r.start_us);
        cr_assert_geq(dt, 0.99 * kus, "a %.0f us kernel returned after %.0f us of wall time", kus, dt);
        best = dt < best ? dt : best;
    }
    cr_assert_lt(best, 1.5 * kus * T_SANITIZER_SLOWDOWN, "a %.0f us kernel took at best %.0f us of wall time", kus, best);

    best = 1e30;
    for (int i = 0; i < 3; i++) {
        double now0 = now_us(&s), t0 = wall_us();
        cr_assert_eq(ds_sim_sleep_until(s.rt, now0 + sleep_us), DS_SUCCESS);
        double dt = wall_us() - t0, now1 = now_us(&s);
        cr_assert_geq(now1 - now0, sleep_us, "simulated time advanced %.0f us", now1 - now0);
        cr_assert_geq(dt, 0.99 * sleep_us, "ds_sim_sleep_until(now + %.0f) slept %.0f us", sleep_us, dt);
        best = dt < best ? dt : best;
    }
    cr_assert_lt(best, 1.5 * sleep_us, "ds_sim_sleep_until(now + %.0f) slept at best %.0f us",
                 sleep_us, best);

    /* a host-released gate opens when the host wrote, not earlier */
    uint32_t word = 0;
    CU(cu->cuStreamWaitValue32(st, (CUdeviceptr)(uintptr_t)&word, 1, CU_STREAM_WAIT_VALUE_EQ));
    CU(launch(k, 1, st)); /* seq 3 */
    CUstream other = sd_stream(g, 0);
    CUfunction shortk = sd_kernel(&s, "short", 100, 1);
    CU(launch(shortk, 1, other));
    sleep_ms(5);
    double tw = now_us(&s);
    __atomic_store_n(&word, 1u, __ATOMIC_RELEASE);
    sleep_ms(5); /* no driver call meanwhile */
    CU(cu->cuStreamSynchronize(st));
    ds_sim_kernel_record rg = rec(&s, 3);
    cr_assert_str_eq(rg.name, "rt");
    cr_assert_geq(rg.start_us, tw, "gate opened early: kernel at %.0f us, written at %.0f us",
                  rg.start_us, tw);
    CU(cu->cuStreamDestroy(other));
    CU(cu->cuStreamDestroy(st));
    CU(cu->cuGreenCtxDestroy(g));
    sd_close(&s);
}

Test(sim, virtual_time_runs_1_32_m_blocks_faster_than_real_time)
{
    simdev s;
    sd_open(&s, NULL);
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUstream st = sd_stream(g, 0);
    CUfunction k = sd_kernel(&s, "busy", 100, 1);
    double t0 = wall_us();
    CU(launch(k, 132 * 10000, st)); /* 1.32 M blocks of 100 us = 1 s */
    CU(cu->cuStreamSynchronize(st));
    double dt = wall_us() - t0;
    double now = now_us(&s);
    cr_assert_float_eq(now, 1e6, 1e-6, "simulated %.0f us", now);
    cr_assert_lt(dt, 1e6 * T_SANITIZER_SLOWDOWN, "1 simulated second took %.0f us of wall time", dt);

    /* staggered: 3 streams, different block times and occupancies, over
     * overlapping SM sets, 1000 kernels each */
    CUgreenCtx g2 = sd_green(&s, 0, 7, 0), g3 = sd_green(&s, 4, 14, 1);
    CUstream s2 = sd_stream(g2, 0), s3 = sd_stream(g3, -2);
    CUfunction k2 = sd_kernel(&s, "b2", 37, 2), k3 = sd_kernel(&s, "b3", 61, 4);
    cr_assert_eq(ds_sim_trace_clear(s.rt), DS_SUCCESS);
    double n0 = now;
    t0 = wall_us();
    for (int i = 0; i < 1000; i++) {
        CU(launch(k, 200, st));
        CU(launch(k2, 150, s2));
        CU(launch(k3, 300, s3));
    }
    CU(cu->cuStreamSynchronize(st));
    CU(cu->cuStreamSynchronize(s2));
    CU(cu->cuStreamSynchronize(s3));
    dt = wall_us() - t0;
    now = now_us(&s);
    cr_assert_gt(now - n0, 0.0);
    cr_assert_lt(dt, (now - n0) * T_SANITIZER_SLOWDOWN, "%.0f simulated us took %.0f us of wall time", now - n0, dt);
    size_t n = 0;
    cr_assert_eq(ds_sim_trace_get(s.rt, NULL, 0, &n), DS_SUCCESS);
    CU(cu->cuStreamDestroy(st));
    CU(cu->cuStreamDestroy(s2));
    CU(cu->cuStreamDestroy(s3));
    CU(cu->cuGreenCtxDestroy(g));
    CU(cu->cuGreenCtxDestroy(g2));
    CU(cu->cuGreenCtxDestroy(g3));
    sd_close(&s);
}

static uint32_t gate_word;

static void *release_gate(void *arg)
{
    (void)arg;
    sleep_ms(20);
    __atomic_store_n(&gate_word, 1u, __ATOMIC_RELEASE);
    return NULL;
}

Test(sim, wait_and_write_value_gates)
{
    simdev s;
    sd_open(&s, NULL);
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUstream a = sd_stream(g, 0), b = sd_stream(g, 0), c = sd_stream(g, 0);
    CUfunction k = sd_kernel(&s, "k", 50, 1);
    gate_word = 0;
    CU(cu->cuStreamWaitValue32(a, (CUdeviceptr)(uintptr_t)&gate_word, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CU(launch(k, 10, a));
    CU(launch(k, 10, b));
    CU(cu->cuStreamSynchronize(b)); /* time moves to 50 us; a is still gated */
    CU_EXPECT(cu->cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    double t0 = wall_us();
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, release_gate, NULL), 0);
    CU(cu->cuStreamSynchronize(a)); /* nothing runs: polls until the host writes */
    double dt = wall_us() - t0;
    pthread_join(th, NULL);
    ds_sim_kernel_record ra = rec(&s, 0);
    cr_assert_float_eq(ra.start_us, 50.0, 1e-9, "gated kernel started at %.1f us", ra.start_us);
    cr_assert_geq(dt, 19000.0, "the gate opened after %.0f us of wall time, before the host wrote", dt);

    /* write on one stream, wait on another */
    uint32_t word = 0;
    CU(launch(k, 1, b));
    CU(cu->cuStreamWriteValue32(b, (CUdeviceptr)(uintptr_t)&word, 7, 0));
    CU(cu->cuStreamWaitValue32(c, (CUdeviceptr)(uintptr_t)&word, 7, CU_STREAM_WAIT_VALUE_EQ));
    CU(launch(k, 1, c));
    cr_assert_eq(__atomic_load_n(&word, __ATOMIC_ACQUIRE), 0, "written before the writer's kernel ran");
    CU(cu->cuStreamSynchronize(c));
    ds_sim_kernel_record rb = rec(&s, 2), rc = rec(&s, 3);
    cr_assert_eq(__atomic_load_n(&word, __ATOMIC_ACQUIRE), 7);
    cr_assert_float_eq(rc.start_us, rb.end_us, 1e-9, "waiter's kernel at %.1f us, writer's ended %.1f",
                       rc.start_us, rb.end_us);
    CU_EXPECT(cu->cuStreamWaitValue32(c, (CUdeviceptr)(uintptr_t)&word + 1, 7, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuStreamWaitValue32(c, 0, 7, 0), CUDA_ERROR_INVALID_VALUE);
    /* NOR and AND. The word is polled by pending waits while the scheduler
     * thread's passes settle the device: store it atomically, as host code
     * must for any word the device polls. */
    __atomic_store_n(&word, 0xffffffffu, __ATOMIC_RELEASE);
    CU(cu->cuStreamWaitValue32(c, (CUdeviceptr)(uintptr_t)&word, 0x0u, CU_STREAM_WAIT_VALUE_NOR));
    CU_EXPECT(cu->cuStreamQuery(c), CUDA_ERROR_NOT_READY);
    __atomic_store_n(&word, 0x7fffffffu, __ATOMIC_RELEASE);
    CU(cu->cuStreamQuery(c));
    CU(cu->cuStreamWaitValue32(c, (CUdeviceptr)(uintptr_t)&word, 0x80000000u, CU_STREAM_WAIT_VALUE_AND));
    CU_EXPECT(cu->cuStreamQuery(c), CUDA_ERROR_NOT_READY);
    __atomic_store_n(&word, 0x80000000u, __ATOMIC_RELEASE);
    CU(cu->cuStreamSynchronize(c));
    CU(cu->cuStreamDestroy(a));
    CU(cu->cuStreamDestroy(b));
    CU(cu->cuStreamDestroy(c));
    CU(cu->cuGreenCtxDestroy(g));
    sd_close(&s);
}

Test(sim, device_queries_and_error_names)
{
    simdev s;
    sd_open(&s, NULL);
    int v = -1, least = 9, greatest = 9, count = 0;
    char name[64], bus[32];
    CU(cu->cuInit(0));
    CU(cu->cuDriverGetVersion(&v));
    cr_assert_eq(v, 13000);
    cr_assert_eq(cu->version, 0);
    cr_assert_str_eq(cu->origin, "simulated device");
    CU(cu->cuDeviceGetCount(&count));
    cr_assert_eq(count, 1);
    CUdevice d0;
    CU(cu->cuDeviceGet(&d0, 0));
    cr_assert_eq(d0, s.dev);
    CU_EXPECT(cu->cuDeviceGet(&d0, 1), CUDA_ERROR_INVALID_DEVICE);
    CU(cu->cuDeviceGetName(name, sizeof name, s.dev));
    cr_assert_str_eq(name, "Simulated GPU (132 SMs)");
    CU(cu->cuDeviceGetPCIBusId(bus, sizeof bus, s.dev));
    cr_assert_str_eq(bus, "0000:00:00.0");
    CU(cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, s.dev));
    cr_assert_eq(v, 132);
    CU(cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, s.dev));
    cr_assert_eq(v, 232448);
    CU(cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, s.dev));
    cr_assert_eq(v, 2147483647);
    CU_EXPECT(cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 63), CUDA_ERROR_INVALID_DEVICE);
    CU_EXPECT(cu->cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, s.dev), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuCtxGetStreamPriorityRange(&least, &greatest));
    cr_assert_eq(least, 0);
    cr_assert_eq(greatest, -5);
    const char *str = NULL;
    CU(cu->cuGetErrorName(CUDA_ERROR_NOT_READY, &str));
    cr_assert_str_eq(str, "CUDA_ERROR_NOT_READY");
    CU(cu->cuGetErrorString(CUDA_ERROR_INVALID_HANDLE, &str));
    cr_assert_str_eq(str, "invalid resource handle");
    CU_EXPECT(cu->cuGetErrorName((CUresult)123456, &str), CUDA_ERROR_INVALID_VALUE);
    sd_close(&s);
}

Test(sim, null_stream_follows_the_current_context)
{
    simdev s;
    sd_open(&s, NULL);
    /* green ctx current -> the NULL stream is its default stream */
    CUgreenCtx g = sd_green(&s, 0, 1, 0), gback = NULL;
    CUcontext gc, cur;
    CU(cu->cuCtxFromGreenCtx(&gc, g));
    CU(cu->cuCtxSetCurrent(gc));
    CU(cu->cuCtxGetCurrent(&cur));
    cr_assert_eq(cur, gc);
    CU(cu->cuStreamGetGreenCtx(NULL, &gback));
    cr_assert_eq(gback, g);
    CUfunction k = sd_kernel(&s, "k", 10, 1);
    CU(launch(k, 64, NULL)); /* 16 SMs: 4 waves */
    CU(cu->cuStreamSynchronize(NULL));
    ds_sim_kernel_record r = rec(&s, 0);
    cr_assert_float_eq(r.end_us - r.start_us, 40.0, 1e-9, "%.0f us", r.end_us - r.start_us);
    cr_assert_eq(r.sm_mask[0], 0xffffull, "mask %llx", (unsigned long long)r.sm_mask[0]);
    cr_assert_eq(t_popcount(r.sm_mask), 16);
    /* primary current -> the device's NULL stream over all SMs */
    CU(cu->cuCtxSetCurrent(s.primary));
    CU(cu->cuStreamGetGreenCtx(NULL, &gback));
    cr_assert_null(gback);
    CU(launch(k, 264, NULL)); /* all 132 SMs: 2 waves */
    CU(cu->cuStreamSynchronize(NULL));
    r = rec(&s, 1);
    cr_assert_float_eq(r.end_us - r.start_us, 20.0, 1e-9, "%.0f us", r.end_us - r.start_us);
    cr_assert_eq(t_popcount(r.sm_mask), 132);
    CU(cu->cuGreenCtxDestroy(g));
    sd_close(&s);
}

Test(sim, memory_and_bad_handles)
{
    simdev s;
    sd_open(&s, NULL);
    CUdeviceptr p;
    CU(cu->cuMemAlloc(&p, 100));
    CU_EXPECT(cu->cuMemcpyHtoD(p + 96, "12345678", 8), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuMemcpyHtoD(p + 92, "12345678", 8));
    char back[8];
    CU(cu->cuMemcpyDtoH(back, p + 92, 8));
    cr_assert_arr_eq(back, "12345678", 8);
    CU_EXPECT(cu->cuMemFree(p + 4), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuMemFree(p));
    CU_EXPECT(cu->cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    CU(cu->cuMemAlloc(&p, 64)); /* left on purpose: freed with the device */

    CU_EXPECT(cu->cuStreamSynchronize((CUstream)(uintptr_t)0xdeadbeef), CUDA_ERROR_INVALID_HANDLE);
    CU_EXPECT(cu->cuEventRecord(NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    CU_EXPECT(cu->cuEventCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuGreenCtxDestroy(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CU_EXPECT(cu->cuCtxSetCurrent((CUcontext)(uintptr_t)0x42), CUDA_ERROR_INVALID_CONTEXT);
    CU_EXPECT(cu->cuModuleUnload(NULL), CUDA_ERROR_INVALID_HANDLE);
    CU_EXPECT(cu->cuDeviceGetDevResource(s.dev, NULL, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_VALUE);
    CU_EXPECT(cu->cuStreamDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);
    sd_close(&s);
}

Test(sim, stream_and_green_ctx_destroyed_with_work_in_flight)
{
    simdev s;
    sd_open(&s, NULL);
    CUgreenCtx g = sd_green(&s, 0, 1, 0); /* 16 SMs */
    CUfunction k = sd_kernel(&s, "k", 10, 1);
    CUstream a = sd_stream(g, 0), b = sd_stream(g, 0);
    CUevent ev;
    CU(cu->cuEventCreate(&ev, 0));
    /* a stream destroyed with work pending: released after its work */
    CU(launch(k, 1000, a)); /* 63 waves on 16 SMs */
    CU(cu->cuEventRecord(ev, a));
    CU(cu->cuStreamDestroy(a));
    CU_EXPECT(cu->cuStreamQuery(a), CUDA_ERROR_INVALID_HANDLE);
    CU(cu->cuEventSynchronize(ev));
    ds_sim_kernel_record r = rec(&s, 0);
    cr_assert_float_eq(r.end_us - r.start_us, 630.0, 1e-9, "the destroyed stream's kernel ran %.0f us",
                       r.end_us - r.start_us);
    cr_assert_geq(now_us(&s), 630.0);
    /* a green ctx destroyed with a live stream: the stream is orphaned */
    CU(launch(k, 16, b));
    CU(cu->cuGreenCtxDestroy(g));
    CU_EXPECT(cu->cuStreamSynchronize(b), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_EXPECT(cu->cuStreamDestroy(b), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_EXPECT(cu->cuGreenCtxDestroy(g), CUDA_ERROR_INVALID_CONTEXT);
    CU(cu->cuEventDestroy(ev));
    sd_close(&s);
}

static uint32_t never_word;

Test(sim, device_destroyed_with_work_in_flight)
{
    simdev s;
    sd_open_bare(&s, NULL);
    CUmodule m;
    CUfunction pf;
    CU(cu->cuModuleLoadData(&m, "not really a fatbin"));
    CU(cu->cuModuleGetFunction(&pf, m, "ds_probe_smid"));
    CUdeviceptr bm;
    CU(cu->cuMemAlloc(&bm, 32));
    unsigned long long spin = 0;
    void *params[2] = { &bm, &spin };
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUstream c = sd_stream(g, 0);
    CUevent ev;
    CU(cu->cuEventCreate(&ev, 0));
    for (int i = 0; i < 50; i++) {
        CU(cu->cuLaunchKernel(pf, 5000, 1, 1, 32, 1, 1, 0, c, params, NULL));
        CU(cu->cuEventRecord(ev, c));
        CU(cu->cuStreamWaitEvent(c, ev, 0));
    }
    never_word = 0;
    CU(cu->cuStreamWaitValue32(c, (CUdeviceptr)(uintptr_t)&never_word, 99, CU_STREAM_WAIT_VALUE_EQ));
    CU_EXPECT(cu->cuStreamQuery(c), CUDA_ERROR_NOT_READY);
    sd_close(&s); /* ds__sim_device_destroy: returns, frees everything */
    CU_EXPECT(cu->cuStreamQuery(c), CUDA_ERROR_INVALID_HANDLE);
    CU_EXPECT(cu->cuEventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
    char name[64];
    CU_EXPECT(cu->cuDeviceGetName(name, sizeof name, s.dev), CUDA_ERROR_INVALID_DEVICE);
    int count = -1;
    CU(cu->cuDeviceGetCount(&count));
    cr_assert_eq(count, 0);
    ds__sim_device_destroy(s.dev); /* twice: a no-op */
}

/* Another thread destroys the device once this one waits on a gate. */
typedef struct {
    CUdevice dev;
    CUstream stream;
    int saw_waiter;
} destroyer_arg;

static void *destroyer(void *p)
{
    destroyer_arg *a = p;
    /* wait (up to 10 s) until the main thread is inside cuStreamSynchronize */
    for (int i = 0; i < 10000 && !a->saw_waiter; i++) {
        sim_dev *d;
        if (ds__sim_dev_acquire(a->dev, &d) != CUDA_SUCCESS)
            break;
        sim_stream *s = ds__sim_handle_get(d, (uint64_t)(uintptr_t)a->stream, SIM_H_STREAM);
        a->saw_waiter = s && s->waiters > 0;
        ds__sim_dev_release(d);
        if (!a->saw_waiter)
            sleep_ms(1);
    }
    ds__sim_device_destroy(a->dev);
    return NULL;
}

Test(sim, device_destroyed_while_a_thread_waits)
{
    simdev s;
    sd_open_bare(&s, NULL);
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUstream a = sd_stream(g, 0);
    static uint32_t never = 0;
    CU(cu->cuStreamWaitValue32(a, (CUdeviceptr)(uintptr_t)&never, 1, CU_STREAM_WAIT_VALUE_EQ));
    destroyer_arg da = { s.dev, a, 0 };
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, destroyer, &da), 0);
    CUresult r = cu->cuStreamSynchronize(a);
    pthread_join(th, NULL);
    cr_assert(da.saw_waiter, "the destroyer never saw this thread waiting");
    cr_assert_eq(r, CUDA_ERROR_CONTEXT_IS_DESTROYED, "the waiter got %s", cuname(r));
    cu->cuCtxSetCurrent(NULL);
    int count = -1;
    CU(cu->cuDeviceGetCount(&count));
    cr_assert_eq(count, 0);
}

static char logged[512];
static void keep_log(ds_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level == DS_LOG_ERROR)
        snprintf(logged, sizeof logged, "%s", msg);
}

/* A runtime on the simulated device has one device, ordinal 0; a negative
 * ordinal is refused on either kind, with the reason logged. */
Test(sim, device_ordinal_is_range_checked)
{
    const int bad[] = {-5, -1, 1, 7, INT32_MAX};
    cr_assert_eq(ds_log_set_handler(keep_log, NULL, DS_LOG_ERROR), DS_SUCCESS);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
        cfg.device = DS_DEVICE_SIM;
        cfg.device_ordinal = bad[i];
        ds_runtime_t rt = NULL;
        logged[0] = '\0';
        cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_INVALID_ARGUMENT, "ordinal %d accepted", bad[i]);
        cr_assert_null(rt);
        cr_assert(strstr(logged, "device_ordinal"), "ordinal %d: logged '%s'", bad[i], logged);
    }
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_CUDA;
    cfg.device_ordinal = -5;
    ds_runtime_t rt = NULL;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_INVALID_ARGUMENT, "%s", ds_last_error_message());
    cfg.device = DS_DEVICE_SIM;
    cfg.device_ordinal = 0;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
    ds_log_set_handler(NULL, NULL, DS_LOG_ERROR);
}

Test(sim, trace_ring_keeps_the_last_records)
{
    ds_sim_config c = DS_SIM_CONFIG_INIT;
    c.trace_capacity = 4;
    c.launch_overhead_us = 3;
    simdev s;
    sd_open(&s, &c);
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUstream a = sd_stream(g, 0), b = sd_stream(g, 0);
    CUfunction k = sd_kernel(&s, "k", 10, 1);
    for (int i = 0; i < 10; i++)
        CU(launch(k, 1, i % 2 ? b : a));
    ds_sim_kernel_record buf[8];
    size_t n = 0;
    cr_assert_eq(ds_sim_trace_get(s.rt, buf, 8, &n), DS_SUCCESS);
    cr_assert_eq(n, 4, "capacity 4 after 10 launches: %zu records", n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(buf[i].seq, 6 + i, "record %zu has seq %llu", i, (unsigned long long)buf[i].seq);
    cr_assert_float_eq(buf[0].submit_us, 21.0, 1e-9);
    cr_assert_float_eq(buf[3].submit_us, 30.0, 1e-9);
    cr_assert_eq(ds_sim_sleep_until(s.rt, 45), DS_SUCCESS);
    cr_assert_float_eq(now_us(&s), 45.0, 1e-9);
    /* a smaller buffer gets the oldest kept records */
    cr_assert_eq(ds_sim_trace_get(s.rt, buf, 2, &n), DS_SUCCESS);
    cr_assert_eq(n, 2);
    cr_assert_eq(buf[0].seq, 6);
    /* a: 3-13, 13-23, 23-33, 33-43, 43-53; b: 6-16, 16-26, 26-36, 36-46, 46-56 */
    cr_assert_float_eq(buf[0].end_us, 43.0, 1e-9);
    cr_assert_float_eq(buf[1].start_us, 36.0, 1e-9);
    cr_assert_float_eq(buf[1].end_us, -1.0, 1e-9, "seq 7 still running at 45 us");
    CU_EXPECT(cu->cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    cr_assert_eq(ds_sim_sleep_until(s.rt, 10), DS_SUCCESS, "a time in the past returns at once");
    cr_assert_float_eq(now_us(&s), 45.0, 1e-9);
    CU(cu->cuStreamSynchronize(a));
    CU(cu->cuStreamSynchronize(b));
    cr_assert_eq(ds_sim_trace_get(s.rt, buf, 8, &n), DS_SUCCESS);
    cr_assert_eq(n, 4);
    cr_assert_float_eq(buf[3].end_us, 56.0, 1e-9);
    CU(cu->cuStreamDestroy(a));
    CU(cu->cuStreamDestroy(b));
    CU(cu->cuGreenCtxDestroy(g));
    sd_close(&s);

    /* capacity 0: no records at all */
    c.trace_capacity = 0;
    sd_open(&s, &c);
    CUfunction k0 = sd_kernel(&s, "k0", 10, 1);
    CU(launch(k0, 1, NULL));
    cr_assert_eq(ds_sim_trace_get(s.rt, buf, 8, &n), DS_SUCCESS);
    cr_assert_eq(n, 0);
    sd_close(&s);
}

Test(sim, launch_overhead_advances_virtual_time)
{
    for (int with = 0; with < 2; with++) {
        const double ov = with ? 2.5 : 0.0;
        ds_sim_config c = DS_SIM_CONFIG_INIT;
        c.launch_overhead_us = ov;
        simdev s;
        sd_open(&s, &c);
        CUgreenCtx g = sd_green(&s, 0, 14, 1);
        CUstream a = sd_stream(g, 0);
        CUfunction k = sd_kernel(&s, "k", 10, 1);
        for (int i = 0; i < 4; i++)
            CU(launch(k, 1, a));
        cr_assert_float_eq(now_us(&s), 4 * ov, 1e-9, "overhead %.1f: now %.1f after 4 launches", ov,
                           now_us(&s));
        CU(cu->cuStreamSynchronize(a));
        for (uint64_t i = 0; i < 4; i++) {
            ds_sim_kernel_record r = rec(&s, i);
            cr_assert_float_eq(r.submit_us, ov * (double)(i + 1), 1e-9, "overhead %.1f: launch %llu at %.1f us",
                               ov, (unsigned long long)i, r.submit_us);
            cr_assert_float_eq(r.start_us, ov + 10.0 * (double)i, 1e-9, "overhead %.1f: kernel %llu at %.1f us",
                               ov, (unsigned long long)i, r.start_us);
            cr_assert_float_eq(r.end_us, r.start_us + 10.0, 1e-9);
        }
        CU(cu->cuStreamDestroy(a));
        CU(cu->cuGreenCtxDestroy(g));
        sd_close(&s);
    }
}

typedef struct {
    simdev *s;
    CUgreenCtx g;
    CUfunction k;
    int id;
    int bad;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *w = p;
    CUstream st = NULL;
    if (cu->cuGreenCtxStreamCreate(&st, w->g, CU_STREAM_NON_BLOCKING, -(w->id % 3)) != CUDA_SUCCESS)
        w->bad++;
    CUevent ev;
    if (cu->cuCtxSetCurrent(w->s->primary) != CUDA_SUCCESS)
        w->bad++;
    if (cu->cuEventCreate(&ev, 0) != CUDA_SUCCESS)
        w->bad++;
    for (int i = 0; i < 300; i++) {
        if (launch(w->k, 1 + (unsigned)(i * 7 + w->id) % 200, st) != CUDA_SUCCESS)
            w->bad++;
        if (i % 3 == 0 && cu->cuEventRecord(ev, st) != CUDA_SUCCESS)
            w->bad++;
        if (i % 5 == 0 && cu->cuStreamSynchronize(st) != CUDA_SUCCESS)
            w->bad++;
        if (i % 7 == 0 && cu->cuEventSynchronize(ev) != CUDA_SUCCESS)
            w->bad++;
        CUresult q = cu->cuStreamQuery(st);
        if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
            w->bad++;
    }
    if (cu->cuStreamSynchronize(st) != CUDA_SUCCESS || cu->cuStreamDestroy(st) != CUDA_SUCCESS ||
        cu->cuEventDestroy(ev) != CUDA_SUCCESS)
        w->bad++;
    return NULL;
}

Test(sim, threads_keep_stream_order)
{
    simdev s;
    sd_open(&s, NULL);
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUfunction k = sd_kernel(&s, "k", 20, 2);
    worker_arg w[6];
    pthread_t th[6];
    for (int i = 0; i < 6; i++) {
        w[i] = (worker_arg){ &s, g, k, i, 0 };
        cr_assert_eq(pthread_create(&th[i], NULL, worker, &w[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad;
    }
    cr_assert_eq(bad, 0, "%d driver calls failed", bad);
    size_t n = 0;
    ds_sim_kernel_record *buf = t_trace(s.rt, &n);
    cr_assert_eq(n, 1800, "%zu kernels in the trace", n);
    /* in order per stream: each kernel starts after the previous one of its
     * stream ended */
    int order_bad = 0, streams = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_geq(buf[i].end_us, 0.0, "kernel %zu never finished", i);
        int first = 1;
        for (size_t j = 0; j < i; j++)
            if (buf[j].stream == buf[i].stream) {
                first = 0;
                break;
            }
        streams += first;
        for (size_t j = i + 1; j < n; j++)
            if (buf[j].stream == buf[i].stream) {
                if (buf[j].start_us < buf[i].end_us)
                    order_bad++;
                break;
            }
    }
    free(buf);
    cr_assert_eq(order_bad, 0, "%d kernels started before their predecessor ended", order_bad);
    cr_assert_eq(streams, 6);
    CU(cu->cuGreenCtxDestroy(g));
    sd_close(&s);
}

/* ---- turns (ds_sim_thread_*) ------------------------------------------- */

#define TURN_THREADS 3
#define TURN_STEPS 40

typedef struct turn_log {
    pthread_mutex_t mu;
    size_t n;
    int who[TURN_THREADS * TURN_STEPS * 2];
    double at[TURN_THREADS * TURN_STEPS * 2];
} turn_log;

typedef struct turn_arg {
    simdev *s;
    CUstream st;
    CUfunction k;
    uint32_t ticket;
    int id;
    turn_log *log;
    int rc;
} turn_arg;

/* Simulated time, from a thread that must not assert. */
static double sim_now(ds_runtime_t rt)
{
    double t = -1;
    ds_sim_now_us(rt, &t);
    return t;
}

static void turn_note(turn_arg *a)
{
    double t = sim_now(a->s->rt);
    pthread_mutex_lock(&a->log->mu);
    a->log->who[a->log->n] = a->id;
    a->log->at[a->log->n++] = t;
    pthread_mutex_unlock(&a->log->mu);
}

/* Each thread: a kernel of its own length, waited for, then a sleep of its
 * own length, noting the simulated time after each. */
static void *turn_main(void *p)
{
    turn_arg *a = p;
    a->rc = ds_sim_thread_attach(a->s->rt, a->ticket) == DS_SUCCESS ? 0 : -1;
    for (int i = 0; a->rc == 0 && i < TURN_STEPS; i++) {
        ds_dim3 grid = {(unsigned)(40 * (a->id + 1)), 1, 1}, block = {128, 1, 1};
        if (ds_sim_launch_on_stream(a->s->rt, a->st, a->k, grid, block, NULL) != DS_SUCCESS ||
            cu->cuStreamSynchronize(a->st) != CUDA_SUCCESS) {
            a->rc = -1;
            break;
        }
        turn_note(a);
        double t = sim_now(a->s->rt);
        if (ds_sim_sleep_until(a->s->rt, t + 3.0 * (a->id + 1)) != DS_SUCCESS)
            a->rc = -1;
        turn_note(a);
    }
    if (ds_sim_thread_release(a->s->rt, a->ticket) != DS_SUCCESS)
        a->rc = -1;
    return NULL;
}

/* One run of TURN_THREADS threads taking turns on a fresh device sharing its
 * SMs (their kernels compete), into *log. */
static void turn_run(turn_log *log)
{
    simdev s;
    sd_open(&s, NULL);
    CUgreenCtx g = sd_green(&s, 0, 14, 1);
    CUfunction k = sd_kernel(&s, "turn", 7.0, 1);
    pthread_mutex_init(&log->mu, NULL);
    log->n = 0;
    turn_arg a[TURN_THREADS];
    pthread_t th[TURN_THREADS];
    /* This thread takes no turns: it reserves every place before starting
     * any thread, so no thread runs before the order is complete. */
    for (int i = 0; i < TURN_THREADS; i++) {
        a[i] = (turn_arg){.s = &s, .st = sd_stream(g, 0), .k = k, .id = i, .log = log};
        cr_assert_eq(ds_sim_thread_reserve(s.rt, &a[i].ticket), DS_SUCCESS, "%s", ds_last_error_message());
    }
    for (int i = 0; i < TURN_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, turn_main, &a[i]), 0);
    for (int i = 0; i < TURN_THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(a[i].rc, 0, "thread %d failed: %s", i, ds_last_error_message());
    }
    pthread_mutex_destroy(&log->mu);
    sd_close(&s);
}

/* Threads taking turns act in simulated-time order, and two runs are the
 * same to the last event: who acted, in which order, at which instant. */
Test(sim, threads_taking_turns_repeat_themselves)
{
    static turn_log first, again;
    turn_run(&first);
    cr_assert_eq(first.n, (size_t)TURN_THREADS * TURN_STEPS * 2);
    for (size_t i = 1; i < first.n; i++)
        cr_assert_geq(first.at[i], first.at[i - 1], "event %zu (thread %d at %.3f us) before the one ahead of it "
                      "(thread %d at %.3f us)", i, first.who[i], first.at[i], first.who[i - 1], first.at[i - 1]);
    for (int r = 0; r < 3; r++) {
        turn_run(&again);
        cr_assert_eq(again.n, first.n);
        for (size_t i = 0; i < first.n; i++)
            cr_assert(again.who[i] == first.who[i] && again.at[i] == first.at[i],
                      "run %d, event %zu: thread %d at %.3f us, the first run had thread %d at %.3f us", r + 2, i,
                      again.who[i], again.at[i], first.who[i], first.at[i]);
    }
}

typedef struct yield_arg {
    simdev *s;
    uint32_t ticket;
    atomic_int flag;
    double set_at, seen_at;
    int rc;
} yield_arg;

/* Sets the flag at 500 us of simulated time. */
static void *flag_setter(void *p)
{
    yield_arg *a = p;
    a->rc = ds_sim_thread_attach(a->s->rt, a->ticket) == DS_SUCCESS &&
                    ds_sim_sleep_until(a->s->rt, 500.0) == DS_SUCCESS
                ? 0
                : -1;
    a->set_at = sim_now(a->s->rt);
    atomic_store(&a->flag, 1);
    if (ds_sim_thread_release(a->s->rt, a->ticket) != DS_SUCCESS)
        a->rc = -1;
    return NULL;
}

/* A thread waiting on a host flag by yielding sees it at the very instant
 * the other thread set it; the clock still moves while it yields. */
Test(sim, yield_sees_another_threads_flag_at_its_instant)
{
    simdev s;
    sd_open(&s, NULL);
    uint32_t me = 0;
    yield_arg a = {.s = &s};
    cr_assert_eq(ds_sim_thread_reserve(s.rt, &me), DS_SUCCESS);
    cr_assert_eq(ds_sim_thread_attach(s.rt, me), DS_SUCCESS);
    cr_assert_eq(ds_sim_thread_reserve(s.rt, &a.ticket), DS_SUCCESS);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, flag_setter, &a), 0);
    /* the poller's rhythm: something on the device every 100 us */
    double next = 100.0;
    while (!atomic_load(&a.flag)) {
        if (now_us(&s) >= next) {
            next += 100.0;
            continue;
        }
        cr_assert_eq(ds_sim_thread_yield(s.rt), DS_SUCCESS);
        if (!atomic_load(&a.flag) && now_us(&s) < next)
            cr_assert_eq(ds_sim_sleep_until(s.rt, next), DS_SUCCESS);
    }
    a.seen_at = now_us(&s);
    cr_assert_eq(ds_sim_thread_release(s.rt, me), DS_SUCCESS);
    pthread_join(th, NULL);
    cr_assert_eq(a.rc, 0);
    cr_assert_float_eq(a.set_at, 500.0, 1e-9);
    cr_assert_float_eq(a.seen_at, 500.0, 1e-9, "the flag set at 500 us was seen at %.3f us", a.seen_at);
    sd_close(&s);
}

/* Misuse gets a status that says what is wrong. */
Test(sim, turns_refuse_misuse)
{
    ds_sim_config c = DS_SIM_CONFIG_INIT;
    c.clock = DS_SIM_CLOCK_REALTIME;
    simdev rs;
    sd_open(&rs, &c);
    uint32_t t = 0;
    cr_assert_eq(ds_sim_thread_reserve(rs.rt, &t), DS_ERR_NOT_SUPPORTED, "REALTIME has no turns");
    sd_close(&rs);

    simdev s;
    sd_open(&s, NULL);
    cr_assert_eq(ds_sim_thread_reserve(s.rt, NULL), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_sim_thread_attach(s.rt, 0), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_sim_thread_attach(s.rt, 1), DS_ERR_INVALID_ARGUMENT, "not reserved");
    cr_assert_eq(ds_sim_thread_release(s.rt, 99), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_sim_thread_yield(s.rt), DS_ERR_INVALID_ARGUMENT, "no place taken");
    uint32_t a = 0, b = 0;
    cr_assert_eq(ds_sim_thread_reserve(s.rt, &a), DS_SUCCESS);
    cr_assert_eq(ds_sim_thread_reserve(s.rt, &b), DS_SUCCESS);
    cr_assert_neq(a, b);
    cr_assert_eq(ds_sim_thread_attach(s.rt, a), DS_SUCCESS);
    cr_assert_eq(ds_sim_thread_attach(s.rt, b), DS_ERR_INVALID_ARGUMENT, "one place per thread");
    cr_assert_eq(ds_sim_thread_release(s.rt, b), DS_SUCCESS, "a place never taken can be given up");
    uint32_t more[40];
    size_t n = 0;
    ds_status st = DS_SUCCESS;
    while (n < 40 && (st = ds_sim_thread_reserve(s.rt, &more[n])) == DS_SUCCESS)
        n++;
    cr_assert_eq(st, DS_ERR_LIMIT, "places are bounded");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ds_sim_thread_release(s.rt, more[i]), DS_SUCCESS);
    cr_assert_eq(ds_sim_thread_release(s.rt, a), DS_SUCCESS);
    cr_assert_eq(ds_sim_sleep_until(s.rt, 10.0), DS_SUCCESS, "without places the clock is the caller's again");
    cr_assert_float_eq(now_us(&s), 10.0, 1e-9);
    sd_close(&s);
}
