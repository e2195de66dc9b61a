#include "gpuquery.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "proc.h"

#define MIB (1024ULL * 1024ULL)

int mc_gpu_mem_parse(const char *out, uint64_t *bytes)
{
    char *end = NULL;
    unsigned long long mib;

    while (*out == ' ' || *out == '\t')
        out++;
    if (*out < '0' || *out > '9')
        return -EINVAL;
    errno = 0;
    mib = strtoull(out, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\r')
        end++;
    if (errno != 0 || (*end != '\n' && *end != '\0') || mib == 0 || mib > (1ULL << 40))
        return -EINVAL;
    *bytes = (uint64_t)mib * MIB;
    return 0;
}

static int fail(char *why, size_t whylen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *why, size_t whylen, int rc, const char *fmt, ...)
{
    va_list ap;

    if (why != NULL) {
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int mc_gpu_mem_query(const char *gpu_id, int driver_dirs, uint64_t timeout_ms, uint64_t *bytes,
                     char *why, size_t whylen)
{
    char smi[PATH_MAX];
    char *argv[] = {
        smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", (char *)gpu_id,
        NULL};
    struct mc_proc_opts o = {.argv = argv,
                             .stdio = {-1, -1, -1},
                             .capture = 1,
                             .timeout_ms = timeout_ms,
                             .grace_ms = 1000};
    struct mc_proc_result r;
    int rc;

    if (mc_proc_find("nvidia-smi", driver_dirs, smi, sizeof(smi)) != 0)
        return fail(why, whylen, -ENOENT, "no nvidia-smi on PATH");
    rc = mc_proc_run(&o, &r);
    if (rc != 0)
        rc = fail(why, whylen, rc, "cannot start nvidia-smi: %s", strerror(-rc));
    else if (r.timed_out)
        rc = fail(why, whylen, -ETIMEDOUT, "nvidia-smi did not answer within %llu s",
                  (unsigned long long)(timeout_ms / 1000));
    else if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
        rc = fail(why, whylen, -EIO, "nvidia-smi -i %s failed with status %d: no such GPU?", gpu_id,
                  mc_proc_exit_code(r.status));
    else if (mc_gpu_mem_parse(r.out, bytes) != 0)
        rc = fail(why, whylen, -EINVAL, "nvidia-smi printed '%.*s', not a size in MiB",
                  (int)(strcspn(r.out, "\r\n") < 40 ? strcspn(r.out, "\r\n") : 40), r.out);
    mc_proc_result_free(&r);
    return rc;
}
