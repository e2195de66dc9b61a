/* The checkpoint watcher's jobs (ckptwatch_priv.h): everything that reads, hashes, copies,
 * fsyncs or removes runs here, in libuv's thread pool, one job at a time so that two never race
 * on the same files. A job reads only what the loop does not change while it runs: the
 * watcher's paths and options (set at init) and the job's own copies of the registries. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckptwatch_priv.h"
#include "path.h"

void agent__ckptwatch_line(struct agent_ckptwatch_lines *l, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line))
        n = sizeof(line) - 1;
    if (l->len + (size_t)n + 2 > l->cap) {
        size_t cap = (l->cap ? l->cap * 2 : 1024) + (size_t)n;
        char *t = realloc(l->text, cap);
        if (t == NULL)
            return;
        l->text = t;
        l->cap = cap;
    }
    memcpy(l->text + l->len, line, (size_t)n);
    l->len += (size_t)n;
    l->text[l->len++] = '\n';
    l->text[l->len] = '\0';
}

struct agent_ckptwatch_job *agent__ckptwatch_job_new(struct agent_ckptwatch *w,
                                                     enum agent_ckptwatch_job_kind kind)
{
    struct agent_ckptwatch_job *j = calloc(1, sizeof(*j));

    if (j == NULL)
        return NULL;
    j->w = w;
    j->kind = kind;
    j->req.data = j;
    atomic_init(&j->cancel, 0);
    agent_ckpt_registry_init(&j->snap);
    agent_ckpt_registry_init(&j->snap_good);
    agent_ckpt_registry_init(&j->notify);
    return j;
}

void agent__ckptwatch_job_free(struct agent_ckptwatch_job *j)
{
    if (j == NULL)
        return;
    agent_ckpt_registry_close(&j->snap);
    agent_ckpt_registry_close(&j->snap_good);
    agent_ckpt_registry_close(&j->notify);
    free(j->names);
    free(j->subdirs);
    free(j->subdepth);
    free(j->lines.text);
    free(j->bad);
    free(j);
}

/* --- SCAN ------------------------------------------------------------------------------ */

static int push_name(struct agent_ckptwatch_job *j, size_t *cap, const char *name)
{
    if (j->nnames == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        void *v = realloc(j->names, c * sizeof(*j->names));
        if (v == NULL)
            return -ENOMEM;
        j->names = v;
        *cap = c;
    }
    snprintf(j->names[j->nnames++], sizeof(*j->names), "%s", name);
    return 0;
}

static void push_subdir(struct agent_ckptwatch_job *j, size_t *cap, const char *rel, int depth)
{
    if (j->nsubdirs == AGENT_CKPTNOTIFY_MAX_WATCHES || strlen(rel) >= sizeof(*j->subdirs))
        return;
    if (j->nsubdirs == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        void *v = realloc(j->subdirs, c * sizeof(*j->subdirs));
        void *d = realloc(j->subdepth, c);
        if (v != NULL)
            j->subdirs = v;
        if (d != NULL)
            j->subdepth = d;
        if (v == NULL || d == NULL)
            return;
        *cap = c;
    }
    snprintf(j->subdirs[j->nsubdirs], sizeof(*j->subdirs), "%s", rel);
    j->subdepth[j->nsubdirs++] = (unsigned char)depth;
}

/* The directories inside entry top, for watches (one level below it). */
static void scan_subdirs(struct agent_ckptwatch_job *j, size_t *cap, const char *top)
{
    char path[PATH_MAX], rel[PATH_MAX];
    struct dirent *de;
    DIR *d;

    push_subdir(j, cap, top, 1);
    if (agent_path_fmt(path, sizeof(path), "%s/%s", j->w->dir, top) != 0 ||
        (d = opendir(path)) == NULL)
        return;
    while ((de = readdir(d)) != NULL)
        if (de->d_type == DT_DIR && strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
            agent_path_fmt(rel, sizeof(rel), "%s/%s", top, de->d_name) == 0)
            push_subdir(j, cap, rel, 2);
    closedir(d);
}

static void scan_work(struct agent_ckptwatch_job *j)
{
    size_t cap = 0, subcap = 0;
    struct dirent *de;
    DIR *d = opendir(j->w->dir);

    if (d == NULL) {
        j->rc = -errno;
        return;
    }
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        char path[PATH_MAX];

        if (de->d_name[0] == '.' || !agent_ckpt_name_valid(de->d_name) ||
            agent_ckpt_name_is_temp(de->d_name) || push_name(j, &cap, de->d_name) != 0)
            continue;
        if (agent_path_fmt(path, sizeof(path), "%s/%s", j->w->dir, de->d_name) == 0 &&
            lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            scan_subdirs(j, &subcap, de->d_name);
    }
    closedir(d);
}

/* --- PRUNE, SAVE, COPY ------------------------------------------------------------------- */

static int remove_in(const char *dir, const char *name)
{
    char path[PATH_MAX];
    int rc = agent_path_fmt(path, sizeof(path), "%s/%s", dir, name);

    return rc != 0 ? rc : agent_ckpt_remove_path(path);
}

