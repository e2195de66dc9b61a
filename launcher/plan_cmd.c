/* `muster plan`: gathers M_gpu, M_static and M_sample (from options, a probe run of the worker,
 * or nvidia-smi) and prints the seed's batch-size plan (plan.h). */
#include "plan_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exitcode.h"
#include "gpuquery.h"
#include "log.h"
#include "plan.h"
#include "proc.h"
#include "tmpdir.h"

#define PLAN_EXIT_OK MC_EXIT_OK
#define PLAN_EXIT_PROBE MC_EXIT_PROBE /* the probe run failed or wrote no usable file */
#define PLAN_EXIT_USAGE                                                                            \
    MC_EXIT_USAGE /* bad input, a plan that cannot fit, no way to learn M_gpu                      \
                   */
#define PLAN_ERR_MAX 512
#define PLAN_SMI_TIMEOUT_MS 10000
#define PLAN_PROBE_FILE_MAX (1024 * 1024)

struct plan_opts {
    const char *gpu_mem_s, *static_s, *per_sample_s;
    double gpu_mem, static_mem, per_sample, safety;
    unsigned procs;
    int probe, json, help;
    char **cmd; /* the probe command: argv tail, NULL-terminated (borrowed from argv) */
};

/* Where each input came from, for the printout. */
struct plan_src {
    const char *gpu_mem;              /* "--gpu-mem", "probe" or "nvidia-smi" */
    struct launcher_plan_probe probe; /* filled when --probe ran */
    int probed;
};

static void print_help(void)
{
    fputs(
        "usage: muster plan [options] --static SIZE --per-sample SIZE\n"
        "       muster plan [options] --probe -- COMMAND [ARGS...]\n"
        "\n"
        "Plans the batch size of each of N training processes sharing one GPU (the shared-GPU\n"
        "mode of `muster run --nproc-per-gpu N`), by the rule\n"
        "    available per process = (GPU memory / N) x F\n"
        "    max batch             = floor((available - static) / per-sample)\n"
        "    starting batch        = floor(0.8 x max batch)\n"
        "\n"
        "options:\n"
        "  --gpu-mem SIZE        the GPU's total memory; default: total_bytes from the probe\n"
        "                        file, else nvidia-smi's memory.total of the first GPU in\n"
        "                        CUDA_VISIBLE_DEVICES (or GPU 0)\n"
        "  --procs N             processes sharing the GPU (default 1);\n"
        "                        also spelled --nproc-per-gpu N\n"
        "  --safety F            safety factor F in (0, 1] (default 0.85);\n"
        "                        also spelled --gpu-mem-fraction F\n"
        "  --static SIZE         memory of model + gradients + optimizer state (M_static)\n"
        "  --per-sample SIZE     activation memory of one sample (M_sample)\n"
        "  --probe               measure static and per-sample memory instead: run COMMAND\n"
        "                        (after `--`) once with MUSTER_PROBE_FILE=<private "
        "dir>/probe.json\n"
        "                        in its environment; it writes {\"static_bytes\": N,\n"
        "                        \"peak_bytes\": N, \"batch\": B, \"total_bytes\": N} there and\n"
        "                        exits 0 (see examples/pytorch/train_shared.py --probe-batch B)\n"
        "  --json                print the plan as one JSON object\n"
        "  -h, --help            print this help\n"
        "\n"
        "SIZE: a number with an optional binary unit: 48GiB, 48G, 4096MiB, 512M, 0.04GiB,\n"
        "1.5T, 64KiB, or plain bytes. K/M/G/T mean KiB/MiB/GiB/TiB; GB/MB are refused.\n"
        "Options also take the form --name=VALUE.\n"
        "\n"
        "example (the seed's worked example):\n"
        "  muster plan --gpu-mem 48GiB --procs 3 --safety 0.85 --static 4GiB --per-sample 0.04GiB\n"
        "    -> available per process 13.6 GiB, max batch 240, starting batch 192\n"
        "  muster plan --probe --procs 4 -- python3 examples/pytorch/train_shared.py --probe-batch "
        "8\n"
        "\n"
        "exit status: 0 planned; 1 the probe run failed or wrote no usable file;\n"
        "2 bad options, a plan that cannot fit, or the GPU's memory cannot be learned.\n",
        stdout);
}

static int usage_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints the one error line; returns the usage exit code. */
static int usage_err(const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    mc_error("%s", line);
    return PLAN_EXIT_USAGE;
}

