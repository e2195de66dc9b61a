/* Unit tests for launcher/secret.c: a secret region is left out of core dumps (the kernel's
 * "dd" flag in /proc/self/smaps, which gdb's gcore honours too), wiped in a fork()ed child,
 * and PR_SET_DUMPABLE follows MUSTER_ALLOW_CORE_DUMPS. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "secret.h"

/* The VmFlags line of the mapping that holds addr, or "" when not found. */
static void vm_flags(const void *addr, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0;

    out[0] = '\0';
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's header line */
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
        } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, len, "%s", line + 8);
            break;
        }
    }
    fclose(f);
}

static int has_flag(const char *flags, const char *flag)
{
    char padded[520], want[8];

    snprintf(padded, sizeof(padded), " %s ", flags);
    padded[strcspn(padded, "\n")] = ' ';
    snprintf(want, sizeof(want), " %s ", flag);
    return strstr(padded, want) != NULL;
}

static void test_region_not_dumped(void **state)
{
    char *s = NULL, flags[512];

    (void)state;
    assert_int_equal(launcher_secret_strdup("secret-in-region", &s), 0);
    assert_string_equal(s, "secret-in-region");
    assert_int_equal((uintptr_t)s % 16, 0);
    vm_flags(s, flags, sizeof(flags));
    if (!has_flag(flags, "dd"))
        fail_msg("no dd (MADV_DONTDUMP) in VmFlags:%s", flags);
    launcher_secret_free(s);
    launcher_secret_free(NULL);
}

static void test_alloc_zeroed_and_large(void **state)
{
    char *s = NULL;

    (void)state;
    assert_int_equal(launcher_secret_alloc(0, &s), -EINVAL);
    assert_null(s);
    assert_int_equal(launcher_secret_alloc(10000, &s), 0); /* several pages */
    for (size_t i = 0; i < 10000; i++)
        assert_int_equal(s[i], 0);
    memset(s, 'z', 10000);
    launcher_secret_free(s);
}

/* MADV_WIPEONFORK (4.14+): a fork()ed child reads zeroes where the parent has the secret. */
static void test_wiped_in_forked_child(void **state)
{
    char *s = NULL, flags[512];
    int status;
    pid_t pid;

    (void)state;
    assert_int_equal(launcher_secret_strdup("secret-not-for-children", &s), 0);
    vm_flags(s, flags, sizeof(flags));
    if (!has_flag(flags, "wf")) {
        launcher_secret_free(s);
        skip(); /* a kernel without MADV_WIPEONFORK */
    }
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(s[0] == '\0' ? 0 : 1); /* a forked child never asserts */
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_string_equal(s, "secret-not-for-children");
    launcher_secret_free(s);
}

/* In a child, so that the test process itself stays dumpable. */
static int dumpable_after_protect(const char *allow)
{
    int status;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        if (allow != NULL)
            setenv(LAUNCHER_SECRET_ALLOW_DUMPS_ENV, allow, 1);
        else
            unsetenv(LAUNCHER_SECRET_ALLOW_DUMPS_ENV);
        if (launcher_secret_protect_process() != 0)
            _exit(100);
        _exit(prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_protect_process(void **state)
{
    (void)state;
    assert_int_equal(dumpable_after_protect(NULL), 0);
    assert_int_equal(dumpable_after_protect("0"), 0);
    assert_int_equal(dumpable_after_protect("1"), 1);
}

/* A pointer that is not a secret region (here from malloc) aborts instead of unmapping pages. */
static void test_free_foreign_pointer_aborts(void **state)
{
    int status;
    pid_t pid = fork();

    (void)state;
    assert_true(pid >= 0);
    if (pid == 0) {
        char *p = calloc(1, 64);
        signal(SIGABRT, SIG_DFL); /* no test framework's handler in the child */
        launcher_secret_free(p);
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer catches the read of the missing header first and exits non-zero */
    assert_true((WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) ||
                (WIFEXITED(status) && WEXITSTATUS(status) != 0));
#else
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_region_not_dumped),
        cmocka_unit_test(test_alloc_zeroed_and_large),
        cmocka_unit_test(test_wiped_in_forked_child),
        cmocka_unit_test(test_protect_process),
        cmocka_unit_test(test_free_foreign_pointer_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
