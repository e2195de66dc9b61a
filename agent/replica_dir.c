/* Directory checkpoints as one stream: see replica_dir.h. */
#include "replica_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_hash.h"

/* --- sender ---------------------------------------------------------------------------------- */

void agent_replica_src_init(struct agent_replica_src *s)
{
    memset(s, 0, sizeof(*s));
    s->dirfd = -1;
    s->open_fd = -1;
}

void agent_replica_src_close(struct agent_replica_src *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->files[i].rel);
    free(s->files);
    if (s->open_fd >= 0)
        close(s->open_fd);
    if (s->dirfd >= 0)
        close(s->dirfd);
    agent_replica_src_init(s);
}

int agent_replica_src_clone(struct agent_replica_src *dst, const struct agent_replica_src *src)
{
    agent_replica_src_init(dst);
    if ((dst->files = calloc(src->n ? src->n : 1, sizeof(*dst->files))) == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < src->n; i++) {
        dst->files[i] = src->files[i];
        if ((dst->files[i].rel = strdup(src->files[i].rel)) == NULL) {
            dst->n = i;
            agent_replica_src_close(dst);
            return -ENOMEM;
        }
    }
    dst->n = src->n;
    dst->total = src->total;
    dst->content = src->content;
    if ((dst->dirfd = fcntl(src->dirfd, F_DUPFD_CLOEXEC, 0)) < 0) {
        int rc = -errno;

        agent_replica_src_close(dst);
        return rc;
    }
    return 0;
}

int agent_replica_src_open(struct agent_replica_src *s, const char *dir, const char *name,
                           char *why, size_t whylen)
{
    char **rel = NULL;
    size_t n = 0;
    struct stat st;
    int rc, fd;

    agent_replica_src_init(s);
    why[0] = '\0';
    if ((rc = agent_ckpt_list_dir(dir, name, &rel, &n)) != 0) {
        snprintf(why, whylen, "cannot list it: %s", strerror(-rc));
        return rc;
    }
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    s->dirfd = fd < 0 ? -1 : openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0)
        close(fd);
    s->files = calloc(n ? n : 1, sizeof(*s->files));
    rc = s->dirfd < 0 ? -errno : s->files == NULL ? -ENOMEM : 0;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && fstatat(s->dirfd, rel[i], &st, AT_SYMLINK_NOFOLLOW) != 0)
            rc = -errno;
        if (rc == 0 && !S_ISREG(st.st_mode)) {
            rc = S_ISLNK(st.st_mode) ? -ELOOP : -EINVAL;
            snprintf(why, whylen, "%s inside is %s", rel[i],
                     rc == -ELOOP ? "a symlink" : "not a regular file");
        }
        if (rc == 0) {
            struct agent_replica_src_file *f = &s->files[s->n++];

            f->rel = rel[i];
            rel[i] = NULL;
            f->size = (uint64_t)st.st_size;
            f->hdr = (unsigned)strlen(f->rel) + 1 + 8;
            f->start = s->total;
            s->total += f->hdr + f->size;
            s->content += f->size;
        }
        free(rel[i]);
    }
    free(rel);
    if (rc != 0) {
        if (why[0] == '\0')
            snprintf(why, whylen, "%s", strerror(-rc));
        agent_replica_src_close(s);
    }
    return rc;
}

