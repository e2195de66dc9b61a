/* agent/ckptwatch.c on a private loop with real files: a checkpoint renamed into place is
 * recorded (inotify) with its checksum and the registry saved; written in place, it is recorded
 * once complete by its layout (a torch.save zip with its end record, an HF checkpoint-N/ with
 * trainer_state.json, a DCP directory with .metadata) or, of no known layout, once settled; a
 * cut one is not; a last good copy of a rewritten file is kept and put back in place by the pick
 * when the file in place was cut; entries already there are recorded when a node starts
 * recording; --keep prunes behind; pick skips (and reports) a damaged newer entry; a node that
 * does not record reads the registry file; a world-writable directory is refused; hashing a
 * large checkpoint never stalls the loop. */
#include <errno.h>
#include <fcntl.h>
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

#include "ckptwatch.h"
#include "ckptwatch_priv.h"
#include "harness.h"

struct fixture {
    uv_loop_t loop;
    struct harness h;
    struct agent_ckptwatch w;
    char tmp[128], dir[256];
    int recorded, bad, closed, pruned;
    char last_recorded[256], last_bad[256], last_pruned[256];
    char log[64][512];
    int n_log;
    int picked, pick_rc;
    struct agent_ckpt_entry pick;
    int flushed;
};

static void log_cb(void *data, enum mc_log_level level, const char *line)
{
    struct fixture *fx = data;
    const char *tag = level == MC_LOG_ERROR ? "error: " : level == MC_LOG_WARN ? "warning: " : "";

    /* the level shown as the console shows it, so a test reads "error: " where it expects one */
    snprintf(fx->log[fx->n_log % 64], sizeof(fx->log[0]), "%s%s", tag, line);
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
    for (int i = 0; i < fx->n_log && i < 64; i++)
        if (strstr(fx->log[i], text) != NULL)
            return 1;
    return 0;
}

static int setup(void **state)
{
    static struct fixture fx;

    memset(&fx, 0, sizeof(fx));
    /* 40 s a wait: hashing test_superseded's 2 GiB took over 10 s on a loaded 2-core VM */
    harness_init_tmp(&fx.h, &fx.loop, 40000, fx.tmp, sizeof(fx.tmp), "ckptwatch");
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

static void flush(struct fixture *fx, int clean);

/* Recording starts with a scan of what is there (off the loop): waited for, so that what a
 * test writes next comes by events, not by that scan. */
static void start(struct fixture *fx, unsigned keep, int recording)
{
    assert_int_equal(agent_ckptwatch_init(&fx->loop, &fx->w, fx->dir, keep, &cbs, fx), 0);
    agent_ckptwatch_set_recording(&fx->w, recording);
    if (recording)
        flush(fx, 0);
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

static void on_pick(void *data, int rc, const struct agent_ckpt_entry *e)
{
    struct fixture *fx = data;

    fx->picked++;
    fx->pick_rc = rc;
    if (rc == 0)
        fx->pick = *e;
}

/* The pick is asynchronous: its answer comes on the loop, never from inside the call. */
static int pick(struct fixture *fx, struct agent_ckpt_entry *e)
{
    int before = fx->picked;

    agent_ckptwatch_pick(&fx->w, on_pick, fx);
    assert_int_equal(fx->picked, before);
    HARNESS_RUN_UNTIL(&fx->h, fx->picked == before + 1);
    if (fx->pick_rc == 0 && e != NULL)
        *e = fx->pick;
    return fx->pick_rc;
}

static void on_flushed(void *data)
{
    ((struct fixture *)data)->flushed++;
}

static void flush(struct fixture *fx, int clean)
{
    int before = fx->flushed;

    agent_ckptwatch_flush(&fx->w, clean, on_flushed, fx);
    HARNESS_RUN_UNTIL(&fx->h, fx->flushed == before + 1);
}

static int registry_has(struct fixture *fx, const char *file, const char *name)
{
    char path[512], text[8192], quoted[300];

    snprintf(path, sizeof(path), "%s/.muster/%s", fx->dir, file);
    snprintf(quoted, sizeof(quoted), "\"%s\"", name);
    return harness_read_file(path, text, sizeof(text)) > 0 && strstr(text, quoted) != NULL;
}

static void path_of(struct fixture *fx, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", fx->dir, name);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    close(fd);
}

/* What torch.save leaves: a zip whose end-of-central-directory record ends the file; cut
 * short (a kill in the middle of the write), the record is missing. */
static size_t make_zip(unsigned char *buf, size_t body, unsigned char fill)
{
    memcpy(buf, "PK\x03\x04", 4);
    memset(buf + 4, fill, body);
    memset(buf + 4 + body, 0, 22);
    memcpy(buf + 4 + body, "PK\x05\x06", 4);
    return 4 + body + 22;
}

static void test_rename_recorded(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckpt_entry e;

    start(fx, 0, 1);
    land(fx, "ckpt_1.pt", "one");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    assert_string_equal(fx->last_recorded, "ckpt_1.pt");
    assert_true(logged(fx, "checkpoint ckpt_1.pt recorded (step 1, 3 bytes"));
    HARNESS_RUN_UNTIL(&fx->h, registry_has(fx, "registry.json", "ckpt_1.pt"));
    land(fx, "ckpt_2.pt", "two");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 2);
    /* the same name renamed into place again with new bytes: recorded again */
    land(fx, "ckpt_2.pt", "two-b");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 3);
    assert_int_equal(pick(fx, &e), 0);
    assert_string_equal(e.name, "ckpt_2.pt");
    assert_int_equal(e.size, 5);
}

