/* HTTP/1.0 port of the rendezvous server: /metrics, /status and the dashboard (/, /app.js,
 * /style.css: docs/DASHBOARD.md). One request per connection; the response is written whole and
 * the connection closed. Read-only by design: nothing here can change a job. /metrics is public
 * (counts only, no host or address), and so are the dashboard's files (fixed text compiled in,
 * no data: the page fetches /status); /status shows hosts and addresses, so it needs an observer
 * credential unless the operator made it public. HTTP has no TLS here: the credential crosses
 * the network in clear, which is why the port binds loopback unless told otherwise and why only
 * a read-only credential belongs in it. */
#include "http.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "escape.h"
#include "cred.h"
#include "handler.h"
#include "server.h"
#include "service.h"
#include "status.h"
#include "tls.h"

/* rendezvous/dash/ as C strings (cmake/embed.cmake) */
#include "dash_app_js.inc"
#include "dash_index_html.inc"
#include "dash_style_css.inc"

/* --- parser ---------------------------------------------------------------------------------- */

/* The end of the head (after the empty line), or NULL. */
static const char *head_end(const char *buf, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return buf + i + 2;
        if (buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n')
            return buf + i + 3;
    }
    return NULL;
}

/* Copies the token at *p up to a space into dst (max bytes); fails on empty or too long. */
static int token(const char **p, const char *end, char *dst, size_t max)
{
    size_t n = 0;

    while (*p < end && **p != ' ' && **p != '\r' && **p != '\n') {
        if (n == max || !isgraph((unsigned char)**p))
            return -EINVAL;
        dst[n++] = *(*p)++;
    }
    dst[n] = '\0';
    return n > 0 ? 0 : -EINVAL;
}

int rdzv_http_parse(const char *buf, size_t len, struct rdzv_http_req *req)
{
    const char *end = head_end(buf, len), *p = buf, *q;
    char version[16];

    if (end == NULL)
        return len >= RDZV_HTTP_HEAD_MAX ? -EMSGSIZE : -EAGAIN;
    if (end - buf > RDZV_HTTP_HEAD_MAX)
        return -EMSGSIZE;
    if (token(&p, end, req->method, RDZV_HTTP_METHOD_MAX) < 0 || *p++ != ' ')
        return -EINVAL;
    if (token(&p, end, req->path, RDZV_HTTP_PATH_MAX) < 0 || *p++ != ' ')
        return -EINVAL;
    if (token(&p, end, version, sizeof(version) - 1) < 0)
        return -EINVAL;
    if (strcmp(version, "HTTP/1.0") != 0 && strcmp(version, "HTTP/1.1") != 0)
        return -EINVAL;
    if (*p == '\r')
        p++;
    if (*p != '\n' || req->path[0] != '/')
        return -EINVAL;
    q = strchr(req->path, '?');
    req->query[0] = '\0';
    if (q != NULL) {
        memcpy(req->query, q + 1, strlen(q + 1) + 1);
        req->path[q - req->path] = '\0';
    }
    return 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

int rdzv_http_query(const char *q, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);

    while (q != NULL && *q != '\0') {
        const char *end = strchr(q, '&');
        size_t len = end != NULL ? (size_t)(end - q) : strlen(q);

        if (len > n && strncmp(q, name, n) == 0 && q[n] == '=') {
            size_t o = 0;

            for (size_t i = n + 1; i < len; i++) {
                int c = (unsigned char)q[i];

                if (c == '+') {
                    c = ' ';
                } else if (c == '%') {
                    if (i + 2 >= len)
                        return -EINVAL; /* fewer than two hex digits left */
                    int h = hexval(q[i + 1]), l = hexval(q[i + 2]);

                    if (h < 0 || l < 0)
                        return -EINVAL;
                    c = h * 16 + l;
                    i += 2;
                }
                if (c == 0 || o + 1 >= outlen)
                    return -EINVAL;
                out[o++] = (char)c;
            }
            out[o] = '\0';
            return 0;
        }
        q = end != NULL ? end + 1 : NULL;
    }
    return -ENOENT;
}

int rdzv_http_header(const char *buf, size_t len, const char *name, char *out, size_t outlen)
{
    const char *end = head_end(buf, len), *p = buf;
    size_t n = strlen(name);

    if (end == NULL || outlen == 0)
        return -ENOENT;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL && ++p < end) {
        const char *v = p + n + 1, *e = v;

        if ((size_t)(end - p) <= n || strncasecmp(p, name, n) != 0 || p[n] != ':')
            continue;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        for (e = v; e < end && *e != '\r' && *e != '\n';)
            e++;
        while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if ((size_t)(e - v) >= outlen)
            return -EMSGSIZE;
        memcpy(out, v, (size_t)(e - v));
        out[e - v] = '\0';
        return 0;
    }
    return -ENOENT;
}

