/* launcher/torchver.c: the workers' PyTorch version, read from torch/version.py on disk. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "torchver.h"

static void test_parse(void **state)
{
    static const struct {
        const char *text;
        int rc, major, minor;
    } t[] = {
        {"__version__ = '1.13.0a0'\ndebug = False\n", 0, 1, 13},
        {"from typing import Optional\n__version__ = '2.11.0+cu130'\n", 0, 2, 11},
        /* 2.11's own file (seen on the H200 host): named in __all__ before it is set */
        {"from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', "
         "'git_version', 'hip', 'xpu']\n__version__ = '2.11.0+cu130'\ndebug = False\n",
         0, 2, 11},
        {"x__version__ = '2.1'\n", -EINVAL, 0, 0},
        {"__version__ = \"2.2.1\"\n", 0, 2, 2},
        {"__version__='3.0'", 0, 3, 0},
        {"__version__ = 'abc'\n", -EINVAL, 0, 0},
        {"__version__ = '2'\n", -EINVAL, 0, 0},
        {"version = '2.1.0'\n", -EINVAL, 0, 0},
        {"__version__ = '2.", -EINVAL, 0, 0},
        {"__version__ = '200.1.0'\n", -EINVAL, 0, 0},
        {"", -EINVAL, 0, 0},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        int ma = -1, mi = -1;

        assert_int_equal(launcher_torchver_parse(t[i].text, strlen(t[i].text), &ma, &mi), t[i].rc);
        if (t[i].rc == 0) {
            assert_int_equal(ma, t[i].major);
            assert_int_equal(mi, t[i].minor);
        }
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A virtual environment: bin/python3 a symlink to the base interpreter, torch in its own
 * lib/python3.X/site-packages, which must win over the base installation's. */
static void test_venv(void **state)
{
    char dir[] = "/tmp/muster-torchver-XXXXXX", path[512], base[512], cmd[700];

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "mkdir -p %s/base/bin %s/base/lib/python3.11/site-packages/torch %s/venv/bin "
             "%s/venv/lib/python3.11/site-packages/torch",
             dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(base, sizeof(base), "%s/base/bin/python3", dir);
    write_file(base, "#!/bin/sh\n");
    snprintf(path, sizeof(path), "%s/venv/bin/python3", dir);
    assert_int_equal(symlink(base, path), 0);
    assert_int_equal(launcher_torchver_find(path, NULL), 0); /* no torch anywhere */
    snprintf(cmd, sizeof(cmd), "%s/base/lib/python3.11/site-packages/torch/version.py", dir);
    write_file(cmd, "__version__ = '2.2.1'\n");
    assert_int_equal(launcher_torchver_find(path, NULL), 202); /* the base's (system site) */
    snprintf(cmd, sizeof(cmd), "%s/venv/lib/python3.11/site-packages/torch/version.py", dir);
    write_file(cmd, "__version__ = '2.11.0+cu130'\n");
    assert_int_equal(launcher_torchver_find(path, NULL), 211); /* the environment's own */
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Debian's python3-torch, where this machine has it. */
static void test_debian_system(void **state)
{
    (void)state;
    if (access("/usr/lib/python3/dist-packages/torch/version.py", R_OK) != 0 ||
        access("/usr/bin/python3", X_OK) != 0)
        skip();
    assert_true(launcher_torchver_find("/usr/bin/python3", NULL) >= 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_venv),
        cmocka_unit_test(test_debian_system),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
