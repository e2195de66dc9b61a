#include "pf_kv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <muster.h>
#include "clock.h"

#define LIST_SHOWN 8 /* ranks named in one message; the rest are counted */

struct gpu_entry {
    int rank;
    int dev;
    char host[PF_HOST_MAX];
    char uuid[48];
    char pci[32];
};

static void append(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *out, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(out);
    va_list ap;

    if (n + 1 >= cap)
        return;
    va_start(ap, fmt);
    vsnprintf(out + n, cap - n, fmt, ap);
    va_end(ap);
}

int pf_kv_put_text(struct pf_run *run, const char *key, const char *text)
{
    int rc = muster_kv_put(run->m, key, text, strlen(text));

    if (rc < 0)
        return pf_fail(run, PFG_EXIT_START, rc, "muster KV put %s: %s", key, muster_strerror(rc));
    return 0;
}

int pf_kv_get_until(struct pf_run *run, const char *key, void *buf, size_t cap, size_t *len,
                    double deadline_ms)
{
    int rc = muster_kv_get(run->m, key, buf, cap, len, pf_left_ms(deadline_ms));

    if (rc == 0 || rc == -ETIMEDOUT || rc == -ENOENT)
        return rc;
    return pf_fail(run, PFG_EXIT_START, rc, "muster KV get %s: %s", key, muster_strerror(rc));
}

/* A non-blocking text get that records nothing: used while composing an error message, where
 * a second failure must not replace the first. Returns 1 when found, 0 otherwise. */
static int peek_text(struct pf_run *run, const char *key, char *buf, size_t cap)
{
    size_t len = 0;

    if (muster_kv_get(run->m, key, buf, cap - 1, &len, 0) != 0)
        return 0;
    buf[len] = '\0';
    return 1;
}

void pf_kv_rank_desc(struct pf_run *run, int rank, char *out, size_t cap)
{
    char key[64], host[PF_HOST_MAX], err[PF_ERROR_MAX];

    snprintf(key, sizeof(key), "pf/host/%d", rank);
    if (!peek_text(run, key, host, sizeof(host)))
        snprintf(host, sizeof(host), "unknown");
    snprintf(out, cap, "rank %d (host %s)", rank, host);
    snprintf(key, sizeof(key), "pf/error/%d", rank);
    if (peek_text(run, key, err, sizeof(err)))
        append(out, cap, " [it reported: %.300s]", err);
}

int pf_kv_publish(struct pf_run *run)
{
    char key[64], val[PF_HOST_MAX + 128];
    int rc;

    snprintf(key, sizeof(key), "pf/mem/%d", run->env.rank);
    snprintf(val, sizeof(val), "%" PRIu64, run->buf_bytes);
    if ((rc = pf_kv_put_text(run, key, val)) < 0)
        return rc;
    snprintf(key, sizeof(key), "pf/gpu/%d", run->env.rank);
    snprintf(val, sizeof(val), "%s\t%s\t%s\t%d", run->host, run->gpu.uuid, run->gpu.pci,
             run->gpu.index);
    if ((rc = pf_kv_put_text(run, key, val)) < 0)
        return rc;
    snprintf(key, sizeof(key), "pf/arrived/%d", run->env.rank);
    return pf_kv_put_text(run, key, "1");
}

/* "<host>\t<uuid>\t<pci>\t<index>" -> *e; returns 0 or -EINVAL. */
static int parse_gpu_value(char *v, struct gpu_entry *e)
{
    char *f[4], *save = NULL, *end = NULL;
    int n = 0;
    long dev;

    for (char *t = strtok_r(v, "\t", &save); t != NULL && n < 4; t = strtok_r(NULL, "\t", &save))
        f[n++] = t;
    if (n != 4)
        return -EINVAL;
    errno = 0;
    dev = strtol(f[3], &end, 10);
    if (errno != 0 || *end != '\0' || dev < 0 || dev > 1 << 20)
        return -EINVAL;
    snprintf(e->host, sizeof(e->host), "%s", f[0]);
    snprintf(e->uuid, sizeof(e->uuid), "%s", f[1]);
    snprintf(e->pci, sizeof(e->pci), "%s", f[2]);
    e->dev = (int)dev;
    return 0;
}

/* The size rank r could allocate, or 0 when unknown (an older worker, or junk). */
static uint64_t peek_mem(struct pf_run *run, int r)
{
    char key[64], val[32], *end = NULL;
    unsigned long long v;

    snprintf(key, sizeof(key), "pf/mem/%d", r);
    if (!peek_text(run, key, val, sizeof(val)))
        return 0;
    errno = 0;
    v = strtoull(val, &end, 10);
    if (errno != 0 || end == val || *end != '\0')
        return 0;
    return (uint64_t)v;
}

static void own_entry(struct pf_run *run, struct gpu_entry *e)
{
    e->rank = run->env.rank;
    e->dev = run->gpu.index;
    snprintf(e->host, sizeof(e->host), "%s", run->host);
    snprintf(e->uuid, sizeof(e->uuid), "%s", run->gpu.uuid);
    snprintf(e->pci, sizeof(e->pci), "%s", run->gpu.pci);
}

