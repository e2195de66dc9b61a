/* Rendezvous load generator: N simulated agents speaking muster's protocol, over TLS, to one
 * server.
 *
 *   loadgen -e HOST:PORT -n AGENTS [-j JOBS] [-w INFLIGHT] [-t TIMEOUT_S] [-p SERVER_PID]
 *           [-i JOB_PREFIX] [-x EXTRA] [-T PROCS] [-P] [-R ROUNDS] [-K MS]
 *   loadgen -e HOST:PORT -I IDLE [-H] [-t SECONDS]          (idle-connection pressure)
 *
 * The server is TLS-only (rendezvous/PROTOCOL.md "TLS"), so every simulated agent is one
 * rdzv_conn (rendezvous/conn.c) on one libuv loop, TLS in token mode: the token from
 * MUSTER_TOKEN (required; the server must have the same) is the pre-shared key (ECDHE-PSK) and
 * goes into HELLO. Each agent: TCP connect, TLS handshake, HELLO, WELCOME, JOIN(job =
 * PREFIX-<k % JOBS>, min = max = its job's agent count, nproc 1, keep_alive_ms 0 = no
 * heartbeats expected), then it waits for ASSIGN. At most INFLIGHT agents (default 128, the
 * server's listen backlog) are between connect and WELCOME at once. When every agent has its
 * ASSIGN the tool checks each job's assignment (group ranks 0..n-1 once each, world size n, one
 * master), sends DONE for every agent, waits for JOB_DONE and prints:
 *
 *   agents=N jobs=J assign_all_ms=... (first connect -> last ASSIGN) welcome_all_ms=...
 *   done_all_ms=... server_vmhwm_kb=... server_vmrss_kb=...   (with -p)
 *   loadgen_vmhwm_kb=... server_cpu_ms=... server_cpu_us_per_join=...   (with -p)
 *
 * -T PROCS: the agents are split over PROCS processes (one libuv loop each, INFLIGHT shared
 * out), so that the generator is not the bottleneck on a machine with more cores; the parent
 * collects every ASSIGN through a pipe and checks them as above. -P: the agents offer plain PSK
 * suites only (no forward secrecy: --rdzv-conf forward_secrecy=0, rendezvous/tls.c).
 * server_cpu_ms is the server's user + system CPU time from the first connect to the end
 * (/proc/PID/stat), per join = divided by AGENTS.
 *
 * -R ROUNDS: coordinated restart rounds (one job, no -x). When every agent holds its ASSIGN,
 * agent 0 sends FAILED for its round, as a real agent whose worker failed does; every agent
 * answers the server's RESTART with its JOIN again (the same JOIN, node id and secret included:
 * rendezvous/client.c resends it) on the connection it holds, and waits for the new ASSIGN. A
 * round is timed from that FAILED to the last agent's new ASSIGN (all processes of -T: the
 * parent hands the go to the process of agent 0 and collects each process's last ASSIGN time,
 * CLOCK_MONOTONIC being one clock for all). Each new ASSIGN must keep the agent's ranks (the
 * same nodes came back: sticky ranks), the master, and carry round + 1 and the restart count.
 * Repeated ROUNDS times (JOIN.max_restarts = ROUNDS), then DONE as above. Prints one line per
 * round (restart_round_ms=... server_cpu_ms=... (with -p) loadgen_cpu_ms=..., the generator's
 * own processes: on a machine with few cores they compete with the server) before the summary
 * line, which then also holds restart_rounds=R restart_round_ms_min=... _median=... _max=...
 * restart_loadgen_cpu_ms_median=... and restart_server_cpu_ms_median=... (with -p).
 *
 * -K MS: keep-alive as a real agent's (--rdzv-conf keep_alive_interval, default 1 s): the JOIN
 * asks for it (heartbeat timeout 3 x MS) and every joined agent sends HEARTBEAT every MS, the
 * agents of a process spread evenly over the interval (real agents' timers are not in step);
 * the server's echoes are counted. Default 0: none, only a closed connection is a lost node.
 *
 * -x EXTRA: job 0 also has EXTRA real agents (min = max = its simulated agents + EXTRA; its
 * assignment check then only checks the simulated agents' ranks are distinct and < the size).
 *
 * -I IDLE: instead, hold IDLE connections that complete the TLS handshake and send HELLO (role
 * agent) and then stay silent, at most INFLIGHT (-w) of them between connect and WELCOME at
 * once (1,000 simultaneous ECDHE handshakes do not finish within the server's 5 s handshake
 * timeout on 2 cores: all are cut and retried forever); a connection the server cuts (its 30 s idle
 * timeout for connections in no job) is opened again at once. With -H they send no HELLO (handshake
 * only; the server cuts them at its 5 s handshake timeout, and they reconnect). Runs for -t seconds
 * (0 = until SIGINT/SIGTERM; -H ignores INFLIGHT), prints one line a second and a summary:
 *
 *   idle open=N welcomed=N (now handshaked/welcomed) opened=N cut=N failed=N
 *
 * Against a loopback endpoint (127.x.y.z) each group of LG_PER_SOURCE connections binds its own
 * source address (127.a.b.1, one /24 each): the server bounds connections and handshakes per /24
 * (PROTOCOL.md "Limits"), and thousands of agents from one address would measure those limits,
 * not the rendezvous. Real agents come from as many hosts.
 *
 * RLIMIT_NOFILE is raised as far as the hard limit allows.
 * Exit 0 on success, 1 on a protocol error, a bad assignment or the timeout (default 60 s).
 * Built by CMake as build/bench/loadgen (bench/CMakeLists.txt). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "clock.h"
#include "conn.h"
#include "cred.h"
#include "message.h"
#include "tls.h"

enum st {
    ST_IDLE,
    ST_CONNECTING,
    ST_HELLO,
    ST_JOINED,
    ST_ASSIGNED,
    ST_DONE_SENT,
    ST_FINISHED,
    ST_WELCOMED
};

struct ag {
    struct rdzv_conn conn;
    uv_connect_t creq;
    enum st st;
    int job, idx, open;
    int rnd; /* -R: the restart round it is in (0: the first) */
    struct rdzv_assign as, first;
};

