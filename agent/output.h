/* One worker stream (stdout or stderr) on its way out: raw bytes to the log file, and to the
 * console with a prefix ("[rankN]: " by default) at the start of every visible update. An update
 * ends at '\n' or '\r' ('\r': progress bars such as tqdm's redraw their line in place, so each
 * redraw is passed on at once and gets its own prefix). Each update is written with one writev()
 * (or queued whole on the console fd's one sink, sink.h, once agent_output_console_start ran) so
 * that different workers' lines never interleave mid-line.
 *
 * Partial lines: text without a terminator is held for at most AGENT_OUTPUT_HOLD_MS (it is
 * usually the rest of a line cut by a pipe read or a stdio buffer) and then shown as it is; the
 * rest of that line follows without a second prefix. When another worker writes to the same
 * console while a line is open (shown without '\n', or redrawn with '\r'), that line is ended
 * with '\n' first, and its continuation gets the prefix again: a progress bar is never
 * overwritten by another rank's text. Without a loop (agent_output_configure not called) a
 * partial line waits for its terminator or agent_output_flush.
 *
 * Options (struct agent_output_cfg): the prefix template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
 * or no prefix, --dedup (dedup.h; one agent-wide queue) and --duplicate-std*-filters (matching
 * lines, with their prefix, also go to a filter file shared by the attempt's workers). */
#ifndef MUSTER_AGENT_OUTPUT_H
#define MUSTER_AGENT_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define AGENT_OUTPUT_LINE_MAX (64 * 1024) /* longer lines are split, each part prefixed */
#define AGENT_OUTPUT_HOLD_MS 100          /* the longest a partial line is held back */
#define AGENT_OUTPUT_PREFIX_MAX 128       /* longer expanded templates are cut */
/* Bytes queued per destination (console fd, log file) before the workers that write there are
 * no longer read (sink.h): the console's backpressure, Slurm stepd's way */
#define AGENT_OUTPUT_BUDGET (4u << 20)
#define AGENT_OUTPUT_LAST_LINE_MS 100 /* what the exit's "bytes not written" line may add */
/* The last bytes of each stream kept in memory (agent_output_tail): the failure signature
 * (signature.h) and a hang's evidence read them after the worker is gone. */
#define AGENT_OUTPUT_TAIL (8 * 1024)

struct mc_sink;
struct agent_output;

/* A paused output's destinations have room again: read its source again. */
typedef void (*agent_output_resume_cb)(struct agent_output *o, void *data);

/* How an attempt's worker streams are shown; borrowed, the strings must outlive the outputs. */
struct agent_output_cfg {
    const char *prefix_template;   /* NULL or "": "[rank${rank}]: " */
    int no_prefix;                 /* --no-prefix: workers' text as it is */
    const char *role;              /* ${role_name} */
    unsigned dedup_ms;             /* --dedup's window; 0: off */
    const char *const *filters[2]; /* NULL or NULL-terminated substrings, per stream */
    const char *filter_path[2];    /* the attempt's filtered_std{out,err}.log; NULL: none */
};

struct agent_output {
    int console_fd; /* -1: not shown on the console; borrowed */
    int file_fd;    /* -1: no log file; owned */
    int filter_fd;  /* -1: no filter file; owned */
    const char *const *filters;
    char prefix[AGENT_OUTPUT_PREFIX_MAX];
    size_t prefix_len;
    int rank;
    char *line; /* the current line, AGENT_OUTPUT_LINE_MAX bytes once allocated */
    size_t len;
    size_t shown;   /* bytes of line already on the console (a held partial line was shown) */
    int open;       /* the console line is ours and unterminated: continue without a prefix */
    int cut;        /* our open line was ended by another worker's output */
    int swallow_nl; /* the last part of a split line was written: drop a leading newline */
    int attached;   /* counted in the agent-wide console state (timer, dedup) */
    struct mc_sink *file_sink; /* NULL: file_fd written directly; else the sink owns it */
    int paused;                /* over budget: the caller stopped reading, resume_cb comes */
    struct agent_output *pause_prev, *pause_next;
    agent_output_resume_cb resume_cb;
    void *resume_data;
    int dedup, dedup_fd;
    uint64_t dedup_seq;                         /* agent_dedup_add's cookie */
    uint64_t hold_until;                        /* ms; 0: nothing held */
    struct agent_output *hold_prev, *hold_next; /* in the list of held partial lines */
    /* the ring of the stream's last raw bytes, whatever the console and file do with them;
     * inline, so that feeding it allocates nothing and it outlives agent_output_close */
    uint64_t tail_total; /* bytes fed since agent_output_init; tail[tail_total % size] is next */
    char tail[AGENT_OUTPUT_TAIL];
};