/* Fetches rank r's entry; returns 0, 1 when it is missing, or a recorded error. */
static int fetch_entry(struct pf_run *run, int r, double deadline, struct gpu_entry *e)
{
    char key[64], val[PF_HOST_MAX + 128];
    size_t len = 0;
    int rc;

    snprintf(key, sizeof(key), "pf/gpu/%d", r);
    rc = pf_kv_get_until(run, key, val, sizeof(val) - 1, &len, deadline);
    if (rc == -ETIMEDOUT || rc == -ENOENT)
        return 1;
    if (rc < 0)
        return rc;
    val[len] = '\0';
    e->rank = r;
    if (parse_gpu_value(val, e) < 0)
        return pf_fail(run, PFG_EXIT_START, -EPROTO, "malformed value of %s: \"%.200s\"", key, val);
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const struct gpu_entry *x = a, *y = b;
    int c = strcmp(x->uuid, y->uuid);

    if (c != 0)
        return c;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Sorts e[] by (uuid, rank) and reports the duplicate pair with the lowest rank, so every rank
 * prints the same message. Returns 0 or the recorded PFG_EXIT_CHECK error. */
static int check_duplicates(struct pf_run *run, struct gpu_entry *e, int n)
{
    int best = -1;

    qsort(e, (size_t)n, sizeof(*e), cmp_entry);
    for (int i = 0; i + 1 < n; i++) {
        if (strcmp(e[i].uuid, e[i + 1].uuid) != 0)
            continue;
        if (best < 0 || e[i].rank < e[best].rank)
            best = i;
        while (i + 1 < n && strcmp(e[i].uuid, e[i + 1].uuid) == 0)
            i++; /* one report per GPU: its two lowest ranks */
    }
    if (best < 0)
        return 0;
    return pf_fail(run, PFG_EXIT_CHECK, -EBUSY,
                   "ranks %d (%s, GPU %d, %s, %s) and %d (%s, GPU %d, %s, %s) use the same GPU",
                   e[best].rank, e[best].host, e[best].dev, e[best].uuid, e[best].pci,
                   e[best + 1].rank, e[best + 1].host, e[best + 1].dev, e[best + 1].uuid,
                   e[best + 1].pci);
}

static void note_reduced(struct pf_run *run, int min_rank)
{
    if (run->max_bytes >= run->opts.max_bytes)
        return;
    snprintf(run->note, sizeof(run->note),
             "max-bytes reduced from %" PRIu64 " to %" PRIu64
             ": cudaMalloc of a larger buffer failed on rank %d",
             run->opts.max_bytes, run->max_bytes, min_rank);
}

int pf_kv_check_gpus(struct pf_run *run)
{
    int n = run->env.world, missing = 0, min_rank = run->env.rank, rc = 0;
    double deadline = mc_mono_ms_f() + run->opts.timeout_ms;
    struct gpu_entry *e = calloc((size_t)n, sizeof(*e));
    char list[1536] = "", desc[600];

    if (e == NULL)
        return pf_fail(run, PFG_EXIT_START, -ENOMEM, "out of memory (%d ranks)", n);
    run->max_bytes = run->buf_bytes;
    for (int r = 0; r < n; r++) {
        if (r == run->env.rank) {
            own_entry(run, &e[r]);
            continue;
        }
        /* After the deadline the remaining look-ups are non-blocking: all missing get named. */
        rc = fetch_entry(run, r, deadline, &e[r]);
        if (rc < 0)
            goto out;
        if (rc == 1) {
            if (++missing <= LIST_SHOWN) {
                pf_kv_rank_desc(run, r, desc, sizeof(desc));
                append(list, sizeof(list), "%s%s", missing > 1 ? ", " : "", desc);
            }
            continue;
        }
        uint64_t mem = peek_mem(run, r);
        if (mem >= run->opts.min_bytes && mem < run->max_bytes) {
            run->max_bytes = mem;
            min_rank = r;
        }
    }
    if (missing > 0) {
        if (missing > LIST_SHOWN)
            append(list, sizeof(list), " and %d more", missing - LIST_SHOWN);
        rc = pf_fail(run, PFG_EXIT_MISSING, -ETIMEDOUT, "%s never arrived within %g s", list,
                     run->opts.timeout_ms / 1000.0);
        goto out;
    }
    rc = check_duplicates(run, e, n);
    if (rc == 0)
        note_reduced(run, min_rank);
out:
    free(e);
    return rc < 0 ? rc : 0;
}

int pf_kv_list_missing(struct pf_run *run, const char *prefix, int first, int n, int self,
                       char *out, size_t cap)
{
    char key[MUSTER_KEY_MAX + 1], buf[16], desc[600];
    int missing = 0;

    out[0] = '\0';
    for (int r = first; r < first + n; r++) {
        size_t len = 0;
        int rc;

        if (r == self)
            continue;
        snprintf(key, sizeof(key), "%s/%d", prefix, r);
        rc = muster_kv_get(run->m, key, buf, sizeof(buf), &len, 0);
        if (rc == 0 || rc == -ENOBUFS)
            continue;
        if (rc != -ENOENT) {
            append(out, cap, "%s(could not ask the server: %s)", missing ? " " : "",
                   muster_strerror(rc));
            return missing + 1;
        }
        if (++missing <= LIST_SHOWN) {
            pf_kv_rank_desc(run, r, desc, sizeof(desc));
            append(out, cap, "%s%s", missing > 1 ? ", " : "", desc);
        }
    }
    if (missing > LIST_SHOWN)
        append(out, cap, " and %d more", missing - LIST_SHOWN);
    return missing;
}

void pf_kv_report_error(struct pf_run *run)
{
    char key[64];

    if (run->m == NULL || run->error[0] == '\0')
        return;
    snprintf(key, sizeof(key), "pf/error/%d", run->env.rank);
    (void)muster_kv_put(run->m, key, run->error, strlen(run->error));
}
