/* The off-loop writer of a checkpoint replica: see replica_write.h. */
#include "replica_write.h"

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt_hash.h"

struct chunk {
    struct chunk *next;
    size_t n;
    uint8_t data[];
};

enum { RUNNING, DONE, FAILED };

/* One chunk handed to a helper (positional targets): placed at off, then rc and done. */
struct job {
    struct chunk *c;
    uint64_t off;
    int rc, done, taken;
    char why[256];
};
#define JOBS_MAX (2 * AGENT_REPLICA_WRITE_HELPERS_MAX) /* chunks being placed at once */

struct agent_replica_writer {
    uv_loop_t *loop;
    uv_async_t async; /* the thread's news: progress, the outcome, its end */
    uv_thread_t thread;
    uv_mutex_t mu;
    uv_cond_t cv;
    const struct agent_replica_write_ops *ops;
    void *target;
    uint64_t checksum;
    size_t max;
    agent_replica_write_cb cb;
    void *data;
    /* under mu: the loop's orders and the thread's news */
    struct chunk *head, *tail;
    int finishing; /* every byte was pushed */
    int stopping;  /* closed: the thread cleans up and ends */
    uint64_t written;
    uint64_t fed; /* bytes agent_replica_writer_feed queued */
    /* positional targets: the helpers and the ring of chunks being placed, oldest at jhead */
    uv_thread_t helper[AGENT_REPLICA_WRITE_HELPERS_MAX];
    int nhelpers, want_helpers; /* started; to start (helpers_wanted, read at the start) */
    uv_cond_t hcv;              /* a job for the helpers, or quit */
    uv_cond_t dcv;              /* a job done */
    struct job job[JOBS_MAX];
    unsigned jhead, jn; /* the oldest job, jobs in the ring */
    int quit;           /* the helpers end */
    /* under mu: where the time went (agent_replica_writer_times) */
    uint64_t hash_ns, write_ns, wait_ns;
    int outcome; /* RUNNING, DONE, FAILED */
    int ended;   /* the thread is returning: it touches nothing of w any more */
    char why[PATH_MAX + 128];
    /* loop only */
    uint64_t pushed, seen; /* bytes pushed; written as last reported */
    int reported;          /* the outcome went to cb */
    int closed;
    int finish_asked;
};

/* --- the thread -------------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

static void tell(struct agent_replica_writer *w)
{
    uv_async_send(&w->async);
}

/* The next chunk, waiting for one if wait; NULL once finishing with nothing left, or stopping
 * (or, not waiting, when none is queued). */
static struct chunk *take(struct agent_replica_writer *w, int wait, int *finishing)
{
    struct chunk *c = NULL;

    uv_mutex_lock(&w->mu);
    while (wait && w->head == NULL && !w->finishing && !w->stopping)
        uv_cond_wait(&w->cv, &w->mu);
    if (!w->stopping && w->head != NULL) {
        c = w->head;
        w->head = c->next;
        if (w->head == NULL)
            w->tail = NULL;
    }
    *finishing = w->finishing && !w->stopping && c == NULL;
    uv_mutex_unlock(&w->mu);
    return c;
}

static void set_outcome(struct agent_replica_writer *w, int rc, const char *why)
{
    uv_mutex_lock(&w->mu);
    w->outcome = rc == 0 ? DONE : FAILED;
    snprintf(w->why, sizeof(w->why), "%s", rc == 0 ? "" : why[0] ? why : strerror(-rc));
    uv_mutex_unlock(&w->mu);
    tell(w);
}

/* The oldest job no helper took yet, or NULL (under mu). */
static struct job *untaken(struct agent_replica_writer *w)
{
    for (unsigned k = 0; k < w->jn; k++) {
        struct job *x = &w->job[(w->jhead + k) % JOBS_MAX];

        if (!x->taken)
            return x;
    }
    return NULL;
}

/* A helper: places the chunks of the ring's jobs (write_at) until told to quit, which comes
 * only once every job is done (write_placed drains the ring before it returns). */
static void helper(void *arg)
{
    struct agent_replica_writer *w = arg;
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    uv_mutex_lock(&w->mu);
    for (;;) {
        struct job *j = NULL;

        while (!w->quit && (j = untaken(w)) == NULL)
            uv_cond_wait(&w->hcv, &w->mu);
        if (w->quit)
            break;
        j->taken = 1;
        uv_mutex_unlock(&w->mu);
        /* the writer touches neither this slot nor the chunk until done is set */
        uint64_t t0 = now_ns();

        j->rc = w->ops->write_at(w->target, j->c->data, j->c->n, j->off, j->why, sizeof(j->why));
        t0 = now_ns() - t0;
        uv_mutex_lock(&w->mu);
        w->write_ns += t0;
        j->done = 1;
        uv_cond_broadcast(&w->dcv);
    }
    uv_mutex_unlock(&w->mu);
}