static struct ag *ags;
static int lo, hi;         /* this process's agents: [lo, hi) */
static int report_fd = -1; /* -T child: where its ASSIGNs and times go */
static int n_procs = 1, plain_psk;
/* -R: rounds to run; per round of this process: agents with their ASSIGN, and the times of the
 * FAILED (agent 0's process) and of the last ASSIGN here (ns, mc_mono_ns) */
static int n_rounds, *n_in_round, ctl_fd = -1;
static int keep_alive_ms; /* -K */
static long n_hb_sent, n_hb_echoed;
static long long *t_failed, *t_last_assign;
static double *cpu_at_fail, *cpu_at_done, *lg_at_fail, *lg_at_done; /* server's, loadgen's */
static pid_t *child_pids;                                           /* -T */
static int n_agents, n_jobs = 1, inflight_max = 128, n_extra, idle_mode, no_hello;
static const char *prefix = "lg", *token;
static struct sockaddr_in srv;
static int srv_loopback; /* srv is in 127.0.0.0/8: spread the sources (see the top) */

#define LG_PER_SOURCE 32

/* Binds a's socket to its group's loopback source address. Returns 0 or a UV_E* error. */
static int bind_source(struct ag *a)
{
    struct sockaddr_in src;
    unsigned g = (unsigned)a->idx / LG_PER_SOURCE;
    char ip[32];

    /* one /24 per group: the server's per-source limits count per /24 */
    snprintf(ip, sizeof(ip), "127.%u.%u.1", 1 + (g / 250) % 250, g % 250);
    uv_ip4_addr(ip, 0, &src);
    return uv_tcp_bind(&a->conn.tcp, (const struct sockaddr *)&src, 0);
}
static long long t0;
static uv_loop_t *loop;
static struct rdzv_tls *tls;
static int n_welcomed, n_assigned, n_finished, inflight, next_connect, done_sent;
static long long t_welcome_all, t_assign_all, t_done_all;
static int timeout_s = 60, server_pid;
static int *pend, n_pend; /* idle mode: slots waiting to (re)connect */
static long i_open, i_welcomed, i_opened, i_cut, i_failed;

static int run_agents(double cpu0);
static int run_procs(double cpu0);
static int print_result(double cpu0);
static void report_assignments(void);

static int job_size(int j)
{
    return n_agents / n_jobs + (j < n_agents % n_jobs ? 1 : 0);
}

static void send_or_die(struct ag *a, const struct rdzv_msg *m)
{
    int err = rdzv_conn_send(&a->conn, m);
    if (err != 0) {
        fprintf(stderr, "loadgen: agent %d: send %s: %s\n", a->idx, rdzv_msg_name(m->type),
                uv_strerror(err));
        exit(1);
    }
}

static void start_connect(struct ag *a);

static void on_closed(struct rdzv_conn *conn)
{
    struct ag *a = conn->data;
    a->open = 0;
    if (idle_mode) {
        i_open--;
        pend[n_pend++] = a->idx; /* reconnected from on_check: keep the pressure up */
    }
}

static void on_error(struct rdzv_conn *conn, int err)
{
    struct ag *a = conn->data;
    if (idle_mode) {
        if (a->st == ST_WELCOMED || (no_hello && rdzv_conn_handshake_done(conn)))
            i_cut++;
        else
            i_failed++;
        if (a->st == ST_WELCOMED)
            i_welcomed--;
        else if (!no_hello)
            inflight--;
        a->st = ST_IDLE;
        rdzv_conn_close(conn, 0, on_closed);
        return;
    }
    const char *why = rdzv_conn_tls_error(conn);
    fprintf(stderr, "loadgen: agent %d: connection error in state %d: %s%s%s\n", a->idx, a->st,
            err == UV_EOF            ? "server closed the connection"
            : err < 0 && err > -4096 ? uv_strerror(err)
                                     : "?",
            *why ? ": " : "", why);
    exit(1);
}

/* The agent's JOIN: the same one every time, as rendezvous/client.c resends its saved JOIN after
 * a RESTART (node id and secret unchanged: that is what keeps the ranks sticky). */
