/*
 * Policy registry, parameters, and the read-only view hooks get. A runtime holds up to
 * DS_MAX_POLICIES policies (the built-ins first); one is active. Switching is
 * an atomic pointer store: launches that start afterwards see the new policy,
 * whose on_activate re-places the live vCtxs (remaps keep program order).
 * Policy states live until the runtime is destroyed, so a hook still running
 * for the previous policy never touches freed memory.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/handles.h"
#include "core/marks.h"
#include "core/profile.h"
#include "core/registry.h"
#include "core/relaxed.h"
#include "core/remap.h"
#include "core/requests.h"
#include "core/runtime.h"
#include "core/vctx.h"
#include "seam/log.h"

static ds__policy *find(struct ds_runtime *rt, const char *name)
{
    uint32_t n = atomic_load_explicit(&rt->reg.num, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(rt->reg.policies[i].name, name) == 0)
            return &rt->reg.policies[i];
    return NULL;
}

/* A declared parameter table: names 1-31 bytes and unique, min <= def <= max,
 * whole bounds for an integer parameter. */
static ds_status check_params(const ds_policy_ops *ops)
{
    if (!ops->params || !ops->num_params)
        return DS_SUCCESS;
    if (ops->num_params > DS_MAX_POLICY_PARAMS)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register('%s'): %u parameters, at most %d", ops->name,
                        ops->num_params, DS_MAX_POLICY_PARAMS);
    for (uint32_t i = 0; i < ops->num_params; i++) {
        const ds_policy_param *d = &ops->params[i];
        if (!d->name || !d->name[0] || strlen(d->name) > 31)
            return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register('%s'): parameter %u has no name or one "
                            "longer than 31 bytes", ops->name, i);
        if (!(d->min <= d->def && d->def <= d->max))
            return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register('%s'): parameter '%s': default %g outside "
                            "[%g, %g]", ops->name, d->name, d->def, d->min, d->max);
        if (d->integer && (d->def != floor(d->def) || d->min != floor(d->min) || d->max != floor(d->max)))
            return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register('%s'): integer parameter '%s' with a "
                            "fractional default or bound", ops->name, d->name);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(ops->params[j].name, d->name) == 0)
                return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register('%s'): parameter '%s' declared twice",
                                ops->name, d->name);
    }
    return DS_SUCCESS;
}

/* A parameter's value at registration: the runtime config's field of the same
 * name where there is one and it was set (within the parameter's range),
 * else the default. */
static double initial_value(const struct ds_runtime *rt, const ds_policy_param *d)
{
    for (uint32_t i = 0; i < DS__LEGACY_PARAMS; i++) {
        if (!rt->reg.legacy[i].name || strcmp(rt->reg.legacy[i].name, d->name) != 0 || !rt->reg.legacy[i].value)
            continue;
        double v = rt->reg.legacy[i].value;
        if (v >= d->min && v <= d->max)
            return v;
        ds__log(DS_LOG_WARN, "ds_runtime_config.%s = %g is outside parameter '%s' [%g, %g]; the default %g holds",
                d->name, v, d->name, d->min, d->max, d->def);
    }
    return d->def;
}

