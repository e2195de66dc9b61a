/* The rendezvous server: one libuv TCP listener holding many jobs keyed by job id.
 * The same object runs inside `muster run --standalone` (embedded) and, later, as the
 * `muster server` daemon. */
#ifndef MUSTER_RDZV_SERVER_H
#define MUSTER_RDZV_SERVER_H

#include <stddef.h>
#include <uv.h>

#include "log.h"

struct rdzv_server;
struct rdzv_tls_opts;

/* Resource limits of one server, with named defaults. Hitting any of them closes (or refuses)
 * only the offending connection or request: it is counted in /metrics as
 * muster_limit_hits_total{limit="..."}, logged once per peer address, and the server goes on.
 * The frame size limit is the protocol's RDZV_MAX_PAYLOAD and not configurable. Every client is
 * bounded (STYLE.md "Every client bounded"): its connections, its unsent replies, the jobs it
 * can create and the KV memory it can fill, so that one token holder cannot take the server
 * from the others. */
#define RDZV_LIMIT_MAX_CONNECTIONS 16384u /* open protocol connections; more are closed at once */
/* Open connections from one source network (a /24 or /64: hslimit.h
 * rdzv_hslimit_group). A quarter of the connection limit: one network cannot take the server, and
 * the benchmarks' 1,024 real agents plus 2,000 idle connections on loopback still fit
 * (bench/loadgen spreads its 10,000 over many 127.x addresses). */
#define RDZV_LIMIT_MAX_CONNECTIONS_PER_SOURCE 4096u
#define RDZV_LIMIT_HANDSHAKE_MS 5000u /* from accept until HELLO is accepted */
#define RDZV_LIMIT_IDLE_MS 30000u     /* silence of a connection that is in no job */
#define RDZV_LIMIT_MAX_JOBS 4096u     /* jobs held at once; a JOIN for one more: ERROR */
/* Key + value bytes of every job's KV store together, each key also charged
 * RDZV_KV_KEY_OVERHEAD bytes for its bookkeeping: 1 GiB. */
#define RDZV_LIMIT_KV_MAX_TOTAL_BYTES ((size_t)1 << 30)
/* Bytes queued for one connection and not yet taken by its socket (TLS records included). The
 * clients are request/response with one request in flight, so a reader is never more than a
 * few frames behind: 1 MiB is 16 frames of the largest size. A peer over it stopped reading. */
#define RDZV_LIMIT_SEND_QUEUE_MAX ((size_t)1 << 20)
/* Attached worker connections per job: this many per process of the job's world (members and
 * waiting joiners, sum of nproc) plus the slack. Workers of a round being replaced overlap with
 * the new ones for a moment, and libmuster keeps one connection per worker: 4x leaves room
 * for restarts and for tools, the slack for a job that has not filled yet. */
#define RDZV_LIMIT_JOB_WORKERS_PER_PROC 4u
#define RDZV_LIMIT_JOB_WORKERS_SLACK 64u
/* TLS handshakes per source network (a /24 or /64): before a peer
 * proves anything, each ClientHello costs the server a key generation (in the thread pool,
 * conn.c). At most this many in flight from one network (accepted, no message yet), and at most
 * RATE new ones a second with a bucket of BURST; over the rate, the connection is closed before
 * any TLS work; over the count, the network's oldest idle connection is evicted for it (closed
 * before any TLS work only when none is idle: see PREAUTH_MAX below). Generous
 * enough for a node's agent and workers, and for bench/rdzv_bench.sh's 1,024 loopback agents. */
