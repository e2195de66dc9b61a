/* The rendezvous server's data model and the services below its handlers (service.c): what a
 * connection (struct peer), a job (struct sjob) and the server hold, and the calls every layer
 * above uses: replies, closing, liveness deadlines, refusals counted and logged, per-source and
 * pre-authentication bookkeeping, credential-scope quotas. service.c calls nothing above it;
 * the one thing it tells the job layer (a member lost) goes through srv->member_lost, which the
 * dispatcher registers (docs/ARCHITECTURE.md "Layers"). Not installed and not for other
 * components: they use server.h. */
#ifndef MUSTER_RDZV_SERVICE_H
#define MUSTER_RDZV_SERVICE_H

#include <netinet/in.h>
#include <stdint.h>
#include <uv.h>

#include "ckptlog.h"
#include "logring.h"
#include "pfrec.h"
#include "gprec.h"
#include "clock.h"
#include "conn.h"
#include "cred.h"
#include "job.h"
#include "kv.h"
#include "message.h"
#include "scope.h"
#include "server.h"

struct sjob;
struct rdzv_http;
struct rdzv__source;
struct rdzv_hslimit;

/* One accepted connection: an agent, a worker (KV) or an observer (STATUS). */
/* One node's GPUs judged against their peers in its job (handler_tel.c "stragglers"). */
struct rdzv__tel_judge {
    uint64_t slow_since[RDZV_TEL_GPUS_MAX]; /* uv_now since which the GPU lags (0: it does not) */
    uint8_t said[RDZV_TEL_GPUS_MAX];        /* its warning was given (once per job) */
    uint32_t named;    /* times it was named a straggler against the other nodes too (once a
                        * grace, however many GPUs): what --exclude-stragglers counts */
    uint64_t named_at; /* uv_now of the last of them */
};

struct peer {
    struct rdzv_conn conn; /* conn.data = this peer */
    uv_timer_t timer;      /* the one deadline that applies now: see peer_deadline() */
    struct rdzv_server *srv;
    struct peer *prev, *next;
    int welcomed;          /* HELLO accepted */
    uint8_t role;          /* enum rdzv_role from HELLO */
    struct rdzv_cred cred; /* what the TLS handshake proved, taken at HELLO (cred.h) */
    int closing;
    unsigned open;          /* handles still open: conn.tcp and hb; freed at 0 */
    struct sjob *job;       /* agent: the job it joined; NULL before JOIN */
    struct sjob *kvjob;     /* worker: the job it attached to; NULL before ATTACH or once dropped */
    uint32_t kv_round;      /* worker: the round it attached for */
    int attached;           /* worker: ATTACH accepted (kvjob may be NULL again later) */
    uint64_t accepted_ms;   /* uv_now at accept: the handshake deadline runs from here */
    uint64_t last_seen_ms;  /* uv_now of the last message */
    uint32_t hb_timeout_ms; /* 0: the agent does not heartbeat; only a close tells */
    uint32_t keep_alive_ms; /* the agent's heartbeat interval, for the lateness metric */
    uint64_t gap_max_ms;    /* agent in a job: longest silence between two of its messages since
                             * its JOIN (/status heartbeat_gap_max_ms: a stalled agent loop) */
    struct rdzv__source *source; /* its address's connection count; NULL if never counted */
    int send_err;        /* a send failed (-ENOBUFS: over send_queue_max): the timer closes it */
    uint64_t ev_seen;    /* bit ev: rdzv__peer_event(ev) came before (its address is known to
                          * the once-per-address log: no address to look up again) */
    int hs_counted;      /* in srv->hslimit's handshakes in flight, under hs_addr */
    uint8_t hs_addr[16]; /* its source address, as source_key() makes it */
    char *local_addr;    /* in-process channel: the address it stands for; else NULL */
    struct rdzv__scope *scope; /* job credential: its scope, charged one connection from HELLO
                                * until this peer is freed (scope.h); NULL otherwise */
    /* pre-authentication pool: linked from accept until HELLO is accepted */
    int in_pre;
    struct peer *pre_prev, *pre_next;   /* srv->pre_head: oldest first */
    struct peer *spre_prev, *spre_next; /* source->pre_head: the same, of its source only */
    /* observer waiting for a `muster debug` answer: the slot that names it, cleared when it
     * goes (handler_ev.c) */
    struct peer **debug_slot;
    /* agent in a job: its node's latest TELEMETRY (handler_tel.c); NULL before one */
    struct rdzv_telemetry *tel;
    /* the server's judgement of its GPUs against their peers in the job (handler_tel.c
     * "stragglers"), allocated with tel; NULL before */
    struct rdzv__tel_judge *tel_judge;
};

