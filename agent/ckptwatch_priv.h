/* Internals shared by ckptwatch.c (the loop's side) and ckptjob.c (the jobs it runs off the
 * loop, one at a time). */
#ifndef MUSTER_AGENT_CKPTWATCH_PRIV_H
#define MUSTER_AGENT_CKPTWATCH_PRIV_H

#include <stdatomic.h>

#include "ckptcopy.h"
#include "ckptexam.h"
#include "ckptwatch.h"

/* An entry with activity since it was last resolved. */
struct agent_ckptwatch_pending {
    char name[AGENT_CKPT_NAME_MAX];
    uint64_t last_ms; /* uv_now of its last event */
    uint64_t due_ms;  /* when to examine it */
    uint64_t seq;     /* arrival order */
    enum agent_ckpt_exam_mode mode;
    int renamed; /* the last thing that happened to it was a rename into place */
    int again;   /* an event came while it was examined: look again */
    struct agent_ckptwatch_job *job; /* its examination, queued or running */
};

enum agent_ckptwatch_job_kind {
    CKW_EXAM,    /* examine (and hash) one entry */
    CKW_SCAN,    /* list the directory: a start, a flush, an event overflow */
    CKW_SAVE,    /* write the registry files */
    CKW_PRUNE,   /* remove pruned entries and their copies */
    CKW_COPY,    /* keep a last good copy */
    CKW_PICK,    /* verify, maybe restore, choose */
    CKW_BARRIER, /* nothing: its callback runs after every job before it */
    CKW_PART,    /* examine (and hash) this node's part of a sharded checkpoint */
};

enum agent_ckptwatch_origin { CKW_FROM_EVENT, CKW_FROM_STARTUP, CKW_FROM_FLUSH };

/* Log lines made off the loop, emitted by the loop. */
struct agent_ckptwatch_lines {
    char *text; /* lines separated by '\n' */
    size_t len, cap;
};

struct agent_ckptwatch_bad {
    struct agent_ckpt_entry e;
    char why[256];
};

struct agent_ckptwatch_job {
    uv_work_t req;
    struct agent_ckptwatch *w;
    enum agent_ckptwatch_job_kind kind;
    struct agent_ckptwatch_job *next;
    atomic_int cancel;
    int started;
    uint64_t start_ms; /* uv_now when it started */
    int rc;
    char why[256];
    enum agent_ckptwatch_origin origin;
    int clean;                                  /* SCAN of a flush */
    struct agent_ckpt_exam x;                   /* EXAM */
    struct agent_ckpt_registry snap, snap_good; /* SAVE, PICK: copies of the registries */
    struct agent_ckpt_registry notify;          /* SAVE: recorded_cb for these once saved */
    char (*names)[AGENT_CKPT_NAME_MAX];         /* SCAN: found; PRUNE: to remove */
    size_t nnames;
    char (*subdirs)[512]; /* SCAN: directories to watch, "top/sub" */
    unsigned char *subdepth;
    size_t nsubdirs;
    struct agent_ckpt_entry e;           /* COPY: what to copy; PICK: chosen */
    struct agent_ckpt_copy_stats cstats; /* COPY */
    struct agent_ckptwatch_lines lines;  /* PICK, PRUNE */
    struct agent_ckptwatch_bad *bad;     /* PICK: entries skipped */
    size_t nbad;
    int restored;                    /* PICK */
    agent_ckptwatch_done_cb done;    /* BARRIER, SCAN of a flush */
    agent_ckptwatch_pick_cb pick_cb; /* PICK */
    agent_ckptwatch_part_cb part_cb; /* PART */
    uint32_t part, parts;            /* PART */
    void *cb_data;
};

/* ckptjob.c: a new job of kind (zeroed; NULL when out of memory); freeing one frees all it
 * holds. */
struct agent_ckptwatch_job *agent__ckptwatch_job_new(struct agent_ckptwatch *w,
                                                     enum agent_ckptwatch_job_kind kind);
void agent__ckptwatch_job_free(struct agent_ckptwatch_job *j);

/* Appends j and starts the next job if none runs. */
void agent__ckptwatch_enqueue(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j);

/* Unlinks j, which has not started, from the queue (j is not freed). */
void agent__ckptwatch_unqueue(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j);

/* ckptwatch.c: a job's result, on the loop; j is freed after. Not called once closing, but
 * for SAVE/PRUNE logging. */
void agent__ckptwatch_job_done(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j);

/* ckptwatch.c: the job that ran last finished and none is left: a close may complete. */
void agent__ckptwatch_idle(struct agent_ckptwatch *w);

/* Appends one formatted line to l (dropped when out of memory). */
void agent__ckptwatch_line(struct agent_ckptwatch_lines *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
