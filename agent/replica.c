#include "replica.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "escape.h"
#include "replica_bulk.h"
#include "replica_dir.h"
#include "replica_link.h"
#include "replica_store.h"
#include "replica_write.h"
#include "saferm.h"

#define XFER_OURS RDZV_REPL_XFER_SENDER
/* A copy being received: TMP_PREFIX HOST.PID.XXXXXX (a name the watcher ignores), so that an
 * agent starting later on the same host can tell a dead agent's leftover from a live one's. */
#define TMP_PREFIX ".muster-replica-"
/* A receiver acknowledges every quarter window, so the sender never stalls on a full one. */
#define WINDOW(direct) ((direct) ? (uint64_t)AGENT_REPLICA_LINK_WINDOW : RDZV_REPL_WINDOW)
#define ACK_EVERY(direct) (WINDOW(direct) / 4)
/* On bulk streams the receiver confirms what it wrote every quarter of the bulk window. */
#define BULK_ACK_EVERY (AGENT_REPLICA_BULK_WINDOW / 4)

static void logf_(struct agent_replica *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Names and reasons come from another node: escaped (common/escape.h) before they are shown. */
static void logf_(struct agent_replica *r, const char *fmt, ...)
{
    char line[PATH_MAX + 512], shown[2 * sizeof(line)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    mc_escape(line, shown, sizeof(shown));
    r->cbs.log(r->data, MC_LOG_INFO, shown);
}

static void send_ack(struct agent_replica *r, uint32_t xfer, uint64_t offset, uint8_t status,
                     const char *text)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_REPL_ACK);
    m.u.repl_ack.xfer = xfer;
    m.u.repl_ack.offset = offset;
    m.u.repl_ack.status = status;
    snprintf(m.u.repl_ack.text, sizeof(m.u.repl_ack.text), "%s", text);
    r->cbs.send(r->data, &m);
}

/* --- sending ------------------------------------------------------------------------------ */

static void pump(struct agent_replica *r);

static void on_pace(uv_timer_t *t)
{
    pump(t->data);
}

static int sending(const struct agent_replica *r)
{
    if (r->listing)
        return 1; /* a directory checkpoint's copies start once it is listed */
    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES; i++)
        if (r->out[i].active || r->out[i].retry_ms != 0)
            return 1;
    return 0;
}

/* Runs the drain callback, if one waits (agent_replica_drain). */
static void drained(struct agent_replica *r)
{
    void (*cb)(void *) = r->drain_cb;

    if (cb == NULL)
        return;
    r->drain_cb = NULL;
    uv_timer_stop(&r->drain);
    cb(r->drain_data);
}

static void on_drain_timeout(uv_timer_t *t)
{
    struct agent_replica *r = t->data;

    logf_(r, "checkpoint %s: stopped waiting for its replicas", r->cur.name);
    drained(r);
}

int agent_replica_drain(struct agent_replica *r, uint64_t max_ms, void (*done)(void *data),
                        void *data)
{
    if (!r->open || !sending(r))
        return 0;
    r->drain_cb = done;
    r->drain_data = data;
    uv_timer_start(&r->drain, on_drain_timeout, max_ms, 0);
    return 1;
}

static void send_done(struct agent_replica *r)
{
    if (sending(r) || r->fd < 0)
        return;
    close(r->fd);
    r->fd = -1;
    agent_replica_src_close(&r->src);
    memset(r->link_key, 0, sizeof(r->link_key));
    agent_replica_link_unserve(&r->net); /* no handshake succeeds until the next checkpoint */
    uv_timer_stop(&r->retry);
    drained(r);
    uv_timer_stop(&r->pace);
}

static void out_end(struct agent_replica *r, struct agent_replica_out *o, int tell, const char *why)
{
    if (tell)
        send_ack(r, o->xfer, o->acked, RDZV_REPL_ABORT, why);
    agent_replica_bulk_close(o->bulk);
    o->bulk = NULL;
    agent_replica_link_close(o->link);
    o->link = NULL;
    o->active = 0;
    send_done(r);
}

/* The --replicate-bandwidth bucket holds PACE_MS of the rate (at least a chunk), and a capped
 * sender waits until it is full again: one burst every PACE_MS. Waking for every chunk instead
 * (~0.6 ms apart at 100 MB/s) cost a 2-rank trainer on the same cores 17 % of its step time,
 * against 2 % for the same bytes sent without a cap (docs/BENCHMARKS.md): the wake-ups, not
 * the cipher, were what the trainer felt. */
#define PACE_MS 50

static double bucket(const struct agent_replica *r)
{
    double cap = r->bytes_per_ms * PACE_MS;

    return cap < RDZV_REPL_CHUNK_MAX ? RDZV_REPL_CHUNK_MAX : cap;
}

static void refill(struct agent_replica *r)
{
    uint64_t now = uv_now(r->pace.loop);
    double cap = bucket(r);

    r->tokens += (double)(now - r->tokens_ms) * r->bytes_per_ms;
    if (r->tokens > cap)
        r->tokens = cap;
    r->tokens_ms = now;
}

