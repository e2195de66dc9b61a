#include "escape.h"

#include <errno.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not one. Follows
 * RFC 3629's table: no overlong forms, no surrogates, nothing above U+10FFFF. C1 controls are
 * valid UTF-8 (utf8_len() below is the escaper's stricter view). */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t len;

    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4;
    else
        return 0; /* 0x80-0xc1 (continuation or overlong lead), 0xf5-0xff */
    if (s[0] == 0xe0)
        lo = 0xa0; /* overlong */
    else if (s[0] == 0xed)
        hi = 0x9f; /* surrogates U+D800-U+DFFF */
    else if (s[0] == 0xf0)
        lo = 0x90; /* overlong */
    else if (s[0] == 0xf4)
        hi = 0x8f; /* above U+10FFFF */
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

/* utf8_seq_len(), and 0 for C1 controls U+0080-U+009F (encoded c2 80 - c2 9f). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = utf8_seq_len(s, n);

    return len == 2 && s[0] == 0xc2 && s[1] <= 0x9f ? 0 : len;
}

int mc_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, len;

    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        if ((len = utf8_seq_len(u + i, n - i)) == 0)
            return 0;
        i += len;
    }
    return 1;
}

/* Whether s[0..n) is the start of a valid sequence that was cut short: a lead byte, then only
 * continuation bytes up to the end. */
static int cut_short(const unsigned char *s, size_t n)
{
    size_t want = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;

    if (s[0] < 0xc2 || s[0] > 0xf4 || n >= want)
        return 0;
    for (size_t i = 1; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return 1;
}

void mc_utf8_sanitize(char *s)
{
    unsigned char *u = (unsigned char *)s;
    size_t n = strlen(s), i = 0, len;

    while (i < n) {
        if (u[i] < 0x80) {
            i++;
        } else if ((len = utf8_seq_len(u + i, n - i)) > 0) {
            i += len;
        } else if (cut_short(u + i, n - i)) {
            u[i] = '\0'; /* a character cut by a fixed-size copy: drop what is left of it */
            return;
        } else {
            u[i++] = '?';
        }
    }
}

/* How the byte at s is shown: writes up to 4 bytes to piece, returns how many input bytes it
 * stands for (1, or the length of a valid UTF-8 sequence copied whole). */
static size_t next_piece(const unsigned char *s, size_t n, unsigned flags, char *piece,
                         size_t *plen)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char c = s[0];
    size_t u;

    if (c == '\\') {
        memcpy(piece, "\\\\", 2);
        *plen = 2;
        return 1;
    }
    if (c >= 0x20 && c < 0x7f && !((flags & MC_ESCAPE_QUOTES) && (c == '"' || c == '\''))) {
        piece[0] = (char)c;
        *plen = 1;
        return 1;
    }
    if (c >= 0x80 && (u = utf8_len(s, n)) > 0) {
        memcpy(piece, s, u);
        *plen = u;
        return u;
    }
    piece[0] = '\\';
    piece[1] = 'x';
    piece[2] = hex[c >> 4];
    piece[3] = hex[c & 15];
    *plen = 4;
    return 1;
}

int mc_escape_n(const char *in, size_t inlen, char *out, size_t outlen, unsigned flags)
{
    const unsigned char *s = (const unsigned char *)(in != NULL ? in : "");
    size_t o = 0, i = 0;

    if (outlen == 0)
        return -ENOSPC;
    if (in == NULL)
        inlen = 0;
    while (i < inlen) {
        char piece[4];
        size_t plen, used = next_piece(s + i, inlen - i, flags, piece, &plen);

        if (plen > outlen - 1 - o) {
            out[o] = '\0';
            return -ENOSPC;
        }
        memcpy(out + o, piece, plen);
        o += plen;
        i += used;
    }
    out[o] = '\0';
    return 0;
}

int mc_escape(const char *in, char *out, size_t outlen)
{
    return mc_escape_n(in, in != NULL ? strlen(in) : 0, out, outlen, 0);
}

void mc_prom_label(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f);
        if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}
