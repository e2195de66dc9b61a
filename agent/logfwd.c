/* The workers' lines to the server's log of the job (logfwd.h). */
#include "logfwd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "message.h"

struct part {
    char buf[RDZV_LOG_LINE_MAX];
    size_t len;
    uint64_t since_ms, wall_ms; /* when its first byte came */
    int rank;
    int after_cr; /* the last line ended with '\r': an empty line after it is its '\n' */
};

struct qline {
    int32_t rank;
    uint8_t stream;
    uint64_t time_ms;
    uint32_t len;
    char *text;
};

struct agent_logfwd {
    uv_loop_t *loop;
    uv_timer_t timer;
    struct agent_logfwd_io io;
    struct rdzv_msg *msg;     /* one batch being built (54 KiB: not on the stack) */
    struct part *parts;       /* 2 per local worker */
    struct rdzv_bucket *caps; /* 1 per local worker */
    int n;
    struct qline *q; /* circular: q[head] is the oldest of qn */
    size_t qcap, head, qn, qbytes;
    uint64_t unreported; /* drops not told to the server yet */
    struct agent_logfwd_stats st;
};

static void on_timer(uv_timer_t *t);

struct agent_logfwd *agent_logfwd_new(uv_loop_t *loop, const struct agent_logfwd_io *io)
{
    struct agent_logfwd *f = calloc(1, sizeof(*f));

    if (f == NULL || (f->msg = malloc(sizeof(*f->msg))) == NULL ||
        (f->q = calloc(AGENT_LOGFWD_QUEUE_LINES, sizeof(*f->q))) == NULL) {
        if (f != NULL)
            free(f->msg);
        free(f);
        return NULL;
    }
    f->qcap = AGENT_LOGFWD_QUEUE_LINES;
    f->io = *io;
    f->loop = loop;
    if (loop != NULL) {
        uv_timer_init(loop, &f->timer);
        f->timer.data = f;
        uv_timer_start(&f->timer, on_timer, AGENT_LOGFWD_EVERY_MS, AGENT_LOGFWD_EVERY_MS);
        uv_unref((uv_handle_t *)&f->timer); /* never what keeps the agent's loop alive */
    }
    return f;
}

int agent_logfwd_reset(struct agent_logfwd *f, int n)
{
    struct part *p = calloc(n > 0 ? (size_t)n * 2 : 1, sizeof(*p));
    struct rdzv_bucket *c = calloc(n > 0 ? (size_t)n : 1, sizeof(*c));

    if (p == NULL || c == NULL) {
        free(p);
        free(c);
        return -ENOMEM;
    }
    free(f->parts);
    free(f->caps);
    f->parts = p;
    f->caps = c;
    f->n = n;
    return 0;
}

static void drop_oldest(struct agent_logfwd *f)
{
    struct qline *o = &f->q[f->head];

    f->qbytes -= o->len;
    free(o->text);
    o->text = NULL;
    f->head = (f->head + 1) % f->qcap;
    f->qn--;
    f->st.dropped_queue++;
    f->unreported++;
}

/* One whole line of local worker lr: capped, then queued (the oldest make room). */
static void emit(struct agent_logfwd *f, int lr, int stream, struct part *p, uint64_t now_ms)
{
    struct qline *e;
    char *text;

    if (!rdzv_bucket_take(&f->caps[lr], now_ms, RDZV_LOG_RANK_LINES_PER_S,
                          RDZV_LOG_RANK_BYTES_PER_S, p->len)) {
        f->st.dropped_rate++;
        f->unreported++;
        p->len = 0;
        return;
    }
    if ((text = malloc(p->len ? p->len : 1)) == NULL) {
        f->st.dropped_queue++;
        f->unreported++;
        p->len = 0;
        return;
    }
    for (size_t i = 0; i < p->len; i++) /* a NUL cannot travel (PROTOCOL.md LOG) */
        text[i] = p->buf[i] == '\0' ? '?' : p->buf[i];
    while (f->qn > 0 && (f->qn == f->qcap || f->qbytes + p->len > AGENT_LOGFWD_QUEUE_BYTES))
        drop_oldest(f);
    e = &f->q[(f->head + f->qn) % f->qcap];
    *e = (struct qline){.rank = p->rank,
                        .stream = (uint8_t)stream,
                        .time_ms = p->wall_ms,
                        .len = (uint32_t)p->len,
                        .text = text};
    f->qn++;
    f->qbytes += p->len;
    p->len = 0;
    if (f->qbytes >= AGENT_LOGFWD_BATCH_BYTES)
        agent_logfwd_flush(f);
}

