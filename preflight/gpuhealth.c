/* Pre-flight (docs/PREFLIGHT.md "What runs"): group rank 0's node compares every GPU's GEMM and HBM
 * figures (perf.c's rule) and names NVML's findings that muster-preflight put in each rank's result
 * ("health"), then prints one line per node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "node_priv.h"
#include "p2p.h"
#include "perf.h"

#define MAX_FINDINGS 256

/* A finding for the report and the nodes' results files: which node (group rank) and GPU. */
static json_t *finding(const char *level, const char *text, int group_rank, int gpu)
{
    return json_pack("{s:s, s:s, s:i, s:i}", "level", level, "text", text, "group_rank", group_rank,
                     "gpu", gpu);
}

/* The group rank of the node that holds ranks[k]. */
static int node_of(json_t *nodes, json_t *rank)
{
    json_t *node, *r;
    size_t i, j;

    json_array_foreach(nodes, i, node)
    {
        json_array_foreach(json_object_get(node, "ranks"), j,
                           r) if (r == rank) return (int)mc_json_int(node, "group_rank", 0);
    }
    return -1;
}

/* Every rank of every node with its figures; *ranks gets the matching rank objects. */
static size_t collect(json_t *nodes, struct pf_perf **out, json_t ***ranks)
{
    size_t count = 0, k = 0, i, j;
    json_t *node, *r;

    json_array_foreach(nodes, i, node) count += json_array_size(json_object_get(node, "ranks"));
    *out = calloc(count ? count : 1, sizeof(**out));
    *ranks = calloc(count ? count : 1, sizeof(**ranks));
    if (*out == NULL || *ranks == NULL)
        return 0;
    json_array_foreach(nodes, i, node)
    {
        json_array_foreach(json_object_get(node, "ranks"), j, r)
        {
            json_t *gpu = json_object_get(r, "gpu"), *h = json_object_get(r, "health");
            (*out)[k] = (struct pf_perf){
                mc_json_str(r, "host", NULL),     (int)mc_json_int(gpu, "index", 0),
                mc_json_str(gpu, "uuid", NULL),   mc_json_str(gpu, "name", NULL),
                mc_json_num(h, "gemm_tflops", 0), mc_json_num(h, "hbm_gbps", 0)};
            (*ranks)[k++] = r;
        }
    }
    return k;
}

/* "node vm: 1 GPU: bf16 GEMM 791.2 TFLOP/s, HBM copy 4270.1 GB/s (read+write); NVML: ..." */
static int in_node(json_t *node, json_t *rank)
{
    json_t *r;
    size_t i;

    json_array_foreach(json_object_get(node, "ranks"), i, r) if (r == rank) return 1;
    return 0;
}

/* "; P2P min 380.2 GB/s, median 391.0 GB/s over 56 pairs", or why there is none. */
static void p2p_text(json_t *node, char *out, size_t cap)
{
    json_t *p = json_object_get(node, "p2p");

    if (p == NULL)
        out[0] = '\0';
    else if (mc_json_str(p, "skipped", NULL))
        snprintf(out, cap, "; P2P skipped: %s", mc_json_str(p, "skipped", ""));
    else if (mc_json_str(p, "error", NULL))
        snprintf(out, cap, "; P2P not measured: %s", mc_json_str(p, "error", ""));
    else
        snprintf(out, cap, "; P2P min %.1f GB/s, median %.1f GB/s over %d pairs",
                 mc_json_num(p, "min_gbps", 0), mc_json_num(p, "median_gbps", 0),
                 (int)mc_json_int(p, "pairs", 0));
}

