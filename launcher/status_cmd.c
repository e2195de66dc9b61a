/* `muster status`: an observer connection that asks the server for its jobs (STATUS_REQ) and
 * prints the answer as a table, or as the raw JSON with --json.
 * `muster debug`: the same connection asks for a running job's evidence (DEBUG_REQ): every
 * rank's stack, taken while the job goes on (rendezvous/handler_ev.c).
 * `muster logs`: the same connection reads the job's one log (LOGS_REQ, answered with LOGS:
 * rendezvous/handler_log.c), again and again with --follow, until the job ends. */
#include "status_cmd.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "agent.h"
#include "conn.h"
#include "endpoint.h"
#include "escape.h"
#include "ids.h"
#include "json.h"
#include "log.h"
#include "logring.h"
#include "clock.h"
#include "secret.h"
#include "tls.h"
#include "token.h"
#include "usertoken.h"

#define STATUS_TIMEOUT_MS 5000
#define DEBUG_TIMEOUT_MS 15000 /* the agents' 5 s and the server's slack, and some */
#define LOGS_POLL_MS 200       /* --follow: the next LOGS_REQ when nothing more was held */
#define LOGS_LINGER_MS 2000    /* --follow: lines that the ended job's agents still send */

struct status_cmd {
    uv_loop_t loop;
    struct rdzv_tls *tls;
    struct rdzv_conn conn;
    uv_connect_t connect;
    uv_getaddrinfo_t gai;
    uv_timer_t timer;
    const char *job_id, *token, *endpoint, *token_file, *tls_cert, *tls_key, *tls_ca;
    char *token_buf; /* --token-file's token, in a secret region (secret.h) */
    int json;
    int debug;       /* muster debug */
    long debug_rank; /* --rank, -1: all */
    int exit_code;
    char *answer; /* the STATUS JSON text */
    /* muster logs */
    int logs, follow, dedup, stamps;
    long logs_rank;    /* --rank, -1: all */
    uint64_t since_ms; /* --since as wall clock, 0: all */
    uint64_t after;    /* the last line printed */
    uint64_t ended_at; /* --follow: uv_now when the job was seen ended, 0: not yet */
    uint64_t dropped;  /* the server's count in the last LOGS */
    int seen;          /* a LOGS came: the job existed */
    int waiting;       /* --follow: the job was not there yet (said once) */
    uv_timer_t poll;
};

static void finish(struct status_cmd *c, int code)
{
    c->exit_code = code;
    uv_timer_stop(&c->timer);
    if (!uv_is_closing((uv_handle_t *)&c->timer))
        uv_close((uv_handle_t *)&c->timer, NULL);
    if (c->logs && !uv_is_closing((uv_handle_t *)&c->poll))
        uv_close((uv_handle_t *)&c->poll, NULL);
    if (!c->conn.closing)
        rdzv_conn_close(&c->conn, 0, NULL);
}

/* One line as muster's console shows it ("[rankN]: ", docs/OUTPUT.md), or with the ranks
 * that said it ("[ranks 0-63]: "). The text is a peer's: controls and invalid UTF-8 are shown
 * escaped (tabs kept), so that it cannot forge lines or drive the terminal. */
