/* The serving scheduler and its modes (loop.h). */
#include "loop.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <detshare/policy.h>

#include "bench.h"

/* BE steps before the window opens (as colocate's run.c). */
#define BE_WARMUP_STEPS 4
#define TIMELINE_PERIOD_US 200
#define TIMELINE_MAX_POINTS 200000
/* Prompt tokens of the warm-up prefill chunk (in the scratch slot). */
#define WARMUP_PREFILL_TOKENS 512

const uint32_t SERVE_LADDER_SMS[SERVE_LADDER_STEPS] = {16, 32, 48, 64, 80, 96};

_Static_assert(MODE_STATIC_LAST - MODE_STATIC_FIRST + 1 == SERVE_LADDER_STEPS, "one static@N mode per ladder step");

static const char *const MODE_NAMES[MODE_COUNT] = {
    "single",    "pdmux_static", "slo_aware", "slo_aware_nogates", "tpot_first", "priority",
    "static@16", "static@32",    "static@48", "static@64",         "static@80",  "static@96"};
static const char *const MODE_POLICIES[MODE_COUNT] = {
    "priority", PDMUX_POLICY_NAME, "slo_aware", "slo_aware_nogates", "tpot_first", "priority",
    "static",   "static",          "static",    "static",            "static",     "static"};

const char *serve_mode_name(serve_mode m) { return m < MODE_COUNT ? MODE_NAMES[m] : "?"; }
const char *serve_mode_policy(serve_mode m) { return m < MODE_COUNT ? MODE_POLICIES[m] : "?"; }

uint32_t serve_mode_static_sms(serve_mode m)
{
    return m >= MODE_STATIC_FIRST && m <= MODE_STATIC_LAST ? SERVE_LADDER_SMS[m - MODE_STATIC_FIRST] : 0;
}

int serve_mode_colocated_only(serve_mode m) { return m == MODE_PRIORITY || serve_mode_static_sms(m) > 0; }

/* ------------------------------------------------------------------------ */
/* requests and the shared scheduler state                                   */

enum req_state { R_FUTURE, R_WAITING, R_RUNNING, R_DONE };

typedef struct req {
    const serve_arrival *a;
    enum req_state state;
    int32_t *prompt;     /* token ids, made when it gets a slot */
    uint32_t slot;       /* UINT32_MAX: none yet */
    uint32_t prefilled;  /* prompt tokens in the KV cache */
    uint32_t generated;  /* output tokens so far */
    int32_t last_token;  /* the newest output token */
    uint64_t hash;
    double first_us, done_us;
} req;

typedef struct sched {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* ready requests, freed slots, the end */
    const serve_env *env;
    const serve_model *model;
    req *r;
    size_t n;
    uint64_t t0_ns;
    size_t arrived;      /* r[0..arrived) have arrived */
    size_t prefill_head; /* first request whose prompt is not all prefilled */
    uint32_t *free_slots;
    uint32_t nfree;
    uint32_t *ready; /* prefilled, waiting to join the running batch */
    uint32_t nready;
    uint32_t running_n; /* the decode side's batch size, for pdmux */
    int prefill_live;   /* a prefill chunk is in flight */
    size_t done;
    atomic_int failed;
    serve_mode mode;
    double open_us;            /* the window opens (the first measured request's arrival) */
    uint64_t steps, step_reqs; /* decode steps whose tokens came out in the window, and requests in them */
    /* The decode thread's own: the decode vCtx's stats before its first step
     * in the window (zeros without settle requests: the window opens with the
     * run), subtracted at the end so that only the window's steps count. */
    int opened;
    ds_vctx_stats decode_open;
} sched;

/* Signed: before the run starts (t0_ns) times are negative. */
static double since_us(uint64_t t0_ns) { return ((double)bench_now_ns() - (double)t0_ns) / 1e3; }
static double now_us(const sched *s) { return since_us(s->t0_ns); }
/* A decode step whose tokens came out at t (us) belongs to the measured window. */
static int in_window(const sched *s, double t) { return t >= s->open_us; }


/* Under mu: requests whose due time has passed join the waiting queue. */
static void admit(sched *s)
{
    double t = now_us(s);
    while (s->arrived < s->n && s->r[s->arrived].a->at_us <= t)
        s->r[s->arrived++].state = R_WAITING;
}

/* Under mu: gives r a KV slot and its prompt; 0, 1 if no slot is free, -1 on
 * allocation failure. */
