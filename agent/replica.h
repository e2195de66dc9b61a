/* Checkpoint replicas (docs/FAULT_TOLERANCE.md "Checkpoint replicas (`--replicate-checkpoints
 * R`)"): the node of group rank 0 streams each checkpoint it recorded to the agents of R
 * other nodes: REPL_BEGIN through the rendezvous
 * server, which authorises it, then REPL_DATA chunks and REPL_ACKs on a direct TLS link between
 * the two agents (replica_link.h), or relayed by the server when that link cannot be set up
 * (rendezvous/PROTOCOL.md); the end (REPL_ACK done or abort) always goes through the server,
 * which records where the copy lives. A receiver writes it
 * into its own --checkpoint-dir atomically (a temporary name starting with '.', which the
 * watcher ignores, fsync, rename, fsync of the directory), checks size and XXH3 checksum
 * against what the sender's registry announced, and records it in its own registry, so that
 * it can resume from it when the node of rank 0 is lost.
 *
 * Runs on the agent's loop beside the workers: at most RDZV_REPL_WINDOW bytes per receiver
 * are unacknowledged, each loop turn sends at most a window, and --replicate-bandwidth paces
 * the chunks with a timer. A newer checkpoint supersedes one still in flight. Regular files
 * and directories of regular files are replicated (replica_dir.h). The receiver's file-system
 * work (create, write, fsync, rename, removal) runs on a writer thread per copy
 * (replica_write.h, replica_store.h), never on the loop, and it acknowledges only bytes
 * written: the window is what bounds the bytes waiting for the disk. */
#ifndef MUSTER_AGENT_REPLICA_H
#define MUSTER_AGENT_REPLICA_H

#include <limits.h>
#include <stdint.h>
#include <uv.h>

#include "ckptwatch.h"
#include "message.h"
#include "replica_dir.h"
#include "replica_link.h"

#define AGENT_REPLICA_MAX_COPIES 8 /* --replicate-checkpoints at most */
#define AGENT_REPLICA_MAX_IN 4     /* copies a node receives at once */
/* Unacknowledged bytes per receiver on a direct link (relayed: RDZV_REPL_WINDOW, which bounds
 * what the server buffers); a link's acknowledgements come every quarter of it. */
#define AGENT_REPLICA_LINK_WINDOW (4u << 20)
/* Bytes a direct link may hold queued and not yet taken by the socket: acknowledged bytes are
 * not read bytes when the receiver lies. Past it the sender waits, looking again every
 * AGENT_REPLICA_LINK_POLL_MS. */
#define AGENT_REPLICA_LINK_QUEUE_MAX (4u << 20)
#define AGENT_REPLICA_LINK_POLL_MS 1

/* Attempts at one copy: a copy that fails is started again after 1 s, then 4 s, unless a newer
 * checkpoint supersedes it. */
#define AGENT_REPLICA_TRIES 3

/* The agent's side: how messages reach the server and what a verified replica becomes. */
struct agent_replica_cbs {
    /* sends one REPL_* message; 0 or a negative errno (the transfer is then abandoned) */
    int (*send)(void *data, const struct rdzv_msg *m);
    /* a replica verified and is in the registry (for CKPT with a holder); may be NULL */
    void (*stored)(void *data, const struct agent_ckpt_entry *e);
    void (*log)(void *data, enum mc_log_level level, const char *line); /* required */
};

struct agent_replica_out { /* one receiver of the checkpoint being sent */
    int active;
    uint32_t xfer; /* our id: top bit set (the server's ids never have it) */
    uint32_t rank; /* the receiver's group rank */
    uint64_t sent, acked;
    int direct;                      /* on the direct link (else relayed by the server) */
    struct agent_replica_link *link; /* the receiver's connection once it named this copy */
    unsigned tries;                  /* REPL_BEGINs sent for this checkpoint */
    uint64_t retry_ms;               /* not 0: to be started again then (loop time) */
    struct agent_replica *owner;     /* for the bulk path's callback */
    struct agent_replica_bulk *bulk; /* the chunks go on bulk streams (replica_bulk.h) */
};

struct agent_replica_writer; /* replica_write.h */
struct agent_replica_bulk;   /* replica_bulk.h */
struct agent_replica;
struct agent_replica_store; /* replica_store.h */

struct agent_replica_in { /* one copy being received */
    int active;
    struct agent_replica *r; /* its owner, for the writer's callback */
    uint32_t xfer;           /* the server's id */
    uint32_t from;           /* the sender's group rank */
    uint32_t link_id;        /* the sender's id of this copy, named on the direct link */
    uint64_t xsize;          /* bytes to come: the file's, or the directory's stream */
    int dir;                 /* a directory checkpoint (RDZV_REPL_BEGIN_DIR) */
    uint32_t mode;           /* the original's permission bits (REPL_BEGIN), 0: not known */
    int direct;              /* chunks come on the direct link (else relayed by the server) */
    struct agent_replica_link *link; /* that link while it is open */
    struct agent_ckpt_entry e;
    uint64_t got;                      /* bytes received, handed to the writer */
    uint64_t acked;                    /* bytes written and acknowledged */
    struct agent_replica_writer *wr;   /* writes, hashes and stores it off the loop */
    struct agent_replica_store *store; /* wr's target: read only when wr said DONE */
    struct agent_replica_bulk *bulk;   /* the sender offered bulk streams: they feed wr */
    char host[RDZV_HOST_MAX + 1];      /* the sender's, where its link and bulk port are */
    uint8_t key[32];                   /* the link's key (the bulk key's), wiped at the end */
    uint64_t begin_ms, received_ms;    /* loop time of REPL_BEGIN, and of the last byte */
    char bulk_times[160]; /* where its bulk streams' time went (replica_bulk.h); "" none */
};