static void print_line(void *ctx, const struct rdzv_log_line *ln, const char *text,
                       const char *ranks)
{
    const struct status_cmd *c = ctx;
    char shown[MC_ESCAPE_SIZE(RDZV_LOG_LINE_MAX)];
    size_t i = 0;

    if (c->stamps) {
        time_t s = (time_t)(ln->time_ms / 1000);
        struct tm tm;
        char when[32];

        gmtime_r(&s, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        printf("%s.%03uZ ", when, (unsigned)(ln->time_ms % 1000));
    }
    if (ranks != NULL)
        printf("[ranks %s]: ", ranks);
    else
        printf("[rank%d]: ", (int)ln->rank);
    while (i < ln->len) {
        const char *tab = memchr(text + i, '\t', ln->len - i);
        size_t k = tab ? (size_t)(tab - (text + i)) : ln->len - i;

        mc_escape_n(text + i, k, shown, sizeof(shown), 0);
        fputs(shown, stdout);
        i += k;
        if (tab != NULL) {
            putchar('\t');
            i++;
        }
    }
    putchar('\n');
}

static void logs_request(struct status_cmd *c)
{
    struct rdzv_msg *req = malloc(sizeof(*req));

    if (req == NULL) {
        finish(c, AGENT_EXIT_INTERNAL);
        return;
    }
    rdzv_msg_init(req, RDZV_MSG_LOGS_REQ);
    snprintf(req->u.logs_req.job_id, sizeof(req->u.logs_req.job_id), "%s", c->job_id);
    req->u.logs_req.rank = (int32_t)c->logs_rank;
    req->u.logs_req.after = c->after;
    req->u.logs_req.since_ms = c->since_ms;
    req->u.logs_req.flags = c->follow ? RDZV_LOGS_REQ_FOLLOW : 0;
    if (rdzv_conn_send(&c->conn, req) != 0)
        finish(c, AGENT_EXIT_RDZV);
    free(req);
}

static void on_poll(uv_timer_t *t)
{
    logs_request(t->data);
}

static void on_logs(struct status_cmd *c, const struct rdzv_log *l)
{
    uint64_t now = uv_now(&c->loop);

    if (l->state & RDZV_LOGS_NONE) { /* --follow before the job's first node joined */
        if (!c->waiting++)
            mc_info("job %s is not on the server yet: waiting for it (Ctrl-C to stop)", c->job_id);
        uv_timer_again(&c->timer);
        uv_timer_start(&c->poll, on_poll, LOGS_POLL_MS, 0);
        return;
    }
    c->seen = 1;
    if (l->state & RDZV_LOGS_GAP)
        mc_warn("lines of job %s were lost before the next one shown: the server's ring holds "
                "only the newest",
                c->job_id);
    if (c->dedup)
        rdzv_logs_dedup(l, print_line, c);
    else
        for (uint32_t i = 0; i < l->count; i++)
            print_line(c, &l->lines[i], l->text + l->lines[i].off, NULL);
    fflush(stdout);
    c->after = l->next;
    c->dropped = l->dropped;
    if (l->state & RDZV_LOGS_MORE) {
        logs_request(c);
        return;
    }
    if (!c->follow) {
        finish(c, 0);
        return;
    }
    if ((l->state & RDZV_LOGS_ENDED) && c->ended_at == 0)
        c->ended_at = now;
    if (c->ended_at != 0 && now - c->ended_at >= LOGS_LINGER_MS) {
        finish(c, 0);
        return;
    }
    uv_timer_again(&c->timer); /* a server that stops answering is still found out */
    uv_timer_start(&c->poll, on_poll, LOGS_POLL_MS, 0);
}

static void on_msg(struct rdzv_conn *conn, const struct rdzv_msg *m)
{
    struct status_cmd *c = conn->data;
    struct rdzv_msg req;

    rdzv_msg_init(&req, RDZV_MSG_STATUS_REQ);

    if (m->type == RDZV_MSG_WELCOME && c->logs) {
        logs_request(c);
    } else if (m->type == RDZV_MSG_LOGS && c->logs) {
        on_logs(c, &m->u.log);
    } else if (m->type == RDZV_MSG_ERROR && c->logs && c->follow && c->seen &&
               m->u.error.code == RDZV_ERR_CLOSED) {
        finish(c, 0); /* the job ended and the server let it go: its last lines were shown */
    } else if (m->type == RDZV_MSG_WELCOME && c->debug) {
        rdzv_msg_init(&req, RDZV_MSG_DEBUG_REQ);
        snprintf(req.u.debug_req.job_id, sizeof(req.u.debug_req.job_id), "%s", c->job_id);
        req.u.debug_req.rank = (int32_t)c->debug_rank;
        if (rdzv_conn_send(conn, &req) != 0)
            finish(c, AGENT_EXIT_RDZV);
    } else if (m->type == RDZV_MSG_WELCOME) {
        snprintf(req.u.status_req.job_id, sizeof(req.u.status_req.job_id), "%s",
                 c->job_id ? c->job_id : "");
        if (rdzv_conn_send(conn, &req) != 0)
            finish(c, AGENT_EXIT_RDZV);
    } else if (m->type == RDZV_MSG_STATUS) {
        c->answer = strndup(m->u.status.json, m->u.status.len);
        finish(c, c->answer ? 0 : AGENT_EXIT_INTERNAL);
    } else if (m->type == RDZV_MSG_ERROR) {
        mc_error("the server refused: %s", m->u.error.text);
        finish(c, AGENT_EXIT_RDZV);
    }
}

static void on_conn_error(struct rdzv_conn *conn, int err)
{
    struct status_cmd *c = conn->data;
    const char *why = rdzv_conn_tls_error(conn);
    if (err == -EACCES)
        mc_error("%s refused this client: %s (wrong or missing token?)", c->endpoint,
                 why && *why ? why : "TLS authentication failed");
    else
        mc_error("connection to %s lost: %s", c->endpoint, why && *why ? why : uv_strerror(err));
    finish(c, AGENT_EXIT_RDZV);
}

static void hello_token(const struct status_cmd *c, char *dst, size_t len)
{
    snprintf(dst, len, "%s", c->token_file ? c->token_buf : c->token ? c->token : "");
}

static void on_connect(uv_connect_t *req, int status)
{
    struct status_cmd *c = req->data;
    struct rdzv_msg hello;

    rdzv_msg_init(&hello, RDZV_MSG_HELLO);

    if (status == UV_ECANCELED)
        return;
    if (status != 0 || rdzv_conn_start_tls(&c->conn, c->tls, 0) != 0) {
        mc_error("cannot connect to %s: %s", c->endpoint, uv_strerror(status));
        finish(c, AGENT_EXIT_RDZV);
        return;
    }
    hello.u.hello.version = RDZV_PROTO_VERSION;
    hello.u.hello.role = RDZV_ROLE_OBSERVER;
    hello_token(c, hello.u.hello.token, sizeof(hello.u.hello.token));
    if (rdzv_conn_send(&c->conn, &hello) != 0)
        finish(c, AGENT_EXIT_RDZV);
    explicit_bzero(hello.u.hello.token, sizeof(hello.u.hello.token));
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct status_cmd *c = req->data;
    int rc = status;

    if (rc == 0)
        rc = uv_tcp_connect(&c->connect, &c->conn.tcp, res->ai_addr, on_connect);
    uv_freeaddrinfo(res);
    if (rc != 0) {
        mc_error("cannot reach %s: %s", c->endpoint, uv_strerror(rc));
        finish(c, AGENT_EXIT_RDZV);
    }
}

static void on_timeout(uv_timer_t *t)
{
    struct status_cmd *c = t->data;
    mc_error("no answer from %s within %d s", c->endpoint,
             (c->debug ? DEBUG_TIMEOUT_MS : STATUS_TIMEOUT_MS) / 1000);
    finish(c, AGENT_EXIT_RDZV);
}

/* The answer's strings come from agents on other nodes (host names, checkpoint names, reasons):
 * escaped, so that they cannot forge lines or send terminal escapes (common/escape.h). Each call
 * gets its own buffer: one printf shows up to six. */
static const char *str(json_t *o, const char *k)
{
    static char ring[8][MC_ESCAPE_SIZE(1024)];
    static unsigned next;
    const char *v = mc_json_str(o, k, NULL);
    char *out = ring[next++ % 8];

    mc_escape(v ? v : "-", out, sizeof(ring[0]));
    return out;
}

static long num(json_t *o, const char *k)
{
    return (long)mc_json_num(o, k, 0);
}

/* Nodes not in the round: spares (--spare) and nodes waiting for a round with room. */
static int pending_state(json_t *n)
{
    const char *s = mc_json_str(n, "state", NULL);

    return s != NULL && (strcmp(s, "spare") == 0 || strcmp(s, "waiting") == 0);
}

static void print_pending(json_t *job, const char *state, const char *title)
{
    json_t *n;
    size_t i;
    int header = 0;

    json_array_foreach(json_object_get(job, "nodes"), i, n)
    {
        const char *s = mc_json_str(n, "state", NULL);

        if (s == NULL || strcmp(s, state) != 0)
            continue;
        if (!header++)
            printf("  %-24s %-16s %-6s %s\n", title, "ADDR", "NPROC", "LAST SEEN");
        printf("  %-24s %-16s %-6ld %.1f s ago\n", str(n, "host"), str(n, "addr"), num(n, "nproc"),
               num(n, "last_seen_ms_ago") / 1000.0);
    }
}

static void print_job(json_t *job)
{
    size_t i;
    json_t *n;

    printf("job %s: %s, round %ld, restarts %ld/%ld, nodes %ld..%ld, world size %ld\n",
           str(job, "id"), str(job, "state"), num(job, "round"), num(job, "restart_count"),
           num(job, "max_restarts"), num(job, "min_nodes"), num(job, "max_nodes"),
           num(job, "world_size"));
    printf("  %-10s %-24s %-16s %-12s %-10s %s\n", "GROUP_RANK", "HOST", "ADDR", "RANKS", "STATE",
           "LAST SEEN");
    json_array_foreach(json_object_get(job, "nodes"), i, n)
    {
        long first = num(n, "rank_offset"), cnt = num(n, "nproc");
        char ranks[32];

        if (pending_state(n))
            continue; /* listed apart below */
        snprintf(ranks, sizeof(ranks), "%ld-%ld", first, first + cnt - 1);
        printf("  %-10ld %-24s %-16s %-12s %-10s %.1f s ago\n", num(n, "group_rank"),
               str(n, "host"), str(n, "addr"), ranks, str(n, "state"),
               num(n, "last_seen_ms_ago") / 1000.0);
    }
    print_pending(job, "spare", "SPARE HOST");
    print_pending(job, "waiting", "WAITING HOST");
}

/* The nodes' GPUs from their latest telemetry (docs/TELEMETRY.md), when any node sent one, and the
 * job's warnings. Facts NVML did not give are "-". */
static void print_gpus(json_t *job)
{
    json_t *n, *g, *q, *w;
    size_t i, k, j;
    int head = 0;

    json_array_foreach(json_object_get(job, "nodes"), i, n)
    {
        json_array_foreach(json_object_get(json_object_get(n, "telemetry"), "gpus"), k, g)
        {
            char ranks[96] = "-", util[16] = "-", clk[16] = "-", temp[16] = "-", power[16] = "-";
            size_t used = 0;

            if (!head++)
                printf("  %-24s %-4s %-6s %-17s %-7s %-6s %-7s %s\n", "GPU HOST", "GPU", "UTIL",
                       "MEMORY", "SM MHZ", "TEMP", "POWER", "RANKS");
            json_array_foreach(json_object_get(g, "procs"), j, q)
            {
                long r = num(q, "rank");

                if (r < 0 || used >= sizeof(ranks) - 16)
                    continue;
                used += (size_t)snprintf(ranks + used, sizeof(ranks) - used, "%s%ld",
                                         used ? "," : "", r);
            }
            if (num(g, "util") >= 0)
                snprintf(util, sizeof(util), "%ld %%", num(g, "util"));
            if (num(g, "sm_clock") > 0)
                snprintf(clk, sizeof(clk), "%ld", num(g, "sm_clock"));
            if (num(g, "temp") >= 0)
                snprintf(temp, sizeof(temp), "%ld C", num(g, "temp"));
            if (mc_json_num(g, "power_w", -1) >= 0)
                snprintf(power, sizeof(power), "%.0f W", mc_json_num(g, "power_w", -1));
            printf("  %-24s %-4ld %-6s %5.1f/%5.1f GiB   %-7s %-6s %-7s %s\n", str(n, "host"),
                   num(g, "gpu"), util, mc_json_num(g, "mem_used", 0) / 1073741824.0,
                   mc_json_num(g, "mem_total", 0) / 1073741824.0, clk, temp, power, ranks);
        }
    }
    json_array_foreach(json_object_get(job, "warnings"), i, w)
    {
        char shown[MC_ESCAPE_SIZE(RDZV_TEL_WARN_LEN)];

        mc_escape(json_is_string(w) ? json_string_value(w) : "", shown, sizeof(shown));
        printf("  warning: %s\n", shown);
    }
}

/* Nodes charged with failures (docs/FAULT_TOLERANCE.md "Restart policy"), and which of them are
 * excluded and why. */
static void print_node_failures(json_t *job)
{
    json_t *a = json_object_get(job, "node_failures"), *n;
    size_t i;

    if (json_array_size(a) == 0)
        return;
    printf("  %-24s %-16s %-9s %s\n", "FAILED HOST", "ADDR", "FAILURES", "EXCLUDED");
    json_array_foreach(a, i, n)
        printf("  %-24s %-16s %-9ld %s\n", str(n, "host"), str(n, "addr"), num(n, "failures"),
               json_is_true(json_object_get(n, "excluded")) ? str(n, "reason") : "no");
}

/* Where a checkpoint lives: the recording host, then "+HOST" per verified replica
 * (docs/FAULT_TOLERANCE.md "Checkpoint replicas"). */
static void where(json_t *ck, char *buf, size_t len)
{
    json_t *reps = json_object_get(ck, "replicas"), *r;
    size_t i, n;

    n = (size_t)snprintf(buf, len, "%s",
                         json_is_string(json_object_get(ck, "host")) && str(ck, "host")[0] != '\0'
                             ? str(ck, "host")
                             : "-");
    json_array_foreach(reps, i, r)
    {
        if (n < len && json_is_string(r))
            n += (size_t)snprintf(buf + n, len - n, ",+%s", json_string_value(r));
    }
}

/* Appends to buf (cap bytes, *len used): what does not fit is cut, never written past it. */
static void append(char *buf, size_t cap, size_t *len, const char *a, const char *b)
{
    int n;

    if (*len >= cap - 1)
        return;
    n = snprintf(buf + *len, cap - *len, "%s%s", a, b);
    *len = n < 0 ? *len : *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

/* A sharded job's checkpoints: per step, the parts the running round's nodes hold. */
static void print_sharded(json_t *job)
{
    json_t *sh = json_object_get(job, "sharded"), *ck, *pt, *h;
    size_t i, k, m;

    if (json_array_size(sh) == 0)
        return;
    printf("  %-32s %-10s %-16s %s\n", "SHARDED CHECKPOINT", "STEP", "PARTS HELD", "WHERE");
    json_array_foreach(sh, i, ck)
    {
        char held[48], on[512] = "", part[24];
        size_t len = 0;

        snprintf(held, sizeof(held), "%ld/%ld%s", num(ck, "held"), num(ck, "parts"),
                 json_is_true(json_object_get(ck, "complete")) ? "" : " (incomplete)");
        json_array_foreach(json_object_get(ck, "by_part"), k, pt)
        {
            snprintf(part, sizeof(part), "%ld:", num(pt, "part"));
            append(on, sizeof(on), &len, k ? " " : "", part);
            if (json_array_size(json_object_get(pt, "held_by")) == 0)
                append(on, sizeof(on), &len, "", "-");
            json_array_foreach(json_object_get(pt, "held_by"), m, h)
            {
                char shown[MC_ESCAPE_SIZE(256)]; /* a host name the server was told: escaped */

                mc_escape(json_string_value(h) ? json_string_value(h) : "?", shown, sizeof(shown));
                append(on, sizeof(on), &len, m ? "," : "", shown);
            }
        }
        printf("  %-32s %-10ld %-16s %s\n", str(ck, "name"), num(ck, "step"), held, on);
    }
}

static void print_checkpoints(json_t *job)
{
    json_t *cks = json_object_get(job, "checkpoints"), *ck;
    size_t i;

    if (json_is_string(json_object_get(job, "resume")))
        printf("  resumes from %s%s\n", str(job, "resume"),
               num(job, "resume_parts") > 0 ? " (sharded: every node's part)" : "");
    print_sharded(job);
    if (json_array_size(cks) == 0)
        return;
    printf("  %-32s %-10s %-12s %-9s %-24s %s\n", "CHECKPOINT", "STEP", "BYTES", "STATE", "ON",
           "REASON");
    json_array_foreach(cks, i, ck)
    {
        char on[256];

        where(ck, on, sizeof(on));
        printf("  %-32s %-10ld %-12ld %-9s %-24s %s\n", str(ck, "name"), num(ck, "step"),
               num(ck, "size"), str(ck, "state"), on,
               json_is_string(json_object_get(ck, "reason")) ? str(ck, "reason") : "");
    }
}

/* muster debug's answer: per rank where it is and its main thread's stack. */
static int print_debug(json_t *root)
{
    json_t *r, *f;
    size_t i, k;

    printf("job %s, round %ld: %zu rank%s\n", str(root, "job"), num(root, "round"),
           json_array_size(json_object_get(root, "ranks")),
           json_array_size(json_object_get(root, "ranks")) == 1 ? "" : "s");
    json_array_foreach(json_object_get(root, "ranks"), i, r)
    {
        const char *op = mc_json_str(r, "collective", "");
        printf("rank %ld (%s, local_rank %ld, pid %ld): %s%s%s; no progress for %.1f s\n",
               num(r, "rank"), str(r, "host"), num(r, "local_rank"), num(r, "pid"),
               !json_is_true(json_object_get(r, "alive")) ? "ended"
               : op[0]                                    ? "in "
                                                          : "running",
               op[0] ? str(r, "collective") : "",
               json_is_true(json_object_get(r, "python")) ? "" : " (no Python stack)",
               mc_json_num(r, "silent_s", 0));
        if (json_object_get(r, "fr_enqueued") != NULL)
            printf("  Flight Recorder: enqueued %ld, completed %ld, pending %s\n",
                   num(r, "fr_enqueued"), num(r, "fr_completed"), str(r, "fr_pending"));
        json_array_foreach(json_object_get(r, "frames"), k, f)
        {
            char shown[MC_ESCAPE_SIZE(1024)];
            mc_escape(json_is_string(f) ? json_string_value(f) : "", shown, sizeof(shown));
            printf("  %s\n", shown);
        }
        if (mc_json_str(r, "native", "")[0] != '\0')
            printf("  native: %s\n", str(r, "native"));
    }
    if (json_array_size(json_object_get(root, "missing")) > 0) {
        printf("no answer in time from rank%s",
               json_array_size(json_object_get(root, "missing")) == 1 ? "" : "s");
        json_array_foreach(json_object_get(root, "missing"), i, r)
            printf(" %ld", (long)json_integer_value(r));
        printf("\n");
    }
    return 0;
}

/* Where the job's time went (docs/FAULT_TOLERANCE.md "Goodput"), as the node of group rank 0
 * last reported it: one line of seconds per phase, then the ratio. */
static void print_goodput(json_t *job)
{
    static const char *const phases[] = {"rendezvous", "preflight", "startup",
                                         "training",   "stopping",  "restart_wait"};
    json_t *g = json_object_get(job, "goodput"), *secs = json_object_get(g, "seconds");

    if (!json_is_object(g))
        return;
    printf("  goodput %.3f (wall %.1f s, as %s reported in round %ld):", mc_json_num(g, "ratio", 0),
           mc_json_num(g, "wall_s", 0), str(g, "host"), num(g, "round"));
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
        printf(" %s %.1f s%s", phases[i], mc_json_num(secs, phases[i], 0), ",");
    printf(" lost %.1f s\n", mc_json_num(g, "lost_s", 0));
}

static int print_answer(const struct status_cmd *c)
{
    json_error_t jerr;
    json_t *root, *job;
    size_t i;

    if (c->json) {
        printf("%s\n", c->answer);
        return 0;
    }
    if ((root = json_loads(c->answer, 0, &jerr)) == NULL) {
        mc_error("the server's status is not JSON: %s", jerr.text);
        return AGENT_EXIT_RDZV;
    }
    if (c->debug) {
        int rc = print_debug(root);
        json_decref(root);
        return rc;
    }
    if (json_array_size(json_object_get(root, "jobs")) == 0)
        printf(c->job_id ? "no job %s on this server\n" : "no jobs%s\n",
               c->job_id ? c->job_id : "");
    json_array_foreach(json_object_get(root, "jobs"), i, job)
    {
        print_job(job);
        print_gpus(job);
        print_node_failures(job);
        print_checkpoints(job);
        if (json_is_object(json_object_get(job, "evidence")))
            printf("  last root cause (round %ld): %s\n",
                   num(json_object_get(job, "evidence"), "round"),
                   str(json_object_get(job, "evidence"), "root_cause"));
        print_goodput(job);
    }
    json_decref(root);
    return 0;
}

/* --since T: T seconds ago; T is a number with s, m, h or d (30s, 5m, 1.5h; a bare number:
 * seconds). Returns 0 and the wall clock in ms, or -EINVAL. */
static int parse_since(const char *s, uint64_t *out)
{
    char *end;
    double v, unit = 1;
    uint64_t now = mc_wall_ms();

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || !(v >= 0) || v > 1e9)
        return -EINVAL;
    if (*end != '\0') {
        if (end[1] != '\0')
            return -EINVAL;
        switch (*end) {
        case 's':
            unit = 1;
            break;
        case 'm':
            unit = 60;
            break;
        case 'h':
            unit = 3600;
            break;
        case 'd':
            unit = 86400;
            break;
        default:
            return -EINVAL;
        }
    }
    v *= unit * 1000;
    *out = v >= (double)now ? 1 : now - (uint64_t)v;
    return 0;
}

static const char logs_usage[] =
    "usage: muster logs --rdzv-endpoint HOST:PORT --rdzv-id ID [--follow] [--rank R]\n"
    "                   [--since T] [--dedup] [--timestamps]\n"
    "                   [--token-file FILE | --tls-cert F --tls-key F --tls-ca F]\n"
    "Prints the job's one log: every rank's output lines as the agents forwarded them to\n"
    "the server, prefixed as on muster's console ([rankN]: ). The server keeps the newest\n"
    "lines of a job (8 MiB by default) while it exists and for 10 minutes after it ended,\n"
    "and caps each job at 4000 lines and 2 MiB a second, a rank at a quarter of that\n"
    "(muster server --log-*); what is dropped is counted (/metrics) and said here.\n"
    "Without --follow a job the server does not know is an error (exit 3); with it,\n"
    "muster logs waits for the job to start.\n"
    "  -f, --follow   keep printing new lines until the job ends (or Ctrl-C); a job\n"
    "                 not started yet is waited for\n"
    "  --rank R       only rank R's lines\n"
    "  --since T      only lines of the last T (30s, 5m, 2h, 1d; a number: seconds)\n"
    "  --dedup        a line said identically by several ranks is printed once:\n"
    "                 [ranks 0-63]: loss 2.31\n"
    "  -t, --timestamps  each line's time first (UTC, when its agent read it):\n"
    "                 2026-12-03T14:30:00.123Z [rank3]: ...\n"
    "Credentials as for muster status: the job's credential, the observer credential or\n"
    "the token; a worker credential or another job's gets nothing.\n";

static int parse_args(int argc, char **argv, struct status_cmd *c)
{
    char why[512];
    const char *cmd = c->logs ? "logs" : c->debug ? "debug" : "status";

    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        const char **slot = NULL;
        if ((strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) && c->logs) {
            fputs(logs_usage, stdout);
            return 1;
        }
        if (c->logs && (strcmp(o, "--follow") == 0 || strcmp(o, "-f") == 0)) {
            c->follow = 1;
            continue;
        }
        if (c->logs && strcmp(o, "--dedup") == 0) {
            c->dedup = 1;
            continue;
        }
        if (c->logs && (strcmp(o, "--timestamps") == 0 || strcmp(o, "-t") == 0)) {
            c->stamps = 1;
            continue;
        }
        if (c->logs && strcmp(o, "--since") == 0 && i + 1 < argc) {
            if (parse_since(argv[++i], &c->since_ms) != 0) {
                mc_error("--since must be a duration such as 30s, 5m, 2h or 1d, not '%s'", argv[i]);
                return -EINVAL;
            }
            continue;
        }
        if (c->logs && strcmp(o, "--rank") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            c->logs_rank = strtol(argv[++i], &end, 10);
            if (errno != 0 || *end != '\0' || end == argv[i] || c->logs_rank < 0 ||
                c->logs_rank > INT32_MAX) {
                mc_error("--rank must be a rank number, not '%s'", argv[i]);
                return -EINVAL;
            }
            continue;
        }
        if ((strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) && c->debug) {
            fputs("usage: muster debug --rdzv-endpoint HOST:PORT --rdzv-id ID [--rank R] [--json]\n"
                  "                    [--token-file FILE | --tls-cert F --tls-key F --tls-ca F]\n"
                  "Prints where every rank of a running job is: the collective it waits in, its\n"
                  "script's frame, its main thread's Python stack and kernel wait, taken while\n"
                  "the job goes on (the workers must be Python; no code changes). Read-only;\n"
                  "the server answers one request per job every 10 s. Credentials as for\n"
                  "muster status: the job's credential, the observer credential or the token.\n",
                  stdout);
            return 1;
        }
        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            fputs("usage: muster status --rdzv-endpoint HOST:PORT [--rdzv-id ID] [--json]\n"
                  "                     [--token-file FILE | --tls-cert F --tls-key F --tls-ca F]\n"
                  "Prints the server's jobs: state, round, restarts, each node's group rank,\n"
                  "host, address, ranks and last heartbeat, the checkpoints of the job and\n"
                  "where its time went (goodput).\n"
                  "The connection is TLS keyed by the token (--token-file or MUSTER_TOKEN) or\n"
                  "by certificates.\n",
                  stdout);
            return 1;
        }
        if (strcmp(o, "--json") == 0 && !c->logs) {
            c->json = 1;
            continue;
        }
        if (mc_log_take_flag(o))
            continue;
        if (strcmp(o, "--rdzv-endpoint") == 0 || strcmp(o, "--rdzv_endpoint") == 0)
            slot = &c->endpoint;
        else if (strcmp(o, "--token-file") == 0 || strcmp(o, "--token_file") == 0)
            slot = &c->token_file;
        else if (strcmp(o, "--tls-cert") == 0 || strcmp(o, "--tls_cert") == 0)
            slot = &c->tls_cert;
        else if (strcmp(o, "--tls-key") == 0 || strcmp(o, "--tls_key") == 0)
            slot = &c->tls_key;
        else if (strcmp(o, "--tls-ca") == 0 || strcmp(o, "--tls_ca") == 0)
            slot = &c->tls_ca;
        else if (strcmp(o, "--rdzv-id") == 0 || strcmp(o, "--rdzv_id") == 0)
            slot = &c->job_id;
        else if (c->debug && strcmp(o, "--rank") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            c->debug_rank = strtol(argv[++i], &end, 10);
            if (errno != 0 || *end != '\0' || end == argv[i] || c->debug_rank < 0 ||
                c->debug_rank > INT32_MAX) {
                mc_error("--rank must be a rank number, not '%s'", argv[i]);
                return -EINVAL;
            }
            continue;
        }
        if (slot == NULL || i + 1 >= argc) {
            mc_error("%s '%s' (see 'muster %s --help')",
                     slot || (!c->json &&
                              (strcmp(o, "--rank") == 0 || (c->logs && strcmp(o, "--since") == 0)))
                         ? "missing value for"
                         : "unknown option",
                     o, cmd);
            return -EINVAL;
        }
        *slot = argv[++i];
    }
    if (c->job_id != NULL && !mc_id_valid(c->job_id, why, sizeof(why))) {
        mc_error("--rdzv-id %s", why);
        return -EINVAL;
    }
    if ((c->debug || c->logs) && c->job_id == NULL) {
        mc_error("muster %s needs --rdzv-id ID: the job to look at", cmd);
        return -EINVAL;
    }
    if (c->endpoint == NULL && (c->endpoint = getenv("PET_RDZV_ENDPOINT")) == NULL) {
        mc_error("muster %s needs --rdzv-endpoint HOST:PORT", cmd);
        return -EINVAL;
    }
    return 0;
}

