#include "hang.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HB_PREFIX "heartbeat_"

void agent_hang_file(const struct agent_hang *h, unsigned attempt, int local_rank, char *path)
{
    snprintf(path, 4096, "%.4000s/" HB_PREFIX "%u_%d", h->dir, attempt, local_rank);
}

static void arm_timer(struct agent_hang *h);

static void on_timer(uv_timer_t *t)
{
    struct agent_hang *h = t->data;
    uint64_t now = mc_clock_now(h->clock, h->loop);

    for (int i = 0; i < h->n; i++) {
        if (!h->armed[i] || h->last_touch[i] == 0 || now - h->last_touch[i] < h->timeout_ms)
            continue;
        h->armed[i] = 0; /* reported once */
        h->cb(h, i, now - h->last_touch[i]);
    }
    arm_timer(h);
}

static void arm_timer(struct agent_hang *h)
{
    uint64_t now = mc_clock_now(h->clock, h->loop), next = UINT64_MAX;

    for (int i = 0; i < h->n; i++)
        if (h->armed[i] && h->last_touch[i] != 0 && h->last_touch[i] + h->timeout_ms < next)
            next = h->last_touch[i] + h->timeout_ms;
    if (next == UINT64_MAX)
        mc_clock_stop(h->clock, &h->timer);
    else
        mc_clock_start(h->clock, &h->timer, on_timer, next > now ? next - now : 0, 0);
}

/* Any change to "heartbeat_<attempt>_<rank>" (create, touch, write) is a beat. */
static void on_event(uv_fs_event_t *e, const char *name, int events, int status)
{
    struct agent_hang *h = e->data;
    unsigned attempt;
    int rank;

    if (status != 0 || name == NULL || sscanf(name, HB_PREFIX "%u_%d", &attempt, &rank) != 2)
        return;
    if (attempt != h->attempt || rank < 0 || rank >= h->n || !h->armed[rank])
        return;
    int first = h->last_touch[rank] == 0;
    h->last_touch[rank] = mc_clock_now(h->clock, h->loop);
    if (first)
        arm_timer(h);
}

int agent_hang_init(uv_loop_t *loop, struct agent_hang *h, const char *dir, int n,
                    unsigned timeout_ms, agent_hang_cb cb, void *data)
{
    int rc;

    memset(h, 0, sizeof(*h));
    if (snprintf(h->dir, sizeof(h->dir), "%s", dir) >= (int)sizeof(h->dir))
        return -ENAMETOOLONG;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return -errno;
    h->last_touch = calloc((size_t)n, sizeof(*h->last_touch));
    h->armed = calloc((size_t)n, sizeof(*h->armed));
    if (h->last_touch == NULL || h->armed == NULL) {
        free(h->last_touch);
        free(h->armed);
        return -ENOMEM;
    }
    h->loop = loop;
    h->clock = &mc_clock_uv;
    h->n = n;
    h->timeout_ms = timeout_ms;
    h->cb = cb;
    h->data = data;
    uv_fs_event_init(loop, &h->event);
    uv_timer_init(loop, &h->timer);
    h->event.data = h->timer.data = h;
    h->open_handles = 2;
    rc = uv_fs_event_start(&h->event, on_event, dir, 0);
    if (rc != 0) {
        agent_hang_close(h, NULL);
        return rc;
    }
    h->watching = 1;
    return 0;
}

void agent_hang_start(struct agent_hang *h, unsigned attempt)
{
    char path[4096];

    for (int i = 0; i < h->n; i++) {
        agent_hang_file(h, h->attempt, i, path);
        unlink(path); /* the last attempt's, so the directory does not grow */
        h->last_touch[i] = 0;
        h->armed[i] = 1;
    }
    h->attempt = attempt;
    mc_clock_stop(h->clock, &h->timer);
}

void agent_hang_disarm(struct agent_hang *h, int local_rank)
{
    for (int i = 0; i < h->n; i++)
        if (local_rank < 0 || i == local_rank)
            h->armed[i] = 0;
    arm_timer(h);
}

static void on_closed(uv_handle_t *handle)
{
    struct agent_hang *h = handle->data;
    if (--h->open_handles > 0)
        return;
    free(h->last_touch);
    free(h->armed);
    h->last_touch = NULL;
    h->armed = NULL;
    if (h->close_cb)
        h->close_cb(h->data);
}

void agent_hang_close(struct agent_hang *h, void (*close_cb)(void *data))
{
    char path[4096];

    if (h->open_handles == 0)
        return;
    for (int i = 0; h->last_touch && i < h->n; i++) {
        agent_hang_file(h, h->attempt, i, path);
        unlink(path);
    }
    h->close_cb = close_cb;
    uv_close((uv_handle_t *)&h->event, on_closed);
    uv_close((uv_handle_t *)&h->timer, on_closed);
    /* empty now unless a worker still writes: then it stays, like before; a fresh mkdtemp
     * directory per run would otherwise pile up in $TMPDIR (--log-dir /dev/null) */
    rmdir(h->dir);
}
