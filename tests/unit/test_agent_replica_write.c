/* agent/replica_write.c on a private loop, with a fake target whose writes can be held at a
 * gate, and with the agent's own target (replica_store.c). Checked: chunks are written in the
 * order they were pushed, on another thread than the loop, and the copy is finished only after
 * the last one with the checksum right; a wrong checksum or a failing write ends it (FAILED,
 * nothing kept); no more than the bound is ever queued, and room comes back as the thread
 * writes; closing while a write is held returns at once, no callback runs after it, and the
 * target is cleaned up and the writer freed once the write returned (harness_loop_close:
 * nothing left open); the store gives a file and a directory the modes asked for and removes
 * a half-written copy. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>
#include <xxhash.h>

#include "harness.h"
#include "replica_store.h"
#include "replica_write.h"

#define CHUNK 1000
#define NCHUNKS 64

/* A target that records what it is given; writes wait while the gate is shut. */
struct fake {
    uv_mutex_t mu;
    uv_cond_t cv;
    int shut;    /* writes wait while set */
    int held;    /* a write waits at the gate */
    int fail_at; /* the write of this number (from 1) fails; 0: none */
    unsigned writes, opens, finishes, closes;
    unsigned seq_writes; /* calls of write (a positional target must get none) */
    unsigned max_held;   /* most write_at calls waiting at the gate at once */
    long fail_off;       /* write_at at this offset fails; 0: none (the first never fails) */
    int kept;
    int on_loop_thread; /* a call ran on the loop's thread */
    pthread_t loop_thread;
    uint8_t got[NCHUNKS * CHUNK * 2];
    size_t n;
};

struct fixture {
    uv_loop_t loop;
    struct harness h;
    uv_timer_t tick; /* wakes the loop, so that a wait sees what only the thread changed */
    char tmp[128];
    struct fake f;
    struct agent_replica_writer *w;
    unsigned progress, done, failed, after_close;
    int closed; /* the test closed the writer */
    char why[512];
    int close_in_cb; /* close the writer from its first progress callback */
};

static void seen_thread(struct fake *f)
{
    if (pthread_equal(pthread_self(), f->loop_thread))
        f->on_loop_thread = 1;
}

static int fake_open(void *target, char *why, size_t whylen)
{
    struct fake *f = target;

    (void)why;
    (void)whylen;
    uv_mutex_lock(&f->mu);
    seen_thread(f);
    f->opens++;
    uv_mutex_unlock(&f->mu);
    return 0;
}

static int fake_write(void *target, const uint8_t *p, size_t n, char *why, size_t whylen)
{
    struct fake *f = target;
    int rc = 0;

    uv_mutex_lock(&f->mu);
    seen_thread(f);
    f->held = 1;
    while (f->shut)
        uv_cond_wait(&f->cv, &f->mu);
    f->held = 0;
    if (++f->writes == (unsigned)f->fail_at) {
        snprintf(why, whylen, "writing: disk on fire");
        rc = -EIO;
    } else if (f->n + n <= sizeof(f->got)) {
        memcpy(f->got + f->n, p, n);
        f->n += n;
    }
    uv_mutex_unlock(&f->mu);
    return rc;
}

static int fake_finish(void *target, char *why, size_t whylen)
{
    struct fake *f = target;

    (void)why;
    (void)whylen;
    uv_mutex_lock(&f->mu);
    seen_thread(f);
    f->finishes++;
    uv_mutex_unlock(&f->mu);
    return 0;
}

static void fake_close(void *target, int kept)
{
    struct fake *f = target;

    uv_mutex_lock(&f->mu);
    seen_thread(f);
    f->closes++;
    f->kept = kept;
    uv_mutex_unlock(&f->mu);
}

static const struct agent_replica_write_ops fake_ops = {
    .open = fake_open, .write = fake_write, .finish = fake_finish, .close = fake_close};

