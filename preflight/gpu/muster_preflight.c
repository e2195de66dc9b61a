/* muster-preflight: the per-GPU pre-flight worker (docs/PREFLIGHT.md). Plain C against the CUDA
 * runtime (linked statically) and NCCL; no kernels. muster's node process starts one per GPU.
 *
 *   muster-preflight inventory   this machine's driver, CUDA, NCCL versions and GPUs as JSON
 *   muster-preflight allreduce   unique-GPU check, NCCL init, exact all-reduce check and a
 *                                bandwidth sweep, per stage ("node", then "all"), then the
 *                                GPU's bf16 GEMM, HBM copy and NVML health
 *   muster-preflight p2p         the peer-to-peer bandwidth matrix of this node's GPUs
 *   muster-preflight health      one GPU's quick check before a restart round: the killed
 *                                workers' memory released, a short exact GEMM, NVML health
 *
 * Exit codes:
 *   0  ok
 *   1  a check failed: two ranks on one GPU, an NCCL error, a wrong all-reduce sum
 *   2  usage: bad command line or worker environment
 *   3  CUDA, NCCL or the muster connection cannot start (also: the report cannot be written)
 *   4  a rank is missing, or a deadline passed (never arrived, NCCL init or a collective timed out)
 * Every error is one line "muster-preflight: error: ..." on stderr. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "busbw.h"
#include "muster_version.h"
#include "pf_gpu.h"
#include "pf_health.h"
#include "pf_p2p.h"
#include "pf_run.h"
#include "clock.h"

#define DEFAULT_MIN_BYTES (1ULL << 20)
#define DEFAULT_MAX_BYTES (256ULL << 20)
#define DEFAULT_ITERS 20
#define DEFAULT_WARMUP 5
#define DEFAULT_TIMEOUT_MS 30000

static const char usage_text[] =
    "usage: muster-preflight inventory\n"
    "       muster-preflight allreduce [--min-bytes SIZE] [--max-bytes SIZE] [--iters N]\n"
    "                                  [--warmup N] [--timeout-ms MS] [--device N] [--out FILE]\n"
    "       muster-preflight p2p [--devices N] [--out FILE]\n"
    "       muster-preflight health [--device N] [--drain-ms MS] [--pids P,P,...]\n"
    "                               [--reason-file FILE] [--timeout-ms MS]\n"
    "       muster-preflight --help | --version\n"
    "\n"
    "inventory: prints one JSON object: {\"driver\", \"cuda_driver\", \"cuda_runtime\", \"nccl\",\n"
    "  \"gpus\": [{\"index\", \"uuid\", \"pci\", \"name\", \"memory\", \"cc\"}]} (plus \"error\" "
    "when CUDA\n"
    "  cannot start; then \"gpus\" is empty and the exit code is 3).\n"
    "\n"
    "allreduce: one process per GPU under muster's node process, which provides RANK, WORLD_SIZE,\n"
    "  LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE and MUSTER_ENDPOINT,\n"
    "  MUSTER_TOKEN, MUSTER_JOB_ID, MUSTER_ROUND. Checks that no two ranks share a GPU, then per\n"
    "  stage (\"node\": this node's ranks, only with several nodes of several GPUs; \"all\": "
    "every\n"
    "  rank) creates a non-blocking NCCL communicator, verifies an in-place float all-reduce sum\n"
    "  exactly and times in-place all-reduces from --min-bytes to --max-bytes by factor 4\n"
    "  (algbw = bytes/1e9/s, busbw = algbw*2(n-1)/n; 0 for n = 1). Writes one JSON report to\n"
    "  --out (atomically) or stdout. NCCL_NVLS_ENABLE defaults to 0.\n"
    "  --min-bytes SIZE   smallest size and the checked size (default 1M); SIZE is bytes or\n"
    "                     K/M/G, KiB/MiB/GiB (binary); sizes round down to whole floats\n"
    "  --max-bytes SIZE   largest size (default 256M; halved while cudaMalloc fails)\n"
    "  --iters N          timed all-reduces per size (default 20)\n"
    "  --warmup N         untimed all-reduces before each size (default 5)\n"
    "  --timeout-ms MS    deadline of each wait: all ranks arriving, each NCCL init, each\n"
    "                     collective, finalize (default 30000)\n"
    "  --device N         CUDA device (default LOCAL_RANK, or 0 when CUDA sees one device)\n"
    "  --out FILE         write the report to FILE instead of stdout\n"
    "  After the all-reduce each rank measures its GPU: bf16 GEMM (cuBLAS, loaded at run time),\n"
    "  HBM device-to-device copy, and NVML health (ECC, remapped rows, clock events, clocks,\n"
    "  temperature, PCIe link, persistence), in the report's \"health\".\n"
    "\n"
    "p2p: the node's peer-to-peer matrix: cudaMemcpyPeerAsync of 256 MiB (halved while memory\n"
    "  is short) between every ordered pair of devices 0..N-1 (--devices, default all), 2\n"
    "  warm-ups and 10 timed copies each, timed with events; peer access enabled where\n"
    "  possible. JSON: {\"gpus\", \"bytes\", \"iters\", \"gbps\": [[row = source]],\n"
    "  \"peer_access\"}; with one device {\"skipped\"} and no figures.\n"
    "\n"
    "health: one GPU's quick check before a restart round (muster's agent runs one per GPU):\n"
    "  waits up to --drain-ms (default 10000) until none of --pids is among the GPU's compute\n"
    "  processes (NVML), then a bf16 GEMM (n = 4096, all ones, 10 timed calls) whose every\n"
    "  element must be exactly n, then NVML health (uncorrected ECC since the driver loaded or\n"
    "  a row-remap failure fail). One line \"GPU I (UUID, PCI): reason\" is appended to\n"
    "  --reason-file on failure (exit 1).\n"
    "\n"
    "exit codes: 0 ok; 1 a check failed (shared GPU, NCCL error, wrong sum); 2 usage;\n"
    "  3 CUDA/NCCL/muster connection cannot start; 4 a rank missing or a timeout.\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mc_error("%s (see muster-preflight --help)", msg);
    return PFG_EXIT_USAGE;
}

static int parse_int(const char *s, long min, long max, int *out)
{
    char *end = NULL;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return -EINVAL;
    *out = (int)v;
    return 0;
}

static int size_opt(const char *name, const char *val, uint64_t *out)
{
    if (pf_parse_size(val, out) < 0)
        return usage_error("%s: bad size \"%s\" (bytes, or with K/M/G, KiB/MiB/GiB)", name, val);
    *out &= ~(uint64_t)3; /* whole floats */
    if (*out < sizeof(float))
        return usage_error("%s: must be at least 4 bytes (one float)", name);
    return 0;
}