/* One chunk to receiver o; 1 when sent, 0 when it must wait (window, cap), -1 when it ended. */
static int send_chunk(struct agent_replica *r, struct agent_replica_out *o)
{
    struct rdzv_repl_data *d = &r->msg->u.repl_data;
    uint64_t left = r->xsize - o->sent;
    uint32_t len = left < RDZV_REPL_CHUNK_MAX ? (uint32_t)left : RDZV_REPL_CHUNK_MAX;
    ssize_t n;
    int rc;

    if (left == 0 || o->bulk != NULL || o->sent + len - o->acked > WINDOW(o->direct))
        return 0;
    if (o->direct && o->link == NULL)
        return 0; /* the receiver has not connected yet (or its link broke: it asks the relay) */
    if (o->direct && rdzv_conn_unsent(&o->link->conn) + len > AGENT_REPLICA_LINK_QUEUE_MAX) {
        /* acknowledged is not read: a receiver that acknowledges what it never takes from the
         * socket would otherwise queue the whole checkpoint here (pump polls the queue) */
        r->link_full = 1;
        return 0;
    }
    if (r->bytes_per_ms > 0 && r->tokens < len)
        return 0;
    if (r->src.dirfd >= 0)
        n = agent_replica_src_read(&r->src, d->data, len, o->sent) == 0 ? (ssize_t)len : -1;
    else
        n = pread(r->fd, d->data, len, (off_t)o->sent);
    if (n != (ssize_t)len) {
        logf_(r, "checkpoint %s not replicated: it changed or vanished while it was read",
              r->cur.name);
        out_end(r, o, 1, "the sender's file changed while it was read");
        return -1;
    }
    d->xfer = o->xfer;
    d->offset = o->sent;
    d->len = len;
    rc = o->direct ? agent_replica_link_send(o->link, r->msg) : r->cbs.send(r->data, r->msg);
    if (rc != 0 && o->direct) {
        agent_replica_link_close(o->link); /* its receiver sees it go and asks for the relay */
        o->link = NULL;
        return 0;
    }
    if (rc != 0) {
        out_end(r, o, 0, NULL);
        return -1;
    }
    o->sent += len;
    r->tokens -= len;
    return 1;
}

/* One turn of pump reads for at most this long; the rest of the windows goes on the next loop
 * turn, after timers and I/O. A chunk of a directory of small files opens a few hundred of them
 * (3-4 ms here): a 30,000-member directory, all in one window, held the loop ~200 ms. */
#define PUMP_SLICE_NS (5 * 1000000ull)

/* Sends what the windows and the cap allow, round robin over the receivers; a timer takes over
 * when the cap is what stops it, or the slice. */
static void pump(struct agent_replica *r)
{
    uint64_t until = uv_hrtime() + PUMP_SLICE_NS;
    int progress = 1, capped = 0, sliced = 0;

    if (r->fd < 0)
        return;
    refill(r);
    r->link_full = 0;
    while (progress && !sliced) {
        progress = 0;
        for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES && r->fd >= 0 && !sliced; i++) {
            struct agent_replica_out *o = &r->out[i];

            if (!o->active)
                continue;
            if (send_chunk(r, o) == 1) {
                progress = 1;
                sliced = uv_hrtime() > until;
            } else if (o->active && r->bytes_per_ms > 0 && o->sent < r->xsize &&
                       (!o->direct || o->link != NULL) &&
                       o->sent + RDZV_REPL_CHUNK_MAX - o->acked <= WINDOW(o->direct))
                capped = 1;
        }
    }
    if (sliced && r->fd >= 0 && !uv_is_active((uv_handle_t *)&r->pace)) {
        uv_timer_start(&r->pace, on_pace, 0, 0);
    } else if (r->link_full && r->fd >= 0 && !uv_is_active((uv_handle_t *)&r->pace)) {
        uv_timer_start(&r->pace, on_pace, AGENT_REPLICA_LINK_POLL_MS, 0);
    } else if (capped && r->fd >= 0 && !uv_is_active((uv_handle_t *)&r->pace)) {
        double need = bucket(r) - r->tokens; /* a whole burst, not the next chunk */
        uint64_t ms = need > 0 ? (uint64_t)(need / r->bytes_per_ms) + 1 : 1;

        uv_timer_start(&r->pace, on_pace, ms, 0);
    }
}

static void abandon_sending(struct agent_replica *r, const char *why)
{
    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES; i++) {
        r->out[i].retry_ms = 0;
        if (!r->out[i].active)
            continue;
        /* a --replicate-bandwidth too low for the checkpoint rate shows here */
        logf_(r,
              "checkpoint %s not replicated to group rank %" PRIu32 ": %s (%" PRIu64 " of %" PRIu64
              " bytes sent)",
              r->cur.name, r->out[i].rank, why, r->out[i].sent, r->xsize);
        out_end(r, &r->out[i], 1, why);
    }
}

/* Starts (or starts again) the copy of r->cur to o->rank: a new transfer id, REPL_BEGIN. */
static void begin_out(struct agent_replica *r, struct agent_replica_out *o)
{
    struct rdzv_msg m;

    o->xfer = XFER_OURS | (++r->next_xfer & ~XFER_OURS);
    o->sent = o->acked = 0;
    o->direct = 0;
    o->retry_ms = 0;
    o->tries++;
    rdzv_msg_init(&m, RDZV_MSG_REPL_BEGIN);
    m.u.repl_begin = (struct rdzv_repl_begin){.xfer = o->xfer,
                                              .round = r->round,
                                              .rank = o->rank,
                                              .step = r->cur.step,
                                              .size = r->xsize,
                                              .checksum = r->cur.checksum,
                                              .mode = r->mode};
    if (r->src.dirfd >= 0)
        m.u.repl_begin.flags = RDZV_REPL_BEGIN_DIR;
    if (r->cur.part != 0) {
        m.u.repl_begin.part = r->cur.part;
        m.u.repl_begin.parts = r->cur.parts;
    } else if (r->parts && r->src.dirfd >= 0 && r->world >= 2 && r->world <= RDZV_PARTS_MAX) {
        m.u.repl_begin.part = 1;
        m.u.repl_begin.parts = r->world;
    }
    snprintf(m.u.repl_begin.name, sizeof(m.u.repl_begin.name), "%s", r->cur.name);
    if (r->link_port != 0) {
        m.u.repl_begin.port = r->link_port;
        m.u.repl_begin.link = o->xfer;
        memcpy(m.u.repl_begin.key, r->link_key, sizeof(r->link_key));
        o->direct = 1;
    }
    o->active = r->cbs.send(r->data, &m) == 0;
    memset(m.u.repl_begin.key, 0, sizeof(m.u.repl_begin.key));
    if (!o->active)
        logf_(r,
              "checkpoint %s not replicated to group rank %" PRIu32
              ": no connection to the rendezvous server",
              r->cur.name, o->rank);
}

static void on_retry(uv_timer_t *t)
{
    struct agent_replica *r = t->data;
    uint64_t now = uv_now(t->loop), next = 0;

    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES && r->fd >= 0; i++) {
        struct agent_replica_out *o = &r->out[i];

        if (o->retry_ms == 0)
            continue;
        if (o->retry_ms <= now)
            begin_out(r, o);
        else if (next == 0 || o->retry_ms < next)
            next = o->retry_ms;
    }
    if (next != 0)
        uv_timer_start(&r->retry, on_retry, next - now, 0);
    send_done(r); /* none could start again */
    pump(r);
}