/* One checkpoint replica being relayed (handler_repl.c). */
struct rdzv__repl {
    uint32_t id;             /* the server's id: the receiver's messages carry it */
    uint32_t src_xfer;       /* the sender's id: the sender's messages carry it */
    struct peer *src, *dst;  /* both agents of this job; forgotten when either goes */
    uint64_t size;           /* announced by REPL_BEGIN */
    uint64_t relayed, acked; /* bytes passed on; bytes the receiver acknowledged */
    int direct;              /* REPL_BEGIN named a direct link and the receiver has not asked
                                for the relay: chunks go agent to agent, none through here */
};

/* Server side of one job: the round logic, its deadline timer and the workers' KV store. */
/* One round change of a job for STATUS (the dashboard's restart history): the cause as the job
 * recorded it (job->cause), when the server saw it, and whether it counted against max_restarts
 * (a scale-up does not) or ended the job. */
struct sjob_restart {
    struct rdzv_failure cause;
    uint64_t at_ms;         /* uv_now() */
    uint64_t wall_ms;       /* the server's wall clock then */
    uint32_t restart_count; /* the job's count after it */
    uint8_t counted, final;
};
#define SJOB_RESTARTS_KEPT 16 /* the newest kept per job; older ones are only counted */

struct sjob {
    struct rdzv_server *srv;
    struct rdzv_job *job;
    struct rdzv_kv_store *kv;
    struct rdzv_ckptlog *ckpts; /* CKPT records for STATUS; NULL until the first CKPT */
    struct rdzv_pfrec pfrec;    /* PREFLIGHT results per node, for STATUS and /metrics */
    /* the last GOODPUT of the node holding group rank 0 (gprec.h), valid when have_gp */
    struct rdzv_goodput gp;
    char gp_host[RDZV_HOST_MAX + 1]; /* that node, as it joined */
    const void *gp_peer;             /* its connection: compared, never dereferenced */
    int have_gp;
    uv_timer_t timer; /* timer.data = this sjob; earliest of job and KV deadlines */
    struct sjob *prev, *next;
    unsigned npeers;   /* agent connections with peer->job == this */
    unsigned nworkers; /* worker connections with peer->kvjob == this (job_workers_* limit) */
    int dropped;
    uint32_t last_restart_count; /* to count restarts in the metrics */
    /* the newest SJOB_RESTARTS_KEPT round changes (RESTART or FAILED), a ring allocated at the
     * first; n_restarts counts every one, restarts[(n_restarts - 1) % KEPT] is the newest */
    struct sjob_restart *restarts;
    uint32_t n_restarts;
    /* WAITING broadcasts are coalesced: one per sjob_waiting_every_ms at most. Sending one per
     * JOIN to every member made a round of N agents cost N^2 messages (10,000 agents: 50
     * million), measured by bench/rdzv_bench.sh. */
    uint64_t waiting_sent_at;                    /* uv_now() of the last WAITING broadcast */
    int waiting_due;                             /* a count change is not yet broadcast */
    struct rdzv__repl repl[RDZV_REPL_MAX_XFERS]; /* checkpoint replicas in flight */
    unsigned n_repl;
    struct rdzv__scope *scope; /* the scope of the job credential that created it, charged one job
                                * until it is freed (scope.h); NULL: created by an operator */
    struct rdzv__evset *ev;    /* evidence of the current round (handler_ev.c); NULL: none */
    /* the last verdict (rendezvous/verdict.h), for STATUS; "" none */
    char verdict[RDZV_TEXT_MAX + 1];
    int32_t verdict_culprit;
    uint32_t verdict_round;
    uint64_t debug_last_ms; /* uv_now of the last `muster debug` collection (rate limit) */
    /* the job's log (handler_log.c): NULL until the first LOG */
    struct rdzv_logring *logs;
    uint64_t log_foreign; /* lines of ranks the sender does not hold in the round: dropped */
    /* the warnings its agents' telemetry found (handler_tel.c), each once, in arrival order */
    char (*warnings)[RDZV_TEL_WARN_LEN + 1];
    unsigned n_warnings;
    uint64_t mem_apart_since; /* uv_now since which its ranks' GPU memory is far apart; 0 not */
    int mem_apart_said;       /* that warning was given (once per job) */
    uint64_t tel_judged_ms;   /* uv_now of the last comparison of its nodes' telemetry */
};
#define SJOB_WARN_MAX 32 /* warnings one job keeps; later ones are not shown */

