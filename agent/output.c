#include "output.h"

#include "dedup.h"
#include "log.h"
#include "path.h"
#include "safefile.h"
#include "sink.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define CONSOLE_FDS 64 /* console fds tracked for open lines and --dedup (1 and 2 in practice) */

/* What every worker output of this process shares: one console, hence one "whose line is open
 * on it", one --dedup queue and one timer for held partial lines and the dedup window. The
 * agent runs one loop thread, so plain statics serve; the timer is allocated while outputs are
 * attached and freed from its close callback once the last one has left. */
static struct {
    struct agent_output *owner[CONSOLE_FDS]; /* whose unterminated line the console shows */
    int dedup_streams[CONSOLE_FDS];          /* --dedup outputs attached per console fd */
    uv_loop_t *loop;
    uv_timer_t *timer;
    uint64_t timer_due;
    int refs;
    struct agent_output *held_head, *held_tail; /* partial lines by deadline (FIFO) */
    struct agent_dedup *dedup;
    /* agent_output_console_start: every console fd and log file behind a sink (sink.h), and
     * the wake the sinks' writers send when a queue drained */
    struct mc_sink *sink[CONSOLE_FDS];
    uv_async_t *wake;
    size_t budget;
    pthread_t loop_thread;
    struct agent_output *paused; /* outputs whose reader waits for a drain (list) */
    char missing_module[64];     /* a worker printed "No module named 'X'" (first X) */
} con;

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
    o->filter_fd = -1;
    o->rank = rank;
    o->prefix_len = (size_t)snprintf(o->prefix, sizeof(o->prefix), "[rank%d]: ", rank);
}

/* ---- writing -------------------------------------------------------------------------- */

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

/* To the console: through fd's sink once the console is started, so that the loop never waits
 * for the reader; directly before (tests, tools without a loop). A piece refused at the sink's
 * hard limit is counted there and is not an error of the console. */
static int console_writev(int fd, struct iovec *iov, int cnt)
{
    struct mc_sink *s = fd >= 0 && fd < CONSOLE_FDS ? con.sink[fd] : NULL;
    int rc;

    if (s == NULL)
        return writev_all(fd, iov, cnt);
    rc = mc_sink_writev(s, iov, cnt);
    return rc == -ENOBUFS ? 0 : rc;
}

/* Before writer (NULL: the dedup queue) writes to fd: a line another output left open there
 * (a shown partial line, a '\r' redraw) is ended first, so that the two never share a line. */
static void claim_console(int fd, struct agent_output *writer)
{
    struct agent_output *prev;

    if (fd < 0 || fd >= CONSOLE_FDS || (prev = con.owner[fd]) == NULL || prev == writer)
        return;
    con.owner[fd] = NULL;
    console_writev(fd, &(struct iovec){.iov_base = "\n", .iov_len = 1}, 1);
    prev->cut = 1; /* a lone terminator from prev next would only add an empty line */
    prev->open = 0;
}

static void set_owner(struct agent_output *o, int open)
{
    if (o->console_fd >= 0 && o->console_fd < CONSOLE_FDS)
        con.owner[o->console_fd] = open ? o : NULL;
}

/* ---- held partial lines and the shared timer ------------------------------------------ */

static void hold_remove(struct agent_output *o)
{
    if (o->hold_until == 0)
        return;
    if (o->hold_prev != NULL)
        o->hold_prev->hold_next = o->hold_next;
    else
        con.held_head = o->hold_next;
    if (o->hold_next != NULL)
        o->hold_next->hold_prev = o->hold_prev;
    else
        con.held_tail = o->hold_prev;
    o->hold_prev = o->hold_next = NULL;
    o->hold_until = 0;
}

static void arm_timer(void);

/* A partial line started: show it by now + AGENT_OUTPUT_HOLD_MS at the latest. Deadlines grow
 * with time, so appending keeps the list sorted. */
static void hold_add(struct agent_output *o)
{
    if (!o->attached || o->hold_until != 0)
        return;
    o->hold_until = uv_now(con.loop) + AGENT_OUTPUT_HOLD_MS;
    o->hold_prev = con.held_tail;
    if (con.held_tail != NULL)
        con.held_tail->hold_next = o;
    else
        con.held_head = o;
    con.held_tail = o;
    arm_timer();
}

