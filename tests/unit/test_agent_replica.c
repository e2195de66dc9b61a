/* agent/replica.c and replica_link.c on a private loop: a sender (group rank 0) and a receiver,
 * each with its own checkpoint directory, joined by a stand-in for the rendezvous server that
 * passes REPL_* messages on as handler_repl.c does (its own transfer id towards the receiver,
 * the address 127.0.0.1). Checked: a copy goes on the direct link (no chunk through the
 * server) and is byte-identical; a link that cannot be set up (nothing on the port, a wrong
 * key) makes the receiver ask for the relay and the copy still arrives; hostile connections to
 * the sender's port (garbage, another key, the right key naming another transfer) are closed
 * and do not disturb the copy; a flood of silent connections is turned away and costs the
 * relay, never the copy; leftovers of a receiving agent that died are removed at start; a
 * directory checkpoint is copied as one stream (direct or relayed), one holding a symlink is
 * not, and the receiver's stream parser refuses hostile paths, order and truncation; the
 * original's mode travels with the copy (and a sender before modes means 0600 / 0700). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>
#include <xxhash.h>

#include "ckpt_hash.h"
#include "ckptwatch.h"
#include "conn.h"
#include "cred.h"
#include "harness.h"
#include "replica.h"
#include "replica_dir.h"
#include "tls.h"

#define SIZE (3u * 1024 * 1024 + 12345) /* over several windows of the relay, not a whole chunk */
#define SRV_ID 7u                       /* the stand-in server's transfer id */
#define QMAX 512

enum side { SENDER, RECEIVER };

struct fixture {
    uv_loop_t loop;
    struct harness h;
    char tmp[128], dir[2][256];
    struct agent_ckptwatch w[2];
    struct agent_replica r[2];
    /* the stand-in server */
    uv_idle_t pump;
    struct {
        enum side to;
        struct rdzv_msg *m;
    } q[QMAX];
    unsigned qn;
    int hold; /* keep messages for the receiver queued */
    int break_port, break_key;
    int abort_begins; /* answer this many REPL_BEGINs with an ABORT, as when the receiver
                         had just lost its connection */
    unsigned begins;
    uint32_t src_xfer; /* the sender's id of the copy */
    uint8_t key[32];   /* the key its REPL_BEGIN named */
    uint16_t port;
    int direct;        /* as handler_repl.c: chunks must not come through here */
    int strip_mode;    /* pass REPL_BEGIN on without its mode, as a sender before modes sent it */
    uint32_t lie_rank; /* added to the sender's group rank of a part's REPL_BEGIN */
    int drains;        /* agent_replica_drain's callbacks */
    unsigned relayed, relay_asked, refused, dones, aborts;
    /* the receiver */
    int stored;
    char log[2][64][512];
    int n_log[2];
    int closed;
};

static struct fixture *the;

static int logged(struct fixture *fx, enum side s, const char *text)
{
    for (int i = 0; i < fx->n_log[s] && i < 64; i++)
        if (strstr(fx->log[s][i], text) != NULL)
            return 1;
    return 0;
}

static void show_logs(void *data)
{
    struct fixture *fx = data;

    for (int s = 0; s < 2; s++)
        for (int i = 0; i < fx->n_log[s] && i < 64; i++)
            fprintf(stderr, "  %s: %s\n", s == SENDER ? "sender" : "receiver", fx->log[s][i]);
}

static void queue(struct fixture *fx, enum side to, const struct rdzv_msg *m)
{
    assert_true(fx->qn < QMAX);
    fx->q[fx->qn].to = to;
    fx->q[fx->qn].m = malloc(sizeof(*m));
    assert_non_null(fx->q[fx->qn].m);
    memcpy(fx->q[fx->qn].m, m, sizeof(*m));
    fx->qn++;
}

/* A port nothing listens on: bound, then closed. */
static uint16_t dead_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* What handler_repl.c does with each message, minus the checks the server tests cover. */
static int from_sender(void *data, const struct rdzv_msg *m)
{
    struct fixture *fx = data;
    struct rdzv_msg c = *m;

    switch (m->type) {
    case RDZV_MSG_REPL_BEGIN:
        fx->begins++;
        if (fx->abort_begins > 0) {
            fx->abort_begins--;
            rdzv_msg_init(&c, RDZV_MSG_REPL_ACK);
            c.u.repl_ack.xfer = m->u.repl_begin.xfer;
            c.u.repl_ack.status = RDZV_REPL_ABORT;
            snprintf(c.u.repl_ack.text, sizeof(c.u.repl_ack.text), "the receiving node went away");
            queue(fx, SENDER, &c);
            return 0;
        }
        fx->src_xfer = m->u.repl_begin.xfer;
        fx->direct = m->u.repl_begin.port != 0;
        fx->port = (uint16_t)m->u.repl_begin.port;
        memcpy(fx->key, m->u.repl_begin.key, sizeof(fx->key));
        c.u.repl_begin.xfer = SRV_ID;
        /* the server names the sender's group rank: a part's writer (fx->lie_rank: another) */
        c.u.repl_begin.rank = m->u.repl_begin.part ? m->u.repl_begin.part - 1 + fx->lie_rank : 0;
        snprintf(c.u.repl_begin.host, sizeof(c.u.repl_begin.host), "127.0.0.1");
        if (fx->break_port)
            c.u.repl_begin.port = dead_port();
        if (fx->break_key)
            c.u.repl_begin.key[0] ^= 1;
        if (fx->strip_mode)
            c.u.repl_begin.mode = 0;
        break;
    case RDZV_MSG_REPL_DATA:
        if (fx->direct) {
            fx->refused++;
            return 0;
        }
        fx->relayed++;
        c.u.repl_data.xfer = SRV_ID;
        break;
    case RDZV_MSG_REPL_ACK:
        c.u.repl_ack.xfer = SRV_ID;
        break;
    default:
        fail_msg("the sender sent message type %u", m->type);
    }
    queue(fx, RECEIVER, &c);
    return 0;
}