/* --- connections ---------------------------------------------------------------------------- */
/* A rendered document, served to every request for up to RDZV_HTTP_CACHE_MS: building /status
 * walks every job and node on the loop (0.1 s at 4,096 jobs), and requests are unauthenticated
 * (/metrics) or cheap to repeat, so their rate must not set the loop's load. */
struct http_doc {
    char *body;
    size_t len;
    uint64_t built_ms;
};

enum { DOC_METRICS, DOC_STATUS, DOC_COUNT_ };

struct rdzv_http {
    uv_tcp_t listener;
    struct rdzv_server *srv;
    struct http_conn *conns, *tail; /* newest first; tail: the oldest */
    unsigned n;                     /* connections not closing (http_max_connections) */
    struct http_doc docs[DOC_COUNT_];
    int closing;
    /* The listener and each connection hold one reference; freed at 0. The listener's close
     * callback used to free this while connections closed in the same loop turn still had to
     * unlink themselves from it (libuv runs close callbacks newest first): a use-after-free
     * on every server close with an HTTP connection open (SIGTERM to `muster server`). */
    unsigned refs;
    /* GET /logs is built per request (a tail of a job's ring): at most LOGS_PER_S a second */
    uint64_t logs_window_ms;
    unsigned logs_in_window;
};

struct http_conn {
    uv_tcp_t tcp;
    uv_timer_t idle;
    uv_write_t write;
    uv_shutdown_t shutdown;
    struct rdzv_http *http;
    struct http_conn *prev, *next;
    unsigned open; /* tcp and idle */
    int done;      /* a response was queued: ignore further input */
    int closed;    /* conn_close() ran: no longer in h->n */
    char *response;
    size_t len;
    char head[RDZV_HTTP_HEAD_MAX];
};

/* Drops one reference of h; the last frees it. Also one server handle count each. */
static void http_unref(struct rdzv_http *h)
{
    struct rdzv_server *srv = h->srv;

    if (--h->refs == 0) {
        for (int i = 0; i < DOC_COUNT_; i++)
            free(h->docs[i].body);
        free(h);
    }
    rdzv__handle_closed(srv); /* may free srv: the last thing done */
}

static void conn_release(uv_handle_t *handle)
{
    struct http_conn *c = handle->data;
    struct rdzv_http *h = c->http;

    if (--c->open > 0)
        return;
    free(c->response);
    free(c);
    http_unref(h); /* one count per connection */
}

/* A closing connection leaves the list at once, not in its close callback: one accept burst
 * evicts thousands, and evict_oldest() must not walk over the ones still closing (that walk was
 * quadratic: 96 % of the server's CPU under a flood, and /metrics went unanswered). */
static void conn_close(struct http_conn *c)
{
    struct rdzv_http *h = c->http;

    if (!c->closed) {
        h->n--;
        if (c->prev != NULL)
            c->prev->next = c->next;
        else
            h->conns = c->next;
        if (c->next != NULL)
            c->next->prev = c->prev;
        else
            h->tail = c->prev;
        c->prev = c->next = NULL;
    }
    c->closed = 1;
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, conn_release);
    if (!uv_is_closing((uv_handle_t *)&c->idle))
        uv_close((uv_handle_t *)&c->idle, conn_release);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
    (void)status;
    conn_close(req->data);
}

static void write_cb(uv_write_t *req, int status)
{
    struct http_conn *c = req->data;

    c->shutdown.data = c;
    if (status < 0 || uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, shutdown_cb) < 0)
        conn_close(c);
}

/* Queues the whole response (head + body unless HEAD) and closes once it is written; extra: more
 * header lines, each ending in CRLF ("" none). */
static void respond_extra(struct http_conn *c, int code, const char *reason, const char *ctype,
                          const char *extra, const char *body, size_t blen, int head_only)
{
    FILE *f = open_memstream(&c->response, &c->len);
    uv_buf_t buf;

    c->done = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (f == NULL) {
        conn_close(c);
        return;
    }
    /* every response: never cached (the JSON is live), never sniffed as another type, never
     * framed, and no script but the dashboard's own file (CSP: no inline script or style) */
    fprintf(f,
            "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
            "Content-Security-Policy: %s\r\nReferrer-Policy: no-referrer\r\n"
            "X-Frame-Options: DENY\r\nConnection: close\r\n%s\r\n",
            code, reason, ctype, blen, RDZV_HTTP_CSP, extra);
    if (!head_only)
        fwrite(body, 1, blen, f);
    if (fclose(f) != 0) {
        conn_close(c);
        return;
    }
    buf = uv_buf_init(c->response, (unsigned)c->len);
    c->write.data = c;
    if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &buf, 1, write_cb) < 0)
        conn_close(c);
}

