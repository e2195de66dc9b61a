/* The agent's side of the checkpoint convention (docs/ARCHITECTURE.md "Checkpoints",
 * docs/FAULT_TOLERANCE.md): watches MUSTER_CHECKPOINT_DIR and the directories inside it
 * (ckptnotify.h), decides when an entry is complete however the trainer wrote it (renamed into
 * place; or written in place and complete by its layout, or unchanged for the settle time:
 * ckptexam.h), records it with its XXH3 checksum in the registry (DIR/.muster/registry.json),
 * keeps a last good copy of what a trainer rewrites in place (ckptcopy.h), prunes behind a
 * verified one (--keep-checkpoints) and, before an attempt, picks the newest entry that still
 * verifies for MUSTER_RESUME_FROM, putting the last good copy back in place when the file there
 * was cut.
 *
 * Nothing here blocks the agent's loop: hashing, directory walks, copies, fsyncs of the registry
 * and removals run one job at a time in libuv's thread pool; the loop only reads inotify events
 * (a bounded slice per iteration), keeps a table of entries waiting to settle and takes results.
 * A checkpoint still waiting to be hashed when a newer one is ready is superseded.
 *
 * Only the node holding group rank 0 records (and writes the registry file); the others read the
 * file. Entries in the directory but not in the registry when a node starts recording are recorded
 * as they are then (trust on first use, logged), unless their layout says they were cut. */
#ifndef MUSTER_AGENT_CKPTWATCH_H
#define MUSTER_AGENT_CKPTWATCH_H

#include <limits.h>
#include <uv.h>

#include "ckpt.h"
#include "ckptnotify.h"

/* --checkpoint-settle's default: how long an entry of no known layout, written in place, must
 * stay unchanged before it counts as complete. */
#define AGENT_CKPTWATCH_SETTLE_MS 2000u
/* Entries waiting to settle at once; beyond, the oldest is examined at once. */
#define AGENT_CKPTWATCH_MAX_PENDING 4096

/* One line (no newline, already escaped) with its level (common/log.h). */
typedef void (*agent_ckptwatch_log_cb)(void *data, enum mc_log_level level, const char *line);

/* Optional reports (NULL allowed): an entry was recorded; an entry failed verification when an
 * attempt picked where to resume (why: one line). */
struct agent_ckptwatch_cbs {
    agent_ckptwatch_log_cb log;
    void (*recorded_cb)(void *data, const struct agent_ckpt_entry *e);
    void (*bad_cb)(void *data, const struct agent_ckpt_entry *e, const char *why);
    /* --keep-checkpoints removed e (after the registry was saved without it) */
    void (*pruned_cb)(void *data, const struct agent_ckpt_entry *e);
};

/* An entry with activity not yet resolved (ckptwatch.c). */
struct agent_ckptwatch_pending;
struct agent_ckptwatch_job;

struct agent_ckptwatch {
    uv_loop_t *loop;
    struct agent_ckptnotify notify;
    uv_timer_t timer; /* the earliest due pending entry */
    char dir[PATH_MAX];
    char gooddir[PATH_MAX]; /* DIR/.muster/good: last good copies */
    char registry_path[PATH_MAX];
    char good_path[PATH_MAX]; /* DIR/.muster/good.json: what gooddir holds */
    struct agent_ckpt_registry reg;
    struct agent_ckpt_registry good;
    unsigned keep;
    unsigned settle_ms;
    unsigned supersede_ms; /* a job running this long means hashing fell behind (tests set 0) */
    char marker[AGENT_CKPT_NAME_MAX];
    int recording; /* only the node of rank 0 records (its workers write the checkpoints) */
    agent_ckptwatch_log_cb log;
    void (*recorded_cb)(void *data, const struct agent_ckpt_entry *e);
    void (*bad_cb)(void *data, const struct agent_ckpt_entry *e, const char *why);
    void (*pruned_cb)(void *data, const struct agent_ckpt_entry *e);
    void *data;
    struct agent_ckptwatch_pending *pend;
    size_t npend, cappend;
    uint64_t seq;                     /* arrival order of pending entries */
    struct agent_ckptwatch_job *head; /* jobs not started, in order */
    struct agent_ckptwatch_job *running;
    int flushed;  /* a flush completed and no event came since */
    int flushing; /* flushes under way */
    int open;     /* initialised and not closing */
    int handles;  /* notify and timer handles still open */
    void (*close_cb)(void *data);
    uint64_t hashed_bytes, hash_ns; /* totals, for the hashing rate in the logs */
};

