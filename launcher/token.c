#include "token.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int launcher_read_token_file(const char *path, char *token, size_t len, char *err, size_t errlen)
{
    struct stat st;
    char buf[1024];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc = 0;

    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot open token file %s: %s", path, strerror(errno));
        return rc;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "token file %s is not a regular file", path);
        rc = -EINVAL;
        goto out;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errlen, "permissions %04o for token file %s are too open: "
                 "it must not be accessible by others (chmod 600 %s)",
                 (unsigned)(st.st_mode & 07777), path, path);
        rc = -EPERM;
        goto out;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    if (n < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot read token file %s: %s", path, strerror(errno));
        goto out;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    char *s = buf, *e = buf + strlen(buf);
    while (isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    if (*s == '\0' || (size_t)(e - s) >= len) {
        snprintf(err, errlen, "token file %s: the token must be 1 to %zu characters on the first "
                 "line", path, len - 1);
        rc = -EINVAL;
        goto out;
    }
    memcpy(token, s, (size_t)(e - s) + 1);
out:
    explicit_bzero(buf, sizeof(buf));
    close(fd);
    return rc;
}