/* torch.save to the final path (nanoGPT): recorded once its zip is whole, not while cut. */
static void test_in_place_zip(void **state)
{
    struct fixture *fx = *state;
    unsigned char buf[8192];
    char path[512];
    size_t n = make_zip(buf, 4000, 'a');

    start(fx, 0, 1);
    agent_ckptwatch_configure(&fx->w, 60000, NULL); /* the layout decides, not the settle */
    path_of(fx, "ckpt.pt", path, sizeof(path));
    write_bytes(path, buf, n / 2); /* closed after half of it */
    harness_run_for(&fx->h, 300);
    assert_int_equal(fx->recorded, 0);
    write_bytes(path, buf, n);
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    assert_true(logged(fx, "checkpoint ckpt.pt recorded (step -1, 4026 bytes"));
    /* no step: rewritten in place every time, so its last good version is kept aside */
    HARNESS_RUN_UNTIL(&fx->h, logged(fx, "last good copy of ckpt.pt kept"));
    HARNESS_RUN_UNTIL(&fx->h, registry_has(fx, "good.json", "ckpt.pt"));
}

/* A kill in the middle of the next torch.save cuts the only file: the pick puts the last good
 * version back in place before the workers start, and says so. */
static void test_restore_cut_file(void **state)
{
    struct fixture *fx = *state;
    unsigned char buf[8192], back[8192];
    char path[512];
    size_t n = make_zip(buf, 4000, 'a');
    struct agent_ckpt_entry e;
    struct stat st;
    int fd;

    start(fx, 0, 1);
    path_of(fx, "ckpt.pt", path, sizeof(path));
    write_bytes(path, buf, n);
    HARNESS_RUN_UNTIL(&fx->h, logged(fx, "last good copy of ckpt.pt kept"));
    make_zip(buf, 4000, 'b');
    write_bytes(path, buf, 1000); /* the rewrite, killed */
    flush(fx, 0);
    assert_true(logged(fx, "checkpoint ckpt.pt not recorded: a zip (torch.save) without its end"));
    assert_int_equal(fx->recorded, 1);
    assert_int_equal(pick(fx, &e), 0);
    assert_string_equal(e.name, "ckpt.pt");
    assert_true(logged(fx, "checkpoint ckpt.pt restored from its last good copy"));
    assert_true(logged(fx, "truncated?"));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, (off_t)n);
    assert_int_equal(st.st_mode & 0777, 0600); /* the original's mode, never wider */
    fd = open(path, O_RDONLY);
    assert_int_equal(read(fd, back, sizeof(back)), (ssize_t)n);
    close(fd);
    assert_int_equal(back[10], 'a');
    assert_int_equal(pick(fx, &e), 0); /* it verifies in place now: nothing more to restore */
}

/* An unknown format written in place counts once unchanged for the settle time; written and
 * then the workers stopped before that (not clean), it does not. */
static void test_settle_rule(void **state)
{
    struct fixture *fx = *state;
    char path[512];

    start(fx, 0, 1);
    agent_ckptwatch_configure(&fx->w, 200, NULL);
    path_of(fx, "weights_7.bin", path, sizeof(path));
    harness_write_file(path, "raw tensors");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    agent_ckptwatch_configure(&fx->w, 60000, NULL);
    path_of(fx, "weights_8.bin", path, sizeof(path));
    harness_write_file(path, "raw tensors, cut?");
    flush(fx, 0);
    assert_int_equal(fx->recorded, 1);
    assert_true(logged(fx, "weights_8.bin not recorded: written in place, and the workers"));
    flush(fx, 1); /* every worker exited 0: what it wrote is complete */
    assert_int_equal(fx->recorded, 2);
}

