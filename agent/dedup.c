#include "dedup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    struct entry *prev, *next; /* the order lines leave in */
    uint64_t seq, deadline;    /* seq: the entry's name, never reused */
    int fd;
    int *ranks; /* sorted */
    size_t n, cap;
    char *prefix; /* points into text[], after the line */
    size_t len;
    char text[];
};

struct agent_dedup {
    struct entry *head, *tail;
    size_t count;
    uint64_t next_seq;
    unsigned window_ms;
    agent_dedup_emit_cb emit_cb;
    void *arg;
};

int agent_dedup_new(unsigned window_ms, agent_dedup_emit_cb emit_cb, void *arg,
                    struct agent_dedup **out)
{
    struct agent_dedup *d = calloc(1, sizeof(*d));

    *out = NULL;
    if (d == NULL)
        return -ENOMEM;
    d->window_ms = window_ms;
    d->emit_cb = emit_cb;
    d->arg = arg;
    d->next_seq = 1;
    *out = d;
    return 0;
}

static void unlink_entry(struct agent_dedup *d, struct entry *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        d->head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        d->tail = e->prev;
    e->prev = e->next = NULL;
}

static void insert_after(struct agent_dedup *d, struct entry *at, struct entry *e)
{
    e->prev = at;
    e->next = at != NULL ? at->next : d->head;
    if (e->next != NULL)
        e->next->prev = e;
    else
        d->tail = e;
    if (at != NULL)
        at->next = e;
    else
        d->head = e;
}

static void pop_head(struct agent_dedup *d)
{
    struct entry *e = d->head;

    unlink_entry(d, e);
    d->count--;
    d->emit_cb(d->arg, e->fd, e->ranks, e->n, e->prefix, e->text, e->len);
    free(e->ranks);
    free(e);
}

/* Emits every entry up to and including e (the ones before it may hold earlier lines of e's
 * ranks). */
static void flush_through(struct agent_dedup *d, const struct entry *e)
{
    while (d->head != NULL) {
        int last = d->head == e;
        pop_head(d);
        if (last)
            break;
    }
}

void agent_dedup_free(struct agent_dedup *d)
{
    if (d == NULL)
        return;
    while (d->head != NULL)
        pop_head(d);
    free(d);
}

static struct entry *by_seq(const struct agent_dedup *d, uint64_t seq)
{
    for (struct entry *e = d->head; e != NULL && seq != 0; e = e->next)
        if (e->seq == seq)
            return e;
    return NULL;
}

void agent_dedup_flush_to(struct agent_dedup *d, uint64_t seq)
{
    struct entry *e = by_seq(d, seq);

    if (e != NULL)
        flush_through(d, e);
}

/* Entries can move back in the queue (see agent_dedup_add), so a due one may sit behind
 * younger ones: everything up to the last due entry leaves, which never delays a line. */
void agent_dedup_flush_due(struct agent_dedup *d, uint64_t now_ms)
{
    struct entry *due = NULL;

    for (struct entry *e = d->head; e != NULL; e = e->next)
        if (e->deadline <= now_ms)
            due = e;
    if (due != NULL)
        flush_through(d, due);
}

uint64_t agent_dedup_deadline(const struct agent_dedup *d)
{
    uint64_t min = 0;

    for (const struct entry *e = d->head; e != NULL; e = e->next)
        if (min == 0 || e->deadline < min)
            min = e->deadline;
    return min;
}

