#ifndef MUSTER_LAUNCHER_SECRET_H
#define MUSTER_LAUNCHER_SECRET_H

/* Memory for secrets (the shared token, a job's token): a private anonymous mapping of whole
 * pages that a core dump leaves out (MADV_DONTDUMP; gdb's gcore honours it too), that a fork()ed
 * child sees zeroed (MADV_WIPEONFORK, Linux 4.14+), that is locked against swap when
 * RLIMIT_MEMLOCK allows, and that is zeroed before it is unmapped. Copies that other libraries
 * keep (mbedTLS's PSK, the agent's structs, the environment) are covered only by
 * launcher_secret_protect_process(). */

#include <stddef.h>

/* Environment variable that, set to 1, keeps the process dumpable (core files, ptrace by the
 * same user, gdb -p) for debugging: launcher_secret_protect_process() then does nothing. */
#define LAUNCHER_SECRET_ALLOW_DUMPS_ENV "MUSTER_ALLOW_CORE_DUMPS"

/* A zeroed region for at least len bytes (len >= 1). Returns 0 and *out, or -ENOMEM / -EINVAL
 * (nothing allocated). Only the mapping itself is required: the madvise and mlock flags are
 * best effort. Free it with launcher_secret_free(). */
int launcher_secret_alloc(size_t len, char **out);

/* A region holding a copy of the string s (borrowed). Returns 0 and *out, or -ENOMEM. */
int launcher_secret_strdup(const char *s, char **out);

/* Zeroes the whole region and unmaps it. Accepts NULL. p must come from launcher_secret_alloc()
 * or launcher_secret_strdup(). */
void launcher_secret_free(char *p);

/* For processes that hold a server secret or a job token (muster run/preflight's agent,
 * muster server, muster status): prctl(PR_SET_DUMPABLE, 0), so that no core file is written
 * and other processes of the same user can neither ptrace this one nor read its /proc/PID/
 * files (environ, mem, maps, fd: they become root's). The kernel resets the flag on execve, so
 * the workers the agent starts are dumpable as usual. Does nothing when MUSTER_ALLOW_CORE_DUMPS
 * is 1. Returns 0, or a negative errno from prctl (callers go on: it is a hardening step). */
int launcher_secret_protect_process(void);

#endif
