/* Where a checkpoint replica being received lands (replica.h): a temporary file, or a
 * temporary directory the stream's sink fills (replica_dir.h), in --checkpoint-dir under a
 * name the watcher ignores; once the writer verified every byte, it is fsynced (every member
 * of a directory, then the directory), given its mode, renamed to the checkpoint's name, and
 * --checkpoint-dir fsynced.
 *
 * Modes: the original's permission bits come with REPL_BEGIN (rendezvous/PROTOCOL.md); a copy
 * is never readable by more local users than its original. A file gets mode & 0777; a
 * directory mode & 0777, its files that without the x bits, its subdirectories that plus the
 * owner's rwx (so they can be filled; members and subdirectories are also narrowed by the
 * umask). Mode 0 (a sender before modes): 0600 files, 0700 directories. While being written a
 * copy is 0600 / 0700 (mkstemp, mkdtemp), so nobody reads half a checkpoint either. The copy
 * belongs to the agent's user, who creates it; nothing is chowned.
 *
 * Plain blocking calls, for the writer's thread (replica_write.h: agent_replica_store_ops);
 * only new and the results after DONE belong to the loop. */
#ifndef MUSTER_AGENT_REPLICA_STORE_H
#define MUSTER_AGENT_REPLICA_STORE_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "replica_dir.h"
#include "replica_write.h"

struct agent_replica_store {
    int is_dir;
    mode_t mode;           /* what the copy gets once in place */
    char tmp[PATH_MAX];    /* the template (XXXXXX), then the temporary path; "" once gone */
    char path[PATH_MAX];   /* where it goes once verified */
    char parent[PATH_MAX]; /* --checkpoint-dir, fsynced after the rename */
    int fd;                /* a file copy, -1 none */
    uint64_t off;
    uint64_t flushed; /* written back up to here (sync_file_range), the writer thread's */
    struct agent_replica_sink sink; /* a directory copy */
    /* results of finish, for the loop once the writer said DONE */
    int64_t mtime_ns; /* of the copy in place */
    uint64_t content; /* the content's bytes: a file's size, the sum of a directory's members */
};

/* A store for checkpoint name in dir, written under tmpl (a path ending in XXXXXX); mode: the
 * original's permission bits (0: not known). Nothing is created yet (open does that, on the
 * writer's thread). Returns 0 with *out set (free it through the ops' close), -ENAMETOOLONG
 * or -ENOMEM. */
int agent_replica_store_new(const char *dir, const char *name, const char *tmpl, int is_dir,
                            uint32_t mode, struct agent_replica_store **out);

/* The store as a writer's target (replica_write.h). */
extern const struct agent_replica_write_ops agent_replica_store_ops;

#endif
