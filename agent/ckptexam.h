/* Deciding whether a checkpoint entry is complete, and hashing it: the blocking half of the
 * checkpoint watcher (ckptwatch.h), run in libuv's thread pool, never on the agent's loop.
 *
 * A trainer writes its checkpoint however its framework does (docs/FAULT_TOLERANCE.md
 * "What muster sees"): renamed into place (complete on arrival), or written in place. An entry
 * written in place is complete when its layout says so:
 *  - a torch.save file (a zip archive: Lightning .ckpt, nanoGPT ckpt.pt, HF optimizer.pt) once
 *    its end-of-central-directory record ends the file — torch.save writes it last, so a cut
 *    file (a kill in the middle of the write) never has one;
 *  - a safetensors file once its header's tensors reach the end of the file;
 *  - an HF Trainer checkpoint-N/ directory once its trainer_state.json (written last) parses,
 *    and every torch.save/safetensors file in it is complete;
 *  - a torch.distributed.checkpoint directory once its .metadata is there (written last);
 *  - a directory holding the user's --checkpoint-marker file;
 * and otherwise (an unknown format) when nothing changed for the settle time. The watcher
 * decides when to look; this module looks. */
#ifndef MUSTER_AGENT_CKPTEXAM_H
#define MUSTER_AGENT_CKPTEXAM_H

#include <stdatomic.h>
#include <stdint.h>

#include "ckpt_hash.h"

enum agent_ckpt_layout_state {
    AGENT_CKPT_LAYOUT_UNKNOWN,    /* no format muster knows: the settle rule decides */
    AGENT_CKPT_LAYOUT_COMPLETE,   /* the format says it is whole */
    AGENT_CKPT_LAYOUT_INCOMPLETE, /* the format says it is not (yet) */
};

struct agent_ckpt_layout {
    enum agent_ckpt_layout_state state;
    const char *kind; /* "torch.save zip", "safetensors", "HF Trainer checkpoint", "DCP", ... */
    char why[192];    /* INCOMPLETE: why, one line */
};

/* What an entry looks like in the file system, cheaply: compared before and after hashing (a
 * writer at work moves it) and against the registry's size and mtime (unchanged: no hash). */
struct agent_ckpt_sig {
    uint64_t dev, ino;
    uint64_t size;    /* a directory: sum of its regular files */
    uint64_t files;   /* a directory: members; a file: 1 */
    int64_t mtime_ns; /* a directory: newest of everything in it, itself included */
    int64_t ctime_ns; /* likewise */
    int is_dir;
    uint32_t uid; /* owner of the entry itself */
};

/* How the watcher asks: what counts as complete besides a layout that says so. */
enum agent_ckpt_exam_mode {
    AGENT_CKPT_EXAM_LAYOUT,  /* only a layout that says complete (a close-after-write just now) */
    AGENT_CKPT_EXAM_SETTLED, /* nothing changed for the settle time: unknown formats count */
    AGENT_CKPT_EXAM_RENAMED, /* renamed into place: unknown formats count */
    /* this node's part of a sharded checkpoint the node of group rank 0 recorded (so every rank
     * finished writing it): a directory whose members are whole, without the coordinator's file
     * (a DCP .metadata, an HF trainer_state.json, the --checkpoint-marker) */
    AGENT_CKPT_EXAM_PART,
};

enum agent_ckpt_exam_result {
    AGENT_CKPT_EXAM_RECORD,     /* entry is complete and hashed: record it */
    AGENT_CKPT_EXAM_UNCHANGED,  /* same size and mtime as the entry given as known */
    AGENT_CKPT_EXAM_WAIT,       /* unknown format, not settled yet (LAYOUT mode) */
    AGENT_CKPT_EXAM_INCOMPLETE, /* the layout says it is not whole: why says how */
    AGENT_CKPT_EXAM_CHANGED,    /* it moved while it was read: look again after the settle time */
    AGENT_CKPT_EXAM_GONE,       /* not there (removed, renamed away) */
    AGENT_CKPT_EXAM_CANCELLED,  /* *cancel was set */
    AGENT_CKPT_EXAM_ERROR,      /* cannot be read: why says how */
    AGENT_CKPT_EXAM_ALTERED,    /* distrust_known and it is not what was recorded */
    AGENT_CKPT_EXAM_WHOLE,      /* PART: not a part (a file, or whole: a shared directory) */
};

struct agent_ckpt_exam {
    /* in */
    char dir[4096];
    char name[AGENT_CKPT_NAME_MAX];
    char marker[AGENT_CKPT_NAME_MAX]; /* --checkpoint-marker, "" for none */
    enum agent_ckpt_exam_mode mode;
    int have_known;     /* known holds the registry's entry of this name */
    int distrust_known; /* known but changed: ALTERED, not hashed (a start: nobody watched the
                         * write, so it may be damage) */
    struct agent_ckpt_entry known;
    atomic_int *cancel; /* may be NULL */
    /* out */
    enum agent_ckpt_exam_result result;
    struct agent_ckpt_layout layout;
    struct agent_ckpt_entry entry; /* RECORD */
    struct agent_ckpt_sig sig;     /* RECORD, CHANGED */
    char why[256];
    uint64_t hash_ns; /* time spent hashing (BENCHMARKS: throughput) */
};

/* Looks at dir/name as x asks (blocks: thread pool only). Sets x->result and the out fields. */
void agent_ckpt_examine(struct agent_ckpt_exam *x);

/* The layout of dir/name (blocks). marker: --checkpoint-marker or "". */
void agent_ckpt_layout_check(const char *dir, const char *name, const char *marker,
                             struct agent_ckpt_layout *out);

/* The layout of one regular file open at fd (size bytes): zip, safetensors or unknown. */
void agent_ckpt_layout_file(int fd, uint64_t size, struct agent_ckpt_layout *out);

/* dir/name's signature; 0 or a negative errno. Symlinks are not followed. */
int agent_ckpt_sig_of(const char *dir, const char *name, struct agent_ckpt_sig *sig);

/* Whether a and b are the same: nothing was written in between. */
int agent_ckpt_sig_equal(const struct agent_ckpt_sig *a, const struct agent_ckpt_sig *b);

#endif
