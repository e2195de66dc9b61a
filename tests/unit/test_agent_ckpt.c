/* agent/ckpt.c + agent/ckpt_hash.c: checkpoint entries, checksums, the registry's order,
 * pick with fallback, prune, and the JSON file. Every test works in its own temporary
 * directory; record times are set by hand, so nothing sleeps. */
#include <errno.h>
#include <limits.h>
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
#include <xxhash.h>

#include "harness.h"
#include "ckpt.h"

struct fx {
    char dir[256];
    struct agent_ckpt_registry reg;
    char log[4096]; /* every logged line, each followed by '\n' */
    int nlog;
};

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    harness_mkdtemp(fx->dir, sizeof(fx->dir), "ckpt");
    agent_ckpt_registry_init(&fx->reg);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    agent_ckpt_registry_close(&fx->reg);
    harness_rmtree(fx->dir);
    free(fx);
    return 0;
}

static void log_cb(void *arg, enum mc_log_level level, const char *line)
{
    struct fx *fx = arg;
    size_t used = strlen(fx->log);
    (void)level;
    assert_null(strchr(line, '\n')); /* one line each */
    snprintf(fx->log + used, sizeof(fx->log) - used, "%s\n", line);
    fx->nlog++;
}

static void sub(const char *dir, const char *rel, char *out)
{
    int n = snprintf(out, PATH_MAX, "%s/%s", dir, rel);
    assert_true(n > 0 && n < PATH_MAX);
}

static void put_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[PATH_MAX];
    sub(dir, name, path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* A file of len bytes whose content depends on seed. */
static void put_sized(const char *dir, const char *name, size_t len, int seed)
{
    unsigned char *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 31 + (size_t)seed);
    put_file(dir, name, buf, len);
    free(buf);
}

static int exists(const char *dir, const char *name)
{
    char path[PATH_MAX];
    struct stat st;
    sub(dir, name, path);
    return lstat(path, &st) == 0;
}

static void test_parse_step(void **state)
{
    static const struct {
        const char *name;
        int64_t step;
    } t[] = {
        {"ckpt_000120.pt", 120},
        {"step-5/", 5},
        {"step-5", 5},
        {"epoch3-step1200.pt", 1200},
        {"ckpt_120.pt", 120},
        {"ckpt_120.h5", 120}, /* an extension starting with a letter holds no step */
        {"model.pt2", -1},
        {"ckpt.120", 120},
        {"final.pt", -1},
        {"latest", -1},
        {"0", 0},
        {"ckpt_0000.pt", 0},
        {"9223372036854775807", INT64_MAX},
        {"9223372036854775808", -1}, /* does not fit */
        {"00000000000000000000000000042", 42},
        {"run7_ckpt_99.tar.gz", 99},
        {"", -1},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        int64_t got = agent_ckpt_parse_step(t[i].name);
        if (got != t[i].step)
            print_message("\"%s\": got %lld\n", t[i].name, (long long)got);
        assert_int_equal(got, t[i].step);
    }
}

static void test_names(void **state)
{
    (void)state;
    assert_true(agent_ckpt_name_is_temp(".ckpt_5.pt.tmp"));
    assert_true(agent_ckpt_name_is_temp(".hidden"));
    assert_true(agent_ckpt_name_is_temp("ckpt_5.pt.tmp"));
    assert_true(agent_ckpt_name_is_temp("ckpt_5.pt.partial"));
    assert_true(agent_ckpt_name_is_temp("ckpt_5.pt~"));
    assert_false(agent_ckpt_name_is_temp("ckpt_5.pt"));
    assert_false(agent_ckpt_name_is_temp("tmp_5.pt"));
    assert_true(agent_ckpt_name_valid("ckpt_5.pt"));
    assert_false(agent_ckpt_name_valid(""));
    assert_false(agent_ckpt_name_valid("."));
    assert_false(agent_ckpt_name_valid(".."));
    assert_false(agent_ckpt_name_valid("../etc"));
    assert_false(agent_ckpt_name_valid("a/b"));
}

