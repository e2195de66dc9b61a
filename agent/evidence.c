#include "evidence.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "escape.h"
#include "evidence_hook.inc"
#include "log.h"
#include "path.h"
#include "saferm.h"
#include "safefile.h"
#include "tmpdir.h"

#define POLL_MS 10
#define FRAMES_MAX 64

/* ---- set-up ----------------------------------------------------------------------------- */

static int write_hook(const char *dir)
{
    char path[PATH_MAX];
    size_t len = sizeof(evidence_hook_py) - 1;
    int fd, rc;

    if ((rc = agent_path_fmt(path, sizeof(path), "%s/hook", dir)) != 0)
        return rc;
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -errno;
    if ((rc = agent_path_fmt(path, sizeof(path), "%s/hook/sitecustomize.py", dir)) != 0)
        return rc;
    unlink(path);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    rc = write(fd, evidence_hook_py, len) == (ssize_t)len ? 0 : -EIO;
    close(fd);
    return rc;
}

int agent_evidence_init(uv_loop_t *loop, struct agent_evidence *e, const char *dir,
                        const char *bundle_dir, unsigned timeout_ms, const char *host)
{
    char err[PATH_MAX + 256];
    int rc;

    memset(e, 0, sizeof(*e));
    e->loop = loop;
    e->timeout_ms = timeout_ms;
    e->signum = SIGRTMIN + AGENT_EVIDENCE_SIGNAL_OFFSET;
    snprintf(e->host, sizeof(e->host), "%s", host);
    if (bundle_dir != NULL)
        snprintf(e->bundle, sizeof(e->bundle), "%s", bundle_dir);
    if (dir != NULL) {
        rc = mc_dir_open(dir, 0700, "evidence directory", NULL, e->dir, err, sizeof(err));
        if (rc != 0) {
            mc_error("%s", err);
            return rc;
        }
    } else {
        if ((rc = agent_path_fmt(e->dir, sizeof(e->dir), "%s/muster-evidence-XXXXXX",
                                 mc_tmpdir())) != 0 ||
            mkdtemp(e->dir) == NULL) {
            rc = rc ? rc : -errno;
            mc_error("cannot create an evidence directory in %s: %s", mc_tmpdir(), strerror(-rc));
            return rc;
        }
        e->own_dir = 1;
    }
    if ((rc = write_hook(e->dir)) != 0) {
        mc_error("cannot write the evidence hook into %s: %s", e->dir, strerror(-rc));
        agent_evidence_close(e);
    }
    return rc;
}

static const char *parent_get(char *const *parent, const char *name)
{
    size_t n = strlen(name);

    for (; parent != NULL && *parent != NULL; parent++)
        if (strncmp(*parent, name, n) == 0 && (*parent)[n] == '=')
            return *parent + n + 1;
    return NULL;
}

/* name=value unless the user's environment has name: their setting wins */
static int set_default(struct agent_env *env, char *const *parent, const char *name,
                       const char *fmt, ...)
{
    char value[PATH_MAX + 64];
    va_list ap;

    if (parent_get(parent, name) != NULL)
        return 0;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    return agent_env_set(env, name, value);
}

int agent_evidence_env(const struct agent_evidence *e, struct agent_env *env, char *const *parent,
                       int torch_version)
{
    /* PyTorch 2.6+ reads TORCH_FR_*, warns in every process about the old TORCH_NCCL_* names,
     * and older ones read only those: the old names go where the version is older or unknown */
    int old_names = torch_version == 0 || torch_version < 206;
    const char *pp = parent_get(parent, "PYTHONPATH");
    int rc = 0;

    rc |= agent_env_set(env, "MUSTER_EVIDENCE_DIR", e->dir);
    rc |= agent_env_setf(env, "MUSTER_EVIDENCE_SIGNAL", "%d", e->signum);
    if (pp != NULL && pp[0] != '\0')
        rc |= agent_env_setf(env, "PYTHONPATH", "%s/hook:%s", e->dir, pp);
    else
        rc |= agent_env_setf(env, "PYTHONPATH", "%s/hook", e->dir);
    /* the Flight Recorder (NCCL) */
    rc |= set_default(env, parent, "TORCH_FR_BUFFER_SIZE", "2000");
    if (old_names)
        rc |= set_default(env, parent, "TORCH_NCCL_TRACE_BUFFER_SIZE", "2000");
    rc |= set_default(env, parent, "TORCH_NCCL_DUMP_ON_TIMEOUT", "1");
    rc |= set_default(env, parent, "TORCH_FR_DUMP_TEMP_FILE", "%s/nccl_trace_rank_", e->dir);
    rc |=
        set_default(env, parent, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "%s/nccl_trace_rank_", e->dir);
    return rc ? -ENOMEM : 0;
}

