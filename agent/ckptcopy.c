#include "ckptcopy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "clock.h"
#include "saferm.h"

#define COPY_CHUNK (1u << 20)

/* Temporary names are unique within the process: two copies never share one. */
static void tmp_name(char *buf, size_t len, const char *prefix)
{
    static atomic_uint counter;

    snprintf(buf, len, "%s%ld-%u", prefix, (long)getpid(), atomic_fetch_add(&counter, 1));
}

static int cancelled(const struct agent_ckpt_copy_stats *stats)
{
    return stats->cancel != NULL && atomic_load(stats->cancel);
}

static int copy_rw(int in, int out, const struct agent_ckpt_copy_stats *stats)
{
    char *buf = malloc(COPY_CHUNK);
    int rc = 0;

    if (buf == NULL)
        return -ENOMEM;
    for (;;) {
        if (cancelled(stats)) {
            rc = -ECANCELED;
            break;
        }
        ssize_t n = read(in, buf, COPY_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : 0;
            break;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                free(buf);
                return -errno;
            }
            off += w;
        }
    }
    free(buf);
    return rc;
}

/* A reflink where the file system has one, else the kernel's copy, else read and write. */
static int copy_data(int in, int out, struct agent_ckpt_copy_stats *stats)
{
    int first = 1;

    if (ioctl(out, FICLONE, in) == 0) {
        stats->reflinked++;
        return 0;
    }
    for (;;) {
        if (cancelled(stats))
            return -ECANCELED;
        ssize_t n = copy_file_range(in, NULL, out, NULL, 64u << 20, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && first &&
            (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
            return copy_rw(in, out, stats);
        if (n <= 0)
            return n < 0 ? -errno : 0;
        first = 0;
    }
}

static int copy_tree(int sfd, const char *sname, int dfd, const char *dname, int depth,
                     struct agent_ckpt_copy_stats *stats);

static int copy_file(int sfd, const char *sname, int dfd, const char *dname, const struct stat *st,
                     struct agent_ckpt_copy_stats *stats)
{
    int in = openat(sfd, sname, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int out = -1, rc;

    if (in < 0)
        return -errno;
    /* the original's bits, never wider; fchmod after: the umask may have narrowed them */
    out = openat(dfd, dname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
        rc = -errno;
        close(in);
        return rc;
    }
    rc = copy_data(in, out, stats);
    if (rc == 0 && fchmod(out, st->st_mode & 0777) != 0)
        rc = -errno;
    stats->bytes += (uint64_t)st->st_size;
    stats->files++;
    close(in);
    close(out);
    return rc;
}

static int copy_link(int sfd, const char *sname, int dfd, const char *dname)
{
    char target[4096];
    ssize_t n = readlinkat(sfd, sname, target, sizeof(target) - 1);

    if (n < 0)
        return -errno;
    target[n] = '\0';
    return symlinkat(target, dfd, dname) == 0 ? 0 : -errno;
}

static int copy_dir(int sfd, const char *sname, int dfd, const char *dname, const struct stat *st,
                    int depth, struct agent_ckpt_copy_stats *stats)
{
    int sd = -1, dd = -1, rc = 0;
    DIR *d = NULL;
    struct dirent *de;

    if (depth > AGENT_CKPT_MAX_DEPTH)
        return -ELOOP;
    if (mkdirat(dfd, dname, 0700) != 0)
        return -errno;
    sd = openat(sfd, sname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    dd = openat(dfd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sd < 0 || dd < 0 || (d = fdopendir(sd)) == NULL) {
        rc = -errno;
        goto out;
    }
    sd = -1; /* d owns it */
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            rc = copy_tree(dirfd(d), de->d_name, dd, de->d_name, depth + 1, stats);
    if (rc == 0 && fchmod(dd, st->st_mode & 0777) != 0)
        rc = -errno;
out:
    if (d != NULL)
        closedir(d);
    if (sd >= 0)
        close(sd);
    if (dd >= 0)
        close(dd);
    return rc;
}

/* Copies one member; fifos, sockets and devices carry no checkpoint data and are left out. */
static int copy_tree(int sfd, const char *sname, int dfd, const char *dname, int depth,
                     struct agent_ckpt_copy_stats *stats)
{
    struct stat st;

    if (fstatat(sfd, sname, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return -errno;
    if (S_ISREG(st.st_mode))
        return copy_file(sfd, sname, dfd, dname, &st, stats);
    if (S_ISLNK(st.st_mode))
        return copy_link(sfd, sname, dfd, dname);
    if (S_ISDIR(st.st_mode))
        return copy_dir(sfd, sname, dfd, dname, &st, depth, stats);
    return 0;
}

static int open_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

/* A temporary copy given up, through the directory already open (common/saferm.h). */
static void remove_at(int dfd, const char *name)
{
    char why[256];

    mc_rm_at(dfd, name, 0, why, sizeof(why));
}

/* Renames tmp over name in dfd: a file replaces; a directory is exchanged with the one there,
 * which is then removed (rename cannot replace a directory that is not empty). */
static int put_in_place(int dfd, const char *tmp, const char *name, int is_dir)
{
    if (!is_dir || renameat2(dfd, tmp, dfd, name, RENAME_EXCHANGE) != 0) {
        if (is_dir && errno != ENOENT)
            return -errno;
        if (renameat(dfd, tmp, dfd, name) != 0)
            return -errno;
        return 0;
    }
    remove_at(dfd, tmp); /* now the old one */
    return 0;
}

static int say(char *why, size_t len, int rc, const char *what)
{
    snprintf(why, len, "%s: %s", what, strerror(-rc));
    return rc;
}

int agent_ckpt_keep_copy(const char *dir, const char *gooddir, const struct agent_ckpt_entry *e,
                         struct agent_ckpt_copy_stats *stats, char *why, size_t whylen)
{
    struct agent_ckpt_entry got;
    char tmp[64];
    struct stat st;
    int sfd = open_dir(dir), gfd = open_dir(gooddir), rc;
    uint64_t t0 = mc_mono_ns();

    atomic_int *cancel = stats->cancel;

    memset(stats, 0, sizeof(*stats));
    stats->cancel = cancel;
    tmp_name(tmp, sizeof(tmp), "incoming-");
    if (sfd < 0 || gfd < 0) {
        rc = say(why, whylen, sfd < 0 ? sfd : gfd, "cannot open the directories");
        goto out;
    }
    if ((rc = copy_tree(sfd, e->name, gfd, tmp, 0, stats)) != 0) {
        say(why, whylen, rc, "copy");
        goto fail;
    }
    rc = agent_ckpt_scan_entry(gooddir, tmp, &got);
    if (rc == 0 && (got.checksum != e->checksum || got.size != e->size))
        rc = -ESTALE;
    if (rc != 0) {
        say(why, whylen, rc == -EBUSY ? -ESTALE : rc,
            rc == -ESTALE ? "it changed while it was copied" : "reading the copy back");
        rc = rc == -EBUSY ? -ESTALE : rc;
        goto fail;
    }
    if (syncfs(gfd) != 0 || fstatat(gfd, tmp, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        (rc = put_in_place(gfd, tmp, e->name, S_ISDIR(st.st_mode))) != 0 || fsync(gfd) != 0) {
        rc = say(why, whylen, rc != 0 ? rc : -errno, "putting the copy in place");
        goto fail;
    }
    stats->ns = mc_mono_ns() - t0;
    goto out;
fail:
    remove_at(gfd, tmp);
out:
    if (sfd >= 0)
        close(sfd);
    if (gfd >= 0)
        close(gfd);
    return rc;
}

int agent_ckpt_restore_copy(const char *dir, const char *gooddir, const struct agent_ckpt_entry *e,
                            char *why, size_t whylen)
{
    struct agent_ckpt_copy_stats stats = {0};
    char tmp[64];
    struct stat st;
    int sfd = open_dir(gooddir), dfd = open_dir(dir), rc;

    /* a dot name: the watcher takes it for a writer's temporary file and waits for the rename */
    tmp_name(tmp, sizeof(tmp), ".muster-restore-");
    if (sfd < 0 || dfd < 0) {
        rc = say(why, whylen, sfd < 0 ? sfd : dfd, "cannot open the directories");
        goto out;
    }
    if ((rc = copy_tree(sfd, e->name, dfd, tmp, 0, &stats)) != 0) {
        say(why, whylen, rc, "copy");
        remove_at(dfd, tmp);
        goto out;
    }
    if (syncfs(dfd) != 0 || fstatat(dfd, tmp, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        (rc = put_in_place(dfd, tmp, e->name, S_ISDIR(st.st_mode))) != 0 || fsync(dfd) != 0) {
        rc = say(why, whylen, rc != 0 ? rc : -errno, "putting it in place");
        remove_at(dfd, tmp);
        goto out;
    }
    rc = agent_ckpt_entry_verify(e, dir, why, whylen);
out:
    if (sfd >= 0)
        close(sfd);
    if (dfd >= 0)
        close(dfd);
    return rc;
}