/* The fake as a positional target: write_at places at the offset, from the helpers. */
static int fake_seq_write(void *target, const uint8_t *p, size_t n, char *why, size_t whylen)
{
    struct fake *f = target;

    uv_mutex_lock(&f->mu);
    f->seq_writes++;
    uv_mutex_unlock(&f->mu);
    return fake_write(target, p, n, why, whylen);
}

static int fake_positional(void *target)
{
    (void)target;
    return 1;
}

static int fake_write_at(void *target, const uint8_t *p, size_t n, uint64_t off, char *why,
                         size_t whylen)
{
    struct fake *f = target;
    int rc = 0;

    uv_mutex_lock(&f->mu);
    seen_thread(f);
    f->held++;
    if ((unsigned)f->held > f->max_held)
        f->max_held = (unsigned)f->held;
    while (f->shut)
        uv_cond_wait(&f->cv, &f->mu);
    f->held--;
    f->writes++;
    if (f->fail_off > 0 && off == (uint64_t)f->fail_off) {
        snprintf(why, whylen, "writing: disk on fire");
        rc = -EIO;
    } else if (off + n <= sizeof(f->got)) {
        memcpy(f->got + off, p, n);
        if (off + n > f->n)
            f->n = off + n;
    }
    uv_mutex_unlock(&f->mu);
    return rc;
}

static const struct agent_replica_write_ops fake_at_ops = {.open = fake_open,
                                                           .write = fake_seq_write,
                                                           .finish = fake_finish,
                                                           .close = fake_close,
                                                           .positional = fake_positional,
                                                           .write_at = fake_write_at};

/* What the fake holds, read under its lock (the thread writes it). */
static unsigned fake_get(struct fake *f, const unsigned *field)
{
    unsigned v;

    uv_mutex_lock(&f->mu);
    v = *field;
    uv_mutex_unlock(&f->mu);
    return v;
}

static int fake_held(struct fake *f)
{
    int v;

    uv_mutex_lock(&f->mu);
    v = f->held;
    uv_mutex_unlock(&f->mu);
    return v;
}

static void gate(struct fake *f, int shut)
{
    uv_mutex_lock(&f->mu);
    f->shut = shut;
    uv_cond_broadcast(&f->cv);
    uv_mutex_unlock(&f->mu);
}

static void on_event(void *data, enum agent_replica_write_event ev, const char *why)
{
    struct fixture *fx = data;

    if (fx->closed)
        fx->after_close++;
    if (ev == AGENT_REPLICA_WRITE_PROGRESS)
        fx->progress++;
    else if (ev == AGENT_REPLICA_WRITE_DONE)
        fx->done++;
    else
        fx->failed++;
    snprintf(fx->why, sizeof(fx->why), "%s", why);
    if (fx->close_in_cb && !fx->closed) {
        fx->closed = 1;
        agent_replica_writer_close(fx->w);
    }
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    harness_init_tmp(&fx.h, &fx.loop, 20000, fx.tmp, sizeof(fx.tmp), "rwrite");
    assert_int_equal(uv_mutex_init(&fx.f.mu), 0);
    assert_int_equal(uv_cond_init(&fx.f.cv), 0);
    fx.f.loop_thread = pthread_self();
    uv_timer_init(&fx.loop, &fx.tick);
    uv_timer_start(&fx.tick, on_tick, 5, 5);
    *state = &fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    if (!fx->closed)
        agent_replica_writer_close(fx->w);
    gate(&fx->f, 0);
    uv_close((uv_handle_t *)&fx->tick, NULL);
    harness_close(&fx->h);
    harness_loop_close(&fx->loop); /* the writer's handle closed: its thread ended, it is freed */
    uv_cond_destroy(&fx->f.cv);
    uv_mutex_destroy(&fx->f.mu);
    harness_rmtree(fx->tmp);
    return 0;
}

