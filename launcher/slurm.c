#include "slurm.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "ids.h"

/* Numbers in a bracket group: more digits than this cannot be a node index and would overflow. */
#define NUM_DIGITS_MAX 18

struct range {
    unsigned long long lo, hi;
    int width; /* digits of the lower bound: "08" pads to 2 */
};

/* The output being built. */
struct hosts {
    char **v;
    size_t n, cap;
};

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Parses one "A" or "A-B" of a bracket group, s[0..len). */
static int parse_range(const char *s, size_t len, struct range *r)
{
    const char *dash = memchr(s, '-', len);
    size_t lo_len = dash != NULL ? (size_t)(dash - s) : len;
    size_t hi_len = dash != NULL ? len - lo_len - 1 : 0;
    const char *hi = dash != NULL ? dash + 1 : s;

    if (dash == NULL)
        hi_len = len;
    if (lo_len == 0 || hi_len == 0 || lo_len > NUM_DIGITS_MAX || hi_len > NUM_DIGITS_MAX)
        return -EINVAL;
    r->lo = r->hi = 0;
    for (size_t i = 0; i < lo_len; i++) {
        if (!is_digit(s[i]))
            return -EINVAL;
        r->lo = r->lo * 10 + (unsigned)(s[i] - '0');
    }
    for (size_t i = 0; i < hi_len; i++) {
        if (!is_digit(hi[i]))
            return -EINVAL;
        r->hi = r->hi * 10 + (unsigned)(hi[i] - '0');
    }
    r->width = (int)lo_len;
    return r->lo <= r->hi ? 0 : -EINVAL;
}

/* Calls each range of the group g[0..len) (between the brackets) with fn; stops at an error. */
static int for_each_range(const char *g, size_t len, int (*fn)(const struct range *, void *),
                          void *arg)
{
    struct range r;
    size_t start = 0;
    int rc;

    if (len == 0)
        return -EINVAL;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && g[i] != ',')
            continue;
        rc = parse_range(g + start, i - start, &r);
        if (rc == 0)
            rc = fn(&r, arg);
        if (rc != 0)
            return rc;
        start = i + 1;
    }
    return 0;
}

static int add_count(const struct range *r, void *arg)
{
    size_t *count = arg;
    if (r->hi - r->lo >= LAUNCHER_HOSTLIST_MAX ||
        *count + (r->hi - r->lo + 1) > LAUNCHER_HOSTLIST_MAX)
        return -E2BIG;
    *count += (size_t)(r->hi - r->lo + 1);
    return 0;
}

/* How many hosts the item s[0..len) expands to (≤ LAUNCHER_HOSTLIST_MAX), checking syntax. */
static int item_count(const char *s, size_t len, size_t *count)
{
    size_t total = 1;

    if (len == 0)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ']')
            return -EINVAL; /* a ']' outside a group */
        if (s[i] != '[')
            continue;
        const char *close = memchr(s + i, ']', len - i);
        const char *nested = memchr(s + i + 1, '[', len - i - 1);
        size_t group = 0;
        if (close == NULL || (nested != NULL && nested < close))
            return -EINVAL;
        int rc = for_each_range(s + i + 1, (size_t)(close - s) - i - 1, add_count, &group);
        if (rc != 0)
            return rc;
        if (total > LAUNCHER_HOSTLIST_MAX / group)
            return -E2BIG;
        total *= group;
        i = (size_t)(close - s);
    }
    *count = total;
    return 0;
}

static int push_host(struct hosts *h, const char *name, size_t len)
{
    /* The array was sized from item_count; running past it would be a counting bug. */
    if (h->n == h->cap)
        return -E2BIG;
    h->v[h->n] = strndup(name, len);
    if (h->v[h->n] == NULL)
        return -ENOMEM;
    h->n++;
    return 0;
}

static int expand(struct hosts *h, char *buf, size_t pos, const char *s, size_t len);

/* One bracket group being expanded: buf[0..pos) is the text before the group. */
struct group_ctx {
    struct hosts *h;
    char *buf;
    size_t pos;
    const char *rest;
    size_t rest_len;
};

