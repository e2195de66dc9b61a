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
        if (p->n == RDZV_PARTS_RECS) { /* the oldest report goes */
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

static int member(const uint64_t *members, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (members[i] == id)
            return 1;
    return 0;
}

/* Whether every part 1..parts of name is held by a member (or was empty). */
static int whole_among(const struct rdzv_parts *p, const char *name, uint32_t parts,
                       const uint64_t *members, size_t n, uint64_t *latest)
{
    *latest = 0;
    for (uint32_t k = 1; k <= parts; k++) {
        int held = 0;
        for (size_t i = 0; i < p->n && !held; i++) {
            const struct rdzv_part_rec *r = &p->recs[i];
            if (r->part != k || r->parts != parts || strcmp(r->name, name) != 0)
                continue;
            if (r->empty || member(members, n, r->holder)) {
                held = 1;
                if (r->seq > *latest)
                    *latest = r->seq;
            }
        }
        if (!held)
            return 0;
    }
    return 1;
}

int rdzv_parts_complete(const struct rdzv_parts *p, const uint64_t *members, size_t n, char *name,
                        size_t namelen, int64_t *step, uint32_t *parts)
{
    const struct rdzv_part_rec *best = NULL;
    uint64_t best_seq = 0;

    for (size_t i = 0; p != NULL && i < p->n; i++) {
        const struct rdzv_part_rec *r = &p->recs[i];
        uint64_t latest;

        if (r->part != 1) /* one candidate per name and parts: its first part's records */
            continue;
        if (best != NULL && (r->step < best->step || (r->step == best->step && r->seq <= best_seq)))
            continue;
        if (!whole_among(p, r->name, r->parts, members, n, &latest))
            continue;
        best = r;
        best_seq = latest > r->seq ? latest : r->seq;
    }
    if (best == NULL)
        return 0;
    snprintf(name, namelen, "%s", best->name);
    *step = best->step;
    *parts = best->parts;
    return 1;
}
