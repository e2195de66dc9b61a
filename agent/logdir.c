#include "logdir.h"

#include "log.h"
#include "path.h"
#include "tmpsweep.h"

#include "ids.h"
#include "safefile.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RUN_DIR_TRIES 1000 /* RUN_ID, RUN_ID.1, ... RUN_ID.999 */

/* Creates path for this run alone. Returns 1 when it was created here, 0 when something is
 * there already, or a negative errno. mkdir is the test: two agents of one job on one host, or
 * two runs at once, never get the same directory. */
static int create_fresh(const char *path)
{
    if (mkdir(path, 0755) != 0)
        return errno == EEXIST ? 0 : -errno;
    /* exactly 0755 whatever the umask, like mc_dir_open's; nobody else can swap the entry
     * meanwhile: the parent was checked (ours, or sticky) */
    return chmod(path, 0755) == 0 ? 1 : -errno;
}

/* The directory muster writes into: created if missing, refused (with err saying why) when
 * another local user owns or can write it or a directory above it (common/safefile.h). base
 * gets the resolved path, so that the workers' paths never pass a symlink.
 *
 * Each run gets a fresh RUN_ID directory: RUN_ID, or RUN_ID.1, RUN_ID.2, ... when earlier runs
 * with the same --log-dir and run id left theirs, so a re-run never overwrites their logs
 * (torchrun makes a fresh RUN_ID_<random> directory per run for the same reason; muster keeps
 * the plain RUN_ID for the first one). An existing entry is checked before it is stepped over:
 * one planted by another user is refused, as before, not silently skipped. */
static int open_explicit(struct agent_logdir *d, const char *log_dir, const char *run_id, char *err,
                         size_t errlen)
{
    char top[PATH_MAX], path[PATH_MAX];
    int rc = mc_dir_open(log_dir, 0755, "--log-dir", NULL, top, err, errlen);

    d->base[0] = '\0';
    if (rc != 0)
        return rc;
    for (unsigned n = 0; rc == 0 && n < RUN_DIR_TRIES; n++) {
        rc = n == 0 ? agent_path_fmt(path, sizeof(path), "%s/%s", top, run_id)
                    : agent_path_fmt(path, sizeof(path), "%s/%s.%u", top, run_id, n);
        if (rc != 0) {
            snprintf(err, errlen, "--log-dir %s/%s: %s", log_dir, run_id, strerror(-rc));
            return rc;
        }
        if ((rc = create_fresh(path)) != 0)
            break; /* ours now, or mkdir's error, which mc_dir_open below puts in words */
        /* RUN_ID may have been planted by someone else in a shared (sticky) --log-dir */
        if ((rc = mc_dir_open(path, 0, "--log-dir", NULL, NULL, err, errlen)) != 0)
            return rc;
    }
    if (rc == 0) {
        snprintf(err, errlen, "--log-dir %s: %s and %s.1 to .%d all exist", log_dir, run_id, run_id,
                 RUN_DIR_TRIES - 1);
        return -EEXIST;
    }
    rc = mc_dir_open(path, 0755, "--log-dir", NULL, d->base, err, errlen);
    if (rc != 0)
        d->base[0] = '\0';
    return rc;
}

/* mkdtemp makes a fresh 0700 directory atomically; $TMPDIR itself must be trusted, else
 * someone could rename ours away and put a symlink in its place behind the workers' backs. */
static int open_private(struct agent_logdir *d, const char *run_id, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    int rc = mc_dir_open(mc_tmpdir(), 0, "$TMPDIR", NULL, tmp, err, errlen);

    if (rc != 0)
        return rc;
    rc = agent_path_fmt(d->base, sizeof(d->base), "%s/muster-%s-XXXXXX", tmp, run_id);
    if (rc != 0 || mkdtemp(d->base) == NULL) {
        rc = rc ? rc : -errno;
        snprintf(err, errlen, "cannot create a directory in %s: %s", tmp, strerror(-rc));
        d->base[0] = '\0';
    }
    return rc;
}

int agent_logdir_open(struct agent_logdir *d, const char *log_dir, const char *run_id,
                      int keep_files, char *err, size_t errlen)
{
    char why[512];
    int rc;

    memset(d, 0, sizeof(*d));
    d->lock_fd = -1;
    if (log_dir != NULL && strcmp(log_dir, "/dev/null") == 0)
        return 0;
    /* the launcher checked it; a run id is a directory name here, so check again */
    if (!mc_id_valid(run_id, why, sizeof(why))) {
        snprintf(err, errlen, "invalid run id %s", why);
        return -EINVAL;
    }
    if (log_dir != NULL)
        return open_explicit(d, log_dir, run_id, err, errlen);
    rc = open_private(d, run_id, err, errlen);
    if (rc == 0 && !keep_files) {
        char tmp[PATH_MAX], *slash;

        d->flat = 1;
        d->lock_fd = agent_tmpsweep_claim(d->base); /* no lock: it is never swept, that's all */
        snprintf(tmp, sizeof(tmp), "%s", d->base);
        if ((slash = strrchr(tmp, '/')) != NULL && slash != tmp) {
            *slash = '\0';
            agent_tmpsweep_run(tmp); /* what musters killed with SIGKILL left */
        }
    }
    return rc;
}

int agent_logdir_worker(const struct agent_logdir *d, unsigned attempt, int local_rank, int create,
                        char *dir, char *error_file)
{
    char err[PATH_MAX + 128];
    int rc;

    dir[0] = error_file[0] = '\0';
    if (d->base[0] == '\0')
        return 0;
    if (d->flat)
        return agent_path_fmt(error_file, PATH_MAX, "%s/error_%u_%d.json", d->base, attempt,
                              local_rank);
    rc = agent_path_fmt(dir, PATH_MAX, "%s/attempt_%u/%d", d->base, attempt, local_rank);
    if (rc == 0 && create) {
        rc = mc_dir_open(dir, 0755, "log directory", NULL, NULL, err, sizeof(err));
        if (rc != 0)
            mc_error("%s", err);
    }
    if (rc == 0)
        rc = agent_path_fmt(error_file, PATH_MAX, "%s/error.json", dir);
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

int agent_logdir_keep(struct agent_logdir *d)
{
    char marker[PATH_MAX];

    if (!d->flat || d->base[0] == '\0')
        return -EINVAL;
    if (agent_path_fmt(marker, sizeof(marker), "%s/" AGENT_TMPSWEEP_MARKER, d->base) != 0)
        return -ENAMETOOLONG;
    if (unlink(marker) != 0 && errno != ENOENT)
        return -errno;
    d->flat = 0; /* its lock stays held until we exit: no sweep races the unmarking */
    return 0;
}

void agent_logdir_close(struct agent_logdir *d)
{
    if (d->flat && d->base[0] != '\0')
        nftw(d->base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (d->flat && d->lock_fd >= 0) /* flat: _open set it (a zeroed struct has 0 there) */
        close(d->lock_fd);          /* after the removal: a sweeper never races our own */
    d->lock_fd = -1;
    d->flat = 0;
    d->base[0] = '\0';
}
