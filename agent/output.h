/* One worker stream (stdout or stderr) on its way out: raw bytes to the log file, complete
 * lines with a "[rankN]: " prefix to the console. Lines are written with one writev() each so
 * that lines of different workers never interleave mid-line. */
#ifndef MUSTER_AGENT_OUTPUT_H
#define MUSTER_AGENT_OUTPUT_H

#include <stddef.h>

#define AGENT_OUTPUT_LINE_MAX (64 * 1024) /* longer lines are split, each part prefixed */

struct agent_output {
    int console_fd; /* -1: not shown on the console; borrowed */
    int file_fd;    /* -1: no log file; owned */
    char prefix[32];
    size_t prefix_len;
    char *line; /* partial line, AGENT_OUTPUT_LINE_MAX bytes once allocated */
    size_t len;
    int swallow_nl; /* the last part of a split line was written: drop a leading newline */
};

/* Opens dir/name (stdout.log, stderr.log) for a worker's stream: truncated, appended to. A log
 * file of ours from an earlier run with the same --log-dir is reused; a symlink, FIFO, hard link
 * or someone else's file at the name is replaced, never written through (common/safefile.h).
 * Returns 0 with *fd set, or a negative errno. */
int agent_output_open_log(const char *dir, const char *name, int *fd);

/* console_fd is borrowed, file_fd is owned (closed by agent_output_close). */
void agent_output_init(struct agent_output *o, int console_fd, int file_fd, int rank);

/* Passes n bytes on: to the file at once, to the console line by line. */
void agent_output_feed(struct agent_output *o, const char *data, size_t n);

/* Writes a pending partial line to the console, ending it with a newline. */
void agent_output_flush(struct agent_output *o);

/* Flushes, closes the file and frees the buffer. Accepts a zeroed struct. */
void agent_output_close(struct agent_output *o);

/* Writes all of buf to fd, retrying on EINTR, partial writes and EAGAIN. Returns 0 or a
 * negative errno (e.g. -EPIPE when the console went away). */
int agent_write_all(int fd, const char *buf, size_t len);

#endif
