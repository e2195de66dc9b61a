/* One pre-flight stage: an NCCL communicator over a contiguous block of global ranks, an exact
 * all-reduce check, then the bandwidth sweep, then a clean finalize. */
#ifndef MUSTER_PREFLIGHT_STAGE_H
#define MUSTER_PREFLIGHT_STAGE_H

#include "pf_run.h"

struct pf_stage_spec {
    const char *name;   /* "node" or "all": KV keys pf/{init,ready}/<name>/<rank> (static) */
    const char *id_key; /* where the NCCL unique id travels (borrowed) */
    int first;          /* global rank of NCCL rank 0 */
    int nranks;
    int my_rank; /* NCCL rank of this process, 0 .. nranks-1 */
};

/* Runs the stage into *st (borrowed, filled even on failure). NCCL rank 0 creates the unique id
 * and puts it under spec->id_key; the others wait for it. Every wait has its own deadline of
 * --timeout-ms. On any failure the communicator is aborted (never left half-alive).
 * Returns 0, or the error recorded in run (PFG_EXIT_CHECK for NCCL errors and wrong sums,
 * PFG_EXIT_MISSING for timeouts, PFG_EXIT_START when NCCL cannot start or the KV store fails). */
int pf_stage_run(struct pf_run *run, const struct pf_stage_spec *spec, struct pf_stage_result *st);

#endif