void agent_evidence_attempt(struct agent_evidence *e, unsigned attempt)
{
    DIR *d;
    struct dirent *de;
    int removed = 0;

    e->attempt = attempt;
    e->seq = 0;
    if (e->busy || (d = opendir(e->dir)) == NULL)
        return;
    /* the last attempt's processes are gone: their stacks files and FIFOs go too. Bounded:
     * one or two entries per Python process that ran */
    while ((de = readdir(d)) != NULL && removed < 4 * AGENT_EVIDENCE_RANKS_MAX) {
        if (strncmp(de->d_name, "stacks-", 7) == 0 || strncmp(de->d_name, "trigger-", 8) == 0 ||
            strncmp(de->d_name, "fr-", 3) == 0 || strncmp(de->d_name, ".stacks-", 8) == 0) {
            unlinkat(dirfd(d), de->d_name, 0);
            removed++;
        }
    }
    closedir(d);
}

void agent_evidence_close(struct agent_evidence *e)
{
    char name[NAME_MAX + 1];
    int dfd;

    e->cb = NULL; /* a collection still running ends without a word */
    if (e->busy) {
        e->closing = 1; /* collect_done comes back here */
        return;
    }
    if (e->own_dir && e->dir[0] != '\0' &&
        mc_rm_parent_open(e->dir, &dfd, name, sizeof(name)) == 0) {
        mc_rm_at(dfd, name, 0, NULL, 0); /* mkdtemp's: no bundle is ever in it */
        close(dfd);
    } else if (!e->own_dir && e->dir[0] != '\0' &&
               mc_rm_parent_open(e->dir, &dfd, name, sizeof(name)) == 0) {
        mc_rm_at(dfd, name, 0, NULL, 0); /* the hook and the dumps; bundles are beside it */
        close(dfd);
        if (!e->kept)
            rmdir(e->bundle); /* empty now: no evidence was taken */
    }
    e->own_dir = 0;
}

/* ---- parsing ---------------------------------------------------------------------------- */

struct frame {
    const char *path;
    size_t path_len;
    long line;
    const char *func;
    size_t func_len;
};

static int has(const struct frame *f, const char *s)
{
    size_t n = strlen(s);

    for (size_t i = 0; i + n <= f->path_len; i++)
        if (memcmp(f->path + i, s, n) == 0)
            return 1;
    return 0;
}

static int ends(const struct frame *f, const char *s)
{
    size_t n = strlen(s);

    return f->path_len >= n && memcmp(f->path + f->path_len - n, s, n) == 0;
}

/* The interpreter's and the installed packages' code, not the user's script. */
static int library(const struct frame *f)
{
    return f->path_len == 0 || f->path[0] == '<' || has(f, "/site-packages/") ||
           has(f, "/dist-packages/") || has(f, "/lib/python3");
}

static int func_is(const struct frame *f, const char *name)
{
    return f->func_len == strlen(name) && memcmp(f->func, name, f->func_len) == 0;
}

/* "t.py:88 in load_batch" (the path's last component) */
static void short_frame(const struct frame *f, char *buf, size_t len)
{
    const char *p = f->path + f->path_len;

    while (p > f->path && p[-1] != '/')
        p--;
    snprintf(buf, len, "%.*s:%ld in %.*s", (int)(f->path + f->path_len - p), p, f->line,
             (int)f->func_len, f->func);
}

/* `  File "PATH", line N in FUNC` */
static int parse_frame(const char *s, size_t len, struct frame *f)
{
    const char *q, *end = s + len;

    if (len < 8 || memcmp(s, "  File \"", 8) != 0)
        return 0;
    f->path = s + 8;
    if ((q = memmem(f->path, (size_t)(end - f->path), "\", line ", 8)) == NULL)
        return 0;
    f->path_len = (size_t)(q - f->path);
    f->line = strtol(q + 8, (char **)&q, 10);
    if (q + 4 > end || memcmp(q, " in ", 4) != 0)
        return 0;
    f->func = q + 4;
    f->func_len = (size_t)(end - f->func);
    return 1;
}

