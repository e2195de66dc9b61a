/* agent/preflight.c: the node process's results file becomes the PREFLIGHT message
 * the agent sends: figures scaled to the wire's units, levels, over-long strings cut to the
 * protocol's sizes (so the message always encodes), GPUs past RDZV_PF_GPUS_MAX left out, and
 * no message at all from a missing, empty or malformed file. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent_priv.h"
#include "message.h"

static char path[64];
static struct rdzv_preflight pf;
static struct rdzv_msg msg;
static uint8_t buf[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD];

static void write_text(const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    int fd;

    (void)state;
    snprintf(path, sizeof(path), "/tmp/muster-test-pfres-XXXXXX");
    fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static void test_results_to_message(void **state)
{
    size_t len;

    (void)state;
    write_text("{\"ok\":true,\"joined\":true,\"p2p\":{\"pairs\":2,\"min_gbps\":39.0,"
               "\"median_gbps\":214.5,\"level\":\"warning\",\"note\":\"node a: P2P GPU 0 -> "
               "GPU 1 slow\"},\"gpus\":[{\"index\":0,\"uuid\":\"GPU-0\",\"model\":\"NVIDIA "
               "H200\",\"gemm_tflops\":790.1,\"hbm_gbps\":4270.3,\"level\":\"ok\",\"note\":\"\"},"
               "{\"index\":1,\"uuid\":\"GPU-1\",\"model\":\"NVIDIA H200\",\"gemm_tflops\":0,"
               "\"hbm_gbps\":0,\"level\":\"failure\",\"note\":\"muster-preflight exited 1\"}]}");
    assert_int_equal(agent__preflight_results(path, 3, &pf), 0);
    assert_int_equal(pf.round, 3);
    assert_int_equal(pf.ok, 1);
    assert_int_equal(pf.joined, 1);
    assert_int_equal(pf.p2p_pairs, 2);
    assert_int_equal(pf.p2p_min_mbps, 39000);
    assert_int_equal(pf.p2p_median_mbps, 214500);
    assert_int_equal(pf.p2p_level, RDZV_PF_WARNING);
    assert_int_equal(pf.count, 2);
    assert_string_equal(pf.gpus[0].uuid, "GPU-0");
    assert_int_equal(pf.gpus[0].gemm_gflops, 790100);
    assert_int_equal(pf.gpus[0].hbm_mbps, 4270300);
    assert_int_equal(pf.gpus[0].level, RDZV_PF_OK);
    assert_int_equal(pf.gpus[1].index, 1);
    assert_int_equal(pf.gpus[1].gemm_gflops, 0);
    assert_int_equal(pf.gpus[1].level, RDZV_PF_FAILURE);
    assert_string_equal(pf.gpus[1].note, "muster-preflight exited 1");
    rdzv_msg_init(&msg, RDZV_MSG_PREFLIGHT);
    msg.u.preflight = pf;
    assert_int_equal(rdzv_msg_encode(&msg, buf, sizeof(buf), &len), 0);
}

/* 70 GPUs with 400-byte notes and a 200-byte model: 64 kept, strings cut, still encodes. */
static void test_results_cut_to_the_protocol(void **state)
{
    char *text = malloc(200000), note[401], model[201];
    size_t n = 0, len;

    (void)state;
    assert_non_null(text);
    memset(note, 'n', 400);
    note[400] = '\0';
    memset(model, 'm', 200);
    model[200] = '\0';
    n += (size_t)sprintf(text + n, "{\"ok\":false,\"gpus\":[");
    for (int i = 0; i < 70; i++)
        n += (size_t)sprintf(text + n,
                             "%s{\"index\":%d,\"uuid\":\"GPU-%d\",\"model\":\"%s\",\"gemm_tflops\":"
                             "1e12,\"hbm_gbps\":-5,\"level\":\"bogus\",\"note\":\"%s\"}",
                             i ? "," : "", i, i, model, note);
    sprintf(text + n, "]}");
    write_text(text);
    free(text);
    assert_int_equal(agent__preflight_results(path, 0, &pf), 0);
    assert_int_equal(pf.ok, 0);
    assert_int_equal(pf.count, RDZV_PF_GPUS_MAX);
    assert_int_equal(strlen(pf.gpus[5].note), RDZV_PF_NOTE_MAX);
    assert_int_equal(strlen(pf.gpus[5].model), RDZV_PF_MODEL_MAX);
    assert_int_equal(pf.gpus[5].gemm_gflops, 0); /* out of range: not a figure */
    assert_int_equal(pf.gpus[5].hbm_mbps, 0);
    assert_int_equal(pf.gpus[5].level, RDZV_PF_OK);
    assert_int_equal(pf.p2p_pairs, 0);
    rdzv_msg_init(&msg, RDZV_MSG_PREFLIGHT);
    msg.u.preflight = pf;
    assert_int_equal(rdzv_msg_encode(&msg, buf, sizeof(buf), &len), 0);
}

/* A host name or text with a terminal escape or UTF-8 (from another node, through the KV
 * store) would make the server refuse the message and close the connection: '?' instead. */
static void test_results_printable(void **state)
{
    size_t len;

    (void)state;
    write_text(
        "{\"ok\":true,\"p2p\":{\"note\":\"node \\u001b[2Jx: caf\\u00e9\"},\"gpus\":[{\"index\":0,"
        "\"uuid\":\"GPU-\\t0\",\"model\":\"H200\\u007f\",\"note\":\"a\\nb\"}]}");
    assert_int_equal(agent__preflight_results(path, 0, &pf), 0);
    assert_string_equal(pf.p2p_note, "node ?[2Jx: caf??");
    assert_string_equal(pf.gpus[0].uuid, "GPU-?0");
    assert_string_equal(pf.gpus[0].model, "H200?");
    assert_string_equal(pf.gpus[0].note, "a?b");
    rdzv_msg_init(&msg, RDZV_MSG_PREFLIGHT);
    msg.u.preflight = pf;
    assert_int_equal(rdzv_msg_encode(&msg, buf, sizeof(buf), &len), 0);
}

static void test_no_results(void **state)
{
    (void)state;
    write_text(""); /* the node process died before writing */
    assert_int_equal(agent__preflight_results(path, 0, &pf), -ENOENT);
    write_text("[1, 2]");
    assert_int_equal(agent__preflight_results(path, 0, &pf), -ENOENT);
    assert_int_equal(agent__preflight_results("", 0, &pf), -ENOENT);
    assert_int_equal(agent__preflight_results("/nonexistent/muster", 0, &pf), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_results_to_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_results_cut_to_the_protocol, setup, teardown),
        cmocka_unit_test_setup_teardown(test_results_printable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_results, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
