#include "plan.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static double unit_factor(const char *u)
{
    static const struct {
        const char *name;
        double factor;
    } units[] = {
        {"", 1.0},
        {"b", 1.0},
        {"k", 1024.0},
        {"kib", 1024.0},
        {"m", 1048576.0},
        {"mib", 1048576.0},
        {"g", LAUNCHER_PLAN_GIB},
        {"gib", LAUNCHER_PLAN_GIB},
        {"t", LAUNCHER_PLAN_GIB * 1024.0},
        {"tib", LAUNCHER_PLAN_GIB * 1024.0},
    };
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcasecmp(u, units[i].name) == 0)
            return units[i].factor;
    return 0.0;
}

int launcher_parse_mem(const char *s, double *bytes)
{
    char num[64];
    const char *p = s;
    size_t digits = 0, len;
    double v, factor;
    char *end = NULL;

    if (s == NULL || bytes == NULL)
        return -EINVAL;
    /* Only [digits][.digits]: strtod alone would take "-1", " 1", "0x10", "inf" and "nan". */
    while (isdigit((unsigned char)*p))
        p++, digits++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p))
            p++, digits++;
    }
    len = (size_t)(p - s);
    if (digits == 0 || len >= sizeof(num))
        return -EINVAL;
    memcpy(num, s, len);
    num[len] = '\0';
    if (*p == ' ') {
        p++;
        if (*p == '\0')
            return -EINVAL; /* "48 " */
    }
    if ((factor = unit_factor(p)) == 0.0)
        return -EINVAL;
    errno = 0;
    v = strtod(num, &end);
    if (end != num + len || errno == ERANGE)
        return -EINVAL;
    v *= factor;
    if (!isfinite(v) || v < 0.0 || v > LAUNCHER_PLAN_MEM_MAX)
        return -EINVAL;
    *bytes = v;
    return 0;
}

double launcher_plan_floor(double x)
{
    double mag = fabs(x) > 1.0 ? fabs(x) : 1.0; /* fmax: no libm for the agent */

    return floor(x + 1e-9 * mag);
}

const char *launcher_plan_fmt_size(double bytes, char *buf, size_t len)
{
    if (bytes >= LAUNCHER_PLAN_GIB)
        snprintf(buf, len, "%.1f GiB", bytes / LAUNCHER_PLAN_GIB);
    else if (bytes >= LAUNCHER_PLAN_MIB)
        snprintf(buf, len, "%.1f MiB", bytes / LAUNCHER_PLAN_MIB);
    else if (bytes >= 1024.0)
        snprintf(buf, len, "%.1f KiB", bytes / 1024.0);
    else
        snprintf(buf, len, "%.0f B", bytes);
    return buf;
}

/* The checks on each input alone, before any arithmetic. */
static int check_inputs(const struct launcher_plan_in *in, char *err, size_t errlen)
{
    if (in->procs == 0)
        return fail(err, errlen, "the number of processes must be at least 1");
    if (!(in->safety > 0.0 && in->safety <= 1.0)) /* also catches NaN */
        return fail(err, errlen, "safety factor %g is not in (0, 1]", in->safety);
    if (!(in->gpu_mem > 0.0) || !isfinite(in->gpu_mem))
        return fail(err, errlen, "GPU memory must be above zero");
    if (!(in->per_sample > 0.0) || !isfinite(in->per_sample))
        return fail(err, errlen, "per-sample memory must be above zero");
    if (!(in->static_mem >= 0.0) || !isfinite(in->static_mem))
        return fail(err, errlen, "static memory must not be negative");
    return 0;
}

