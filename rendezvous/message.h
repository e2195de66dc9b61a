/* Rendezvous protocol messages: the structs both sides exchange and their wire codec.
 *
 * Wire format (see PROTOCOL.md, the single source of truth for the byte layout):
 * a 12-byte big-endian header {magic "MSTR", version u8, type u8, flags u16, length u32}
 * followed by `length` payload bytes. Payload fields are encoded one by one, big-endian,
 * strings as u16 length + bytes (no NUL). Never write a C struct to the wire. */
#ifndef MUSTER_RDZV_MESSAGE_H
#define MUSTER_RDZV_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#define RDZV_MAGIC 0x4D535452u /* "MSTR" */
#define RDZV_PROTO_VERSION 3
#define RDZV_HEADER_SIZE 12
#define RDZV_MAX_PAYLOAD (64 * 1024) /* checked before any allocation */
#define RDZV_ID_MAX 128              /* job id */
#define RDZV_HOST_MAX 255            /* host names and addresses */
#define RDZV_TEXT_MAX 1024           /* error and failure messages */
#define RDZV_TOKEN_MAX 256
#define RDZV_CKPT_NAME_MAX 255 /* checkpoint name, relative to the checkpoint directory */

/* Append-only: never renumber; add new types at the end and document them in PROTOCOL.md. */
enum rdzv_msg_type {
    RDZV_MSG_HELLO = 1,       /* C->S first message: version, token, role */
    RDZV_MSG_WELCOME = 2,     /* S->C HELLO accepted */
    RDZV_MSG_ERROR = 3,       /* either way: code + text; sender closes afterwards */
    RDZV_MSG_JOIN = 4,        /* agent->S join the job's next round */
    RDZV_MSG_WAITING = 5,     /* S->agent progress while the round fills */
    RDZV_MSG_ASSIGN = 6,      /* S->agent round closed: your ranks */
    RDZV_MSG_FAILED = 7,      /* agent->S a local worker failed in round R */
    RDZV_MSG_RESTART = 8,     /* S->agent stop your workers and JOIN again */
    RDZV_MSG_DONE = 9,        /* agent->S all local workers of round R exited 0 */
    RDZV_MSG_JOB_DONE = 10,   /* S->agent every node of the round is done */
    RDZV_MSG_JOB_FAILED = 11, /* S->agent restarts exhausted: root cause */
    RDZV_MSG_LEAVE = 12,      /* agent->S leaving (signal); S treats it like a failure */
    /* --- liveness, server restart, worker KV store, status ------------------ */
    RDZV_MSG_HEARTBEAT = 13,  /* agent->S every keep_alive_interval; S echoes it back */
    RDZV_MSG_REJOIN = 14,     /* agent->S after a reconnect: "I am in round R with these ranks" */
    RDZV_MSG_REJOIN_OK = 15,  /* S->agent the server (re)adopted the agent's round */
    RDZV_MSG_ATTACH = 16,     /* worker->S after WELCOME: job, round, rank (KV scope) */
    RDZV_MSG_ATTACH_OK = 17,  /* S->worker */
    RDZV_MSG_KV_PUT = 18,     /* worker->S req_id, key, value */
    RDZV_MSG_KV_GET = 19,     /* worker->S req_id, key, wait_ms (0: no wait) */
    RDZV_MSG_KV_REPLY = 20,   /* S->worker req_id, status, value */
    RDZV_MSG_BARRIER = 21,    /* worker->S req_id, name, count, wait_ms */
    RDZV_MSG_STATUS_REQ = 22, /* observer->S job id ("" = all jobs) */
    RDZV_MSG_STATUS = 23,     /* S->observer JSON text (the same document as HTTP /status) */
    /* --- checkpoints ------------------------------------------------------------ */
    RDZV_MSG_CKPT = 24, /* agent->S a checkpoint recorded or found bad; no reply */
    /* --- pre-flight results ---------------------------------------------------- */
    RDZV_MSG_PREFLIGHT = 25, /* agent->S this node's pre-flight, per GPU; no reply */
    /* --- checkpoint replicas, relayed by the server between agents of one job ---- */
    RDZV_MSG_REPL_BEGIN = 26, /* agent->S->agent a copy of a checkpoint starts: name, size, sum */
    RDZV_MSG_REPL_DATA = 27,  /* agent->S->agent the next chunk of a copy */
    RDZV_MSG_REPL_ACK = 28,   /* agent->S->agent bytes received, copy verified, or aborted */
    /* --- where the job's time went ------------------------------------------------ */
    RDZV_MSG_GOODPUT =
        29, /* agent->S cumulative ms per phase (docs/FAULT_TOLERANCE.md); no reply */
    /* evidence of a failure or a hang (agent/evidence.h, rendezvous/verdict.h) */
    RDZV_MSG_COLLECT = 30,   /* S->agent collect your ranks' evidence (the workers go on) */
    RDZV_MSG_EVIDENCE = 31,  /* agent->S one rank's evidence; no reply */
    RDZV_MSG_DEBUG_REQ = 32, /* observer->S evidence of a running job; S answers STATUS */
    /* --- GPU telemetry (docs/TELEMETRY.md) ----------------------------------------------- */
    RDZV_MSG_TELEMETRY = 33, /* agent->S its node's GPUs and warnings; no reply */
    /* --- one log for the job (docs/OUTPUT.md "One log for the job") --------------------- */
    RDZV_MSG_LOG = 34,      /* agent->S a batch of its ranks' output lines; no reply */
    RDZV_MSG_LOGS_REQ = 35, /* observer->S lines of a job after a sequence number */
    RDZV_MSG_LOGS = 36,     /* S->observer the lines asked for */
    /* --- the server's warnings on the agents' consoles (docs/TELEMETRY.md "Warnings") ------ */
    RDZV_MSG_NOTICE = 37, /* S->agent one warning about its job, for its console; no reply */
    /* S->agent the node of group rank 0 recorded a checkpoint: record this node's part of it
     * (sharded checkpoints); only to agents whose JOIN set RDZV_JOIN_PARTS; no reply */
    RDZV_MSG_CKPT_PART = 38,
    RDZV_MSG_TYPE_MAX_
};

