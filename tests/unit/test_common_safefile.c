/* common/safefile.c: directories and files that other local users cannot redirect. Parts that
 * need another owner (chown) run only as root and are skipped otherwise. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include "safefile.h"

/* paths here are short fixture paths; a truncation would fail the comparison anyway */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define OTHER_UID 65534 /* nobody */

struct fx {
    char tmp[PATH_MAX];    /* the fixture's own directory (0700, ours) */
    char victim[PATH_MAX]; /* a file that must never change */
};

static void assert_file(const char *path, const char *text)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_string_equal(buf, text);
}

static void pathf(char *out, const struct fx *fx, const char *rel)
{
    snprintf(out, PATH_MAX, "%s/%s", fx->tmp, rel);
}

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    harness_mkdtemp(fx->tmp, sizeof(fx->tmp), "safefile");
    snprintf(fx->victim, sizeof(fx->victim), "%s/victim", fx->tmp);
    harness_write_file(fx->victim, "precious\n");
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    harness_rmtree(fx->tmp);
    free(fx);
    return 0;
}

static void test_tmpdir(void **state)
{
    const char *old = getenv("TMPDIR");
    char saved[PATH_MAX] = "";
    if (old != NULL)
        snprintf(saved, sizeof(saved), "%s", old);

    unsetenv("TMPDIR");
    assert_string_equal(mc_tmpdir(), "/tmp");
    setenv("TMPDIR", "", 1); /* the empty case once wrote /muster-heartbeats-PID */
    assert_string_equal(mc_tmpdir(), "/tmp");
    setenv("TMPDIR", "relative/dir", 1);
    assert_string_equal(mc_tmpdir(), "/tmp");
    setenv("TMPDIR", "/scratch/tmp", 1);
    assert_string_equal(mc_tmpdir(), "/scratch/tmp");
    if (old != NULL)
        setenv("TMPDIR", saved, 1);
    else
        unsetenv("TMPDIR");
}

static void test_trusted(void **state)
{
    struct stat st = {.st_mode = S_IFDIR | 0755, .st_uid = geteuid()};
    char why[128];

    assert_int_equal(mc_dir_trusted(&st, why, sizeof(why)), 0);
    st.st_uid = 0;
    assert_int_equal(mc_dir_trusted(&st, why, sizeof(why)), 0); /* root's: fine */
    st.st_mode = S_IFDIR | 01777;
    assert_int_equal(mc_dir_trusted(&st, why, sizeof(why)), 0); /* /tmp */
    st.st_mode = S_IFDIR | 0777;
    assert_int_equal(mc_dir_trusted(&st, why, sizeof(why)), -EPERM);
    assert_string_equal(why, "writable by others (mode 0777)");
    st.st_mode = S_IFDIR | 0775;
    assert_int_equal(mc_dir_trusted(&st, why, sizeof(why)), -EPERM);
    assert_string_equal(why, "writable by group (mode 0775)");
    st.st_mode = S_IFDIR | 0755;
    st.st_uid = geteuid() + 1000;
    assert_int_equal(mc_dir_trusted(&st, why, sizeof(why)), -EPERM);
    char want[128];
    snprintf(want, sizeof(want), "owned by uid %u, not by you (uid %u)", geteuid() + 1000,
             geteuid());
    assert_string_equal(why, want);
    st.st_mode = S_IFREG | 0644;
    assert_int_equal(mc_dir_trusted(&st, NULL, 0), -ENOTDIR);
}