static void node_line(json_t *node, const struct pf_perf *g, json_t **ranks, size_t n)
{
    char p2p[200];
    const char *host = mc_json_str(node, "host", NULL);
    double tmin = 0, tmax = 0, hmin = 0, hmax = 0;
    int ngpu = 0, nvml = 0, warn = 0, fail = 0;
    const char *summary = NULL;
    char gemm[96] = "bf16 GEMM not measured", hbm[96] = "HBM copy not measured";

    for (size_t k = 0; k < n; k++) {
        json_t *nv = json_object_get(json_object_get(ranks[k], "health"), "nvml"), *is;
        size_t j;
        /* by membership, not by host name: two nodes of one job may share a name (loopback
         * tests, containers), and each line is about one node */
        if (!in_node(node, ranks[k]))
            continue;
        ngpu++;
        if (g[k].tflops > 0 && (tmin == 0 || g[k].tflops < tmin))
            tmin = g[k].tflops;
        if (g[k].tflops > tmax)
            tmax = g[k].tflops;
        if (g[k].hbm_gbps > 0 && (hmin == 0 || g[k].hbm_gbps < hmin))
            hmin = g[k].hbm_gbps;
        if (g[k].hbm_gbps > hmax)
            hmax = g[k].hbm_gbps;
        nvml += json_is_true(json_object_get(nv, "found"));
        summary = mc_json_str(nv, "summary", NULL);
        json_array_foreach(json_object_get(nv, "issues"), j, is)
        {
            const char *lv = mc_json_str(is, "level", NULL);
            warn += lv && strcmp(lv, "warning") == 0;
            fail += lv && strcmp(lv, "failure") == 0;
        }
    }
    if (tmax > 0)
        snprintf(gemm, sizeof(gemm),
                 tmin == tmax ? "bf16 GEMM %.1f TFLOP/s" : "bf16 GEMM %.1f-%.1f TFLOP/s", tmin,
                 tmax);
    if (hmax > 0)
        snprintf(hbm, sizeof(hbm), hmin == hmax ? "HBM copy %.1f GB/s" : "HBM copy %.1f-%.1f GB/s",
                 hmin, hmax);
    p2p_text(node, p2p, sizeof(p2p));
    if (ngpu == 1 || nvml == 0)
        mc_info("preflight: node %s: %d GPU%s: %s, %s (read+write); NVML: %s%s", host ? host : "?",
                ngpu, ngpu == 1 ? "" : "s", gemm, hbm,
                nvml == 0 ? "NVML not found: health not checked"
                : summary ? summary
                          : "?",
                p2p);
    else
        mc_info("preflight: node %s: %d GPUs: %s, %s (read+write); NVML: %d "
                "checked, %d warning(s), %d failure(s)%s",
                host ? host : "?", ngpu, gemm, hbm, nvml, warn, fail, p2p);
}

/* NVML's warnings and failures, one line each naming the GPU. Returns the failures. */
static int nvml_issues(struct pf_node *n, json_t *nodes, const struct pf_perf *g, json_t **ranks,
                       size_t cnt, json_t *list)
{
    int fails = 0;

    for (size_t k = 0; k < cnt; k++) {
        json_t *nv = json_object_get(json_object_get(ranks[k], "health"), "nvml"), *is;
        size_t j;
        json_array_foreach(json_object_get(nv, "issues"), j, is)
        {
            const char *lv = mc_json_str(is, "level", NULL);
            const char *text = mc_json_str(is, "text", NULL);
            char line[600];
            int fatal = lv && strcmp(lv, "failure") == 0;
            if (lv == NULL || strcmp(lv, "note") == 0)
                continue;
            snprintf(line, sizeof(line), "node %s, GPU %d (%s): %s", g[k].host ? g[k].host : "?",
                     g[k].index, g[k].uuid ? g[k].uuid : "?", text ? text : "?");
            mc_log_cont(fatal ? MC_LOG_ERROR : MC_LOG_WARN, "  %s %s", fatal ? "!" : "~", line);
            json_array_append_new(list, finding(lv, line, node_of(nodes, ranks[k]), g[k].index));
            if (fatal && fails++ == 0)
                snprintf(n->reason, sizeof(n->reason), "%s", line);
        }
    }
    return fails;
}