/* The copy to o failed (why): tried again after a pause while tries are left and no newer
 * checkpoint came (a receiver that reconnected, a link and a relay that both broke), else
 * given up. */
static void out_failed(struct agent_replica *r, struct agent_replica_out *o, const char *why)
{
    static const unsigned pause_ms[AGENT_REPLICA_TRIES] = {0, 1000, 4000};

    if (o->tries >= AGENT_REPLICA_TRIES || !r->open) {
        logf_(r, "checkpoint %s not replicated to group rank %" PRIu32 ": %s", r->cur.name, o->rank,
              why);
        out_end(r, o, 0, NULL);
        return;
    }
    logf_(r,
          "checkpoint %s not replicated to group rank %" PRIu32
          " yet: %s; trying again in %u ms (attempt %u of %u)",
          r->cur.name, o->rank, why, pause_ms[o->tries], o->tries + 1, AGENT_REPLICA_TRIES);
    agent_replica_bulk_close(o->bulk);
    o->bulk = NULL;
    agent_replica_link_close(o->link);
    o->link = NULL;
    o->active = 0;
    o->retry_ms = uv_now(r->loop) + pause_ms[o->tries];
    if (!uv_is_active((uv_handle_t *)&r->retry) ||
        uv_timer_get_due_in(&r->retry) > pause_ms[o->tries])
        uv_timer_start(&r->retry, on_retry, pause_ms[o->tries], 0);
}

/* The copies of e start: fd is the checkpoint (taken), r->xsize what is to be sent, mode the
 * original's permission bits. */
static void begin_copies(struct agent_replica *r, const struct agent_ckpt_entry *e, int fd,
                         uint32_t mode, const uint32_t where[3])
{
    uint32_t round = where[0], my_rank = where[1], world = where[2];
    unsigned n = r->copies < world ? r->copies : world - 1;
    uint8_t key[32];
    int port;

    r->fd = fd;
    r->mode = mode & RDZV_REPL_MODE_BITS; /* the copy is never wider */
    r->cur = *e;
    r->started_ms = uv_now(r->pace.loop);
    /* a fresh key per checkpoint: the direct link of the one before is of no use to anyone */
    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
        port = -EIO;
    else
        port = agent_replica_link_serve(&r->net, key);
    if (port < 0 && !r->link_warned) {
        logf_(r, "checkpoint replicas go through the rendezvous server: no direct link (%s)",
              strerror(-port));
        r->link_warned = 1;
    }
    r->round = round;
    r->world = world;
    r->link_port = port > 0 ? (uint32_t)port : 0;
    memcpy(r->link_key, key, sizeof(key));
    for (unsigned i = 0; i < n; i++) {
        memset(&r->out[i], 0, sizeof(r->out[i]));
        r->out[i].owner = r;
        r->out[i].rank = (my_rank + 1 + i) % world;
        begin_out(r, &r->out[i]);
    }
    memset(key, 0, sizeof(key));
    send_done(r); /* none could start */
    pump(r);
}

/* A directory checkpoint is listed in libuv's pool before its copies start: listing and
 * stat-ing every member took 140-220 ms on the loop for 30,000 of them. A short one-off job,
 * unlike a copy's writing (replica_write.h). */
struct listing {
    uv_work_t work;
    struct agent_replica *r;
    uint64_t id; /* r->listing_id then: a newer offer, a close or a new init make it stale */
    struct agent_ckpt_entry e;
    uint32_t where[3]; /* round, my_rank, world */
    int fd;            /* the directory */
    uint32_t mode;
    char dir[PATH_MAX];
    struct agent_replica_src src;
    char why[PATH_MAX + 64];
    int rc;
};

static void list_work(uv_work_t *req)
{
    struct listing *j = req->data;

    j->rc = agent_replica_src_open(&j->src, j->dir, j->e.name, j->why, sizeof(j->why));
}

static void list_done(uv_work_t *req, int status)
{
    struct listing *j = req->data;
    struct agent_replica *r = j->r;
    int current = status == 0 && r->open && r->listing && r->listing_id == j->id;

    if (current)
        r->listing = 0;
    if (current && (j->rc != 0 || j->src.content != j->e.size))
        logf_(r, "checkpoint %s not replicated: %s", j->e.name,
              j->rc == 0 ? "not the directory that was recorded" : j->why);
    if (!current || j->rc != 0 || j->src.content != j->e.size) {
        agent_replica_src_close(&j->src);
        close(j->fd);
        if (current)
            drained(r); /* nothing to wait for after all */
    } else {
        r->src = j->src; /* taken */
        r->xsize = r->src.total;
        begin_copies(r, &j->e, j->fd, j->mode, j->where);
    }
    free(j);
}

static void start_listing(struct agent_replica *r, const struct agent_ckpt_entry *e, int fd,
                          uint32_t mode, const uint32_t where[3])
{
    static uint64_t listings; /* ids unique in the process: an init does not reuse one */
    struct listing *j = calloc(1, sizeof(*j));

    if (j == NULL || snprintf(j->dir, sizeof(j->dir), "%s", r->watch->dir) >= (int)sizeof(j->dir)) {
        logf_(r, "checkpoint %s not replicated: %s", e->name, strerror(j ? ENAMETOOLONG : ENOMEM));
        free(j);
        close(fd);
        return;
    }
    j->r = r;
    j->id = r->listing_id = ++listings;
    j->e = *e;
    memcpy(j->where, where, sizeof(j->where));
    j->fd = fd;
    j->mode = mode;
    agent_replica_src_init(&j->src);
    j->work.data = j;
    r->listing = 1;
    (void)uv_queue_work(r->loop, &j->work, list_work, list_done); /* fails only on NULL */
}

void agent_replica_parts(struct agent_replica *r, int on)
{
    r->parts = on;
}

