#include "logdir.h"

#include "path.h"

#include "ids.h"
#include "safefile.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The directory muster writes into: created if missing, refused (with err saying why) when
 * another local user owns or can write it or a directory above it (common/safefile.h). base
 * gets the resolved path, so that the workers' paths never pass a symlink. */
static int open_explicit(struct agent_logdir *d, const char *log_dir, const char *run_id, char *err,
                         size_t errlen)
{
    char top[PATH_MAX], path[PATH_MAX];
    int rc = mc_dir_open(log_dir, 0755, "--log-dir", NULL, top, err, errlen);

    if (rc == 0 && (rc = agent_path_fmt(path, sizeof(path), "%s/%s", top, run_id)) != 0)
        snprintf(err, errlen, "--log-dir %s/%s: %s", log_dir, run_id, strerror(-rc));
    /* RUN_ID may have been planted by someone else in a shared (sticky) --log-dir */
    if (rc == 0)
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
    if (rc == 0)
        d->flat = !keep_files;
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
            fprintf(stderr, "muster: %s\n", err);
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

void agent_logdir_close(struct agent_logdir *d)
{
    if (d->flat && d->base[0] != '\0')
        nftw(d->base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    d->base[0] = '\0';
}