static void show_partial(struct agent_output *o);

static void on_timer(uv_timer_t *t)
{
    uint64_t now = uv_now(t->loop);

    con.timer_due = 0;
    while (con.held_head != NULL && con.held_head->hold_until <= now) {
        struct agent_output *o = con.held_head;
        hold_remove(o);
        show_partial(o);
    }
    if (con.dedup != NULL)
        agent_dedup_flush_due(con.dedup, now);
    arm_timer();
}

/* One timer at the earliest deadline of both queues (exact, not a periodic scan). */
static void arm_timer(void)
{
    uint64_t due = con.held_head != NULL ? con.held_head->hold_until : 0;
    uint64_t d = con.dedup != NULL ? agent_dedup_deadline(con.dedup) : 0;

    if (d != 0 && (due == 0 || d < due))
        due = d;
    if (con.timer == NULL || due == con.timer_due)
        return;
    con.timer_due = due;
    if (due == 0) {
        uv_timer_stop(con.timer);
        return;
    }
    uint64_t now = uv_now(con.loop);
    uv_timer_start(con.timer, on_timer, due > now ? due - now : 0, 0);
}

/* ---- attaching to the shared state ---------------------------------------------------- */

static void dedup_emit(void *arg, int fd, const int *ranks, size_t n, const char *prefix,
                       const char *text, size_t len)
{
    char head[AGENT_OUTPUT_PREFIX_MAX + 64], list[AGENT_OUTPUT_PREFIX_MAX];
    struct iovec iov[3];

    (void)arg;
    if (n > 1 && prefix[0] != '\0') { /* --no-prefix stays without one */
        agent_dedup_ranks_fmt(ranks, n, list, sizeof(list));
        snprintf(head, sizeof(head), "[ranks %s]: ", list);
        prefix = head;
    }
    iov[0] = (struct iovec){.iov_base = (void *)prefix, .iov_len = strlen(prefix)};
    iov[1] = (struct iovec){.iov_base = (void *)text, .iov_len = len};
    iov[2] = (struct iovec){.iov_base = "\n", .iov_len = 1};
    claim_console(fd, NULL);
    console_writev(fd, iov, 3); /* a vanished console loses the line, like any other */
}

static void free_timer(uv_handle_t *h)
{
    free(h);
}

static void attach(struct agent_output *o, uv_loop_t *loop, unsigned dedup_ms)
{
    if (o->console_fd < 0 || o->console_fd >= CONSOLE_FDS)
        return;
    if (con.refs == 0) {
        if ((con.timer = malloc(sizeof(*con.timer))) == NULL)
            return; /* partial lines then wait for their terminator, as without a loop */
        uv_timer_init(loop, con.timer);
        con.loop = loop;
        con.timer_due = 0;
    }
    if (con.wake != NULL && con.sink[o->console_fd] == NULL &&
        mc_sink_new(o->console_fd, 0, con.budget, con.wake, &con.sink[o->console_fd]) != 0)
        mc_warn("console fd %d is written directly: no writer thread", o->console_fd);
    if (dedup_ms > 0 && con.dedup == NULL)
        agent_dedup_new(dedup_ms, dedup_emit, NULL, &con.dedup); /* -ENOMEM: no --dedup */
    con.refs++;
    o->attached = 1;
    o->dedup = dedup_ms > 0 && con.dedup != NULL;
    o->dedup_fd = o->console_fd;
    if (o->dedup)
        con.dedup_streams[o->dedup_fd]++;
}

static void detach(struct agent_output *o)
{
    for (int fd = 0; fd < CONSOLE_FDS; fd++)
        if (con.owner[fd] == o)
            con.owner[fd] = NULL; /* never a dangling owner */
    if (!o->attached)
        return;
    hold_remove(o);
    o->attached = 0;
    /* its queued --dedup lines stay and leave at their deadline, with whoever joins them. Its
     * count stays too: a rank that printed and exited is in the entries, so counting only the
     * open streams would call a line complete before the slower ranks said it. */
    if (--con.refs > 0) {
        arm_timer();
        return;
    }
    agent_dedup_free(con.dedup); /* prints what is still queued */
    con.dedup = NULL;
    memset(con.dedup_streams, 0, sizeof(con.dedup_streams));
    uv_close((uv_handle_t *)con.timer, free_timer);
    con.timer = NULL;
    con.loop = NULL;
    con.timer_due = 0;
}

