/* What NVML says about one GPU's health (docs/PREFLIGHT.md "What runs"), and the rule that names
 * trouble. Filled by muster-preflight (preflight/gpu/pf_nvml.c, NVML loaded at run time); judged
 * here in pure C so the rule is unit-tested without a GPU. */
#ifndef MUSTER_PREFLIGHT_HEALTH_H
#define MUSTER_PREFLIGHT_HEALTH_H

#include <stddef.h>

/* Clock-event ("throttle") reason bits, as nvml.h's nvmlClocksEventReason* (round2.md §7). */
#define PF_CLK_GPU_IDLE 0x1ULL
#define PF_CLK_APP_CLOCKS 0x2ULL
#define PF_CLK_SW_POWER_CAP 0x4ULL
#define PF_CLK_HW_SLOWDOWN 0x8ULL
#define PF_CLK_SYNC_BOOST 0x10ULL
#define PF_CLK_SW_THERMAL 0x20ULL
#define PF_CLK_HW_THERMAL 0x40ULL
#define PF_CLK_HW_POWER_BRAKE 0x80ULL
#define PF_CLK_DISPLAY 0x100ULL

#define PF_HEALTH_HOT_C 85 /* a GPU this hot before the job is named */

/* Every field -1 when NVML did not answer it (an old driver, a GPU without ECC, a VM). */
struct pf_health {
    int nvml;                    /* 1: NVML answered for this GPU; 0: nothing below is valid */
    int ecc_enabled;             /* current ECC mode */
    long long ecc_volatile_unc;  /* uncorrected ECC errors since the driver loaded */
    long long ecc_aggregate_unc; /* uncorrected ECC errors over the GPU's life */
    int remap_pending;           /* rows remapped, applied at the next GPU reset */
    int remap_failure;           /* a row could not be remapped: the memory is bad */
    long long remap_unc_rows;    /* rows remapped for uncorrectable errors */
    long long clock_events;      /* PF_CLK_* bits now */
    int sm_mhz, sm_max_mhz;      /* SM clock now (right after the GEMM) and its maximum */
    int temp_c;
    int pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    int persistence; /* persistence mode on */
};

enum pf_health_level { PF_HEALTH_NOTE = 0, PF_HEALTH_WARN = 1, PF_HEALTH_FAIL = 2 };

struct pf_health_issue {
    enum pf_health_level level;
    char text[192];
};

#define PF_HEALTH_MAX_ISSUES 12

/* Names what predicts trouble: FAIL for uncorrected ECC errors since the driver loaded and a
 * row-remap failure; WARN for uncorrected errors in the GPU's past, a pending row remap, clock
 * events from HW slowdown, HW thermal, HW power brake or SW thermal slowdown, a temperature of
 * PF_HEALTH_HOT_C or more, a PCIe link narrower than the GPU's maximum; NOTE for persistence
 * mode off and a PCIe generation below the maximum (the link drops its generation when idle).
 * Stores up to cap issues, returns how many there are in all; 0 when h->nvml is 0. */
int pf_health_judge(const struct pf_health *h, struct pf_health_issue *out, int cap);

/* The worst level among issues[0..n), or -1 for none. */
int pf_health_worst(const struct pf_health_issue *issues, int n);

/* One short line of the facts, e.g. "ECC on, 0 uncorrected; rows: none pending; clocks: no
 * slowdown; SM 1980/1980 MHz; 34 C; PCIe gen5 x16 (max gen5 x16); persistence on", or
 * "NVML not found: health not checked" when h->nvml is 0. */
void pf_health_summary(const struct pf_health *h, char *out, size_t cap);

/* The names of the set PF_CLK_* bits, "+"-joined ("sw_power_cap+hw_slowdown"), "none" for 0. */
void pf_health_clock_names(long long bits, char *out, size_t cap);

/* ---- the health check before a restart round (muster-preflight health) ---- */

/* One process NVML lists on a GPU (nvmlDeviceGetComputeRunningProcesses). */
struct pf_gpu_proc {
    unsigned pid;
    unsigned long long used_bytes; /* ~0ULL when NVML cannot say (no permission, MIG) */
};

#define PF_HEALTH_PIDS_MAX 256

/* Parses "1234,1235" (decimal pids > 0; "0" alone: none) into pids[0..cap). Returns how many,
 * or -EINVAL for anything else (empty, a sign, junk, more than cap). */
int pf_health_parse_pids(const char *s, int *pids, int cap);

/* The index in procs[0..n) of the first process that is one of pids[0..npids) (a killed
 * worker whose GPU memory the driver has not released yet), or -1 when none is. A pid NVML
 * reports from another pid namespace (a container without the host's pids) matches nothing:
 * then the wait cannot see the workers (docs/PREFLIGHT.md). */
int pf_health_held_by(const struct pf_gpu_proc *procs, int n, const int *pids, int npids);

/* The quick GEMM's check: C = A x A with A all ones (n x n) is n in every element. Returns the
 * index of the first element of c[0..count) (bf16 bit patterns) that is not exactly n, or -1
 * when all are; n must be a power of two up to 2^16 (exact in bf16). */
long pf_health_gemm_wrong(const unsigned short *c, size_t count, int n);

/* bf16 bits of float f (round toward zero) and back. */
unsigned short pf_bf16_from_float(float f);
float pf_bf16_to_float(unsigned short b);

#endif