/* Error codes carried in RDZV_MSG_ERROR (append-only). */
enum rdzv_err {
    RDZV_ERR_PROTOCOL = 1, /* malformed frame or message out of order */
    RDZV_ERR_VERSION = 2,  /* unsupported protocol version */
    RDZV_ERR_AUTH = 3,     /* wrong or missing token */
    RDZV_ERR_TIMEOUT = 4,  /* join_timeout expired before the round filled */
    RDZV_ERR_MISMATCH = 5, /* JOIN parameters disagree with the job (e.g. nnodes) */
    RDZV_ERR_CLOSED = 6,   /* the job already finished or failed */
    RDZV_ERR_UNKNOWN_TYPE = 7,
    RDZV_ERR_EXCLUDED = 8, /* the node caused too many failures of the job (--exclude-after) */
};

enum rdzv_role { RDZV_ROLE_AGENT = 1, RDZV_ROLE_WORKER = 2, RDZV_ROLE_OBSERVER = 3 };

struct rdzv_hello {
    uint32_t version;
    uint8_t role;
    char token[RDZV_TOKEN_MAX + 1];
};

struct rdzv_error {
    uint32_t code; /* enum rdzv_err */
    char text[RDZV_TEXT_MAX + 1];
};

struct rdzv_join {
    char job_id[RDZV_ID_MAX + 1];
    uint32_t min_nodes, max_nodes;
    uint32_t nproc;               /* workers on this node */
    char host[RDZV_HOST_MAX + 1]; /* host name, for messages */
    char addr[RDZV_HOST_MAX + 1]; /* address peers reach this node at; "" = the server
                                     uses the address the connection came from */
    uint32_t master_port;         /* a port this node verified free, for MASTER_PORT */
    uint32_t max_restarts;
    uint32_t last_call_ms, join_timeout_ms;
    uint64_t node_id; /* random per agent; keeps the group rank across rounds */
    /* liveness (appended to JOIN before any release; PROTOCOL.md documents the layout): */
    uint32_t keep_alive_ms;        /* the agent sends HEARTBEAT this often */
    uint32_t heartbeat_timeout_ms; /* silent this long = lost node (server side) */
    uint32_t reconnect_grace_ms;   /* how long a member may be away after a server restart */
    /* checkpoints (appended before any release): the checkpoint THIS node would resume from, its
     * newest verified one. Only group rank 0's choice is used (see ASSIGN). A name relative to
     * the checkpoint directory: no '/', not "." or ".."; "" = none. */
    char resume[RDZV_CKPT_NAME_MAX + 1];
    int64_t resume_step; /* its step, -1 when none or not known */
    /* version 3: the node's secret; node_id must be the first 8 bytes of its SHA-256 (cred.h),
     * so the node id shown by STATUS is not enough to act for the node. */
    uint8_t node_secret[32];
    /* version 3: 1 + the group rank this node asks for (--node-rank of torchrun's static
     * recipe), honoured when it fits the round and is free; 0: any (so a zeroed JOIN asks for
     * nothing) */
    uint32_t want_rank;
    /* an optional tail of JOIN (and, since hot spares, at the end of REJOIN): sent only
     * when one of them is non-zero and read only when present, so agents and servers built before
     * it keep talking to these as long as the feature is not used. --restart-backoff MIN and MAX in
     * ms (0: restart at once). */
    uint32_t backoff_min_ms, backoff_max_ms;
    /* --exclude-after N[:WINDOW]: a node that caused N failures within exclude_window_ms
     * (0: one hour) is refused from then on; 0: never. Fixed by the job's first JOIN. */
    uint32_t exclude_after, exclude_window_ms;
    /* hot spares, the tail's second part: RDZV_JOIN_* bits, sent only when non-zero.
     * REJOIN carries the whole tail at its end (a rebuilt job keeps these settings). */
    uint32_t flags;
    /* the tail's third part, sent only when non-zero (behind the other two, which may then be
     * zeros): 1 + --max-same-failure K (the job fails "not retryable" once K attempts in a row
     * ended with the same retry-limited signature and no newer checkpoint; K = 0: never);
     * 0: the default, RDZV_SAME_FAILURE_DEFAULT, so a zeroed JOIN asks for nothing and an agent
     * at the default keeps the layout older servers accept. An older agent's JOIN gets the
     * default too, but its FAILED carries no signature, so nothing of it is limited. Fixed by
     * the job's first JOIN. */
    uint32_t same_failure;
    /* the tail's fourth part, sent only when non-zero (the parts before it may then be zeros):
     * --exclude-stragglers K, a node whose GPU the server names a straggler K times
     * (rendezvous/handler_tel.c) is excluded as --exclude-after's are; 0: never. Fixed by the
     * job's first JOIN. */
    uint32_t stragglers;
};

