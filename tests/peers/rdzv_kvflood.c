/* rdzv_kvflood: a hostile worker for the integration tests. With the credential in
 * MUSTER_TOKEN (a job's worker credential), it opens CONNS worker connections attached to JOB
 * and sends N KV_GETs, round robin over them, each for a key nobody puts and waiting WAIT_MS:
 * every one the server agrees to hold stays held. Replies are read as they come (the server
 * answers the refused ones at once with KV_REPLY LIMIT), so that its send queue never fills.
 * Then it prints one line and keeps the connections open for HOLD_S seconds (the holds stay):
 *
 *     SENT <n> LIMIT <l> OTHER <o> HELD <n-l-o> SECONDS <s>
 *     FAIL <reason>
 *
 * usage: rdzv_kvflood HOST:PORT JOB CONNS N WAIT_MS HOLD_S
 * Exit code: 0 after SENT, 2 for FAIL or usage. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cred.h"
#include "peer.h"

#define MAX_CONNS 256

static struct peer_conn conns[MAX_CONNS];
static struct rdzv_msg msg;
static unsigned long n_limit, n_other;

static int fail(const char *why)
{
    printf("FAIL %s\n", why);
    return 2;
}

/* TLS, HELLO as a worker, ATTACH job: NULL, or why not. */
static const char *open_conn(struct peer_conn *c, struct rdzv_tls *tls, const char *ep,
                             const char *job)
{
    const char *err = peer_open(c, tls, ep, NULL, 20); /* the timeout: never hang a test */

    if (err != NULL)
        return err;
    rdzv_msg_init(&msg, RDZV_MSG_HELLO);
    msg.u.hello.version = RDZV_PROTO_VERSION;
    msg.u.hello.role = RDZV_ROLE_WORKER;
    if (peer_put(c, &msg) < 0 || peer_get(c, &msg) < 0 || msg.type != RDZV_MSG_WELCOME)
        return "HELLO not welcomed";
    rdzv_msg_init(&msg, RDZV_MSG_ATTACH);
    snprintf(msg.u.attach.job_id, sizeof(msg.u.attach.job_id), "%s", job);
    if (peer_put(c, &msg) < 0 || peer_get(c, &msg) < 0 || msg.type != RDZV_MSG_ATTACH_OK)
        return "ATTACH refused";
    return NULL;
}

/* Reads every reply that is there now (or within wait_ms); -1 when a connection closed. */
static int drain(int n, int wait_ms)
{
    struct pollfd pf[MAX_CONNS];
    int ready;

    for (int i = 0; i < n; i++)
        pf[i] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
    ready = poll(pf, (nfds_t)n, wait_ms);
    for (int i = 0; ready > 0 && i < n; i++) {
        if (!(pf[i].revents & POLLIN))
            continue;
        do {
            if (peer_get(&conns[i], &msg) < 0)
                return -1;
            if (msg.type == RDZV_MSG_KV_REPLY && msg.u.kv.status == RDZV_KV_LIMIT)
                n_limit++;
            else
                n_other++;
        } while (mbedtls_ssl_get_bytes_avail(&conns[i].ssl) > 0);
    }
    return ready;
}

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Sends n GETs round robin over nc connections, reading replies every 64 sends. */
static int flood(int nc, unsigned long n, uint32_t wait_ms)
{
    for (unsigned long i = 0; i < n; i++) {
        rdzv_msg_init(&msg, RDZV_MSG_KV_GET);
        msg.u.kv.req_id = (uint32_t)i;
        msg.u.kv.wait_ms = wait_ms;
        snprintf(msg.u.kv.key, sizeof(msg.u.kv.key), "flood/%lu", i);
        if (peer_put(&conns[i % (unsigned long)nc], &msg) < 0)
            return fail("send failed (connection closed)");
        if (i % 64 == 63 && drain(nc, 0) < 0)
            return fail("a connection closed during the flood");
    }
    while (n_limit + n_other < n) { /* the rest of the answers; held ones never come */
        int r = drain(nc, 2000);

        if (r < 0)
            return fail("a connection closed after the flood");
        if (r == 0)
            break;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *token = getenv("MUSTER_TOKEN");
    struct rdzv_tls_opts o = {.token = token};
    struct rdzv_tls *tls = NULL;
    unsigned long n;
    int nc, rc;
    const char *err;
    double t0;
    char why[256];

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 7)
        return fail("usage: rdzv_kvflood HOST:PORT JOB CONNS N WAIT_MS HOLD_S");
    nc = atoi(argv[3]);
    n = strtoul(argv[4], NULL, 10);
    if (nc < 1 || nc > MAX_CONNS)
        return fail("CONNS must be 1..256");
    if (token == NULL || rdzv_tls_new(&o, 0, &tls, why, sizeof(why)) < 0)
        return fail("no usable MUSTER_TOKEN");
    for (int i = 0; i < nc; i++)
        if ((err = open_conn(&conns[i], tls, argv[1], argv[2])) != NULL)
            return fail(err);
    t0 = now_s();
    if ((rc = flood(nc, n, (uint32_t)strtoul(argv[5], NULL, 10))) != 0)
        return rc;
    printf("SENT %lu LIMIT %lu OTHER %lu HELD %lu SECONDS %.2f\n", n, n_limit, n_other,
           n - n_limit - n_other, now_s() - t0);
    sleep((unsigned)atoi(argv[6]));
    return 0;
}