static int helpers_wanted(void)
{
    const char *e = getenv("MUSTER_REPLICA_WRITE_HELPERS");
    long n = e != NULL && e[0] != '\0' ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN) / 4;

    return n < 1                                 ? 1
           : n > AGENT_REPLICA_WRITE_HELPERS_MAX ? AGENT_REPLICA_WRITE_HELPERS_MAX
                                                 : (int)n;
}

static void helpers_stop(struct agent_replica_writer *w)
{
    uv_mutex_lock(&w->mu);
    w->quit = 1;
    uv_cond_broadcast(&w->hcv);
    uv_mutex_unlock(&w->mu);
    for (int i = 0; i < w->nhelpers; i++)
        uv_thread_join(&w->helper[i]);
    w->nhelpers = 0;
}

/* Positional targets: chunks go to the helpers in order (hashed here as they go) and count as
 * written once they and all before them are placed. Same contract as write_seq. */
static int write_placed(struct agent_replica_writer *w, XXH3_state_t *h, char *why, size_t whylen,
                        int *finishing)
{
    uint64_t off = 0;
    int rc = 0;

    *finishing = 0;
    for (;;) {
        struct chunk *c = NULL;

        /* as many chunks as there is room for: waiting for one only when none is being placed */
        while (rc == 0 && w->jn < JOBS_MAX) {
            c = take(w, w->jn == 0, finishing);
            if (c == NULL)
                break;
            uv_mutex_lock(&w->mu);
            w->job[(w->jhead + w->jn) % JOBS_MAX] = (struct job){.c = c, .off = off};
            w->jn++;
            uv_cond_signal(&w->hcv);
            uv_mutex_unlock(&w->mu);
            uint64_t t0 = now_ns();

            agent_ckpt_xxh3_update(h, c->data, c->n); /* while the helpers place it */
            t0 = now_ns() - t0;
            uv_mutex_lock(&w->mu);
            w->hash_ns += t0;
            uv_mutex_unlock(&w->mu);
            off += c->n;
        }
        if (w->jn == 0)
            return rc != 0 ? rc : *finishing ? 0 : -ECANCELED;
        /* the oldest placed: written */
        uv_mutex_lock(&w->mu);
        struct job *j = &w->job[w->jhead];
        uint64_t t0 = now_ns();

        while (!j->done)
            uv_cond_wait(&w->dcv, &w->mu);
        w->wait_ns += now_ns() - t0;
        if (rc == 0 && j->rc != 0) {
            rc = j->rc;
            snprintf(why, whylen, "%s", j->why);
        }
        w->written += rc == 0 ? j->c->n : 0;
        free(j->c);
        w->jhead = (w->jhead + 1) % JOBS_MAX;
        w->jn--;
        uv_mutex_unlock(&w->mu);
        if (rc == 0)
            tell(w);
        /* after a failure, what is being placed still ends before the target may go */
    }
}

/* Every byte through write, in order; 0 when every byte is written and it is finishing,
 * a negative errno with why, -ECANCELED when closed meanwhile. */
static int write_seq(struct agent_replica_writer *w, XXH3_state_t *h, char *why, size_t whylen,
                     int *finishing)
{
    struct chunk *c;
    int rc;

    while ((c = take(w, 1, finishing)) != NULL) {
        uint64_t t0 = now_ns(), t1;

        rc = w->ops->write(w->target, c->data, c->n, why, whylen);
        t1 = now_ns();
        agent_ckpt_xxh3_update(h, c->data, c->n);
        uv_mutex_lock(&w->mu);
        w->write_ns += t1 - t0;
        w->hash_ns += now_ns() - t1;
        w->written += rc == 0 ? c->n : 0;
        uv_mutex_unlock(&w->mu);
        free(c);
        if (rc != 0)
            return rc;
        tell(w);
    }
    return *finishing ? 0 : -ECANCELED;
}

/* Writes chunks until every byte is there (then verifies and finishes) or something failed;
 * 0 or a negative errno with why, -ECANCELED when closed meanwhile. */