static unsigned long block_id(const char *s, size_t len, int *current)
{
    const char *p;

    *current = len > 15 && memcmp(s, "Current thread ", 15) == 0;
    if (*current)
        p = s + 15;
    else if (len > 7 && memcmp(s, "Thread ", 7) == 0)
        p = s + 7;
    else
        return (unsigned long)-1;
    return strtoul(p, NULL, 16);
}

void agent_evidence_parse_stacks(const char *text, unsigned long main_id, struct rdzv_evidence *r)
{
    struct frame fr[FRAMES_MAX];
    const char *s = text, *pick = NULL, *current = NULL, *last = NULL;
    size_t n = 0, user, pos = 0;

    /* the block of the main thread */
    while (*s != '\0') {
        size_t len = strcspn(s, "\n");
        int cur;
        unsigned long id = block_id(s, len, &cur);

        if (id != (unsigned long)-1) {
            last = s;
            if (cur && current == NULL)
                current = s;
            if (main_id != 0 && id == main_id)
                pick = s; /* the newest dump's: keep looking */
        }
        s += len + (s[len] == '\n');
    }
    if (pick == NULL)
        pick = current != NULL && main_id == 0 ? current : last;
    if (pick == NULL)
        return;
    s = pick + strcspn(pick, "\n");
    while (*s == '\n' && n < FRAMES_MAX) {
        size_t len;
        s++;
        len = strcspn(s, "\n");
        if (!parse_frame(s, len, &fr[n]))
            break;
        n++;
        s += len;
    }
    r->flags |= RDZV_EV_HOOKED;
    if (n == 0) {
        snprintf(r->innermost, sizeof(r->innermost), "no Python frame");
        return;
    }
    for (user = 0; user < n && library(&fr[user]); user++)
        ;
    short_frame(&fr[0], r->innermost, sizeof(r->innermost));
    /* a DataLoader's queue: what it waits for is the loader, not selectors.py */
    for (size_t j = user; j-- > 0;)
        if (has(&fr[j], "torch/utils/data/")) {
            size_t k;
            short_frame(&fr[j], r->innermost, sizeof(r->innermost));
            k = strlen(r->innermost);
            snprintf(r->innermost + k, sizeof(r->innermost) - k, ", waiting for its DataLoader");
            break;
        }
    if (user < n)
        short_frame(&fr[user], r->where, sizeof(r->where));
    /* the torch.distributed call nearest the script: all_reduce, not what it calls inside */
    for (size_t j = user; j-- > 0;) {
        if (has(&fr[j], "torch/distributed/") && ends(&fr[j], "distributed_c10d.py")) {
            snprintf(r->op, sizeof(r->op), "%.*s", (int)fr[j].func_len, fr[j].func);
            break;
        }
        /* DDP's gradient all_reduce: the autograd engine waits for it in backward */
        if (has(&fr[j], "torch/autograd/") && func_is(&fr[j], "backward")) {
            snprintf(r->op, sizeof(r->op), "backward");
            break;
        }
    }
    for (size_t j = 0; j < n; j++) {
        int k =
            snprintf(r->frames + pos, sizeof(r->frames) - pos, "%.*s:%ld in %.*s\n",
                     (int)fr[j].path_len, fr[j].path, fr[j].line, (int)fr[j].func_len, fr[j].func);
        if (k < 0 || (size_t)k >= sizeof(r->frames) - pos) {
            r->frames[pos] = '\0';
            break;
        }
        pos += (size_t)k;
    }
    mc_utf8_sanitize(r->frames);
    mc_utf8_sanitize(r->where);
    mc_utf8_sanitize(r->innermost);
    mc_utf8_sanitize(r->op);
}

static int64_t json_seq(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);

    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_string(v))
        return strtoll(json_string_value(v), NULL, 10);
    return -1;
}

/* Whether a Flight Recorder entry belongs to the group pg_status calls key: its "pg_id", or
 * the name in "process_group" (older dumps) */
static int entry_in(json_t *v, json_t *grp, const char *key)
{
    json_t *id = json_object_get(v, "pg_id");
    const char *name = json_string_value(json_array_get(grp, 0));

    if (json_is_integer(id))
        return json_integer_value(id) == strtoll(key, NULL, 10);
    return name == NULL || strcmp(name, key) == 0;
}