static void mkfile(struct fixture *fx, const char *rel, const char *text)
{
    char path[512];

    path_of(fx, rel, path, sizeof(path));
    harness_write_file(path, text);
}

/* HF Trainer writes checkpoint-N/ in place, trainer_state.json last; DCP renames .metadata in
 * last. Neither counts before its marker, however long it sits. */
static void test_directory_layouts(void **state)
{
    struct fixture *fx = *state;
    char path[512], to[512];

    start(fx, 0, 1);
    agent_ckptwatch_configure(&fx->w, 100, NULL);
    path_of(fx, "checkpoint-5", path, sizeof(path));
    assert_int_equal(mkdir(path, 0700), 0);
    harness_run_for(&fx->h, 50); /* the watch on it comes with the event */
    mkfile(fx, "checkpoint-5/config.json", "{}");
    mkfile(fx, "checkpoint-5/optimizer.pt", "not a zip: a legacy pickle");
    harness_run_for(&fx->h, 500);
    assert_int_equal(fx->recorded, 0);
    mkfile(fx, "checkpoint-5/trainer_state.json", "{\"global_step\": 5}");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    assert_string_equal(fx->last_recorded, "checkpoint-5");
    assert_true(logged(fx, "checkpoint checkpoint-5 recorded (step 5"));

    path_of(fx, "step-9", path, sizeof(path));
    assert_int_equal(mkdir(path, 0700), 0);
    harness_run_for(&fx->h, 50);
    mkfile(fx, "step-9/__0_0.distcp", "shard 0");
    mkfile(fx, "step-9/__1_0.distcp", "shard 1");
    harness_run_for(&fx->h, 500);
    assert_int_equal(fx->recorded, 1);
    mkfile(fx, "step-9/.metadata.tmp", "meta");
    path_of(fx, "step-9/.metadata.tmp", path, sizeof(path));
    path_of(fx, "step-9/.metadata", to, sizeof(to));
    assert_int_equal(rename(path, to), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 2);
    assert_string_equal(fx->last_recorded, "step-9");
}

static void tick_cb(uv_timer_t *t)
{
    uint64_t *last = t->data, now = uv_hrtime();

    if (last[0] != 0 && now - last[0] > last[1])
        last[1] = now - last[0];
    last[0] = now;
}

/* A 256 MiB checkpoint is hashed while a 10 ms timer keeps its time: the loop never waits. */
static void test_loop_not_blocked(void **state)
{
    struct fixture *fx = *state;
    uint64_t tick[2] = {0, 0};
    unsigned char *big = calloc(1, 256u << 20);
    char tmp[512], path[512];
    uv_timer_t t;

    assert_non_null(big);
    for (size_t i = 0; i < (256u << 20); i += 4096)
        big[i] = (unsigned char)i;
    start(fx, 0, 1);
    path_of(fx, ".big.tmp", tmp, sizeof(tmp));
    write_bytes(tmp, big, 256u << 20);
    free(big);
    uv_timer_init(&fx->loop, &t);
    t.data = tick;
    uv_timer_start(&t, tick_cb, 10, 10);
    path_of(fx, "big_1.bin", path, sizeof(path));
    assert_int_equal(rename(tmp, path), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    uv_close((uv_handle_t *)&t, NULL);
    print_message("largest gap between 10 ms ticks while hashing 256 MiB: %.1f ms\n",
                  tick[1] / 1e6);
    assert_true(tick[1] < 100 * 1000000ull);
}

/* A checkpoint still waiting to be hashed while hashing has fallen behind is superseded by a
 * newer one (by step), not queued behind it; the flush at the end still records it. */
static void test_superseded(void **state)
{
    struct fixture *fx = *state;
    char path[512], tmp[512];
    int fd;

    start(fx, 0, 1);
    fx->w.supersede_ms = 0; /* behind as soon as anything runs */
    path_of(fx, ".big.tmp", tmp, sizeof(tmp));
    fd = open(tmp, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 2ll << 30), 0); /* 2 GiB of holes: a hash that takes a while */
    close(fd);
    path_of(fx, "big_1.bin", path, sizeof(path));
    assert_int_equal(rename(tmp, path), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->w.running != NULL && fx->w.running->kind == CKW_EXAM);
    land(fx, "ckpt_2.pt", "two");
    land(fx, "ckpt_3.pt", "three");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 2);
    assert_true(logged(fx, "checkpoint ckpt_2.pt superseded by ckpt_3.pt before it was hashed"));
    assert_string_equal(fx->last_recorded, "ckpt_3.pt");
    flush(fx, 0);
    assert_int_equal(fx->recorded, 3);
}