/* The shortest interval between two WAITING broadcasts of a job; it grows with the number of
 * members (sjob.c sjob_waiting_every_ms), so that progress costs at most ~SJOB_WAITING_PER_S
 * messages a second, up to SJOB_WAITING_MAX_MS between broadcasts. At 250 ms, the broadcasts
 * of a 10,000-node round were ~100,000 TLS records: more than the joins themselves. */
#define SJOB_WAITING_EVERY_MS 250
#define SJOB_WAITING_PER_S 4096
#define SJOB_WAITING_MAX_MS 5000
/* A closing connection gets this long to take what was queued for it (an ERROR...). */
#define SRV_CLOSE_FLUSH_MS 5000
#define RDZV_LISTEN_BACKLOG 65535

/* Everything the server refuses is one of these: counted, and logged once per peer address.
 * rdzv__event_metric() names the metric family and label of each. */
enum rdzv__event {
    SRV_EV_CONNECTIONS,       /* over max_connections: accepted and closed at once */
    SRV_EV_HANDSHAKE_TIMEOUT, /* no accepted HELLO within handshake_ms (slowloris, stuck TLS) */
    SRV_EV_IDLE_TIMEOUT,      /* silent past idle_ms while in no job */
    SRV_EV_FRAME_SIZE,        /* frame header announcing more than RDZV_MAX_PAYLOAD */
    /* pre-authentication budget and the HTTP port */
    SRV_EV_PREAUTH_EVICT,     /* unauthenticated, evicted: the pre-auth pool or max_connections */
    SRV_EV_PREAUTH_SRC_EVICT, /* unauthenticated, evicted for a newer one of its /24 or /64 */
    SRV_EV_FIRST_BYTE,        /* no byte within first_byte_ms of connecting */
    SRV_EV_HTTP_CONNECTIONS,  /* HTTP connection evicted (or refused) over http_max_connections */
    SRV_EV_HTTP_STATUS_AUTH,  /* HTTP /status or / without a valid observer credential */
    /* (new limits go here, before SRV_EV_KV_QUOTA, the last of the limit family) */
    SRV_EV_KV_HELD_CONN,  /* KV_GET/BARRIER that would wait over kv_max_held_per_conn */
    SRV_EV_KV_HELD_JOB,   /* ... over the job's kv_max_held_per_job + kv_held_per_worker */
    SRV_EV_KV_HELD_TOTAL, /* ... over kv_max_held_total (all jobs together) */
    SRV_EV_PER_SOURCE,    /* over max_connections_per_source: accepted and closed at once */
    SRV_EV_SEND_QUEUE,    /* unsent bytes over send_queue_max: the peer stopped reading */
    SRV_EV_JOBS,          /* a JOIN that would create a job over max_jobs */
    SRV_EV_JOB_WORKERS,   /* an ATTACH over the job's worker connections */
    SRV_EV_KV_TOTAL,      /* KV_PUT over kv_max_total_bytes (all jobs together) */
    SRV_EV_HS_RATE,       /* a new connection over its address's handshake_rate */
    SRV_EV_HS_IN_FLIGHT,  /* over handshakes_per_source in flight, none of them idle */
    /* per job credential scope (scope.h) */
    SRV_EV_CRED_JOBS,        /* a JOIN that would create a job over max_jobs_per_credential */
    SRV_EV_CRED_CONNECTIONS, /* a HELLO over max_connections_per_credential */
    SRV_EV_CRED_KV,          /* KV bytes or held requests over the credential's share */
    SRV_EV_KV_QUOTA,         /* KV_PUT over the job's key or byte quota */
    SRV_EV_AUTH_TOKEN,       /* HELLO with a wrong or missing token */
    SRV_EV_AUTH_JOB_SCOPE,   /* a message naming another job than the connection's */
    SRV_EV_AUTH_TLS,         /* TLS handshake failed (wrong PSK, plaintext, other CA...) */
    SRV_EV_AUTH_NODE,        /* JOIN/REJOIN whose node secret does not open its node id */
    SRV_EV_PROTOCOL,         /* malformed frame or message out of order */
    SRV_EV_COUNT_
};

