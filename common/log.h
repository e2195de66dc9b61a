/* Logging with levels: the one way muster's own lines reach stderr.
 *
 *     muster: error: <text>      MC_LOG_ERROR   always shown (--quiet too)
 *     muster: warning: <text>    MC_LOG_WARN    hidden by nothing but MUSTER_LOG=error
 *     muster: <text>             MC_LOG_INFO    hidden by --quiet
 *     muster: debug: <text>      MC_LOG_DEBUG   shown with --verbose
 *
 * The level comes from mc_log_set_level (the launcher's --quiet / --verbose) or, before that,
 * from MUSTER_LOG=error|warn|info|debug in the environment (read once, on first use). Each line
 * goes out in one write(2), so lines of several processes sharing a terminal do not interleave;
 * a stderr that takes nothing for MC_LOG_WRITE_WAIT_MS loses the line instead of blocking the
 * caller (a stalled terminal must not stop an event loop). The agent installs a writer that
 * queues the lines behind its workers' stderr instead (mc_log_set_writer).
 *
 * Every line carries its level from where it is made to here: a module that hands lines to a
 * callback passes the level with each, and nothing guesses a level from a line's words.
 * mc_log prints its text as given; a line with text that other machines or users chose (host
 * names, job ids, checkpoint names, a peer's reason) goes through mc_log_untrusted, or is built
 * with mc_format_untrusted, the one place where such lines are escaped (escape.h). */
#ifndef MUSTER_COMMON_LOG_H
#define MUSTER_COMMON_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum mc_log_level { MC_LOG_ERROR = 0, MC_LOG_WARN, MC_LOG_INFO, MC_LOG_DEBUG };

#define MC_LOG_WRITE_WAIT_MS 1000 /* the longest a line waits for room on stderr */

/* Takes one complete line (with its newline) instead of write(2); called from any thread that
 * logs, so it must be thread safe and must not block. NULL restores the direct write. */
typedef void (*mc_log_writer_fn)(const char *line, size_t len);
void mc_log_set_writer(mc_log_writer_fn fn);

void mc_log_set_level(enum mc_log_level level);
/* The name that starts each line, "muster" unless a program of its own says otherwise
 * (muster-preflight). Borrows name: a string literal. */
void mc_log_set_program(const char *name);
enum mc_log_level mc_log_level(void);
/* Whether a line of this level would be shown (to skip building an expensive one). */
int mc_log_enabled(enum mc_log_level level);
/* Parses "error", "warn"/"warning", "info", "debug"; returns the level or -1. */
int mc_log_parse_level(const char *s);

/* For a subcommand's argument loop: when arg is -q/--quiet (MC_LOG_WARN) or -v/--verbose
 * (MC_LOG_DEBUG), sets the level, exports it as MUSTER_LOG for the muster processes this one
 * starts, and returns 1; else returns 0 and does nothing. */
int mc_log_take_flag(const char *arg);

void mc_log(enum mc_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same with the whole formatted line escaped (escape.h): a newline in a peer's text cannot
 * forge a line, nor an ESC sequence reach the terminal. Lines up to MC_LOG_LINE_MAX bytes. */
void mc_log_untrusted(enum mc_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The va_list form, for a module's own logging function (it adds a "preflight: " or so). */
void mc_vlog_untrusted(enum mc_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* A line that continues the one logged before it (a row of a table, one finding of a list):
 * printed as formatted, without the "muster: " prefix, escaped like mc_log_untrusted and shown
 * or hidden like any line of its level. */
void mc_log_cont(enum mc_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define MC_LOG_LINE_MAX 2048 /* the longest untrusted line formatted before escaping */

/* Formats fmt into out (outlen bytes, always NUL-terminated) and escapes the result, for a
 * module that hands the line to a callback instead of logging it. Returns out. */
char *mc_format_untrusted(char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define mc_error(...) mc_log(MC_LOG_ERROR, __VA_ARGS__)
#define mc_warn(...) mc_log(MC_LOG_WARN, __VA_ARGS__)
#define mc_info(...) mc_log(MC_LOG_INFO, __VA_ARGS__)
#define mc_debug(...) mc_log(MC_LOG_DEBUG, __VA_ARGS__)

#endif