static int parse_procs(const char *s, unsigned *out)
{
    char *end = NULL;
    unsigned long v;

    if (s[0] < '0' || s[0] > '9')
        return -EINVAL;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > 1000000)
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

static int parse_safety(const char *s, double *out)
{
    char *end = NULL;
    double v;

    if ((s[0] < '0' || s[0] > '9') && s[0] != '.')
        return -EINVAL; /* no sign, space, inf or nan */
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || end == s || !(v > 0.0 && v <= 1.0))
        return -EINVAL;
    *out = v;
    return 0;
}

enum plan_opt {
    OPT_GPU_MEM,
    OPT_PROCS,
    OPT_SAFETY,
    OPT_STATIC,
    OPT_PER_SAMPLE,
    OPT_PROBE,
    OPT_JSON,
    OPT_HELP,
    OPT_NONE
};

static enum plan_opt lookup(const char *name, size_t len)
{
    static const struct {
        const char *name;
        enum plan_opt id;
    } t[] = {
        {"gpu-mem", OPT_GPU_MEM},
        {"procs", OPT_PROCS},
        {"nproc-per-gpu", OPT_PROCS},
        {"safety", OPT_SAFETY},
        {"gpu-mem-fraction", OPT_SAFETY},
        {"static", OPT_STATIC},
        {"per-sample", OPT_PER_SAMPLE},
        {"probe", OPT_PROBE},
        {"json", OPT_JSON},
        {"help", OPT_HELP},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strlen(t[i].name) == len && strncmp(t[i].name, name, len) == 0)
            return t[i].id;
    return OPT_NONE;
}

/* Stores one option's value. Returns 0 or the usage exit code (error already printed). */
static int set_opt(struct plan_opts *o, enum plan_opt id, const char *a, const char *v)
{
    switch (id) {
    case OPT_GPU_MEM:
        o->gpu_mem_s = v;
        if (launcher_parse_mem(v, &o->gpu_mem) != 0)
            return usage_err("invalid size '%s' for %s (e.g. 48GiB, 49152MiB)", v, a);
        return 0;
    case OPT_STATIC:
        o->static_s = v;
        if (launcher_parse_mem(v, &o->static_mem) != 0)
            return usage_err("invalid size '%s' for %s (e.g. 4GiB, 512MiB)", v, a);
        return 0;
    case OPT_PER_SAMPLE:
        o->per_sample_s = v;
        if (launcher_parse_mem(v, &o->per_sample) != 0)
            return usage_err("invalid size '%s' for %s (e.g. 0.04GiB, 40MiB)", v, a);
        return 0;
    case OPT_PROCS:
        if (parse_procs(v, &o->procs) != 0)
            return usage_err("invalid process count '%s' for %s (an integer of at least 1)", v, a);
        return 0;
    case OPT_SAFETY:
        if (parse_safety(v, &o->safety) != 0)
            return usage_err("invalid safety factor '%s' for %s (a number in (0, 1])", v, a);
        return 0;
    default:
        return 0;
    }
}

/* Handles argv[*i], an option. Returns 0 or the usage exit code. */
static int parse_one(struct plan_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *eq = NULL, *v;
    enum plan_opt id = OPT_NONE;
    char name[32]; /* the option as typed, without "=VALUE" */

    if (strcmp(a, "-h") == 0) {
        id = OPT_HELP;
    } else if (strncmp(a, "--", 2) == 0) {
        eq = strchr(a + 2, '=');
        id = lookup(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
    }
    if (id == OPT_NONE)
        return usage_err("unknown option '%s' (see 'muster plan --help')", a);
    if (id == OPT_PROBE || id == OPT_JSON || id == OPT_HELP) {
        if (eq != NULL)
            return usage_err("option '%.*s' takes no value", (int)(eq - a), a);
        *(id == OPT_PROBE ? &o->probe : id == OPT_JSON ? &o->json : &o->help) = 1;
        return 0;
    }
    if (eq != NULL) {
        v = eq + 1;
        snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
    } else {
        if (*i + 1 >= argc)
            return usage_err("option '%s' needs a value", a);
        v = argv[++*i];
        snprintf(name, sizeof(name), "%s", a);
    }
    return set_opt(o, id, name, v);
}

/* Checks the combination of options. Returns 0 or the usage exit code. */
static int check_opts(const struct plan_opts *o)
{
    if (o->probe && (o->static_s != NULL || o->per_sample_s != NULL))
        return usage_err("--static and --per-sample come from the probe run; "
                         "give them or --probe, not both");
    if (o->probe && o->cmd == NULL)
        return usage_err("--probe needs a command: muster plan --probe [options] -- COMMAND...");
    if (!o->probe && o->cmd != NULL)
        return usage_err("unexpected argument '%s' (a command runs only with --probe)", o->cmd[0]);
    if (!o->probe && (o->static_s == NULL || o->per_sample_s == NULL))
        return usage_err("--static SIZE and --per-sample SIZE are required "
                         "(or measure them: --probe -- COMMAND...)");
    return 0;
}

/* Returns 0 or the usage exit code (the error line is printed). */
static int parse_args(int argc, char **argv, struct plan_opts *o)
{
    int rc;

    memset(o, 0, sizeof(*o));
    o->procs = 1;
    o->safety = 0.85;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0 || argv[i][0] != '-' || argv[i][1] == '\0') {
            /* the probe command starts here, with or without `--` */
            int start = strcmp(argv[i], "--") == 0 ? i + 1 : i;
            if (start < argc)
                o->cmd = argv + start;
            break;
        }
        if ((rc = parse_one(o, argc, argv, &i)) != 0)
            return rc;
        if (o->help)
            return 0;
    }
    return check_opts(o);
}