/* Open connections of one source address (IPv4 as v4-mapped IPv6), in a hash table of
 * SRV_SOURCE_BUCKETS chains; an entry goes when its last connection closes. */
#define SRV_SOURCE_BUCKETS 4096

struct rdzv__source {
    struct rdzv__source *next;
    uint8_t addr[16]; /* the group: rdzv_hslimit_group() */
    unsigned n;
    struct peer *pre_head, *pre_tail; /* its unauthenticated connections, oldest first */
};

/* A peer address is logged once per event kind; the table forgets the oldest address when
 * full, so a flood from many addresses costs at most one line per new address and kind. */
#define SRV_LOG_PEERS 256

struct rdzv__logged {
    char addr[INET6_ADDRSTRLEN];
    uint32_t events; /* bit per enum rdzv__event already logged for addr */
};

struct rdzv_server_stats {
    uint64_t rounds_total, restarts_total, lost_nodes_total;
    uint64_t bytes_received_total, bytes_sent_total; /* of closed connections; + live ones */
    uint64_t http_requests_total;
    uint64_t events[SRV_EV_COUNT_]; /* refusals by enum rdzv__event */
    uint64_t log_suppressed;        /* event lines not logged: address already logged */
};

struct rdzv_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    struct rdzv_conn_fair fair;     /* every peer's conn reads fairly (conn.h); a handle */
    struct rdzv_tls *tls;           /* every connection's TLS configuration; owned */
    char token[RDZV_TOKEN_MAX + 1]; /* zero padded: compared over its whole size */
    int has_token;
    unsigned port;
    struct peer *peers;
    unsigned n_peers;
    struct sjob *jobs;
    unsigned n_jobs;
    unsigned handles; /* open libuv handles: listener, peers, job timers, HTTP */
    int closing;
    void (*close_cb)(void *data);
    void *close_data;
    uint64_t start_ms; /* uv_now at creation, for uptime */
    struct rdzv_server_stats stats;
    struct rdzv_http *http; /* NULL until rdzv_server_http_listen() */
    struct rdzv_limits limits;
    rdzv_server_log_cb log_cb; /* NULL: stderr */
    void *log_data;
    char auth_hint[384]; /* rdzv_server_set_auth_hint() */
    struct rdzv__logged logged[SRV_LOG_PEERS];
    unsigned logged_next;        /* next slot to reuse */
    struct rdzv_kv_pool kv_pool; /* every job's KV bytes: limits.kv_max_total_bytes */
    uint64_t kv_pool_refused;    /* kv_pool.refused already counted as SRV_EV_KV_TOTAL */
    struct rdzv__source *sources[SRV_SOURCE_BUCKETS];
    struct rdzv_hslimit *hslimit; /* TLS handshakes per source address (hslimit.h) */
    uint32_t repl_next_id;        /* the last replica transfer id handed out */
    struct rdzv__scopes scopes;   /* job credential scopes holding jobs or connections */
    /* the pre-authentication pool (peer.in_pre), oldest first */
    struct peer *pre_head, *pre_tail;
    unsigned n_pre;
    unsigned n_closing; /* peers closing, not yet released: no longer count as live */
    int http_public_status;
    /* the job layer's: a member connection of sj goes (sjob.c rdzv__sjob_detach, registered
     * by server.c), so that service.c never calls up into the jobs */
    void (*member_lost)(struct sjob *sj, struct peer *p, const char *reason);
    void (*job_dropped)(struct sjob *sj);  /* sjob.c tells the handlers; server.c sets it */
    struct rdzv_logring_limits log_limits; /* every job's log ring and caps (0: defaults) */
    size_t log_pool_used;                  /* bytes every job's ring holds (log_limits) */
    struct rdzv__ended_log *ended_logs;    /* newest first (handler_log.c) */
};

