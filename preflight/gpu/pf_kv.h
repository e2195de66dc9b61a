/* muster-preflight's use of the job's key-value store (libmuster). Keys, all in the job's
 * current round, values text unless noted:
 *   pf/host/<rank>         put by the node process before it starts us: the rank's host name
 *   pf/mem/<rank>          bytes of the device buffer this rank could allocate (decimal)
 *   pf/gpu/<rank>          "<hostname>\t<uuid>\t<pci>\t<device index>"
 *   pf/arrived/<rank>      "1"
 *   pf/id/node/<group>     128 raw bytes: the NCCL unique id of node <group>'s communicator
 *   pf/id/all              128 raw bytes: the NCCL unique id of the all-ranks communicator
 *   pf/init/<stage>/<rank> "1" just before ncclCommInitRankConfig
 *   pf/ready/<stage>/<rank> "1" once the communicator is ready
 *   pf/error/<rank>        this rank's first error, when it failed (best effort)
 * pf/mem is put before pf/gpu on the same connection, so whoever sees pf/gpu/<r> finds it. */
#ifndef MUSTER_PREFLIGHT_KV_H
#define MUSTER_PREFLIGHT_KV_H

#include <stddef.h>

#include "pf_run.h"

/* Puts text under key. Returns 0, or records a PFG_EXIT_START error and returns it. */
int pf_kv_put_text(struct pf_run *run, const char *key, const char *text);

/* Gets key into buf (cap bytes), waiting until deadline_ms (mc_mono_ms_f() scale; a deadline
 * already past makes it a non-blocking look-up). Sets *len. Returns 0, -ETIMEDOUT/-ENOENT when
 * the key is still missing (nothing recorded), or records a PFG_EXIT_START error and returns it. */
int pf_kv_get_until(struct pf_run *run, const char *key, void *buf, size_t cap, size_t *len,
                    double deadline_ms);

/* "rank R (host H)" with H from pf/host/<R> (non-blocking; "host unknown" when absent), plus
 * " [it reported: ...]" when pf/error/<R> exists. */
void pf_kv_rank_desc(struct pf_run *run, int rank, char *out, size_t cap);

/* Puts pf/mem, pf/gpu and pf/arrived for this rank. Returns 0 or a recorded error. */
int pf_kv_publish(struct pf_run *run);

/* Waits (up to --timeout-ms) for every rank's pf/gpu, fails when two ranks share a GPU UUID
 * (PFG_EXIT_CHECK) or a rank never arrived (PFG_EXIT_MISSING), and sets run->max_bytes to the
 * smallest pf/mem of all ranks so every rank sweeps the same sizes. Returns 0 or the error. */
int pf_kv_check_gpus(struct pf_run *run);

/* Lists (non-blocking) the ranks first .. first+n-1, except `self`, that lack key
 * "<prefix>/<rank>" as "rank 1 (host b), rank 2 (host c)" (at most 8, then "and K more").
 * Returns how many are missing; out is "" when none. */
int pf_kv_list_missing(struct pf_run *run, const char *prefix, int first, int n, int self,
                       char *out, size_t cap);

/* Best effort: puts run->error under pf/error/<rank> so other ranks can name the cause. */
void pf_kv_report_error(struct pf_run *run);

#endif