void agent_output_configure(struct agent_output *o, uv_loop_t *loop,
                            const struct agent_output_cfg *cfg, int local_rank, int stream)
{
    unsigned dedup_ms = 0;

    if (cfg != NULL) {
        if (cfg->no_prefix)
            o->prefix[0] = '\0';
        else if (cfg->prefix_template != NULL && cfg->prefix_template[0] != '\0')
            agent_output_prefix(cfg->prefix_template, cfg->role ? cfg->role : "", o->rank,
                                local_rank, o->prefix, sizeof(o->prefix));
        o->prefix_len = strlen(o->prefix);
        o->filters = cfg->filters[stream];
        if (o->filters != NULL && o->filters[0] != NULL && cfg->filter_path[stream] != NULL &&
            mc_file_open(cfg->filter_path[stream], MC_FILE_APPEND, 0644, &o->filter_fd) != 0) {
            mc_warn("cannot open %s; filtered lines are not copied", cfg->filter_path[stream]);
            o->filter_fd = -1;
        }
        dedup_ms = cfg->dedup_ms;
    }
    /* a log file on a slow or stalled disk must not hold up the loop either */
    if (loop != NULL && con.wake != NULL && o->file_fd >= 0 &&
        mc_sink_new(o->file_fd, 1, con.budget, con.wake, &o->file_sink) != 0)
        o->file_sink = NULL; /* written directly, as without a loop */
    if (loop != NULL)
        attach(o, loop, dedup_ms);
}

/* ---- prefix templates and filter lists ------------------------------------------------ */

static const char *template_value(const char *name, size_t len, const char *role, char *num,
                                  size_t numlen, int rank, int local_rank)
{
    if (len == 9 && memcmp(name, "role_name", 9) == 0)
        return role;
    if (len == 4 && memcmp(name, "rank", 4) == 0) {
        snprintf(num, numlen, "%d", rank);
        return num;
    }
    if (len == 10 && memcmp(name, "local_rank", 10) == 0) {
        snprintf(num, numlen, "%d", local_rank);
        return num;
    }
    return NULL;
}

/* Python identifiers as string.Template takes them (ASCII) */
static int ident_char(char c, int digits_too)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (digits_too && c >= '0' && c <= '9');
}

static void put(char *buf, size_t len, size_t *used, const char *s, size_t n)
{
    for (size_t i = 0; i < n && *used + 1 < len; i++)
        buf[(*used)++] = s[i];
}

size_t agent_output_prefix(const char *tmpl, const char *role, int rank, int local_rank, char *buf,
                           size_t len)
{
    size_t used = 0;
    char num[16];

    for (const char *s = tmpl; *s != '\0';) {
        const char *name = s + 1, *v = NULL;
        size_t nlen = 0, skip = 1;
        if (*s == '$' && s[1] == '$') {
            put(buf, len, &used, "$", 1);
            s += 2;
            continue;
        }
        if (*s == '$' && s[1] == '{') {
            name = s + 2;
            nlen = strcspn(name, "}");
            skip = name[nlen] == '}' ? nlen + 3 : 0;
        } else if (*s == '$' && ident_char(s[1], 0)) {
            while (ident_char(name[nlen], 1))
                nlen++;
            skip = nlen + 1;
        }
        if (*s == '$' && skip > 1)
            v = template_value(name, nlen, role, num, sizeof(num), rank, local_rank);
        if (v != NULL) {
            put(buf, len, &used, v, strlen(v));
            s += skip;
        } else {
            put(buf, len, &used, s, 1); /* safe_substitute: anything else stays as written */
            s++;
        }
    }
    if (len > 0)
        buf[used] = '\0';
    return used;
}

