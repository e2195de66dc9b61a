/* The rest of torchrun's command line: --rdzv-conf's keys, --signals-to-handle, --logs-specs,
 * --numa-binding, --virtual-local-rank, and a note for each flag muster accepts but has no use
 * for. Every torchrun flag either does what it does in torchrun or is refused with the reason;
 * none is dropped without a word. */
#include <errno.h>
#include <stddef.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_priv.h"

/* Appends one line to cfg->notes (printed on stderr before anything starts). */
static void cfg_note(struct parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void cfg_note(struct parse *p, const char *fmt, ...)
{
    char *notes = p->cfg->notes;
    size_t used = strlen(notes);
    va_list ap;

    if (used + 2 >= sizeof(p->cfg->notes))
        return;
    va_start(ap, fmt);
    vsnprintf(notes + used, sizeof(p->cfg->notes) - used - 1, fmt, ap);
    va_end(ap);
    strcat(notes, "\n");
}

void launcher_config_print_notes(const struct launcher_config *cfg, FILE *f)
{
    for (const char *s = cfg->notes; *s != '\0';) {
        size_t n = strcspn(s, "\n");
        fprintf(f, "muster: %.*s\n", (int)n, s);
        s += n + (s[n] == '\n');
    }
    fflush(f);
}

/* ---- --rdzv-conf ------------------------------------------------------------------------ */

/* Strips blanks, then one pair of matching quotes: what a shell would have removed when the
 * value came through a Python argument list (pytorch's own tests write
 * --rdzv_conf='join_timeout=5,last_call_timeout=1' as one argv entry). In place. */
static char *unquote(char *s)
{
    size_t n;

    while (*s == ' ' || *s == '\t')
        s++;
    n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    if (n >= 2 && (s[0] == '\'' || s[0] == '"') && s[n - 1] == s[0] &&
        memchr(s + 1, s[0], n - 2) == NULL) { /* 'k'='v' is two quoted strings, not one */
        s[n - 1] = '\0';
        s++;
    }
    return s;
}

/* torchrun's RendezvousParameters.get_as_bool spellings. */
static int parse_bool(const char *v, int *out)
{
    static const char *const yes[] = {"1", "true", "t", "yes", "y", NULL};
    static const char *const no[] = {"0", "false", "f", "no", "n", NULL};

    for (int i = 0; yes[i]; i++)
        if (strcasecmp(v, yes[i]) == 0)
            return *out = 1, 0;
    for (int i = 0; no[i]; i++)
        if (strcasecmp(v, no[i]) == 0)
            return *out = 0, 0;
    return -EINVAL;
}

/* Keys given in seconds, where muster has torchrun's concept (muster's own: reconnect_grace),
 * with their defaults in ms. `timeout` is static's and etcd's name for the join deadline. */
struct conf_seconds {
    const char *key;
    size_t off;
    unsigned def_ms; /* 0: none (an alias) */
};

/* indices into seconds_keys */
enum { K_JOIN, K_LAST_CALL, K_CLOSE, K_HEARTBEAT, K_KEEP_ALIVE };

#define SECONDS_KEY(k, field, def)                                                                 \
    {                                                                                              \
        k, offsetof(struct launcher_config, field), def                                            \
    }
static const struct conf_seconds seconds_keys[] = {
    SECONDS_KEY("join_timeout", join_timeout_ms, 600000),
    SECONDS_KEY("last_call_timeout", last_call_timeout_ms, 30000),
    SECONDS_KEY("close_timeout", close_timeout_ms, 30000),
    SECONDS_KEY("heartbeat_timeout", heartbeat_timeout_ms, 3000),
    SECONDS_KEY("keep_alive_interval", keep_alive_interval_ms, 1000),
    SECONDS_KEY("reconnect_grace", reconnect_grace_ms, 60000),
    SECONDS_KEY("read_timeout", rdzv_read_timeout_ms, 60000),
    SECONDS_KEY("timeout", join_timeout_ms, 0),
};
#define NSECONDS ((int)(sizeof(seconds_keys) / sizeof(seconds_keys[0])))

void launcher__cfg_rdzv_conf_defaults(struct launcher_config *cfg)
{
    for (int i = 0; i < NSECONDS; i++)
        if (seconds_keys[i].def_ms != 0)
            *(unsigned *)((char *)cfg + seconds_keys[i].off) = seconds_keys[i].def_ms;
}

struct conf_seen {
    int seconds[NSECONDS];
    long attempts; /* keep_alive_max_attempt, 0 = not given */
};

static int conf_seconds_key(struct parse *p, const char *k, const char *v, struct conf_seen *seen)
{
    for (int i = 0; i < NSECONDS; i++) {
        if (strcmp(k, seconds_keys[i].key) != 0)
            continue;
        unsigned ms, *target = (unsigned *)((char *)p->cfg + seconds_keys[i].off);
        if (launcher__cfg_parse_seconds_ms(v, &ms) != 0)
            return launcher__cfg_fail(p, "--rdzv-conf %s must be a number of seconds, not '%s'", k,
                                      v);
        seen->seconds[i] = 1;
        if (strcmp(k, "timeout") != 0 || !seen->seconds[K_JOIN]) /* join_timeout wins */
            *target = ms;
        if (strcmp(k, "read_timeout") == 0) /* kept in cfg for a later use */
            cfg_note(p, "note: --rdzv-conf read_timeout does nothing in muster: its requests "
                        "have no deadline of their own; a silent server is lost after "
                        "heartbeat_timeout, an unreachable one retried until join_timeout");
        return 1;
    }
    return 0;
}

/* One KEY=VALUE. Returns 0 or -EINVAL. */
static int conf_key(struct parse *p, const char *k, const char *v, struct conf_seen *seen)
{
    struct launcher_config *cfg = p->cfg;
    int rc = conf_seconds_key(p, k, v, seen), b;
    long n;

    if (rc != 0)
        return rc < 0 ? rc : 0;
    if (strcmp(k, "keep_alive_max_attempt") == 0) {
        if (launcher__cfg_parse_int(v, 1, 1000, &n) != 0)
            return launcher__cfg_fail(p,
                                      "--rdzv-conf keep_alive_max_attempt must be a number 1-1000, "
                                      "not '%s'",
                                      v);
        seen->attempts = n;
    } else if (strcmp(k, "is_host") == 0) {
        if (parse_bool(v, &b) != 0)
            return launcher__cfg_fail(
                p, "--rdzv-conf is_host must be true or false (1/0), not '%s'", v);
        cfg->rdzv_is_host = b;
    } else if (strcmp(k, "forward_secrecy") == 0) {
        if (parse_bool(v, &b) != 0)
            return launcher__cfg_fail(
                p, "--rdzv-conf forward_secrecy must be true or false (1/0), not '%s'", v);
        cfg->rdzv_no_forward_secrecy = !b;
    } else if (strcmp(k, "store_type") == 0) {
        if (strcasecmp(v, "file") == 0)
            return launcher__cfg_fail(p,
                                      "--rdzv-conf store_type=file: muster has no file store; its "
                                      "rendezvous is always its own TLS server (store_type=tcp)");
        if (strcasecmp(v, "tcp") != 0)
            return launcher__cfg_fail(p, "--rdzv-conf store_type must be tcp, not '%s'", v);
    } else if (strcmp(k, "use_libuv") == 0) {
        if (parse_bool(v, &b) != 0)
            return launcher__cfg_fail(
                p, "--rdzv-conf use_libuv must be true or false (1/0), not '%s'", v);
        if (!b)
            cfg_note(p,
                     "note: --rdzv-conf use_libuv=%s: muster's rendezvous server is always "
                     "libuv's event loop; there is no other",
                     v);
    } else if (strcmp(k, "store_port") == 0) {
        if (launcher__cfg_parse_int(v, 0, 65535, &n) != 0)
            return launcher__cfg_fail(p, "--rdzv-conf store_port must be a port number, not '%s'",
                                      v);
        cfg_note(p, "note: --rdzv-conf store_port does nothing in muster: the store is the "
                    "rendezvous server itself, on --rdzv-endpoint's port");
    } else if (strcmp(k, "rank") == 0) {
        cfg_note(p, "note: --rdzv-conf rank is ignored, as torchrun does: --node-rank sets it");
    } else {
        cfg_note(p, "warning: --rdzv-conf: unknown key '%s' ignored", k);
    }
    return 0;
}

/* torchrun: keep_alive_interval x keep_alive_max_attempt without a heartbeat is a lost node;
 * muster's heartbeat_timeout is that same deadline, so it follows when not given itself. */
static void conf_heartbeat(struct launcher_config *cfg, const struct conf_seen *seen)
{
    int hb_given = seen->seconds[K_HEARTBEAT], interval_given = seen->seconds[K_KEEP_ALIVE];
    unsigned long long ms;

    if (hb_given || (!interval_given && seen->attempts == 0))
        return;
    ms = (unsigned long long)cfg->keep_alive_interval_ms * (seen->attempts ? seen->attempts : 3);
    cfg->heartbeat_timeout_ms = ms > 0xffffffffULL ? 0xffffffffU : (unsigned)ms;
}

#define KEY_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"

int launcher__cfg_parse_rdzv_conf(struct parse *p)
{
    const char *v = p->val[O_RDZV_CONF];
    struct conf_seen seen = {{0}, 0};
    char *copy = NULL, *s, *save = NULL;
    int rc = 0;

    if (v == NULL || (copy = strdup(v)) == NULL)
        return v == NULL ? 0 : -ENOMEM;
    s = unquote(copy);
    if (*s == '\0')
        goto out;
    if (s[strlen(s) - 1] == ',' || *s == ',' || strstr(s, ",,") != NULL) {
        rc = launcher__cfg_fail(p, "--rdzv-conf has an empty entry: '%s' (KEY=VALUE,KEY=VALUE)", v);
        goto out;
    }
    for (char *kv = strtok_r(s, ",", &save); kv && rc == 0; kv = strtok_r(NULL, ",", &save)) {
        char *item = unquote(kv), *eq = strchr(item, '='), *key, *val;
        if (eq == NULL) {
            rc = launcher__cfg_fail(p, "--rdzv-conf entries must be KEY=VALUE, not '%s'", item);
            break;
        }
        *eq = '\0';
        key = unquote(item);
        val = unquote(eq + 1);
        if (*key == '\0' || *val == '\0' || key[strspn(key, KEY_CHARS)] != '\0')
            rc = launcher__cfg_fail(
                p, "--rdzv-conf entries must be KEY=VALUE with both given ('%s=%s')", key, val);
        else
            rc = conf_key(p, key, val, &seen);
    }
    if (rc == 0)
        conf_heartbeat(p->cfg, &seen);
out:
    free(copy);
    return rc;
}

/* ---- --signals-to-handle ------------------------------------------------------------------ */

/* Signals muster cannot stop on: KILL/STOP cannot be caught, CHLD is how muster learns that a
 * worker exited, PIPE is ignored so that a closed console cannot stop the job, and the fault
 * signals (SEGV, BUS, FPE, ILL) are the kernel's, not a request to stop. */
static int signal_refused(int sig)
{
    return sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGPIPE || sig == SIGSEGV ||
           sig == SIGBUS || sig == SIGFPE || sig == SIGILL;
}

static int parse_signals(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *v = cfg->signals_to_handle; /* options.def's default when not given */
    const char *src = p->src[O_SIGNALS_TO_HANDLE];

    if (src == NULL)
        src = "--signals-to-handle";
    cfg->nhandle_signals = 0;
    for (const char *s = v; *s != '\0';) {
        size_t len = strcspn(s, ",");
        char name[32], *t;
        int sig;

        if (len >= sizeof(name))
            return launcher__cfg_fail(p, "%s: '%.*s' is not a signal", src, (int)len, s);
        memcpy(name, s, len);
        name[len] = '\0';
        t = unquote(name);
        if (*t == '\0' || launcher__cfg_parse_signal(t, &sig) != 0)
            return launcher__cfg_fail(p, "%s: '%s' is not a signal (e.g. SIGTERM,SIGUSR1)", src, t);
        if (signal_refused(sig))
            return launcher__cfg_fail(p,
                                      "%s: muster cannot stop on SIG%s (KILL and STOP cannot be "
                                      "caught; CHLD, PIPE and the fault signals are muster's own)",
                                      src, sigabbrev_np(sig));
        if (cfg->nhandle_signals == (int)(sizeof(cfg->handle_signals) / sizeof(int)))
            return launcher__cfg_fail(p, "%s: too many signals", src);
        if (cfg->nproc_per_gpu > 0 && sig != SIGTERM && sig != SIGINT && sig != SIGHUP &&
            sig != SIGQUIT) /* agent/shared.c watches those four only */
            return launcher__cfg_fail(
                p,
                "%s: shared-GPU mode (--nproc-per-gpu) stops on SIGTERM, SIGINT, "
                "SIGHUP and SIGQUIT only, not SIG%s",
                src, sigabbrev_np(sig));
        cfg->handle_signals[cfg->nhandle_signals++] = sig;
        s += len + (s[len] == ',');
    }
    cfg->restart.handle_signals = cfg->handle_signals;
    cfg->restart.nhandle_signals = (unsigned)cfg->nhandle_signals;
    return 0; /* torchrun exports the default too */
}

/* ---- --logs-specs, --numa-binding, --virtual-local-rank ------------------------------------ */

static int parse_numa(struct parse *p)
{
    static const char *const modes[] = {"node", "socket", "exclusive", "core-complex", NULL};
    const char *v = p->val[O_NUMA_BINDING];

    if (v == NULL)
        return 0;
    for (int i = 0; modes[i]; i++) {
        if (strcmp(v, modes[i]) == 0) {
            if (p->cfg->nproc_per_gpu > 0)
                return launcher__cfg_fail(p,
                                          "--numa-binding is for one worker per GPU; it cannot be "
                                          "combined with --nproc-per-gpu");
            snprintf(p->cfg->numa_binding, sizeof(p->cfg->numa_binding), "%s", v);
            return 0;
        }
    }
    return launcher__cfg_fail(
        p, "--numa-binding must be node, socket, exclusive or core-complex, not '%s'", v);
}

/* torchrun maps local rank N to entry N of the agent's CUDA_VISIBLE_DEVICES (any string), or
 * to GPU N when it is unset; it fails only when a worker starts. Here: before anything runs. */
static int parse_virtual_local_rank(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES"), *v = p->val[O_VIRTUAL_LOCAL_RANK];
    int on = 0, entries = 1;

    if (v != NULL && parse_bool(v, &on) != 0)
        return launcher__cfg_fail(p, "%s must be 0 or 1, not '%s'", p->src[O_VIRTUAL_LOCAL_RANK],
                                  v);
    if (!on)
        return 0;
    if (cfg->nproc_per_gpu > 0)
        return launcher__cfg_fail(
            p, "--virtual-local-rank cannot be combined with --nproc-per-gpu "
               "(shared-GPU mode sets each worker's CUDA_VISIBLE_DEVICES itself)");
    if (cvd != NULL) {
        for (const char *s = cvd; (s = strchr(s, ',')) != NULL; s++)
            entries++;
        if (cfg->nproc_per_node > entries)
            return launcher__cfg_fail(
                p,
                "--virtual-local-rank: %d workers but CUDA_VISIBLE_DEVICES=%s "
                "has %d entr%s (one GPU per worker)",
                cfg->nproc_per_node, cvd, entries, entries == 1 ? "y" : "ies");
    } else if (cfg->gpus_visible > 0 && cfg->nproc_per_node > cfg->gpus_visible) {
        return launcher__cfg_fail(
            p, "--virtual-local-rank: %d workers but %d GPU%s (one GPU per worker)",
            cfg->nproc_per_node, cfg->gpus_visible, cfg->gpus_visible == 1 ? "" : "s");
    }
    cfg->virtual_local_rank = 1;
    return 0;
}

/* Flags muster accepts for torchrun's sake and has no use for: said once, when given. */
static void note_noops(struct parse *p)
{
    if (p->val[O_MONITOR_INTERVAL] != NULL)
        cfg_note(p,
                 "note: %s does nothing in muster: a worker's exit is an event that muster "
                 "handles at once; nothing polls",
                 p->src[O_MONITOR_INTERVAL]);
    if (p->val[O_START_METHOD] != NULL)
        cfg_note(p,
                 "note: %s does nothing in muster: every worker is a new process that "
                 "execs the command (torchrun too ignores it for scripts)",
                 p->src[O_START_METHOD]);
    if (p->val[O_EVENT_LOG_HANDLER] != NULL)
        cfg_note(p,
                 "note: %s does nothing in muster: it records no torchelastic events (its "
                 "log is stderr; muster server --http serves /metrics and /status)",
                 p->src[O_EVENT_LOG_HANDLER]);
}

int launcher__cfg_parse_torchrun(struct parse *p)
{
    const char *ls = p->val[O_LOGS_SPECS];
    int rc;

    if (ls != NULL && strcmp(ls, "default") != 0)
        return launcher__cfg_fail(
            p,
            "--logs-specs %s: muster loads no logs-specs plugins; only 'default' "
            "(torchrun's DefaultLogsSpecs layout, which --log-dir writes) is "
            "accepted",
            ls);
    if ((rc = parse_signals(p)) != 0 || (rc = parse_numa(p)) != 0 ||
        (rc = parse_virtual_local_rank(p)) != 0)
        return rc;
    note_noops(p);
    return 0;
}
