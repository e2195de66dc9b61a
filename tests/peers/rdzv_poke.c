/* rdzv_poke: a hostile (or curious) rendezvous client for the integration tests. It speaks the
 * real protocol over TLS with whatever credential MUSTER_TOKEN holds (cred.h string forms) and
 * sends one chosen request, then prints the server's answer as one line:
 *
 *     OK <TYPE>            the server accepted it (WELCOME, ATTACH_OK, WAITING, STATUS, ...)
 *     ERROR <code> <text>  the server refused it
 *     FAIL <reason>        no answer (TLS refused, connection closed)
 *
 * usage: rdzv_poke HOST:PORT ACTION [ARGS]
 *   hello agent|worker|observer      HELLO with that role
 *   attach JOB                       worker: HELLO + ATTACH JOB
 *   join JOB NNODES                  agent: HELLO + JOIN JOB as a new node (own node secret)
 *   rejoin JOB NODEID                agent: HELLO + REJOIN (running) claiming NODEID (hex) with a
 *                                    node secret of its own (it cannot know the real one)
 *   joinas JOB NNODES NODEID         agent: HELLO + JOIN claiming NODEID with a made-up secret
 *   failfinal JOB NNODES             agent: JOIN JOB, then FAILED with the FINAL flag
 *   badhost JOB NNODES               agent: JOIN JOB with a host that is not valid UTF-8
 *                                    (written into the encoded frame: the codec refuses it)
 *   joinfail JOB MIN:MAX HOST ADDR   agent: JOIN JOB claiming another node's HOST and ADDR (its
 *                                    own node secret), wait for ASSIGN, then FAILED (not final)
 *                                    for that round: a teammate charging a failure to a victim
 *   status JOB|-                     observer: HELLO + STATUS_REQ (- = every job)
 *   workerstatus JOB                 worker: HELLO + ATTACH JOB + STATUS_REQ of its job
 *   workergoodput JOB                worker: HELLO + ATTACH JOB + GOODPUT (agents' only)
 *   goodput JOB NNODES WALL TRAIN LOST  agent: JOIN JOB, then GOODPUT of WALL ms (TRAIN of it
 *                                    training, the rest rendezvous) and LOST ms lost; prints
 *                                    the ERROR it drew, or "SENT GOODPUT" after 1.5 s of silence
 *   logflood JOB MODE N              N LOG batches of 256 lines "FORGED n" claiming rank 0: MODE
 *                                    nojoin (agent, no JOIN), worker (HELLO + ATTACH JOB) or
 *                                    joinedK (JOIN JOB as a K-node job, after its round closed: a
 *                                    node outside the round); prints the ERROR it drew, or
 *                                    "SENT LOG" after 1.5 s of silence
 *   evidencelie JOB NNODES VICTIM    agent: JOIN JOB (1:NNODES), wait for ASSIGN, then EVIDENCE
 * claiming rank VICTIM (another node's) sleeps in liar.py, its own rank's in all_reduce, and FAILED
 * asking for evidence; prints "SENT EVIDENCE" (the server must drop the lie) MUSTER_POKE_HOLD=S
 * keeps the connection open (silent) S seconds after the answer: a client that holds a job slot or
 * a connection (its JOINs ask for no heartbeat deadline). MUSTER_POKE_FROM=IP binds the
 * connection's source address first (another "machine" on loopback: 127.0.0.2, ...). Exit code: 0
 * when it printed OK, 1 for ERROR, 2 for FAIL or usage. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "cred.h"
#include "peer.h"

static struct peer_conn peer = {.fd = -1};
static struct rdzv_msg msg;

static int fail(const char *why)
{
    printf("FAIL %s\n", why);
    return 2;
}

static int put(const struct rdzv_msg *m)
{
    return peer_put(&peer, m);
}

/* put(), but the first `from` in the encoded frame is replaced by `to` (as long): how a hostile
 * client sends what muster's own encoder refuses to write. */
static int put_patched(const struct rdzv_msg *m, const char *from, const char *to)
{
    size_t len, n = strlen(from);
    uint8_t *b = peer_encode(m, &len);

    if (b == NULL)
        return -1;
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(b + i, from, n) == 0) {
            memcpy(b + i, to, n);
            break;
        }
    return peer_write(&peer, b, len);
}