static ds_status register_locked(struct ds_runtime *rt, const ds_policy_ops *ops, void *user)
{
    if (!ops)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register: ops is NULL");
    DS__TRY(ds__check_abi_grown(ops, DS__OLD_SIZES(DS_POLICY_OPS_SIZE_V1), sizeof *ops, "ds_policy_ops"));
    ds_policy_ops full = DS_POLICY_OPS_INIT;
    memcpy(&full, ops, ops->size < sizeof full ? ops->size : sizeof full);
    ops = &full;
    if (!ops->name || !ops->name[0])
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register: the policy has no name");
    if (!ops->on_launch)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register('%s'): on_launch is required",
                        ops->name);
    if (strlen(ops->name) >= sizeof rt->reg.policies[0].name)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_register: name '%s' longer than %zu bytes",
                        ops->name, sizeof rt->reg.policies[0].name - 1);
    if (find(rt, ops->name))
        return ds__fail(DS_ERR_ALREADY_EXISTS, "ds_policy_register: a policy named '%s' exists", ops->name);
    uint32_t n = atomic_load_explicit(&rt->reg.num, memory_order_relaxed);
    if (n == DS_MAX_POLICIES)
        return ds__fail(DS_ERR_LIMIT, "ds_policy_register('%s'): %d policies registered", ops->name,
                        DS_MAX_POLICIES);
    DS__TRY(check_params(ops));
    ds__policy *p = &rt->reg.policies[n];
    memset(p, 0, sizeof *p);
    p->ops = *ops;
    p->ops.size = sizeof p->ops;
    snprintf(p->name, sizeof p->name, "%s", ops->name);
    p->ops.name = p->name;
    p->ops.params = NULL;
    p->num_params = ops->params ? ops->num_params : 0;
    for (uint32_t i = 0; i < p->num_params; i++) {
        const ds_policy_param *d = &ops->params[i];
        p->param[i].desc = *d;
        snprintf(p->param[i].name, sizeof p->param[i].name, "%s", d->name);
        p->param[i].desc.name = p->param[i].name;
        atomic_init(&p->param[i].value, initial_value(rt, d));
    }
    if (ops->init) {
        ds_status st = ops->init(user, rt, &p->state);
        if (st != DS_SUCCESS)
            return ds__fail(st, "ds_policy_register('%s'): init returned %s", p->name, ds_status_name(st));
    } else {
        p->state = user;
    }
    if (p->ops.on_param)
        for (uint32_t i = 0; i < p->num_params; i++)
            p->ops.on_param(p->state, (const ds_policy_view *)rt, i, atomic_load(&p->param[i].value));
    atomic_store_explicit(&rt->reg.num, n + 1, memory_order_release);
    return DS_SUCCESS;
}

ds_status ds_policy_register(ds_runtime_t rt, const ds_policy_ops *ops, void *user_data)
{
    DS__TRY(ds__rt_check(rt, "ds_policy_register"));
    pthread_mutex_lock(&rt->reg.lock);
    ds_status st = register_locked(rt, ops, user_data);
    pthread_mutex_unlock(&rt->reg.lock);
    return st;
}

/* Gates belong to the policy that closed them: a switch opens every closed
 * gate, so that work held by the old policy is not left to the teardown
 * timeout under a new one that never heard of it. */
static void open_gates(struct ds_runtime *rt)
{
    if (!atomic_load_explicit(&rt->gates.closed, memory_order_relaxed))
        return;
    for (uint32_t i = 0; i < rt->max_vctx; i++) {
        struct ds_vctx *v = atomic_load_explicit(&rt->vctx[i], memory_order_acquire);
        if (v && v->magic == DS__VCTX_MAGIC && DS__LD(v->gate.closed))
            ds_vctx_gate_open(v);
    }
}

static void activate(struct ds_runtime *rt, ds__policy *p)
{
    open_gates(rt);
    atomic_store_explicit(&rt->reg.active, p, memory_order_release);
    if (p->ops.on_activate)
        p->ops.on_activate(p->state, (const ds_policy_view *)rt);
    ds__log(DS_LOG_INFO, "policy '%s' active", p->name);
}

/* Activates the policy `name`; `caller` names the API call in messages. */
static ds_status select_policy(struct ds_runtime *rt, const char *name, const char *caller)
{
    char names[512] = "";
    pthread_mutex_lock(&rt->reg.lock);
    ds__policy *p = find(rt, name);
    if (p) {
        activate(rt, p);
    } else {
        size_t len = 0;
        uint32_t n = atomic_load_explicit(&rt->reg.num, memory_order_acquire);
        for (uint32_t i = 0; i < n && len < sizeof names; i++) {
            int w = snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", rt->reg.policies[i].name);
            len += w > 0 ? (size_t)w : 0;
        }
    }
    pthread_mutex_unlock(&rt->reg.lock);
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
    ds__policy *p = atomic_load_explicit(&rt->reg.active, memory_order_acquire);
    *name = p ? p->name : "";
    return DS_SUCCESS;
}

ds_status ds__policies_init(struct ds_runtime *rt, const ds_policy_ops *const *builtins,
                            const ds_runtime_config *cfg)
{
    /* The tunables ds_runtime_config carries from before policies had
     * parameters: each seeds the parameters of that name. */
    rt->reg.legacy[0].name = "ls_sms";
    rt->reg.legacy[0].value = cfg->ls_sms;
    rt->reg.legacy[1].name = "idle_us";
    rt->reg.legacy[1].value = cfg->idle_us;
    rt->reg.legacy[2].name = "be_window_us";
    rt->reg.legacy[2].value = cfg->be_window_us;
    rt->reg.legacy[3].name = "gate_interval_us";
    rt->reg.legacy[3].value = cfg->gate_interval_us;
    pthread_mutex_lock(&rt->reg.lock);
    ds_status st = DS_SUCCESS;
    for (const ds_policy_ops *const *b = builtins; b && *b && st == DS_SUCCESS; b++)
        st = register_locked(rt, *b, NULL);
    pthread_mutex_unlock(&rt->reg.lock);
    DS__TRY(st);
    return select_policy(rt, cfg->policy ? cfg->policy : "slo_aware", "ds_runtime_create (ds_runtime_config.policy)");
}

