/* The job's log on the server, the rate caps and --dedup (logring.h). */
#include "logring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rdzv_bucket_take(struct rdzv_bucket *b, uint64_t now_ms, unsigned lines_per_s,
                     size_t bytes_per_s, size_t len)
{
    double max_l = (double)lines_per_s * RDZV_LOG_BURST_S;
    double max_b = (double)bytes_per_s * RDZV_LOG_BURST_S;

    if (b->last_ms == 0) {
        b->lines = max_l;
        b->bytes = max_b;
    } else if (now_ms > b->last_ms) {
        double s = (double)(now_ms - b->last_ms) / 1000.0;
        b->lines += s * lines_per_s;
        b->bytes += s * (double)bytes_per_s;
        if (b->lines > max_l)
            b->lines = max_l;
        if (b->bytes > max_b)
            b->bytes = max_b;
    }
    if (now_ms > b->last_ms || b->last_ms == 0)
        b->last_ms = now_ms ? now_ms : 1;
    if (b->lines < 1.0 || b->bytes < (double)len)
        return 0;
    b->lines -= 1.0;
    b->bytes -= (double)len;
    return 1;
}

struct entry {
    uint64_t seq, time_ms;
    int32_t rank;
    uint8_t stream;
    uint32_t len;
    char *text;
};

struct rdzv_logring {
    struct rdzv_logring_limits lim;
    struct entry *e; /* circular: e[head] is the oldest of n */
    size_t cap, head, n;
    size_t bytes;      /* held text + RDZV_LOG_ENTRY_COST per line */
    uint64_t next_seq; /* the number the next line gets; the oldest held is next_seq - n */
    struct rdzv_bucket job;
    struct rdzv_bucket rank[RDZV_LOG_RANK_BUCKETS];
    struct rdzv_logring_stats st;
};

struct rdzv_logring *rdzv_logring_new(const struct rdzv_logring_limits *l)
{
    struct rdzv_logring *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    if (l != NULL)
        r->lim = *l;
    if (r->lim.ring_bytes == 0)
        r->lim.ring_bytes = RDZV_LOG_RING_BYTES;
    if (r->lim.lines_per_s == 0)
        r->lim.lines_per_s = RDZV_LOG_JOB_LINES_PER_S;
    if (r->lim.bytes_per_s == 0)
        r->lim.bytes_per_s = RDZV_LOG_JOB_BYTES_PER_S;
    if (r->lim.pool_max == 0)
        r->lim.pool_max = RDZV_LOG_TOTAL_BYTES;
    r->next_seq = 1;
    return r;
}

void rdzv_logring_free(struct rdzv_logring *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++)
        free(r->e[(r->head + i) % r->cap].text);
    if (r->lim.pool_used != NULL)
        *r->lim.pool_used -= r->bytes;
    free(r->e);
    free(r);
}

static void drop_oldest(struct rdzv_logring *r)
{
    struct entry *o = &r->e[r->head];

    r->bytes -= o->len + RDZV_LOG_ENTRY_COST;
    if (r->lim.pool_used != NULL)
        *r->lim.pool_used -= o->len + RDZV_LOG_ENTRY_COST;
    free(o->text);
    o->text = NULL;
    r->head = (r->head + 1) % r->cap;
    r->n--;
    r->st.dropped_ring++;
}

static int over_pool(const struct rdzv_logring *r, size_t cost)
{
    return r->lim.pool_used != NULL && *r->lim.pool_used + cost > r->lim.pool_max;
}

static int grow(struct rdzv_logring *r)
{
    size_t cap = r->cap ? r->cap * 2 : 1024;
    struct entry *e = malloc(cap * sizeof(*e));

    if (e == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < r->n; i++)
        e[i] = r->e[(r->head + i) % r->cap];
    free(r->e);
    r->e = e;
    r->cap = cap;
    r->head = 0;
    return 0;
}

