/* Sweeping dead musters' leftovers from $TMPDIR: see tmpsweep.h. */
#include "tmpsweep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "saferm.h"

int agent_tmpsweep_claim(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), mfd;

    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 ||
        (mfd = openat(fd, AGENT_TMPSWEEP_MARKER, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) <
            0) {
        int err = -errno;

        close(fd);
        return err;
    }
    close(mfd);
    return fd;
}

/* A flat directory of ours whose muster is gone: marked, and its lock is free. The marker is
 * made only once the lock is held (agent_tmpsweep_claim), so a directory just made by mkdtemp
 * and not yet locked has none and is left alone. */
static int dead_flat_dir(int tfd, const char *name, const struct stat *st)
{
    struct stat mst;
    int fd, dead;

    if (!S_ISDIR(st->st_mode) || st->st_uid != geteuid())
        return 0;
    fd = openat(tfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    dead = fstatat(fd, AGENT_TMPSWEEP_MARKER, &mst, AT_SYMLINK_NOFOLLOW) == 0 &&
           S_ISREG(mst.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd); /* the lock goes with it; a muster that never locked it is long gone */
    return dead;
}

struct report {
    char name[NAME_MAX + 1];
    struct timespec mtime;
};

static int newest_first(const void *a, const void *b)
{
    const struct timespec *x = &((const struct report *)a)->mtime;
    const struct timespec *y = &((const struct report *)b)->mtime;

    if (x->tv_sec != y->tv_sec)
        return x->tv_sec < y->tv_sec ? 1 : -1;
    return (x->tv_nsec < y->tv_nsec) - (x->tv_nsec > y->tv_nsec);
}

static int is_report(const char *name)
{
    size_t n = strlen(name);

    return strncmp(name, "muster-", 7) == 0 && n > 5 && strcmp(name + n - 5, ".json") == 0 &&
           strstr(name, "-preflight") != NULL;
}

/* Keeps the newest AGENT_TMPSWEEP_KEEP_REPORTS reports of ours; removes the others. */
static int prune_reports(int tfd, struct report *r, size_t n)
{
    int removed = 0;

    if (n <= AGENT_TMPSWEEP_KEEP_REPORTS)
        return 0; /* (and qsort must not get NULL, even for 0 entries) */
    qsort(r, n, sizeof(*r), newest_first);
    for (size_t i = AGENT_TMPSWEEP_KEEP_REPORTS; i < n; i++)
        removed += mc_rm_at(tfd, r[i].name, 0, NULL, 0) == 0;
    return removed;
}

int agent_tmpsweep_run(const char *tmp)
{
    int tfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC), removed = 0;
    struct report *reports = NULL;
    size_t nreports = 0, cap = 0;
    struct dirent *e;
    DIR *d;

    if (tfd < 0 || (d = fdopendir(dup(tfd))) == NULL) {
        if (tfd >= 0)
            close(tfd);
        return 0;
    }
    /* bounded: a $TMPDIR of millions of names costs the start at most this many looks */
    for (unsigned seen = 0; seen < AGENT_TMPSWEEP_MAX_SCAN && (e = readdir(d)) != NULL; seen++) {
        struct stat st;

        if (strncmp(e->d_name, "muster-", 7) != 0 ||
            fstatat(tfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid())
            continue;
        if (S_ISDIR(st.st_mode) && dead_flat_dir(tfd, e->d_name, &st)) {
            removed += mc_rm_at(tfd, e->d_name, 0, NULL, 0) == 0;
        } else if (S_ISREG(st.st_mode) && is_report(e->d_name)) {
            if (nreports == cap) {
                struct report *r = realloc(reports, (cap = cap ? cap * 2 : 16) * sizeof(*r));

                if (r == NULL)
                    break;
                reports = r;
            }
            snprintf(reports[nreports].name, sizeof(reports[nreports].name), "%s", e->d_name);
            reports[nreports++].mtime = st.st_mtim;
        }
    }
    closedir(d);
    removed += prune_reports(tfd, reports, nreports);
    free(reports);
    close(tfd);
    return removed;
}
