#ifndef MUSTER_LAUNCHER_VERSION_H
#define MUSTER_LAUNCHER_VERSION_H

#include <stdio.h>

/* Prints `muster --version` to out (borrowed): "muster X.Y.Z" (CMake's project version), then
 * one line with the rendezvous protocol version and the versions of libuv, mbedTLS, jansson and
 * xxHash that muster was compiled against, and libuv's run-time version when it differs (a
 * shared libuv newer than the headers). Cannot fail. */
void launcher_print_version(FILE *out);

#endif
