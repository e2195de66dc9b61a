#include "hang.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HB_PREFIX "heartbeat_"
/* CPU time that counts as progress: this share of the sampling period (an idle interpreter
 * waiting in a collective uses far less; a step of compute far more) */
#define CPU_SHARE 20
#define CHILDREN_MAX 16

/* utime + stime of pid in clock ticks, -1 when it is gone */
static int64_t cpu_ticks(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut = 0, st = 0;
    ssize_t k;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    k = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (k <= 0)
        return -1;
    buf[k] = '\0';
    /* fields after the command's ')': state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime */
    if ((p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (int64_t)(ut + st);
}

/* The CPU time of a worker and its direct children (data-loader workers): bounded reads of
 * small /proc files, a few per rank per period, on the loop */
static int64_t tree_ticks(pid_t pid)
{
    char path[64], list[512], *s, *save = NULL;
    int64_t t = cpu_ticks(pid), c;
    ssize_t k;
    int fd, n = 0;

    if (t < 0)
        return -1;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return t;
    k = read(fd, list, sizeof(list) - 1);
    close(fd);
    list[k > 0 ? k : 0] = '\0';
    for (s = strtok_r(list, " \n", &save); s != NULL && n < CHILDREN_MAX;
         s = strtok_r(NULL, " \n", &save), n++)
        if ((c = cpu_ticks((pid_t)atoi(s))) > 0)
            t += c;
    return t;
}

void agent_hang_file(const struct agent_hang *h, unsigned attempt, int local_rank, char *path)
{
    snprintf(path, 4096, "%.4000s/" HB_PREFIX "%u_%d", h->dir, attempt, local_rank);
}

static void arm_timer(struct agent_hang *h);

/* How often the ranks without heartbeats are sampled (CPU time) */
static uint64_t sample_ms(const struct agent_hang *h)
{
    uint64_t p = h->timeout_ms / 4;

    return p < 200 ? 200 : p > 5000 ? 5000 : p;
}

/* The ranks that never touched their heartbeat file: CPU time that advanced is progress; when
 * every one of them made none for the timeout, the node is hung (the oldest is reported). */
static void check_progress(struct agent_hang *h, uint64_t now)
{
    uint64_t hz = (uint64_t)sysconf(_SC_CLK_TCK), need;
    int oldest = -1, watched = 0, moving = 0;

    need = sample_ms(h) * hz / 1000 / CPU_SHARE;
    for (int i = 0; i < h->n; i++) {
        int64_t t;
        if (!h->armed[i] || h->last_touch[i] != 0 || h->pid[i] <= 0)
            continue;
        watched++;
        t = tree_ticks(h->pid[i]);
        if (t >= 0 && (h->cpu[i] < 0 || (uint64_t)(t - h->cpu[i]) > need)) {
            h->progress[i] = now;
            h->cpu[i] = t;
        }
        if (now - h->progress[i] < h->timeout_ms)
            moving = 1; /* this one is moving: the node is not hung */
        if (oldest < 0 || h->progress[i] < h->progress[oldest])
            oldest = i;
    }
    if (watched == 0 || oldest < 0 || moving)
        return;
    for (int i = 0; i < h->n; i++)
        if (h->last_touch[i] == 0)
            h->armed[i] = 0; /* reported once */
    h->cb(h, oldest, now - h->progress[oldest]);
}

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
    if (h->open_handles > 0)
        check_progress(h, now);
    if (h->open_handles > 0)
        arm_timer(h);
}

static void arm_timer(struct agent_hang *h)
{
    uint64_t now = mc_clock_now(h->clock, h->loop), next = UINT64_MAX;

    for (int i = 0; i < h->n; i++) {
        if (!h->armed[i])
            continue;
        if (h->last_touch[i] != 0 && h->last_touch[i] + h->timeout_ms < next)
            next = h->last_touch[i] + h->timeout_ms;
        else if (h->last_touch[i] == 0 && h->pid[i] > 0 && now + sample_ms(h) < next)
            next = now + sample_ms(h);
    }
    if (next == UINT64_MAX)
        mc_clock_stop(h->clock, &h->timer);
    else
        mc_clock_start(h->clock, &h->timer, on_timer, next > now ? next - now : 0, 0);
}

void agent_hang_watch(struct agent_hang *h, int local_rank, pid_t pid)
{
    if (local_rank < 0 || local_rank >= h->n)
        return;
    h->pid[local_rank] = pid;
    h->cpu[local_rank] = -1;
    h->progress[local_rank] = mc_clock_now(h->clock, h->loop);
    arm_timer(h);
}

void agent_hang_progress(struct agent_hang *h, int local_rank)
{
    if (local_rank >= 0 && local_rank < h->n && h->progress != NULL)
        h->progress[local_rank] = mc_clock_now(h->clock, h->loop);
}

uint64_t agent_hang_silent_ms(const struct agent_hang *h, int local_rank)
{
    uint64_t now = mc_clock_now(h->clock, h->loop), last;

    if (local_rank < 0 || local_rank >= h->n || h->progress == NULL)
        return 0;
    last = h->last_touch[local_rank] != 0 ? h->last_touch[local_rank] : h->progress[local_rank];
    return last != 0 && now > last ? now - last : 0;
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

static void free_arrays(struct agent_hang *h)
{
    free(h->last_touch);
    free(h->armed);
    free(h->progress);
    free(h->cpu);
    free(h->pid);
    h->last_touch = h->progress = NULL;
    h->armed = NULL;
    h->cpu = NULL;
    h->pid = NULL;
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
    h->progress = calloc((size_t)n, sizeof(*h->progress));
    h->cpu = calloc((size_t)n, sizeof(*h->cpu));
    h->pid = calloc((size_t)n, sizeof(*h->pid));
    if (h->last_touch == NULL || h->armed == NULL || h->progress == NULL || h->cpu == NULL ||
        h->pid == NULL) {
        free_arrays(h);
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
        h->pid[i] = 0; /* watched from its spawn on (agent_hang_watch) */
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
    free_arrays(h);
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