static void close_writer(struct fixture *fx)
{
    fx->closed = 1;
    agent_replica_writer_close(fx->w);
}

/* Chunk i: CHUNK bytes of i + the position, so order and content both show. */
static void fill(uint8_t *b, unsigned i)
{
    for (unsigned k = 0; k < CHUNK; k++)
        b[k] = (uint8_t)(i * 7 + k);
}

static uint64_t sum_of_chunks(unsigned n)
{
    XXH3_state_t *h = XXH3_createState();
    uint8_t b[CHUNK];
    uint64_t sum;

    XXH3_64bits_reset(h);
    for (unsigned i = 0; i < n; i++) {
        fill(b, i);
        XXH3_64bits_update(h, b, CHUNK);
    }
    sum = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return sum;
}

static void start(struct fixture *fx, uint64_t checksum, size_t max)
{
    assert_int_equal(agent_replica_writer_start(&fx->loop, &fake_ops, &fx->f, checksum, max,
                                                on_event, fx, &fx->w),
                     0);
}

static void test_in_order_off_the_loop(void **state)
{
    struct fixture *fx = *state;
    uint8_t b[CHUNK];

    start(fx, sum_of_chunks(NCHUNKS), NCHUNKS * CHUNK);
    for (unsigned i = 0; i < NCHUNKS; i++) {
        fill(b, i);
        assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
        if (i % 8 == 0)
            uv_run(&fx->loop, UV_RUN_NOWAIT); /* some written meanwhile, some queued */
    }
    assert_int_equal(agent_replica_writer_finish(fx->w), 0);
    assert_int_equal(agent_replica_writer_finish(fx->w), -EPIPE);
    assert_int_equal(agent_replica_writer_push(fx->w, b, 1), -EPIPE);
    HARNESS_RUN_UNTIL(&fx->h, fx->done == 1);
    assert_int_equal(fx->failed, 0);
    assert_true(fx->progress >= 1);
    assert_int_equal(agent_replica_writer_written(fx->w), NCHUNKS * CHUNK);
    assert_int_equal(agent_replica_writer_queued(fx->w), 0);
    assert_int_equal(fake_get(&fx->f, &fx->f.finishes), 1);
    assert_int_equal(fx->f.n, NCHUNKS * CHUNK);
    for (unsigned i = 0; i < NCHUNKS; i++) {
        fill(b, i);
        assert_memory_equal(fx->f.got + i * CHUNK, b, CHUNK);
    }
    close_writer(fx);
    HARNESS_RUN_UNTIL(&fx->h, fake_get(&fx->f, &fx->f.closes) == 1);
    assert_int_equal(fx->f.kept, 1); /* finished: the copy stays */
    assert_int_equal(fx->f.on_loop_thread, 0);
    assert_int_equal(fx->after_close, 0);
}

static void test_checksum_mismatch(void **state)
{
    struct fixture *fx = *state;
    uint8_t b[CHUNK];

    start(fx, sum_of_chunks(4) ^ 1, 4 * CHUNK);
    for (unsigned i = 0; i < 4; i++) {
        fill(b, i);
        assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
    }
    assert_int_equal(agent_replica_writer_finish(fx->w), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->failed == 1);
    assert_int_equal(fx->done, 0);
    assert_non_null(strstr(fx->why, "checksum"));
    assert_non_null(strstr(fx->why, "!= announced"));
    assert_int_equal(fake_get(&fx->f, &fx->f.finishes), 0); /* nothing put in place */
    close_writer(fx);
    HARNESS_RUN_UNTIL(&fx->h, fake_get(&fx->f, &fx->f.closes) == 1);
    assert_int_equal(fx->f.kept, 0);
}

