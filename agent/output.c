#include "output.h"

#include "path.h"
#include "safefile.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

int agent_output_open_log(const char *dir, const char *name, int *fd)
{
    char path[PATH_MAX];

    *fd = -1;
    if (agent_path_fmt(path, sizeof(path), "%s/%s", dir, name) != 0)
        return -ENAMETOOLONG;
    return mc_file_open(path, MC_FILE_TRUNC | MC_FILE_APPEND, 0644, fd);
}

void agent_output_init(struct agent_output *o, int console_fd, int file_fd, int rank)
{
    memset(o, 0, sizeof(*o));
    o->console_fd = console_fd;
    o->file_fd = file_fd;
    o->prefix_len = (size_t)snprintf(o->prefix, sizeof(o->prefix), "[rank%d]: ", rank);
}

/* The console may be a non-blocking pipe shared with other programs: wait instead of losing
 * output. A vanished reader (EPIPE) turns console output off rather than killing the agent. */
static int wait_writable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    while (poll(&p, 1, -1) < 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

static int writev_all(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        ssize_t n = writev(fd, iov, cnt);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN && wait_writable(fd) == 0)
                continue;
            return -errno;
        }
        while (cnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

int agent_write_all(int fd, const char *buf, size_t len)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    return writev_all(fd, &iov, 1);
}

static void emit_line(struct agent_output *o, const char *line, size_t len, int add_newline)
{
    struct iovec iov[3] = {
        {.iov_base = o->prefix, .iov_len = o->prefix_len},
        {.iov_base = (void *)line, .iov_len = len},
        {.iov_base = "\n", .iov_len = 1},
    };
    if (o->console_fd < 0)
        return;
    if (writev_all(o->console_fd, iov, add_newline ? 3 : 2) == -EPIPE)
        o->console_fd = -1;
}

/* The buffer holds at most AGENT_OUTPUT_LINE_MAX bytes of a line (without its newline). A
 * longer line is written in parts, each ending with an added newline; swallow_nl then drops
 * the line's real newline if it comes right after a part, instead of printing an empty line. */
static void feed_console(struct agent_output *o, const char *data, size_t n)
{
    while (n > 0) {
        if (o->swallow_nl) {
            o->swallow_nl = 0;
            if (data[0] == '\n') {
                data++;
                n--;
                continue;
            }
        }
        const char *nl = memchr(data, '\n', n);
        size_t content = nl ? (size_t)(nl - data) : n;

        if (o->len == 0 && nl != NULL && content <= AGENT_OUTPUT_LINE_MAX) {
            emit_line(o, data, content + 1, 0); /* the common case: no copy */
            data += content + 1;
            n -= content + 1;
            continue;
        }
        size_t room = AGENT_OUTPUT_LINE_MAX - o->len;
        size_t part = content < room ? content : room;
        memcpy(o->line + o->len, data, part);
        o->len += part;
        data += part;
        n -= part;
        if (nl != NULL && part == content) {
            emit_line(o, o->line, o->len, 1);
            o->len = 0;
            data++; /* the newline itself */
            n--;
        } else if (o->len == AGENT_OUTPUT_LINE_MAX) {
            emit_line(o, o->line, o->len, 1);
            o->len = 0;
            o->swallow_nl = 1;
        }
    }
}

void agent_output_feed(struct agent_output *o, const char *data, size_t n)
{
    if (o->file_fd >= 0 && agent_write_all(o->file_fd, data, n) != 0) {
        fprintf(stderr, "muster: cannot write a worker log file: %s; file output stops\n",
                strerror(errno));
        close(o->file_fd);
        o->file_fd = -1;
    }
    if (o->console_fd < 0)
        return;
    if (o->line == NULL && (o->line = malloc(AGENT_OUTPUT_LINE_MAX)) == NULL) {
        emit_line(o, data, n, data[n - 1] != '\n'); /* no memory: pass it on unsplit */
        return;
    }
    feed_console(o, data, n);
}

void agent_output_flush(struct agent_output *o)
{
    if (o->len > 0) {
        emit_line(o, o->line, o->len, 1);
        o->len = 0;
    }
}

void agent_output_close(struct agent_output *o)
{
    /* a zeroed struct was never initialised and owns nothing (its file_fd 0 is not ours);
     * agent_output_init always sets a non-empty prefix */
    if (o == NULL || o->prefix_len == 0)
        return;
    agent_output_flush(o);
    if (o->file_fd >= 0)
        close(o->file_fd);
    o->file_fd = -1;
    free(o->line);
    o->line = NULL;
}