/* The member holding stream offset off (binary search over the starts). */
static size_t member_at(const struct agent_replica_src *s, uint64_t off)
{
    size_t lo = 0, hi = s->n;

    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;

        if (s->files[mid].start <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int agent_replica_src_read(struct agent_replica_src *s, uint8_t *buf, size_t len, uint64_t off)
{
    if (off + len > s->total)
        return -EINVAL;
    while (len > 0) {
        size_t i = member_at(s, off);
        const struct agent_replica_src_file *f = &s->files[i];
        uint64_t in = off - f->start, take;

        if (in < f->hdr) { /* path, NUL, size big-endian */
            uint8_t hdr[PATH_MAX + 9];
            size_t plen = f->hdr - 9;

            memcpy(hdr, f->rel, plen + 1);
            for (int b = 0; b < 8; b++)
                hdr[plen + 1 + b] = (uint8_t)(f->size >> (56 - 8 * b));
            take = f->hdr - in < len ? f->hdr - in : len;
            memcpy(buf, hdr + in, take);
        } else {
            uint64_t at = in - f->hdr;
            ssize_t got;

            if (s->open_fd < 0 || s->open_idx != i) {
                if (s->open_fd >= 0)
                    close(s->open_fd);
                s->open_fd = openat(s->dirfd, f->rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                s->open_idx = i;
                if (s->open_fd < 0)
                    return errno == ENOENT ? -ESTALE : -errno;
            }
            take = f->size - at < len ? f->size - at : len;
            got = pread(s->open_fd, buf, take, (off_t)at);
            if (got < 0)
                return -errno;
            if ((uint64_t)got != take)
                return -ESTALE; /* shorter than listed: it changed */
        }
        buf += take;
        off += take;
        len -= take;
    }
    return 0;
}

/* --- receiver -------------------------------------------------------------------------------- */

void agent_replica_sink_init(struct agent_replica_sink *k)
{
    memset(k, 0, sizeof(*k));
    k->dirfd = -1;
    k->fd = -1;
}

int agent_replica_sink_open(struct agent_replica_sink *k, const char *tmp, mode_t file_mode,
                            mode_t dir_mode)
{
    agent_replica_sink_init(k);
    k->file_mode = file_mode;
    k->dir_mode = dir_mode;
    if (snprintf(k->tmp, sizeof(k->tmp), "%s", tmp) >= (int)sizeof(k->tmp))
        return -ENAMETOOLONG;
    if (mkdtemp(k->tmp) == NULL) {
        k->tmp[0] = '\0';
        return -errno;
    }
    k->dirfd = open(k->tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return k->dirfd < 0 ? -errno : 0;
}

/* A member's path as the stream may carry it (see replica_dir.h). */
static int path_ok(const char *p, size_t len, const char *prev, unsigned long files)
{
    unsigned depth = 0;

    if (len == 0 || p[0] == '/' || p[len - 1] == '/' || files >= AGENT_CKPT_MAX_FILES ||
        (prev[0] != '\0' && strcmp(prev, p) >= 0))
        return 0;
    for (const char *c = p; c != NULL; c = strchr(c, '/')) {
        const char *seg = c == p ? c : c + 1, *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);

        if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.') ||
            n > NAME_MAX || ++depth > AGENT_CKPT_MAX_DEPTH)
            return 0;
        if (end == NULL)
            break;
        c = end;
    }
    return 1;
}

/* Creates the directories above member path (each ours: the temporary directory is fresh and
 * holds no symlink, so no component can lead outside). */
static int make_parents(int dirfd, char *path, mode_t mode)
{
    for (char *c = strchr(path, '/'); c != NULL; c = strchr(c + 1, '/')) {
        *c = '\0';
        int rc = mkdirat(dirfd, path, mode);

        *c = '/';
        if (rc != 0 && errno != EEXIST)
            return -errno;
    }
    return 0;
}

static int member_end(struct agent_replica_sink *k)
{
    int rc = fsync(k->fd) != 0 ? -errno : 0;

    close(k->fd);
    k->fd = -1;
    k->state = SINK_PATH;
    k->plen = 0;
    return rc;
}

static int member_begin(struct agent_replica_sink *k, char *why, size_t whylen)
{
    int rc;

    k->left = 0;
    for (int b = 0; b < 8; b++)
        k->left = k->left << 8 | k->size[b];
    if ((rc = make_parents(k->dirfd, k->path, k->dir_mode)) != 0 ||
        (k->fd = openat(k->dirfd, k->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        k->file_mode)) < 0) {
        rc = rc ? rc : -errno;
        snprintf(why, whylen, "cannot create %s: %s", k->path, strerror(-rc));
        return rc;
    }
    memcpy(k->prev, k->path, k->plen + 1);
    k->files++;
    k->content += k->left;
    k->state = SINK_DATA;
    return k->left == 0 ? member_end(k) : 0;
}

int agent_replica_sink_write(struct agent_replica_sink *k, const uint8_t *p, size_t n, char *why,
                             size_t whylen)
{
    int rc;

    while (n > 0) {
        if (k->state == SINK_PATH) {
            const uint8_t *nul = memchr(p, '\0', n);
            size_t take = nul ? (size_t)(nul - p) : n;

            if (k->plen + take >= sizeof(k->path)) {
                snprintf(why, whylen, "a member path longer than %d bytes", PATH_MAX - 1);
                return -EPROTO;
            }
            memcpy(k->path + k->plen, p, take);
            k->plen += take;
            p += take;
            n -= take;
            if (nul == NULL)
                break;
            p++, n--;
            k->path[k->plen] = '\0';
            if (!path_ok(k->path, k->plen, k->prev, (unsigned long)k->files)) {
                snprintf(why, whylen, "member path refused: %.200s", k->path);
                return -EPROTO;
            }
            k->state = SINK_SIZE;
            k->slen = 0;
        } else if (k->state == SINK_SIZE) {
            while (n > 0 && k->slen < 8)
                k->size[k->slen++] = *p++, n--;
            if (k->slen == 8 && (rc = member_begin(k, why, whylen)) != 0)
                return rc;
        } else {
            size_t take = k->left < n ? (size_t)k->left : n;
            ssize_t w = write(k->fd, p, take);

            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = w < 0 ? -errno : -EIO;
                snprintf(why, whylen, "writing %s: %s", k->path, strerror(-rc));
                return rc;
            }
            p += w;
            n -= (size_t)w;
            k->left -= (uint64_t)w;
            if (k->left == 0 && (rc = member_end(k)) != 0) {
                snprintf(why, whylen, "fsync %s: %s", k->path, strerror(-rc));
                return rc;
            }
        }
    }
    return 0;
}

int agent_replica_sink_finish(struct agent_replica_sink *k, char *why, size_t whylen)
{
    if (k->state != SINK_PATH || k->plen != 0) {
        snprintf(why, whylen, "the stream ended inside member %.200s", k->path);
        return -EPROTO;
    }
    if (fsync(k->dirfd) != 0) {
        snprintf(why, whylen, "fsync: %s", strerror(errno));
        return -errno;
    }
    return 0;
}

void agent_replica_sink_abort(struct agent_replica_sink *k)
{
    if (k->fd >= 0)
        close(k->fd);
    if (k->dirfd >= 0)
        close(k->dirfd);
    if (k->tmp[0] != '\0')
        agent_ckpt_remove_path(k->tmp);
    agent_replica_sink_init(k);
}
