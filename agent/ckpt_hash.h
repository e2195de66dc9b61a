/* Checkpoint entries and their checksums: what a file or directory in MUSTER_CHECKPOINT_DIR is
 * (name, step, size, XXH3-64 checksum, mtime), computed from disk. The registry (ckpt.h) keeps
 * these; this module only reads the file system.
 *
 * No libuv and no state shared between calls, so any thread may call it: the agent's loop, or
 * libuv's pool (the watcher hashes every checkpoint there, ckptexam.c; replica.c lists
 * a directory to copy there). Hashing a large checkpoint takes a while (XXH3 runs at memory
 * speed, the disk is slower), so hashing is also offered in steps (agent_ckpt_hash_begin/step/
 * end) that read at most a given number of bytes per call, for a caller on the loop (one step
 * per loop iteration, e.g. from a uv_idle_t or a 0 ms timer). agent_ckpt_scan_entry does it all
 * in one call.
 *
 * Checksums are XXH3-64: of a regular file, over its content (= XXH3_64bits(content)); of a
 * directory, over every regular file and symlink below it in byte order of the relative paths,
 * each as path, NUL, size (8 bytes big-endian), content (a symlink: its target text, never
 * followed), so that renames inside the directory and bytes moved between files change it. */
#ifndef MUSTER_AGENT_CKPT_HASH_H
#define MUSTER_AGENT_CKPT_HASH_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* XXH3_64bits_update, through xxHash's x86 dispatcher (AVX2) where the library has it: every
 * checksum of checkpoint bytes goes through this. */
void agent_ckpt_xxh3_update(void *state, const void *p, size_t n);

/* Longest entry name, NUL included (one path component: NAME_MAX + 1). */
#define AGENT_CKPT_NAME_MAX 256
/* A directory checkpoint with more files than this is refused (-E2BIG) rather than listed. */
#define AGENT_CKPT_MAX_FILES (1u << 20)
/* Deepest directory nesting inside a directory checkpoint (-ELOOP beyond). */
#define AGENT_CKPT_MAX_DEPTH 64

struct agent_ckpt_entry {
    char name[AGENT_CKPT_NAME_MAX]; /* one component, relative to the checkpoint directory */
    int64_t step;                   /* parsed from name, -1 when it has none */
    uint64_t size;                  /* bytes; a directory: sum of its regular files */
    uint64_t checksum;              /* XXH3-64, see above */
    int64_t mtime_ns;               /* a directory: newest of itself and everything in it */
    int64_t recorded_ns;            /* CLOCK_REALTIME when it was scanned (or recorded) */
    /* A part of a sharded checkpoint (docs/FAULT_TOLERANCE.md "Sharded checkpoints"): 1 + the
     * group rank whose ranks wrote it, of `parts` nodes; 0: a whole checkpoint. Never a resume
     * candidate of its own (agent_ckpt_registry_pick skips it). */
    uint32_t part, parts;
};
#define AGENT_CKPT_PARTS_MAX 4096u /* = RDZV_PARTS_MAX */

/* Where a node keeps a copy of another node's part of a sharded checkpoint, beside its own part
 * of that name: ".muster-part-K-of-N.NAME" in --checkpoint-dir (a temporary name to the watcher,
 * which never examines it). Returns 0 or -ENAMETOOLONG. */
int agent_ckpt_part_name(char *out, size_t len, const char *name, uint32_t part, uint32_t parts);

/* The checkpoint a name made by agent_ckpt_part_name is a part of (a pointer into local), or
 * local itself for any other name. */
const char *agent_ckpt_part_of(const char *local);

/* An incremental hash in progress; see agent_ckpt_hash_begin. Fields are private. */
struct agent_ckpt_hash {
    void *state;         /* XXH3_state_t */
    unsigned char *buf;  /* read buffer */
    char root[PATH_MAX]; /* dir/name */
    char **files;        /* a directory's sorted relative paths; NULL for a file */
    size_t nfiles, next; /* next: index of the file to read next */
    int fd;              /* the file being read, -1 between files */
    uint64_t file_size;  /* its size when opened (fstat) */
    uint64_t file_read;  /* bytes of it read so far */
    uint64_t listed;     /* total size seen when listing */
    uint64_t hashed;     /* content bytes hashed so far */
    int changed;         /* a file's size moved while it was read */
    int finished;
    struct agent_ckpt_entry entry;
};