int launcher_plan_compute(const struct launcher_plan_in *in, struct launcher_plan_out *out,
                          char *err, size_t errlen)
{
    char a[32], b[32], c[32], d[32];
    double share, x;
    long max, start;
    int rc;

    if ((rc = check_inputs(in, err, errlen)) != 0)
        return rc;
    share = in->gpu_mem / in->procs * in->safety;
    if (in->static_mem >= share) {
        launcher_plan_fmt_size(in->static_mem, a, sizeof(a));
        launcher_plan_fmt_size(share, b, sizeof(b));
        launcher_plan_fmt_size(in->gpu_mem, c, sizeof(c));
        if (in->procs == 1)
            return fail(err, errlen,
                        "static memory %s does not fit in the %s share of the only process "
                        "on a %s GPU",
                        a, b, c);
        return fail(err, errlen,
                    "static memory %s does not fit in the %s share of each of %u processes "
                    "on a %s GPU",
                    a, b, in->procs, c);
    }
    x = launcher_plan_floor((share - in->static_mem) / in->per_sample);
    if (x < 1.0) {
        launcher_plan_fmt_size(share - in->static_mem, a, sizeof(a));
        launcher_plan_fmt_size(in->per_sample, b, sizeof(b));
        launcher_plan_fmt_size(share, c, sizeof(c));
        launcher_plan_fmt_size(in->static_mem, d, sizeof(d));
        return fail(err, errlen,
                    "max batch is 0: the %s share less %s static memory leaves %s, "
                    "one sample needs %s",
                    c, d, a, b);
    }
    if (x > (double)LAUNCHER_PLAN_BATCH_MAX)
        return fail(err, errlen, "max batch %.3g is absurd: per-sample memory %s is too small", x,
                    launcher_plan_fmt_size(in->per_sample, a, sizeof(a)));
    max = (long)x;
    start = (long)launcher_plan_floor(LAUNCHER_PLAN_START_SHARE * (double)max);
    out->per_proc = share;
    out->max_batch = max;
    out->start_batch = start < 1 ? 1 : start;
    return 0;
}

/* Reads one numeric field; a missing field is an error unless optional (then *v is left). */
static int probe_number(json_t *obj, const char *key, int optional, double *v, char *err,
                        size_t errlen)
{
    json_t *j = json_object_get(obj, key);

    if (j == NULL) {
        if (optional)
            return 0;
        return fail(err, errlen, "probe file lacks \"%s\"", key);
    }
    if (!json_is_number(j))
        return fail(err, errlen, "probe file: \"%s\" is not a number", key);
    *v = json_number_value(j);
    if (!isfinite(*v) || *v < 0.0)
        return fail(err, errlen, "probe file: \"%s\" is negative", key);
    return 0;
}

static int probe_fields(json_t *root, struct launcher_plan_probe *p, char *err, size_t errlen)
{
    char a[32], b[32];
    json_t *jb;
    int rc;

    if ((rc = probe_number(root, "static_bytes", 0, &p->static_bytes, err, errlen)) != 0 ||
        (rc = probe_number(root, "peak_bytes", 0, &p->peak_bytes, err, errlen)) != 0 ||
        (rc = probe_number(root, "total_bytes", 1, &p->total_bytes, err, errlen)) != 0)
        return rc;
    jb = json_object_get(root, "batch");
    if (jb == NULL)
        return fail(err, errlen, "probe file lacks \"batch\"");
    if (!json_is_integer(jb) || json_integer_value(jb) < 1)
        return fail(err, errlen, "probe file: \"batch\" must be an integer of at least 1");
    if (json_integer_value(jb) > LAUNCHER_PLAN_BATCH_MAX)
        return fail(err, errlen, "probe file: \"batch\" is absurdly large");
    p->batch = (long)json_integer_value(jb);
    if (!(p->peak_bytes > p->static_bytes))
        return fail(err, errlen,
                    "probe file: peak memory %s is not above static memory %s "
                    "(did the probe step run on the GPU?)",
                    launcher_plan_fmt_size(p->peak_bytes, a, sizeof(a)),
                    launcher_plan_fmt_size(p->static_bytes, b, sizeof(b)));
    if (p->total_bytes != 0.0 && p->total_bytes <= p->peak_bytes)
        return fail(err, errlen, "probe file: total_bytes is not above peak_bytes");
    p->per_sample = (p->peak_bytes - p->static_bytes) / (double)p->batch;
    return 0;
}

int launcher_plan_from_probe(const char *json_text, struct launcher_plan_probe *out, char *err,
                             size_t errlen)
{
    struct launcher_plan_probe p = {0};
    json_error_t jerr;
    json_t *root = NULL;
    int rc;

    if (json_text == NULL)
        return fail(err, errlen, "probe file is empty");
    root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        rc = fail(err, errlen, "probe file is not JSON: %s (line %d)", jerr.text, jerr.line);
        goto out;
    }
    if (!json_is_object(root)) {
        rc = fail(err, errlen, "probe file is not a JSON object");
        goto out;
    }
    if ((rc = probe_fields(root, &p, err, errlen)) == 0)
        *out = p;
out:
    json_decref(root);
    return rc;
}
