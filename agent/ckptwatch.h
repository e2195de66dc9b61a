/* The agent's side of the checkpoint convention (DESIGN.md "Checkpoints"): watches
 * MUSTER_CHECKPOINT_DIR with inotify (uv_fs_event), records each entry renamed into place with
 * its xxHash checksum in the registry (kept in DIR/.muster/registry.json, a name the scanner
 * ignores), prunes behind a verified one (--keep-checkpoints) and, when an attempt starts,
 * picks the newest entry that still verifies for MUSTER_RESUME_FROM.
 *
 * An entry renamed into place is hashed in libuv's pool, not on the loop (see ckptwatch.c);
 * the scans when a node starts recording and at sync still hash on the loop.
 *
 * Only the node holding group rank 0 records (and writes the registry file); the others read
 * the file. Entries in the directory but not in the registry (a first run, a registry file
 * lost, a checkpoint the previous rank-0 node did not get to record) are recorded when a node
 * starts recording, with the checksum they have then: trust on first use, logged. */
#ifndef MUSTER_AGENT_CKPTWATCH_H
#define MUSTER_AGENT_CKPTWATCH_H

#include <limits.h>
#include <uv.h>

#include "ckpt.h"

typedef void (*agent_ckptwatch_log_cb)(void *data, const char *line);

/* Optional reports (NULL allowed): an entry was recorded; an entry failed verification when an
 * attempt picked where to resume (why: one line). */
struct agent_ckptwatch_cbs {
    agent_ckptwatch_log_cb log;
    void (*recorded_cb)(void *data, const struct agent_ckpt_entry *e);
    void (*bad_cb)(void *data, const struct agent_ckpt_entry *e, const char *why);
    /* --keep-checkpoints removed e (after the registry was saved without it) */
    void (*pruned_cb)(void *data, const struct agent_ckpt_entry *e);
};

struct agent_ckptwatch_name { /* an entry renamed into place, waiting to be hashed */
    struct agent_ckptwatch_name *next;
    char name[AGENT_CKPT_NAME_MAX];
};

struct agent_ckptwatch {
    uv_fs_event_t event;
    char dir[PATH_MAX];
    char registry_path[PATH_MAX];
    struct agent_ckpt_registry reg;
    unsigned keep;
    int recording; /* only the node of rank 0 records (its workers write the checkpoints) */
    agent_ckptwatch_log_cb log;
    void (*recorded_cb)(void *data, const struct agent_ckpt_entry *e);
    void (*bad_cb)(void *data, const struct agent_ckpt_entry *e, const char *why);
    void (*pruned_cb)(void *data, const struct agent_ckpt_entry *e);
    void *data;
    int open;
    void (*close_cb)(void *data);
    /* entries renamed into place are hashed in libuv's pool, one at a time, in order */
    uv_work_t work;
    int scanning; /* work is in flight: scan_name, then scan_rc and scanned */
    char scan_name[AGENT_CKPT_NAME_MAX];
    int scan_rc;
    struct agent_ckpt_entry scanned;
    struct agent_ckptwatch_name *queue;
    int handle_closed; /* close_cb waits for the scan in flight too */
};

/* Creates dir if missing, loads the registry, records untracked entries and starts watching.
 * Borrows loop; copies cbs (log is required). Returns 0 or a negative errno (nothing to close
 * then), having logged one line that says why: -EPERM when dir, its .muster/ or a directory
 * above is owned or writable by another user (common/safefile.h). */
int agent_ckptwatch_init(uv_loop_t *loop, struct agent_ckptwatch *w, const char *dir, unsigned keep,
                         const struct agent_ckptwatch_cbs *cbs, void *data);

/* Whether this node records (it holds group rank 0 in the current round). Starts off. */
void agent_ckptwatch_set_recording(struct agent_ckptwatch *w, int recording);

/* Brings the registry up to date: the recording node records what is new in the directory
 * (the last checkpoint of a stopping job can land after the last event was read); the others
 * re-read the registry file. */
void agent_ckptwatch_sync(struct agent_ckptwatch *w);

/* Records e, a checkpoint another node's agent copied into the directory and this node
 * verified (a replica, issue 19): added to the registry (replacing one of the same name),
 * older entries pruned behind it (--keep-checkpoints), the registry file saved. Returns 0 or a
 * negative errno (logged). */
int agent_ckptwatch_adopt(struct agent_ckptwatch *w, const struct agent_ckpt_entry *e);

/* Picks the checkpoint to resume from: the newest entry that verifies, copied to chosen.
 * Newer entries that do not verify are logged and reported (bad_cb) and stay registered.
 * Returns 0 or -ENOENT (none verifies: a fresh start). */
int agent_ckptwatch_pick(struct agent_ckptwatch *w, struct agent_ckpt_entry *chosen);

/* Stops watching, frees the registry; close_cb(data) once the handle is closed and no hash is
 * in flight (may be NULL); w's memory must live until then. */
void agent_ckptwatch_close(struct agent_ckptwatch *w, void (*close_cb)(void *data));

#endif
