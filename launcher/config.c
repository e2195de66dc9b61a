/* `muster run` argument parsing. torchrun's flags are accepted in both spellings: option names
 * are normalised ('_' -> '-') before lookup, so --nproc_per_node and --nproc-per-node are one.
 * Every option not given on the command line is then looked up as PET_<NAME>, like torchrun's
 * argparse `env` action: command line first, then PET_*, then the default. */
#include "config.h"

#include <ctype.h>
#include <signal.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backoff.h"
#include "config_priv.h"
#include "dedup.h"
#include "endpoint.h"
#include "gpus.h"
#include "ids.h"
#include "log.h"
#include "output.h"
#include "proc.h"
#include "secret.h"
#include "slurm.h"
#include "token.h"
#include "torchver.h"
#include "usertoken.h"

int launcher__cfg_fail(struct parse *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

int launcher__cfg_parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi || isspace((unsigned char)*s))
        return -EINVAL;
    *out = v;
    return 0;
}

int launcher__cfg_parse_seconds_ms(const char *s, unsigned *ms)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0 || v > UINT_MAX / 1000.0)
        return -EINVAL;
    *ms = (unsigned)(v * 1000.0 + 0.5); /* v >= 0: rounds like llround, without libm */
    return 0;
}

/* Inside a Slurm allocation, flags that are absent (command line and PET_*) default from
 * SLURM_*: --nnodes, --rdzv-id, --rdzv-endpoint (first host of the node list) and
 * --nproc-per-node (the GPUs Slurm gave the task). Malformed SLURM_* values are an error,
 * never silently ignored. */
static int slurm_fallbacks(struct parse *p)
{
    extern char **environ;
    struct launcher_slurm *sl = &p->slurm;
    int rc = launcher_slurm_defaults((const char *const *)environ, sl);

    /* a malformed job id leaves job_id empty but is inside an allocation all the same */
    int bad_id =
        strncmp(sl->bad, "SLURM_JOB_ID=", 13) == 0 || strncmp(sl->bad, "SLURM_JOBID=", 12) == 0;

    if (sl->job_id[0] == '\0' && !bad_id)
        return 0; /* not inside an allocation */
    if (rc != 0)
        return launcher__cfg_fail(p, "cannot use the Slurm environment: %s is malformed", sl->bad);
    p->cfg->slurm = 1; /* pre-emption by SIGTERM holds for --standalone jobs too */
    if (p->val[O_STANDALONE] != NULL)
        return 0;
    if (p->val[O_NNODES] == NULL && sl->nnodes > 0) {
        snprintf(p->slurm_nnodes, sizeof(p->slurm_nnodes), "%d", sl->nnodes);
        p->val[O_NNODES] = p->slurm_nnodes;
        p->src[O_NNODES] = "SLURM_NNODES";
    }
    if (p->val[O_RDZV_ID] == NULL) {
        p->val[O_RDZV_ID] = sl->job_id;
        p->src[O_RDZV_ID] = "SLURM_JOB_ID";
    }
    if (p->val[O_RDZV_ENDPOINT] == NULL && sl->rdzv_endpoint[0] != '\0') {
        p->val[O_RDZV_ENDPOINT] = sl->rdzv_endpoint;
        p->src[O_RDZV_ENDPOINT] = sl->nodelist_var;
    }
    if (p->val[O_NPROC] == NULL && sl->gpus > 0) {
        snprintf(p->slurm_nproc, sizeof(p->slurm_nproc), "%d", sl->gpus);
        p->val[O_NPROC] = p->slurm_nproc;
        p->src[O_NPROC] = sl->gpus_var;
    }
    return 0;
}

static int parse_nnodes(struct parse *p)
{
    const char *v = launcher__opt_value(p, O_NNODES);
    const char *colon = strchr(v, ':');
    long lo, hi;
    char buf[32];

    if (colon == NULL) {
        if (launcher__cfg_parse_int(v, 1, 65536, &lo) != 0)
            goto bad;
        hi = lo;
    } else {
        size_t n = (size_t)(colon - v);
        if (n >= sizeof(buf))
            goto bad;
        memcpy(buf, v, n);
        buf[n] = '\0';
        if (launcher__cfg_parse_int(buf, 1, 65536, &lo) != 0 ||
            launcher__cfg_parse_int(colon + 1, 1, 65536, &hi) != 0)
            goto bad;
        if (lo > hi)
            return launcher__cfg_fail(p, "--nnodes %s: MIN must not exceed MAX", v);
    }
    p->cfg->min_nodes = (int)lo;
    p->cfg->max_nodes = (int)hi;
    return 0;
bad:
    return launcher__cfg_fail(p, "--nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, not '%s'", v);
}