/* The log of a job that ended (dropped), kept a while for `muster logs` (handler_log.c): at
 * most RDZV_LOG_KEEP_JOBS of them, none past RDZV_LOG_KEEP_MS. */
#define RDZV_LOG_KEEP_JOBS 8
#define RDZV_LOG_KEEP_MS 600000
struct rdzv__ended_log {
    struct rdzv__ended_log *next;
    char id[RDZV_ID_MAX + 1];
    uint32_t world_size;
    uint64_t at_ms; /* uv_now when the job was dropped */
    struct rdzv_logring *ring;
};

/* service.c */
void rdzv__handle_closed(struct rdzv_server *srv);
void rdzv__send(struct peer *p, const struct rdzv_msg *m);
void rdzv__send_error(struct peer *p, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void rdzv__peer_close(struct peer *p, int flush);
void rdzv__peer_close_now(struct peer *p); /* the server closes: no flush, even one under way */
void rdzv__peer_addr(struct peer *p, char *buf, size_t len);
void rdzv__peer_heartbeat_start(struct peer *p, const struct rdzv_join *j);
void rdzv__peer_arm(struct peer *p);
void rdzv__kv_limit_event(struct peer *p);
/* the KV stores' reply callback (kv.h; ctx: the server, peer: the asking struct peer) */
void rdzv__kv_reply(void *ctx, void *peer, uint32_t req_id, enum rdzv_kv_status status,
                    const uint8_t *value, uint32_t len);
void rdzv__event(struct rdzv_server *srv, enum rdzv__event ev, const char *addr, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));
void rdzv__peer_event(struct peer *p, enum rdzv__event ev, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void rdzv__event_metric(enum rdzv__event ev, const char **family, const char **label);
void rdzv__log(struct rdzv_server *srv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rdzv__scope_admit_peer(struct peer *p);
void rdzv__scope_charge_job(struct sjob *sj, struct rdzv__scope *s);
int rdzv_server_resolve(uv_loop_t *loop, const char *host, unsigned port,
                        struct sockaddr_storage *ss);
int rdzv_server_listen_tcp(uv_tcp_t *tcp, struct sockaddr_storage *ss, uv_connection_cb cb,
                           unsigned *bound);
/* the address of tcp's peer for log lines ("" when gone) */
void rdzv__tcp_addr(const uv_tcp_t *tcp, char *buf, size_t len);

/* service.c: per source address and the pre-authentication pool, for the dispatcher's
 * admission (server.c). A connection idle PRE_IDLE_MS (or silent since accept) may be evicted. */
#define PRE_IDLE_MS 500
int rdzv__source_key(const uv_tcp_t *tcp, uint8_t key[16]);
int rdzv__source_add(struct peer *p);
void rdzv__hs_end(struct peer *p);
void rdzv__pre_link(struct peer *p);
void rdzv__pre_unlink(struct peer *p);
struct peer *rdzv__pre_victim(struct rdzv_server *srv, struct rdzv__source *src, int global);

#endif