static int from_receiver(void *data, const struct rdzv_msg *m)
{
    struct fixture *fx = data;
    struct rdzv_msg c = *m;

    assert_int_equal(m->type, RDZV_MSG_REPL_ACK);
    assert_int_equal(m->u.repl_ack.xfer, SRV_ID);
    if (m->u.repl_ack.status == RDZV_REPL_RELAY) {
        fx->relay_asked++;
        fx->direct = 0;
    }
    fx->dones += m->u.repl_ack.status == RDZV_REPL_DONE;
    fx->aborts += m->u.repl_ack.status == RDZV_REPL_ABORT;
    c.u.repl_ack.xfer = fx->src_xfer;
    queue(fx, SENDER, &c);
    return 0;
}

static void on_pump(uv_idle_t *idle)
{
    struct fixture *fx = idle->data;
    unsigned i, kept = 0;

    for (i = 0; i < fx->qn; i++) {
        if (fx->hold && fx->q[i].to == RECEIVER) {
            fx->q[kept++] = fx->q[i];
            continue;
        }
        agent_replica_on_msg(&fx->r[fx->q[i].to], fx->q[i].m);
        free(fx->q[i].m);
    }
    fx->qn = kept; /* the loop also took what was queued while it delivered */
}

static void log_sender(void *data, enum mc_log_level level, const char *line)
{
    struct fixture *fx = data;

    (void)level;
    snprintf(fx->log[SENDER][fx->n_log[SENDER]++ % 64], 512, "%s", line);
}

static void log_receiver(void *data, enum mc_log_level level, const char *line)
{
    struct fixture *fx = data;

    (void)level;
    snprintf(fx->log[RECEIVER][fx->n_log[RECEIVER]++ % 64], 512, "%s", line);
}

static void stored(void *data, const struct agent_ckpt_entry *e)
{
    struct fixture *fx = data;

    (void)e;
    fx->stored++;
}

static void ck_log(void *data, enum mc_log_level level, const char *line)
{
    (void)data;
    (void)level;
    (void)line;
}

static const struct agent_ckptwatch_cbs ck_cbs = {.log = ck_log};
static const struct agent_replica_cbs sender_cbs = {.send = from_sender, .log = log_sender};
static const struct agent_replica_cbs receiver_cbs = {
    .send = from_receiver, .stored = stored, .log = log_receiver};

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    the = &fx;
    harness_init_tmp(&fx.h, &fx.loop, 30000, fx.tmp, sizeof(fx.tmp), "replica");
    fx.h.explain = show_logs;
    fx.h.data = &fx;
    for (int s = 0; s < 2; s++) {
        snprintf(fx.dir[s], sizeof(fx.dir[s]), "%s/%s", fx.tmp, s == SENDER ? "a" : "b");
        assert_int_equal(agent_ckptwatch_init(&fx.loop, &fx.w[s], fx.dir[s], 0, &ck_cbs, &fx), 0);
        agent_ckptwatch_set_recording(&fx.w[s], 1);
    }
    assert_int_equal(
        agent_replica_init(&fx.loop, &fx.r[SENDER], &fx.w[SENDER], 1, 0, &sender_cbs, &fx), 0);
    assert_int_equal(
        agent_replica_init(&fx.loop, &fx.r[RECEIVER], &fx.w[RECEIVER], 0, 0, &receiver_cbs, &fx),
        0);
    fx.r[SENDER].bulk_streams = 0; /* the TLS link's chunks; setup_bulk for the bulk path */
    uv_idle_init(&fx.loop, &fx.pump);
    fx.pump.data = &fx;
    uv_idle_start(&fx.pump, on_pump);
    *state = &fx;
    return 0;
}

/* The same, with the chunks of a direct link on 2 bulk streams (replica_bulk.h). */
static int setup_bulk(void **state)
{
    setup(state);
    ((struct fixture *)*state)->r[SENDER].bulk_streams = 2;
    return 0;
}

static void ck_closed(void *data)
{
    ((struct fixture *)data)->closed++;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    agent_replica_close(&fx->r[SENDER]);
    agent_replica_close(&fx->r[RECEIVER]);
    for (int s = 0; s < 2; s++)
        agent_ckptwatch_close(&fx->w[s], ck_closed);
    for (unsigned i = 0; i < fx->qn; i++)
        free(fx->q[i].m);
    uv_close((uv_handle_t *)&fx->pump, NULL);
    harness_close(&fx->h);
    harness_loop_close(&fx->loop);
    harness_rmtree(fx->tmp);
    return 0;
}

/* Writes SIZE random bytes as ckpt_5.pt in the sender's directory and offers it. */
static void offer(struct fixture *fx, uint8_t **content)
{
    struct agent_ckpt_entry e = {.name = "ckpt_5.pt", .step = 5, .size = SIZE};
    char path[512];
    uint8_t *b = malloc(SIZE);
    int fd;

    assert_non_null(b);
    for (size_t off = 0; off < SIZE;) {
        ssize_t n = getrandom(b + off, SIZE - off, 0);

        assert_true(n > 0);
        off += (size_t)n;
    }
    snprintf(path, sizeof(path), "%s/ckpt_5.pt", fx->dir[SENDER]);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, SIZE), (ssize_t)SIZE);
    close(fd);
    e.checksum = XXH3_64bits(b, SIZE);
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    *content = b;
}