#define RDZV_SAME_FAILURE_DEFAULT 2u
#define RDZV_SAME_FAILURE_MAX 1000u /* K at most (the wire refuses more) */
#define RDZV_STRAGGLERS_MAX 1000u   /* --exclude-stragglers K at most (the wire refuses more) */

/* JOIN.flags. A spare (--spare) waits in the server without filling a slot of a filling round
 * or counting toward min_nodes; it enters a new round in the place of a lost or excluded node. */
#define RDZV_JOIN_SPARE 1u
/* The agent records its own part of every checkpoint the node of group rank 0 records, and
 * replicates it (--replicate-checkpoints with a --checkpoint-dir): it understands CKPT_PART and
 * ASSIGN.resume_parts. */
#define RDZV_JOIN_PARTS 2u
#define RDZV_JOIN_FLAGS_KNOWN (RDZV_JOIN_SPARE | RDZV_JOIN_PARTS)

struct rdzv_waiting {
    uint32_t joined, min_nodes, max_nodes;
    int32_t last_call_ms_left; /* -1: no last call running */
    int32_t join_ms_left;      /* -1: no join deadline */
};

struct rdzv_assign {
    uint32_t round;
    uint32_t group_rank, group_world_size;
    uint32_t rank_offset, world_size;
    uint32_t restart_count;
    char master_addr[RDZV_HOST_MAX + 1];
    uint32_t master_port;
    /* where every node resumes, copied from the JOIN of the node with group rank 0
     * (the only one that can verify checkpoints: they are written there). "" = from scratch. */
    char resume[RDZV_CKPT_NAME_MAX + 1];
    int64_t resume_step; /* -1 when none or not known */
    /* version 3: the PSK of the job's worker credential (cred.h): the agent hands its workers
     * this, never its own credential. All zero in a REJOIN's copy (the server ignores it). */
    uint8_t worker_key[32];
    /* ASSIGN's optional tail (not in REJOIN's copy), sent only when not 0: `resume` is a sharded
     * checkpoint written by `resume_parts` nodes, every part of which the members of this round
     * hold between them (the server's part records); each node resumes from the parts it
     * holds. 0: resume names one node's whole checkpoint, as above. */
    uint32_t resume_parts;
};

/* A failure's signature class (agent/signature.h derives it; the wire's u8). Append-only. */
enum rdzv_sig_class {
    RDZV_SIG_NONE = 0,    /* no signature (an older agent, a lost node, a pre-flight) */
    RDZV_SIG_SCRIPT = 1,  /* a Python exception: a bug in the script */
    RDZV_SIG_OOM = 2,     /* CUDA out of memory */
    RDZV_SIG_NETWORK = 3, /* NCCL, gloo or socket errors: a peer or the fabric */
    RDZV_SIG_SIGNAL = 4,  /* killed by a signal from outside (SIGKILL, SIGTERM, ...) */
    RDZV_SIG_LOST = 5,    /* a lost node */
    RDZV_SIG_HANG = 6,    /* no heartbeat past --hang-timeout */
    RDZV_SIG_OTHER = 7,   /* an exit code or a crash without more to go on */
    RDZV_SIG_CLASS_MAX_
};
#define RDZV_SIG_MAX 256 /* the signature's text on the wire */

/* 1 when failures of class cls are deterministic enough that --max-same-failure may stop the
 * job over them (script errors, CUDA OOM); infrastructure-like classes (network, a signal
 * from outside, a lost node, a hang), bare exit codes and classes this build does not know
 * never are. */
int rdzv_sig_retry_limited(unsigned cls);
/* "script", "oom", "network", "signal", "lost", "hang", "other"; "none" for 0 and unknown. */
const char *rdzv_sig_class_name(unsigned cls);

/* One worker failure: what the root-cause summary prints. */
struct rdzv_failure {
    uint32_t round;
    int32_t rank, local_rank;
    int32_t exit_code; /* -1 when killed by a signal */
    int32_t signal;    /* 0 when it exited */
    uint64_t time_ms;  /* wall clock, ms since the epoch; display only, never compared */
    char host[RDZV_HOST_MAX + 1];
    char text[RDZV_TEXT_MAX + 1]; /* error file message or reason (lost node, hang...) */
    uint32_t flags;               /* RDZV_FAILURE_* */
    /* an optional tail of FAILED, LEAVE and JOB_FAILED (not RESTART, whose tail is delay_ms):
     * the failure's signature, sent only when sig_class is not RDZV_SIG_NONE. A peer's text:
     * the server compares it, escapes it when it prints it, never parses it. */
    uint8_t sig_class;          /* enum rdzv_sig_class */
    char sig[RDZV_SIG_MAX + 1]; /* "KeyError at train.py:88 in load_batch"; never "" when
                                   sig_class is set */
};

