/* NVML health facts of one GPU (docs/PREFLIGHT.md "What runs"), NVML loaded with
 * dlopen("libnvidia-ml.so.1") so the build needs no driver and a host without NVML still runs the
 * pre-flight. */
#ifndef MUSTER_PREFLIGHT_NVML_H
#define MUSTER_PREFLIGHT_NVML_H

#include "health.h"

/* Fills *h for the GPU with this UUID ("GPU-...") or, failing that, PCI bus id. Every fact NVML
 * does not answer stays -1; h->nvml = 0 when NVML is missing or does not know the GPU (then
 * pf_health_summary says "NVML not found: health not checked"). Never fails. */
void pf_nvml_query(const char *uuid, const char *pci, struct pf_health *h);

/* What the drain wait before a restart round saw (muster-preflight health). */
struct pf_drain {
    int nvml;                       /* 1: NVML listed the GPU's processes; 0: not checked */
    int held_pid;                   /* a killed worker still on the GPU at the end, 0: none */
    unsigned long long held_bytes;  /* its memory (~0ULL: NVML cannot say) */
    double waited_ms;               /* until none was left, or the whole wait */
    unsigned long long used, total; /* the GPU's memory at the end (0: unknown) */
    int procs;                      /* processes listed at the end */
};

/* Waits (polling every 20 ms, at most drain_ms) until none of pids[0..npids) is among the
 * compute processes NVML lists on this GPU (UUID, or PCI bus id). Never fails: without NVML
 * d->nvml is 0 and nothing is waited for. */
void pf_nvml_wait_drain(const char *uuid, const char *pci, const int *pids, int npids, int drain_ms,
                        struct pf_drain *d);

#endif
