/* GPU telemetry (docs/TELEMETRY.md): a joined member's agent reports its own node's GPUs with
 * TELEMETRY; the server keeps the latest sample per connection (the node) for /status and
 * /metrics, and the job's warnings, each once. The message names no node: the sender's
 * connection is the node, so an agent cannot speak for another one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"
#include "sjob.h"

/* Adds w, cut to RDZV_TEL_WARN_LEN bytes, to the job's warnings unless it is there already (at
 * most SJOB_WARN_MAX). Returns 1 when it was added. */
static int add_warning(struct sjob *sj, const char *w)
{
    if (w[0] == '\0')
        return 0;
    for (unsigned i = 0; i < sj->n_warnings; i++)
        if (strncmp(sj->warnings[i], w, RDZV_TEL_WARN_LEN) == 0)
            return 0; /* the same text, as far as it is kept */
    if (sj->n_warnings >= SJOB_WARN_MAX)
        return 0;
    if (sj->warnings == NULL &&
        (sj->warnings = calloc(SJOB_WARN_MAX, sizeof(sj->warnings[0]))) == NULL)
        return 0;
    memcpy(sj->warnings[sj->n_warnings], w, strnlen(w, RDZV_TEL_WARN_LEN));
    sj->n_warnings++;
    return 1;
}

/* --- warnings only the server can give: the job's nodes compared -----------------------------
 * Each node's agent warns of what its own node shows (agent/telemetry.c). What needs every
 * node's latest sample is judged here, at most once a second per job, and said once, in /status
 * and in the server's log, after it held for the grace (MUSTER_TELEMETRY_GRACE_MS, as the
 * agents': 60 s, so that ranks still loading or warming up are not named):
 * - memory far apart: the rank processes' GPU memory, largest >= TEL_APART_RATIO x smallest and
 *   TEL_APART_MIN_BYTES more (uneven shards, a leak in one rank);
 * - a straggler: a GPU holding a rank whose utilisation is under half its peers' median and
 *   TEL_SLOW_UTIL_POINTS below it, or whose SM clock is under TEL_SLOW_CLOCK_PCT % of theirs
 *   (its peers: every other GPU of the job that holds a rank). A straggler is named once
 *   for every grace it goes on lagging; its warning is said the first time. With
 *   --exclude-stragglers K the node whose GPU was named K times is handed to the exclusion
 *   policy (rdzv_job_exclude): refused from then on, the round restarts without it. A naming
 *   counts for that only when the GPU also lags the other nodes' own figures, each node once,
 *   with at least two other nodes (lags_nodes): one lying node cannot get others excluded. */
#define TEL_EVAL_MS 1000
#define TEL_APART_RATIO 2
#define TEL_APART_MIN_BYTES (1ull << 30)
#define TEL_SLOW_UTIL_POINTS 30
#define TEL_SLOW_CLOCK_PCT 75

static uint64_t grace_ms(void)
{
    static uint64_t g = UINT64_MAX;

    if (g == UINT64_MAX) {
        const char *e = getenv("MUSTER_TELEMETRY_GRACE_MS");

        g = e != NULL && e[0] != '\0' ? strtoull(e, NULL, 10) : 60000;
    }
    return g;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

    return (x > y) - (x < y);
}

/* The median of the n sorted values a[] less one instance of v (n >= 2). */
static double median_without(const int32_t *a, size_t n, int32_t v)
{
    size_t k = 0, m = n - 1;

    while (k < n && a[k] != v)
        k++;
#define AT(i) ((i) < k ? a[(i)] : a[(i) + 1])
    double r = m % 2 ? AT(m / 2) : (AT(m / 2 - 1) + AT(m / 2)) / 2.0;
#undef AT
    return r;
}

static int holds_rank(const struct rdzv_tel_gpu *x)
{
    for (uint32_t k = 0; k < x->nprocs; k++)
        if (x->procs[k].rank >= 0)
            return 1;
    return 0;
}

struct tel_gpu_ref {
    struct peer *p;
    const struct rdzv_job_member *m;
    uint32_t i; /* index in p->tel->gpus */
};

/* A warning of the server's own: kept for /status, logged, and sent as NOTICE to the members
 * that report TELEMETRY (and so understand NOTICE), for their consoles. */
static void say(struct rdzv_server *srv, struct sjob *sj, const char *w)
{
    const struct rdzv_job *job = sj->job;
    struct rdzv_msg m;

    if (!add_warning(sj, w))
        return;
    rdzv__log(srv, "job %s: %s", job->id, sj->warnings[sj->n_warnings - 1]); /* as kept */
    rdzv_msg_init(&m, RDZV_MSG_NOTICE);
    memcpy(m.u.notice.text, sj->warnings[sj->n_warnings - 1], sizeof(m.u.notice.text));
    for (size_t i = 0; i < job->n_members; i++) {
        struct peer *p = job->members[i].peer;

        if (p != NULL && p->tel != NULL)
            rdzv__send(p, &m);
    }
}

