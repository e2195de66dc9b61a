/* muster's exit codes: the one table. Every muster command (run, preflight, plan, server,
 * status, token) and the pre-flight node process exit with these; a worker's own code (or
 * 128 + its signal) is passed through as is by `muster run`.
 *
 *   code  name                meaning
 *   0     MC_EXIT_OK          done
 *   1     MC_EXIT_PROBE       `muster plan` / --auto-batch: the probe run failed or wrote no
 *                             usable file
 *   2     MC_EXIT_USAGE       bad command line, environment or input; nothing was started
 *   3     MC_EXIT_RDZV        the rendezvous failed (server unreachable, refused, timed out)
 *   4     MC_EXIT_PREFLIGHT   a pre-flight check failed: the report names node, GPU, link
 *   5     MC_EXIT_NO_GPU      `muster preflight` found no GPU / no muster-preflight to run
 *   6     MC_EXIT_NOT_RETRYABLE  `muster run`: not retried, the same failure (signature)
 *                             ended --max-same-failure attempts in a row with no newer
 *                             checkpoint; do not requeue (examples/slurm/ does not)
 *   70    MC_EXIT_INTERNAL    EX_SOFTWARE: muster itself could not go on
 *   75    MC_EXIT_REQUEUE     EX_TEMPFAIL: pre-empted, requeue the job (Slurm)
 *
 * muster-preflight, the per-GPU program the pre-flight node starts (preflight/gpu/), is a
 * program of its own with its own codes, PFG_EXIT_* below. They never become muster's exit
 * code: the node process (preflight/nccl.c) reads them, records them in the report ("exit")
 * and turns any non-zero one into a failed check, i.e. MC_EXIT_PREFLIGHT (4). So 4 means
 * "a rank never arrived" from muster-preflight and "a check failed" from muster: two
 * programs, two names. */
#ifndef MUSTER_COMMON_EXITCODE_H
#define MUSTER_COMMON_EXITCODE_H

#define MC_EXIT_OK 0
#define MC_EXIT_PROBE 1
#define MC_EXIT_USAGE 2
#define MC_EXIT_RDZV 3
#define MC_EXIT_PREFLIGHT 4
#define MC_EXIT_NO_GPU 5
#define MC_EXIT_NOT_RETRYABLE 6
#define MC_EXIT_INTERNAL 70
#define MC_EXIT_REQUEUE 75

/* muster-preflight's own (also in preflight/gpu/muster_preflight.c's --help) */
#define PFG_EXIT_OK 0      /* every check passed */
#define PFG_EXIT_CHECK 1   /* a check failed: duplicate GPU, NCCL error, wrong sum */
#define PFG_EXIT_USAGE 2   /* bad command line or worker environment */
#define PFG_EXIT_START 3   /* CUDA, NCCL or the muster connection cannot start */
#define PFG_EXIT_MISSING 4 /* a rank never arrived, or a deadline passed */

#endif
