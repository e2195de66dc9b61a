/* Checkpoint replicas (docs/FAULT_TOLERANCE.md "Checkpoint replicas (`--replicate-checkpoints
 * R`)"): the server relays a copy of a checkpoint from the agent of
 * group rank 0 to another agent of the same job, chunk by chunk, without reading or keeping
 * the data. Each transfer lives in its job's small table (struct rdzv__repl); the table enforces
 * what a hostile agent could abuse: only members of the running round start one, only the
 * agent that started it sends its chunks, each chunk follows the previous one, and no more than
 * RDZV_REPL_WINDOW bytes are relayed ahead of the receiver's acknowledgement, so the server
 * buffers at most one window per transfer. Workers never get here: only agents may send these
 * (server.c allowed()), and a worker credential cannot act as an agent (cred.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "handler.h"
#include "sjob.h"

static void send_abort(struct peer *p, uint32_t xfer, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void send_abort(struct peer *p, uint32_t xfer, uint64_t offset, const char *fmt, ...)
{
    struct rdzv_msg m;
    va_list ap;

    rdzv_msg_init(&m, RDZV_MSG_REPL_ACK);
    m.u.repl_ack.xfer = xfer;
    m.u.repl_ack.offset = offset;
    m.u.repl_ack.status = RDZV_REPL_ABORT;
    va_start(ap, fmt);
    vsnprintf(m.u.repl_ack.text, sizeof(m.u.repl_ack.text), fmt, ap);
    va_end(ap);
    rdzv__send(p, &m);
}

static void drop(struct sjob *sj, struct rdzv__repl *r)
{
    *r = sj->repl[--sj->n_repl];
}

/* Ends transfer r for both sides (each gets an ABORT with its own id), then forgets it. */
static void abort_both(struct sjob *sj, struct rdzv__repl *r, const char *why)
{
    send_abort(r->src, r->src_xfer, r->acked, "%s", why);
    send_abort(r->dst, r->id, r->acked, "%s", why);
    drop(sj, r);
}

static struct rdzv__repl *by_src(struct sjob *sj, const struct peer *p, uint32_t xfer)
{
    for (unsigned i = 0; i < sj->n_repl; i++)
        if (sj->repl[i].src == p && sj->repl[i].src_xfer == xfer)
            return &sj->repl[i];
    return NULL;
}

static struct rdzv__repl *by_dst(struct sjob *sj, const struct peer *p, uint32_t xfer)
{
    for (unsigned i = 0; i < sj->n_repl; i++)
        if (sj->repl[i].dst == p && sj->repl[i].id == xfer)
            return &sj->repl[i];
    return NULL;
}

/* The member of the running round with group rank `rank`, or -1. */
static int member_of_rank(const struct rdzv_job *job, uint32_t rank)
{
    for (size_t i = 0; i < job->n_members; i++)
        if (job->members[i].group_rank == rank)
            return (int)i;
    return -1;
}

/* Why a BEGIN from p cannot start (a static text), or NULL; sets *dst. */
static const char *begin_refused(struct sjob *sj, struct peer *p, const struct rdzv_repl_begin *b,
                                 struct peer **dst)
{
    const struct rdzv_job *job = sj->job;
    int me = rdzv_job_find(job, p), to;

    if ((b->xfer & RDZV_REPL_XFER_SENDER) == 0)
        return "a sender's transfer id has the top bit set";
    if (job->state != RDZV_JOB_RUNNING || b->round != job->round)
        return "not the job's running round";
    if (me < 0)
        return "the sender is not a member of the running round";
    if ((to = member_of_rank(job, b->rank)) < 0 || job->members[to].peer == NULL)
        return "no connected member has that group rank";
    if (job->members[to].peer == p)
        return "a node cannot replicate to itself";
    if (by_src(sj, p, b->xfer) != NULL)
        return "transfer id already in use";
    if (sj->n_repl >= RDZV_REPL_MAX_XFERS)
        return "too many transfers in flight for this job";
    *dst = job->members[to].peer;
    return NULL;
}

void rdzv__handle_repl_begin(struct peer *p, const struct rdzv_repl_begin *b)
{
    struct sjob *sj = p->job;
    struct peer *dst = NULL;
    struct rdzv__repl *r;
    struct rdzv_msg m;
    const char *why;

    if (sj == NULL) {
        rdzv__send_error(p, RDZV_ERR_PROTOCOL, "REPL_BEGIN before JOIN: no job to replicate in");
        return;
    }
    if ((why = begin_refused(sj, p, b, &dst)) != NULL) {
        send_abort(p, b->xfer, 0, "replica refused: %s", why);
        return;
    }
    r = &sj->repl[sj->n_repl++];
    memset(r, 0, sizeof(*r));
    do
        r->id = ++p->srv->repl_next_id & ~RDZV_REPL_XFER_SENDER;
    while (r->id == 0);
    r->src_xfer = b->xfer;
    r->src = p;
    r->dst = dst;
    r->size = b->size;
    r->direct = b->port != 0;
    rdzv_msg_init(&m, RDZV_MSG_REPL_BEGIN);
    m.u.repl_begin = *b;
    m.u.repl_begin.xfer = r->id;
    m.u.repl_begin.rank = sj->job->members[rdzv_job_find(sj->job, p)].group_rank;
    /* the receiver connects to the address the sender's JOIN gave, never to one it names now */
    snprintf(m.u.repl_begin.host, sizeof(m.u.repl_begin.host), "%s",
             sj->job->members[rdzv_job_find(sj->job, p)].addr);
    rdzv__send(dst, &m);
}

