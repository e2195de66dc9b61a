#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static void watchdog_cb(uv_timer_t *t)
{
    struct harness *h = t->data;

    h->fired = 1;
    uv_stop(h->loop);
}

static void later_cb(uv_timer_t *t)
{
    struct harness *h = t->data;

    h->later_fired = 1;
}

void harness_init(struct harness *h, uv_loop_t *loop, unsigned timeout_ms)
{
    memset(h, 0, sizeof(*h));
    h->loop = loop;
    h->timeout_ms = timeout_ms;
    assert_int_equal(uv_timer_init(loop, &h->watchdog), 0);
    assert_int_equal(uv_timer_init(loop, &h->later), 0);
    h->watchdog.data = h->later.data = h;
}

void harness_close(struct harness *h)
{
    uv_close((uv_handle_t *)&h->watchdog, NULL);
    uv_close((uv_handle_t *)&h->later, NULL);
}

static void close_walk_cb(uv_handle_t *handle, void *arg)
{
    if (!uv_is_closing(handle))
        uv_close(handle, NULL);
}

void harness_loop_close(uv_loop_t *loop)
{
    int leaked;

    uv_run(loop, UV_RUN_DEFAULT); /* completes the closes the test started */
    leaked = uv_loop_alive(loop) || uv_loop_close(loop) != 0;
    if (leaked) {
        fprintf(stderr, "handles left open:\n");
        uv_print_all_handles(loop, stderr);
        uv_walk(loop, close_walk_cb, NULL);
        uv_run(loop, UV_RUN_DEFAULT);
        uv_loop_close(loop);
    }
    assert_false(leaked);
}

void harness_arm_(struct harness *h)
{
    h->fired = 0;
    uv_update_time(h->loop); /* the test may have spent a while outside the loop */
    uv_timer_start(&h->watchdog, watchdog_cb, h->timeout_ms, 0);
}

void harness_done_(struct harness *h, int ok, const char *cond, const char *file, int line)
{
    uv_timer_stop(&h->watchdog);
    /* A condition met is met, even where the watchdog came due in the same iteration: a
     * machine that stalled the test for the watchdog's length runs both timers at once. */
    if (ok)
        return;
    fprintf(stderr, "%s:%d: waited for %s: %s\n", file, line, cond,
            h->fired ? "the watchdog fired first" : "false");
    if (h->explain != NULL)
        h->explain(h->data);
    _fail(file, line);
}

void harness_run_for(struct harness *h, uint64_t ms)
{
    h->later_fired = 0;
    uv_update_time(h->loop);
    uv_timer_start(&h->later, later_cb, ms, 0);
    HARNESS_RUN_UNTIL(h, h->later_fired);
}

void harness_mkdtemp(char *dir, size_t len, const char *what)
{
    assert_true(len >= 64);
    snprintf(dir, len, "/tmp/muster-%.32s-XXXXXX", what);
    assert_non_null(mkdtemp(dir));
}

void harness_init_tmp(struct harness *h, uv_loop_t *loop, unsigned timeout_ms, char *dir,
                      size_t len, const char *what)
{
    assert_int_equal(uv_loop_init(loop), 0);
    harness_init(h, loop, timeout_ms);
    harness_mkdtemp(dir, len, what);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    if (remove(path) != 0 && errno != ENOENT)
        fprintf(stderr, "harness_rmtree: %s: %s\n", path, strerror(errno));
    return 0;
}

void harness_rmtree(const char *path)
{
    if (path != NULL && path[0] != '\0')
        nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

void harness_write_file(const char *path, const char *text)
{
    size_t len = strlen(text);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

long harness_read_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t got = 0;
    ssize_t n;

    if (fd < 0)
        return -1;
    while (got + 1 < len &&
           ((n = read(fd, buf + got, len - 1 - got)) > 0 || (n < 0 && errno == EINTR)))
        if (n > 0)
            got += (size_t)n;
    close(fd);
    buf[got] = '\0';
    return (long)got;
}

mode_t harness_mode(const char *dir, const char *rel)
{
    char path[4096];
    struct stat st;

    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    assert_int_equal(lstat(path, &st), 0);
    return st.st_mode & 07777;
}