#define RDZV_LIMIT_HANDSHAKES_PER_SOURCE 128u
#define RDZV_LIMIT_HANDSHAKE_RATE 200u   /* per second and source */
#define RDZV_LIMIT_HANDSHAKE_BURST 2048u /* handshakes a quiet source may start at once */
/* Held KV requests (KV_GET waiting for a key, BARRIER arrivals): per worker
 * connection RDZV_KV_MAX_HELD_PER_PEER (64: a TCPStore client has a few waits in flight, a
 * libmuster worker one); per job RDZV_KV_MAX_HELD (4096) plus RDZV_LIMIT_KV_HELD_PER_WORKER for
 * each of its attached worker connections, so a job of 10,000 processes fits; and for all jobs
 * together RDZV_LIMIT_KV_MAX_HELD_TOTAL (each costs ~100 bytes of server memory). Over any of
 * them, the request gets KV_REPLY LIMIT at once. */
#define RDZV_LIMIT_KV_HELD_PER_WORKER 8u
#define RDZV_LIMIT_KV_MAX_HELD_TOTAL 1048576u
/* Per job credential scope (rendezvous/scope.h): one team's "teamA-*" credential may
 * hold at most this many jobs and open connections, so that it cannot take the server-wide
 * caps from the other teams (4,096 silent JOINs filled max_jobs in 25 s). Jobs: a sixteenth of
 * max_jobs, far above what one team runs at once (Slurm's MaxJobsPerUser spirit). Connections:
 * half of max_connections, so one team's single job of up to 8,192 agents still fits; a bigger
 * one needs --max-connections-per-credential. The server secret and client certificates
 * (operators) get only the server-wide caps. */
#define RDZV_LIMIT_MAX_JOBS_PER_CREDENTIAL 256u
#define RDZV_LIMIT_MAX_CONNECTIONS_PER_CREDENTIAL 8192u
/* KV bytes and held KV requests of all the jobs of one job credential scope together: half of
 * the server-wide ones, so one team's jobs cannot fill the KV memory every job shares; eight
 * jobs at their own byte quota (64 MiB) still fit. */
#define RDZV_LIMIT_KV_MAX_BYTES_PER_CREDENTIAL ((size_t)512 << 20)
#define RDZV_LIMIT_KV_MAX_HELD_PER_CREDENTIAL 524288u
/* Pre-authentication budget. Connections accepted whose HELLO is not yet accepted
 * share a pool of PREAUTH_MAX places, a quarter of max_connections: the rest is kept for
 * authenticated agents and workers, which unauthenticated ones can never squeeze out. When the
 * pool is full, a new connection evicts the oldest idle unauthenticated one (not a byte since
 * accept, or none for 500 ms), so that silent connections cannot hold the place a real client needs
 * for the milliseconds of its handshake. A connection that sends no byte within FIRST_BYTE_MS is
 * closed (a real client sends its ClientHello at once). */
#define RDZV_LIMIT_PREAUTH_MAX 4096u
#define RDZV_LIMIT_FIRST_BYTE_MS 2000u
/* HTTP connections open at once; a new one over it evicts the oldest still reading its head. */
#define RDZV_LIMIT_HTTP_MAX_CONNECTIONS 256u