/* The receiver's copy is in place, byte for byte, and no temporary file is left. */
static void check_copy(struct fixture *fx, const uint8_t *content)
{
    char path[512], buf[400];
    uint8_t *got = malloc(SIZE + 1);
    long n;
    int fd;

    HARNESS_RUN_UNTIL(&fx->h, fx->stored == 1 && logged(fx, SENDER, "replicated to group rank 1"));
    snprintf(path, sizeof(path), "%s/ckpt_5.pt", fx->dir[RECEIVER]);
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    n = read(fd, got, SIZE + 1);
    close(fd);
    assert_int_equal(n, SIZE);
    assert_memory_equal(got, content, SIZE);
    free(got);
    snprintf(buf, sizeof(buf), "ls -A %s | grep -q '^.muster-replica'", fx->dir[RECEIVER]);
    assert_int_not_equal(system(buf), 0);
    assert_int_equal(fx->refused, 0);
}

static void test_direct(void **state)
{
    struct fixture *fx = *state;
    uint8_t *content;

    offer(fx, &content);
    check_copy(fx, content);
    assert_true(fx->port != 0);
    assert_int_equal(fx->relayed, 0); /* not one chunk through the server */
    assert_int_equal(fx->relay_asked, 0);
    assert_int_equal(fx->dones, 1);
    assert_true(logged(fx, SENDER, "direct link"));
    free(content);
}

static void test_nothing_on_port_relays(void **state)
{
    struct fixture *fx = *state;
    uint8_t *content;

    fx->break_port = 1;
    offer(fx, &content);
    check_copy(fx, content);
    assert_int_equal(fx->relay_asked, 1);
    assert_true(fx->relayed >= SIZE / RDZV_REPL_CHUNK_MAX);
    assert_true(logged(fx, RECEIVER, "asking the server to relay it"));
    assert_true(logged(fx, SENDER, "through the server"));
    free(content);
}

static void test_wrong_key_relays(void **state)
{
    struct fixture *fx = *state;
    uint8_t *content;

    fx->break_key = 1;
    offer(fx, &content);
    check_copy(fx, content);
    assert_int_equal(fx->relay_asked, 1);
    assert_true(fx->relayed > 0);
    free(content);
}

/* A copy that failed is started again (1 s, then 4 s later), at most AGENT_REPLICA_TRIES
 * times in all. */
static void test_failed_copy_tried_again(void **state)
{
    struct fixture *fx = *state;
    uint8_t *content;

    fx->abort_begins = 1;
    offer(fx, &content);
    check_copy(fx, content);
    assert_int_equal(fx->begins, 2);
    assert_true(logged(fx, SENDER,
                       "not replicated to group rank 1 yet: the receiving node went "
                       "away; trying again in 1000 ms (attempt 2 of 3)"));
    free(content);
}

static void test_gives_up_after_the_tries(void **state)
{
    struct fixture *fx = *state;
    uint8_t *content;

    fx->abort_begins = 3;
    offer(fx, &content);
    HARNESS_RUN_UNTIL(&fx->h, logged(fx, SENDER,
                                     "ckpt_5.pt not replicated to group rank 1: the "
                                     "receiving node went away"));
    assert_int_equal(fx->begins, 3);
    harness_run_for(&fx->h, 200);
    assert_int_equal(fx->begins, 3);
    assert_int_equal(fx->stored, 0);
    free(content);
}

/* --replicate-port: the link listens there; a port taken by something else means the relay
 * (said once), never a lost copy. */
