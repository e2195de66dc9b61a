/* The agent's state, shared by the files of the agent itself (agent.c: rendezvous events,
 * signals, shutdown; attempt.c: starting an attempt's workers; agent_ft.c: checkpoints and
 * hangs). Not for other components. */
#ifndef MUSTER_AGENT_PRIV_H
#define MUSTER_AGENT_PRIV_H

#include <limits.h>
#include <stdint.h>
#include <uv.h>

#include "agent.h"
#include "ckptwatch.h"
#include "client.h"
#include "cred.h"
#include "group.h"
#include "hang.h"
#include "logdir.h"
#include "message.h"
#include "progress.h"
#include "server.h"

enum next_step { NEXT_NONE, NEXT_REJOIN, NEXT_EXIT };

/* INT, TERM, HUP, QUIT, one more for a --preempt-signal outside that list (SIGUSR1 for
 * sbatch --signal), and up to 32 more from --signals-to-handle */
#define AGENT_NSIGHANDLES 37

struct agent {
    uv_loop_t loop;
    const struct agent_options *o;
    struct rdzv_server *server;
    struct rdzv_client *client;
    struct agent_group *group; /* this attempt's workers; NULL between attempts */
    uv_signal_t sig[AGENT_NSIGHANDLES];
    int port_fd;
    unsigned port;
    struct rdzv_assign as;
    int round_failed; /* a local worker of this round failed (FAILED sent) */
    struct rdzv_failure local_failure;
    char local_error_file[PATH_MAX];
    struct rdzv_job_failed job_failed;
    int have_job_failed;
    enum next_step next;
    int exit_code;
    int stop_signal; /* the signal that is stopping muster, 0 when none */
    int finished;    /* handles are closing; the loop ends when they are closed */
    struct agent_logdir logdir;
    struct agent_progress progress;
    struct agent_hang hang;
    int hang_on;
    struct agent_ckptwatch ckpt;
    int ckpt_on;
    char resume_from[PATH_MAX]; /* MUSTER_RESUME_FROM of the current attempt, "" = fresh */
    int64_t my_resume_step;     /* this node's own pick at the last JOIN, -1 none */
    int was_rank0;              /* this node held group rank 0 in the last round */
    char host[256];
    char endpoint[300];            /* the server as workers reach it: MUSTER_ENDPOINT */
    uint64_t node_id;              /* commits to node_secret (rendezvous/cred.h) */
    unsigned char node_secret[32]; /* proves node_id to the server in JOIN and REJOIN */
    /* MUSTER_TOKEN of the workers: the job's worker credential from ASSIGN (cred.h string
     * form), never the agent's own credential */
    char worker_cred[RDZV_CRED_TEXT_MAX + 1];
    unsigned server_wait_logs; /* lines logged while the first connection is refused */
    int preflight_ran;         /* the pre-flight was started (it runs once per agent) */
    int preflight_code;        /* the node process's exit code */
    char pf_reason[PATH_MAX];  /* the node process's reason file, "" when none */
};

/* agent.c */
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void agent_fill_failure_(struct agent *a, const struct agent_worker *w, struct rdzv_failure *f);
void agent_local_failure_(struct agent *a, const struct rdzv_failure *f, int pid);

void agent_do_join_(struct agent *a);
void agent_finish_(struct agent *a, int code);
void agent_start_workers_(struct agent *a);

/* preflight.c: starts `muster __preflight-node` for this round; when it ends the workers start
 * (passed), the job fails for good (failed: FAILED with RDZV_FAILURE_FINAL), or the agent
 * follows what the server or a signal decided meanwhile. */
void agent_preflight_start_(struct agent *a);

/* attempt.c: the log directory (0 or a negative errno, logged), and worker i's start */
int agent_prepare_logdir_(struct agent *a);
int agent_spawn_one_(struct agent *a, int i);
/* The console (1/2 or -1) and log-file fds (opened in dir, or -1) of one worker's stdout and
 * stderr: all_to_files (--log-dir) keeps every stream, else only what redirect/tee (bit 1
 * stdout, bit 2 stderr) send to files; shown = console output wanted. Also used by shared.c. */
void agent_worker_streams_(const char *dir, int all_to_files, unsigned char redirect,
                           unsigned char tee, unsigned char shown, struct agent_worker_spec *spec);

/* agent_ft.c: watchers set up at start (0 or a negative errno, logged); before each JOIN,
 * this node's resume candidate; before each attempt, MUSTER_RESUME_FROM and heartbeats */
int agent_ft_start_(struct agent *a);
void agent_ft_pick_resume_(struct agent *a, struct rdzv_join *j);
void agent_ft_prepare_(struct agent *a);

#endif
