/* `muster-preflight health`: the quick per-GPU check before a restart round (pf_health.c). */
#ifndef MUSTER_PREFLIGHT_PF_HEALTH_H
#define MUSTER_PREFLIGHT_PF_HEALTH_H

/* Test only: MUSTER_PREFLIGHT_SIMULATE_HEALTH_FAIL=<gpu index> makes that GPU's health check
 * fail after its real checks passed, so the exclusion path runs on a healthy host
 * (tests/gpu/health_restart.sh). Never set it in a real job. */
#define PF_SIMULATE_HEALTH_FAIL_ENV "MUSTER_PREFLIGHT_SIMULATE_HEALTH_FAIL"

/* argv[0] is "health". Returns the exit code: PFG_EXIT_OK, PFG_EXIT_CHECK (a GPU failed: its
 * line is on stderr and in --reason-file), PFG_EXIT_USAGE. */
int pf_health_main(int argc, char **argv);

#endif
