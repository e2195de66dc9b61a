/* `muster run`'s GPU options: shared-GPU mode (--nproc-per-gpu, --gpu-mem-fraction, --gpu-mem,
 * --mps, --auto-batch) and the pre-flight (--preflight*). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_priv.h"
#include "gpus.h"
#include "plan.h"

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

/* --gpu-mem and --mps; the rest of shared-GPU mode's options are rows of options.def. */
static int parse_shared(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *v;

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
    return 0;
}

/* --preflight MODE (auto decided here) and --preflight-max-bytes; the floors and the timeout
 * are rows of options.def. */
static int parse_preflight(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;
    const char *v = launcher__opt_value(p, O_PREFLIGHT);
    double bytes;

    if (strcmp(v, "auto") == 0) {
        /* on when the workers look like one GPU each: a node with GPUs, no more workers than
         * GPUs (8 CPU workers on a 2-GPU node are no GPU job), not --nproc-per-node cpu */
        int gpu_job =
            cfg->gpus_visible > 0 && cfg->nproc_per_gpu == 0 && strcmp(cfg->nproc_spec, "cpu") != 0;
        cfg->pf.on = gpu_job && cfg->nproc_per_node <= cfg->gpus_visible;
        cfg->preflight_skipped = gpu_job && !cfg->pf.on;
    } else if (strcmp(v, "on") == 0 || strcmp(v, "1") == 0)
        cfg->pf.on = 1;
    else if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
        cfg->pf.on = 0;
    else
        return launcher__cfg_fail(p, "--preflight must be auto, on or off, not '%s'", v);
    v = launcher__opt_value(p, O_HEALTH_CHECK);
    if (strcmp(v, "auto") == 0)
        cfg->health.mode = AGENT_HEALTH_AUTO;
    else if (strcmp(v, "always") == 0)
        cfg->health.mode = AGENT_HEALTH_ALWAYS;
    else if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
        cfg->health.mode = AGENT_HEALTH_OFF;
    else
        return launcher__cfg_fail(p, "--health-check must be auto, always or off, not '%s'", v);
    v = launcher__opt_value(p, O_GPU_TELEMETRY);
    if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0)
        cfg->health.telemetry_ms = 0;
    else {
        char *end = NULL;
        double s = strtod(v, &end);

        if (end == v || *end != '\0' || !(s >= 0.5 && s <= 60))
            return launcher__cfg_fail(
                p, "--gpu-telemetry must be off or a number of seconds from 0.5 to 60, not '%s'",
                v);
        cfg->health.telemetry_ms = (unsigned)(s * 1000 + 0.5);
    }
    if ((v = p->val[O_PREFLIGHT_MAX_BYTES]) != NULL) {
        if (launcher_parse_mem(v, &bytes) != 0 || bytes < 4096 || bytes > 64 * LAUNCHER_PLAN_GIB)
            return launcher__cfg_fail(p,
                                      "--preflight-max-bytes must be a size from 4KiB to 64GiB, "
                                      "not '%s'",
                                      v);
        if ((cfg->pf.max_bytes = strdup(v)) == NULL)
            return -ENOMEM;
    }
    return 0;
}

int launcher__cfg_parse_gpu(struct parse *p)
{
    struct launcher_config *cfg = p->cfg;

    cfg->gpus_visible =
        launcher_count_gpus(LAUNCHER_NVIDIA_PROC_DIR, getenv("CUDA_VISIBLE_DEVICES"));
    return parse_shared(p);
}

int launcher__cfg_plan_gpu(struct parse *p)
{
    int rc;

    if (p->cfg->nproc_per_gpu > 0 && (rc = pick_gpus(p)) != 0)
        return rc;
    return parse_preflight(p);
}