int agent_evidence_parse_fr(const char *json, size_t len, struct rdzv_evidence *r)
{
    json_t *doc = json_loadb(json, len, 0, NULL), *fr, *st, *pg = NULL, *entries;
    const char *key = NULL, *k;
    json_t *v;
    size_t i;
    int64_t best = INT64_MAX, newest = -1;

    fr = json_object_get(doc, "fr");
    st = json_object_get(fr, "pg_status");
    if (!json_is_object(st)) {
        json_decref(doc);
        return -EINVAL;
    }
    /* the default group: "0", else the first */
    json_object_foreach(st, k, v)
    {
        if (key == NULL || strcmp(k, "0") == 0) {
            key = k;
            pg = v;
        }
    }
    if (pg == NULL) {
        json_decref(doc);
        return -EINVAL;
    }
    r->fr_enqueued = json_seq(pg, "last_enqueued_collective");
    r->fr_started = json_seq(pg, "last_started_collective");
    r->fr_completed = json_seq(pg, "last_completed_collective");
    r->flags |= RDZV_EV_FR;
    entries = json_object_get(fr, "entries");
    /* the oldest collective not completed; with none, the newest (the one a rank that fell
     * behind never entered is the next after its own newest) */
    json_array_foreach(entries, i, v)
    {
        json_t *grp = json_object_get(v, "process_group");
        const char *state = json_string_value(json_object_get(v, "state"));
        const char *name = json_string_value(json_object_get(v, "profiling_name"));
        int64_t seq = json_seq(v, "collective_seq_id");
        int pending;
        /* pg_status is keyed by the group's id (PyTorch 2.x: "pg_id"), entries name it too */
        if (!entry_in(v, grp, key))
            continue;
        if (state == NULL || name == NULL || seq < 0)
            continue;
        pending = strcmp(state, "completed") != 0;
        if (pending ? seq >= best : (best != INT64_MAX || seq <= newest))
            continue;
        if (pending)
            best = seq;
        else
            newest = seq;
        if (strncmp(name, "nccl:", 5) == 0)
            name += 5;
        snprintf(r->fr_op, sizeof(r->fr_op), "%s", name);
    }
    mc_utf8_sanitize(r->fr_op);
    json_decref(doc);
    return 0;
}

/* ---- the collection (thread pool) ----------------------------------------------------- */

struct probe {
    int hooked;   /* the signal went out */
    int fr_asked; /* a byte went into its FIFO */
    int stacks_done, fr_done;
    off_t pre, last; /* stacks file size before the signal, at the last poll */
    unsigned long main_id;
};

/* At most max-1 bytes of path from offset off (NUL-terminated, malloc'd); NULL on error. */
static char *read_file(const char *path, off_t off, size_t max, size_t *lenp)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    char *buf;
    ssize_t k;
    size_t len = 0;

    if (fd < 0)
        return NULL;
    if ((buf = malloc(max)) == NULL) {
        close(fd);
        return NULL;
    }
    while (len + 1 < max && (k = pread(fd, buf + len, max - 1 - len, off + (off_t)len)) > 0)
        len += (size_t)k;
    close(fd);
    buf[len] = '\0';
    if (lenp != NULL)
        *lenp = len;
    return buf;
}

static void trim(char *s)
{
    size_t n = strlen(s);

    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
}

static void proc_field(pid_t pid, pid_t tid, const char *name, char *buf, size_t len)
{
    char path[128];
    char *t;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)pid, (int)tid, name);
    buf[0] = '\0';
    if ((t = read_file(path, 0, len, NULL)) != NULL) {
        snprintf(buf, len, "%s", t);
        free(t);
    }
    trim(buf);
}

/* "S" from /proc/PID/task/TID/stat (after the command's closing parenthesis) */
static char task_state(pid_t pid, pid_t tid)
{
    char st[512], *p;

    proc_field(pid, tid, "stat", st, sizeof(st));
    p = strrchr(st, ')');
    return p != NULL && p[1] == ' ' ? p[2] : '?';
}

/* Threads of pid into f (every one: comm, state, wchan, kernel stack when readable); the main
 * thread's state into r->native. */
