/* Finding the workers' PyTorch version on disk: see torchver.h. */
#include "torchver.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The value of the line `__version__ = '...'` (at a line start: 2.x's version.py names it in
 * `__all__ = ['__version__', ...]` first), after its opening quote; NULL when there is none. */
static const char *version_value(const char *text, size_t len)
{
    static const char key[] = "__version__";
    const char *p = text, *end = text + len;

    while ((p = memmem(p, (size_t)(end - p), key, sizeof(key) - 1)) != NULL) {
        const char *q = p + sizeof(key) - 1;
        int at_line_start = p == text || p[-1] == '\n';

        p = q;
        if (!at_line_start)
            continue;
        while (q < end && (*q == ' ' || *q == '\t'))
            q++;
        if (q >= end || *q != '=')
            continue;
        for (q++; q < end && (*q == ' ' || *q == '\t'); q++)
            ;
        if (q < end && (*q == '\'' || *q == '"'))
            return q + 1;
    }
    return NULL;
}

int launcher_torchver_parse(const char *text, size_t len, int *major, int *minor)
{
    const char *p = version_value(text, len), *end = text + len;
    char *stop;
    long ma, mi;

    if (p == NULL || p >= end || *p < '0' || *p > '9')
        return -EINVAL;
    ma = strtol(p, &stop, 10); /* the text ends in a quote or newline: strtol stops there */
    if (stop >= end || *stop != '.' || stop + 1 >= end || stop[1] < '0' || stop[1] > '9')
        return -EINVAL;
    mi = strtol(stop + 1, &stop, 10);
    if (ma < 0 || ma > 99 || mi < 0 || mi > 99)
        return -EINVAL;
    *major = (int)ma;
    *minor = (int)mi;
    return 0;
}

/* The version of the first torch/version.py matching pattern (a glob), or 0. */
static int version_at(const char *pattern)
{
    glob_t g;
    int v = 0;

    if (glob(pattern, 0, NULL, &g) != 0)
        return 0;
    for (size_t i = 0; i < g.gl_pathc && v == 0; i++) {
        char buf[4096];
        int fd = open(g.gl_pathv[i], O_RDONLY | O_CLOEXEC), ma, mi;
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;

        if (fd >= 0)
            close(fd);
        if (n > 0 && launcher_torchver_parse(buf, (size_t)n, &ma, &mi) == 0)
            v = 100 * ma + mi;
    }
    globfree(&g);
    return v;
}

/* The installation prefix of an interpreter at path: two levels up from .../bin/python3. */
static int prefix_of(const char *path, char *out, size_t len)
{
    char *slash;

    if (snprintf(out, len, "%s", path) >= (int)len)
        return -ENAMETOOLONG;
    for (int i = 0; i < 2; i++) {
        if ((slash = strrchr(out, '/')) == NULL)
            return -EINVAL;
        *slash = '\0';
    }
    return 0;
}

static int find_under(const char *prefix, const char *home)
{
    char pat[PATH_MAX];
    int v = 0;

    if (prefix[0] != '\0') {
        snprintf(pat, sizeof(pat), "%s/lib/python3*/site-packages/torch/version.py", prefix);
        v = version_at(pat);
    }
    if (v == 0 && strcmp(prefix, "/usr") == 0) {
        v = version_at("/usr/local/lib/python3*/dist-packages/torch/version.py");
        if (v == 0 && home != NULL && home[0] == '/') {
            snprintf(pat, sizeof(pat), "%s/.local/lib/python3*/site-packages/torch/version.py",
                     home);
            v = version_at(pat);
        }
        if (v == 0)
            v = version_at("/usr/lib/python3/dist-packages/torch/version.py");
    }
    return v;
}

int launcher_torchver_find(const char *python, const char *home)
{
    char prefix[PATH_MAX], real[PATH_MAX];
    int v = 0;

    /* the path as given first: a virtual environment's bin/python3 is a symlink to the base
     * interpreter, whose own prefix holds other packages */
    if (prefix_of(python, prefix, sizeof(prefix)) == 0)
        v = find_under(prefix, home);
    if (v == 0 && realpath(python, real) != NULL && prefix_of(real, prefix, sizeof(prefix)) == 0)
        v = find_under(prefix, home);
    return v;
}
