/* common/ids.c: the one character set for job and run ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ids.h"

static void test_valid(void **state)
{
    static const char *ok[] = {
        "12345",                                /* SLURM_JOB_ID */
        "12345_7",                              /* array job */
        "12345+1",                              /* heterogeneous job component */
        "none",                                 /* torchrun's default */
        "6f1c7b3e-2d4a-4f7e-9a0b-1c2d3e4f5a6b", /* uuid */
        "job.v2",
        "alice@node-1:train",
        "..x",
        "x..",
        ".hidden",
        "-leading-dash",
        "a",
        "_",
        "A-Z_a-z.0-9",
    };
    char err[256];
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        strcpy(err, "untouched");
        if (!mc_id_valid(ok[i], err, sizeof(err)))
            fail_msg("'%s' refused: %s", ok[i], err);
        assert_string_equal(err, "");
    }
    char max[MC_ID_MAX + 1];
    memset(max, 'a', MC_ID_MAX);
    max[MC_ID_MAX] = '\0';
    assert_true(mc_id_valid(max, NULL, 0));
}

static void refused(const char *id, const char *part)
{
    char err[512];
    assert_false(mc_id_valid(id, err, sizeof(err)));
    if (strstr(err, part) == NULL)
        fail_msg("error for id does not mention '%s': %s", part, err);
    assert_null(strchr(err, '\n'));
    assert_null(strchr(err, '\x1b'));
    for (const unsigned char *p = (const unsigned char *)err; *p; p++)
        assert_true(*p >= 0x20 && *p != 0x7f); /* one printable line (valid UTF-8 may stay) */
}

static void test_invalid(void **state)
{
    refused("", "is empty");
    refused(".", "names a directory");
    refused("..", "names a directory");
    refused("../x", "'/' at offset 2");
    refused("a/b", "'/' at offset 1");
    refused("a\\b", "'\\' at offset 1");
    refused("a b", "0x20 at offset 1");
    refused("a\nFORGED", "0x0a at offset 1");
    refused("a\nFORGED", "'a\\x0aFORGED'");
    refused("\x1b[31mred", "0x1b at offset 0");
    refused("caf\xc3\xa9", "0xc3 at offset 3"); /* no bytes >= 0x80, even valid UTF-8 */
    refused("\xff", "0xff at offset 0");
    refused("a\"b", "'\"' at offset 1");
    refused("a'b", "''' at offset 1");
    refused("a%b", "'%' at offset 1");
    refused("a*b", "'*' at offset 1");
}

static void test_too_long(void **state)
{
    char id[4096], err[256];
    memset(id, 'a', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    assert_false(mc_id_valid(id, err, sizeof(err)));
    assert_non_null(strstr(err, "longer than 128"));
    id[MC_ID_MAX + 1] = '\0';
    assert_false(mc_id_valid(id, err, sizeof(err)));
    assert_false(mc_id_valid(NULL, err, sizeof(err)));
    assert_false(mc_id_valid("a/b", NULL, 0)); /* no error buffer: still a clean answer */
    assert_false(mc_id_valid("a/b", err, 1));
    assert_string_equal(err, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
