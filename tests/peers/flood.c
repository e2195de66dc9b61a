/* Unauthenticated ClientHello flood on a rendezvous server.
 *
 *   flood -e HOST:PORT [-s SRC_ADDR] [-n CONNS] [-t SECONDS] [-c x25519|p521|mix]
 *
 * Keeps CONNS (default 200) TCP connections churning from SRC_ADDR (default 127.0.1.2): each
 * connects, sends a TLS 1.2 ClientHello made by mbedTLS with no credential of the server
 * (ECDHE-PSK suites; curve X25519 only, secp521r1 only, or alternating: -c mix, the default),
 * and hangs up at the server's first bytes or its close, then starts again at once. So every
 * hello the server does not refuse costs it the ServerHello and, with X25519, a key. Runs for
 * SECONDS (default 10; 0 = until SIGINT/SIGTERM) and prints a summary:
 *
 *   flood opened=N answered=N cut=N failed=N
 *
 * (opened: connections made; answered: the server sent bytes (a ServerHello); cut: closed by the
 * server without a byte (refused by a limit); failed: connect errors.)
 * One thread, epoll. Exit 0, or 2 on bad arguments.
 * Built by CMake as build/tests/peers/flood (tests/peers/CMakeLists.txt). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "peer.h"

struct hello {
    unsigned char buf[2048];
    size_t len;
};

struct slot {
    int fd;
    int p521;
    int sent;
};

static struct sockaddr_in srv, src;
static struct hello hello_x25519, hello_p521;
static long opened, answered, cut, failed;
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* The first flight of an mbedTLS client offering only curve. Returns 0 or -1. */
static int make_hello(mbedtls_ecp_group_id curve, struct hello *h)
{
    h->len = peer_client_hello(curve, h->buf, sizeof(h->buf));
    return h->len > 0 ? 0 : -1;
}

static void slot_open(int ep, struct slot *s)
{
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = s};
    int one = 1;

    s->sent = 0;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->fd < 0) {
        failed++;
        return;
    }
    /* the churn would run out of ports in TIME_WAIT: close with a reset (SO_LINGER 0) */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s->fd, (struct sockaddr *)&src, sizeof(src)) < 0 ||
        (connect(s->fd, (struct sockaddr *)&srv, sizeof(srv)) < 0 && errno != EINPROGRESS) ||
        epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev) < 0) {
        failed++;
        close(s->fd);
        s->fd = -1;
        return;
    }
    opened++;
}

static void slot_event(int ep, struct slot *s, uint32_t events)
{
    const struct hello *h = s->p521 ? &hello_p521 : &hello_x25519;
    char sink[4096];
    ssize_t n;

    if (!s->sent && (events & EPOLLOUT) && !(events & (EPOLLERR | EPOLLHUP))) {
        s->sent = 1;
        if (write(s->fd, h->buf, h->len) != (ssize_t)h->len)
            events |= EPOLLHUP;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = s};
        epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
    }
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)))
        return;
    n = read(s->fd, sink, sizeof(sink));
    if (n < 0 && errno == EAGAIN && !(events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)))
        return;
    if (n > 0)
        answered++;
    else
        cut++;
    close(s->fd); /* closing removes it from the epoll set */
    slot_open(ep, s);
}

static int parse_args(int argc, char **argv, int *n, int *secs, int *mode)
{
    const char *e = NULL, *from = "127.0.1.2";
    char host[64];
    int opt, port;

    while ((opt = getopt(argc, argv, "e:s:n:t:c:")) != -1) {
        if (opt == 'e')
            e = optarg;
        else if (opt == 's')
            from = optarg;
        else if (opt == 'n')
            *n = atoi(optarg);
        else if (opt == 't')
            *secs = atoi(optarg);
        else if (opt == 'c')
            *mode = strcmp(optarg, "x25519") == 0 ? 0 : strcmp(optarg, "p521") == 0 ? 1 : 2;
        else
            return -1;
    }
    if (e == NULL || sscanf(e, "%63[^:]:%d", host, &port) != 2 || *n <= 0)
        return -1;
    srv = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    src = (struct sockaddr_in){.sin_family = AF_INET};
    if (inet_pton(AF_INET, host, &srv.sin_addr) != 1 ||
        inet_pton(AF_INET, from, &src.sin_addr) != 1)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    int n = 200, secs = 10, mode = 2, ep;
    struct epoll_event evs[256];
    struct slot *slots;
    time_t end;

    if (parse_args(argc, argv, &n, &secs, &mode) < 0) {
        fprintf(stderr, "usage: flood -e HOST:PORT [-s SRC] [-n CONNS] [-t SECONDS] "
                        "[-c x25519|p521|mix]\n");
        return 2;
    }
    if (make_hello(MBEDTLS_ECP_DP_CURVE25519, &hello_x25519) < 0 ||
        make_hello(MBEDTLS_ECP_DP_SECP521R1, &hello_p521) < 0) {
        fprintf(stderr, "flood: cannot make the ClientHellos\n");
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    slots = calloc((size_t)n, sizeof(*slots));
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (slots == NULL || ep < 0)
        return 1;
    for (int i = 0; i < n; i++) {
        slots[i].p521 = mode == 1 || (mode == 2 && i % 2);
        slot_open(ep, &slots[i]);
    }
    end = time(NULL) + secs;
    while (!stop && (secs == 0 || time(NULL) < end)) {
        int k = epoll_wait(ep, evs, 256, 200);

        for (int i = 0; i < k; i++)
            slot_event(ep, evs[i].data.ptr, evs[i].events);
        for (int i = 0; i < n; i++) /* reopen slots whose socket() or connect() failed */
            if (slots[i].fd < 0)
                slot_open(ep, &slots[i]);
    }
    printf("flood opened=%ld answered=%ld cut=%ld failed=%ld\n", opened, answered, cut, failed);
    return 0;
}