int rdzv_logring_add(struct rdzv_logring *r, uint64_t now_ms, const struct rdzv_log_line *ln,
                     const char *text)
{
    size_t len = ln->len > RDZV_LOG_LINE_MAX ? RDZV_LOG_LINE_MAX : ln->len;
    unsigned rank_lines = r->lim.lines_per_s / 4 ? r->lim.lines_per_s / 4 : 1;
    size_t rank_bytes = r->lim.bytes_per_s / 4 ? r->lim.bytes_per_s / 4 : 1;
    struct rdzv_bucket *rb = &r->rank[(uint32_t)ln->rank % RDZV_LOG_RANK_BUCKETS];
    struct rdzv_bucket job_before = r->job;
    struct entry *e;
    char *copy;

    /* the rank's share first: a flooding rank is stopped before it spends the job's budget */
    if (!rdzv_bucket_take(rb, now_ms, rank_lines, rank_bytes, len) ||
        !rdzv_bucket_take(&r->job, now_ms, r->lim.lines_per_s, r->lim.bytes_per_s, len)) {
        r->st.dropped_rate++;
        return 1;
    }
    if ((copy = malloc(len ? len : 1)) == NULL) {
        r->job = job_before;
        return -ENOMEM;
    }
    memcpy(copy, text, len);
    while (r->n > 0 && (r->bytes + len + RDZV_LOG_ENTRY_COST > r->lim.ring_bytes ||
                        over_pool(r, len + RDZV_LOG_ENTRY_COST)))
        drop_oldest(r);
    if (over_pool(r, len + RDZV_LOG_ENTRY_COST)) { /* the other jobs hold the budget */
        free(copy);
        r->st.dropped_ring++;
        return 1;
    }
    if (r->n == r->cap && grow(r) != 0) {
        free(copy);
        return -ENOMEM;
    }
    e = &r->e[(r->head + r->n) % r->cap];
    *e = (struct entry){.seq = r->next_seq++,
                        .time_ms = ln->time_ms,
                        .rank = ln->rank,
                        .stream = ln->stream,
                        .len = (uint32_t)len,
                        .text = copy};
    r->n++;
    r->bytes += len + RDZV_LOG_ENTRY_COST;
    if (r->lim.pool_used != NULL)
        *r->lim.pool_used += len + RDZV_LOG_ENTRY_COST;
    r->st.lines++;
    r->st.bytes += len;
    return 0;
}

void rdzv_logring_agent_dropped(struct rdzv_logring *r, uint64_t n)
{
    r->st.dropped_agents += n;
}

void rdzv_logring_read(const struct rdzv_logring *r, const struct rdzv_logs_req *q,
                       struct rdzv_log *out)
{
    uint64_t first = r->next_seq - r->n; /* the oldest held */
    uint64_t from = q->after + 1;
    size_t i, scanned = 0;

    out->count = 0;
    out->bytes = 0;
    out->state = 0;
    out->dropped = r->st.dropped_ring + r->st.dropped_rate + r->st.dropped_agents;
    if (from < first) {
        if (q->after != 0)
            out->state |= RDZV_LOGS_GAP;
        from = first;
    }
    out->next = from - 1;
    if (from >= r->next_seq)
        return;
    for (i = (size_t)(from - first); i < r->n; i++) {
        const struct entry *e = &r->e[(r->head + i) % r->cap];
        struct rdzv_log_line *ln;

        if (scanned++ >= RDZV_LOG_SCAN_MAX || out->count == RDZV_LOG_LINES_MAX ||
            RDZV_LOG_BYTES_MAX - out->bytes < e->len) {
            out->state |= RDZV_LOGS_MORE;
            return;
        }
        out->next = e->seq;
        if ((q->rank >= 0 && e->rank != q->rank) || e->time_ms < q->since_ms)
            continue;
        ln = &out->lines[out->count++];
        *ln = (struct rdzv_log_line){.rank = e->rank,
                                     .stream = e->stream,
                                     .time_ms = e->time_ms,
                                     .seq = e->seq,
                                     .off = out->bytes,
                                     .len = e->len};
        memcpy(out->text + out->bytes, e->text, e->len);
        out->bytes += e->len;
    }
}