static void prune_work(struct agent_ckptwatch_job *j)
{
    for (size_t i = 0; i < j->nnames; i++) {
        int rc = remove_in(j->w->dir, j->names[i]);
        if (rc != 0 && rc != -ENOENT)
            agent__ckptwatch_line(&j->lines, "checkpoint %s not pruned: %s", j->names[i],
                                  strerror(-rc));
        rc = remove_in(j->w->gooddir, j->names[i]);
        if (rc != 0 && rc != -ENOENT)
            agent__ckptwatch_line(&j->lines, "last good copy of %s not removed: %s", j->names[i],
                                  strerror(-rc));
    }
}

static void save_work(struct agent_ckptwatch_job *j)
{
    int rc = agent_ckpt_registry_save(&j->snap, j->w->registry_path);
    int rc2 = agent_ckpt_registry_save(&j->snap_good, j->w->good_path);

    j->rc = rc != 0 ? rc : rc2;
}

/* --- PICK -------------------------------------------------------------------------------- */

struct cand {
    const struct agent_ckpt_entry *e;
    int copy;
};

static int cand_cmp(const void *pa, const void *pb)
{
    const struct cand *a = pa, *b = pb;

    if (a->e->step != b->e->step)
        return a->e->step > b->e->step ? -1 : 1;
    if (a->e->recorded_ns != b->e->recorded_ns)
        return a->e->recorded_ns > b->e->recorded_ns ? -1 : 1;
    return a->copy - b->copy; /* the file in place first, then its copy */
}

static void add_bad(struct agent_ckptwatch_job *j, const struct agent_ckpt_entry *e,
                    const char *why)
{
    struct agent_ckptwatch_bad *v = realloc(j->bad, (j->nbad + 1) * sizeof(*v));

    if (v == NULL)
        return;
    j->bad = v;
    v[j->nbad].e = *e;
    snprintf(v[j->nbad].why, sizeof(v[j->nbad].why), "%s", why);
    j->nbad++;
}

/* Whether e's version is the file in place, why saying how it fails otherwise. An entry of the
 * same name and checksum the pick already found bad is not hashed again: its reason stands. */
static int in_place(struct agent_ckptwatch_job *j, const struct agent_ckpt_entry *e, char *why,
                    size_t len)
{
    for (size_t i = 0; i < j->nbad; i++) {
        const struct agent_ckpt_entry *b = &j->bad[i].e;
        if (strcmp(b->name, e->name) == 0 && b->checksum == e->checksum && b->size == e->size) {
            snprintf(why, len, "%s", j->bad[i].why);
            return 0;
        }
    }
    return agent_ckpt_entry_verify(e, j->w->dir, why, len) == 0;
}

/* What the pick found wrong with the file in place of name, newest first, if it tried it. */
static void in_place_why(struct agent_ckptwatch_job *j, const char *name, char *why, size_t len)
{
    for (size_t i = j->nbad; i-- > 0;) {
        if (strcmp(j->bad[i].e.name, name) == 0) {
            snprintf(why, len, "%s", j->bad[i].why);
            return;
        }
    }
}

/* Puts the last good copy c back in place; 1 when it is chosen. */
static int try_copy(struct agent_ckptwatch_job *j, const struct agent_ckpt_entry *c)
{
    char why[256], place[256];
    struct stat st;
    char path[PATH_MAX];

    if (agent_ckpt_entry_verify(c, j->w->gooddir, why, sizeof(why)) != 0) {
        agent__ckptwatch_line(&j->lines, "last good copy of %s skipped: %s", c->name, why);
        return 0;
    }
    if (in_place(j, c, place, sizeof(place))) {
        j->e = *c; /* the file in place is that version already */
        return 1;
    }
    in_place_why(j, c->name, place, sizeof(place));
    if (agent_ckpt_restore_copy(j->w->dir, j->w->gooddir, c, why, sizeof(why)) != 0) {
        agent__ckptwatch_line(&j->lines, "checkpoint %s not restored from its last good copy: %s",
                              c->name, why);
        return 0;
    }
    agent__ckptwatch_line(&j->lines,
                          "checkpoint %s restored from its last good copy (step %lld, %" PRIu64
                          " bytes, xxh3 %016" PRIx64 "): the file in place: %s",
                          c->name, (long long)c->step, c->size, c->checksum, place);
    j->e = *c;
    if (agent_path_fmt(path, sizeof(path), "%s/%s", j->w->dir, c->name) == 0 &&
        lstat(path, &st) == 0 && S_ISREG(st.st_mode))
        j->e.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    j->restored = 1;
    return 1;
}

/* A last good copy of an entry that is not the one resumed from (Lightning's last.ckpt when
 * epoch=..-step=...ckpt is newer) is still put back when its file in place was cut: a script
 * that reads its fixed path ("last") must not find the torn one. The file in place is left
 * when it is the version recorded (newer than the copy) or the copy's. */
