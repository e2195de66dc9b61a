/* common/escape.c: peer text made safe to print. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "escape.h"

static void check(const char *in, const char *want)
{
    char out[256];
    assert_int_equal(mc_escape(in, out, sizeof(out)), 0);
    assert_string_equal(out, want);
}

static void test_plain_text_unchanged(void **state)
{
    check("", "");
    check("worker 3 exited with code 1 (SIGSEGV)", "worker 3 exited with code 1 (SIGSEGV)");
    check("node-a.example.com:29400", "node-a.example.com:29400");
    check("quotes \"ok\" and 'ok'", "quotes \"ok\" and 'ok'");
    check(NULL, "");
}

static void test_controls(void **state)
{
    check("a\nb", "a\\x0ab");
    check("line\r\nFORGED: ok", "line\\x0d\\x0aFORGED: ok");
    check("\x1b[2J\x1b]0;pwned\x07", "\\x1b[2J\\x1b]0;pwned\\x07");
    check("tab\there", "tab\\x09here");
    check("del\x7f", "del\\x7f");
    check("back\\slash", "back\\\\slash"); /* a literal "\x41" stays distinguishable */
    check("\\x41", "\\\\x41");
}

static void test_utf8(void **state)
{
    check("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", /* é, 日本, 😀: valid */
          "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80");
    check("\xc2\x9b"
          "31m",
          "\\xc2\\x9b31m");                            /* C1 CSI */
    check("\xc2\xa0", "\xc2\xa0");                     /* U+00A0 is fine */
    check("\xff\xfe", "\\xff\\xfe");                   /* never valid */
    check("\x80x", "\\x80x");                          /* stray continuation */
    check("\xc0\xaf", "\\xc0\\xaf");                   /* overlong '/' */
    check("\xe0\x80\xaf", "\\xe0\\x80\\xaf");          /* overlong, 3 bytes */
    check("\xed\xa0\x80", "\\xed\\xa0\\x80");          /* surrogate */
    check("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* above U+10FFFF */
    check("ab\xe6\x97", "ab\\xe6\\x97");               /* cut short at the end */
    check("\xe6"
          "a",
          "\\xe6a"); /* cut short by ASCII */
}

static void test_quotes_flag(void **state)
{
    char out[64];
    assert_int_equal(mc_escape_n("say \"hi\" 'x'", 12, out, sizeof(out), MC_ESCAPE_QUOTES), 0);
    assert_string_equal(out, "say \\x22hi\\x22 \\x27x\\x27");
}

static void test_embedded_nul(void **state)
{
    char out[64];
    assert_int_equal(mc_escape_n("a\0b", 3, out, sizeof(out), 0), 0);
    assert_string_equal(out, "a\\x00b");
}

/* Truncation never overruns, always terminates, never ends in half an escape or character. */
static void test_truncation(void **state)
{
    char out[16];

    memset(out, 'Z', sizeof(out));
    assert_int_equal(mc_escape("abc\ndef", out, 6), -ENOSPC);
    assert_string_equal(out, "abc"); /* "\x0a" does not fit in the 2 bytes left */
    assert_int_equal(out[6], 'Z');
    assert_int_equal(mc_escape("ab\xe6\x97\xa5", out, 5), -ENOSPC);
    assert_string_equal(out, "ab"); /* the 3-byte character does not fit */
    assert_int_equal(mc_escape("abcdef", out, 4), -ENOSPC);
    assert_string_equal(out, "abc");
    assert_int_equal(mc_escape("x", out, 1), -ENOSPC);
    assert_string_equal(out, "");
    out[0] = 'Z';
    assert_int_equal(mc_escape("x", out, 0), -ENOSPC);
    assert_int_equal(out[0], 'Z');                 /* outlen 0: nothing written */
    assert_int_equal(mc_escape("abc", out, 4), 0); /* exactly fits */
    assert_string_equal(out, "abc");
}

/* Every byte value, alone and in random-ish mixtures: output stays within MC_ESCAPE_SIZE, has
 * no control bytes, and every byte >= 0x80 is part of valid UTF-8 (checked by re-escaping: an
 * escaped text escapes to itself apart from its backslashes). */
static void test_all_bytes(void **state)
{
    char in[512], out[MC_ESCAPE_SIZE(512)], again[MC_ESCAPE_SIZE(MC_ESCAPE_SIZE(512))];
    unsigned seed = 12345;

    for (int round = 0; round < 2000; round++) {
        size_t n = round < 256 ? 1 : (size_t)(seed % sizeof(in));
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            in[i] = round < 256 ? (char)round : (char)(seed >> 16);
        }
        assert_int_equal(mc_escape_n(in, n, out, sizeof(out), MC_ESCAPE_QUOTES), 0);
        assert_true(strlen(out) <= 4 * n);
        for (const unsigned char *p = (const unsigned char *)out; *p; p++)
            assert_true(*p >= 0x20 && *p != 0x7f);
        assert_int_equal(mc_escape(out, again, sizeof(again)), 0);
        for (const char *p = again, *q = out; *q; q++, p++) {
            if (*q == '\\')
                p++; /* "\\" */
            assert_int_equal(*p, *q);
        }
    }
}

/* The validator peers' identifiers must pass, and the fixer for free text. */
static void test_utf8_valid(void **state)
{
    (void)state;
    assert_true(mc_utf8_valid("", 0));
    assert_true(mc_utf8_valid("plain\n\x1b", 7)); /* controls are each output's business */
    assert_true(mc_utf8_valid("\xc2\x9b", 2));    /* C1 is valid UTF-8 */
    assert_true(mc_utf8_valid("\xf0\x9f\x98\x80", 4));
    assert_false(mc_utf8_valid("\xff", 1));
    assert_false(mc_utf8_valid("\xc0\xaf", 2));         /* overlong */
    assert_false(mc_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    assert_false(mc_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    assert_false(mc_utf8_valid("\xe2\x82", 2));         /* cut short */
    assert_false(mc_utf8_valid("a\x80", 2));            /* stray continuation */
}

static void test_utf8_sanitize(void **state)
{
    char s[64];

    (void)state;
    strcpy(s, "ok \xc3\xa9");
    mc_utf8_sanitize(s);
    assert_string_equal(s, "ok \xc3\xa9");
    strcpy(s, "a\xff"
              "b\xc0\xaf"
              "c");
    mc_utf8_sanitize(s);
    assert_string_equal(s, "a?b??c");
    strcpy(s, "cut \xf0\x9f\x98");
    mc_utf8_sanitize(s);
    assert_string_equal(s, "cut ");
    strcpy(s, "\xe2\x82x"); /* not at the end: not a cut, just bad */
    mc_utf8_sanitize(s);
    assert_string_equal(s, "??x");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_text_unchanged),
        cmocka_unit_test(test_controls),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_quotes_flag),
        cmocka_unit_test(test_embedded_nul),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_all_bytes),
        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_utf8_sanitize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
