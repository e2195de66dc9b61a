#include "verdict.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "escape.h"

static int alive(const struct rdzv_evidence *e)
{
    return e != NULL && (e->flags & RDZV_EV_ALIVE);
}

static int hooked(const struct rdzv_evidence *e)
{
    return alive(e) && (e->flags & RDZV_EV_HOOKED);
}

void rdzv_verdict_ranks(const unsigned char *pick, size_t n, char *buf, size_t len)
{
    size_t pos = 0, count = 0;
    int k;

    if (len == 0)
        return;
    buf[0] = '\0';
    for (size_t r = 0; r < n; r++)
        count += pick[r] != 0;
    k = snprintf(buf, len, "%s", count == 1 ? "rank " : "ranks ");
    if (k < 0 || (size_t)k >= len)
        return;
    pos = (size_t)k;
    for (size_t r = 0; r < n; r++) {
        size_t end = r;

        if (!pick[r])
            continue;
        while (end + 1 < n && pick[end + 1])
            end++;
        if (end == r)
            k = snprintf(buf + pos, len - pos, "%s%zu", pos > 6 ? ", " : "", r);
        else /* an en dash, as in "ranks 0–4" */
            k = snprintf(buf + pos, len - pos, "%s%zu\u2013%zu", pos > 6 ? ", " : "", r, end);
        if (k < 0 || (size_t)k >= len - pos)
            return; /* cut: snprintf ended it */
        pos += (size_t)k;
        r = end;
    }
}

/* snprintf that cuts on purpose: peers' names and frames are long, the lines are bounded */
static void fmt(char *buf, size_t len, const char *f, ...)
{
    va_list ap;

    va_start(ap, f);
    vsnprintf(buf, len, f, ap);
    va_end(ap);
}

/* Appends to v->block, cut at its end. */
static void block_add(struct rdzv_verdict *v, const char *fmt, ...)
{
    size_t pos = strlen(v->block);
    va_list ap;

    if (pos + 1 >= sizeof(v->block))
        return;
    va_start(ap, fmt);
    vsnprintf(v->block + pos, sizeof(v->block) - pos, fmt, ap);
    va_end(ap);
}

/* Who r is, for the first sentence: "rank 5 (node3, local_rank 1)". */
static void who(const struct rdzv_evidence *e, char *buf, size_t len)
{
    fmt(buf, len, "rank %d (%s, local_rank %d)", e->rank, e->host, e->local_rank);
}

/* "; it is in t.py:88 in load_batch" (and where the innermost frame is elsewhere, it too) */
static void where(const struct rdzv_evidence *e, char *buf, size_t len)
{
    if (!(e->flags & RDZV_EV_HOOKED) || (e->where[0] == '\0' && e->innermost[0] == '\0'))
        fmt(buf, len, "%s%s", e->native[0] ? "; its main thread: " : "", e->native);
    else if (e->where[0] == '\0' || strcmp(e->where, e->innermost) == 0)
        fmt(buf, len, "; it is in %s", e->where[0] ? e->where : e->innermost);
    else
        fmt(buf, len, "; it is in %s (innermost: %s)", e->where, e->innermost);
}

/* The most common collective among the ranks in pick (ties: the lowest rank's). */
static const char *common_op(const struct rdzv_evidence *const *ev, size_t n,
                             const unsigned char *pick, int fr)
{
    const char *best = "";
    size_t best_n = 0;

    for (size_t r = 0; r < n; r++) {
        const char *op;
        size_t c = 0;

        if (!pick[r])
            continue;
        op = fr ? ev[r]->fr_op : ev[r]->op;
        for (size_t s = 0; s < n; s++)
            c += pick[s] && strcmp(fr ? ev[s]->fr_op : ev[s]->op, op) == 0;
        if (c > best_n) {
            best = op;
            best_n = c;
        }
    }
    return best;
}

static double longest_wait_s(const struct rdzv_evidence *const *ev, size_t n,
                             const unsigned char *pick)
{
    uint64_t ms = 0;

    for (size_t r = 0; r < n; r++)
        if (pick[r] && ev[r]->silent_ms > ms)
            ms = ev[r]->silent_ms;
    return (double)ms / 1000.0;
}

