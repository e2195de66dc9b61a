/* Pre-flight stages 1 (inventory) and 2 (TCP mesh) of the node process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "inventory.h"
#include "mesh.h"
#include "muster.h"
#include "node.h"
#include "node_priv.h"
#include "proc.h"
#include "clock.h"

#define INVENTORY_OUT_MAX (1 << 20) /* muster-preflight inventory's JSON */

/* ---- stage 1: inventory ------------------------------------------------------------------ */

static json_t *local_inventory(struct pf_node *n)
{
    json_t *rec = json_pack("{s:s, s:i, s:i}", "host", n->host, "group_rank", n->group_rank,
                            "need_gpus", n->need_gpus);
    char *argv[] = {(char *)n->bin, "inventory", NULL};
    struct mc_proc_opts po = {.argv = argv,
                              .stdio = {-1, -1, 2},
                              .capture = 1,
                              .capture_max = INVENTORY_OUT_MAX,
                              .timeout_ms = (uint64_t)n->timeout_ms,
                              .grace_ms = 1000};
    struct mc_proc_result pr;
    json_t *inv;
    int rc;

    if (rec == NULL || n->need_gpus == 0)
        return rec; /* a CPU job needs no GPU facts */
    if (n->bin[0] == '\0') {
        json_object_set_new(rec, "error",
                            json_string("muster-preflight is not installed next to "
                                        "muster (it is built only where the CUDA "
                                        "toolkit and NCCL are found)"));
        return rec;
    }
    rc = mc_proc_run(&po, &pr);
    if (rc == 0)
        rc = pr.timed_out ? -ETIMEDOUT : mc_proc_exit_code(pr.status);
    inv = pr.out ? json_loads(pr.out, 0, NULL) : NULL;
    if (inv != NULL)
        json_object_set_new(rec, "inventory", inv);
    if (rc != 0 && (inv == NULL || json_object_get(inv, "error") == NULL)) {
        char why[160];
        if (rc < 0)
            snprintf(why, sizeof(why), "muster-preflight inventory: %s", strerror(-rc));
        else
            snprintf(why, sizeof(why), "muster-preflight inventory exited with %d", rc);
        json_object_set_new(rec, "error", json_string(why));
    }
    mc_proc_result_free(&pr);
    return rec;
}

/* Group rank 0: every node's record, then the comparison. */
/* The nodes' inventories side by side: a heading, then one line a row (host names are the
 * peers': mc_log_cont escapes them). */
static void log_table(const char *table)
{
    if (!mc_log_enabled(MC_LOG_INFO))
        return;
    mc_info("preflight: inventory");
    for (const char *p = table, *nl; p != NULL && *p != '\0'; p = nl + 1) {
        if ((nl = strchr(p, '\n')) == NULL) {
            mc_log_cont(MC_LOG_INFO, "%s", p);
            break;
        }
        mc_log_cont(MC_LOG_INFO, "%.*s", (int)(nl - p), p);
    }
}

static int judge_inventory(struct pf_node *n, json_t *mine)
{
    json_t **recs = calloc((size_t)n->gws, sizeof(*recs)), *summary = NULL;
    struct pf_inventory_verdict v = {0};
    char *table = NULL, key[64];
    int rc = 0, ok;

    if (recs == NULL)
        return PF_EXIT_INTERNAL;
    recs[0] = json_incref(mine);
    for (int g = 1; g < n->gws && rc == 0; g++) {
        int left = n->timeout_ms - (int)(mc_mono_ms_f() - n->t0);
        snprintf(key, sizeof(key), "pf/inv/%d", g);
        if ((rc = pf_get_json(n, key, left > 0 ? left : 0, &recs[g])) != 0) {
            char host[256];
            pf_node_host(n, g, host, sizeof(host));
            snprintf(n->reason, sizeof(n->reason),
                     "node %s (group rank %d) sent no inventory "
                     "within %.0f s: %s",
                     host, g, n->timeout_ms / 1000.0, muster_strerror(rc));
        }
    }
    if (rc == 0 &&
        pf_inventory_compare(recs, (size_t)n->gws, n->allow_mixed, &v, &table, &summary) != 0)
        snprintf(n->reason, sizeof(n->reason), "cannot compare the inventories"), rc = -1;
    if (rc == 0) {
        log_table(table);
        json_object_set_new(n->report_json, "inventory", summary);
        if (v.failed)
            snprintf(n->reason, sizeof(n->reason), "%s", v.reason);
    }
    ok = rc == 0 && !v.failed;
    free(table);
    for (int g = 0; g < n->gws; g++)
        json_decref(recs[g]);
    free(recs);
    if (!ok)
        pf_say(MC_LOG_ERROR, "failed at the inventory stage: %s", n->reason);
    return pf_verdict(n, "inventory", ok, n->reason);
}

