/* The agent's state, shared by the files of the agent itself. Calls go one way only:
 *
 *   agent.c      the state machine's driver (machine.h) and the loop: rendezvous events,
 *                signals, shutdown; calls down into the three below
 *   attempt.c    one attempt's workers: log directory, environment, spawn, failure records
 *   agent_ft.c   fault tolerance: checkpoint registry, resume pick, hang detection
 *   preflight.c  the pre-flight node process
 *   health.c     the health check before a restart round (muster-preflight health per GPU)
 *
 * The lower files never call agent.c: what they learn (a worker exited, a worker hung, the
 * pre-flight ended) goes up through the callbacks agent.c hands them. Not for other
 * components. */
#ifndef MUSTER_AGENT_PRIV_H
#define MUSTER_AGENT_PRIV_H

#include <limits.h>
#include <stdint.h>
#include <uv.h>

#include "agent.h"
#include "ckptwatch.h"
#include "client.h"
#include "evidence.h"
#include "cred.h"
#include "goodput.h"
#include "group.h"
#include "hang.h"
#include "logdir.h"
#include "logfwd.h"
#include "telemetry.h"
#include "machine.h"
#include "message.h"
#include "progress.h"
#include "replica.h"
#include "server.h"
#include "store.h"

/* INT, TERM, HUP, QUIT, one more for a --preempt-signal outside that list (SIGUSR1 for
 * sbatch --signal), and up to 32 more from --signals-to-handle */
#define AGENT_NSIGHANDLES 37

struct agent;

/* The most a node that finished waits for its last checkpoint's replicas before it reports
 * done (agent.c report_done). */
#define AGENT_DONE_DRAIN_MS 120000

/* The least time the console gets at exit to take the last lines, even when the signal's
 * --shutdown-timeout is used up (agent.c flush_ms) */
#define AGENT_FLUSH_MIN_MS 200

/* agent_ft.c's part: the watchers are set up once (ckpt_on / hang_on say which exist). */
struct agent_ft {
    struct agent_hang hang;
    int hang_on;
    struct agent_ckptwatch ckpt;
    int ckpt_on;
    char resume_from[PATH_MAX]; /* MUSTER_RESUME_FROM of the current attempt, "" = fresh */
    char *resume_parts; /* MUSTER_RESUME_PARTS: a sharded checkpoint's parts here, ':' between */
    int64_t my_resume_step;    /* this node's own pick at the last JOIN, -1 none */
    int was_rank0;             /* this node held group rank 0 in the last round */
    struct agent_replica repl; /* checkpoint replicas sent and received */
    int repl_on;
    struct rdzv_join *pick_join; /* the JOIN waiting for this node's resume candidate */
    void (*pick_done)(struct agent *a);
    unsigned picks_asked, picks_done;
    void (*flush_done)(struct agent *a);
    struct agent_evidence ev; /* evidence before the kill (--evidence-timeout) */
    int ev_on;
    void (*ev_done)(struct agent *a);
};

/* preflight.c's part: it runs once per agent, at its first ASSIGN: with every node of round 0,
 * or alone (node-local checks) when that ASSIGN is a later round's, i.e. the node joined a
 * running job or replaces a lost node (docs/PREFLIGHT.md "Nodes that join later"). */
struct agent_pf {
    int ran;                /* the pre-flight was started */
    int joined;             /* it ran node-local: the first round was not round 0 */
    int code;               /* the node process's exit code */
    char reason[PATH_MAX];  /* the node process's reason file, "" when none */
    char results[PATH_MAX]; /* its per-GPU results file (sent as PREFLIGHT), "" when none */
    void (*done_cb)(struct agent *a);
};

/* health.c's part: the check before a restart round's JOIN on a node whose ranks failed or hung
 * (docs/PREFLIGHT.md "Health check before a restart round"). */
#define AGENT_HEALTH_PIDS_MAX 256 /* workers whose GPU memory the check waits for */

struct agent_health {
    int done;    /* the check ran since this node's workers last started (one per restart) */
    int started; /* its processes run (a->group is theirs) */
    int failed;  /* it failed, timed out or could not start */
    int timed_out;
    int code;              /* the first non-zero exit code of its processes */
    int failed_gpu;        /* the GPU (index) of the first failed process, -1: none */
    uint64_t start_ms;     /* uv_now at its start */
    char reason[PATH_MAX]; /* the file its processes append their one-line reasons to */
    unsigned npids;        /* the ended attempt's worker pids */
    int pids[AGENT_HEALTH_PIDS_MAX];
    uv_timer_t timer; /* --health-timeout; initialised in agent_init, closed in finish_now */
    void (*done_cb)(struct agent *a);
};