static void respond(struct http_conn *c, int code, const char *reason, const char *ctype,
                    const char *body, size_t blen, int head_only)
{
    respond_extra(c, code, reason, ctype, "", body, blen, head_only);
}

static void respond_text(struct http_conn *c, int code, const char *reason, int head_only)
{
    char body[64];
    int n = snprintf(body, sizeof(body), "%d %s\n", code, reason);

    respond(c, code, reason, "text/plain; charset=utf-8", body, (size_t)n, head_only);
}

/* --- documents ------------------------------------------------------------------------------- */
static void metric(FILE *f, const char *name, const char *type, const char *help, double v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.15g\n", name, help, name, type, name, v);
}

/* One family with a sample per label; every label is written, zeros too, so that dashboards
 * and alerts see the series before the first hit. */
static void event_family(FILE *f, const struct rdzv_server *srv, const char *name,
                         const char *label_name, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int ev = 0; ev < SRV_EV_COUNT_; ev++) {
        const char *family, *label;

        rdzv__event_metric(ev, &family, &label);
        if (strcmp(family, name) == 0)
            fprintf(f, "%s{%s=\"%s\"} %llu\n", name, label_name, label,
                    (unsigned long long)srv->stats.events[ev]);
    }
}

struct totals {
    uint64_t nodes, kv_keys, bytes_in, bytes_out;
    double lateness_s;
};

static void sum_up(struct rdzv_server *srv, struct totals *t)
{
    uint64_t now = uv_now(srv->loop);

    memset(t, 0, sizeof(*t));
    for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next) {
        t->nodes += sj->job->n_members + sj->job->n_pending;
        t->kv_keys += rdzv_kv_keys(sj->kv);
    }
    t->bytes_in = srv->stats.bytes_received_total;
    t->bytes_out = srv->stats.bytes_sent_total;
    for (struct peer *p = srv->peers; p != NULL; p = p->next) {
        uint64_t late = now - p->last_seen_ms;

        t->bytes_in += p->conn.bytes_in;
        t->bytes_out += p->conn.bytes_out;
        if (p->hb_timeout_ms == 0 || p->job == NULL || late <= p->keep_alive_ms)
            continue;
        late -= p->keep_alive_ms;
        if (late / 1000.0 > t->lateness_s)
            t->lateness_s = late / 1000.0;
    }
}

/* The pre-flight's per-GPU figures as their agents reported them, every job. */
static void preflight_families(FILE *f, struct rdzv_server *srv)
{
    static const struct {
        const char *which, *name, *help;
    } fam[] = {
        {"gemm", "muster_preflight_gpu_gemm_tflops", "Pre-flight bf16 GEMM per GPU, TFLOP/s."},
        {"hbm", "muster_preflight_gpu_hbm_gbps",
         "Pre-flight HBM device copy per GPU, GB/s (read + write)."},
        {"level", "muster_preflight_gpu_level",
         "Pre-flight verdict per GPU: 0 ok, 1 warning, 2 failure."},
        {"p2p", "muster_preflight_p2p_min_gbps",
         "Pre-flight slowest peer-to-peer copy between two GPUs of a node, GB/s."},
    };

    for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", fam[i].name, fam[i].help, fam[i].name);
        for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next)
            rdzv_pfrec_metrics(f, sj->job->id, &sj->pfrec, fam[i].which);
    }
}

/* Where each job's time went, as its node of group rank 0 last reported it (GOODPUT). */
static void goodput_families(FILE *f, struct rdzv_server *srv)
{
    fputs("# HELP muster_job_seconds Seconds of the job per phase (rendezvous, preflight, "
          "startup, training, stopping, restart_wait; lost: the part of training redone after "
          "restarts; wall: their sum), as the node of group rank 0 last reported them.\n"
          "# TYPE muster_job_seconds gauge\n",
          f);
    for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next)
        if (sj->have_gp)
            rdzv_goodput_metrics(f, sj->job->id, &sj->gp, 0);
    fputs("# HELP muster_job_goodput_ratio (training - lost) / wall of the job.\n"
          "# TYPE muster_job_goodput_ratio gauge\n",
          f);
    for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next)
        if (sj->have_gp)
            rdzv_goodput_metrics(f, sj->job->id, &sj->gp, 1);
}