static int write_all(struct agent_replica_writer *w, XXH3_state_t *h, char *why, size_t whylen)
{
    int finishing, rc, placed = 0;
    uint64_t sum;

    if (w->ops->positional != NULL && w->ops->write_at != NULL && w->ops->positional(w->target)) {
        for (; w->nhelpers < w->want_helpers; w->nhelpers++)
            if (uv_thread_create(&w->helper[w->nhelpers], helper, w) != 0)
                break;
        placed = w->nhelpers > 0;
    }
    rc = placed ? write_placed(w, h, why, whylen, &finishing)
                : write_seq(w, h, why, whylen, &finishing);
    helpers_stop(w); /* none is placing anything from here on */
    if (rc != 0)
        return rc;
    if ((sum = XXH3_64bits_digest(h)) != w->checksum) {
        snprintf(why, whylen, "checksum %016" PRIx64 " != announced %016" PRIx64, sum, w->checksum);
        return -EBADMSG;
    }
    return w->ops->finish(w->target, why, whylen);
}

static void run(void *arg)
{
    struct agent_replica_writer *w = arg;
    XXH3_state_t *h = XXH3_createState();
    char why[PATH_MAX + 128] = "";
    sigset_t all;
    int rc, kept;

    /* the agent's signals are loop events (uv_signal): let the main thread take them */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    rc = h == NULL || XXH3_64bits_reset(h) != XXH_OK ? -ENOMEM : 0;
    if (rc == 0)
        rc = w->ops->open(w->target, why, sizeof(why));
    if (rc == 0)
        rc = write_all(w, h, why, sizeof(why)); /* its helpers have ended when it returns */
    if (rc != -ECANCELED)
        set_outcome(w, rc, why);
    uv_mutex_lock(&w->mu);
    while (!w->stopping)
        uv_cond_wait(&w->cv, &w->mu);
    kept = w->outcome == DONE;
    uv_mutex_unlock(&w->mu);
    w->ops->close(w->target, kept); /* the removal of a large copy: here, not on the loop */
    XXH3_freeState(h);
    uv_mutex_lock(&w->mu);
    w->ended = 1;
    uv_mutex_unlock(&w->mu);
    tell(w);
}

/* --- the loop ---------------------------------------------------------------------------- */

static void free_chunks(struct chunk *c)
{
    while (c != NULL) {
        struct chunk *next = c->next;

        free(c);
        c = next;
    }
}

static void on_closed(uv_handle_t *h)
{
    struct agent_replica_writer *w = h->data;

    free_chunks(w->head);
    uv_cond_destroy(&w->dcv);
    uv_cond_destroy(&w->hcv);
    uv_cond_destroy(&w->cv);
    uv_mutex_destroy(&w->mu);
    free(w);
}

static void on_async(uv_async_t *a)
{
    struct agent_replica_writer *w = a->data;
    char why[sizeof(w->why)];
    uint64_t written;
    int outcome, ended;

    uv_mutex_lock(&w->mu);
    written = w->written;
    outcome = w->outcome;
    ended = w->ended;
    memcpy(why, w->why, sizeof(why));
    uv_mutex_unlock(&w->mu);
    if (ended) { /* it has returned or is about to: joining costs no wait on the disk */
        uv_thread_join(&w->thread);
        uv_close((uv_handle_t *)&w->async, on_closed);
        return;
    }
    if (!w->closed && written != w->seen) {
        w->seen = written;
        w->cb(w->data, AGENT_REPLICA_WRITE_PROGRESS, "");
    }
    if (!w->closed && outcome != RUNNING && !w->reported) {
        w->reported = 1;
        w->cb(w->data, outcome == DONE ? AGENT_REPLICA_WRITE_DONE : AGENT_REPLICA_WRITE_FAILED,
              why);
    }
}

int agent_replica_writer_start(uv_loop_t *loop, const struct agent_replica_write_ops *ops,
                               void *target, uint64_t checksum, size_t max,
                               agent_replica_write_cb cb, void *data,
                               struct agent_replica_writer **out)
{
    struct agent_replica_writer *w = calloc(1, sizeof(*w));
    int rc;

    if (w == NULL) {
        ops->close(target, 0);
        return -ENOMEM;
    }
    *w = (struct agent_replica_writer){.loop = loop,
                                       .ops = ops,
                                       .target = target,
                                       .checksum = checksum,
                                       .max = max,
                                       .cb = cb,
                                       .data = data};
    w->want_helpers = helpers_wanted(); /* the environment is read here, not on a thread */
    if ((rc = uv_mutex_init(&w->mu)) != 0)
        goto no_mutex;
    if ((rc = uv_cond_init(&w->cv)) != 0)
        goto no_cond;
    if ((rc = uv_cond_init(&w->hcv)) != 0)
        goto no_hcv;
    if ((rc = uv_cond_init(&w->dcv)) != 0)
        goto no_dcv;
    if ((rc = uv_async_init(loop, &w->async, on_async)) != 0)
        goto no_async;
    w->async.data = w;
    if ((rc = uv_thread_create(&w->thread, run, w)) != 0) {
        ops->close(target, 0);
        uv_close((uv_handle_t *)&w->async, on_closed); /* frees w */
        return rc;
    }
    *out = w;
    return 0;
no_async:
    uv_cond_destroy(&w->dcv);
no_dcv:
    uv_cond_destroy(&w->hcv);
no_hcv:
    uv_cond_destroy(&w->cv);
no_cond:
    uv_mutex_destroy(&w->mu);
no_mutex:
    ops->close(target, 0);
    free(w);
    return rc;
}

