#include "safefile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

int mc_dir_trusted(const struct stat *st, char *why, size_t whylen)
{
    unsigned mode = (unsigned)st->st_mode & 07777;
    uid_t me = geteuid();
    char dummy[8];

    if (why == NULL) {
        why = dummy;
        whylen = sizeof(dummy);
    }
    if (!S_ISDIR(st->st_mode)) {
        snprintf(why, whylen, "not a directory");
        return -ENOTDIR;
    }
    if (st->st_uid != me && st->st_uid != 0) {
        snprintf(why, whylen, "owned by uid %u, not by you (uid %u)", (unsigned)st->st_uid,
                 (unsigned)me);
        return -EPERM;
    }
    /* sticky: others may add entries but not remove or rename ours, and every entry muster
     * uses there is checked on its own */
    if (!(mode & S_ISVTX) && (mode & (S_IWGRP | S_IWOTH))) {
        snprintf(why, whylen, "writable by %s (mode %04o)", mode & S_IWOTH ? "others" : "group",
                 mode);
        return -EPERM;
    }
    return 0;
}

/* A new file or directory gets mode less the umask, but never group/other write: a umask of 002
 * must not make muster create what it would then refuse to use. */
static int fix_mode(int fd)
{
    struct stat st;

    if (fstat(fd, &st) != 0)
        return -errno;
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && fchmod(fd, st.st_mode & 07755) != 0)
        return -errno;
    return 0;
}

/* ---- directories ----------------------------------------------------------------------- */

/* Symlinks followed in one mc_dir_open, as the kernel's MAXSYMLINKS. */
#define WALK_MAX_LINKS 40

struct walk {
    const char *what, *given; /* for the error line */
    char path[PATH_MAX];      /* resolved so far: absolute, no symlinks */
    char todo[PATH_MAX];      /* what is left to walk */
    int fd;                   /* of path */
    int links;
    char *err;
    size_t errlen;
};

static int walk_fail(struct walk *w, int rc, int last, const char *why)
{
    char buf[160];

    if (why == NULL) {
        snprintf(buf, sizeof(buf), "%s", rc == -ENOTDIR ? "not a directory" : strerror(-rc));
        why = buf;
    }
    /* "refusing --log-dir /x: writable by others (mode 0777)" for the directory itself,
     * "refusing --log-dir /x/y: /x is writable by others (mode 0777)" for one above it */
    if (rc == -EPERM || rc == -ELOOP || rc == -ENOTDIR)
        snprintf(w->err, w->errlen, last ? "refusing %s %s: %s%.0s" : "refusing %s %s: %s is %s",
                 w->what, w->given, last ? why : w->path, why);
    else
        snprintf(w->err, w->errlen, "cannot open %s %s: %s: %s", w->what, w->given, w->path, why);
    return rc;
}

/* Starts (again) at "/" with todo to walk, and checks "/" itself. */
static int walk_root(struct walk *w)
{
    struct stat st;
    char why[128];
    int rc;

    if (w->fd >= 0)
        close(w->fd);
    snprintf(w->path, sizeof(w->path), "/");
    w->fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->fd < 0 || fstat(w->fd, &st) != 0)
        return walk_fail(w, -errno, 0, NULL);
    if ((rc = mc_dir_trusted(&st, why, sizeof(why))) != 0)
        return walk_fail(w, rc, w->todo[strspn(w->todo, "/")] == '\0', why);
    return 0;
}

/* Replaces todo with head + "/" + rest (head: a symlink's target, or the parent for "..") and
 * starts over at "/". The path walked so far has no symlinks, so ".." can be taken lexically. */
static int walk_restart(struct walk *w, const char *head, const char *rest)
{
    char todo[PATH_MAX];
    const char *base = head[0] == '/' ? "" : w->path;
    int n;

    if (++w->links > WALK_MAX_LINKS)
        return walk_fail(w, -ELOOP, 0, "too many levels of symbolic links");
    n = snprintf(todo, sizeof(todo), "%s/%s/%s", base, head, rest);
    if (n < 0 || (size_t)n >= sizeof(todo))
        return walk_fail(w, -ENAMETOOLONG, 0, NULL);
    memcpy(w->todo, todo, (size_t)n + 1);
    return walk_root(w);
}

