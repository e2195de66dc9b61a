#include "pf_report.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

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

static json_t *result_json(const struct pf_run *run)
{
    json_t *stages = json_array();
    const char *err = run->error[0] ? run->error : NULL;
    const char *note = run->note[0] ? run->note : NULL;

    for (int i = 0; stages != NULL && i < run->nstages; i++)
        json_array_append_new(stages, stage_json(&run->stages[i]));
    return json_pack("{s:i, s:i, s:s, s:o*, s:b, s:s?, s:i, s:o*, s:o*, s:I, s:s?, s:f}", "rank",
                     run->env.rank, "local_rank", run->env.local_rank, "host", run->host, "gpu",
                     gpu_json(run), "ok", run->exit_code == PF_EXIT_OK, "error", err, "exit",
                     run->exit_code, "init_ms", init_json(run), "stages", stages, "max_bytes",
                     (json_int_t)run->max_bytes, "note", note, "total_ms",
                     pf_now_ms() - run->start_ms);
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
        fprintf(stderr, "muster-preflight: error: cannot format the JSON report\n");
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
        fprintf(stderr, "muster-preflight: error: cannot write the report to %s: %s\n",
                run->opts.out ? run->opts.out : "stdout", strerror(-rc));
    free(text);
    return rc;
}
