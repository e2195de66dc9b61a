#include "p2p.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "perf.h"

static double pair(const struct pf_p2p *m, int s, int d)
{
    return m->gbps[(size_t)s * (size_t)m->n + (size_t)d];
}

static int valid(const struct pf_p2p *m)
{
    return m != NULL && m->n >= 0 && m->n <= PF_P2P_MAX_GPUS && (m->n == 0 || m->gbps != NULL);
}

double pf_p2p_median(const struct pf_p2p *m, int *pairs)
{
    double v[PF_P2P_MAX_GPUS * (PF_P2P_MAX_GPUS - 1)];
    size_t k = 0;

    *pairs = 0;
    if (!valid(m))
        return 0;
    for (int s = 0; s < m->n; s++)
        for (int d = 0; d < m->n; d++)
            if (s != d && pair(m, s, d) > 0)
                v[k++] = pair(m, s, d);
    *pairs = (int)k;
    return pf_perf_median(v, k);
}

int pf_p2p_compare(const struct pf_p2p *m, double min_gbps, struct pf_p2p_finding *out, size_t cap)
{
    int count = 0, pairs = 0;
    double med;

    if (!valid(m) || (out == NULL && cap > 0))
        return -EINVAL;
    med = pf_p2p_median(m, &pairs);
    for (int k = 0; k < m->n * m->n; k++) { /* every ordered pair: source k / n, dest k % n */
        int s = k / m->n, d = k % m->n;
        struct pf_p2p_finding f = {s, d, pair(m, s, d), 0, 0, pairs};
        if (s == d || !(f.value > 0) ||
            !pf_figure_slow(f.value, min_gbps, med, pairs, PF_P2P_OUTLIER, &f.ref, &f.below_floor))
            continue;
        if ((size_t)count < cap)
            out[count] = f;
        count++;
    }
    return count;
}

static const char *uuid_of(const struct pf_p2p *m, int i)
{
    return m->uuid != NULL && m->uuid[i] != NULL ? m->uuid[i] : "?";
}

static int index_of(const struct pf_p2p *m, int i)
{
    return m->index != NULL ? m->index[i] : i;
}

int pf_p2p_format(const struct pf_p2p *m, const struct pf_p2p_finding *f, char *out, size_t cap)
{
    const char *host = m->host ? m->host : "?";

    if (f->below_floor)
        return snprintf(out, cap,
                        "node %s: P2P GPU %d (%s) -> GPU %d (%s) %.1f GB/s is below the floor "
                        "%.1f GB/s",
                        host, index_of(m, f->src), uuid_of(m, f->src), index_of(m, f->dst),
                        uuid_of(m, f->dst), f->value, f->ref);
    return snprintf(out, cap,
                    "node %s: P2P GPU %d (%s) -> GPU %d (%s) %.1f GB/s is %.1f %% below the "
                    "node's median %.1f GB/s of %d pairs",
                    host, index_of(m, f->src), uuid_of(m, f->src), index_of(m, f->dst),
                    uuid_of(m, f->dst), f->value, 100.0 * (1.0 - f->value / f->ref), f->ref,
                    f->pairs);
}
