/*
 * Policy registry and the read-only view hooks get. A runtime holds up to
 * DS_MAX_POLICIES policies (the built-ins first); one is active. Switching is
 * an atomic pointer store: launches that start afterwards see the new policy,
 * whose on_activate re-places the live vCtxs (remaps keep program order).
 * Policy states live until the runtime is destroyed, so a hook still running
 * for the previous policy never touches freed memory.
 */
#include <stdio.h>
#include <string.h>

#include "core/profile.h"
#include "core/runtime.h"
#include "policy/builtin.h"

const ds_policy_ops *const ds__builtin_policies[] = {
    &ds__policy_slo_aware, &ds__policy_tpot_first, &ds__policy_shared,
    &ds__policy_priority,  &ds__policy_static,     &ds__policy_temporal,
    &ds__policy_manual,    &ds__policy_slo_aware_nogates, &ds__policy_balance, NULL,
};

static ds__policy *find(struct ds_runtime *rt, const char *name)
{
    uint32_t n = atomic_load_explicit(&rt->num_policies, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(rt->policies[i].name, name) == 0)
            return &rt->policies[i];
    return NULL;
}

static ds_status register_locked(struct ds_runtime *rt, const ds_policy_ops *ops, void *user)
{
    if (!ops)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register: ops is NULL");
    DS__TRY(ds__check_abi(ops, sizeof *ops, "ds_policy_ops"));
    if (!ops->name || !ops->name[0])
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register: the policy has no name");
    if (!ops->on_launch)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register('%s'): on_launch is required",
                        ops->name);
    if (strlen(ops->name) >= sizeof rt->policies[0].name)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register: name '%s' longer than %zu bytes",
                        ops->name, sizeof rt->policies[0].name - 1);
    if (find(rt, ops->name))
        return ds__fail(DS_ERR_ALREADY_EXISTS, "ds_policy_register: a policy named '%s' exists", ops->name);
    uint32_t n = atomic_load_explicit(&rt->num_policies, memory_order_relaxed);
    if (n == DS_MAX_POLICIES)
        return ds__fail(DS_ERR_LIMIT, "ds_policy_register('%s'): %d policies registered", ops->name,
                        DS_MAX_POLICIES);
    ds__policy *p = &rt->policies[n];
    memset(p, 0, sizeof *p);
    p->ops = *ops;
    p->ops.size = sizeof p->ops;
    snprintf(p->name, sizeof p->name, "%s", ops->name);
    p->ops.name = p->name;
    if (ops->init) {
        ds_status st = ops->init(user, rt, &p->state);
        if (st != DS_SUCCESS)
            return ds__fail(st, "ds_policy_register('%s'): init returned %s", p->name, ds_status_name(st));
    } else {
        p->state = user;
    }
    atomic_store_explicit(&rt->num_policies, n + 1, memory_order_release);
    return DS_SUCCESS;
}

ds_status ds_policy_register(ds_runtime_t rt, const ds_policy_ops *ops, void *user_data)
{
    DS__TRY(ds__rt_check(rt, "ds_policy_register"));
    pthread_mutex_lock(&rt->policy_lock);
    ds_status st = register_locked(rt, ops, user_data);
    pthread_mutex_unlock(&rt->policy_lock);
    return st;
}

static void activate(struct ds_runtime *rt, ds__policy *p)
{
    atomic_store_explicit(&rt->active, p, memory_order_release);
    if (p->ops.on_activate)
        p->ops.on_activate(p->state, (const ds_policy_view *)rt);
    ds__log(DS_LOG_INFO, "policy '%s' active", p->name);
}

/* Activates the policy `name`; `caller` names the API call in messages. */
static ds_status select_policy(struct ds_runtime *rt, const char *name, const char *caller)
{
    char names[512] = "";
    pthread_mutex_lock(&rt->policy_lock);
    ds__policy *p = find(rt, name);
    if (p) {
        activate(rt, p);
    } else {
        size_t len = 0;
        uint32_t n = atomic_load_explicit(&rt->num_policies, memory_order_acquire);
        for (uint32_t i = 0; i < n && len < sizeof names; i++) {
            int w = snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", rt->policies[i].name);
            len += w > 0 ? (size_t)w : 0;
        }
    }
    pthread_mutex_unlock(&rt->policy_lock);
    if (!p)
        return ds__fail(DS_ERR_NOT_FOUND, "%s: no policy named '%s' (registered: %s)", caller, name, names);
    return DS_SUCCESS;
}

ds_status ds_runtime_set_policy(ds_runtime_t rt, const char *name)
{
    DS__TRY(ds__rt_check(rt, "ds_runtime_set_policy"));
    if (!name)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_set_policy: name is NULL");
    return select_policy(rt, name, "ds_runtime_set_policy");
}

ds_status ds_runtime_get_policy(ds_runtime_t rt, const char **name)
{
    DS__TRY(ds__rt_check(rt, "ds_runtime_get_policy"));
    if (!name)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_runtime_get_policy: name is NULL");
    ds__policy *p = atomic_load_explicit(&rt->active, memory_order_acquire);
    *name = p ? p->name : "";
    return DS_SUCCESS;
}

