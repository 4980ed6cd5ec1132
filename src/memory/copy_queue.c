/*
 * Copy arbiter: start-time fair queueing of chunks, LS first (copy_queue.h).
 */
#include "memory/copy_queue.h"

#include <string.h>

void ds__copyq_init(ds__copyq *q, uint64_t chunk_bytes)
{
    memset(q, 0, sizeof *q);
    q->chunk_bytes = chunk_bytes ? chunk_bytes : DS__COPYQ_CHUNK_DEFAULT;
    q->ls_chunk_bytes = q->chunk_bytes < DS__COPYQ_LS_CHUNK_DEFAULT ? q->chunk_bytes : DS__COPYQ_LS_CHUNK_DEFAULT;
}

int ds__copyq_tenant_add(ds__copyq *q, uint32_t weight, int ls)
{
    for (int i = 0; i < DS__COPYQ_MAX_TENANTS; i++)
        if (!q->t[i].live) {
            memset(&q->t[i], 0, sizeof q->t[i]);
            q->t[i].live = 1;
            q->t[i].ls = ls != 0;
            q->t[i].weight = weight ? weight : 1;
            q->t[i].finish = q->vtime;
            q->ls_tenants += q->t[i].ls;
            return i;
        }
    return -1;
}

int ds__copyq_tenant_remove(ds__copyq *q, int tenant)
{
    if (q->t[tenant].head)
        return -1;
    q->t[tenant].live = 0;
    q->ls_tenants -= q->t[tenant].ls;
    return 0;
}

ds__copy_req *ds__copyq_tenant_cancel(ds__copyq *q, int tenant)
{
    ds__copy_req *h = q->t[tenant].head;
    q->t[tenant].head = q->t[tenant].tail = NULL;
    return h;
}

void ds__copyq_set_weight(ds__copyq *q, int tenant, uint32_t weight)
{
    q->t[tenant].weight = weight ? weight : 1;
}

void ds__copyq_submit(ds__copyq *q, int tenant, ds__copy_req *req, double now_us)
{
    ds__copyq_tenant *t = &q->t[tenant];
    req->next = NULL;
    req->offset = 0;
    req->submit_us = req->ready_us = now_us;
    req->seq = q->seq++;
    if (!t->head) {
        /* a tenant returning from idle starts at the current virtual time:
         * idle time earns no credit (SFQ) */
        if (t->finish < q->vtime)
            t->finish = q->vtime;
        t->head = req;
    } else {
        t->tail->next = req;
    }
    t->tail = req;
}

int ds__copyq_next(ds__copyq *q, double now_us, double bytes_per_us, ds__copy_chunk *out)
{
    int best = -1;
    /* LS first: the earliest-submitted LS request */
    for (int i = 0; i < DS__COPYQ_MAX_TENANTS; i++) {
        const ds__copyq_tenant *t = &q->t[i];
        if (t->live && t->ls && t->head && (best < 0 || t->head->seq < q->t[best].head->seq))
            best = i;
    }
    if (best < 0) {
        double best_start = 0;
        for (int i = 0; i < DS__COPYQ_MAX_TENANTS; i++) {
            const ds__copyq_tenant *t = &q->t[i];
            if (!t->live || t->ls || !t->head)
                continue;
            double s = t->finish > q->vtime ? t->finish : q->vtime;
            if (best < 0 || s < best_start) {
                best = i;
                best_start = s;
            }
        }
        if (best < 0)
            return 0;
        q->vtime = best_start;
    }
    ds__copyq_tenant *t = &q->t[best];
    ds__copy_req *r = t->head;
    uint64_t len = r->bytes - r->offset;
    uint64_t cap = !t->ls && q->ls_tenants ? q->ls_chunk_bytes : q->chunk_bytes;
    if (len > cap)
        len = cap;
    if (!t->ls) {
        double s = t->finish > q->vtime ? t->finish : q->vtime;
        t->finish = s + (double)len / t->weight;
    }
    if (now_us > r->ready_us)
        t->wait_us += now_us - r->ready_us;
    double link_us = bytes_per_us > 0 ? (double)len / bytes_per_us : 0;
    r->ready_us = (now_us > r->ready_us ? now_us : r->ready_us) + link_us;
    out->tenant = best;
    out->req = r;
    out->offset = r->offset;
    out->len = len;
    r->offset += len;
    out->last = r->offset == r->bytes;
    t->bytes_moved += len;
    t->chunks++;
    if (out->last) {
        t->head = r->next;
        if (!t->head)
            t->tail = NULL;
    }
    return 1;
}