static int parse_nproc(struct parse *p)
{
    const char *v = launcher__opt_value(p, O_NPROC);
    struct launcher_config *cfg = p->cfg;
    long n;

    snprintf(cfg->nproc_spec, sizeof(cfg->nproc_spec), "%s", v);
    if (strcmp(v, "cpu") == 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
    } else if (strcmp(v, "gpu") == 0 || strcmp(v, "auto") == 0) {
        n = launcher_count_gpus(LAUNCHER_NVIDIA_PROC_DIR, getenv("CUDA_VISIBLE_DEVICES"));
        if (n <= 0 && strcmp(v, "auto") == 0)
            n = sysconf(_SC_NPROCESSORS_ONLN);
        else if (n <= 0)
            return launcher__cfg_fail(p,
                                      "--nproc-per-node gpu: no NVIDIA GPU visible on this node "
                                      "(%s is empty or CUDA_VISIBLE_DEVICES hides them)",
                                      LAUNCHER_NVIDIA_PROC_DIR);
    } else if (launcher__cfg_parse_int(v, 1, 4096, &n) != 0) {
        return launcher__cfg_fail(
            p,
            "--nproc-per-node must be a positive number, cpu, gpu or auto, not "
            "'%s'%s",
            v, strcmp(v, "xpu") == 0 ? " (muster knows NVIDIA GPUs only)" : "");
    }
    cfg->nproc_per_node = n > 0 ? (int)n : 1;
    return 0;
}

static int split_endpoint(struct parse *p, const char *v, unsigned defport)
{
    int rc = launcher_parse_endpoint(v, defport, &p->cfg->rdzv_host, &p->cfg->rdzv_port);
    if (rc == -EINVAL)
        return launcher__cfg_fail(
            p, "--rdzv-endpoint must be HOST[:PORT] or [IPV6][:PORT], not '%s'", v);
    return rc;
}

/* Copies the next item of the comma list at *s into item (cap bytes) and moves *s past it and
 * its comma. Returns 0, or -EINVAL for an empty or too long item or a trailing comma. */
static int next_item(const char **s, char *item, size_t cap)
{
    size_t len = strcspn(*s, ",");

    if (len == 0 || len >= cap)
        return -EINVAL;
    memcpy(item, *s, len);
    item[len] = '\0';
    *s += len + ((*s)[len] == ',');
    return (*s)[-1] == ',' && **s == '\0' ? -EINVAL : 0;
}

static int parse_std_spec(struct parse *p, int id, struct launcher_std_spec *spec)
{
    const char *v = p->val[id];
    long n, r;

    spec->all = 0;
    spec->map_len = 0;
    if (v == NULL)
        return 0;
    if (strchr(v, ':') == NULL) {
        if (launcher__cfg_parse_int(v, 0, 3, &n) != 0)
            goto bad;
        spec->all = (int)n;
        return 0;
    }
    spec->all = -1;
    for (const char *s = v; *s;) {
        char item[32];
        if (spec->map_len == 64 || next_item(&s, item, sizeof(item)) != 0)
            goto bad;
        char *colon = strchr(item, ':');
        if (colon == NULL)
            goto bad;
        *colon = '\0';
        if (launcher__cfg_parse_int(item, 0, 4095, &r) != 0 ||
            launcher__cfg_parse_int(colon + 1, 0, 3, &n) != 0)
            goto bad;
        spec->map_rank[spec->map_len] = (int)r;
        spec->map_val[spec->map_len++] = (int)n;
    }
    return 0;
bad:
    return launcher__cfg_fail(
        p, "%s must be 0-3 (1 stdout, 2 stderr, 3 both) or LOCAL_RANK:0-3,..., not '%s'",
        p->src[id], v);
}

static int parse_ranks_filter(struct parse *p)
{
    const char *v = p->val[O_LOCAL_RANKS_FILTER];
    struct launcher_config *cfg = p->cfg;
    long r;

    if (v == NULL || *v == '\0')
        return 0;
    cfg->local_ranks_filter = calloc(strlen(v) / 2 + 1, sizeof(int));
    if (cfg->local_ranks_filter == NULL)
        return -ENOMEM;
    for (const char *s = v; *s;) {
        char item[16];
        if (next_item(&s, item, sizeof(item)) != 0 ||
            launcher__cfg_parse_int(item, 0, 4095, &r) != 0)
            goto bad;
        cfg->local_ranks_filter[cfg->local_ranks_filter_len++] = (int)r;
    }
    return 0;
bad:
    return launcher__cfg_fail(
        p, "--local-ranks-filter must be a comma list of local ranks, not '%s'", v);
}

/* --duplicate-std{out,err}-filters, --no-prefix, --dedup[=MS] and the prefix template from
 * TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (empty = unset, as torchrun's `if template:`). */