/* The failure ends the job whatever restarts are left (a failed pre-flight: restarting would
 * meet the same broken GPU or link). */
#define RDZV_FAILURE_FINAL 1u
/* JOB_FAILED only, set by the server: the same retry-limited signature ended
 * --max-same-failure attempts in a row with no newer checkpoint between them; the agents exit
 * MC_EXIT_NOT_RETRYABLE. The server clears it in what agents send. */
#define RDZV_FAILURE_NOT_RETRYABLE 2u
/* The sender collected its ranks' evidence (EVIDENCE went before this FAILED): the server
 * asks the other nodes for theirs and names the culprit before it decides (rendezvous/verdict.h).
 * Workers whose node sends it are still running; a hang's are too. */
#define RDZV_FAILURE_EVIDENCE (1u << 4)

struct rdzv_restart {
    uint32_t restart_count; /* the count the next round will carry */
    struct rdzv_failure cause;
    /* an optional tail (sent only when non-zero, 0 when absent): the server holds
     * the next round's ASSIGN for this long (--restart-backoff); for the agent's message */
    uint32_t delay_ms;
};

struct rdzv_job_failed {
    uint32_t restarts; /* restarts that happened before giving up */
    struct rdzv_failure cause;
};

/* COLLECT: the server wants the evidence of round `round` (req 0: a failure's, the server
 * decides once it has every rank's; else a `muster debug` request's number). */
#define RDZV_EV_WHY_MAX 255
struct rdzv_collect {
    uint32_t round;
    uint32_t req;
    uint32_t timeout_ms; /* what the agent may spend: its ranks' dumps, /proc */
    char why[RDZV_EV_WHY_MAX + 1];
};

/* EVIDENCE: one rank's, as its agent summarised it (agent/evidence.h); untrusted text. */
#define RDZV_EV_OP_MAX 63
#define RDZV_EV_WHERE_MAX 255
#define RDZV_EV_FRAMES_MAX 2047
#define RDZV_EV_ALIVE 1u  /* running when the evidence was taken */
#define RDZV_EV_HOOKED 2u /* its Python stacks are in: op/where/frames say where it is */
#define RDZV_EV_FR 4u     /* its Flight Recorder answered: fr_* are set */
#define RDZV_EV_FLAGS_ALL 7u
struct rdzv_evidence {
    uint32_t round;
    uint32_t req;        /* COLLECT's, 0 for a failure's */
    uint32_t timeout_ms; /* the sender's --evidence-timeout (the server's wait follows it) */
    int32_t rank, local_rank;
    int32_t pid;
    uint32_t flags;            /* RDZV_EV_* */
    int32_t exit_code, signal; /* how it ended when not alive (-1 / 0 when unknown) */
    uint64_t silent_ms;        /* since its last sign of progress */
    int64_t fr_enqueued, fr_started, fr_completed; /* default group's sequence numbers */
    char host[RDZV_HOST_MAX + 1];
    char op[RDZV_EV_OP_MAX + 1];           /* the collective its main thread is in, "" none */
    char fr_op[RDZV_EV_OP_MAX + 1];        /* the Flight Recorder's oldest unfinished one */
    char where[RDZV_EV_WHERE_MAX + 1];     /* innermost frame of the script: "t.py:88 in f" */
    char innermost[RDZV_EV_WHERE_MAX + 1]; /* innermost Python frame */
    char native[RDZV_EV_WHERE_MAX + 1];    /* main thread's state and kernel wait */
    char frames[RDZV_EV_FRAMES_MAX + 1];   /* main thread, most recent call first */
};

/* DEBUG_REQ: `muster debug`; the answer is a STATUS message (JSON text). */
struct rdzv_debug_req {
    char job_id[RDZV_ID_MAX + 1];
    int32_t rank; /* -1: every rank */
};

struct rdzv_round_ref { /* DONE */
    uint32_t round;
};

#define RDZV_KEY_MAX 512                       /* KV key */
#define RDZV_VALUE_MAX (60 * 1024)             /* KV value, fits one frame */
#define RDZV_STATUS_MAX (RDZV_MAX_PAYLOAD - 4) /* STATUS JSON text */

struct rdzv_heartbeat {
    uint32_t round;
    uint64_t seq; /* echoed back by the server; lets the agent measure round-trip time */
};

/* REJOIN: everything a restarted server needs to rebuild the job from its agents. */
struct rdzv_rejoin {
    struct rdzv_join join;     /* the agent's original JOIN (job id, nodes, timeouts...) */
    uint8_t running;           /* 1: workers of `assign.round` run; 0: still waiting for ASSIGN */
    uint8_t done;              /* 1: DONE was sent for assign.round */
    struct rdzv_assign assign; /* valid when running */
};

struct rdzv_attach {
    char job_id[RDZV_ID_MAX + 1];
    uint32_t round;
    int32_t rank;
};

/* KV_PUT, KV_GET, KV_REPLY and BARRIER share one shape. */
enum rdzv_kv_status {
    RDZV_KV_OK = 0,
    RDZV_KV_NOT_FOUND = 1,
    RDZV_KV_TIMEOUT = 2,
    RDZV_KV_STALE = 3 /* the round ended: the worker is being replaced */,
    RDZV_KV_LIMIT = 4 /* job's key or byte quota exceeded */
};

