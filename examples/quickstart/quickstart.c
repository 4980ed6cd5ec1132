/* Two tenants share one GPU: latency-sensitive inference with an SLO beside
 * best-effort training. Runs on the simulated device: no GPU needed. */
#include <detshare/detshare.h>
#include <detshare/sim.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call) do { ds_status s_ = (call); if (s_ != DS_SUCCESS) { \
    fprintf(stderr, "%s: %s: %s\n", #call, ds_status_string(s_), ds_last_error_message()); \
    exit(1); } } while (0)

int main(void)
{
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM; /* DS_DEVICE_CUDA: the GPU */
    ds_runtime_t rt;
    CHECK(ds_runtime_create(&cfg, &rt));

    /* A kernel of 50 us blocks; on a GPU, yours from cuModuleGetFunction. */
    ds_sim_kernel_desc kd = DS_SIM_KERNEL_DESC_INIT;
    kd.name = "matmul";
    kd.block_us = 50.0;
    CUfunction kernel;
    CHECK(ds_sim_kernel_create(rt, &kd, &kernel));

    ds_vctx_attr attr[2] = {DS_VCTX_ATTR_INIT, DS_VCTX_ATTR_INIT};
    attr[0].name = "inference";
    attr[0].cls = DS_CLASS_LATENCY_SENSITIVE;
    attr[0].slo_us = 500; /* us */
    attr[1].name = "training";
    attr[1].cls = DS_CLASS_BEST_EFFORT;
    uint32_t blocks[2] = {64, 264};
    ds_vctx_t vctx[2];
    for (int t = 0; t < 2; t++)
        CHECK(ds_vctx_create(rt, &attr[t], &vctx[t]));
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < 2; t++)
            CHECK(ds_launch(vctx[t], kernel, (ds_dim3){blocks[t], 1, 1}, (ds_dim3){128, 1, 1}, 0, NULL, NULL));

    ds_runtime_info info = DS_RUNTIME_INFO_INIT;
    CHECK(ds_runtime_info_get(rt, &info));
    for (int t = 0; t < 2; t++) {
        ds_vctx_stats st = DS_VCTX_STATS_INIT;
        double now_us;
        CHECK(ds_vctx_synchronize(vctx[t]));
        CHECK(ds_sim_now_us(rt, &now_us));
        CHECK(ds_vctx_get_stats(vctx[t], &st));
        printf("%-9s %llu kernels done at %3.0f us (simulated), now on %3u SMs\n", attr[t].name,
               (unsigned long long)st.launches, now_us, info.pctx[st.pctx].sm_count);
        CHECK(ds_vctx_destroy(vctx[t]));
    }
    CHECK(ds_runtime_destroy(rt));
    return 0;
}