static void test_file_entry(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry e;
    const char data[] = "model weights, more or less";

    put_file(fx->dir, "ckpt_000042.pt", data, sizeof(data));
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "ckpt_000042.pt", &e), 0);
    assert_string_equal(e.name, "ckpt_000042.pt");
    assert_int_equal(e.step, 42);
    assert_int_equal(e.size, sizeof(data));
    assert_true(e.checksum == XXH3_64bits(data, sizeof(data)));
    assert_true(e.mtime_ns > 0);
    assert_true(e.recorded_ns > 0);

    put_file(fx->dir, "empty.pt", "", 0);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "empty.pt", &e), 0);
    assert_int_equal(e.size, 0);
    assert_int_equal(e.step, -1);
    assert_true(e.checksum == XXH3_64bits("", 0));
}

static void test_scan_refuses(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry e;
    char path[PATH_MAX];

    put_file(fx->dir, ".ckpt_5.pt.tmp", "x", 1);
    put_file(fx->dir, "ckpt_5.pt.partial", "x", 1);
    put_file(fx->dir, "ckpt_5.pt~", "x", 1);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, ".ckpt_5.pt.tmp", &e), -EAGAIN);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "ckpt_5.pt.partial", &e), -EAGAIN);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "ckpt_5.pt~", &e), -EAGAIN);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "nothing.pt", &e), -ENOENT);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "../x", &e), -EINVAL);

    put_file(fx->dir, "real.pt", "abc", 3);
    sub(fx->dir, "link.pt", path);
    assert_int_equal(symlink("real.pt", path), 0);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "link.pt", &e), -EINVAL); /* not followed */
    sub(fx->dir, "fifo", path);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "fifo", &e), -EINVAL);
}

static void make_dir_ckpt(const char *dir, const char *name)
{
    char path[PATH_MAX], inner[PATH_MAX];
    sub(dir, name, path);
    assert_int_equal(mkdir(path, 0755), 0);
    put_file(path, "model.bin", "MODEL", 5);
    put_file(path, "optim.bin", "OPTIMIZER", 9);
    sub(path, "shards", inner);
    assert_int_equal(mkdir(inner, 0755), 0);
    put_file(inner, "0.bin", "s0", 2);
    put_file(inner, "1.bin", "s1", 2);
}

static void test_dir_entry(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry a, b;
    char path[PATH_MAX], from[PATH_MAX + 32], to[PATH_MAX + 32];

    make_dir_ckpt(fx->dir, "step-5");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-5", &a), 0);
    assert_int_equal(a.step, 5);
    assert_int_equal(a.size, 5 + 9 + 2 + 2);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-5", &b), 0);
    assert_true(a.checksum == b.checksum); /* deterministic: sorted, not readdir order */

    /* The same content under another name inside: a rename is detected. */
    sub(fx->dir, "step-5", path);
    snprintf(from, sizeof(from), "%s/shards/1.bin", path);
    snprintf(to, sizeof(to), "%s/shards/2.bin", path);
    assert_int_equal(rename(from, to), 0);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-5", &b), 0);
    assert_int_equal(b.size, a.size);
    assert_true(a.checksum != b.checksum);
    assert_int_equal(rename(to, from), 0);

    /* Bytes moved from one file to the next: same concatenation, different checksum. */
    put_file(path, "model.bin", "MODELO", 6);
    put_file(path, "optim.bin", "PTIMIZER", 8);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-5", &b), 0);
    assert_int_equal(b.size, a.size);
    assert_true(a.checksum != b.checksum);
    put_file(path, "model.bin", "MODEL", 5);
    put_file(path, "optim.bin", "OPTIMIZER", 9);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-5", &b), 0);
    assert_true(a.checksum == b.checksum);

    /* A symlink inside counts by its target text and is never followed. */
    snprintf(to, sizeof(to), "%s/latest", path);
    assert_int_equal(symlink("/nonexistent/target", to), 0);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-5", &b), 0);
    assert_int_equal(b.size, a.size);
    assert_true(a.checksum != b.checksum);
}

