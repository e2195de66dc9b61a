#include "path.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int agent_path_refused(int rc)
{
    /* the operator's to fix, like a bad flag: not muster's internal error (an
     * unwritable --log-dir exited 70) */
    return rc == -EPERM || rc == -ELOOP || rc == -ENOTDIR || rc == -EINVAL || rc == -EACCES ||
           rc == -EROFS || rc == -EEXIST;
}

int agent_path_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return -ENAMETOOLONG;
    }
    return 0;
}