/* Each job's log (handler_log.c, docs/OUTPUT.md "One log for the job"). */
static void log_families(FILE *f, struct rdzv_server *srv)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"muster_job_log_lines_total", "counter", "Output lines taken into the job's log."},
        {"muster_job_log_bytes_total", "counter", "Bytes of those lines."},
        {"muster_job_log_dropped_total", "counter",
         "Output lines dropped: reason rate (over the job's or a rank's rate cap), ring (pushed "
         "out of the job's ring by newer lines), agent (the agents' own queues and per-rank "
         "caps), foreign (of ranks the sending node does not hold)."},
        {"muster_job_log_held_bytes", "gauge", "Bytes the job's ring holds now."},
    };

    for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam[i].name, fam[i].help, fam[i].name,
                fam[i].type);
        for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next) {
            struct rdzv_logring_stats st = {0};

            if (sj->logs == NULL && sj->log_foreign == 0)
                continue;
            if (sj->logs != NULL)
                rdzv_logring_stats(sj->logs, &st);
            if (i == 2) {
                const char *why[] = {"rate", "ring", "agent", "foreign"};
                uint64_t v[] = {st.dropped_rate, st.dropped_ring, st.dropped_agents,
                                sj->log_foreign};
                for (size_t k = 0; k < 4; k++) {
                    fprintf(f, "%s{job=\"", fam[i].name);
                    mc_prom_label(f, sj->job->id);
                    fprintf(f, "\",reason=\"%s\"} %llu\n", why[k], (unsigned long long)v[k]);
                }
                continue;
            }
            fprintf(f, "%s{job=\"", fam[i].name);
            mc_prom_label(f, sj->job->id);
            fprintf(f, "\"} %llu\n",
                    (unsigned long long)(i == 0   ? st.lines
                                         : i == 1 ? st.bytes
                                                  : st.held_bytes));
        }
    }
}

/* Per rank: the GPU memory of its processes (a rank's worker and its descendants) on each GPU,
 * from its node's latest sample; two of a rank's processes on one GPU add up to the one series
 * of (job, rank, node, gpu). */
static void rank_families(FILE *f, struct rdzv_server *srv)
{
    fputs("# HELP muster_rank_gpu_memory_bytes GPU memory held by a rank's processes, per GPU.\n"
          "# TYPE muster_rank_gpu_memory_bytes gauge\n",
          f);
    for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next) {
        for (size_t m = 0; m < sj->job->n_members; m++) {
            const struct peer *p = sj->job->members[m].peer;
            const struct rdzv_telemetry *t = p != NULL ? p->tel : NULL;

            for (uint32_t g = 0; t != NULL && g < t->ngpus; g++) {
                const struct rdzv_tel_gpu *x = &t->gpus[g];

                for (uint32_t k = 0; k < x->nprocs; k++) {
                    uint64_t sum = 0;
                    int first = 1, rank = x->procs[k].rank;

                    if (rank < 0)
                        continue;
                    for (uint32_t j = 0; j < k && first; j++)
                        first = x->procs[j].rank != rank;
                    if (!first)
                        continue; /* that rank's series is out already */
                    for (uint32_t j = k; j < x->nprocs; j++)
                        if (x->procs[j].rank == rank && x->procs[j].mem != UINT64_MAX)
                            sum += x->procs[j].mem;
                    fprintf(f, "muster_rank_gpu_memory_bytes{job=\"");
                    mc_prom_label(f, sj->job->id);
                    fprintf(f, "\",rank=\"%d\",node=\"", rank);
                    mc_prom_label(f, sj->job->members[m].host);
                    fprintf(f, "\",gpu=\"%u\"} %.15g\n", x->gpu, (double)sum);
                }
            }
        }
    }
}

/* The latest TELEMETRY of each member (handler_tel.c, docs/TELEMETRY.md): per job, node, GPU. */
static void gpu_families(FILE *f, struct rdzv_server *srv)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"muster_gpu_utilization_ratio", "GPU utilisation, 0 to 1, as NVML last reported it."},
        {"muster_gpu_memory_used_bytes", "GPU memory in use."},
        {"muster_gpu_memory_total_bytes", "GPU memory in all."},
        {"muster_gpu_sm_clock_mhz", "SM clock."},
        {"muster_gpu_memory_clock_mhz", "Memory clock."},
        {"muster_gpu_temperature_celsius", "GPU temperature."},
        {"muster_gpu_power_watts", "Power draw."},
        {"muster_gpu_throttle_reasons", "NVML clocks event reasons (bits; 0: none)."},
        {"muster_gpu_processes", "Compute processes on the GPU."},
        {"muster_gpu_last_xid", "The last Xid critical error event of the GPU (0: none)."},
        {"muster_gpu_ecc_errors", "Volatile uncorrected ECC errors."},
    };

    for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", fam[i].name, fam[i].help, fam[i].name);
        for (struct sjob *sj = srv->jobs; sj != NULL; sj = sj->next) {
            for (size_t m = 0; m < sj->job->n_members; m++) {
                const struct peer *p = sj->job->members[m].peer;
                const struct rdzv_telemetry *t = p != NULL ? p->tel : NULL;

                for (uint32_t g = 0; t != NULL && g < t->ngpus; g++) {
                    const struct rdzv_tel_gpu *x = &t->gpus[g];
                    double v[] = {x->util / 100.0,
                                  (double)x->mem_used,
                                  (double)x->mem_total,
                                  x->sm_clock,
                                  x->mem_clock,
                                  x->temp,
                                  x->power_mw / 1e3,
                                  (double)x->throttle,
                                  x->nprocs,
                                  x->xid,
                                  (double)x->ecc};
                    int64_t known[] = {
                        x->util, 0, 0, x->sm_clock, x->mem_clock, x->temp, x->power_mw, 0, 0, 0, 0};

                    if (known[i] < 0)
                        continue;
                    fprintf(f, "%s{job=\"", fam[i].name);
                    mc_prom_label(f, sj->job->id);
                    fprintf(f, "\",node=\"");
                    mc_prom_label(f, sj->job->members[m].host);
                    fprintf(f, "\",gpu=\"%u\"} %.15g\n", x->gpu, v[i]);
                }
            }
        }
    }
    rank_families(f, srv);
}