void agent_replica_offer(struct agent_replica *r, const struct agent_ckpt_entry *e, uint32_t round,
                         uint32_t my_rank, uint32_t world)
{
    const uint32_t where[3] = {round, my_rank, world};
    char path[PATH_MAX];
    struct stat st;
    int fd;

    if (r->copies == 0 || world < 2)
        return;
    abandon_sending(r, "superseded by a newer checkpoint");
    r->listing = 0; /* a directory still being listed is superseded too */
    if (snprintf(path, sizeof(path), "%s/%s", r->watch->dir, e->name) >= (int)sizeof(path))
        return;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        start_listing(r, e, fd, (uint32_t)st.st_mode, where);
    } else if (fd < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != e->size) {
        logf_(r, "checkpoint %s not replicated: not the regular file that was recorded", e->name);
        if (fd >= 0)
            close(fd);
    } else {
        r->xsize = e->size;
        begin_copies(r, e, fd, (uint32_t)st.st_mode, where);
    }
}

static void on_ack_out(struct agent_replica *r, const struct rdzv_repl_ack *a)
{
    struct agent_replica_out *o = NULL;

    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES && o == NULL; i++)
        if (r->out[i].active && r->out[i].xfer == a->xfer)
            o = &r->out[i];
    if (o == NULL)
        return; /* superseded meanwhile */
    if (a->status == RDZV_REPL_PROGRESS && !o->direct) {
        if (a->offset > o->acked && a->offset <= o->sent)
            o->acked = a->offset;
        pump(r);
        return;
    }
    if (a->status == RDZV_REPL_PROGRESS)
        return; /* a direct link's progress comes on the link */
    if (a->status == RDZV_REPL_RELAY) {
        if (!o->direct)
            return;
        logf_(r, "checkpoint %s goes to group rank %" PRIu32 " through the server: %s", r->cur.name,
              o->rank, a->text);
        agent_replica_bulk_close(o->bulk);
        o->bulk = NULL;
        agent_replica_link_close(o->link);
        o->link = NULL;
        o->direct = 0;
        o->sent = o->acked = 0; /* the relay starts from the first byte */
        pump(r);
        return;
    }
    if (a->status == RDZV_REPL_DONE) {
        uint64_t ms = uv_now(r->pace.loop) - r->started_ms;
        char times[160] = "";

        if (o->bulk != NULL)
            agent_replica_bulk_times(o->bulk, times, sizeof(times));
        logf_(r,
              "checkpoint %s replicated to group rank %" PRIu32 " (%" PRIu64 " bytes in %" PRIu64
              " ms, %s)%s%s",
              r->cur.name, o->rank, r->xsize, ms,
              a->text[0]        ? a->text
              : o->bulk != NULL ? "direct link, bulk streams"
              : o->direct       ? "direct link"
                                : "relayed by the server",
              times[0] ? "; " : "", times);
    } else {
        out_failed(r, o, a->text);
        return;
    }
    out_end(r, o, 0, NULL);
}

/* --- receiving ---------------------------------------------------------------------------- */

static void on_written(void *data, enum agent_replica_write_event ev, const char *why);

/* Where the copy of in goes until it verified: a temporary file, or a temporary directory for a
 * directory checkpoint, named TMP_PREFIX HOST.PID.XXXXXX, which its writer's thread creates
 * (replica_write.h): from here on the loop only hands it bytes. At most a window is queued
 * there: the receiver acknowledges only what was written. Returns 0 or a negative errno. */
static int open_target(struct agent_replica *r, struct agent_replica_in *in)
{
    size_t max = WINDOW(in->direct);
    char tmpl[PATH_MAX];
    int rc;

    if (snprintf(tmpl, sizeof(tmpl), "%.3800s/" TMP_PREFIX "%s.%ld.XXXXXX", r->watch->dir, r->host,
                 (long)getpid()) >= (int)sizeof(tmpl))
        return -ENAMETOOLONG;
    if ((rc = agent_replica_store_new(r->watch->dir, in->e.name, tmpl, in->dir, in->mode,
                                      &in->store)) != 0)
        return rc;
    rc = agent_replica_writer_start(r->loop, &agent_replica_store_ops, in->store, in->e.checksum,
                                    max, on_written, in, &in->wr);
    if (rc != 0)
        in->store = NULL; /* the writer took it and let it go */
    return rc;
}

/* The writer goes on its own: what is not in place yet is removed by its thread. */
static void close_target(struct agent_replica_in *in)
{
    agent_replica_writer_close(in->wr);
    in->wr = NULL;
    in->store = NULL;
}

static void in_end(struct agent_replica_in *in)
{
    agent_replica_bulk_close(in->bulk); /* before the writer it feeds */
    agent_replica_link_close(in->link);
    close_target(in);
    memset(in, 0, sizeof(*in));
}

static void in_refuse(struct agent_replica *r, struct agent_replica_in *in, uint32_t xfer,
                      const char *why);

/* The direct link failed before the copy was whole: the server relays it, from byte 0. */
static void ask_relay(struct agent_replica *r, struct agent_replica_in *in, const char *why)
{
    int rc;

    agent_replica_link_close(in->link);
    in->link = NULL;
    if (in->got == in->xsize)
        return; /* every byte is with the writer already: its outcome goes to the server */
    agent_replica_bulk_close(in->bulk); /* before the writer it feeds */
    in->bulk = NULL;
    memset(in->key, 0, sizeof(in->key));
    logf_(r,
          "replica of checkpoint %s from group rank %" PRIu32
          ": no direct link (%s); asking the server to relay it",
          in->e.name, in->from, why);
    in->direct = 0;
    in->got = in->acked = 0;
    close_target(in); /* from the first byte again */
    if ((rc = open_target(r, in)) != 0) {
        in_refuse(r, in, in->xfer, strerror(-rc));
        return;
    }
    send_ack(r, in->xfer, 0, RDZV_REPL_RELAY, why);
}

static void in_refuse(struct agent_replica *r, struct agent_replica_in *in, uint32_t xfer,
                      const char *why)
{
    logf_(r, "replica of checkpoint %s refused: %s", in != NULL ? in->e.name : "?", why);
    send_ack(r, xfer, in != NULL ? in->got : 0, RDZV_REPL_ABORT, why);
    if (in != NULL)
        in_end(in);
}

