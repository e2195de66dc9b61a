#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "path.h"
#include "clock.h"

/* The largest /proc/self/mountinfo read: containers with thousands of mounts exist, and a
 * cut-off file only risks missing the cgroup2 line (then the fallback runs). */
#define MOUNTINFO_MAX (4u << 20)

/* Copies the space-delimited field at *p into out, decoding mountinfo's \ooo escapes, and
 * advances *p past it. Returns 0 or -ENAMETOOLONG. */
static int take_field(const char **p, char *out, size_t len)
{
    const char *s = *p;
    size_t n = 0;

    while (*s == ' ')
        s++;
    while (*s != '\0' && *s != ' ' && *s != '\n') {
        char c = *s++;
        if (c == '\\' && s[0] >= '0' && s[0] <= '3' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' &&
            s[2] <= '7') {
            c = (char)((s[0] - '0') * 64 + (s[1] - '0') * 8 + (s[2] - '0'));
            s += 3;
        }
        if (n + 1 >= len)
            return -ENAMETOOLONG;
        out[n++] = c;
    }
    out[n] = '\0';
    *p = s;
    return 0;
}

/* One mountinfo line: "id parent maj:min root mountpoint opts [optional...] - fstype src
 * superopts". Returns 1 and fills mnt/root for a cgroup2 line, 0 for another, or -errno. */
static int mount_line(const char *line, char *mnt, size_t mnt_len, char *root, size_t root_len)
{
    const char *p = line, *sep = strstr(line, " - ");
    const char *eol = strchr(line, '\n');
    char skip[64];
    int rc = 0;

    if (sep == NULL || (eol != NULL && sep > eol) || strncmp(sep + 3, "cgroup2 ", 8) != 0)
        return 0;
    for (int i = 0; i < 3 && rc == 0; i++) /* id, parent, major:minor: short */
        rc = take_field(&p, skip, sizeof(skip));
    if (rc == 0)
        rc = take_field(&p, root, root_len);
    if (rc == 0)
        rc = take_field(&p, mnt, mnt_len);
    if (rc == 0 && (root[0] != '/' || mnt[0] != '/'))
        return 0; /* not a line of the format above */
    return rc == 0 ? 1 : rc;
}

int agent_cgroup_parse_mount(const char *mountinfo, char *mnt, size_t mnt_len, char *root,
                             size_t root_len)
{
    for (const char *line = mountinfo; line != NULL && *line != '\0';) {
        int rc = mount_line(line, mnt, mnt_len, root, root_len);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return -ENOENT;
}

int agent_cgroup_parse_self(const char *proc_cgroup, char *path, size_t len)
{
    for (const char *line = proc_cgroup; line != NULL && *line != '\0';) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        if (n >= 3 && strncmp(line, "0::", 3) == 0) {
            if (n - 3 >= len)
                return -ENAMETOOLONG;
            memcpy(path, line + 3, n - 3);
            path[n - 3] = '\0';
            return path[0] == '/' ? 0 : -ENOENT;
        }
        line = eol ? eol + 1 : NULL;
    }
    return -ENOENT;
}

int agent_cgroup_join_path(const char *mnt, const char *root, const char *path, char *out,
                           size_t len)
{
    size_t rl = strlen(root);

    if (strcmp(root, "/") == 0)
        rl = 0;
    else if (strncmp(path, root, rl) != 0 || (path[rl] != '/' && path[rl] != '\0'))
        return -ENOENT; /* our cgroup lies outside the subtree that mount shows */
    path += rl;
    if (strcmp(path, "/") == 0)
        path = "";
    return agent_path_fmt(out, len, "%s%s", strcmp(mnt, "/") == 0 ? "" : mnt, path);
}

/* Reads a /proc file whole (their size is not known in advance). Returns a NUL-terminated
 * buffer to free(), or NULL with errno set. */
static char *read_text(const char *path)
{
    size_t cap = 16384, n = 0;
    char *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return NULL;
    for (;;) {
        if (buf == NULL || n + 1 >= cap) {
            char *nb = cap > MOUNTINFO_MAX ? NULL : realloc(buf, buf ? cap *= 2 : cap);
            if (nb == NULL)
                break;
            buf = nb;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (buf != NULL)
        buf[n] = '\0';
    else
        errno = ENOMEM;
    return buf;
}

int agent_cgroup_self_dir(char *out, size_t len)
{
    char mnt[4096], root[4096], path[4096];
    char *info = read_text("/proc/self/mountinfo"), *self = read_text("/proc/self/cgroup");
    int rc = info && self ? 0 : -errno;

    if (rc == 0)
        rc = agent_cgroup_parse_mount(info, mnt, sizeof(mnt), root, sizeof(root));
    if (rc == 0)
        rc = agent_cgroup_parse_self(self, path, sizeof(path));
    if (rc == 0)
        rc = agent_cgroup_join_path(mnt, root, path, out, len);
    free(info);
    free(self);
    return rc;
}

/* ---- operations: plain system calls only, so that the reaper (a fork of a process that may
 * have threads) can run them too ----------------------------------------------------- */

int agent_cgroup_kill(const char *dir)
{
    char path[4096];
    int rc = agent_path_fmt(path, sizeof(path), "%s/cgroup.kill", dir);
    int fd = rc == 0 ? open(path, O_WRONLY | O_CLOEXEC) : -1;

    if (rc != 0)
        return rc;
    if (fd < 0)
        return -errno;
    rc = write(fd, "1", 1) == 1 ? 0 : -errno;
    close(fd);
    return rc;
}

/* cgroup.events from its start: "populated 0|1\nfrozen 0|1\n". Returns 1, 0 or -errno. */
static int populated(int fd)
{
    char buf[128];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return strstr(buf, "populated 1") != NULL;
}

int agent_cgroup_wait_empty(const char *dir, unsigned timeout_ms)
{
    char path[4096];
    long long deadline = (long long)mc_mono_ms() + timeout_ms;
    int rc = agent_path_fmt(path, sizeof(path), "%s/cgroup.events", dir);
    int fd = rc == 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;

    if (rc != 0)
        return rc;
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno; /* removed already: nothing in it */
    while ((rc = populated(fd)) == 1) {
        long long left = deadline - (long long)mc_mono_ms();
        if (left <= 0) {
            rc = -ETIMEDOUT;
            break;
        }
        /* the kernel flags a change of cgroup.events with POLLPRI; the 10 ms cap covers
         * a change between reading and polling */
        struct pollfd p = {.fd = fd, .events = POLLPRI};
        poll(&p, 1, left < 10 ? (int)left : 10);
    }
    close(fd);
    return rc;
}

int agent_cgroup_remove(const char *dir)
{
    char buf[4096], path[4096];
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
    ssize_t n;

    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    /* getdents64 rather than opendir: no malloc, for the reaper */
    while ((n = getdents64(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(buf + off);
            off += d->d_reclen;
            if (d->d_type != DT_DIR || strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                continue;
            if (agent_path_fmt(path, sizeof(path), "%s/%s", dir, d->d_name) == 0 &&
                rmdir(path) != 0 && errno != ENOENT && rc == 0)
                rc = -errno;
        }
    }
    close(fd);
    if (rmdir(dir) != 0 && errno != ENOENT && rc == 0)
        rc = -errno;
    return rc;
}