static void make_join(const struct ag *a, struct rdzv_msg *out)
{
    memset(out, 0, sizeof(*out));
    out->type = RDZV_MSG_JOIN;
    struct rdzv_join *j = &out->u.join;
    snprintf(j->job_id, sizeof j->job_id, "%s-%d", prefix, a->job);
    j->min_nodes = j->max_nodes = (uint32_t)(job_size(a->job) + (a->job == 0 ? n_extra : 0));
    j->nproc = 1;
    snprintf(j->host, sizeof j->host, "sim%d", a->idx);
    snprintf(j->addr, sizeof j->addr, "10.%d.%d.%d", a->idx >> 16 & 255, a->idx >> 8 & 255,
             a->idx & 255);
    j->master_port = 20000 + (uint32_t)a->idx % 40000;
    j->last_call_ms = 0;
    j->join_timeout_ms = (uint32_t)timeout_s * 1000; /* the server gives up when we do */
    /* protocol 3: the node id commits to a secret (rendezvous/cred.h); one per agent */
    uint64_t seed = ((uint64_t)getpid() << 32) ^ (uint64_t)a->idx ^ 0x9e3779b97f4a7c15ULL;
    memset(j->node_secret, 0, sizeof(j->node_secret));
    memcpy(j->node_secret, &seed, sizeof(seed));
    j->node_id = rdzv_node_id_of(j->node_secret);
    j->keep_alive_ms = (uint32_t)keep_alive_ms; /* 0: only a closed connection is a lost node */
    j->heartbeat_timeout_ms = 3 * (uint32_t)keep_alive_ms; /* the agent's default: 3 misses */
    j->max_restarts = (uint32_t)n_rounds; /* 0 without -R: a FAILED would end the job */
}

static double server_cpu_ms(void);
static double loadgen_cpu_ms(void);
static void round_ready(int k);
static void report_line(const char *line);

/* -R: agent 0 reports the failure of its worker in the round it runs: round k + 1 begins. */
static void start_round(int k)
{
    struct ag *a = &ags[0];
    struct rdzv_msg m;

    memset(&m, 0, sizeof(m));
    m.type = RDZV_MSG_FAILED;
    m.u.failed.round = a->as.round;
    m.u.failed.rank = (int32_t)a->as.rank_offset; /* its one worker's global rank */
    m.u.failed.local_rank = 0;
    m.u.failed.exit_code = 1;
    m.u.failed.time_ms = (uint64_t)time(NULL) * 1000;
    snprintf(m.u.failed.host, sizeof(m.u.failed.host), "sim0");
    snprintf(m.u.failed.text, sizeof(m.u.failed.text), "loadgen: restart round %d", k);
    if (report_fd < 0) {
        cpu_at_fail[k] = server_pid > 0 ? server_cpu_ms() : 0;
        lg_at_fail[k] = loadgen_cpu_ms();
    }
    t_failed[k] = (long long)mc_mono_ns();
    send_or_die(a, &m);
    if (report_fd >= 0) {
        char line[64];

        snprintf(line, sizeof(line), "F %d %lld\n", k, t_failed[k]);
        report_line(line);
    }
}

/* -R: the new ASSIGN of an agent in restart round k >= 1 must be its first one's, one round on. */
static void check_reassign(const struct ag *a)
{
    const struct rdzv_assign *f = &a->first, *n = &a->as;

    if (n->group_rank != f->group_rank || n->group_world_size != f->group_world_size ||
        n->world_size != f->world_size || n->rank_offset != f->rank_offset ||
        n->round != f->round + (uint32_t)a->rnd || n->restart_count != (uint32_t)a->rnd ||
        strcmp(n->master_addr, f->master_addr) != 0 || n->master_port != f->master_port) {
        fprintf(stderr,
                "loadgen: agent %d: restart round %d: ASSIGN rank %u of %u round %u restarts %u "
                "master %s:%u, was rank %u of %u round %u master %s:%u\n",
                a->idx, a->rnd, n->group_rank, n->group_world_size, n->round, n->restart_count,
                n->master_addr, n->master_port, f->group_rank, f->group_world_size, f->round,
                f->master_addr, f->master_port);
        exit(1);
    }
}

static void on_msg(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct ag *a = conn->data;
    struct rdzv_msg out;
    memset(&out, 0, sizeof out);
    switch (m->type) {
    case RDZV_MSG_WELCOME: {
        inflight--;
        if (idle_mode) {
            a->st = ST_WELCOMED;
            i_welcomed++;
            break;
        }
        make_join(a, &out);
        send_or_die(a, &out);
        a->st = ST_JOINED;
        if (++n_welcomed == hi - lo)
            t_welcome_all = (long long)mc_mono_ns();
        break;
    }
    case RDZV_MSG_WAITING:
        break;
    case RDZV_MSG_HEARTBEAT:
        if (keep_alive_ms == 0) {
            fprintf(stderr, "loadgen: agent %d: HEARTBEAT without -K\n", a->idx);
            exit(1);
        }
        n_hb_echoed++;
        break;
    case RDZV_MSG_ASSIGN:
        if (a->st != ST_JOINED) {
            fprintf(stderr, "loadgen: agent %d: ASSIGN in state %d\n", a->idx, a->st);
            exit(1);
        }
        a->as = m->u.assign;
        a->st = ST_ASSIGNED;
        if (a->rnd == 0) {
            a->first = a->as;
            if (++n_assigned == hi - lo)
                t_assign_all = (long long)mc_mono_ns();
        } else
            check_reassign(a);
        if (n_rounds > 0 && ++n_in_round[a->rnd] == hi - lo)
            round_ready(a->rnd);
        break;
    case RDZV_MSG_RESTART:
        /* -R: like a real agent, stop (nothing runs here) and JOIN again on this connection */
        if (n_rounds == 0 || a->st != ST_ASSIGNED || a->rnd >= n_rounds ||
            m->u.restart.restart_count != (uint32_t)a->rnd + 1) {
            fprintf(stderr, "loadgen: agent %d: RESTART (count %u) in state %d, round %d\n", a->idx,
                    m->u.restart.restart_count, a->st, a->rnd);
            exit(1);
        }
        a->rnd++;
        make_join(a, &out);
        send_or_die(a, &out);
        a->st = ST_JOINED;
        break;
    case RDZV_MSG_JOB_DONE:
        a->st = ST_FINISHED;
        if (++n_finished == hi - lo)
            t_done_all = (long long)mc_mono_ns();
        break;
    case RDZV_MSG_ERROR:
        fprintf(stderr, "loadgen: agent %d: ERROR %u: %s\n", a->idx, m->u.error.code,
                m->u.error.text);
        exit(1);
    default:
        fprintf(stderr, "loadgen: agent %d: unexpected %s\n", a->idx, rdzv_msg_name(m->type));
        exit(1);
    }
}

