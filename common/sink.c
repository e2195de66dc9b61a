#include "sink.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define CHUNK_SIZE (64 * 1024) /* queue memory comes in pieces of this size */

struct chunk {
    struct chunk *next;
    size_t off, len; /* data[off..len) is still to be written */
    char data[CHUNK_SIZE];
};

struct mc_sink {
    int fd, owns_fd;
    size_t budget, queued;
    uint64_t dropped; /* refused at the hard limit */
    int err;          /* the errno the writer stopped on; 0 while it works */
    int closing;      /* mc_sink_close was called: drain, close, free */
    int want_wake;    /* found over budget: wake once the queue is down to budget / 2 */
    uv_async_t *wake;
    pthread_cond_t cv; /* the writer waits here for bytes or closing */
    struct chunk *head, *tail;
    struct mc_sink *prev, *next; /* every live sink, for mc_sink_drain_all */
};

/* One lock for all sinks: drain_all needs a consistent sum, and the sections are short. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv; /* a queue went empty or a writer ended; CLOCK_MONOTONIC */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct mc_sink *sinks;
static uint64_t dropped_gone; /* dropped bytes of sinks already freed */

static void init_once(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&idle_cv, &a);
    pthread_condattr_destroy(&a);
}

/* The writer's reason to tell the loop: call with mu held. */
static void maybe_wake(struct mc_sink *s)
{
    if (s->want_wake && (s->err != 0 || s->queued <= s->budget / 2)) {
        s->want_wake = 0;
        if (s->wake != NULL)
            uv_async_send(s->wake);
    }
}

static void free_chunks(struct mc_sink *s)
{
    while (s->head != NULL) {
        struct chunk *c = s->head;
        s->head = c->next;
        free(c);
    }
    s->tail = NULL;
    s->queued = 0;
}

/* One write(2) of what is at p, outside the lock. The fd may be non-blocking (set by someone
 * sharing it): then wait here, in the writer, for room. Returns bytes written or -errno. */
static ssize_t write_some(int fd, const char *p, size_t n)
{
    for (;;) {
        ssize_t w = write(fd, p, n);
        if (w >= 0)
            return w;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
            return -errno;
    }
}

/* Takes w written bytes off the head of the queue; with mu held. */
static void consume(struct mc_sink *s, size_t w)
{
    struct chunk *c = s->head;

    c->off += w;
    s->queued -= w;
    if (c->off == c->len && (c->next != NULL || c->len == CHUNK_SIZE)) {
        s->head = c->next;
        if (s->head == NULL)
            s->tail = NULL;
        free(c);
    }
}

static void finish(struct mc_sink *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        sinks = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    dropped_gone += s->dropped;
    free_chunks(s);
    pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&mu);
    if (s->owns_fd)
        close(s->fd);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static void *writer_main(void *arg)
{
    struct mc_sink *s = arg;

    pthread_mutex_lock(&mu);
    for (;;) {
        while (s->queued == 0 && !s->closing)
            pthread_cond_wait(&s->cv, &mu);
        if (s->queued == 0)
            break; /* closing and drained */
        struct chunk *c = s->head;
        /* the loop may append behind len meanwhile: disjoint bytes, and len is read here */
        const char *p = c->data + c->off;
        size_t n = c->len - c->off;
        pthread_mutex_unlock(&mu);
        ssize_t w = write_some(s->fd, p, n);
        pthread_mutex_lock(&mu);
        if (w < 0) {
            s->err = (int)-w; /* EPIPE, EIO, ENOSPC...: this destination is done */
            free_chunks(s);
        } else {
            consume(s, (size_t)w);
        }
        if (s->queued == 0)
            pthread_cond_broadcast(&idle_cv);
        maybe_wake(s);
    }
    finish(s); /* unlocks */
    return NULL;
}

int mc_sink_new(int fd, int owns_fd, size_t budget, uv_async_t *wake, struct mc_sink **out)
{
    struct mc_sink *s = calloc(1, sizeof(*s));
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    int rc;

    *out = NULL;
    if (s == NULL)
        return -ENOMEM;
    pthread_once(&once, init_once);
    *s = (struct mc_sink){.fd = fd, .owns_fd = owns_fd, .budget = budget, .wake = wake};
    pthread_cond_init(&s->cv, NULL);
    pthread_attr_init(&attr);
    /* the default stack size: a smaller one fails with EINVAL once the static TLS of the
     * libraries linked in does not fit (seen with 128 KiB) */
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* the writer inherits a full signal mask: SIGTERM, SIGCHLD... go to the loop's thread, never
     * to one blocked in write() (under TSan such a signal waits until the write returns) */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_mutex_lock(&mu);
    rc = pthread_create(&t, &attr, writer_main, s);
    if (rc == 0) {
        s->next = sinks;
        if (sinks != NULL)
            sinks->prev = s;
        sinks = s;
    }
    pthread_mutex_unlock(&mu);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_cond_destroy(&s->cv);
        free(s);
        return -rc;
    }
    *out = s;
    return 0;
}