/* --- M_gpu from nvidia-smi ------------------------------------------------------------------ */

/* The GPU a CUDA program here would call device 0: the first entry of CUDA_VISIBLE_DEVICES. */
static void first_visible_gpu(char *id, size_t len)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    size_t n;

    if (v == NULL || *v == '\0') {
        snprintf(id, len, "0");
        return;
    }
    n = strcspn(v, ",");
    snprintf(id, len, "%.*s", (int)n, v);
}

/* Sets *bytes from nvidia-smi (on PATH), or prints why not. Returns 0 or the usage exit code. */
static int gpu_mem_from_smi(double *bytes)
{
    char id[128], why[256];
    uint64_t b = 0;

    first_visible_gpu(id, sizeof(id));
    if (mc_gpu_mem_query(id, 0, PLAN_SMI_TIMEOUT_MS, &b, why, sizeof(why)) != 0)
        return usage_err("cannot learn the GPU's memory (%s); pass --gpu-mem SIZE", why);
    *bytes = (double)b;
    return 0;
}

/* --- the probe run ------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Reads the probe file into a NUL-terminated string (caller frees), or prints why not. */
static char *read_probe_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    size_t n;

    if (f == NULL) {
        usage_err("probe run wrote no probe file (%s: %s); does the command honour "
                  "MUSTER_PROBE_FILE?",
                  path, strerror(errno));
        return NULL;
    }
    if ((text = malloc(PLAN_PROBE_FILE_MAX + 1)) == NULL) {
        usage_err("out of memory reading the probe file");
        goto out;
    }
    n = fread(text, 1, PLAN_PROBE_FILE_MAX + 1, f);
    if (n > PLAN_PROBE_FILE_MAX) {
        usage_err("probe file is larger than %d bytes", PLAN_PROBE_FILE_MAX);
        free(text);
        text = NULL;
        goto out;
    }
    text[n] = '\0';
out:
    fclose(f);
    return text;
}

/* Explains a failed probe run. Returns the exit code: 128+sig when we forwarded it a signal
 * (the user interrupted the plan), else PLAN_EXIT_PROBE. */
static int probe_failed(const struct mc_proc_result *c)
{
    char how[128];

    if (WIFEXITED(c->status))
        snprintf(how, sizeof(how), "exit %d", WEXITSTATUS(c->status));
    else
        snprintf(how, sizeof(how), "killed by signal %d (%s)", WTERMSIG(c->status),
                 strsignal(WTERMSIG(c->status)));
    if (c->forwarded)
        mc_error("probe run interrupted by %s, %s", strsignal(c->forwarded), how);
    else
        mc_error("probe run failed: %s", how);
    return c->forwarded ? 128 + c->forwarded : PLAN_EXIT_PROBE;
}

/* Runs the probe command with MUSTER_PROBE_FILE set and parses what it wrote. With --json its
 * stdout goes to our stderr, so that ours holds the JSON alone. Returns 0 or an exit code (the
 * error line is printed). */