static void on_connect(uv_connect_t *req, int status)
{
    struct ag *a = req->data;
    int err = status;
    if (err == 0)
        err = rdzv_conn_start_tls(&a->conn, tls, 0); /* the handshake starts now */
    if (err == 0 && !no_hello) {
        struct rdzv_msg m;
        memset(&m, 0, sizeof m);
        m.type = RDZV_MSG_HELLO;
        m.u.hello.version = RDZV_PROTO_VERSION;
        m.u.hello.role = RDZV_ROLE_AGENT;
        snprintf(m.u.hello.token, sizeof m.u.hello.token, "%s", token);
        err = rdzv_conn_send(&a->conn, &m); /* queued until the handshake is done */
    }
    if (err != 0) {
        if (idle_mode) {
            i_failed++;
            if (!no_hello)
                inflight--;
            rdzv_conn_close(&a->conn, 0, on_closed);
            return;
        }
        fprintf(stderr, "loadgen: agent %d: connect: %s\n", a->idx,
                err > -4096 ? uv_strerror(err) : "?");
        exit(1);
    }
    a->st = ST_HELLO;
}

static void start_connect(struct ag *a)
{
    int err = rdzv_conn_init(loop, &a->conn, on_msg, on_error, a), inited = err == 0;
    if (err == 0) {
        a->open = 1;
        a->creq.data = a;
        a->st = ST_CONNECTING;
        err = srv_loopback ? bind_source(a) : 0;
        if (err == 0)
            err = uv_tcp_connect(&a->creq, &a->conn.tcp, (const struct sockaddr *)&srv, on_connect);
        if (err != 0)
            rdzv_conn_close(&a->conn, 0, idle_mode ? on_closed : NULL);
    }
    if (err != 0) {
        fprintf(stderr, "loadgen: agent %d: connect: %s (raise ulimit -n?)\n", a->idx,
                uv_strerror(err));
        if (!idle_mode)
            exit(1);
        i_failed++;
        if (!no_hello)
            inflight--;
        if (!inited)
            pend[n_pend++] = a->idx; /* else on_closed queues it */
        return;
    }
    if (idle_mode) {
        i_open++;
        i_opened++;
    }
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
                fprintf(stderr,
                        "loadgen: job %d: bad ASSIGN for agent %d (rank %u of %u, world %u, offset "
                        "%u)\n",
                        j, i, a->as.group_rank, a->as.group_world_size, a->as.world_size,
                        a->as.rank_offset);
                return -1;
            }
            seen[a->as.group_rank] = 1;
            if (master && strcmp(master, a->as.master_addr) != 0) {
                fprintf(stderr, "loadgen: job %d: two masters %s and %s\n", j, master,
                        a->as.master_addr);
                return -1;
            }
            master = a->as.master_addr;
        }
        free(seen);
    }
    return 0;
}

static long long deadline;

/* -T child: one line per agent, then (at the end) one line of times; each line is one write
 * below PIPE_BUF, so the lines of several children never mix. */
static void report_line(const char *line)
{
    size_t n = strlen(line);

    if (write(report_fd, line, n) != (ssize_t)n)
        exit(1);
}

static void report_assignments(void)
{
    char line[400];

    for (int i = lo; i < hi; i++) {
        const struct rdzv_assign *as = &ags[i].as;

        snprintf(line, sizeof(line), "A %d %u %u %u %u %s\n", i, as->group_rank,
                 as->group_world_size, as->world_size, as->rank_offset, as->master_addr);
        report_line(line);
    }
}

/* Parent of -T, -R: child p's "R k T" says all its agents hold round k's ASSIGN (at T); when
 * every child said so, round k + 1 starts: one byte to child 0 (go_fd). "F k T": the FAILED. */