/* Copies n bytes at p behind the queue's tail; with mu held. Returns 0 or -ENOMEM. */
static int append(struct mc_sink *s, const char *p, size_t n)
{
    while (n > 0) {
        struct chunk *c = s->tail;
        if (c == NULL || c->len == CHUNK_SIZE) {
            if ((c = malloc(sizeof(*c))) == NULL)
                return -ENOMEM;
            c->next = NULL;
            c->off = c->len = 0;
            if (s->tail != NULL)
                s->tail->next = c;
            else
                s->head = c;
            s->tail = c;
        }
        size_t k = CHUNK_SIZE - c->len < n ? CHUNK_SIZE - c->len : n;
        memcpy(c->data + c->len, p, k);
        c->len += k;
        s->queued += k;
        p += k;
        n -= k;
    }
    return 0;
}

int mc_sink_writev(struct mc_sink *s, const struct iovec *iov, int cnt)
{
    size_t total = 0;
    int rc = 0;

    for (int i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    pthread_mutex_lock(&mu);
    if (s->err != 0) {
        rc = -s->err;
    } else if (s->queued + total > s->budget * MC_SINK_HARD_FACTOR) {
        s->dropped += total;
        rc = -ENOBUFS;
    } else {
        for (int i = 0; i < cnt && rc == 0; i++)
            rc = append(s, iov[i].iov_base, iov[i].iov_len);
        if (rc != 0)
            s->dropped += total; /* a part may be queued: counted whole, it is cut anyway */
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int mc_sink_over(struct mc_sink *s)
{
    int over;

    pthread_mutex_lock(&mu);
    over = s->err == 0 && s->queued >= s->budget;
    if (over)
        s->want_wake = 1;
    pthread_mutex_unlock(&mu);
    return over;
}

size_t mc_sink_queued(struct mc_sink *s)
{
    size_t n;

    pthread_mutex_lock(&mu);
    n = s->queued;
    pthread_mutex_unlock(&mu);
    return n;
}

void mc_sink_set_wake(struct mc_sink *s, uv_async_t *wake)
{
    pthread_mutex_lock(&mu);
    s->wake = wake;
    pthread_mutex_unlock(&mu);
}

void mc_sink_forget_wake(uv_async_t *wake)
{
    pthread_mutex_lock(&mu);
    for (struct mc_sink *s = sinks; s != NULL; s = s->next)
        if (s->wake == wake)
            s->wake = NULL;
    pthread_mutex_unlock(&mu);
}

void mc_sink_close(struct mc_sink *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&mu);
    s->closing = 1;
    s->wake = NULL; /* its owner is done with it */
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&mu);
}

static uint64_t unwritten(void)
{
    uint64_t n = dropped_gone;
    for (struct mc_sink *s = sinks; s != NULL; s = s->next)
        n += s->queued + s->dropped;
    return n;
}

static int all_idle(void)
{
    for (struct mc_sink *s = sinks; s != NULL; s = s->next)
        if (s->queued > 0)
            return 0;
    return 1;
}

uint64_t mc_sink_drain_all(unsigned timeout_ms)
{
    struct timespec until;
    uint64_t n;

    pthread_once(&once, init_once);
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&mu);
    while (!all_idle() && pthread_cond_timedwait(&idle_cv, &mu, &until) != ETIMEDOUT)
        ;
    n = unwritten();
    pthread_mutex_unlock(&mu);
    return n;
}

static struct mc_sink *log_sink; /* mc_sink_take_log's */
static void (*log_before)(void);

static void log_to_sink(const char *line, size_t len)
{
    struct iovec iov = {.iov_base = (void *)line, .iov_len = len};

    if (log_before != NULL)
        log_before();
    (void)mc_sink_writev(log_sink, &iov, 1); /* -ENOBUFS: dropped and counted */
}

void mc_sink_take_log(struct mc_sink *s, void (*before)(void))
{
    mc_log_set_writer(NULL); /* no line goes to a half-set pair */
    log_sink = s;
    log_before = before;
    if (s != NULL)
        mc_log_set_writer(log_to_sink);
}
