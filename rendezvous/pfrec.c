#include "pfrec.h"

#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

static int printable(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            return 0;
    return 1;
}

const char *rdzv_pfrec_check(const struct rdzv_preflight *pf)
{
    if (pf->count > RDZV_PF_GPUS_MAX)
        return "too many GPUs";
    if (pf->ok > 1 || pf->joined > 1)
        return "ok and joined must be 0 or 1";
    if (!printable(pf->p2p_note))
        return "a control character or non-ASCII byte in a string";
    for (uint32_t i = 0; i < pf->count; i++) {
        const struct rdzv_pf_gpu *g = &pf->gpus[i];
        if (g->index >= 1024)
            return "a GPU index of 1024 or more";
        if (!printable(g->uuid) || !printable(g->model) || !printable(g->note))
            return "a control character or non-ASCII byte in a string";
        for (uint32_t j = 0; j < i; j++)
            if (pf->gpus[j].index == g->index)
                return "a GPU index twice";
    }
    return NULL;
}

int rdzv_pfrec_put(struct rdzv_pfrec *r, uint64_t node_id, const char *host, uint64_t time_ms,
                   const struct rdzv_preflight *pf)
{
    size_t size = offsetof(struct rdzv_preflight, gpus) + pf->count * sizeof(pf->gpus[0]);
    struct rdzv_pfrec_node *slot = NULL;
    struct rdzv_preflight *copy;

    for (size_t i = 0; i < r->n && slot == NULL; i++)
        if (r->nodes[i].node_id == node_id)
            slot = &r->nodes[i];
    if (slot == NULL && r->n >= RDZV_PFREC_MAX)
        return -ENOSPC;
    if ((copy = malloc(size)) == NULL)
        return -ENOMEM;
    memcpy(copy, pf, size);
    if (slot == NULL) {
        struct rdzv_pfrec_node *grown = realloc(r->nodes, (r->n + 1) * sizeof(*grown));
        if (grown == NULL) {
            free(copy);
            return -ENOMEM;
        }
        r->nodes = grown;
        slot = &r->nodes[r->n++];
        memset(slot, 0, sizeof(*slot));
    }
    free(slot->pf);
    slot->node_id = node_id;
    snprintf(slot->host, sizeof(slot->host), "%s", host);
    slot->time_ms = time_ms;
    slot->pf = copy;
    return 0;
}

void rdzv_pfrec_clear(struct rdzv_pfrec *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->nodes[i].pf);
    free(r->nodes);
    r->nodes = NULL;
    r->n = 0;
}

static const char *level_name(uint8_t l)
{
    return l == RDZV_PF_FAILURE ? "failure" : l == RDZV_PF_WARNING ? "warning" : "ok";
}

static json_t *gpu_json(const struct rdzv_pf_gpu *g)
{
    return json_pack("{s:I, s:s, s:s, s:o, s:o, s:s, s:s}", "index", (json_int_t)g->index, "uuid",
                     g->uuid, "model", g->model, "gemm_tflops",
                     g->gemm_gflops ? json_real(g->gemm_gflops / 1000.0) : json_null(), "hbm_gbps",
                     g->hbm_mbps ? json_real(g->hbm_mbps / 1000.0) : json_null(), "level",
                     level_name(g->level), "note", g->note);
}

static json_t *node_json(const struct rdzv_pfrec_node *n)
{
    const struct rdzv_preflight *pf = n->pf;
    char id[17];
    json_t *gpus = json_array(), *p2p;

    snprintf(id, sizeof(id), "%016" PRIx64, n->node_id);
    for (uint32_t i = 0; gpus != NULL && i < pf->count; i++)
        json_array_append_new(gpus, gpu_json(&pf->gpus[i]));
    p2p =
        json_pack("{s:I, s:o, s:o, s:s, s:s}", "pairs", (json_int_t)pf->p2p_pairs, "min_gbps",
                  pf->p2p_pairs ? json_real(pf->p2p_min_mbps / 1000.0) : json_null(), "median_gbps",
                  pf->p2p_pairs ? json_real(pf->p2p_median_mbps / 1000.0) : json_null(), "level",
                  level_name(pf->p2p_level), "note", pf->p2p_note);
    return json_pack("{s:s, s:s, s:I, s:I, s:b, s:b, s:o, s:o}", "host", n->host, "node_id", id,
                     "round", (json_int_t)pf->round, "time_ms", (json_int_t)n->time_ms, "ok",
                     pf->ok, "joined", pf->joined, "p2p", p2p, "gpus", gpus);
}

json_t *rdzv_pfrec_json(const struct rdzv_pfrec *r)
{
    json_t *a = json_array();

    for (size_t i = 0; a != NULL && r != NULL && i < r->n; i++)
        json_array_append_new(a, node_json(&r->nodes[i]));
    return a;
}

void rdzv_pfrec_metrics(FILE *f, const char *job_id, const struct rdzv_pfrec *r, const char *which)
{
    for (size_t i = 0; r != NULL && i < r->n; i++) {
        const struct rdzv_pfrec_node *n = &r->nodes[i];
        const struct rdzv_preflight *pf = n->pf;
        if (strcmp(which, "p2p") == 0) {
            if (pf->p2p_pairs == 0)
                continue;
            fputs("muster_preflight_p2p_min_gbps{job=\"", f);
            mc_prom_label(f, job_id);
            fputs("\",host=\"", f);
            mc_prom_label(f, n->host);
            fprintf(f, "\"} %.15g\n", pf->p2p_min_mbps / 1000.0);
            continue;
        }
        for (uint32_t k = 0; k < pf->count; k++) {
            const struct rdzv_pf_gpu *g = &pf->gpus[k];
            double v = strcmp(which, "gemm") == 0  ? g->gemm_gflops / 1000.0
                       : strcmp(which, "hbm") == 0 ? g->hbm_mbps / 1000.0
                                                   : g->level;
            const char *name = strcmp(which, "gemm") == 0  ? "muster_preflight_gpu_gemm_tflops"
                               : strcmp(which, "hbm") == 0 ? "muster_preflight_gpu_hbm_gbps"
                                                           : "muster_preflight_gpu_level";
            if (strcmp(which, "level") != 0 && v <= 0)
                continue; /* not measured: no sample rather than a fake 0 */
            fprintf(f, "%s{job=\"", name);
            mc_prom_label(f, job_id);
            fputs("\",host=\"", f);
            mc_prom_label(f, n->host);
            fprintf(f, "\",gpu=\"%" PRIu32 "\",uuid=\"", g->index);
            mc_prom_label(f, g->uuid);
            fprintf(f, "\"} %.15g\n", v);
        }
    }
}
