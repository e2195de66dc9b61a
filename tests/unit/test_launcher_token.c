/* Unit tests for launcher/token.c: which token files are accepted (regular files, Kubernetes'
 * symlink chains) and which are refused at once (FIFOs without blocking, devices, files or
 * directories others may touch, tokens longer than the wire carries), and the one-line reasons. */
#include <errno.h>
#include <fcntl.h>
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

#include "harness.h"
#include "message.h"
#include "token.h"

/* A FIFO that blocked the reader would hang the test: SIGALRM's default action ends it. */
#define WATCHDOG_S 10
#define OTHER_UID 65534 /* nobody: another user than the test's */

struct fx {
    char dir[64];
    char path[PATH_MAX];
    char token[LAUNCHER_TOKEN_FILE_MAX + 1];
    char err[1024];
};

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));

    if (fx == NULL)
        return -1;
    harness_mkdtemp(fx->dir, sizeof(fx->dir), "token");
    alarm(WATCHDOG_S);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    alarm(0);
    harness_rmtree(fx->dir);
    free(fx);
    return 0;
}

/* Writes dir/name with the given contents and mode; returns its path (fx->path). */
static const char *mkfile(struct fx *fx, const char *name, const char *text, size_t len,
                          mode_t mode)
{
    int fd;

    snprintf(fx->path, sizeof(fx->path), "%s/%s", fx->dir, name);
    fd = open(fx->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    return fx->path;
}

static const char *mktext(struct fx *fx, const char *name, const char *text, mode_t mode)
{
    return mkfile(fx, name, text, strlen(text), mode);
}

static int read_tok(struct fx *fx, const char *path)
{
    fx->err[0] = '\0';
    memset(fx->token, 0, sizeof(fx->token));
    return launcher_read_token_file(path, fx->token, sizeof(fx->token), fx->err, sizeof(fx->err));
}

/* One line, that says why (has needle) and never holds the secret. */
static void assert_reason(const struct fx *fx, const char *needle, const char *secret)
{
    if (strstr(fx->err, needle) == NULL)
        fail_msg("expected '%s' in: %s", needle, fx->err);
    assert_null(strchr(fx->err, '\n'));
    if (secret != NULL)
        assert_null(strstr(fx->err, secret));
}

static void test_regular_0600(void **state)
{
    struct fx *fx = *state;

    assert_int_equal(read_tok(fx, mktext(fx, "t", "  tok-0600-abc \n", 0600)), 0);
    assert_string_equal(fx->token, "tok-0600-abc");
    assert_int_equal(read_tok(fx, mktext(fx, "t4", "tok-0400\nsecond line\n", 0400)), 0);
    assert_string_equal(fx->token, "tok-0400");
}

static void test_crlf(void **state)
{
    struct fx *fx = *state;

    assert_int_equal(read_tok(fx, mktext(fx, "t", "tok-crlf\r\n", 0600)), 0);
    assert_string_equal(fx->token, "tok-crlf");
    assert_int_equal(read_tok(fx, mktext(fx, "u", "tok-noeol", 0600)), 0);
    assert_string_equal(fx->token, "tok-noeol");
}

static void test_mode_0644_refused(void **state)
{
    struct fx *fx = *state;

    assert_int_equal(read_tok(fx, mktext(fx, "t", "tok-open\n", 0644)), -EPERM);
    assert_reason(fx, "too open", "tok-open");
    assert_int_equal(read_tok(fx, mktext(fx, "g", "tok-group\n", 0620)), -EPERM);
    assert_reason(fx, "permissions 0620", "tok-group");
}

static void test_fifo_refused_without_blocking(void **state)
{
    struct fx *fx = *state;
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/fifo", fx->dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(read_tok(fx, path), -EINVAL); /* no writer: a plain open would block */
    assert_reason(fx, "is a FIFO, not a regular file", NULL);
}

static void test_char_device_refused(void **state)
{
    struct fx *fx = *state;

    assert_int_equal(read_tok(fx, "/dev/null"), -EINVAL);
    assert_reason(fx, "token file /dev/null is a character device", NULL);
}

static void test_directory_and_missing_refused(void **state)
{
    struct fx *fx = *state;
    char path[PATH_MAX];

    assert_int_equal(read_tok(fx, fx->dir), -EINVAL);
    assert_reason(fx, "is a directory", NULL);
    snprintf(path, sizeof(path), "%s/missing", fx->dir);
    assert_int_equal(read_tok(fx, path), -ENOENT);
    assert_reason(fx, "cannot open token file", NULL);
}

/* Kubernetes' secret volume: token -> ..data/token, ..data -> ..TIMESTAMP (a directory). */
static void test_kubernetes_symlinks(void **state)
{
    struct fx *fx = *state;
    char ts[PATH_MAX], link[PATH_MAX], data[PATH_MAX];

    snprintf(ts, sizeof(ts), "%s/..2026_12_01_10_00_00.123456789", fx->dir);
    assert_int_equal(mkdir(ts, 0755), 0);
    mktext(fx, "..2026_12_01_10_00_00.123456789/token", "tok-k8s\n", 0600);
    snprintf(data, sizeof(data), "%s/..data", fx->dir);
    assert_int_equal(symlink("..2026_12_01_10_00_00.123456789", data), 0);
    snprintf(link, sizeof(link), "%s/token", fx->dir);
    assert_int_equal(symlink("..data/token", link), 0);
    assert_int_equal(read_tok(fx, link), 0);
    assert_string_equal(fx->token, "tok-k8s");
    /* the volume's root is a sticky, world-writable tmpfs: still fine */
    assert_int_equal(chmod(fx->dir, 01777), 0);
    assert_int_equal(read_tok(fx, link), 0);
    assert_string_equal(fx->token, "tok-k8s");
}

static void test_symlink_to_0644_refused(void **state)
{
    struct fx *fx = *state;
    char link[PATH_MAX];

    mktext(fx, "real", "tok-link-open\n", 0644);
    snprintf(link, sizeof(link), "%s/link", fx->dir);
    assert_int_equal(symlink("real", link), 0);
    assert_int_equal(read_tok(fx, link), -EPERM);
    assert_reason(fx, "too open", "tok-link-open");
}

/* A directory others may write without the sticky bit: they could swap the token. */
static void test_dir_writable_by_others_refused(void **state)
{
    struct fx *fx = *state;
    char sub[PATH_MAX];

    snprintf(sub, sizeof(sub), "%s/open", fx->dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    const char *p = mktext(fx, "open/token", "tok-in-open-dir\n", 0600);
    assert_int_equal(chmod(sub, 0777), 0);
    assert_int_equal(read_tok(fx, p), -EPERM);
    assert_reason(fx, "is writable by others (mode 0777)", "tok-in-open-dir");
    assert_int_equal(chmod(sub, 01777), 0); /* sticky, like /tmp: only the owner renames */
    assert_int_equal(read_tok(fx, p), 0);
}

/* A symlink (as a user would give) into a directory of another user that others may write. */
static void test_symlink_into_foreign_dir_refused(void **state)
{
    struct fx *fx = *state;
    char sub[PATH_MAX], link[PATH_MAX];

    if (geteuid() != 0)
        skip(); /* chown to another user needs root */
    snprintf(sub, sizeof(sub), "%s/foreign", fx->dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    assert_int_equal(chmod(sub, 0777), 0);
    mktext(fx, "foreign/token", "tok-foreign\n", 0600);
    assert_int_equal(chown(sub, OTHER_UID, OTHER_UID), 0);
    snprintf(link, sizeof(link), "%s/link", fx->dir);
    assert_int_equal(symlink("foreign/token", link), 0);
    assert_int_equal(read_tok(fx, link), -EPERM);
    assert_reason(fx, "belongs to uid 65534", "tok-foreign");
    assert_int_equal(chmod(sub, 01777), 0); /* sticky, but its owner may still swap the file */
    assert_int_equal(read_tok(fx, link), -EPERM);
}

static void test_foreign_file_and_link_refused(void **state)
{
    struct fx *fx = *state;
    char link[PATH_MAX];

    if (geteuid() != 0)
        skip();
    const char *p = mktext(fx, "theirs", "tok-theirs\n", 0600);
    assert_int_equal(chown(p, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(read_tok(fx, p), -EPERM);
    assert_reason(fx, "belongs to uid 65534, not to you", "tok-theirs");
    mktext(fx, "mine", "tok-mine\n", 0600);
    snprintf(link, sizeof(link), "%s/their-link", fx->dir);
    assert_int_equal(symlink("mine", link), 0);
    assert_int_equal(lchown(link, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(read_tok(fx, link), -EPERM);
    assert_reason(fx, "is a symlink that belongs to uid 65534", "tok-mine");
}

static void test_long_token_refused(void **state)
{
    struct fx *fx = *state;
    char text[LAUNCHER_TOKEN_FILE_MAX + 8];

    memset(text, 'x', 300);
    strcpy(text + 300, "\n");
    const char *p = mktext(fx, "long", text, 0600);
    assert_int_equal(read_tok(fx, p), -E2BIG);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof(want), "token in %s is 300 characters; at most %d", p, RDZV_TOKEN_MAX);
    assert_string_equal(fx->err, want);
    /* exactly the most the wire carries is fine */
    strcpy(text + RDZV_TOKEN_MAX, "\r\n");
    assert_int_equal(read_tok(fx, mktext(fx, "max", text, 0600)), 0);
    assert_int_equal(strlen(fx->token), RDZV_TOKEN_MAX);
    /* a first line longer than a token file may hold is refused, never cut */
    memset(text, 'y', sizeof(text));
    assert_int_equal(read_tok(fx, mkfile(fx, "huge", text, sizeof(text), 0600)), -E2BIG);
    assert_reason(fx, "is longer than 512 characters", NULL);
}

static void test_empty_and_nul_refused(void **state)
{
    struct fx *fx = *state;

    assert_int_equal(read_tok(fx, mktext(fx, "e", "", 0600)), -EINVAL);
    assert_reason(fx, "is empty", NULL);
    assert_int_equal(read_tok(fx, mktext(fx, "b", "  \r\ntok-second-line\n", 0600)), -EINVAL);
    assert_reason(fx, "is empty", "tok-second-line");
    assert_int_equal(read_tok(fx, mkfile(fx, "n", "tok\0rest\n", 9, 0600)), -EINVAL);
    assert_reason(fx, "NUL byte", NULL);
}

/* The one length check, as used for MUSTER_TOKEN. */
static void test_check_len(void **state)
{
    char tok[RDZV_TOKEN_MAX + 2], err[256];

    (void)state;
    memset(tok, 'a', sizeof(tok) - 1);
    tok[sizeof(tok) - 1] = '\0';
    assert_int_equal(launcher_token_check_len(tok, "MUSTER_TOKEN", err, sizeof(err)), -E2BIG);
    assert_string_equal(err, "MUSTER_TOKEN is 257 characters; at most 256");
    tok[RDZV_TOKEN_MAX] = '\0';
    assert_int_equal(launcher_token_check_len(tok, "MUSTER_TOKEN", err, sizeof(err)), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_regular_0600),
        T(test_crlf),
        T(test_mode_0644_refused),
        T(test_fifo_refused_without_blocking),
        T(test_char_device_refused),
        T(test_directory_and_missing_refused),
        T(test_kubernetes_symlinks),
        T(test_symlink_to_0644_refused),
        T(test_dir_writable_by_others_refused),
        T(test_symlink_into_foreign_dir_refused),
        T(test_foreign_file_and_link_refused),
        T(test_long_token_refused),
        T(test_empty_and_nul_refused),
        T(test_check_len),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