int agent_output_split_filters(const char *list, char ***out)
{
    size_t items = 2, slen = strlen(list);
    char **v, *p;

    for (const char *s = list; *s; s++)
        items += *s == ',';
    *out = NULL;
    if ((v = malloc(items * sizeof(*v) + slen + 1)) == NULL)
        return -ENOMEM;
    p = (char *)(v + items);
    items = 0;
    for (const char *s = list; *s != '\0';) {
        char *start = p;
        for (; *s != '\0'; s++) {
            if (*s == ',' && s[1] == ',')
                *p++ = *s++; /* ",," is a literal comma */
            else if (*s == ',')
                break;
            else
                *p++ = *s;
        }
        *p++ = '\0';
        if (*start != '\0') /* an empty item would match every line */
            v[items++] = start;
        if (*s == ',')
            s++;
    }
    v[items] = NULL;
    *out = v;
    return 0;
}

/* ---- lines ---------------------------------------------------------------------------- */

/* PyTorch 2.x prefixes its own log lines with "[rank0]:" (c10d's logger: "[rank0]:[W1202 ...]
 * ProcessGroupNCCL.cpp ..."): with muster's "[rank0]: " in front they read "[rank0]: [rank0]:".
 * A line that already starts with our prefix (less its trailing space) is shown
 * as it is. */
static int already_prefixed(const struct agent_output *o, const char *text, size_t len)
{
    size_t n = o->prefix_len;

    if (n < 2 || o->prefix[n - 1] != ' ' || o->prefix[n - 2] != ':')
        return 0;
    return len >= n - 1 && memcmp(text, o->prefix, n - 1) == 0;
}

/* Writes text (the part of the line not shown yet) and term ('\n', '\r', or 0 for a partial
 * line) to the console, with the prefix unless it continues our own open line. */
static void console_write(struct agent_output *o, const char *text, size_t len, char term)
{
    struct iovec iov[3];
    int cnt = 0, rc;

    if (o->dedup)
        agent_dedup_flush_to(con.dedup, o->dedup_seq); /* our queued lines come first */
    if (o->cut && len == 0 && term != 0) {
        o->cut = 0; /* the rest of a line that was ended for us: nothing left to end */
        return;
    }
    if (!o->open && len == 0 && term == '\r')
        return; /* a redraw that starts with '\r': nothing to show yet */
    claim_console(o->console_fd, o);
    if (!o->open && o->prefix_len > 0 && !already_prefixed(o, text, len))
        iov[cnt++] = (struct iovec){.iov_base = o->prefix, .iov_len = o->prefix_len};
    if (len > 0)
        iov[cnt++] = (struct iovec){.iov_base = (void *)text, .iov_len = len};
    if (term != 0)
        iov[cnt++] = (struct iovec){.iov_base = term == '\r' ? "\r" : "\n", .iov_len = 1};
    o->cut = 0;
    rc = console_writev(o->console_fd, iov, cnt);
    if (rc != 0) { /* EPIPE: the reader is gone; EIO: a terminal hung up */
        set_owner(o, 0);
        o->console_fd = -1;
        o->open = 0;
        return;
    }
    o->open = term == 0;
    set_owner(o, term != '\n'); /* a partial line or a '\r' redraw keeps the line ours */
}

static void filter_line(struct agent_output *o, const char *text, size_t len)
{
    struct iovec iov[3] = {
        {.iov_base = o->prefix, .iov_len = o->prefix_len},
        {.iov_base = (void *)text, .iov_len = len},
        {.iov_base = "\n", .iov_len = 1},
    };

    /* written directly, not through a sink: only the lines that match --duplicate-std*-filters
     * (a few per step, not the bulk) and to a file, never to a console; a writer thread per
     * filter file would double the threads for little */
    if (o->filter_fd < 0)
        return;
    for (const char *const *f = o->filters; *f != NULL; f++) {
        if (memmem(text, len, *f, strlen(*f)) == NULL)
            continue;
        if (writev_all(o->filter_fd, iov, 3) != 0) {
            close(o->filter_fd);
            o->filter_fd = -1;
        }
        return;
    }
}

/* A complete update (the whole line, text[0..len), of which o->shown bytes are on the console
 * already) ended by term. */
/* "ModuleNotFoundError: No module named 'torch'": the workers' Python is not the one with the
 * packages; the failure summary says so (every rank printed it, with no hint). */