struct agent {
    uv_loop_t loop;
    const struct agent_options *o;
    enum agent_state state;      /* machine.h; changed only by agent.c's transition() */
    enum agent_state done_state; /* the state DONE was due in (it may wait for replicas) */
    enum agent_state join_state; /* the state JOIN was due in (it waits for the pick) */
    struct rdzv_join join_msg;   /* the JOIN being prepared */
    int attempt_unclean;         /* a worker of this attempt exited non-zero or by a signal */
    int finish_asked, finished;  /* FINISH: waiting for the last flush; handles closed */
    struct rdzv_server *server;
    struct rdzv_client *client;
    struct agent_logfwd *logfwd; /* the job's one log (logfwd.h); NULL: not forwarded */
    struct agent_telem *telem;   /* GPU telemetry (telemetry.h); NULL: --gpu-telemetry off */
    /* this attempt's workers or the pre-flight process; NULL between them */
    struct agent_group *group;
    uv_signal_t sig[AGENT_NSIGHANDLES];
    int port_fd;
    unsigned port;
    /* group rank 0's TCPStore of this attempt, NULL elsewhere and between
     * attempts; use_agent_store is this attempt's TORCHELASTIC_USE_AGENT_STORE */
    struct agent_store *store;
    int use_agent_store;
    struct rdzv_assign as;
    /* the first local failure of this attempt (FAILED sent), valid when have_local_failure */
    int have_local_failure;
    struct rdzv_failure local_failure;
    int local_failure_pid; /* its pid, 0: it could not start */
    char local_error_file[PATH_MAX];
    struct rdzv_job_failed job_failed; /* valid when have_job_failed */
    int have_job_failed;
    int exit_code;
    int stop_signal;     /* the signal that is stopping muster, 0 when none */
    uint64_t stop_at_ms; /* uv_now when stop_signal came */
    struct agent_logdir logdir;
    struct agent_progress progress;
    struct agent_goodput gp; /* where this node's time went (goodput.h) */
    struct agent_ft ft;
    struct agent_pf pf;
    struct agent_health health;
    char host[256];
    char endpoint[300];            /* the server as workers reach it: MUSTER_ENDPOINT */
    char http_cred[PATH_MAX];      /* --http: the read-only credential's file ("" none), removed
                                    * at the end */
    uint64_t node_id;              /* commits to node_secret (rendezvous/cred.h) */
    unsigned char node_secret[32]; /* proves node_id to the server in JOIN and REJOIN */
    /* MUSTER_TOKEN of the workers: the job's worker credential from ASSIGN (cred.h string
     * form), never the agent's own credential */
    char worker_cred[RDZV_CRED_TEXT_MAX + 1];
    unsigned server_wait_logs; /* lines logged while the first connection is refused */
    /* a local failure or hang waits for its evidence before the workers stop (agent.c) */
    int ev_failing;                    /* WORKER_FAILED fires when the evidence is in */
    int ev_hung;                       /* ... after SIGKILL to this local rank + 1 (0: none) */
    struct agent_group *ev_all_exited; /* ALL_EXITED came meanwhile: handled after it */
    int spare_said; /* --spare: "joined as a spare" was logged (first JOIN only) */
};

/* attempt.c: the log directory (0 or a negative errno, logged), and worker i's start (0 or a
 * negative errno: -ENOENT / -EACCES when the program cannot be executed) */
int agent__prepare_logdir(struct agent *a);
int agent__spawn_one(struct agent *a, int i);
/* The failure record of worker w of this attempt, with the text of its error file; sets
 * a->local_error_file to that file, or "" when it has none. */
void agent__fill_failure(struct agent *a, const struct agent_worker *w, struct rdzv_failure *f);
/* The failure record of local rank i whose program could not be executed (spawn error err):
 * like a worker exiting with the shell's code, 127 or 126. */
void agent__spawn_failure(struct agent *a, int i, int err, struct rdzv_failure *f);
/* The console (1/2 or -1) and log-file fds (opened in dir, or -1) of one worker's stdout and
 * stderr: all_to_files (--log-dir) keeps every stream, else only what redirect/tee (bit 1
 * stdout, bit 2 stderr) send to files; shown = console output wanted. Also used by shared.c. */