static int take_slot(sched *s, req *r, size_t index)
{
    if (r->slot != UINT32_MAX)
        return 0;
    if (s->nfree == 0)
        return 1;
    r->prompt = malloc(r->a->prompt * sizeof *r->prompt);
    if (!r->prompt) {
        fprintf(stderr, "serve: out of memory for a prompt of %u tokens\n", r->a->prompt);
        return -1;
    }
    for (uint32_t i = 0; i < r->a->prompt; i++)
        r->prompt[i] =
            (int32_t)(bench_mix64(s->env->token_seed ^ bench_mix64(index * 0x100000001ull + i)) % SERVE_VOCAB);
    r->slot = s->free_slots[--s->nfree];
    return 0;
}

/* Under mu: the next prefill chunk, FCFS from prefill_head within the token
 * budget (a request that does not fit is split: chunked prefill). Returns the
 * number of segments (0: nothing to prefill), -1 on failure. */
static int form_chunk(sched *s, serve_segment *seg, uint32_t *seg_req)
{
    uint32_t budget = s->model->chunk_tokens, n = 0;
    for (size_t i = s->prefill_head; i < s->arrived && budget > 0 && n < SERVE_MAX_BATCH; i++) {
        req *r = &s->r[i];
        if (r->state != R_WAITING)
            continue;
        int rc = take_slot(s, r, i);
        if (rc < 0)
            return -1;
        if (rc > 0)
            break; /* FCFS: nothing overtakes a request waiting for a slot */
        uint32_t left = r->a->prompt - r->prefilled;
        uint32_t take = left < budget ? left : budget;
        seg[n] = (serve_segment){.slot = r->slot, .start = r->prefilled, .ntok = take,
                                 .last = take == left, .tokens = r->prompt + r->prefilled};
        seg_req[n++] = (uint32_t)i;
        budget -= take;
    }
    return (int)n;
}

/* Under mu: r is finished; its slot goes back. */
static void finish(sched *s, req *r, double t)
{
    r->state = R_DONE;
    r->done_us = t;
    s->free_slots[s->nfree++] = r->slot;
    free(r->prompt);
    r->prompt = NULL;
    s->done++;
    pthread_cond_broadcast(&s->cv);
}

/* Records a request of latency_us on v (decode: a step's inter-token
 * interval; prefill: a request's TTFT); the vCtx's ds_vctx_stats count it
 * and whether it was over its SLO. 0, or -1 after printing the failure. */
static int record_latency(ds_vctx_t v, const char *what, double latency_us)
{
    if (latency_us < 0)
        latency_us = 0;
    ds_status st = ds_vctx_request_record(v, latency_us);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "serve: %s: ds_vctx_request_record -> %s: %s\n", what, ds_status_name(st),
                ds_last_error_message());
        return -1;
    }
    return 0;
}

/* Under mu, after the chunk's vCtx was synchronized: advance the prompts;
 * those complete have their first token and join `ready` (or are done). */
static void chunk_done(sched *s, ds_vctx_t prefill, const serve_segment *seg, const uint32_t *seg_req,
                       uint32_t nseg, const int32_t *first, double t)
{
    uint32_t k = 0;
    for (uint32_t j = 0; j < nseg; j++) {
        req *r = &s->r[seg_req[j]];
        r->prefilled += seg[j].ntok;
        if (!seg[j].last)
            continue;
        r->first_us = t;
        /* its TTFT, a request of the prefill vCtx (in the two-thread modes,
         * where prefill is latency-sensitive with the TTFT SLO) */
        if (prefill && record_latency(prefill, "prefill", t - r->a->at_us))
            atomic_store(&s->failed, 1);
        r->generated = 1;
        r->last_token = first[k++];
        r->hash = bench_mix64(r->hash ^ (uint32_t)r->last_token);
        if (r->generated >= r->a->output) {
            finish(s, r, t);
        } else {
            r->state = R_RUNNING;
            s->ready[s->nready++] = seg_req[j];
        }
    }
    while (s->prefill_head < s->n && s->r[s->prefill_head].state != R_FUTURE &&
           s->r[s->prefill_head].state != R_WAITING)
        s->prefill_head++;
    pthread_cond_broadcast(&s->cv);
}

/* The decode side's batch. */
typedef struct batch {
    uint32_t n;
    uint32_t req[SERVE_MAX_BATCH];
    uint32_t slot[SERVE_MAX_BATCH];
    int32_t token[SERVE_MAX_BATCH];
    uint32_t pos[SERVE_MAX_BATCH];
    int32_t out[SERVE_MAX_BATCH];
} batch;

/* Under mu: ready requests join the batch. */
static void join_ready(sched *s, batch *b)
{
    for (uint32_t i = 0; i < s->nready; i++)
        b->req[b->n++] = s->ready[i];
    s->nready = 0;
    s->running_n = b->n;
}

static void fill_step(const sched *s, batch *b)
{
    for (uint32_t i = 0; i < b->n; i++) {
        const req *r = &s->r[b->req[i]];
        b->slot[i] = r->slot;
        b->token[i] = r->last_token;
        b->pos[i] = r->a->prompt + r->generated - 1;
    }
}