/* The copy this node already holds, verified by the registry (a shared --checkpoint-dir, or a
 * replica received before): nothing to transfer. */
static int already_here(struct agent_replica *r, const struct rdzv_repl_begin *b, const char *local)
{
    struct agent_ckptwatch *w = r->watch;
    char path[PATH_MAX];
    struct stat st;

    if (!w->recording)
        agent_ckptwatch_sync(w); /* the registry file may be shared and newer */
    for (size_t i = 0; i < w->reg.n; i++) {
        const struct agent_ckpt_entry *e = &w->reg.entries[i];

        if (strcmp(e->name, local) != 0 || e->checksum != b->checksum ||
            snprintf(path, sizeof(path), "%s/%s", w->dir, local) >= (int)sizeof(path) ||
            lstat(path, &st) != 0)
            continue;
        if (b->flags & RDZV_REPL_BEGIN_DIR) /* the size sent is the stream's */
            return S_ISDIR(st.st_mode);
        return e->size == b->size && S_ISREG(st.st_mode) && (uint64_t)st.st_size == b->size;
    }
    return 0;
}

static struct agent_replica_in *in_slot(struct agent_replica *r, const char *name)
{
    struct agent_replica_in *free_slot = NULL;

    for (unsigned i = 0; i < AGENT_REPLICA_MAX_IN; i++) {
        struct agent_replica_in *in = &r->in[i];

        if (in->active && strcmp(in->e.name, name) == 0) /* sent again: the new one wins */
            in_refuse(r, in, in->xfer, "superseded by a new copy of the same name");
        if (!in->active && free_slot == NULL)
            free_slot = in;
    }
    return free_slot;
}