static void collect_round(const char *line, int go_fd)
{
    int k;
    long long t;

    if (sscanf(line, "F %d %lld", &k, &t) == 2 && k >= 0 && k <= n_rounds) {
        t_failed[k] = t;
        return;
    }
    if (sscanf(line, "R %d %lld", &k, &t) != 2 || k < 0 || k > n_rounds)
        return;
    t_last_assign[k] = t > t_last_assign[k] ? t : t_last_assign[k];
    if (++n_in_round[k] < n_procs)
        return;
    if (server_pid > 0)
        cpu_at_done[k] = server_cpu_ms();
    lg_at_done[k] = loadgen_cpu_ms();
    if (k == n_rounds)
        return;
    if (server_pid > 0)
        cpu_at_fail[k + 1] = server_cpu_ms();
    lg_at_fail[k + 1] = loadgen_cpu_ms();
    if (write(go_fd, "g", 1) != 1)
        fprintf(stderr, "loadgen: cannot start restart round %d: %s\n", k + 1, strerror(errno));
}

/* Parent of -T: reads the children's lines, fills ags[].as and the latest times. */
static int collect(int fd, int go_fd)
{
    static char buf[1 << 16];
    size_t have = 0;
    ssize_t r;

    for (;;) {
        r = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        have += (size_t)r;
        buf[have] = 0;
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            long long w, a, d;
            long hs, he;
            int i;
            unsigned gr, gw, ws, off;
            char master[256];

            *nl = 0;
            if (sscanf(line, "A %d %u %u %u %u %255s", &i, &gr, &gw, &ws, &off, master) == 6 &&
                i >= 0 && i < n_agents) {
                ags[i].as.group_rank = gr;
                ags[i].as.group_world_size = gw;
                ags[i].as.world_size = ws;
                ags[i].as.rank_offset = off;
                snprintf(ags[i].as.master_addr, sizeof(ags[i].as.master_addr), "%s", master);
                n_assigned++;
            } else if (sscanf(line, "T %lld %lld %lld", &w, &a, &d) == 3) {
                t_welcome_all = w > t_welcome_all ? w : t_welcome_all;
                t_assign_all = a > t_assign_all ? a : t_assign_all;
                t_done_all = d > t_done_all ? d : t_done_all;
                n_finished++;
            } else if (sscanf(line, "H %ld %ld", &hs, &he) == 2) {
                n_hb_sent += hs;
                n_hb_echoed += he;
            } else if (line[0] == 'R' || line[0] == 'F') {
                collect_round(line, go_fd);
            }
            line = nl + 1;
        }
        have = strlen(line);
        memmove(buf, line, have);
    }
    return n_assigned == n_agents && n_finished == n_procs ? 0 : -1;
}

