/* launcher/slurm.c: Slurm hostlist expansion and defaults from SLURM_* variables. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "slurm.h"

/* Joins hosts with spaces, for comparing against a table. */
static void join(char **hosts, size_t n, char *out, size_t len)
{
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%s", i ? " " : "", hosts[i]);
    }
}

static void test_hostlist_table(void **state)
{
    static const struct {
        const char *list;
        const char *hosts;
    } t[] = {
        {"node1", "node1"},
        {"a,b,c", "a b c"},
        {"node[01-04,07],gpu-a[1-2]", "node01 node02 node03 node04 node07 gpu-a1 gpu-a2"},
        {"n[08-11]", "n08 n09 n10 n11"},
        {"n[8-11]", "n8 n9 n10 n11"},
        {"n[098-101]", "n098 n099 n100 n101"},
        {"n[1-3]", "n1 n2 n3"},
        {"n[5]", "n5"},
        {"n[5-5]", "n5"},
        {"n[3,1,2]", "n3 n1 n2"}, /* order as written */
        {"rack1-n[1-2]-ib", "rack1-n1-ib rack1-n2-ib"},
        {"r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2"},
        {"r[1-2]-n[01-02]-p[7]", "r1-n01-p7 r1-n02-p7 r2-n01-p7 r2-n02-p7"},
        {"[1-2]", "1 2"},
        {"a[1-2],b,c[3]", "a1 a2 b c3"},
        {"a,a", "a a"}, /* duplicates kept */
        {"gpu-a100-[000-002].cluster", "gpu-a100-000.cluster gpu-a100-001.cluster "
                                       "gpu-a100-002.cluster"},
        {"x[0]", "x0"},
        {"x[00]", "x00"},
    };
    char got[1024];
    (void)state;

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char **hosts = NULL;
        size_t n = 0;
        int rc = launcher_hostlist_expand(t[i].list, &hosts, &n);
        if (rc != 0)
            print_message("\"%s\": rc %d\n", t[i].list, rc);
        assert_int_equal(rc, 0);
        join(hosts, n, got, sizeof(got));
        if (strcmp(got, t[i].hosts) != 0)
            print_message("\"%s\"\n", t[i].list);
        assert_string_equal(got, t[i].hosts);
        launcher_hostlist_free(hosts, n);
    }
}

static void test_hostlist_errors(void **state)
{
    static const struct {
        const char *list;
        int rc;
    } t[] = {
        {"", -EINVAL},
        {",", -EINVAL},
        {"a,", -EINVAL},
        {",a", -EINVAL},
        {"a,,b", -EINVAL},
        {"n[1-2", -EINVAL},
        {"n1-2]", -EINVAL},
        {"n]1[", -EINVAL},
        {"n[[1-2]]", -EINVAL},
        {"n[1-[2]]", -EINVAL},
        {"n[]", -EINVAL},
        {"n[,1]", -EINVAL},
        {"n[1,]", -EINVAL},
        {"n[1,,2]", -EINVAL},
        {"n[-2]", -EINVAL},
        {"n[1-]", -EINVAL},
        {"n[1-2-3]", -EINVAL},
        {"n[4-2]", -EINVAL}, /* reversed */
        {"n[a-b]", -EINVAL},
        {"n[1 -2]", -EINVAL},
        {"a b", -EINVAL},
        {"n[1234567890123456789]", -EINVAL}, /* too many digits */
        {"n[1-65536]", 0},
        {"n[0-65536]", -E2BIG},
        {"n[1-65536],x", -E2BIG},
        {"n[0-999999999]", -E2BIG},
        {"a[1-300]b[1-300]", -E2BIG},
        {"a[1-256]b[1-256]c[1-2]", -E2BIG},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char **hosts = (char **)1;
        size_t n = 99;
        int rc = launcher_hostlist_expand(t[i].list, &hosts, &n);
        if (rc != t[i].rc)
            print_message("\"%s\": rc %d, want %d\n", t[i].list, rc, t[i].rc);
        assert_int_equal(rc, t[i].rc);
        if (rc != 0) {
            assert_null(hosts);
            assert_int_equal(n, 0);
        }
        launcher_hostlist_free(hosts, n);
    }
}

