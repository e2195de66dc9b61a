/* NVML by dlopen with the exported, versioned names (round2.md §7: nvml.h #defines the plain
 * names to _v2/_v3 ones; the plain nvmlInit is the old ABI). The build host has no nvml.h, so
 * the few types are declared here as NVML's ABI has them: the handle is a pointer, enums are
 * ints, nvmlReturn_t 0 is success. */
#include "pf_nvml.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

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
