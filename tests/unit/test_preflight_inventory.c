/* Unit tests for preflight/inventory.c: the inventory consistency report, on fake inventories. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "inventory.h"

#define H200_MEM 150109880320LL /* 139.8 GiB */
#define H100_MEM 85520809984LL  /* 79.6 GiB */
#define MAXN 8

struct fx {
    json_t *nodes[MAXN];
    size_t n;
    struct pf_inventory_verdict v;
    char *table;
    json_t *summary;
};

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));

    if (fx == NULL)
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;

    for (size_t i = 0; i < fx->n; i++)
        json_decref(fx->nodes[i]);
    free(fx->table);
    json_decref(fx->summary);
    free(fx);
    return 0;
}

/* An inventory of ngpus identical GPUs. */
static json_t *inventory(const char *driver, int cuda, int nccl, int ngpus, const char *model,
                         long long mem)
{
    json_t *gpus = json_array();

    for (int i = 0; i < ngpus; i++)
        json_array_append_new(gpus, json_pack("{s:i, s:s, s:s, s:s, s:I, s:s}", "index", i, "uuid",
                                              "GPU-00000000", "pci", "0000:1b:00.0", "name", model,
                                              "memory", (json_int_t)mem, "cc", "9.0"));
    return json_pack("{s:s, s:i, s:i, s:i, s:o}", "driver", driver, "cuda_driver", cuda,
                     "cuda_runtime", cuda, "nccl", nccl, "gpus", gpus);
}

static json_t *h200(int ngpus)
{
    return inventory("580.159.04", 13000, 22809, ngpus, "NVIDIA H200", H200_MEM);
}

/* Adds a record; takes ownership of inv (may be NULL: no inventory). */
static json_t *add(struct fx *fx, const char *host, int rank, int need, json_t *inv)
{
    json_t *rec = json_pack("{s:s, s:i, s:i}", "host", host, "group_rank", rank, "need_gpus", need);

    assert_non_null(rec);
    if (inv != NULL)
        json_object_set_new(rec, "inventory", inv);
    assert_true(fx->n < MAXN);
    fx->nodes[fx->n++] = rec;
    return rec;
}

static void run(struct fx *fx, int allow_mixed)
{
    assert_int_equal(
        pf_inventory_compare(fx->nodes, fx->n, allow_mixed, &fx->v, &fx->table, &fx->summary), 0);
    assert_non_null(fx->table);
    assert_non_null(fx->summary);
    assert_int_equal(json_is_true(json_object_get(fx->summary, "ok")), !fx->v.failed);
    assert_string_equal(json_string_value(json_object_get(fx->summary, "reason")), fx->v.reason);
    if (!fx->v.failed)
        assert_string_equal(fx->v.reason, "");
}

/* The common two-node case: nodeA with two H200s and nodeB with inv (takes ownership), each
 * running two workers, compared with or without --preflight-allow-mixed. */
static void run_pair(struct fx *fx, json_t *inv, int allow_mixed)
{
    add(fx, "nodeA", 0, 2, h200(2));
    add(fx, "nodeB", 1, 2, inv);
    run(fx, allow_mixed);
}

static json_t *sum_node(struct fx *fx, size_t i)
{
    return json_array_get(json_object_get(fx->summary, "nodes"), i);
}

static const char *differs0(struct fx *fx, size_t i)
{
    return json_string_value(json_array_get(json_object_get(sum_node(fx, i), "differs"), 0));
}

