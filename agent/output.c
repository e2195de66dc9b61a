#include "output.h"

#include "dedup.h"
#include "log.h"
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

/* Before writer (NULL: the dedup queue) writes to fd: a line another output left open there
 * (a shown partial line, a '\r' redraw) is ended first, so that the two never share a line. */
static void claim_console(int fd, struct agent_output *writer)
{
    struct agent_output *prev;

    if (fd < 0 || fd >= CONSOLE_FDS || (prev = con.owner[fd]) == NULL || prev == writer)
        return;
    con.owner[fd] = NULL;
    agent_write_all(fd, "\n", 1);
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
    writev_all(fd, iov, 3); /* a vanished console loses the line, like any other */
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
    if (!o->open && o->prefix_len > 0)
        iov[cnt++] = (struct iovec){.iov_base = o->prefix, .iov_len = o->prefix_len};
    if (len > 0)
        iov[cnt++] = (struct iovec){.iov_base = (void *)text, .iov_len = len};
    if (term != 0)
        iov[cnt++] = (struct iovec){.iov_base = term == '\r' ? "\r" : "\n", .iov_len = 1};
    o->cut = 0;
    rc = writev_all(o->console_fd, iov, cnt);
    if (rc == -EPIPE) {
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
static void line_done(struct agent_output *o, const char *text, size_t len, char term)
{
    hold_remove(o);
    filter_line(o, text, len);
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

void agent_output_feed(struct agent_output *o, const char *data, size_t n)
{
    if (o->file_fd >= 0 && agent_write_all(o->file_fd, data, n) != 0) {
        mc_warn("cannot write a worker log file: %s; file output stops", strerror(errno));
        close(o->file_fd);
        o->file_fd = -1;
    }
    if ((o->console_fd < 0 && o->filter_fd < 0) || n == 0)
        return;
    if (o->line == NULL && (o->line = malloc(AGENT_OUTPUT_LINE_MAX)) == NULL) {
        console_write(o, data, n, 0); /* no memory: pass it on unsplit */
        return;
    }
    feed_lines(o, data, n);
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
    if (o->file_fd >= 0)
        close(o->file_fd);
    if (o->filter_fd >= 0)
        close(o->filter_fd);
    o->file_fd = o->filter_fd = -1;
    o->console_fd = -1;
    free(o->line);
    o->line = NULL;
}
