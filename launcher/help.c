/* The --help texts. `muster run --help` is complete by construction: its option lines are
 * printed from the option table (options.def), between the introduction and the environment
 * and exit codes below. */
#include <stdio.h>

#include "config.h"
#include "help.h"
#include "options.h"

/* before the option sections (options.def, printed by options.c) */
static const char run_help_head[] =
    "usage: muster run [options] SCRIPT [ARGS...]\n"
    "\n"
    "Starts SCRIPT's workers on this node with torchrun's environment, joins them to the\n"
    "other nodes through a rendezvous, prefixes their output with [rankN]:, restarts the whole\n"
    "group when a worker fails (up to --max-restarts) and exits with the failing worker's code.\n"
    "Flags are torchrun's, in --dash-case or --under_score spelling, or any unique prefix of\n"
    "one before SCRIPT (--nproc=4; where a prefix also starts one of muster's own flags,\n"
    "torchrun's is meant); each can also be set as PET_<NAME> (e.g. PET_NPROC_PER_NODE=4).\n"
    "Command line first, then PET_*, then the default.\n"
    "\n";

/* after the option sections */
static const char run_help_tail[] =
    "\n"
    "Environment: MUSTER_TOKEN (the credential, never printed), PYTHON_EXEC, PET_<NAME>,\n"
    "SLURM_* (defaults inside an allocation), MUSTER_ALLOW_CORE_DUMPS=1 (keep muster dumpable\n"
    "and traceable for debugging; by default it is not, as it holds a credential).\n"
    "Workers get RANK LOCAL_RANK GROUP_RANK ROLE_RANK ROLE_NAME LOCAL_WORLD_SIZE WORLD_SIZE\n"
    "GROUP_WORLD_SIZE ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT\n"
    "TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE\n"
    "TORCHELASTIC_ERROR_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING NCCL_ASYNC_ERROR_HANDLING\n"
    "TORCHELASTIC_SIGNALS_TO_HANDLE OMP_NUM_THREADS MUSTER_JOB_ID\n"
    "MUSTER_RESTART_COUNT MUSTER_ROUND MUSTER_ENDPOINT MUSTER_TOKEN (the job's worker credential,\n"
    "for libmuster's key-value store), MUSTER_CHECKPOINT_DIR MUSTER_RESUME_FROM\n"
    "MUSTER_RESUME_PARTS (a sharded checkpoint's parts on this node, ':' between)\n"
    "MUSTER_HEARTBEAT_FILE (when enabled), on top of muster's own environment.\n"
    "TORCHELASTIC_USE_AGENT_STORE=True: group rank 0's agent serves the TCPStore on\n"
    "MASTER_ADDR:MASTER_PORT; TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in muster's environment\n"
    "makes it False (worker rank 0 hosts it), as in torchrun.\n"
    "\n"
    "Exit status: 0 when every worker exited 0; the failing worker's exit code (128+N for\n"
    "signal N; 1 for a hang or a lost node) once restarts are exhausted; 2 usage error;\n"
    "3 rendezvous failed; 4 pre-flight failed; 70 internal error; 75 pre-empted (requeue me);\n"
    "128+N when muster itself was stopped by signal N (after its workers are gone).\n";

static const char main_help[] =
    "usage: muster COMMAND [options]\n"
    "\n"
    "A distributed-training launcher: one command per node, torchrun's flags and environment.\n"
    "\n"
    "Commands:\n"
    "  run [options] SCRIPT [ARGS...]   start and supervise the workers of this node\n"
    "                                   (see muster run --help)\n"
    "  server --listen HOST:PORT        run a rendezvous server for many jobs (--http for\n"
    "                                   /metrics and /status; see muster server --help)\n"
    "  status --rdzv-endpoint HOST:PORT show a server's jobs, nodes, ranks, restarts and\n"
    "                                   checkpoints (see muster status --help)\n"
    "  debug --rdzv-id ID               every rank's stack of a running job, without\n"
    "                                   stopping it (see muster debug --help)\n"
    "  logs --rdzv-id ID [--follow]     the job's one log: every rank's lines, --dedup\n"
    "                                   across ranks (see muster logs --help)\n"
    "  token --job ID | --read-only     mint a job-scoped or read-only credential from the\n"
    "                                   server's secret (see muster token --help)\n"
    "  preflight [run's node options]   only the pre-flight checks: GPUs, links, NCCL\n"
    "                                   (see muster preflight --help)\n"
    "  plan --gpu-mem SIZE --procs N ...\n"
    "                                   the batch-size planner for shared-GPU runs, from\n"
    "                                   numbers or a probe run (see muster plan --help)\n"
    "\n"
    "Options:\n"
    "  -h, --help       this text\n"
    "  -V, --version    print muster's, the protocol's and the libraries' versions\n"
    "\n"
    "Examples:\n"
    "  muster run --standalone --nproc-per-node 4 examples/pytorch/train_ddp.py --steps 100\n"
    "  muster server --listen 0.0.0.0:29400 --token-file server.token     # on one host\n"
    "  muster token --token-file server.token --job job42 --out job42.token  # operator\n"
    "  muster run --nnodes 2 --nproc-per-node 8 --rdzv-endpoint HOST:29400 --rdzv-id job42 \\\n"
    "      --token-file job42.token train.py                       # on each node\n";

static void print_run_help(FILE *f)
{
    fputs(run_help_head, f);
    launcher__opt_print_help(f);
    fputs(run_help_tail, f);
}

void launcher_print_run_help(void)
{
    print_run_help(stdout);
}

void launcher_print_run_markdown(void)
{
    launcher__opt_print_markdown(stdout);
}

/* `muster` alone: the commands only, on stderr (a usage error, exit 2), not all 260 lines. */
void launcher_print_main_usage(void)
{
    fputs(main_help, stderr);
    fputs("\n(muster --help for this and every option of muster run)\n", stderr);
}

void launcher_print_main_help(void)
{
    fputs(main_help, stdout);
    fputs("\n", stdout);
    print_run_help(stdout);
}
