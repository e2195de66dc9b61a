#include "log.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "escape.h"

static int level = -1;          /* -1: not yet read from MUSTER_LOG */
static mc_log_writer_fn writer; /* NULL: write_bounded */

static const char *program = "muster";

static const char *const prefix[] = {
    [MC_LOG_ERROR] = "error: ",
    [MC_LOG_WARN] = "warning: ",
    [MC_LOG_INFO] = "",
    [MC_LOG_DEBUG] = "debug: ",
};

void mc_log_set_program(const char *name)
{
    program = name;
}

int mc_log_parse_level(const char *s)
{
    if (s == NULL)
        return -1;
    if (strcasecmp(s, "error") == 0)
        return MC_LOG_ERROR;
    if (strcasecmp(s, "warn") == 0 || strcasecmp(s, "warning") == 0)
        return MC_LOG_WARN;
    if (strcasecmp(s, "info") == 0)
        return MC_LOG_INFO;
    if (strcasecmp(s, "debug") == 0)
        return MC_LOG_DEBUG;
    return -1;
}

enum mc_log_level mc_log_level(void)
{
    if (level < 0) {
        int l = mc_log_parse_level(getenv("MUSTER_LOG"));
        level = l < 0 ? MC_LOG_INFO : l;
    }
    return (enum mc_log_level)level;
}

void mc_log_set_level(enum mc_log_level l)
{
    level = (int)l;
}

int mc_log_take_flag(const char *arg)
{
    int l;

    if (strcmp(arg, "-q") == 0 || strcmp(arg, "--quiet") == 0)
        l = MC_LOG_WARN;
    else if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0)
        l = MC_LOG_DEBUG;
    else
        return 0;
    mc_log_set_level((enum mc_log_level)l);
    setenv("MUSTER_LOG", l == MC_LOG_WARN ? "warn" : "debug", 1);
    return 1;
}

int mc_log_enabled(enum mc_log_level l)
{
    return (int)l <= (int)mc_log_level();
}

void mc_log_set_writer(mc_log_writer_fn fn)
{
    writer = fn;
}

/* stderr may be a pipe or terminal nobody reads: wait at most MC_LOG_WRITE_WAIT_MS
 * for room before each write, then give the line up. A blocking fd with POLLOUT takes a line
 * under PIPE_BUF without waiting (a free pipe page), so the bound holds for log lines. */
static void write_bounded(const char *buf, size_t n)
{
    for (size_t off = 0; off < n;) {
        struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
        int r = poll(&p, 1, MC_LOG_WRITE_WAIT_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || (p.revents & (POLLERR | POLLNVAL)))
            break;
        ssize_t w = write(STDERR_FILENO, buf + off, n - off);
        if (w < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

/* pre: the level's word after "<program>: ", or NULL for a continuation line (no prefix) */
static void vlog(const char *pre, const char *fmt, va_list ap)
{
    char buf[4096];
    size_t n = 0, cap = sizeof(buf) - 1; /* room for the newline */
    int saved = errno, k;

    if (pre != NULL) {
        k = snprintf(buf, cap, "%s: %s", program, pre);
        n = k > 0 && (size_t)k < cap / 2 ? (size_t)k : 0;
    }
    k = vsnprintf(buf + n, cap - n, fmt, ap);
    if (k > 0)
        n += (size_t)k < cap - n ? (size_t)k : cap - n - 1; /* cut, never overflow */
    buf[n++] = '\n';
    if (writer != NULL)
        writer(buf, n);
    else
        write_bounded(buf, n);
    errno = saved;
}

void mc_log(enum mc_log_level l, const char *fmt, ...)
{
    va_list ap;

    if (!mc_log_enabled(l))
        return;
    va_start(ap, fmt);
    vlog(prefix[l], fmt, ap);
    va_end(ap);
}

static void vformat_untrusted(char *out, size_t outlen, const char *fmt, va_list ap)
{
    char line[MC_LOG_LINE_MAX];

    vsnprintf(line, sizeof(line), fmt, ap);
    (void)mc_escape(line, out, outlen); /* cut short at a whole character when out is small */
}

char *mc_format_untrusted(char *out, size_t outlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vformat_untrusted(out, outlen, fmt, ap);
    va_end(ap);
    return out;
}

void mc_vlog_untrusted(enum mc_log_level l, const char *fmt, va_list ap)
{
    char shown[MC_ESCAPE_SIZE(MC_LOG_LINE_MAX)];

    if (!mc_log_enabled(l))
        return;
    vformat_untrusted(shown, sizeof(shown), fmt, ap);
    mc_log(l, "%s", shown);
}

void mc_log_untrusted(enum mc_log_level l, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    mc_vlog_untrusted(l, fmt, ap);
    va_end(ap);
}

static void log_with(const char *pre, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void log_with(const char *pre, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vlog(pre, fmt, ap);
    va_end(ap);
}

void mc_log_cont(enum mc_log_level l, const char *fmt, ...)
{
    char shown[MC_ESCAPE_SIZE(MC_LOG_LINE_MAX)];
    va_list ap;

    if (!mc_log_enabled(l))
        return;
    va_start(ap, fmt);
    vformat_untrusted(shown, sizeof(shown), fmt, ap);
    va_end(ap);
    log_with(NULL, "%s", shown);
}