/* Under mu, after the step's vCtx was synchronized. */
static void step_done(sched *s, batch *b, double t)
{
    uint32_t keep = 0;
    if (in_window(s, t)) {
        s->steps++;
        s->step_reqs += b->n;
    }
    for (uint32_t i = 0; i < b->n; i++) {
        req *r = &s->r[b->req[i]];
        r->last_token = b->out[i];
        r->generated++;
        r->hash = bench_mix64(r->hash ^ (uint32_t)r->last_token);
        if (r->generated >= r->a->output)
            finish(s, r, t);
        else
            b->req[keep++] = b->req[i];
    }
    b->n = keep;
    s->running_n = keep;
}

/* Under mu: pdmux_static re-chooses its group (SGLang's adjust points). */
static void pdmux_adjust(sched *s)
{
    if (s->mode == MODE_PDMUX)
        pdmux_set_group(s->env->pd, pdmux_group_for(s->env->pd, s->running_n + s->nready, s->prefill_live));
}

static int fail(sched *s)
{
    atomic_store(&s->failed, 1);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return -1;
}

#define SYNC_CHECK(s, call)                                                                      \
    do {                                                                                         \
        ds_status st_ = (call);                                                                  \
        if (st_ != DS_SUCCESS) {                                                                 \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,                  \
                    ds_status_name(st_), ds_last_error_message());                               \
            return fail(s);                                                                      \
        }                                                                                        \
    } while (0)

/* Under mu, with nothing to do: sleeps until the next arrival or a signal.
 * Returns with mu held. */