void ds__policy_congestion(struct ds_runtime *rt, struct ds_vctx *v, double late_us)
{
    ds__policy *p = atomic_load_explicit(&rt->reg.active, memory_order_acquire);
    if (p && p->ops.on_congestion)
        p->ops.on_congestion(p->state, (const ds_policy_view *)rt, v, late_us);
}

/* ------------------------------------------------------------------------ */
/* parameters                                                                */

static ds__param *find_param(ds__policy *p, const char *name)
{
    for (uint32_t i = 0; i < p->num_params; i++)
        if (strcmp(p->param[i].name, name) == 0)
            return &p->param[i];
    return NULL;
}

static void list_params(const ds__policy *p, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < p->num_params && len < cap; i++) {
        int w = snprintf(out + len, cap - len, "%s%s", i ? ", " : "", p->param[i].name);
        len += w > 0 ? (size_t)w : 0;
    }
    if (!p->num_params)
        snprintf(out, cap, "none");
}

static ds_status param_set_locked(struct ds_runtime *rt, const char *policy, const char *name, const char *text)
{
    ds__policy *p = find(rt, policy);
    if (!p)
        return ds__fail(DS_ERR_NOT_FOUND, "ds_policy_param_set: no policy named '%s'", policy);
    ds__param *q = find_param(p, name);
    if (!q) {
        char names[400];
        list_params(p, names, sizeof names);
        return ds__fail(DS_ERR_NOT_FOUND, "ds_policy_param_set: policy '%s' has no parameter '%s' (it has: %s)",
                        policy, name, names);
    }
    const ds_policy_param *d = &q->desc;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    while (end && (*end == ' ' || *end == '\t' || *end == '\n'))
        end++;
    if (end == text || !end || *end || errno == ERANGE || isnan(v))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_param_set('%s', '%s'): '%s' is not a number", policy,
                        name, text);
    if (v < d->min || v > d->max || (d->integer && v != floor(v)))
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_param_set('%s', '%s'): %s is outside [%g, %g]%s (%s)",
                        policy, name, text, d->min, d->max, d->integer ? ", whole numbers" : "",
                        d->help ? d->help : "no description");
    atomic_store(&q->value, v);
    if (p->ops.on_param)
        p->ops.on_param(p->state, (const ds_policy_view *)rt, (uint32_t)(q - p->param), v);
    ds__log(DS_LOG_INFO, "policy '%s': %s = %g", policy, name, v);
    return DS_SUCCESS;
}

ds_status ds_policy_param_set(ds_runtime_t rt, const char *policy, const char *name, const char *value)
{
    DS__TRY(ds__rt_check(rt, "ds_policy_param_set"));
    if (!policy || !name || !value)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_param_set: policy %s, name %s, value %s (none may be "
                        "NULL)", policy ? "set" : "NULL", name ? "set" : "NULL", value ? "set" : "NULL");
    pthread_mutex_lock(&rt->reg.lock);
    ds_status st = param_set_locked(rt, policy, name, value);
    pthread_mutex_unlock(&rt->reg.lock);
    return st;
}

ds_status ds_policy_param_get(ds_runtime_t rt, const char *policy, const char *name, double *value)
{
    DS__TRY(ds__rt_check(rt, "ds_policy_param_get"));
    if (!policy || !name || !value)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_policy_param_get: an argument is NULL");
    ds__policy *p = find(rt, policy);
    if (!p)
        return ds__fail(DS_ERR_NOT_FOUND, "ds_policy_param_get: no policy named '%s'", policy);
    ds__param *q = find_param(p, name);
    if (!q)
        return ds__fail(DS_ERR_NOT_FOUND, "ds_policy_param_get: policy '%s' has no parameter '%s'", policy, name);
    *value = atomic_load(&q->value);
    return DS_SUCCESS;
}