static int expand_range(const struct range *r, void *arg)
{
    struct group_ctx *g = arg;

    for (unsigned long long v = r->lo; v <= r->hi; v++) {
        int n = snprintf(g->buf + g->pos, LAUNCHER_HOST_MAX - g->pos, "%0*llu", r->width, v);
        if (n < 0 || (size_t)n >= LAUNCHER_HOST_MAX - g->pos)
            return -EINVAL;
        int rc = expand(g->h, g->buf, g->pos + (size_t)n, g->rest, g->rest_len);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Appends to buf[0..pos) every expansion of the (already checked) item text s[0..len). */
static int expand(struct hosts *h, char *buf, size_t pos, const char *s, size_t len)
{
    const char *open = memchr(s, '[', len);
    size_t lit = open != NULL ? (size_t)(open - s) : len;
    struct group_ctx g = {h, buf, pos + lit, NULL, 0};

    if (pos + lit >= LAUNCHER_HOST_MAX)
        return -EINVAL;
    memcpy(buf + pos, s, lit);
    if (open == NULL)
        return push_host(h, buf, pos + lit);
    const char *close = memchr(open, ']', len - lit);
    g.rest = close + 1;
    g.rest_len = len - (size_t)(g.rest - s);
    return for_each_range(open + 1, (size_t)(close - open) - 1, expand_range, &g);
}

void launcher_hostlist_free(char **hosts, size_t n)
{
    for (size_t i = 0; hosts != NULL && i < n; i++)
        free(hosts[i]);
    free(hosts);
}

/* Length of the item starting at s: up to the next ',' outside brackets. */
static size_t item_len(const char *s)
{
    size_t i = 0;
    int depth = 0;

    for (; s[i] != '\0' && (s[i] != ',' || depth > 0); i++) {
        if (s[i] == '[')
            depth++;
        else if (s[i] == ']' && depth > 0)
            depth--;
    }
    return i;
}

/* Checks every item and counts the hosts, so that nothing is allocated for a bad list. */
static int list_count(const char *list, size_t *total)
{
    size_t count, sum = 0;
    int rc;

    if (list[0] == '\0' || strpbrk(list, " \t\r\n\v\f") != NULL)
        return -EINVAL;
    for (const char *s = list;; s++) {
        size_t len = item_len(s);
        rc = item_count(s, len, &count);
        if (rc != 0)
            return rc;
        if (sum + count > LAUNCHER_HOSTLIST_MAX)
            return -E2BIG;
        sum += count;
        s += len;
        if (*s == '\0')
            break;
    }
    *total = sum;
    return 0;
}

int launcher_hostlist_expand(const char *list, char ***hosts, size_t *n)
{
    struct hosts h = {NULL, 0, 0};
    char buf[LAUNCHER_HOST_MAX];
    size_t total = 0;
    int rc;

    *hosts = NULL;
    *n = 0;
    rc = list_count(list, &total);
    if (rc != 0)
        return rc;
    h.v = calloc(total, sizeof(*h.v));
    if (h.v == NULL)
        return -ENOMEM;
    h.cap = total;
    for (const char *s = list; rc == 0; s++) {
        size_t len = item_len(s);
        rc = expand(&h, buf, 0, s, len);
        s += len;
        if (*s == '\0')
            break;
    }
    if (rc != 0) {
        launcher_hostlist_free(h.v, h.n);
        return rc;
    }
    *hosts = h.v;
    *n = h.n;
    return 0;
}

/* The value of key in env; NULL when absent or empty (Slurm exports some variables empty). */
static const char *env_get(const char *const *env, const char *key)
{
    size_t klen = strlen(key);

    for (; env != NULL && *env != NULL; env++) {
        if (strncmp(*env, key, klen) == 0 && (*env)[klen] == '=')
            return (*env)[klen + 1] != '\0' ? *env + klen + 1 : NULL;
    }
    return NULL;
}

/* A whole non-negative decimal int; -1 when malformed. */
static int parse_int(const char *s, size_t len)
{
    long v = 0;

    if (len == 0 || len > 9)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return (int)v;
}

/* The value comes from the environment and ends up in an error line: escaped (a newline or
 * an ESC sequence in it must not forge or rewrite the terminal's lines). */
static void note_bad(struct launcher_slurm *out, const char *key, const char *value)
{
    char shown[sizeof(out->bad) - 40];

    if (out->bad[0] != '\0')
        return;
    mc_escape_n(value, strnlen(value, sizeof(shown)), shown, sizeof(shown), MC_ESCAPE_QUOTES);
    snprintf(out->bad, sizeof(out->bad), "%.32s=%s", key, shown);
}

struct var {
    const char *key;
    int (*parse)(const char *value); /* -1 when malformed */
};

/* Reads the first present of vars (most important first) into *field. A malformed value is
 * noted and ends the search: a lower-precedence variable may describe something else. */
static const char *read_first(const char *const *env, const struct var *vars, int *field,
                              struct launcher_slurm *out)
{
    for (; vars->key != NULL; vars++) {
        const char *v = env_get(env, vars->key);
        if (v == NULL)
            continue;
        *field = vars->parse(v);
        if (*field >= 0)
            return vars->key;
        note_bad(out, vars->key, v);
        return NULL;
    }
    return NULL;
}

static int parse_count(const char *s)
{
    return parse_int(s, strlen(s));
}

static int parse_positive(const char *s)
{
    int v = parse_int(s, strlen(s));
    return v > 0 ? v : -1;
}

/* "2", "a100:2", "a100:1,v100:1": the sum of the counts after each type. */
static int parse_typed_counts(const char *s)
{
    int sum = 0;

    for (const char *item = s;; item++) {
        size_t len = strcspn(item, ",");
        const char *colon = memrchr(item, ':', len);
        const char *num = colon != NULL ? colon + 1 : item;
        int v = parse_int(num, len - (size_t)(num - item));
        if (v < 0 || sum > 100000)
            return -1;
        sum += v;
        item += len;
        if (*item == '\0')
            return sum;
    }
}

/* "0,1,2" or "0-3,6": how many GPU indices the list names. */
static int parse_index_list(const char *s)
{
    int sum = 0;

    for (const char *item = s;; item++) {
        size_t len = strcspn(item, ",");
        const char *dash = memchr(item, '-', len);
        int lo = parse_int(item, dash != NULL ? (size_t)(dash - item) : len);
        int hi = dash != NULL ? parse_int(dash + 1, len - (size_t)(dash - item) - 1) : lo;
        if (lo < 0 || hi < lo || sum > 100000)
            return -1;
        sum += hi - lo + 1;
        item += len;
        if (*item == '\0')
            return sum;
    }
}

/* The first host of the first node list present, as the rendezvous endpoint. */
static void read_nodelist(const char *const *env, struct launcher_slurm *out)
{
    static const char *const keys[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                       "SLURM_NODELIST", NULL};
    char **hosts = NULL;
    size_t n = 0;

    for (const char *const *k = keys; *k != NULL; k++) {
        const char *v = env_get(env, *k);
        if (v == NULL)
            continue;
        if (launcher_hostlist_expand(v, &hosts, &n) != 0) {
            note_bad(out, *k, v);
            return;
        }
        snprintf(out->rdzv_host, sizeof(out->rdzv_host), "%s", hosts[0]);
        snprintf(out->rdzv_endpoint, sizeof(out->rdzv_endpoint), "%s:%d", hosts[0],
                 LAUNCHER_SLURM_RDZV_PORT);
        out->nodelist_var = *k;
        launcher_hostlist_free(hosts, n);
        return;
    }
}

static void read_job_id(const char *const *env, struct launcher_slurm *out)
{
    const char *v = env_get(env, "SLURM_JOB_ID");
    const char *key = "SLURM_JOB_ID";

    if (v == NULL) {
        v = env_get(env, "SLURM_JOBID");
        key = "SLURM_JOBID";
    }
    if (v == NULL)
        return;
    /* it becomes the run id: a directory name under --log-dir (common/ids.h) */
    if (strlen(v) >= sizeof(out->job_id) || !mc_id_valid(v, NULL, 0))
        note_bad(out, key, v);
    else
        snprintf(out->job_id, sizeof(out->job_id), "%s", v);
}

int launcher_slurm_defaults(const char *const *env, struct launcher_slurm *out)
{
    static const struct var nnodes[] = {
        {"SLURM_NNODES", parse_positive}, {"SLURM_JOB_NUM_NODES", parse_positive}, {NULL, NULL}};
    static const struct var gpus[] = {{"SLURM_GPUS_PER_TASK", parse_typed_counts},
                                      {"SLURM_STEP_GPUS", parse_index_list},
                                      {"SLURM_GPUS_ON_NODE", parse_count},
                                      {"SLURM_JOB_GPUS", parse_index_list},
                                      {NULL, NULL}};
    static const struct var node_rank[] = {{"SLURM_NODEID", parse_count}, {NULL, NULL}};
    static const struct var per_node[] = {{"SLURM_NTASKS_PER_NODE", parse_positive}, {NULL, NULL}};

    memset(out, 0, sizeof(*out));
    out->nnodes = out->gpus = out->node_rank = out->ntasks_per_node = -1;
    read_first(env, nnodes, &out->nnodes, out);
    read_job_id(env, out);
    read_nodelist(env, out);
    out->gpus_var = read_first(env, gpus, &out->gpus, out);
    read_first(env, node_rank, &out->node_rank, out);
    read_first(env, per_node, &out->ntasks_per_node, out);
    return out->bad[0] != '\0' ? -EINVAL : 0;
}
