/* `muster run`'s GPU options: shared-GPU mode (--nproc-per-gpu, --gpu-mem-fraction, --gpu-mem,
 * --mps, --auto-batch) and the pre-flight (--preflight*). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_priv.h"
#include "gpus.h"
#include "plan.h"

/* A decimal within (lo, hi]. */
static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v <= lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

static int add_gpu_id(struct launcher_config *cfg, const char *id, size_t len)
{
    char **v = realloc(cfg->gpu_ids, (size_t)(cfg->ngpu_ids + 1) * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    cfg->gpu_ids = v;
    if ((v[cfg->ngpu_ids] = strndup(id, len)) == NULL)
        return -ENOMEM;
    cfg->ngpu_ids++;
    return 0;
}

/* The GPUs shared-GPU mode spreads its tasks over: CUDA_VISIBLE_DEVICES as the user wrote it
 * (trusted as given, so a plan can be checked with --dry-run anywhere), else every GPU the
 * driver lists. An explicit --nproc-per-node N takes the first N of them. */
static int pick_gpus(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    long want = 0;
    int rc = 0;

    if (vis != NULL && *vis != '\0') {
        for (const char *s = vis; rc == 0 && *s != '\0';) {
            size_t len = strcspn(s, ",");
            while (len > 0 && s[0] == ' ')
                s++, len--;
            while (len > 0 && s[len - 1] == ' ')
                len--;
            if (len == 0 || strncmp(s, "-1", len) == 0)
                break; /* CUDA stops at an empty or invalid entry */
            rc = add_gpu_id(cfg, s, len);
            s += strcspn(s, ",");
            if (*s == ',')
                s++;
        }
    } else {
        for (int i = 0; rc == 0 && i < cfg->gpus_visible; i++) {
            char id[16];
            rc = add_gpu_id(cfg, id, (size_t)snprintf(id, sizeof(id), "%d", i));
        }
    }
    if (rc != 0)
        return rc;
    if (cfg->ngpu_ids == 0)
        return launcher__cfg_fail(
            p,
            "--nproc-per-gpu: no NVIDIA GPU visible on this node (%s is empty "
            "or CUDA_VISIBLE_DEVICES hides them)",
            LAUNCHER_NVIDIA_PROC_DIR);
    if (p->val[O_NPROC] != NULL && launcher__cfg_parse_int(p->val[O_NPROC], 1, 4096, &want) == 0) {
        if (want > cfg->ngpu_ids)
            return launcher__cfg_fail(
                p, "--nproc-per-node %ld with --nproc-per-gpu: only %d GPU%s visible", want,
                cfg->ngpu_ids, cfg->ngpu_ids == 1 ? " is" : "s are");
        while (cfg->ngpu_ids > want)
            free(cfg->gpu_ids[--cfg->ngpu_ids]);
    }
    cfg->nproc_per_node = cfg->ngpu_ids * cfg->nproc_per_gpu;
    return 0;
}

static int parse_shared(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *v;
    long n;

    if ((v = p->val[O_GPU_MEM_FRACTION]) != NULL &&
        parse_double(v, 0.0, 1.0, &cfg->gpu_mem_fraction) != 0)
        return launcher__cfg_fail(p, "--gpu-mem-fraction must be a number in (0, 1], not '%s'", v);
    if ((v = p->val[O_GPU_MEM]) != NULL &&
        (launcher_parse_mem(v, &cfg->gpu_mem_bytes) != 0 || cfg->gpu_mem_bytes < 1))
        return launcher__cfg_fail(p, "--gpu-mem must be a size such as 80GiB or 81920MiB, not '%s'",
                                  v);
    if ((v = p->val[O_MPS]) != NULL) {
        if (strcmp(v, "1") == 0 || strcmp(v, "on") == 0 || strcmp(v, "true") == 0)
            cfg->mps = 1;
        else if (strcmp(v, "auto") == 0)
            cfg->mps = 2;
        else if (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "false") == 0)
            cfg->mps = 0;
        else
            return launcher__cfg_fail(p, "--mps must be on, auto or off, not '%s'", v);
    }
    cfg->auto_batch = p->val[O_AUTO_BATCH] != NULL && strcmp(p->val[O_AUTO_BATCH], "0") != 0;
    if ((v = p->val[O_NPROC_PER_GPU]) == NULL) {
        if (cfg->mps || cfg->auto_batch)
            return launcher__cfg_fail(p, "%s needs --nproc-per-gpu K (shared-GPU mode)",
                                      cfg->mps ? "--mps" : "--auto-batch");
        return 0;
    }
    if (launcher__cfg_parse_int(v, 1, 64, &n) != 0)
        return launcher__cfg_fail(p, "--nproc-per-gpu must be a number from 1 to 64, not '%s'", v);
    cfg->nproc_per_gpu = (int)n;
    if (cfg->max_nodes > 1)
        return launcher__cfg_fail(
            p, "--nproc-per-gpu runs independent workers on one node; with several "
               "nodes start one 'muster run --nproc-per-gpu' per node");
    if (cfg->checkpoint_dir != NULL || cfg->hang_timeout_ms != 0)
        return launcher__cfg_fail(p,
                                  "%s is not supported with --nproc-per-gpu (independent workers)",
                                  cfg->checkpoint_dir ? "--checkpoint-dir" : "--hang-timeout");
    return pick_gpus(p);
}