static void describe_failure(const struct rdzv_failure *f, char *buf, size_t len)
{
    const char *name = f->signal > 0 ? sigabbrev_np(f->signal) : NULL;

    if (f->signal > 0)
        fmt(buf, len, "was killed by signal %d (SIG%s)%s%s", f->signal, name ? name : "?",
            f->text[0] ? ": " : "", f->text);
    else if (f->exit_code >= 0)
        fmt(buf, len, "exited with code %d%s%s", f->exit_code, f->text[0] ? ": " : "", f->text);
    else
        fmt(buf, len, "%s", f->text);
}

/* The rules of verdict.h; fills v->culprit, v->rule and v->line. */
static void decide(const struct rdzv_evidence *const *ev, size_t n,
                   const struct rdzv_failure *first, struct rdzv_verdict *v)
{
    unsigned char waiting[RDZV_VERDICT_RANKS_MAX], other[RDZV_VERDICT_RANKS_MAX];
    char ranks[256], w[2 * RDZV_EV_WHERE_MAX + 64], name[RDZV_HOST_MAX + 64];
    int64_t max_enq = -1, min_enq = INT64_MAX;
    size_t n_fr = 0, n_wait = 0, n_out = 0;
    int culprit = -1;
    const char *op;

    /* 1. the Flight Recorder's sequence numbers */
    for (size_t r = 0; r < n; r++)
        if (alive(ev[r]) && (ev[r]->flags & RDZV_EV_FR) && ev[r]->fr_enqueued >= 0) {
            n_fr++;
            if (ev[r]->fr_enqueued > max_enq)
                max_enq = ev[r]->fr_enqueued;
            if (ev[r]->fr_enqueued < min_enq) {
                min_enq = ev[r]->fr_enqueued;
                culprit = (int)r;
            }
        }
    if (n_fr >= 2 && min_enq < max_enq) {
        memset(waiting, 0, n);
        for (size_t r = 0; r < n; r++)
            waiting[r] =
                alive(ev[r]) && (ev[r]->flags & RDZV_EV_FR) && ev[r]->fr_enqueued > min_enq;
        op = common_op(ev, n, waiting, 1);
        rdzv_verdict_ranks(waiting, n, ranks, sizeof(ranks));
        who(ev[culprit], name, sizeof(name));
        where(ev[culprit], w, sizeof(w));
        fmt(v->line, sizeof(v->line), "%s never entered %s #%lld%s; %s waited in it for %.0f s",
            name, op[0] ? op : "the next collective", (long long)min_enq + 1, w, ranks,
            longest_wait_s(ev, n, waiting));
        v->culprit = culprit;
        v->rule = 1;
        return;
    }
    /* 2. in a collective or not */
    memset(waiting, 0, n);
    memset(other, 0, n);
    for (size_t r = 0; r < n; r++) {
        if (!hooked(ev[r]))
            continue;
        if (ev[r]->op[0] != '\0')
            waiting[r] = 1, n_wait++;
        else
            other[r] = 1, n_out++;
    }
    if (n_wait > 0 && n_out > 0) {
        for (culprit = 0; !other[culprit]; culprit++)
            ;
        op = common_op(ev, n, waiting, 0);
        rdzv_verdict_ranks(waiting, n, ranks, sizeof(ranks));
        who(ev[culprit], name, sizeof(name));
        where(ev[culprit], w, sizeof(w));
        fmt(v->line, sizeof(v->line), "%s never entered %s%s; %s waited in %s for %.0f s", name, op,
            w, ranks, op, longest_wait_s(ev, n, waiting));
        if (n_out > 1) {
            char more[256];
            other[culprit] = 0;
            rdzv_verdict_ranks(other, n, more, sizeof(more));
            block_add(v, "%s (also outside any collective: %s)", v->line, more);
            fmt(v->line, sizeof(v->line), "%s", v->block);
            v->block[0] = '\0';
        }
        v->culprit = culprit;
        v->rule = 2;
        return;
    }
    /* 3. mismatched collectives */
    if (n_wait > 1) {
        const char *major = common_op(ev, n, waiting, 0);
        memset(other, 0, n);
        for (size_t r = 0; r < n; r++)
            other[r] = waiting[r] && strcmp(ev[r]->op, major) != 0;
        for (culprit = 0; (size_t)culprit < n && !other[culprit]; culprit++)
            ;
        if ((size_t)culprit < n) {
            for (size_t r = 0; r < n; r++)
                waiting[r] = waiting[r] && !other[r];
            rdzv_verdict_ranks(waiting, n, ranks, sizeof(ranks));
            who(ev[culprit], name, sizeof(name));
            where(ev[culprit], w, sizeof(w));
            fmt(v->line, sizeof(v->line),
                "%s called %s where %s called %s (mismatched collectives)%s", name, ev[culprit]->op,
                ranks, major, w);
            v->culprit = culprit;
            v->rule = 3;
            return;
        }
    }
    /* 4. the first to fail, the others waiting for it */
    if (first != NULL && first->rank >= 0 && (size_t)first->rank < n && ev[first->rank] != NULL &&
        !alive(ev[first->rank])) {
        char how[RDZV_TEXT_MAX + 64];
        culprit = first->rank;
        describe_failure(first, how, sizeof(how));
        fmt(name, sizeof(name), "rank %d (%s, local_rank %d)", first->rank, first->host,
            first->local_rank);
        if (n_wait > 0) {
            op = common_op(ev, n, waiting, 0);
            rdzv_verdict_ranks(waiting, n, ranks, sizeof(ranks));
            fmt(v->line, sizeof(v->line), "%s failed first: it %s; %s waited in %s", name, how,
                ranks, op);
        } else {
            fmt(v->line, sizeof(v->line), "%s failed first: it %s", name, how);
        }
        v->culprit = culprit;
        v->rule = 4;
        return;
    }
    if (n_wait > 0) {
        op = common_op(ev, n, waiting, 0);
        rdzv_verdict_ranks(waiting, n, ranks, sizeof(ranks));
        fmt(v->line, sizeof(v->line),
            "no culprit named: %s all wait in %s (a network or device problem, or a "
            "rank stuck inside it)",
            ranks, op);
    } else {
        fmt(v->line, sizeof(v->line), "no culprit named from the evidence");
    }
}

