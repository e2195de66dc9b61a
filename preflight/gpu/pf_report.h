/* The per-rank JSON result of `muster-preflight allreduce`. */
#ifndef MUSTER_PREFLIGHT_REPORT_H
#define MUSTER_PREFLIGHT_REPORT_H

#include "pf_run.h"

/* Writes run's result as one JSON object: to run->opts.out atomically (FILE.tmp, fsync,
 * rename) or, without --out, as one line on stdout. Called on success and on failure.
 * Returns 0, or a negative errno after printing the error line on stderr. */
int pf_report_write(const struct pf_run *run);

#endif