static void judge_memory(struct rdzv_server *srv, struct sjob *sj, uint64_t now)
{
    const struct rdzv_job *job = sj->job;
    const struct rdzv_job_member *lo_m = NULL, *hi_m = NULL;
    const struct rdzv_tel_proc *lo = NULL, *hi = NULL;
    uint32_t lo_g = 0, hi_g = 0;
    char w[640];

    for (size_t n = 0; n < job->n_members; n++) {
        const struct rdzv_job_member *m = &job->members[n];
        const struct peer *mp = m->peer;
        const struct rdzv_telemetry *t = mp != NULL ? mp->tel : NULL;

        for (uint32_t i = 0; t != NULL && i < t->ngpus; i++)
            for (uint32_t k = 0; k < t->gpus[i].nprocs; k++) {
                const struct rdzv_tel_proc *q = &t->gpus[i].procs[k];

                if (q->rank < 0 || q->mem == UINT64_MAX)
                    continue;
                if (lo == NULL || q->mem < lo->mem)
                    lo = q, lo_m = m, lo_g = t->gpus[i].gpu;
                if (hi == NULL || q->mem > hi->mem)
                    hi = q, hi_m = m, hi_g = t->gpus[i].gpu;
            }
    }
    if (lo == NULL || hi->mem < TEL_APART_RATIO * lo->mem ||
        hi->mem - lo->mem < TEL_APART_MIN_BYTES) {
        sj->mem_apart_since = 0;
        return;
    }
    if (sj->mem_apart_since == 0)
        sj->mem_apart_since = now;
    if (sj->mem_apart_said || now - sj->mem_apart_since < grace_ms())
        return;
    sj->mem_apart_said = 1; /* its figures change from sample to sample: said once, not each */
    snprintf(w, sizeof(w),
             "GPU memory far apart across the ranks: rank %d holds %.1f GiB (GPU %u of %s), "
             "rank %d %.1f GiB (GPU %u of %s)",
             (int)hi->rank, (double)hi->mem / (1 << 30), hi_g, hi_m->host, (int)lo->rank,
             (double)lo->mem / (1 << 30), lo_g, lo_m->host);
    say(srv, sj, w);
}

/* The median of the sorted n values a[] (n >= 1). */
static double median_of(const int32_t *a, size_t n)
{
    return n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2.0;
}

/* A node's own figure: the median utilisation (clock: SM clock) of its GPUs that hold a rank;
 * -1 when it reports none. */
static double node_figure(const struct peer *p, int clock)
{
    int32_t v[RDZV_TEL_GPUS_MAX];
    size_t n = 0;

    for (uint32_t i = 0; p != NULL && p->tel != NULL && i < p->tel->ngpus; i++) {
        const struct rdzv_tel_gpu *x = &p->tel->gpus[i];
        int32_t f = clock ? x->sm_clock : x->util;

        if (holds_rank(x) && (clock ? f > 0 : f >= 0))
            v[n++] = f;
    }
    if (n == 0)
        return -1;
    qsort(v, n, sizeof(*v), cmp_i32);
    return median_of(v, n);
}

/* Whether GPU x of node p also lags against the other nodes, each node counted once by its own
 * figure: what --exclude-stragglers acts on. A node that lies about its GPUs (sixteen at
 * 100 %) then moves the peers' median by one node, not by sixteen GPUs, and with fewer than
 * two other nodes to compare with nobody can tell the liar from the straggler: no exclusion. */
static int lags_nodes(const struct rdzv_job *job, const struct peer *p,
                      const struct rdzv_tel_gpu *x, int by_util)
{
    int32_t *v = malloc(job->n_members * sizeof(*v));
    size_t n = 0;
    double m;
    int lags;

    if (v == NULL)
        return 0;
    for (size_t k = 0; k < job->n_members; k++) {
        double f;

        if (job->members[k].peer == p || (f = node_figure(job->members[k].peer, !by_util)) < 0)
            continue;
        v[n++] = (int32_t)f;
    }
    if (n < 2) {
        free(v);
        return 0;
    }
    qsort(v, n, sizeof(*v), cmp_i32);
    m = median_of(v, n);
    free(v);
    if (by_util)
        lags = x->util < m / 2 && m - x->util >= TEL_SLOW_UTIL_POINTS;
    else
        lags = x->sm_clock * 100.0 < m * TEL_SLOW_CLOCK_PCT;
    return lags;
}

/* Judges the job's GPUs; returns the node to exclude (--exclude-stragglers: one of its GPUs
 * was named a straggler K times; why says so) or NULL. */
