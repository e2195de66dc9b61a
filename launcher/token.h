#ifndef MUSTER_LAUNCHER_TOKEN_H
#define MUSTER_LAUNCHER_TOKEN_H

#include <stddef.h>

/* The longest first line read from a token file (surrounding whitespace included); a longer
 * one is refused, never cut. Larger than the wire's RDZV_TOKEN_MAX so that the length check
 * (launcher_token_check_len) is the one place that decides what a token may be. Give
 * launcher_read_token_file() a buffer of LAUNCHER_TOKEN_FILE_MAX + 1 bytes. */
#define LAUNCHER_TOKEN_FILE_MAX 512

/* Reads the shared token from path: the first line (LF or CRLF), surrounding whitespace
 * removed, into token (len bytes, NUL-terminated).
 *
 * What it accepts, like ssh's StrictModes for private keys:
 *  - a regular file, or a symlink or chain of symlinks to one (Kubernetes' secret volumes:
 *    token -> ..data/token, ..data -> ..2026_12_01_...); a FIFO, socket, device or directory
 *    is refused at once, without blocking (stat before open, then open O_NONBLOCK and fstat
 *    the same inode, which closes the race of a file swapped in between);
 *  - owned by the effective user or root, with no permission for its group or others;
 *  - every directory from the file's real parent up to / (and, for a symlink, from the real
 *    directory of the given path up to /, and the link itself) owned by the effective user or
 *    root, not writable by others unless sticky (/tmp, a Kubernetes secret volume's root), and
 *    not writable by its group unless sticky or the group is the effective group (a user's
 *    private group): anyone else who could rename entries there could plant a token they know.
 *    Symlinks in the middle of a chain are not checked one by one.
 *  - a token of 1 to RDZV_TOKEN_MAX characters (launcher_token_check_len) without a NUL byte.
 *
 * Returns 0, or a negative errno (-E2BIG for a token that is too long) with a one-line reason
 * in err. The token never appears in err. Borrows every pointer. */
int launcher_read_token_file(const char *path, char *token, size_t len, char *err, size_t errlen);

/* The one check of a token's length, for a token from a file or from MUSTER_TOKEN alike:
 * returns 0 when the rendezvous wire can carry token, else -E2BIG with "WHAT is N characters;
 * at most M" in err (what: e.g. "token in FILE", "MUSTER_TOKEN"). The token never appears in
 * err. Borrows token and what. */
int launcher_token_check_len(const char *token, const char *what, char *err, size_t errlen);

#endif