static void note_missing_module(const char *text, size_t len)
{
    static const char key[] = "ModuleNotFoundError: No module named '";
    const char *p = con.missing_module[0] ? NULL : memmem(text, len, key, sizeof(key) - 1);
    const char *q, *end = text + len;

    if (p == NULL)
        return;
    p += sizeof(key) - 1;
    if ((q = memchr(p, '\'', (size_t)(end - p))) == NULL || q == p ||
        (size_t)(q - p) >= sizeof(con.missing_module))
        return;
    memcpy(con.missing_module, p, (size_t)(q - p));
    con.missing_module[q - p] = '\0';
}

const char *agent_output_missing_module(void)
{
    return con.missing_module[0] ? con.missing_module : NULL;
}

static void line_done(struct agent_output *o, const char *text, size_t len, char term)
{
    hold_remove(o);
    filter_line(o, text, len);
    note_missing_module(text, len);
    if (o->console_fd >= 0) {
        int queued = 0;
        if (o->dedup && term == '\n' && o->shown == 0 && !o->open && !o->cut &&
            len <= AGENT_DEDUP_LINE_MAX)
            queued = agent_dedup_add(con.dedup, o->dedup_fd, o->rank, o->prefix, text, len,
                                     uv_now(con.loop), con.dedup_streams[o->dedup_fd],
                                     &o->dedup_seq) == 0;
        if (queued)
            arm_timer();
        else
            console_write(o, text + o->shown, len - o->shown, term);
    }
    o->len = o->shown = 0;
}

/* The held partial line's time is up: show what there is. */
static void show_partial(struct agent_output *o)
{
    if (o->console_fd >= 0 && o->len > o->shown) {
        console_write(o, o->line + o->shown, o->len - o->shown, 0);
        o->shown = o->len;
    }
}

/* The buffer holds at most AGENT_OUTPUT_LINE_MAX bytes of a line (without its terminator). A
 * longer line is written in parts, each ending with an added newline; swallow_nl then drops
 * the line's real newline if it comes right after a part, instead of printing an empty line. */
static void feed_lines(struct agent_output *o, const char *data, size_t n)
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
        size_t content = 0;
        while (content < n && data[content] != '\n' && data[content] != '\r')
            content++;
        char term = content < n ? data[content] : 0;

        if (o->len == 0 && term != 0 && content <= AGENT_OUTPUT_LINE_MAX) {
            line_done(o, data, content, term); /* the common case: no copy */
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
        if (term != 0 && part == content) {
            line_done(o, o->line, o->len, term);
            data++; /* the terminator itself */
            n--;
        } else if (o->len == AGENT_OUTPUT_LINE_MAX) {
            line_done(o, o->line, o->len, '\n');
            o->swallow_nl = 1;
        }
    }
    if (o->len > o->shown && o->console_fd >= 0)
        hold_add(o);
}

/* Raw bytes to the log file: through its sink when there is one. Bytes refused at the sink's
 * hard limit are counted there; any other error ends file output. */
static void file_write(struct agent_output *o, const char *data, size_t n)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = n};
    int rc;

    if (o->file_fd < 0)
        return;
    rc = o->file_sink != NULL ? mc_sink_writev(o->file_sink, &iov, 1)
                              : agent_write_all(o->file_fd, data, n);
    if (rc == 0 || rc == -ENOBUFS)
        return;
    mc_warn("cannot write a worker log file: %s; file output stops", strerror(-rc));
    if (o->file_sink != NULL)
        mc_sink_close(o->file_sink); /* closes the fd */
    else
        close(o->file_fd);
    o->file_sink = NULL;
    o->file_fd = -1;
}

/* Whether a destination of o has its budget's worth queued (and then the sink wakes us). */
static int over_budget(struct agent_output *o)
{
    struct mc_sink *c =
        o->console_fd >= 0 && o->console_fd < CONSOLE_FDS ? con.sink[o->console_fd] : NULL;
    int over = c != NULL && mc_sink_over(c);

    return (o->file_sink != NULL && mc_sink_over(o->file_sink)) || over;
}

