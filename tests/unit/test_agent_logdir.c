/* agent/logdir.c: the log-directory layout (--log-dir, private, disabled). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "logdir.h"

struct fx {
    char tmp[256];
    char old_tmpdir[PATH_MAX];
    int had_tmpdir;
};

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    const char *t = getenv("TMPDIR");
    if (fx == NULL)
        return -1;
    harness_mkdtemp(fx->tmp, sizeof(fx->tmp), "logdir");
    fx->had_tmpdir = t != NULL;
    if (t)
        snprintf(fx->old_tmpdir, sizeof(fx->old_tmpdir), "%s", t);
    setenv("TMPDIR", fx->tmp, 1); /* private directories land inside the fixture */
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    harness_rmtree(fx->tmp);
    if (fx->had_tmpdir)
        setenv("TMPDIR", fx->old_tmpdir, 1);
    else
        unsetenv("TMPDIR");
    free(fx);
    return 0;
}

static void test_explicit_log_dir(void **state)
{
    struct fx *fx = *state;
    struct agent_logdir d;
    char logs[PATH_MAX], want[PATH_MAX + 64], dir[PATH_MAX], ef[PATH_MAX], err[256];

    snprintf(logs, sizeof(logs), "%s/a/b/logs", fx->tmp); /* parents created too */
    assert_int_equal(agent_logdir_open(&d, logs, "job42", 0, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s/job42", logs);
    assert_string_equal(d.base, want);
    assert_int_equal(d.flat, 0);
    assert_true(is_dir(want));

    assert_int_equal(agent_logdir_worker(&d, 2, 3, 1, dir, ef), 0);
    snprintf(want, sizeof(want), "%s/job42/attempt_2/3", logs);
    assert_string_equal(dir, want);
    assert_true(is_dir(want));
    snprintf(want, sizeof(want), "%s/job42/attempt_2/3/error.json", logs);
    assert_string_equal(ef, want);

    /* create == 0 computes the same paths without touching the disk */
    assert_int_equal(agent_logdir_worker(&d, 5, 0, 0, dir, ef), 0);
    snprintf(want, sizeof(want), "%s/job42/attempt_5/0", logs);
    assert_string_equal(dir, want);
    assert_false(is_dir(want));

    agent_logdir_close(&d); /* an explicit --log-dir is never removed */
    snprintf(want, sizeof(want), "%s/job42/attempt_2/3", logs);
    assert_true(is_dir(want));
}

/* A later run with the same --log-dir and run id gets RUN_ID.1, then .2: never the earlier
 * run's directory. */
static void test_rerun_gets_fresh_dir(void **state)
{
    struct fx *fx = *state;
    struct agent_logdir d;
    char logs[PATH_MAX], want[PATH_MAX + 64], err[256];

    snprintf(logs, sizeof(logs), "%s/logs", fx->tmp);
    assert_int_equal(agent_logdir_open(&d, logs, "job", 0, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s/job", logs);
    assert_string_equal(d.base, want);
    assert_int_equal(agent_logdir_open(&d, logs, "job", 0, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s/job.1", logs);
    assert_string_equal(d.base, want);
    assert_true(is_dir(want));
    assert_int_equal(agent_logdir_open(&d, logs, "job", 0, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s/job.2", logs);
    assert_string_equal(d.base, want);
    /* another job whose id is job.1 starts fresh elsewhere, never inside ours */
    assert_int_equal(agent_logdir_open(&d, logs, "job.1", 0, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s/job.1.1", logs);
    assert_string_equal(d.base, want);
}

static void test_private_flat_removed(void **state)
{
    struct fx *fx = *state;
    struct agent_logdir d;
    char base[PATH_MAX], dir[PATH_MAX], ef[PATH_MAX], want[PATH_MAX + 64], err[256];
    FILE *f;

    assert_int_equal(agent_logdir_open(&d, NULL, "run1", 0, err, sizeof(err)), 0);
    assert_int_equal(d.flat, 1);
    snprintf(want, sizeof(want), "%s/muster-run1-", fx->tmp);
    assert_memory_equal(d.base, want, strlen(want));
    assert_true(is_dir(d.base));
    snprintf(base, sizeof(base), "%s", d.base);

    assert_int_equal(agent_logdir_worker(&d, 1, 7, 1, dir, ef), 0);
    assert_string_equal(dir, ""); /* no log files, no per-worker directory */
    snprintf(want, sizeof(want), "%s/error_1_7.json", base);
    assert_string_equal(ef, want);
    f = fopen(ef, "w"); /* what a worker's @record would leave */
    assert_non_null(f);
    fclose(f);

    agent_logdir_close(&d);
    assert_false(is_dir(base));
    assert_string_equal(d.base, "");
}

static void test_private_with_files_kept(void **state)
{
    struct agent_logdir d;
    char base[PATH_MAX], dir[PATH_MAX], ef[PATH_MAX], want[PATH_MAX + 64], err[256];

    (void)state;
    assert_int_equal(agent_logdir_open(&d, NULL, "run2", 1, err, sizeof(err)), 0);
    assert_int_equal(d.flat, 0);
    snprintf(base, sizeof(base), "%s", d.base);
    assert_int_equal(agent_logdir_worker(&d, 0, 1, 1, dir, ef), 0);
    snprintf(want, sizeof(want), "%s/attempt_0/1", base);
    assert_string_equal(dir, want);
    agent_logdir_close(&d);
    assert_true(is_dir(want)); /* the user was told where the logs are: they stay */
}

static void test_disabled(void **state)
{
    struct agent_logdir d;
    char dir[PATH_MAX] = "x", ef[PATH_MAX] = "x", err[256];

    (void)state;
    assert_int_equal(agent_logdir_open(&d, "/dev/null", "run3", 1, err, sizeof(err)), 0);
    assert_string_equal(d.base, "");
    assert_int_equal(agent_logdir_worker(&d, 0, 0, 1, dir, ef), 0);
    assert_string_equal(dir, "");
    assert_string_equal(ef, ""); /* TORCHELASTIC_ERROR_FILE="" like torchrun with os.devnull */
    agent_logdir_close(&d);
}

static void test_errors(void **state)
{
    struct fx *fx = *state;
    struct agent_logdir d;
    char file[PATH_MAX], longid[PATH_MAX], err[512] = "";
    FILE *f;

    snprintf(file, sizeof(file), "%s/plainfile", fx->tmp);
    f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    /* a log dir below a regular file cannot be created: a clear error, no crash */
    assert_int_equal(agent_logdir_open(&d, file, "job", 0, err, sizeof(err)), -ENOTDIR);
    assert_non_null(strstr(err, "refusing --log-dir"));
    assert_non_null(strstr(err, "not a directory"));

    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    /* longer than a run id may be (common/ids.h) */
    assert_int_equal(agent_logdir_open(&d, fx->tmp, longid, 0, err, sizeof(err)), -EINVAL);
    assert_int_equal(agent_logdir_open(&d, fx->tmp, "../escape", 0, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "invalid run id"));
}

/* Every fresh name taken (RUN_ID and RUN_ID.1 to .999): refused with a line that says so,
 * not a silent overwrite. */
static void test_run_dirs_exhausted(void **state)
{
    struct fx *fx = *state;
    struct agent_logdir d;
    char logs[PATH_MAX], path[PATH_MAX + 32], err[PATH_MAX + 256];

    snprintf(logs, sizeof(logs), "%s/logs", fx->tmp);
    assert_int_equal(mkdir(logs, 0755), 0);
    snprintf(path, sizeof(path), "%s/r", logs);
    assert_int_equal(mkdir(path, 0755), 0);
    for (int n = 1; n < 1000; n++) {
        snprintf(path, sizeof(path), "%s/r.%d", logs, n);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    assert_int_equal(agent_logdir_open(&d, logs, "r", 0, err, sizeof(err)), -EEXIST);
    assert_non_null(strstr(err, "r.1 to .999 all exist"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_explicit_log_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rerun_gets_fresh_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_private_flat_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_private_with_files_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disabled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_dirs_exhausted, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
