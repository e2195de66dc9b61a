/* agent/ckptwatch.c on a private loop with real files: a checkpoint renamed into place is
 * recorded (inotify) with its checksum and the registry saved; entries already there are
 * recorded when a node starts recording; writes in place are not checkpoints; --keep prunes
 * behind; pick skips (and reports) a damaged newer entry; a node that does not record reads the
 * registry file; a world-writable directory is refused; an entry that lands is hashed off the
 * loop, and closing while that runs is safe. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "ckptwatch.h"
#include "harness.h"

struct fixture {
    uv_loop_t loop;
    struct harness h;
    struct agent_ckptwatch w;
    char tmp[128], dir[256];
    int recorded, bad, closed, pruned;
    char last_recorded[256], last_bad[256], last_pruned[256];
    char log[16][512];
    int n_log;
};

static void log_cb(void *data, const char *line)
{
    struct fixture *fx = data;

    snprintf(fx->log[fx->n_log % 16], sizeof(fx->log[0]), "%s", line);
    fx->n_log++;
}

static void recorded_cb(void *data, const struct agent_ckpt_entry *e)
{
    struct fixture *fx = data;

    fx->recorded++;
    snprintf(fx->last_recorded, sizeof(fx->last_recorded), "%s", e->name);
}

static void bad_cb(void *data, const struct agent_ckpt_entry *e, const char *why)
{
    struct fixture *fx = data;

    fx->bad++;
    snprintf(fx->last_bad, sizeof(fx->last_bad), "%s", e->name);
}

static void pruned_cb(void *data, const struct agent_ckpt_entry *e)
{
    struct fixture *fx = data;

    fx->pruned++;
    snprintf(fx->last_pruned, sizeof(fx->last_pruned), "%s", e->name);
}

static const struct agent_ckptwatch_cbs cbs = {log_cb, recorded_cb, bad_cb, pruned_cb};

static void closed_cb(void *data);

static int logged(struct fixture *fx, const char *text)
{
    for (int i = 0; i < fx->n_log && i < 16; i++)
        if (strstr(fx->log[i], text) != NULL)
            return 1;
    return 0;
}

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    harness_init_tmp(&fx.h, &fx.loop, 10000, fx.tmp, sizeof(fx.tmp), "ckptwatch");
    snprintf(fx.dir, sizeof(fx.dir), "%s/ck", fx.tmp);
    *state = &fx;
    return 0;
}

static void closed_cb(void *data)
{
    struct fixture *fx = data;

    fx->closed++;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    agent_ckptwatch_close(&fx->w, closed_cb);
    agent_ckptwatch_close(&fx->w, closed_cb); /* twice: nothing more */
    harness_close(&fx->h);
    harness_loop_close(&fx->loop);
    assert_int_equal(fx->closed, 1);
    harness_rmtree(fx->tmp);
    return 0;
}

static void start(struct fixture *fx, unsigned keep, int recording)
{
    assert_int_equal(agent_ckptwatch_init(&fx->loop, &fx->w, fx->dir, keep, &cbs, fx), 0);
    agent_ckptwatch_set_recording(&fx->w, recording);
}

/* The convention: write a temporary name, then rename into place. */
static void land(struct fixture *fx, const char *name, const char *content)
{
    char tmp[512], path[512];

    snprintf(tmp, sizeof(tmp), "%s/tmp_%s", fx->dir, name);
    snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
    harness_write_file(tmp, content);
    assert_int_equal(rename(tmp, path), 0);
}

static void test_rename_recorded(void **state)
{
    struct fixture *fx = *state;
    char reg[512], text[4096];

    start(fx, 0, 1);
    land(fx, "ckpt_1.pt", "one");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    assert_string_equal(fx->last_recorded, "ckpt_1.pt");
    assert_true(logged(fx, "checkpoint ckpt_1.pt recorded (step 1, 3 bytes"));
    snprintf(reg, sizeof(reg), "%s/.muster/registry.json", fx->dir);
    assert_true(harness_read_file(reg, text, sizeof(text)) > 0);
    assert_non_null(strstr(text, "\"ckpt_1.pt\""));
    /* bytes appended in place: damage, not a new checkpoint */
    char path[512];
    snprintf(path, sizeof(path), "%s/ckpt_1.pt", fx->dir);
    harness_write_file(path, "one-changed");
    land(fx, "ckpt_2.pt", "two");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 2);
    assert_string_equal(fx->last_recorded, "ckpt_2.pt");
    /* the same name renamed into place again with new bytes: recorded again */
    land(fx, "ckpt_2.pt", "two-b");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 3);
    struct agent_ckpt_entry e;
    assert_int_equal(agent_ckptwatch_pick(&fx->w, &e), 0);
    assert_string_equal(e.name, "ckpt_2.pt");
    assert_int_equal(e.size, 5);
}

/* A checkpoint that lands is hashed off the loop, in order with the ones after it; closing the
 * watch while one is being hashed is safe: close_cb comes once the hash returned, and nothing
 * is recorded after the close. */
