/* Where workers' logs and error files go.
 *
 * --log-dir DIR: DIR/RUN_ID/attempt_N/LOCAL_RANK/{stdout.log,stderr.log,error.json}, kept;
 * attempt_N/filtered_std{out,err}.log for --duplicate-std*-filters. A later run with the same
 * DIR and RUN_ID gets DIR/RUN_ID.1 (then .2, ...): earlier runs' files are never overwritten.
 * No --log-dir: a private directory $TMPDIR/muster-RUN_ID-XXXXXX. When output goes to files
 * (--redirects/--tee) it has the same layout and is kept (its path is printed); otherwise it
 * only ever holds error files, stays flat (error_N_LOCALRANK.json: every directory created and
 * removed costs ~0.25 ms on ext4, measured) and is removed at exit.
 * --log-dir /dev/null: no files at all; TORCHELASTIC_ERROR_FILE is "". */
#ifndef MUSTER_AGENT_LOGDIR_H
#define MUSTER_AGENT_LOGDIR_H

#include <limits.h>
#include <stddef.h>

struct agent_logdir {
    char base[PATH_MAX]; /* "" when disabled */
    int flat;            /* private, error files only: removed at exit */
    int lock_fd;         /* flat: holds its flock while we run (tmpsweep.h); else -1 */
};

/* Creates the base directory. log_dir: NULL (private), "/dev/null" (disabled) or a path.
 * keep_files: workers' streams go to files. base is the resolved path (no symlinks). Every
 * directory on the way must be owned by you or root and not writable by others unless sticky
 * (common/safefile.h; $TMPDIR too for the private one). Returns 0 or a negative errno with a
 * one-line reason in err: -EPERM/-ELOOP/-ENOTDIR ("refusing --log-dir ...: ..."), -EINVAL for
 * a run id that common/ids.h refuses, or what creating it returned. */
int agent_logdir_open(struct agent_logdir *d, const char *log_dir, const char *run_id,
                      int keep_files, char *err, size_t errlen);

/* Paths for one worker of one attempt: dir (where stdout.log/stderr.log go, "" when there are
 * no log files) and error_file ("" when disabled); both PATH_MAX buffers. With create != 0
 * the directory is created and checked as in _open (a refusal is printed on stderr). Returns 0
 * or a negative errno (-ENAMETOOLONG, -EPERM, mkdir's). */
int agent_logdir_worker(const struct agent_logdir *d, unsigned attempt, int local_rank, int create,
                        char *dir, char *error_file);

/* Keeps a flat private directory after all (it holds evidence, agent/evidence.h): its sweep
 * marker goes and agent_logdir_close leaves it. Returns 0, or -EINVAL when it is no flat one. */
int agent_logdir_keep(struct agent_logdir *d);

/* Removes a flat private directory and what is in it; keeps every other kind. */
void agent_logdir_close(struct agent_logdir *d);

#endif
