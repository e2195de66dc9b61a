/* GPU telemetry: see telemetry.h. NVML by dlopen with its exported, versioned names, the few
 * types declared as NVML's ABI has them (as preflight/gpu/pf_nvml.c does; that file is linked
 * into muster-preflight only, with the CUDA toolkit, so the agent keeps its own short list). */
#include "telemetry.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

typedef void *nvml_dev;
struct nvml_util {
    unsigned int gpu, memory;
};
struct nvml_memory {
    unsigned long long total, free, used;
};
/* nvmlProcessInfo_t of _v3 (and _v2: the same layout) */
struct nvml_proc {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};

#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_TEMPERATURE_GPU 0
#define NVML_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
/* clocks event (throttle) reasons a person should hear of */
#define TR_SW_POWER 0x4ULL
#define TR_HW_SLOWDOWN 0x8ULL
#define TR_SW_THERMAL 0x20ULL
#define TR_HW_THERMAL 0x40ULL
#define TR_HW_POWER_BRAKE 0x80ULL
#define TR_WARN (TR_SW_POWER | TR_HW_SLOWDOWN | TR_SW_THERMAL | TR_HW_THERMAL | TR_HW_POWER_BRAKE)
#define NVML_EVENT_XID 0x8ULL /* nvmlEventTypeXidCriticalError */
#define NVML_TIMEOUT 10
#define XID_EVENTS_MAX 32 /* events taken per sample: the rest wait for the next */

/* nvmlEventData_t */
struct nvml_event {
    nvml_dev device;
    unsigned long long type, data;
    unsigned int gpu_instance, compute_instance;
};

struct nvml {
    void *lib;
    int (*count)(unsigned int *);
    int (*by_index)(unsigned int, nvml_dev *);
    int (*util)(nvml_dev, struct nvml_util *);
    int (*mem)(nvml_dev, struct nvml_memory *);
    int (*clock)(nvml_dev, int, unsigned int *);
    int (*temp)(nvml_dev, int, unsigned int *);
    int (*power)(nvml_dev, unsigned int *);
    int (*reasons)(nvml_dev, unsigned long long *);
    int (*procs)(nvml_dev, unsigned int *, struct nvml_proc *);
    int (*ecc)(nvml_dev, int, int, unsigned long long *);
    int (*ev_create)(void **);
    int (*ev_register)(nvml_dev, unsigned long long, void *);
    int (*ev_wait)(void *, struct nvml_event *, unsigned int);
    void *evset; /* Xid events of every GPU; NULL: none (no such functions, or refused) */
};

#define FINDINGS_MAX RDZV_TEL_WARN_MAX

struct agent_telem {
    uv_loop_t *loop;
    uv_timer_t timer;
    uv_work_t work;
    struct agent_telem_io io;
    char host[256];
    unsigned period_ms;
    uint64_t grace_ms;
    uint64_t attempt_ms; /* uv_now when the attempt's workers started; 0: none yet */
    int busy;            /* a sample in flight: the loop does not touch nv, sample, w */
    int closing, timer_closed;
    int dead; /* no NVML or no GPU: sampling stopped */
    int loaded;
    struct nvml nv;
    int registered;                       /* the GPUs were registered for Xid events */
    nvml_dev dev[RDZV_TEL_GPUS_MAX];      /* each GPU's handle, to map an event to its GPU */
    uint32_t xid_last[RDZV_TEL_GPUS_MAX]; /* the last Xid of each GPU (by NVML index) */
    struct agent_telem_worker w[AGENT_TELEM_WORKERS_MAX];
    int nw;
    struct rdzv_msg msg; /* the sample, built in the work thread */
    int ok;              /* the work produced a sample */
    /* warnings already logged this job */
    struct agent_telem_finding said[FINDINGS_MAX];
    int nsaid;
};

/* --- the work thread ---------------------------------------------------------------------- */