static const char *begin_problem(struct agent_replica *r, const struct rdzv_repl_begin *b)
{
    struct statvfs vfs;

    if (!agent_ckpt_name_valid(b->name) || agent_ckpt_name_is_temp(b->name))
        return "not a checkpoint name";
    if ((b->xfer & XFER_OURS) != 0)
        return "bad transfer id";
    /* a node copies its own part only: the server names the sender's group rank, in the round
     * the part was written in */
    if (b->part != 0 && b->part != b->rank + 1)
        return "a part the sending node did not write";
    if (statvfs(r->watch->dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < b->size)
        return "not enough free space in --checkpoint-dir";
    return NULL;
}

static void send_link_progress(struct agent_replica *r, struct agent_replica_in *in);
static void bulk_out(struct agent_replica *r, struct agent_replica_out *o, unsigned slot);
static void bulk_in(struct agent_replica *r, struct agent_replica_in *in,
                    const struct rdzv_repl_ack *a);

/* Where the copy goes: under its own name, or, for another node's part of a sharded checkpoint
 * (a part other than the first, or the first where this node holds a part of that name
 * itself), beside this node's own part. Returns 1 when it is kept as a part, -1 when its name
 * is too long for that. */
static int local_name(const struct agent_replica *r, const struct rdzv_repl_begin *b, char *local,
                      size_t len)
{
    char path[PATH_MAX];
    struct stat st;

    snprintf(local, len, "%s", b->name);
    if (b->part == 0)
        return 0;
    if (b->part == 1 &&
        (snprintf(path, sizeof(path), "%s/%s", r->watch->dir, b->name) >= (int)sizeof(path) ||
         lstat(path, &st) != 0))
        return 0; /* rank 0's: nothing of its own of that name here */
    return agent_ckpt_part_name(local, len, b->name, b->part, b->parts) == 0 ? 1 : -1;
}

static void on_begin(struct agent_replica *r, const struct rdzv_repl_begin *b)
{
    struct agent_replica_in *in;
    const char *why = begin_problem(r, b);
    char local[AGENT_CKPT_NAME_MAX];
    int rc, as_part = 0;

    if (why == NULL && (as_part = local_name(r, b, local, sizeof(local))) < 0)
        why = "name too long to keep as another node's part";
    if (why != NULL) {
        logf_(r, "replica of checkpoint %s refused: %s", b->name, why);
        send_ack(r, b->xfer, 0, RDZV_REPL_ABORT, why);
        return;
    }
    if (already_here(r, b, local)) {
        send_ack(r, b->xfer, 0, RDZV_REPL_DONE, "already here");
        return;
    }
    if ((in = in_slot(r, local)) == NULL) {
        send_ack(r, b->xfer, 0, RDZV_REPL_ABORT, "too many copies in flight to this node");
        return;
    }
    memset(in, 0, sizeof(*in));
    in->r = r;
    in->begin_ms = uv_now(r->loop);
    in->xfer = b->xfer;
    in->from = b->rank;
    snprintf(in->e.name, sizeof(in->e.name), "%s", local);
    if (as_part) {
        in->e.part = b->part;
        in->e.parts = b->parts;
    }
    in->e.step = b->step;
    in->e.size = b->size;
    in->e.checksum = b->checksum;
    in->xsize = b->size;
    in->dir = (b->flags & RDZV_REPL_BEGIN_DIR) != 0;
    in->mode = b->mode; /* 0 from a sender before modes: 0600 / 0700 (replica_store.h) */
    in->direct = b->port != 0 && b->size != 0;
    rc = open_target(r, in);
    in->active = 1;
    if (rc != 0) {
        in_refuse(r, in, b->xfer, strerror(-rc));
        return;
    }
    if (b->size == 0) {
        in->received_ms = in->begin_ms;
        agent_replica_writer_finish(in->wr); /* an empty file or directory: DONE follows */
        return;
    }
    if (in->direct) {
        in->link_id = b->link;
        snprintf(in->host, sizeof(in->host), "%s", b->host);
        memcpy(in->key, b->key, sizeof(in->key));
        rc = agent_replica_link_connect(&r->net, b->host, b->port, b->key, b->link, in, &in->link);
        if (rc != 0)
            ask_relay(r, in, rc < -4095 || rc > 0 ? strerror(-rc) : uv_strerror(rc));
    }
}

/* The writer verified the copy and put it in place: recorded, announced to the server. */
static void stored_in(struct agent_replica *r, struct agent_replica_in *in)
{
    struct timespec now;
    char wtimes[160];

    if (in->dir)
        in->e.size = in->store->content; /* the members' bytes, not the stream's */
    in->e.mtime_ns = in->store->mtime_ns;
    clock_gettime(CLOCK_REALTIME, &now);
    in->e.recorded_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    agent_ckptwatch_adopt(r->watch, &in->e);
    agent_replica_writer_times(in->wr, wtimes, sizeof(wtimes));
    logf_(r,
          "checkpoint %s stored as a replica from group rank %" PRIu32 " (step %lld, %" PRIu64
          " bytes, xxh3 %016" PRIx64 "; %" PRIu64 " ms: received in %" PRIu64 ", durable %" PRIu64
          " ms later); %s%s%s",
          in->e.name, in->from, (long long)in->e.step, in->e.size, in->e.checksum,
          uv_now(r->loop) - in->begin_ms, in->received_ms - in->begin_ms,
          uv_now(r->loop) - in->received_ms, in->bulk_times, in->bulk_times[0] ? "; " : "", wtimes);
    if (r->cbs.stored != NULL)
        r->cbs.stored(r->data, &in->e);
    send_ack(r, in->xfer, in->got, RDZV_REPL_DONE, "");
    in_end(in);
}

/* News from in's writer: bytes written (acknowledged every quarter window, which is what
 * keeps the sender's window ahead of the disk, not of the link), the end, or a failure. */
static void on_written(void *data, enum agent_replica_write_event ev, const char *why)
{
    struct agent_replica_in *in = data;
    struct agent_replica *r = in->r;
    uint64_t written = agent_replica_writer_written(in->wr);

    if (ev == AGENT_REPLICA_WRITE_FAILED) {
        in_refuse(r, in, in->xfer, why);
    } else if (ev == AGENT_REPLICA_WRITE_DONE) {
        stored_in(r, in);
    } else if (written < in->xsize &&
               written - in->acked >= (in->bulk != NULL ? BULK_ACK_EVERY : ACK_EVERY(in->direct))) {
        in->acked = written;
        if (in->direct)
            send_link_progress(r, in);
        else
            send_ack(r, in->xfer, written, RDZV_REPL_PROGRESS, "");
    }
}

static struct agent_replica_in *find_in(struct agent_replica *r, uint32_t xfer)
{
    for (unsigned i = 0; i < AGENT_REPLICA_MAX_IN; i++)
        if (r->in[i].active && r->in[i].xfer == xfer)
            return &r->in[i];
    return NULL;
}

/* The next chunk of in, from the server (relayed) or from the direct link. */
static void on_chunk(struct agent_replica *r, struct agent_replica_in *in,
                     const struct rdzv_repl_data *d)
{
    char why[PATH_MAX + 64];
    int rc;

    if (d->len == 0 || d->offset != in->got || d->len > in->xsize - in->got) {
        snprintf(why, sizeof(why),
                 "chunk of %" PRIu32 " bytes at offset %" PRIu64 ", expected offset %" PRIu64
                 " of %" PRIu64,
                 d->len, d->offset, in->got, in->xsize);
        in_refuse(r, in, d->xfer, why);
        return;
    }
    /* -EPIPE: the writer failed, and its callback ends the copy saying why */
    if ((rc = agent_replica_writer_push(in->wr, d->data, d->len)) != 0 && rc != -EPIPE) {
        /* a sender keeping its window never passes a window unwritten (WINDOW, open_target) */
        in_refuse(r, in, d->xfer,
                  rc == -ENOBUFS ? "the sender went past its window" : strerror(-rc));
        return;
    }
    in->got += d->len;
    if (in->got == in->xsize) {
        in->received_ms = uv_now(r->loop);
        agent_replica_writer_finish(in->wr); /* verified, made durable, renamed: DONE or FAILED */
    }
}

static void on_data(struct agent_replica *r, const struct rdzv_repl_data *d)
{
    struct agent_replica_in *in = find_in(r, d->xfer);

    if (in == NULL)
        return;     /* ended here already; the server was told */
    if (in->direct) /* the server refuses these: not from it */
        in_refuse(r, in, d->xfer, "relayed chunk of a copy on a direct link");
    else
        on_chunk(r, in, d);
}

/* --- what the direct links tell (replica_link.h's callbacks) ---------------------------------- */

static void send_link_progress(struct agent_replica *r, struct agent_replica_in *in)
{
    struct rdzv_msg m;

    rdzv_msg_init(&m, RDZV_MSG_REPL_ACK);
    m.u.repl_ack.xfer = in->link_id;
    m.u.repl_ack.offset = in->acked;
    m.u.repl_ack.status = RDZV_REPL_PROGRESS;
    if (agent_replica_link_send(in->link, &m) != 0)
        ask_relay(r, in, "the link failed");
}

/* An accepted link is the sender's, bound to an out; a link this agent dialed carries an in. */
static struct agent_replica_out *link_out(const struct agent_replica_link *l)
{
    return l->dialed ? NULL : l->owner;
}

static struct agent_replica_in *link_in(const struct agent_replica_link *l)
{
    return l->dialed ? l->owner : NULL;
}

/* --- the bulk streams (replica_bulk.h) ------------------------------------------------------ */

static void on_bulk_out(void *data, enum agent_replica_bulk_event ev, const char *why)
{
    struct agent_replica_out *o = data;
    struct agent_replica *r = o->owner;

    if (ev == AGENT_REPLICA_BULK_SENT) {
        o->sent = r->xsize; /* the receiver's DONE comes through the server */
        return;
    }
    logf_(r, "checkpoint %s: the bulk streams to group rank %" PRIu32 " failed: %s", r->cur.name,
          o->rank, why);
    agent_replica_bulk_close(o->bulk);
    o->bulk = NULL;
    agent_replica_link_close(o->link); /* its receiver sees it go and asks for the relay */
    o->link = NULL;
}

/* The receiver of o named its copy on the link: the chunks go on bulk streams instead, offered
 * on the link (the receiver's hello on each proves the key). Where they cannot be served the
 * chunks go on the link, as before. */
static void bulk_out(struct agent_replica *r, struct agent_replica_out *o, unsigned slot)
{
    unsigned port = r->net.bind_port != 0 ? r->net.bind_port + 1 + slot : 0;
    struct rdzv_msg m;
    uint16_t got_port = 0;
    unsigned copies = 0;
    int rc;

    rdzv_msg_init(&m, RDZV_MSG_REPL_ACK);
    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES; i++)
        copies += r->out[i].active;
    /* --replicate-bandwidth is the node's: each copy on bulk streams gets its share */
    rc = agent_replica_bulk_serve(
        r->loop, r->net.bind_addr, port, r->link_key, o->xfer, r->bulk_streams, r->xsize,
        r->bytes_per_ms / (copies > 0 ? copies : 1), r->fd, r->src.dirfd >= 0 ? &r->src : NULL,
        on_bulk_out, o, &o->bulk, &got_port, m.u.repl_ack.bulk_salt);
    if (rc != 0) {
        if (!r->bulk_warned)
            logf_(r, "checkpoint replicas stay on the TLS link: no bulk streams (port %u: %s)",
                  port, strerror(-rc));
        r->bulk_warned = 1;
        o->bulk = NULL;
        return;
    }
    m.u.repl_ack.xfer = o->xfer;
    m.u.repl_ack.status = RDZV_REPL_BULK;
    m.u.repl_ack.bulk_port = got_port;
    m.u.repl_ack.bulk_streams = r->bulk_streams;
    rc = agent_replica_link_send(o->link, &m);
    memset(m.u.repl_ack.bulk_salt, 0, sizeof(m.u.repl_ack.bulk_salt));
    if (rc != 0) {
        agent_replica_bulk_close(o->bulk);
        o->bulk = NULL;
        agent_replica_link_close(o->link);
        o->link = NULL;
    }
}