static void test_fixed_port(void **state)
{
    struct fixture *fx = *state;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    uint16_t free_port = dead_port();
    uint8_t *content;
    int taken = socket(AF_INET, SOCK_STREAM, 0);

    assert_int_equal(bind(taken, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(taken, 1), 0);
    assert_int_equal(getsockname(taken, (struct sockaddr *)&a, &n), 0);
    agent_replica_bind(&fx->r[SENDER], "127.0.0.1", ntohs(a.sin_port));
    offer(fx, &content);
    check_copy(fx, content);
    assert_int_equal(fx->port, 0); /* REPL_BEGIN named no link */
    assert_true(fx->relayed > 0);
    assert_true(logged(fx, SENDER, "no direct link (Address already in use)"));
    close(taken);
    free(content);

    /* a fresh sender on a free fixed port serves there */
    agent_replica_close(&fx->r[SENDER]);
    harness_run_for(&fx->h, 50); /* its handles finish closing before the memory is reused */
    assert_int_equal(
        agent_replica_init(&fx->loop, &fx->r[SENDER], &fx->w[SENDER], 1, 0, &sender_cbs, fx), 0);
    agent_replica_bind(&fx->r[SENDER], "127.0.0.1", free_port);
    fx->stored = 0;
    fx->n_log[SENDER] = 0;
    fx->relayed = 0;
    offer(fx, &content);
    HARNESS_RUN_UNTIL(&fx->h, fx->stored == 1 && logged(fx, SENDER, "replicated to group rank 1"));
    assert_int_equal(fx->port, free_port);
    assert_int_equal(fx->relayed, 0);
    free(content);
}

/* --- hostile peers on the sender's port ------------------------------------------------------ */

static int raw_connect(uint16_t port)
{
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* 1 once the peer closed fd (EOF or reset), 0 while it is open. */
static int raw_closed(int fd)
{
    char b[512];
    ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);

    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

struct probe {
    struct rdzv_conn conn;
    struct rdzv_tls *tls;
    uv_connect_t req;
    uint32_t name; /* the transfer it names */
    int err, closed;
};

static void probe_error(struct rdzv_conn *c, int err)
{
    ((struct probe *)c->data)->err = err ? err : -1;
}

static void probe_msg(struct rdzv_conn *c, const struct rdzv_msg *m)
{
    (void)c;
    fail_msg("a probe got message type %u from the sender", m->type);
}

static void probe_connected(uv_connect_t *req, int status)
{
    struct probe *p = req->data;
    struct rdzv_msg hello;

    assert_int_equal(status, 0);
    assert_int_equal(rdzv_conn_start_tls(&p->conn, p->tls, 0), 0);
    rdzv_msg_init(&hello, RDZV_MSG_REPL_ACK);
    hello.u.repl_ack.xfer = p->name;
    hello.u.repl_ack.status = RDZV_REPL_PROGRESS;
    assert_int_equal(rdzv_conn_send(&p->conn, &hello), 0);
}

/* A TLS client keyed with key (as the link's: identity job:replica) naming transfer name. */
static void probe_start(struct fixture *fx, struct probe *p, const uint8_t key[32], uint32_t name,
                        int ecdhe)
{
    struct rdzv_cred c = {.kind = RDZV_CRED_JOB, .scope = "replica"};
    char text[RDZV_CRED_TEXT_MAX + 1], err[160];
    struct rdzv_tls_opts o = {.token = text, .no_forward_secrecy = !ecdhe, .bulk = !ecdhe};
    struct sockaddr_in a;

    memset(p, 0, sizeof(*p));
    memcpy(c.key, key, sizeof(c.key));
    assert_int_equal(rdzv_cred_format(&c, text, sizeof(text)), 0);
    assert_int_equal(rdzv_tls_new(&o, 0, &p->tls, err, sizeof(err)), 0);
    assert_int_equal(rdzv_conn_init(&fx->loop, &p->conn, probe_msg, probe_error, p), 0);
    p->name = name;
    p->req.data = p;
    uv_ip4_addr("127.0.0.1", fx->port, &a);
    assert_int_equal(uv_tcp_connect(&p->req, &p->conn.tcp, (struct sockaddr *)&a, probe_connected),
                     0);
}

static void probe_closed(struct rdzv_conn *c)
{
    struct probe *p = c->data;

    rdzv_tls_free(p->tls);
    p->closed = 1;
}

static void test_hostile_connections(void **state)
{
    struct fixture *fx = *state;
    struct probe wrong_key, wrong_name, ecdhe;
    uint8_t *content, other[32];
    int garbage;

    fx->hold = 1; /* the receiver hears of the copy only after the probes */
    offer(fx, &content);
    HARNESS_RUN_UNTIL(&fx->h, fx->port != 0);
    garbage = raw_connect(fx->port);
    assert_int_equal(write(garbage, "GET / HTTP/1.0\r\n\r\n", 18), 18);
    memcpy(other, fx->key, sizeof(other));
    other[31] ^= 0x80;
    probe_start(fx, &wrong_key, other, fx->src_xfer, 0);
    probe_start(fx, &wrong_name, fx->key, fx->src_xfer ^ 1, 0);
    /* ECDHE suites only (the key itself, even): the link makes no key pair for anyone */
    probe_start(fx, &ecdhe, fx->key, fx->src_xfer, 1);
    HARNESS_RUN_UNTIL(&fx->h, raw_closed(garbage) && wrong_key.err != 0 && wrong_name.err != 0 &&
                                  ecdhe.err != 0);
    close(garbage);
    rdzv_conn_close(&wrong_key.conn, 0, probe_closed);
    rdzv_conn_close(&wrong_name.conn, 0, probe_closed);
    rdzv_conn_close(&ecdhe.conn, 0, probe_closed);
    HARNESS_RUN_UNTIL(&fx->h, wrong_key.closed && wrong_name.closed && ecdhe.closed);
    fx->hold = 0;
    check_copy(fx, content);
    assert_int_equal(fx->relay_asked, 0); /* still on the direct link */
    assert_int_equal(fx->relayed, 0);
    free(content);
}

/* A receiver that acknowledges what it never reads (same key: a member of the job): it
 * names the copy, stops reading after the first chunk and acknowledges every byte the sender
 * says it sent. The sender's queue towards it stays within AGENT_REPLICA_LINK_QUEUE_MAX (it
 * grew to the size of the checkpoint) and the sender stops sending. */
#define LIAR_SIZE (96u << 20)

struct liar {
    struct probe p;
    struct fixture *fx;
    uv_timer_t ack;
    unsigned chunks;
    int stopped;
    size_t max_unsent;
};

static void liar_msg(struct rdzv_conn *c, const struct rdzv_msg *m)
{
    struct liar *l = (struct liar *)c->data;

    assert_int_equal(m->type, RDZV_MSG_REPL_DATA);
    l->chunks++;
    if (!l->stopped) {
        l->stopped = 1;
        uv_read_stop((uv_stream_t *)&c->tcp); /* the kernel's buffers fill, then the sender's */
    }
}

static struct agent_replica_out *linked_out(struct fixture *fx)
{
    for (unsigned i = 0; i < AGENT_REPLICA_MAX_COPIES; i++)
        if (fx->r[SENDER].out[i].active && fx->r[SENDER].out[i].link != NULL)
            return &fx->r[SENDER].out[i];
    return NULL;
}

static void liar_ack(uv_timer_t *t)
{
    struct liar *l = t->data;
    struct agent_replica_out *o = linked_out(l->fx);
    struct rdzv_msg a;

    if (o == NULL || !l->stopped)
        return;
    if (rdzv_conn_unsent(&o->link->conn) > l->max_unsent)
        l->max_unsent = rdzv_conn_unsent(&o->link->conn);
    rdzv_msg_init(&a, RDZV_MSG_REPL_ACK);
    a.u.repl_ack.xfer = l->fx->src_xfer;
    a.u.repl_ack.status = RDZV_REPL_PROGRESS;
    a.u.repl_ack.offset = o->sent; /* "written", all of it */
    (void)rdzv_conn_send(&l->p.conn, &a);
}

static void test_liar_receiver_bounded(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckpt_entry e = {.name = "ckpt_9.pt", .step = 9, .size = LIAR_SIZE};
    static struct liar l;
    struct agent_replica_out *o;
    char path[512];
    int fd;

    snprintf(path, sizeof(path), "%s/ckpt_9.pt", fx->dir[SENDER]);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, LIAR_SIZE), 0);
    close(fd);
    fx->hold = 1; /* the real receiver never hears of the copy */
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    HARNESS_RUN_UNTIL(&fx->h, fx->port != 0);
    memset(&l, 0, sizeof(l));
    probe_start(fx, &l.p, fx->key, fx->src_xfer, 0);
    l.p.conn.msg_cb = liar_msg;
    l.p.conn.data = &l;
    l.fx = fx;
    uv_timer_init(&fx->loop, &l.ack);
    l.ack.data = &l;
    uv_timer_start(&l.ack, liar_ack, 1, 1);
    HARNESS_RUN_UNTIL(&fx->h, l.stopped);
    harness_run_for(&fx->h, 1500);
    o = linked_out(fx);
    assert_non_null(o);
    assert_true(l.max_unsent > 0);
    assert_true(l.max_unsent <= AGENT_REPLICA_LINK_QUEUE_MAX + RDZV_REPL_CHUNK_MAX + 4096);
    assert_true(rdzv_conn_unsent(&o->link->conn) <=
                AGENT_REPLICA_LINK_QUEUE_MAX + RDZV_REPL_CHUNK_MAX + 4096);
    assert_true(o->sent < LIAR_SIZE / 2); /* it waits: the socket took nothing more */
    uv_timer_stop(&l.ack);
    uv_close((uv_handle_t *)&l.ack, NULL);
    rdzv_conn_close(&l.p.conn, 0, probe_closed);
    HARNESS_RUN_UNTIL(&fx->h, l.p.closed);
}

