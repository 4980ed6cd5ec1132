/*
 * dsinfo: what libdetshare sees. Driver and device, the SM split, the pool's
 * tiers and the SMs each pCtx really runs on (probed with %smid), hardware
 * connections, and the CPUs/NUMA node near the GPU (hwloc).
 *
 * usage: dsinfo [--device cuda|sim|N] [--sim] [--no-probe] [--help] [--version]
 * Without --device it shows the GPU if one is usable, else (saying why on
 * stderr) the simulated device. An explicit --device cuda or N never falls
 * back: without that GPU it says why and exits 1.
 */
#include <detshare/detshare.h>
#include <detshare/sim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* While set, errors are not logged: the caller reports the failure itself
 * (ds_last_error_message), once. Warnings still show. */
static int quiet_errors;

static void log_to_stderr(ds_log_level level, const char *msg, void *user)
{
    (void)user;
    if (quiet_errors && level == DS_LOG_ERROR)
        return;
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

static void usage(FILE *f)
{
    fprintf(f, "usage: dsinfo [--device cuda|sim|N] [--sim] [--no-probe] [--help] [--version]\n"
               "  --device cuda   the GPU of ordinal 0; fails (exit 1) without a usable one\n"
               "  --device N      the GPU of ordinal N; fails (exit 1) without it\n"
               "  --device sim    the simulated device (also --sim)\n"
               "  --no-probe      skip the %%smid probe of each pCtx's SMs\n"
               "  --help          this text\n"
               "Without --device: the GPU if one is usable, else the simulated device (said on stderr).\n"
               "Exit status: 0 shown, 1 the device could not be opened, 2 bad usage.\n");
}

enum { PICK_DEFAULT, PICK_CUDA, PICK_SIM };

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version")) {
            int v = ds_version();
            printf("dsinfo %d.%d.%d (libdetshare %d.%d.%d)\n", DS_VERSION_MAJOR, DS_VERSION_MINOR, DS_VERSION_PATCH,
                   v / 10000, v / 100 % 100, v % 100);
            return 0;
        }
    int pick = PICK_DEFAULT, probe = 1, ordinal = 0;
    const char *device_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--sim")) {
            pick = PICK_SIM;
        } else if (!strcmp(argv[i], "--no-probe")) {
            probe = 0;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            /* like the examples: cuda, sim, or a GPU ordinal */
            const char *d = argv[++i];
            device_arg = d;
            char *end = NULL;
            long n = strtol(d, &end, 10);
            if (!strcmp(d, "sim")) {
                pick = PICK_SIM;
            } else if (!strcmp(d, "cuda")) {
                pick = PICK_CUDA;
                ordinal = 0;
            } else if (*d && *end == '\0' && n >= 0 && n <= INT32_MAX) {
                pick = PICK_CUDA;
                ordinal = (int)n;
            } else {
                fprintf(stderr, "dsinfo: --device takes cuda, sim or a GPU ordinal, not '%s'\n", d);
                return 2;
            }
        } else if (!strcmp(argv[i], "--device")) {
            fprintf(stderr, "dsinfo: --device needs a value: cuda, sim or a GPU ordinal\n");
            return 2;
        } else {
            fprintf(stderr, "dsinfo: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    ds_log_set_handler(log_to_stderr, NULL, DS_LOG_WARN);

    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    ds_runtime_t rt = NULL;
    if (pick != PICK_SIM) {
        cfg.device = DS_DEVICE_CUDA;
        cfg.device_ordinal = ordinal;
        quiet_errors = 1; /* the outcome is reported below, once */
        ds_status st = ds_runtime_create(&cfg, &rt);
        quiet_errors = 0;
        int no_gpu = st == DS_ERR_NO_DRIVER || st == DS_ERR_NO_DEVICE || st == DS_ERR_DRIVER_TOO_OLD;
        if (no_gpu && pick == PICK_DEFAULT) {
            fprintf(stderr,
                    "dsinfo: no usable GPU (%s); showing the SIMULATED device (--device cuda requires a GPU)\n",
                    ds_last_error_message());
        } else if (st != DS_SUCCESS) {
            fprintf(stderr, "dsinfo: %s%s%s%s%s\n", device_arg ? "--device " : "", device_arg ? device_arg : "",
                    device_arg ? ": " : "", no_gpu ? "no usable GPU: " : "", ds_last_error_message());
            if (no_gpu)
                fprintf(stderr, "dsinfo: --device sim shows the simulated device\n");
            return 1;
        }
    }
    if (!rt) {
        cfg.device = DS_DEVICE_SIM;
        cfg.device_ordinal = 0;
        ds_status st = ds_runtime_create(&cfg, &rt);
        if (st != DS_SUCCESS) {
            fprintf(stderr, "dsinfo: %s\n", ds_last_error_message());
            return 1;
        }
    }
    printf("libdetshare %d.%d.%d\n", DS_VERSION_MAJOR, DS_VERSION_MINOR, DS_VERSION_PATCH);
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