void ds__policies_fini(struct ds_runtime *rt)
{
    atomic_store(&rt->reg.active, NULL);
    uint32_t n = atomic_load(&rt->reg.num);
    for (uint32_t i = 0; i < n; i++)
        if (rt->reg.policies[i].ops.fini)
            rt->reg.policies[i].ops.fini(rt->reg.policies[i].state);
    atomic_store(&rt->reg.num, 0);
}

void ds__policy_vctx_event(struct ds_runtime *rt, struct ds_vctx *v, int created)
{
    ds__policy *p = atomic_load_explicit(&rt->reg.active, memory_order_acquire);
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
    DS__TRY(ds__vctx_check_born(v, "ds_view_vctx"));
    if (!out)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_view_vctx: out is NULL");
    double inflight = atomic_load_explicit(&v->marks.submitted_us, memory_order_relaxed) -
                      atomic_load_explicit(&v->marks.completed_us, memory_order_relaxed);
    if (inflight < 0)
        inflight = 0;
    uint32_t pend = atomic_load_explicit(&v->pending, memory_order_relaxed);
    double now = ds__now_us(RT(view));
    double last_active = DS__LD(v->watch.last_active_us);
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
        .idle_us = DS__LD(v->watch.seen) ? now - last_active : now,
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

/* Tracked work in flight (a PENDING mark) or a section open: exact with
 * track_all, a lower bound otherwise. */
static int busy(const struct ds_vctx *v)
{
    return atomic_load_explicit(&v->marks.pending, memory_order_relaxed) > 0 || DS__LD(v->section_open);
}

ds_status ds_view_vctx_state(const ds_policy_view *view, ds_vctx_t v, ds_vctx_state *out)
{
    (void)view;
    /* a policy racing a destroy is normal: logged at DEBUG only */
    if (DS__UNLIKELY(!v || (v->magic != DS__VCTX_MAGIC && v->magic != DS__BORN_MAGIC)))
        return ds__fail_at(DS_LOG_DEBUG, DS_ERR_INVALID_HANDLE, "ds_view_vctx_state: vCtx handle %p is %s",
                           (const void *)v, !v ? "NULL" : v->magic == DS__DEAD_MAGIC ? "destroyed" : "not a vCtx");
    if (DS__UNLIKELY(!out || out->magic != DS_ABI_MAGIC || out->size < sizeof *out))
        DS__TRY(ds__check_abi_grown(out, DS__OLD_SIZES(DS_VCTX_STATE_SIZE_V1, DS_VCTX_STATE_SIZE_V2, DS_VCTX_STATE_SIZE_V3), sizeof *out,
                                    "ds_vctx_state"));
    uint32_t bound = DS__LD(v->bound), pend = atomic_load_explicit(&v->pending, memory_order_relaxed);
    out->cls = v->cls;
    out->phase = v->phase;
    out->slo_us = v->slo_us;
    out->weight = v->weight;
    out->pctx = DS__BIND_PCTX(bound);
    out->pending_pctx = DS__BIND_PCTX(pend);
    out->urgent = (int)DS__BIND_URGENT(pend);
    out->window_us = DS__LD(v->window_us);
    out->inflight_us = ds__marks_inflight(&v->marks);
    out->unit_us = DS__LD(v->marks.unit_us);
    out->last_active_us = DS__LD(v->watch.last_active_us);
    out->busy = busy(v);
    out->launching = DS__LD(v->track_all) ? atomic_load(&v->launching) : 0;
    out->section_open = DS__LD(v->section_open);
    out->gate_closed = DS__LD(v->gate.closed);
    out->gate_interval_us = DS__LD(v->gate.interval_us);
    out->launches = DS__LD(v->launches);
    out->sections = DS__LD(v->sections);
    if (out->size >= DS_VCTX_STATE_SIZE_V2)
        out->graph_launches = DS__LD(v->graph_launches);
    if (out->size >= DS_VCTX_STATE_SIZE_V3)
        DS__REQUESTS_READ(out, &v->req);
    if (out->size >= sizeof *out)
        out->graph_units = DS__LD(v->graph_units);
    return DS_SUCCESS;
}

ds_gate_mode ds_view_gate_mode(const ds_policy_view *view) { return RT(view)->gates.mode; }

uint32_t ds_view_gates_closed(const ds_policy_view *view)
{
    return atomic_load_explicit(&RT(view)->gates.closed, memory_order_relaxed);
}
