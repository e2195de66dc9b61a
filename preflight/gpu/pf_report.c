#include "log.h"
#include "pf_report.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "health.h"
#include "clock.h"

static json_t *gpu_json(const struct pf_run *run)
{
    const struct pf_gpu *g = &run->gpu;

    if (!run->have_gpu)
        return json_null();
    return json_pack("{s:i, s:s, s:s, s:s}", "index", g->index, "uuid", g->uuid, "pci", g->pci,
                     "name", g->name);
}

static json_t *stage_json(const struct pf_stage_result *st)
{
    json_t *sizes = json_array();

    for (int k = 0; sizes != NULL && k < st->nsizes; k++) {
        const struct pf_size_result *r = &st->sizes[k];
        json_array_append_new(sizes, json_pack("{s:I, s:f, s:f, s:f}", "bytes",
                                               (json_int_t)r->bytes, "time_us", r->time_us, "algbw",
                                               r->algbw, "busbw", r->busbw));
    }
    return json_pack("{s:s, s:i, s:s, s:o*}", "stage", st->name, "nranks", st->nranks, "check",
                     st->check, "sizes", sizes);
}

/* {"node": ms|null, "all": ms|null}: null for a stage that did not run or never got ready. */
static json_t *init_json(const struct pf_run *run)
{
    json_t *o = json_pack("{s:n, s:n}", "node", "all");

    for (int i = 0; o != NULL && i < run->nstages; i++) {
        const struct pf_stage_result *st = &run->stages[i];
        if (st->init_done)
            json_object_set_new(o, st->name, json_real(st->init_ms));
    }
    return o;
}

/* NVML's facts (null where NVML did not answer), its summary line and the named issues. */
static json_t *nvml_json(const struct pf_health *h)
{
    struct pf_health_issue is[PF_HEALTH_MAX_ISSUES];
    int n = pf_health_judge(h, is, PF_HEALTH_MAX_ISSUES);
    static const char *const level[] = {"note", "warning", "failure"};
    char line[512], clk[160] = "";
    json_t *o, *issues = json_array();

    pf_health_summary(h, line, sizeof(line));
    if (h->clock_events >= 0)
        pf_health_clock_names(h->clock_events, clk, sizeof(clk));
#define OPT(v) ((v) >= 0 ? json_integer(v) : json_null())
    o = json_pack("{s:b, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:s?, s:o, s:o, s:o, s:o, "
                  "s:o, s:o, s:o, s:o}",
                  "found", h->nvml, "summary", line, "ecc_enabled", OPT(h->ecc_enabled),
                  "ecc_uncorrected_volatile", OPT(h->ecc_volatile_unc), "ecc_uncorrected_aggregate",
                  OPT(h->ecc_aggregate_unc), "remap_pending", OPT(h->remap_pending),
                  "remap_failure", OPT(h->remap_failure), "remapped_rows_uncorrectable",
                  OPT(h->remap_unc_rows), "clock_events", OPT(h->clock_events), "sm_mhz",
                  OPT(h->sm_mhz), "clock_event_names", clk[0] ? clk : NULL, "sm_max_mhz",
                  OPT(h->sm_max_mhz), "temperature_c", OPT(h->temp_c), "pcie_gen", OPT(h->pcie_gen),
                  "pcie_gen_max", OPT(h->pcie_gen_max), "pcie_width", OPT(h->pcie_width),
                  "pcie_width_max", OPT(h->pcie_width_max), "persistence", OPT(h->persistence),
                  "issues", issues);
#undef OPT
    for (int i = 0; o != NULL && i < n && i < PF_HEALTH_MAX_ISSUES; i++)
        json_array_append_new(
            issues, json_pack("{s:s, s:s}", "level", level[is[i].level], "text", is[i].text));
    return o;
}

/* GEMM and HBM figures (null when not measured) and NVML health; null when the
 * measurement did not run (an earlier stage failed). */
static json_t *health_json(const struct pf_run *run)
{
    const struct pf_bench *b = &run->bench;

    if (!b->ran)
        return json_null();
    return json_pack(
        "{s:o, s:i, s:i, s:s?, s:s?, s:o, s:s, s:I, s:i, s:f, s:o, s:o}", "gemm_tflops",
        b->gemm_tflops > 0 ? json_real(b->gemm_tflops) : json_null(), "gemm_n", b->gemm_n,
        "gemm_iters", b->gemm_iters, "cublas", b->cublas[0] ? b->cublas : NULL, "gemm_note",
        b->gemm_note[0] ? b->gemm_note : NULL, "hbm_gbps",
        b->hbm_gbps > 0 ? json_real(b->hbm_gbps) : json_null(), "hbm_counts", "read+write",
        "hbm_bytes", (json_int_t)b->hbm_bytes, "hbm_iters", b->hbm_iters, "ms", b->ms,
        "simulated_slow", b->slow_factor < 1 ? json_real(b->slow_factor) : json_null(), "nvml",
        nvml_json(&run->health));
}

static json_t *result_json(const struct pf_run *run)
{
    json_t *stages = json_array();
    const char *err = run->error[0] ? run->error : NULL;
    const char *note = run->note[0] ? run->note : NULL;

    for (int i = 0; stages != NULL && i < run->nstages; i++)
        json_array_append_new(stages, stage_json(&run->stages[i]));
    json_t *o = json_pack("{s:i, s:i, s:s, s:o*, s:b, s:s?, s:i, s:o*, s:o*, s:I, s:s?, s:f}",
                          "rank", run->env.rank, "local_rank", run->env.local_rank, "host",
                          run->host, "gpu", gpu_json(run), "ok", run->exit_code == PFG_EXIT_OK,
                          "error", err, "exit", run->exit_code, "init_ms", init_json(run), "stages",
                          stages, "max_bytes", (json_int_t)run->max_bytes, "note", note, "total_ms",
                          mc_mono_ms_f() - run->start_ms);
    if (o != NULL)
        json_object_set_new(o, "health", health_json(run));
    return o;
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* FILE.tmp + fsync + rename: a reader (the node process) never sees half a report. */
static int write_atomic(const char *path, const char *text)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    int fd = -1, rc;

    if (tmp == NULL)
        return -ENOMEM;
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    rc = write_all(fd, text, strlen(text));
    if (rc == 0)
        rc = write_all(fd, "\n", 1);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
out:
    free(tmp);
    return rc;
}

int pf_report_write(const struct pf_run *run)
{
    json_t *o = result_json(run);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    int rc = 0;

    json_decref(o);
    if (text == NULL) {
        mc_error("cannot format the JSON report");
        return -ENOMEM;
    }
    if (run->opts.out == NULL) {
        printf("%s\n", text);
        if (fflush(stdout) != 0)
            rc = -EIO;
    } else {
        rc = write_atomic(run->opts.out, text);
    }
    if (rc < 0)
        mc_error("cannot write the report to %s: %s", run->opts.out ? run->opts.out : "stdout",
                 strerror(-rc));
    free(text);
    return rc;
}
