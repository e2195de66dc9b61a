/* What a muster killed with SIGKILL leaves in $TMPDIR, swept at the next start.
 *
 * A flat private log directory ($TMPDIR/muster-RUN_ID-XXXXXX, logdir.h) is removed at a normal
 * exit; after kill -9 nothing removes it. Each such directory holds a marker (.muster-flat) and
 * its muster holds an flock(2) on the directory for as long as it runs: a later muster of the
 * same user removes every marked directory of its own whose lock it can take (the owner is gone,
 * whatever became of its pid; the marker is made only under the lock). Pre-flight reports of runs
 * without --log-dir
 * ($TMPDIR/muster-RUN_ID-preflight*.json) are kept, the newest AGENT_TMPSWEEP_KEEP_REPORTS of
 * this user only. Only what the effective user owns is touched (common/saferm.h). */
#ifndef MUSTER_AGENT_TMPSWEEP_H
#define MUSTER_AGENT_TMPSWEEP_H

#define AGENT_TMPSWEEP_MARKER ".muster-flat"
#define AGENT_TMPSWEEP_KEEP_REPORTS 8
#define AGENT_TMPSWEEP_MAX_SCAN 20000 /* names of $TMPDIR looked at per start, at most */

/* Marks the flat private directory path (just made) and locks it for this process's life:
 * returns the descriptor holding the lock (O_CLOEXEC; close it only after the directory is
 * removed) or a negative errno. */
int agent_tmpsweep_claim(const char *path);

/* Sweeps the trusted directory tmp as described above. Returns how many directories and
 * reports it removed. Never fails: what it cannot remove stays. */
int agent_tmpsweep_run(const char *tmp);

#endif
