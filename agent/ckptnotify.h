/* inotify on a checkpoint directory and the directories inside its entries, for the checkpoint
 * watcher (ckptwatch.h). libuv's uv_fs_event reports neither IN_CLOSE_WRITE (how a file written
 * in place says it is done: torch.save, HF Trainer) nor events below the directory it watches
 * (the files of a checkpoint-N/ directory), so this module owns its own inotify descriptor,
 * polled by the agent's loop (uv_poll_t).
 *
 * Every event is reported against the top-level entry it concerns: a write to
 * DIR/checkpoint-500/optimizer.pt is (top "checkpoint-500", leaf "optimizer.pt"); one to
 * DIR/ckpt.pt is (top "ckpt.pt", leaf "ckpt.pt", at_top 1). Directories created inside watched
 * ones are watched in turn, down to AGENT_CKPTNOTIFY_DEPTH below DIR. Names starting with '.' at
 * the top (muster's own .muster/, writers' temporary names) are not descended into. */
#ifndef MUSTER_AGENT_CKPTNOTIFY_H
#define MUSTER_AGENT_CKPTNOTIFY_H

#include <stdint.h>
#include <uv.h>

#include "log.h"

/* Nesting watched below the checkpoint directory: checkpoint-N/ and one level inside it
 * (DeepSpeed's global_stepN/). Deeper writes are still caught by the settle rule's checks. */
#define AGENT_CKPTNOTIFY_DEPTH 2
/* Watches per agent: kernel watches are a per-user resource (fs.inotify.max_user_watches). */
#define AGENT_CKPTNOTIFY_MAX_WATCHES 4096
/* Bytes of events read per loop iteration, so that a flood of events (30,000 files written)
 * costs the loop a bounded slice at a time. */
#define AGENT_CKPTNOTIFY_READ_BUDGET (256u << 10)

struct agent_ckptnotify_event {
    const char *top;  /* the top-level entry; NULL: events were lost (overflow), rescan all */
    const char *leaf; /* the name inside the watched directory the event is about */
    uint32_t mask;    /* IN_* bits */
    int at_top;       /* the event is about DIR/top itself */
};

typedef void (*agent_ckptnotify_cb)(void *data, const struct agent_ckptnotify_event *ev);
/* One line (no newline, not escaped: it names paths) with its level (common/log.h). */
typedef void (*agent_ckptnotify_log_cb)(void *data, enum mc_log_level level, const char *line);

struct agent_ckptnotify_watch {
    int wd;
    int depth; /* 0: DIR itself, 1: DIR/top, 2: below */
    char top[256];
    char rel[512]; /* path relative to DIR ("" for DIR) */
};

struct agent_ckptnotify {
    uv_poll_t poll;
    int fd;
    char dir[4096];
    struct agent_ckptnotify_watch *w;
    size_t nw, capw;
    agent_ckptnotify_cb cb;
    void *data;
    int open;
    int said_full; /* "no more watches" logged once */
    agent_ckptnotify_log_cb log;
    void (*close_cb)(void *data);
};

/* Starts watching dir (not below it yet: see _watch_tree). Borrows loop; cb gets every event,
 * log (required) one line per problem. Returns 0 or a negative errno (nothing to close then). */
int agent_ckptnotify_init(uv_loop_t *loop, struct agent_ckptnotify *n, const char *dir,
                          agent_ckptnotify_cb cb, agent_ckptnotify_log_cb log, void *data);

/* Watches DIR/rel (a directory inside entry top, depth 1 or 2), for entries found by a scan
 * rather than by an event. Returns 0 or a negative errno (logged once when out of watches). */
int agent_ckptnotify_watch(struct agent_ckptnotify *n, const char *top, const char *rel, int depth);

/* Reads and reports every event queued now (before a flush, so that nothing written before
 * the workers stopped is missed). */
void agent_ckptnotify_drain(struct agent_ckptnotify *n);

/* Stops; close_cb(data) once the poll handle is closed (may be NULL). Accepts a closed one. */
void agent_ckptnotify_close(struct agent_ckptnotify *n, void (*close_cb)(void *data));

#endif
