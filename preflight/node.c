/* The pre-flight's node process; see node.h for the stages. Blocking code with deadlines: it is
 * its own process, started and killed by the agent like a worker. */
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "inventory.h"
#include "json.h"
#include "log.h"
#include "mesh.h"
#include "muster.h"
#include "node_priv.h"
#include "escape.h"
#include "safefile.h"
#include "clock.h"

/* Lines carry host names and reasons from other nodes (through the KV store): escaped, so a
 * peer cannot forge a line or send terminal escapes (common/escape.h). */
void pf_say(enum mc_log_level level, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    mc_log_untrusted(level, "preflight: %s", buf);
}

/* ---- the round's KV store --------------------------------------------------------------- */

int pf_put(struct pf_node *n, const char *key, const char *value)
{
    int rc = muster_kv_put(n->m, key, value, strlen(value));
    if (rc != 0)
        pf_say(MC_LOG_ERROR, "cannot store %s: %s", key, muster_strerror(rc));
    return rc;
}

int pf_put_json(struct pf_node *n, const char *key, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT);
    int rc = s ? pf_put(n, key, s) : -ENOMEM;
    free(s);
    return rc;
}

/* Reads key as a string into a malloc'd buffer, waiting up to timeout_ms. */
int pf_get(struct pf_node *n, const char *key, int timeout_ms, char **out)
{
    size_t len = 0;
    char *buf = malloc(MUSTER_VALUE_MAX + 1);
    int rc;

    *out = NULL;
    if (buf == NULL)
        return -ENOMEM;
    rc = muster_kv_get(n->m, key, buf, MUSTER_VALUE_MAX, &len, timeout_ms < 0 ? 0 : timeout_ms);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

int pf_get_json(struct pf_node *n, const char *key, int timeout_ms, json_t **out)
{
    char *s = NULL;
    int rc = pf_get(n, key, timeout_ms, &s);

    *out = NULL;
    if (rc == 0 && (*out = json_loads(s, 0, NULL)) == NULL)
        rc = -EBADMSG;
    free(s);
    return rc;
}

/* The host of group rank g's node, as it announced itself ("?" when it never did). */
void pf_node_host(struct pf_node *n, int g, char *out, size_t cap)
{
    char key[64], *v = NULL;
    snprintf(key, sizeof(key), "pf/node/%d", g);
    if (pf_get(n, key, 0, &v) == 0)
        snprintf(out, cap, "%s", v);
    else
        snprintf(out, cap, "?");
    free(v);
}

/* ---- verdicts: group rank 0's node decides every stage ------------------------------------ */

int pf_verdict(struct pf_node *n, const char *stage, int ok, const char *reason)
{
    char key[64], val[1100];

    snprintf(key, sizeof(key), "pf/verdict/%s", stage);
    if (n->group_rank == 0) {
        snprintf(val, sizeof(val), "%s%s", ok ? "ok" : "fail\t", ok ? "" : reason);
        if (pf_put(n, key, val) != 0)
            return PF_EXIT_FAILED;
        return ok ? 0 : PF_EXIT_FAILED;
    }
    char *v = NULL;
    /* group rank 0 may itself wait a whole stage for a late node; the NCCL stage's ranks wait
     * for arrival and for init, then sweep (nccl.c gives them 2 x timeout + 60 s) */
    int wait_ms = strcmp(stage, "nccl") == 0 ? 2 * n->timeout_ms + 75000 : n->timeout_ms + 15000;
    int rc = pf_get(n, key, wait_ms, &v);
    if (rc != 0) {
        snprintf(n->reason, sizeof(n->reason), "no %s verdict from group rank 0's node: %s", stage,
                 muster_strerror(rc));
        pf_say(MC_LOG_ERROR, "%s", n->reason);
        return PF_EXIT_FAILED;
    }
    ok = strcmp(v, "ok") == 0;
    if (!ok) {
        snprintf(n->reason, sizeof(n->reason), "%s", strncmp(v, "fail\t", 5) == 0 ? v + 5 : v);
        pf_say(MC_LOG_ERROR, "failed at the %s stage: %s", stage, n->reason);
    }
    free(v);
    return ok ? 0 : PF_EXIT_FAILED;
}

/* ---- options and main ------------------------------------------------------------------- */

static int env_int(const char *name, int *out)
{
    const char *v = getenv(name);
    char *end;
    long x;

    if (v == NULL || *v == '\0')
        return -EINVAL;
    x = strtol(v, &end, 10);
    if (*end != '\0' || x < 0 || x > 1 << 24)
        return -EINVAL;
    *out = (int)x;
    return 0;
}

/* Long (~65 lines): one branch per option of the hidden __preflight-node command; splitting
 * the chain would scatter one option table over several functions. */
static int parse_args(struct pf_node *n, int argc, char **argv)
{
    static const struct option longopts[] = {{"need-gpus", required_argument, NULL, 'g'},
                                             {"timeout-ms", required_argument, NULL, 't'},
                                             {"min-busbw", required_argument, NULL, 'b'},
                                             {"allow-mixed", no_argument, NULL, 'x'},
                                             {"max-bytes", required_argument, NULL, 's'},
                                             {"report", required_argument, NULL, 'r'},
                                             {"bin", required_argument, NULL, 'p'},
                                             {"local-addr", required_argument, NULL, 'a'},
                                             {"reason-file", required_argument, NULL, 'f'},
                                             {"min-tflops", required_argument, NULL, 'T'},
                                             {"min-hbm-gbps", required_argument, NULL, 'H'},
                                             {"allow-slow", no_argument, NULL, 'w'},
                                             {"results-file", required_argument, NULL, 'R'},
                                             {"joined", no_argument, NULL, 'j'},
                                             {NULL, 0, NULL, 0}};
    int c;

    optind = 0; /* argv[0] is an option here: start scanning at it */
    while ((c = getopt_long(argc + 1, argv - 1, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'g':
            n->need_gpus = atoi(optarg);
            break;
        case 't':
            n->timeout_ms = atoi(optarg);
            break;
        case 'b':
            n->min_busbw = strtod(optarg, NULL);
            break;
        case 'x':
            n->allow_mixed = 1;
            break;
        case 's':
            n->max_bytes = optarg;
            break;
        case 'r':
            n->report = optarg;
            break;
        case 'p':
            n->bin = optarg;
            break;
        case 'a':
            n->local_addr = optarg;
            break;
        case 'f':
            n->reason_file = optarg;
            break;
        case 'T':
            n->min_tflops = strtod(optarg, NULL);
            break;
        case 'H':
            n->min_hbm_gbps = strtod(optarg, NULL);
            break;
        case 'w':
            n->allow_slow = 1;
            break;
        case 'R':
            n->results_file = optarg;
            break;
        case 'j':
            n->joined = 1;
            break;
        default:
            return -EINVAL;
        }
    }
    if (n->timeout_ms <= 0)
        n->timeout_ms = 30000;
    if (env_int("RANK", &n->rank0) || env_int("LOCAL_WORLD_SIZE", &n->nproc) ||
        env_int("GROUP_RANK", &n->group_rank) || env_int("GROUP_WORLD_SIZE", &n->gws) ||
        env_int("WORLD_SIZE", &n->world) || env_int("MASTER_PORT", &n->master_port))
        return -EINVAL;
    n->master_addr = getenv("MASTER_ADDR");
    return n->master_addr ? 0 : -EINVAL;
}

static void write_report(struct pf_node *n, int code)
{
    char *text;
    int rc = -ENOMEM;

    json_object_set_new(n->report_json, "ok", json_boolean(code == 0));
    json_object_set_new(n->report_json, "reason", json_string(n->reason));
    json_object_set_new(n->report_json, "total_ms", json_real(mc_mono_ms_f() - n->t0));
    if (n->report == NULL || n->report[0] == '\0')
        return;
    /* a fresh temporary name (O_EXCL, random), then rename: a link planted at the report's
     * path in a shared /tmp is replaced, never written through */
    text = json_dumps(n->report_json, JSON_INDENT(2));
    if (text != NULL)
        rc = mc_file_replace(n->report, text, strlen(text), 0600);
    if (rc != 0)
        pf_say(MC_LOG_ERROR, "cannot write the report %s: %s", n->report, strerror(-rc));
    free(text);
}

/* ---- this node's results for its agent ---------------------------------------------- */

static int level_rank(const char *l)
{
    return l == NULL ? 0 : strcmp(l, "failure") == 0 ? 2 : strcmp(l, "warning") == 0 ? 1 : 0;
}

/* The worst finding of findings about this node's GPU gpu (-1: its P2P matrix): level and
 * text into o. */
static void worst_finding(const struct pf_node *n, json_t *findings, int gpu, json_t *o)
{
    json_t *f;
    size_t i;
    int worst = 0;

    json_object_set_new(o, "level", json_string("ok"));
    json_object_set_new(o, "note", json_string(""));
    json_array_foreach(findings, i, f)
    {
        const char *lv = mc_json_str(f, "level", NULL);
        if (mc_json_int(f, "group_rank", -1) != n->group_rank ||
            (gpu >= 0 ? mc_json_int(f, "gpu", -1) != gpu : json_object_get(f, "p2p") == NULL) ||
            level_rank(lv) <= worst)
            continue;
        worst = level_rank(lv);
        json_object_set_new(o, "level", json_string(lv));
        json_object_set_new(o, "note", json_string(mc_json_str(f, "text", "")));
    }
}

static json_t *results_gpu(const struct pf_node *n, json_t *r, json_t *findings)
{
    json_t *gpu = json_object_get(r, "gpu"), *h = json_object_get(r, "health");
    int index = (int)mc_json_int(gpu, "index", mc_json_int(r, "local_rank", 0));
    json_t *o =
        json_pack("{s:i, s:s, s:s, s:f, s:f}", "index", index, "uuid", mc_json_str(gpu, "uuid", ""),
                  "model", mc_json_str(gpu, "name", ""), "gemm_tflops",
                  mc_json_num(h, "gemm_tflops", 0), "hbm_gbps", mc_json_num(h, "hbm_gbps", 0));

    if (o == NULL)
        return NULL;
    worst_finding(n, findings, index, o);
    if (!json_is_true(json_object_get(r, "ok"))) {
        json_object_set_new(o, "level", json_string("failure"));
        json_object_set_new(o, "note", json_string(mc_json_str(r, "error", "failed")));
    }
    return o;
}

void pf_write_results(struct pf_node *n, int code, json_t *findings)
{
    json_t *own = n->own, *p = json_object_get(own, "p2p"), *r, *gpus = json_array();
    json_t *p2p =
        json_pack("{s:I, s:f, s:f}", "pairs", (json_int_t)mc_json_int(p, "pairs", 0), "min_gbps",
                  mc_json_num(p, "min_gbps", 0), "median_gbps", mc_json_num(p, "median_gbps", 0));
    json_t *doc;
    size_t i;
    char *text;

    if (n->results_file == NULL || n->results_file[0] == '\0')
        return;
    json_array_foreach(json_object_get(own, "ranks"), i, r)
        json_array_append_new(gpus, results_gpu(n, r, findings));
    worst_finding(n, findings, -1, p2p);
    if (p == NULL)
        json_object_set_new(p2p, "note", json_string("not measured: no GPU stage"));
    else if (mc_json_str(p, "skipped", NULL) != NULL)
        json_object_set_new(p2p, "note", json_string(mc_json_str(p, "skipped", "")));
    else if (mc_json_str(p, "error", NULL) != NULL)
        json_object_set_new(p2p, "note", json_string(mc_json_str(p, "error", "")));
    doc = json_pack("{s:b, s:b, s:o, s:o}", "ok", code == 0, "joined", n->joined, "p2p", p2p,
                    "gpus", gpus);
    text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    if (text != NULL) {
        /* the agent made the file (mkstemp): never create or follow a link here */
        int fd = open(n->results_file, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            dprintf(fd, "%s\n", text);
            close(fd);
        }
    }
    free(text);
    json_decref(doc);
}

/* The findings this node's results file needs: group rank 0 made them; the others read them
 * from the KV store (put before the NCCL verdict, so there once the verdict was read). */
static void write_results(struct pf_node *n, int code)
{
    json_t *mine = json_object_get(json_object_get(n->report_json, "gpu_health"), "findings");
    json_t *found = NULL;

    if (n->own == NULL)
        return;
    if (n->group_rank == 0 || pf_get_json(n, "pf/findings", 0, &found) != 0)
        found = json_incref(mine);
    pf_write_results(n, code, found);
    json_decref(found);
}

static int run_stages(struct pf_node *n)
{
    char key[64];
    int rc;

    snprintf(key, sizeof(key), "pf/node/%d", n->group_rank);
    if (pf_put(n, key, n->host) != 0)
        return PF_EXIT_FAILED;
    for (int i = 0; i < n->nproc; i++) {
        snprintf(key, sizeof(key), "pf/host/%d", n->rank0 + i);
        if (pf_put(n, key, n->host) != 0)
            return PF_EXIT_FAILED;
    }
    if ((rc = pf_stage_inventory(n)) != 0)
        return rc;
    if ((rc = pf_stage_mesh(n)) != 0)
        return rc;
    return n->need_gpus > 0 ? pf_stage_nccl(n) : 0;
}

int preflight_node_main(int argc, char **argv)
{
    struct pf_node n = {.bin = "", .t0 = mc_mono_ms_f()};
    int rc;

    if (parse_args(&n, argc, argv) != 0) {
        pf_say(MC_LOG_ERROR, "internal error: bad arguments or worker environment");
        return PF_EXIT_USAGE;
    }
    if (gethostname(n.host, sizeof(n.host) - 1) != 0)
        snprintf(n.host, sizeof(n.host), "localhost");
    if ((rc = muster_connect(&n.m)) != 0) {
        pf_say(MC_LOG_ERROR, "cannot reach the rendezvous server: %s", muster_strerror(rc));
        return PF_EXIT_FAILED;
    }
    n.report_json = json_object();
    if (n.joined) {
        pf_say(MC_LOG_INFO,
               "node %s joined the running job: checking its own %d GPU%s and their links", n.host,
               n.nproc, n.nproc == 1 ? "" : "s");
        json_object_set_new(n.report_json, "joined", json_true());
    }
    rc = run_stages(&n);
    write_results(&n, rc);
    if (n.group_rank == 0) {
        write_report(&n, rc);
        if (rc == 0)
            pf_say(MC_LOG_INFO, "passed in %.2f s%s%s", (mc_mono_ms_f() - n.t0) / 1000.0,
                   n.report && *n.report ? "; report: " : "", n.report ? n.report : "");
        else if (n.report && *n.report)
            pf_say(MC_LOG_INFO, "report: %s", n.report);
    }
    if (rc != 0 && n.reason_file != NULL && n.reason[0] != '\0') {
        /* the agent made the file (mkstemp): never create or follow a link here */
        int fd = open(n.reason_file, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            dprintf(fd, "%s\n", n.reason);
            close(fd);
        }
    }
    json_decref(n.report_json);
    json_decref(n.own);
    muster_close(n.m);
    return rc;
}