static int make_tls(struct status_cmd *c, const char *host)
{
    struct rdzv_tls_opts o = {.token = c->token,
                              .cert_file = c->tls_cert,
                              .key_file = c->tls_key,
                              .ca_file = c->tls_ca,
                              .server_name = host};
    char err[512];

    if (c->token_file != NULL) {
        if (launcher_secret_alloc(LAUNCHER_TOKEN_FILE_MAX + 1, &c->token_buf) != 0)
            return AGENT_EXIT_INTERNAL;
        if (launcher_read_token_file(c->token_file, c->token_buf, LAUNCHER_TOKEN_FILE_MAX + 1, err,
                                     sizeof(err)) != 0) {
            mc_error("%s", err);
            return AGENT_EXIT_USAGE;
        }
        o.token = c->token_buf;
    } else if (o.token != NULL &&
               launcher_token_check_len(o.token, "MUSTER_TOKEN", err, sizeof(err)) != 0) {
        mc_error("%s", err); /* the server would cut it short */
        return AGENT_EXIT_USAGE;
    }
    if (o.token == NULL && o.cert_file == NULL) { /* the per-user token, as muster run uses */
        struct launcher_usertoken u;

        if (launcher_secret_alloc(LAUNCHER_TOKEN_FILE_MAX + 1, &c->token_buf) != 0)
            return AGENT_EXIT_INTERNAL;
        if (launcher_usertoken_get(&u, c->token_buf, LAUNCHER_TOKEN_FILE_MAX + 1, err,
                                   sizeof(err)) != 0) {
            mc_error("muster status needs a credential (--token-file FILE "
                     "or MUSTER_TOKEN) or certificates (--tls-cert/--tls-key/--tls-ca), "
                     "and %s",
                     err);
            return AGENT_EXIT_USAGE;
        }
        o.token = c->token_buf;
    }
    if (rdzv_tls_new(&o, 0, &c->tls, err, sizeof(err)) != 0) {
        mc_error("%s", err);
        return AGENT_EXIT_USAGE;
    }
    return 0;
}