static void on_bulk_in(void *data, enum agent_replica_bulk_event ev, const char *why)
{
    struct agent_replica_in *in = data;
    struct agent_replica *r = in->r;

    if (ev == AGENT_REPLICA_BULK_RECEIVED) {
        in->got = in->xsize; /* every byte is with the writer */
        in->received_ms = uv_now(r->loop);
        agent_replica_bulk_times(in->bulk, in->bulk_times, sizeof(in->bulk_times));
        agent_replica_writer_finish(in->wr);
        return;
    }
    agent_replica_bulk_close(in->bulk);
    in->bulk = NULL;
    if (ev == AGENT_REPLICA_BULK_REFUSED)
        in_refuse(r, in, in->xfer, why);
    else
        ask_relay(r, in, why);
}

static void bulk_in(struct agent_replica *r, struct agent_replica_in *in,
                    const struct rdzv_repl_ack *a)
{
    int rc;

    agent_replica_writer_set_max(in->wr, AGENT_REPLICA_BULK_WINDOW);
    rc = agent_replica_bulk_fetch(r->loop, in->host, a->bulk_port, in->key, a->bulk_salt,
                                  in->link_id, a->bulk_streams, in->xsize, in->wr, on_bulk_in, in,
                                  &in->bulk);
    if (rc != 0) {
        in->bulk = NULL;
        ask_relay(r, in, strerror(-rc));
    }
}

static int link_named(void *data, struct agent_replica_link *l, uint32_t xfer)
{
    struct agent_replica *r = data;

    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES; i++) {
        struct agent_replica_out *o = &r->out[i];

        if (o->active && o->direct && o->link == NULL && o->xfer == xfer) {
            o->link = l;
            l->owner = o;
            if (o->bulk == NULL && o->sent == 0 && r->bulk_streams > 0)
                bulk_out(r, o, i);
            if (o->bulk == NULL)
                pump(r);
            return 0;
        }
    }
    return -1;
}

static void link_msg(void *data, struct agent_replica_link *l, const struct rdzv_msg *m)
{
    struct agent_replica *r = data;
    struct agent_replica_out *o = link_out(l);
    struct agent_replica_in *in = link_in(l);

    if (o != NULL && o->bulk != NULL && m->type == RDZV_MSG_REPL_ACK &&
        m->u.repl_ack.xfer == o->xfer && m->u.repl_ack.status == RDZV_REPL_PROGRESS &&
        m->u.repl_ack.offset <= r->xsize) {
        if (m->u.repl_ack.offset > o->acked)
            o->acked = m->u.repl_ack.offset;
        agent_replica_bulk_confirmed(o->bulk, o->acked); /* ignores more than was sent */
    } else if (o != NULL && m->type == RDZV_MSG_REPL_ACK && m->u.repl_ack.xfer == o->xfer &&
               m->u.repl_ack.status == RDZV_REPL_PROGRESS && m->u.repl_ack.offset <= o->sent) {
        if (m->u.repl_ack.offset > o->acked)
            o->acked = m->u.repl_ack.offset;
        pump(r);
    } else if (in != NULL && m->type == RDZV_MSG_REPL_DATA && m->u.repl_data.xfer == in->link_id &&
               in->bulk == NULL) {
        on_chunk(r, in, &m->u.repl_data);
    } else if (in != NULL && m->type == RDZV_MSG_REPL_ACK && m->u.repl_ack.xfer == in->link_id &&
               m->u.repl_ack.status == RDZV_REPL_BULK && in->bulk == NULL && in->got == 0) {
        bulk_in(r, in, &m->u.repl_ack);
    } else if (in != NULL) {
        ask_relay(r, in, "the sender sent something else than the copy");
    } else if (o != NULL) {
        o->link = NULL; /* its receiver asks for the relay once the link is gone */
        agent_replica_link_close(l);
    }
}

static void link_failed(void *data, struct agent_replica_link *l, const char *why)
{
    struct agent_replica_out *o = link_out(l);
    struct agent_replica_in *in = link_in(l);

    l->owner = NULL;
    if (o != NULL) {
        o->link = NULL; /* the receiver sees it too, and asks for the relay */
    } else if (in != NULL) {
        in->link = NULL;
        ask_relay(data, in, why);
    }
}

static const struct agent_replica_link_cbs link_cbs = {
    .named = link_named,
    .msg = link_msg,
    .failed = link_failed,
};