static void test_write_failure(void **state)
{
    struct fixture *fx = *state;
    uint8_t b[CHUNK];

    fx->f.fail_at = 3;
    gate(&fx->f, 1); /* every chunk is pushed before the third write can fail */
    start(fx, sum_of_chunks(8), 8 * CHUNK);
    for (unsigned i = 0; i < 8; i++) {
        fill(b, i);
        assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
    }
    gate(&fx->f, 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->failed == 1);
    assert_string_equal(fx->why, "writing: disk on fire");
    assert_int_equal(agent_replica_writer_written(fx->w), 2 * CHUNK);
    assert_int_equal(fake_get(&fx->f, &fx->f.writes), 3); /* nothing after the failure */
    assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), -EPIPE);
    assert_int_equal(agent_replica_writer_finish(fx->w), -EPIPE);
    close_writer(fx);
    HARNESS_RUN_UNTIL(&fx->h, fake_get(&fx->f, &fx->f.closes) == 1);
    assert_int_equal(fx->f.kept, 0);
    assert_int_equal(fx->done, 0);
}

/* Backpressure: with the disk stuck, the bound is reached exactly and never passed; room comes
 * back only as bytes are written. */
static void test_bound(void **state)
{
    struct fixture *fx = *state;
    uint8_t b[CHUNK];
    unsigned pushed = 0;

    gate(&fx->f, 1);
    start(fx, 0, 4 * CHUNK);
    fill(b, 0);
    while (agent_replica_writer_push(fx->w, b, CHUNK) == 0)
        pushed++;
    assert_int_equal(pushed, 4);
    assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), -ENOBUFS);
    assert_int_equal(agent_replica_writer_push(fx->w, b, 1), -ENOBUFS);
    assert_int_equal(agent_replica_writer_queued(fx->w), 4 * CHUNK);
    HARNESS_RUN_UNTIL(&fx->h, fake_held(&fx->f));
    harness_run_for(&fx->h, 50);
    assert_int_equal(fx->progress, 0); /* nothing written while the gate is shut */
    assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), -ENOBUFS);
    gate(&fx->f, 0);
    HARNESS_RUN_UNTIL(&fx->h, agent_replica_writer_written(fx->w) == 4 * CHUNK);
    assert_int_equal(agent_replica_writer_queued(fx->w), 0);
    assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
    assert_int_equal(fx->failed, 0);
}

/* Closing while the thread is inside a write: close returns at once (the loop runs on), no
 * callback comes, the chunks still queued are dropped, and once the write returns the target
 * is closed without keeping anything and the writer frees itself. */
static void test_close_mid_write(void **state)
{
    struct fixture *fx = *state;
    uint8_t b[CHUNK];

    gate(&fx->f, 1);
    start(fx, sum_of_chunks(3), 3 * CHUNK);
    for (unsigned i = 0; i < 3; i++) {
        fill(b, i);
        assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
    }
    assert_int_equal(agent_replica_writer_finish(fx->w), 0);
    HARNESS_RUN_UNTIL(&fx->h, fake_held(&fx->f));
    close_writer(fx);
    harness_run_for(&fx->h, 50); /* the loop is not held up by the write in flight */
    assert_true(fake_held(&fx->f));
    assert_int_equal(fake_get(&fx->f, &fx->f.closes), 0); /* not while the write runs */
    gate(&fx->f, 0);
    HARNESS_RUN_UNTIL(&fx->h, fake_get(&fx->f, &fx->f.closes) == 1);
    assert_int_equal(fx->f.kept, 0);
    assert_int_equal(fake_get(&fx->f, &fx->f.writes), 1); /* the queued ones were dropped */
    assert_int_equal(fake_get(&fx->f, &fx->f.finishes), 0);
    harness_run_for(&fx->h, 20);
    assert_int_equal(fx->after_close, 0);
    assert_int_equal(fx->progress + fx->done + fx->failed, 0);
}