/* More silent connections than may wait: the extra ones are closed at once, the waiting ones
 * when their set-up time is over; the receiver, turned away meanwhile, gets its copy relayed. */
static void test_flood_costs_the_relay_not_the_copy(void **state)
{
    struct fixture *fx = *state;
    enum { N = 20 };
    int fd[N], closed = 0;
    uint8_t *content;

    fx->hold = 1;
    offer(fx, &content);
    HARNESS_RUN_UNTIL(&fx->h, fx->port != 0);
    for (int i = 0; i < N; i++) {
        fd[i] = raw_connect(fx->port);
        harness_run_for(&fx->h, 10); /* the sender accepts it */
    }
    harness_run_for(&fx->h, 300);
    for (int i = 0; i < N; i++)
        closed += raw_closed(fd[i]);
    assert_int_equal(closed, N - 16); /* AGENT_REPLICA_LINK_PENDING_MAX wait their turn */
    fx->hold = 0;
    check_copy(fx, content);
    assert_int_equal(fx->relay_asked, 1);
    HARNESS_RUN_UNTIL(&fx->h, ({
        int all = 1;
        for (int i = 0; i < N; i++)
            all &= raw_closed(fd[i]);
        all;
    }));
    for (int i = 0; i < N; i++)
        close(fd[i]);
    free(content);
}

/* An agent that starts removes what receiving agents of this host left when they died, and
 * nothing of a live agent or of another host (a shared directory). */
static void test_leftovers_swept(void **state)
{
    struct fixture *fx = *state;
    struct agent_replica again;
    char host[256] = "", tag[64], dead[512], live[512], other[512];
    size_t n = 0;
    pid_t child = fork();

    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child); /* its pid names a dead agent now */
    gethostname(host, sizeof(host) - 1);
    for (const char *p = host; *p != '\0' && n + 1 < sizeof(tag); p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-')
            tag[n++] = *p;
    tag[n] = '\0';
    snprintf(dead, sizeof(dead), "%s/.muster-replica-%s.%ld.Ab12Cd", fx->dir[RECEIVER], tag,
             (long)child);
    snprintf(live, sizeof(live), "%s/.muster-replica-%s.%ld.Ef34Gh", fx->dir[RECEIVER], tag,
             (long)getppid());
    snprintf(other, sizeof(other), "%s/.muster-replica-x%s.%ld.Ij56Kl", fx->dir[RECEIVER], tag,
             (long)child);
    harness_write_file(dead, "half a checkpoint");
    harness_write_file(live, "half a checkpoint");
    harness_write_file(other, "half a checkpoint");
    assert_int_equal(
        agent_replica_init(&fx->loop, &again, &fx->w[RECEIVER], 0, 0, &receiver_cbs, fx), 0);
    assert_int_equal(access(dead, F_OK), -1);
    assert_int_equal(access(live, F_OK), 0);
    assert_int_equal(access(other, F_OK), 0);
    assert_true(logged(fx, RECEIVER, "whose receiving agent"));
    agent_replica_close(&again);
    /* its timers live on this stack frame: their closes must finish before it goes (under
     * ASan the loop otherwise finished them in a dead frame: uv__finish_close aborted) */
    harness_run_for(&fx->h, 20);
}

/* --- directory checkpoints ------------------------------------------------------------------ */

static void put(const char *dir, const char *rel, const char *text)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    harness_write_file(path, text);
}

