/* One job's rendezvous rounds, as pure logic: who is in the current round, when it closes, which
 * group rank each node gets, restart and done accounting. No I/O and no libuv: the server feeds
 * it events with the current monotonic time in ms, turns the returned rdzv_job_event into
 * messages, and arms a timer for rdzv_job_deadline(). That keeps every rule unit-testable.
 *
 * Members are identified to the job by an opaque `peer` pointer (the server's connection) and
 * to each other across rounds by node_id. The struct is visible so that the server and tests can
 * read members[]/prev[]; only the functions below change it. */
#ifndef MUSTER_RDZV_JOB_H
#define MUSTER_RDZV_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "backoff.h"
#include "message.h"
#include "parts.h"

/* Nodes that may wait in pending[] (joiners of a running job, spares): max_nodes + this. */
#define RDZV_JOB_PENDING_SLACK 64u

/* Per-node and per-job bounds; with both, the world size (sum of nproc) fits in a uint32_t. */
#define RDZV_JOB_MAX_NODES 65535u
#define RDZV_JOB_MAX_NPROC 65535u

enum rdzv_job_state {
    RDZV_JOB_FILLING = 0, /* the current round accepts JOINs */
    RDZV_JOB_RUNNING,     /* the current round closed and was assigned */
    RDZV_JOB_FINISHED,    /* JOB_DONE or JOB_FAILED was decided; nothing changes any more */
};

/* What the server has to send after a call. */
enum rdzv_job_event {
    RDZV_JOB_EV_NONE = 0, /* nothing (also: the input was stale or ignored) */
    RDZV_JOB_EV_WAITING,  /* the filling round's count changed: WAITING to every member */
    RDZV_JOB_EV_ASSIGNED, /* the round closed: ASSIGN (rdzv_job_assign) to every member */
    RDZV_JOB_EV_RESTART,  /* a new round opened: RESTART to every prev[] entry with a peer;
                             then, if the new round already closed (state RUNNING), ASSIGN to
                             its members, else WAITING to them (admitted pending joiners) */
    RDZV_JOB_EV_FAILED,   /* restarts exhausted: JOB_FAILED to every member; job finished */
    RDZV_JOB_EV_DONE,     /* every member sent DONE: JOB_DONE to every member; job finished */
    RDZV_JOB_EV_TIMEOUT,  /* join timeout: ERROR TIMEOUT to every member, then drop the job */
    RDZV_JOB_EV_PENDING,  /* a JOIN while the round runs at max_nodes, or a spare's JOIN: the
                             joiner waits in pending[] for a later round (WAITING to the
                             pending joiners) */
};

struct rdzv_job_member {
    uint64_t node_id;
    void *peer; /* borrowed, opaque to the job */
    uint32_t nproc, master_port;
    char host[RDZV_HOST_MAX + 1];
    /* What the node advertises (its JOIN's addr: MASTER_ADDR, replica links on multi-homed
     * hosts) and where the server saw its connection come from (the TCP peer address, which a
     * client on another machine cannot choose). Only `seen` identifies it (see rdzv_job_node). */
    char addr[RDZV_HOST_MAX + 1];
    char seen[RDZV_HOST_MAX + 1];
    uint32_t group_rank, rank_offset; /* valid while RUNNING */
    uint32_t want_rank;               /* from its JOIN: 0, or 1 + the group rank it asks for */
    int done;
    char resume[RDZV_CKPT_NAME_MAX + 1]; /* from its JOIN: where this node would resume */
    int64_t resume_step;
    int spare; /* its JOIN said RDZV_JOIN_SPARE; matters while it waits in pending[] */
    int parts; /* its JOIN said RDZV_JOIN_PARTS: it records its part of sharded checkpoints */
};

/* Bad-node exclusion: --exclude-after N[:WINDOW] of the first JOIN. */
#define RDZV_JOB_EXCLUDE_MAX 32u            /* N at most */
#define RDZV_JOB_EXCLUDE_WINDOW_MS 3600000u /* WINDOW when the JOIN gives 0 */
#define RDZV_JOB_LEDGER_MAX 1024u           /* nodes with failures one job remembers (~1 KB each) */
#define RDZV_JOB_EXCLUDE_REASON_MAX 300

/* The failures attributed to one node. A failure is the root cause of a restart: the node whose
 * rank failed first, or a lost node. Keyed by the address the server SAW: the node
 * secret is per agent process (an agent restarted on a bad machine gets a new node id), so the
 * machine is what an exclusion must outlive; and a teammate on another machine that JOINs with
 * a victim's host and addr only charges its own entry. The claimed host and addr still take
 * part in the key, so nodes behind one address (agents of one machine with distinct
 * --local-addr, or a NAT) stay apart; whoever shares that seen address can speak for them. */