/* The callback may close the writer (replica.c ends a copy from it). */
static void test_close_from_callback(void **state)
{
    struct fixture *fx = *state;
    uint8_t b[CHUNK];

    fx->close_in_cb = 1;
    start(fx, sum_of_chunks(2), 2 * CHUNK);
    fill(b, 0);
    assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
    fill(b, 1);
    assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
    assert_int_equal(agent_replica_writer_finish(fx->w), 0);
    HARNESS_RUN_UNTIL(&fx->h, fake_get(&fx->f, &fx->f.closes) == 1);
    assert_int_equal(fx->progress + fx->done + fx->failed, 1);
    assert_int_equal(fx->after_close, 0);
}

/* --- the agent's target ------------------------------------------------------------------- */

static void run_store(struct fixture *fx, struct agent_replica_store *s, const uint8_t *p, size_t n,
                      int finish)
{
    assert_int_equal(agent_replica_writer_start(&fx->loop, &agent_replica_store_ops, s,
                                                XXH3_64bits(p, n), 1 << 20, on_event, fx, &fx->w),
                     0);
    assert_int_equal(agent_replica_writer_push(fx->w, p, n), 0);
    if (finish) {
        assert_int_equal(agent_replica_writer_finish(fx->w), 0);
        HARNESS_RUN_UNTIL(&fx->h, fx->done + fx->failed == 1);
        assert_int_equal(fx->done, 1);
    }
}

static int temporaries(const char *dir)
{
    char cmd[300];

    snprintf(cmd, sizeof(cmd), "ls -A %s | grep -q '^\\.tmp'", dir);
    return system(cmd) == 0;
}

/* A positional target: the chunks are placed at their offsets by the helpers (write never
 * runs), off the loop, 4 at once; while the gate holds them nothing counts as written; a failure of
 * the third chunk leaves written at the two before it, however many after it were placed. */
static void test_placed_by_helpers(void **state)
{
    struct fixture *fx = *state;
    uint8_t b[CHUNK];

    gate(&fx->f, 1);
    setenv("MUSTER_REPLICA_WRITE_HELPERS", "4", 1); /* 4 whatever the cores */
    assert_int_equal(agent_replica_writer_start(&fx->loop, &fake_at_ops, &fx->f,
                                                sum_of_chunks(NCHUNKS), NCHUNKS * CHUNK, on_event,
                                                fx, &fx->w),
                     0);
    unsetenv("MUSTER_REPLICA_WRITE_HELPERS"); /* read by start */
    for (unsigned i = 0; i < NCHUNKS; i++) {
        fill(b, i);
        assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
    }
    HARNESS_RUN_UNTIL(&fx->h, fake_held(&fx->f) >= 4); /* the 4 helpers, each on a chunk */
    harness_run_for(&fx->h, 50);
    assert_int_equal(fake_held(&fx->f), 4);
    assert_int_equal(agent_replica_writer_written(fx->w), 0); /* held: not written yet */
    gate(&fx->f, 0);
    assert_int_equal(agent_replica_writer_finish(fx->w), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->done == 1);
    assert_int_equal(fx->failed, 0);
    assert_int_equal(agent_replica_writer_written(fx->w), NCHUNKS * CHUNK);
    assert_int_equal(fake_get(&fx->f, &fx->f.writes), NCHUNKS);
    assert_int_equal(fake_get(&fx->f, &fx->f.seq_writes), 0);
    assert_int_equal(fx->f.n, NCHUNKS * CHUNK);
    for (unsigned i = 0; i < NCHUNKS; i++) {
        fill(b, i);
        assert_memory_equal(fx->f.got + i * CHUNK, b, CHUNK);
    }
    assert_int_equal(fx->f.on_loop_thread, 0);
    assert_int_equal(fx->f.max_held, 4);
    close_writer(fx);
    HARNESS_RUN_UNTIL(&fx->h, fake_get(&fx->f, &fx->f.closes) == 1);
    assert_int_equal(fx->f.kept, 1);
}

