/* NVML by dlopen with the exported, versioned names (round2.md §7: nvml.h #defines the plain
 * names to _v2/_v3 ones; the plain nvmlInit is the old ABI). The build host has no nvml.h, so
 * the few types are declared here as NVML's ABI has them: the handle is a pointer, enums are
 * ints, nvmlReturn_t 0 is success. */
#include "pf_nvml.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "clock.h"

typedef void *nvml_dev;
typedef int (*nvml_void_fn)(void);
typedef int (*nvml_handle_fn)(const char *, nvml_dev *);
typedef int (*nvml_uint_fn)(nvml_dev, unsigned int *);
typedef int (*nvml_clock_fn)(nvml_dev, int, unsigned int *);

enum {
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
    NVML_VOLATILE_ECC = 0,
    NVML_AGGREGATE_ECC = 1,
    NVML_CLOCK_SM = 1,
    NVML_TEMPERATURE_GPU = 0,
};

/* nvmlTemperature_v1_t; version = NVML_STRUCT_VERSION(Temperature, 1) = sizeof | 1 << 24 */
struct nvml_temperature {
    unsigned int version;
    int sensor_type;
    int temperature;
};

static void *sym(void *lib, const char *name)
{
    return dlsym(lib, name);
}

static void ecc(void *lib, nvml_dev d, struct pf_health *h)
{
    int (*mode)(nvml_dev, int *, int *) =
        (int (*)(nvml_dev, int *, int *))sym(lib, "nvmlDeviceGetEccMode");
    int (*total)(nvml_dev, int, int, unsigned long long *) =
        (int (*)(nvml_dev, int, int, unsigned long long *))sym(lib, "nvmlDeviceGetTotalEccErrors");
    int cur = 0, pend = 0;
    unsigned long long v = 0;

    if (mode && mode(d, &cur, &pend) == 0)
        h->ecc_enabled = cur != 0;
    if (h->ecc_enabled == 0 || total == NULL)
        return;
    if (total(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &v) == 0)
        h->ecc_volatile_unc = (long long)v;
    if (total(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &v) == 0)
        h->ecc_aggregate_unc = (long long)v;
}

static void rows(void *lib, nvml_dev d, struct pf_health *h)
{
    int (*remapped)(nvml_dev, unsigned int *, unsigned int *, unsigned int *, unsigned int *) =
        (int (*)(nvml_dev, unsigned int *, unsigned int *, unsigned int *, unsigned int *))sym(
            lib, "nvmlDeviceGetRemappedRows");
    unsigned int corr = 0, unc = 0, pending = 0, failure = 0;

    if (remapped && remapped(d, &corr, &unc, &pending, &failure) == 0) {
        h->remap_unc_rows = unc;
        h->remap_pending = pending != 0;
        h->remap_failure = failure != 0;
    }
}

static int get_uint(void *lib, const char *name, nvml_dev d)
{
    nvml_uint_fn f = (nvml_uint_fn)sym(lib, name);
    unsigned int v = 0;

    return f && f(d, &v) == 0 ? (int)v : -1;
}

static void clocks_temp(void *lib, nvml_dev d, struct pf_health *h)
{
    int (*events)(nvml_dev, unsigned long long *) =
        (int (*)(nvml_dev, unsigned long long *))sym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    nvml_clock_fn cur = (nvml_clock_fn)sym(lib, "nvmlDeviceGetClockInfo");
    nvml_clock_fn max = (nvml_clock_fn)sym(lib, "nvmlDeviceGetMaxClockInfo");
    int (*temp_v)(nvml_dev, struct nvml_temperature *) =
        (int (*)(nvml_dev, struct nvml_temperature *))sym(lib, "nvmlDeviceGetTemperatureV");
    nvml_clock_fn temp = (nvml_clock_fn)sym(lib, "nvmlDeviceGetTemperature");
    struct nvml_temperature t = {(unsigned int)sizeof(t) | (1u << 24), NVML_TEMPERATURE_GPU, 0};
    unsigned long long bits = 0;
    unsigned int v = 0;

    if (events && events(d, &bits) == 0)
        h->clock_events = (long long)bits;
    if (cur && cur(d, NVML_CLOCK_SM, &v) == 0)
        h->sm_mhz = (int)v;
    if (max && max(d, NVML_CLOCK_SM, &v) == 0)
        h->sm_max_mhz = (int)v;
    if (temp_v && temp_v(d, &t) == 0)
        h->temp_c = t.temperature;
    else if (temp && temp(d, NVML_TEMPERATURE_GPU, &v) == 0) /* deprecated in 13.0, exported */
        h->temp_c = (int)v;
}

static void pcie_persistence(void *lib, nvml_dev d, struct pf_health *h)
{
    h->pcie_gen = get_uint(lib, "nvmlDeviceGetCurrPcieLinkGeneration", d);
    h->pcie_width = get_uint(lib, "nvmlDeviceGetCurrPcieLinkWidth", d);
    h->pcie_gen_max = get_uint(lib, "nvmlDeviceGetMaxPcieLinkGeneration", d);
    h->pcie_width_max = get_uint(lib, "nvmlDeviceGetMaxPcieLinkWidth", d);
    /* nvmlEnableState_t is an int-sized enum: 1 = enabled */
    h->persistence = get_uint(lib, "nvmlDeviceGetPersistenceMode", d);
    if (h->persistence > 1)
        h->persistence = 1;
}