void agent_replica_on_msg(struct agent_replica *r, const struct rdzv_msg *m)
{
    struct agent_replica_in *in;

    switch (m->type) {
    case RDZV_MSG_REPL_BEGIN:
        on_begin(r, &m->u.repl_begin);
        break;
    case RDZV_MSG_REPL_DATA:
        on_data(r, &m->u.repl_data);
        break;
    case RDZV_MSG_REPL_ACK:
        if (m->u.repl_ack.xfer & XFER_OURS) {
            on_ack_out(r, &m->u.repl_ack);
        } else if ((in = find_in(r, m->u.repl_ack.xfer)) != NULL) {
            logf_(r, "replica of checkpoint %s abandoned: %s", in->e.name, m->u.repl_ack.text);
            in_end(in);
        }
        break;
    default:
        break;
    }
}

/* --- life cycle ----------------------------------------------------------------------------- */

/* This host's name as temporary names carry it: letters, digits and '-' only. */
static void host_tag(char *out, size_t len)
{
    char h[256] = "";
    size_t n = 0;

    (void)gethostname(h, sizeof(h) - 1);
    for (const char *p = h; *p != '\0' && n + 1 < len; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-')
            out[n++] = *p;
    if (n == 0)
        out[n++] = 'h';
    out[n] = '\0';
}

/* The pid in name when it is a temporary name of this host's (TMP_PREFIX HOST.PID.XXXXXX) and
 * not of this agent; 0 otherwise. */
static long leftover_pid(const struct agent_replica *r, const char *name)
{
    size_t plen = strlen(TMP_PREFIX), hlen = strlen(r->host);
    const char *p;
    char *end;
    long pid;

    if (strncmp(name, TMP_PREFIX, plen) != 0 || strncmp(name + plen, r->host, hlen) != 0 ||
        name[plen + hlen] != '.')
        return 0;
    p = name + plen + hlen + 1;
    pid = strtol(p, &end, 10);
    if (end == p || *end != '.' || pid <= 0 || pid == (long)getpid())
        return 0;
    return pid;
}

/* Removes name, in dfd, of the agent pid if it is dead. In a shared (sticky) --checkpoint-dir
 * another local user can plant such a name, e.g. a symlink to a file outside that was once
 * removed through: the entry is looked at without following it, only this agent's user's is
 * removed (common/saferm.h, never through a link), and what stays is logged. */
static void sweep_one(struct agent_replica *r, int dfd, const char *name, long pid)
{
    char why[PATH_MAX];
    struct stat st;
    int rc;

    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
        return; /* alive (EPERM: alive, another user's) */
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    if (st.st_uid != geteuid()) {
        logf_(r, "not removing %s: owned by uid %u, not by you (uid %u)", name, (unsigned)st.st_uid,
              (unsigned)geteuid());
        return;
    }
    rc = mc_rm_at(dfd, name, 0, why, sizeof(why));
    if (rc == 0)
        logf_(r, "removed %s: a replica whose receiving agent (pid %ld) stopped", name, pid);
    else if (rc != -ENOENT)
        logf_(r, "cannot remove all of %s: %s", name, why);
}

/* Removes the temporary files of copies that agents of this host were receiving when they
 * died (a crash, SIGKILL, a power cut): their process is gone. Files of other hosts (a shared
 * directory) and of live agents are left alone. The directory is the one ckptwatch checked
 * (mc_dir_open); its entries are reached only through its descriptor. */
static void sweep_leftovers(struct agent_replica *r)
{
    int fd = open(r->watch->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    long pid;

    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((de = readdir(d)) != NULL)
        if ((pid = leftover_pid(r, de->d_name)) > 0)
            sweep_one(r, dirfd(d), de->d_name, pid);
    closedir(d);
}

int agent_replica_init(uv_loop_t *loop, struct agent_replica *r, struct agent_ckptwatch *watch,
                       unsigned copies, double mb_per_s, const struct agent_replica_cbs *cbs,
                       void *data)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    agent_replica_src_init(&r->src);
    r->msg = malloc(sizeof(*r->msg));
    if (r->msg == NULL)
        return -ENOMEM;
    rdzv_msg_init(r->msg, RDZV_MSG_REPL_DATA);
    r->watch = watch;
    r->copies = copies > AGENT_REPLICA_MAX_COPIES ? AGENT_REPLICA_MAX_COPIES : copies;
    r->bytes_per_ms = mb_per_s * 1000.0;
    r->cbs = *cbs;
    r->data = data;
    host_tag(r->host, sizeof(r->host));
    sweep_leftovers(r);
    r->loop = loop;
    uv_timer_init(loop, &r->pace);
    r->pace.data = r;
    agent_replica_net_init(loop, &r->net, &link_cbs, r);
    uv_timer_init(loop, &r->retry);
    r->retry.data = r;
    uv_timer_init(loop, &r->drain);
    r->drain.data = r;
    r->tokens_ms = uv_now(loop);
    r->bulk_streams = agent_replica_bulk_streams();
    r->open = 1;
    return 0;
}

void agent_replica_bind(struct agent_replica *r, const char *addr, unsigned port)
{
    agent_replica_net_bind(&r->net, addr, port);
}

void agent_replica_reset(struct agent_replica *r)
{
    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES; i++)
        if (r->out[i].active)
            out_failed(r, &r->out[i], "the connection to the rendezvous server broke");
    for (unsigned i = 0; i < AGENT_REPLICA_MAX_IN; i++)
        if (r->in[i].active)
            in_end(&r->in[i]);
}

void agent_replica_close(struct agent_replica *r)
{
    if (!r->open)
        return;
    r->open = 0; /* nothing is tried again */
    r->drain_cb = NULL;
    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES; i++)
        r->out[i].retry_ms = 0;
    agent_replica_reset(r);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    agent_replica_src_close(&r->src);
    free(r->msg);
    r->msg = NULL;
    r->open = 0;
    agent_replica_net_close(&r->net);
    uv_close((uv_handle_t *)&r->pace, NULL);
    uv_close((uv_handle_t *)&r->retry, NULL);
    uv_close((uv_handle_t *)&r->drain, NULL);
}