static void test_dir_create(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX], want[PATH_MAX], resolved[PATH_MAX], err[512];
    struct stat st;
    int dfd = -1;
    mode_t old = umask(0); /* a lax umask must not produce a directory muster then refuses */

    pathf(p, fx, "a//b/./c/");
    assert_int_equal(mc_dir_open(p, 0755, "--log-dir", &dfd, resolved, err, sizeof(err)), 0);
    umask(old);
    pathf(want, fx, "a/b/c");
    assert_string_equal(resolved, want);
    assert_true(dfd >= 0);
    assert_int_equal(fstat(dfd, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0755);
    close(dfd);
    pathf(want, fx, "a");
    assert_int_equal(stat(want, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);

    /* again: it exists now; ".." is taken after the directory before it */
    pathf(p, fx, "a/b/x/../c");
    assert_int_equal(mc_dir_open(p, 0755, "--log-dir", NULL, resolved, err, sizeof(err)), 0);
    pathf(want, fx, "a/b/c");
    assert_string_equal(resolved, want);

    /* a component longer than NAME_MAX is an error, never cut to another name */
    char longp[PATH_MAX];
    int n = snprintf(longp, sizeof(longp), "%s/", fx->tmp);
    memset(longp + n, 'n', 300);
    longp[n + 300] = '\0';
    assert_int_equal(mc_dir_open(longp, 0755, "--log-dir", NULL, NULL, err, sizeof(err)),
                     -ENAMETOOLONG);
    longp[n + NAME_MAX] = '\0';
    assert_int_equal(access(longp, F_OK), -1);

    /* create_mode 0: nothing is created */
    pathf(p, fx, "nope/deeper");
    assert_int_equal(mc_dir_open(p, 0, "$TMPDIR", NULL, NULL, err, sizeof(err)), -ENOENT);
    pathf(p, fx, "nope");
    assert_int_equal(access(p, F_OK), -1);
}

static void test_dir_world_writable(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX], sub[PATH_MAX], want[PATH_MAX + 128], err[512];

    pathf(p, fx, "shared");
    assert_int_equal(mkdir(p, 0777), 0);
    assert_int_equal(chmod(p, 0777), 0);
    assert_int_equal(mc_dir_open(p, 0755, "--log-dir", NULL, NULL, err, sizeof(err)), -EPERM);
    snprintf(want, sizeof(want), "refusing --log-dir %s: writable by others (mode 0777)", p);
    assert_string_equal(err, want);

    /* a parent is checked too, and nothing is created below it */
    snprintf(sub, sizeof(sub), "%s/job1/attempt_0", p);
    assert_int_equal(mc_dir_open(sub, 0755, "--log-dir", NULL, NULL, err, sizeof(err)), -EPERM);
    snprintf(want, sizeof(want), "refusing --log-dir %s: %s is writable by others (mode 0777)", sub,
             p);
    assert_string_equal(err, want);
    snprintf(sub, sizeof(sub), "%s/job1", p);
    assert_int_equal(access(sub, F_OK), -1);

    /* group-writable, not sticky */
    assert_int_equal(chmod(p, 0770), 0);
    assert_int_equal(mc_dir_open(p, 0755, "--checkpoint-dir", NULL, NULL, err, sizeof(err)),
                     -EPERM);
    assert_non_null(strstr(err, "writable by group (mode 0770)"));

    /* sticky, like /tmp: usable, what muster creates inside is checked on its own */
    assert_int_equal(chmod(p, 01777), 0);
    snprintf(sub, sizeof(sub), "%s/job1", p);
    assert_int_equal(mc_dir_open(sub, 0755, "--log-dir", NULL, NULL, err, sizeof(err)), 0);
}