static int parse_output(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *tmpl = getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
    const char *d = p->val[O_DEDUP];
    long ms;
    int rc;

    for (int s = 0; s < 2; s++) {
        const char *v = p->val[s ? O_DUP_STDERR_FILTERS : O_DUP_STDOUT_FILTERS];
        if (v != NULL && (rc = agent_output_split_filters(v, &cfg->dup_filters[s])) != 0)
            return rc;
    }
    if (tmpl != NULL && *tmpl != '\0' && (cfg->prefix_template = strdup(tmpl)) == NULL)
        return -ENOMEM;
    if (d == NULL || strcmp(d, "0") == 0)
        return 0;
    if (strcmp(d, "1") == 0) /* --dedup alone */
        ms = AGENT_DEDUP_WINDOW_MS;
    else if (launcher__cfg_parse_int(d, 2, 10000, &ms) != 0)
        return launcher__cfg_fail(p, "%s takes a window of 2-10000 ms (--dedup=MS), not '%s'",
                                  p->src[O_DEDUP], d);
    cfg->dedup_ms = (unsigned)ms;
    return 0;
}

static int parse_backend(struct parse *p)
{
    const char *v = p->val[O_RDZV_BACKEND];
    struct launcher_config *cfg = p->cfg;

    if (v == NULL || strcmp(v, "muster") == 0)
        cfg->backend = LAUNCHER_BACKEND_MUSTER;
    else if (strcmp(v, "c10d") == 0)
        cfg->backend = LAUNCHER_BACKEND_C10D;
    else if (strcmp(v, "static") == 0)
        cfg->backend = LAUNCHER_BACKEND_STATIC;
    else if (strncmp(v, "etcd", 4) == 0) /* etcd, etcd-v2 */
        return launcher__cfg_fail(
            p,
            "--rdzv-backend %s: muster has no etcd client; its own server "
            "(muster, the default; c10d and static recipes) holds the rendezvous",
            v);
    else
        return launcher__cfg_fail(p, "--rdzv-backend must be muster, c10d or static, not '%s'", v);
    return 0;
}

