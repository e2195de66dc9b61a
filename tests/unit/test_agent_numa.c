/* Unit tests for agent/numa.c: --numa-binding's plan on fake sysfs trees (MUSTER_SYSFS_ROOT's
 * seam). The CPUs used are the first two this process may run on, since a plan never leaves
 * the agent's own affinity. */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "numa.h"

struct fx {
    char root[64];
    int a, b; /* two CPUs this process may use */
    struct agent_numa plan;
    char err[256];
};

/* Writes text to root/rel, creating the directories. */
static void put(struct fx *fx, const char *rel, const char *fmt, ...)
{
    char path[512], *slash;
    va_list ap;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", fx->root, rel);
    for (slash = strchr(path + strlen(fx->root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(path, 0755);
        *slash = '/';
    }
    assert_non_null(f = fopen(path, "w"));
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static void gpu(struct fx *fx, const char *bdf, int node)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "bus/pci/drivers/nvidia/%s/uevent", bdf);
    put(fx, rel, "DRIVER=nvidia\n");
    snprintf(rel, sizeof(rel), "bus/pci/devices/%s/numa_node", bdf);
    put(fx, rel, "%d\n", node);
}

static void node_cpus(struct fx *fx, int node, const char *list)
{
    char rel[128];
    snprintf(rel, sizeof(rel), "devices/system/node/node%d/cpulist", node);
    put(fx, rel, "%s\n", list);
}

static void cpu_file(struct fx *fx, int cpu, const char *what, const char *fmt, ...)
{
    char rel[256], text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%d/%s", cpu, what);
    put(fx, rel, "%s\n", text);
}

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    cpu_set_t s;
    int n = 0;

    if (fx == NULL || sched_getaffinity(0, sizeof(s), &s) != 0)
        return -1;
    fx->a = fx->b = -1;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &s))
            *(n++ ? &fx->b : &fx->a) = c;
    harness_mkdtemp(fx->root, sizeof(fx->root), "numa");
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    agent_numa_free(&fx->plan);
    harness_rmtree(fx->root);
    free(fx);
    return 0;
}

static void need_two_cpus(struct fx *fx)
{
    if (fx->b < 0)
        skip();
}

/* Two nodes (A, B), a GPU on each. */
static void two_nodes(struct fx *fx)
{
    char a[16], b[16];
    need_two_cpus(fx);
    snprintf(a, sizeof(a), "%d", fx->a);
    snprintf(b, sizeof(b), "%d", fx->b);
    node_cpus(fx, 0, a);
    node_cpus(fx, 1, b);
    gpu(fx, "0000:3b:00.0", 0);
    gpu(fx, "0000:86:00.0", 1);
}

static int plan(struct fx *fx, const char *mode, int nproc, const char *cvd)
{
    agent_numa_free(&fx->plan);
    fx->err[0] = '\0';
    return agent_numa_plan(mode, nproc, cvd, fx->root, &fx->plan, fx->err, sizeof(fx->err));
}

static void assert_cpus(const struct fx *fx, int rank, int c1, int c2)
{
    const cpu_set_t *s = &fx->plan.bind[rank].cpus;
    assert_int_equal(CPU_COUNT(s), c2 < 0 ? 1 : 2);
    assert_true(CPU_ISSET(c1, s));
    if (c2 >= 0)
        assert_true(CPU_ISSET(c2, s));
}

static void test_one_node_binds_nothing(void **state)
{
    struct fx *fx = *state;
    node_cpus(fx, 0, "0-1023");
    gpu(fx, "0000:3b:00.0", -1);
    assert_int_equal(plan(fx, "node", 2, NULL), 0);
    assert_int_equal(fx->plan.nnodes, 1);
    assert_int_equal(fx->plan.nbind, 0);
    assert_non_null(strstr(fx->plan.why, "one NUMA node"));
}

static void test_node_follows_gpu(void **state)
{
    struct fx *fx = *state;
    two_nodes(fx);
    assert_int_equal(plan(fx, "node", 2, NULL), 0);
    assert_int_equal(fx->plan.nbind, 2);
    assert_int_equal(fx->plan.by_gpu, 1);
    assert_cpus(fx, 0, fx->a, -1);
    assert_cpus(fx, 1, fx->b, -1);
    assert_int_equal(fx->plan.bind[0].mem_node, -1); /* a fake tree: no memory policy */
    /* CUDA_VISIBLE_DEVICES reorders: local rank 0 drives GPU 1 */
    assert_int_equal(plan(fx, "node", 2, "1,0"), 0);
    assert_cpus(fx, 0, fx->b, -1);
    assert_cpus(fx, 1, fx->a, -1);
}

/* No GPU per worker (a UUID, or more workers than GPUs, or none): blocks of local ranks. */
static void test_blocks_without_gpus(void **state)
{
    struct fx *fx = *state;
    two_nodes(fx);
    assert_int_equal(plan(fx, "node", 4, NULL), 0);
    assert_int_equal(fx->plan.by_gpu, 0);
    assert_cpus(fx, 0, fx->a, -1);
    assert_cpus(fx, 1, fx->a, -1);
    assert_cpus(fx, 2, fx->b, -1);
    assert_cpus(fx, 3, fx->b, -1);
    assert_int_equal(plan(fx, "node", 2, "GPU-8f3e,GPU-11aa"), 0);
    assert_int_equal(fx->plan.by_gpu, 0);
    assert_cpus(fx, 1, fx->b, -1);
}

