/* `muster preflight`: `muster run`'s node and rendezvous options, no training script: the
 * agents meet, run the pre-flight checks (agent/preflight.c, preflight/) and exit 0 when every
 * check passed. Without --nproc-per-node it checks one rank per visible GPU. */
#include "preflight_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "config.h"
#include "gpus.h"
#include "help.h"
#include "log.h"
#include "run.h"
#include "secret.h"

static const char preflight_help[] =
    "usage: muster preflight [muster run's node/rendezvous options]\n"
    "\n"
    "Runs only the pre-flight checks of a job, on every node that starts it, and exits:\n"
    "  1. inventory: GPU count >= workers, models, memory, driver / CUDA / NCCL versions,\n"
    "     compared across nodes (a difference fails unless --preflight-allow-mixed)\n"
    "  2. TCP mesh: every node reaches every other node and MASTER_ADDR:MASTER_PORT\n"
    "  3. NCCL all-reduce (muster-preflight, one per GPU): distinct GPUs, exact sums, then a\n"
    "     bandwidth sweep (algbw, busbw as nccl-tests) up to --preflight-max-bytes; with one\n"
    "     rank no sweep (nothing moves) and no busbw floor\n"
    "  4. GPU health, per GPU after the all-reduce: bf16 GEMM (cuBLAS, 8192^3) TFLOP/s and\n"
    "     HBM device-to-device copy GB/s (read+write), compared: a GPU more than 10 % below\n"
    "     the median of its model in the job, or below a floor, is named and fails; NVML\n"
    "     (when found): ECC errors, remapped rows, clock-event reasons, clocks, temperature,\n"
    "     PCIe link, persistence; uncorrectable ECC or a row-remap failure fail, the rest warn\n"
    "  5. P2P matrix, per node with several GPUs: cudaMemcpyPeerAsync between every ordered\n"
    "     pair of its GPUs; a pair below half of the node's median pair is named (node, both\n"
    "     GPUs, figure) and fails (warns with --preflight-allow-slow); one GPU: skipped\n"
    "One line per node (GPUs, GEMM, HBM, NVML, P2P). Under `muster run` the checks run at\n"
    "round 0 on every node, and again on each node that joins the running job or replaces a\n"
    "lost one (its own GPUs, before its workers start); each node's per-GPU results go to the\n"
    "rendezvous server's /status and /metrics.\n"
    "Group rank 0's node prints the report; the JSON goes to LOG_DIR/RUN_ID/preflight.json\n"
    "(--log-dir) or $TMPDIR/muster-RUN_ID-preflight.json.\n"
    "\n"
    "Options: every `muster run` option that places the job (--nnodes, --nproc-per-node\n"
    "(default: gpu), --rdzv-endpoint, --rdzv-id, --rdzv-conf, --standalone, --token-file,\n"
    "--tls-*, --local-addr, --master-port, --log-dir) and:\n"
    "  --preflight-timeout SEC     deadline of each stage: a rank or node that does not\n"
    "                              arrive is named when it passes (default 30)\n"
    "  --preflight-min-busbw GBPS  fail when busbw at the largest size is lower (>= 2 ranks)\n"
    "  --preflight-max-bytes SIZE  largest all-reduce of the sweep (default 256MiB)\n"
    "  --preflight-allow-mixed     differing inventories warn instead of failing\n"
    "  --preflight-min-tflops T    fail a GPU whose bf16 GEMM is below T TFLOP/s\n"
    "  --preflight-min-hbm-gbps G  fail a GPU whose HBM copy is below G GB/s (read+write)\n"
    "  --preflight-allow-slow      slow GPUs (median or floor) and slow P2P pairs warn instead\n"
    "                              of failing\n"
    "\n"
    "Exit codes: 0 healthy; 2 usage; 3 rendezvous failed; 4 a check failed (the report\n"
    "names node, GPU and link); 5 no GPU on this node (pass --nproc-per-node N to check\n"
    "a CPU-only job's mesh).\n";

static int has_option(int argc, char **argv, const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            continue;
        a += 2;
        for (size_t k = 0; k <= len; k++) { /* '-' and '_' are one */
            char c = a[k] == '_' ? '-' : a[k];
            if (k == len && (c == '\0' || c == '='))
                return 1;
            if (k == len || c != name[k])
                break;
        }
    }
    return 0;
}

int launcher_preflight(int argc, char **argv)
{
    struct launcher_config cfg;
    char err[LAUNCHER_ERR_MAX];
    char **args = calloc((size_t)argc + 8, sizeof(*args));
    int n = 0, rc,
        gpus = launcher_count_gpus(LAUNCHER_NVIDIA_PROC_DIR, getenv("CUDA_VISIBLE_DEVICES"));

    if (args == NULL)
        return AGENT_EXIT_INTERNAL;
    if (has_option(argc, argv, "help") || (argc > 0 && strcmp(argv[argc - 1], "-h") == 0)) {
        fputs(preflight_help, stdout);
        free(args);
        return 0;
    }
    launcher_secret_protect_process(); /* the agent holds the job's token, as muster run's */
    if (!has_option(argc, argv, "nproc-per-node") && getenv("PET_NPROC_PER_NODE") == NULL) {
        if (gpus <= 0) {
            mc_error("preflight: no NVIDIA GPU on this node (%s is empty or CUDA_VISIBLE_DEVICES "
                     "hides them); pass --nproc-per-node N to check a CPU-only job",
                     LAUNCHER_NVIDIA_PROC_DIR);
            free(args);
            return AGENT_EXIT_NO_GPU;
        }
        args[n++] = "--nproc-per-node=gpu";
    }
    for (int i = 0; i < argc; i++)
        args[n++] = argv[i];
    /* the parser wants a program; nothing is ever started from it */
    args[n++] = "--preflight=on";
    args[n++] = "--no-python";
    args[n++] = "--";
    args[n++] = "/bin/true";
    rc = launcher_config_parse(n, args, &cfg, err, sizeof(err));
    if (rc != 0) {
        mc_error("preflight: %s", err);
        rc = AGENT_EXIT_USAGE;
    } else {
        cfg.pf.only = 1;
        rc = launcher_run_parsed(&cfg);
    }
    launcher_config_free(&cfg);
    free(args);
    return rc;
}