static void same_file(const char *a, const char *b)
{
    char x[8192], y[8192];
    long n = harness_read_file(a, x, sizeof(x)), m = harness_read_file(b, y, sizeof(y));

    assert_true(n >= 0);
    assert_int_equal(n, m);
    assert_memory_equal(x, y, (size_t)n);
}

/* A torch.distributed.checkpoint-like directory (nested, an empty member, a dot file) goes as
 * one stream: the receiver rebuilds the same tree, its XXH3 is the registry's checksum, and it
 * is recorded like the sender's entry. */
static void test_directory_checkpoint(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckpt_entry e, got;
    char root[300], a[600], b[600];
    const char *members[] = {".metadata", "__0_0.distcp", "__1_0.distcp", "empty",
                             "sub/deep/x.bin"};

    snprintf(root, sizeof(root), "%s/step-40", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    snprintf(a, sizeof(a), "%s/sub", root);
    assert_int_equal(mkdir(a, 0755), 0);
    snprintf(a, sizeof(a), "%s/sub/deep", root);
    assert_int_equal(mkdir(a, 0755), 0);
    put(root, ".metadata", "{\"planner\": 1}");
    put(root, "__0_0.distcp", "rank zero's shard");
    put(root, "__1_0.distcp", "rank one's shard, a little longer");
    put(root, "empty", "");
    put(root, "sub/deep/x.bin", "nested");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "step-40", &e), 0);
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    HARNESS_RUN_UNTIL(&fx->h, fx->stored == 1 && logged(fx, SENDER, "replicated to group rank 1"));
    assert_true(logged(fx, SENDER, fx->r[SENDER].bulk_streams ? "bulk streams" : "direct link"));
    for (size_t i = 0; i < sizeof(members) / sizeof(members[0]); i++) {
        snprintf(a, sizeof(a), "%s/step-40/%s", fx->dir[SENDER], members[i]);
        snprintf(b, sizeof(b), "%s/step-40/%s", fx->dir[RECEIVER], members[i]);
        same_file(a, b);
    }
    /* what the receiver's disk holds hashes to the sender's checksum, and is in its registry */
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[RECEIVER], "step-40", &got), 0);
    assert_int_equal(got.checksum, e.checksum);
    assert_int_equal(got.size, e.size);
    assert_int_equal(fx->w[RECEIVER].reg.n, 1);
    assert_int_equal(fx->w[RECEIVER].reg.entries[0].checksum, e.checksum);
    assert_int_equal(fx->w[RECEIVER].reg.entries[0].size, e.size);
}

/* Sharded checkpoints: a node's part goes as a part and is kept beside the receiver's own part
 * of that name (.muster-part-K-of-N.NAME, registered with the part, its own part untouched);
 * rank 0's directory goes as part 1 and is kept beside too where the receiver has a directory of
 * that name, else under its own name as before. */
static void test_parts_kept_beside(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckpt_entry e;
    const struct agent_ckpt_entry *r;
    char root[300], a[600], b[600];

    snprintf(root, sizeof(root), "%s/step-40", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "__2_0.distcp", "rank two's shard");
    snprintf(root, sizeof(root), "%s/step-40", fx->dir[RECEIVER]); /* the receiver's own part */
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "__0_0.distcp", "rank zero's shard");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "step-40", &e), 0);
    e.part = 2;
    e.parts = 2;
    agent_replica_offer(&fx->r[SENDER], &e, 1, 1, 2);
    HARNESS_RUN_UNTIL(&fx->h, fx->stored == 1);
    snprintf(a, sizeof(a), "%s/step-40/__2_0.distcp", fx->dir[SENDER]);
    snprintf(b, sizeof(b), "%s/.muster-part-2-of-2.step-40/__2_0.distcp", fx->dir[RECEIVER]);
    same_file(a, b);
    snprintf(b, sizeof(b), "%s/step-40/__2_0.distcp", fx->dir[RECEIVER]);
    assert_int_equal(access(b, F_OK), -1); /* its own part is left as it was */
    r = agent_ckpt_registry_find(&fx->w[RECEIVER].reg, ".muster-part-2-of-2.step-40");
    assert_non_null(r);
    assert_int_equal(r->checksum, e.checksum); /* verified against the sender's on arrival */
    assert_int_equal(r->part, 2);
    assert_int_equal(r->parts, 2);
    assert_int_equal(r->step, 40);

    agent_replica_parts(&fx->r[SENDER], 1); /* rank 0's directories: part 1 */
    snprintf(root, sizeof(root), "%s/step-50", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, ".metadata", "meta");
    put(root, "__0_0.distcp", "shard");
    snprintf(root, sizeof(root), "%s/step-50", fx->dir[RECEIVER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "__1_0.distcp", "its own");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "step-50", &e), 0);
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    HARNESS_RUN_UNTIL(&fx->h, fx->stored == 2);
    r = agent_ckpt_registry_find(&fx->w[RECEIVER].reg, ".muster-part-1-of-2.step-50");
    assert_non_null(r);
    assert_int_equal(r->part, 1);

    snprintf(root, sizeof(root), "%s/step-60", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, ".metadata", "meta");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "step-60", &e), 0);
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    HARNESS_RUN_UNTIL(&fx->h, fx->stored == 3);
    r = agent_ckpt_registry_find(&fx->w[RECEIVER].reg, "step-60"); /* nothing of its own there */
    assert_non_null(r);
    assert_int_equal(r->part, 0);

    /* a node that sends a part it did not write (group rank 1 sending part 1) is refused */
    fx->lie_rank = 1;
    snprintf(root, sizeof(root), "%s/step-70", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "__0_0.distcp", "forged");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "step-70", &e), 0);
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    HARNESS_RUN_UNTIL(&fx->h, logged(fx, RECEIVER, "a part the sending node did not write"));
    assert_null(agent_ckpt_registry_find(&fx->w[RECEIVER].reg, "step-70"));
    assert_null(agent_ckpt_registry_find(&fx->w[RECEIVER].reg, ".muster-part-1-of-2.step-70"));
    assert_int_equal(fx->stored, 3);
}

