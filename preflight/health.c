#include "health.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct issues {
    struct pf_health_issue *out;
    int cap, n;
};

static void add(struct issues *is, enum pf_health_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add(struct issues *is, enum pf_health_level level, const char *fmt, ...)
{
    va_list ap;

    if (is->n < is->cap) {
        is->out[is->n].level = level;
        va_start(ap, fmt);
        vsnprintf(is->out[is->n].text, sizeof(is->out[is->n].text), fmt, ap);
        va_end(ap);
    }
    is->n++;
}

static const struct {
    long long bit;
    const char *name;
} clock_bits[] = {
    {PF_CLK_GPU_IDLE, "idle"},
    {PF_CLK_APP_CLOCKS, "app_clocks"},
    {PF_CLK_SW_POWER_CAP, "sw_power_cap"},
    {PF_CLK_HW_SLOWDOWN, "hw_slowdown"},
    {PF_CLK_SYNC_BOOST, "sync_boost"},
    {PF_CLK_SW_THERMAL, "sw_thermal"},
    {PF_CLK_HW_THERMAL, "hw_thermal"},
    {PF_CLK_HW_POWER_BRAKE, "hw_power_brake"},
    {PF_CLK_DISPLAY, "display_clock"},
};

void pf_health_clock_names(long long bits, char *out, size_t cap)
{
    size_t used = 0;

    if (cap == 0)
        return;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(clock_bits) / sizeof(clock_bits[0]); i++) {
        if (!(bits & clock_bits[i].bit))
            continue;
        int w = snprintf(out + used, cap - used, "%s%s", used ? "+" : "", clock_bits[i].name);
        if (w < 0 || (size_t)w >= cap - used)
            return;
        used += (size_t)w;
    }
    if (used == 0)
        snprintf(out, cap, "none");
}

static void judge_memory(const struct pf_health *h, struct issues *is)
{
    if (h->ecc_volatile_unc > 0)
        add(is, PF_HEALTH_FAIL, "%lld uncorrectable ECC error(s) since the driver loaded",
            h->ecc_volatile_unc);
    else if (h->ecc_aggregate_unc > 0)
        add(is, PF_HEALTH_WARN, "%lld uncorrectable ECC error(s) in the GPU's life",
            h->ecc_aggregate_unc);
    if (h->remap_failure > 0)
        add(is, PF_HEALTH_FAIL,
            "row remapping failed: the HBM has a bad row that cannot be "
            "replaced (replace the GPU)");
    if (h->remap_pending > 0)
        add(is, PF_HEALTH_WARN, "a row remap is pending: reset the GPU to apply it");
}

/* The clock-event reasons that mean the hardware or the driver is holding clocks down. */
#define TROUBLE_BITS                                                                               \
    (PF_CLK_HW_SLOWDOWN | PF_CLK_HW_THERMAL | PF_CLK_HW_POWER_BRAKE | PF_CLK_SW_THERMAL)

static void judge_running(const struct pf_health *h, struct issues *is)
{
    char names[160];

    if (h->clock_events > 0 && (h->clock_events & TROUBLE_BITS)) {
        pf_health_clock_names(h->clock_events & TROUBLE_BITS, names, sizeof(names));
        add(is, PF_HEALTH_WARN, "clocks held down by %s (SM %d of %d MHz)", names, h->sm_mhz,
            h->sm_max_mhz);
    }
    if (h->temp_c >= PF_HEALTH_HOT_C)
        add(is, PF_HEALTH_WARN, "temperature %d C before the job", h->temp_c);
    if (h->pcie_width > 0 && h->pcie_width_max > 0 && h->pcie_width < h->pcie_width_max)
        add(is, PF_HEALTH_WARN, "PCIe link x%d, the GPU can do x%d (a bad slot or riser?)",
            h->pcie_width, h->pcie_width_max);
    if (h->pcie_gen > 0 && h->pcie_gen_max > 0 && h->pcie_gen < h->pcie_gen_max)
        add(is, PF_HEALTH_NOTE, "PCIe gen%d now, max gen%d (normal while idle)", h->pcie_gen,
            h->pcie_gen_max);
    if (h->persistence == 0)
        add(is, PF_HEALTH_NOTE, "persistence mode off");
}

