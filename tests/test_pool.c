/* The pCtx pool on the simulated device: split, default tiers, complements,
 * custom tiers, bad tier specs, and confinement measured by the probe. */
#include <string.h>

#include "common.h"

Test(pool, default_layout_on_132_sms)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(rt, &in), DS_SUCCESS);
    cr_assert_eq(in.device, DS_DEVICE_SIM);
    cr_assert_eq(in.sm_count, 132);
    cr_assert_eq(in.min_partition_sms, 8);
    cr_assert_eq(in.num_groups, 16, "15 groups of 8 and a remainder of 12 (DEVICE-FACTS)");
    uint32_t sum = 0;
    for (uint32_t g = 0; g < in.num_groups; g++)
        sum += in.group_sm_count[g];
    cr_assert_eq(sum, 132);
    cr_assert_eq(in.group_sm_count[15], 12);
    static const uint32_t want[] = {132, 16, 116, 32, 100, 64, 68};
    cr_assert_eq(in.num_pctx, 7);
    for (uint32_t i = 0; i < 7; i++)
        cr_assert_eq(in.pctx[i].sm_count, want[i], "pCtx %u: %u SMs", i, in.pctx[i].sm_count);
    for (uint32_t i = 1; i < 7; i++) {
        int32_t c = in.pctx[i].complement;
        cr_assert_geq(c, 0, "pCtx %u has a complement", i);
        cr_assert_eq(in.pctx[i].group_mask & in.pctx[c].group_mask, 0, "disjoint");
        cr_assert_eq(in.pctx[i].sm_count + in.pctx[c].sm_count, 132, "covering");
    }
    cr_assert_eq(in.pctx[0].complement, -1);
    cr_assert_gt(in.pool_build_ms, 0.0);
    cr_assert_eq(in.max_connections, 8);
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}

Test(pool, probe_confines_each_pctx_to_its_sms)
{
    ds_runtime_t rt = t_sim_runtime(0);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(rt, &in), DS_SUCCESS);
    uint64_t sets[DS_MAX_PCTX][DS_MAX_SMS / 64];
    for (uint32_t i = 0; i < in.num_pctx; i++) {
        uint32_t n = 0;
        cr_assert_eq(ds_pctx_probe_sms(rt, i, sets[i], &n), DS_SUCCESS, "%s", ds_last_error_message());
        cr_assert_eq(n, in.pctx[i].sm_count, "pCtx %u ran on %u SMs, has %u", i, n, in.pctx[i].sm_count);
    }
    for (uint32_t i = 1; i < in.num_pctx; i++) {
        uint32_t c = (uint32_t)in.pctx[i].complement;
        for (int w = 0; w < DS_MAX_SMS / 64; w++) {
            cr_assert_eq(sets[i][w] & sets[c][w], 0, "pCtx %u and its complement %u share SMs", i, c);
            cr_assert_eq(sets[i][w] | sets[c][w], sets[0][w], "together they make the whole GPU");
        }
    }
    cr_assert_eq(ds_pctx_probe_sms(rt, in.num_pctx, sets[0], &(uint32_t){0}), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_pctx_probe_sms(rt, 0, NULL, &(uint32_t){0}), DS_ERR_INVALID_ARGUMENT);
    ds_runtime_destroy(rt);
}

Test(pool, custom_tiers_round_up_to_groups)
{
    ds_tier_spec tiers[] = {{20, DS_ANCHOR_LOW}, {12, DS_ANCHOR_HIGH}, {0, DS_ANCHOR_FULL}};
    ds_runtime_t rt = NULL;
    cr_assert_eq(t_sim_runtime_tiers(tiers, 3, &rt), DS_SUCCESS, "%s", ds_last_error_message());
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    cr_assert_eq(ds_runtime_info_get(rt, &in), DS_SUCCESS);
    cr_assert_eq(in.num_pctx, 3);
    cr_assert_eq(in.pctx[0].sm_count, 24, "20 SMs -> 3 groups of 8");
    cr_assert_eq(in.pctx[1].sm_count, 12, "the remainder group alone");
    cr_assert_eq(in.pctx[2].sm_count, 132);
    ds_runtime_destroy(rt);
}

Test(pool, full_gpu_added_when_missing)
{
    ds_tier_spec tiers[] = {{16, DS_ANCHOR_LOW}, {116, DS_ANCHOR_HIGH}};
    ds_runtime_t rt = NULL;
    cr_assert_eq(t_sim_runtime_tiers(tiers, 2, &rt), DS_SUCCESS);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &in);
    cr_assert_eq(in.num_pctx, 3);
    cr_assert_eq(in.pctx[2].anchor, DS_ANCHOR_FULL);
    cr_assert_eq(in.pctx[0].complement, 1);
    /* a vCtx without initial_pctx starts on the whole GPU */
    ds_vctx_t v = t_vctx(rt, "v", DS_CLASS_BEST_EFFORT, 0, -1);
    uint32_t p = 99;
    cr_assert_eq(ds_vctx_get_pctx(v, &p), DS_SUCCESS);
    cr_assert_eq(p, 2);
    ds_runtime_destroy(rt);
}

