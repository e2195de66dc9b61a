/* Making text from other machines safe to print.
 *
 * Cause texts, host names, job ids and checkpoint names come from the rendezvous server, other
 * agents or workers. Printed raw, a newline forges a log line, ESC sequences rewrite the
 * operator's terminal, and invalid UTF-8 breaks JSON consumers of the log. mc_escape writes a
 * copy in which every such byte is shown as \xNN:
 *   - C0 controls 0x00-0x1f (tab and newline too) and DEL 0x7f;
 *   - C1 controls U+0080-U+009F (terminals in UTF-8 mode may act on them, e.g. U+009B = CSI);
 *   - each byte of an invalid UTF-8 sequence (stray continuation bytes, overlong forms,
 *     surrogates, code points above U+10FFFF, a sequence cut short);
 *   - a backslash becomes "\\", so an escaped text is never ambiguous with a literal "\x1b";
 *   - with MC_ESCAPE_QUOTES also '"' and '\'' (\x22, \x27), for text shown inside quotes.
 * Valid UTF-8 text is passed through unchanged. */
#ifndef MUSTER_COMMON_ESCAPE_H
#define MUSTER_COMMON_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

#define MC_ESCAPE_QUOTES 1u

/* Worst case: every input byte becomes four output bytes ("\xNN"), plus the NUL. */
#define MC_ESCAPE_SIZE(inlen) ((inlen)*4 + 1)

/* Escapes the NUL-terminated in (NULL is taken as "") into out. out is always NUL-terminated
 * and never gets more than outlen bytes (outlen 0: nothing is written). When out is too small
 * the copy stops before the first character or escape that does not fit whole, so it never ends
 * in half a UTF-8 sequence or half an escape. Returns 0, or -ENOSPC when it was cut short.
 * Borrows in and out; they must not overlap. */
int mc_escape(const char *in, char *out, size_t outlen);

/* The same for inlen bytes that may contain NULs (shown as \x00), with flags
 * (0 or MC_ESCAPE_QUOTES). */
int mc_escape_n(const char *in, size_t inlen, char *out, size_t outlen, unsigned flags);

/* Whether the n bytes at s are valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
 * above U+10FFFF, no sequence cut short). Controls are valid here: escaping them is each
 * output's job. Peers' identifiers (job ids, host names, addresses) must pass this:
 * JSON, Prometheus and HTML consumers refuse a whole document over one invalid byte. */
int mc_utf8_valid(const char *s, size_t n);

/* Makes the NUL-terminated s valid UTF-8 in place, for free text (failure reasons, error
 * texts): a sequence cut short at the end (a fixed-size snprintf that stopped mid-character) is
 * removed, every other byte of an invalid sequence becomes '?'. Valid text is unchanged. */
void mc_utf8_sanitize(char *s);

/* Writes s to f as a Prometheus label value: backslash, quote and newline escaped (the text
 * exposition format). */
void mc_prom_label(FILE *f, const char *s);

#endif