/* The chunk goes on only when it is the next one, inside the size and inside the window. */
void rdzv__handle_repl_data(struct peer *p, const struct rdzv_msg *m)
{
    const struct rdzv_repl_data *d = &m->u.repl_data;
    struct sjob *sj = p->job;
    struct rdzv__repl *r = sj != NULL ? by_src(sj, p, d->xfer) : NULL;
    char why[160];

    if (r == NULL) {
        /* ended meanwhile (an abort crossed it), or never this peer's: it learns once */
        send_abort(p, d->xfer, 0, "no such transfer of this connection");
        return;
    }
    if (d->offset != r->relayed || d->len == 0 || d->len > r->size - r->relayed) {
        snprintf(why, sizeof(why),
                 "chunk of %" PRIu32 " bytes at offset %" PRIu64
                 " refused: expected offset %" PRIu64 " of %" PRIu64,
                 d->len, d->offset, r->relayed, r->size);
        abort_both(sj, r, why);
        return;
    }
    if (r->direct) {
        abort_both(sj, r, "chunk relayed for a transfer on a direct link");
        return;
    }
    if (r->relayed + d->len - r->acked > RDZV_REPL_WINDOW) {
        abort_both(sj, r, "sender ran past the flow-control window");
        return;
    }
    r->relayed += d->len;
    ((struct rdzv_msg *)m)->u.repl_data.xfer = r->id; /* m is the server's decoded copy */
    rdzv__send(r->dst, m);
}

/* From the receiver: progress, done, abort or a request for the relay (its direct link failed),
 * relayed to the sender. From the sender: abort (a newer checkpoint supersedes this one),
 * relayed to the receiver. On a direct link the chunks never pass here, so the receiver's
 * offsets are checked against the size only (progress is acknowledged on the link itself). */
void rdzv__handle_repl_ack(struct peer *p, const struct rdzv_repl_ack *a)
{
    struct sjob *sj = p->job;
    struct rdzv__repl *r;
    struct rdzv_msg m;

    if (sj == NULL)
        return;
    if (a->status == RDZV_REPL_BULK) { /* a direct link's own message: never relayed */
        if ((r = by_dst(sj, p, a->xfer)) != NULL || (r = by_src(sj, p, a->xfer)) != NULL)
            abort_both(sj, r, "a bulk offer sent through the server");
        return;
    }
    rdzv_msg_init(&m, RDZV_MSG_REPL_ACK);
    m.u.repl_ack = *a;
    if ((r = by_dst(sj, p, a->xfer)) != NULL) {
        if (a->status == RDZV_REPL_RELAY && !r->direct) {
            abort_both(sj, r, "relay asked for twice");
            return;
        }
        if (a->status == RDZV_REPL_RELAY) {
            r->direct = 0; /* from byte 0: nothing the link carried counts here */
            r->relayed = r->acked = 0;
        } else if (a->offset < r->acked || a->offset > (r->direct ? r->size : r->relayed)) {
            abort_both(sj, r, "acknowledgement outside the bytes relayed");
            return;
        } else {
            r->acked = a->offset;
        }
        m.u.repl_ack.xfer = r->src_xfer;
        rdzv__send(r->src, &m);
        if (a->status == RDZV_REPL_DONE || a->status == RDZV_REPL_ABORT)
            drop(sj, r);
    } else if ((r = by_src(sj, p, a->xfer)) != NULL && a->status == RDZV_REPL_ABORT) {
        m.u.repl_ack.xfer = r->id;
        rdzv__send(r->dst, &m);
        drop(sj, r);
    }
    /* anything else is stale (the transfer ended while it travelled): ignored */
}

void rdzv__repl_forget(struct sjob *sj, struct peer *p)
{
    for (unsigned i = sj->n_repl; i-- > 0;) {
        struct rdzv__repl *r = &sj->repl[i];

        if (r->src == p)
            send_abort(r->dst, r->id, r->acked, "the sending node went away");
        else if (r->dst == p)
            send_abort(r->src, r->src_xfer, r->acked, "the receiving node went away");
        else
            continue;
        drop(sj, r);
    }
}