static void native_stacks(FILE *f, pid_t pid, struct rdzv_evidence *r)
{
    char path[64], comm[64], wchan[128], stack[4096];
    DIR *d;
    struct dirent *de;
    int n = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if ((d = opendir(path)) == NULL) {
        fprintf(f, "(no /proc/%d: %s)\n", (int)pid, strerror(errno));
        return;
    }
    while ((de = readdir(d)) != NULL && n < AGENT_EVIDENCE_TASKS_MAX) {
        pid_t tid = (pid_t)atoi(de->d_name);
        char state;
        if (tid <= 0)
            continue;
        n++;
        proc_field(pid, tid, "comm", comm, sizeof(comm));
        proc_field(pid, tid, "wchan", wchan, sizeof(wchan));
        state = task_state(pid, tid);
        fprintf(f, "thread %d (%s) state %c wchan %s\n", (int)tid, comm, state,
                wchan[0] && strcmp(wchan, "0") ? wchan : "-");
        proc_field(pid, tid, "stack", stack, sizeof(stack));
        if (stack[0] != '\0') {
            for (char *s = stack; *s != '\0';) {
                size_t len = strcspn(s, "\n");
                fprintf(f, "    %.*s\n", (int)len, s);
                s += len + (s[len] == '\n');
            }
        }
        if (tid == pid)
            snprintf(r->native, sizeof(r->native), "state %c, waiting in %s", state,
                     wchan[0] && strcmp(wchan, "0") ? wchan : "-");
    }
    closedir(d);
    if (r->native[0] != '\0') {
        size_t k = strlen(r->native);
        snprintf(r->native + k, sizeof(r->native) - k, ", %d thread%s", n, n == 1 ? "" : "s");
    }
    mc_utf8_sanitize(r->native);
}

static void children(FILE *f, pid_t pid)
{
    char list[1024], cmd[256], path[64];
    char *s, *save = NULL;
    int n = 0;

    proc_field(pid, pid, "children", list, sizeof(list));
    for (s = strtok_r(list, " ", &save); s != NULL && n < AGENT_EVIDENCE_CHILDREN_MAX;
         s = strtok_r(NULL, " ", &save), n++) {
        pid_t c = (pid_t)atoi(s);
        char *t;
        if (n == 0)
            fprintf(f, "== child processes ==\n");
        snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)c);
        cmd[0] = '\0';
        if ((t = read_file(path, 0, sizeof(cmd), NULL)) != NULL) {
            snprintf(cmd, sizeof(cmd), "%s", t);
            free(t);
        }
        fprintf(f, "process %d: %s\n", (int)c, cmd);
        native_stacks(f, c, &(struct rdzv_evidence){0});
    }
}

static uint64_t now_ms(void)
{
    return mc_mono_ms();
}

static void bundle_rank(FILE *f, const struct agent_evidence *e,
                        const struct agent_evidence_target *t, const char *stacks, const char *fr,
                        struct rdzv_evidence *r)
{
    fprintf(f, "rank %d, local_rank %d, pid %d, on %s; attempt %u, round %u: %s\n", t->rank,
            t->local_rank, (int)t->pid, e->host, e->attempt, e->round, e->why);
    if (t->alive)
        fprintf(f, "running; no progress for %.1f s\n", t->silent_ms / 1000.0);
    else if (t->term_signal)
        fprintf(f, "ended by signal %d\n", t->term_signal);
    else
        fprintf(f, "exited with code %d\n", t->exit_code);
    if (r->flags & RDZV_EV_HOOKED)
        fprintf(f, "in: %s; script frame: %s; innermost: %s\n", r->op[0] ? r->op : "-",
                r->where[0] ? r->where : "-", r->innermost);
    fprintf(f, "== Python stacks (faulthandler, all threads, most recent call first) ==\n%s\n",
            stacks != NULL ? stacks
                           : (t->alive ? "(none: not a Python process, or it did not answer)"
                                       : "(it had ended)"));
    if (t->alive && t->pid > 0) {
        fprintf(f, "== threads (/proc) ==\n");
        native_stacks(f, t->pid, r);
        children(f, t->pid);
    }
    if (fr != NULL)
        fprintf(f, "== Flight Recorder ==\n%s\n", fr);
    for (int k = 0; k < 2; k++) {
        const char *tail = t->tail[k];
        fprintf(f, "== last output (%s) ==\n%s%s", k ? "stderr" : "stdout", tail,
                tail[0] && tail[strlen(tail) - 1] != '\n' ? "\n" : "");
    }
}