/* Creates dir if missing, loads the registry and starts watching. Borrows loop; copies cbs (log
 * is required). Returns 0 or a negative errno (nothing to close then), having logged one line
 * that says why: -EPERM when dir, its .muster/ or a directory above is owned or writable by
 * another user (common/safefile.h). */
int agent_ckptwatch_init(uv_loop_t *loop, struct agent_ckptwatch *w, const char *dir, unsigned keep,
                         const struct agent_ckptwatch_cbs *cbs, void *data);

/* --checkpoint-settle (ms; 0: the default) and --checkpoint-marker (NULL or "": none). */
void agent_ckptwatch_configure(struct agent_ckptwatch *w, unsigned settle_ms, const char *marker);

/* Whether this node records (it holds group rank 0 in the current round). Starts off; turning
 * it on re-reads the registry file and examines what the directory holds (off the loop). */
void agent_ckptwatch_set_recording(struct agent_ckptwatch *w, int recording);

/* The others re-read the registry file; the recording node flushes (see _flush, clean 0). */
void agent_ckptwatch_sync(struct agent_ckptwatch *w);

typedef void (*agent_ckptwatch_done_cb)(void *data);

/* The workers stopped: examines every entry at once rather than at its settle time, drops what
 * waited to settle, then calls done(data) on the loop (never from inside this call; NULL
 * allowed). clean: every worker exited 0, so an entry of no known layout written in place is
 * complete; otherwise only entries renamed into place or complete by their layout are recorded
 * (a kill in the middle of a write must not become the checkpoint). Not recording: done only. */
void agent_ckptwatch_flush(struct agent_ckptwatch *w, int clean, agent_ckptwatch_done_cb done,
                           void *data);

/* Records e, a checkpoint another node's agent copied into the directory and this node
 * verified (a replica): added to the registry (replacing one of the same name), older entries
 * pruned behind it (--keep-checkpoints), the registry file saved off the loop. Returns 0 or a
 * negative errno (logged). */
int agent_ckptwatch_adopt(struct agent_ckptwatch *w, const struct agent_ckpt_entry *e);

/* e: the name, its step and the part asked for (valid during the call); with rc 0 it is this
 * node's part as recorded (size, checksum); -ENOENT: this node holds none
 * of it of its own (no such directory, a file, a whole checkpoint: a directory shared with the
 * node of rank 0, or a copy of its checkpoint); another negative errno: it is cut or cannot be
 * read (logged). */
typedef void (*agent_ckptwatch_part_cb)(void *data, int rc, const struct agent_ckpt_entry *e);

/* The node of group rank 0 recorded `name` (a sharded checkpoint's first part: every rank
 * finished writing it): examines this node's dir/name off the loop as part `part` (1 + this
 * node's group rank) of `parts`, records it (registry saved) and calls cb(data, ...) on the
 * loop, never from inside this call; not after _close. */
void agent_ckptwatch_part(struct agent_ckptwatch *w, const char *name, uint32_t part,
                          uint32_t parts, agent_ckptwatch_part_cb cb, void *data);

/* rc 0: chosen is the checkpoint to resume from (valid during the call); restored: it was put
 * back in place from its last good copy. rc -ENOENT: none verifies, a fresh start. */
typedef void (*agent_ckptwatch_pick_cb)(void *data, int rc, const struct agent_ckpt_entry *chosen);

/* Picks the checkpoint to resume from, off the loop: after a flush (the recording node), the
 * newest entry that verifies; newer ones that do not are logged and reported (bad_cb) and stay
 * registered; an entry whose file in place fails but whose last good copy verifies is put back
 * in place first (one line says what and why). cb(data, ...) later on the loop, never from inside
 * this call; not after _close. */
void agent_ckptwatch_pick(struct agent_ckptwatch *w, agent_ckptwatch_pick_cb cb, void *data);

/* Stops watching; jobs not started are dropped (registry saves and prunes still run), the one
 * running is cancelled where it can be; close_cb(data) once the handles are closed and no job
 * runs (may be NULL). Then the registry is freed. */
void agent_ckptwatch_close(struct agent_ckptwatch *w, void (*close_cb)(void *data));

#endif