struct rdzv_job_node {
    char host[RDZV_HOST_MAX + 1];
    char addr[RDZV_HOST_MAX + 1];
    char seen[RDZV_HOST_MAX + 1];
    uint32_t failures;                        /* all of them, for status */
    uint64_t times[RDZV_JOB_EXCLUDE_MAX];     /* ring of the latest failure times, monotonic ms */
    uint32_t next;                            /* next slot of times[] */
    int excluded;                             /* its JOINs are refused from now on */
    char reason[RDZV_JOB_EXCLUDE_REASON_MAX]; /* why, for ERROR and status */
};

/* Why a new round starts without a failure (restart_count unchanged). */
#define RDZV_JOB_SCALE_UP_FMT "scale-up: %s joined"

/* A member of the previous round: keeps its group rank if it joins again, and gets RESTART. */
struct rdzv_job_prev {
    uint64_t node_id;
    uint32_t group_rank;
    void *peer;   /* NULL once that connection went away */
    int excluded; /* the failure that ended the round excluded it: its place is free at once */
};

struct rdzv_job {
    char id[RDZV_ID_MAX + 1];
    /* fixed by the first JOIN */
    uint32_t min_nodes, max_nodes, max_restarts, last_call_ms, join_timeout_ms;

    enum rdzv_job_state state;
    uint32_t round;         /* number of the current round, from 0 */
    uint32_t restart_count; /* restarts so far; carried by ASSIGN */

    struct rdzv_job_member *members; /* current round, in join order */
    size_t n_members, cap_members;
    struct rdzv_job_prev *prev; /* previous round (empty before the first restart) */
    size_t n_prev;
    uint32_t *prev_slots;     /* prev[] indexed by node id (job.c prev_find), 2 * cap_members */
    uint32_t *member_slots;   /* members[] by peer and by node id (job.c), 8 * cap_members */
    size_t member_slots_used; /* inserts since the last rebuild, stale ones included */
    struct rdzv_job_member *pending; /* joined while the round ran full, and spares: they enter
                                        a later round (see rdzv_job_join) */
    size_t n_pending, cap_pending;
    /* Hot spares: the node count of the last round that ran. A new round takes spares in only
     * while the previous round's members still coming back leave it short of that count. */
    uint32_t keep_nodes;

    uint64_t first_join_ms;  /* of the current round; valid when n_members > 0 */
    uint64_t min_reached_ms; /* when the min-th node joined; valid when min_reached */
    int min_reached;

    uint32_t world_size;       /* valid while RUNNING */
    size_t master;             /* index in members[] of group rank 0; valid while RUNNING */
    size_t n_done;             /* members of the running round that sent DONE */
    uint32_t *by_rank;         /* scratch for rank assignment: member index + 1 per group rank */
    struct rdzv_failure cause; /* valid after RESTART or FAILED */
    /* Where the running round resumes: group rank 0's JOIN.resume, fixed when the round closes
     * (or adopted from a REJOIN's ASSIGN), so every node's ASSIGN carries the same checkpoint
     * even if rank 0's connection is gone when a late ASSIGN is built. Valid while RUNNING. */
    char resume[RDZV_CKPT_NAME_MAX + 1];
    int64_t resume_step;
    /* A sharded checkpoint: the parts every node of the round holds between them
     * (ASSIGN.resume_parts); 0: rank 0's pick, as above. parts: what the agents reported
     * (parts.h), NULL until the first part. */
    uint32_t resume_parts;
    struct rdzv_parts *parts;

    /* Rebuilt from REJOINs after a server restart: members[] fills up to `expected` nodes
     * (the round's group world size) until grace_deadline_ms; see rdzv_job_rejoin(). */
    int rebuilding;
    uint32_t expected;
    uint64_t grace_deadline_ms;
    uint32_t reconnect_grace_ms;

    /* --restart-backoff of the first JOIN, applied per job by the server: after a
     * failure the next round may not close (ASSIGN) before hold_until_ms, however fast the
     * nodes re-join. backoff.n counts quick failures in a row; a round that ran
     * mc_backoff_healthy_ms() resets it. Scale-up rounds are not held. */
    struct mc_backoff backoff;
    uint64_t running_since_ms; /* when the running round closed */
    uint64_t hold_until_ms;    /* the filling round closes no earlier (0: no hold) */
    uint32_t restart_delay_ms; /* the last new round's hold, for RESTART.delay_ms */