static char *metrics_text(struct rdzv_server *srv, size_t *len)
{
    const struct rdzv_server_stats *st = &srv->stats;
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    struct totals t;

    if (f == NULL)
        return NULL;
    sum_up(srv, &t);
    metric(f, "muster_jobs", "gauge", "Jobs the server holds.", srv->n_jobs);
    metric(f, "muster_nodes", "gauge", "Nodes in the jobs' rounds, waiting ones included.",
           (double)t.nodes);
    metric(f, "muster_rounds_total", "counter", "Rounds assigned.", (double)st->rounds_total);
    metric(f, "muster_restarts_total", "counter", "Restarts counted against max_restarts.",
           (double)st->restarts_total);
    metric(f, "muster_lost_nodes_total", "counter", "Nodes lost by close or silence.",
           (double)st->lost_nodes_total);
    metric(f, "muster_connections", "gauge", "Open protocol connections.", srv->n_peers);
    metric(f, "muster_bytes_received_total", "counter", "Protocol bytes received.",
           (double)t.bytes_in);
    metric(f, "muster_bytes_sent_total", "counter", "Protocol bytes sent.", (double)t.bytes_out);
    metric(f, "muster_heartbeat_lateness_seconds", "gauge",
           "Max over agents of now - last seen - keep-alive interval, floored at 0.", t.lateness_s);
    metric(f, "muster_kv_keys", "gauge", "Keys in the workers' KV stores.", (double)t.kv_keys);
    metric(f, "muster_kv_bytes", "gauge",
           "KV bytes of all jobs as charged against the server's total (key + value + "
           "per-key overhead).",
           (double)srv->kv_pool.bytes);
    metric(f, "muster_kv_bytes_limit", "gauge", "The server's total for KV bytes.",
           (double)srv->limits.kv_max_total_bytes);
    metric(f, "muster_jobs_limit", "gauge", "Jobs the server may hold.", srv->limits.max_jobs);
    metric(f, "muster_connections_limit", "gauge", "Open protocol connections allowed.",
           srv->limits.max_connections);
    metric(f, "muster_http_requests_total", "counter", "HTTP requests served.",
           (double)srv->stats.http_requests_total);
    /* the pre-authentication pool and the HTTP port's connections */
    metric(f, "muster_preauth_connections", "gauge",
           "Protocol connections not yet authenticated (accepted, HELLO not accepted).",
           srv->n_pre);
    metric(f, "muster_preauth_connections_limit", "gauge",
           "Unauthenticated connections allowed at once (the oldest idle goes for a new one).",
           srv->limits.preauth_max);
    metric(f, "muster_http_connections", "gauge", "Open HTTP connections.",
           srv->http != NULL ? srv->http->n : 0);
    metric(f, "muster_http_connections_limit", "gauge", "HTTP connections allowed at once.",
           srv->limits.http_max_connections);
    event_family(f, srv, "muster_limit_hits_total", "limit",
                 "Connections or requests refused by a resource limit.");
    event_family(f, srv, "muster_auth_failures_total", "reason",
                 "Connections refused for authentication or job scope.");
    event_family(f, srv, "muster_protocol_errors_total", "reason",
                 "Connections closed for a malformed frame or a message out of order.");
    metric(f, "muster_log_suppressed_total", "counter",
           "Refusals not logged because their address was logged already.",
           (double)srv->stats.log_suppressed);
    metric(f, "muster_read_pauses_total", "counter",
           "Times a connection stopped reading for a turn after 128 messages in a row, so that "
           "other peers were read first.",
           (double)srv->fair.deferrals);
    preflight_families(f, srv);
    goodput_families(f, srv);
    log_families(f, srv);
    gpu_families(f, srv);
    return fclose(f) == 0 ? text : (free(text), NULL);
}