static int start(struct status_cmd *c)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char *host = NULL, port[8];
    unsigned p;
    int rc;

    if (launcher_parse_endpoint(c->endpoint, 29400, &host, &p) != 0) {
        mc_error("--rdzv-endpoint must be HOST:PORT, not '%s'", c->endpoint);
        return AGENT_EXIT_USAGE;
    }
    snprintf(port, sizeof(port), "%u", p);
    if ((rc = make_tls(c, host)) != 0) {
        free(host);
        return rc;
    }
    rc = rdzv_conn_init(&c->loop, &c->conn, on_msg, on_conn_error, c);
    if (rc == 0) {
        uv_timer_init(&c->loop, &c->timer);
        c->timer.data = c;
        if (c->logs) {
            uv_timer_init(&c->loop, &c->poll);
            c->poll.data = c;
        }
        c->gai.data = c->connect.data = c;
        uv_timer_start(&c->timer, on_timeout, c->debug ? DEBUG_TIMEOUT_MS : STATUS_TIMEOUT_MS, 0);
        if (c->logs) /* --follow: the deadline runs again from each answer (on_logs) */
            uv_timer_set_repeat(&c->timer, STATUS_TIMEOUT_MS * 3);
        rc = uv_getaddrinfo(&c->loop, &c->gai, on_resolved, host, port, &hints);
        if (rc != 0) {
            mc_error("%s: %s", c->endpoint, uv_strerror(rc));
            finish(c, AGENT_EXIT_RDZV);
        }
    }
    free(host);
    return rc == 0 ? 0 : AGENT_EXIT_RDZV;
}

