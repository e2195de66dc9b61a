/* The last good copy of a checkpoint that its trainer rewrites in place (nanoGPT's ckpt.pt,
 * Lightning's last.ckpt): kept in DIR/.muster/good/NAME, and put back in place at a restart
 * when the file in place was cut by a kill in the middle of its rewrite. Blocking: the checkpoint
 * watcher runs these in libuv's thread pool, never on the agent's loop.
 *
 * Copies are reflinks (FICLONE: XFS, btrfs) where the file system has them — free and a snapshot
 * of that instant — else copy_file_range (in the kernel; ext4), else read/write. Directories are
 * copied member by member; symlinks are recreated, never followed. Every file and directory gets
 * its original's permission bits, never wider. A copy is verified against the checksum the
 * registry recorded before it is renamed into place, so a trainer rewriting the file while it
 * was copied costs the new copy, never the old one. */
#ifndef MUSTER_AGENT_CKPTCOPY_H
#define MUSTER_AGENT_CKPTCOPY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt_hash.h"

/* Counts of how the last copy went (BENCHMARKS: reflink vs copy). */
struct agent_ckpt_copy_stats {
    uint64_t bytes;
    unsigned files;
    unsigned reflinked; /* files cloned rather than copied */
    uint64_t ns;        /* wall time of the copy and its verification */
    /* in, may be NULL: once set, the copy stops between chunks with -ECANCELED (an agent that
     * is closing does not wait for a 20 GB copy) */
    atomic_int *cancel;
};

/* Copies dir/e->name to gooddir/e->name: into a temporary name in gooddir, verified against
 * e's checksum, synced, then renamed over the previous copy. stats: counts out, its cancel in.
 * Returns 0; -ESTALE when the copy does not match e (the original changed meanwhile: nothing
 * replaced); -ECANCELED; other negative errnos. why gets a one-line reason on error. */
int agent_ckpt_keep_copy(const char *dir, const char *gooddir, const struct agent_ckpt_entry *e,
                         struct agent_ckpt_copy_stats *stats, char *why, size_t whylen);

/* Puts gooddir/e->name back as dir/e->name: copied to a temporary name in dir, verified against
 * e, synced, renamed over what is there (a directory: exchanged, then the old one removed).
 * Returns 0 or a negative errno, why set. */
int agent_ckpt_restore_copy(const char *dir, const char *gooddir, const struct agent_ckpt_entry *e,
                            char *why, size_t whylen);

#endif