/* Per node, a pair of GPUs far below the node's other pairs (p2p.c): named, and it fails the
 * pre-flight like a slow GPU (a warning with --preflight-allow-slow). Returns the failures. */
static int judge_p2p(struct pf_node *n, json_t *nodes, json_t *list)
{
    static double g[PF_P2P_MAX_GPUS * PF_P2P_MAX_GPUS];
    int idx[PF_P2P_MAX_GPUS], bad = 0;
    const char *uuid[PF_P2P_MAX_GPUS];
    struct pf_p2p_finding f[MAX_FINDINGS];
    json_t *node;
    size_t i;

    json_array_foreach(nodes, i, node)
    {
        json_t *p = json_object_get(node, "p2p");
        struct pf_p2p m;
        int nf;
        if (p == NULL || json_object_get(p, "gbps") == NULL ||
            pf_p2p_from_json(p, &m, idx, uuid, g) < 2)
            continue;
        m.host = mc_json_str(node, "host", NULL);
        nf = pf_p2p_compare(&m, 0, f, MAX_FINDINGS);
        for (int k = 0; k < nf && k < MAX_FINDINGS; k++) {
            char line[600];
            json_t *item;
            pf_p2p_format(&m, &f[k], line, sizeof(line));
            mc_log_cont(n->allow_slow ? MC_LOG_WARN : MC_LOG_ERROR, "  %s %s%s",
                        n->allow_slow ? "~" : "!", line,
                        n->allow_slow ? " (--preflight-allow-slow: running anyway)" : "");
            item = finding(n->allow_slow ? "warning" : "failure", line,
                           (int)mc_json_int(node, "group_rank", 0), -1);
            json_object_set_new(item, "p2p", json_pack("[i, i]", idx[f[k].src], idx[f[k].dst]));
            json_array_append_new(list, item);
            if (!n->allow_slow && bad++ == 0 && n->reason[0] == '\0')
                snprintf(n->reason, sizeof(n->reason), "slow GPU link: %s", line);
        }
    }
    return bad;
}

int pf_judge_health(struct pf_node *n, json_t *nodes)
{
    struct pf_perf_limits lim = {n->min_tflops, n->min_hbm_gbps};
    struct pf_perf_finding f[MAX_FINDINGS];
    struct pf_perf *g = NULL;
    json_t **ranks = NULL, *node, *list = json_array();
    size_t cnt = collect(nodes, &g, &ranks), i;
    int nf, bad = 0;

    json_array_foreach(nodes, i, node) node_line(node, g, ranks, cnt);
    nf = pf_perf_compare(g, cnt, &lim, f, MAX_FINDINGS);
    for (int k = 0; k < nf && k < MAX_FINDINGS; k++) {
        char line[600];
        pf_perf_format(g, &f[k], line, sizeof(line));
        mc_log_cont(n->allow_slow ? MC_LOG_WARN : MC_LOG_ERROR, "  %s %s%s",
                    n->allow_slow ? "~" : "!", line,
                    n->allow_slow ? " (--preflight-allow-slow: running anyway)" : "");
        json_array_append_new(list, finding(n->allow_slow ? "warning" : "failure", line,
                                            node_of(nodes, ranks[f[k].gpu]), g[f[k].gpu].index));
        if (!n->allow_slow && bad++ == 0)
            snprintf(n->reason, sizeof(n->reason), "slow GPU: %s", line);
    }
    bad += nvml_issues(n, nodes, g, ranks, cnt, list);
    bad += judge_p2p(n, nodes, list);
    json_object_set_new(n->report_json, "gpu_health",
                        json_pack("{s:o, s:f, s:f, s:b, s:f}", "findings", list, "min_tflops",
                                  n->min_tflops, "min_hbm_gbps", n->min_hbm_gbps, "allow_slow",
                                  n->allow_slow, "outlier_fraction", PF_PERF_OUTLIER));
    free(g);
    free(ranks);
    return bad;
}