static int parse_preflight(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *v = p->val[O_PREFLIGHT] ? p->val[O_PREFLIGHT] : "auto";
    double bytes;

    if (strcmp(v, "auto") == 0) {
        /* on when the workers look like one GPU each: a node with GPUs, no more workers than
         * GPUs (8 CPU workers on a 2-GPU node are no GPU job), not --nproc-per-node cpu */
        int gpu_job =
            cfg->gpus_visible > 0 && cfg->nproc_per_gpu == 0 && strcmp(cfg->nproc_spec, "cpu") != 0;
        cfg->preflight = gpu_job && cfg->nproc_per_node <= cfg->gpus_visible;
        cfg->preflight_skipped = gpu_job && !cfg->preflight;
    } else if (strcmp(v, "on") == 0 || strcmp(v, "1") == 0)
        cfg->preflight = 1;
    else if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
        cfg->preflight = 0;
    else
        return launcher__cfg_fail(p, "--preflight must be auto, on or off, not '%s'", v);
    if (cfg->preflight && cfg->nproc_per_gpu > 0)
        return launcher__cfg_fail(p,
                                  "--preflight on checks links between the ranks of one job; "
                                  "--nproc-per-gpu workers are independent (use --preflight off)");
    if ((v = p->val[O_PREFLIGHT_MIN_BUSBW]) != NULL &&
        parse_double(v, -1e-300, 1e6, &cfg->preflight_min_busbw) != 0)
        return launcher__cfg_fail(p, "--preflight-min-busbw must be GB/s >= 0, not '%s'", v);
    cfg->preflight_allow_mixed = p->val[O_PREFLIGHT_ALLOW_MIXED] != NULL &&
                                 strcmp(p->val[O_PREFLIGHT_ALLOW_MIXED], "0") != 0;
    /* issue 15: per-GPU floors, and slow GPUs as warnings */
    if ((v = p->val[O_PREFLIGHT_MIN_TFLOPS]) != NULL &&
        parse_double(v, -1e-300, 1e6, &cfg->preflight_min_tflops) != 0)
        return launcher__cfg_fail(p, "--preflight-min-tflops must be TFLOP/s >= 0, not '%s'", v);
    if ((v = p->val[O_PREFLIGHT_MIN_HBM_GBPS]) != NULL &&
        parse_double(v, -1e-300, 1e6, &cfg->preflight_min_hbm_gbps) != 0)
        return launcher__cfg_fail(p, "--preflight-min-hbm-gbps must be GB/s >= 0, not '%s'", v);
    cfg->preflight_allow_slow =
        p->val[O_PREFLIGHT_ALLOW_SLOW] != NULL && strcmp(p->val[O_PREFLIGHT_ALLOW_SLOW], "0") != 0;
    if ((v = p->val[O_PREFLIGHT_TIMEOUT]) != NULL &&
        (launcher__cfg_parse_seconds_ms(v, &cfg->preflight_timeout_ms) != 0 ||
         cfg->preflight_timeout_ms < 1000))
        return launcher__cfg_fail(
            p, "--preflight-timeout must be a number of seconds >= 1, not '%s'", v);
    if ((v = p->val[O_PREFLIGHT_MAX_BYTES]) != NULL) {
        if (launcher_parse_mem(v, &bytes) != 0 || bytes < 4096 || bytes > 64 * LAUNCHER_PLAN_GIB)
            return launcher__cfg_fail(p,
                                      "--preflight-max-bytes must be a size from 4KiB to 64GiB, "
                                      "not '%s'",
                                      v);
        if ((cfg->preflight_max_bytes = strdup(v)) == NULL)
            return -ENOMEM;
    }
    return 0;
}

int launcher__cfg_parse_gpu(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    int rc;

    cfg->gpu_mem_fraction = 0.85; /* the seed's safety factor */
    cfg->preflight_timeout_ms = 30000;
    cfg->gpus_visible =
        launcher_count_gpus(LAUNCHER_NVIDIA_PROC_DIR, getenv("CUDA_VISIBLE_DEVICES"));
    if ((rc = parse_shared(p)) != 0)
        return rc;
    return parse_preflight(p);
}