static int int_opt(const char *name, const char *val, long min, long max, int *out)
{
    if (parse_int(val, min, max, out) < 0)
        return usage_error("%s: expected an integer from %ld to %ld, got \"%s\"", name, min, max,
                           val);
    return 0;
}

enum { OPT_MIN = 1000, OPT_MAX, OPT_ITERS, OPT_WARMUP, OPT_TIMEOUT, OPT_DEVICE, OPT_OUT };

static int apply_opt(int c, const char *val, struct pf_opts *o)
{
    switch (c) {
    case OPT_MIN:
        return size_opt("--min-bytes", val, &o->min_bytes);
    case OPT_MAX:
        return size_opt("--max-bytes", val, &o->max_bytes);
    case OPT_ITERS:
        return int_opt("--iters", val, 1, 1000000, &o->iters);
    case OPT_WARMUP:
        return int_opt("--warmup", val, 0, 1000000, &o->warmup);
    case OPT_TIMEOUT:
        return int_opt("--timeout-ms", val, 1, INT_MAX / 2, &o->timeout_ms);
    case OPT_DEVICE:
        return int_opt("--device", val, 0, 1023, &o->device);
    case OPT_OUT:
        if (val[0] == '\0')
            return usage_error("--out: empty file name");
        o->out = val;
        return 0;
    }
    return usage_error("internal: unknown option %d", c);
}

