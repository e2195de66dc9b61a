#include "mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define PING "muster-pf-ping\n"
#define PING_LEN (sizeof(PING) - 1)
#define MAX_CLIENTS 256

static double now_us(void)
{
    return (double)mc_mono_ns() / 1e3;
}

/* ---- listener: accept and echo, on its own thread ----------------------------------- */

static void *echo_loop(void *arg)
{
    struct pf_mesh_listener *l = arg;
    struct pollfd p[MAX_CLIENTS + 2];
    int n = 2;

    p[0] = (struct pollfd){.fd = l->fd, .events = POLLIN};
    p[1] = (struct pollfd){.fd = l->stop_pipe[0], .events = POLLIN};
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        if ((p[0].revents & POLLIN) && n < MAX_CLIENTS + 2) {
            int c = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (c >= 0)
                p[n++] = (struct pollfd){.fd = c, .events = POLLIN};
        }
        for (int i = 2; i < n; i++) {
            char buf[256];
            ssize_t r;
            if (!p[i].revents)
                continue;
            r = recv(p[i].fd, buf, sizeof(buf), 0);
            if (r > 0 && send(p[i].fd, buf, (size_t)r, MSG_NOSIGNAL) == r)
                continue;
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            close(p[i].fd);
            p[i--] = p[--n];
        }
    }
    for (int i = 2; i < n; i++)
        close(p[i].fd);
    return NULL;
}

int pf_mesh_listen(struct pf_mesh_listener *l, unsigned port)
{
    struct sockaddr_in6 a = {
        .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = IN6ADDR_ANY_INIT};
    int one = 1, zero = 0, rc;
    socklen_t len = sizeof(a);
    pthread_t t;

    memset(l, 0, sizeof(*l));
    l->stop_pipe[0] = l->stop_pipe[1] = -1;
    /* one dual-stack socket answers IPv4 and IPv6 peers alike; a kernel without IPv6 (booted
     * with ipv6.disable=1) gets a plain IPv4 one */
    if ((l->fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) >= 0) {
        setsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
        setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(l->fd, (struct sockaddr *)&a, sizeof(a)) != 0)
            goto fail;
    } else if (errno == EAFNOSUPPORT) {
        struct sockaddr_in a4 = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = htonl(INADDR_ANY)};
        if ((l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
            return -errno;
        setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(l->fd, (struct sockaddr *)&a4, sizeof(a4)) != 0)
            goto fail;
    } else {
        return -errno;
    }
    if (listen(l->fd, 128) != 0 || getsockname(l->fd, (struct sockaddr *)&a, &len) != 0 ||
        pipe2(l->stop_pipe, O_CLOEXEC))
        goto fail;
    /* sin_port and sin6_port sit at the same offset */
    l->port = ntohs(a.sin6_port);
    if ((rc = pthread_create(&t, NULL, echo_loop, l)) != 0) {
        errno = rc;
        goto fail;
    }
    l->thread = (uint64_t)t;
    l->thread_started = 1;
    return 0;
fail:
    rc = -errno;
    pf_mesh_listener_close(l);
    return rc;
}

void pf_mesh_listener_close(struct pf_mesh_listener *l)
{
    if (l->thread_started) {
        (void)!write(l->stop_pipe[1], "x", 1);
        pthread_join((pthread_t)l->thread, NULL);
        l->thread_started = 0;
    }
    for (int i = 0; i < 2; i++)
        if (l->stop_pipe[i] >= 0)
            close(l->stop_pipe[i]);
    if (l->fd >= 0)
        close(l->fd);
    l->fd = l->stop_pipe[0] = l->stop_pipe[1] = -1;
}

/* ---- prober --------------------------------------------------------------------------- */

enum { ST_CONNECTING, ST_SENT, ST_DONE };

struct probe {
    int fd, state;
    size_t got;
    double t0;
};

static void set_error(struct pf_mesh_target *t, const char *what, int err)
{
    t->ok = 0;
    snprintf(t->error, sizeof(t->error), "%s: %s", what, strerror(err));
}