int pf_stage_inventory(struct pf_node *n)
{
    json_t *mine = local_inventory(n);
    char key[64];
    int rc;

    if (mine == NULL)
        return PF_EXIT_INTERNAL;
    snprintf(key, sizeof(key), "pf/inv/%d", n->group_rank);
    if (n->group_rank != 0 && pf_put_json(n, key, mine) != 0) {
        json_decref(mine);
        return PF_EXIT_FAILED;
    }
    rc = n->group_rank == 0 ? judge_inventory(n, mine) : pf_verdict(n, "inventory", 0, NULL);
    json_decref(mine);
    return rc;
}

/* ---- stage 2: TCP mesh -------------------------------------------------------------------- */

/* The address other nodes reach this one at: --local-addr, else the source address of the
 * route towards the rendezvous server (that network carries the job's traffic too). */
static void advertised_addr(struct pf_node *n, char *out, int cap)
{
    const char *ep = getenv("MUSTER_ENDPOINT");
    char host[256] = "";

    if (n->local_addr != NULL && n->local_addr[0] != '\0') {
        snprintf(out, (size_t)cap, "%s", n->local_addr);
        return;
    }
    if (ep != NULL) {
        const char *colon = ep[0] == '[' ? strchr(ep, ']') : strrchr(ep, ':');
        size_t len = colon ? (size_t)(colon - ep) : strlen(ep);
        if (ep[0] == '[')
            ep++, len--;
        snprintf(host, sizeof(host), "%.*s", (int)len, ep);
    }
    /* a server on loopback means every node of the job is this machine: 127.0.0.1 is right */
    if (host[0] == '\0' || pf_mesh_local_addr(host, out, cap) != 0)
        snprintf(out, (size_t)cap, "%.63s", n->host); /* a name the others may resolve */
}

static json_t *link_json(int to, const char *host, const struct pf_mesh_target *t)
{
    return json_pack("{s:i, s:s, s:s, s:i, s:b, s:f, s:s}", "to", to, "host", host, "addr", t->host,
                     "port", (int)t->port, "ok", t->ok, "rtt_us", t->rtt_us, "error", t->error);
}

/* Each node probes at most this many peers (its next ones around the ring of group ranks), so
 * a 1,000-node job opens 256 connections per node, not 999, and every link is still covered
 * from one side or the other for jobs up to 257 nodes. */
#define PF_MESH_PEERS_MAX 256

/* Connects to the other nodes' listeners and (except on group rank 0) MASTER_ADDR:MASTER_PORT. */
static json_t *probe_peers(struct pf_node *n)
{
    int npeers = n->gws - 1 < PF_MESH_PEERS_MAX ? n->gws - 1 : PF_MESH_PEERS_MAX;
    struct pf_mesh_target *t = calloc((size_t)npeers + 1, sizeof(*t));
    char(*hosts)[256] = calloc((size_t)npeers + 1, sizeof(*hosts));
    int *to = calloc((size_t)npeers + 1, sizeof(*to)), nt = 0;
    json_t *links = json_array();
    char key[64], *v = NULL;

    for (int k = 1; t && hosts && to && k <= npeers; k++, nt++) {
        int g = (n->group_rank + k) % n->gws;
        char addr[PF_MESH_ADDR_MAX] = "";
        snprintf(key, sizeof(key), "pf/mesh/%d", g);
        if (pf_get(n, key, 0, &v) == 0)
            sscanf(v, "%63s %u %255s", addr, &t[nt].port, hosts[nt]);
        free(v);
        v = NULL;
        snprintf(t[nt].host, sizeof(t[nt].host), "%s", addr);
        to[nt] = g;
    }
    if (t && hosts && to && n->group_rank != 0) {
        snprintf(t[nt].host, sizeof(t[nt].host), "%s", n->master_addr);
        t[nt].port = (unsigned)n->master_port;
        snprintf(hosts[nt], sizeof(hosts[nt]), "MASTER_ADDR:MASTER_PORT");
        to[nt++] = -1;
    }
    pf_mesh_probe(t, nt, n->timeout_ms < 5000 ? n->timeout_ms : 5000);
    for (int i = 0; links && i < nt; i++)
        json_array_append_new(links, link_json(to[i], hosts[i], &t[i]));
    free(t);
    free(hosts);
    free(to);
    return links;
}

