/* The --help texts. Kept complete: every flag the parser accepts is listed here. */
#include <stdio.h>

#include "config.h"
#include "help.h"

static const char run_help[] =
    "usage: muster run [options] SCRIPT [ARGS...]\n"
    "\n"
    "Starts SCRIPT's workers on this node with torchrun's environment, joins them to the\n"
    "other nodes through a rendezvous, prefixes their output with [rankN]:, restarts the whole\n"
    "group when a worker fails (up to --max-restarts) and exits with the failing worker's code.\n"
    "Flags are torchrun's, in --dash-case or --under_score spelling; each can also be set as\n"
    "PET_<NAME> (e.g. PET_NPROC_PER_NODE=4). Command line first, then PET_*, then the default.\n"
    "\n"
    "Nodes and rendezvous:\n"
    "  --nnodes N|MIN:MAX          nodes in the job (default 1)\n"
    "  --nproc-per-node N|cpu|gpu|auto\n"
    "                              workers on this node (default 1); gpu counts the GPUs that\n"
    "                              CUDA_VISIBLE_DEVICES leaves visible, auto = gpu or else cpu\n"
    "  --standalone                single node: embedded rendezvous on a free loopback port\n"
    "                              with a random token and run id (never a fixed port)\n"
    "  --rdzv-backend NAME         muster (default); c10d and static are accepted aliases\n"
    "  --rdzv-endpoint HOST[:PORT] rendezvous server (default port 29400); when HOST is this\n"
    "                              machine and the port is free, this agent hosts the server\n"
    "  --rdzv-id ID                job id shared by all nodes (TORCHELASTIC_RUN_ID)\n"
    "  --rdzv-conf K=V,...         join_timeout (600), last_call_timeout (30), close_timeout\n"
    "                              (30), heartbeat_timeout (3), keep_alive_interval (1), in\n"
    "                              seconds; torchrun's other keys are accepted and ignored\n"
    "  --node-rank N               static backend: this node's rank (default 0)\n"
    "  --master-addr ADDR          static backend: MASTER_ADDR (default 127.0.0.1)\n"
    "  --master-port PORT          static backend: MASTER_PORT (default: a free port)\n"
    "  --local-addr ADDR           address other nodes reach this node at (MASTER_ADDR when\n"
    "                              this node has group rank 0)\n"
    "\n"
    "Supervision:\n"
    "  --max-restarts N            group restarts before giving up (default 0)\n"
    "  --shutdown-timeout SEC      SIGTERM to SIGKILL grace when stopping workers (default 30,\n"
    "                              or TORCH_ELASTIC_SHUTDOWN_TIMEOUT)\n"
    "  --monitor-interval SEC      accepted for torchrun compatibility; muster reacts to a\n"
    "                              worker's exit at once, it does not poll\n"
    "  --signals-to-handle LIST    exported to workers as TORCHELASTIC_SIGNALS_TO_HANDLE\n"
    "  --start-method M            spawn|fork|forkserver: accepted, ignored (as torchrun does\n"
    "                              for scripts)\n"
    "  --event-log-handler NAME    accepted, ignored\n"
    "\n"
    "What to run:\n"
    "  SCRIPT [ARGS...]            run as `$PYTHON_EXEC -u SCRIPT ARGS` (PYTHON_EXEC defaults\n"
    "                              to python3 on PATH)\n"
    "  -m, --module                run SCRIPT as a module: python3 -u -m SCRIPT ARGS\n"
    "  --no-python                 run SCRIPT itself as the worker program\n"
    "  --run-path                  accepted; runs SCRIPT like a plain script\n"
    "  --role NAME                 ROLE_NAME of the workers (default \"default\")\n"
    "\n"
    "Output:\n"
    "  --log-dir DIR               every worker stream is also written to\n"
    "                              DIR/RUN_ID/attempt_N/LOCAL_RANK/{stdout,stderr}.log, with\n"
    "                              error.json (TORCHELASTIC_ERROR_FILE) beside them; /dev/null\n"
    "                              disables files. Without it, a private directory holds the\n"
    "                              error files and what --redirects/--tee send to files\n"
    "  -r, --redirects SPEC        streams that go only to the log files: 0 none, 1 stdout,\n"
    "                              2 stderr, 3 both, or per local rank: 0:1,1:3\n"
    "  -t, --tee SPEC              streams written to the log files and the console (same SPEC)\n"
    "  --local-ranks-filter LIST   local ranks whose output reaches the console (e.g. 0,3)\n"
    "\n"
    "muster's own:\n"
    "  --dry-run                   print the plan (rendezvous, ranks, each worker's command and\n"
    "                              the variables muster sets) and exit without starting anything\n"
    "  -h, --help                  this text\n"
    "\n"
    "Environment: MUSTER_TOKEN (rendezvous token, never printed), PYTHON_EXEC, PET_<NAME>.\n"
    "Workers get RANK LOCAL_RANK GROUP_RANK ROLE_RANK ROLE_NAME LOCAL_WORLD_SIZE WORLD_SIZE\n"
    "GROUP_WORLD_SIZE ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT\n"
    "TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE\n"
    "TORCHELASTIC_ERROR_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING OMP_NUM_THREADS MUSTER_JOB_ID\n"
    "MUSTER_RESTART_COUNT, on top of muster's own environment.\n"
    "\n"
    "Exit status: 0 when every worker exited 0; the failing worker's exit code (128+N for\n"
    "signal N) once restarts are exhausted; 2 usage error; 3 rendezvous failed; 128+N when\n"
    "muster itself was stopped by signal N (after its workers are gone).\n";

static const char main_help[] =
    "usage: muster COMMAND [options]\n"
    "\n"
    "A distributed-training launcher: one command per node, torchrun's flags and environment.\n"
    "\n"
    "Commands:\n"
    "  run [options] SCRIPT [ARGS...]   start and supervise the workers of this node\n"
    "                                   (see muster run --help)\n"
    "\n"
    "Options:\n"
    "  -h, --help       this text\n"
    "  --version        print the version\n"
    "\n"
    "Example:\n"
    "  muster run --standalone --nproc-per-node 4 train.py --epochs 3\n";

void launcher_print_run_help(void)
{
    fputs(run_help, stdout);
}

void launcher_print_main_help(void)
{
    fputs(main_help, stdout);
    fputs("\n", stdout);
    fputs(run_help, stdout);
}
