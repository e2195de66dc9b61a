/* `muster server`: the rendezvous server as a daemon of its own, so that a job outlives any
 * single agent (torchrun's store dies with the agent that hosts it). */
#include "server_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "agent.h"
#include "conn.h"
#include "endpoint.h"
#include "kv.h"
#include "logring.h"
#include "log.h"
#include "message.h"
#include "safefile.h"
#include "secret.h"
#include "server.h"
#include "sink.h"
#include "tls.h"
#include "token.h"

struct server_cmd {
    uv_loop_t loop;
    struct rdzv_server *server;
    uv_signal_t sig[2];
};

static const char server_help[] =
    "usage: muster server --listen HOST:PORT [--http HOST:PORT] [--token-file FILE]\n"
    "                     [--tls-cert FILE --tls-key FILE --tls-ca FILE]\n"
    "                     [--require-forward-secrecy]\n"
    "\n"
    "Runs the rendezvous server: agents of any number of jobs (--rdzv-id) join through it.\n"
    "Every connection is TLS 1.2: keyed by the shared token (ECDHE-PSK, or plain PSK for\n"
    "agents that ask: --rdzv-conf forward_secrecy=0), or by certificates.\n"
    "  --listen HOST:PORT   protocol address (port 0: any free port; default port 29400)\n"
    "  --http [HOST:]PORT   read-only HTTP: /metrics (Prometheus), /status (JSON), / (a live\n"
    "                       dashboard: docs/DASHBOARD.md);\n"
    "                       without HOST it binds loopback (it has no authentication)\n"
    "  --token-file FILE    the server's secret; when FILE does not exist, a new random one\n"
    "                       is written to it (mode 0600). The file must not be readable by\n"
    "                       others. Nodes get job credentials minted from it (muster token\n"
    "                       --job ID), not the secret itself. MUSTER_TOKEN works too\n"
    "  --tls-cert/--tls-key/--tls-ca FILE\n"
    "                       certificate mode: this server's certificate and key, and the CA\n"
    "                       that signs the agents' certificates (a token is then optional)\n"
    "  --require-forward-secrecy  refuse plain-PSK handshakes (agents with\n"
    "                       forward_secrecy=0): every session gets an ECDHE key exchange\n"
    "  --http-public-status serve /status (hosts, addresses) and /logs (the jobs' output)\n"
    "                       over HTTP to anyone; without it they need\n"
    "                       'Authorization: Bearer <muster token --read-only>'\n"
    "  --handshakes-per-source N  TLS handshakes in flight from one /24 (IPv4) or /64 (IPv6)\n"
    "                       (default 128; a new one over it evicts that network's oldest idle)\n"
    "  --handshake-rate N   new TLS handshakes a second from one /24 or /64 (default 200),\n"
    "  --handshake-burst N  that many at once from a quiet one (default 2048); connections\n"
    "                       over these are closed before any TLS work (a ClientHello flood)\n"
    "  -q, --quiet          no informational lines (listening, connections), only warnings and\n"
    "                       errors; -v, --verbose: debug lines too\n";

/* The resource limit flags, one row each in server_limits.def (server.h struct rdzv_limits;
 * docs/SECURITY.md "Limits and quotas of a shared server"). */
struct limit_flag {
    const char *name;
    size_t offset;    /* in struct rdzv_limits */
    int is_size;      /* a size_t field that takes a suffix; else unsigned */
    const char *help; /* "%s" gets the default */
    unsigned long long def;
};

static const struct limit_flag limit_flags[] = {
#define LIMIT(name, field, is_size, def, help)                                                     \
    {name, offsetof(struct rdzv_limits, field), is_size, help, def},
#include "server_limits.def"
#undef LIMIT
};

#define N_LIMIT_FLAGS (sizeof(limit_flags) / sizeof(limit_flags[0]))

static void print_help(void)
{
    fputs(server_help, stdout);
    fputs("Limits (every hit closes or refuses that one connection or request, is counted in\n"
          "muster_limit_hits_total and logged once per address; see rendezvous/PROTOCOL.md):\n",
          stdout);
    for (size_t i = 0; i < N_LIMIT_FLAGS; i++)
        printf("  %-33s %s (default %llu)\n", limit_flags[i].name, limit_flags[i].help,
               limit_flags[i].def);
    fputs("Stops on SIGINT or SIGTERM (exit status 0).\n", stdout);
}

static int limit_flag_index(const char *o)
{
    for (size_t i = 0; i < N_LIMIT_FLAGS; i++)
        if (strcmp(o, limit_flags[i].name) == 0)
            return (int)i;
    return -1;
}