static struct peer *judge_stragglers(struct rdzv_server *srv, struct sjob *sj, uint64_t now,
                                     char *why, size_t why_cap)
{
    const struct rdzv_job *job = sj->job;
    struct tel_gpu_ref *g;
    struct peer *out = NULL;
    int32_t *util, *clk;
    size_t n = 0, nu = 0, nc = 0, cap = 0;
    char w[640];

    for (size_t k = 0; k < job->n_members; k++) {
        const struct peer *p = job->members[k].peer;

        cap += p != NULL && p->tel != NULL ? p->tel->ngpus : 0;
    }
    if (cap < 2)
        return NULL; /* no peers to compare with */
    g = malloc(cap * sizeof(*g));
    util = malloc(2 * cap * sizeof(*util));
    clk = util != NULL ? util + cap : NULL;
    if (g == NULL || util == NULL)
        goto out;
    for (size_t k = 0; k < job->n_members; k++) {
        struct peer *p = job->members[k].peer;

        for (uint32_t i = 0; p != NULL && p->tel != NULL && i < p->tel->ngpus; i++) {
            if (!holds_rank(&p->tel->gpus[i]))
                continue;
            g[n++] = (struct tel_gpu_ref){p, &job->members[k], i};
            if (p->tel->gpus[i].util >= 0)
                util[nu++] = p->tel->gpus[i].util;
            if (p->tel->gpus[i].sm_clock > 0)
                clk[nc++] = p->tel->gpus[i].sm_clock;
        }
    }
    if (n < 2)
        goto out; /* no peers to compare with */
    qsort(util, nu, sizeof(*util), cmp_i32);
    qsort(clk, nc, sizeof(*clk), cmp_i32);
    for (size_t k = 0; k < n; k++) {
        struct peer *p = g[k].p;
        const struct rdzv_tel_gpu *x = &p->tel->gpus[g[k].i];
        double mu = nu >= 2 && x->util >= 0 ? median_without(util, nu, x->util) : -1;
        double mc = nc >= 2 && x->sm_clock > 0 ? median_without(clk, nc, x->sm_clock) : -1;
        int by_util = mu >= 0 && x->util < mu / 2 && mu - x->util >= TEL_SLOW_UTIL_POINTS;
        int by_clock = mc > 0 && x->sm_clock * 100.0 < mc * TEL_SLOW_CLOCK_PCT;

        struct rdzv__tel_judge *jd = p->tel_judge;
        uint32_t i = g[k].i;

        if (jd == NULL)
            continue;
        if (!by_util && !by_clock) {
            jd->slow_since[i] = 0;
            continue;
        }
        if (jd->slow_since[i] == 0)
            jd->slow_since[i] = now;
        if (now - jd->slow_since[i] < grace_ms())
            continue;
        /* named: once more for every grace it keeps lagging, said only the first time;
         * counted for --exclude-stragglers only when it lags the other nodes too */
        jd->slow_since[i] = now;
        if (jd->named_at != now && lags_nodes(job, p, x, by_util)) {
            jd->named_at = now; /* a node with several slow GPUs is named once a grace */
            jd->named++;
        }
        if (by_util)
            snprintf(w, sizeof(w),
                     "GPU %u of %s (node %u) is a straggler: %d %% busy while its peers' median "
                     "is %.0f %%",
                     x->gpu, g[k].m->host, g[k].m->group_rank, (int)x->util, mu);
        else
            snprintf(w, sizeof(w),
                     "GPU %u of %s (node %u) is a straggler: SM clock %d MHz while its peers' "
                     "median is %.0f MHz",
                     x->gpu, g[k].m->host, g[k].m->group_rank, (int)x->sm_clock, mc);
        if (!jd->said[i]) {
            jd->said[i] = 1;
            say(srv, sj, w);
        }
        if (job->exclude_stragglers > 0 && jd->named >= job->exclude_stragglers && out == NULL) {
            out = p; /* handed to the exclusion policy below, once the loop is done */
            snprintf(why, why_cap, "its GPU was named a straggler %u times (last: %.200s)",
                     jd->named, w);
        }
    }
out:
    free(g);
    free(util); /* clk lives in it */
    return out;
}

void rdzv__handle_telemetry(struct peer *p, const struct rdzv_telemetry *t)
{
    struct sjob *sj = p->job;
    struct peer *slow;
    char why[RDZV_JOB_EXCLUDE_REASON_MAX];

    if (sj == NULL) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "TELEMETRY before JOIN");
        rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                         "TELEMETRY before JOIN: only a joined agent may report its node's GPUs");
        return;
    }
    if (rdzv_job_find(sj->job, p) < 0)
        return; /* a spare or a node waiting for a round: it holds no ranks to report on */
    if (p->tel == NULL && (p->tel = malloc(sizeof(*p->tel))) == NULL)
        return; /* out of memory: telemetry is display only */
    if (p->tel_judge == NULL)
        p->tel_judge = calloc(1, sizeof(*p->tel_judge));
    memcpy(p->tel, t, sizeof(*t));
    for (uint32_t i = 0; i < t->nwarn; i++)
        (void)add_warning(sj, t->warn[i]);
    uint64_t now = uv_now(p->srv->loop);

    if (now - sj->tel_judged_ms < TEL_EVAL_MS)
        return;
    sj->tel_judged_ms = now;
    judge_memory(p->srv, sj, now);
    if ((slow = judge_stragglers(p->srv, sj, now, why, sizeof(why))) != NULL) {
        int k = rdzv_job_find(sj->job, slow);

        rdzv__log(p->srv, "job %s: excluding node %s (--exclude-stragglers %u): %s", sj->job->id,
                  k >= 0 ? sj->job->members[k].host : "?", sj->job->exclude_stragglers, why);
        rdzv__sjob_apply(sj, rdzv_job_exclude(sj->job, slow, why, now, mc_wall_ms()));
    }
}
