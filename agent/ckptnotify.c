#include "ckptnotify.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

/* What a checkpoint landing looks like: written and closed, renamed in or out, created,
 * changed, removed; and the watched directory itself going away. */
#define MASK                                                                                       \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_MODIFY |            \
     IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)

static void logf_(struct agent_ckptnotify *n, enum mc_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void logf_(struct agent_ckptnotify *n, enum mc_log_level level, const char *fmt, ...)
{
    char line[PATH_MAX + 256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    n->log(n->data, level, line);
}

static struct agent_ckptnotify_watch *find_wd(struct agent_ckptnotify *n, int wd)
{
    for (size_t i = 0; i < n->nw; i++)
        if (n->w[i].wd == wd)
            return &n->w[i];
    return NULL;
}

static void forget_wd(struct agent_ckptnotify *n, int wd)
{
    for (size_t i = 0; i < n->nw; i++) {
        if (n->w[i].wd == wd) {
            n->w[i] = n->w[--n->nw];
            return;
        }
    }
}

static int add(struct agent_ckptnotify *n, const char *top, const char *rel, int depth)
{
    char path[PATH_MAX];
    int wd;

    if (n->nw == AGENT_CKPTNOTIFY_MAX_WATCHES) {
        if (!n->said_full)
            logf_(n, MC_LOG_WARN,
                  "more than %d directories to watch in --checkpoint-dir: writes "
                  "below the first ones are seen by the settle rule only",
                  AGENT_CKPTNOTIFY_MAX_WATCHES);
        n->said_full = 1;
        return -ENOSPC;
    }
    if (snprintf(path, sizeof(path), "%s%s%s", n->dir, rel[0] ? "/" : "", rel) >=
            (int)sizeof(path) ||
        strlen(top) >= sizeof(n->w[0].top) || strlen(rel) >= sizeof(n->w[0].rel))
        return -ENAMETOOLONG;
    wd = inotify_add_watch(n->fd, path, MASK);
    if (wd < 0) {
        if (errno == ENOSPC && !n->said_full) {
            logf_(n, MC_LOG_WARN,
                  "out of inotify watches (fs.inotify.max_user_watches) for %s: "
                  "writes below it are seen by the settle rule only",
                  path);
            n->said_full = 1;
        }
        return -errno;
    }
    if (find_wd(n, wd) != NULL) /* the same directory again (a rename): newest names win */
        forget_wd(n, wd);
    if (n->nw == n->capw) {
        size_t cap = n->capw ? n->capw * 2 : 16;
        struct agent_ckptnotify_watch *v = realloc(n->w, cap * sizeof(*v));
        if (v == NULL) {
            inotify_rm_watch(n->fd, wd);
            return -ENOMEM;
        }
        n->w = v;
        n->capw = cap;
    }
    n->w[n->nw] = (struct agent_ckptnotify_watch){.wd = wd, .depth = depth};
    snprintf(n->w[n->nw].top, sizeof(n->w[n->nw].top), "%s", top);
    snprintf(n->w[n->nw].rel, sizeof(n->w[n->nw].rel), "%s", rel);
    n->nw++;
    return 0;
}

int agent_ckptnotify_watch(struct agent_ckptnotify *n, const char *top, const char *rel, int depth)
{
    if (!n->open || depth < 1 || depth > AGENT_CKPTNOTIFY_DEPTH)
        return -EINVAL;
    return add(n, top, rel, depth);
}

/* A directory created (or renamed) inside a watched one is watched too, so that the files a
 * trainer writes into checkpoint-N/ report their close. */
static void descend(struct agent_ckptnotify *n, const struct agent_ckptnotify_watch *w,
                    const char *name)
{
    char rel[PATH_MAX];
    const char *top = w->depth == 0 ? name : w->top;

    if (w->depth + 1 > AGENT_CKPTNOTIFY_DEPTH || (w->depth == 0 && name[0] == '.'))
        return;
    if (snprintf(rel, sizeof(rel), "%s%s%s", w->rel, w->rel[0] ? "/" : "", name) >=
        (int)sizeof(rel))
        return;
    add(n, top, rel, w->depth + 1);
}

/* A directory at the top renamed away: its watches keep their inode but not their name. */
static void drop_top(struct agent_ckptnotify *n, const char *top)
{
    for (size_t i = 0; i < n->nw;) {
        if (n->w[i].depth > 0 && strcmp(n->w[i].top, top) == 0) {
            inotify_rm_watch(n->fd, n->w[i].wd);
            n->w[i] = n->w[--n->nw];
        } else {
            i++;
        }
    }
}

static void one_event(struct agent_ckptnotify *n, const struct inotify_event *ie)
{
    struct agent_ckptnotify_watch *w = find_wd(n, ie->wd);
    struct agent_ckptnotify_event ev = {.mask = ie->mask};
    char top[256];

    if (ie->mask & IN_Q_OVERFLOW) {
        n->cb(n->data, &ev); /* top NULL: rescan everything */
        return;
    }
    if (w == NULL)
        return;
    if (ie->mask & IN_IGNORED) { /* the directory is gone: its watch with it */
        forget_wd(n, ie->wd);
        return;
    }
    if (ie->len == 0 || ie->name[0] == '\0') {
        if (w->depth == 0)
            return;      /* DIR itself changed: nothing to record */
        ev.top = w->top; /* a watched subdirectory itself (moved, removed, chmod) */
        ev.leaf = w->top;
        n->cb(n->data, &ev);
        return;
    }
    snprintf(top, sizeof(top), "%s", w->depth == 0 ? ie->name : w->top);
    if (w->depth == 0 && (ie->mask & IN_MOVED_FROM) && (ie->mask & IN_ISDIR))
        drop_top(n, ie->name);
    if ((ie->mask & (IN_CREATE | IN_MOVED_TO)) && (ie->mask & IN_ISDIR))
        descend(n, w, ie->name);
    ev.top = top;
    ev.leaf = ie->name;
    ev.at_top = w->depth == 0;
    n->cb(n->data, &ev);
}

/* Reads at most budget bytes of events (0: until none is queued). */
static void read_events(struct agent_ckptnotify *n, size_t budget)
{
    char buf[64 << 10] __attribute__((aligned(__alignof__(struct inotify_event))));
    size_t used = 0;

    while (n->open && (budget == 0 || used < budget)) {
        ssize_t len = read(n->fd, buf, sizeof(buf));
        if (len <= 0)
            return; /* EAGAIN: nothing more; errors: the next poll says */
        used += (size_t)len;
        for (char *p = buf; n->open && p < buf + len;) {
            const struct inotify_event *ie = (const struct inotify_event *)p;
            one_event(n, ie);
            p += sizeof(*ie) + ie->len;
        }
    }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct agent_ckptnotify *n = h->data;

    (void)events;
    if (status == 0)
        read_events(n, AGENT_CKPTNOTIFY_READ_BUDGET);
}

void agent_ckptnotify_drain(struct agent_ckptnotify *n)
{
    if (n->open)
        read_events(n, 0);
}

int agent_ckptnotify_init(uv_loop_t *loop, struct agent_ckptnotify *n, const char *dir,
                          agent_ckptnotify_cb cb, agent_ckptnotify_log_cb log, void *data)
{
    int rc;

    memset(n, 0, sizeof(*n));
    n->cb = cb;
    n->log = log;
    n->data = data;
    if (snprintf(n->dir, sizeof(n->dir), "%s", dir) >= (int)sizeof(n->dir))
        return -ENAMETOOLONG;
    n->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (n->fd < 0)
        return -errno;
    if ((rc = add(n, "", "", 0)) != 0 || (rc = uv_poll_init(loop, &n->poll, n->fd)) != 0) {
        close(n->fd);
        free(n->w);
        return rc;
    }
    n->poll.data = n;
    n->open = 1;
    if ((rc = uv_poll_start(&n->poll, UV_READABLE, on_poll)) != 0) {
        agent_ckptnotify_close(n, NULL);
        return rc;
    }
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    struct agent_ckptnotify *n = h->data;

    close(n->fd);
    n->fd = -1;
    free(n->w);
    n->w = NULL;
    n->nw = n->capw = 0;
    if (n->close_cb != NULL)
        n->close_cb(n->data);
}

void agent_ckptnotify_close(struct agent_ckptnotify *n, void (*close_cb)(void *data))
{
    if (!n->open) {
        if (close_cb != NULL)
            close_cb(n->data);
        return;
    }
    n->open = 0;
    n->close_cb = close_cb;
    uv_close((uv_handle_t *)&n->poll, on_closed);
}
