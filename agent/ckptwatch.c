#include "ckptwatch.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "escape.h"
#include "safefile.h"

/* Checkpoint names are whatever the training script chose, or another node through a shared
 * registry: a newline or an ESC sequence in one must not forge a log line (common/escape.h).
 * The agent's log line holds 1 KiB: that is all that is kept. */
static void emit(struct agent_ckptwatch *w, const char *line)
{
    char shown[2048];

    mc_escape(line, shown, sizeof(shown));
    w->log(w->data, shown);
}

static void logf_(struct agent_ckptwatch *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void logf_(struct agent_ckptwatch *w, const char *fmt, ...)
{
    char line[PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    emit(w, line);
}

static void log_line(void *arg, const char *line)
{
    struct agent_ckptwatch *w = arg;
    emit(w, line);
}

static const struct agent_ckpt_entry *find(const struct agent_ckptwatch *w, const char *name)
{
    for (size_t i = 0; i < w->reg.n; i++)
        if (strcmp(w->reg.entries[i].name, name) == 0)
            return &w->reg.entries[i];
    return NULL;
}

enum origin { FROM_STARTUP, FROM_SYNC, FROM_RENAME };

/* Records one entry. An entry already in the registry is recorded again only when a rename put
 * a new one in place under the same name (a writer reusing "latest.pt"): any other change to
 * a recorded checkpoint — bytes appended, truncated, rewritten in place — is damage, and
 * recording it would make the damaged file verify and let pruning delete the good ones. */
/* --keep-checkpoints: prunes w's registry; returns the entries it held before (to be given to
 * report_pruned, which frees them), or an empty registry when nothing may be pruned. */
static struct agent_ckpt_registry prune(struct agent_ckptwatch *w)
{
    struct agent_ckpt_registry before;

    agent_ckpt_registry_init(&before);
    if (w->keep == 0)
        return before;
    for (size_t i = 0; w->pruned_cb != NULL && i < w->reg.n; i++)
        if (agent_ckpt_registry_add(&before, &w->reg.entries[i]) != 0)
            break; /* out of memory: a prune then goes unreported */
    agent_ckpt_registry_prune(&w->reg, w->dir, w->keep, log_line, w);
    return before;
}

/* Tells pruned_cb of each entry of before that the registry no longer holds; frees before. */
static void report_pruned(struct agent_ckptwatch *w, struct agent_ckpt_registry *before)
{
    for (size_t i = 0; i < before->n; i++)
        if (find(w, before->entries[i].name) == NULL)
            w->pruned_cb(w->data, &before->entries[i]);
    agent_ckpt_registry_close(before);
}

static int worth_recording(const char *name)
{
    return !agent_ckpt_name_is_temp(name) && agent_ckpt_name_valid(name);
}

/* The rest of recording name, once scanned (rc, e). */
static void record_scanned(struct agent_ckptwatch *w, const char *name, int rc,
                           const struct agent_ckpt_entry *scanned, enum origin from)
{
    struct agent_ckpt_entry e = *scanned;
    const struct agent_ckpt_entry *old = find(w, name);

    if (rc == -ENOENT || rc == -EAGAIN || rc == -EBUSY)
        return; /* gone again, a temporary name, or still being written: a later event */
    if (rc != 0) {
        logf_(w, "checkpoint %s not recorded: %s", name, strerror(-rc));
        return;
    }
    if (old != NULL && old->size == e.size && old->checksum == e.checksum)
        return;
    if (agent_ckpt_registry_add(&w->reg, &e) != 0)
        return;
    logf_(w, "checkpoint %s recorded%s (step %lld, %llu bytes, xxh3 %016llx)", name,
          from == FROM_STARTUP ? " at start (was there before)" : "", (long long)e.step,
          (unsigned long long)e.size, (unsigned long long)e.checksum);
    struct agent_ckpt_registry gone = prune(w);

    if ((rc = agent_ckpt_registry_save(&w->reg, w->registry_path)) != 0)
        logf_(w, "cannot save %s: %s", w->registry_path, strerror(-rc));
    report_pruned(w, &gone);
    /* after the save: a replica's receiver sharing the directory must find it in the file */
    if (w->recorded_cb)
        w->recorded_cb(w->data, &e);
}

/* Records name at once, hashing it on the loop: for the scans at start and sync. */
static void record(struct agent_ckptwatch *w, const char *name, enum origin from)
{
    struct agent_ckpt_entry e;
    int rc;

    if (!worth_recording(name) || (find(w, name) != NULL && from != FROM_RENAME))
        return;
    rc = agent_ckpt_scan_entry(w->dir, name, &e);
    record_scanned(w, name, rc, &e, from);
}

/* --- entries renamed into place: hashed in libuv's pool, one at a time, in order ------------
 * A checkpoint lands while the workers train and the agent beats: hashing it on the loop held
 * the loop ~0.2-0.5 s for a directory of 30,000 small files and 3 s for a 1 GiB sparse file
 * here (its holes read at ~0.4 GB/s), so the server heard nothing from the agent meanwhile. */

static void scan_work(uv_work_t *req)
{
    struct agent_ckptwatch *w = req->data;

    w->scan_rc = agent_ckpt_scan_entry(w->dir, w->scan_name, &w->scanned);
}

static void scan_next(struct agent_ckptwatch *w);

static void scan_done(uv_work_t *req, int status)
{
    struct agent_ckptwatch *w = req->data;

    w->scanning = 0;
    if (!w->open) { /* closed meanwhile: the handle's close may have waited for this */
        if (w->handle_closed && w->close_cb)
            w->close_cb(w->data);
        return;
    }
    /* a node that stopped recording meanwhile drops it; the next recorder's scan finds it */
    if (status == 0 && w->recording)
        record_scanned(w, w->scan_name, w->scan_rc, &w->scanned, FROM_RENAME);
    scan_next(w);
}

static void scan_next(struct agent_ckptwatch *w)
{
    struct agent_ckptwatch_name *q = w->queue;

    if (w->scanning || q == NULL || !w->open)
        return;
    w->queue = q->next;
    snprintf(w->scan_name, sizeof(w->scan_name), "%s", q->name);
    free(q);
    w->scanning = 1;
    w->work.data = w;
    (void)uv_queue_work(w->event.loop, &w->work, scan_work, scan_done); /* fails only on NULL */
}

/* Queues name (once: a name waiting already is scanned as it is then). */
static void record_later(struct agent_ckptwatch *w, const char *name)
{
    struct agent_ckptwatch_name **p = &w->queue, *q;

    if (!worth_recording(name))
        return;
    for (; *p != NULL; p = &(*p)->next)
        if (strcmp((*p)->name, name) == 0)
            return;
    if ((q = calloc(1, sizeof(*q))) == NULL) {
        record(w, name, FROM_RENAME); /* out of memory: on the loop rather than not at all */
        return;
    }
    snprintf(q->name, sizeof(q->name), "%s", name);
    *p = q;
    scan_next(w);
}

static void scan_dir(struct agent_ckptwatch *w, enum origin from)
{
    DIR *d = opendir(w->dir);
    struct dirent *de;

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            record(w, de->d_name, from);
    closedir(d);
}

/* inotify reports a rename into place (IN_MOVED_TO) or a creation as UV_RENAME; writes into
 * a file (UV_CHANGE) are not checkpoints landing: the convention is write, fsync, rename. */
static void on_event(uv_fs_event_t *e, const char *name, int events, int status)
{
    struct agent_ckptwatch *w = e->data;
    if (status == 0 && name != NULL && w->recording && (events & UV_RENAME))
        record_later(w, name);
}

/* --checkpoint-dir and its .muster/ (the registry): created if missing, refused when another
 * local user owns or can write them or a directory above (common/safefile.h): the registry is
 * replaced by rename and workers write checkpoints by path. One line says why. */
static int open_dirs(struct agent_ckptwatch *w, const char *dir, const char *meta)
{
    char err[PATH_MAX + 256];
    int rc = mc_dir_open(dir, 0755, "--checkpoint-dir", NULL, NULL, err, sizeof(err));

    if (rc == 0)
        rc = mc_dir_open(meta, 0700, "--checkpoint-dir", NULL, NULL, err, sizeof(err));
    if (rc != 0)
        logf_(w, "error: %s", err);
    return rc;
}

int agent_ckptwatch_init(uv_loop_t *loop, struct agent_ckptwatch *w, const char *dir, unsigned keep,
                         const struct agent_ckptwatch_cbs *cbs, void *data)
{
    char meta[PATH_MAX];
    int rc;

    memset(w, 0, sizeof(*w));
    w->keep = keep;
    w->log = cbs->log;
    w->recorded_cb = cbs->recorded_cb;
    w->bad_cb = cbs->bad_cb;
    w->pruned_cb = cbs->pruned_cb;
    w->data = data;
    w->recording = 0; /* until this node is known to hold group rank 0 */
    agent_ckpt_registry_init(&w->reg);
    if (snprintf(w->dir, sizeof(w->dir), "%s", dir) >= (int)sizeof(w->dir) ||
        snprintf(meta, sizeof(meta), "%s/.muster", dir) >= (int)sizeof(meta) ||
        snprintf(w->registry_path, sizeof(w->registry_path), "%s/registry.json", meta) >=
            (int)sizeof(w->registry_path))
        return -ENAMETOOLONG;
    if ((rc = open_dirs(w, dir, meta)) != 0)
        return rc;
    rc = agent_ckpt_registry_load(&w->reg, w->registry_path);
    if (rc != 0 && rc != -ENOENT)
        logf_(w, "ignoring %s: %s", w->registry_path, strerror(-rc));
    uv_fs_event_init(loop, &w->event);
    w->event.data = w;
    w->open = 1;
    if ((rc = uv_fs_event_start(&w->event, on_event, dir, 0)) != 0) {
        logf_(w, "error: cannot watch --checkpoint-dir %s: %s", dir, uv_strerror(rc));
        agent_ckptwatch_close(w, NULL);
        return rc;
    }
    return 0;
}

/* The registry file is written only by the node that records; the others read it. */
static void reload(struct agent_ckptwatch *w)
{
    int rc = agent_ckpt_registry_load(&w->reg, w->registry_path);
    if (rc != 0 && rc != -ENOENT)
        logf_(w, "ignoring %s: %s", w->registry_path, strerror(-rc));
}

void agent_ckptwatch_set_recording(struct agent_ckptwatch *w, int recording)
{
    if (recording && !w->recording) {
        /* taking over from another node (or starting): its latest records first, then what
         * it never recorded, trusted as it is now (logged) */
        reload(w);
        w->recording = 1;
        scan_dir(w, FROM_STARTUP);
    }
    w->recording = recording;
}

void agent_ckptwatch_sync(struct agent_ckptwatch *w)
{
    if (w->recording)
        scan_dir(w, FROM_SYNC);
    else
        reload(w);
}

int agent_ckptwatch_adopt(struct agent_ckptwatch *w, const struct agent_ckpt_entry *e)
{
    int rc;

    if (!w->recording)
        reload(w); /* a registry file another node writes (shared directory) stays whole */
    if ((rc = agent_ckpt_registry_add(&w->reg, e)) != 0) {
        logf_(w, "replica %s not recorded: %s", e->name, strerror(-rc));
        return rc;
    }
    struct agent_ckpt_registry gone = prune(w);

    if ((rc = agent_ckpt_registry_save(&w->reg, w->registry_path)) != 0)
        logf_(w, "cannot save %s: %s", w->registry_path, strerror(-rc));
    report_pruned(w, &gone);
    return rc;
}

int agent_ckptwatch_pick(struct agent_ckptwatch *w, struct agent_ckpt_entry *chosen)
{
    char why[256];

    /* registry entries are newest first; like agent_ckpt_registry_pick, but each bad entry
     * is also reported, so that `muster status` can show why it was passed over */
    for (size_t i = 0; i < w->reg.n; i++) {
        const struct agent_ckpt_entry *e = &w->reg.entries[i];
        if (agent_ckpt_entry_verify(e, w->dir, why, sizeof(why)) == 0) {
            *chosen = *e;
            return 0;
        }
        logf_(w, "checkpoint %s skipped: %s", e->name, why);
        if (w->bad_cb)
            w->bad_cb(w->data, e, why);
    }
    return -ENOENT;
}

static void on_closed(uv_handle_t *h)
{
    struct agent_ckptwatch *w = h->data;

    w->handle_closed = 1;
    if (!w->scanning && w->close_cb) /* else scan_done calls it: w lives until then */
        w->close_cb(w->data);
}

void agent_ckptwatch_close(struct agent_ckptwatch *w, void (*close_cb)(void *data))
{
    agent_ckpt_registry_close(&w->reg);
    while (w->queue != NULL) {
        struct agent_ckptwatch_name *q = w->queue;

        w->queue = q->next;
        free(q);
    }
    if (!w->open)
        return;
    w->open = 0;
    w->close_cb = close_cb;
    uv_close((uv_handle_t *)&w->event, on_closed);
}