static char *status_text(struct rdzv_server *srv, size_t *len)
{
    size_t cap = 16u << 20; /* no frame limit here; nodes are dropped only past 16 MiB */
    char *buf = malloc(cap);

    if (buf != NULL && rdzv_status_json(srv, NULL, buf, cap, len) < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* --- requests ------------------------------------------------------------------------------- */

/* Document which of h, rebuilt when older than RDZV_HTTP_CACHE_MS. Borrowed; NULL when it
 * cannot be built (out of memory). */
static const struct http_doc *doc_get(struct rdzv_http *h, int which)
{
    struct http_doc *d = &h->docs[which];
    uint64_t now = uv_now(h->srv->loop);
    char *body;
    size_t len = 0;

    if (d->body != NULL && now - d->built_ms < RDZV_HTTP_CACHE_MS)
        return d;
    body = which == DOC_METRICS ? metrics_text(h->srv, &len) : status_text(h->srv, &len);
    if (body == NULL)
        return d->body != NULL ? d : NULL; /* the older one rather than none */
    free(d->body);
    d->body = body;
    d->len = len;
    d->built_ms = now;
    return d;
}

/* Whether the request's "Authorization: Bearer CRED" is the server's observer credential, or
 * its secret itself: 1 yes, 0 no. Keys are compared in constant time. */
static int observer_ok(struct rdzv_server *srv, const char *head, size_t hlen)
{
    const unsigned char *master = rdzv_tls_master(srv->tls);
    char value[RDZV_CRED_TEXT_MAX + 32], err[128];
    unsigned char m[RDZV_KEY_LEN];
    struct rdzv_cred given = {0}, obs = {0};
    int ok = 0;

    if (master == NULL || rdzv_http_header(head, hlen, "Authorization", value, sizeof(value)) < 0 ||
        strncasecmp(value, "Bearer ", 7) != 0 ||
        rdzv_cred_parse(value + 7, &given, err, sizeof(err)) < 0)
        return 0;
    if (given.kind == RDZV_CRED_OBSERVER &&
        rdzv_cred_derive(master, RDZV_CRED_OBSERVER, NULL, &obs) == 0)
        ok = rdzv_cred_equal(given.key, obs.key, RDZV_KEY_LEN);
    else if (given.kind == RDZV_CRED_SERVER && srv->has_token) {
        rdzv_cred_master(value + 7, m);
        ok = rdzv_cred_equal(m, master, RDZV_KEY_LEN);
    }
    rdzv_cred_wipe(&given);
    rdzv_cred_wipe(&obs);
    memset(m, 0, sizeof(m));
    memset(value, 0, sizeof(value));
    return ok;
}

/* /status without a credential: 401 with the way to get one, or 403 on a server that has
 * no secret (certificate mode without a token: no observer credential exists). Returns 1 when
 * the request may be served. */
static int status_allowed(struct http_conn *c, const char *head, size_t hlen, int head_only)
{
    struct rdzv_server *srv = c->http->srv;
    char addr[INET6_ADDRSTRLEN];
    static const char hint401[] =
        "401 Unauthorized: send 'Authorization: Bearer <observer credential>' (muster token "
        "--read-only) or start the server with --http-public-status\n";
    static const char hint403[] =
        "403 Forbidden: this server has no token, so no observer credential exists; start it "
        "with --http-public-status to serve /status\n";

    if (srv->http_public_status || (srv->has_token && observer_ok(srv, head, hlen)))
        return 1;
    rdzv__tcp_addr(&c->tcp, addr, sizeof(addr));
    rdzv__event(srv, SRV_EV_HTTP_STATUS_AUTH, addr, "HTTP /status without an observer credential");
    if (srv->has_token)
        respond(c, 401, "Unauthorized", "text/plain; charset=utf-8", hint401, sizeof(hint401) - 1,
                head_only);
    else
        respond(c, 403, "Forbidden", "text/plain; charset=utf-8", hint403, sizeof(hint403) - 1,
                head_only);
    return 0;
}

/* the page's icon (without one a browser asks for /favicon.ico and logs the 404) */
static const char favicon_svg[] =
    "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\"><rect width=\"16\" "
    "height=\"16\" rx=\"3\" fill=\"#1e5fb3\"/><path d=\"M3 12V4l5 5 5-5v8\" fill=\"none\" "
    "stroke=\"#fff\" stroke-width=\"2\"/></svg>\n";

/* The dashboard's files: fixed text, public (no data; the page asks /status for it). */
static const struct {
    const char *path, *ctype, *body;
    size_t len;
} assets[] = {
    {"/", "text/html; charset=utf-8", dash_index_html, sizeof(dash_index_html) - 1},
    {"/index.html", "text/html; charset=utf-8", dash_index_html, sizeof(dash_index_html) - 1},
    {"/app.js", "text/javascript; charset=utf-8", dash_app_js, sizeof(dash_app_js) - 1},
    {"/style.css", "text/css; charset=utf-8", dash_style_css, sizeof(dash_style_css) - 1},
    {"/favicon.svg", "image/svg+xml", favicon_svg, sizeof(favicon_svg) - 1},
};

/* GET /logs?job=J[&rank=R][&n=N]: the newest N (1..LOGS_MAX_LINES, default 50) lines of rank R
 * (default: every rank) of job J, as JSON (rdzv__log_tail). Built per request, so at most
 * LOGS_PER_S a second over all connections: more get 429 with Retry-After. */
#define LOGS_PER_S 50
#define LOGS_MAX_LINES 200

/* The query's number name into *out when present (else *out stays): 0, or -EINVAL when it is not
 * a whole number from lo to hi. */
static int query_num(const char *q, const char *name, long lo, long hi, long *out)
{
    char v[32], *end;
    int rc = rdzv_http_query(q, name, v, sizeof(v));
    long n;

    if (rc == -ENOENT)
        return 0;
    if (rc != 0)
        return rc;
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi)
        return -EINVAL;
    *out = n;
    return 0;
}

static void serve_logs(struct http_conn *c, const struct rdzv_http_req *req, int only)
{
    struct rdzv_http *h = c->http;
    uint64_t now = uv_now(h->srv->loop);
    char job[RDZV_ID_MAX + 1], *text;
    long rank = -1, n = 50;
    int status;

    if (now - h->logs_window_ms >= 1000) {
        h->logs_window_ms = now;
        h->logs_in_window = 0;
    }
    if (++h->logs_in_window > LOGS_PER_S) {
        static const char busy[] = "429 Too Many Requests: /logs at most 50 times a second\n";

        respond_extra(c, 429, "Too Many Requests", "text/plain; charset=utf-8",
                      "Retry-After: 1\r\n", busy, sizeof(busy) - 1, only);
        return;
    }
    if (rdzv_http_query(req->query, "job", job, sizeof(job)) != 0 || job[0] == '\0' ||
        query_num(req->query, "rank", -1, INT32_MAX, &rank) != 0 ||
        query_num(req->query, "n", 1, LOGS_MAX_LINES, &n) != 0) {
        respond_text(c, 400, "Bad Request", only);
        return;
    }
    if ((text = rdzv__log_tail(h->srv, job, (int32_t)rank, (size_t)n, &status)) == NULL) {
        if (status == 404)
            respond_text(c, 404, "Not Found", only);
        else if (status == 400)
            respond_text(c, 400, "Bad Request", only);
        else
            respond_text(c, 500, "Internal Server Error", only);
        return;
    }
    respond(c, 200, "OK", "application/json", text, strlen(text), only);
    free(text);
}

static void serve(struct http_conn *c, const struct rdzv_http_req *req, const char *head,
                  size_t hlen)
{
    struct rdzv_server *srv = c->http->srv;
    int only = strcmp(req->method, "HEAD") == 0, which;
    const struct http_doc *d;
    const char *ctype;

    srv->stats.http_requests_total++;
    if (!only && strcmp(req->method, "GET") != 0) {
        respond_text(c, 405, "Method Not Allowed", 0);
        return;
    }
    if (strcmp(req->path, "/logs") == 0) {
        if (status_allowed(c, head, hlen, only))
            serve_logs(c, req, only);
        return;
    }
    if (strcmp(req->path, "/metrics") == 0) {
        which = DOC_METRICS;
        ctype = "text/plain; version=0.0.4; charset=utf-8";
    } else if (strcmp(req->path, "/status") == 0) {
        which = DOC_STATUS;
        ctype = "application/json";
    } else {
        for (size_t i = 0; i < sizeof(assets) / sizeof(assets[0]); i++)
            if (strcmp(req->path, assets[i].path) == 0) {
                respond(c, 200, "OK", assets[i].ctype, assets[i].body, assets[i].len, only);
                return;
            }
        respond_text(c, 404, "Not Found", only);
        return;
    }
    if (which != DOC_METRICS && !status_allowed(c, head, hlen, only))
        return;
    if ((d = doc_get(c->http, which)) == NULL)
        respond_text(c, 500, "Internal Server Error", only);
    else
        respond(c, 200, "OK", ctype, d->body, d->len, only);
}

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct http_conn *c = handle->data;

    (void)suggested;
    *buf = uv_buf_init(c->head + c->len, (unsigned)(sizeof(c->head) - c->len));
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct http_conn *c = stream->data;
    struct rdzv_http_req req;
    int err;

    (void)buf;
    if (c->done || nread == 0)
        return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    size_t hlen;

    c->len += (size_t)nread;
    err = rdzv_http_parse(c->head, c->len, &req);
    if (err == -EAGAIN && c->len < sizeof(c->head))
        return;
    hlen = c->len;
    c->len = 0; /* c->head is reused for nothing else; respond() builds its own buffer */
    if (err == 0)
        serve(c, &req, c->head, hlen);
    else if (err == -EMSGSIZE || err == -EAGAIN)
        respond_text(c, 431, "Request Header Fields Too Large", 0);
    else
        respond_text(c, 400, "Bad Request", 0);
}

