#include "ckptwatch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>

#include "ckptwatch_priv.h"
#include "escape.h"
#include "safefile.h"

/* A close-after-write or a rename is looked at this soon: events of one write come in bursts. */
#define QUICK_MS 50

/* Checkpoint names are whatever the training script chose, or another node through a shared
 * registry: a newline or an ESC sequence in one must not forge a log line (common/escape.h). */
static void emit(struct agent_ckptwatch *w, enum mc_log_level level, const char *line)
{
    char shown[2048];

    w->log(w->data, level, mc_format_untrusted(shown, sizeof(shown), "%s", line));
}

static void logf_(struct agent_ckptwatch *w, enum mc_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void logf_(struct agent_ckptwatch *w, enum mc_log_level level, const char *fmt, ...)
{
    char line[PATH_MAX + 256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    emit(w, level, line);
}

static void emit_lines(struct agent_ckptwatch *w, const struct agent_ckptwatch_lines *l)
{
    for (char *p = l->text, *nl; p != NULL && *p != '\0'; p = nl + 1) {
        if ((nl = strchr(p, '\n')) == NULL)
            break;
        *nl = '\0';
        emit(w, MC_LOG_INFO, p); /* the jobs' lines are all information */
    }
}

static size_t index_of(const struct agent_ckpt_registry *reg, const char *name)
{
    const struct agent_ckpt_entry *e = agent_ckpt_registry_find(reg, name);

    return e != NULL ? (size_t)(e - reg->entries) : reg->n;
}

static struct agent_ckptwatch_job *new_job(struct agent_ckptwatch *w,
                                           enum agent_ckptwatch_job_kind kind)
{
    struct agent_ckptwatch_job *j = agent__ckptwatch_job_new(w, kind);

    if (j == NULL)
        logf_(w, MC_LOG_ERROR, "out of memory for a checkpoint job");
    return j;
}

static int snapshot(struct agent_ckpt_registry *dst, const struct agent_ckpt_registry *src)
{
    for (size_t i = 0; i < src->n; i++)
        if (agent_ckpt_registry_add(dst, &src->entries[i]) != 0)
            return -ENOMEM;
    return 0;
}

/* --- pending entries ---------------------------------------------------------------------- */

static struct agent_ckptwatch_pending *pend_find(struct agent_ckptwatch *w, const char *name)
{
    for (size_t i = 0; i < w->npend; i++)
        if (strcmp(w->pend[i].name, name) == 0)
            return &w->pend[i];
    return NULL;
}

static void pend_drop(struct agent_ckptwatch *w, struct agent_ckptwatch_pending *p)
{
    size_t i = (size_t)(p - w->pend);

    if (p->job != NULL)
        atomic_store(&p->job->cancel, 1);
    /* kept in arrival order: the timer examines what is due in the order it was written */
    memmove(&w->pend[i], &w->pend[i + 1], (w->npend - i - 1) * sizeof(*w->pend));
    w->npend--;
}

static struct agent_ckptwatch_pending *pend_get(struct agent_ckptwatch *w, const char *name)
{
    struct agent_ckptwatch_pending *p = pend_find(w, name);

    if (p != NULL)
        return p;
    if (w->npend == AGENT_CKPTWATCH_MAX_PENDING)
        return NULL;
    if (w->npend == w->cappend) {
        size_t cap = w->cappend ? w->cappend * 2 : 16;
        void *v = realloc(w->pend, cap * sizeof(*w->pend));
        if (v == NULL)
            return NULL;
        w->pend = v;
        w->cappend = cap;
    }
    p = &w->pend[w->npend++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->seq = ++w->seq;
    return p;
}

/* A flush or a stop: nothing waits any more. cancel: the examinations queued for them too
 * (a stop); else those run, and report as if no event had come (a flush). */
static void pend_clear(struct agent_ckptwatch *w, int cancel)
{
    for (size_t i = 0; !cancel && i < w->npend; i++)
        w->pend[i].job = NULL;
    while (w->npend > 0)
        pend_drop(w, &w->pend[w->npend - 1]);
}

static void on_timer(uv_timer_t *t);

static void arm(struct agent_ckptwatch *w)
{
    uint64_t due = 0, now = uv_now(w->loop);

    if (!w->open)
        return;
    for (size_t i = 0; i < w->npend; i++)
        if (w->pend[i].job == NULL && w->pend[i].due_ms != UINT64_MAX &&
            (due == 0 || w->pend[i].due_ms < due))
            due = w->pend[i].due_ms;
    if (due == 0)
        uv_timer_stop(&w->timer);
    else
        uv_timer_start(&w->timer, on_timer, due > now ? due - now : 0, 0);
}

/* --- examinations ------------------------------------------------------------------------- */

/* Hashing has fallen behind when one job runs this long: then a waiting examination of an
 * older checkpoint (by step) is dropped for a newer one, since hashing every checkpoint of a
 * trainer that writes faster than they hash would queue forever. */
#define SUPERSEDE_MS 1000u

static void supersede(struct agent_ckptwatch *w, const char *name)
{
    int64_t step = agent_ckpt_parse_step(name);

    if (w->running == NULL || uv_now(w->loop) - w->running->start_ms < w->supersede_ms)
        return;
    for (struct agent_ckptwatch_job *j = w->head, *next; step >= 0 && j != NULL; j = next) {
        int64_t s = j->kind == CKW_EXAM ? agent_ckpt_parse_step(j->x.name) : -1;
        struct agent_ckptwatch_pending *p;

        next = j->next;
        if (j->origin != CKW_FROM_EVENT || s < 0 || s >= step)
            continue;
        logf_(w, MC_LOG_INFO, "checkpoint %s superseded by %s before it was hashed", j->x.name,
              name);
        agent__ckptwatch_unqueue(w, j);
        if ((p = pend_find(w, j->x.name)) != NULL) { /* kept, for what the next flush knows */
            p->job = NULL;
            p->due_ms = UINT64_MAX; /* until a new event, or that flush */
        }
        agent__ckptwatch_job_free(j);
    }
}

/* distrust: an entry recorded and changed since without a write seen is not recorded again
 * (damage, not a checkpoint) but reported ALTERED. */
static struct agent_ckptwatch_job *exam(struct agent_ckptwatch *w, const char *name,
                                        enum agent_ckpt_exam_mode mode,
                                        enum agent_ckptwatch_origin origin, int distrust)
{
    struct agent_ckptwatch_job *j = new_job(w, CKW_EXAM);

    if (j == NULL)
        return NULL;
    j->origin = origin;
    snprintf(j->x.dir, sizeof(j->x.dir), "%s", w->dir);
    snprintf(j->x.name, sizeof(j->x.name), "%s", name);
    snprintf(j->x.marker, sizeof(j->x.marker), "%s", w->marker);
    j->x.mode = mode;
    j->x.distrust_known = distrust;
    j->x.cancel = &j->cancel;
    if (origin == CKW_FROM_EVENT)
        supersede(w, name);
    agent__ckptwatch_enqueue(w, j);
    return j;
}

static void on_timer(uv_timer_t *t)
{
    struct agent_ckptwatch *w = t->data;
    uint64_t now = uv_now(w->loop);

    /* exam() may supersede (drop) other pending entries, which moves the array: look the
     * entry up again by name, and start over after each one queued */
    for (size_t i = 0; i < w->npend; i++) {
        struct agent_ckptwatch_pending *p = &w->pend[i];
        struct agent_ckptwatch_job *j;
        char name[AGENT_CKPT_NAME_MAX];

        if (p->job != NULL || p->due_ms > now)
            continue;
        snprintf(name, sizeof(name), "%s", p->name);
        p->again = 0;
        j = exam(w, name, p->mode, CKW_FROM_EVENT, 0);
        if ((p = pend_find(w, name)) != NULL)
            p->job = j;
        if (j == NULL && p != NULL) /* out of memory: drop it rather than spin here */
            pend_drop(w, p);
        i = (size_t)-1;
    }
    arm(w);
}

/* --- events --------------------------------------------------------------------------------- */

static int is_marker(const struct agent_ckptwatch *w, const char *leaf)
{
    return strcmp(leaf, "trainer_state.json") == 0 || strcmp(leaf, ".metadata") == 0 ||
           (w->marker[0] != '\0' && strcmp(leaf, w->marker) == 0);
}

static void rescan(struct agent_ckptwatch *w);

static void on_notify(void *data, const struct agent_ckptnotify_event *ev)
{
    struct agent_ckptwatch *w = data;
    struct agent_ckptwatch_pending *p;
    uint64_t now = uv_now(w->loop);
    uint32_t m = ev->mask;

    if (!w->recording || !w->open)
        return;
    w->flushed = 0;
    if (ev->top == NULL) {
        rescan(w); /* the kernel's queue overflowed: events were lost */
        return;
    }
    if (agent_ckpt_name_is_temp(ev->top) || !agent_ckpt_name_valid(ev->top))
        return;
    p = pend_find(w, ev->top);
    if (ev->at_top && (m & (IN_DELETE | IN_MOVED_FROM))) {
        if (p != NULL)
            pend_drop(w, p);
        arm(w);
        return;
    }
    if ((p = pend_get(w, ev->top)) == NULL)
        return; /* full: the next flush or start examines it */
    p->last_ms = now;
    if (p->job != NULL) {
        p->again = 1;
        if (m & (IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO))
            atomic_store(&p->job->cancel, 1); /* what it reads is being rewritten */
    }
    if (ev->at_top && (m & IN_MOVED_TO)) {
        p->renamed = 1;
        p->mode = AGENT_CKPT_EXAM_RENAMED;
        p->due_ms = now + QUICK_MS;
    } else if ((m & IN_CLOSE_WRITE) && (ev->at_top || is_marker(w, ev->leaf))) {
        p->mode = p->renamed ? AGENT_CKPT_EXAM_RENAMED : AGENT_CKPT_EXAM_LAYOUT;
        p->due_ms = now + QUICK_MS;
    } else if ((m & IN_MOVED_TO) && is_marker(w, ev->leaf)) {
        p->mode = AGENT_CKPT_EXAM_LAYOUT; /* DCP: .metadata.tmp renamed to .metadata */
        p->due_ms = now + QUICK_MS;
    } else if (m & (IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM)) {
        p->renamed = 0; /* written in place after all */
        p->mode = AGENT_CKPT_EXAM_SETTLED;
        p->due_ms = now + w->settle_ms;
    } else if (p->due_ms == 0) { /* IN_ATTRIB, a member closed: the settle rule */
        p->mode = AGENT_CKPT_EXAM_SETTLED;
        p->due_ms = now + w->settle_ms;
    }
    arm(w);
}

/* --- recording ------------------------------------------------------------------------------ */

static struct agent_ckptwatch_job *save(struct agent_ckptwatch *w)
{
    struct agent_ckptwatch_job *j;
    int fresh = 0;

    /* a save not started yet is replaced by this one: the newest registry is what counts */
    for (j = w->head; j != NULL; j = j->next)
        if (j->kind == CKW_SAVE)
            break;
    if (j == NULL) {
        if ((j = new_job(w, CKW_SAVE)) == NULL)
            return NULL;
        fresh = 1;
    }
    agent_ckpt_registry_close(&j->snap);
    agent_ckpt_registry_close(&j->snap_good);
    if (snapshot(&j->snap, &w->reg) != 0 || snapshot(&j->snap_good, &w->good) != 0)
        logf_(w, MC_LOG_ERROR, "out of memory saving %s", w->registry_path);
    if (fresh)
        agent__ckptwatch_enqueue(w, j);
    return j; /* notify is the loop's alone: adding to it while the save runs is safe */
}

/* --keep-checkpoints: entries with a step older than the one just verified, beyond the newest
 * keep (a last good copy counts as one of them), leave the registry now and the disk off the
 * loop. */
static void prune(struct agent_ckptwatch *w, const char *verified)
{
    size_t idx = index_of(&w->reg, verified), first;
    unsigned keep = w->keep > w->good.n ? w->keep - (unsigned)w->good.n : 1;
    struct agent_ckptwatch_job *j;

    if (w->keep == 0 || idx == w->reg.n)
        return;
    first = keep > idx + 1 ? keep : idx + 1;
    if (w->reg.n <= first || (j = new_job(w, CKW_PRUNE)) == NULL)
        return;
    j->names = calloc(w->reg.n - first, sizeof(*j->names));
    j->snap_good.n = 0;
    for (size_t i = w->reg.n; j->names != NULL && i-- > first;) {
        struct agent_ckpt_entry e = w->reg.entries[i];

        /* a name without a step is rewritten in place (ckpt.pt, last.ckpt) or is a trainer's
         * final output (HF's model.safetensors beside its checkpoint-N/): never muster's to
         * delete */
        if (e.step < 0 || e.part != 0) /* parts: docs/FAULT_TOLERANCE.md "Sharded" */
            continue;
        snprintf(j->names[j->nnames++], sizeof(*j->names), "%s", e.name);
        agent_ckpt_registry_add(&j->snap, &e); /* for pruned_cb */
        agent_ckpt_registry_remove(&w->reg, e.name);
        agent_ckpt_registry_remove(&w->good, e.name);
        logf_(w, MC_LOG_INFO, "checkpoint %s pruned (keeping %u, newest verified %s)", e.name, keep,
              verified);
    }
    agent__ckptwatch_enqueue(w, j);
}

/* --keep-checkpoints for the parts of sharded checkpoints (this node's own and the copies it
 * keeps of others'): parts of steps older than the newest `keep` steps of which it holds a part
 * leave the registry now and the disk off the loop; pruned_cb tells the server, which stops
 * counting them. This node cannot know which step is complete everywhere (the server does), so
 * it counts steps, not parts: with keep >= 2 a step whose last copy is still on its way never
 * costs the one before it. */
static void prune_parts(struct agent_ckptwatch *w)
{
    struct agent_ckptwatch_job *j;
    unsigned steps = 0;
    int64_t last = -1, cut = -1;
    size_t n = 0;

    if (w->keep == 0)
        return;
    for (size_t i = 0; i < w->reg.n; i++) { /* newest first */
        const struct agent_ckpt_entry *e = &w->reg.entries[i];

        if (e->part == 0 || e->step < 0)
            continue;
        if (cut >= 0 && e->step < cut) {
            n++;
            continue;
        }
        if (e->step != last && ++steps == w->keep)
            cut = e->step;
        last = e->step;
    }
    if (n == 0 || (j = new_job(w, CKW_PRUNE)) == NULL)
        return;
    if ((j->names = calloc(n, sizeof(*j->names))) == NULL) {
        agent__ckptwatch_job_free(j);
        return;
    }
    for (size_t i = w->reg.n; i-- > 0;) {
        struct agent_ckpt_entry e = w->reg.entries[i];

        if (e.part == 0 || e.step < 0 || e.step >= cut)
            continue;
        snprintf(j->names[j->nnames++], sizeof(*j->names), "%s", e.name);
        agent_ckpt_registry_add(&j->snap, &e); /* for pruned_cb */
        agent_ckpt_registry_remove(&w->reg, e.name);
        logf_(w, MC_LOG_INFO,
              "checkpoint %s (part %" PRIu32 " of %" PRIu32
              ") pruned (keeping the parts of the newest %u steps)",
              e.name, e.part, e.parts, w->keep);
    }
    agent__ckptwatch_enqueue(w, j);
}

/* A name written again in place, or one that has no step (it will be): keep its last good
 * version aside, since the next write destroys the only copy. */
static void keep_copy(struct agent_ckptwatch *w, const struct agent_ckpt_entry *e, int rewritten)
{
    struct agent_ckptwatch_job *j;

    if (e->step >= 0 && !rewritten && agent_ckpt_registry_find(&w->good, e->name) == NULL)
        return;
    for (j = w->head; j != NULL; j = j->next) { /* an older version's copy not started yet */
        if (j->kind == CKW_COPY && strcmp(j->e.name, e->name) == 0) {
            j->e = *e;
            return;
        }
    }
    if (w->running != NULL && w->running->kind == CKW_COPY &&
        strcmp(w->running->e.name, e->name) == 0)
        atomic_store(&w->running->cancel, 1); /* an older version: this one replaces it */
    if ((j = new_job(w, CKW_COPY)) == NULL)
        return;
    j->e = *e;
    agent__ckptwatch_enqueue(w, j);
}

/* Whether a prune decided to remove name and has not yet: not to be recorded again. */
static int being_pruned(const struct agent_ckptwatch *w, const char *name)
{
    for (const struct agent_ckptwatch_job *j = w->head; j != NULL; j = j->next)
        for (size_t i = 0; j->kind == CKW_PRUNE && i < j->nnames; i++)
            if (strcmp(j->names[i], name) == 0)
                return 1;
    return 0;
}

static void record(struct agent_ckptwatch *w, const struct agent_ckptwatch_job *j)
{
    const struct agent_ckpt_entry *e = &j->x.entry;
    const struct agent_ckpt_entry *old = agent_ckpt_registry_find(&w->reg, e->name);
    double secs = j->x.hash_ns / 1e9;
    int rewritten = old != NULL;

    if (being_pruned(w, e->name))
        return;
    if (old != NULL && old->size == e->size && old->checksum == e->checksum) {
        struct agent_ckpt_entry same = *old; /* the same bytes, touched: remember the mtime */
        same.mtime_ns = e->mtime_ns;
        agent_ckpt_registry_add(&w->reg, &same);
        save(w);
        return;
    }
    if (agent_ckpt_registry_add(&w->reg, e) != 0)
        return;
    w->hashed_bytes += e->size;
    w->hash_ns += j->x.hash_ns;
    logf_(w, MC_LOG_INFO, "checkpoint %s recorded%s (step %lld, %llu bytes, xxh3 %016llx)", e->name,
          j->origin == CKW_FROM_STARTUP ? " at start (was there before)" : "", (long long)e->step,
          (unsigned long long)e->size, (unsigned long long)e->checksum);
    if (secs >= 1.0) /* big ones: how fast the recorder reads (docs/BENCHMARKS.md) */
        logf_(w, MC_LOG_INFO, "checkpoint %s hashed in %.2f s (%.0f MB/s)", e->name, secs,
              (double)e->size / secs / 1e6);
    prune(w, e->name);
    struct agent_ckptwatch_job *s = save(w);
    keep_copy(w, e, rewritten);
    /* once saved: a replica's receiver sharing the directory reads the registry file */
    if (s != NULL && agent_ckpt_registry_add(&s->notify, e) == 0)
        return;
    if (w->recorded_cb)
        w->recorded_cb(w->data, e);
}

static void not_recorded(struct agent_ckptwatch *w, const struct agent_ckptwatch_job *j,
                         const char *why)
{
    logf_(w, MC_LOG_INFO, "checkpoint %s not recorded: %s", j->x.name, why);
}

/* Where a pending entry goes after its examination. */
static void exam_reschedule(struct agent_ckptwatch *w, struct agent_ckptwatch_pending *p,
                            enum agent_ckpt_exam_result r)
{
    uint64_t now = uv_now(w->loop);

    if (p == NULL)
        return;
    if ((r == AGENT_CKPT_EXAM_RECORD || r == AGENT_CKPT_EXAM_UNCHANGED ||
         r == AGENT_CKPT_EXAM_GONE || r == AGENT_CKPT_EXAM_ERROR || r == AGENT_CKPT_EXAM_ALTERED) &&
        !p->again) {
        pend_drop(w, p);
        return;
    }
    if (r == AGENT_CKPT_EXAM_INCOMPLETE && p->mode == AGENT_CKPT_EXAM_SETTLED && !p->again) {
        pend_drop(w, p); /* said once; the next write brings it back */
        return;
    }
    p->mode = AGENT_CKPT_EXAM_SETTLED;
    p->due_ms = p->last_ms + w->settle_ms > now ? p->last_ms + w->settle_ms : now;
    if (p->again && r != AGENT_CKPT_EXAM_WAIT && r != AGENT_CKPT_EXAM_INCOMPLETE)
        p->due_ms = now + QUICK_MS;
    p->again = 0;
}

static void exam_done(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    struct agent_ckptwatch_pending *p = pend_find(w, j->x.name);
    enum agent_ckpt_exam_result r = j->x.result;
    int quiet = j->origin == CKW_FROM_EVENT && p != NULL && p->mode != AGENT_CKPT_EXAM_SETTLED;

    if (p != NULL && p->job == j)
        p->job = NULL;
    else /* dropped while it ran (a flush, a removal), or events after a flush's: not ours */
        p = NULL;
    if (r == AGENT_CKPT_EXAM_RECORD)
        record(w, j);
    else if (r == AGENT_CKPT_EXAM_INCOMPLETE && !quiet)
        not_recorded(w, j, j->x.why);
    else if (r == AGENT_CKPT_EXAM_WAIT && j->origin == CKW_FROM_FLUSH)
        not_recorded(w, j,
                     "written in place, and the workers stopped before it was unchanged "
                     "for --checkpoint-settle (a write they did not finish?)");
    else if (r == AGENT_CKPT_EXAM_CHANGED && j->origin != CKW_FROM_EVENT)
        not_recorded(w, j, "it changed while it was read");
    else if (r == AGENT_CKPT_EXAM_ERROR)
        not_recorded(w, j, j->x.why);
    else if (r == AGENT_CKPT_EXAM_ALTERED && j->origin == CKW_FROM_STARTUP)
        logf_(w, MC_LOG_INFO,
              "checkpoint %s changed since it was recorded, while no agent watched: not "
              "trusted (a restart skips it, or puts its last good copy back)",
              j->x.name);
    exam_reschedule(w, p, r);
    arm(w);
}

/* --- scans -------------------------------------------------------------------------------- */

static void watch_found(struct agent_ckptwatch *w, const struct agent_ckptwatch_job *j)
{
    for (size_t i = 0; i < j->nsubdirs; i++) {
        char top[AGENT_CKPT_NAME_MAX];
        const char *slash = strchr(j->subdirs[i], '/');

        snprintf(top, sizeof(top), "%.*s",
                 slash ? (int)(slash - j->subdirs[i]) : (int)strlen(j->subdirs[i]), j->subdirs[i]);
        agent_ckptnotify_watch(&w->notify, top, j->subdirs[i], j->subdepth[i]);
    }
}

/* Oldest first (by step; entries without one last), so that what a scan records is recorded
 * in the order it was written, as events would have. */
static int by_step(const void *a, const void *b)
{
    int64_t x = agent_ckpt_parse_step(a), y = agent_ckpt_parse_step(b);

    if (x != y)
        return x < 0 ? 1 : y < 0 ? -1 : x < y ? -1 : 1;
    return strcmp(a, b);
}

static void scan_done(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    uint64_t now = uv_now(w->loop);

    if (j->nnames > 1)
        qsort(j->names, j->nnames, sizeof(*j->names), by_step);
    if (j->rc != 0)
        logf_(w, MC_LOG_WARN, "cannot list --checkpoint-dir %s: %s", w->dir, strerror(-j->rc));
    if (w->recording)
        watch_found(w, j);
    for (size_t i = 0; w->recording && i < j->nnames; i++) {
        const char *name = j->names[i];
        struct agent_ckptwatch_pending *p = pend_find(w, name);

        if (j->origin == CKW_FROM_STARTUP) {
            /* as it is now; but a recorded one changed unseen is damage */
            exam(w, name, AGENT_CKPT_EXAM_RENAMED, CKW_FROM_STARTUP, 1);
        } else if (j->origin == CKW_FROM_FLUSH && p != NULL && p->job != NULL) {
            continue; /* its examination is queued already */
        } else if (j->origin == CKW_FROM_FLUSH) {
            enum agent_ckpt_exam_mode mode = p != NULL && p->renamed ? AGENT_CKPT_EXAM_RENAMED
                                             : j->clean              ? AGENT_CKPT_EXAM_SETTLED
                                                                     : AGENT_CKPT_EXAM_LAYOUT;
            /* recorded, and no write to it seen since: a change is damage, not a checkpoint */
            exam(w, name, mode, CKW_FROM_FLUSH, p == NULL);
        } else if ((p = pend_get(w, name)) != NULL && p->job == NULL) { /* overflow */
            p->mode = AGENT_CKPT_EXAM_SETTLED;
            p->last_ms = now;
            p->due_ms = now + w->settle_ms;
        }
    }
    if (j->origin == CKW_FROM_FLUSH) {
        struct agent_ckptwatch_job *b = new_job(w, CKW_BARRIER);

        pend_clear(w, 0); /* the workers stopped: nothing is on its way any more */
        if (b != NULL) {
            b->done = j->done;
            b->cb_data = j->cb_data;
            b->origin = CKW_FROM_FLUSH;
            agent__ckptwatch_enqueue(w, b);
        }
    }
    arm(w);
}

static void scan(struct agent_ckptwatch *w, enum agent_ckptwatch_origin origin, int clean,
                 agent_ckptwatch_done_cb done, void *data)
{
    struct agent_ckptwatch_job *j = new_job(w, CKW_SCAN);

    if (j == NULL)
        return;
    j->origin = origin;
    j->clean = clean;
    j->done = done;
    j->cb_data = data;
    agent__ckptwatch_enqueue(w, j);
}

static void rescan(struct agent_ckptwatch *w)
{
    scan(w, CKW_FROM_EVENT, 0, NULL, NULL);
}

/* --- results --------------------------------------------------------------------------------- */

static void copy_done(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    const struct agent_ckpt_entry *now = agent_ckpt_registry_find(&w->reg, j->e.name);

    if (j->rc == -ESTALE) {
        logf_(w, MC_LOG_INFO, "last good copy of %s not kept: %s (the previous copy stays)",
              j->e.name, j->why);
        return;
    }
    if (j->rc == -ECANCELED)
        return;
    if (j->rc != 0) {
        logf_(w, MC_LOG_WARN, "last good copy of %s not kept: %s", j->e.name, j->why);
        return;
    }
    if (now == NULL) /* pruned meanwhile: the copy goes with the next prune or start */
        return;
    agent_ckpt_registry_add(&w->good, &j->e);
    logf_(w, MC_LOG_INFO, "last good copy of %s kept (step %lld, %s, %.2f s)", j->e.name,
          (long long)j->e.step,
          j->cstats.reflinked == j->cstats.files && j->cstats.files > 0 ? "reflink" : "copied",
          j->cstats.ns / 1e9);
    save(w);
}

static void pick_done(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    emit_lines(w, &j->lines);
    for (size_t i = 0; i < j->nbad; i++)
        if (w->bad_cb)
            w->bad_cb(w->data, &j->bad[i].e, j->bad[i].why);
    for (size_t i = 0; i < j->notify.n; i++) /* put back: the version in place now */
        agent_ckpt_registry_add(&w->reg, &j->notify.entries[i]);
    if (j->rc == 0 && j->restored)
        agent_ckpt_registry_add(&w->reg, &j->e); /* the version in place is the copy's now */
    if (w->recording && ((j->rc == 0 && j->restored) || j->notify.n > 0))
        save(w);
    if (j->pick_cb != NULL)
        j->pick_cb(j->cb_data, j->rc, &j->e);
}

static void load(struct agent_ckptwatch *w);

static void part_done(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    const struct agent_ckpt_entry *known;
    struct agent_ckpt_entry e = j->x.entry;
    int rc = -ENOENT;

    if (!w->recording)
        load(w); /* as adopt: the file is what this node's registry holds now */
    known = agent_ckpt_registry_find(&w->reg, j->x.name);
    if (known != NULL && known->part == 0) {
        rc = -ENOENT; /* a whole checkpoint of that name (a copy of rank 0's, or its own) */
    } else if (j->x.result == AGENT_CKPT_EXAM_RECORD) {
        e.part = j->part;
        e.parts = j->parts;
        rc = agent_ckpt_registry_add(&w->reg, &e);
        if (rc == 0) {
            logf_(w, MC_LOG_INFO,
                  "checkpoint %s recorded as part %" PRIu32 " of %" PRIu32
                  " (this node's ranks' files: %llu bytes, xxh3 %016llx)",
                  e.name, e.part, e.parts, (unsigned long long)e.size,
                  (unsigned long long)e.checksum);
            prune_parts(w);
            save(w);
        }
    } else if (j->x.result != AGENT_CKPT_EXAM_GONE && j->x.result != AGENT_CKPT_EXAM_WHOLE) {
        rc = -EIO;
        logf_(w, MC_LOG_WARN, "checkpoint %s: this node's part not recorded: %s", j->x.name,
              j->x.why[0] ? j->x.why : "changed while it was read");
    }
    if (rc != 0) { /* what the callback reports: the name, its step, the part */
        memset(&e, 0, sizeof(e));
        snprintf(e.name, sizeof(e.name), "%s", j->x.name);
        e.step = agent_ckpt_parse_step(e.name);
        e.part = j->part;
        e.parts = j->parts;
    }
    if (j->part_cb != NULL)
        j->part_cb(j->cb_data, rc, &e);
}

void agent_ckptwatch_part(struct agent_ckptwatch *w, const char *name, uint32_t part,
                          uint32_t parts, agent_ckptwatch_part_cb cb, void *data)
{
    struct agent_ckptwatch_job *j;

    if (!w->open || !agent_ckpt_name_valid(name) || (j = new_job(w, CKW_PART)) == NULL)
        return;
    snprintf(j->x.dir, sizeof(j->x.dir), "%s", w->dir);
    snprintf(j->x.name, sizeof(j->x.name), "%s", name);
    snprintf(j->x.marker, sizeof(j->x.marker), "%s", w->marker);
    j->x.mode = AGENT_CKPT_EXAM_PART;
    j->x.cancel = &j->cancel;
    j->part = part;
    j->parts = parts;
    j->part_cb = cb;
    j->cb_data = data;
    agent__ckptwatch_enqueue(w, j);
}

static void prune_done(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    emit_lines(w, &j->lines);
    for (size_t i = 0; w->pruned_cb != NULL && i < j->snap.n; i++)
        w->pruned_cb(w->data, &j->snap.entries[i]);
}

static void pick_enqueue(void *data);

/* A job that will not run or report: a pick waiting for it (a flush before it) goes too. */
static void drop_waiter(struct agent_ckptwatch_job *j)
{
    if (j->done == pick_enqueue) {
        agent__ckptwatch_job_free(j->cb_data);
        j->done = NULL;
    }
}

/* A flush (or a pick after it) is done when what it examined is recorded, saved and reported
 * (recorded_cb comes with the save) and its copies are kept: jobs its examinations queued behind
 * the barrier move the barrier behind them. The workers are stopped then: the queue drains. */
static int barrier_again(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    struct agent_ckptwatch_job *q, *b;

    for (q = w->head; q != NULL && q->kind == CKW_BARRIER; q = q->next)
        ;
    if (q == NULL || (b = new_job(w, CKW_BARRIER)) == NULL)
        return 0;
    b->done = j->done;
    b->cb_data = j->cb_data;
    b->origin = j->origin;
    j->done = NULL;
    agent__ckptwatch_enqueue(w, b);
    return 1;
}

void agent__ckptwatch_job_done(struct agent_ckptwatch *w, struct agent_ckptwatch_job *j)
{
    if (j->kind == CKW_SAVE && j->rc != 0)
        logf_(w, MC_LOG_WARN, "cannot save %s: %s", w->registry_path, strerror(-j->rc));
    if (!w->open) {
        drop_waiter(j);
        return; /* closing: only saves and prunes were left to run */
    }
    switch (j->kind) {
    case CKW_EXAM:
        exam_done(w, j);
        break;
    case CKW_SCAN:
        scan_done(w, j);
        break;
    case CKW_PRUNE:
        prune_done(w, j);
        break;
    case CKW_COPY:
        copy_done(w, j);
        break;
    case CKW_PICK:
        pick_done(w, j);
        break;
    case CKW_PART:
        part_done(w, j);
        break;
    case CKW_BARRIER:
        if (barrier_again(w, j))
            break;
        if (j->origin == CKW_FROM_FLUSH) {
            w->flushed = 1;
            w->flushing--;
        }
        if (j->done != NULL)
            j->done(j->cb_data);
        break;
    case CKW_SAVE:
        for (size_t i = j->notify.n; w->recorded_cb != NULL && i-- > 0;) /* oldest first */
            w->recorded_cb(w->data, &j->notify.entries[i]);
        break;
    }
}

/* --- the public side ---------------------------------------------------------------------- */

static void on_handle_closed(void *data);

static void timer_closed(uv_handle_t *h)
{
    on_handle_closed(h->data);
}

static void notify_log(void *data, enum mc_log_level level, const char *line)
{
    emit(data, level, line);
}

/* --checkpoint-dir, its .muster/ (the registry) and .muster/good/: created if missing, refused
 * when another local user owns or can write them or a directory above (common/safefile.h). */
static int open_dirs(struct agent_ckptwatch *w, const char *meta)
{
    char err[PATH_MAX + 256];
    int rc = mc_dir_open(w->dir, 0755, "--checkpoint-dir", NULL, NULL, err, sizeof(err));

    if (rc == 0)
        rc = mc_dir_open(meta, 0700, "--checkpoint-dir", NULL, NULL, err, sizeof(err));
    if (rc == 0)
        rc = mc_dir_open(w->gooddir, 0700, "--checkpoint-dir", NULL, NULL, err, sizeof(err));
    if (rc != 0)
        logf_(w, MC_LOG_ERROR, "%s", err);
    return rc;
}

static void load(struct agent_ckptwatch *w)
{
    int rc = agent_ckpt_registry_load(&w->reg, w->registry_path);

    if (rc != 0 && rc != -ENOENT)
        logf_(w, MC_LOG_INFO, "ignoring %s: %s", w->registry_path, strerror(-rc));
    rc = agent_ckpt_registry_load(&w->good, w->good_path);
    if (rc != 0 && rc != -ENOENT)
        logf_(w, MC_LOG_INFO, "ignoring %s: %s", w->good_path, strerror(-rc));
}

int agent_ckptwatch_init(uv_loop_t *loop, struct agent_ckptwatch *w, const char *dir, unsigned keep,
                         const struct agent_ckptwatch_cbs *cbs, void *data)
{
    char meta[PATH_MAX];
    int rc;

    memset(w, 0, sizeof(*w));
    w->loop = loop;
    w->keep = keep;
    w->settle_ms = AGENT_CKPTWATCH_SETTLE_MS;
    w->supersede_ms = SUPERSEDE_MS;
    w->log = cbs->log;
    w->recorded_cb = cbs->recorded_cb;
    w->bad_cb = cbs->bad_cb;
    w->pruned_cb = cbs->pruned_cb;
    w->data = data;
    agent_ckpt_registry_init(&w->reg);
    agent_ckpt_registry_init(&w->good);
    if (snprintf(w->dir, sizeof(w->dir), "%s", dir) >= (int)sizeof(w->dir) ||
        snprintf(meta, sizeof(meta), "%s/.muster", dir) >= (int)sizeof(meta) ||
        snprintf(w->gooddir, sizeof(w->gooddir), "%s/good", meta) >= (int)sizeof(w->gooddir) ||
        snprintf(w->registry_path, sizeof(w->registry_path), "%s/registry.json", meta) >=
            (int)sizeof(w->registry_path) ||
        snprintf(w->good_path, sizeof(w->good_path), "%s/good.json", meta) >=
            (int)sizeof(w->good_path))
        return -ENAMETOOLONG;
    if ((rc = open_dirs(w, meta)) != 0)
        return rc;
    load(w);
    if ((rc = agent_ckptnotify_init(loop, &w->notify, dir, on_notify, notify_log, w)) != 0) {
        logf_(w, MC_LOG_ERROR, "cannot watch --checkpoint-dir %s: %s", dir, strerror(-rc));
        agent_ckpt_registry_close(&w->reg);
        agent_ckpt_registry_close(&w->good);
        return rc;
    }
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    w->handles = 2;
    w->open = 1;
    return 0;
}

void agent_ckptwatch_configure(struct agent_ckptwatch *w, unsigned settle_ms, const char *marker)
{
    if (settle_ms > 0)
        w->settle_ms = settle_ms;
    snprintf(w->marker, sizeof(w->marker), "%s", marker != NULL ? marker : "");
}

void agent_ckptwatch_set_recording(struct agent_ckptwatch *w, int recording)
{
    if (!w->open)
        return;
    if (recording && !w->recording) {
        /* taking over from another node (or starting): its latest records first, then what
         * it never recorded, trusted as it is now (logged) */
        load(w);
        w->recording = 1;
        scan(w, CKW_FROM_STARTUP, 0, NULL, NULL);
    }
    if (!recording)
        pend_clear(w, 1);
    w->recording = recording;
    arm(w);
}

void agent_ckptwatch_sync(struct agent_ckptwatch *w)
{
    if (!w->open)
        return;
    if (w->recording)
        agent_ckptwatch_flush(w, 0, NULL, NULL);
    else
        load(w);
}

void agent_ckptwatch_flush(struct agent_ckptwatch *w, int clean, agent_ckptwatch_done_cb done,
                           void *data)
{
    struct agent_ckptwatch_job *b;

    if (!w->open)
        return;
    if (w->recording) {
        agent_ckptnotify_drain(&w->notify); /* what was written before the workers stopped */
        w->flushing++;
        scan(w, CKW_FROM_FLUSH, clean, done, data);
        return;
    }
    if ((b = new_job(w, CKW_BARRIER)) == NULL)
        return;
    b->done = done;
    b->cb_data = data;
    agent__ckptwatch_enqueue(w, b);
}

int agent_ckptwatch_adopt(struct agent_ckptwatch *w, const struct agent_ckpt_entry *e)
{
    int rc;

    if (!w->recording)
        load(w); /* a registry file another node writes (shared directory) stays whole */
    if ((rc = agent_ckpt_registry_add(&w->reg, e)) != 0) {
        logf_(w, MC_LOG_INFO, "replica %s not recorded: %s", e->name, strerror(-rc));
        return rc;
    }
    agent_ckpt_registry_remove(&w->good, e->name); /* a copy of another version is stale */
    if (e->part != 0)
        prune_parts(w);
    else
        prune(w, e->name);
    save(w);
    return 0;
}

static void pick_enqueue(void *data)
{
    struct agent_ckptwatch_job *j = data;
    struct agent_ckptwatch *w = j->w;

    if (!w->open) {
        agent__ckptwatch_job_free(j);
        return;
    }
    if (snapshot(&j->snap, &w->reg) != 0 || snapshot(&j->snap_good, &w->good) != 0)
        logf_(w, MC_LOG_ERROR, "out of memory picking a checkpoint");
    agent__ckptwatch_enqueue(w, j);
}

void agent_ckptwatch_pick(struct agent_ckptwatch *w, agent_ckptwatch_pick_cb cb, void *data)
{
    struct agent_ckptwatch_job *j = new_job(w, CKW_PICK);

    if (j == NULL)
        return;
    j->pick_cb = cb;
    j->cb_data = data;
    if (w->recording && !w->flushed && w->flushing == 0) {
        agent_ckptwatch_flush(w, 0, pick_enqueue, j); /* the snapshot after what lands */
        return;
    }
    if (!w->recording)
        load(w);
    /* through a barrier all the same: the callback never runs inside this call */
    struct agent_ckptwatch_job *b = new_job(w, CKW_BARRIER);
    if (b == NULL) {
        agent__ckptwatch_job_free(j);
        return;
    }
    b->done = pick_enqueue;
    b->cb_data = j;
    agent__ckptwatch_enqueue(w, b);
}

static void finish_close(struct agent_ckptwatch *w)
{
    void (*cb)(void *) = w->close_cb;

    agent_ckpt_registry_close(&w->reg);
    agent_ckpt_registry_close(&w->good);
    free(w->pend);
    w->pend = NULL;
    w->npend = w->cappend = 0;
    w->close_cb = NULL;
    if (cb != NULL)
        cb(w->data);
}

static void on_handle_closed(void *data)
{
    struct agent_ckptwatch *w = data;

    if (--w->handles == 0 && w->running == NULL && w->head == NULL)
        finish_close(w);
}

void agent__ckptwatch_idle(struct agent_ckptwatch *w)
{
    if (!w->open && w->handles == 0 && w->close_cb != NULL)
        finish_close(w);
}

void agent_ckptwatch_close(struct agent_ckptwatch *w, void (*close_cb)(void *data))
{
    if (!w->open)
        return;
    w->open = 0;
    w->close_cb = close_cb;
    pend_clear(w, 1);
    if (w->running != NULL)
        atomic_store(&w->running->cancel, 1);
    for (struct agent_ckptwatch_job *j = w->head, *next; j != NULL; j = next) {
        next = j->next;
        if (j->kind == CKW_SAVE || j->kind == CKW_PRUNE)
            continue; /* the registry on disk must match what was decided */
        agent__ckptwatch_unqueue(w, j);
        drop_waiter(j);
        agent__ckptwatch_job_free(j);
    }
    uv_close((uv_handle_t *)&w->timer, timer_closed);
    agent_ckptnotify_close(&w->notify, on_handle_closed);
}
