#include "group.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void worker_exited(struct agent_group *g, struct agent_worker *w);
static void on_closed(uv_handle_t *h);

/* SIGCHLD says some child changed state; several exits may share one signal. */
static void sigchld_cb(uv_signal_t *h, int signum)
{
    struct agent_group *g = h->data;
    for (int i = 0; i < g->n; i++)
        if (agent_worker_reap(&g->workers[i]))
            worker_exited(g, &g->workers[i]);
}

int agent_group_new(uv_loop_t *loop, int n, const struct agent_group_cbs *cbs, void *data,
                    struct agent_group **out)
{
    struct agent_group *g = calloc(1, sizeof(*g));
    if (g == NULL || (g->workers = calloc((size_t)n, sizeof(*g->workers))) == NULL ||
        agent_proctree_group_open(&g->tree, n) != 0) {
        if (g != NULL)
            free(g->workers);
        free(g);
        return -ENOMEM;
    }
    g->loop = loop;
    g->n = n;
    g->cbs = cbs;
    g->data = data;
    uv_timer_init(loop, &g->kill_timer);
    g->kill_timer.data = g;
    uv_signal_init(loop, &g->sigchld);
    g->sigchld.data = g;
    /* armed before the first spawn: a SIGCHLD that came earlier would be lost */
    uv_signal_start(&g->sigchld, sigchld_cb, SIGCHLD);
    g->open_handles = 2;
    for (int i = 0; i < n; i++) {
        g->workers[i].group = g;
        g->workers[i].local_rank = i;
    }
    *out = g;
    return 0;
}

int agent_group_spawn(struct agent_group *g, int i, int rank, const struct agent_worker_spec *s)
{
    struct agent_worker *w = &g->workers[i];
    w->rank = rank;
    int rc = agent_worker_spawn(g->loop, w, s);
    if (rc == 0)
        g->alive++;
    return rc;
}

static void worker_exited(struct agent_group *g, struct agent_worker *w)
{
    g->alive--;
    if (g->closing) {
        /* killed by agent_group_close: nobody is listening any more */
        if (g->alive == 0)
            uv_close((uv_handle_t *)&g->sigchld, on_closed);
        return;
    }
    if (g->cbs->exit_cb)
        g->cbs->exit_cb(g, w);
    if (g->alive == 0) {
        uv_timer_stop(&g->kill_timer);
        if (g->cbs->all_exited_cb)
            g->cbs->all_exited_cb(g);
    }
}

static void free_group(struct agent_group *g)
{
    void (*cb)(void *) = g->close_cb;
    void *data = g->data;
    free(g->workers);
    free(g);
    if (cb)
        cb(data);
}

void agent__group_handle_closed(struct agent_group *g)
{
    if (--g->open_handles == 0 && g->closing)
        free_group(g);
}

static void on_closed(uv_handle_t *h)
{
    agent__group_handle_closed(h->data);
}

static void kill_timer_cb(uv_timer_t *t)
{
    struct agent_group *g = t->data;
    for (int i = 0; i < g->n; i++)
        if (g->workers[i].alive)
            agent_worker_kill(&g->workers[i], SIGKILL);
    agent_proctree_group_kill(&g->tree);
}

void agent_group_stop(struct agent_group *g, int sig, unsigned timeout_ms)
{
    /* Exited workers too: their children may still hold the group (DataLoader workers...). */
    for (int i = 0; i < g->n; i++)
        agent_worker_kill(&g->workers[i], sig);
    if (sig == SIGKILL)
        agent_proctree_group_kill(&g->tree);
    if (!g->stopping && g->alive > 0) {
        g->stopping = 1;
        uv_timer_start(&g->kill_timer, kill_timer_cb, timeout_ms, 0);
    }
}

void agent_group_close(struct agent_group *g, void (*close_cb)(void *data), void *data)
{
    if (g == NULL)
        return;
    g->close_cb = close_cb;
    g->data = data;
    g->closing = 1;
    /* Whatever a worker left behind in its process group must not outlive the attempt. */
    for (int i = 0; i < g->n; i++)
        agent_worker_kill(&g->workers[i], SIGKILL);
    /* ...and what left it (setsid, double fork): before the next attempt can start */
    agent_proctree_group_close(&g->tree);
    uv_close((uv_handle_t *)&g->kill_timer, on_closed);
    /* alive workers (killed just above) are still reaped: the SIGCHLD watcher stays until
     * the last one is gone (see worker_exited) */
    if (g->alive == 0)
        uv_close((uv_handle_t *)&g->sigchld, on_closed);
}