/* A process's user + system CPU time in ms (/proc/PID/stat fields 14 and 15), or -1. */
static double proc_cpu_ms(int pid)
{
    char path[64], buf[1024];
    unsigned long ut, st;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

static double server_cpu_ms(void)
{
    return proc_cpu_ms(server_pid);
}

/* -R: the generator's own CPU time (its -T children's, from the parent), to tell a round that
 * waited for the server from one that waited for the simulated agents. */
static double loadgen_cpu_ms(void)
{
    double sum = 0;

    if (child_pids == NULL)
        return proc_cpu_ms(getpid());
    for (int p = 0; p < n_procs; p++)
        sum += proc_cpu_ms(child_pids[p]);
    return sum;
}

/* -R: every agent of this process holds its ASSIGN of round k. Alone, this process starts the
 * next round itself; a -T child tells the parent, which gives the go (ctl_fd) when all did. */
static int go_round; /* the round to start from on_check, 0: none */

static void round_ready(int k)
{
    t_last_assign[k] = (long long)mc_mono_ns();
    if (report_fd >= 0) {
        char line[64];

        snprintf(line, sizeof(line), "R %d %lld\n", k, t_last_assign[k]);
        report_line(line);
        return;
    }
    if (server_pid > 0)
        cpu_at_done[k] = server_cpu_ms();
    lg_at_done[k] = loadgen_cpu_ms();
    if (k < n_rounds)
        go_round = k + 1;
}

/* -T child 0: one byte from the parent per round to start. */
static void on_ctl(uv_poll_t *h, int status, int events)
{
    static int started;
    char buf[16];
    ssize_t r;

    (void)events;
    r = status == 0 ? read(ctl_fd, buf, sizeof(buf)) : -1;
    if (r <= 0) {
        if (r < 0 && errno == EAGAIN)
            return;
        uv_poll_stop(h); /* the parent is gone: the timeout ends this process */
        return;
    }
    started += (int)r;
    go_round = started; /* the parent waits for each round, so one byte at a time */
}

static int rounds_done(void)
{
    return n_rounds == 0 || n_in_round[n_rounds] == hi - lo;
}

/* After every loop iteration: start connects up to the in-flight limit, send DONE when all
 * agents are assigned, stop when all are done. */
static void on_check(uv_check_t *h)
{
    (void)h;
    if (idle_mode) {
        while (n_pend > 0 && (no_hello || inflight < inflight_max)) {
            inflight++;
            start_connect(&ags[pend[--n_pend]]);
        }
        return;
    }
    while (next_connect < hi && inflight < inflight_max) {
        start_connect(&ags[next_connect++]);
        inflight++;
    }
    if (go_round > 0) {
        int k = go_round;

        go_round = 0;
        start_round(k);
    }
    if (n_assigned == hi - lo && rounds_done() && !done_sent) {
        if (report_fd >= 0)
            report_assignments();
        else if (check_assignments() != 0)
            exit(1);
        for (int i = lo; i < hi; i++) {
            struct rdzv_msg m;
            memset(&m, 0, sizeof m);
            m.type = RDZV_MSG_DONE;
            m.u.done.round = ags[i].as.round;
            send_or_die(&ags[i], &m);
            ags[i].st = ST_DONE_SENT;
        }
        done_sent = 1;
    }
    if (n_finished == hi - lo)
        uv_stop(loop);
}

static void on_tick(uv_timer_t *t)
{
    if (idle_mode) {
        static int secs;
        printf("idle t=%d open=%ld welcomed=%ld opened=%ld cut=%ld failed=%ld\n", ++secs, i_open,
               i_welcomed, i_opened, i_cut, i_failed);
        fflush(stdout);
        if (timeout_s > 0 && secs >= timeout_s)
            uv_stop(loop);
        return;
    }
    (void)t;
    if ((long long)mc_mono_ns() > deadline) {
        fprintf(stderr,
                "loadgen: timeout after %d s: %d connected+welcomed, %d assigned, %d done of %d\n",
                timeout_s, n_welcomed, n_assigned, n_finished, n_agents);
        for (int k = 1; k <= n_rounds; k++) /* -R: where the rounds stopped */
            if (n_in_round[k] < hi - lo) {
                fprintf(
                    stderr,
                    "loadgen: restart round %d: %d of this process's %d agents have its ASSIGN\n",
                    k, n_in_round[k], hi - lo);
                break;
            }
        exit(1);
    }
}

/* -K: every LG_HB_TICK_MS, the agents whose turn it is (idx % slices) send HEARTBEAT, so that
 * each sends one every keep_alive_ms. */
#define LG_HB_TICK_MS 10

static void on_heartbeat_tick(uv_timer_t *t)
{
    static unsigned tick;
    unsigned slices = (unsigned)keep_alive_ms / LG_HB_TICK_MS, turn;

    (void)t;
    slices = slices > 0 ? slices : 1;
    turn = tick++ % slices;
    for (int i = lo + (int)((turn + slices - (unsigned)lo % slices) % slices); i < hi;
         i += (int)slices) {
        struct ag *a = &ags[i];
        struct rdzv_msg m;

        if (a->st != ST_JOINED && a->st != ST_ASSIGNED)
            continue;
        memset(&m, 0, sizeof(m));
        m.type = RDZV_MSG_HEARTBEAT;
        m.u.heartbeat.round = a->as.round;
        m.u.heartbeat.seq = (uint64_t)++n_hb_sent;
        send_or_die(a, &m);
    }
}

static void on_signal(uv_signal_t *s, int signum)
{
    (void)s;
    (void)signum;
    uv_stop(loop);
}

/* Long (~90 lines): the option parsing, then the checks of the endpoint and limits, in the
 * order the usage text gives them; each step is a few lines and reads best in sequence. */
int main(int argc, char **argv)
{
    const char *endpoint = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "e:n:j:w:t:p:i:x:I:HT:PR:K:")) != -1) {
        switch (opt) {
        case 'e':
            endpoint = optarg;
            break;
        case 'n':
            n_agents = atoi(optarg);
            break;
        case 'j':
            n_jobs = atoi(optarg);
            break;
        case 'w':
            inflight_max = atoi(optarg);
            break;
        case 't':
            timeout_s = atoi(optarg);
            break;
        case 'p':
            server_pid = atoi(optarg);
            break;
        case 'i':
            prefix = optarg;
            break;
        case 'x':
            n_extra = atoi(optarg);
            break;
        case 'I':
            idle_mode = 1;
            n_agents = atoi(optarg);
            break;
        case 'H':
            no_hello = 1;
            break;
        case 'T':
            n_procs = atoi(optarg);
            break;
        case 'P':
            plain_psk = 1;
            break;
        case 'R':
            n_rounds = atoi(optarg);
            break;
        case 'K':
            keep_alive_ms = atoi(optarg);
            break;
        default:
            fprintf(stderr, "usage: loadgen -e HOST:PORT -n AGENTS [-j JOBS] [-w INFLIGHT] [-t "
                            "TIMEOUT_S] [-p SERVER_PID] [-i PREFIX] [-x EXTRA] [-T PROCS] [-P] [-R "
                            "ROUNDS] [-K MS]\n"
                            "       loadgen -e HOST:PORT -I IDLE [-H] [-t SECONDS]\n");
            return 2;
        }
    }
    if (!endpoint || n_agents < 1 || n_jobs < 1 || n_jobs > n_agents || n_procs < 1 ||
        n_procs > n_agents || (idle_mode && n_procs > 1)) {
        fprintf(stderr, "loadgen: need -e HOST:PORT and -n AGENTS >= JOBS >= 1 (or -I IDLE)\n");
        return 2;
    }
    if (keep_alive_ms < 0 || keep_alive_ms > 600000 || (keep_alive_ms > 0 && idle_mode)) {
        fprintf(stderr, "loadgen: -K MS: 0..600000, not with -I\n");
        return 2;
    }
    if (n_rounds < 0 || n_rounds > 100000 ||
        (n_rounds > 0 && (n_jobs != 1 || n_extra != 0 || idle_mode))) {
        fprintf(stderr, "loadgen: -R ROUNDS (0..100000) needs one job (-j 1), no -x and no -I\n");
        return 2;
    }
    n_in_round = calloc((size_t)n_rounds + 1, sizeof(*n_in_round));
    t_failed = calloc((size_t)n_rounds + 1, sizeof(*t_failed));
    t_last_assign = calloc((size_t)n_rounds + 1, sizeof(*t_last_assign));
    cpu_at_fail = calloc((size_t)n_rounds + 1, sizeof(*cpu_at_fail));
    cpu_at_done = calloc((size_t)n_rounds + 1, sizeof(*cpu_at_done));
    lg_at_fail = calloc((size_t)n_rounds + 1, sizeof(*lg_at_fail));
    lg_at_done = calloc((size_t)n_rounds + 1, sizeof(*lg_at_done));
    if (!n_in_round || !t_failed || !t_last_assign || !cpu_at_fail || !cpu_at_done || !lg_at_fail ||
        !lg_at_done)
        return 1;
    token = getenv("MUSTER_TOKEN");
    if (!token || !*token) {
        fprintf(stderr, "loadgen: set MUSTER_TOKEN (the server's token: TLS pre-shared key)\n");
        return 2;
    }
    char host[256];
    const char *colon = strrchr(endpoint, ':');
    if (!colon || (size_t)(colon - endpoint) >= sizeof host)
        return 2;
    memcpy(host, endpoint, (size_t)(colon - endpoint));
    host[colon - endpoint] = 0;
    if (uv_ip4_addr(host, atoi(colon + 1), &srv) != 0) {
        fprintf(stderr, "loadgen: numeric IPv4 endpoint only\n");
        return 2;
    }
    srv_loopback = (ntohl(srv.sin_addr.s_addr) >> 24) == 127;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)n_agents + 64)
        fprintf(stderr, "loadgen: warning: RLIMIT_NOFILE %llu < %d agents + 64\n",
                (unsigned long long)rl.rlim_cur, n_agents);
    signal(SIGPIPE, SIG_IGN);
    ags = calloc((size_t)n_agents, sizeof *ags);
    for (int i = 0; i < n_agents; i++) {
        ags[i].idx = i;
        ags[i].job = i % n_jobs;
    }
    lo = 0;
    hi = n_agents;
    double cpu0 = server_pid > 0 ? server_cpu_ms() : -1;
    t0 = (long long)mc_mono_ns();
    if (n_procs > 1)
        return run_procs(cpu0);
    return run_agents(cpu0);
}