struct rdzv_limits {
    unsigned max_connections;            /* 0 = RDZV_LIMIT_MAX_CONNECTIONS */
    unsigned max_connections_per_source; /* 0 = RDZV_LIMIT_MAX_CONNECTIONS_PER_SOURCE */
    unsigned handshake_ms;               /* 0 = RDZV_LIMIT_HANDSHAKE_MS */
    unsigned idle_ms;                    /* 0 = RDZV_LIMIT_IDLE_MS */
    size_t kv_max_keys;                  /* per job; 0 = RDZV_KV_MAX_KEYS */
    size_t kv_max_bytes;                 /* per job, key + value bytes; 0 = RDZV_KV_MAX_BYTES */
    size_t kv_max_total_bytes;           /* all jobs together; 0 = RDZV_LIMIT_KV_MAX_TOTAL_BYTES */
    unsigned max_jobs;                   /* 0 = RDZV_LIMIT_MAX_JOBS */
    size_t send_queue_max;               /* per connection; 0 = RDZV_LIMIT_SEND_QUEUE_MAX */
    unsigned job_workers_per_proc;       /* 0 = RDZV_LIMIT_JOB_WORKERS_PER_PROC */
    unsigned job_workers_slack;          /* 0 = RDZV_LIMIT_JOB_WORKERS_SLACK */
    unsigned handshakes_per_source;      /* 0 = RDZV_LIMIT_HANDSHAKES_PER_SOURCE */
    unsigned handshake_rate;             /* per second and source; 0 = RDZV_LIMIT_HANDSHAKE_RATE */
    unsigned handshake_burst;            /* 0 = RDZV_LIMIT_HANDSHAKE_BURST */
    /* held KV requests: per connection, per job (+ kv_held_per_worker per attached worker
     * connection) and all jobs together; 0 = RDZV_KV_MAX_HELD_PER_PEER, RDZV_KV_MAX_HELD,
     * RDZV_LIMIT_KV_HELD_PER_WORKER, RDZV_LIMIT_KV_MAX_HELD_TOTAL */
    unsigned kv_max_held_per_conn;
    unsigned kv_max_held_per_job;
    unsigned kv_held_per_worker;
    unsigned kv_max_held_total;
    /* per job credential scope */
    unsigned max_jobs_per_credential;        /* 0 = RDZV_LIMIT_MAX_JOBS_PER_CREDENTIAL */
    unsigned max_connections_per_credential; /* 0 = RDZV_LIMIT_MAX_CONNECTIONS_PER_CREDENTIAL */
    size_t kv_max_bytes_per_credential;      /* 0 = RDZV_LIMIT_KV_MAX_BYTES_PER_CREDENTIAL */
    unsigned kv_max_held_per_credential;     /* 0 = RDZV_LIMIT_KV_MAX_HELD_PER_CREDENTIAL */
    unsigned preauth_max;          /* 0 = RDZV_LIMIT_PREAUTH_MAX (at most max_connections) */
    unsigned first_byte_ms;        /* 0 = RDZV_LIMIT_FIRST_BYTE_MS */
    unsigned http_max_connections; /* 0 = RDZV_LIMIT_HTTP_MAX_CONNECTIONS */
    /* each job's log (logring.h): 0 = RDZV_LOG_RING_BYTES, RDZV_LOG_JOB_LINES_PER_S,
     * RDZV_LOG_JOB_BYTES_PER_S */
    size_t log_ring_bytes;
    unsigned log_lines_per_sec;
    size_t log_bytes_per_sec;
    size_t log_max_total_bytes; /* every job's ring together; 0 = RDZV_LOG_TOTAL_BYTES */
};

/* The defaults above, spelled out. */
struct rdzv_limits rdzv_limits_default(void);

/* Fits the connection limits of l (zero fields: the defaults) into nofile descriptors: when
 * max_connections + http_max_connections + RDZV_FD_MARGIN do not fit, both are lowered (HTTP
 * to an eighth of what is left at most, the protocol gets the rest, the pre-authentication
 * pool a quarter of that) and a one-line explanation is written to why (may be NULL). Returns
 * 1 when l was lowered, 0 when it fits, -EMFILE when not even RDZV_FD_MARGIN + 64 fit. */
#define RDZV_FD_MARGIN 64u /* listeners, the loop, log and token files, the thread pool */
int rdzv_limits_fit_fds(struct rdzv_limits *l, unsigned long nofile, char *why, size_t len);

/* /status and / (they show hosts and addresses) over HTTP: public when on, else only with
 * "Authorization: Bearer <observer credential>" (`muster token --read-only`) or the server's
 * secret. Off by default. */
void rdzv_server_set_http_public_status(struct rdzv_server *s, int on);

/* One line of the server's log (no newline, escaped), e.g. a refused peer and why, with its
 * level (common/log.h). Never holds a token or other secret. */
typedef void (*rdzv_server_log_cb)(void *data, enum mc_log_level level, const char *line);

