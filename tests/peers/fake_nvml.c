/* A fake libnvidia-ml.so for CPU tests of the GPU telemetry (docs/TELEMETRY.md "Testing"): the
 * agent dlopens it through MUSTER_NVML_LIBRARY like the real one. It answers from the scenario
 * file FAKE_NVML_SCENARIO, read again at every nvmlDeviceGetCount_v2 (a sample), so a test may
 * change it while the job runs. One line per fact, '#' comments:
 *
 *   gpu UTIL MEM_USED MEM_TOTAL SM_MHZ MEM_MHZ TEMP_C POWER_MW THROTTLE_BITS
 *   proc GPU_INDEX PIDFILE MEM_BYTES
 *   xid GPU_INDEX CODE
 *
 * GPUs are numbered in order; a proc line lists the pid written in PIDFILE (a worker writes
 * its own) as a compute process of that GPU, and is skipped while the file is missing or
 * empty. Each xid line is one Xid critical error event of that GPU, delivered once by
 * nvmlEventSetWait_v2 (to a set the GPU was registered with) in the order of the lines: a test
 * appends a line to raise one more. No scenario file (or an unreadable one): nvmlInit_v2 fails, as
 * on a host without a driver. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPUS 16
#define PROCS 32

struct gpu {
    unsigned util, sm, mem_clk, temp, power;
    unsigned long long used, total, throttle;
};
struct proc {
    unsigned gpu;
    unsigned pid;
    unsigned long long mem;
};
struct nvml_util {
    unsigned int gpu, memory;
};
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_proc {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};

static struct gpu g_gpu[GPUS];
static unsigned g_ngpu;
static struct proc g_proc[PROCS];
static unsigned g_nproc;
#define XIDS 64
static struct {
    unsigned gpu, code;
} g_xid[XIDS];
static unsigned g_nxid, g_xid_sent;
static unsigned long long g_registered; /* GPUs registered for Xid events (bits) */

static unsigned read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned pid = 0;

    if (f == NULL)
        return 0;
    if (fscanf(f, "%u", &pid) != 1)
        pid = 0;
    fclose(f);
    return pid;
}

static int load(void)
{
    const char *path = getenv("FAKE_NVML_SCENARIO");
    char line[1024], file[900];
    FILE *f;

    if (path == NULL || (f = fopen(path, "r")) == NULL)
        return -1;
    g_ngpu = g_nproc = g_nxid = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        struct gpu *g = &g_gpu[g_ngpu];
        struct proc *p = &g_proc[g_nproc];

        if (g_ngpu < GPUS &&
            sscanf(line, "gpu %u %llu %llu %u %u %u %u %llx", &g->util, &g->used, &g->total, &g->sm,
                   &g->mem_clk, &g->temp, &g->power, &g->throttle) == 8)
            g_ngpu++;
        else if (g_nproc < PROCS &&
                 sscanf(line, "proc %u %899s %llu", &p->gpu, file, &p->mem) == 3 &&
                 (p->pid = read_pid(file)) != 0)
            g_nproc++;
        else if (g_nxid < XIDS &&
                 sscanf(line, "xid %u %u", &g_xid[g_nxid].gpu, &g_xid[g_nxid].code) == 2)
            g_nxid++;
    }
    fclose(f);
    return 0;
}

static struct gpu *dev(void *d)
{
    uintptr_t i = (uintptr_t)d;

    return i >= 1 && i <= g_ngpu ? &g_gpu[i - 1] : NULL;
}

int nvmlInit_v2(void)
{
    return load() == 0 ? 0 : 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
}

int nvmlShutdown(void)
{
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (load() != 0)
        return 999;
    *n = g_ngpu;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **d)
{
    if (i >= g_ngpu)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = (void *)(uintptr_t)(i + 1);
    return 0;
}

int nvmlDeviceGetUtilizationRates(void *d, struct nvml_util *u)
{
    struct gpu *g = dev(d);

    if (g == NULL)
        return 2;
    u->gpu = g->util;
    u->memory = g->util;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *d, struct nvml_memory *m)
{
    struct gpu *g = dev(d);

    if (g == NULL)
        return 2;
    m->total = g->total;
    m->used = g->used;
    m->free = g->total - g->used;
    return 0;
}

int nvmlDeviceGetClockInfo(void *d, int type, unsigned int *v)
{
    struct gpu *g = dev(d);

    if (g == NULL)
        return 2;
    *v = type == 2 ? g->mem_clk : g->sm;
    return 0;
}

int nvmlDeviceGetTemperature(void *d, int sensor, unsigned int *v)
{
    struct gpu *g = dev(d);

    (void)sensor;
    if (g == NULL)
        return 2;
    *v = g->temp;
    return 0;
}

int nvmlDeviceGetPowerUsage(void *d, unsigned int *mw)
{
    struct gpu *g = dev(d);

    if (g == NULL)
        return 2;
    *mw = g->power;
    return 0;
}

int nvmlDeviceGetCurrentClocksEventReasons(void *d, unsigned long long *bits)
{
    struct gpu *g = dev(d);

    if (g == NULL)
        return 2;
    *bits = g->throttle;
    return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned int *n, struct nvml_proc *out)
{
    struct gpu *g = dev(d);
    unsigned idx = (unsigned)((uintptr_t)d - 1), k = 0;

    if (g == NULL)
        return 2;
    for (unsigned i = 0; i < g_nproc; i++) {
        if (g_proc[i].gpu != idx)
            continue;
        if (k < *n)
            out[k] = (struct nvml_proc){g_proc[i].pid, g_proc[i].mem, 0xFFFFFFFFu, 0xFFFFFFFFu};
        k++;
    }
    if (k > *n) {
        *n = k;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    *n = k;
    return 0;
}

/* Xid events (nvmlEventSet*, nvmlEventTypeXidCriticalError = 0x8) */
struct nvml_event {
    void *device;
    unsigned long long type, data;
    unsigned int gpu_instance, compute_instance;
};

int nvmlEventSetCreate(void **set)
{
    *set = (void *)(uintptr_t)0x5e7;
    return 0;
}

int nvmlDeviceRegisterEvents(void *d, unsigned long long types, void *set)
{
    uintptr_t i = (uintptr_t)d;

    if (set != (void *)(uintptr_t)0x5e7 || dev(d) == NULL)
        return 2;
    if (types & 0x8)
        g_registered |= 1ull << (i - 1);
    return 0;
}

int nvmlEventSetWait_v2(void *set, struct nvml_event *e, unsigned int timeout_ms)
{
    (void)timeout_ms; /* never waits: the scenario has the events already or not at all */
    if (set != (void *)(uintptr_t)0x5e7)
        return 2;
    while (g_xid_sent < g_nxid) {
        unsigned k = g_xid_sent++;

        if (g_xid[k].gpu >= g_ngpu || !(g_registered & (1ull << g_xid[k].gpu)))
            continue;
        *e = (struct nvml_event){(void *)(uintptr_t)(g_xid[k].gpu + 1), 0x8, g_xid[k].code, 0, 0};
        return 0;
    }
    return 10; /* NVML_ERROR_TIMEOUT */
}

int nvmlEventSetFree(void *set)
{
    (void)set;
    return 0;
}