/* Opens dir/name (stdout.log, stderr.log) for a worker's stream: truncated, appended to. A log
 * file of ours from an earlier run with the same --log-dir is reused; a symlink, FIFO, hard link
 * or someone else's file at the name is replaced, never written through (common/safefile.h).
 * Returns 0 with *fd set, or a negative errno. */
int agent_output_open_log(const char *dir, const char *name, int *fd);

/* console_fd is borrowed, file_fd is owned (closed by agent_output_close). The prefix is
 * "[rankN]: " until agent_output_configure. */
void agent_output_init(struct agent_output *o, int console_fd, int file_fd, int rank);

/* Applies cfg (NULL: defaults) for stream (0 stdout, 1 stderr) of the worker with local_rank,
 * and joins the agent-wide console state on loop (one timer shared by every output: held
 * partial lines and --dedup's window). A filter file that cannot be opened is reported on
 * stderr and left out. Borrows loop and cfg's strings. */
void agent_output_configure(struct agent_output *o, uv_loop_t *loop,
                            const struct agent_output_cfg *cfg, int local_rank, int stream);

/* Passes n bytes on: to the file at once, to the console update by update; never waits for
 * either once the console is started. Returns 1 when o is paused: a destination holds its
 * budget, so the caller stops reading o's source until resume_cb (agent_output_on_resume) is
 * called from the loop; else 0. Without resume_cb or a started console it always returns 0. */
int agent_output_feed(struct agent_output *o, const char *data, size_t n);

/* Sets the callback for agent_output_feed's pauses; data is borrowed. */
void agent_output_on_resume(struct agent_output *o, agent_output_resume_cb cb, void *data);

/* Puts fds 1 and 2, and every console fd and log file of an output configured with a loop from
 * now on, behind a writer thread with a queue of budget bytes (sink.h); routes muster's own log
 * lines (common/log.h) through fd 2's queue, in order with the workers' stderr. Borrows loop.
 * Returns 0 or a negative errno (-EALREADY when started); without it everything is written
 * directly (tests, tools). */
int agent_output_console_start(uv_loop_t *loop, size_t budget);

/* muster's own text for the console (a failure summary), queued behind the workers' lines. */
void agent_output_console_write(int fd, const char *buf, size_t len);

/* At exit, after every output is closed: waits at most timeout_ms for the queues to be
 * written, says in one line how many bytes were not (AGENT_OUTPUT_LAST_LINE_MS more), closes the
 * wake handle (run the loop once more to finish the close). Log lines go directly (bounded) from
 * here on. Returns the bytes not written. */
uint64_t agent_output_console_stop(unsigned timeout_ms);

/* Copies the stream's last bytes (at most len - 1 and AGENT_OUTPUT_TAIL) into buf and a NUL;
 * when that cuts a line, the copy starts after the cut line's end where it has one (a whole
 * last line is worth more than a cut one). Raw bytes: no prefix, NULs and escapes included.
 * Valid after agent_output_close too (the ring is kept until agent_output_init). Returns the
 * bytes copied, not counting the NUL; 0 when len is 0. */
size_t agent_output_tail(const struct agent_output *o, char *buf, size_t len);

/* Writes a pending partial line to the console, ending it with a newline. */
void agent_output_flush(struct agent_output *o);

/* Flushes, closes the files, leaves the console state and frees the buffer. Accepts a zeroed
 * struct. */
void agent_output_close(struct agent_output *o);

/* Expands a TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE like Python's string.Template.safe_substitute:
 * $role_name / ${role_name}, $rank / ${rank}, $local_rank / ${local_rank}; "$$" is "$"; any
 * other '$' stays as it is. Writes at most len - 1 bytes and a NUL; returns the length written. */
size_t agent_output_prefix(const char *tmpl, const char *role, int rank, int local_rank, char *buf,
                           size_t len);

/* Splits a torchrun filter list ("a,b,,c": ",," is a literal comma, so that is "a" and "b,c")
 * into *out, a NULL-terminated array in one allocation (free() it). Empty items are dropped;
 * an empty list gives an array of just NULL. Returns 0 or -ENOMEM. */
int agent_output_split_filters(const char *list, char ***out);

/* Writes all of buf to fd, retrying on EINTR, partial writes and EAGAIN. Returns 0 or a
 * negative errno (e.g. -EPIPE when the console went away). */
int agent_write_all(int fd, const char *buf, size_t len);

/* The module of the first "ModuleNotFoundError: No module named 'X'" a worker printed since
 * the process started, or NULL: the failure summary's hint. */
const char *agent_output_missing_module(void);

#endif
