/* Sharded checkpoints' parts (parts.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parts.h"

static struct rdzv_part_rec *find(struct rdzv_parts *p, const char *name, uint32_t part,
                                  uint64_t holder)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->recs[i].part == part && p->recs[i].holder == holder &&
            strcmp(p->recs[i].name, name) == 0)
            return &p->recs[i];
    return NULL;
}

int rdzv_parts_add(struct rdzv_parts **pp, const struct rdzv_ckpt *ck, uint64_t holder)
{
    struct rdzv_parts *p = *pp;
    struct rdzv_part_rec *r;

    if (ck->part == 0 || ck->part > ck->parts)
        return -EINVAL;
    if (p == NULL && (p = *pp = calloc(1, sizeof(*p))) == NULL)
        return -ENOMEM;
    if ((r = find(p, ck->name, ck->part, holder)) == NULL) {
        if (p->n == p->cap && p->cap < RDZV_PARTS_RECS) {
            size_t cap = p->cap ? p->cap * 2 : 16;
            struct rdzv_part_rec *t = realloc(p->recs, cap * sizeof(*t));
            if (t == NULL)
                return -ENOMEM;
            p->recs = t;
            p->cap = cap;
        }
        if (p->n == p->cap) { /* full: the oldest report goes */
            size_t old = 0;
            for (size_t i = 1; i < p->n; i++)
                if (p->recs[i].seq < p->recs[old].seq)
                    old = i;
            r = &p->recs[old];
        } else {
            r = &p->recs[p->n++];
        }
    }
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", ck->name);
    r->step = ck->step;
    r->checksum = ck->checksum;
    r->part = ck->part;
    r->parts = ck->parts;
    r->holder = holder;
    r->empty = (ck->part_flags & RDZV_CKPT_PART_EMPTY) != 0;
    r->seq = ++p->seq;
    return 0;
}

void rdzv_parts_drop(struct rdzv_parts *p, const struct rdzv_ckpt *ck, uint64_t holder)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n;) {
        const struct rdzv_part_rec *r = &p->recs[i];
        if (r->holder == holder && (ck->part == 0 || r->part == ck->part) &&
            strcmp(r->name, ck->name) == 0)
            p->recs[i] = p->recs[--p->n];
        else
            i++;
    }
}

uint32_t rdzv_parts_whole(const struct rdzv_parts *p, const char *name, uint64_t checksum)
{
    for (size_t i = 0; p != NULL && i < p->n; i++)
        if (p->recs[i].part == 1 && p->recs[i].checksum == checksum &&
            strcmp(p->recs[i].name, name) == 0)
            return p->recs[i].parts;
    return 0;
}

int rdzv_parts_sharded(const struct rdzv_parts *p)
{
    for (size_t i = 0; p != NULL && i < p->n; i++)
        if (p->recs[i].part > 1 && !p->recs[i].empty)
            return 1;
    return 0;
}

void rdzv_parts_free(struct rdzv_parts *p)
{
    if (p == NULL)
        return;
    free(p->recs);
    free(p);
}

int rdzv_parts_complete(const struct rdzv_parts *p, int (*is_member)(void *arg, uint64_t id),
                        void *arg, char *name, size_t namelen, int64_t *step, uint32_t *parts)
{
    const struct rdzv_part_rec *best = NULL;
    uint64_t best_seq = 0;
    unsigned char *held, *seen;
    int ok = 0;

    if (p == NULL || p->n == 0)
        return 0;
    held = malloc(p->n);                  /* per record: a member holds it, or it is empty */
    seen = calloc(RDZV_PARTS_MAX + 1, 1); /* per part number, for one candidate */
    if (held == NULL || seen == NULL)
        goto out;
    for (size_t i = 0; i < p->n; i++)
        held[i] = p->recs[i].empty || is_member(arg, p->recs[i].holder);
    for (size_t i = 0; i < p->n; i++) {
        const struct rdzv_part_rec *c = &p->recs[i];
        uint64_t latest = 0;
        uint32_t have = 0;

        if (c->part != 1) /* one candidate per name and parts: its first part's records */
            continue;
        if (best != NULL && (c->step < best->step || (c->step == best->step && c->seq <= best_seq)))
            continue;
        memset(seen, 0, (size_t)c->parts + 1);
        for (size_t k = 0; k < p->n; k++) {
            const struct rdzv_part_rec *r = &p->recs[k];
            if (!held[k] || r->parts != c->parts || strcmp(r->name, c->name) != 0)
                continue;
            if (!seen[r->part]) {
                seen[r->part] = 1;
                have++;
            }
            if (r->seq > latest)
                latest = r->seq;
        }
        if (have != c->parts)
            continue;
        best = c;
        best_seq = latest;
    }
    if (best != NULL) {
        snprintf(name, namelen, "%s", best->name);
        *step = best->step;
        *parts = best->parts;
        ok = 1;
    }
out:
    free(held);
    free(seen);
    return ok;
}
