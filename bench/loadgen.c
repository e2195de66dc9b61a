/* Rendezvous load generator: N simulated agents speaking muster's protocol to one server.
 *
 *   loadgen -e HOST:PORT -n AGENTS [-j JOBS] [-w INFLIGHT] [-t TIMEOUT_S] [-p SERVER_PID]
 *           [-i JOB_PREFIX] [-x EXTRA]
 *
 * Each simulated agent is one non-blocking TCP connection (epoll, one thread): HELLO (token from
 * MUSTER_TOKEN), WELCOME, JOIN(job = PREFIX-<k % JOBS>, min = max = its job's agent count,
 * nproc 1, keep_alive_ms 0 = no heartbeats expected), then it waits for ASSIGN. At most INFLIGHT
 * agents (default 128, the server's listen backlog) are between connect() and WELCOME at once.
 * When every agent has its ASSIGN the tool checks each job's assignment (group ranks 0..n-1 once
 * each, world size n, one master), sends DONE for every agent, waits for JOB_DONE and prints:
 *
 *   agents=N jobs=J assign_all_ms=... (first connect -> last ASSIGN) welcome_all_ms=...
 *   done_all_ms=... server_vmhwm_kb=... server_vmrss_kb=...   (with -p)
 *
 * -x EXTRA: job 0 also has EXTRA real agents (min = max = its simulated agents + EXTRA; its
 * assignment check then only checks the simulated agents' ranks are distinct and < the size).
 *
 * Exit 0 on success, 1 on a protocol error, a bad assignment or the timeout (default 60 s).
 * Build: cc -O2 -I rendezvous -o loadgen bench/loadgen.c rendezvous/message.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "message.h"

enum st { ST_IDLE, ST_CONNECTING, ST_HELLO, ST_JOINED, ST_ASSIGNED, ST_DONE_SENT, ST_FINISHED };

struct ag {
    int fd;
    enum st st;
    int job;
    uint8_t *rbuf;
    size_t rlen, rcap;
    uint8_t *wbuf;
    size_t wlen, woff;
    struct rdzv_assign as;
};

static struct ag *ags;
static int n_agents, n_jobs = 1, inflight_max = 128, ep, n_extra;
static const char *prefix = "lg";
static struct sockaddr_in srv;
static long long t0;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *m)
{
    perror(m);
    exit(1);
}

static int job_size(int j)
{
    return n_agents / n_jobs + (j < n_agents % n_jobs ? 1 : 0);
}

static void queue(struct ag *a, const struct rdzv_msg *m)
{
    uint8_t buf[RDZV_HEADER_SIZE + 2048];
    size_t len;
    if (rdzv_msg_encode(m, buf, sizeof buf, &len) != 0) {
        fprintf(stderr, "loadgen: encode failed\n");
        exit(1);
    }
    a->wbuf = realloc(a->wbuf, a->wlen + len);
    memcpy(a->wbuf + a->wlen, buf, len);
    a->wlen += len;
}

static void flush_out(struct ag *a)
{
    while (a->woff < a->wlen) {
        ssize_t n = write(a->fd, a->wbuf + a->woff, a->wlen - a->woff);
        if (n < 0) {
            if (errno == EAGAIN)
                break;
            fprintf(stderr, "loadgen: write: %s\n", strerror(errno));
            exit(1);
        }
        a->woff += (size_t)n;
    }
    if (a->woff == a->wlen) {
        a->woff = a->wlen = 0;
    }
    struct epoll_event ev = {.events = EPOLLIN | (a->wlen ? EPOLLOUT : 0), .data.u32 = (uint32_t)(a - ags)};
    epoll_ctl(ep, EPOLL_CTL_MOD, a->fd, &ev);
}

static void start_connect(struct ag *a)
{
    a->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->fd < 0)
        die("socket (raise ulimit -n)");
    int one = 1;
    setsockopt(a->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(a->fd, (struct sockaddr *)&srv, sizeof srv) < 0 && errno != EINPROGRESS)
        die("connect");
    a->st = ST_CONNECTING;
    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)(a - ags)};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, a->fd, &ev) < 0)
        die("epoll_ctl");
}

static int n_welcomed, n_assigned, n_finished, inflight, next_connect;
static long long t_welcome_all, t_assign_all, t_done_all;

static void on_msg(struct ag *a, const struct rdzv_msg *m)
{
    struct rdzv_msg out;
    memset(&out, 0, sizeof out);
    switch (m->type) {
    case RDZV_MSG_WELCOME: {
        out.type = RDZV_MSG_JOIN;
        struct rdzv_join *j = &out.u.join;
        snprintf(j->job_id, sizeof j->job_id, "%s-%d", prefix, a->job);
        j->min_nodes = j->max_nodes = (uint32_t)(job_size(a->job) + (a->job == 0 ? n_extra : 0));
        j->nproc = 1;
        snprintf(j->host, sizeof j->host, "sim%d", (int)(a - ags));
        snprintf(j->addr, sizeof j->addr, "10.%d.%d.%d", (int)(a - ags) >> 16 & 255,
                 (int)(a - ags) >> 8 & 255, (int)(a - ags) & 255);
        j->master_port = 20000 + (uint32_t)(a - ags) % 40000;
        j->last_call_ms = 0;
        j->join_timeout_ms = 120000;
        j->node_id = ((uint64_t)getpid() << 32) ^ (uint64_t)(a - ags) ^ 0x9e3779b97f4a7c15ULL;
        j->keep_alive_ms = 0; /* no heartbeats: only a closed connection is a lost node */
        queue(a, &out);
        flush_out(a);
        a->st = ST_JOINED;
        inflight--;
        if (++n_welcomed == n_agents)
            t_welcome_all = now_ns();
        break;
    }
    case RDZV_MSG_WAITING:
        break;
    case RDZV_MSG_ASSIGN:
        if (a->st != ST_JOINED) {
            fprintf(stderr, "loadgen: agent %d: ASSIGN in state %d\n", (int)(a - ags), a->st);
            exit(1);
        }
        a->as = m->u.assign;
        a->st = ST_ASSIGNED;
        if (++n_assigned == n_agents)
            t_assign_all = now_ns();
        break;
    case RDZV_MSG_JOB_DONE:
        a->st = ST_FINISHED;
        if (++n_finished == n_agents)
            t_done_all = now_ns();
        break;
    case RDZV_MSG_ERROR:
        fprintf(stderr, "loadgen: agent %d: ERROR %u: %s\n", (int)(a - ags), m->u.error.code,
                m->u.error.text);
        exit(1);
    default:
        fprintf(stderr, "loadgen: agent %d: unexpected %s\n", (int)(a - ags), rdzv_msg_name(m->type));
        exit(1);
    }
}