/* The next message into msg; -1 when the connection ended. */
static int get(void)
{
    return peer_get(&peer, &msg);
}

static int answer(void)
{
    if (get() < 0)
        return fail("connection closed without an answer");
    if (msg.type == RDZV_MSG_ERROR) {
        printf("ERROR %" PRIu32 " %s\n", msg.u.error.code, msg.u.error.text);
        return 1;
    }
    printf("OK %s\n", rdzv_msg_name(msg.type));
    return 0;
}

static int hello(uint8_t role)
{
    memset(&msg, 0, sizeof(msg));
    msg.type = RDZV_MSG_HELLO;
    msg.u.hello.version = RDZV_PROTO_VERSION;
    msg.u.hello.role = role;
    if (put(&msg) < 0)
        return fail("cannot send HELLO");
    if (get() < 0)
        return fail("connection closed after HELLO");
    if (msg.type == RDZV_MSG_ERROR) {
        printf("ERROR %" PRIu32 " %s\n", msg.u.error.code, msg.u.error.text);
        return 1;
    }
    return 0;
}

/* What came instead of the answer a case waited for. */
static int answer_was(uint8_t type)
{
    if (type == RDZV_MSG_ERROR) {
        printf("ERROR %" PRIu32 " %s\n", msg.u.error.code, msg.u.error.text);
        return 1;
    }
    printf("UNEXPECTED %s\n", rdzv_msg_name(type));
    return 2;
}

static void fill_join(struct rdzv_join *j, const char *job, unsigned nnodes)
{
    memset(j, 0, sizeof(*j));
    snprintf(j->job_id, sizeof(j->job_id), "%s", job);
    j->min_nodes = j->max_nodes = nnodes;
    j->nproc = 1;
    j->master_port = 29500;
    j->join_timeout_ms = 30000;
    snprintf(j->host, sizeof(j->host), "poke");
    j->resume_step = -1;
    (void)rdzv_node_secret_new(j->node_secret, &j->node_id);
}

/* joinfail: JOIN as HOST/ADDR, read until ASSIGN (WAITING meanwhile), FAILED for its round. */
static int join_fail(const char *job, const char *nnodes, const char *host, const char *addr)
{
    unsigned lo = 0, hi = 0;
    int rc;

    if (sscanf(nnodes, "%u:%u", &lo, &hi) != 2)
        return fail("joinfail: NNODES is MIN:MAX");
    if ((rc = hello(RDZV_ROLE_AGENT)) != 0)
        return rc;
    msg = (struct rdzv_msg){.type = RDZV_MSG_JOIN};
    fill_join(&msg.u.join, job, hi);
    msg.u.join.min_nodes = lo;
    snprintf(msg.u.join.host, sizeof(msg.u.join.host), "%s", host);
    snprintf(msg.u.join.addr, sizeof(msg.u.join.addr), "%s", addr);
    if (put(&msg) < 0)
        return fail("send");
    do
        if (get() < 0)
            return fail("connection closed before ASSIGN");
    while (msg.type == RDZV_MSG_WAITING);
    if (msg.type != RDZV_MSG_ASSIGN)
        return answer_was(msg.type);
    uint32_t round = msg.u.assign.round;

    msg = (struct rdzv_msg){.type = RDZV_MSG_FAILED};
    msg.u.failed.round = round;
    msg.u.failed.rank = msg.u.failed.local_rank = 0;
    msg.u.failed.exit_code = 1;
    snprintf(msg.u.failed.host, sizeof(msg.u.failed.host), "%s", host);
    snprintf(msg.u.failed.text, sizeof(msg.u.failed.text), "forged failure as %s", host);
    if (put(&msg) < 0)
        return fail("send");
    sleep(1); /* FAILED has no reply: give the server time to act on it */
    printf("SENT FAILED\n");
    return 0;
}

