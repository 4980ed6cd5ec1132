/*
 * The policy registry (registry.c): registered policies and their
 * parameters, the active one, and the read-only view hooks get (the view is
 * the runtime itself, read through the ds_view_* functions).
 */
#ifndef DS_CORE_REGISTRY_H
#define DS_CORE_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>

#include "detshare/policy.h"

/* A policy parameter: its declaration (name copied) and current value. */
typedef struct ds__param {
    ds_policy_param desc;
    char name[32];
    _Atomic double value;
} ds__param;

/* A registered policy (ops copied, state from ops.init). */
typedef struct ds__policy {
    ds_policy_ops ops;
    char name[32];
    void *state;
    ds__param param[DS_MAX_POLICY_PARAMS];
    uint32_t num_params;
} ds__policy;

/* ds_runtime_config fields that seed policy parameters of the same name. */
#define DS__LEGACY_PARAMS 4

typedef struct ds__registry {
    _Atomic(ds__policy *) active;
    ds__policy policies[DS_MAX_POLICIES];
    _Atomic uint32_t num;
    pthread_mutex_t lock; /* registration, switching, parameters (never on the launch path) */
    struct {
        const char *name;
        double value; /* 0: not set */
    } legacy[DS__LEGACY_PARAMS];
} ds__registry;

struct ds_runtime;
struct ds_vctx;

/* Registers `builtins` (NULL-terminated), seeding their parameters from the
 * config's legacy tunables, and activates cfg->policy. */
ds_status ds__policies_init(struct ds_runtime *rt, const ds_policy_ops *const *builtins,
                            const ds_runtime_config *cfg);
void ds__policies_fini(struct ds_runtime *rt);
/* on_vctx_create / on_vctx_destroy of the active policy. */
void ds__policy_vctx_event(struct ds_runtime *rt, struct ds_vctx *v, int created);
/* on_congestion of the active policy. */
void ds__policy_congestion(struct ds_runtime *rt, struct ds_vctx *v, double late_us);

#endif /* DS_CORE_REGISTRY_H */