static void test_placed_failure(void **state)
{
    struct fixture *fx = *state;
    uint8_t b[CHUNK];

    fx->f.fail_off = 2 * CHUNK; /* the third chunk, whichever helper places it when */
    setenv("MUSTER_REPLICA_WRITE_HELPERS", "4", 1);
    assert_int_equal(agent_replica_writer_start(&fx->loop, &fake_at_ops, &fx->f, sum_of_chunks(16),
                                                16 * CHUNK, on_event, fx, &fx->w),
                     0);
    unsetenv("MUSTER_REPLICA_WRITE_HELPERS"); /* read by start */
    for (unsigned i = 0; i < 16; i++) {
        fill(b, i);
        assert_int_equal(agent_replica_writer_push(fx->w, b, CHUNK), 0);
    }
    HARNESS_RUN_UNTIL(&fx->h, fx->failed == 1);
    assert_string_equal(fx->why, "writing: disk on fire");
    assert_int_equal(agent_replica_writer_written(fx->w), 2 * CHUNK);
    assert_int_equal(agent_replica_writer_finish(fx->w), -EPIPE);
    close_writer(fx);
    HARNESS_RUN_UNTIL(&fx->h, fake_get(&fx->f, &fx->f.closes) == 1);
    assert_int_equal(fx->f.kept, 0);
    assert_int_equal(fx->done, 0);
}

/* The agent's store places a file's chunks at their offsets: 2 MiB in 100 pushes of uneven
 * sizes lands byte for byte. */
static void test_store_file_placed(void **state)
{
    struct fixture *fx = *state;
    struct agent_replica_store *s;
    size_t n = 2u << 20, off = 0;
    uint8_t *p = malloc(n), *back = malloc(n);
    char tmpl[300], path[300];
    FILE *f;

    assert_non_null(p);
    assert_non_null(back);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31 + (i >> 13));
    snprintf(tmpl, sizeof(tmpl), "%s/.tmp.XXXXXX", fx->tmp);
    assert_int_equal(agent_replica_store_new(fx->tmp, "big.pt", tmpl, 0, 0600, &s), 0);
    assert_int_equal(agent_replica_writer_start(&fx->loop, &agent_replica_store_ops, s,
                                                XXH3_64bits(p, n), n, on_event, fx, &fx->w),
                     0);
    for (unsigned k = 0; off < n; k++) {
        size_t len = (k % 7 + 1) * 3001;

        if (len > n - off)
            len = n - off;
        assert_int_equal(agent_replica_writer_push(fx->w, p + off, len), 0);
        off += len;
    }
    assert_int_equal(agent_replica_writer_finish(fx->w), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->done + fx->failed == 1);
    assert_int_equal(fx->done, 1);
    snprintf(path, sizeof(path), "%s/big.pt", fx->tmp);
    assert_non_null(f = fopen(path, "rb"));
    assert_int_equal(fread(back, 1, n, f), n);
    assert_int_equal(fgetc(f), EOF);
    fclose(f);
    assert_memory_equal(back, p, n);
    free(p);
    free(back);
}

