#include "ids.h"

#include "escape.h"

#include <stdio.h>
#include <string.h>

static int id_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != 0 && strchr("._:@+-", c) != NULL);
}

/* Fills err with the reason and returns 0, so callers can `return fail(...)`. */
static int fail(char *err, size_t errlen, const char *id, const char *why)
{
    char shown[MC_ID_MAX * 4 + 1]; /* escaped and cut: the id may be megabytes */

    if (err == NULL || errlen == 0)
        return 0;
    mc_escape_n(id, strnlen(id, MC_ID_MAX + 1), shown, sizeof(shown), MC_ESCAPE_QUOTES);
    snprintf(err, errlen, "'%s'%s %s; an id is " MC_ID_CHARSET_TEXT, shown,
             strlen(id) > MC_ID_MAX ? "..." : "", why);
    return 0;
}

int mc_id_valid(const char *id, char *err, size_t errlen)
{
    char why[64];
    size_t len;

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (id == NULL)
        return fail(err, errlen, "", "is missing");
    len = strnlen(id, MC_ID_MAX + 1);
    if (len == 0)
        return fail(err, errlen, id, "is empty");
    if (len > MC_ID_MAX)
        return fail(err, errlen, id, "is longer than 128 bytes");
    if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
        return fail(err, errlen, id, "names a directory");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)id[i];
        if (id_char(c))
            continue;
        if (c > 0x20 && c < 0x7f)
            snprintf(why, sizeof(why), "has '%c' at offset %zu", c, i);
        else
            snprintf(why, sizeof(why), "has byte 0x%02x at offset %zu", c, i);
        return fail(err, errlen, id, why);
    }
    return 1;
}