static int run_probe(char **cmd, int json, struct launcher_plan_probe *probe)
{
    char dir[4096], file[4200], err[PLAN_ERR_MAX];
    struct mc_proc_opts po = {.argv = cmd, .stdio = {0, json ? 2 : 1, 2}, .forward_signals = 1};
    struct mc_proc_result c = {0};
    char *text = NULL;
    int rc, ret = PLAN_EXIT_PROBE;

    snprintf(dir, sizeof(dir), "%s/muster-probe.XXXXXX", mc_tmpdir());
    if (mkdtemp(dir) == NULL) {
        mc_error("cannot create the probe directory %s: %s", dir, strerror(errno));
        return PLAN_EXIT_PROBE;
    }
    snprintf(file, sizeof(file), "%s/probe.json", dir);
    if (setenv("MUSTER_PROBE_FILE", file, 1) != 0) {
        mc_error("out of memory starting the probe run");
        goto out;
    }
    rc = mc_proc_run(&po, &c);
    if (rc != 0) {
        mc_error("cannot start the probe command '%s': %s", cmd[0], strerror(-rc));
        goto out;
    }
    if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
        ret = probe_failed(&c);
        goto out;
    }
    if ((text = read_probe_file(file)) == NULL)
        goto out;
    if (launcher_plan_from_probe(text, probe, err, sizeof(err)) != 0) {
        mc_error("%s", err);
        goto out;
    }
    ret = PLAN_EXIT_OK;
out:
    unsetenv("MUSTER_PROBE_FILE");
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(text);
    mc_proc_result_free(&c);
    return ret;
}

/* --- output -------------------------------------------------------------------------------- */

static json_t *jbytes(double b)
{
    return json_integer((json_int_t)(b + 0.5)); /* b >= 0; llround would pull in libm */
}

static int print_json(const struct plan_opts *o, const struct plan_src *src,
                      const struct launcher_plan_out *out)
{
    json_t *j = json_object();
    char *s = NULL;

    if (j == NULL)
        return -ENOMEM;
    json_object_set_new(j, "gpu_mem_bytes", jbytes(o->gpu_mem));
    json_object_set_new(j, "gpu_mem_source", json_string(src->gpu_mem));
    json_object_set_new(j, "procs", json_integer(o->procs));
    json_object_set_new(j, "safety", json_real(o->safety));
    json_object_set_new(j, "mem_fraction", json_real(o->safety / o->procs));
    json_object_set_new(j, "per_proc_bytes", jbytes(out->per_proc));
    json_object_set_new(j, "static_bytes", jbytes(o->static_mem));
    json_object_set_new(j, "per_sample_bytes", jbytes(o->per_sample));
    json_object_set_new(j, "max_batch", json_integer(out->max_batch));
    json_object_set_new(j, "start_batch", json_integer(out->start_batch));
    if (src->probed) {
        json_object_set_new(j, "probe_batch", json_integer(src->probe.batch));
        json_object_set_new(j, "probe_peak_bytes", jbytes(src->probe.peak_bytes));
    }
    s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    json_decref(j);
    if (s == NULL)
        return -ENOMEM;
    printf("%s\n", s);
    free(s);
    return 0;
}

static void print_human(const struct plan_opts *o, const struct plan_src *src,
                        const struct launcher_plan_out *out)
{
    char a[32];

    printf("GPU memory:             %s (%s)\n", launcher_plan_fmt_size(o->gpu_mem, a, sizeof(a)),
           src->gpu_mem);
    printf("processes:              %u\n", o->procs);
    printf("safety factor:          %g\n", o->safety);
    printf("available per process:  %s (memory fraction %.4g)\n",
           launcher_plan_fmt_size(out->per_proc, a, sizeof(a)), o->safety / o->procs);
    printf("static:                 %s%s\n", launcher_plan_fmt_size(o->static_mem, a, sizeof(a)),
           src->probed ? " (probe)" : "");
    printf("per sample:             %s", launcher_plan_fmt_size(o->per_sample, a, sizeof(a)));
    if (src->probed)
        printf(" (probe at batch %ld, peak %s)", src->probe.batch,
               launcher_plan_fmt_size(src->probe.peak_bytes, a, sizeof(a)));
    printf("\n");
    printf("max batch:              %ld\n", out->max_batch);
    printf("starting batch (80 %%):  %ld\n", out->start_batch);
}