/* Runs agents [lo, hi) on this process's loop. */
static int run_agents(double cpu0)
{
    char why[256] = "";
    struct rdzv_tls_opts o = {.token = token, .no_forward_secrecy = plain_psk};
    if (rdzv_tls_new(&o, 0, &tls, why, sizeof why) != 0) {
        fprintf(stderr, "loadgen: TLS setup: %s\n", why);
        return 1;
    }
    loop = uv_default_loop();
    uv_check_t check;
    uv_timer_t tick;
    uv_signal_t sig[2];
    uv_check_init(loop, &check);
    uv_check_start(&check, on_check);
    uv_timer_init(loop, &tick);
    uv_timer_start(&tick, on_tick, idle_mode ? 1000 : 100, idle_mode ? 1000 : 100);
    uv_signal_init(loop, &sig[0]);
    uv_signal_start(&sig[0], on_signal, SIGINT);
    uv_signal_init(loop, &sig[1]);
    uv_signal_start(&sig[1], on_signal, SIGTERM);
    deadline = t0 + (long long)timeout_s * 1000000000LL;
    if (idle_mode) {
        pend = malloc((size_t)n_agents * sizeof *pend);
        for (int i = n_agents - 1; i >= 0; i--)
            pend[n_pend++] = i;
        on_check(&check);
        uv_run(loop, UV_RUN_DEFAULT);
        printf("idle open=%ld welcomed=%ld opened=%ld cut=%ld failed=%ld\n", i_open, i_welcomed,
               i_opened, i_cut, i_failed);
        return 0;
    }
    uv_timer_t hb;
    if (keep_alive_ms > 0) {
        uv_timer_init(loop, &hb);
        uv_timer_start(&hb, on_heartbeat_tick, LG_HB_TICK_MS, LG_HB_TICK_MS);
    }
    uv_poll_t ctl;
    if (ctl_fd >= 0) { /* -T child 0: the parent's go for each restart round */
        uv_poll_init(loop, &ctl, ctl_fd);
        uv_poll_start(&ctl, UV_READABLE, on_ctl);
    }
    next_connect = lo;
    on_check(&check); /* the first connects */
    uv_run(loop, UV_RUN_DEFAULT);
    if (n_finished < hi - lo)
        return 1;
    if (report_fd >= 0) {
        char line[128];

        snprintf(line, sizeof(line), "H %ld %ld\n", n_hb_sent, n_hb_echoed);
        report_line(line);
        snprintf(line, sizeof(line), "T %lld %lld %lld\n", t_welcome_all, t_assign_all, t_done_all);
        report_line(line);
        return 0;
    }
    return print_result(cpu0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* -R: one line per round; returns the summary's fields in tail (min, median, max). */
static void print_rounds(char *tail, size_t len)
{
    double *ms = calloc((size_t)n_rounds, sizeof(*ms)),
           *cpu = calloc((size_t)n_rounds, sizeof(*cpu)),
           *lg = calloc((size_t)n_rounds, sizeof(*lg));

    if (ms == NULL || cpu == NULL || lg == NULL)
        exit(1);
    for (int k = 1; k <= n_rounds; k++) {
        ms[k - 1] = (double)(t_last_assign[k] - t_failed[k]) / 1e6;
        cpu[k - 1] = cpu_at_done[k] - cpu_at_fail[k];
        printf("restart_round=%d restart_round_ms=%.1f", k, ms[k - 1]);
        lg[k - 1] = lg_at_done[k] - lg_at_fail[k];
        if (server_pid > 0)
            printf(" server_cpu_ms=%.0f", cpu[k - 1]);
        printf(" loadgen_cpu_ms=%.0f\n", lg[k - 1]);
    }
    qsort(ms, (size_t)n_rounds, sizeof(*ms), cmp_double);
    qsort(cpu, (size_t)n_rounds, sizeof(*cpu), cmp_double);
    qsort(lg, (size_t)n_rounds, sizeof(*lg), cmp_double);
    int n = snprintf(tail, len,
                     " restart_rounds=%d restart_round_ms_min=%.1f restart_round_ms_median=%.1f "
                     "restart_round_ms_max=%.1f restart_loadgen_cpu_ms_median=%.0f",
                     n_rounds, ms[0], ms[n_rounds / 2], ms[n_rounds - 1], lg[n_rounds / 2]);
    if (server_pid > 0 && n > 0 && (size_t)n < len)
        snprintf(tail + n, len - (size_t)n, " restart_server_cpu_ms_median=%.0f",
                 cpu[n_rounds / 2]);
    free(ms);
    free(cpu);
    free(lg);
}

static int print_result(double cpu0)
{
    char rounds[256] = "";

    if (n_rounds > 0)
        print_rounds(rounds, sizeof(rounds));
    printf("agents=%d jobs=%d assign_all_ms=%.1f welcome_all_ms=%.1f done_all_ms=%.1f", n_agents,
           n_jobs, (t_assign_all - t0) / 1e6, (t_welcome_all - t0) / 1e6, (t_done_all - t0) / 1e6);
    if (server_pid > 0)
        printf(" server_vmhwm_kb=%ld server_vmrss_kb=%ld", proc_kb(server_pid, "VmHWM:"),
               proc_kb(server_pid, "VmRSS:"));
    printf(" loadgen_vmhwm_kb=%ld", proc_kb(getpid(), "VmHWM:"));
    double cpu1 = server_pid > 0 ? server_cpu_ms() : -1;
    if (cpu0 >= 0 && cpu1 >= 0)
        printf(" server_cpu_ms=%.0f server_cpu_us_per_join=%.1f", cpu1 - cpu0,
               (cpu1 - cpu0) * 1000.0 / n_agents);
    if (keep_alive_ms > 0)
        printf(" keep_alive_ms=%d heartbeats=%ld echoes=%ld", keep_alive_ms, n_hb_sent,
               n_hb_echoed);
    printf("%s procs=%d psk=%s\n", rounds, n_procs, plain_psk ? "plain" : "ecdhe");
    return 0;
}

/* -T: forks n_procs children, each running a share of the agents and of INFLIGHT, and checks
 * what they report. */
static int run_procs(double cpu0)
{
    int fds[2], ctl[2], failed = 0;

    if (pipe(fds) != 0 || pipe(ctl) != 0)
        return 1;
    child_pids = calloc((size_t)n_procs, sizeof(*child_pids));
    if (child_pids == NULL)
        return 1;
    fflush(NULL);
    for (int p = 0; p < n_procs; p++) {
        pid_t pid = fork();

        if (pid < 0)
            return 1;
        child_pids[p] = pid;
        if (pid == 0) {
            free(child_pids);
            child_pids = NULL;
            close(fds[0]);
            close(ctl[1]);
            if (p == 0)
                ctl_fd = ctl[0]; /* agent 0, who sends each round's FAILED, is child 0's */
            else
                close(ctl[0]);
            report_fd = fds[1];
            lo = (int)((long long)n_agents * p / n_procs);
            hi = (int)((long long)n_agents * (p + 1) / n_procs);
            inflight_max = inflight_max / n_procs > 0 ? inflight_max / n_procs : 1;
            _exit(run_agents(-1));
        }
    }
    close(fds[1]);
    close(ctl[0]);
    int rc = collect(fds[0], ctl[1]);
    close(ctl[1]);
    for (int p = 0; p < n_procs; p++) {
        int st;

        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed = 1;
    }
    for (int k = 1; k <= n_rounds && rc == 0; k++)
        rc = n_in_round[k] == n_procs && t_failed[k] > 0 ? 0 : -1;
    if (failed || rc != 0) {
        fprintf(stderr, "loadgen: a child failed (%d of %d agents assigned)\n", n_assigned,
                n_agents);
        return 1;
    }
    if (check_assignments() != 0)
        return 1;
    n_finished = n_agents;
    return print_result(cpu0);
}