struct agent_replica {
    uv_loop_t *loop;
    uv_timer_t pace; /* --replicate-bandwidth: the next chunk's earliest time */
    int open;
    struct agent_replica_net net;  /* the direct links (replica_link.h), below this engine */
    int link_warned;               /* said once that no link could be served */
    char host[64];                 /* this host's name as temporary file names carry it */
    struct agent_ckptwatch *watch; /* borrowed: the directory and the registry */
    unsigned copies;
    double bytes_per_ms; /* 0: no cap */
    struct agent_replica_cbs cbs;
    void *data;
    /* sending */
    int fd;                       /* the checkpoint being sent, -1 none */
    struct agent_replica_src src; /* a directory checkpoint's stream (dirfd -1: a file) */
    uint64_t xsize;               /* bytes to send: the file's, or the directory's stream */
    uint32_t mode;                /* the original's permission bits, for REPL_BEGIN */
    int listing;                  /* a directory checkpoint is being listed (replica.c) */
    uint64_t listing_id;          /* which: only that one's copies start */
    struct agent_ckpt_entry cur;
    uint32_t round;       /* the round the checkpoint is offered in */
    uint32_t world;       /* its nodes */
    int parts;            /* agent_replica_parts: rank 0's directories go as part 1 of world */
    uint32_t link_port;   /* its direct link's port, 0: relayed */
    uint8_t link_key[32]; /* its direct link's key, wiped once every copy ended */
    uv_timer_t retry;     /* copies started again after a failure */
    uv_timer_t drain;     /* agent_replica_drain's limit */
    void (*drain_cb)(void *data);
    void *drain_data;
    uint64_t started_ms;
    uint32_t next_xfer;
    struct agent_replica_out out[AGENT_REPLICA_MAX_COPIES];
    int link_full; /* pump: a direct link's queue stopped a chunk (polled by the pace timer) */
    unsigned bulk_streams; /* per copy (replica_bulk.h); 0: chunks on the TLS link */
    int bulk_warned;
    double tokens; /* bytes the cap allows now */
    uint64_t tokens_ms;
    struct rdzv_msg *msg; /* one REPL_DATA (64 KiB: not on the stack) */
    /* receiving */
    struct agent_replica_in in[AGENT_REPLICA_MAX_IN];
};

/* Sets up (nothing is sent yet). copies: R (0: this node only receives); mb_per_s: the cap in
 * MB/s (10^6 bytes; 0: none). Borrows loop and watch; copies cbs. Returns 0 or -ENOMEM. */
int agent_replica_init(uv_loop_t *loop, struct agent_replica *r, struct agent_ckptwatch *watch,
                       unsigned copies, double mb_per_s, const struct agent_replica_cbs *cbs,
                       void *data);

/* The direct link listens on addr (the numeric --local-addr this node's JOIN names) rather than
 * on every address (NULL, "" or a host name: every address), on port (--replicate-port; 0: an
 * ephemeral one). Before the first offer. */
void agent_replica_bind(struct agent_replica *r, const char *addr, unsigned port);

/* Entry e was just recorded by this node (group rank my_rank of world nodes in round): sends
 * it to the next R nodes by group rank (my_rank+1, ...), superseding a transfer in flight. */
void agent_replica_offer(struct agent_replica *r, const struct agent_ckpt_entry *e, uint32_t round,
                         uint32_t my_rank, uint32_t world);

/* The job's other nodes record their parts of sharded checkpoints (RDZV_JOIN_PARTS): a directory
 * checkpoint this node sends as group rank 0 is offered as part 1 of the round's nodes, and a
 * receiver that holds its own part of that name keeps the copy beside it
 * (agent_ckpt_part_name). An entry that is a part (e->part) is always sent as one. */
void agent_replica_parts(struct agent_replica *r, int on);

/* A REPL_* message from the server. */
void agent_replica_on_msg(struct agent_replica *r, const struct rdzv_msg *m);

/* Waits for the copies being sent (a job's last checkpoint, written just before its workers
 * finished): done(data) runs once every copy verified, failed or gave up, or after max_ms.
 * Returns 1 when it will run, 0 when nothing is being sent (done is then not called). */
int agent_replica_drain(struct agent_replica *r, uint64_t max_ms, void (*done)(void *data),
                        void *data);

/* The connection to the server broke: every transfer is gone on the server's side. */
void agent_replica_reset(struct agent_replica *r);

/* Abandons everything (temporary files removed) and closes the timer. Accepts an
 * uninitialised (zeroed) one. */
void agent_replica_close(struct agent_replica *r);

#endif