void agent_logfwd_feed(struct agent_logfwd *f, int local_rank, int rank, int stream,
                       const char *data, size_t n, uint64_t now_ms, uint64_t wall_ms)
{
    struct part *p;

    if (local_rank < 0 || local_rank >= f->n || stream < 0 || stream > 1)
        return;
    p = &f->parts[local_rank * 2 + stream];
    p->rank = rank;
    if (n == 0) { /* the stream ended */
        if (p->len > 0)
            emit(f, local_rank, stream, p, now_ms);
        return;
    }
    while (n > 0) {
        /* memchr twice, not a loop per byte: a rank printing 100 MB/s passes through here */
        const char *nl = memchr(data, '\n', n);
        const char *cr = memchr(data, '\r', nl != NULL ? (size_t)(nl - data) : n);
        const char *end = cr != NULL ? cr : nl;
        size_t k = end != NULL ? (size_t)(end - data) : n, i = 0;
        int term = end != NULL;

        while (i < k) {
            size_t room, take;

            if (p->len == RDZV_LOG_LINE_MAX) /* a long line goes in parts */
                emit(f, local_rank, stream, p, now_ms);
            if (p->len == 0) {
                p->since_ms = now_ms;
                p->wall_ms = wall_ms;
            }
            room = RDZV_LOG_LINE_MAX - p->len;
            take = k - i < room ? k - i : room;
            memcpy(p->buf + p->len, data + i, take);
            p->len += take;
            i += take;
        }
        if (term) {
            int is_cr = data[k] == '\r';
            if (p->len > 0 || (!is_cr && !p->after_cr)) {
                if (p->len == 0)
                    p->wall_ms = wall_ms; /* an empty line is a line */
                emit(f, local_rank, stream, p, now_ms);
            }
            p->after_cr = is_cr;
            k++;
        } else if (k > 0) {
            p->after_cr = 0;
        }
        data += k;
        n -= k;
    }
}

void agent_logfwd_flush(struct agent_logfwd *f)
{
    struct rdzv_log *l = &f->msg->u.log;

    while (f->qn > 0 || f->unreported > 0) {
        size_t taken = 0;

        if (f->io.unsent != NULL && f->io.unsent(f->io.ctx) > AGENT_LOGFWD_UNSENT_MAX)
            return; /* a slow link: the lines wait here, bounded */
        rdzv_msg_init(f->msg, RDZV_MSG_LOG);
        l->dropped = f->unreported;
        while (taken < f->qn && l->count < RDZV_LOG_LINES_MAX) {
            const struct qline *e = &f->q[(f->head + taken) % f->qcap];

            if (RDZV_LOG_BYTES_MAX - l->bytes < e->len)
                break;
            l->lines[l->count++] = (struct rdzv_log_line){.rank = e->rank,
                                                          .stream = e->stream,
                                                          .time_ms = e->time_ms,
                                                          .off = l->bytes,
                                                          .len = e->len};
            memcpy(l->text + l->bytes, e->text, e->len);
            l->bytes += e->len;
            taken++;
        }
        if (f->io.send(f->io.ctx, f->msg) != 0)
            return; /* away or not yet connected: kept for the next tick */
        f->unreported = 0;
        f->st.batches++;
        f->st.lines_sent += taken;
        for (size_t i = 0; i < taken; i++) {
            struct qline *e = &f->q[f->head];
            f->qbytes -= e->len;
            free(e->text);
            e->text = NULL;
            f->head = (f->head + 1) % f->qcap;
            f->qn--;
        }
    }
}

static void on_timer(uv_timer_t *t)
{
    struct agent_logfwd *f = t->data;
    uint64_t now = uv_now(f->loop);

    for (int i = 0; i < f->n * 2; i++) { /* a partial line waits no longer than this */
        struct part *p = &f->parts[i];
        if (p->len > 0 && now - p->since_ms >= AGENT_LOGFWD_PARTIAL_MS)
            emit(f, i / 2, i % 2, p, now);
    }
    agent_logfwd_flush(f);
}

void agent_logfwd_stats(const struct agent_logfwd *f, struct agent_logfwd_stats *s)
{
    *s = f->st;
    s->queued = f->qn;
    s->queued_bytes = f->qbytes;
}

static void free_all(struct agent_logfwd *f)
{
    for (size_t i = 0; i < f->qn; i++)
        free(f->q[(f->head + i) % f->qcap].text);
    free(f->q);
    free(f->parts);
    free(f->caps);
    free(f->msg);
    free(f);
}

static void on_closed(uv_handle_t *h)
{
    free_all(h->data);
}

void agent_logfwd_close(struct agent_logfwd *f)
{
    if (f == NULL)
        return;
    if (f->loop == NULL) {
        free_all(f);
        return;
    }
    uv_timer_stop(&f->timer);
    uv_close((uv_handle_t *)&f->timer, on_closed);
}