static void test_hostlist_long_name(void **state)
{
    char list[LAUNCHER_HOST_MAX + 16], **hosts = NULL;
    size_t n = 0;
    (void)state;

    memset(list, 'a', LAUNCHER_HOST_MAX);
    list[LAUNCHER_HOST_MAX] = '\0';
    assert_int_equal(launcher_hostlist_expand(list, &hosts, &n), -EINVAL); /* one too long */
    list[LAUNCHER_HOST_MAX - 1] = '\0';
    assert_int_equal(launcher_hostlist_expand(list, &hosts, &n), 0);
    assert_int_equal(strlen(hosts[0]), LAUNCHER_HOST_MAX - 1);
    launcher_hostlist_free(hosts, n);
    /* Only "10" pushes it over the limit, half-way through the expansion. */
    memcpy(list + LAUNCHER_HOST_MAX - 2, "[1-10]", 7);
    assert_int_equal(launcher_hostlist_expand(list, &hosts, &n), -EINVAL);
    assert_null(hosts);
    launcher_hostlist_free(NULL, 0);
}

static void test_slurm_empty(void **state)
{
    const char *const env[] = {"PATH=/bin", "HOME=/root", NULL};
    struct launcher_slurm s;
    (void)state;

    memset(&s, 0x5a, sizeof(s));
    assert_int_equal(launcher_slurm_defaults(env, &s), 0);
    assert_int_equal(s.nnodes, -1);
    assert_string_equal(s.job_id, "");
    assert_string_equal(s.rdzv_host, "");
    assert_string_equal(s.rdzv_endpoint, "");
    assert_null(s.nodelist_var);
    assert_int_equal(s.gpus, -1);
    assert_null(s.gpus_var);
    assert_int_equal(s.node_rank, -1);
    assert_int_equal(s.ntasks_per_node, -1);
    assert_string_equal(s.bad, "");
    assert_int_equal(launcher_slurm_defaults(NULL, &s), 0);
}

static void test_slurm_full(void **state)
{
    const char *const env[] = {
        "SLURM_NNODES=4",
        "SLURM_JOB_ID=123456",
        "SLURM_JOB_NODELIST=gpu[07-08,10],login1",
        "SLURM_GPUS_ON_NODE=8",
        "SLURM_NODEID=2",
        "SLURM_NTASKS_PER_NODE=1",
        "SLURM_NNODESX=9", /* a longer key with the same prefix is another variable */
        NULL,
    };
    struct launcher_slurm s;
    (void)state;

    assert_int_equal(launcher_slurm_defaults(env, &s), 0);
    assert_int_equal(s.nnodes, 4);
    assert_string_equal(s.job_id, "123456");
    assert_string_equal(s.rdzv_host, "gpu07");
    assert_string_equal(s.rdzv_endpoint, "gpu07:29400");
    assert_string_equal(s.nodelist_var, "SLURM_JOB_NODELIST");
    assert_int_equal(s.gpus, 8);
    assert_string_equal(s.gpus_var, "SLURM_GPUS_ON_NODE");
    assert_int_equal(s.node_rank, 2);
    assert_int_equal(s.ntasks_per_node, 1);
}

static void test_slurm_precedence(void **state)
{
    struct launcher_slurm s;
    (void)state;

    /* The step's node list and node count before the job's; the old SLURM_JOBID spelling. */
    const char *const step[] = {"SLURM_JOB_NODELIST=a[1-8]",
                                "SLURM_STEP_NODELIST=a[5-6]",
                                "SLURM_JOB_NUM_NODES=8",
                                "SLURM_NNODES=2",
                                "SLURM_JOBID=77",
                                NULL};
    assert_int_equal(launcher_slurm_defaults(step, &s), 0);
    assert_string_equal(s.rdzv_endpoint, "a5:29400");
    assert_string_equal(s.nodelist_var, "SLURM_STEP_NODELIST");
    assert_int_equal(s.nnodes, 2);
    assert_string_equal(s.job_id, "77");

    const char *const old[] = {"SLURM_NODELIST=z9", "SLURM_JOB_NUM_NODES=3", NULL};
    assert_int_equal(launcher_slurm_defaults(old, &s), 0);
    assert_string_equal(s.rdzv_endpoint, "z9:29400");
    assert_int_equal(s.nnodes, 3);

    /* The first variable wins over a later duplicate, like getenv. */
    const char *const dup[] = {"SLURM_NODEID=1", "SLURM_NODEID=5", NULL};
    assert_int_equal(launcher_slurm_defaults(dup, &s), 0);
    assert_int_equal(s.node_rank, 1);
}