void rdzv_verdict_make(const struct rdzv_evidence *const *ev, size_t n,
                       const struct rdzv_failure *first, struct rdzv_verdict *v)
{
    const struct rdzv_evidence *c;

    memset(v, 0, sizeof(*v));
    v->culprit = -1;
    v->local_rank = -1;
    if (n > RDZV_VERDICT_RANKS_MAX)
        n = RDZV_VERDICT_RANKS_MAX;
    decide(ev, n, first, v);
    mc_utf8_sanitize(v->line); /* cut by snprintf: maybe inside a character */
    block_add(v, "%s\n", v->line);
    if (v->culprit < 0)
        return;
    c = ev[v->culprit];
    if (c == NULL) { /* rule 4 without its evidence cannot happen; keep the host anyway */
        fmt(v->host, sizeof(v->host), "%s", first ? first->host : "");
        v->local_rank = first ? first->local_rank : -1;
        return;
    }
    fmt(v->host, sizeof(v->host), "%s", c->host);
    v->local_rank = c->local_rank;
    if ((c->flags & RDZV_EV_HOOKED) && c->frames[0] != '\0') {
        const char *s = c->frames;
        block_add(v, "stack of rank %d (main thread, most recent call first):\n", c->rank);
        while (*s != '\0') {
            size_t len = strcspn(s, "\n");
            block_add(v, "  %.*s\n", (int)len, s);
            s += len + (s[len] == '\n');
        }
    }
    if (c->native[0] != '\0')
        block_add(v, "native: %s\n", c->native);
    mc_utf8_sanitize(v->block);
}
