#include "ckpt_hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>
#ifdef MUSTER_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif

#include "path.h"
#include "clock.h"

/* Large enough that a read() is not dominated by the syscall (1 MiB reads ran at a tenth of
 * 8 MiB ones on a sparse 20 GB file here); hashing runs off the loop, so no step need be short. */
#define READ_CHUNK (8u << 20)

/* A directory's regular files and symlinks, relative to its root. */
struct file_list {
    char **v;
    size_t n, cap;
    uint64_t size;    /* sum of the regular files */
    int64_t mtime_ns; /* newest of everything seen */
};

void agent_ckpt_xxh3_update(void *state, const void *p, size_t n)
{
#ifdef MUSTER_HAVE_XXH_DISPATCH
    XXH3_64bits_update_dispatch(state, p, n);
#else
    XXH3_64bits_update(state, p, n);
#endif
}

static int64_t ts_ns(struct timespec ts)
{
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

int64_t agent_ckpt_parse_step(const char *name)
{
    size_t end = strlen(name);
    const char *dot;
    int64_t v = 0, scale = 1;

    while (end > 0 && name[end - 1] == '/')
        end--;
    /* "ckpt_120.h5" must not be step 5: an extension that starts with a letter is no step. */
    dot = memrchr(name, '.', end);
    if (dot != NULL && dot != name && is_alpha(dot[1]))
        end = (size_t)(dot - name);
    while (end > 0 && (name[end - 1] < '0' || name[end - 1] > '9'))
        end--;
    if (end == 0)
        return -1;
    for (; end > 0 && name[end - 1] >= '0' && name[end - 1] <= '9'; end--) {
        int64_t d = name[end - 1] - '0';
        if (scale == 0) { /* leading digits beyond 19 places must be zeros */
            if (d != 0)
                return -1;
            continue;
        }
        if (d > (INT64_MAX - v) / scale)
            return -1;
        v += d * scale;
        scale = scale > INT64_MAX / 10 ? 0 : scale * 10;
    }
    return v;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

int agent_ckpt_name_is_temp(const char *name)
{
    return name[0] == '.' || ends_with(name, ".tmp") || ends_with(name, ".partial") ||
           ends_with(name, "~");
}

int agent_ckpt_name_valid(const char *name)
{
    size_t n = strnlen(name, AGENT_CKPT_NAME_MAX);
    return n > 0 && n < AGENT_CKPT_NAME_MAX && strchr(name, '/') == NULL &&
           strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static void list_free(struct file_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

static int list_push(struct file_list *l, const char *rel)
{
    if (l->n == AGENT_CKPT_MAX_FILES)
        return -E2BIG;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = strdup(rel);
    if (l->v[l->n] == NULL)
        return -ENOMEM;
    l->n++;
    return 0;
}

static int walk(struct file_list *l, const char *root, const char *rel, int depth);

/* Adds one directory member; recurses into directories. Other kinds (fifos, sockets) carry no
 * checkpoint data and are left out. */
static int walk_member(struct file_list *l, const char *root, const char *rel, int depth)
{
    char path[PATH_MAX];
    struct stat st;
    int rc = agent_path_fmt(path, sizeof(path), "%s/%s", root, rel);

    if (rc != 0)
        return rc;
    if (lstat(path, &st) != 0)
        return -errno;
    if (ts_ns(st.st_mtim) > l->mtime_ns)
        l->mtime_ns = ts_ns(st.st_mtim);
    if (S_ISDIR(st.st_mode))
        return walk(l, root, rel, depth + 1);
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return 0;
    if (S_ISREG(st.st_mode))
        l->size += (uint64_t)st.st_size;
    return list_push(l, rel);
}

static int walk(struct file_list *l, const char *root, const char *rel, int depth)
{
    char path[PATH_MAX], sub[PATH_MAX];
    DIR *d = NULL;
    struct dirent *de;
    int rc;

    if (depth > AGENT_CKPT_MAX_DEPTH)
        return -ELOOP;
    rc = rel[0] ? agent_path_fmt(path, sizeof(path), "%s/%s", root, rel)
                : agent_path_fmt(path, sizeof(path), "%s", root);
    if (rc != 0)
        return rc;
    d = opendir(path);
    if (d == NULL)
        return -errno;
    errno = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        rc = rel[0] ? agent_path_fmt(sub, sizeof(sub), "%s/%s", rel, de->d_name)
                    : agent_path_fmt(sub, sizeof(sub), "%s", de->d_name);
        if (rc == 0)
            rc = walk_member(l, root, sub, depth);
        errno = 0;
    }
    if (rc == 0 && errno != 0)
        rc = -errno;
    closedir(d);
    return rc;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists dir/name into h: nothing for a regular file, the sorted members of a directory. */
static int list_root(struct agent_ckpt_hash *h)
{
    struct file_list l = {0};
    struct stat st;
    int rc;

    if (lstat(h->root, &st) != 0)
        return -errno;
    h->entry.mtime_ns = ts_ns(st.st_mtim);
    if (S_ISREG(st.st_mode)) {
        h->nfiles = 1;
        h->listed = (uint64_t)st.st_size;
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return -EINVAL; /* symlinks are not followed: a link is not a checkpoint */
    l.mtime_ns = h->entry.mtime_ns;
    rc = walk(&l, h->root, "", 0);
    if (rc != 0) {
        list_free(&l);
        return rc;
    }
    qsort(l.v, l.n, sizeof(*l.v), cmp_path);
    h->files = l.v; /* takes the strings */
    h->nfiles = l.n;
    h->listed = l.size;
    h->entry.mtime_ns = l.mtime_ns;
    return 0;
}

void agent_ckpt_hash_close(struct agent_ckpt_hash *h)
{
    if (h == NULL)
        return;
    /* A zeroed, never begun struct has fd 0 and no state: stdin is not ours to close. */
    if (h->state != NULL && h->fd >= 0)
        close(h->fd);
    for (size_t i = 0; h->files != NULL && i < h->nfiles; i++)
        free(h->files[i]);
    free(h->files);
    free(h->buf);
    if (h->state != NULL)
        XXH3_freeState(h->state);
    memset(h, 0, sizeof(*h));
    h->fd = -1;
}

int agent_ckpt_hash_begin(struct agent_ckpt_hash *h, const char *dir, const char *name)
{
    int rc;

    memset(h, 0, sizeof(*h));
    h->fd = -1;
    if (!agent_ckpt_name_valid(name))
        return -EINVAL;
    if (agent_ckpt_name_is_temp(name))
        return -EAGAIN;
    rc = agent_path_fmt(h->root, sizeof(h->root), "%s/%s", dir, name);
    if (rc != 0)
        goto out;
    snprintf(h->entry.name, sizeof(h->entry.name), "%s", name);
    h->entry.step = agent_ckpt_parse_step(name);
    rc = list_root(h);
    if (rc != 0)
        goto out;
    h->buf = malloc(READ_CHUNK);
    h->state = XXH3_createState();
    if (h->buf == NULL || h->state == NULL || XXH3_64bits_reset(h->state) != XXH_OK) {
        rc = -ENOMEM;
        goto out;
    }
out:
    if (rc != 0)
        agent_ckpt_hash_close(h);
    return rc;
}

int agent_ckpt_list_dir(const char *dir, const char *name, char ***files, size_t *n)
{
    struct agent_ckpt_hash h;
    int rc = agent_ckpt_hash_begin(&h, dir, name);

    *files = NULL;
    *n = 0;
    if (rc != 0)
        return rc;
    if (h.files == NULL) {
        agent_ckpt_hash_close(&h);
        return -ENOTDIR;
    }
    *files = h.files; /* taken: the close below frees the rest */
    *n = h.nfiles;
    h.files = NULL;
    h.nfiles = 0;
    agent_ckpt_hash_close(&h);
    return 0;
}

uint64_t agent_ckpt_hash_listed_size(const struct agent_ckpt_hash *h)
{
    return h->listed;
}

/* Each member of a directory is preceded by its path, a NUL and its size, so that renaming a
 * file or moving bytes from one file to the next changes the checksum. */
static void hash_header(struct agent_ckpt_hash *h, const char *rel, uint64_t size)
{
    unsigned char be[8];

    for (int i = 0; i < 8; i++)
        be[i] = (unsigned char)(size >> (56 - 8 * i));
    XXH3_64bits_update(h->state, rel, strlen(rel) + 1);
    XXH3_64bits_update(h->state, be, sizeof(be));
}

/* A symlink inside a directory checkpoint counts by its target text, never what it points at. */
static int hash_link(struct agent_ckpt_hash *h, const char *path, const char *rel)
{
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof(target));

    if (n < 0)
        return -errno;
    hash_header(h, rel, (uint64_t)n);
    XXH3_64bits_update(h->state, target, (size_t)n);
    h->next++;
    return 0;
}

/* Opens the next file to read (or hashes the next symlink at once). A member that stopped being
 * what the listing saw means a writer is at work: it is marked changed, not an error. */
static int open_next(struct agent_ckpt_hash *h)
{
    const char *rel = h->files != NULL ? h->files[h->next] : NULL;
    char path[PATH_MAX];
    struct stat st;
    int rc;

    rc = rel != NULL ? agent_path_fmt(path, sizeof(path), "%s/%s", h->root, rel)
                     : agent_path_fmt(path, sizeof(path), "%s", h->root);
    if (rc != 0)
        return rc;
    if (lstat(path, &st) != 0)
        return -errno;
    if (rel != NULL && S_ISLNK(st.st_mode))
        return hash_link(h, path, rel);
    h->fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (h->fd < 0 && errno != ELOOP)
        return -errno;
    if (h->fd >= 0 && fstat(h->fd, &st) != 0) {
        rc = -errno;
        close(h->fd);
        h->fd = -1;
        return rc;
    }
    if (h->fd < 0 || !S_ISREG(st.st_mode)) { /* replaced since it was listed */
        h->changed = 1;
        if (h->fd >= 0)
            close(h->fd);
        h->fd = -1;
        h->next++;
        return 0;
    }
    h->file_size = (uint64_t)st.st_size;
    h->file_read = 0;
    if (rel != NULL)
        hash_header(h, rel, h->file_size);
    return 0;
}

static void finish_file(struct agent_ckpt_hash *h)
{
    if (h->file_read != h->file_size)
        h->changed = 1; /* truncated or grown while we read it */
    close(h->fd);
    h->fd = -1;
    h->next++;
}

/* Opening a file costs the budget this much too, so that a step over a directory of many tiny
 * files stays as short as one over a few large ones. */
#define OPEN_COST 4096

int agent_ckpt_hash_step(struct agent_ckpt_hash *h, size_t budget, int *finished)
{
    size_t used = 0;
    int rc = 0;

    while (rc == 0 && !h->finished && (budget == 0 || used < budget)) {
        if (h->fd < 0) {
            if (h->next == h->nfiles)
                h->finished = 1;
            else
                rc = open_next(h);
            used += OPEN_COST;
            continue;
        }
        size_t want = READ_CHUNK;
        if (budget != 0 && budget - used < want)
            want = budget - used;
        ssize_t n = read(h->fd, h->buf, want);
        if (n < 0 && errno != EINTR)
            rc = -errno;
        if (n == 0)
            finish_file(h);
        if (n <= 0)
            continue;
        agent_ckpt_xxh3_update(h->state, h->buf, (size_t)n);
        h->hashed += (uint64_t)n;
        h->file_read += (uint64_t)n;
        used += (size_t)n;
    }
    *finished = h->finished;
    return rc;
}

int agent_ckpt_hash_end(struct agent_ckpt_hash *h, struct agent_ckpt_entry *entry)
{
    int rc = 0;

    if (!h->finished) {
        rc = -EINVAL;
    } else if (h->changed || h->hashed != h->listed) {
        rc = -EBUSY;
    } else {
        *entry = h->entry;
        entry->size = h->hashed;
        entry->checksum = XXH3_64bits_digest(h->state);
        entry->recorded_ns = (int64_t)mc_wall_ns();
    }
    agent_ckpt_hash_close(h);
    return rc;
}

int agent_ckpt_scan_entry(const char *dir, const char *name, struct agent_ckpt_entry *entry)
{
    struct agent_ckpt_hash h;
    int finished = 0;
    int rc = agent_ckpt_hash_begin(&h, dir, name);

    if (rc != 0)
        return rc;
    rc = agent_ckpt_hash_step(&h, 0, &finished);
    if (rc != 0) {
        agent_ckpt_hash_close(&h);
        return rc;
    }
    return agent_ckpt_hash_end(&h, entry);
}
