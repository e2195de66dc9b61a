/* common/json.c: readers that give the default for a missing key or another type. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "json.h"

static void test_readers(void **state)
{
    json_t *o = json_pack("{s:s, s:i, s:f, s:n}", "host", "n1", "rank", 3, "busbw", 2.5, "x");

    (void)state;
    assert_non_null(o);
    assert_string_equal(mc_json_str(o, "host", "?"), "n1");
    assert_string_equal(mc_json_str(o, "rank", "?"), "?"); /* not a string */
    assert_string_equal(mc_json_str(o, "missing", "?"), "?");
    assert_null(mc_json_str(NULL, "host", NULL));
    assert_int_equal(mc_json_int(o, "rank", -1), 3);
    assert_int_equal(mc_json_int(o, "busbw", -1), -1); /* a real is no integer */
    assert_int_equal(mc_json_int(o, "x", -1), -1);
    assert_true(mc_json_num(o, "busbw", 0) == 2.5);
    assert_true(mc_json_num(o, "rank", 0) == 3.0); /* integers are numbers */
    assert_true(mc_json_num(o, "host", -1) == -1);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