int agent_replica_writer_push(struct agent_replica_writer *w, const uint8_t *p, size_t n)
{
    struct chunk *c;
    int failed;

    uv_mutex_lock(&w->mu);
    failed = w->outcome == FAILED;
    uv_mutex_unlock(&w->mu);
    if (w->finish_asked || failed || w->closed)
        return -EPIPE;
    /* what the loop knows was written: the receiver acknowledged no more than that, so a
     * sender within its window stays within max */
    if (w->pushed + n - w->seen > w->max)
        return -ENOBUFS;
    if ((c = malloc(sizeof(*c) + n)) == NULL)
        return -ENOMEM;
    c->next = NULL;
    c->n = n;
    memcpy(c->data, p, n);
    uv_mutex_lock(&w->mu);
    if (w->tail != NULL)
        w->tail->next = c;
    else
        w->head = c;
    w->tail = c;
    uv_cond_signal(&w->cv);
    uv_mutex_unlock(&w->mu);
    w->pushed += n;
    return 0;
}

uint8_t *agent_replica_writer_buf(size_t n)
{
    struct chunk *c = malloc(sizeof(*c) + n);

    return c == NULL ? NULL : c->data;
}

void agent_replica_writer_buf_free(uint8_t *data)
{
    if (data != NULL)
        free((struct chunk *)(void *)(data - offsetof(struct chunk, data)));
}

int agent_replica_writer_feed(struct agent_replica_writer *w, uint8_t *data, size_t n)
{
    struct chunk *c = (struct chunk *)(void *)(data - offsetof(struct chunk, data));
    int rc = 0;

    c->next = NULL;
    c->n = n;
    uv_mutex_lock(&w->mu);
    if (w->stopping || w->finishing || w->outcome == FAILED) {
        rc = -EPIPE;
    } else if (w->fed + n - w->written > w->max) {
        rc = -ENOBUFS;
    } else {
        if (w->tail != NULL)
            w->tail->next = c;
        else
            w->head = c;
        w->tail = c;
        w->fed += n;
        uv_cond_signal(&w->cv);
    }
    uv_mutex_unlock(&w->mu);
    return rc;
}

void agent_replica_writer_set_max(struct agent_replica_writer *w, size_t max)
{
    uv_mutex_lock(&w->mu);
    w->max = max;
    uv_mutex_unlock(&w->mu);
}

int agent_replica_writer_finish(struct agent_replica_writer *w)
{
    int rc = 0;

    if (w->finish_asked || w->closed)
        return -EPIPE;
    w->finish_asked = 1;
    uv_mutex_lock(&w->mu);
    if (w->outcome == FAILED)
        rc = -EPIPE;
    w->finishing = 1;
    uv_cond_signal(&w->cv);
    uv_mutex_unlock(&w->mu);
    return rc;
}

uint64_t agent_replica_writer_written(const struct agent_replica_writer *w)
{
    return w->seen;
}

size_t agent_replica_writer_queued(const struct agent_replica_writer *w)
{
    return (size_t)(w->pushed - w->seen);
}

void agent_replica_writer_close(struct agent_replica_writer *w)
{
    if (w == NULL || w->closed)
        return;
    w->closed = 1; /* no callback from here on */
    uv_mutex_lock(&w->mu);
    w->stopping = 1;
    uv_cond_signal(&w->cv);
    uv_mutex_unlock(&w->mu);
}

void agent_replica_writer_times(struct agent_replica_writer *w, char *out, size_t cap)
{
    uint64_t hash, write, wait;
    int helpers = w->want_helpers; /* set before the thread started */

    uv_mutex_lock(&w->mu);
    hash = w->hash_ns, write = w->write_ns, wait = w->wait_ns;
    uv_mutex_unlock(&w->mu);
    if (w->ops->positional != NULL && wait > 0)
        snprintf(out, cap,
                 "writer: hash %" PRIu64 " ms, placing by %d helpers %" PRIu64
                 " ms (summed), waiting for them %" PRIu64 " ms",
                 hash / 1000000, helpers, write / 1000000, wait / 1000000);
    else
        snprintf(out, cap, "writer: hash %" PRIu64 " ms, write %" PRIu64 " ms", hash / 1000000,
                 write / 1000000);
}