static void pause_remove(struct agent_output *o)
{
    if (!o->paused)
        return;
    if (o->pause_prev != NULL)
        o->pause_prev->pause_next = o->pause_next;
    else
        con.paused = o->pause_next;
    if (o->pause_next != NULL)
        o->pause_next->pause_prev = o->pause_prev;
    o->pause_prev = o->pause_next = NULL;
    o->paused = 0;
}

/* A sink's queue drained (or its writer stopped): every paused output whose destinations all
 * have room again resumes. One wake may stand for several drains (uv_async coalesces). */
static void on_wake(uv_async_t *h)
{
    (void)h;
    for (struct agent_output *o = con.paused, *next; o != NULL; o = next) {
        next = o->pause_next;
        if (over_budget(o))
            continue; /* re-armed by mc_sink_over */
        pause_remove(o);
        o->resume_cb(o, o->resume_data);
    }
}

void agent_output_on_resume(struct agent_output *o, agent_output_resume_cb cb, void *data)
{
    o->resume_cb = cb;
    o->resume_data = data;
}

/* Two memcpy at most per read, whatever the lines: the tail costs nothing per line. */
static void tail_add(struct agent_output *o, const char *data, size_t n)
{
    size_t pos, first;

    if (n > AGENT_OUTPUT_TAIL) { /* only the last ring's worth can survive */
        o->tail_total += n - AGENT_OUTPUT_TAIL;
        data += n - AGENT_OUTPUT_TAIL;
        n = AGENT_OUTPUT_TAIL;
    }
    pos = (size_t)(o->tail_total % AGENT_OUTPUT_TAIL);
    first = AGENT_OUTPUT_TAIL - pos < n ? AGENT_OUTPUT_TAIL - pos : n;
    memcpy(o->tail + pos, data, first);
    memcpy(o->tail, data + first, n - first);
    o->tail_total += n;
}

size_t agent_output_tail(const struct agent_output *o, char *buf, size_t len)
{
    uint64_t avail = o->tail_total < AGENT_OUTPUT_TAIL ? o->tail_total : AGENT_OUTPUT_TAIL;
    size_t want, skip = 0, pos;

    if (len == 0)
        return 0;
    want = avail < len - 1 ? (size_t)avail : len - 1;
    pos = (size_t)((o->tail_total - want) % AGENT_OUTPUT_TAIL);
    for (size_t i = 0; i < want; i++)
        buf[i] = o->tail[(pos + i) % AGENT_OUTPUT_TAIL];
    /* cut inside a line (its start is older than the copy): begin after that line's end. With a
     * full ring the byte before the copy is overwritten already: take it for a cut. */
    if (want < o->tail_total &&
        (want == AGENT_OUTPUT_TAIL ||
         o->tail[(pos + AGENT_OUTPUT_TAIL - 1) % AGENT_OUTPUT_TAIL] != '\n')) {
        char *nl = memchr(buf, '\n', want);
        if (nl != NULL && nl + 1 < buf + want)
            skip = (size_t)(nl + 1 - buf);
    }
    memmove(buf, buf + skip, want - skip);
    buf[want - skip] = '\0';
    return want - skip;
}

int agent_output_feed(struct agent_output *o, const char *data, size_t n)
{
    tail_add(o, data, n);
    file_write(o, data, n);
    if ((o->console_fd >= 0 || o->filter_fd >= 0) && n > 0) {
        if (o->line == NULL && (o->line = malloc(AGENT_OUTPUT_LINE_MAX)) == NULL)
            console_write(o, data, n, 0); /* no memory: pass it on unsplit */
        else
            feed_lines(o, data, n);
    }
    if (o->resume_cb == NULL || con.wake == NULL || o->paused || !over_budget(o))
        return o->paused;
    o->paused = 1;
    o->pause_next = con.paused;
    o->pause_prev = NULL;
    if (con.paused != NULL)
        con.paused->pause_prev = o;
    con.paused = o;
    return 1;
}

void agent_output_flush(struct agent_output *o)
{
    hold_remove(o);
    if (o->len > o->shown || o->open) {
        filter_line(o, o->line, o->len);
        if (o->console_fd >= 0)
            console_write(o, o->line + o->shown, o->len - o->shown, '\n');
    }
    o->len = o->shown = 0;
}