static void restore_others(struct agent_ckptwatch_job *j)
{
    char why[256], place[256];

    for (size_t i = 0; i < j->snap_good.n; i++) {
        const struct agent_ckpt_entry *c = &j->snap_good.entries[i];
        const struct agent_ckpt_entry *e = agent_ckpt_registry_find(&j->snap, c->name);

        if (j->rc == 0 && strcmp(c->name, j->e.name) == 0)
            continue;
        if ((e != NULL && in_place(j, e, place, sizeof(place))) ||
            in_place(j, c, place, sizeof(place)) ||
            agent_ckpt_entry_verify(c, j->w->gooddir, why, sizeof(why)) != 0)
            continue;
        if (agent_ckpt_restore_copy(j->w->dir, j->w->gooddir, c, why, sizeof(why)) != 0) {
            agent__ckptwatch_line(
                &j->lines, "checkpoint %s not restored from its last good copy: %s", c->name, why);
            continue;
        }
        agent__ckptwatch_line(&j->lines,
                              "checkpoint %s restored from its last good copy (step %lld, %" PRIu64
                              " bytes, xxh3 %016" PRIx64 "): the file in place: %s",
                              c->name, (long long)c->step, c->size, c->checksum, place);
        agent_ckpt_registry_add(&j->notify, c); /* the registry's version of it now */
    }
}

static void pick_work(struct agent_ckptwatch_job *j)
{
    size_t n = j->snap.n + j->snap_good.n, k = 0;
    struct cand *c = calloc(n ? n : 1, sizeof(*c));
    char why[256];

    j->rc = -ENOENT;
    if (c == NULL) {
        j->rc = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < j->snap.n; i++)
        if (j->snap.entries[i].part == 0) /* a part: the server decides (ASSIGN.resume_parts) */
            c[k++] = (struct cand){&j->snap.entries[i], 0};
    n = k + j->snap_good.n;
    for (size_t i = 0; i < j->snap_good.n; i++)
        c[k++] = (struct cand){&j->snap_good.entries[i], 1};
    qsort(c, n, sizeof(*c), cand_cmp);
    for (size_t i = 0; i < n && j->rc != 0; i++) {
        if (c[i].copy) {
            if (try_copy(j, c[i].e))
                j->rc = 0;
            continue;
        }
        if (agent_ckpt_entry_verify(c[i].e, j->w->dir, why, sizeof(why)) == 0) {
            j->e = *c[i].e;
            j->rc = 0;
            break;
        }
        agent__ckptwatch_line(&j->lines, "checkpoint %s skipped: %s", c[i].e->name, why);
        add_bad(j, c[i].e, why);
    }
    free(c);
    restore_others(j);
}

/* --- the queue ----------------------------------------------------------------------------- */

static void work_cb(uv_work_t *req)
{
    struct agent_ckptwatch_job *j = req->data;

    switch (j->kind) {
    case CKW_EXAM:
    case CKW_PART:
        agent_ckpt_examine(&j->x);
        break;
    case CKW_SCAN:
        scan_work(j);
        break;
    case CKW_SAVE:
        save_work(j);
        break;
    case CKW_PRUNE:
        prune_work(j);
        break;
    case CKW_COPY:
        j->cstats.cancel = &j->cancel;
        j->rc = agent_ckpt_keep_copy(j->w->dir, j->w->gooddir, &j->e, &j->cstats, j->why,
                                     sizeof(j->why));
        break;
    case CKW_PICK:
        pick_work(j);
        break;
    case CKW_BARRIER:
        break;
    }
}

static void kick(struct agent_ckptwatch *w);

static void after_cb(uv_work_t *req, int status)
{
    struct agent_ckptwatch_job *j = req->data;
    struct agent_ckptwatch *w = j->w;

    (void)status; /* never cancelled: uv_cancel is not used */
    w->running = NULL;
    agent__ckptwatch_job_done(w, j);
    agent__ckptwatch_job_free(j);
    kick(w);
    if (w->running == NULL && w->head == NULL)
        agent__ckptwatch_idle(w);
}

static void kick(struct agent_ckptwatch *w)
{
    struct agent_ckptwatch_job *j = w->head;

    if (w->running != NULL || j == NULL)
        return;
    w->head = j->next;
    j->next = NULL;
    j->started = 1;
    j->start_ms = uv_now(w->loop);
    w->running = j;
    if (j->kind == CKW_EXAM) { /* what the registry holds now, not when it was queued */
        const struct agent_ckpt_entry *known = agent_ckpt_registry_find(&w->reg, j->x.name);

        j->x.have_known = known != NULL;
        if (known != NULL)
            j->x.known = *known;
    }
    if (uv_queue_work(w->loop, &j->req, work_cb, after_cb) != 0) {
        work_cb(&j->req); /* cannot happen with a valid loop; never lose a save */
        after_cb(&j->req, 0);
    }
}

void agent__ckptwatch_enqueue(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    struct agent_ckptwatch_job **p = &w->head;

    while (*p != NULL)
        p = &(*p)->next;
    j->next = NULL;
    *p = j;
    kick(w);
}

void agent__ckptwatch_unqueue(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    for (struct agent_ckptwatch_job **p = &w->head; *p != NULL; p = &(*p)->next) {
        if (*p == j) {
            *p = j->next;
            j->next = NULL;
            return;
        }
    }
}