    /* --max-same-failure of the first JOIN (0: off): the signature of the failure that ended
     * the last attempt, if retry-limited (rdzv_sig_retry_limited), how many attempts in a row
     * ended with it, and whether a newer checkpoint was recorded since (which starts the count
     * afresh: the job made progress). Any other failure (a lost node, a signal, no signature)
     * ends the run of same failures. */
    uint32_t max_same_failure;
    uint8_t same_class;
    char same_sig[RDZV_SIG_MAX + 1];
    uint32_t same_count;
    int ckpt_since;    /* a newer checkpoint came since the last failure */
    int64_t ckpt_step; /* the newest recorded checkpoint's step; -1: none with a step */
    uint64_t
        ckpt_name_hash; /* the newest stepless checkpoint's name, hashed (rdzv_job_checkpoint) */

    /* failure ledger per node; exclude_after 0: count only, never exclude */
    uint32_t exclude_after, exclude_window_ms;
    /* --exclude-stragglers K of the first JOIN: the server (handler_tel.c) excludes a node it
     * named a straggler K times (rdzv_job_exclude); 0: never */
    uint32_t exclude_stragglers;
    struct rdzv_job_node *nodes;
    size_t n_nodes, cap_nodes;
};

/* Defaults for a JOIN's zero fields. */
#define RDZV_JOB_HEARTBEAT_TIMEOUT_MS 3000u
#define RDZV_JOB_RECONNECT_GRACE_MS 60000u

/* Checks a JOIN's own fields (job id, node counts, nproc, port). Returns 0 or -EINVAL. */
int rdzv_job_validate_join(const struct rdzv_join *j);

/* Creates a job whose parameters come from the first JOIN `j` (borrowed; validate it first).
 * The job starts FILLING round 0 with no member. Returns 0, -EINVAL or -ENOMEM; *out is set on
 * success only. */
int rdzv_job_new(const struct rdzv_join *j, struct rdzv_job **out);

/* Frees the job. Accepts NULL. Never touches the peers. */
void rdzv_job_free(struct rdzv_job *job);

/* Returns 0 when a later JOIN agrees with the job's min/max nodes, -EINVAL otherwise. */
int rdzv_job_check(const struct rdzv_job *job, const struct rdzv_join *j);

/* Adds the node of `j` (borrowed) reached at `addr` (copied; what it advertises) whose connection
 * `peer` came from `seen` (copied; the TCP peer address: the node's identity in the ledger) to
 * the filling round.
 * Returns 0 and sets *ev to WAITING or ASSIGNED (round full); -ESHUTDOWN when the job finished,
 * -EPERM when the node is excluded (rdzv_job_excluded() says why; checked first), -EEXIST when the
 * peer or node_id is already in the round or pending, -ENOSPC when it would wait in pending[]
 * while max_nodes + RDZV_JOB_PENDING_SLACK nodes wait there already, -ENOMEM. While the round runs
 * (scale-up), the joiner goes to pending[]: with fewer than max_nodes members a new round starts at
 * once (*ev = RESTART, restart_count unchanged, cause text "scale-up: <host> joined"); at max_nodes
 * it waits for a later round (*ev = PENDING). Pending joiners enter a new round (any cause) while
 * there is room next to the previous round's still-connected members, who keep priority. A spare
 * (RDZV_JOIN_SPARE, not a member of the previous round) always waits in pending[]
 * (*ev = PENDING, no scale-up): it enters a filling round only in the place of a node of the
 * previous round that was lost, left or excluded, up to keep_nodes (the world keeps its size).
 * Places free up when the round opens (an excluded node's at once) and whenever a previous
 * member's connection goes away while the round fills (rdzv_job_lost, LEAVE); then pending
 * joiners and spares are admitted, and *ev may be WAITING or ASSIGNED for the round's members. */
int rdzv_job_join(struct rdzv_job *job, const struct rdzv_join *j, const char *addr,
                  const char *seen, void *peer, uint64_t now_ms, enum rdzv_job_event *ev);

/* The deadline (monotonic ms) at which rdzv_job_tick() has something to do, or -1 for none. */
int64_t rdzv_job_deadline(const struct rdzv_job *job);

/* Runs the deadlines due at now_ms. Returns TIMEOUT (the caller drops the job), ASSIGNED (last
 * call expired with at least min nodes), RESTART or FAILED (a rebuilt job's missing member did
 * not come back within the reconnect grace: a lost node, time_ms = wall_ms) or NONE. */
enum rdzv_job_event rdzv_job_tick(struct rdzv_job *job, uint64_t now_ms, uint64_t wall_ms);

/* Fills the WAITING message for the filling round. */
void rdzv_job_waiting(const struct rdzv_job *job, uint64_t now_ms, struct rdzv_waiting *w);

