#include "token.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "message.h"

int launcher_token_check_len(const char *token, const char *what, char *err, size_t errlen)
{
    size_t n = strlen(token);

    if (n <= RDZV_TOKEN_MAX)
        return 0;
    snprintf(err, errlen, "%s is %zu characters; at most %d", what, n, RDZV_TOKEN_MAX);
    return -E2BIG;
}

static const char *kind(mode_t m)
{
    return S_ISFIFO(m)   ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISDIR(m)  ? "a directory"
                         : "not a regular file";
}

static int owner_ok(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* One directory on the way to the token: whoever may rename its entries may swap the token. */
static int check_dir(const char *dir, const char *path, char *err, size_t errlen)
{
    struct stat st;
    mode_t m;

    if (stat(dir, &st) != 0) {
        int rc = -errno;
        snprintf(err, errlen, "token file %s: cannot check directory %s: %s", path, dir,
                 strerror(-rc));
        return rc;
    }
    m = st.st_mode;
    if (!owner_ok(st.st_uid)) {
        snprintf(err, errlen,
                 "token file %s: its directory %s belongs to uid %u, not to you "
                 "(uid %u) or root, so that user could replace the token",
                 path, dir, (unsigned)st.st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (!(m & S_ISVTX) && ((m & S_IWOTH) || ((m & S_IWGRP) && st.st_gid != getegid()))) {
        snprintf(err, errlen,
                 "token file %s: its directory %s is writable by %s (mode %04o), "
                 "so they could replace the token",
                 path, dir, (m & S_IWOTH) ? "others" : "its group", (unsigned)(m & 07777));
        return -EPERM;
    }
    return 0;
}

/* real: an absolute path without symlinks; checks its parent and every directory above. */
static int check_dirs(const char *real, const char *path, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    char *slash;
    int rc;

    snprintf(dir, sizeof(dir), "%s", real);
    while ((slash = strrchr(dir, '/')) != NULL) {
        slash[slash == dir] = '\0'; /* "/a" -> "/" */
        if ((rc = check_dir(dir, path, err, errlen)) != 0)
            return rc;
        if (slash == dir)
            break;
    }
    return 0;
}

/* The file the path resolves to (type, owner, mode): from stat before it is opened, and again
 * from fstat of what was opened. */
static int check_file(const struct stat *st, const char *path, char *err, size_t errlen)
{
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "token file %s is %s, not a regular file", path, kind(st->st_mode));
        return -EINVAL;
    }
    if (!owner_ok(st->st_uid)) {
        snprintf(err, errlen, "token file %s belongs to uid %u, not to you (uid %u) or root", path,
                 (unsigned)st->st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (st->st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errlen,
                 "permissions %04o for token file %s are too open: "
                 "it must not be accessible by others (chmod 600 %s)",
                 (unsigned)(st->st_mode & 07777), path, path);
        return -EPERM;
    }
    return 0;
}

/* A symlink that is given: the link and the directory it sits in, as for the file itself
 * (fs.protected_symlinks, which would refuse another user's link in /tmp, may be off). */
static int check_link(const char *path, char *err, size_t errlen)
{
    char dir[PATH_MAX], *slash, *real = NULL;
    struct stat st;
    int rc;

    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode))
        return 0; /* not a link (or gone: the stat that follows says so) */
    if (!owner_ok(st.st_uid)) {
        snprintf(err, errlen,
                 "token file %s is a symlink that belongs to uid %u, not to you "
                 "(uid %u) or root",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else
        slash[slash == dir] = '\0';
    if ((real = realpath(dir, NULL)) == NULL) {
        rc = -errno;
        snprintf(err, errlen, "token file %s: cannot resolve %s: %s", path, dir, strerror(errno));
        return rc;
    }
    /* check_dirs() checks the parent of its argument: give it a child of real */
    snprintf(dir, sizeof(dir), "%s/x", strcmp(real, "/") == 0 ? "" : real);
    rc = check_dirs(dir, path, err, errlen);
    free(real);
    return rc;
}

/* Every check that needs no open file; *real is the resolved path (the caller frees it). */
static int check_path(const char *path, char **real, struct stat *st, char *err, size_t errlen)
{
    int rc;

    if (stat(path, st) != 0 || (*real = realpath(path, NULL)) == NULL) {
        rc = -errno;
        snprintf(err, errlen, "cannot open token file %s: %s", path, strerror(errno));
        return rc;
    }
    if ((rc = check_file(st, path, err, errlen)) != 0)
        return rc;
    if ((rc = check_link(path, err, errlen)) != 0)
        return rc;
    return check_dirs(*real, path, err, errlen);
}

/* Opens real without ever blocking (a FIFO swapped in after the stat would block a plain
 * open until a writer comes), and makes sure it is the inode that was checked. */
static int open_checked(const char *real, const struct stat *before, const char *path, int *fd,
                        char *err, size_t errlen)
{
    struct stat st;
    int rc, fl;

    *fd = open(real, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
    if (*fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot open token file %s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(*fd, &st) != 0 || st.st_dev != before->st_dev || st.st_ino != before->st_ino) {
        snprintf(err, errlen, "token file %s changed while it was read", path);
        return -EAGAIN;
    }
    if ((rc = check_file(&st, path, err, errlen)) != 0)
        return rc;
    if ((fl = fcntl(*fd, F_GETFL)) < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        rc = -errno;
        snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
        return rc;
    }
    return 0;
}

/* Reads up to cap bytes (fewer at end of file). */
static ssize_t read_full(int fd, char *buf, size_t cap)
{
    size_t n = 0;

    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    return (ssize_t)n;
}

/* Finds the token in the first line of buf (n bytes, NUL-terminated by the caller); *s is its
 * start and the return value its length, or a negative errno with the reason in err. */
static long first_line(char *buf, size_t n, int whole, const char *path, char **s, char *err,
                       size_t errlen)
{
    char *nl = memchr(buf, '\n', n), *e;

    if (nl == NULL && !whole) {
        snprintf(err, errlen, "the first line of token file %s is longer than %d characters", path,
                 LAUNCHER_TOKEN_FILE_MAX);
        return -E2BIG;
    }
    e = nl ? nl : buf + n;
    if (memchr(buf, '\0', (size_t)(e - buf)) != NULL) {
        snprintf(err, errlen, "token file %s has a NUL byte in its first line", path);
        return -EINVAL;
    }
    *e = '\0';
    *s = buf;
    while (isspace((unsigned char)**s))
        (*s)++;
    while (e > *s && isspace((unsigned char)e[-1])) /* the '\r' of CRLF too */
        *--e = '\0';
    if (e == *s) {
        snprintf(err, errlen, "token file %s is empty: the token must be on its first line", path);
        return -EINVAL;
    }
    return (long)(e - *s);
}

static int read_token(int fd, const char *path, char *token, size_t len, char *err, size_t errlen)
{
    char buf[LAUNCHER_TOKEN_FILE_MAX + 3], what[PATH_MAX + 16], *s = NULL;
    ssize_t n = read_full(fd, buf, sizeof(buf) - 1); /* room for the line, CR LF and a NUL */
    long tlen;
    int rc = 0;

    if (n < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot read token file %s: %s", path, strerror(errno));
        return rc;
    }
    buf[n] = '\0';
    tlen = first_line(buf, (size_t)n, (size_t)n < sizeof(buf) - 1, path, &s, err, errlen);
    if (tlen < 0) {
        rc = (int)tlen;
        goto out;
    }
    snprintf(what, sizeof(what), "token in %s", path);
    if ((rc = launcher_token_check_len(s, what, err, errlen)) != 0)
        goto out;
    if ((size_t)tlen >= len) {
        snprintf(err, errlen, "token in %s is %ld characters; at most %zu here", path, tlen,
                 len - 1);
        rc = -E2BIG;
        goto out;
    }
    memcpy(token, s, (size_t)tlen + 1);
out:
    explicit_bzero(buf, sizeof(buf));
    return rc;
}

int launcher_read_token_file(const char *path, char *token, size_t len, char *err, size_t errlen)
{
    struct stat st;
    char *real = NULL;
    int fd = -1, rc;

    rc = check_path(path, &real, &st, err, errlen);
    if (rc == 0)
        rc = open_checked(real, &st, path, &fd, err, errlen);
    if (rc == 0)
        rc = read_token(fd, path, token, len, err, errlen);
    if (fd >= 0)
        close(fd);
    free(real);
    return rc;
}
