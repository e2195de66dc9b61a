#include "perf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEDIAN_MAX 65536

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pf_perf_median(const double *v, size_t n)
{
    double *c, m;

    if (n == 0 || n > MEDIAN_MAX || (c = malloc(n * sizeof(*c))) == NULL)
        return 0;
    memcpy(c, v, n * sizeof(*c));
    qsort(c, n, sizeof(*c), cmp_double);
    m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2.0;
    free(c);
    return m;
}

static double figure(const struct pf_perf *p, enum pf_perf_metric m)
{
    return m == PF_PERF_GEMM ? p->tflops : p->hbm_gbps;
}

static int same_model(const struct pf_perf *a, const struct pf_perf *b)
{
    return strcmp(a->model ? a->model : "", b->model ? b->model : "") == 0;
}

/* The median of metric m over the measured GPUs of g[i]'s model; *peers gets their count. */
static double model_median(const struct pf_perf *g, size_t n, size_t i, enum pf_perf_metric m,
                           int *peers)
{
    double *v = malloc(n * sizeof(*v)), med;
    size_t k = 0;

    *peers = 0;
    if (v == NULL)
        return 0;
    for (size_t j = 0; j < n; j++)
        if (figure(&g[j], m) > 0 && same_model(&g[i], &g[j]))
            v[k++] = figure(&g[j], m);
    *peers = (int)k;
    med = pf_perf_median(v, k);
    free(v);
    return med;
}

int pf_figure_slow(double v, double floor, double med, int peers, double keep, double *ref,
                   int *below_floor)
{
    *below_floor = floor > 0 && v < floor;
    if (*below_floor)
        *ref = floor;
    else if (peers >= 2 && v < keep * med)
        *ref = med;
    else
        return 0;
    return 1;
}

int pf_perf_compare(const struct pf_perf *g, size_t n, const struct pf_perf_limits *lim,
                    struct pf_perf_finding *out, size_t cap)
{
    int count = 0;

    if ((g == NULL && n > 0) || lim == NULL || (out == NULL && cap > 0))
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        for (int m = PF_PERF_GEMM; m <= PF_PERF_HBM; m++) {
            double v = figure(&g[i], m),
                   floor = m == PF_PERF_GEMM ? lim->min_tflops : lim->min_hbm_gbps;
            struct pf_perf_finding f = {i, m, v, 0, 0, 0};
            double med = 0;
            if (!(v > 0))
                continue;
            med = model_median(g, n, i, m, &f.peers);
            if (!pf_figure_slow(v, floor, med, f.peers, 1.0 - PF_PERF_OUTLIER, &f.ref,
                                &f.below_floor))
                continue;
            if ((size_t)count < cap)
                out[count] = f;
            count++;
        }
    }
    return count;
}

int pf_perf_format(const struct pf_perf *g, const struct pf_perf_finding *f, char *out, size_t cap)
{
    const struct pf_perf *p = &g[f->gpu];
    const char *what = f->metric == PF_PERF_GEMM ? "bf16 GEMM" : "HBM copy";
    const char *unit = f->metric == PF_PERF_GEMM ? "TFLOP/s" : "GB/s (read+write)";
    const char *flag =
        f->metric == PF_PERF_GEMM ? "--preflight-min-tflops" : "--preflight-min-hbm-gbps";

    if (f->below_floor)
        return snprintf(out, cap, "node %s, GPU %d (%s): %s %.1f %s is below %s %.1f",
                        p->host ? p->host : "?", p->index, p->uuid ? p->uuid : "?", what, f->value,
                        unit, flag, f->ref);
    return snprintf(out, cap,
                    "node %s, GPU %d (%s): %s %.1f %s is %.1f %% below the median %.1f of %d %s",
                    p->host ? p->host : "?", p->index, p->uuid ? p->uuid : "?", what, f->value,
                    unit, 100.0 * (1.0 - f->value / f->ref), f->ref, f->peers,
                    p->model && *p->model ? p->model : "GPUs");
}