static void idle_cb(uv_timer_t *t)
{
    conn_close(t->data); /* slowloris: a head that never completes */
}

/* Bytes wait in c's socket that the loop has not read yet (a request sent at once). */
static int has_input(struct http_conn *c)
{
    uv_os_fd_t fd;
    char b;

    return uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 &&
           recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

/* Over http_max_connections: the oldest connection still reading its head goes (a silent or
 * slow one: a real client sends its request at once), so that silent connections cost nothing
 * beyond the cap and cannot keep the port from answering. One with unread input is kept: a
 * burst of accepts runs before any read, and a real client accepted early in it must not be
 * evicted by the silent ones after it before its request is read. Returns 0, or -ENOENT when
 * every one is writing its response already (then the new one is refused). */
static int evict_oldest(struct rdzv_http *h)
{
    char addr[INET6_ADDRSTRLEN];
    unsigned spared = 0;

    for (struct http_conn *c = h->tail; c != NULL; c = c->prev) {
        if (c->done || c->closed)
            continue;
        if (c->len == 0 && spared < RDZV_HTTP_SPARE_INPUT && has_input(c)) {
            spared++;
            continue;
        }
        rdzv__tcp_addr(&c->tcp, addr, sizeof(addr));
        rdzv__event(h->srv, SRV_EV_HTTP_CONNECTIONS, addr,
                    "HTTP connection evicted: the oldest idle of %u, for a new one", h->n);
        conn_close(c);
        return 0;
    }
    return -ENOENT;
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct rdzv_http *h = listener->data;
    struct http_conn *c;
    int full;

    if (status < 0 || h->closing)
        return;
    full = h->n >= h->srv->limits.http_max_connections && evict_oldest(h) < 0;
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return;
    uv_tcp_init(h->srv->loop, &c->tcp); /* neither can fail on unix */
    uv_timer_init(h->srv->loop, &c->idle);
    c->tcp.data = c->idle.data = c;
    c->http = h;
    c->open = 2;
    h->refs++;
    h->srv->handles++;
    c->next = h->conns;
    if (h->conns != NULL)
        h->conns->prev = c;
    else
        h->tail = c;
    h->conns = c;
    h->n++;
    if (full && uv_accept(listener, (uv_stream_t *)&c->tcp) == 0) {
        char addr[INET6_ADDRSTRLEN];

        rdzv__tcp_addr(&c->tcp, addr, sizeof(addr));
        rdzv__event(h->srv, SRV_EV_HTTP_CONNECTIONS, addr, "%u HTTP connections answering", h->n);
    }
    if (full || uv_accept(listener, (uv_stream_t *)&c->tcp) < 0 ||
        uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) < 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->idle, idle_cb, RDZV_HTTP_IDLE_MS, 0);
}