static int start_connect(struct pf_mesh_target *t, struct probe *p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
    char port[8];
    int rc;

    p->fd = -1;
    p->state = ST_DONE;
    snprintf(port, sizeof(port), "%u", t->port);
    if ((rc = getaddrinfo(t->host, port, &hints, &ai)) != 0) {
        snprintf(t->error, sizeof(t->error), "cannot resolve %s: %s", t->host, gai_strerror(rc));
        return -1;
    }
    p->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    p->t0 = now_us();
    if (p->fd < 0 || (connect(p->fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS)) {
        set_error(t, "connect", errno);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    p->state = ST_CONNECTING;
    return 0;
}

/* One poll event of probe p. */
static void step(struct pf_mesh_target *t, struct probe *p, short revents)
{
    int err = 0;
    socklen_t len = sizeof(err);
    char buf[PING_LEN];
    ssize_t r;

    if (p->state == ST_CONNECTING) {
        getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
            set_error(t, "connect", err);
            p->state = ST_DONE;
            return;
        }
        t->connect_us = now_us() - p->t0;
        if (send(p->fd, PING, PING_LEN, MSG_NOSIGNAL) != (ssize_t)PING_LEN) {
            set_error(t, "send", errno);
            p->state = ST_DONE;
            return;
        }
        p->state = ST_SENT;
        return;
    }
    r = recv(p->fd, buf, PING_LEN - p->got, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        if (r == 0)
            snprintf(t->error, sizeof(t->error), "connection closed before the echo");
        else
            set_error(t, "recv", errno);
        p->state = ST_DONE;
        return;
    }
    p->got += (size_t)r;
    if (p->got == PING_LEN) {
        t->rtt_us = now_us() - p->t0;
        t->ok = 1;
        p->state = ST_DONE;
    }
    (void)revents;
}

int pf_mesh_probe(struct pf_mesh_target *t, int n, int timeout_ms)
{
    struct probe *p = calloc((size_t)n, sizeof(*p));
    struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
    double deadline = now_us() + timeout_ms * 1000.0;
    int failed = 0;

    if (p == NULL || pf == NULL) {
        free(p);
        free(pf);
        for (int i = 0; i < n; i++)
            snprintf(t[i].error, sizeof(t[i].error), "out of memory");
        return n;
    }
    for (int i = 0; i < n; i++) {
        t[i].ok = 0;
        t[i].error[0] = '\0';
        start_connect(&t[i], &p[i]);
    }
    for (;;) {
        int live = 0, left = (int)((deadline - now_us()) / 1000.0);
        for (int i = 0; i < n; i++) {
            pf[i].fd = p[i].state == ST_DONE ? -1 : p[i].fd;
            pf[i].events = p[i].state == ST_CONNECTING ? POLLOUT : POLLIN;
            pf[i].revents = 0;
            live += p[i].state != ST_DONE;
        }
        if (live == 0 || left <= 0)
            break;
        if (poll(pf, (nfds_t)n, left) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++)
            if (pf[i].revents && p[i].state != ST_DONE)
                step(&t[i], &p[i], pf[i].revents);
    }
    for (int i = 0; i < n; i++) {
        if (p[i].state != ST_DONE)
            snprintf(t[i].error, sizeof(t[i].error), "%s: no answer within %.1f s",
                     p[i].state == ST_CONNECTING ? "connect" : "echo", timeout_ms / 1000.0);
        if (p[i].fd >= 0)
            close(p[i].fd);
        failed += !t[i].ok;
    }
    free(p);
    free(pf);
    return failed;
}

int pf_mesh_local_addr(const char *host, char *out, int cap)
{
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai = NULL;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd, rc = 0;

    if (getaddrinfo(host, "9", &hints, &ai) != 0)
        return -EHOSTUNREACH;
    fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        rc = -errno;
    else if (getnameinfo((struct sockaddr *)&ss, len, out, (socklen_t)cap, NULL, 0,
                         NI_NUMERICHOST) != 0)
        rc = -EINVAL;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}