/* Fills o->gpu_mem from --gpu-mem, the probe's total_bytes or nvidia-smi, in that order. */
static int resolve_gpu_mem(struct plan_opts *o, struct plan_src *src)
{
    if (o->gpu_mem_s != NULL) {
        src->gpu_mem = "--gpu-mem";
        return 0;
    }
    if (src->probed && src->probe.total_bytes > 0.0) {
        o->gpu_mem = src->probe.total_bytes;
        src->gpu_mem = "probe";
        return 0;
    }
    src->gpu_mem = "nvidia-smi";
    return gpu_mem_from_smi(&o->gpu_mem);
}

int launcher_plan(int argc, char **argv)
{
    struct plan_opts o;
    struct plan_src src = {0};
    struct launcher_plan_in in;
    struct launcher_plan_out out;
    char err[PLAN_ERR_MAX];
    int rc;

    if ((rc = parse_args(argc, argv, &o)) != 0)
        return rc;
    if (o.help) {
        print_help();
        return PLAN_EXIT_OK;
    }
    if (o.probe) {
        if ((rc = run_probe(o.cmd, o.json, &src.probe)) != 0)
            return rc;
        src.probed = 1;
        o.static_mem = src.probe.static_bytes;
        o.per_sample = src.probe.per_sample;
    }
    if ((rc = resolve_gpu_mem(&o, &src)) != 0)
        return rc;
    in = (struct launcher_plan_in){.gpu_mem = o.gpu_mem,
                                   .static_mem = o.static_mem,
                                   .per_sample = o.per_sample,
                                   .safety = o.safety,
                                   .procs = o.procs};
    if (launcher_plan_compute(&in, &out, err, sizeof(err)) != 0)
        return usage_err("%s", err);
    if (o.json) {
        if (print_json(&o, &src, &out) != 0)
            return usage_err("out of memory printing JSON");
    } else {
        print_human(&o, &src, &out);
    }
    return fflush(stdout) == 0 ? PLAN_EXIT_OK
                               : usage_err("cannot write the plan: %s", strerror(errno));
}

/* --- muster run --auto-batch --------------------------------------------------------------- */

int launcher_plan_auto_batch(char **argv, const char *gpu_id, unsigned procs, double safety,
                             double gpu_mem, unsigned probe_batch, long *batch)
{
    struct launcher_plan_probe probe;
    struct launcher_plan_in in;
    struct launcher_plan_out out;
    char err[PLAN_ERR_MAX], pb[16], *saved = NULL, s1[32], s2[32], s3[32];
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    int rc;

    /* the probe runs alone on the first GPU, under the same fraction as a task will */
    if (vis != NULL && (saved = strdup(vis)) == NULL)
        return PLAN_EXIT_USAGE;
    snprintf(pb, sizeof(pb), "%u", probe_batch);
    snprintf(s1, sizeof(s1), "%.4f", safety / procs);
    if (setenv("CUDA_VISIBLE_DEVICES", gpu_id, 1) || setenv("MUSTER_PROBE_BATCH", pb, 1) ||
        setenv("MUSTER_GPU_MEM_FRACTION", s1, 1)) {
        free(saved);
        return PLAN_EXIT_USAGE;
    }
    mc_info("--auto-batch: probing '%s' once at batch %u on GPU %s", argv[0], probe_batch, gpu_id);
    rc = run_probe(argv, 1, &probe);
    saved ? setenv("CUDA_VISIBLE_DEVICES", saved, 1) : unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("MUSTER_PROBE_BATCH");
    unsetenv("MUSTER_GPU_MEM_FRACTION");
    free(saved);
    if (rc != 0)
        return rc;
    if (gpu_mem <= 0 && probe.total_bytes > 0)
        gpu_mem = probe.total_bytes;
    if (gpu_mem <= 0 && (rc = gpu_mem_from_smi(&gpu_mem)) != 0)
        return rc;
    in = (struct launcher_plan_in){.gpu_mem = gpu_mem,
                                   .static_mem = probe.static_bytes,
                                   .per_sample = probe.per_sample,
                                   .safety = safety,
                                   .procs = procs};
    if (launcher_plan_compute(&in, &out, err, sizeof(err)) != 0)
        return usage_err("--auto-batch: %s", err);
    mc_info("--auto-batch: %s per process, static %s, %s per sample: max batch "
            "%ld, MUSTER_BATCH_SIZE=%ld",
            launcher_plan_fmt_size(out.per_proc, s1, sizeof(s1)),
            launcher_plan_fmt_size(probe.static_bytes, s2, sizeof(s2)),
            launcher_plan_fmt_size(probe.per_sample, s3, sizeof(s3)), out.max_batch,
            out.start_batch);
    *batch = out.start_batch;
    return 0;
}