static void test_socket_takes_every_node_of_it(void **state)
{
    struct fx *fx = *state;
    two_nodes(fx);
    cpu_file(fx, fx->a, "topology/physical_package_id", "0");
    cpu_file(fx, fx->b, "topology/physical_package_id", "0");
    assert_int_equal(plan(fx, "socket", 2, NULL), 0);
    assert_cpus(fx, 0, fx->a, fx->b);
    assert_cpus(fx, 1, fx->a, fx->b);
    cpu_file(fx, fx->b, "topology/physical_package_id", "1");
    assert_int_equal(plan(fx, "socket", 2, NULL), 0);
    assert_cpus(fx, 0, fx->a, -1);
}

/* exclusive: the node's physical cores shared out among its GPUs, hyper-threads kept. */
static void test_exclusive(void **state)
{
    struct fx *fx = *state;
    char both[32];
    two_nodes(fx);
    snprintf(both, sizeof(both), "%d,%d", fx->a, fx->b);
    node_cpus(fx, 0, both);
    gpu(fx, "0000:86:00.0", 0); /* both GPUs on node 0 */
    assert_int_equal(plan(fx, "exclusive", 2, NULL), 0);
    assert_cpus(fx, 0, fx->a, -1);
    assert_cpus(fx, 1, fx->b, -1);
    /* A and B are one core's two threads: one core cannot be split between two GPUs */
    cpu_file(fx, fx->a, "topology/thread_siblings_list", "%s", both);
    cpu_file(fx, fx->b, "topology/thread_siblings_list", "%s", both);
    assert_int_equal(plan(fx, "exclusive", 2, NULL), -EINVAL);
    assert_non_null(strstr(fx->err, "1 physical core"));
    assert_int_equal(fx->plan.nbind, 0);
    /* one GPU on the node gets the whole core, both threads */
    gpu(fx, "0000:86:00.0", 1);
    assert_int_equal(plan(fx, "exclusive", 1, NULL), 0);
    assert_cpus(fx, 0, fx->a, fx->b);
}

/* core-complex: one last-level cache per GPU (round robin when there are fewer);
 * instruction caches and lower levels do not count. */
static void test_core_complex(void **state)
{
    struct fx *fx = *state;
    char both[32];
    two_nodes(fx);
    snprintf(both, sizeof(both), "%d,%d", fx->a, fx->b);
    node_cpus(fx, 0, both);
    gpu(fx, "0000:86:00.0", 0);
    for (int i = 0; i < 2; i++) {
        int c = i ? fx->b : fx->a;
        cpu_file(fx, c, "cache/index0/type", "Data");
        cpu_file(fx, c, "cache/index0/level", "1");
        cpu_file(fx, c, "cache/index0/shared_cpu_list", "%d", c);
        cpu_file(fx, c, "cache/index1/type", "Instruction");
        cpu_file(fx, c, "cache/index1/level", "9");
        cpu_file(fx, c, "cache/index1/shared_cpu_list", "%d", c);
        cpu_file(fx, c, "cache/index3/type", "Unified");
        cpu_file(fx, c, "cache/index3/level", "3");
        cpu_file(fx, c, "cache/index3/shared_cpu_list", "%s", both);
    }
    /* one L3 for both CPUs: both GPUs get it */
    assert_int_equal(plan(fx, "core-complex", 2, NULL), 0);
    assert_cpus(fx, 0, fx->a, fx->b);
    assert_cpus(fx, 1, fx->a, fx->b);
    /* one L3 each: one GPU each */
    cpu_file(fx, fx->a, "cache/index3/shared_cpu_list", "%d", fx->a);
    cpu_file(fx, fx->b, "cache/index3/shared_cpu_list", "%d", fx->b);
    assert_int_equal(plan(fx, "core-complex", 2, NULL), 0);
    assert_cpus(fx, 0, fx->a, -1);
    assert_cpus(fx, 1, fx->b, -1);
}

static void test_describe_and_bad_mode(void **state)
{
    struct fx *fx = *state;
    char text[128], want[64];
    two_nodes(fx);
    assert_int_equal(plan(fx, "node", 2, NULL), 0);
    agent_numa_describe(&fx->plan, 1, text, sizeof(text));
    snprintf(want, sizeof(want), "cpus %d", fx->b);
    assert_string_equal(text, want);
    assert_int_equal(plan(fx, "nodes", 2, NULL), -EINVAL);
    assert_non_null(strstr(fx->err, "nodes"));
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_one_node_binds_nothing),
        T(test_node_follows_gpu),
        T(test_blocks_without_gpus),
        T(test_socket_takes_every_node_of_it),
        T(test_exclusive),
        T(test_core_complex),
        T(test_describe_and_bad_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
