/*
 * The built-in policies, in the order the runtime registers them at creation
 * (the first one registered is not the default: ds_runtime_config::policy
 * picks, "slo_aware" when unset).
 */
#include "builtin.h"

const ds_policy_ops *const ds__builtin_policies[] = {
    &ds__policy_slo_aware, &ds__policy_tpot_first, &ds__policy_shared,
    &ds__policy_priority,  &ds__policy_static,     &ds__policy_temporal,
    &ds__policy_manual,    &ds__policy_slo_aware_nogates, &ds__policy_balance, NULL,
};