static void test_incremental_hash(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry whole, stepped;
    struct agent_ckpt_hash h;
    int finished = 0, steps = 0;

    put_sized(fx->dir, "big_7.pt", 3 * 1024 * 1024 + 17, 7);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "big_7.pt", &whole), 0);
    assert_int_equal(agent_ckpt_hash_begin(&h, fx->dir, "big_7.pt"), 0);
    assert_int_equal(agent_ckpt_hash_listed_size(&h), 3 * 1024 * 1024 + 17);
    assert_int_equal(agent_ckpt_hash_end(&h, &stepped), -EINVAL); /* not finished: released */
    assert_int_equal(agent_ckpt_hash_begin(&h, fx->dir, "big_7.pt"), 0);
    while (!finished) {
        assert_int_equal(agent_ckpt_hash_step(&h, 1024 * 1024, &finished), 0);
        steps++;
    }
    assert_true(steps >= 4); /* at most a MiB each */
    assert_int_equal(agent_ckpt_hash_end(&h, &stepped), 0);
    assert_true(stepped.checksum == whole.checksum);
    assert_int_equal(stepped.size, whole.size);

    /* A directory in tiny steps gives the directory's checksum too. */
    make_dir_ckpt(fx->dir, "step-9");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-9", &whole), 0);
    assert_int_equal(agent_ckpt_hash_begin(&h, fx->dir, "step-9"), 0);
    for (finished = 0, steps = 0; !finished; steps++)
        assert_int_equal(agent_ckpt_hash_step(&h, 3, &finished), 0);
    assert_true(steps > 4);
    assert_int_equal(agent_ckpt_hash_end(&h, &stepped), 0);
    assert_true(stepped.checksum == whole.checksum);

    /* Abandoning half-way, and closing zeroed or released ones, is safe. */
    assert_int_equal(agent_ckpt_hash_begin(&h, fx->dir, "big_7.pt"), 0);
    assert_int_equal(agent_ckpt_hash_step(&h, 10, &finished), 0);
    assert_false(finished);
    agent_ckpt_hash_close(&h);
    agent_ckpt_hash_close(&h);
    memset(&h, 0, sizeof(h));
    agent_ckpt_hash_close(&h);
    agent_ckpt_hash_close(NULL);
}

static void test_changed_while_hashing(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry e;
    struct agent_ckpt_hash h;
    int finished = 0;

    put_sized(fx->dir, "ckpt_3.pt", 4096, 3);
    assert_int_equal(agent_ckpt_hash_begin(&h, fx->dir, "ckpt_3.pt"), 0);
    put_sized(fx->dir, "ckpt_3.pt", 100, 3); /* a non-atomic writer truncates and rewrites */
    assert_int_equal(agent_ckpt_hash_step(&h, 0, &finished), 0);
    assert_true(finished);
    assert_int_equal(agent_ckpt_hash_end(&h, &e), -EBUSY);
}

static struct agent_ckpt_entry mk(const char *name, int64_t step, int64_t recorded)
{
    struct agent_ckpt_entry e;
    memset(&e, 0, sizeof(e));
    snprintf(e.name, sizeof(e.name), "%s", name);
    e.step = step;
    e.recorded_ns = recorded;
    return e;
}

static void assert_order(const struct agent_ckpt_registry *reg, const char *const *names, size_t n)
{
    assert_int_equal(reg->n, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(reg->entries[i].name, names[i]);
}

static void test_ordering(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry e;

    e = mk("ckpt_10.pt", 10, 100);
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk("ckpt_30.pt", 30, 50); /* newer step wins over a later record */
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk("ckpt_20.pt", 20, 300);
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk("final.pt", -1, 999); /* no step: after every entry with one */
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk("best.pt", -1, 500);
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk("again_20.pt", 20, 400); /* same step: later record first */
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk("tie_20.pt", 20, 400); /* full tie: the one added last first */
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    const char *want[] = {"ckpt_30.pt", "tie_20.pt", "again_20.pt", "ckpt_20.pt",
                          "ckpt_10.pt", "final.pt",  "best.pt"};
    assert_order(&fx->reg, want, 7);

    /* Re-adding a name replaces it (and moves it). */
    e = mk("ckpt_10.pt", 40, 1);
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    const char *want2[] = {"ckpt_10.pt", "ckpt_30.pt", "tie_20.pt", "again_20.pt",
                           "ckpt_20.pt", "final.pt",   "best.pt"};
    assert_order(&fx->reg, want2, 7);

    assert_int_equal(agent_ckpt_registry_remove(&fx->reg, "tie_20.pt"), 0);
    assert_int_equal(agent_ckpt_registry_remove(&fx->reg, "tie_20.pt"), -ENOENT);
    assert_int_equal(fx->reg.n, 6);

    e = mk("../escape", 1, 1);
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), -EINVAL);
    assert_int_equal(fx->reg.n, 6);
}