/* A version-4 UUID string, like torchrun's --standalone run id. */
static char *random_uuid(void)
{
    unsigned char b[16];
    char *s = malloc(37);
    if (s == NULL)
        return NULL;
    if (getentropy(b, sizeof(b)) != 0) {
        free(s);
        return NULL;
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(s, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return s;
}

/* The id names directories under --log-dir and $TMPDIR and appears in logs and /status: one
 * character set (common/ids.h), whether it came from --rdzv-id, PET_RDZV_ID or SLURM_JOB_ID. */
static int check_rdzv_id(struct parse *p, const char *id)
{
    const char *src = p->src[O_RDZV_ID];
    char why[512];

    if (id == NULL || mc_id_valid(id, why, sizeof(why)))
        return 0;
    /* src of "--rdzv-id=ID" holds the id itself: never print it raw */
    if (src == NULL || src[0] == '-')
        src = "--rdzv-id";
    return launcher__cfg_fail(p, "%s %s", src, why);
}

/* --http [HOST:]PORT, as muster server's */
static int parse_http(struct parse *p)
{
    const char *v = p->val[O_HTTP];

    if (v != NULL && launcher_parse_http(v, &p->cfg->http_host, &p->cfg->http_port) != 0)
        return launcher__cfg_fail(p, "--http must be PORT or HOST:PORT ([IPV6]:PORT), not '%s'", v);
    return 0;
}

static int parse_rdzv(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *id = p->val[O_RDZV_ID];
    int rc;

    if ((rc = parse_backend(p)) != 0)
        return rc;
    if (cfg->standalone) {
        /* Like torchrun: --standalone overrides endpoint and id. Unlike torchrun the
         * embedded server never uses a fixed port, so two standalone jobs cannot collide. */
        cfg->backend = LAUNCHER_BACKEND_MUSTER;
        cfg->rdzv_id = random_uuid();
        return cfg->rdzv_id ? 0 : -ENOMEM;
    }
    if ((rc = check_rdzv_id(p, id)) != 0)
        return rc;
    cfg->rdzv_id = (id && strcmp(id, "none") != 0) ? strdup(id) : random_uuid();
    if (cfg->rdzv_id == NULL)
        return -ENOMEM;
    if (p->val[O_RDZV_ENDPOINT] != NULL && *p->val[O_RDZV_ENDPOINT] != '\0') {
        cfg->rdzv_endpoint = strdup(p->val[O_RDZV_ENDPOINT]);
        if (cfg->rdzv_endpoint == NULL)
            return -ENOMEM;
        return split_endpoint(p, cfg->rdzv_endpoint, 29400);
    }
    return 0;
}

/* The run id of a static recipe without --rdzv-id: the same on every node, made of what every
 * node was given (MASTER_ADDR and MASTER_PORT), in the id character set. */
static char *static_id(const char *addr, unsigned port)
{
    char id[MC_ID_MAX + 1];

    snprintf(id, sizeof(id), "static-%s-%u", addr, port);
    for (char *c = id; *c != '\0'; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '-'))
            *c = '_';
    return strdup(id);
}

/* No rendezvous endpoint across nodes: torchrun's static recipe (below). */
static int static_recipe(const struct launcher_config *cfg)
{
    return cfg->rdzv_host == NULL && cfg->max_nodes > 1 && !cfg->standalone;
}

/* torchrun's static recipe (--nnodes N --node-rank R --master-addr A --master-port P, no
 * --rdzv-endpoint): node rank 0 hosts the rendezvous on A:P+1 (P stays the workers'
 * MASTER_PORT, where rank 0's TCPStore listens), every node asks for group rank R, and the job
 * is one muster job: restarts are coordinated across nodes. */
static int parse_static_recipe(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    unsigned port = cfg->master_port > 0 ? (unsigned)cfg->master_port : 29500;
    const char *id = p->val[O_RDZV_ID];
    char ep[300];

    if (!static_recipe(cfg))
        return 0;
    cfg->backend = LAUNCHER_BACKEND_STATIC;
    cfg->static_recipe = 1;
    cfg->master_port = (int)port;
    snprintf(ep, sizeof(ep), strchr(cfg->master_addr, ':') ? "[%s]:%u" : "%s:%u", cfg->master_addr,
             port + 1);
    free(cfg->rdzv_endpoint);
    if ((cfg->rdzv_endpoint = strdup(ep)) == NULL ||
        (cfg->rdzv_host = strdup(cfg->master_addr)) == NULL)
        return -ENOMEM;
    cfg->rdzv_port = port + 1;
    if (id == NULL || strcmp(id, "none") == 0) {
        free(cfg->rdzv_id);
        if ((cfg->rdzv_id = static_id(cfg->master_addr, port)) == NULL)
            return -ENOMEM;
    }
    return 0;
}

/* --exclude-after N[:WINDOW]: N failures of one node within WINDOW seconds exclude it. */
static int parse_exclude(const char *v, struct launcher_config *cfg)
{
    char num[16];
    const char *colon = strchr(v, ':');
    size_t n = colon ? (size_t)(colon - v) : strlen(v);
    long k;

    if (n == 0 || n >= sizeof(num))
        return -EINVAL;
    memcpy(num, v, n);
    num[n] = '\0';
    if (launcher__cfg_parse_int(num, 1, 32, &k) != 0)
        return -EINVAL;
    cfg->restart.exclude_after = (uint32_t)k;
    cfg->restart.exclude_window_ms = 0;
    if (colon && (launcher__cfg_parse_seconds_ms(colon + 1, &cfg->restart.exclude_window_ms) != 0 ||
                  cfg->restart.exclude_window_ms == 0))
        return -EINVAL;
    return 0;
}

static int parse_numbers(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *v;

    if ((v = p->val[O_RESTART_BACKOFF]) != NULL &&
        mc_backoff_parse(v, &cfg->restart.backoff_min_ms, &cfg->restart.backoff_max_ms) != 0)
        return launcher__cfg_fail(
            p,
            "--restart-backoff must be MIN[:MAX] seconds (0 <= MIN <= MAX <= 3600, "
            "e.g. 0.5:30), not '%s'",
            v);
    if ((v = p->val[O_EXCLUDE_AFTER]) != NULL && parse_exclude(v, cfg) != 0)
        return launcher__cfg_fail(
            p,
            "--exclude-after must be N[:WINDOW] (1 <= N <= 32 failures of one node, "
            "WINDOW seconds, default 3600), not '%s'",
            v);
    if ((v = launcher__opt_value(p, O_MONITOR_INTERVAL)) != NULL) {
        unsigned ms;
        if (launcher__cfg_parse_seconds_ms(v, &ms) != 0)
            return launcher__cfg_fail(p, "--monitor-interval must be a number of seconds, not '%s'",
                                      v);
        cfg->monitor_interval = ms / 1000.0;
    }
    if ((v = p->val[O_START_METHOD]) != NULL && strcmp(v, "spawn") && strcmp(v, "fork") &&
        strcmp(v, "forkserver"))
        return launcher__cfg_fail(p, "--start-method must be spawn, fork or forkserver, not '%s'",
                                  v);
    return 0;
}

int launcher__cfg_parse_signal(const char *v, int *sig)
{
    long n;
    if (launcher__cfg_parse_int(v, 1, NSIG - 1, &n) == 0) {
        *sig = (int)n;
        return 0;
    }
    if (strncasecmp(v, "SIG", 3) == 0)
        v += 3;
    for (int i = 1; i < NSIG; i++) {
        const char *name = sigabbrev_np(i);
        if (name != NULL && strcasecmp(v, name) == 0) {
            *sig = i;
            return 0;
        }
    }
    return -EINVAL;
}

/* --checkpoint-marker NAME: a file name inside each directory checkpoint. */
static int parse_ckpt_marker(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *v;

    if ((v = p->val[O_CHECKPOINT_MARKER]) != NULL) {
        if (*v == '\0' || strchr(v, '/') != NULL || strcmp(v, ".") == 0 || strcmp(v, "..") == 0 ||
            strlen(v) > 255)
            return launcher__cfg_fail(
                p, "--checkpoint-marker must be a file name (no '/'), not '%s'", v);
        if ((cfg->ckpt.marker = strdup(v)) == NULL)
            return -ENOMEM;
    }
    return 0;
}

static int parse_fault_tolerance(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *v;

    if (cfg->slurm && p->val[O_PREEMPT_SIGNAL] == NULL)
        cfg->restart.preempt_signal =
            SIGTERM; /* Slurm's pre-emption and scancel --signal default */
    if ((v = p->val[O_PREEMPT_SIGNAL]) != NULL) {
        if (launcher__cfg_parse_signal(v, &cfg->restart.preempt_signal) != 0 ||
            cfg->restart.preempt_signal == SIGKILL || cfg->restart.preempt_signal == SIGSTOP ||
            cfg->restart.preempt_signal == SIGCHLD)
            return launcher__cfg_fail(
                p,
                "--preempt-signal must name a signal muster can catch (TERM, USR1, "
                "USR2...), not '%s'",
                v);
    }
    if ((v = p->val[O_CHECKPOINT_DIR]) != NULL) {
        struct stat st;
        if (*v == '\0')
            return launcher__cfg_fail(p, "--checkpoint-dir must not be empty");
        if (stat(v, &st) == 0 && !S_ISDIR(st.st_mode))
            return launcher__cfg_fail(p, "--checkpoint-dir %s exists and is not a directory", v);
        if ((cfg->ckpt.dir = strdup(v)) == NULL)
            return -ENOMEM;
    }
    cfg->ckpt.resume_args = (const char *const *)cfg->resume_args; /* all pushed by now */
    return parse_ckpt_marker(p);
}

static int parse_tls_files(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    static const int ids[3] = {O_TLS_CERT, O_TLS_KEY, O_TLS_CA};
    char **dst[3] = {&cfg->tls_cert, &cfg->tls_key, &cfg->tls_ca};
    int given = 0;

    for (int i = 0; i < 3; i++)
        given += p->val[ids[i]] != NULL;
    if (given == 0)
        return 0;
    for (int i = 0; i < 3; i++) {
        if (access(p->val[ids[i]], R_OK) != 0)
            return launcher__cfg_fail(p, "%s %s: %s", p->src[ids[i]], p->val[ids[i]],
                                      strerror(errno));
        if ((*dst[i] = strdup(p->val[ids[i]])) == NULL)
            return -ENOMEM;
    }
    return 0;
}

/* Every control connection is TLS with the token as its key (or certificates). A job that
 * spans nodes must be given one; a single node gets a random one of its own (run.c). */
/* No token given to a multi-node job: the per-user token, like an ssh key (usertoken.h). */
static int user_token(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    struct launcher_usertoken u;
    char *token = NULL, err[LAUNCHER_ERR_MAX];
    int rc;

    if ((rc = launcher_secret_alloc(LAUNCHER_TOKEN_FILE_MAX + 1, &token)) != 0)
        return rc;
    rc = launcher_usertoken_get(&u, token, LAUNCHER_TOKEN_FILE_MAX + 1, err, sizeof(err));
    if (rc != 0) {
        launcher_secret_free(token);
        return launcher__cfg_fail(p,
                                  "a multi-node job needs a shared token (--token-file FILE, "
                                  "MUSTER_TOKEN, or the per-user ~/.muster/token), but %s",
                                  err);
    }
    cfg->token = token;
    launcher_usertoken_hint(&u, 0, err, sizeof(err));
    if ((cfg->token_hint = strdup(err)) == NULL)
        return -ENOMEM;
    launcher_usertoken_hint(&u, 1, err, sizeof(err));
    if ((cfg->token_hint_host = strdup(err)) == NULL)
        return -ENOMEM;
    return 0;
}

static int parse_security(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *f = p->val[O_TOKEN_FILE];
    char *token = NULL, err[LAUNCHER_ERR_MAX];
    int rc;

    if (f != NULL) { /* the token lives in a secret region (secret.h), never on the heap */
        if ((rc = launcher_secret_alloc(LAUNCHER_TOKEN_FILE_MAX + 1, &token)) != 0)
            return rc;
        rc = launcher_read_token_file(f, token, LAUNCHER_TOKEN_FILE_MAX + 1, err, sizeof(err));
        if (rc != 0) {
            launcher_secret_free(token);
            return launcher__cfg_fail(p, "%s", err);
        }
        launcher_secret_free(cfg->token);
        cfg->token = token;
        if ((cfg->token_file = strdup(f)) == NULL)
            return -ENOMEM;
    } else if (cfg->token != NULL &&
               launcher_token_check_len(cfg->token, "MUSTER_TOKEN", err, sizeof(err)) != 0) {
        return launcher__cfg_fail(p, "%s", err); /* the server would cut it, and then refuse us */
    }
    if ((rc = parse_tls_files(p)) != 0)
        return rc;
    if (cfg->max_nodes > 1 && cfg->token == NULL && cfg->tls_cert == NULL && !cfg->dry_run)
        return user_token(p); /* --dry-run starts nothing, so it makes no file either */
    return 0;
}

/* PYTHON_EXEC and MUSTER_TOKEN, the two variables that are no option's PET_<NAME>. */
static int parse_environment(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *py = getenv("PYTHON_EXEC");
    const char *tok = getenv("MUSTER_TOKEN");

    if ((cfg->python_exec = strdup(py && *py ? py : "python3")) == NULL)
        return -ENOMEM;
    if (tok && *tok && launcher_secret_strdup(tok, &cfg->token) != 0)
        return -ENOMEM;
    return 0;
}

/* The script must exist for `python3 SCRIPT` (torchrun would only fail inside every worker). */
static int check_script(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    struct stat st;

    if (cfg->script == NULL)
        return launcher__cfg_fail(
            p, "no training script given (usage: muster run [options] SCRIPT [ARGS...])");
    if (cfg->module)
        return 0;
    if (cfg->no_python && strchr(cfg->script, '/') == NULL)
        return 0; /* looked up on PATH when the worker starts */
    if (stat(cfg->script, &st) != 0)
        return launcher__cfg_fail(p, "training script '%s' not found", cfg->script);
    if (S_ISDIR(st.st_mode))
        return launcher__cfg_fail(p, "training script '%s' is a directory", cfg->script);
    if (cfg->no_python && access(cfg->script, X_OK) != 0)
        return launcher__cfg_fail(p, "'%s' is not executable (--no-python runs it directly)",
                                  cfg->script);
    return 0;
}

/* Whether path names an executable regular file. */
static int is_executable(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The interpreter, resolved once as execvp(3) would find it: every worker then runs
 * the same file, --dry-run shows which, and a missing one is one line here instead of 127 from
 * every worker. torchrun runs its own sys.executable; muster has none, so PATH decides. */
static int resolve_python(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    char found[PATH_MAX], *copy;
    int given = getenv("PYTHON_EXEC") != NULL && getenv("PYTHON_EXEC")[0] != '\0';

    if (cfg->no_python)
        return 0;
    if (strchr(cfg->python_exec, '/') != NULL) {
        if (!is_executable(cfg->python_exec))
            return launcher__cfg_fail(p, "PYTHON_EXEC '%s' is not an executable file",
                                      cfg->python_exec);
    } else {
        /* no PATH at all: the system directories, as execvp(3) would */
        if (mc_proc_find(cfg->python_exec, getenv("PATH") == NULL, found, sizeof(found)) != 0)
            return launcher__cfg_fail(
                p, "%s '%s' not found on PATH%s", given ? "PYTHON_EXEC" : "python",
                cfg->python_exec, given ? "" : " (set PYTHON_EXEC to the Python that has torch)");
        if ((copy = strdup(found)) == NULL)
            return -ENOMEM;
        free(cfg->python_exec);
        cfg->python_exec = copy;
    }
    cfg->torch_version = launcher_torchver_find(cfg->python_exec, getenv("HOME"));
    return 0;
}

/* ---- validate(): the rules between options --------------------------------------------- */

/* The rendezvous: --standalone, the endpoint a backend or an elastic size needs, and the
 * static recipe's MASTER_PORT + 1 and --node-rank. */
static int validate_rdzv(struct parse *p)
{
    const struct launcher_config *cfg = p->cfg;
    unsigned port = cfg->master_port > 0 ? (unsigned)cfg->master_port : 29500;

    if (cfg->standalone && cfg->max_nodes > 1)
        return launcher__cfg_fail(
            p, "--standalone runs a single node; it cannot be combined with --nnodes %d",
            cfg->max_nodes);
    if (cfg->standalone || cfg->rdzv_host != NULL)
        return 0;
    if (cfg->max_nodes > 1 && cfg->backend == LAUNCHER_BACKEND_C10D)
        return launcher__cfg_fail(
            p,
            "the c10d backend (--nnodes %d:%d) needs --rdzv-endpoint HOST:PORT, "
            "as in torchrun",
            cfg->min_nodes, cfg->max_nodes);
    if (cfg->max_nodes > 1 && cfg->min_nodes != cfg->max_nodes)
        return launcher__cfg_fail(
            p,
            "without --rdzv-endpoint (torchrun's static recipe) --nnodes must be a "
            "fixed N, not %d:%d",
            cfg->min_nodes, cfg->max_nodes);
    if (static_recipe(cfg) && port >= 65535)
        return launcher__cfg_fail(p,
                                  "--master-port %u leaves no port for the rendezvous: in "
                                  "torchrun's static recipe node rank 0 hosts muster's "
                                  "rendezvous on MASTER_PORT + 1 (pick a port below 65535, or "
                                  "give --rdzv-endpoint)",
                                  port);
    if ((static_recipe(cfg) || cfg->backend == LAUNCHER_BACKEND_STATIC) &&
        cfg->node_rank >= cfg->max_nodes)
        return launcher__cfg_fail(p, "--node-rank %d must be below --nnodes %d", cfg->node_rank,
                                  cfg->max_nodes);
    return 0;
}

/* What only a --checkpoint-dir gives a meaning to. */
static int validate_checkpoints(struct parse *p)
{
    const struct launcher_config *cfg = p->cfg;

    if (cfg->ckpt.dir != NULL)
        return 0;
    if (cfg->nresume_args > 0)
        return launcher__cfg_fail(p, "--resume-arg needs --checkpoint-dir (it is added only when "
                                     "muster resumes from a checkpoint it recorded there)");
    if (p->val[O_CHECKPOINT_SETTLE] != NULL || p->val[O_CHECKPOINT_MARKER] != NULL)
        return launcher__cfg_fail(p, "%s needs --checkpoint-dir",
                                  p->val[O_CHECKPOINT_SETTLE] ? "--checkpoint-settle"
                                                              : "--checkpoint-marker");
    if (cfg->ckpt.replicate > 0)
        return launcher__cfg_fail(p, "--replicate-checkpoints needs --checkpoint-dir");
    return 0;
}

/* Shared-GPU mode (--nproc-per-gpu): one node of independent one-rank workers. */
static int validate_shared(struct parse *p)
{
    const struct launcher_config *cfg = p->cfg;
    const char *pf = launcher__opt_value(p, O_PREFLIGHT);

    if (cfg->nproc_per_gpu == 0) {
        if (cfg->mps || cfg->auto_batch)
            return launcher__cfg_fail(p, "%s needs --nproc-per-gpu K (shared-GPU mode)",
                                      cfg->mps ? "--mps" : "--auto-batch");
        return 0;
    }
    if (cfg->max_nodes > 1)
        return launcher__cfg_fail(
            p, "--nproc-per-gpu runs independent workers on one node; with several "
               "nodes start one 'muster run --nproc-per-gpu' per node");
    if (cfg->ckpt.dir != NULL || cfg->ckpt.hang_timeout_ms != 0)
        return launcher__cfg_fail(p,
                                  "%s is not supported with --nproc-per-gpu (independent workers)",
                                  cfg->ckpt.dir ? "--checkpoint-dir" : "--hang-timeout");
    if (strcmp(pf, "on") == 0 || strcmp(pf, "1") == 0)
        return launcher__cfg_fail(p,
                                  "--preflight on checks links between the ranks of one job; "
                                  "--nproc-per-gpu workers are independent (use --preflight off)");
    return 0;
}

/* --spare: a hot spare waits in a shared rendezvous server for a node of a multi-node job to
 * replace, so it needs one (--rdzv-endpoint) and ranks the rendezvous decides. */
static int validate_spare(struct parse *p)
{
    const struct launcher_config *cfg = p->cfg;
    const char *why = NULL;

    if (!cfg->restart.spare)
        return 0;
    if (cfg->standalone)
        why = "--standalone runs one node alone, with nothing to replace";
    else if (static_recipe(cfg) || cfg->backend == LAUNCHER_BACKEND_STATIC)
        why = "the static recipe and backend fix every node's rank (--node-rank)";
    else if (cfg->rdzv_host == NULL)
        why = "it needs --rdzv-endpoint HOST:PORT, the rendezvous it waits in";
    else if (cfg->nproc_per_gpu > 0)
        why = "shared-GPU mode (--nproc-per-gpu) runs independent tasks on one node";
    if (why == NULL)
        return 0;
    return launcher__cfg_fail(
        p, "--spare waits to replace a node of a job on a shared rendezvous server: %s", why);
}

/* Every rule that ties options together, once each option's own value is parsed and before
 * anything is derived from them (the static recipe's endpoint, a token, the GPUs in use).
 * Returns 0 or -EINVAL (reason in p->err). */
static int validate(struct parse *p)
{
    const struct launcher_config *cfg = p->cfg;
    int ntls =
        (p->val[O_TLS_CERT] != NULL) + (p->val[O_TLS_KEY] != NULL) + (p->val[O_TLS_CA] != NULL);
    int rc;

    if ((rc = validate_rdzv(p)) != 0 || (rc = validate_checkpoints(p)) != 0)
        return rc;
    if (ntls != 0 && ntls != 3)
        return launcher__cfg_fail(
            p, "certificate mode needs all of --tls-cert, --tls-key and --tls-ca");
    if ((rc = validate_shared(p)) != 0 || (rc = validate_spare(p)) != 0)
        return rc;
    if (cfg->module && cfg->no_python)
        return launcher__cfg_fail(p, "-m/--module and --no-python cannot be used together");
    return 0;
}

/* Defaults that are no option's: --rdzv-conf's keys and the host decision; the options' own are
 * their rows' .def (options.def). */
static void set_defaults(struct launcher_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    launcher__cfg_rdzv_conf_defaults(cfg);
    cfg->rdzv_is_host = -1;
}

/* Each option's own value (the table's rows, then the grammars of config*.c). */
static int parse_options(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    int rc;

    if ((rc = launcher__opt_parse_table(p)) != 0)
        return rc;
    if (cfg->run_path)
        cfg->no_python = 0; /* torchrun: --run-path takes precedence over --no-python */
    if ((rc = parse_nnodes(p)) != 0 || (rc = parse_nproc(p)) != 0 || (rc = parse_rdzv(p)) != 0 ||
        (rc = parse_http(p)) != 0 || (rc = launcher__cfg_parse_rdzv_conf(p)) != 0 ||
        (rc = parse_numbers(p)) != 0 || (rc = parse_environment(p)) != 0 ||
        (rc = parse_std_spec(p, O_REDIRECTS, &cfg->redirects)) ||
        (rc = parse_std_spec(p, O_TEE, &cfg->tee)) != 0 || (rc = parse_ranks_filter(p)) != 0 ||
        (rc = parse_output(p)) != 0 || (rc = parse_fault_tolerance(p)) != 0)
        return rc;
    return launcher__cfg_parse_gpu(p);
}

static int parse_values(struct parse *p)
{
    int rc;

    if ((rc = parse_options(p)) != 0 || (rc = validate(p)) != 0)
        return rc;
    if ((rc = parse_static_recipe(p)) != 0 || (rc = parse_security(p)) != 0 ||
        (rc = launcher__cfg_plan_gpu(p)) != 0 || (rc = launcher__cfg_parse_torchrun(p)) != 0 ||
        (rc = check_script(p)) != 0)
        return rc;
    return resolve_python(p);
}

/* --quiet / --verbose take effect at once, so that every later line (of the parse too) obeys
 * them; MUSTER_LOG carries the level to the muster processes this one starts (the pre-flight
 * node), as it would from the user's environment. --verbose wins over --quiet. */
static void apply_log_level(struct parse *p)
{
    int level = p->val[O_VERBOSE] != NULL ? MC_LOG_DEBUG
                : p->val[O_QUIET] != NULL ? MC_LOG_WARN
                                          : -1;

    if (level < 0)
        return;
    p->cfg->log_level = level;
    mc_log_set_level((enum mc_log_level)level);
    setenv("MUSTER_LOG", level == MC_LOG_WARN ? "warn" : "debug", 1);
}

int launcher_config_parse(int argc, char **argv, struct launcher_config *cfg, char *err,
                          size_t errlen)
{
    struct parse p = {.cfg = cfg, .err = err, .errlen = errlen};
    int i, rc;

    set_defaults(cfg);
    if (errlen > 0)
        err[0] = '\0';
    for (i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* the script: everything after it belongs to the script */
        if ((rc = launcher__opt_take(&p, argc, argv, &i)) < 0)
            return rc;
        if (p.val[O_HELP] != NULL) {
            cfg->help = 1;
            return 0;
        }
    }
    apply_log_level(&p);
    if (i < argc) {
        cfg->script = argv[i];
        cfg->script_argv = argv + i + 1;
        cfg->script_argc = argc - i - 1;
    }
    launcher__opt_env_fallbacks(&p);
    if (p.val[O_SHUTDOWN_TIMEOUT] == NULL && getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT") != NULL) {
        p.val[O_SHUTDOWN_TIMEOUT] = getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"); /* torchrun's */
        p.src[O_SHUTDOWN_TIMEOUT] = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
    }
    rc = slurm_fallbacks(&p);
    if (rc == 0)
        rc = parse_values(&p);
    if (rc == -ENOMEM)
        launcher__cfg_fail(&p, "out of memory");
    return rc;
}

void launcher_config_free(struct launcher_config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->rdzv_endpoint);
    free(cfg->rdzv_host);
    free(cfg->http_host);
    free(cfg->rdzv_id);
    launcher__opt_free_strings(cfg);
    free(cfg->python_exec);
    free((char *)cfg->ckpt.dir); /* the agent's options borrow it: const there */
    free((char *)cfg->ckpt.marker);
    for (int i = 0; i < cfg->nresume_args; i++)
        free(cfg->resume_args[i]);
    free(cfg->resume_args);
    free(cfg->token_file);
    free(cfg->token_hint);
    free(cfg->token_hint_host);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->tls_ca);
    free(cfg->local_ranks_filter);
    free(cfg->dup_filters[0]);
    free(cfg->dup_filters[1]);
    free(cfg->prefix_template);
    for (int i = 0; i < cfg->ngpu_ids; i++)
        free(cfg->gpu_ids[i]);
    free(cfg->gpu_ids);
    free((char *)cfg->pf.max_bytes);
    launcher_secret_free(cfg->token); /* zeroes it */
    memset(cfg, 0, sizeof(*cfg));
}

int launcher_std_for_rank(const struct launcher_std_spec *spec, int local_rank)
{
    for (int i = 0; i < spec->map_len; i++)
        if (spec->map_rank[i] == local_rank)
            return spec->map_val[i];
    return spec->all < 0 ? 0 : spec->all;
}

int launcher_rank_shown(const struct launcher_config *cfg, int local_rank)
{
    if (cfg->local_ranks_filter == NULL)
        return 1;
    for (int i = 0; i < cfg->local_ranks_filter_len; i++)
        if (cfg->local_ranks_filter[i] == local_rank)
            return 1;
    return 0;
}