static int run(int argc, char **argv, int debug)
{
    struct status_cmd c = {.token = getenv("MUSTER_TOKEN"),
                           .debug = debug == 1,
                           .logs = debug == 2,
                           .debug_rank = -1,
                           .logs_rank = -1};
    int rc = parse_args(argc, argv, &c);

    if (rc != 0)
        return rc > 0 ? 0 : AGENT_EXIT_USAGE;
    launcher_secret_protect_process(); /* it holds the server's token */
    if (uv_loop_init(&c.loop) != 0)
        return AGENT_EXIT_INTERNAL;
    rc = start(&c);
    uv_run(&c.loop, UV_RUN_DEFAULT);
    uv_loop_close(&c.loop);
    rdzv_tls_free(c.tls);
    launcher_secret_free(c.token_buf); /* zeroes it */
    if (rc == 0)
        rc = c.exit_code;
    if (rc == 0 && c.answer != NULL)
        rc = print_answer(&c);
    if (c.logs && c.dropped > 0)
        mc_warn("the server dropped %llu lines of job %s so far (rate caps, its ring, the agents' "
                "queues: docs/OUTPUT.md)",
                (unsigned long long)c.dropped, c.job_id);
    free(c.answer);
    return rc;
}

int launcher_status(int argc, char **argv)
{
    return run(argc, argv, 0);
}

int launcher_debug(int argc, char **argv)
{
    return run(argc, argv, 1);
}

int launcher_logs(int argc, char **argv)
{
    return run(argc, argv, 2);
}