static FILE *bundle_open(const char *dir, int rank, int summary)
{
    char path[PATH_MAX];
    int fd;

    if (summary)
        agent_path_fmt(path, sizeof(path), "%s/summary.txt", dir);
    else
        agent_path_fmt(path, sizeof(path), "%s/rank%d.txt", dir, rank);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    return fd < 0 ? NULL : fdopen(fd, "w");
}

/* DIR/attempt_N, or attempt_N-K for the K-th collection of the same attempt */
static int bundle_dir(struct agent_evidence *e, char *dir, size_t len)
{
    if (e->bundle[0] == '\0')
        return -ENOENT;
    if (mkdir(e->bundle, 0700) != 0 && errno != EEXIST)
        return -errno;
    for (unsigned k = e->seq;; k++) {
        if (k == 0)
            agent_path_fmt(dir, len, "%s/attempt_%u", e->bundle, e->attempt);
        else
            agent_path_fmt(dir, len, "%s/attempt_%u-%u", e->bundle, e->attempt, k);
        if (mkdir(dir, 0700) == 0) {
            e->seq = k + 1;
            return 0;
        }
        if (errno != EEXIST || k > e->seq + 1000)
            return -errno;
    }
}

static void collect_work(uv_work_t *w)
{
    struct agent_evidence *e = w->data;
    struct probe *p = calloc((size_t)e->n, sizeof(*p));
    uint64_t start = now_ms(), deadline = start + e->timeout_ms;
    char path[PATH_MAX], dir[PATH_MAX];
    FILE *sum = NULL;
    int pending;

    if (p == NULL)
        return;
    for (int i = 0; i < e->n; i++) {
        struct agent_evidence_target *t = &e->targets[i];
        struct stat st;
        char *hdr, state;
        int fd;

        if (!t->alive || t->pid <= 0)
            continue;
        agent_path_fmt(path, sizeof(path), "%s/stacks-%d.txt", e->dir, (int)t->pid);
        /* the file says the handler is in: only then is the signal safe to send */
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        state = task_state(t->pid, t->pid);
        if (state == 'T' || state == 't' || state == 'Z')
            continue; /* stopped (SIGSTOP, a debugger) or dead: no handler can run to answer */
        if ((hdr = read_file(path, 0, 128, NULL)) != NULL) {
            const char *m = strstr(hdr, " main 0x");
            p[i].main_id = m != NULL ? strtoul(m + 8, NULL, 16) : 0;
            free(hdr);
        }
        p[i].pre = p[i].last = st.st_size;
        p[i].hooked = kill(t->pid, e->signum) == 0;
        agent_path_fmt(path, sizeof(path), "%s/fr-%d.json", e->dir, (int)t->pid);
        unlink(path);
        agent_path_fmt(path, sizeof(path), "%s/trigger-%d", e->dir, (int)t->pid);
        fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0) {
            p[i].fr_asked = write(fd, "x", 1) == 1;
            close(fd);
        }
    }
    for (;;) { /* the dumps: a stacks file that grew and then stayed put; the FR's answer */
        struct timespec ts = {0, POLL_MS * 1000000L};
        pending = 0;
        for (int i = 0; i < e->n; i++) {
            struct stat st;
            pid_t pid = e->targets[i].pid;
            if (p[i].hooked && !p[i].stacks_done) {
                agent_path_fmt(path, sizeof(path), "%s/stacks-%d.txt", e->dir, (int)pid);
                if (stat(path, &st) == 0 && st.st_size > p[i].pre && st.st_size == p[i].last)
                    p[i].stacks_done = 1;
                else if (stat(path, &st) == 0)
                    p[i].last = st.st_size;
                pending += !p[i].stacks_done;
            }
            if (p[i].fr_asked && !p[i].fr_done) {
                agent_path_fmt(path, sizeof(path), "%s/fr-%d.json", e->dir, (int)pid);
                p[i].fr_done = access(path, F_OK) == 0;
                pending += !p[i].fr_done;
            }
        }
        if (pending == 0 || now_ms() >= deadline)
            break; /* nobody to wait for (no Python worker) costs no sleep */
        nanosleep(&ts, NULL);
    }
    if (bundle_dir(e, dir, sizeof(dir)) == 0) {
        snprintf(e->written, sizeof(e->written), "%s", dir);
        sum = bundle_open(dir, 0, 1);
    }
    for (int i = 0; i < e->n; i++) {
        struct agent_evidence_target *t = &e->targets[i];
        struct rdzv_evidence *r = &e->out[i];
        char *stacks = NULL, *fr = NULL;
        size_t fr_len = 0;
        FILE *f;

        r->round = e->round;
        r->req = e->req;
        r->timeout_ms = e->timeout_ms;
        r->rank = t->rank;
        r->local_rank = t->local_rank;
        r->pid = (int32_t)t->pid;
        r->flags = t->alive ? RDZV_EV_ALIVE : 0;
        r->exit_code = t->alive ? -1 : t->exit_code;
        r->signal = t->alive ? 0 : t->term_signal;
        r->silent_ms = t->silent_ms;
        r->fr_enqueued = r->fr_started = r->fr_completed = -1;
        snprintf(r->host, sizeof(r->host), "%s", e->host);
        if (p[i].hooked) {
            agent_path_fmt(path, sizeof(path), "%s/stacks-%d.txt", e->dir, (int)t->pid);
            if ((stacks = read_file(path, p[i].pre, AGENT_EVIDENCE_DUMP_MAX, NULL)) != NULL &&
                stacks[0] != '\0')
                agent_evidence_parse_stacks(stacks, p[i].main_id, r);
        }
        if (p[i].fr_done) {
            agent_path_fmt(path, sizeof(path), "%s/fr-%d.json", e->dir, (int)t->pid);
            if ((fr = read_file(path, 0, AGENT_EVIDENCE_DUMP_MAX, &fr_len)) != NULL)
                agent_evidence_parse_fr(fr, fr_len, r);
        }
        if (e->written[0] != '\0' && (f = bundle_open(dir, t->rank, 0)) != NULL) {
            bundle_rank(f, e, t, stacks != NULL && stacks[0] ? stacks : NULL, fr, r);
            fclose(f);
        } else if (t->alive && t->pid > 0) {
            FILE *null = fopen("/dev/null", "w");
            if (null != NULL) { /* r->native only */
                native_stacks(null, t->pid, r);
                fclose(null);
            }
        }
        if (sum != NULL)
            fprintf(sum, "rank %d (local_rank %d, pid %d): %s%s%s%s%s\n", t->rank, t->local_rank,
                    (int)t->pid,
                    !t->alive  ? "ended"
                    : r->op[0] ? "in "
                               : "",
                    t->alive ? r->op : "", r->where[0] ? "; at " : "", r->where,
                    (r->flags & RDZV_EV_HOOKED) ? ""
                    : t->alive                  ? "; no Python stacks"
                                                : "");
        free(stacks);
        free(fr);
    }
    if (sum != NULL)
        fclose(sum);
    free(p);
    e->took_ms = now_ms() - start;
}

