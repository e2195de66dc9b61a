/* Evidence before the kill: what each rank was doing when a failure or a hang stopped the job.
 *
 * Set-up (once per agent): a private directory DIR holding hook/sitecustomize.py
 * (evidence_hook.py, built into the binary). Every worker gets DIR/hook first on PYTHONPATH,
 * MUSTER_EVIDENCE_DIR=DIR and MUSTER_EVIDENCE_SIGNAL (SIGRTMIN + 6), and PyTorch's Flight
 * Recorder variables unless the user set them (agent_evidence_env). A Python worker then holds
 * DIR/stacks-PID.txt (faulthandler, all threads, on that signal) and the FIFO DIR/trigger-PID
 * (a daemon thread answers with DIR/fr-PID.json: the Flight Recorder).
 *
 * A collection (agent_evidence_collect) runs in libuv's thread pool, bounded by the timeout:
 * the signal to every live rank whose stacks file exists (never to one without: the default
 * action of a real-time signal is to end the process), a byte to its FIFO, a wait for the
 * dumps, then /proc/PID/task/N/{stat,wchan,stack} of the rank and its children. It writes the
 * bundle BUNDLE_DIR/attempt_N[-K]/rankR.txt (stacks, native stacks, the Flight Recorder's
 * answer, the last lines of output) and summary.txt, and hands back one summary per rank
 * (struct rdzv_evidence, the EVIDENCE message): the collective its main thread is in, the
 * innermost frame of the script, the Flight Recorder's sequence numbers. */
#ifndef MUSTER_AGENT_EVIDENCE_H
#define MUSTER_AGENT_EVIDENCE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "env.h"
#include "message.h"

#define AGENT_EVIDENCE_SIGNAL_OFFSET 6     /* SIGRTMIN + 6 */
#define AGENT_EVIDENCE_DUMP_MAX (1u << 20) /* bytes of one rank's stacks read */
#define AGENT_EVIDENCE_TAIL_MAX (8 * 1024) /* bytes of output kept per rank */
#define AGENT_EVIDENCE_TASKS_MAX 256       /* threads of one process looked at */
#define AGENT_EVIDENCE_CHILDREN_MAX 16     /* child processes of a rank looked at */
#define AGENT_EVIDENCE_RANKS_MAX 1024      /* ranks of one node */

/* One rank to look at; the caller fills it on the loop. */
struct agent_evidence_target {
    int rank, local_rank;
    pid_t pid; /* 0: never started */
    int alive;
    int exit_code, term_signal;            /* when not alive */
    uint64_t silent_ms;                    /* since its last sign of progress */
    char tail[2][AGENT_EVIDENCE_TAIL_MAX]; /* the last lines of its stdout, stderr; "" none */
};

struct agent_evidence;
typedef void (*agent_evidence_cb)(struct agent_evidence *e, void *data);

struct agent_evidence {
    uv_loop_t *loop;
    char dir[PATH_MAX];    /* the hook's directory: stacks, FIFOs, Flight Recorder answers */
    char bundle[PATH_MAX]; /* where bundles go, "" none (--log-dir /dev/null) */
    int own_dir;           /* dir was made here (mkdtemp): removed at close */
    int kept;              /* a bundle was written */
    int closing;           /* close asked while a collection ran */
    int signum;
    unsigned timeout_ms;
    char host[RDZV_HOST_MAX + 1];
    /* the collection in flight, or the last one's result */
    int busy;
    uv_work_t work;
    unsigned attempt, seq;
    uint32_t round, req;
    char why[RDZV_EV_WHY_MAX + 1];
    int n;
    struct agent_evidence_target *targets;
    struct rdzv_evidence *out; /* n summaries, valid in the callback */
    char written[PATH_MAX];    /* the bundle written by the last collection, "" none */
    uint64_t took_ms;
    agent_evidence_cb cb;
    void *data;
};

/* dir: the hook's directory to create (0700), or NULL for a fresh $TMPDIR/muster-evidence-*
 * (--log-dir /dev/null); bundle_dir: where bundles go (created when the first is written),
 * NULL for none. Close removes dir and, when no bundle was written, an empty bundle_dir. Writes the
 * hook. Returns 0 or a negative errno (logged). */
int agent_evidence_init(uv_loop_t *loop, struct agent_evidence *e, const char *dir,
                        const char *bundle_dir, unsigned timeout_ms, const char *host);

/* The workers' variables (see above) into env; parent: the agent's environment; torch_version:
 * the workers' PyTorch (100 * major + minor, 0 unknown: launcher/torchver.h), which decides the
 * Flight Recorder's variable names. Returns 0 or -ENOMEM. */
int agent_evidence_env(const struct agent_evidence *e, struct agent_env *env, char *const *parent,
                       int torch_version);

/* A new attempt: its workers' files are new (the old ones are removed, bounded). */
void agent_evidence_attempt(struct agent_evidence *e, unsigned attempt);

/* Starts a collection over targets[0..n) (taken over: freed after cb). round/req/why go into
 * the summaries and the bundle. cb(e, data) on the loop when done; e->out then holds n
 * summaries. Returns 0, -EBUSY while one runs, or -ENOMEM. */
int agent_evidence_collect(struct agent_evidence *e, struct agent_evidence_target *targets, int n,
                           unsigned attempt, uint32_t round, uint32_t req, const char *why,
                           agent_evidence_cb cb, void *data);

/* Removes the hook's directory when it was made here. Not while a collection runs. */
void agent_evidence_close(struct agent_evidence *e);

/* ---- pure parts (unit tests) ---------------------------------------------------------- */

/* Fills r->op, where, innermost, frames from a faulthandler dump (text, NUL-terminated) of the
 * thread main_id (0: the "Current thread", else the last one); sets RDZV_EV_HOOKED when a
 * stack was found. */
void agent_evidence_parse_stacks(const char *text, unsigned long main_id, struct rdzv_evidence *r);

/* Fills r->fr_* from the hook's fr-PID.json; sets RDZV_EV_FR when it held a Flight Recorder
 * with the default group. Returns 0, or -EINVAL with nothing set. */
int agent_evidence_parse_fr(const char *json, size_t len, struct rdzv_evidence *r);

#endif