/* argv[0] is "allreduce". Returns 0, PFG_EXIT_USAGE, or -1 after printing --help. */
static int parse_opts(int argc, char **argv, struct pf_opts *o)
{
    static const struct option longopts[] = {{"min-bytes", required_argument, NULL, OPT_MIN},
                                             {"max-bytes", required_argument, NULL, OPT_MAX},
                                             {"iters", required_argument, NULL, OPT_ITERS},
                                             {"warmup", required_argument, NULL, OPT_WARMUP},
                                             {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
                                             {"device", required_argument, NULL, OPT_DEVICE},
                                             {"out", required_argument, NULL, OPT_OUT},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int c, rc;

    *o = (struct pf_opts){DEFAULT_MIN_BYTES,
                          DEFAULT_MAX_BYTES,
                          DEFAULT_ITERS,
                          DEFAULT_WARMUP,
                          DEFAULT_TIMEOUT_MS,
                          -1,
                          NULL};
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            return -1;
        }
        if (c == ':')
            return usage_error("option %s needs a value", argv[optind - 1]);
        if (c == '?')
            return usage_error("unknown option %s", argv[optind - 1]);
        if ((rc = apply_opt(c, optarg, o)) != 0)
            return rc;
    }
    if (optind < argc)
        return usage_error("unexpected argument \"%s\"", argv[optind]);
    if (o->min_bytes > o->max_bytes)
        return usage_error("--min-bytes (%llu) is larger than --max-bytes (%llu)",
                           (unsigned long long)o->min_bytes, (unsigned long long)o->max_bytes);
    return 0;
}

static int env_int(const char *name, int min, int *out)
{
    const char *v = getenv(name);

    if (v == NULL || v[0] == '\0')
        return usage_error("%s is not set (allreduce runs under muster's node process)", name);
    if (parse_int(v, min, INT_MAX, out) < 0)
        return usage_error("%s=\"%s\" is not an integer >= %d", name, v, min);
    return 0;
}

static int parse_env(struct pf_env *e)
{
    int rc = 0;

    if ((rc = env_int("RANK", 0, &e->rank)) || (rc = env_int("WORLD_SIZE", 1, &e->world)) ||
        (rc = env_int("LOCAL_RANK", 0, &e->local_rank)) ||
        (rc = env_int("LOCAL_WORLD_SIZE", 1, &e->local_world)) ||
        (rc = env_int("GROUP_RANK", 0, &e->group_rank)) ||
        (rc = env_int("GROUP_WORLD_SIZE", 1, &e->group_world)))
        return rc;
    if (e->rank >= e->world || e->local_rank >= e->local_world || e->group_rank >= e->group_world ||
        e->local_rank > e->rank || e->local_world > e->world ||
        e->rank - e->local_rank > e->world - e->local_world)
        return usage_error("inconsistent environment: RANK=%d WORLD_SIZE=%d LOCAL_RANK=%d "
                           "LOCAL_WORLD_SIZE=%d GROUP_RANK=%d GROUP_WORLD_SIZE=%d",
                           e->rank, e->world, e->local_rank, e->local_world, e->group_rank,
                           e->group_world);
    return 0;
}

static int allreduce_main(int argc, char **argv)
{
    static struct pf_run run; /* large (per-size results); zeroed as a static */
    int rc = parse_opts(argc, argv, &run.opts);

    if (rc < 0)
        return PFG_EXIT_OK; /* --help */
    if (rc != 0)
        return rc;
    if ((rc = parse_env(&run.env)) != 0)
        return rc;
    run.start_ms = mc_mono_ms_f();
    return pf_allreduce_run(&run);
}

int main(int argc, char **argv)
{
    /* Before any NCCL call; overwrite = 0 so a user's explicit setting wins. NVLink SHARP must
     * stay off on shared hosts. */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    mc_log_set_program("muster-preflight");
    if (argc < 2)
        return usage_error("missing command: inventory, allreduce or p2p");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage_text, stdout);
        return PFG_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("muster-preflight %s\n", MUSTER_VERSION);
        return PFG_EXIT_OK;
    }
    if (strcmp(argv[1], "inventory") == 0) {
        if (argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            fputs(usage_text, stdout);
            return PFG_EXIT_OK;
        }
        if (argc > 2)
            return usage_error("inventory takes no arguments");
        return pf_inventory_main();
    }
    if (strcmp(argv[1], "allreduce") == 0)
        return allreduce_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "p2p") == 0) {
        if (argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            fputs(usage_text, stdout);
            return PFG_EXIT_OK;
        }
        return pf_p2p_main(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "health") == 0)
        return pf_health_main(argc - 1, argv + 1);
    return usage_error("unknown command \"%s\": inventory, allreduce, p2p or health", argv[1]);
}