struct rdzv_kv {
    uint32_t req_id;            /* chosen by the worker, echoed in KV_REPLY */
    uint32_t wait_ms;           /* KV_GET/BARRIER: how long the server may hold the request */
    uint32_t count;             /* BARRIER: participants to wait for */
    uint8_t status;             /* KV_REPLY: enum rdzv_kv_status */
    char key[RDZV_KEY_MAX + 1]; /* key, or barrier name */
    uint32_t value_len;
    uint8_t value[RDZV_VALUE_MAX]; /* bytes, not NUL-terminated */
};

struct rdzv_status_req {
    char job_id[RDZV_ID_MAX + 1]; /* "" = every job */
};

struct rdzv_status {
    uint32_t len;
    char json[RDZV_STATUS_MAX + 1]; /* NUL-terminated */
};

/* CKPT: one checkpoint the agent of group rank 0 recorded (verified_bad = 0), or found missing,
 * truncated or altered when it picked the one to resume from (verified_bad = 1, reason says
 * why). The server keeps the newest records per job for STATUS; it never reads the files. */
struct rdzv_ckpt {
    char name[RDZV_CKPT_NAME_MAX + 1]; /* relative to the checkpoint directory; no '/' */
    int64_t step;                      /* parsed from the name; -1 when it has none */
    uint64_t size;                     /* bytes (a directory: the sum of its files) */
    uint64_t checksum;                 /* XXH3-64 of the content (agent/ckpt_hash.c) */
    uint64_t time_ms;                  /* wall clock when recorded/found bad; display only */
    uint8_t verified_bad;
    char reason[RDZV_TEXT_MAX + 1]; /* why it is bad; "" when verified_bad = 0 */
    /* an optional tail (sent only when not ""): the host name of the node that
     * holds this checkpoint as a verified replica (--replicate-checkpoints); "" = the record
     * of the node that wrote it */
    char holder[RDZV_HOST_MAX + 1];
    /* a second part, sent only when part != 0 (behind the holder, which may then be ""): the
     * record is one node's part of a sharded checkpoint: 1 + the group rank that wrote it, of
     * `parts` nodes in the round that wrote it (1 <= part <= parts <= RDZV_PARTS_MAX). With
     * RDZV_CKPT_PART_EMPTY that node wrote nothing of it (size and checksum 0). */
    uint32_t part, parts;
    uint32_t part_flags;
};
#define RDZV_CKPT_PART_EMPTY 1u
#define RDZV_PARTS_MAX 4096u

/* CKPT_PART: the node of group rank 0 of `round` recorded `name`; the receiver examines its
 * own --checkpoint-dir/name as its part `part` (1 + its group rank) of `parts` and answers
 * with a CKPT carrying the part (RDZV_CKPT_PART_EMPTY when it has none). */
struct rdzv_ckpt_part {
    char name[RDZV_CKPT_NAME_MAX + 1];
    int64_t step;
    uint64_t checksum; /* of rank 0's part */
    uint32_t round, part, parts;
};

/* GOODPUT: where this agent's time went since it started, cumulative, in ms of its monotonic
 * clock (agent/goodput.h defines each phase). Sent at the phase changes that matter (a round's
 * workers start, the first progress of an attempt, an attempt's end, the agent's end): a few
 * per round. The server keeps the last one of the node holding group rank 0 for STATUS and
 * /metrics; it is display only and decides nothing. */
enum rdzv_goodput_phase {
    RDZV_GP_RENDEZVOUS,   /* JOIN sent -> ASSIGN, less the restart backoff */
    RDZV_GP_PREFLIGHT,    /* the pre-flight node process */
    RDZV_GP_STARTUP,      /* workers spawned -> the attempt's first progress */
    RDZV_GP_TRAINING,     /* first progress -> the attempt's end */
    RDZV_GP_STOPPING,     /* failure, RESTART or done -> every worker gone (and the verdict) */
    RDZV_GP_RESTART_WAIT, /* the server's --restart-backoff hold after the workers are gone */
    RDZV_GP_NPHASES
};
/* The most any figure may say (ten years): a bigger one is a lie, refused by the server. */
#define RDZV_GP_MAX_MS (10ull * 366 * 24 * 3600 * 1000)
struct rdzv_goodput {
    uint32_t round;    /* the round the agent was in */
    uint32_t restarts; /* restarts the agent went through */
    uint64_t wall_ms;  /* since the agent started: the sum of the phases */
    uint64_t phase_ms[RDZV_GP_NPHASES];
    uint64_t lost_ms; /* the part of training_ms redone after restarts (<= training_ms) */
};

/* Checkpoint replicas. The agent of group rank 0 copies a checkpoint it recorded to
 * other nodes' agents through the server: REPL_BEGIN, then REPL_DATA chunks in order; the
 * receiver answers REPL_ACK with the bytes it holds. The sender keeps at most
 * RDZV_REPL_WINDOW bytes unacknowledged, and the server refuses a chunk past it, so the server
 * never buffers more than one window per transfer. Transfer ids: the sender's own on the
 * sender's connection, the server's on the receiver's (the server translates). */
