/* `muster server`: the rendezvous server as a daemon of its own, so that a job outlives any
 * single agent (torchrun's store dies with the agent that hosts it). */
#include "server_cmd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "agent.h"
#include "endpoint.h"
#include "message.h"
#include "server.h"
#include "token.h"

struct server_cmd {
    uv_loop_t loop;
    struct rdzv_server *server;
    uv_signal_t sig[2];
};

static const char server_help[] =
    "usage: muster server --listen HOST:PORT [--http HOST:PORT] [--token-file FILE]\n"
    "\n"
    "Runs the rendezvous server: agents of any number of jobs (--rdzv-id) join through it.\n"
    "  --listen HOST:PORT   protocol address (port 0: any free port; default port 29400)\n"
    "  --http HOST:PORT     read-only HTTP: /metrics (Prometheus), /status (JSON), / (HTML);\n"
    "                       bind it to loopback unless the network is trusted\n"
    "  --token-file FILE    shared token every agent and worker must present (the file must\n"
    "                       not be readable by others); MUSTER_TOKEN in the environment works\n"
    "                       too\n"
    "Stops on SIGINT or SIGTERM (exit status 0).\n";

static void on_signal(uv_signal_t *h, int signum)
{
    struct server_cmd *c = h->data;
    fprintf(stderr, "muster: server stopping (SIG%s)\n", sigabbrev_np(signum));
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
    const char *listen, *http, *token_file;
};

static int parse_args(int argc, char **argv, struct server_args *a)
{
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        const char **slot = NULL;
        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            fputs(server_help, stdout);
            return 1;
        }
        if (strcmp(o, "--listen") == 0)
            slot = &a->listen;
        else if (strcmp(o, "--http") == 0)
            slot = &a->http;
        else if (strcmp(o, "--token-file") == 0 || strcmp(o, "--token_file") == 0)
            slot = &a->token_file;
        if (slot == NULL) {
            fprintf(stderr, "muster: error: unknown option '%s' (see 'muster server --help')\n", o);
            return -EINVAL;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "muster: error: option '%s' needs a value\n", o);
            return -EINVAL;
        }
        *slot = argv[++i];
    }
    if (a->listen == NULL) {
        fprintf(stderr, "muster: error: muster server needs --listen HOST:PORT\n");
        return -EINVAL;
    }
    return 0;
}

static int get_token(const struct server_args *a, char *token, size_t len)
{
    const char *env = getenv("MUSTER_TOKEN");
    char err[512];

    token[0] = '\0';
    if (a->token_file != NULL) {
        if (launcher_read_token_file(a->token_file, token, len, err, sizeof(err)) != 0) {
            fprintf(stderr, "muster: error: %s\n", err);
            return -EINVAL;
        }
    } else if (env != NULL && *env != '\0') {
        snprintf(token, len, "%s", env);
    }
    return 0;
}

static int start(struct server_cmd *c, const struct server_args *a, const char *token)
{
    char *host = NULL, *hhost = NULL, b[300];
    unsigned port, hport, bound;
    int rc;

    if (launcher_parse_endpoint(a->listen, 29400, &host, &port) != 0 ||
        (a->http && launcher_parse_endpoint(a->http, 8080, &hhost, &hport) != 0)) {
        fprintf(stderr, "muster: error: addresses must be HOST:PORT or [IPV6]:PORT\n");
        rc = AGENT_EXIT_USAGE;
        goto out;
    }
    if ((rc = rdzv_server_new(&c->loop, host, port, token, &c->server)) != 0) {
        fprintf(stderr, "muster: error: cannot listen on %s: %s\n", a->listen, uv_strerror(rc));
        rc = AGENT_EXIT_RDZV;
        goto out;
    }
    fprintf(stderr, "muster: server listening on %s:%u\n", bracket(host, b, sizeof(b)),
            rdzv_server_port(c->server));
    if (hhost != NULL) {
        if ((rc = rdzv_server_http_listen(c->server, hhost, hport, &bound)) != 0) {
            fprintf(stderr, "muster: error: cannot serve HTTP on %s: %s\n", a->http,
                    uv_strerror(rc));
            rc = AGENT_EXIT_RDZV;
            goto out;
        }
        fprintf(stderr, "muster: http on %s:%u\n", bracket(hhost, b, sizeof(b)), bound);
    }
    rc = 0;
out:
    free(host);
    free(hhost);
    return rc;
}

int launcher_server(int argc, char **argv)
{
    struct server_args a = {0};
    struct server_cmd c = {0};
    char token[RDZV_TOKEN_MAX + 1];
    int rc = parse_args(argc, argv, &a);

    if (rc != 0)
        return rc > 0 ? 0 : AGENT_EXIT_USAGE;
    if (get_token(&a, token, sizeof(token)) != 0)
        return AGENT_EXIT_USAGE;
    if (uv_loop_init(&c.loop) != 0)
        return AGENT_EXIT_INTERNAL;
    signal(SIGPIPE, SIG_IGN);
    rc = start(&c, &a, token[0] ? token : NULL);
    explicit_bzero(token, sizeof(token));
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
        fprintf(stderr, "muster: internal error: handles left open at exit\n");
    return rc;
}