/* Binds host:port (port 0 = ephemeral) and starts listening on loop, in token mode: every
 * connection is TLS 1.2 with token as the pre-shared key (ECDHE-PSK), and HELLO must carry the
 * same token. token is required (copied): NULL or "" is UV_EINVAL, as is one over
 * RDZV_TOKEN_MAX. Otherwise returns 0 or a negative errno (UV_EADDRINUSE, UV_EADDRNOTAVAIL,
 * UV_EINVAL for an unparseable host, -ENOMEM...). Host may be a numeric IPv4/IPv6 address or a
 * name (resolved synchronously); NULL or "" means 0.0.0.0. When bind or listen fails, the
 * half-built server's memory is released by the loop's next run (its listener handle must be
 * closed asynchronously, like any libuv handle). */
int rdzv_server_new(uv_loop_t *loop, const char *host, unsigned port, const char *token,
                    struct rdzv_server **out);

/* Replaces the limits (copied; zero fields take the defaults). Applies to connections accepted
 * and jobs created from now on (the KV total and the job count at once); timers of open
 * connections keep their old deadline. */
void rdzv_server_set_limits(struct rdzv_server *s, const struct rdzv_limits *limits);

/* Where log lines go: cb(data, line), or stderr ("muster: server: ...") when cb is NULL, the
 * default. Borrows data. */
void rdzv_server_set_log(struct rdzv_server *s, rdzv_server_log_cb cb, void *data);

/* A hint appended to the log line of a failed TLS handshake (copied; NULL or "" for none): an
 * agent hosting its job's rendezvous with the per-user token says there that the nodes' tokens
 * differ and how to fix it. */
void rdzv_server_set_auth_hint(struct rdzv_server *s, const char *hint);

/* As rdzv_server_new(), with the TLS settings of tls.h (borrowed; files are read now): token
 * mode when opts->token is set and opts->cert_file is NULL, certificate mode (client
 * certificates verified against opts->ca_file) otherwise; with a token in certificate mode,
 * HELLO must carry it too. Returns also rdzv_tls_new()'s errors (-EINVAL, -ENOENT, -EACCES,
 * -EBADMSG), after one line on stderr saying why. */
int rdzv_server_new_tls(uv_loop_t *loop, const char *host, unsigned port,
                        const struct rdzv_tls_opts *opts, struct rdzv_server **out);

/* An in-process channel to this server for the agent that hosts it: one end of a
 * socketpair becomes a connection with the authority of the server's own key (as a client
 * proving it over TLS would have), the other end is returned in *fd for rdzv_client_new_local.
 * No TLS and no handshake: both ends live in this process. addr (copied; NULL: "127.0.0.1") is
 * the address the connection stands for (JOIN without an address gets it). Returns 0, or a
 * negative errno (the server is closing, has no key, or out of descriptors or memory). */
int rdzv_server_connect_local(struct rdzv_server *srv, const char *addr, uv_os_sock_t *fd);

/* The port actually bound (useful after port 0). */
unsigned rdzv_server_port(const struct rdzv_server *s);

/* Starts the read-only HTTP port of the server on host:port (port 0 = ephemeral; host as for
 * rdzv_server_new()): GET/HEAD of /metrics (Prometheus text format 0.0.4), /status (the JSON
 * document of PROTOCOL.md "STATUS") and / (a small HTML page). HTTP/1.0, one request per
 * connection, request head at most 8 KiB, 5 s idle timeout, at most http_max_connections open
 * (the oldest idle one goes for a new one), documents rebuilt at most every RDZV_HTTP_CACHE_MS;
 * /status and / need an observer credential (rdzv_server_set_http_public_status). Sets *bound_port
 * (may be NULL) to the port bound. Returns 0, UV_EALREADY when already listening, or a negative
 * errno from resolving, binding or listening (then nothing stays open). The port closes with the
 * server. */
int rdzv_server_http_listen(struct rdzv_server *s, const char *host, unsigned port,
                            unsigned *bound_port);

/* Stops listening, closes every connection and frees the server from the last close callback,
 * then calls close_cb (may be NULL). Accepts NULL. */
void rdzv_server_close(struct rdzv_server *s, void (*close_cb)(void *data), void *data);

#endif