/* Parses v for flag f into l. Returns 0 or -EINVAL after saying why. */
static int limit_flag_parse(const struct limit_flag *f, const char *v, struct rdzv_limits *l)
{
    unsigned long long n, mult = 1, max = f->is_size ? SIZE_MAX : 0xffffffffull;
    char *end;

    errno = 0;
    n = strtoull(v, &end, 10);
    if (f->is_size && *end != '\0' && end[1] == '\0') {
        mult = *end == 'K' || *end == 'k'   ? 1ull << 10
               : *end == 'M' || *end == 'm' ? 1ull << 20
               : *end == 'G' || *end == 'g' ? 1ull << 30
                                            : 0;
        end += mult != 0;
    }
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || n == 0 || mult == 0 ||
        n > max / mult) {
        mc_error("%s needs a number from 1 to %llu%s", f->name, max,
                 f->is_size ? " (K, M or G: KiB, MiB, GiB)" : "");
        return -EINVAL;
    }
    n *= mult;
    if (f->is_size)
        *(size_t *)(void *)((char *)l + f->offset) = (size_t)n;
    else
        *(unsigned *)(void *)((char *)l + f->offset) = (unsigned)n;
    return 0;
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct server_cmd *c = h->data;
    mc_info("server stopping (SIG%s)", sigabbrev_np(signum));
    rdzv_server_close(c->server, NULL, NULL);
    c->server = NULL;
    for (int i = 0; i < 2; i++)
        uv_close((uv_handle_t *)&c->sig[i], NULL);
}

static const char *bracket(const char *host, char *buf, size_t len)
{
    snprintf(buf, len, strchr(host, ':') ? "[%s]" : "%s", host);
    return buf;
}

struct server_args {
    const char *listen, *http, *token_file, *tls_cert, *tls_key, *tls_ca;
    const char *hs_per_source, *hs_rate, *hs_burst; /* struct rdzv_limits' handshake_* */
    unsigned hs_limits[3];                          /* the three parsed; 0: the default */
    const char *lim[N_LIMIT_FLAGS]; /* limit_flags' values as given; NULL: the default */
    struct rdzv_limits limits;      /* them parsed (0 fields: the defaults) */
    int require_fs;                 /* --require-forward-secrecy */
    int http_public_status;         /* --http-public-status */
};

static int hs_flag(const char *name, const char *v, unsigned *out);

/* Long (~60 lines): one branch per `muster server` flag, then the checks between flags;
 * splitting the chain would scatter one option table over several functions. */
static int parse_args(int argc, char **argv, struct server_args *a)
{
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        const char **slot = NULL;
        int k;
        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            print_help();
            return 1;
        }
        if (mc_log_take_flag(o))
            continue;
        if (strcmp(o, "--require-forward-secrecy") == 0) {
            a->require_fs = 1;
            continue;
        }
        if (strcmp(o, "--http-public-status") == 0) {
            a->http_public_status = 1;
            continue;
        }
        if (strcmp(o, "--listen") == 0)
            slot = &a->listen;
        else if (strcmp(o, "--http") == 0)
            slot = &a->http;
        else if (strcmp(o, "--token-file") == 0 || strcmp(o, "--token_file") == 0)
            slot = &a->token_file;
        else if (strcmp(o, "--tls-cert") == 0 || strcmp(o, "--tls_cert") == 0)
            slot = &a->tls_cert;
        else if (strcmp(o, "--tls-key") == 0 || strcmp(o, "--tls_key") == 0)
            slot = &a->tls_key;
        else if (strcmp(o, "--tls-ca") == 0 || strcmp(o, "--tls_ca") == 0)
            slot = &a->tls_ca;
        else if (strcmp(o, "--handshakes-per-source") == 0)
            slot = &a->hs_per_source;
        else if (strcmp(o, "--handshake-rate") == 0)
            slot = &a->hs_rate;
        else if (strcmp(o, "--handshake-burst") == 0)
            slot = &a->hs_burst;
        else if ((k = limit_flag_index(o)) >= 0)
            slot = &a->lim[k];
        if (slot == NULL) {
            mc_error("unknown option '%s' (see 'muster server --help')", o);
            return -EINVAL;
        }
        if (i + 1 >= argc) {
            mc_error("option '%s' needs a value", o);
            return -EINVAL;
        }
        *slot = argv[++i];
    }
    if (a->listen == NULL) {
        mc_error("muster server needs --listen HOST:PORT");
        return -EINVAL;
    }
    if (hs_flag("--handshakes-per-source", a->hs_per_source, &a->hs_limits[0]) < 0 ||
        hs_flag("--handshake-rate", a->hs_rate, &a->hs_limits[1]) < 0 ||
        hs_flag("--handshake-burst", a->hs_burst, &a->hs_limits[2]) < 0)
        return -EINVAL;
    for (size_t i = 0; i < N_LIMIT_FLAGS; i++)
        if (a->lim[i] != NULL && limit_flag_parse(&limit_flags[i], a->lim[i], &a->limits) < 0)
            return -EINVAL;
    int certs = (a->tls_cert != NULL) + (a->tls_key != NULL) + (a->tls_ca != NULL);
    if (certs != 0 && certs != 3) {
        mc_error("certificate mode needs all of --tls-cert, --tls-key "
                 "and --tls-ca");
        return -EINVAL;
    }
    return 0;
}