/* Writes and records ckpt_<step>.pt of size bytes, recorded at time step. */
static void record(struct fx *fx, int step, size_t size)
{
    char name[64];
    struct agent_ckpt_entry e;
    snprintf(name, sizeof(name), "ckpt_%d.pt", step);
    put_sized(fx->dir, name, size, step);
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, name, &e), 0);
    e.recorded_ns = step;
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
}

/* record() of each step in the list, which -1 ends; every file has size bytes. */
static void record_steps(struct fx *fx, size_t size, ...)
{
    va_list ap;
    int step;

    va_start(ap, size);
    while ((step = va_arg(ap, int)) >= 0)
        record(fx, step, size);
    va_end(ap);
}

/* Records ckpt_100.pt and ckpt_120.pt, 4096 bytes each; path receives the newest one's path. */
static void record_two(struct fx *fx, char *path)
{
    record(fx, 100, 4096);
    record(fx, 120, 4096);
    sub(fx->dir, "ckpt_120.pt", path);
}

/* agent_ckpt_registry_pick() must succeed and choose name; returns what it chose. */
static struct agent_ckpt_entry pick_ok(struct fx *fx, const char *name)
{
    struct agent_ckpt_entry chosen;

    assert_int_equal(agent_ckpt_registry_pick(&fx->reg, fx->dir, &chosen, log_cb, fx), 0);
    assert_string_equal(chosen.name, name);
    return chosen;
}

static void test_pick_newest(void **state)
{
    struct fx *fx = *state;
    char path[PATH_MAX];

    record_two(fx, path);
    assert_int_equal(pick_ok(fx, "ckpt_120.pt").step, 120);
    assert_int_equal(fx->nlog, 0);
}

static void test_pick_missing(void **state)
{
    struct fx *fx = *state;
    char path[PATH_MAX];

    record_two(fx, path);
    assert_int_equal(unlink(path), 0);
    pick_ok(fx, "ckpt_100.pt");
    assert_string_equal(fx->log, "checkpoint ckpt_120.pt skipped: missing\n");
    assert_int_equal(fx->reg.n, 2); /* skipped entries stay registered */
}

static void test_pick_truncated(void **state)
{
    struct fx *fx = *state;
    char path[PATH_MAX];

    record_two(fx, path);
    assert_int_equal(truncate(path, 1024), 0);
    pick_ok(fx, "ckpt_100.pt");
    assert_string_equal(
        fx->log, "checkpoint ckpt_120.pt skipped: size 1024 != recorded 4096 (truncated?)\n");
}

static void test_pick_altered(void **state)
{
    struct fx *fx = *state;
    char path[PATH_MAX];

    record_steps(fx, 4096, 100, 110, 120, -1);
    /* Newest: one byte flipped in place, same size. Next: grown. */
    sub(fx->dir, "ckpt_120.pt", path);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 2000, SEEK_SET), 0);
    assert_int_equal(fputc(0xff, f), 0xff);
    assert_int_equal(fclose(f), 0);
    put_sized(fx->dir, "ckpt_110.pt", 5000, 110);
    pick_ok(fx, "ckpt_100.pt");
    assert_int_equal(fx->nlog, 2);
    assert_non_null(strstr(fx->log, "checkpoint ckpt_120.pt skipped: checksum "));
    assert_non_null(strstr(fx->log, "(altered?)\ncheckpoint ckpt_110.pt skipped: size 5000 != "
                                    "recorded 4096 (grown: altered?)\n"));
}

static void test_pick_none(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry chosen;
    char path[PATH_MAX];

    assert_int_equal(agent_ckpt_registry_pick(&fx->reg, fx->dir, &chosen, NULL, NULL), -ENOENT);
    record(fx, 1, 10);
    record(fx, 2, 10);
    sub(fx->dir, "ckpt_1.pt", path);
    assert_int_equal(unlink(path), 0);
    sub(fx->dir, "ckpt_2.pt", path);
    assert_int_equal(truncate(path, 0), 0);
    assert_int_equal(agent_ckpt_registry_pick(&fx->reg, fx->dir, &chosen, log_cb, fx), -ENOENT);
    assert_int_equal(fx->nlog, 2);
}

