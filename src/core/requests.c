/* Request latency accounting: see requests.h and ds_vctx_request_begin(). */
#include "core/clock.h"
#include "core/handles.h"
#include "core/requests.h"
#include "core/vctx.h"
#include "seam/log.h"

#include <math.h>
#include <string.h>


/* Nearest-rank percentile q (0 < q <= 1) of n ascending values (n >= 1). */
static float rank(const float *sorted, uint32_t n, double q)
{
    uint32_t k = (uint32_t)ceil(q * (double)n);
    return sorted[k ? k - 1 : 0];
}

/* Index of the first entry >= x in sorted[0, n). */
static uint32_t lower_bound(const float *sorted, uint32_t n, float x)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (sorted[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void ds__requests_add(struct ds_vctx *v, double latency_us)
{
    ds__vreq *r = &v->req;
    float x = (float)latency_us;
    /* judged on the stored value, so that it leaves the window as it entered */
    int over = v->slo_us && (double)x > (double)v->slo_us;
    while (atomic_flag_test_and_set_explicit(&r->busy, memory_order_acquire))
        ;
    if (r->n == DS_REQUEST_WINDOW) { /* the oldest leaves the window */
        float old = r->ring[r->head];
        uint32_t i = lower_bound(r->sorted, r->n, old);
        memmove(&r->sorted[i], &r->sorted[i + 1], (r->n - i - 1) * sizeof r->sorted[0]);
        r->n--;
        r->over_in_window -= v->slo_us && (double)old > (double)v->slo_us;
    }
    uint32_t i = lower_bound(r->sorted, r->n, x);
    memmove(&r->sorted[i + 1], &r->sorted[i], (r->n - i) * sizeof r->sorted[0]);
    r->sorted[i] = x;
    r->n++;
    r->ring[r->head] = x;
    r->head = (r->head + 1) % DS_REQUEST_WINDOW;
    r->over_in_window += over;
    atomic_store_explicit(&r->p50_us, rank(r->sorted, r->n, 0.50), memory_order_relaxed);
    atomic_store_explicit(&r->p99_us, rank(r->sorted, r->n, 0.99), memory_order_relaxed);
    atomic_store_explicit(&r->window_n, r->n, memory_order_relaxed);
    atomic_store_explicit(&r->window_over, r->over_in_window, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->over_slo, (uint64_t)over, memory_order_relaxed);
    if (over && !r->last_over) /* a run of late requests begins */
        atomic_fetch_add_explicit(&r->over_runs, 1, memory_order_relaxed);
    r->last_over = over;
    /* count last, with release: a reader that sees it sees the rest */
    atomic_fetch_add_explicit(&r->count, 1, memory_order_release);
    atomic_flag_clear_explicit(&r->busy, memory_order_release);
}

ds_status ds_vctx_request_begin(ds_vctx_t v, ds_request_t *req)
{
    if (req)
        *req = 0;
    DS__TRY(ds__vctx_check(v, "ds_vctx_request_begin"));
    if (!req)
        return ds__fail(DS_ERR_INVALID_ARGUMENT, "ds_vctx_request_begin('%s'): req is NULL", v->name);
    /* + 1: a begun request is never 0, the value ds_vctx_request_end refuses */
    *req = (ds_request_t)llround(ds__now_us(v->rt) * 1e3) + 1;
    return DS_SUCCESS;
}

ds_status ds_vctx_request_end(ds_vctx_t v, ds_request_t req, double *latency_us)
{
    if (latency_us)
        *latency_us = 0;
    DS__TRY(ds__vctx_check(v, "ds_vctx_request_end"));
    double now_ns = ds__now_us(v->rt) * 1e3 + 1;
    if (req == 0 || (double)req > now_ns + 1e3)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_vctx_request_end('%s'): request %llu was not returned by ds_vctx_request_begin "
                        "on this runtime",
                        v->name, (unsigned long long)req);
    double lat = ((double)now_ns - (double)req) / 1e3;
    if (lat < 0)
        lat = 0;
    ds__requests_add(v, lat);
    if (latency_us)
        *latency_us = lat;
    return DS_SUCCESS;
}

ds_status ds_vctx_request_record(ds_vctx_t v, double latency_us)
{
    DS__TRY(ds__vctx_check(v, "ds_vctx_request_record"));
    if (!isfinite(latency_us) || latency_us < 0 || latency_us > 1e12)
        return ds__fail(DS_ERR_INVALID_ARGUMENT,
                        "ds_vctx_request_record('%s'): latency %g us is not a finite value in [0, 1e12]", v->name,
                        latency_us);
    ds__requests_add(v, latency_us);
    return DS_SUCCESS;
}
