#include "saferm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One directory being emptied: its stream (which holds its descriptor) and its identity. */
struct rm_dir {
    DIR *d;
    dev_t dev;
    int kept; /* something below it stays, so it cannot be removed */
    char name[NAME_MAX + 1];
};

struct rm {
    struct rm_dir *dirs; /* dirs[0]: the entry removed; dirs[n - 1]: the one being listed */
    size_t n;
    int top; /* the caller's directory, which holds dirs[0] */
    uid_t me;
    unsigned flags;
    int rc;             /* of the first entry left in place */
    unsigned long left; /* entries left in place */
    char *why;
    size_t whylen;
};

static int name_ok(const char *name)
{
    return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

/* The descriptor of the directory that holds level i of the stack. */
static int holder_fd(const struct rm *rm, size_t i)
{
    return i == 0 ? rm->top : dirfd(rm->dirs[i - 1].d);
}

static void leave(struct rm *rm, size_t depth, const char *name, int rc, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* name, in the directory at stack level depth - 1 (the caller's for 0), stays: so does that
 * directory. The first one is described in why, by its path below the caller's directory. */
static void leave(struct rm *rm, size_t depth, const char *name, int rc, const char *fmt, ...)
{
    char reason[160];
    size_t len = 0;
    va_list ap;

    if (depth > 0)
        rm->dirs[depth - 1].kept = 1;
    if (rm->left++ > 0)
        return;
    rm->rc = rc;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < depth && len < rm->whylen; i++)
        len += (size_t)snprintf(rm->why + len, rm->whylen - len, "%s/", rm->dirs[i].name);
    if (len < rm->whylen)
        snprintf(rm->why + len, rm->whylen - len, "%s: %s", name, reason);
}

/* Whether name (described by st, in a directory on file system dev) may be removed; if not, it
 * is left in place. */
static int removable(struct rm *rm, const char *name, const struct stat *st, dev_t dev)
{
    if (st->st_uid != rm->me) {
        leave(rm, rm->n, name, -EPERM, "owned by uid %u, not by you (uid %u)", (unsigned)st->st_uid,
              (unsigned)rm->me);
        return 0;
    }
    if (st->st_dev != dev) {
        leave(rm, rm->n, name, -EXDEV, "on another file system (a mount point)");
        return 0;
    }
    return 1;
}

/* Opens the directory name (described by st) of holder and pushes it: it is listed next. */
static void descend(struct rm *rm, int holder, const char *name, const struct stat *st)
{
    struct stat now;
    DIR *d = NULL;
    int fd;

    if (rm->n == MC_RM_MAX_DEPTH) {
        leave(rm, rm->n, name, -ELOOP, "more than %d directories deep", MC_RM_MAX_DEPTH);
        return;
    }
    if (rm->dirs == NULL && (rm->dirs = calloc(MC_RM_MAX_DEPTH, sizeof(*rm->dirs))) == NULL) {
        leave(rm, rm->n, name, -ENOMEM, "%s", strerror(ENOMEM));
        return;
    }
    /* O_NOFOLLOW: a symlink swapped in since fstatat fails here (ENOTDIR or ELOOP) */
    fd = openat(holder, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOTDIR || e == ELOOP)
            leave(rm, rm->n, name, -ESTALE, "replaced while it was removed");
        else if (e != ENOENT)
            leave(rm, rm->n, name, -e, "%s", strerror(e));
        return;
    }
    /* the directory looked at, not another one renamed in between */
    if (fstat(fd, &now) != 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
        close(fd);
        leave(rm, rm->n, name, -ESTALE, "replaced while it was removed");
        return;
    }
    if ((d = fdopendir(fd)) == NULL) {
        int e = errno;
        close(fd);
        leave(rm, rm->n, name, -e, "%s", strerror(e));
        return;
    }
    rm->dirs[rm->n] = (struct rm_dir){.d = d, .dev = now.st_dev};
    snprintf(rm->dirs[rm->n].name, sizeof(rm->dirs[rm->n].name), "%s", name);
    rm->n++;
}

/* The top directory is listed to the end: closes it and removes it, unless something in it
 * stays (its holder then stays too) or it is the one MC_RM_CHILDREN keeps. */
static void ascend(struct rm *rm)
{
    struct rm_dir *done = &rm->dirs[--rm->n];
    int e;

    closedir(done->d);
    if (done->kept) {
        if (rm->n > 0)
            rm->dirs[rm->n - 1].kept = 1;
        return;
    }
    if (rm->n == 0 && (rm->flags & MC_RM_CHILDREN))
        return;
    if (unlinkat(holder_fd(rm, rm->n), done->name, AT_REMOVEDIR) != 0 && (e = errno) != ENOENT)
        leave(rm, rm->n, done->name, -e, "%s", strerror(e));
}

/* Removes name (described by st) of holder, a directory on file system dev: a file or symlink
 * is unlinked (never followed), a directory pushed to be emptied. */
static void rm_entry(struct rm *rm, int holder, const char *name, const struct stat *st, dev_t dev)
{
    int e;

    if (!removable(rm, name, st, dev))
        return;
    if (S_ISDIR(st->st_mode))
        descend(rm, holder, name, st);
    else if (unlinkat(holder, name, 0) != 0 && (e = errno) != ENOENT)
        leave(rm, rm->n, name, -e, "%s", strerror(e));
}

/* Lists the directory on top of the stack, entry by entry, until the stack is empty. */
static void walk(struct rm *rm)
{
    while (rm->n > 0) {
        struct rm_dir *cur = &rm->dirs[rm->n - 1];
        int fd = dirfd(cur->d), e;
        struct dirent *de;
        struct stat st;

        errno = 0;
        if ((de = readdir(cur->d)) == NULL) {
            if ((e = errno) != 0) {
                cur->kept = 1;
                leave(rm, rm->n - 1, cur->name, -e, "cannot list it: %s", strerror(e));
            }
            ascend(rm);
            continue;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if ((e = errno) != ENOENT)
                leave(rm, rm->n, de->d_name, -e, "%s", strerror(e));
            continue;
        }
        rm_entry(rm, fd, de->d_name, &st, cur->dev);
    }
}

/* The line in why for a failure before the walk: "NAME: REASON". */
static int fail(struct rm *rm, const char *name, int rc, const char *reason)
{
    snprintf(rm->why, rm->whylen, "%s: %s", name, reason);
    return rc;
}

int mc_rm_at(int dfd, const char *name, unsigned flags, char *why, size_t whylen)
{
    struct rm rm = {.top = dfd, .me = geteuid(), .flags = flags, .why = why, .whylen = whylen};
    struct stat holder, st;
    char dummy[8];
    size_t len;
    int e;

    if (why == NULL || whylen == 0) {
        rm.why = dummy;
        rm.whylen = sizeof(dummy);
    }
    rm.why[0] = '\0';
    if (name == NULL || !name_ok(name))
        return fail(&rm, name != NULL ? name : "", -EINVAL, "not one path component");
    if (fstat(dfd, &holder) != 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        e = errno;
        return fail(&rm, name, -e, strerror(e));
    }
    if ((flags & MC_RM_CHILDREN) && !S_ISDIR(st.st_mode))
        return fail(&rm, name, -ENOTDIR, strerror(ENOTDIR));
    rm_entry(&rm, dfd, name, &st, holder.st_dev);
    walk(&rm);
    free(rm.dirs);
    if (rm.left == 0)
        return 0;
    len = strlen(rm.why);
    if (rm.left > 1 && len < rm.whylen)
        snprintf(rm.why + len, rm.whylen - len, " (%lu more %s left)", rm.left - 1,
                 rm.left == 2 ? "entry" : "entries");
    return rm.rc;
}

int mc_rm_parent_open(const char *path, int *dfd, char *name, size_t namelen)
{
    char dir[PATH_MAX];
    const char *base;
    char *slash;
    size_t len = path != NULL ? strlen(path) : 0;

    *dfd = -1;
    while (len > 1 && path[len - 1] == '/') /* "ckpt_5/" names ckpt_5, not what it links to */
        len--;
    if (len >= sizeof(dir))
        return -ENAMETOOLONG;
    memcpy(dir, path != NULL ? path : "", len);
    dir[len] = '\0';
    slash = strrchr(dir, '/');
    base = slash != NULL ? slash + 1 : dir;
    if (!name_ok(base))
        return -EINVAL;
    if (strlen(base) >= namelen)
        return -ENAMETOOLONG;
    memcpy(name, base, strlen(base) + 1);
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else
        slash[slash == dir ? 1 : 0] = '\0'; /* "/x" -> "/", "/a/x" -> "/a" */
    *dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return *dfd < 0 ? -errno : 0;
}