static void test_hashed_off_the_loop(void **state)
{
    struct fixture *fx = *state;
    static char big[8 << 20];
    char path[512], dst[512];
    int fd;

    start(fx, 0, 1);
    memset(big, 'x', sizeof(big) - 1);
    for (int i = 1; i <= 3; i++) {
        char name[32];

        snprintf(name, sizeof(name), "ckpt_%d.pt", i);
        land(fx, name, i == 1 ? big : "small");
    }
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 3);
    assert_string_equal(fx->last_recorded, "ckpt_3.pt");
    assert_string_equal(fx->w.reg.entries[0].name, "ckpt_3.pt"); /* newest first */
    assert_string_equal(fx->w.reg.entries[2].name, "ckpt_1.pt");

    snprintf(path, sizeof(path), "%s/tmp_ckpt_4.pt", fx->dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    for (int i = 0; i < 8; i++) /* 64 MiB: its hash takes a while */
        assert_int_equal(write(fd, big, sizeof(big)), (ssize_t)sizeof(big));
    close(fd);
    land(fx, "ckpt_5.pt", "five"); /* queued behind ckpt_4.pt */
    snprintf(dst, sizeof(dst), "%s/ckpt_4.pt", fx->dir);
    assert_int_equal(rename(path, dst), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->w.scanning);
    agent_ckptwatch_close(&fx->w, closed_cb);
    HARNESS_RUN_UNTIL(&fx->h, fx->closed == 1);
    assert_false(fx->w.scanning);
    harness_run_for(&fx->h, 50);
    assert_int_equal(fx->recorded, 3);
    assert_int_equal(fx->closed, 1);
}

/* What was there before a node started recording is recorded then, and said so. */
static void test_startup_entries(void **state)
{
    struct fixture *fx = *state;
    char path[512];

    assert_int_equal(mkdir(fx->dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/ckpt_5.pt", fx->dir);
    harness_write_file(path, "five");
    start(fx, 0, 0);
    assert_int_equal(fx->recorded, 0); /* not recording: nothing */
    agent_ckptwatch_set_recording(&fx->w, 1);
    assert_int_equal(fx->recorded, 1);
    assert_true(logged(fx, "recorded at start (was there before)"));
    agent_ckptwatch_sync(&fx->w); /* nothing new */
    assert_int_equal(fx->recorded, 1);
    snprintf(path, sizeof(path), "%s/ckpt_6.pt", fx->dir);
    harness_write_file(path, "six");
    agent_ckptwatch_sync(&fx->w); /* landed without an event read yet */
    assert_int_equal(fx->recorded, 2);
}

/* --keep-checkpoints 1: once a newer one is recorded, the older one goes. */
static void test_keep_prunes(void **state)
{
    struct fixture *fx = *state;
    char path[512];
    struct stat st;

    start(fx, 1, 1);
    land(fx, "ckpt_1.pt", "one");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    land(fx, "ckpt_2.pt", "two");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 2);
    snprintf(path, sizeof(path), "%s/ckpt_1.pt", fx->dir);
    assert_int_equal(stat(path, &st), -1);
    snprintf(path, sizeof(path), "%s/ckpt_2.pt", fx->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(fx->w.reg.n, 1);
    assert_int_equal(fx->pruned, 1); /* reported (the server stops listing a pruned replica) */
    assert_string_equal(fx->last_pruned, "ckpt_1.pt");
}

/* pick: the newest entry that verifies; a damaged newer one is reported and skipped. */
static void test_pick_skips_damaged(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckpt_entry e;
    char path[512];

    start(fx, 0, 1);
    assert_int_equal(agent_ckptwatch_pick(&fx->w, &e), -ENOENT); /* none: a fresh start */
    land(fx, "ckpt_1.pt", "good");
    land(fx, "ckpt_2.pt", "fine");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 2);
    snprintf(path, sizeof(path), "%s/ckpt_2.pt", fx->dir);
    harness_write_file(path, "evil"); /* same size, other bytes */
    assert_int_equal(agent_ckptwatch_pick(&fx->w, &e), 0);
    assert_string_equal(e.name, "ckpt_1.pt");
    assert_int_equal(fx->bad, 1);
    assert_string_equal(fx->last_bad, "ckpt_2.pt");
    assert_true(logged(fx, "checkpoint ckpt_2.pt skipped"));
    assert_int_equal(fx->w.reg.n, 2); /* it stays registered */
    snprintf(path, sizeof(path), "%s/ckpt_1.pt", fx->dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(agent_ckptwatch_pick(&fx->w, &e), -ENOENT);
}

/* A node that does not record reads what the recording node saved. */
static void test_reader_reloads(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckptwatch reader;

    start(fx, 0, 1);
    assert_int_equal(agent_ckptwatch_init(&fx->loop, &reader, fx->dir, 0, &cbs, fx), 0);
    land(fx, "ckpt_3.pt", "three");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    assert_int_equal(reader.reg.n, 0);
    agent_ckptwatch_sync(&reader);
    assert_int_equal(reader.reg.n, 1);
    assert_string_equal(reader.reg.entries[0].name, "ckpt_3.pt");
    assert_int_equal(fx->recorded, 1);         /* the reader recorded nothing itself */
    agent_ckptwatch_close(&reader, closed_cb); /* on this stack: closed before returning */
    HARNESS_RUN_UNTIL(&fx->h, fx->closed == 1);
    fx->closed = 0;
}

/* A directory anyone may write is refused, with one line that says why. */
static void test_unsafe_dir(void **state)
{
    struct fixture *fx = *state;

    assert_int_equal(mkdir(fx->dir, 0755), 0);
    assert_int_equal(chmod(fx->dir, 0777), 0);
    assert_int_equal(agent_ckptwatch_init(&fx->loop, &fx->w, fx->dir, 0, &cbs, fx), -EPERM);
    assert_int_equal(fx->n_log, 1);
    assert_non_null(strstr(fx->log[0], "error: "));
    fx->closed = 1; /* nothing was opened: nothing to close */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rename_recorded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hashed_off_the_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_startup_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_prunes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pick_skips_damaged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_reloads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsafe_dir, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