static void test_prune_keeps_n(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry e;

    for (int s = 1; s <= 5; s++)
        record(fx, s * 10, 64);
    make_dir_ckpt(fx->dir, "step-5"); /* oldest: a directory, removed recursively */
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-5", &e), 0);
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);

    assert_int_equal(agent_ckpt_registry_prune(&fx->reg, fx->dir, 2, log_cb, fx), 4);
    const char *want[] = {"ckpt_50.pt", "ckpt_40.pt"};
    assert_order(&fx->reg, want, 2);
    assert_true(exists(fx->dir, "ckpt_50.pt"));
    assert_true(exists(fx->dir, "ckpt_40.pt"));
    assert_false(exists(fx->dir, "ckpt_30.pt"));
    assert_false(exists(fx->dir, "ckpt_10.pt"));
    assert_false(exists(fx->dir, "step-5"));
    assert_int_equal(fx->nlog, 4);
    assert_non_null(strstr(fx->log, "checkpoint step-5 pruned"));

    /* Nothing more to do; keep 0 means keep 1. */
    assert_int_equal(agent_ckpt_registry_prune(&fx->reg, fx->dir, 2, NULL, NULL), 0);
    assert_int_equal(agent_ckpt_registry_prune(&fx->reg, fx->dir, 0, NULL, NULL), 1);
    assert_true(exists(fx->dir, "ckpt_50.pt"));
    assert_false(exists(fx->dir, "ckpt_40.pt"));
}

static void test_prune_never_last_verified(void **state)
{
    struct fx *fx = *state;
    char path[PATH_MAX];

    record_steps(fx, 64, 10, 20, 30, 40, -1);
    /* The two newest are corrupt: with keep 1 the newest verified (20) must survive, the
     * corrupt ones are not pruned (they are newer), only 10 goes. */
    sub(fx->dir, "ckpt_40.pt", path);
    assert_int_equal(truncate(path, 10), 0);
    put_sized(fx->dir, "ckpt_30.pt", 64, 99);
    assert_int_equal(agent_ckpt_registry_prune(&fx->reg, fx->dir, 1, log_cb, fx), 1);
    assert_true(exists(fx->dir, "ckpt_40.pt"));
    assert_true(exists(fx->dir, "ckpt_30.pt"));
    assert_true(exists(fx->dir, "ckpt_20.pt"));
    assert_false(exists(fx->dir, "ckpt_10.pt"));
    assert_int_equal(fx->reg.n, 3);
    assert_non_null(strstr(fx->log, "checkpoint ckpt_40.pt skipped: size 10 != recorded 64"));

    /* None verifies: nothing is deleted, whatever keep says. */
    sub(fx->dir, "ckpt_20.pt", path);
    assert_int_equal(truncate(path, 1), 0);
    assert_int_equal(agent_ckpt_registry_prune(&fx->reg, fx->dir, 1, NULL, NULL), 0);
    assert_int_equal(fx->reg.n, 3);
    assert_true(exists(fx->dir, "ckpt_20.pt"));
}

static void test_json_round_trip(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_registry back;
    struct agent_ckpt_entry e;
    char file[PATH_MAX];

    record(fx, 7, 100);
    record(fx, 8, 200);
    make_dir_ckpt(fx->dir, "step-9");
    assert_int_equal(agent_ckpt_scan_entry(fx->dir, "step-9", &e), 0);
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk("tie_a", -1, 5);
    e.checksum = UINT64_MAX; /* beyond a signed JSON integer */
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk("tie_b", -1, 5);
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    e = mk(".muster-part-3-of-3.step-10", 10, 5); /* a copy of another node's part */
    e.part = 3;
    e.parts = 3;
    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);

    sub(fx->dir, "registry.json", file);
    assert_int_equal(agent_ckpt_registry_save(&fx->reg, file), 0);
    assert_false(exists(fx->dir, "registry.json.tmp"));
    agent_ckpt_registry_init(&back);
    assert_int_equal(agent_ckpt_registry_load(&back, file), 0);
    assert_int_equal(back.n, fx->reg.n);
    for (size_t i = 0; i < back.n; i++) {
        const struct agent_ckpt_entry *a = &fx->reg.entries[i], *b = &back.entries[i];
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->step, b->step);
        assert_int_equal(a->size, b->size);
        assert_true(a->checksum == b->checksum);
        assert_int_equal(a->mtime_ns, b->mtime_ns);
        assert_int_equal(a->recorded_ns, b->recorded_ns);
        assert_int_equal(a->part, b->part);
        assert_int_equal(a->parts, b->parts);
    }
    assert_int_equal(agent_ckpt_registry_find(&back, ".muster-part-3-of-3.step-10")->part, 3);
    /* What was remembered verifies against the disk (a part, newer, is no candidate). */
    assert_int_equal(agent_ckpt_registry_pick(&back, fx->dir, &e, NULL, NULL), 0);
    assert_string_equal(e.name, "step-9");
    agent_ckpt_registry_close(&back);
    agent_ckpt_registry_close(&back);
    agent_ckpt_registry_close(NULL);
}

