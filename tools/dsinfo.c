/*
 * dsinfo: what libdetshare sees. Driver and device, the SM split, the pool's
 * tiers and the SMs each pCtx really runs on (probed with %smid), hardware
 * connections, and the CPUs/NUMA node near the GPU (hwloc).
 *
 * usage: dsinfo [--sim] [--device cuda|sim|N] [--no-probe]
 * Without a usable GPU it says why and shows the simulated device.
 */
#include <detshare/detshare.h>
#include <detshare/sim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void log_to_stderr(ds_log_level level, const char *msg, void *user)
{
    (void)user;
    static const char *names[] = {"", "error", "warn", "info", "debug"};
    fprintf(stderr, "detshare %s: %s\n", names[level], msg);
}

static void print_groups(uint64_t mask)
{
    int first = 1;
    for (int g = 0; g < 64; g++)
        if (mask & (1ull << g)) {
            int e = g;
            while (e + 1 < 64 && (mask & (1ull << (e + 1))))
                e++;
            printf("%s%d", first ? "" : ",", g);
            if (e > g)
                printf("-%d", e);
            first = 0;
            g = e;
        }
}

static void print_sms(const uint64_t *bm)
{
    int first = 1;
    for (int s = 0; s < DS_MAX_SMS; s++)
        if (bm[s / 64] & (1ull << (s % 64))) {
            int e = s;
            while (e + 1 < DS_MAX_SMS && (bm[(e + 1) / 64] & (1ull << ((e + 1) % 64))))
                e++;
            printf("%s%d", first ? "" : ",", s);
            if (e > s)
                printf("-%d", e);
            first = 0;
            s = e;
        }
}

int main(int argc, char **argv)
{
    int sim = 0, probe = 1, ordinal = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sim"))
            sim = 1;
        else if (!strcmp(argv[i], "--no-probe"))
            probe = 0;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            /* like the examples: cuda, sim, or a GPU ordinal */
            const char *d = argv[++i];
            char *end = NULL;
            long n = strtol(d, &end, 10);
            if (!strcmp(d, "sim"))
                sim = 1;
            else if (!strcmp(d, "cuda"))
                ordinal = 0;
            else if (*d && *end == '\0' && n >= 0 && n <= INT32_MAX)
                ordinal = (int)n;
            else {
                fprintf(stderr, "dsinfo: --device takes cuda, sim or a GPU ordinal, not '%s'\n", d);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: dsinfo [--sim] [--device cuda|sim|N] [--no-probe]\n");
            return 2;
        }
    }
    ds_log_set_handler(log_to_stderr, NULL, DS_LOG_WARN);
    printf("libdetshare %d.%d.%d\n", DS_VERSION_MAJOR, DS_VERSION_MINOR, DS_VERSION_PATCH);

    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device_ordinal = ordinal;
    ds_runtime_t rt = NULL;
    ds_status st = DS_ERR_NO_DRIVER;
    if (!sim) {
        st = ds_runtime_create(&cfg, &rt);
        if (st == DS_ERR_NO_DRIVER || st == DS_ERR_NO_DEVICE || st == DS_ERR_DRIVER_TOO_OLD) {
            printf("no usable GPU: %s\n", ds_last_error_message());
            printf("showing the SIMULATED device instead\n");
            sim = 1;
        } else if (st != DS_SUCCESS) {
            fprintf(stderr, "dsinfo: %s\n", ds_last_error_message());
            return 1;
        }
    }
    if (sim) {
        cfg.device = DS_DEVICE_SIM;
        st = ds_runtime_create(&cfg, &rt);
        if (st != DS_SUCCESS) {
            fprintf(stderr, "dsinfo: %s\n", ds_last_error_message());
            return 1;
        }
    }
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    if (ds_runtime_info_get(rt, &in) != DS_SUCCESS) {
        fprintf(stderr, "dsinfo: %s\n", ds_last_error_message());
        return 1;
    }
    if (in.device == DS_DEVICE_SIM)
        printf("device:        %s [SIMULATED]\n", in.device_name);
    else
        printf("device:        %s (compute capability %d.%d), driver %d.%d\n", in.device_name,
               in.compute_capability / 10, in.compute_capability % 10, in.driver_version / 1000,
               (in.driver_version % 1000) / 10);
    printf("SMs:           %u (minSmPartitionSize %u, smCoscheduledAlignment %u)\n", in.sm_count,
           in.min_partition_sms, in.sm_alignment);
    printf("SM groups:     %u:", in.num_groups);
    for (uint32_t g = 0; g < in.num_groups; g++)
        printf(" %u", in.group_sm_count[g]);
    printf("\n");
    printf("pool:          %u pCtxs built in %.2f ms\n", in.num_pctx, in.pool_build_ms);
    static const char *anchors[] = {"low", "high", "full"};
    for (uint32_t i = 0; i < in.num_pctx; i++) {
        const ds_pctx_info *p = &in.pctx[i];
        printf("  pCtx %2u  %3u SMs  %-4s  groups ", i, p->sm_count, anchors[p->anchor]);
        print_groups(p->group_mask);
        if (p->complement >= 0)
            printf("  complement pCtx %d", p->complement);
        if (probe) {
            uint64_t bm[DS_MAX_SMS / 64];
            uint32_t n = 0;
            if (ds_pctx_probe_sms(rt, i, bm, &n) == DS_SUCCESS) {
                printf("\n           probed %u SMs: ", n);
                print_sms(bm);
            } else {
                printf("\n           probe failed: %s", ds_last_error_message());
            }
        }
        printf("\n");
    }
    printf("stream priorities: least %d, greatest %d\n", in.stream_priority_least,
           in.stream_priority_greatest);
    printf("connections:   CUDA_DEVICE_MAX_CONNECTIONS=%u in force (%s); each active vCtx needs one,\n"
           "               plus 1 for the runtime. Set it (up to 32) before the first CUDA call.\n",
           in.max_connections, getenv("CUDA_DEVICE_MAX_CONNECTIONS") ? "from the environment" : "driver default");
    ds_runtime_stats gs = DS_RUNTIME_STATS_INIT;
    if (ds_runtime_get_stats(rt, &gs) == DS_SUCCESS) {
        if (gs.gates == DS_GATES_OFF)
            printf("gates:         off\n");
        else
            printf("gates:         %s words; up to %u closed at once (a closed gate blocks one connection;\n"
                   "               two stay free)%s\n",
                   gs.gates == DS_GATES_RCK ? "RCK-written" : "host-written", gs.max_closed_gates,
                   gs.max_closed_gates ? "" : ": NONE, raise CUDA_DEVICE_MAX_CONNECTIONS");
    }
    printf("local CPUs:    %s\n", in.local_cpus);
    printf("NUMA node:     %d\n", in.numa_node);
    ds_runtime_destroy(rt);
    return 0;
}