size_t rdzv_logring_tail(const struct rdzv_logring *r, int32_t rank, size_t k,
                         rdzv_logring_tail_fn fn, void *ctx)
{
    size_t *pick, found = 0;

    if (r == NULL || k == 0 || r->n == 0 || (pick = malloc(k * sizeof(*pick))) == NULL)
        return 0;
    for (size_t back = 0; back < r->n && back < RDZV_LOG_SCAN_MAX && found < k; back++) {
        size_t i = (r->head + r->n - 1 - back) % r->cap;

        if (rank < 0 || r->e[i].rank == rank)
            pick[found++] = i;
    }
    for (size_t j = found; j-- > 0;) {
        const struct entry *e = &r->e[pick[j]];

        fn(ctx, e->seq, e->time_ms, e->rank, e->stream, e->text, e->len);
    }
    free(pick);
    return found;
}

void rdzv_logring_stats(const struct rdzv_logring *r, struct rdzv_logring_stats *s)
{
    *s = r->st;
    s->held = r->n;
    s->held_bytes = r->bytes;
}

/* ---- --dedup ---------------------------------------------------------------------------- */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

    return (x > y) - (x < y);
}

size_t rdzv_ranks_fmt(const int32_t *ranks, size_t n, char *buf, size_t len)
{
    size_t need = 0;
    char part[32];

    if (len > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int k;

        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        if (j == i)
            k = snprintf(part, sizeof(part), "%s%d", need ? "," : "", (int)ranks[i]);
        else
            k = snprintf(part, sizeof(part), "%s%d-%d", need ? "," : "", (int)ranks[i],
                         (int)ranks[j]);
        if (need + (size_t)k < len)
            memcpy(buf + need, part, (size_t)k + 1);
        else if (len > 0)
            buf[need < len ? need : len - 1] = '\0';
        need += (size_t)k;
        i = j + 1;
    }
    return need;
}

struct group {
    uint32_t line; /* the first line's index */
    uint32_t nranks;
    int32_t *ranks; /* into the shared array: at most n per batch in all */
};

int rdzv_logs_dedup(const struct rdzv_log *l, rdzv_logs_emit_fn emit, void *ctx)
{
    size_t n = l->count;
    struct group *g = calloc(n ? n : 1, sizeof(*g));
    size_t ng = 0;

    if (g == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct rdzv_log_line *a = &l->lines[i];
        size_t found = ng;
        int32_t last = -1; /* the newest group this rank is in */

        for (size_t k = 0; k < ng; k++)
            for (uint32_t m = 0; m < g[k].nranks; m++)
                if (g[k].ranks[m] == a->rank)
                    last = (int32_t)k;
        for (size_t k = (size_t)(last + 1); k < ng; k++) {
            const struct rdzv_log_line *b = &l->lines[g[k].line];
            if (b->stream == a->stream && b->len == a->len &&
                memcmp(l->text + b->off, l->text + a->off, a->len) == 0) {
                found = k;
                break;
            }
        }
        if (found == ng) {
            g[ng] = (struct group){.line = (uint32_t)i};
            ng++;
        }
        if (g[found].ranks == NULL)
            g[found].ranks = malloc(n * sizeof(int32_t));
        if (g[found].ranks == NULL) {
            for (size_t k = 0; k < ng; k++)
                free(g[k].ranks);
            free(g);
            return -ENOMEM;
        }
        g[found].ranks[g[found].nranks++] = a->rank;
    }
    for (size_t k = 0; k < ng; k++) {
        const struct rdzv_log_line *ln = &l->lines[g[k].line];
        char ranks[1024];

        if (g[k].nranks > 1) {
            qsort(g[k].ranks, g[k].nranks, sizeof(int32_t), cmp_i32);
            rdzv_ranks_fmt(g[k].ranks, g[k].nranks, ranks, sizeof(ranks));
        }
        emit(ctx, ln, l->text + ln->off, g[k].nranks > 1 ? ranks : NULL);
        free(g[k].ranks);
    }
    free(g);
    return 0;
}