/* The same through the relay, and a directory with a symlink inside is not sent at all. */
static void test_directory_relayed_and_symlink_refused(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckpt_entry e;
    char root[300], a[600], b[600];

    fx->break_port = 1;
    snprintf(root, sizeof(root), "%s/step-7", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "w.bin", "weights");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "step-7", &e), 0);
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    HARNESS_RUN_UNTIL(&fx->h, fx->stored == 1 && logged(fx, SENDER, "replicated to group rank 1"));
    assert_true(fx->relayed > 0);
    snprintf(a, sizeof(a), "%s/step-7/w.bin", fx->dir[SENDER]);
    snprintf(b, sizeof(b), "%s/step-7/w.bin", fx->dir[RECEIVER]);
    same_file(a, b);

    snprintf(root, sizeof(root), "%s/step-8", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "w.bin", "weights");
    snprintf(a, sizeof(a), "%s/link", root);
    assert_int_equal(symlink("/etc/passwd", a), 0);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "step-8", &e), 0);
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    /* (listed off the loop: the refusal comes once the listing is back) */
    HARNESS_RUN_UNTIL(
        &fx->h, logged(fx, SENDER, "checkpoint step-8 not replicated: link inside is a symlink"));
    harness_run_for(&fx->h, 100);
    assert_int_equal(fx->stored, 1);
}

/* The receiver's parser refuses what a hostile sender could put in a stream, and writes
 * nothing outside its temporary directory. */
static void test_directory_stream_hostile(void **state)
{
    struct fixture *fx = *state;
    static const struct {
        const char *path;
        const char *why;
    } bad[] = {{"../evil", "refused"},     {"/etc/evil", "refused"}, {"a//b", "refused"},
               {"a/./b", "refused"},       {"a/", "refused"},        {"", "refused"},
               {"x/../../evil", "refused"}};
    struct agent_replica_sink k;
    char tmpl[300], why[600], outside[300];
    uint8_t rec[64];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = strlen(bad[i].path) + 1;

        snprintf(tmpl, sizeof(tmpl), "%s/.muster-replica-t.XXXXXX", fx->dir[RECEIVER]);
        assert_int_equal(agent_replica_sink_open(&k, tmpl, 0644, 0755), 0);
        memcpy(rec, bad[i].path, n);
        memset(rec + n, 0, 8);
        rec[n + 7] = 4;
        memcpy(rec + n + 8, "evil", 4);
        assert_int_equal(agent_replica_sink_write(&k, rec, n + 12, why, sizeof(why)), -EPROTO);
        assert_non_null(strstr(why, bad[i].why));
        agent_replica_sink_abort(&k);
    }
    snprintf(outside, sizeof(outside), "%s/evil", fx->dir[RECEIVER]);
    assert_int_equal(access(outside, F_OK), -1);
    snprintf(outside, sizeof(outside), "%s/evil", fx->tmp);
    assert_int_equal(access(outside, F_OK), -1);

    /* out of order (or twice): refused; a stream cut inside a member: refused at the end */
    snprintf(tmpl, sizeof(tmpl), "%s/.muster-replica-t.XXXXXX", fx->dir[RECEIVER]);
    assert_int_equal(agent_replica_sink_open(&k, tmpl, 0644, 0755), 0);
    memcpy(rec, "b\0\0\0\0\0\0\0\0\1x", 11);
    assert_int_equal(agent_replica_sink_write(&k, rec, 11, why, sizeof(why)), 0);
    memcpy(rec, "a\0\0\0\0\0\0\0\0\1y", 11);
    assert_int_equal(agent_replica_sink_write(&k, rec, 11, why, sizeof(why)), -EPROTO);
    agent_replica_sink_abort(&k);
    assert_int_equal(agent_replica_sink_open(&k, tmpl, 0644, 0755), 0);
    memcpy(rec, "b\0\0\0\0\0\0\0\0\5xy", 12);
    assert_int_equal(agent_replica_sink_write(&k, rec, 12, why, sizeof(why)), 0);
    assert_int_equal(agent_replica_sink_finish(&k, why, sizeof(why)), -EPROTO);
    assert_non_null(strstr(why, "inside member b"));
    agent_replica_sink_abort(&k);
    snprintf(why, sizeof(why), "ls -A %s | grep -q '^.muster-replica'", fx->dir[RECEIVER]);
    assert_int_not_equal(system(why), 0); /* every temporary directory removed */
}

static void drain_done(void *data)
{
    ((struct fixture *)data)->drains++;
}

/* A job's last checkpoint, a directory still being listed when the workers end, is waited for
 * like one being sent (agent_replica_drain); and a newer checkpoint offered meanwhile wins. */