/* The step in a checkpoint name: the last run of decimal digits, ignoring a final extension
 * that starts with a letter (so "ckpt_120.h5" is 120, not 5) and a trailing '/'.
 * "ckpt_000120.pt" → 120, "step-5/" → 5, "epoch3-step1200.pt" → 1200, "final.pt" → -1.
 * Returns the step, or -1 when there is none or it does not fit in an int64_t. */
int64_t agent_ckpt_parse_step(const char *name);

/* Whether name is a temporary name that a writer will rename later: it starts with '.' or ends
 * in ".tmp", ".partial" or "~". Such names are never checkpoints. */
int agent_ckpt_name_is_temp(const char *name);

/* Whether name may be an entry: non-empty, shorter than AGENT_CKPT_NAME_MAX, one path component
 * (no '/'), not "." or "..". The registry checks it on add and load because prune deletes by
 * name: a registry file saying "../x" must not delete outside the checkpoint directory. */
int agent_ckpt_name_valid(const char *name);

/* Computes dir/name's entry from disk, hashing it whole (blocks; see the incremental API).
 * recorded_ns is set to now. Symlinks are not followed. Returns 0; -EAGAIN for a temporary name
 * (wait for the rename); -EINVAL for an invalid name or anything but a regular file or a
 * directory (a symlink included); -ENOENT; -E2BIG/-ELOOP for an oversized/overdeep directory;
 * -EBUSY when it changed size while being hashed (still being written: scan again later);
 * -ENOMEM; other negative errnos from the file system. */
int agent_ckpt_scan_entry(const char *dir, const char *name, struct agent_ckpt_entry *entry);

/* Starts hashing dir/name: checks the name, lists a directory's files (the listing is done at
 * once; only the reading is split in steps). Same returns as agent_ckpt_scan_entry except
 * -EBUSY. h needs no preparation. On success release it with agent_ckpt_hash_end or
 * agent_ckpt_hash_close; on error it holds nothing (closing it anyway is harmless). */
int agent_ckpt_hash_begin(struct agent_ckpt_hash *h, const char *dir, const char *name);

/* The size begin saw in the file system before reading anything: lets a caller reject a
 * truncated checkpoint without paying for the hash. */
uint64_t agent_ckpt_hash_listed_size(const struct agent_ckpt_hash *h);

/* Hashes at most budget bytes (0: no limit, to the end). *finished becomes 1 when everything is
 * hashed; then call agent_ckpt_hash_end. Returns 0 or a negative errno (-ENOENT when a file
 * vanished mid-way); after an error only agent_ckpt_hash_close is valid. */
int agent_ckpt_hash_step(struct agent_ckpt_hash *h, size_t budget, int *finished);

/* Completes a finished hash into entry (recorded_ns = now) and releases h, also on error.
 * Returns 0, -EINVAL when the hash is not finished, -EBUSY when the content changed size while
 * it was read (a writer is still at it: scan again later). */
int agent_ckpt_hash_end(struct agent_ckpt_hash *h, struct agent_ckpt_entry *entry);

/* The members of directory checkpoint dir/name in the checksum's order (relative paths, sorted
 * by bytes; regular files and symlinks), for copying it as the checksum reads it (checkpoint
 * replicas). *files: n strings and the array, the caller frees them. Returns 0, -ENOTDIR for a
 * regular file, or agent_ckpt_hash_begin's errors. */
int agent_ckpt_list_dir(const char *dir, const char *name, char ***files, size_t *n);

/* Abandons a hash; accepts a zeroed, half-built or already released one. */
void agent_ckpt_hash_close(struct agent_ckpt_hash *h);

#endif