/* Line i of the table (0: the header), copied into buf. */
static const char *line(const char *table, int i, char *buf, size_t cap)
{
    const char *p = table, *e;

    for (; i > 0 && p != NULL; i--) {
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    assert_non_null(p);
    e = strchr(p, '\n');
    assert_non_null(e);
    assert_true((size_t)(e - p) < cap);
    memcpy(buf, p, (size_t)(e - p));
    buf[e - p] = '\0';
    return buf;
}

static void test_identical_pass(void **state)
{
    struct fx *fx = *state;
    char l[256];

    run_pair(fx, h200(2), 0);
    assert_false(fx->v.failed);
    assert_false(fx->v.mixed);
    assert_int_equal(fx->v.nwarnings, 0);
    assert_null(strchr(fx->table, '*'));
    assert_null(strchr(fx->table, '!'));
    line(fx->table, 1, l, sizeof(l));
    assert_string_equal(l, "   0  nodeA  2/2   H200   139.8 GiB  580.159.04  13.0/13.0  2.28.9");
    assert_int_equal(json_array_size(json_object_get(fx->summary, "problems")), 0);
    assert_int_equal(json_integer_value(json_object_get(sum_node(fx, 1), "memory")), H200_MEM);
    assert_int_equal(json_integer_value(json_object_get(sum_node(fx, 1), "nccl")), 22809);
    assert_string_equal(json_string_value(json_object_get(sum_node(fx, 1), "model")),
                        "NVIDIA H200");
    assert_int_equal(json_array_size(json_object_get(sum_node(fx, 1), "differs")), 0);
}

static void test_nccl_differs_fails(void **state)
{
    struct fx *fx = *state;

    run_pair(fx, inventory("580.159.04", 13000, 22703, 2, "NVIDIA H200", H200_MEM), 0);
    assert_true(fx->v.failed);
    assert_true(fx->v.mixed);
    assert_int_equal(fx->v.nwarnings, 0);
    assert_string_equal(fx->v.reason, "NCCL differs: nodeB (group rank 1) has 2.27.3, nodeA "
                                      "(group rank 0) has 2.28.9; use --preflight-allow-mixed to "
                                      "run anyway");
    assert_non_null(strstr(fx->table, "\n! NCCL differs: nodeB"));
    assert_string_equal(differs0(fx, 1), "nccl");
    assert_null(differs0(fx, 0));
}

static void test_nccl_differs_allow_mixed(void **state)
{
    struct fx *fx = *state;

    run_pair(fx, inventory("580.159.04", 13000, 22703, 2, "NVIDIA H200", H200_MEM), 1);
    assert_false(fx->v.failed);
    assert_true(fx->v.mixed);
    assert_int_equal(fx->v.nwarnings, 1);
    assert_non_null(strstr(fx->table, "  2.27.3*\n"));
    assert_null(strstr(fx->table, "2.28.9*"));
    assert_non_null(strstr(fx->table, "\n~ NCCL differs: nodeB (group rank 1) has 2.27.3, nodeA "
                                      "(group rank 0) has 2.28.9\n"));
    assert_true(json_is_true(json_object_get(fx->summary, "mixed")));
}

static void test_driver_differs(void **state)
{
    struct fx *fx = *state;

    add(fx, "nodeA", 0, 1, h200(1));
    add(fx, "nodeB", 1, 1, inventory("570.86.15", 13000, 22809, 1, "NVIDIA H200", H200_MEM));
    add(fx, "nodeC", 2, 1, h200(1));
    run(fx, 0);
    assert_true(fx->v.failed);
    assert_string_equal(fx->v.reason,
                        "NVIDIA driver differs: nodeB (group rank 1) has 570.86.15, nodeA (group "
                        "rank 0) has 580.159.04; use --preflight-allow-mixed to run anyway");
    assert_non_null(strstr(fx->table, "570.86.15* "));
    assert_string_equal(differs0(fx, 1), "driver");
    assert_null(differs0(fx, 2));
}

static void test_model_differs(void **state)
{
    struct fx *fx = *state;

    run_pair(fx, inventory("580.159.04", 13000, 22809, 2, "NVIDIA H100 80GB HBM3", H100_MEM), 0);
    assert_true(fx->v.failed);
    assert_true(fx->v.mixed);
    /* The first differing column names the failure; memory is reported too. */
    assert_string_equal(fx->v.reason, "GPU model differs: nodeB (group rank 1) has NVIDIA H100 "
                                      "80GB HBM3, nodeA (group rank 0) has NVIDIA H200; use "
                                      "--preflight-allow-mixed to run anyway");
    assert_non_null(strstr(fx->table, "! GPU memory differs: nodeB (group rank 1) has 79.6 GiB"));
    assert_non_null(strstr(fx->table, "  H100 80GB HBM3*  "));
    assert_non_null(strstr(fx->table, "79.6 GiB*"));
    assert_int_equal(json_array_size(json_object_get(fx->summary, "problems")), 2);
}

/* Memory compares in exact bytes even when both print as the same GiB. */
static void test_memory_bytes_differ(void **state)
{
    struct fx *fx = *state;

    add(fx, "nodeA", 0, 1, h200(1));
    add(fx, "nodeB", 1, 1,
        inventory("580.159.04", 13000, 22809, 1, "NVIDIA H200", H200_MEM - 1048576));
    run(fx, 1);
    assert_int_equal(fx->v.nwarnings, 1);
    assert_non_null(strstr(fx->table, "~ GPU memory differs: nodeB (group rank 1) has 139.8 GiB "
                                      "(150108831744), nodeA (group rank 0) has 139.8 GiB "
                                      "(150109880320)\n"));
}

static void test_mixed_within_node(void **state)
{
    struct fx *fx = *state;
    json_t *inv = h200(2);
    json_t *g1 = json_array_get(json_object_get(inv, "gpus"), 1);

    json_object_set_new(g1, "name", json_string("NVIDIA H100 80GB HBM3"));
    json_object_set_new(g1, "memory", json_integer(H100_MEM));
    add(fx, "nodeA", 0, 2, inv);
    run(fx, 0);
    assert_true(fx->v.failed);
    assert_string_equal(fx->v.reason, "node nodeA (group rank 0) has mixed GPUs: 1x NVIDIA H200 "
                                      "(139.8 GiB), 1x NVIDIA H100 80GB HBM3 (79.6 GiB); use "
                                      "--preflight-allow-mixed to run anyway");
    assert_non_null(strstr(fx->table, "  mixed  mixed  "));
    assert_string_equal(json_string_value(json_object_get(sum_node(fx, 0), "model")), "mixed");
    assert_string_equal(json_string_value(json_object_get(sum_node(fx, 0), "memory")), "mixed");

    /* A second node with the same mixture does not differ; with allow_mixed only warnings. */
    json_decref(fx->summary);
    free(fx->table);
    add(fx, "nodeB", 1, 2, json_deep_copy(json_object_get(fx->nodes[0], "inventory")));
    run(fx, 1);
    assert_false(fx->v.failed);
    assert_int_equal(fx->v.nwarnings, 2);
    assert_null(strchr(fx->table, '*'));
}

static void test_too_few_gpus(void **state)
{
    struct fx *fx = *state;

    run_pair(fx, h200(1), 1);
    assert_true(fx->v.failed);
    assert_false(fx->v.mixed);
    assert_string_equal(fx->v.reason, "node nodeB (group rank 1) has 1 GPU, its 2 workers need 2");
    assert_non_null(strstr(fx->table, " 1/2! "));
    assert_int_equal(json_integer_value(json_object_get(sum_node(fx, 1), "gpus")), 1);
}

static void test_inventory_error(void **state)
{
    struct fx *fx = *state;
    json_t *inv = h200(0);

    json_object_set_new(inv, "error", json_string("cudaGetDeviceCount: no CUDA-capable device"));
    add(fx, "nodeA", 0, 2, h200(2));
    add(fx, "nodeB", 1, 2, inv);
    json_object_set_new(add(fx, "nodeC", 2, 2, NULL), "error",
                        json_string("muster-preflight not installed"));
    run(fx, 1);
    assert_true(fx->v.failed);
    assert_string_equal(fx->v.reason, "node nodeB (group rank 1): no GPU inventory: "
                                      "cudaGetDeviceCount: no CUDA-capable device");
    assert_non_null(strstr(fx->table, "! node nodeC (group rank 2): no GPU inventory: "
                                      "muster-preflight not installed\n"));
    /* Nodes without an inventory are not compared, so no "differs" noise. */
    assert_false(fx->v.mixed);
    assert_non_null(strstr(fx->table, " ?/2! "));
}

static void test_cpu_only(void **state)
{
    struct fx *fx = *state;
    char l[256];

    add(fx, "cpu0", 0, 0, NULL);
    json_object_set_new(add(fx, "cpu1", 1, 0, NULL), "error",
                        json_string("muster-preflight not installed"));
    add(fx, "cpu2", 2, 0, inventory("570.86.15", 12080, 22703, 1, "Tesla T4", 16e9));
    run(fx, 0);
    assert_false(fx->v.failed);
    assert_false(fx->v.mixed);
    assert_string_equal(line(fx->table, 2, l, sizeof(l)),
                        "   1  cpu1  -     -      -       -       -     -");
    assert_string_equal(line(fx->table, 3, l, sizeof(l)),
                        "   2  cpu2  -     -      -       -       -     -");
    assert_true(json_is_null(json_object_get(sum_node(fx, 2), "nccl")));
    assert_int_equal(json_integer_value(json_object_get(sum_node(fx, 2), "need")), 0);
}

static void test_malformed(void **state)
{
    struct fx *fx = *state;
    json_t *inv, *gpus, *rec;

    /* Inventory fields of the wrong type. */
    gpus = json_pack("[{s:i, s:s}, s, {}]", "name", 5, "memory", "lots", "gpu?");
    inv = json_pack("{s:i, s:s, s:f, s:i, s:o}", "driver", 580, "cuda_driver", "13.0",
                    "cuda_runtime", 13000.0, "nccl", -1, "gpus", gpus);
    add(fx, "nodeA", 0, 2, inv);
    /* Record fields of the wrong type, an inventory that is not an object. */
    rec = json_pack("{s:i, s:s, s:s, s:s, s:i}", "host", 17, "group_rank", "one", "need_gpus", "2",
                    "inventory", "yes", "error", 3);
    fx->nodes[fx->n++] = rec;
    /* Records that are not objects at all, and a GPU list that is not an array. */
    fx->nodes[fx->n++] = json_string("nodeC");
    fx->nodes[fx->n++] = json_pack("{s:s, s:i, s:i, s:{s:{}}}", "host", "nodeD", "group_rank", 3,
                                   "need_gpus", 1, "inventory", "gpus");
    fx->nodes[fx->n++] = json_pack("{s:s, s:i, s:i, s:[]}", "host", "host\x1b[2Jx\tz", "group_rank",
                                   4, "need_gpus", 1, "inventory");
    fx->nodes[fx->n] = NULL; /* a NULL entry counts as a malformed record */
    assert_int_equal(
        pf_inventory_compare(fx->nodes, fx->n + 1, 0, &fx->v, &fx->table, &fx->summary), 0);
    assert_true(fx->v.failed);
    assert_non_null(strstr(fx->table, "   0  nodeA        3/2   ?      ?       ?       ?/?   ?\n"));
    assert_non_null(strstr(fx->table, "! node ? (group rank ?): record has no valid group_rank\n"
                                      "! node ? (group rank ?): record has no valid need_gpus\n"
                                      "! record 3 of 6 is not a JSON object\n"
                                      "! record 6 of 6 is not a JSON object\n"));
    assert_non_null(strstr(fx->table, "! node nodeD (group rank 3): no GPU inventory: no "
                                      "readable GPU list"));
    assert_non_null(strstr(fx->table, "host?[2Jx?z"));
    assert_null(strchr(fx->table, '\x1b'));
    assert_null(strchr(fx->table, '\t'));
    assert_true(json_is_null(json_object_get(sum_node(fx, 0), "driver")));
    assert_true(json_is_null(json_object_get(sum_node(fx, 0), "memory")));
    assert_true(json_is_null(json_object_get(sum_node(fx, 3), "host")));
    assert_true(json_is_null(json_object_get(sum_node(fx, 3), "group_rank")));
}

static void test_unsorted_input(void **state)
{
    struct fx *fx = *state;
    char l[256];

    add(fx, "nodeC", 2, 1, h200(1));
    add(fx, "nodeA", 0, 1, inventory("580.159.04", 13000, 22703, 1, "NVIDIA H200", H200_MEM));
    add(fx, "nodeB", 1, 1, h200(1));
    run(fx, 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(json_integer_value(json_object_get(sum_node(fx, (size_t)i), "group_rank")),
                         i);
    assert_non_null(strstr(line(fx->table, 1, l, sizeof(l)), "nodeA"));
    assert_non_null(strstr(line(fx->table, 2, l, sizeof(l)), "2.28.9*"));
    assert_non_null(strstr(line(fx->table, 3, l, sizeof(l)), "nodeC"));
    /* Group rank 0 is the reference even though it came second. */
    assert_non_null(strstr(fx->table,
                           "~ NCCL differs: nodeB (group rank 1) has 2.28.9, nodeC "
                           "(group rank 2) has 2.28.9, nodeA (group rank 0) has 2.27.3"));
}

static void test_many_differ_and_duplicate_rank(void **state)
{
    struct fx *fx = *state;
    char host[16];

    add(fx, "n0", 0, 1, h200(1));
    for (int i = 1; i <= 5; i++) {
        snprintf(host, sizeof(host), "n%d", i);
        add(fx, host, i, 1, inventory("580.159.04", 13000, 22703, 1, "NVIDIA H200", H200_MEM));
    }
    add(fx, "n9", 3, 1, h200(1));
    run(fx, 1);
    assert_true(fx->v.failed);
    assert_string_equal(fx->v.reason, "group rank 3 is claimed by two nodes: n3 and n9");
    assert_non_null(strstr(fx->table, "n3 (group rank 3) has 2.27.3, and 2 more nodes, n0 "
                                      "(group rank 0) has 2.28.9\n"));
}

static void test_alignment(void **state)
{
    struct fx *fx = *state;
    static const char *const title[] = {"host",   "GPUs", "model", "memory",
                                        "driver", "CUDA", "NCCL"};
    /* In group rank order, long names cut to 24 characters. */
    static const char *const host[] = {"a", "gpu-node-017.cluster.ex~", "gpu-node-0001.cluster.e~",
                                       "b"};
    size_t start[7];
    char hdr[256], l[256];

    add(fx, "a", 0, 8, h200(8));
    add(fx, "gpu-node-0001.cluster.example.org", 11, 8,
        inventory("570.86.15", 12080, 22703, 8, "NVIDIA H100 80GB HBM3", H100_MEM));
    add(fx, "gpu-node-017.cluster.example", 3, 8, h200(8));
    add(fx, "b", 120, 0, NULL);
    run(fx, 1);
    line(fx->table, 0, hdr, sizeof(hdr));
    assert_true(strlen(hdr) <= 100);
    for (int c = 0; c < 7; c++) {
        const char *p = strstr(hdr, title[c]);
        assert_non_null(p);
        start[c] = (size_t)(p - hdr);
    }
    for (int i = 1; i <= 4; i++) {
        line(fx->table, i, l, sizeof(l));
        assert_true(strlen(l) <= 100);
        assert_true(strlen(l) > start[6]);
        /* Every column starts at its header's column, after a blank. */
        for (int c = 0; c < 7; c++) {
            assert_int_equal(l[start[c] - 1], ' ');
            assert_int_not_equal(l[start[c]], ' ');
        }
        assert_memory_equal(l + start[0], host[i - 1], strlen(host[i - 1]));
        assert_int_equal(l[start[0] + strlen(host[i - 1])], ' ');
    }
    line(fx->table, 3, l, sizeof(l));
    assert_string_equal(l + start[1], "8/8   H100 80GB HBM3*  79.6 GiB*  570.86.15*  "
                                      "12.8/12.8*  2.27.3*");
    line(fx->table, 4, l, sizeof(l));
    assert_memory_equal(l, " 120  b ", 8);
    /* Only the problem lines follow the table. */
    line(fx->table, 5, l, sizeof(l));
    assert_true(l[0] == '~' || l[0] == '!');
}

static void test_einval(void **state)
{
    struct fx *fx = *state;

    fx->table = (char *)"x";
    assert_int_equal(pf_inventory_compare(fx->nodes, 0, 0, &fx->v, &fx->table, &fx->summary),
                     -EINVAL);
    assert_null(fx->table);
    assert_null(fx->summary);
    add(fx, "nodeA", 0, 0, NULL);
    assert_int_equal(pf_inventory_compare(fx->nodes, 1, 0, NULL, &fx->table, &fx->summary),
                     -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_identical_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nccl_differs_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nccl_differs_allow_mixed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_driver_differs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_differs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_bytes_differ, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixed_within_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_few_gpus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inventory_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cpu_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsorted_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_differ_and_duplicate_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alignment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_einval, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
