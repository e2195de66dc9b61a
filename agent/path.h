#ifndef MUSTER_AGENT_PATH_H
#define MUSTER_AGENT_PATH_H

#include <stddef.h>

/* snprintf for paths: a truncated path would name another file, so truncation is an error.
 * Returns 0, or -ENAMETOOLONG with buf set to "". */
int agent_path_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Whether rc is how common/safefile.h refuses a directory (-EPERM: owned or writable by another
 * user; -ELOOP: a symlink; -ENOTDIR) or agent_logdir_open an invalid run id (-EINVAL): the
 * operator's to fix, so muster exits 2 (AGENT_EXIT_USAGE) rather than 70. */
int agent_path_refused(int rc);

#endif