#define RDZV_REPL_CHUNK_MAX (60 * 1024) /* data bytes in one REPL_DATA */
#define RDZV_REPL_WINDOW (8 * RDZV_REPL_CHUNK_MAX)
#define RDZV_REPL_MAX_XFERS 8 /* transfers in flight per job (the server's table) */
/* A sender's own transfer ids have this bit set and the server's never do, so an agent tells
 * the ACKs of copies it sends from those of copies it receives. */
#define RDZV_REPL_XFER_SENDER 0x80000000u

struct rdzv_repl_begin {
    uint32_t xfer;  /* transfer id */
    uint32_t round; /* sender->S: the sender's round; S->receiver: the same */
    uint32_t rank;  /* sender->S: the receiver's group rank; S->receiver: the sender's */
    char name[RDZV_CKPT_NAME_MAX + 1]; /* never "" */
    int64_t step;
    uint64_t size;
    uint64_t checksum; /* XXH3-64 of the content, as the sender's registry holds it */
    /* The direct link, an optional tail (sent only when port != 0): the sender serves the copy
     * itself on a TCP port of its own, over TLS keyed by `key` (a random key per checkpoint,
     * never written anywhere); the receiver connects there and the chunks no longer pass
     * through the server. The server fills `host` (the sender's address as its JOIN gave it;
     * what the sender sends there is ignored) and passes the rest on unchanged. */
    uint32_t port;                /* 1..65535; 0 = no direct link: chunks come relayed */
    uint32_t link;                /* the sender's own transfer id, named on the link */
    uint8_t key[32];              /* the link's TLS pre-shared key */
    char host[RDZV_HOST_MAX + 1]; /* S->receiver: where to connect */
    /* a second part, sent only when not 0 (behind the first, whose port may then be 0) */
    uint32_t flags; /* RDZV_REPL_BEGIN_DIR */
    /* a third part, sent only when not 0 (behind the other two, which may then be zeros): the
     * original's permission bits (st_mode & 07777; of the directory for a directory
     * checkpoint), which the receiver gives its copy, never wider (agent/replica_store.h);
     * 0 = not known (a sender before modes, or an original of mode 0000) */
    uint32_t mode;
    /* a fourth part, sent only when not 0 (the parts before it may then be zeros): the copy is
     * the sender's part of a sharded checkpoint: 1 + the group rank that wrote it, of `parts`
     * nodes (rdzv_ckpt.part); the receiver keeps it beside its own part (replica.h) */
    uint32_t part, parts;
};
/* The copy is a directory checkpoint, sent as the stream its checksum reads (agent/replica_dir.h):
 * `size` is the stream's length, not the sum of its files. */
#define RDZV_REPL_BEGIN_DIR 1u
#define RDZV_REPL_MODE_BITS 07777u /* what REPL_BEGIN's mode may hold */

struct rdzv_repl_data {
    uint32_t xfer;
    uint64_t offset; /* must be the byte after the previous chunk */
    uint32_t len;
    uint8_t data[RDZV_REPL_CHUNK_MAX];
};

enum rdzv_repl_status {
    RDZV_REPL_PROGRESS = 0, /* receiver: offset bytes written */
    RDZV_REPL_DONE = 1,     /* receiver: the copy verified and is in place (or was already) */
    RDZV_REPL_ABORT = 2,    /* either side or the server: the transfer ends; text says why */
    RDZV_REPL_RELAY = 3,    /* receiver: the direct link failed (text says why): relay instead */
    /* sender, on the direct link only (never through the server): the chunks come on bulk
     * streams (agent/replica_bulk.h) at bulk_port, bulk_streams of them, keyed with bulk_salt */
    RDZV_REPL_BULK = 4,
};
#define RDZV_REPL_BULK_STREAMS_MAX 8

struct rdzv_repl_ack {
    uint32_t xfer;
    uint64_t offset;
    uint8_t status;               /* enum rdzv_repl_status */
    char text[RDZV_TEXT_MAX + 1]; /* why, for ABORT; "" otherwise */
    /* BULK only (a tail written for it alone) */
    uint32_t bulk_port;
    uint32_t bulk_streams;
    uint8_t bulk_salt[32];
};

/* PREFLIGHT: one node's pre-flight results, sent by its agent when the node process
 * has ended (round 0, or a node that joined a running job). The server files them under the
 * member that sent them (its JOIN's host and node id), never under a host the message names. */
#define RDZV_PF_GPUS_MAX 64  /* GPUs of one node */
#define RDZV_PF_UUID_MAX 64  /* "GPU-" + 36, with room */
#define RDZV_PF_MODEL_MAX 96 /* "NVIDIA H200" */
#define RDZV_PF_NOTE_MAX 320 /* one finding's line */

enum rdzv_pf_level { RDZV_PF_OK = 0, RDZV_PF_WARNING = 1, RDZV_PF_FAILURE = 2 };

