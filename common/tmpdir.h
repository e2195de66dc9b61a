/* The one $TMPDIR fallback of muster. */
#ifndef MUSTER_COMMON_TMPDIR_H
#define MUSTER_COMMON_TMPDIR_H

/* Where temporary files go: $TMPDIR when it is set to an absolute path, else "/tmp" (an unset,
 * empty or relative $TMPDIR would put files in / or wherever the process happens to run: an
 * empty one once wrote /muster-heartbeats-PID). Never NULL. */
const char *mc_tmpdir(void);

#endif