int pf_health_judge(const struct pf_health *h, struct pf_health_issue *out, int cap)
{
    struct issues is = {out, out ? cap : 0, 0};

    if (h == NULL || !h->nvml)
        return 0;
    judge_memory(h, &is);
    judge_running(h, &is);
    return is.n;
}

int pf_health_worst(const struct pf_health_issue *issues, int n)
{
    int worst = -1;

    for (int i = 0; i < n; i++)
        if ((int)issues[i].level > worst)
            worst = (int)issues[i].level;
    return worst;
}

void pf_health_summary(const struct pf_health *h, char *out, size_t cap)
{
    char clk[160] = "?", ecc[64] = "ECC ?", temp[16] = "? C";

    if (h == NULL || !h->nvml) {
        snprintf(out, cap, "NVML not found: health not checked");
        return;
    }
    if (h->clock_events >= 0)
        pf_health_clock_names(h->clock_events, clk, sizeof(clk));
    if (h->ecc_enabled == 0)
        snprintf(ecc, sizeof(ecc), "ECC off");
    else if (h->ecc_volatile_unc >= 0)
        snprintf(ecc, sizeof(ecc), "ECC %s, %lld/%lld uncorrected (now/life)",
                 h->ecc_enabled > 0 ? "on" : "?", h->ecc_volatile_unc, h->ecc_aggregate_unc);
    if (h->temp_c >= 0)
        snprintf(temp, sizeof(temp), "%d C", h->temp_c);
    snprintf(out, cap,
             "%s; rows: %s%s; clock events: %s; SM %d/%d MHz; %s; PCIe gen%d x%d (max gen%d "
             "x%d); persistence %s",
             ecc,
             h->remap_failure > 0    ? "remap FAILED"
             : h->remap_pending > 0  ? "remap pending"
             : h->remap_pending == 0 ? "ok"
                                     : "?",
             h->remap_unc_rows > 0 ? " (remapped for uncorrectable)" : "", clk, h->sm_mhz,
             h->sm_max_mhz, temp, h->pcie_gen, h->pcie_width, h->pcie_gen_max, h->pcie_width_max,
             h->persistence > 0    ? "on"
             : h->persistence == 0 ? "off"
                                   : "?");
}

int pf_health_parse_pids(const char *s, int *pids, int cap)
{
    int n = 0;

    if (s == NULL || *s == '\0')
        return -EINVAL;
    if (strcmp(s, "0") == 0)
        return 0;
    for (;;) {
        long v = 0;
        int digits = 0;

        for (; *s >= '0' && *s <= '9'; s++, digits++)
            if ((v = v * 10 + (*s - '0')) > 0x7fffffffL)
                return -EINVAL;
        if (digits == 0 || v == 0 || n >= cap)
            return -EINVAL;
        pids[n++] = (int)v;
        if (*s == '\0')
            return n;
        if (*s++ != ',')
            return -EINVAL;
    }
}

int pf_health_held_by(const struct pf_gpu_proc *procs, int n, const int *pids, int npids)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < npids; j++)
            if (pids[j] > 0 && procs[i].pid == (unsigned)pids[j])
                return i;
    return -1;
}

unsigned short pf_bf16_from_float(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return (unsigned short)(u >> 16);
}

float pf_bf16_to_float(unsigned short b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

long pf_health_gemm_wrong(const unsigned short *c, size_t count, int n)
{
    unsigned short want = pf_bf16_from_float((float)n);

    for (size_t i = 0; i < count; i++)
        if (c[i] != want)
            return (long)i;
    return -1;
}