struct rdzv_pf_gpu {
    uint32_t index; /* CUDA index on the node */
    char uuid[RDZV_PF_UUID_MAX + 1];
    char model[RDZV_PF_MODEL_MAX + 1];
    uint32_t gemm_gflops;            /* bf16 GEMM in GFLOP/s (TFLOP/s x 1000); 0: not measured */
    uint32_t hbm_mbps;               /* HBM copy in MB/s, read + write counted; 0: not measured */
    uint8_t level;                   /* enum rdzv_pf_level: the worst finding for this GPU */
    char note[RDZV_PF_NOTE_MAX + 1]; /* that finding's line, "" when none */
};

struct rdzv_preflight {
    uint32_t round;
    uint8_t ok;     /* 1: the node's pre-flight passed (warnings allowed) */
    uint8_t joined; /* 1: a node that joined a running job, checked on its own (node-local) */
    /* the node's peer-to-peer matrix: measured ordered pairs (0: none, e.g. one GPU), the
     * slowest pair and the median in MB/s, the level and line of its worst finding, or why it
     * was skipped */
    uint32_t p2p_pairs, p2p_min_mbps, p2p_median_mbps;
    uint8_t p2p_level;
    char p2p_note[RDZV_PF_NOTE_MAX + 1];
    uint32_t count; /* 0..RDZV_PF_GPUS_MAX */
    struct rdzv_pf_gpu gpus[RDZV_PF_GPUS_MAX];
};

/* LOG and LOGS: output lines of a job's ranks. A line is the text of one update of a worker's
 * stream (up to '\n' or '\r', without it), raw bytes (any but a NUL, which the agent shows as
 * '?'), at most RDZV_LOG_LINE_MAX (longer ones are cut into parts). text[] holds the lines'
 * bytes one after the other; line i is text[lines[i].off .. + lines[i].len]. */
#define RDZV_LOG_LINE_MAX 4096         /* bytes of one line */
#define RDZV_LOG_LINES_MAX 256         /* lines in one message */
#define RDZV_LOG_BYTES_MAX (48 * 1024) /* bytes of all lines of one message */
struct rdzv_log_line {
    int32_t rank;     /* global rank */
    uint8_t stream;   /* 0 stdout, 1 stderr */
    uint64_t time_ms; /* wall clock when the agent read it; display and --since only */
    uint64_t seq;     /* LOGS: the server's number of the line (LOG: 0, not on the wire) */
    uint32_t off, len;
};
struct rdzv_log {
    /* LOG: lines the agent dropped since its previous LOG (its queue, its per-rank cap);
     * LOGS: lines the server dropped for this job so far (ring, rate caps, agents' drops) */
    uint64_t dropped;
    uint64_t next;  /* LOGS: ask after this sequence number next (LOG: 0) */
    uint8_t state;  /* LOGS: RDZV_LOGS_* flags (LOG: 0) */
    uint32_t count; /* 0..RDZV_LOG_LINES_MAX */
    uint32_t bytes; /* used of text */
    struct rdzv_log_line lines[RDZV_LOG_LINES_MAX];
    char text[RDZV_LOG_BYTES_MAX];
};
#define RDZV_LOGS_ENDED 1u /* the job is done or failed: no more lines will come */
#define RDZV_LOGS_MORE 2u  /* more lines after `next` are held now: ask again at once */
#define RDZV_LOGS_GAP 4u   /* lines between the asked sequence number and the first were lost */
#define RDZV_LOGS_NONE 8u  /* (a FOLLOW request) the server knows no such job yet */

/* LOGS_REQ: `muster logs`; answered with LOGS (or ERROR). */
struct rdzv_logs_req {
    char job_id[RDZV_ID_MAX + 1];
    int32_t rank;      /* -1: every rank */
    uint64_t after;    /* lines numbered after this (0: from the oldest held) */
    uint64_t since_ms; /* wall clock: lines read at or after it (0: any) */
    uint8_t flags;     /* RDZV_LOGS_REQ_* */
};
/* --follow: a job the server does not know (yet) is answered with an empty LOGS, not ERROR */
#define RDZV_LOGS_REQ_FOLLOW 1u

/* TELEMETRY: one sample of the sending node's GPUs (agent/telemetry.h) and the warnings its
 * agent has found so far for the job. Integer facts NVML did not answer are -1. */
#define RDZV_TEL_GPUS_MAX 16  /* GPUs of one node in one message */
#define RDZV_TEL_PROCS_MAX 16 /* processes of one GPU */
#define RDZV_TEL_WARN_MAX 8   /* warnings of one node (each sent once per job is enough) */
#define RDZV_TEL_WARN_LEN 200 /* bytes of one warning */
struct rdzv_tel_proc {
    uint32_t pid; /* as the node sees it */
    int32_t rank; /* global rank whose worker (or a descendant) it is; -1 none */
    uint64_t mem; /* bytes; ~0: NVML could not say */
};
struct rdzv_tel_gpu {
    uint32_t gpu;                 /* NVML index */
    int32_t util;                 /* % */
    uint64_t mem_used, mem_total; /* bytes */
    int32_t sm_clock, mem_clock;  /* MHz */
    int32_t temp;                 /* degrees C */
    int32_t power_mw;             /* milliwatts */
    uint64_t throttle;            /* NVML clocks event reasons (bits) */
    uint32_t xid;                 /* the last Xid seen (0: none; not sampled yet) */
    uint64_t ecc;                 /* volatile uncorrected ECC errors (0 where unknown) */
    uint32_t nprocs;
    struct rdzv_tel_proc procs[RDZV_TEL_PROCS_MAX];
};
struct rdzv_telemetry {
    uint64_t t_ms; /* the agent's wall clock at the sample */
    uint32_t ngpus;
    struct rdzv_tel_gpu gpus[RDZV_TEL_GPUS_MAX];
    uint32_t nwarn;
    char warn[RDZV_TEL_WARN_MAX][RDZV_TEL_WARN_LEN + 1];
};

