/* agent/mps.c's daemon lifecycle against fake NVIDIA programs put first on PATH: nvidia-smi
 * answers the GPU memory (or garbage), nvidia-cuda-mps-control -d starts a stand-in daemon
 * (`sleep`) and writes its pid file, "quit" on its stdin ends it. Checked: the daemon's
 * environment (its directories, only the GPUs in use), the cap from the queried memory, the
 * daemon gone and the run directory removed after stop, and each failure --mps=on turns into
 * an exit code while --mps=auto goes on without MPS. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent.h"
#include "harness.h"
#include "gpuquery.h"
#include "mps.h"
#include "proc.h"
#include "shared.h"

static char tmp[128], bin[256], record[256], old_path[8192];
static char *ids[] = {"1", "3"};

static const char fake_control[] =
    "#!/bin/sh\n"
    "# fake nvidia-cuda-mps-control (test_agent_mps.c)\n"
    "pidfile=\"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\"\n"
    "if [ \"$1\" = -d ]; then\n"
    "  [ -n \"$FAKE_MPS_FAIL\" ] && exit \"$FAKE_MPS_FAIL\"\n"
    "  sleep 60 </dev/null >/dev/null 2>&1 &\n"
    "  echo $! > \"$pidfile\"\n"
    "  echo \"daemon $CUDA_VISIBLE_DEVICES $CUDA_MPS_LOG_DIRECTORY\" >> \"$FAKE_MPS_RECORD\"\n"
    "  exit 0\n"
    "fi\n"
    "read cmd\n"
    "[ \"$cmd\" = quit ] || exit 2\n"
    "[ -f \"$pidfile\" ] && kill \"$(cat \"$pidfile\")\"\n"
    "rm -f \"$pidfile\"\n"
    "echo quit >> \"$FAKE_MPS_RECORD\"\n";

static const char fake_smi[] = "#!/bin/sh\n"
                               "# fake nvidia-smi (test_agent_mps.c): MiB of GPU $5\n"
                               "echo \"$FAKE_SMI_OUT\"\n"
                               "exit ${FAKE_SMI_EXIT:-0}\n";

static void install(const char *name, const char *text)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/%s", bin, name);
    harness_write_file(path, text);
    assert_int_equal(chmod(path, 0700), 0);
}

static int setup(void **state)
{
    char path[sizeof(old_path) + 300];

    harness_mkdtemp(tmp, sizeof(tmp), "mps");
    snprintf(bin, sizeof(bin), "%s/bin", tmp);
    assert_int_equal(mkdir(bin, 0700), 0);
    install("nvidia-cuda-mps-control", fake_control);
    install("nvidia-smi", fake_smi);
    snprintf(record, sizeof(record), "%s/record", tmp);
    snprintf(old_path, sizeof(old_path), "%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    snprintf(path, sizeof(path), "%s:%s", bin, old_path);
    setenv("PATH", path, 1);
    setenv("FAKE_MPS_RECORD", record, 1);
    setenv("FAKE_SMI_OUT", "81559", 1);
    unsetenv("FAKE_MPS_FAIL");
    unsetenv("FAKE_SMI_EXIT");
    setenv("TMPDIR", tmp, 1);
    return 0;
}

static int teardown(void **state)
{
    setenv("PATH", old_path, 1);
    unsetenv("TMPDIR");
    harness_rmtree(tmp);
    return 0;
}

static struct agent_shared_options opts(enum agent_mps_mode mode)
{
    static char *argv[] = {"train", NULL};
    return (struct agent_shared_options){.run_id = "r1",
                                         .argv = argv,
                                         .gpu_ids = ids,
                                         .ngpus = 2,
                                         .per_gpu = 2,
                                         .mem_fraction = 0.5,
                                         .mps = mode};
}

static void test_find_and_query(void **state)
{
    char path[PATH_MAX];
    uint64_t bytes = 0;

    assert_int_equal(mc_proc_find(AGENT_MPS_CONTROL, 1, path, sizeof(path)), 0);
    assert_non_null(strstr(path, "/bin/nvidia-cuda-mps-control"));
    assert_int_equal(strncmp(path, bin, strlen(bin)), 0);
    assert_int_equal(mc_gpu_mem_query("1", 1, 10000, &bytes, NULL, 0), 0);
    assert_int_equal(bytes, 81559ULL << 20);
    setenv("FAKE_SMI_OUT", "[N/A]", 1);
    assert_int_equal(mc_gpu_mem_query("1", 1, 10000, &bytes, NULL, 0), -EINVAL);
    setenv("FAKE_SMI_OUT", "12MiB", 1);
    assert_int_equal(mc_gpu_mem_query("1", 1, 10000, &bytes, NULL, 0), -EINVAL);
    setenv("FAKE_SMI_OUT", "1000", 1);
    setenv("FAKE_SMI_EXIT", "9", 1);
    assert_int_equal(mc_gpu_mem_query("1", 1, 10000, &bytes, NULL, 0), -EIO);
    setenv("PATH", "/nonexistent", 1);
    assert_int_equal(mc_proc_find(AGENT_MPS_CONTROL, 1, path, sizeof(path)), -ENOENT);
    assert_int_equal(mc_gpu_mem_query("1", 1, 10000, &bytes, NULL, 0), -ENOENT);
}

/* --mps=on with working programs: started with the GPUs in use, capped, stopped, cleaned. */
static void test_start_stop(void **state)
{
    struct agent_shared_options o = opts(AGENT_MPS_ON);
    struct agent_mps m;
    struct agent_env env;
    char text[4096], pidfile[PATH_MAX + 64], buf[32], dir[PATH_MAX];
    struct stat st;

    assert_int_equal(agent_mps_start(&m, &o), 0);
    assert_int_equal(m.on, 1);
    assert_int_equal(m.limit_mib, 81559 / 4); /* 0.5 of the GPU, 2 workers on it */
    snprintf(dir, sizeof(dir), "%s", m.dir);
    assert_int_equal(strncmp(m.dir, tmp, strlen(tmp)), 0); /* under $TMPDIR */
    snprintf(pidfile, sizeof(pidfile), "%s/nvidia-cuda-mps-control.pid", m.pipe_dir);
    assert_true(harness_read_file(pidfile, buf, sizeof(buf)) > 0);
    pid_t daemon = (pid_t)atoi(buf);
    assert_true(daemon > 1);
    assert_int_equal(kill(daemon, 0), 0);
    assert_true(harness_read_file(record, text, sizeof(text)) > 0);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof(want), "daemon 1,3 %s\n", m.log_dir);
    assert_string_equal(text, want);

    agent_env_init(&env);
    assert_int_equal(agent_mps_worker_env(&m, &o, 3, &env), 0);
    assert_string_equal(agent_env_get(&env, "CUDA_VISIBLE_DEVICES"), "1"); /* GPU 3: 2nd */
    assert_string_equal(agent_env_get(&env, "CUDA_MPS_PIPE_DIRECTORY"), m.pipe_dir);
    agent_env_free(&env);

    agent_mps_stop(&m);
    assert_int_equal(m.on, 0);
    assert_true(harness_read_file(record, text, sizeof(text)) > 0);
    assert_non_null(strstr(text, "\nquit\n"));
    assert_int_equal(stat(dir, &st), -1); /* the run directory is gone */
    /* the daemon was told and is gone (or a zombie of whoever adopted it) */
    char stat_path[64], stat_text[256];
    snprintf(stat_path, sizeof(stat_path), "/proc/%d/stat", (int)daemon);
    if (harness_read_file(stat_path, stat_text, sizeof(stat_text)) > 0)
        assert_non_null(strstr(stat_text, ") Z"));
    agent_mps_stop(&m); /* twice: nothing */
}