/* Group rank 0: every node's links; the first broken one names both ends and the port. */
static int judge_mesh(struct pf_node *n)
{
    json_t *all = json_array();
    double worst = 0;
    int bad = 0, rc = 0;
    char key[64];

    for (int g = 0; g < n->gws && rc == 0; g++) {
        json_t *res = NULL, *l;
        size_t i;
        char from[256];
        snprintf(key, sizeof(key), "pf/meshres/%d", g);
        pf_node_host(n, g, from, sizeof(from));
        if ((rc = pf_get_json(n, key, n->timeout_ms, &res)) != 0) {
            snprintf(n->reason, sizeof(n->reason),
                     "node %s (group rank %d) sent no mesh "
                     "results: %s",
                     from, g, muster_strerror(rc));
            break;
        }
        json_array_foreach(json_object_get(res, "links"), i, l)
        {
            double rtt = json_real_value(json_object_get(l, "rtt_us"));
            if (json_is_true(json_object_get(l, "ok"))) {
                worst = rtt > worst ? rtt : worst;
                continue;
            }
            int to = (int)mc_json_int(l, "to", 0);
            const char *host = mc_json_str(l, "host", NULL);
            char line[1024], target[300];
            if (to >= 0)
                snprintf(target, sizeof(target), "node %s (group rank %d) at", host ? host : "?",
                         to);
            else
                snprintf(target, sizeof(target), "MASTER_ADDR:MASTER_PORT");
            snprintf(line, sizeof(line), "node %s (group rank %d) cannot reach %s %s:%d: %s", from,
                     g, target, mc_json_str(l, "addr", NULL), (int)mc_json_int(l, "port", 0),
                     mc_json_str(l, "error", NULL));
            mc_log_cont(MC_LOG_ERROR, "  ! %s", line);
            if (bad++ == 0)
                snprintf(n->reason, sizeof(n->reason), "%s", line);
        }
        json_array_append_new(all, res);
    }
    if (rc == 0 && bad == 0)
        pf_say(MC_LOG_INFO,
               "TCP mesh: %d node%s, every link and "
               "MASTER_ADDR:MASTER_PORT %s:%d reachable; slowest round trip %.2f ms",
               n->gws, n->gws == 1 ? "" : "s", n->master_addr, n->master_port, worst / 1000.0);
    else if (rc == 0)
        pf_say(MC_LOG_ERROR, "TCP mesh: %d broken link%s", bad, bad == 1 ? "" : "s");
    json_object_set_new(n->report_json, "mesh", all);
    if (rc != 0 || bad)
        pf_say(MC_LOG_ERROR, "failed at the mesh stage: %s", n->reason);
    return pf_verdict(n, "mesh", rc == 0 && bad == 0, n->reason);
}

int pf_stage_mesh(struct pf_node *n)
{
    struct pf_mesh_listener peer = {.fd = -1}, master = {.fd = -1};
    char addr[PF_MESH_ADDR_MAX], key[64], val[400];
    json_t *res = NULL;
    int rc;

    if (n->gws < 2)
        return 0; /* one node: no link to prove */
    if ((rc = pf_mesh_listen(&peer, 0)) != 0) {
        snprintf(n->reason, sizeof(n->reason), "node %s cannot listen for the mesh: %s", n->host,
                 strerror(-rc));
        return pf_verdict(n, "mesh", 0, n->reason);
    }
    /* group rank 0 answers on MASTER_PORT for the stage: the agent keeps the port reserved
     * (bound with SO_REUSEADDR, not listening), so binding it here is allowed */
    if (n->group_rank == 0 && (rc = pf_mesh_listen(&master, (unsigned)n->master_port)) != 0)
        pf_say(MC_LOG_ERROR, "cannot listen on MASTER_PORT %d to test it: %s", n->master_port,
               strerror(-rc));
    advertised_addr(n, addr, sizeof(addr));
    snprintf(key, sizeof(key), "pf/mesh/%d", n->group_rank);
    snprintf(val, sizeof(val), "%s %u %s", addr, peer.port, n->host);
    rc = pf_put(n, key, val);
    if (rc == 0 && (rc = muster_barrier(n->m, "pf/mesh/up", (unsigned)n->gws, n->timeout_ms)))
        snprintf(n->reason, sizeof(n->reason),
                 "not every node reached the mesh stage within "
                 "%.0f s: %s",
                 n->timeout_ms / 1000.0, muster_strerror(rc));
    if (rc == 0) {
        res = json_pack("{s:i, s:s, s:o}", "group_rank", n->group_rank, "host", n->host, "links",
                        probe_peers(n));
        snprintf(key, sizeof(key), "pf/meshres/%d", n->group_rank);
        rc = res ? pf_put_json(n, key, res) : -ENOMEM;
        json_decref(res);
    }
    /* listeners stay up until every node has probed */
    if (rc == 0)
        rc = muster_barrier(n->m, "pf/mesh/done", (unsigned)n->gws, n->timeout_ms + 10000);
    pf_mesh_listener_close(&peer);
    if (master.fd >= 0)
        pf_mesh_listener_close(&master);
    if (n->group_rank == 0)
        return judge_mesh(n);
    return pf_verdict(n, "mesh", 0, NULL);
}