/* What was there before a node started recording is recorded then, and said so; a cut zip
 * found there is not. */
static void test_startup_entries(void **state)
{
    struct fixture *fx = *state;
    unsigned char buf[256];
    char path[512];
    size_t n = make_zip(buf, 100, 'z');

    assert_int_equal(mkdir(fx->dir, 0755), 0);
    path_of(fx, "ckpt_5.pt", path, sizeof(path));
    harness_write_file(path, "five");
    path_of(fx, "ckpt_9.pt", path, sizeof(path));
    write_bytes(path, buf, n - 10);
    start(fx, 0, 0);
    harness_run_for(&fx->h, 100);
    assert_int_equal(fx->recorded, 0); /* not recording: nothing */
    agent_ckptwatch_set_recording(&fx->w, 1);
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 1);
    assert_true(logged(fx, "recorded at start (was there before)"));
    HARNESS_RUN_UNTIL(&fx->h, logged(fx, "checkpoint ckpt_9.pt not recorded"));
    flush(fx, 0); /* nothing new */
    assert_int_equal(fx->recorded, 1);
    path_of(fx, "ckpt_6.pt", path, sizeof(path));
    harness_write_file(path, "six");
    flush(fx, 1); /* landed without an event read yet; the workers ended well */
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
    HARNESS_RUN_UNTIL(&fx->h, fx->pruned == 1); /* reported (the server stops listing it) */
    path_of(fx, "ckpt_1.pt", path, sizeof(path));
    assert_int_equal(stat(path, &st), -1);
    path_of(fx, "ckpt_2.pt", path, sizeof(path));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(fx->w.reg.n, 1);
    assert_string_equal(fx->last_pruned, "ckpt_1.pt");
    /* a name without a step (a trainer's final model beside its checkpoints) is never pruned */
    land(fx, "model.safetensors", "final");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 3);
    land(fx, "ckpt_3.pt", "three");
    HARNESS_RUN_UNTIL(&fx->h, fx->pruned == 2);
    path_of(fx, "model.safetensors", path, sizeof(path));
    assert_int_equal(stat(path, &st), 0);
    assert_string_equal(fx->last_pruned, "ckpt_2.pt");
}

static int part_calls, part_rc;
static struct agent_ckpt_entry part_e;

static void on_part(void *data, int rc, const struct agent_ckpt_entry *e)
{
    (void)data;
    part_calls++;
    part_rc = rc;
    part_e = *e;
}

/* This node's part of what rank 0 recorded (a node that does not record), asked and answered
 * off the loop, never from inside the call. */
static int part(struct fixture *fx, const char *name, uint32_t k, uint32_t n)
{
    int before = part_calls;

    agent_ckptwatch_part(&fx->w, name, k, n, on_part, fx);
    assert_int_equal(part_calls, before);
    HARNESS_RUN_UNTIL(&fx->h, part_calls == before + 1);
    assert_string_equal(part_e.name, name);
    assert_int_equal(part_e.part, k);
    assert_int_equal(part_e.parts, n);
    return part_rc;
}

/* Sharded checkpoints: a directory of this node's ranks' shards without the coordinator's
 * .metadata is recorded as its part (saved with the part, never a resume pick of its own); a
 * whole directory (shared with rank 0's node), a file, a missing name are no part of its own;
 * a shard cut short is no part either; --keep-checkpoints 2 keeps the parts of the newest two
 * steps and reports those it removed. */