static void test_store_modes(void **state)
{
    struct fixture *fx = *state;
    struct agent_replica_store *s;
    static const uint8_t stream[] = "a.bin\0\0\0\0\0\0\0\0\3abcsub/b.bin\0\0\0\0\0\0\0\0\2xy";
    char tmpl[300];
    mode_t old = umask(022);

    snprintf(tmpl, sizeof(tmpl), "%s/.tmp.XXXXXX", fx->tmp);
    assert_int_equal(agent_replica_store_new(fx->tmp, "f.pt", tmpl, 0, 0100600 | 04000, &s), 0);
    run_store(fx, s, (const uint8_t *)"weights", 7, 1);
    assert_int_equal(harness_mode(fx->tmp, "f.pt"), 0600); /* the file type and set-id bits: gone */
    close_writer(fx); /* (its thread ends on its own; the next copy need not wait) */

    fx->done = fx->closed = 0;
    assert_int_equal(agent_replica_store_new(fx->tmp, "step-2", tmpl, 1, 0750, &s), 0);
    run_store(fx, s, stream, sizeof(stream) - 1, 1);
    assert_int_equal(harness_mode(fx->tmp, "step-2"), 0750);
    assert_int_equal(harness_mode(fx->tmp, "step-2/a.bin"), 0640); /* x bits gone, umask 022 */
    assert_int_equal(harness_mode(fx->tmp, "step-2/sub"), 0750);
    assert_int_equal(harness_mode(fx->tmp, "step-2/sub/b.bin"), 0640);
    close_writer(fx);

    /* no mode (a sender before modes): 0600 and 0700 */
    fx->done = fx->closed = 0;
    assert_int_equal(agent_replica_store_new(fx->tmp, "step-3", tmpl, 1, 0, &s), 0);
    run_store(fx, s, stream, sizeof(stream) - 1, 1);
    assert_int_equal(harness_mode(fx->tmp, "step-3"), 0700);
    assert_int_equal(harness_mode(fx->tmp, "step-3/a.bin"), 0600);
    assert_int_equal(harness_mode(fx->tmp, "step-3/sub"), 0700);
    close_writer(fx);
    umask(old);
    assert_false(temporaries(fx->tmp));
}

/* A copy closed half-written is removed by the thread, and nothing lands under its name. */
static void test_store_half_written_removed(void **state)
{
    struct fixture *fx = *state;
    struct agent_replica_store *s;
    static const uint8_t stream[] = "a.bin\0\0\0\0\0\0\0\0\3abcsub/b.bin\0\0\0\0\0\0\0\0\2x";
    char tmpl[300], path[300];

    snprintf(tmpl, sizeof(tmpl), "%s/.tmp.XXXXXX", fx->tmp);
    assert_int_equal(agent_replica_store_new(fx->tmp, "step-4", tmpl, 1, 0700, &s), 0);
    run_store(fx, s, stream, sizeof(stream) - 1, 0);
    HARNESS_RUN_UNTIL(&fx->h, agent_replica_writer_written(fx->w) == sizeof(stream) - 1);
    assert_true(temporaries(fx->tmp));
    close_writer(fx);
    HARNESS_RUN_UNTIL(&fx->h, !temporaries(fx->tmp));
    snprintf(path, sizeof(path), "%s/step-4", fx->tmp);
    assert_int_equal(access(path, F_OK), -1);
}

/* A directory of the replica's name that is already there stays, even an empty one (rename(2)
 * replaces an empty directory): the copy fails, its temporary goes. */
static void test_store_keeps_empty_dir(void **state)
{
    struct fixture *fx = *state;
    struct agent_replica_store *s;
    static const uint8_t stream[] = "a.bin\0\0\0\0\0\0\0\0\3abc";
    char tmpl[300], path[300], marker[320];

    snprintf(tmpl, sizeof(tmpl), "%s/.tmp.XXXXXX", fx->tmp);
    snprintf(path, sizeof(path), "%s/step-5", fx->tmp);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(agent_replica_store_new(fx->tmp, "step-5", tmpl, 1, 0700, &s), 0);
    run_store(fx, s, stream, sizeof(stream) - 1, 0);
    assert_int_equal(agent_replica_writer_finish(fx->w), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->done + fx->failed == 1);
    assert_int_equal(fx->failed, 1);
    close_writer(fx);
    HARNESS_RUN_UNTIL(&fx->h, !temporaries(fx->tmp));
    assert_int_equal(harness_mode(fx->tmp, "step-5"), 0755);
    snprintf(marker, sizeof(marker), "%s/a.bin", path);
    assert_int_equal(access(marker, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_in_order_off_the_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checksum_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_mid_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_from_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_placed_by_helpers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_placed_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_file_placed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_modes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_half_written_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_keeps_empty_dir, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