static void collect_done(uv_work_t *w, int status)
{
    struct agent_evidence *e = w->data;

    (void)status;
    e->busy = 0;
    if (e->written[0] != '\0')
        e->kept = 1;
    if (e->cb != NULL)
        e->cb(e, e->data);
    free(e->targets);
    free(e->out);
    e->targets = NULL;
    e->out = NULL;
    e->n = 0;
    if (e->closing)
        agent_evidence_close(e);
}

int agent_evidence_collect(struct agent_evidence *e, struct agent_evidence_target *targets, int n,
                           unsigned attempt, uint32_t round, uint32_t req, const char *why,
                           agent_evidence_cb cb, void *data)
{
    int rc;

    if (e->busy) {
        free(targets);
        return -EBUSY;
    }
    if ((e->out = calloc((size_t)(n > 0 ? n : 1), sizeof(*e->out))) == NULL) {
        free(targets);
        return -ENOMEM;
    }
    if (attempt != e->attempt)
        e->seq = 0;
    e->attempt = attempt;
    e->targets = targets;
    e->n = n;
    e->round = round;
    e->req = req;
    snprintf(e->why, sizeof(e->why), "%s", why);
    e->written[0] = '\0';
    e->cb = cb;
    e->data = data;
    e->work.data = e;
    e->busy = 1;
    if ((rc = uv_queue_work(e->loop, &e->work, collect_work, collect_done)) != 0) {
        e->busy = 0;
        free(e->out);
        free(targets);
        e->out = NULL;
        e->targets = NULL;
        return rc;
    }
    return 0;
}