static void test_parts(void **state)
{
    struct fixture *fx = *state;
    unsigned char zip[256];
    size_t n = make_zip(zip, 100, 'z');
    char path[512];
    struct stat st;

    start(fx, 2, 0); /* a node that does not hold group rank 0 */
    for (int step = 5; step <= 15; step += 5) {
        char rel[64];
        snprintf(rel, sizeof(rel), "step-%d", step);
        path_of(fx, rel, path, sizeof(path));
        assert_int_equal(mkdir(path, 0700), 0);
        snprintf(rel, sizeof(rel), "step-%d/__2_0.distcp", step);
        mkfile(fx, rel, "shard 2");
        snprintf(rel, sizeof(rel), "step-%d/__3_0.distcp", step);
        path_of(fx, rel, path, sizeof(path));
        write_bytes(path, zip, n);
    }
    assert_int_equal(part(fx, "step-5", 2, 3), 0);
    assert_int_equal(part_e.step, 5);
    assert_true(part_e.size > 0);
    assert_true(logged(fx, "checkpoint step-5 recorded as part 2 of 3"));
    HARNESS_RUN_UNTIL(&fx->h, registry_has(fx, "registry.json", "step-5"));
    assert_non_null(agent_ckpt_registry_find(&fx->w.reg, "step-5"));
    assert_int_equal(agent_ckpt_registry_find(&fx->w.reg, "step-5")->part, 2);
    assert_int_equal(pick(fx, NULL), -ENOENT); /* a part is no checkpoint of its own */
    assert_int_equal(part(fx, "step-10", 2, 3), 0);
    assert_int_equal(fx->pruned, 0);
    assert_int_equal(part(fx, "step-15", 2, 3), 0);
    HARNESS_RUN_UNTIL(&fx->h, fx->pruned == 1);
    assert_string_equal(fx->last_pruned, "step-5");
    path_of(fx, "step-5", path, sizeof(path));
    HARNESS_RUN_UNTIL(&fx->h, stat(path, &st) != 0);
    path_of(fx, "step-10", path, sizeof(path));
    assert_int_equal(stat(path, &st), 0);

    assert_int_equal(part(fx, "step-99", 2, 3), -ENOENT); /* nothing of that name here */
    mkfile(fx, "ckpt_7.pt", "a file");
    assert_int_equal(part(fx, "ckpt_7.pt", 2, 3), -ENOENT);
    path_of(fx, "step-20", path, sizeof(path));
    assert_int_equal(mkdir(path, 0700), 0);
    mkfile(fx, "step-20/__2_0.distcp", "shard 2");
    mkfile(fx, "step-20/.metadata", "meta"); /* whole: a directory shared with rank 0's node */
    assert_int_equal(part(fx, "step-20", 2, 3), -ENOENT);
    path_of(fx, "step-25", path, sizeof(path));
    assert_int_equal(mkdir(path, 0700), 0);
    path_of(fx, "step-25/__2_0.distcp", path, sizeof(path));
    write_bytes(path, zip, n - 10); /* torch.save cut short */
    assert_int_equal(part(fx, "step-25", 2, 3), -EIO);
    assert_true(logged(fx, "checkpoint step-25: this node's part not recorded"));
    assert_null(agent_ckpt_registry_find(&fx->w.reg, "step-25"));
}

/* pick: the newest entry that verifies; a damaged newer one is reported and skipped. */
static void test_pick_skips_damaged(void **state)
{
    struct fixture *fx = *state;
    struct agent_ckpt_entry e;
    char path[512];

    start(fx, 0, 1);
    assert_int_equal(pick(fx, &e), -ENOENT); /* none: a fresh start */
    land(fx, "ckpt_1.pt", "good");
    land(fx, "ckpt_2.pt", "fine");
    HARNESS_RUN_UNTIL(&fx->h, fx->recorded == 2);
    path_of(fx, "ckpt_2.pt", path, sizeof(path));
    harness_write_file(path, "evil"); /* same size, other bytes, and no worker to settle it */
    flush(fx, 0);
    assert_int_equal(pick(fx, &e), 0);
    assert_string_equal(e.name, "ckpt_1.pt");
    assert_int_equal(fx->bad, 1);
    assert_string_equal(fx->last_bad, "ckpt_2.pt");
    assert_true(logged(fx, "checkpoint ckpt_2.pt skipped"));
    assert_int_equal(fx->w.reg.n, 2); /* it stays registered */
    path_of(fx, "ckpt_1.pt", path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(pick(fx, &e), -ENOENT);
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
    HARNESS_RUN_UNTIL(&fx->h, registry_has(fx, "registry.json", "ckpt_3.pt"));
    assert_int_equal(reader.reg.n, 0);
    agent_ckptwatch_sync(&reader);
    assert_int_equal(reader.reg.n, 1);
    assert_string_equal(reader.reg.entries[0].name, "ckpt_3.pt");
    assert_int_equal(fx->recorded, 1); /* the reader recorded nothing itself */
    agent_ckptwatch_close(&reader, closed_cb);
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
        cmocka_unit_test_setup_teardown(test_in_place_zip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_cut_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settle_rule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_layouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loop_not_blocked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_superseded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_startup_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_prunes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pick_skips_damaged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_reloads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsafe_dir, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