/* A handshake limit flag: a positive count, or 0 (the default) when not given. */
static int hs_flag(const char *name, const char *v, unsigned *out)
{
    char *end;
    unsigned long n;

    *out = 0;
    if (v == NULL)
        return 0;
    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || n == 0 || n > 1000000000ul) {
        mc_error("%s needs a count from 1 to 1000000000", name);
        return -EINVAL;
    }
    *out = (unsigned)n;
    return 0;
}

/* Raises RLIMIT_NOFILE's soft limit to the hard one (at the 4,096 default, silent
 * HTTP connections took every descriptor and stopped every join; docs/SECURITY.md "Limits and
 * quotas of a shared server"). Returns the soft limit now. */
static unsigned long raise_nofile(void)
{
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return 1024;
    if (r.rlim_cur < r.rlim_max) {
        rlim_t want = r.rlim_max;

        r.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &r) != 0)
            (void)getrlimit(RLIMIT_NOFILE, &r);
    }
    return r.rlim_cur == RLIM_INFINITY ? (unsigned long)-1 : (unsigned long)r.rlim_cur;
}

/* The handshake limits of the flags on the server (0 fields: the defaults). Other limit flags
 * can set their fields in the same struct before the one rdzv_server_set_limits call. */
static void set_limits(struct rdzv_server *srv, const struct server_args *a)
{
    struct rdzv_limits l = a->limits;
    char why[256];

    l.handshakes_per_source = a->hs_limits[0];
    l.handshake_rate = a->hs_limits[1];
    l.handshake_burst = a->hs_limits[2];
    if (rdzv_limits_fit_fds(&l, raise_nofile(), why, sizeof(why)) != 0)
        mc_warn("%s (raise the hard limit: ulimit -Hn, LimitNOFILE=)", why);
    rdzv_server_set_limits(srv, &l);
    rdzv_server_set_http_public_status(srv, a->http_public_status);
}

/* A new random token in a new file, readable by its owner only (O_EXCL: never overwrite). */
static int write_new_token(const char *path, char *token, size_t len)
{
    int rc = mc_random_hex(token, len, 24);

    return rc != 0 ? rc : mc_secret_write_new(path, token);
}

static int get_token(const struct server_args *a, char *token, size_t len)
{
    const char *env = getenv("MUSTER_TOKEN");
    char err[512];

    token[0] = '\0';
    if (a->token_file != NULL && access(a->token_file, F_OK) != 0 && errno == ENOENT) {
        int rc = write_new_token(a->token_file, token, len);
        if (rc != 0) {
            mc_error("cannot write a new token to %s: %s", a->token_file, strerror(-rc));
            return -EINVAL;
        }
        mc_info("wrote a new server secret to %s (0600; keep it on this host): mint one "
                "credential per job or team with `muster token --token-file %s --job ID` and "
                "give the nodes that (docs/SECURITY.md)",
                a->token_file, a->token_file);
    } else if (a->token_file != NULL) {
        if (launcher_read_token_file(a->token_file, token, len, err, sizeof(err)) != 0) {
            mc_error("%s", err);
            return -EINVAL;
        }
    } else if (env != NULL && *env != '\0') {
        if (launcher_token_check_len(env, "MUSTER_TOKEN", err, sizeof(err)) != 0) {
            mc_error("%s", err); /* never cut it short */
            return -EINVAL;
        }
        snprintf(token, len, "%s", env);
    }
    if (token[0] == '\0' && a->tls_cert == NULL) {
        mc_error("muster server needs a token: --token-file FILE (a new "
                 "one is written when FILE does not exist) or MUSTER_TOKEN, or "
                 "certificates (--tls-cert/--tls-key/--tls-ca)");
        return -EINVAL;
    }
    return 0;
}