void agent__worker_streams(const char *dir, int all_to_files, unsigned char redirect,
                           unsigned char tee, unsigned char shown, struct agent_worker_spec *spec);

/* attempt.c: before an attempt's workers start, drops the previous attempt's store (its keys
 * and connections: 2.x clients use no attempt prefix, pytorch#135712) and, on group rank 0,
 * opens this attempt's on MASTER_ADDR:MASTER_PORT; sets a->use_agent_store. 0, or a negative
 * errno (logged) when the store the other nodes' workers expect cannot be opened. _stop_
 * closes it (a restart was decided, or the agent finishes); both accept no store. */
int agent__store_start(struct agent *a);
void agent__store_stop(struct agent *a);

/* agent_ft.c: watchers set up at start (0 or a negative errno, logged); hang_cb is called
 * for a worker silent past --hang-timeout (struct agent_hang's data is a). Before each JOIN,
 * this node's resume candidate, found off the loop: done(a) once j holds it (at once without
 * --checkpoint-dir; a pick asked again before the last one answered replaces it); before each
 * attempt, MUSTER_RESUME_FROM and heartbeats; when a worker exits, its heartbeat is disarmed;
 * when all exited, a flush of the checkpoint directory (clean: every worker exited 0);
 * _flush_ calls done(a) once what landed is recorded; at the end, close. */
int agent__ft_start(struct agent *a, agent_hang_cb hang_cb);
void agent__ft_pick_resume(struct agent *a, struct rdzv_join *j, void (*done)(struct agent *a));
void agent__ft_flush(struct agent *a, int clean, void (*done)(struct agent *a));
void agent__ft_prepare(struct agent *a);
void agent__ft_worker_exited(struct agent *a, int local_rank);
void agent__ft_sync(struct agent *a, int clean);
void agent__ft_close(struct agent *a);
/* Takes every local rank's evidence (why: for the bundle; req: COLLECT's, 0 for a failure's)
 * and sends it to the server; done(a) after, on the loop. Returns 0, or a negative errno when
 * nothing was started (off, no workers, one running): done is not called then. */
int agent__ft_evidence(struct agent *a, const char *why, uint32_t req,
                       void (*done)(struct agent *a));
/* A REPL_* message from the server; the connection broke (transfers are gone). */
void agent__ft_repl_msg(struct agent *a, const struct rdzv_msg *m);
void agent__ft_disconnected(struct agent *a);
/* The server answered the REJOIN after an outage (it may have restarted and lost its part
 * table): this node's parts of sharded checkpoints and its copies are reported again. */
void agent__ft_reconnected(struct agent *a);

/* agent_ft.c: sends the goodput figures so far (GOODPUT) when connected; display only. */
void agent__goodput_report(struct agent *a);

/* preflight.c: starts `node_argv --need-gpus=...` for this round in a->group (NULL before).
 * When it has ended (or could not start) the group is closed and freed, a->pf.code is its
 * exit code, and done_cb(a) runs; its reason file is removed after done_cb returns. Returns 0,
 * or a negative errno when no group could be made (done_cb is then not called). */
int agent__preflight_start(struct agent *a, void (*done_cb)(struct agent *a));
/* The final failure record of a failed pre-flight: its reason, or its exit code. */
void agent__preflight_failure(struct agent *a, struct rdzv_failure *f);
/* preflight.c: the node process's results file as a PREFLIGHT message (exposed for tests). */
int agent__preflight_results(const char *path, uint32_t round, struct rdzv_preflight *pf);
/* preflight.c: muster-preflight's path ($MUSTER_PREFLIGHT_BIN, next to node_program, on PATH)
 * into out, "" when there is none. */
void agent__preflight_gpu_binary(const char *node_program, char *out, size_t cap);

/* health.c: whether the check is due before this restart round's JOIN (pure: read by the
 * machine's context); the pids of the attempt whose workers are all gone (g, before it is
 * closed); the start (0 or a negative errno when no group could be made: done_cb is then not
 * called): its processes in a->group, and once they ended (or --health-timeout killed them)
 * the group is closed, a->health.failed says how it went and done_cb(a) runs; the failure
 * record of a failed check (a LEAVE, not final). */
int agent__health_due(const struct agent *a);
void agent__health_note_pids(struct agent *a, const struct agent_group *g);
int agent__health_start(struct agent *a, void (*done_cb)(struct agent *a));
void agent__health_failure(struct agent *a, struct rdzv_failure *f);

#endif