ds_status ds__policies_init(struct ds_runtime *rt, const char *name)
{
    pthread_mutex_lock(&rt->policy_lock);
    ds_status st = DS_SUCCESS;
    for (const ds_policy_ops *const *b = ds__builtin_policies; *b && st == DS_SUCCESS; b++)
        st = register_locked(rt, *b, NULL);
    pthread_mutex_unlock(&rt->policy_lock);
    DS__TRY(st);
    return select_policy(rt, name ? name : "slo_aware", "ds_runtime_create (ds_runtime_config.policy)");
}

void ds__policies_fini(struct ds_runtime *rt)
{
    atomic_store(&rt->active, NULL);
    uint32_t n = atomic_load(&rt->num_policies);
    for (uint32_t i = 0; i < n; i++)
        if (rt->policies[i].ops.fini)
            rt->policies[i].ops.fini(rt->policies[i].state);
    atomic_store(&rt->num_policies, 0);
}

void ds__policy_vctx_event(struct ds_runtime *rt, struct ds_vctx *v, int created)
{
    ds__policy *p = atomic_load_explicit(&rt->active, memory_order_acquire);
    if (!p)
        return;
    if (created && p->ops.on_vctx_create)
        p->ops.on_vctx_create(p->state, (const ds_policy_view *)rt, v);
    else if (!created && p->ops.on_vctx_destroy)
        p->ops.on_vctx_destroy(p->state, (const ds_policy_view *)rt, v);
}

/* ------------------------------------------------------------------------ */
/* the view: a ds_policy_view is the runtime itself, read through these      */

#define RT(view) ((struct ds_runtime *)(view))

double ds_view_now_us(const ds_policy_view *view) { return ds__now_us(RT(view)); }

ds_runtime_t ds_view_runtime(const ds_policy_view *view) { return RT(view); }

uint32_t ds_view_num_pctx(const ds_policy_view *view) { return RT(view)->num_pctx; }

const ds_pctx_info *ds_view_pctx(const ds_policy_view *view, uint32_t index)
{
    return index < RT(view)->num_pctx ? &RT(view)->info.pctx[index] : NULL;
}

uint32_t ds_view_full_pctx(const ds_policy_view *view) { return RT(view)->full_pctx; }

int32_t ds_view_low_tier(const ds_policy_view *view, uint32_t sm_count)
{
    const struct ds_runtime *rt = RT(view);
    int32_t best = -1;
    uint32_t best_d = UINT32_MAX;
    for (uint32_t i = 0; i < rt->num_pctx; i++) {
        if (rt->pctx[i].anchor != DS_ANCHOR_LOW)
            continue;
        uint32_t s = rt->pctx[i].sm_count;
        uint32_t d = s > sm_count ? s - sm_count : sm_count - s;
        if (d < best_d) {
            best_d = d;
            best = (int32_t)i;
        }
    }
    return best;
}

uint32_t ds_view_vctxs(const ds_policy_view *view, ds_vctx_t *out, uint32_t cap)
{
    struct ds_runtime *rt = RT(view);
    uint32_t n = 0;
    for (uint32_t i = 0; i < rt->max_vctx; i++) {
        struct ds_vctx *v = atomic_load_explicit(&rt->vctx[i], memory_order_acquire);
        if (!v || v->magic != DS__VCTX_MAGIC)
            continue;
        if (out && n < cap)
            out[n] = v;
        n++;
    }
    return n;
}

ds_status ds_view_vctx(const ds_policy_view *view, ds_vctx_t v, ds_vctx_view *out)
{
    DS__TRY(ds__vctx_check(v, "ds_view_vctx"));
    if (!out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_view_vctx: out is NULL");
    double inflight = atomic_load_explicit(&v->submitted_us, memory_order_relaxed) -
                      atomic_load_explicit(&v->completed_us, memory_order_relaxed);
    if (inflight < 0)
        inflight = 0;
    uint32_t pend = atomic_load_explicit(&v->pending, memory_order_relaxed);
    double now = ds__now_us(RT(view));
    double last_active = DS__LD(v->last_active_us);
    *out = (ds_vctx_view){
        .vctx = v,
        .cls = v->cls,
        .phase = v->phase,
        .slo_us = v->slo_us,
        .weight = v->weight,
        .pctx = DS__BIND_PCTX(DS__LD(v->bound)),
        .pending_pctx = DS__BIND_PCTX(pend),
        .urgent = (int)DS__BIND_URGENT(pend),
        .window_us = atomic_load_explicit(&v->window_us, memory_order_relaxed),
        .inflight_us = inflight,
        .queue_delay_us = inflight,
        .last_launch_us = last_active,
        .idle_us = DS__LD(v->seen_launches) ? now - last_active : now,
        .launches = atomic_load_explicit(&v->launches, memory_order_relaxed),
    };
    return DS_SUCCESS;
}

int ds_view_predict(const ds_policy_view *view, CUfunction f, ds_dim3 grid, ds_dim3 block, uint32_t pctx,
                    double *mean_us, double *tail_us)
{
    const struct ds_runtime *rt = RT(view);
    if (pctx >= rt->num_pctx)
        return 0;
    return ds__profile_get(rt->profiles, f, grid, block, rt->pctx[pctx].sm_count, mean_us, tail_us) > 0;
}