static void idle_wait(sched *s, int wake_on_arrival)
{
    if (wake_on_arrival && s->arrived < s->n && s->nfree > 0) {
        /* rounded up: admit() must see the arrival once this returns (on the
         * simulated clock no time passes in between) */
        uint64_t due = s->t0_ns + (uint64_t)ceil(s->r[s->arrived].a->at_us * 1e3);
        pthread_mutex_unlock(&s->mu);
        bench_sleep_until_ns(due);
        pthread_mutex_lock(&s->mu);
        return;
    }
    if (bench_clock_sim_rt()) {
        /* Taking turns on the simulated clock: a condition wait would hold
         * the turn; give it up until another thread has acted instead. */
        pthread_mutex_unlock(&s->mu);
        ds_sim_thread_yield(bench_clock_sim_rt());
        pthread_mutex_lock(&s->mu);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 2000000; /* bounded: failures and the end are re-checked */
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* ------------------------------------------------------------------------ */
/* the modes                                                                 */

/* single: one thread, one vCtx; prefill chunk then decode step per iteration.
 * The buffers are static: one run at a time, one thread per side. */
static int run_single(sched *s, ds_vctx_t v)
{
    serve_engine *e = s->env->engine;
    static serve_segment seg[SERVE_MAX_BATCH];
    static uint32_t seg_req[SERVE_MAX_BATCH];
    static batch b;
    static int32_t first[SERVE_MAX_BATCH];
    b.n = 0;
    pthread_mutex_lock(&s->mu);
    while (s->done < s->n && !atomic_load(&s->failed)) {
        admit(s);
        join_ready(s, &b);
        int nseg = form_chunk(s, seg, seg_req);
        if (nseg < 0) {
            pthread_mutex_unlock(&s->mu);
            return fail(s);
        }
        if (nseg == 0 && b.n == 0) {
            idle_wait(s, 1);
            continue;
        }
        fill_step(s, &b);
        pthread_mutex_unlock(&s->mu);
        if (nseg > 0 && e->ops->prefill_submit(e, v, seg, (uint32_t)nseg))
            return fail(s);
        if (b.n > 0 && e->ops->decode_submit(e, v, b.n, b.slot, b.token, b.pos))
            return fail(s);
        SYNC_CHECK(s, ds_vctx_synchronize(v));
        double t = now_us(s);
        uint32_t nfirst = 0;
        if (nseg > 0 && e->ops->prefill_result(e, first, &nfirst))
            return fail(s);
        if (b.n > 0 && e->ops->decode_result(e, b.out))
            return fail(s);
        pthread_mutex_lock(&s->mu);
        if (nseg > 0)
            chunk_done(s, NULL, seg, seg_req, (uint32_t)nseg, first, t);
        if (b.n > 0)
            step_done(s, &b, t);
    }
    pthread_mutex_unlock(&s->mu);
    return atomic_load(&s->failed) ? -1 : 0;
}

typedef struct side {
    sched *s;
    ds_vctx_t v;
    int rc;
    uint32_t turn;   /* simulated clock: the thread's place (bench_turn_*) */
    atomic_int done; /* ... given up for good */
} side;

/* Joins a thread that takes turns once it has given its turn up (*done):
 * pthread_join is a wait the simulator does not see. */
static void join_turns(pthread_t th, atomic_int *done)
{
    while (bench_clock_sim_rt() && !atomic_load(done))
        bench_pause_us(100);
    pthread_join(th, NULL);
}

/* Starts fn(arg) on a new thread, its place in the turns reserved first. */
static int start_turns(pthread_t *th, void *(*fn)(void *), void *arg, uint32_t *turn)
{
    if (bench_turn_reserve(turn))
        return -1;
    if (pthread_create(th, NULL, fn, arg)) {
        bench_turn_release(*turn);
        return -1;
    }
    return 0;
}

/* ds_vctx_synchronize(v), printing a failure: 0 or -1. */
static int sync_vctx(ds_vctx_t v, const char *side)
{
    ds_status st = ds_vctx_synchronize(v);
    if (st == DS_SUCCESS)
        return 0;
    fprintf(stderr, "serve: %s: ds_vctx_synchronize -> %s: %s\n", side, ds_status_name(st), ds_last_error_message());
    return -1;
}

/* A side's thread ends (mu held): it failed unless every request is done. */
static void *side_end(side *sd)
{
    sched *s = sd->s;
    int failed = atomic_load(&s->failed) || s->done < s->n;
    pthread_mutex_unlock(&s->mu);
    if (failed)
        fail(s);
    sd->rc = failed ? -1 : 0;
    return NULL;
}

/* Starts a side's thread (thread_init); 0, or -1 after failing the run. */
static int side_begin(side *sd)
{
    serve_engine *e = sd->s->env->engine;
    sd->rc = -1;
    if (e->ops->thread_init(e))
        return fail(sd->s);
    return 0;
}

static void *side_main(void *arg, void *(*body)(side *))
{
    side *sd = arg;
    if (bench_turn_attach(sd->turn) == 0) {
        body(sd);
    } else {
        sd->rc = -1;
        fail(sd->s);
    }
    atomic_store(&sd->done, 1);
    bench_turn_release(sd->turn);
    return NULL;
}

static void *prefill_body(side *sd)
{
    sched *s = sd->s;
    serve_engine *e = s->env->engine;
    static serve_segment seg[SERVE_MAX_BATCH];
    static uint32_t seg_req[SERVE_MAX_BATCH];
    static int32_t first[SERVE_MAX_BATCH];
    if (side_begin(sd))
        return NULL;
    pthread_mutex_lock(&s->mu);
    while (s->done < s->n && !atomic_load(&s->failed)) {
        admit(s);
        int nseg = form_chunk(s, seg, seg_req);
        if (nseg < 0)
            break;
        if (nseg == 0) {
            idle_wait(s, 1);
            continue;
        }
        s->prefill_live = 1;
        pdmux_adjust(s);
        pthread_mutex_unlock(&s->mu);
        uint32_t nfirst = 0;
        int bad = e->ops->prefill_submit(e, sd->v, seg, (uint32_t)nseg) || sync_vctx(sd->v, "prefill") ||
                  e->ops->prefill_result(e, first, &nfirst);
        double t = now_us(s);
        pthread_mutex_lock(&s->mu);
        if (bad)
            break;
        s->prefill_live = 0;
        chunk_done(s, sd->v, seg, seg_req, (uint32_t)nseg, first, t);
        admit(s);
        if (s->prefill_head >= s->arrived) /* no next chunk to start right away */
            pdmux_adjust(s);
    }
    return side_end(sd);
}


/* The vCtx's stats now (blank for none; a live vCtx's query cannot fail). */
static ds_vctx_stats vctx_stats(ds_vctx_t v)
{
    ds_vctx_stats st = {.size = sizeof st, .magic = DS_ABI_MAGIC, .version = DS_ABI_VERSION};
    if (v)
        ds_vctx_get_stats(v, &st);
    return st;
}

static void *prefill_main(void *arg) { return side_main(arg, prefill_body); }

static void *decode_body(side *sd)
{
    sched *s = sd->s;
    serve_engine *e = s->env->engine;
    static batch b;
    b.n = 0;
    double prev_out = 0; /* when the previous step's tokens were out (the batch has not emptied since) */
    if (side_begin(sd))
        return NULL;
    pthread_mutex_lock(&s->mu);
    while (s->done < s->n && !atomic_load(&s->failed)) {
        uint32_t before = b.n;
        join_ready(s, &b);
        if (b.n == 0) {
            idle_wait(s, 0);
            continue;
        }
        if (before == 0)
            pdmux_adjust(s); /* decode starts: SGLang re-chooses at the merge */
        fill_step(s, &b);
        pthread_mutex_unlock(&s->mu);
        double t_submit = now_us(s);
        int bad = e->ops->decode_submit(e, sd->v, b.n, b.slot, b.token, b.pos) || sync_vctx(sd->v, "decode") ||
                  e->ops->decode_result(e, b.out);
        double t = now_us(s);
        /* The first step whose tokens came out in the window: only this
         * thread records on the vCtx, so its stats now hold exactly the steps
         * before. */
        if (!bad && !s->opened && in_window(s, t)) {
            s->decode_open = vctx_stats(sd->v);
            s->opened = 1;
            if (s->open_us > 0) /* with settle requests: where the window starts in the policy's log */
                ds_log_message(DS_LOG_INFO, "serve: window opens at decode step %llu",
                               (unsigned long long)s->decode_open.requests);
        }
        /* TPOT as the running requests saw it: since the previous step's
         * tokens, or (first step after the batch was empty) this step alone. */
        if (!bad)
            bad = record_latency(sd->v, "decode", t - (before > 0 ? prev_out : t_submit));
        prev_out = t;
        pthread_mutex_lock(&s->mu);
        if (bad)
            break;
        step_done(s, &b, t);
        if (b.n == 0 && s->nready == 0)
            pdmux_adjust(s); /* the running batch emptied */
    }
    return side_end(sd);
}

static void *decode_main(void *arg) { return side_main(arg, decode_body); }

/* ------------------------------------------------------------------------ */
/* the BE tenant and the timeline sampler                                     */

typedef struct be_task {
    const serve_env *env;
    ds_vctx_t v;
    atomic_int ready, stop, failed;
    _Atomic uint64_t t0_ns; /* when the window opens; 0 until known */
    double steps_at_t0, steps_at_end;
    uint64_t end_ns;
    uint32_t turn;
    atomic_int done;
} be_task;

/* The BE tenant's thread: steps until told to stop. Its progress is seen only
 * when be_retire returns, so the steps done at the window's start are
 * interpolated between the two completions around it. */
static void be_body(be_task *t);

static void *be_main(void *arg)
{
    be_task *t = arg;
    if (bench_turn_attach(t->turn) == 0) {
        be_body(t);
    } else {
        atomic_store(&t->failed, 1);
        atomic_store(&t->ready, 1);
    }
    atomic_store(&t->done, 1);
    bench_turn_release(t->turn);
    return NULL;
}

static void be_body(be_task *t)
{
    workload *w = t->env->be;
    be_progress p = {0, 0};
    uint64_t prev_ns = bench_now_ns();
    uint64_t prev_done = 0;
    int seen_t0 = 0;
    if (w->ops->thread_init(w)) {
        atomic_store(&t->failed, 1);
        atomic_store(&t->ready, 1);
        return;
    }
    while (!atomic_load(&t->stop)) {
        if (w->ops->be_submit(w, t->v, &p) || w->ops->be_retire(w, t->v, &p)) {
            atomic_store(&t->failed, 1);
            atomic_store(&t->ready, 1);
            return;
        }
        uint64_t now = bench_now_ns();
        if (p.completed >= BE_WARMUP_STEPS)
            atomic_store(&t->ready, 1);
        uint64_t t0 = atomic_load(&t->t0_ns);
        if (t0 && !seen_t0 && now >= t0) {
            double f = now > prev_ns ? (double)(t0 - (prev_ns < t0 ? prev_ns : t0)) / (double)(now - prev_ns) : 1;
            t->steps_at_t0 = (double)prev_done + f * (double)(p.completed - prev_done);
            seen_t0 = 1;
        }
        prev_ns = now;
        prev_done = p.completed;
    }
    /* The window closed at end_ns, at or before the last completion seen. */
    t->steps_at_end = (double)prev_done;
    t->end_ns = prev_ns;
    if (!seen_t0)
        t->steps_at_t0 = (double)prev_done;
    ds_vctx_synchronize(t->v);
    return;
}

typedef struct sampler {
    ds_vctx_t v[SERVE_TIMELINES];
    serve_timeline *tl;
    size_t n;
    uint64_t t0_ns;
    atomic_int stop, done;
    uint32_t turn;
} sampler;

static void *sampler_main(void *arg)
{
    sampler *sp = arg;
    if (bench_turn_attach(sp->turn))
        atomic_store(&sp->stop, 1);
    while (!atomic_load(&sp->stop)) {
        double t_ms = since_us(sp->t0_ns) / 1e3;
        for (size_t i = 0; i < sp->n; i++) {
            serve_timeline *tl = &sp->tl[i];
            uint32_t p;
            if (ds_vctx_get_pctx(sp->v[i], &p) != DS_SUCCESS)
                continue;
            if (tl->n > 0 && tl->pctx[tl->n - 1] == p)
                continue;
            if (tl->n == tl->cap)
                continue; /* full: later changes are dropped */
            tl->t_ms[tl->n] = t_ms;
            tl->pctx[tl->n++] = p;
        }
        bench_pause_us(TIMELINE_PERIOD_US);
    }
    atomic_store(&sp->done, 1);
    bench_turn_release(sp->turn);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* a run                                                                     */

static ds_vctx_attr attr_for(const char *name, ds_vctx_class cls, ds_phase phase, uint32_t slo_us)
{
    ds_vctx_attr a = DS_VCTX_ATTR_INIT;
    a.name = name;
    a.cls = cls;
    a.phase = phase;
    a.slo_us = slo_us;
    return a;
}

/* Outside the window: every decode bucket once and one prefill chunk, in the
 * scratch slot, so graphs, cuBLAS heuristics and the first launch on each pCtx
 * are paid before the clock starts. */
static int warm_up(const serve_env *env, ds_vctx_t prefill, ds_vctx_t decode)
{
    serve_engine *e = env->engine;
    const serve_model *m = &e->model;
    static int32_t tokens[WARMUP_PREFILL_TOKENS];
    static uint32_t slots[SERVE_MAX_BATCH], pos[SERVE_MAX_BATCH];
    static int32_t out[SERVE_MAX_BATCH];
    uint32_t ntok = WARMUP_PREFILL_TOKENS < m->chunk_tokens ? WARMUP_PREFILL_TOKENS : m->chunk_tokens;
    for (uint32_t i = 0; i < ntok; i++)
        tokens[i] = (int32_t)(i * 7919u % SERVE_VOCAB);
    serve_segment seg = {.slot = m->max_batch, .start = 0, .ntok = ntok, .last = 1, .tokens = tokens};
    uint32_t nfirst;
    if (e->ops->prefill_submit(e, prefill, &seg, 1))
        return -1;
    BENCH_DS_CHECK(ds_vctx_synchronize(prefill));
    if (e->ops->prefill_result(e, out, &nfirst))
        return -1;
    for (uint32_t i = 0; i < m->max_batch; i++) {
        slots[i] = m->max_batch;
        pos[i] = 0;
        out[i] = 0;
    }
    for (uint32_t i = 0; i < serve_bucket_count(m->max_batch); i++) {
        if (e->ops->decode_submit(e, decode, serve_bucket_at(i, m->max_batch), slots, out, pos))
            return -1;
        BENCH_DS_CHECK(ds_vctx_synchronize(decode));
        if (e->ops->decode_result(e, out))
            return -1;
    }
    return 0;
}

static int timeline_init(serve_timeline *tl, const char *name)
{
    tl->name = name;
    tl->n = 0;
    tl->cap = TIMELINE_MAX_POINTS;
    tl->t_ms = malloc(tl->cap * sizeof *tl->t_ms);
    tl->pctx = malloc(tl->cap * sizeof *tl->pctx);
    if (!tl->t_ms || !tl->pctx) {
        fprintf(stderr, "serve: out of memory for a timeline\n");
        return -1;
    }
    return 0;
}

void serve_outcome_free(serve_outcome *o)
{
    for (size_t i = 0; i < SERVE_TIMELINES; i++) {
        free(o->timeline[i].t_ms);
        free(o->timeline[i].pctx);
        o->timeline[i] = (serve_timeline){0};
    }
    o->timelines = 0;
}

static int release_vctx(const serve_env *env, ds_vctx_t v)
{
    if (!v)
        return 0;
    int rc = 0;
    if (ds_vctx_synchronize(v) != DS_SUCCESS)
        rc = -1;
    if (env->engine->ops->vctx_release(env->engine, v))
        rc = -1;
    ds_status st = ds_vctx_destroy(v);
    if (st != DS_SUCCESS) {
        fprintf(stderr, "serve: ds_vctx_destroy -> %s: %s\n", ds_status_name(st), ds_last_error_message());
        rc = -1;
    }
    return rc;
}

int serve_run(const serve_env *env, serve_mode mode, int with_be, const serve_arrival *arr, size_t n,
              size_t settle, int record_timeline, serve_outcome *out)
{
    const serve_model *m = &env->engine->model;
    serve_req_result *results = out->req;
    *out = (serve_outcome){.req = results};
    if (n == 0 || n > 100000 || settle >= n || (with_be && !env->be)) {
        fprintf(stderr, "serve: bad run (%zu requests, %zu of them settle%s)\n", n, settle,
                with_be && !env->be ? ", no BE tenant" : "");
        return -1;
    }
    uint32_t static_sms = serve_mode_static_sms(mode);
    if (static_sms) { /* before the policy is made active and the vCtxs are placed */
        char v[16];
        snprintf(v, sizeof v, "%u", static_sms);
        BENCH_DS_CHECK(ds_policy_param_set(env->rt, "static", "ls_sms", v));
    }
    BENCH_DS_CHECK(ds_runtime_set_policy(env->rt, serve_mode_policy(mode)));
    if (mode == MODE_PDMUX)
        pdmux_set_group(env->pd, 0);

    int rc = -1;
    sched s = {.env = env, .model = m, .n = n, .mode = mode, .open_us = arr[settle].at_us, .opened = settle == 0};
    ds_vctx_t vp = NULL, vd = NULL, vb = NULL;
    be_task be = {.env = env};
    pthread_t be_thread, sampler_thread, threads[2];
    int be_started = 0, sampler_started = 0;
    sampler sp = {.tl = out->timeline};
    bench_poller poller = {0};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    /* On the simulated clock this thread takes turns with the others, and
     * the scheduler pass runs from a poller at simulated instants. */
    uint32_t turn = 0;
    if (bench_turn_reserve(&turn) || bench_turn_attach(turn) || bench_poller_start(&poller, 100))
        goto out;
    s.r = calloc(n, sizeof *s.r);
    s.free_slots = malloc(m->max_batch * sizeof *s.free_slots);
    s.ready = malloc(SERVE_MAX_BATCH * sizeof *s.ready);
    if (!s.r || !s.free_slots || !s.ready) {
        fprintf(stderr, "serve: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        s.r[i] = (req){.a = &arr[i], .state = R_FUTURE, .slot = UINT32_MAX, .hash = 0x5e12e5e12ull};
    for (uint32_t i = 0; i < m->max_batch; i++)
        s.free_slots[i] = m->max_batch - 1 - i; /* slot 0 first */
    s.nfree = m->max_batch;

    /* vCtxs: single has one; the multiplexed modes a prefill and a decode. */
    if (mode == MODE_SINGLE) {
        ds_vctx_attr a = attr_for("serve", DS_CLASS_LATENCY_SENSITIVE, DS_PHASE_NONE, env->tpot_slo_us);
        if (ds_vctx_create(env->rt, &a, &vp) != DS_SUCCESS) {
            fprintf(stderr, "serve: ds_vctx_create(serve): %s\n", ds_last_error_message());
            goto out;
        }
        vd = NULL;
    } else {
        ds_vctx_attr ap = attr_for("prefill", DS_CLASS_LATENCY_SENSITIVE, DS_PHASE_PREFILL, env->ttft_slo_us);
        ds_vctx_attr ad = attr_for("decode", DS_CLASS_LATENCY_SENSITIVE, DS_PHASE_DECODE, env->tpot_slo_us);
        if (ds_vctx_create(env->rt, &ap, &vp) != DS_SUCCESS || ds_vctx_create(env->rt, &ad, &vd) != DS_SUCCESS) {
            fprintf(stderr, "serve: ds_vctx_create: %s\n", ds_last_error_message());
            goto out;
        }
    }
    if (env->engine->ops->thread_init(env->engine) || warm_up(env, vp, vd ? vd : vp))
        goto out;

    if (with_be) {
        ds_vctx_attr ab = attr_for("train", DS_CLASS_BEST_EFFORT, DS_PHASE_NONE, 0);
        if (ds_vctx_create(env->rt, &ab, &vb) != DS_SUCCESS) {
            fprintf(stderr, "serve: ds_vctx_create(train): %s\n", ds_last_error_message());
            goto out;
        }
        be.v = vb;
        if (start_turns(&be_thread, be_main, &be, &be.turn)) {
            fprintf(stderr, "serve: cannot start the BE thread\n");
            goto out;
        }
        be_started = 1;
        while (!atomic_load(&be.ready))
            bench_pause_us(200);
        if (atomic_load(&be.failed))
            goto out;
    }

    s.t0_ns = bench_now_ns() + 1000000ull; /* 1 ms lead */
    if (record_timeline) {
        const char *names[3] = {mode == MODE_SINGLE ? "serve" : "prefill", "decode", "train"};
        ds_vctx_t vs[3] = {vp, vd, vb};
        for (size_t i = 0; i < 3; i++) {
            if (!vs[i])
                continue;
            if (timeline_init(&out->timeline[sp.n], names[i]))
                goto out;
            sp.v[sp.n++] = vs[i];
        }
        out->timelines = sp.n;
        sp.t0_ns = s.t0_ns;
        if (start_turns(&sampler_thread, sampler_main, &sp, &sp.turn)) {
            fprintf(stderr, "serve: cannot start the timeline sampler\n");
            goto out;
        }
        sampler_started = 1;
    }
    if (with_be)
        atomic_store(&be.t0_ns, s.t0_ns + (uint64_t)(s.open_us * 1e3));
    bench_sleep_until_ns(s.t0_ns);

    if (mode == MODE_SINGLE) {
        rc = run_single(&s, vp);
    } else {
        side sides[2] = {{.s = &s, .v = vp, .rc = -1}, {.s = &s, .v = vd, .rc = -1}};
        int started = 0;
        if (!start_turns(&threads[0], prefill_main, &sides[0], &sides[0].turn))
            started++;
        if (started == 1 && !start_turns(&threads[1], decode_main, &sides[1], &sides[1].turn))
            started++;
        if (started < 2)
            fail(&s);
        for (int i = 0; i < started; i++)
            join_turns(threads[i], &sides[i].done);
        rc = started == 2 && sides[0].rc == 0 && sides[1].rc == 0 ? 0 : -1;
    }
    if (rc == 0) {
        double last = 0, open_us = s.open_us;
        for (size_t i = settle; i < n; i++) {
            const req *r = &s.r[i];
            serve_req_result *res = &results[i - settle];
            *res = (serve_req_result){.arrival_us = r->a->at_us - open_us, .first_us = r->first_us - open_us,
                                      .done_us = r->done_us - open_us, .prompt = r->a->prompt,
                                      .output = r->a->output, .token_hash = r->hash};
            if (res->done_us > last)
                last = res->done_us;
        }
        out->open_us = open_us;
        out->makespan_us = last;
        out->decode_bs_mean = s.steps ? (double)s.step_reqs / (double)s.steps : 0;
        out->pdmux_changes = mode == MODE_PDMUX ? atomic_load(&env->pd->changes) : 0;
    }
out:
    if (sampler_started) {
        atomic_store(&sp.stop, 1);
        join_turns(sampler_thread, &sp.done);
    }
    if (be_started) {
        atomic_store(&be.stop, 1);
        join_turns(be_thread, &be.done);
        if (atomic_load(&be.failed))
            rc = -1;
        /* BE ran to the end of serving: its steps from the window's start to
         * its last completion seen after serving stopped. */
        out->be_steps = be.steps_at_end - be.steps_at_t0;
        double be_window_s = ((double)be.end_ns - (double)atomic_load(&be.t0_ns)) / 1e9;
        out->be_steps_per_s = be_window_s > 0 ? out->be_steps / be_window_s : 0;
    }
    out->stats[0] = vctx_stats(vp);
    out->stats[1] = vctx_stats(vd);
    out->stats[2] = vctx_stats(vb);
    /* Not opened: no decode step came out in the window, so it has none. */
    const ds_vctx_stats *before = s.opened ? &s.decode_open : &out->stats[1];
    out->decode_steps = out->stats[1].requests - before->requests;
    out->decode_over_slo = out->stats[1].requests_over_slo - before->requests_over_slo;
    if (release_vctx(env, vp) || release_vctx(env, vd) || release_vctx(env, vb))
        rc = -1;
    if (s.r)
        for (size_t i = 0; i < n; i++)
            free(s.r[i].prompt);
    free(s.r);
    free(s.free_slots);
    free(s.ready);
    bench_poller_stop(&poller);
    bench_turn_release(turn);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    return rc;
}

int serve_be_alone(const serve_env *env, double window_us, double *steps_per_s)
{
    if (!env->be) {
        fprintf(stderr, "serve: no BE tenant\n");
        return -1;
    }
    BENCH_DS_CHECK(ds_runtime_set_policy(env->rt, "priority"));
    ds_vctx_attr ab = attr_for("train", DS_CLASS_BEST_EFFORT, DS_PHASE_NONE, 0);
    ds_vctx_t vb;
    BENCH_DS_CHECK(ds_vctx_create(env->rt, &ab, &vb));
    be_task be = {.env = env, .v = vb};
    pthread_t th;
    int rc = -1;
    bench_poller poller = {0};
    uint32_t turn = 0;
    if (bench_turn_reserve(&turn) || bench_turn_attach(turn) || bench_poller_start(&poller, 100))
        goto out;
    if (start_turns(&th, be_main, &be, &be.turn)) {
        fprintf(stderr, "serve: cannot start the BE thread\n");
        goto out;
    }
    while (!atomic_load(&be.ready))
        bench_pause_us(200);
    uint64_t t0 = bench_now_ns() + 1000000ull;
    atomic_store(&be.t0_ns, t0);
    bench_sleep_until_ns(t0 + (uint64_t)(window_us * 1e3));
    atomic_store(&be.stop, 1);
    join_turns(th, &be.done);
    if (!atomic_load(&be.failed)) {
        double s = (double)(be.end_ns - t0) / 1e9;
        *steps_per_s = s > 0 ? (be.steps_at_end - be.steps_at_t0) / s : 0;
        rc = 0;
    }
out:
    bench_poller_stop(&poller);
    if (release_vctx(env, vb))
        rc = -1;
    bench_turn_release(turn);
    return rc;
}