/* Fills the ASSIGN message for members[i] of the running round; resume and resume_step are
 * the round's (group rank 0's choice) for every member. */
void rdzv_job_assign(const struct rdzv_job *job, size_t i, struct rdzv_assign *a);

/* Writes the timeout reason ("rendezvous of job X timed out after ...") into buf. */
void rdzv_job_timeout_text(const struct rdzv_job *job, char *buf, size_t len);

/* FAILED (leaving == 0) or LEAVE from `peer`. Borrows f. A FAILED that does not name the running
 * round, or comes from a non-member, is stale: NONE. A LEAVE removes the member; while the round
 * fills that gives WAITING. Otherwise returns RESTART or FAILED (see rdzv_job_event). FAILED
 * also when f's retry-limited signature ended max_same_failure attempts in a row with no newer
 * checkpoint (rdzv_job_checkpoint) between them: then job->cause has RDZV_FAILURE_NOT_RETRYABLE
 * (which the server alone sets: it is cleared in f) and same_count says how many. */
enum rdzv_job_event rdzv_job_failed(struct rdzv_job *job, void *peer, const struct rdzv_failure *f,
                                    int leaving, uint64_t now_ms);

/* A checkpoint recorded by the job's group rank 0 (CKPT, not a replica's, not a bad one): when it
 * is newer than every earlier one (a higher step; without a step, another name than the last
 * stepless one), the next failure starts the --max-same-failure count afresh. */
void rdzv_job_checkpoint(struct rdzv_job *job, const char *name, int64_t step);

/* DONE(round) from `peer`. Returns DONE when every member of the running round is done. */
enum rdzv_job_event rdzv_job_done(struct rdzv_job *job, void *peer, uint32_t round);

/* The connection of `peer` closed or went silent. Forgets the peer everywhere (pending joiners
 * included); a member of the running round is a lost node (a failure with rank -1 and text
 * "lost node <host> (<addr>): <reason>", time_ms = wall_ms). Returns what rdzv_job_failed()
 * would; while a round fills, pending joiners and spares may take the freed place: ASSIGNED when
 * that closed the round, WAITING when the round's members changed, else NONE. */
enum rdzv_job_event rdzv_job_lost(struct rdzv_job *job, void *peer, const char *reason,
                                  uint64_t now_ms, uint64_t wall_ms);

/* The member `peer` of the running round is refused from now on (its ledger entry excluded
 * with `reason`, as --exclude-after does) and the round restarts without it: RESTART or FAILED
 * as for a failure it caused, the text "node <host> (<addr>) excluded: <reason>". It stays a
 * member until then: it gets RESTART like the others and its JOIN is refused. NONE when the
 * round is not running, peer is no member, or the ledger is full. */
enum rdzv_job_event rdzv_job_exclude(struct rdzv_job *job, void *peer, const char *reason,
                                     uint64_t now_ms, uint64_t wall_ms);

/* REJOIN `rj` (borrowed, running = 1) from `peer` reached at `addr`, seen at `seen` (as for
 * rdzv_job_join), on this server.
 * A job that never saw a JOIN or REJOIN adopts the agent's round (rebuild after a server
 * restart: round, restart_count, ranks from rj->assign; waits for the other members until
 * reconnect_grace_ms, see rdzv_job_deadline()). A job running that round re-attaches the
 * member with rj->join.node_id to `peer`; *old_peer is set to the connection it replaces (or
 * NULL), which the caller must forget without treating it as lost. rj->done counts as DONE.
 * Returns 0 and *ev = NONE (send REJOIN_OK) or DONE (REJOIN_OK, then JOB_DONE to all);
 * -ESHUTDOWN for a finished job; -ESTALE when the job is in another round or does not know
 * the node (send RESTART to this peer alone); -ENOMEM. */
int rdzv_job_rejoin(struct rdzv_job *job, const struct rdzv_rejoin *rj, const char *addr,
                    const char *seen, void *peer, uint64_t now_ms, void **old_peer,
                    enum rdzv_job_event *ev);

/* The ledger entry of an excluded node (host, addr, seen: see rdzv_job_node), or NULL when it
 * may join. */
const struct rdzv_job_node *rdzv_job_excluded(const struct rdzv_job *job, const char *host,
                                              const char *addr, const char *seen);

/* Index of peer in pending[], or -1. */
int rdzv_job_find_pending(const struct rdzv_job *job, const void *peer);

/* Index of peer in members[], or -1. O(1): members[] is indexed (job.c member_slots). */
int rdzv_job_find(const struct rdzv_job *job, const void *peer);

/* Index of the member with node_id in members[], or -1. O(1) likewise. */
int rdzv_job_find_node(const struct rdzv_job *job, uint64_t node_id);

#endif
