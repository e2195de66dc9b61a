#ifndef MUSTER_AGENT_PATH_H
#define MUSTER_AGENT_PATH_H

#include <stddef.h>

/* snprintf for paths: a truncated path would name another file, so truncation is an error.
 * Returns 0, or -ENAMETOOLONG with buf set to "". */
int agent_path_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