static void test_drain_waits_for_a_listing(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckpt_entry e, f;
    char root[300];

    snprintf(root, sizeof(root), "%s/step-9", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "w.bin", "weights nine");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "step-9", &e), 0);
    put(fx->dir[SENDER], "ckpt_10.pt", "weights ten");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], "ckpt_10.pt", &f), 0);

    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    assert_int_equal(agent_replica_drain(&fx->r[SENDER], 10000, drain_done, fx), 1);
    HARNESS_RUN_UNTIL(&fx->h, fx->drains == 1);
    assert_int_equal(fx->stored, 1);
    assert_true(logged(fx, SENDER, "step-9 replicated to group rank 1"));

    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    agent_replica_offer(&fx->r[SENDER], &f, 1, 0, 2); /* before the listing is back */
    HARNESS_RUN_UNTIL(&fx->h, fx->stored == 2);
    harness_run_for(&fx->h, 100);
    assert_int_equal(fx->begins, 2); /* the superseded listing started no copy */
    assert_true(logged(fx, SENDER, "ckpt_10.pt replicated to group rank 1"));
}

/* --- modes --------------------------------------------------------------------------------- */

/* Entry name of the sender's directory, with mode, offered and waited for until stored. */
static void offer_and_wait(struct fixture *fx, const char *name, mode_t mode)
{
    struct agent_ckpt_entry e;
    char path[600];
    int stored = fx->stored;

    snprintf(path, sizeof(path), "%s/%s", fx->dir[SENDER], name);
    assert_int_equal(chmod(path, mode), 0);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir[SENDER], name, &e), 0);
    agent_replica_offer(&fx->r[SENDER], &e, 1, 0, 2);
    HARNESS_RUN_UNTIL(&fx->h, fx->stored == stored + 1);
}

/* A 0600 checkpoint makes a 0600 replica, a 0700 directory a 0700 one whose files are 0600 and
 * whose subdirectories 0700 (the modes travel in REPL_BEGIN): none wider than its original,
 * whatever the receiver's umask would have made of it. */
static void test_modes_travel(void **state)
{
    struct fixture *fx = *state;
    char root[300], sub[400];
    mode_t old = umask(0);

    put(fx->dir[SENDER], "ckpt_1.pt", "private weights");
    offer_and_wait(fx, "ckpt_1.pt", 0600);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "ckpt_1.pt"), 0600);
    put(fx->dir[SENDER], "ckpt_2.pt", "shared weights");
    offer_and_wait(fx, "ckpt_2.pt", 0644);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "ckpt_2.pt"), 0644);

    snprintf(root, sizeof(root), "%s/step-3", fx->dir[SENDER]);
    snprintf(sub, sizeof(sub), "%s/sub", root);
    assert_int_equal(mkdir(root, 0700), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    put(root, "a.bin", "shard a");
    put(root, "sub/b.bin", "shard b");
    offer_and_wait(fx, "step-3", 0700);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "step-3"), 0700);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "step-3/a.bin"), 0600);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "step-3/sub"), 0700);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "step-3/sub/b.bin"), 0600);
    umask(old);
}

/* A sender before modes sends none: the copy gets 0600 files, 0700 directories. */
static void test_modes_old_sender(void **state)
{
    struct fixture *fx = *state;
    char root[300];
    mode_t old = umask(0);

    fx->strip_mode = 1;
    put(fx->dir[SENDER], "ckpt_1.pt", "weights");
    offer_and_wait(fx, "ckpt_1.pt", 0644);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "ckpt_1.pt"), 0600);
    snprintf(root, sizeof(root), "%s/step-2", fx->dir[SENDER]);
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "a.bin", "shard a");
    offer_and_wait(fx, "step-2", 0755);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "step-2"), 0700);
    assert_int_equal(harness_mode(fx->dir[RECEIVER], "step-2/a.bin"), 0600);
    umask(old);
}

/* every case runs on the two-agent fixture */
#define REPLICA_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
#define REPLICA_BULK_TEST(fn, name)                                                                \
    {                                                                                              \
        name, fn, setup_bulk, teardown, NULL                                                       \
    }

/* On bulk streams: the copy went there, not on the link's chunks. */
static void test_bulk_direct(void **state)
{
    struct fixture *fx = *state;
    uint8_t *content;

    offer(fx, &content);
    check_copy(fx, content);
    assert_true(logged(fx, SENDER, "bulk streams"));
    assert_int_equal(fx->relay_asked, 0);
    assert_int_equal(fx->relayed, 0);
    free(content);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        REPLICA_TEST(test_direct),
        REPLICA_TEST(test_nothing_on_port_relays),
        REPLICA_TEST(test_wrong_key_relays),
        REPLICA_TEST(test_hostile_connections),
        REPLICA_TEST(test_flood_costs_the_relay_not_the_copy),
        REPLICA_TEST(test_liar_receiver_bounded),
        REPLICA_TEST(test_leftovers_swept),
        REPLICA_TEST(test_fixed_port),
        REPLICA_TEST(test_failed_copy_tried_again),
        REPLICA_TEST(test_gives_up_after_the_tries),
        REPLICA_TEST(test_directory_checkpoint),
        REPLICA_TEST(test_parts_kept_beside),
        REPLICA_TEST(test_directory_relayed_and_symlink_refused),
        REPLICA_TEST(test_directory_stream_hostile),
        REPLICA_TEST(test_drain_waits_for_a_listing),
        REPLICA_TEST(test_modes_travel),
        REPLICA_TEST(test_modes_old_sender),
        REPLICA_BULK_TEST(test_bulk_direct, "test_bulk_direct"),
        REPLICA_BULK_TEST(test_wrong_key_relays, "bulk: test_wrong_key_relays"),
        REPLICA_BULK_TEST(test_fixed_port, "bulk: test_fixed_port"),
        REPLICA_BULK_TEST(test_failed_copy_tried_again, "bulk: test_failed_copy_tried_again"),
        REPLICA_BULK_TEST(test_directory_checkpoint, "bulk: test_directory_checkpoint"),
        REPLICA_BULK_TEST(test_modes_travel, "bulk: test_modes_travel"),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