static int has_rank(const struct entry *e, int rank)
{
    size_t lo = 0, hi = e->n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (e->ranks[mid] == rank)
            return 1;
        if (e->ranks[mid] < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* Inserts rank into e's sorted set. Returns 0 or -ENOMEM. */
static int add_rank(struct entry *e, int rank)
{
    size_t i;

    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 4;
        int *r = realloc(e->ranks, cap * sizeof(*r));
        if (r == NULL)
            return -ENOMEM;
        e->ranks = r;
        e->cap = cap;
    }
    for (i = e->n; i > 0 && e->ranks[i - 1] > rank; i--)
        e->ranks[i] = e->ranks[i - 1];
    e->ranks[i] = rank;
    e->n++;
    return 0;
}

static struct entry *new_entry(struct agent_dedup *d, int fd, int rank, const char *prefix,
                               const char *text, size_t len, uint64_t now_ms)
{
    size_t plen = strlen(prefix);
    struct entry *e = calloc(1, sizeof(*e) + len + 1 + plen + 1);

    if (e == NULL)
        return NULL;
    if (add_rank(e, rank) != 0) {
        free(e);
        return NULL;
    }
    e->fd = fd;
    e->len = len;
    memcpy(e->text, text, len);
    e->prefix = e->text + len + 1;
    memcpy(e->prefix, prefix, plen + 1);
    e->seq = d->next_seq++;
    e->deadline = now_ms + d->window_ms;
    insert_after(d, d->tail, e);
    d->count++;
    return e;
}

static int same_line(const struct entry *e, int fd, const char *text, size_t len, int rank)
{
    return e->fd == fd && e->len == len && memcmp(e->text, text, len) == 0 && !has_rank(e, rank);
}

/* Whether e can move to just after last: no entry from e's successor to last holds a line of
 * one of e's ranks on e's fd, so that every stream of e keeps its order (a rank's stdout and
 * stderr are two pipes: they never had an order between them). */
static int can_move(const struct entry *e, const struct entry *last)
{
    for (const struct entry *x = e->next; x != NULL; x = x->next) {
        for (size_t i = 0; i < e->n && x->fd == e->fd; i++)
            if (has_rank(x, e->ranks[i]))
                return 0;
        if (x == last)
            return 1;
    }
    return 0;
}

/* The entry that rank may join without reordering its own lines: a match queued after its
 * previous line (last), else one before it that can move behind last. Typical case: ranks
 * print "a", each a rank-specific line, then "b": rank 1's "b" finds rank 0's "b" queued
 * before its own specific line and moves it back. */
static struct entry *find(struct agent_dedup *d, int fd, const char *text, size_t len, int rank,
                          struct entry *last)
{
    struct entry *before = NULL;
    int passed = last == NULL;

    for (struct entry *e = d->head; e != NULL; e = e->next) {
        if (same_line(e, fd, text, len, rank)) {
            if (passed)
                return e;
            if (before == NULL)
                before = e;
        }
        if (e == last)
            passed = 1;
    }
    if (before == NULL || !can_move(before, last))
        return NULL;
    unlink_entry(d, before);
    insert_after(d, last, before);
    return before;
}

int agent_dedup_add(struct agent_dedup *d, int fd, int rank, const char *prefix, const char *text,
                    size_t len, uint64_t now_ms, int expected, uint64_t *last_seq)
{
    struct entry *e = find(d, fd, text, len, rank, by_seq(d, *last_seq));

    if (e != NULL) {
        if (add_rank(e, rank) != 0)
            return -ENOMEM;
    } else {
        if (d->count >= AGENT_DEDUP_QUEUE_MAX)
            pop_head(d); /* bounded memory: the oldest line leaves before its window ends */
        if ((e = new_entry(d, fd, rank, prefix, text, len, now_ms)) == NULL)
            return -ENOMEM;
    }
    *last_seq = e->seq;
    /* everyone said it: waiting longer cannot merge more */
    if (expected > 0 && e->n >= (size_t)expected)
        flush_through(d, e);
    return 0;
}

size_t agent_dedup_ranks_fmt(const int *ranks, size_t n, char *buf, size_t len)
{
    size_t used = 0;

    if (len > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        char item[32];
        int k = j > i ? snprintf(item, sizeof(item), "%s%d-%d", i ? "," : "", ranks[i], ranks[j])
                      : snprintf(item, sizeof(item), "%s%d", i ? "," : "", ranks[i]);
        if (used + (size_t)k < len)
            memcpy(buf + used, item, (size_t)k + 1);
        else if (len > 0)
            buf[used < len ? used : len - 1] = '\0'; /* cut: never half an item */
        used += (size_t)k;
        i = j + 1;
    }
    return used;
}
