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

#endif