static int load(struct nvml *nv)
{
    const char *path = getenv("MUSTER_NVML_LIBRARY");
    int (*init)(void);

    nv->lib =
        dlopen(path != NULL && path[0] != '\0' ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (nv->lib == NULL)
        return -1;
    init = (int (*)(void))dlsym(nv->lib, "nvmlInit_v2");
    *(void **)&nv->count = dlsym(nv->lib, "nvmlDeviceGetCount_v2");
    *(void **)&nv->by_index = dlsym(nv->lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&nv->util = dlsym(nv->lib, "nvmlDeviceGetUtilizationRates");
    *(void **)&nv->mem = dlsym(nv->lib, "nvmlDeviceGetMemoryInfo");
    *(void **)&nv->clock = dlsym(nv->lib, "nvmlDeviceGetClockInfo");
    *(void **)&nv->temp = dlsym(nv->lib, "nvmlDeviceGetTemperature");
    *(void **)&nv->power = dlsym(nv->lib, "nvmlDeviceGetPowerUsage");
    if ((*(void **)&nv->reasons = dlsym(nv->lib, "nvmlDeviceGetCurrentClocksEventReasons")) == NULL)
        *(void **)&nv->reasons = dlsym(nv->lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if ((*(void **)&nv->procs = dlsym(nv->lib, "nvmlDeviceGetComputeRunningProcesses_v3")) == NULL)
        *(void **)&nv->procs = dlsym(nv->lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    *(void **)&nv->ecc = dlsym(nv->lib, "nvmlDeviceGetTotalEccErrors");
    *(void **)&nv->ev_create = dlsym(nv->lib, "nvmlEventSetCreate");
    *(void **)&nv->ev_register = dlsym(nv->lib, "nvmlDeviceRegisterEvents");
    *(void **)&nv->ev_wait = dlsym(nv->lib, "nvmlEventSetWait_v2");
    /* the library stays loaded: unloading NVML is not worth its teardown risks */
    if (init == NULL || nv->count == NULL || nv->by_index == NULL || init() != 0)
        return -1;
    if (nv->ev_create == NULL || nv->ev_register == NULL || nv->ev_wait == NULL ||
        nv->ev_create(&nv->evset) != 0)
        nv->evset = NULL; /* no Xid events: the rest is sampled all the same */
    return 0;
}

/* The Xid events since the last sample (never waiting: timeout 0) into t->xid_last. */
static void take_xids(struct agent_telem *t, unsigned count)
{
    struct nvml_event e;

    for (int n = 0; t->nv.evset != NULL && n < XID_EVENTS_MAX; n++) {
        if (t->nv.ev_wait(t->nv.evset, &e, 0) != 0)
            break; /* NVML_TIMEOUT: none left (or an error: try again next sample) */
        if (!(e.type & NVML_EVENT_XID))
            continue;
        for (unsigned i = 0; i < count && i < RDZV_TEL_GPUS_MAX; i++)
            if (t->dev[i] == e.device && e.data > 0)
                t->xid_last[i] = e.data > UINT32_MAX ? UINT32_MAX : (uint32_t)e.data;
    }
}

/* The parent of pid from /proc/<pid>/stat; 0 when it cannot be read. */
static pid_t parent_of(pid_t pid)
{
    char path[64], buf[512], *close_paren;
    FILE *f;
    size_t n;
    int ppid = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) state ppid": comm may hold spaces and parentheses, the last ')' ends it */
    if ((close_paren = strrchr(buf, ')')) == NULL || sscanf(close_paren + 1, " %*c %d", &ppid) != 1)
        return 0;
    return (pid_t)ppid;
}

/* The rank whose worker pid is, or is an ancestor of; -1 none. */
static int rank_of(const struct agent_telem *t, pid_t pid)
{
    for (int depth = 0; pid > 1 && depth < 64; depth++) {
        for (int i = 0; i < t->nw; i++)
            if (t->w[i].pid == pid)
                return t->w[i].rank;
        pid = parent_of(pid);
    }
    return -1;
}

static void sample_gpu(struct agent_telem *t, unsigned idx, nvml_dev d, struct rdzv_tel_gpu *g)
{
    static struct nvml_proc p[64]; /* the work thread's only: one sample at a time */
    const struct nvml *nv = &t->nv;
    struct nvml_util u;
    struct nvml_memory m;
    unsigned int v, n = 64;
    unsigned long long bits, e;

    memset(g, 0, sizeof(*g));
    g->gpu = idx;
    g->util = nv->util && nv->util(d, &u) == 0 ? (int32_t)u.gpu : -1;
    if (nv->mem && nv->mem(d, &m) == 0) {
        g->mem_used = m.used;
        g->mem_total = m.total;
    }
    g->sm_clock = nv->clock && nv->clock(d, NVML_CLOCK_SM, &v) == 0 ? (int32_t)v : -1;
    g->mem_clock = nv->clock && nv->clock(d, NVML_CLOCK_MEM, &v) == 0 ? (int32_t)v : -1;
    g->temp = nv->temp && nv->temp(d, NVML_TEMPERATURE_GPU, &v) == 0 ? (int32_t)v : -1;
    g->power_mw = nv->power && nv->power(d, &v) == 0 ? (int32_t)v : -1;
    g->throttle = nv->reasons && nv->reasons(d, &bits) == 0 ? bits : 0;
    /* uncorrected (1), volatile (0) */
    g->ecc = nv->ecc && nv->ecc(d, 1, 0, &e) == 0 ? e : 0;
    if (nv->procs != NULL) {
        int rc = nv->procs(d, &n, p);

        if (rc == NVML_INSUFFICIENT_SIZE || n > 64)
            n = 64;
        else if (rc != 0)
            n = 0;
        for (unsigned i = 0; i < n && g->nprocs < RDZV_TEL_PROCS_MAX; i++) {
            struct rdzv_tel_proc *q = &g->procs[g->nprocs++];

            q->pid = p[i].pid;
            q->rank = rank_of(t, (pid_t)p[i].pid);
            q->mem = p[i].used == NVML_VALUE_NOT_AVAILABLE ? UINT64_MAX : p[i].used;
        }
    }
}

static void work_cb(uv_work_t *req)
{
    struct agent_telem *t = req->data;
    struct rdzv_telemetry *s = &t->msg.u.telemetry;
    unsigned int count = 0;

    t->ok = 0;
    if (!t->loaded) {
        t->loaded = 1;
        if (load(&t->nv) != 0) {
            t->dead = 1;
            return;
        }
    }
    if (t->nv.count(&count) != 0 || count == 0) {
        t->dead = count == 0;
        return;
    }
    rdzv_msg_init(&t->msg, RDZV_MSG_TELEMETRY);
    s->t_ms = mc_wall_ms();
    for (unsigned i = 0; i < count && i < RDZV_TEL_GPUS_MAX; i++) {
        nvml_dev d = NULL;

        if (t->nv.by_index(i, &d) != 0)
            continue;
        t->dev[i] = d;
        sample_gpu(t, i, d, &s->gpus[s->ngpus++]);
        /* a GPU that cannot report Xids (a VM's, a MIG instance) still reports the rest */
        if (!t->registered && t->nv.evset != NULL)
            (void)t->nv.ev_register(d, NVML_EVENT_XID, t->nv.evset);
    }
    t->registered = 1;
    take_xids(t, count);
    for (uint32_t i = 0; i < s->ngpus; i++)
        s->gpus[i].xid = t->xid_last[s->gpus[i].gpu];
    t->ok = s->ngpus > 0;
}

/* --- findings ------------------------------------------------------------------------------ */

/* "0-3,5" of the sorted distinct ranks r[0..n) */
static void ranks_text(const int *r, int n, char *out, size_t cap)
{
    size_t len = 0;

    out[0] = '\0';
    for (int i = 0; i < n && len < cap; i++) {
        int j = i;

        while (j + 1 < n && r[j + 1] == r[j] + 1)
            j++;
        len += (size_t)snprintf(out + len, cap - len, j > i ? "%s%d-%d" : "%s%d", i ? "," : "",
                                r[i], r[j]);
        i = j;
    }
}

static int add_rank(int *r, int n, int rank)
{
    int i = 0;

    while (i < n && r[i] < rank)
        i++;
    if (i < n && r[i] == rank)
        return n;
    memmove(r + i + 1, r + i, (size_t)(n - i) * sizeof(*r));
    r[i] = rank;
    return n + 1;
}

static int gpu_has_rank(const struct rdzv_tel_gpu *g, int rank)
{
    for (uint32_t k = 0; k < g->nprocs; k++)
        if (g->procs[k].rank == rank)
            return 1;
    return 0;
}

static void throttle_text(uint64_t bits, char *out, size_t cap)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } why[] = {{TR_SW_POWER, "power cap"},
               {TR_HW_SLOWDOWN, "HW slowdown"},
               {TR_SW_THERMAL, "thermal (software)"},
               {TR_HW_THERMAL, "thermal (hardware)"},
               {TR_HW_POWER_BRAKE, "power brake"}};
    size_t len = 0;

    out[0] = '\0';
    for (size_t i = 0; i < sizeof(why) / sizeof(why[0]) && len < cap; i++)
        if (bits & why[i].bit)
            len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", why[i].name);
}

/* What an Xid means, for the ones a training job meets (NVIDIA's Xid catalogue). */
static const char *xid_text(uint32_t xid)
{
    switch (xid) {
    case 13:
        return "graphics engine exception: often a bug in a kernel, an illegal address";
    case 31:
        return "GPU memory page fault: often an illegal address in a kernel";
    case 43:
        return "GPU stopped processing";
    case 45:
        return "preemptive cleanup after earlier errors";
    case 48:
        return "double-bit ECC error: the GPU needs a reset";
    case 61:
    case 62:
        return "internal micro-controller error";
    case 63:
        return "ECC page retirement or row remapping recorded";
    case 64:
        return "ECC page retirement or row remapping failed";
    case 74:
        return "NVLink error";
    case 79:
        return "GPU has fallen off the bus";
    case 92:
        return "high single-bit ECC error rate";
    case 94:
        return "contained ECC error";
    case 95:
        return "uncontained ECC error: the GPU needs a reset";
    case 119:
    case 120:
        return "GSP error";
    case 999:
        return "an Xid NVML does not know";
    default:
        return "see NVIDIA's Xid catalogue";
    }
}

/* The worker of rank, or NULL. */
static const struct agent_telem_worker *worker_of(const struct agent_telem_worker *w, int nw,
                                                  int rank)
{
    for (int i = 0; i < nw; i++)
        if (w[i].rank == rank)
            return &w[i];
    return NULL;
}

/* A worker within AGENT_TELEM_CAP_PCT % of its memory cap (shared-GPU mode): the memory of its
 * processes (on any GPU) against its cap, on the GPU its processes are on. */
static int near_cap(const struct rdzv_telemetry *s, const struct agent_telem_worker *w,
                    const char *host, struct agent_telem_finding *out)
{
    uint64_t used = 0, cap = w->cap_bytes;
    const struct rdzv_tel_gpu *on = NULL;

    if (w->cap_bytes == 0 && w->cap_frac <= 0)
        return 0;
    for (uint32_t i = 0; i < s->ngpus; i++)
        for (uint32_t k = 0; k < s->gpus[i].nprocs; k++) {
            const struct rdzv_tel_proc *q = &s->gpus[i].procs[k];

            if (q->rank != w->rank || q->mem == UINT64_MAX)
                continue;
            used += q->mem;
            if (on == NULL)
                on = &s->gpus[i];
        }
    if (on == NULL)
        return 0;
    if (cap == 0)
        cap = (uint64_t)(w->cap_frac * (double)on->mem_total);
    if (cap == 0 || used * 100.0 < cap * (100.0 - AGENT_TELEM_CAP_PCT))
        return 0;
    snprintf(out->key, sizeof(out->key), "cap:%d", w->rank);
    snprintf(out->text, sizeof(out->text),
             "task %d (GPU %u of %s) uses %.1f GiB of its %.1f GiB memory cap (%.0f %%): it "
             "will fail to allocate more",
             w->rank, on->gpu, host, (double)used / (1 << 30), (double)cap / (1 << 30),
             100.0 * (double)used / (double)cap);
    return 1;
}

int agent_telem_findings(const struct rdzv_telemetry *s, const struct agent_telem_worker *w, int nw,
                         const char *host, uint64_t ran_ms, uint64_t grace_ms,
                         struct agent_telem_finding *out, int cap)
{
    int n = 0, used = 0, any = 0;

    for (uint32_t i = 0; i < s->ngpus; i++) {
        int had = 0;

        for (uint32_t k = 0; k < s->gpus[i].nprocs; k++)
            had |= s->gpus[i].procs[k].rank >= 0;
        used += had;
        any |= had;
    }
    /* several ranks on one GPU while a GPU that one of them could have had has none; a worker
     * given its GPU (shared-GPU mode: K tasks on each) is where it belongs */
    for (uint32_t i = 0; i < s->ngpus && n < cap; i++) {
        const struct rdzv_tel_gpu *g = &s->gpus[i];
        int r[RDZV_TEL_PROCS_MAX], nr = 0, want = nw < (int)s->ngpus ? nw : (int)s->ngpus;
        char list[96], idle[48];

        for (uint32_t k = 0; k < g->nprocs; k++) {
            const struct agent_telem_worker *x = worker_of(w, nw, g->procs[k].rank);

            if (g->procs[k].rank >= 0 && (x == NULL || x->gpu == AGENT_TELEM_GPU_OWN))
                nr = add_rank(r, nr, g->procs[k].rank);
        }
        if (nr < 2 || used >= want)
            continue;
        ranks_text(r, nr, list, sizeof(list));
        snprintf(out[n].key, sizeof(out[n].key), "shared:%u", g->gpu);
        if ((int)s->ngpus - used == 1)
            snprintf(idle, sizeof(idle), "another of its GPUs has none");
        else
            snprintf(idle, sizeof(idle), "%d of its GPUs have none", (int)s->ngpus - used);
        snprintf(out[n].text, sizeof(out[n].text),
                 "ranks %s all run on GPU %u of %s while %s: the script ignores LOCAL_RANK", list,
                 g->gpu, host, idle);
        n++;
    }
    /* a GPU without the process of its rank (one GPU per local rank, in NVML's order, or the
     * GPU the worker was given), once the job uses GPUs at all and has run for a while */
    for (int i = 0; any && ran_ms >= grace_ms && i < nw && n < cap; i++) {
        int idx = w[i].gpu >= 0 ? w[i].gpu : w[i].local_rank;
        const struct rdzv_tel_gpu *g = NULL;

        if (w[i].gpu == AGENT_TELEM_GPU_OWN && nw > (int)s->ngpus)
            break; /* more workers than GPUs: no GPU of its own to miss it on */
        if (w[i].gpu == AGENT_TELEM_GPU_GIVEN)
            continue; /* which GPU that is, NVML's index does not say */
        for (uint32_t k = 0; k < s->ngpus; k++)
            if ((int)s->gpus[k].gpu == idx)
                g = &s->gpus[k];
        if (g == NULL || gpu_has_rank(g, w[i].rank))
            continue;
        snprintf(out[n].key, sizeof(out[n].key), "noproc:%d", w[i].rank);
        if (w[i].gpu >= 0)
            snprintf(out[n].text, sizeof(out[n].text),
                     "GPU %u of %s has no process of task %d after %llu s", g->gpu, host, w[i].rank,
                     (unsigned long long)(ran_ms / 1000));
        else
            snprintf(out[n].text, sizeof(out[n].text),
                     "GPU %u of %s has no process of rank %d (local rank %d) after %llu s", g->gpu,
                     host, w[i].rank, w[i].local_rank, (unsigned long long)(ran_ms / 1000));
        n++;
    }
    for (int i = 0; i < nw && n < cap; i++)
        n += near_cap(s, &w[i], host, &out[n]);
    for (uint32_t i = 0; i < s->ngpus && n < cap; i++) {
        const struct rdzv_tel_gpu *g = &s->gpus[i];

        if (g->xid == 0)
            continue;
        snprintf(out[n].key, sizeof(out[n].key), "xid:%u:%u", g->gpu, g->xid);
        snprintf(out[n].text, sizeof(out[n].text), "GPU %u of %s reported Xid %u (%s)", g->gpu,
                 host, g->xid, xid_text(g->xid));
        n++;
    }
    for (uint32_t i = 0; i < s->ngpus && n < cap; i++) {
        const struct rdzv_tel_gpu *g = &s->gpus[i];
        char why[96];

        if ((g->throttle & TR_WARN) == 0)
            continue;
        throttle_text(g->throttle & TR_WARN, why, sizeof(why));
        snprintf(out[n].key, sizeof(out[n].key), "throttle:%u", g->gpu);
        snprintf(out[n].text, sizeof(out[n].text),
                 "GPU %u of %s is throttled: %s (SM clock %d MHz, %d C, %.0f W)", g->gpu, host, why,
                 g->sm_clock, g->temp, g->power_mw / 1000.0);
        n++;
    }
    return n;
}

/* --- the loop ------------------------------------------------------------------------------ */

static void maybe_free(struct agent_telem *t)
{
    if (t->closing && t->timer_closed && !t->busy)
        free(t);
}

static int said(const struct agent_telem *t, const char *key)
{
    for (int i = 0; i < t->nsaid; i++)
        if (strcmp(t->said[i].key, key) == 0)
            return 1;
    return 0;
}

static void after_cb(uv_work_t *req, int status)
{
    struct agent_telem *t = req->data;
    struct rdzv_telemetry *s = &t->msg.u.telemetry;
    struct agent_telem_finding f[FINDINGS_MAX];
    uint64_t now = uv_now(t->loop);
    int n;

    t->busy = 0;
    if (t->closing || status != 0) {
        maybe_free(t);
        return;
    }
    if (t->dead) {
        uv_timer_stop(&t->timer); /* no NVML or no GPU here: nothing to say, ever */
        return;
    }
    if (!t->ok)
        return;
    n = agent_telem_findings(s, t->w, t->nw, t->host,
                             t->attempt_ms > 0 && now > t->attempt_ms ? now - t->attempt_ms : 0,
                             t->grace_ms, f, FINDINGS_MAX);
    for (int i = 0; i < n && t->nsaid < FINDINGS_MAX; i++)
        if (!said(t, f[i].key)) {
            t->said[t->nsaid++] = f[i];
            mc_warn("%s", f[i].text);
        }
    s->nwarn = (uint32_t)t->nsaid;
    for (int i = 0; i < t->nsaid; i++)
        memcpy(s->warn[i], t->said[i].text, sizeof(s->warn[i]));
    if (t->io.send != NULL)
        t->io.send(t->io.ctx, &t->msg);
}

static void tick(uv_timer_t *timer)
{
    struct agent_telem *t = timer->data;

    if (t->busy || t->closing || t->dead)
        return;
    t->nw = t->io.workers(t->io.ctx, t->w, AGENT_TELEM_WORKERS_MAX);
    t->busy = 1;
    if (uv_queue_work(t->loop, &t->work, work_cb, after_cb) != 0)
        t->busy = 0;
}

struct agent_telem *agent_telem_new(uv_loop_t *loop, unsigned period_ms, const char *host,
                                    const struct agent_telem_io *io)
{
    struct agent_telem *t = calloc(1, sizeof(*t));
    const char *g = getenv("MUSTER_TELEMETRY_GRACE_MS");

    if (t == NULL)
        return NULL;
    t->loop = loop;
    t->io = *io;
    t->period_ms = period_ms;
    t->grace_ms = g != NULL && g[0] != '\0' ? strtoull(g, NULL, 10) : AGENT_TELEM_GRACE_MS;
    snprintf(t->host, sizeof(t->host), "%s", host);
    t->work.data = t;
    uv_timer_init(loop, &t->timer);
    t->timer.data = t;
    uv_timer_start(&t->timer, tick, period_ms, period_ms);
    return t;
}

void agent_telem_attempt(struct agent_telem *t, uint64_t now_ms)
{
    if (t != NULL)
        t->attempt_ms = now_ms;
}

static void timer_closed(uv_handle_t *h)
{
    struct agent_telem *t = h->data;

    t->timer_closed = 1;
    maybe_free(t);
}

void agent_telem_close(struct agent_telem *t)
{
    if (t == NULL || t->closing)
        return;
    t->closing = 1;
    uv_close((uv_handle_t *)&t->timer, timer_closed);
}