static void on_readable(struct ag *a)
{
    for (;;) {
        if (a->rcap - a->rlen < 4096) {
            a->rcap = a->rcap ? a->rcap * 2 : 8192;
            a->rbuf = realloc(a->rbuf, a->rcap);
        }
        ssize_t n = read(a->fd, a->rbuf + a->rlen, a->rcap - a->rlen);
        if (n == 0) {
            fprintf(stderr, "loadgen: agent %d: server closed the connection (state %d)\n",
                    (int)(a - ags), a->st);
            exit(1);
        }
        if (n < 0) {
            if (errno == EAGAIN)
                break;
            fprintf(stderr, "loadgen: read: %s\n", strerror(errno));
            exit(1);
        }
        a->rlen += (size_t)n;
    }
    size_t off = 0;
    while (a->rlen - off >= RDZV_HEADER_SIZE) {
        uint8_t type;
        uint32_t plen;
        if (rdzv_header_decode(a->rbuf + off, &type, &plen) != 0) {
            fprintf(stderr, "loadgen: bad frame header from the server\n");
            exit(1);
        }
        if (a->rlen - off < RDZV_HEADER_SIZE + plen)
            break;
        static struct rdzv_msg m;
        if (rdzv_msg_decode(type, a->rbuf + off + RDZV_HEADER_SIZE, plen, &m) != 0) {
            fprintf(stderr, "loadgen: cannot decode %s\n", rdzv_msg_name(type));
            exit(1);
        }
        m.type = type;
        on_msg(a, &m);
        off += RDZV_HEADER_SIZE + plen;
    }
    memmove(a->rbuf, a->rbuf + off, a->rlen - off);
    a->rlen -= off;
}

static long proc_kb(int pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0)
            v = atol(line + strlen(key) + 1);
    fclose(f);
    return v;
}