static void unknown(struct pf_health *h)
{
    *h = (struct pf_health){0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
}

void pf_nvml_query(const char *uuid, const char *pci, struct pf_health *h)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    nvml_void_fn init = NULL, shutdown = NULL;
    nvml_handle_fn by_uuid = NULL, by_pci = NULL;
    nvml_dev d = NULL;

    unknown(h);
    if (lib == NULL)
        return;
    init = (nvml_void_fn)sym(lib, "nvmlInit_v2");
    shutdown = (nvml_void_fn)sym(lib, "nvmlShutdown");
    by_uuid = (nvml_handle_fn)sym(lib, "nvmlDeviceGetHandleByUUID");
    by_pci = (nvml_handle_fn)sym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    if (init == NULL || shutdown == NULL || init() != 0)
        goto out; /* library kept: unloading NVML is not worth its teardown risks */
    if (!(by_uuid && uuid && by_uuid(uuid, &d) == 0) && !(by_pci && pci && by_pci(pci, &d) == 0))
        goto done;
    h->nvml = 1;
    ecc(lib, d, h);
    rows(lib, d, h);
    clocks_temp(lib, d, h);
    pcie_persistence(lib, d, h);
done:
    shutdown();
out:
    return;
}

/* nvmlProcessInfo_t of nvmlDeviceGetComputeRunningProcesses_v3 (and _v2: the same layout) */
struct nvml_proc {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};
struct nvml_memory {
    unsigned long long total, free, used;
};
#define NVML_INSUFFICIENT_SIZE 7
#define DRAIN_POLL_MS 20

typedef int (*nvml_procs_fn)(nvml_dev, unsigned int *, struct nvml_proc *);

/* The GPU's compute processes into out (at most cap); -1 when NVML cannot list them. */
static int list_procs(nvml_procs_fn f, nvml_dev d, struct pf_gpu_proc *out, int cap)
{
    static struct nvml_proc p[PF_HEALTH_PIDS_MAX];
    unsigned int n = PF_HEALTH_PIDS_MAX;
    int rc = f(d, &n, p);

    if (rc == NVML_INSUFFICIENT_SIZE)
        n = PF_HEALTH_PIDS_MAX; /* more than we keep: the first ones are enough to judge */
    else if (rc != 0)
        return -1;
    if (n > PF_HEALTH_PIDS_MAX)
        n = PF_HEALTH_PIDS_MAX;
    for (unsigned int i = 0; i < n && (int)i < cap; i++)
        out[i] = (struct pf_gpu_proc){p[i].pid, p[i].used};
    return (int)n < cap ? (int)n : cap;
}

void pf_nvml_wait_drain(const char *uuid, const char *pci, const int *pids, int npids, int drain_ms,
                        struct pf_drain *d)
{
    static struct pf_gpu_proc procs[PF_HEALTH_PIDS_MAX];
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    nvml_void_fn init, shutdown;
    nvml_handle_fn by_uuid, by_pci;
    nvml_procs_fn list = NULL;
    int (*meminfo)(nvml_dev, struct nvml_memory *) = NULL;
    struct nvml_memory m = {0, 0, 0};
    nvml_dev dev = NULL;
    double t0 = mc_mono_ms_f();

    memset(d, 0, sizeof(*d));
    if (lib == NULL)
        return;
    init = (nvml_void_fn)sym(lib, "nvmlInit_v2");
    shutdown = (nvml_void_fn)sym(lib, "nvmlShutdown");
    by_uuid = (nvml_handle_fn)sym(lib, "nvmlDeviceGetHandleByUUID");
    by_pci = (nvml_handle_fn)sym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    if ((list = (nvml_procs_fn)sym(lib, "nvmlDeviceGetComputeRunningProcesses_v3")) == NULL)
        list = (nvml_procs_fn)sym(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    meminfo = (int (*)(nvml_dev, struct nvml_memory *))sym(lib, "nvmlDeviceGetMemoryInfo");
    if (init == NULL || shutdown == NULL || list == NULL || init() != 0)
        return;
    if (!(by_uuid && uuid && by_uuid(uuid, &dev) == 0) &&
        !(by_pci && pci && by_pci(pci, &dev) == 0))
        goto done;
    for (;;) {
        int n = list_procs(list, dev, procs, PF_HEALTH_PIDS_MAX), held;
        struct timespec ts = {0, DRAIN_POLL_MS * 1000000L};

        if (n < 0)
            break; /* NVML cannot list them here: not checked */
        d->nvml = 1;
        d->procs = n;
        held = pf_health_held_by(procs, n, pids, npids);
        d->held_pid = held >= 0 ? (int)procs[held].pid : 0;
        d->held_bytes = held >= 0 ? procs[held].used_bytes : 0;
        d->waited_ms = mc_mono_ms_f() - t0;
        if (held < 0 || d->waited_ms >= drain_ms)
            break;
        nanosleep(&ts, NULL);
    }
    if (meminfo != NULL && meminfo(dev, &m) == 0) {
        d->used = m.used;
        d->total = m.total;
    }
done:
    shutdown();
}
