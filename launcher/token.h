#ifndef MUSTER_LAUNCHER_TOKEN_H
#define MUSTER_LAUNCHER_TOKEN_H

#include <stddef.h>

/* Reads the shared token from path: the first line, surrounding whitespace removed. Refuses,
 * like ssh does for private keys, a file that its group or others may read or write, and a
 * file that is not a regular file. Returns 0, or a negative errno with a one-line reason in
 * err. The token never appears in err. */
int launcher_read_token_file(const char *path, char *token, size_t len, char *err, size_t errlen);

#endif