/* name in w->path is a symlink: followed only when it belongs to you or root. Its directory is
 * trusted, so in a sticky directory such as /tmp a link planted by another user is refused
 * (fs.protected_symlinks does the same, but is off on some machines). */
static int walk_link(struct walk *w, const char *name, const struct stat *st, const char *rest)
{
    char target[PATH_MAX], why[128];
    size_t len = strlen(w->path);
    ssize_t n;

    if (st->st_uid != geteuid() && st->st_uid != 0) {
        snprintf(w->path + len, sizeof(w->path) - len, "%s%s", len > 1 ? "/" : "", name);
        snprintf(why, sizeof(why), "a symlink owned by uid %u, not by you (uid %u)",
                 (unsigned)st->st_uid, (unsigned)geteuid());
        return walk_fail(w, -EPERM, rest[0] == '\0', why);
    }
    n = readlinkat(w->fd, name, target, sizeof(target));
    if (n < 0 || (size_t)n >= sizeof(target))
        return walk_fail(w, n < 0 ? -errno : -ENAMETOOLONG, 0, NULL);
    target[n] = '\0';
    return walk_restart(w, target, rest);
}

/* Moves the walk one directory down to name (created when missing and create_mode != 0). */
static int walk_step(struct walk *w, const char *name, mode_t create_mode, int last)
{
    size_t len = strlen(w->path);
    int created = 0, fd, rc;
    struct stat st;
    char why[128];

    if (len + 1 + strlen(name) >= sizeof(w->path))
        return walk_fail(w, -ENAMETOOLONG, last, NULL);
    snprintf(w->path + len, sizeof(w->path) - len, "%s%s", len > 1 ? "/" : "", name);
    if (create_mode != 0) {
        if (mkdirat(w->fd, name, create_mode) == 0)
            created = 1;
        else if (errno != EEXIST)
            return walk_fail(w, -errno, last, NULL);
    }
    fd = openat(w->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        if (fstatat(w->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            return walk_fail(w, -ELOOP, last, "a symlink (it appeared while the path was checked)");
        return walk_fail(w, rc, last, NULL);
    }
    close(w->fd);
    w->fd = fd;
    if (created && (rc = fix_mode(fd)) != 0)
        return walk_fail(w, rc, last, NULL);
    if (fstat(fd, &st) != 0)
        return walk_fail(w, -errno, last, NULL);
    if ((rc = mc_dir_trusted(&st, why, sizeof(why))) != 0)
        return walk_fail(w, rc, last, why);
    return 0;
}

/* Takes the next component off w->todo into name (NAME_MAX + 1 bytes); returns 1, 0 when there
 * is none, -ENAMETOOLONG for one that does not fit (cut short, it would name another entry). */
static int next_component(struct walk *w, char *name, const char **rest)
{
    const char *p = w->todo + strspn(w->todo, "/");
    size_t n = strcspn(p, "/");

    if (n == 0)
        return 0;
    if (n > NAME_MAX)
        return walk_fail(w, -ENAMETOOLONG, 0, NULL);
    memcpy(name, p, n);
    name[n] = '\0';
    *rest = p + n + strspn(p + n, "/");
    return 1;
}

static int walk(struct walk *w, mode_t create_mode)
{
    char name[NAME_MAX + 1], rest[PATH_MAX];
    const char *r = "";
    struct stat st;
    int rc = walk_root(w), more;

    while (rc == 0 && (more = next_component(w, name, &r)) != 0) {
        if (more < 0)
            return more;
        memmove(rest, r, strlen(r) + 1);
        memcpy(w->todo, rest, strlen(rest) + 1);
        if (strcmp(name, ".") == 0)
            continue;
        if (strcmp(name, "..") == 0) {
            char *slash = strrchr(w->path, '/');
            slash[slash == w->path ? 1 : 0] = '\0'; /* "/a/b" -> "/a", "/a" -> "/" */
            rc = walk_restart(w, w->path, rest);
            continue;
        }
        if (fstatat(w->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            rc = walk_link(w, name, &st, rest);
        else
            rc = walk_step(w, name, create_mode, rest[0] == '\0');
    }
    return rc;
}

static int make_absolute(const char *path, char *abs, size_t len)
{
    char cwd[PATH_MAX];
    int n;

    if (path[0] == '/')
        n = snprintf(abs, len, "%s", path);
    else if (getcwd(cwd, sizeof(cwd)) == NULL)
        return -errno;
    else
        n = snprintf(abs, len, "%s/%s", cwd, path);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int mc_dir_open(const char *path, mode_t create_mode, const char *what, int *dfd, char *resolved,
                char *err, size_t errlen)
{
    struct walk w = {.what = what, .given = path, .fd = -1, .err = err, .errlen = errlen};
    char dummy[8];
    int rc;

    if (err == NULL || errlen == 0) {
        w.err = dummy;
        w.errlen = sizeof(dummy);
    }
    w.err[0] = '\0';
    if (dfd != NULL)
        *dfd = -1;
    if (path == NULL || path[0] == '\0') {
        snprintf(w.err, w.errlen, "%s: empty path", what);
        return -EINVAL;
    }
    if ((rc = make_absolute(path, w.todo, sizeof(w.todo))) != 0) {
        snprintf(w.err, w.errlen, "cannot open %s %s: %s", what, path, strerror(-rc));
        return rc;
    }
    rc = walk(&w, create_mode);
    if (rc == 0 && resolved != NULL)
        memcpy(resolved, w.path, strlen(w.path) + 1);
    if (rc == 0 && dfd != NULL) {
        *dfd = w.fd;
        w.fd = -1;
    }
    if (w.fd >= 0)
        close(w.fd);
    return rc;
}

/* ---- files ----------------------------------------------------------------------------- */

static int name_ok(const char *name)
{
    return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

/* An existing entry at name: a regular file of ours with one link is opened and returned in
 * *fd; anything else (a symlink, FIFO, device, someone else's file, a hard link to a file
 * elsewhere) is removed, never opened, and -EAGAIN asks the caller to create the name anew. */
static int reuse_existing(int dfd, const char *name, int acc, unsigned flags, int *fd)
{
    struct stat before, st;
    int f;

    if (fstatat(dfd, name, &before, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? -EAGAIN : -errno;
    if (S_ISDIR(before.st_mode))
        return -EISDIR;
    if (S_ISREG(before.st_mode) && before.st_uid == geteuid() && before.st_nlink == 1) {
        f = openat(dfd, name, acc | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
        if (f < 0)
            return errno == ENOENT ? -EAGAIN : -errno;
        /* the same file as checked, not one swapped in between */
        if (fstat(f, &st) == 0 && st.st_dev == before.st_dev && st.st_ino == before.st_ino &&
            S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_nlink == 1 &&
            fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK) == 0 &&
            (!(flags & MC_FILE_TRUNC) || ftruncate(f, 0) == 0)) {
            *fd = f;
            return 0;
        }
        close(f);
    }
    /* unlink removes a symlink itself and only this name of a hard link */
    if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
        return -errno;
    return -EAGAIN;
}

int mc_file_openat(int dfd, const char *name, unsigned flags, mode_t mode, int *fd)
{
    int acc = O_WRONLY | O_CLOEXEC | ((flags & MC_FILE_APPEND) ? O_APPEND : 0);
    int rc = -EEXIST;

    *fd = -1;
    if (!name_ok(name))
        return -EINVAL;
    /* bounded: someone racing us in a sticky directory gets the name a few times at most */
    for (int tries = 0; tries < 8 && rc == -EEXIST; tries++) {
        int f = openat(dfd, name, acc | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
        if (f >= 0) {
            if ((rc = fix_mode(f)) != 0) {
                close(f);
                return rc;
            }
            *fd = f;
            return 0;
        }
        if (errno != EEXIST)
            return -errno;
        if (flags & MC_FILE_EXCL)
            return -EEXIST;
        rc = reuse_existing(dfd, name, acc, flags, fd);
        if (rc == -EAGAIN)
            rc = -EEXIST;
    }
    return rc;
}

/* Opens the directory of path (O_NOFOLLOW) and points *name at the last component. */
static int open_parent(const char *path, int *dfd, const char **name)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');

    if (slash == NULL) {
        snprintf(dir, sizeof(dir), ".");
        *name = path;
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof(dir))
            return -ENAMETOOLONG;
        memcpy(dir, path, n);
        dir[n] = '\0';
        *name = slash + 1;
    }
    *dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return *dfd < 0 ? -errno : 0;
}

int mc_file_open(const char *path, unsigned flags, mode_t mode, int *fd)
{
    const char *name;
    int dfd, rc;

    *fd = -1;
    if ((rc = open_parent(path, &dfd, &name)) != 0)
        return rc;
    rc = mc_file_openat(dfd, name, flags, mode, fd);
    close(dfd);
    return rc;
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A temporary name next to name: ".NAME.<12 hex digits>", created with O_EXCL. */
static int create_temp(int dfd, const char *name, mode_t mode, char *tmp, size_t tmplen, int *fd)
{
    unsigned char rnd[6];

    if (strlen(name) + 15 > NAME_MAX)
        return -ENAMETOOLONG;
    for (int tries = 0; tries < 16; tries++) {
        if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
            /* no entropy yet (early boot): unpredictability only saves retries here */
            unsigned long v = (unsigned long)time(NULL) ^ ((unsigned long)getpid() << 16) ^
                              (unsigned long)tries * 2654435761u;
            memcpy(rnd, &v, sizeof(rnd) < sizeof(v) ? sizeof(rnd) : sizeof(v));
        }
        snprintf(tmp, tmplen, ".%s.%02x%02x%02x%02x%02x%02x", name, rnd[0], rnd[1], rnd[2], rnd[3],
                 rnd[4], rnd[5]);
        *fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (*fd >= 0)
            return fix_mode(*fd);
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

int mc_file_replace_at(int dfd, const char *name, const void *data, size_t len, mode_t mode)
{
    char tmp[NAME_MAX + 1];
    int fd = -1, rc;

    if (!name_ok(name))
        return -EINVAL;
    rc = create_temp(dfd, name, mode, tmp, sizeof(tmp), &fd);
    if (rc != 0)
        goto out;
    rc = write_all(fd, data, len);
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    fd = -1;
    /* rename replaces whatever is at name, a planted symlink included, and never follows it */
    if (rc == 0 && renameat(dfd, tmp, dfd, name) != 0)
        rc = -errno;
    if (rc == 0 && fsync(dfd) != 0) /* makes the rename itself durable */
        rc = -errno;
    else if (rc != 0)
        unlinkat(dfd, tmp, 0);
out:
    if (fd >= 0) {
        close(fd);
        unlinkat(dfd, tmp, 0);
    }
    return rc;
}

int mc_file_replace(const char *path, const void *data, size_t len, mode_t mode)
{
    const char *name;
    int dfd, rc;

    if ((rc = open_parent(path, &dfd, &name)) != 0)
        return rc;
    rc = mc_file_replace_at(dfd, name, data, len, mode);
    close(dfd);
    return rc;
}

int mc_secret_write_new(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    size_t n = strlen(text);
    int ok;

    if (fd < 0)
        return -errno;
    ok = fchmod(fd, 0600) == 0; /* exactly, umask notwithstanding */
    ok = ok && write(fd, text, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    ok = fsync(fd) == 0 && ok;
    ok = close(fd) == 0 && ok;
    if (!ok) {
        unlink(path);
        return -EIO;
    }
    return 0;
}

int mc_random_hex(char *out, size_t len, size_t nbytes)
{
    unsigned char b[64];

    if (nbytes > sizeof(b) || len < 2 * nbytes + 1 || getentropy(b, nbytes) != 0)
        return -EIO;
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    explicit_bzero(b, sizeof(b));
    return 0;
}