/* Another user's directory or symlink planted in a sticky shared directory. */
static void test_dir_planted(void **state)
{
    struct fx *fx = *state;
    char shared[PATH_MAX], p[PATH_MAX], want[PATH_MAX + 128], resolved[PATH_MAX], err[512];

    if (geteuid() != 0)
        skip(); /* needs chown */
    pathf(shared, fx, "shared");
    assert_int_equal(mkdir(shared, 01777), 0);
    assert_int_equal(chmod(shared, 01777), 0);

    snprintf(p, sizeof(p), "%s/job1", shared); /* a directory of someone else */
    assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(chown(p, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(mc_dir_open(p, 0755, "--log-dir", NULL, NULL, err, sizeof(err)), -EPERM);
    snprintf(want, sizeof(want), "refusing --log-dir %s: owned by uid %d, not by you (uid 0)", p,
             OTHER_UID);
    assert_string_equal(err, want);

    snprintf(p, sizeof(p), "%s/job2", shared); /* a symlink of someone else to a root dir */
    assert_int_equal(symlink(fx->tmp, p), 0);
    assert_int_equal(lchown(p, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(mc_dir_open(p, 0755, "--log-dir", NULL, NULL, err, sizeof(err)), -EPERM);
    assert_non_null(strstr(err, "a symlink owned by uid 65534"));
    snprintf(p, sizeof(p), "%s/job2/attempt_0", shared); /* also as a parent */
    assert_int_equal(mc_dir_open(p, 0755, "--log-dir", NULL, NULL, err, sizeof(err)), -EPERM);
    pathf(p, fx, "attempt_0");
    assert_int_equal(access(p, F_OK), -1); /* nothing created at the link's target */

    snprintf(p, sizeof(p), "%s/job3", shared); /* our own symlink is followed, resolved */
    pathf(want, fx, "real");
    assert_int_equal(mkdir(want, 0755), 0);
    assert_int_equal(symlink("../real", p), 0);
    snprintf(p, sizeof(p), "%s/job3/logs", shared);
    assert_int_equal(mc_dir_open(p, 0755, "--log-dir", NULL, resolved, err, sizeof(err)), 0);
    pathf(want, fx, "real/logs");
    assert_string_equal(resolved, want);
}

static void test_file_open(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX];
    struct stat st;
    int dfd = open(fx->tmp, O_RDONLY | O_DIRECTORY), fd = -1;

    assert_true(dfd >= 0);
    assert_int_equal(mc_file_openat(dfd, "out.log", MC_FILE_TRUNC, 0640, &fd), 0);
    assert_int_equal(write(fd, "one\n", 4), 4);
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0640);
    close(fd);

    /* a re-run with the same --log-dir: our file is reused, truncated or appended */
    assert_int_equal(mc_file_openat(dfd, "out.log", MC_FILE_APPEND, 0640, &fd), 0);
    assert_int_equal(write(fd, "two\n", 4), 4);
    close(fd);
    pathf(p, fx, "out.log");
    assert_file(p, "one\ntwo\n");
    assert_int_equal(mc_file_open(p, MC_FILE_TRUNC | MC_FILE_APPEND, 0640, &fd), 0);
    assert_int_equal(write(fd, "3\n", 2), 2);
    close(fd);
    assert_file(p, "3\n");

    assert_int_equal(mc_file_openat(dfd, "out.log", MC_FILE_EXCL, 0640, &fd), -EEXIST);
    assert_int_equal(fd, -1);
    assert_int_equal(mc_file_openat(dfd, "a/b", 0, 0640, &fd), -EINVAL);
    assert_int_equal(mc_file_openat(dfd, "..", 0, 0640, &fd), -EINVAL);
    assert_int_equal(mkdirat(dfd, "adir", 0755), 0);
    assert_int_equal(mc_file_openat(dfd, "adir", 0, 0640, &fd), -EISDIR);
    close(dfd);
}

/* What another user may have left at the name never redirects the write. */
static void test_file_planted(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX];
    struct stat st;
    int dfd = open(fx->tmp, O_RDONLY | O_DIRECTORY), fd = -1;

    assert_true(dfd >= 0);
    assert_int_equal(symlinkat(fx->victim, dfd, "stdout.log"), 0);
    assert_int_equal(mc_file_openat(dfd, "stdout.log", MC_FILE_TRUNC, 0644, &fd), 0);
    assert_int_equal(write(fd, "x\n", 2), 2);
    close(fd);
    assert_file(fx->victim, "precious\n");
    assert_int_equal(fstatat(dfd, "stdout.log", &st, AT_SYMLINK_NOFOLLOW), 0);
    assert_true(S_ISREG(st.st_mode));

    assert_int_equal(linkat(AT_FDCWD, fx->victim, dfd, "stderr.log", 0), 0); /* hard link */
    assert_int_equal(mc_file_openat(dfd, "stderr.log", MC_FILE_TRUNC, 0644, &fd), 0);
    assert_int_equal(write(fd, "y\n", 2), 2);
    close(fd);
    assert_file(fx->victim, "precious\n");

    assert_int_equal(mkfifoat(dfd, "fifo.log", 0666), 0); /* would block an open for writing */
    assert_int_equal(mc_file_openat(dfd, "fifo.log", 0, 0644, &fd), 0);
    assert_int_equal(fstat(fd, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    close(fd);

    if (geteuid() == 0) { /* a file of someone else: replaced, theirs left alone */
        pathf(p, fx, "theirs.log");
        harness_write_file(p, "theirs\n");
        assert_int_equal(chown(p, OTHER_UID, OTHER_UID), 0);
        int keep = open(p, O_RDONLY);
        assert_int_equal(mc_file_openat(dfd, "theirs.log", MC_FILE_TRUNC, 0644, &fd), 0);
        assert_int_equal(fstat(fd, &st), 0);
        assert_int_equal(st.st_uid, 0);
        close(fd);
        char buf[16] = "";
        assert_int_equal(pread(keep, buf, sizeof(buf) - 1, 0), 7);
        assert_string_equal(buf, "theirs\n");
        close(keep);
    }
    close(dfd);
}

static int count_temps(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void test_replace(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX];
    struct stat st;

    pathf(p, fx, "registry.json");
    assert_int_equal(symlink(fx->victim, p), 0); /* planted at the final name */
    assert_int_equal(mc_file_replace(p, "{\"v\":1}\n", 8, 0644), 0);
    assert_file(fx->victim, "precious\n");
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_file(p, "{\"v\":1}\n");
    assert_int_equal(mc_file_replace(p, "{\"v\":2}\n", 8, 0600), 0);
    assert_file(p, "{\"v\":2}\n");
    assert_int_equal(count_temps(fx->tmp, ".registry.json."), 0);

    pathf(p, fx, "nodir/registry.json");
    assert_int_equal(mc_file_replace(p, "x", 1, 0644), -ENOENT);
    assert_int_equal(mc_file_replace_at(AT_FDCWD, "a/b", "x", 1, 0644), -EINVAL);
    char longname[300];
    memset(longname, 'n', 250);
    longname[250] = '\0';
    assert_int_equal(mc_file_replace_at(AT_FDCWD, longname, "x", 1, 0644), -ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tmpdir),
        cmocka_unit_test(test_trusted),
        cmocka_unit_test_setup_teardown(test_dir_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_world_writable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_planted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_planted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