/* Where a copy of another node's part is kept, and back. */
static void test_part_names(void **state)
{
    char out[AGENT_CKPT_NAME_MAX], longname[AGENT_CKPT_NAME_MAX];

    (void)state;
    assert_int_equal(agent_ckpt_part_name(out, sizeof(out), "step-5", 2, 3), 0);
    assert_string_equal(out, ".muster-part-2-of-3.step-5");
    assert_true(agent_ckpt_name_is_temp(out)); /* the watcher never examines it */
    assert_string_equal(agent_ckpt_part_of(out), "step-5");
    assert_string_equal(agent_ckpt_part_of("step-5"), "step-5");
    assert_string_equal(agent_ckpt_part_of(".muster-part-2-of-3."), ".muster-part-2-of-3.");
    assert_string_equal(agent_ckpt_part_of(".muster-part-x-of-3.a"), ".muster-part-x-of-3.a");
    memset(longname, 'n', sizeof(longname) - 10);
    longname[sizeof(longname) - 10] = '\0';
    assert_int_equal(agent_ckpt_part_name(out, sizeof(out), longname, 2, 3), -ENAMETOOLONG);
}

static void test_json_errors(void **state)
{
    struct fx *fx = *state;
    struct agent_ckpt_entry e = mk("keep.pt", 1, 1);
    char file[PATH_MAX];
    static const char *bad[] = {
        "not json",
        "{\"version\":2,\"entries\":[]}",
        "{\"version\":1}",
        "{\"version\":1,\"entries\":[{\"name\":\"../x\",\"step\":1,\"size\":1,"
        "\"checksum\":\"0000000000000001\",\"mtime_ns\":0,\"recorded_ns\":0}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"step\":1,\"size\":-1,"
        "\"checksum\":\"0000000000000001\",\"mtime_ns\":0,\"recorded_ns\":0}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"step\":1,\"size\":1,"
        "\"checksum\":\"xyz0000000000001\",\"mtime_ns\":0,\"recorded_ns\":0}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"step\":1,\"size\":1}]}",
        /* a part beyond its parts, a part without parts */
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"step\":1,\"size\":1,"
        "\"checksum\":\"0000000000000001\",\"mtime_ns\":0,\"recorded_ns\":0,\"part\":4,"
        "\"parts\":3}]}",
        "{\"version\":1,\"entries\":[{\"name\":\"a\",\"step\":1,\"size\":1,"
        "\"checksum\":\"0000000000000001\",\"mtime_ns\":0,\"recorded_ns\":0,\"part\":1}]}",
    };

    assert_int_equal(agent_ckpt_registry_add(&fx->reg, &e), 0);
    sub(fx->dir, "absent.json", file);
    assert_int_equal(agent_ckpt_registry_load(&fx->reg, file), -ENOENT);
    sub(fx->dir, "bad.json", file);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put_file(fx->dir, "bad.json", bad[i], strlen(bad[i]));
        assert_int_equal(agent_ckpt_registry_load(&fx->reg, file), -EINVAL);
        assert_int_equal(fx->reg.n, 1); /* unchanged on error */
        assert_string_equal(fx->reg.entries[0].name, "keep.pt");
    }
    put_file(fx->dir, "empty.json", "{\"version\":1,\"entries\":[]}", 26);
    sub(fx->dir, "empty.json", file);
    assert_int_equal(agent_ckpt_registry_load(&fx->reg, file), 0);
    assert_int_equal(fx->reg.n, 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_parse_step),
        T(test_names),
        T(test_file_entry),
        T(test_scan_refuses),
        T(test_dir_entry),
        T(test_incremental_hash),
        T(test_changed_while_hashing),
        T(test_ordering),
        T(test_pick_newest),
        T(test_pick_missing),
        T(test_pick_truncated),
        T(test_pick_altered),
        T(test_pick_none),
        T(test_prune_keeps_n),
        T(test_prune_never_last_verified),
        T(test_json_round_trip),
        T(test_json_errors),
        cmocka_unit_test(test_part_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