static void test_slurm_gpus(void **state)
{
    static const struct {
        const char *env[5];
        int gpus;
        const char *var;
    } t[] = {
        {{"SLURM_GPUS_ON_NODE=4", "SLURM_GPUS_PER_TASK=2", "SLURM_STEP_GPUS=0,1,2",
          "SLURM_JOB_GPUS=0,1,2,3,4,5,6,7", NULL},
         2,
         "SLURM_GPUS_PER_TASK"},
        {{"SLURM_GPUS_ON_NODE=4", "SLURM_STEP_GPUS=0,1,2", "SLURM_JOB_GPUS=0-7", NULL},
         3,
         "SLURM_STEP_GPUS"},
        {{"SLURM_GPUS_ON_NODE=4", "SLURM_JOB_GPUS=0-7", NULL}, 4, "SLURM_GPUS_ON_NODE"},
        {{"SLURM_JOB_GPUS=0-3,6", NULL}, 5, "SLURM_JOB_GPUS"},
        {{"SLURM_JOB_GPUS=5", NULL}, 1, "SLURM_JOB_GPUS"},
        {{"SLURM_GPUS_PER_TASK=a100:2", NULL}, 2, "SLURM_GPUS_PER_TASK"},
        {{"SLURM_GPUS_PER_TASK=gpu:a100:3", NULL}, 3, "SLURM_GPUS_PER_TASK"},
        {{"SLURM_GPUS_PER_TASK=a100:1,v100:2", NULL}, 3, "SLURM_GPUS_PER_TASK"},
        {{"SLURM_GPUS_ON_NODE=0", NULL}, 0, "SLURM_GPUS_ON_NODE"},
        {{"SLURM_STEP_GPUS=", "SLURM_GPUS_ON_NODE=2", NULL}, 2, "SLURM_GPUS_ON_NODE"}, /* empty */
        {{"CUDA_VISIBLE_DEVICES=0,1", NULL}, -1, NULL},
    };
    struct launcher_slurm s;
    (void)state;

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        assert_int_equal(launcher_slurm_defaults(t[i].env, &s), 0);
        if (s.gpus != t[i].gpus)
            print_message("case %zu: gpus %d\n", i, s.gpus);
        assert_int_equal(s.gpus, t[i].gpus);
        if (t[i].var == NULL)
            assert_null(s.gpus_var);
        else
            assert_string_equal(s.gpus_var, t[i].var);
    }
}

static void test_slurm_malformed(void **state)
{
    static const struct {
        const char *env[4];
        const char *bad;
    } t[] = {
        {{"SLURM_NNODES=abc", "SLURM_JOB_NUM_NODES=2", NULL}, "SLURM_NNODES=abc"},
        {{"SLURM_NNODES=0", NULL}, "SLURM_NNODES=0"},
        {{"SLURM_NODEID=-1", NULL}, "SLURM_NODEID=-1"},
        {{"SLURM_NTASKS_PER_NODE=2(x3)", NULL}, "SLURM_NTASKS_PER_NODE=2(x3)"},
        {{"SLURM_JOB_NODELIST=n[1-", NULL}, "SLURM_JOB_NODELIST=n[1-"},
        {{"SLURM_GPUS_PER_TASK=a100:", "SLURM_GPUS_ON_NODE=2", NULL}, "SLURM_GPUS_PER_TASK=a100:"},
        {{"SLURM_STEP_GPUS=0,,1", NULL}, "SLURM_STEP_GPUS=0,,1"},
        {{"SLURM_JOB_GPUS=3-1", NULL}, "SLURM_JOB_GPUS=3-1"},
        {{"SLURM_JOB_ID=0123456789012345678901234567890123456789012345678901234567890123456789",
          NULL},
         "SLURM_JOB_ID=0123456789012345678901234567890123456789012345678901234567890123456789"},
        /* the job id becomes the run id (common/ids.h); shown escaped */
        {{"SLURM_JOB_ID=../x", NULL}, "SLURM_JOB_ID=../x"},
        {{"SLURM_JOBID=1\n2", NULL}, "SLURM_JOBID=1\\x0a2"},
    };
    struct launcher_slurm s;
    (void)state;

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        assert_int_equal(launcher_slurm_defaults(t[i].env, &s), -EINVAL);
        assert_string_equal(s.bad, t[i].bad);
        /* The malformed field is absent; lower-precedence variables are not used for it. */
        assert_int_equal(s.nnodes, -1);
        assert_int_equal(s.gpus, -1);
        assert_int_equal(s.node_rank, -1);
        assert_string_equal(s.rdzv_host, "");
        assert_string_equal(s.job_id, "");
    }

    /* What is well-formed is still filled in. */
    const char *const mixed[] = {"SLURM_NNODES=x", "SLURM_JOB_ID=5", "SLURM_NODEID=3", NULL};
    assert_int_equal(launcher_slurm_defaults(mixed, &s), -EINVAL);
    assert_string_equal(s.job_id, "5");
    assert_int_equal(s.node_rank, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostlist_table),     cmocka_unit_test(test_hostlist_errors),
        cmocka_unit_test(test_hostlist_long_name), cmocka_unit_test(test_slurm_empty),
        cmocka_unit_test(test_slurm_full),         cmocka_unit_test(test_slurm_precedence),
        cmocka_unit_test(test_slurm_gpus),         cmocka_unit_test(test_slurm_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
