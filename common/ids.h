/* Job and run ids (--rdzv-id, the run id derived from it, SLURM_JOB_ID, TORCHELASTIC_RUN_ID).
 *
 * An id becomes a directory name under --log-dir and $TMPDIR, a key on the rendezvous server, a
 * word in log lines and a field of /status. So one character set everywhere:
 *
 *     1 to MC_ID_MAX (128) bytes of  A-Z a-z 0-9 . _ : @ + -   and not "." or "..".
 *
 * That admits what torchrun and schedulers produce: "none" (the launcher replaces it with a
 * uuid), uuids, Slurm job ids ("12345", array "12345_7", heterogeneous "12345+1"), and
 * "user@host:job"-style names. It refuses '/' and ".." (escape a directory), spaces, quotes,
 * control characters and any byte >= 0x80 (forged or broken log lines, ids that do not round-trip
 * through JSON). */
#ifndef MUSTER_COMMON_IDS_H
#define MUSTER_COMMON_IDS_H

#include <stddef.h>

#define MC_ID_MAX 128
/* For help texts and error lines. */
#define MC_ID_CHARSET_TEXT "1-128 of A-Z a-z 0-9 . _ : @ + - (not \".\" or \"..\")"

/* Whether id is a valid job/run id (see above). Returns 1 when it is, 0 when it is not (or is
 * NULL); then err (may be NULL, errlen 0) gets one printable line without the flag name, e.g.
 * "'a/b' has '/' at offset 1; an id is 1-128 of A-Z a-z 0-9 . _ : @ + - (not "." or "..")".
 * The id in err is escaped (mc_escape), so it is safe to print. Borrows id. */
int mc_id_valid(const char *id, char *err, size_t errlen);

#endif