/* --gpu-mem given: no nvidia-smi needed */
static void test_gpu_mem_given(void **state)
{
    struct agent_shared_options o = opts(AGENT_MPS_ON);
    struct agent_mps m;

    o.gpu_mem_bytes = 8ULL << 30;
    setenv("FAKE_SMI_EXIT", "1", 1); /* would fail if asked */
    assert_int_equal(agent_mps_start(&m, &o), 0);
    assert_int_equal(m.limit_mib, 2048);
    agent_mps_stop(&m);
}

/* Each failure: --mps=on returns muster's exit code, --mps=auto goes on without MPS; nothing
 * is left on disk either way. */
static void test_failures(void **state)
{
    struct agent_shared_options on = opts(AGENT_MPS_ON), au = opts(AGENT_MPS_AUTO);
    struct agent_mps m;

    setenv("FAKE_SMI_OUT", "[N/A]", 1); /* the memory cannot be learned */
    assert_int_equal(agent_mps_start(&m, &on), AGENT_EXIT_USAGE);
    assert_int_equal(agent_mps_start(&m, &au), 0);
    assert_int_equal(m.on, 0);
    setenv("FAKE_SMI_OUT", "1", 1); /* 1 MiB * 0.5 / 2: under 1 MiB each */
    assert_int_equal(agent_mps_start(&m, &on), AGENT_EXIT_USAGE);
    setenv("FAKE_SMI_OUT", "81559", 1);
    setenv("FAKE_MPS_FAIL", "4", 1); /* -d fails */
    assert_int_equal(agent_mps_start(&m, &on), AGENT_EXIT_INTERNAL);
    assert_int_equal(m.on, 0);
    assert_string_equal(m.dir, "");
    assert_int_equal(agent_mps_start(&m, &au), 0);
    assert_int_equal(m.on, 0);
    setenv("PATH", "/nonexistent", 1); /* no control program */
    assert_int_equal(agent_mps_start(&m, &on), AGENT_EXIT_USAGE);
    assert_int_equal(agent_mps_start(&m, &au), 0);
    agent_mps_stop(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_find_and_query, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gpu_mem_given, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