/* NOTICE: a warning the server found about the job (handler_tel.c: its nodes compared), sent
 * once to each member that reports TELEMETRY (an agent that sends TELEMETRY understands NOTICE:
 * the two came in one release) and printed on its console. */
struct rdzv_notice {
    char text[RDZV_TEL_WARN_LEN + 1];
};

/* One decoded message. `type` selects the member. */
struct rdzv_msg {
    uint8_t type;
    union {
        struct rdzv_hello hello;
        struct rdzv_error error;
        struct rdzv_join join;
        struct rdzv_waiting waiting;
        struct rdzv_assign assign;
        struct rdzv_failure failed; /* FAILED and LEAVE */
        struct rdzv_restart restart;
        struct rdzv_round_ref done;
        struct rdzv_job_failed job_failed;
        struct rdzv_heartbeat heartbeat;
        struct rdzv_rejoin rejoin;
        struct rdzv_round_ref rejoin_ok;
        struct rdzv_attach attach;
        struct rdzv_kv kv; /* KV_PUT, KV_GET, KV_REPLY, BARRIER */
        struct rdzv_status_req status_req;
        struct rdzv_status status;
        struct rdzv_ckpt ckpt;
        struct rdzv_preflight preflight;
        struct rdzv_repl_begin repl_begin;
        struct rdzv_repl_data repl_data;
        struct rdzv_repl_ack repl_ack;
        struct rdzv_goodput goodput;
        struct rdzv_collect collect;
        struct rdzv_evidence evidence;
        struct rdzv_debug_req debug_req;
        struct rdzv_log log; /* LOG and LOGS */
        struct rdzv_logs_req logs_req;
        struct rdzv_telemetry telemetry;
        struct rdzv_notice notice;
        struct rdzv_ckpt_part ckpt_part;
    } u;
};

/* Zeroes the part of msg that a message of this type uses (the header and its member of the
 * union, but a trailing buffer: rdzv_msg_clear_size) and sets the type. The union is ~64 KiB for KV
 * values: zeroing all of it for every message (`= {.type = ...}`, or a memset) cost a 64 KiB memset
 * per message and 64 KiB of stack pages per frame holding one. Unknown types: the header only. */
void rdzv_msg_init(struct rdzv_msg *msg, unsigned type);
/* How many bytes of the union rdzv_msg_init zeroes: the body, less the byte buffer at the end of
 * KV, STATUS, REPL_DATA, LOG and LOGS messages (beyond the length beside it nothing is read). */
size_t rdzv_msg_clear_size(unsigned type);
/* How many bytes of the union a message of this type uses (0 for none or unknown). */
size_t rdzv_msg_body_size(unsigned type);

/* Returns the message type's name ("HELLO"...), or "UNKNOWN". */
const char *rdzv_msg_name(unsigned type);

/* The one table of the server's ERROR codes (enum rdzv_err), for the agent's client and
 * libmuster alike: rdzv_err_errno gives the negative errno callers test (-EPROTO, then
 * -EPROTONOSUPPORT, -EACCES, -ETIMEDOUT, -EINVAL, -ESHUTDOWN, -EPROTO for UNKNOWN_TYPE and any
 * code a newer server may send); rdzv_err_name its name ("AUTH"...), or "UNKNOWN". */
int rdzv_err_errno(uint32_t code);
const char *rdzv_err_name(uint32_t code);

/* Returns 1 when `name` may name a checkpoint on the wire: at most RDZV_CKPT_NAME_MAX bytes, no
 * '/', not "." or ".." (it must stay inside the checkpoint directory). "" is allowed. */
int rdzv_ckpt_name_ok(const char *name);

/* Encodes header + payload of `msg` into buf (cap bytes). On success sets *len and returns 0;
 * -ENOBUFS if it does not fit, -EINVAL for an unknown type, an over-long string or a checkpoint
 * name that rdzv_ckpt_name_ok() refuses. */
int rdzv_msg_encode(const struct rdzv_msg *msg, uint8_t *buf, size_t cap, size_t *len);

/* Parses a 12-byte header. Returns 0 and sets *type and *payload_len; -EPROTO for a bad magic,
 * -EPROTONOSUPPORT for another version, -EMSGSIZE when length > RDZV_MAX_PAYLOAD. */
int rdzv_header_decode(const uint8_t *hdr, uint8_t *type, uint32_t *payload_len);

/* Decodes one payload of the given type into *msg. Returns 0, -EPROTO when the payload is
 * short, long, a string is over its limit or holds a NUL, or a checkpoint name is refused by
 * rdzv_ckpt_name_ok(); -ENOTSUP for an unknown type. */
int rdzv_msg_decode(uint8_t type, const uint8_t *payload, size_t len, struct rdzv_msg *msg);

#endif