void agent_output_close(struct agent_output *o)
{
    /* a zeroed struct was never initialised and owns nothing (its file_fd 0 is not ours);
     * agent_output_init always sets the rank's prefix */
    if (o == NULL || (o->prefix_len == 0 && o->file_fd == 0 && o->filter_fd == 0))
        return;
    agent_output_flush(o);
    /* a last '\r' redraw (a progress bar cut short) stays visible: what comes next starts on
     * its own line */
    if (o->console_fd >= 0 && o->console_fd < CONSOLE_FDS && con.owner[o->console_fd] == o)
        claim_console(o->console_fd, NULL);
    detach(o);
    pause_remove(o);
    if (o->file_sink != NULL)
        mc_sink_close(o->file_sink); /* its writer drains what is queued, then closes */
    else if (o->file_fd >= 0)
        close(o->file_fd);
    o->file_sink = NULL;
    if (o->filter_fd >= 0)
        close(o->filter_fd);
    o->file_fd = o->filter_fd = -1;
    o->console_fd = -1;
    free(o->line);
    o->line = NULL;
}

/* ---- the console's sinks ------------------------------------------------------------- */

/* Before each of muster's own lines: a line of a worker left open is ended first; the owners
 * are the loop thread's, and other threads (uv_queue_work jobs) log too. */
static void before_log_line(void)
{
    if (pthread_equal(pthread_self(), con.loop_thread))
        claim_console(STDERR_FILENO, NULL);
}

static void free_wake(uv_handle_t *h)
{
    free(h);
}

int agent_output_console_start(uv_loop_t *loop, size_t budget)
{
    int rc;

    if (con.wake != NULL)
        return -EALREADY;
    if ((con.wake = malloc(sizeof(*con.wake))) == NULL)
        return -ENOMEM;
    if ((rc = uv_async_init(loop, con.wake, on_wake)) != 0) {
        free(con.wake);
        con.wake = NULL;
        return rc;
    }
    uv_unref((uv_handle_t *)con.wake); /* the loop ends when the agent is done, not when we are */
    con.budget = budget;
    con.loop_thread = pthread_self();
    for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++) {
        if (fcntl(fd, F_GETFD) < 0)
            continue; /* closed: writes fail with EBADF as they did */
        if ((rc = mc_sink_new(fd, 0, budget, con.wake, &con.sink[fd])) != 0)
            mc_warn("console fd %d is written directly: %s", fd, strerror(-rc));
    }
    /* muster's own lines join the workers' in one queue: in order with them, and a stalled
     * stderr no longer stops the loop in mc_log's write() */
    if (con.sink[STDERR_FILENO] != NULL)
        mc_sink_take_log(con.sink[STDERR_FILENO], before_log_line);
    return 0;
}

void agent_output_console_write(int fd, const char *buf, size_t len)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};

    claim_console(fd, NULL);
    console_writev(fd, &iov, 1);
}

uint64_t agent_output_console_stop(unsigned timeout_ms)
{
    uint64_t lost;

    if (con.wake == NULL)
        return 0;
    lost = mc_sink_drain_all(timeout_ms);
    if (lost > 0) {
        /* queued like the rest, with a short wait of its own: written directly, it could wait
         * MC_LOG_WRITE_WAIT_MS more on a stalled stderr, past the exit's bound */
        mc_warn("%llu bytes of output were not written: the console or a log file did not "
                "take them within %.1f s",
                (unsigned long long)lost, timeout_ms / 1000.0);
        mc_sink_drain_all(AGENT_OUTPUT_LAST_LINE_MS);
    }
    mc_sink_take_log(NULL, NULL); /* from here on: direct and bounded (common/log.c) */
    for (int fd = 0; fd < CONSOLE_FDS; fd++) {
        if (con.sink[fd] == NULL)
            continue;
        mc_sink_close(con.sink[fd]); /* one stuck in write() stays so until exit */
        con.sink[fd] = NULL;
    }
    while (con.paused != NULL)
        pause_remove(con.paused);
    mc_sink_forget_wake(con.wake); /* a log file still open must not wake a closed handle */
    uv_close((uv_handle_t *)con.wake, free_wake);
    con.wake = NULL;
    return lost;
}
