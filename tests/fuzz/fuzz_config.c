/* Fuzz target: ds_runtime_config, its tier specs and ds_sim_config. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    fz_header(&f, &sim.size, &sim.magic, &sim.version, sizeof sim);
    sim.sm_count = fz_u(&f, 2) % 300;
    sim.min_partition_sms = fz_u8(&f) % 40;
    sim.sm_alignment = fz_u8(&f) % 40;
    sim.clock = (ds_sim_clock)(fz_u8(&f) % 3);
    sim.time_scale = (double)(int32_t)fz_u32(&f) / 1000.0;
    sim.trace_capacity = fz_u(&f, 2) % 1024;
    ds_tier_spec tiers[40];
    uint32_t nt = fz_u8(&f) % 40;
    for (uint32_t i = 0; i < nt; i++) {
        tiers[i].sm_count = fz_u(&f, 2) % 300;
        tiers[i].anchor = (ds_tier_anchor)(fz_u8(&f) % 4);
    }
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    fz_header(&f, &cfg.size, &cfg.magic, &cfg.version, sizeof cfg);
    cfg.device = fz_u8(&f) % 8 == 7 ? (ds_device_kind)fz_u32(&f) : DS_DEVICE_SIM;
    uint8_t m = fz_u8(&f);
    cfg.tiers = m & 1 ? tiers : NULL;
    cfg.num_tiers = m & 2 ? nt : fz_u8(&f);
    cfg.max_vctx = fz_u(&f, 2) % 5000;
    cfg.teardown_timeout_ms = 20;
    cfg.sim = fz_bool(&f) ? &sim : NULL;
    static const char *policies[] = {NULL, "slo_aware", "tpot_first", "shared", "priority",
                                     "static", "temporal", "manual", "slo_aware_nogates", "balance", "nope"};
    cfg.policy = policies[fz_u8(&f) % 11];
    cfg.scheduler_period_us = -1;
    cfg.ls_sms = fz_u(&f, 2);
    cfg.idle_us = fz_u32(&f);
    cfg.be_window_us = fz_u32(&f);
    cfg.gates = (ds_gate_mode)(fz_u8(&f) % 6);
    cfg.rck = (ds_rck_mode)(fz_u8(&f) % 3);
    cfg.gate_interval_us = fz_u32(&f);
    cfg.heartbeat_timeout_ms = fz_u32(&f);
    cfg.fault_presume_ms = fz_u32(&f);
    if (fz_u8(&f) % 4 == 0)
        cfg.size = DS_RUNTIME_CONFIG_SIZE_V1; /* the first published layout */
    ds_runtime_t rt = NULL;
    if (ds_runtime_create(&cfg, &rt) != DS_SUCCESS)
        return 0;
    ds_vctx_t v = NULL;
    if (ds_vctx_create(rt, NULL, &v) == DS_SUCCESS) {
        CUfunction k = fz_kernel(rt, 0);
        ds_vctx_set_gate_interval(v, fz_u32(&f) % 3 ? 0 : fz_u32(&f));
        ds_launch(v, k, (ds_dim3){1, 1, 1}, (ds_dim3){32, 1, 1}, 0, NULL, NULL);
        if (fz_bool(&f)) {
            ds_vctx_gate_close(v);
            ds_runtime_poll(rt);
            ds_vctx_gate_open(v);
        }
        ds_runtime_poll(rt);
        ds_vctx_synchronize(v);
        ds_runtime_stats st = DS_RUNTIME_STATS_INIT;
        ds_runtime_get_stats(rt, &st);
    }
    ds_runtime_destroy(rt);
    return 0;
}