static int start(struct server_cmd *c, const struct server_args *a, const char *token)
{
    char *host = NULL, *hhost = NULL, b[300];
    unsigned port, hport, bound;
    int rc;

    if (launcher_parse_endpoint(a->listen, 29400, &host, &port) != 0 ||
        (a->http && launcher_parse_http(a->http, &hhost, &hport) != 0)) {
        mc_error("addresses must be HOST:PORT or [IPV6]:PORT");
        rc = AGENT_EXIT_USAGE;
        goto out;
    }
    struct rdzv_tls_opts tls = {.token = token,
                                .cert_file = a->tls_cert,
                                .key_file = a->tls_key,
                                .ca_file = a->tls_ca,
                                .require_forward_secrecy = a->require_fs};
    rc = a->tls_cert || token != NULL ? rdzv_server_new_tls(&c->loop, host, port, &tls, &c->server)
                                      : UV_EINVAL;
    if (rc != 0) {
        mc_error("cannot listen on %s: %s", a->listen, uv_strerror(rc));
        rc = AGENT_EXIT_RDZV;
        goto out;
    }
    set_limits(c->server, a);
    mc_info("server listening on %s:%u", bracket(host, b, sizeof(b)), rdzv_server_port(c->server));
    if (hhost != NULL) {
        if ((rc = rdzv_server_http_listen(c->server, hhost, hport, &bound)) != 0) {
            mc_error("cannot serve HTTP on %s: %s", a->http, uv_strerror(rc));
            rc = AGENT_EXIT_RDZV;
            goto out;
        }
        mc_info("http on %s:%u", bracket(hhost, b, sizeof(b)), bound);
    }
    rc = 0;
out:
    free(host);
    free(hhost);
    return rc;
}

/* The server's log lines (a refusal per address and kind, joins, rounds) go through a bounded
 * queue written by a thread of its own (common/sink.h), as the agent's do: a stderr nobody reads
 * (a stopped terminal, a full pipe to a log shipper) must not hold the loop, where each line
 * used to wait up to MC_LOG_WRITE_WAIT_MS for room: 1,000 refused addresses were minutes of a
 * server answering nobody. Beyond the queue's hard limit lines are dropped and
 * counted; at exit what is left gets SERVER_LOG_DRAIN_MS. */
#define SERVER_LOG_BUDGET ((size_t)1 << 20)
#define SERVER_LOG_DRAIN_MS 1000
static struct mc_sink *server_log;

static void server_log_start(void)
{
    if (mc_sink_new(STDERR_FILENO, 0, SERVER_LOG_BUDGET, NULL, &server_log) == 0)
        mc_sink_take_log(server_log, NULL);
}

static void server_log_stop(void)
{
    uint64_t lost;

    if (server_log == NULL)
        return;
    lost = mc_sink_drain_all(SERVER_LOG_DRAIN_MS);
    mc_sink_take_log(NULL, NULL); /* from here on: direct and bounded (common/log.c) */
    mc_sink_close(server_log);
    server_log = NULL;
    if (lost > 0)
        mc_warn("%llu bytes of log lines were not written (stderr did not take them)",
                (unsigned long long)lost);
}

int launcher_server(int argc, char **argv)
{
    struct server_args a = {0};
    struct server_cmd c = {0};
    char *token = NULL; /* a secret region (secret.h) */
    int rc = parse_args(argc, argv, &a);

    if (rc != 0)
        return rc > 0 ? 0 : AGENT_EXIT_USAGE;
    launcher_secret_protect_process(); /* no core file or ptrace with the server's token */
    rdzv_conn_tune_for_server();       /* before the pool's first use */
    if (launcher_secret_alloc(LAUNCHER_TOKEN_FILE_MAX + 1, &token) != 0)
        return AGENT_EXIT_INTERNAL;
    if (get_token(&a, token, LAUNCHER_TOKEN_FILE_MAX + 1) != 0)
        rc = AGENT_EXIT_USAGE;
    else if (uv_loop_init(&c.loop) != 0)
        rc = AGENT_EXIT_INTERNAL;
    if (rc != 0) {
        launcher_secret_free(token);
        return rc;
    }
    signal(SIGPIPE, SIG_IGN);
    server_log_start();
    rc = start(&c, &a, token[0] ? token : NULL);
    launcher_secret_free(token);
    if (rc != 0) {
        rdzv_server_close(c.server, NULL, NULL);
    } else {
        for (int i = 0; i < 2; i++) {
            uv_signal_init(&c.loop, &c.sig[i]);
            c.sig[i].data = &c;
            uv_signal_start(&c.sig[i], on_signal, i ? SIGTERM : SIGINT);
        }
        fflush(stderr);
    }
    uv_run(&c.loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&c.loop) != 0)
        mc_error("internal error: handles left open at exit");
    server_log_stop();
    return rc;
}