/* GOODPUT with these figures (ms), then the server's answer if one comes within 1.5 s. */
static int send_goodput(unsigned long long wall, unsigned long long train, unsigned long long lost)
{
    struct timeval tv = {.tv_sec = 1, .tv_usec = 500000};

    rdzv_msg_init(&msg, RDZV_MSG_GOODPUT);
    msg.u.goodput.wall_ms = wall;
    msg.u.goodput.phase_ms[RDZV_GP_TRAINING] = train;
    msg.u.goodput.phase_ms[RDZV_GP_RENDEZVOUS] = wall - train;
    msg.u.goodput.lost_ms = lost;
    if (put(&msg) < 0)
        return fail("send");
    setsockopt(peer.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (get() == 0)
        if (msg.type == RDZV_MSG_ERROR)
            return answer_was(msg.type);
    printf("SENT GOODPUT\n");
    return 0;
}

/* n LOG batches of forged lines for rank 0, then the server's answer (see usage). */
static int send_logs(long n)
{
    struct timeval tv = {.tv_sec = 1, .tv_usec = 500000};
    static struct rdzv_msg m;

    for (long k = 0; k < n; k++) {
        rdzv_msg_init(&m, RDZV_MSG_LOG);
        for (int i = 0; i < RDZV_LOG_LINES_MAX; i++) {
            int len = snprintf(m.u.log.text + m.u.log.bytes, 32, "FORGED %ld", k * 256 + i);
            m.u.log.lines[i] = (struct rdzv_log_line){
                .rank = 0, .time_ms = 1, .off = m.u.log.bytes, .len = (uint32_t)len};
            m.u.log.bytes += (uint32_t)len;
        }
        m.u.log.count = RDZV_LOG_LINES_MAX;
        if (put(&m) < 0)
            break; /* the server closed: its ERROR is read below */
    }
    setsockopt(peer.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (get() == 0)
        if (msg.type == RDZV_MSG_ERROR)
            return answer_was(msg.type);
    printf("SENT LOG\n");
    return 0;
}

/* A node that lies about another node's rank in its evidence, then fails asking for a
 * verdict: the culprit must not be the victim it named. */
static int evidence_lie(const char *job, unsigned nnodes, int victim)
{
    uint32_t round, rank;

    msg = (struct rdzv_msg){.type = RDZV_MSG_JOIN};
    fill_join(&msg.u.join, job, nnodes);
    msg.u.join.min_nodes = 1; /* an elastic job: 1:NNODES */
    if (put(&msg) < 0)
        return fail("send");
    do
        if (get() < 0)
            return fail("connection closed before ASSIGN");
    while (msg.type == RDZV_MSG_WAITING);
    if (msg.type != RDZV_MSG_ASSIGN)
        return answer_was(msg.type);
    round = msg.u.assign.round;
    rank = msg.u.assign.rank_offset;
    sleep(1); /* the other node's workers start */
    for (int k = 0; k < 2; k++) {
        rdzv_msg_init(&msg, RDZV_MSG_EVIDENCE);
        struct rdzv_evidence *e = &msg.u.evidence;
        e->round = round;
        e->timeout_ms = 1000;
        e->rank = k == 0 ? victim : (int32_t)rank;
        e->flags = RDZV_EV_ALIVE | RDZV_EV_HOOKED;
        e->fr_enqueued = e->fr_started = e->fr_completed = -1;
        snprintf(e->op, sizeof(e->op), "%s", k == 0 ? "" : "all_reduce");
        snprintf(e->where, sizeof(e->where), "%s", k == 0 ? "liar.py:1 in lie" : "t.py:2 in step");
        snprintf(e->frames, sizeof(e->frames), "%s\n", e->where);
        if (put(&msg) < 0)
            return fail("send");
    }
    msg = (struct rdzv_msg){.type = RDZV_MSG_FAILED};
    msg.u.failed.round = round;
    msg.u.failed.rank = (int32_t)rank;
    msg.u.failed.exit_code = -1;
    msg.u.failed.flags = RDZV_FAILURE_EVIDENCE;
    snprintf(msg.u.failed.text, sizeof(msg.u.failed.text), "hung: made up");
    if (put(&msg) < 0)
        return fail("send");
    sleep(1);
    printf("SENT EVIDENCE\n");
    return 0;
}

/* Long (~70 lines): one short case per hostile action the tests ask for, as one table a
 * reader can scan; each case is a few lines. */
static int act(int argc, char **argv)
{
    const char *a = argv[2];
    int rc;

    if (strcmp(a, "hello") == 0 && argc == 4) {
        uint8_t role = strcmp(argv[3], "agent") == 0    ? RDZV_ROLE_AGENT
                       : strcmp(argv[3], "worker") == 0 ? RDZV_ROLE_WORKER
                                                        : RDZV_ROLE_OBSERVER;
        if ((rc = hello(role)) != 0)
            return rc;
        printf("OK WELCOME\n");
        return 0;
    }
    if (strcmp(a, "attach") == 0 && argc == 4) {
        if ((rc = hello(RDZV_ROLE_WORKER)) != 0)
            return rc;
        memset(&msg, 0, sizeof(msg));
        msg.type = RDZV_MSG_ATTACH;
        snprintf(msg.u.attach.job_id, sizeof(msg.u.attach.job_id), "%s", argv[3]);
        return put(&msg) < 0 ? fail("send") : answer();
    }
    if (strcmp(a, "workerstatus") == 0 && argc == 4) {
        if ((rc = hello(RDZV_ROLE_WORKER)) != 0)
            return rc;
        rdzv_msg_init(&msg, RDZV_MSG_ATTACH);
        snprintf(msg.u.attach.job_id, sizeof(msg.u.attach.job_id), "%s", argv[3]);
        if (put(&msg) < 0 || get() < 0 || msg.type != RDZV_MSG_ATTACH_OK)
            return fail("ATTACH refused");
        rdzv_msg_init(&msg, RDZV_MSG_STATUS_REQ);
        return put(&msg) < 0 ? fail("send") : answer();
    }
    if (strcmp(a, "workergoodput") == 0 && argc == 4) {
        if ((rc = hello(RDZV_ROLE_WORKER)) != 0)
            return rc;
        rdzv_msg_init(&msg, RDZV_MSG_ATTACH);
        snprintf(msg.u.attach.job_id, sizeof(msg.u.attach.job_id), "%s", argv[3]);
        if (put(&msg) < 0 || get() < 0 || msg.type != RDZV_MSG_ATTACH_OK)
            return fail("ATTACH refused");
        return send_goodput(2000, 1000, 0);
    }
    if (strcmp(a, "goodput") == 0 && argc == 8) {
        if ((rc = hello(RDZV_ROLE_AGENT)) != 0)
            return rc;
        msg = (struct rdzv_msg){.type = RDZV_MSG_JOIN};
        fill_join(&msg.u.join, argv[3], (unsigned)atoi(argv[4]));
        if (put(&msg) < 0)
            return fail("send");
        if (get() < 0)
            return fail("connection closed after JOIN");
        if (msg.type == RDZV_MSG_ERROR)
            return answer_was(msg.type);
        return send_goodput(strtoull(argv[5], NULL, 10), strtoull(argv[6], NULL, 10),
                            strtoull(argv[7], NULL, 10));
    }
    if (strcmp(a, "logflood") == 0 && argc == 6) {
        const char *mode = argv[4];
        if ((rc = hello(strcmp(mode, "worker") == 0 ? RDZV_ROLE_WORKER : RDZV_ROLE_AGENT)) != 0)
            return rc;
        if (strcmp(mode, "worker") == 0) {
            rdzv_msg_init(&msg, RDZV_MSG_ATTACH);
            snprintf(msg.u.attach.job_id, sizeof(msg.u.attach.job_id), "%s", argv[3]);
            if (put(&msg) < 0 || get() < 0 || msg.type != RDZV_MSG_ATTACH_OK)
                return fail("ATTACH refused");
        } else if (strncmp(mode, "joined", 6) == 0) {
            msg = (struct rdzv_msg){.type = RDZV_MSG_JOIN};
            fill_join(&msg.u.join, argv[3], (unsigned)atoi(mode + 6));
            if (put(&msg) < 0)
                return fail("send");
        }
        return send_logs(atol(argv[5]));
    }
    if (strcmp(a, "evidencelie") == 0 && argc == 6) {
        if ((rc = hello(RDZV_ROLE_AGENT)) != 0)
            return rc;
        return evidence_lie(argv[3], (unsigned)atoi(argv[4]), atoi(argv[5]));
    }
    if (strcmp(a, "status") == 0 && argc == 4) {
        if ((rc = hello(RDZV_ROLE_OBSERVER)) != 0)
            return rc;
        memset(&msg, 0, sizeof(msg));
        msg.type = RDZV_MSG_STATUS_REQ;
        if (strcmp(argv[3], "-") != 0)
            snprintf(msg.u.status_req.job_id, sizeof(msg.u.status_req.job_id), "%s", argv[3]);
        if (put(&msg) < 0)
            return fail("send");
        rc = answer();
        if (rc == 0 && msg.type == RDZV_MSG_STATUS)
            printf("%s\n", msg.u.status.json);
        return rc;
    }
    if ((strcmp(a, "join") == 0 || strcmp(a, "failfinal") == 0) && argc == 5) {
        if ((rc = hello(RDZV_ROLE_AGENT)) != 0)
            return rc;
        msg = (struct rdzv_msg){.type = RDZV_MSG_JOIN};
        fill_join(&msg.u.join, argv[3], (unsigned)atoi(argv[4]));
        if (put(&msg) < 0)
            return fail("send");
        if ((rc = answer()) != 0 || strcmp(a, "join") == 0)
            return rc;
        msg = (struct rdzv_msg){.type = RDZV_MSG_FAILED};
        msg.u.failed.rank = msg.u.failed.local_rank = -1;
        msg.u.failed.exit_code = 75;
        msg.u.failed.flags = RDZV_FAILURE_FINAL;
        snprintf(msg.u.failed.text, sizeof(msg.u.failed.text), "forged failure");
        if (put(&msg) < 0)
            return fail("send");
        sleep(1); /* FAILED has no reply: give the server time to act on it, if it would */
        printf("SENT FAILED\n");
        return 0;
    }
    if (strcmp(a, "badhost") == 0 && argc == 5) {
        if ((rc = hello(RDZV_ROLE_AGENT)) != 0)
            return rc;
        msg = (struct rdzv_msg){.type = RDZV_MSG_JOIN};
        fill_join(&msg.u.join, argv[3], (unsigned)atoi(argv[4]));
        snprintf(msg.u.join.host, sizeof(msg.u.join.host), "bad-XX-host");
        return put_patched(&msg, "-XX-", "-\xff\xfe-") < 0 ? fail("send") : answer();
    }
    if (strcmp(a, "joinfail") == 0 && argc == 7)
        return join_fail(argv[3], argv[4], argv[5], argv[6]);
    if ((strcmp(a, "rejoin") == 0 && argc == 5) || (strcmp(a, "joinas") == 0 && argc == 6)) {
        int re = strcmp(a, "rejoin") == 0;
        if ((rc = hello(RDZV_ROLE_AGENT)) != 0)
            return rc;
        msg = (struct rdzv_msg){.type = re ? RDZV_MSG_REJOIN : RDZV_MSG_JOIN};
        struct rdzv_join *j = re ? &msg.u.rejoin.join : &msg.u.join;
        fill_join(j, argv[3], re ? 2 : (unsigned)atoi(argv[4]));
        j->node_id = strtoull(argv[re ? 4 : 5], NULL, 16); /* claimed, not proved */
        if (re) {
            msg.u.rejoin.running = 1;
            msg.u.rejoin.assign.group_world_size = 2;
            msg.u.rejoin.assign.world_size = 2;
            snprintf(msg.u.rejoin.assign.master_addr, sizeof(msg.u.rejoin.assign.master_addr),
                     "127.0.0.1");
        }
        return put(&msg) < 0 ? fail("send") : answer();
    }
    return fail("usage: rdzv_poke HOST:PORT hello|attach|join|rejoin|joinas|failfinal|joinfail|"
                "badhost|status|workerstatus|workergoodput|goodput|logflood|evidencelie ...");
}

int main(int argc, char **argv)
{
    const char *token = getenv("MUSTER_TOKEN");
    struct rdzv_tls_opts o = {.token = token};
    struct rdzv_tls *tls = NULL;
    const char *err;
    char why[256];
    int rc;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3)
        return fail("usage: rdzv_poke HOST:PORT ACTION [ARGS]");
    if (token == NULL || rdzv_tls_new(&o, 0, &tls, why, sizeof(why)) < 0)
        return fail("no usable MUSTER_TOKEN");
    /* the receive timeout: never hang a test */
    if ((err = peer_open(&peer, tls, argv[1], getenv("MUSTER_POKE_FROM"), 10)) != NULL)
        return fail(err);
    rc = act(argc, argv);
    if (getenv("MUSTER_POKE_HOLD") != NULL)
        sleep((unsigned)atoi(getenv("MUSTER_POKE_HOLD")));
    peer_close(&peer);
    rdzv_tls_free(tls);
    return rc;
}
