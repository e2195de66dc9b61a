/* Where a checkpoint replica lands: see replica_store.h. */
#include "replica_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"

#define FILE_DEFAULT 0600 /* mode 0: a sender before modes */
#define DIR_DEFAULT 0700

int agent_replica_store_new(const char *dir, const char *name, const char *tmpl, int is_dir,
                            uint32_t mode, struct agent_replica_store **out)
{
    struct agent_replica_store *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return -ENOMEM;
    s->is_dir = is_dir;
    s->fd = -1;
    agent_replica_sink_init(&s->sink);
    mode &= 0777; /* never a set-id bit on a copy */
    s->mode = mode != 0 ? mode : is_dir ? DIR_DEFAULT : FILE_DEFAULT;
    if (snprintf(s->tmp, sizeof(s->tmp), "%s", tmpl) >= (int)sizeof(s->tmp) ||
        snprintf(s->path, sizeof(s->path), "%s/%s", dir, name) >= (int)sizeof(s->path) ||
        snprintf(s->parent, sizeof(s->parent), "%s", dir) >= (int)sizeof(s->parent)) {
        free(s);
        return -ENAMETOOLONG;
    }
    *out = s;
    return 0;
}

static int fail(char *why, size_t whylen, const char *what, int rc)
{
    snprintf(why, whylen, "%s: %s", what, strerror(-rc));
    return rc;
}

static int store_open(void *target, char *why, size_t whylen)
{
    struct agent_replica_store *s = target;
    int rc;

    if (s->is_dir) {
        /* files: the directory's mode without x bits; subdirectories: the owner fills them */
        rc = agent_replica_sink_open(&s->sink, s->tmp, s->mode & 0666, s->mode | 0700);
        memcpy(s->tmp, s->sink.tmp, sizeof(s->tmp)); /* "" when mkdtemp failed */
        return rc != 0 ? fail(why, whylen, "cannot create a temporary directory", rc) : 0;
    }
    if ((s->fd = mkostemp(s->tmp, O_CLOEXEC)) < 0) {
        rc = -errno;
        s->tmp[0] = '\0';
        return fail(why, whylen, "cannot create a temporary file", rc);
    }
    return 0;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

#define STORE_WRITEBACK_EVERY (8u << 20)

static int store_write(void *target, const uint8_t *p, size_t n, char *why, size_t whylen)
{
    struct agent_replica_store *s = target;
    int rc;

    if (s->is_dir)
        return agent_replica_sink_write(&s->sink, p, n, why, whylen);
    if ((rc = pwrite_all(s->fd, p, n, s->off)) != 0)
        return fail(why, whylen, "writing", rc);
    s->off += n;
    /* the disk starts on what is written while the rest still comes, so that the fsync at the
     * end finds little left: on a 16-core host it was 0.9 s of a 2 GB copy's 1.6 s. A hint
     * (its failure changes nothing: the fsync still makes the copy durable). */
    if (s->off - s->flushed >= STORE_WRITEBACK_EVERY) {
        (void)sync_file_range(s->fd, (off_t)s->flushed, (off_t)(s->off - s->flushed),
                              SYNC_FILE_RANGE_WRITE);
        s->flushed = s->off;
    }
    return 0;
}

static int store_positional(void *target)
{
    return !((struct agent_replica_store *)target)->is_dir;
}

/* A file's chunk at its offset, from one of the writer's helpers (replica_write.h). The
 * writeback hint as store_write's, for each STORE_WRITEBACK_EVERY boundary the chunk ends
 * past: the range before it is (nearly always) placed by then, and a hint for a page not yet
 * written does nothing. */
static int store_write_at(void *target, const uint8_t *p, size_t n, uint64_t off, char *why,
                          size_t whylen)
{
    struct agent_replica_store *s = target;
    uint64_t end = off + n, mark = end / STORE_WRITEBACK_EVERY * STORE_WRITEBACK_EVERY;
    int rc;

    if ((rc = pwrite_all(s->fd, p, n, off)) != 0)
        return fail(why, whylen, "writing", rc);
    if (mark > off && mark >= STORE_WRITEBACK_EVERY)
        (void)sync_file_range(s->fd, (off_t)(mark - STORE_WRITEBACK_EVERY),
                              (off_t)STORE_WRITEBACK_EVERY, SYNC_FILE_RANGE_WRITE);
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

    if (fd < 0)
        return -errno;
    if (fsync(fd) != 0)
        rc = -errno;
    close(fd);
    return rc;
}

/* rename(2) that never replaces what is at to. RENAME_NOREPLACE where the file system has it
 * (ext4, xfs, btrfs, tmpfs); elsewhere (EINVAL) a check first, which leaves a window only
 * against a local writer racing the receiver in its own checkpoint directory. */
static int rename_noreplace(const char *from, const char *to)
{
    struct stat st;

    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    if (lstat(to, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(from, to);
}

/* The directory's members are fsynced, then itself; its mode; renamed into place. */
static int finish_dir(struct agent_replica_store *s, struct stat *st, char *why, size_t whylen)
{
    int rc;

    if ((rc = agent_replica_sink_finish(&s->sink, why, whylen)) != 0)
        return rc;
    /* a directory of that name that is not this copy stays, even an empty one (rename(2)
     * replaces an empty directory) */
    if (fchmod(s->sink.dirfd, s->mode) != 0 || rename_noreplace(s->tmp, s->path) != 0) {
        rc = -errno;
        snprintf(why, whylen, "%s",
                 rc == -ENOTEMPTY || rc == -EEXIST || rc == -EISDIR
                     ? "a different checkpoint of that name is already here"
                     : strerror(-rc));
        return rc;
    }
    s->tmp[0] = '\0'; /* renamed: nothing to remove */
    s->sink.tmp[0] = '\0';
    s->content = s->sink.content;
    return fstat(s->sink.dirfd, st) != 0 ? fail(why, whylen, "stat", -errno) : 0;
}

static int finish_file(struct agent_replica_store *s, struct stat *st, char *why, size_t whylen)
{
    if (fchmod(s->fd, s->mode) != 0 || fsync(s->fd) != 0 || fstat(s->fd, st) != 0 ||
        rename(s->tmp, s->path) != 0)
        return fail(why, whylen, "storing", -errno);
    s->tmp[0] = '\0';
    s->content = (uint64_t)st->st_size;
    return 0;
}

static int store_finish(void *target, char *why, size_t whylen)
{
    struct agent_replica_store *s = target;
    struct stat st;
    int rc = s->is_dir ? finish_dir(s, &st, why, whylen) : finish_file(s, &st, why, whylen);

    if (rc != 0)
        return rc;
    fsync_dir(s->parent); /* the rename, durable (a failure here loses nothing verified) */
    s->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return 0;
}

static void store_close(void *target, int kept)
{
    struct agent_replica_store *s = target;

    (void)kept; /* what finish renamed is no temporary any more: tmp is "" then */
    if (s->is_dir) {
        agent_replica_sink_abort(&s->sink); /* removes the temporary directory, if any */
    } else {
        if (s->fd >= 0)
            close(s->fd);
        if (s->tmp[0] != '\0')
            unlink(s->tmp);
    }
    free(s);
}

const struct agent_replica_write_ops agent_replica_store_ops = {.open = store_open,
                                                                .write = store_write,
                                                                .finish = store_finish,
                                                                .close = store_close,
                                                                .positional = store_positional,
                                                                .write_at = store_write_at};