static int check_assignments(void)
{
    for (int j = 0; j < n_jobs; j++) {
        int n = job_size(j) + (j == 0 ? n_extra : 0);
        char *seen = calloc((size_t)n, 1);
        const char *master = NULL;
        for (int i = 0; i < n_agents; i++) {
            struct ag *a = &ags[i];
            if (a->job != j)
                continue;
            if (a->as.group_world_size != (uint32_t)n || a->as.world_size != (uint32_t)n ||
                a->as.group_rank >= (uint32_t)n || seen[a->as.group_rank] ||
                (n_extra == 0 && a->as.rank_offset != a->as.group_rank)) {
                fprintf(stderr, "loadgen: job %d: bad ASSIGN for agent %d (rank %u of %u, world %u, offset %u)\n",
                        j, i, a->as.group_rank, a->as.group_world_size, a->as.world_size, a->as.rank_offset);
                return -1;
            }
            seen[a->as.group_rank] = 1;
            if (master && strcmp(master, a->as.master_addr) != 0) {
                fprintf(stderr, "loadgen: job %d: two masters %s and %s\n", j, master, a->as.master_addr);
                return -1;
            }
            master = a->as.master_addr;
        }
        free(seen);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *endpoint = NULL;
    int timeout_s = 60, server_pid = 0, opt;
    while ((opt = getopt(argc, argv, "e:n:j:w:t:p:i:x:")) != -1) {
        switch (opt) {
        case 'e': endpoint = optarg; break;
        case 'n': n_agents = atoi(optarg); break;
        case 'j': n_jobs = atoi(optarg); break;
        case 'w': inflight_max = atoi(optarg); break;
        case 't': timeout_s = atoi(optarg); break;
        case 'p': server_pid = atoi(optarg); break;
        case 'i': prefix = optarg; break;
        case 'x': n_extra = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: loadgen -e HOST:PORT -n AGENTS [-j JOBS] [-w INFLIGHT] [-t TIMEOUT_S] [-p SERVER_PID] [-i PREFIX]\n");
            return 2;
        }
    }
    if (!endpoint || n_agents < 1 || n_jobs < 1 || n_jobs > n_agents) {
        fprintf(stderr, "loadgen: need -e HOST:PORT and -n AGENTS >= JOBS >= 1\n");
        return 2;
    }
    char host[256];
    const char *colon = strrchr(endpoint, ':');
    if (!colon || (size_t)(colon - endpoint) >= sizeof host)
        return 2;
    memcpy(host, endpoint, (size_t)(colon - endpoint));
    host[colon - endpoint] = 0;
    srv.sin_family = AF_INET;
    srv.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &srv.sin_addr) != 1) {
        fprintf(stderr, "loadgen: numeric IPv4 endpoint only\n");
        return 2;
    }
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)n_agents + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    ags = calloc((size_t)n_agents, sizeof *ags);
    for (int i = 0; i < n_agents; i++) {
        ags[i].fd = -1;
        ags[i].job = i % n_jobs;
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    const char *token = getenv("MUSTER_TOKEN");
    struct epoll_event evs[1024];
    t0 = now_ns();
    long long deadline = t0 + (long long)timeout_s * 1000000000LL;
    int done_sent = 0;
    while (n_finished < n_agents) {
        while (next_connect < n_agents && inflight < inflight_max) {
            start_connect(&ags[next_connect++]);
            inflight++;
        }
        if (n_assigned == n_agents && !done_sent) {
            if (check_assignments() != 0)
                return 1;
            for (int i = 0; i < n_agents; i++) {
                struct rdzv_msg m;
                memset(&m, 0, sizeof m);
                m.type = RDZV_MSG_DONE;
                m.u.done.round = ags[i].as.round;
                queue(&ags[i], &m);
                ags[i].st = ST_DONE_SENT;
                flush_out(&ags[i]);
            }
            done_sent = 1;
        }
        int n = epoll_wait(ep, evs, 1024, 100);
        if (now_ns() > deadline) {
            fprintf(stderr, "loadgen: timeout after %d s: %d connected+welcomed, %d assigned, %d done of %d\n",
                    timeout_s, n_welcomed, n_assigned, n_finished, n_agents);
            return 1;
        }
        for (int k = 0; k < n; k++) {
            struct ag *a = &ags[evs[k].data.u32];
            if (a->st == ST_CONNECTING) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err) {
                    fprintf(stderr, "loadgen: connect: %s\n", strerror(err));
                    return 1;
                }
                struct rdzv_msg m;
                memset(&m, 0, sizeof m);
                m.type = RDZV_MSG_HELLO;
                m.u.hello.version = RDZV_PROTO_VERSION;
                m.u.hello.role = RDZV_ROLE_AGENT;
                snprintf(m.u.hello.token, sizeof m.u.hello.token, "%s", token ? token : "");
                queue(a, &m);
                a->st = ST_HELLO;
                flush_out(a);
                continue;
            }
            if (evs[k].events & EPOLLOUT)
                flush_out(a);
            if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                on_readable(a);
        }
    }
    printf("agents=%d jobs=%d assign_all_ms=%.1f welcome_all_ms=%.1f done_all_ms=%.1f", n_agents,
           n_jobs, (t_assign_all - t0) / 1e6, (t_welcome_all - t0) / 1e6, (t_done_all - t0) / 1e6);
    if (server_pid > 0)
        printf(" server_vmhwm_kb=%ld server_vmrss_kb=%ld", proc_kb(server_pid, "VmHWM:"),
               proc_kb(server_pid, "VmRSS:"));
    printf("\n");
    return 0;
}