Test(pool, bad_tier_specs_are_rejected_cleanly)
{
    ds_runtime_t rt = (ds_runtime_t)0x1;
    ds_tier_spec zero[] = {{0, DS_ANCHOR_LOW}};
    cr_assert_eq(t_sim_runtime_tiers(zero, 1, &rt), DS_ERR_INVALID_ARGUMENT);
    ds_tier_spec big[] = {{133, DS_ANCHOR_HIGH}};
    cr_assert_eq(t_sim_runtime_tiers(big, 1, &rt), DS_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(ds_last_error_message(), "133") != NULL, "%s", ds_last_error_message());
    ds_tier_spec anchor[] = {{16, (ds_tier_anchor)9}};
    cr_assert_eq(t_sim_runtime_tiers(anchor, 1, &rt), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(t_sim_runtime_tiers(zero, 0, &rt), DS_ERR_INVALID_ARGUMENT, "tiers without a count");
    cr_assert_eq(t_sim_runtime_tiers(NULL, 3, &rt), DS_ERR_INVALID_ARGUMENT, "a count without tiers");
    ds_tier_spec many[DS_MAX_PCTX + 1];
    for (int i = 0; i < DS_MAX_PCTX + 1; i++)
        many[i] = (ds_tier_spec){8, DS_ANCHOR_LOW};
    cr_assert_eq(t_sim_runtime_tiers(many, DS_MAX_PCTX + 1, &rt), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(rt, (ds_runtime_t)0x1, "out untouched on failure");
}

Test(pool, runtime_config_abi_is_checked)
{
    ds_runtime_t rt = (ds_runtime_t)0x1;
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.size = sizeof cfg - 4;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_ABI_MISMATCH);
    cfg = (ds_runtime_config)DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.magic = 0;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_ABI_MISMATCH);
    cfg = (ds_runtime_config)DS_RUNTIME_CONFIG_INIT;
    cfg.device = (ds_device_kind)5;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(ds_runtime_create(&cfg, NULL), DS_ERR_INVALID_ARGUMENT);
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.sm_count = 0;
    cfg = (ds_runtime_config)DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_INVALID_ARGUMENT);
    cr_assert_eq(rt, (ds_runtime_t)0x1);
}

Test(pool, other_device_shapes)
{
    /* 64 SMs: 8 groups, tiers 16/48, 32/32 (k = 2, 4 = half) */
    ds_runtime_t rt = t_sim_runtime(64);
    ds_runtime_info in = DS_RUNTIME_INFO_INIT;
    ds_runtime_info_get(rt, &in);
    cr_assert_eq(in.num_groups, 8);
    cr_assert_eq(in.num_pctx, 5);
    cr_assert_eq(in.pctx[1].sm_count, 16);
    cr_assert_eq(in.pctx[2].sm_count, 48);
    cr_assert_eq(in.pctx[3].sm_count, 32);
    cr_assert_eq(in.pctx[4].sm_count, 32);
    ds_runtime_destroy(rt);
}

/* The simulated split's group size and alignment above DS_MAX_SMS are
 * refused: an alignment near 2^32 overflowed the split's rounding and
 * divided by zero (SIGFPE) at the first green-context split. */
Test(pool, sim_partition_and_alignment_above_ds_max_sms_are_refused)
{
    const uint32_t bad[] = {DS_MAX_SMS + 1, 1u << 31, 0xfffffff9u, 0xffffffffu};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int which = 0; which < 2; which++) {
            ds_sim_config sim = DS_SIM_CONFIG_INIT;
            sim.sm_count = 132;
            if (which)
                sim.sm_alignment = bad[i];
            else
                sim.min_partition_sms = bad[i];
            ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
            cfg.device = DS_DEVICE_SIM;
            cfg.sim = &sim;
            ds_runtime_t rt = NULL;
            cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_ERR_INVALID_ARGUMENT, "%s %u",
                         which ? "sm_alignment" : "min_partition_sms", bad[i]);
            cr_assert_null(rt);
        }
    }
    ds_sim_config sim = DS_SIM_CONFIG_INIT;
    sim.sm_count = 132;
    sim.sm_alignment = 132; /* the largest accepted */
    ds_runtime_config cfg = DS_RUNTIME_CONFIG_INIT;
    cfg.device = DS_DEVICE_SIM;
    cfg.sim = &sim;
    ds_runtime_t rt = NULL;
    cr_assert_eq(ds_runtime_create(&cfg, &rt), DS_SUCCESS, "%s", ds_last_error_message());
    cr_assert_eq(ds_runtime_destroy(rt), DS_SUCCESS);
}