static void listener_closed_cb(uv_handle_t *handle)
{
    http_unref(handle->data);
}

void rdzv__http_close(struct rdzv_http *h)
{
    if (h == NULL || h->closing)
        return;
    h->closing = 1;
    for (struct http_conn *c = h->conns, *next; c != NULL; c = next) {
        next = c->next;
        conn_close(c);
    }
    uv_close((uv_handle_t *)&h->listener, listener_closed_cb);
}

int rdzv_server_http_listen(struct rdzv_server *s, const char *host, unsigned port,
                            unsigned *bound_port)
{
    struct sockaddr_storage ss;
    struct rdzv_http *h;
    unsigned bound = 0;
    int err;

    if (s->http != NULL)
        return UV_EALREADY;
    err = rdzv_server_resolve(s->loop, host, port, &ss);
    if (err < 0)
        return err;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return UV_ENOMEM;
    h->srv = s;
    h->refs = 1;                        /* the listener */
    uv_tcp_init(s->loop, &h->listener); /* cannot fail on unix */
    h->listener.data = h;
    s->handles++;
    err = rdzv_server_listen_tcp(&h->listener, &ss, on_connection, &bound);
    if (err < 0) {
        h->closing = 1;
        uv_close((uv_handle_t *)&h->listener, listener_closed_cb);
        return err;
    }
    s->http = h;
    if (bound_port != NULL)
        *bound_port = bound;
    return 0;
}
