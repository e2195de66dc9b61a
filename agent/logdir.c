#include "logdir.h"

#include "path.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);

    if (len == 0 || len >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int agent_logdir_open(struct agent_logdir *d, const char *log_dir, const char *run_id,
                      int keep_files, char *err, size_t errlen)
{
    const char *tmp = getenv("TMPDIR");
    int rc;

    memset(d, 0, sizeof(*d));
    if (log_dir != NULL && strcmp(log_dir, "/dev/null") == 0)
        return 0;
    if (log_dir != NULL) {
        rc = agent_path_fmt(d->base, sizeof(d->base), "%s/%s", log_dir, run_id);
        if (rc == 0)
            rc = mkdir_p(d->base);
        if (rc != 0)
            snprintf(err, errlen, "cannot create log directory %s/%s: %s", log_dir, run_id,
                     strerror(-rc));
        return rc;
    }
    tmp = tmp && *tmp ? tmp : "/tmp";
    rc = agent_path_fmt(d->base, sizeof(d->base), "%s/muster-%s-XXXXXX", tmp, run_id);
    if (rc != 0 || mkdtemp(d->base) == NULL) {
        rc = rc ? rc : -errno;
        snprintf(err, errlen, "cannot create a directory in %s: %s", tmp, strerror(-rc));
        d->base[0] = '\0';
        return rc;
    }
    d->flat = !keep_files;
    return 0;
}

int agent_logdir_worker(const struct agent_logdir *d, unsigned attempt, int local_rank,
                        int create, char *dir, char *error_file)
{
    int rc;

    dir[0] = error_file[0] = '\0';
    if (d->base[0] == '\0')
        return 0;
    if (d->flat)
        return agent_path_fmt(error_file, PATH_MAX, "%s/error_%u_%d.json", d->base, attempt,
                        local_rank);
    rc = agent_path_fmt(dir, PATH_MAX, "%s/attempt_%u/%d", d->base, attempt, local_rank);
    if (rc == 0 && create)
        rc = mkdir_p(dir);
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
