/* Unit tests for launcher/config.c (`muster run` argument parsing) and launcher/gpus.c. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
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
#include "config.h"
#include "gpus.h"
#include "options.h"

#define MAX_ARGS 32

/* Every variable the parser reads; unset before and after each test. */
static const char *const env_names[] = {"PET_NNODES",
                                        "PET_NPROC_PER_NODE",
                                        "PET_RDZV_BACKEND",
                                        "PET_RDZV_ENDPOINT",
                                        "PET_RDZV_ID",
                                        "PET_RDZV_CONF",
                                        "PET_STANDALONE",
                                        "PET_MAX_RESTARTS",
                                        "PET_MONITOR_INTERVAL",
                                        "PET_START_METHOD",
                                        "PET_EVENT_LOG_HANDLER",
                                        "PET_ROLE",
                                        "PET_MODULE",
                                        "PET_NO_PYTHON",
                                        "PET_RUN_PATH",
                                        "PET_LOG_DIR",
                                        "PET_REDIRECTS",
                                        "PET_TEE",
                                        "PET_LOCAL_RANKS_FILTER",
                                        "PET_NODE_RANK",
                                        "PET_MASTER_ADDR",
                                        "PET_MASTER_PORT",
                                        "PET_LOCAL_ADDR",
                                        "PET_SHUTDOWN_TIMEOUT",
                                        "PET_SIGNALS_TO_HANDLE",
                                        "PET_VIRTUAL_LOCAL_RANK",
                                        "PYTHON_EXEC",
                                        "MUSTER_TOKEN",
                                        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                                        NULL};

/* Shared by the whole program: a temp dir with a script, a directory and a fake GPU dir. */
static char tmpdir[64];
static char script[128]; /* tmpdir/train.py, exists, not executable */
static char subdir[128]; /* tmpdir/adir, a directory */
static char gpudir[128]; /* tmpdir/gpus with 4 entries */
static char *saved_cuda; /* CUDA_VISIBLE_DEVICES as the test started */

struct fx {
    struct launcher_config cfg;
    char err[LAUNCHER_ERR_MAX];
    char *argv[MAX_ARGS + 1];
    int argc;
};

static void clear_env(void)
{
    for (int i = 0; env_names[i]; i++)
        unsetenv(env_names[i]);
    if (saved_cuda != NULL)
        setenv("CUDA_VISIBLE_DEVICES", saved_cuda, 1);
    else
        unsetenv("CUDA_VISIBLE_DEVICES");
}

static int group_setup(void **state)
{
    (void)state;
    const char *c = getenv("CUDA_VISIBLE_DEVICES");
    saved_cuda = c ? strdup(c) : NULL;
    harness_mkdtemp(tmpdir, sizeof(tmpdir), "cfg");
    snprintf(script, sizeof(script), "%s/train.py", tmpdir);
    snprintf(subdir, sizeof(subdir), "%s/adir", tmpdir);
    snprintf(gpudir, sizeof(gpudir), "%s/gpus", tmpdir);
    FILE *f = fopen(script, "w");
    if (f == NULL)
        return -1;
    fputs("print('hi')\n", f);
    fclose(f);
    chmod(script, 0644);
    if (mkdir(subdir, 0755) != 0 || mkdir(gpudir, 0755) != 0)
        return -1;
    for (int i = 0; i < 4; i++) {
        char p[192];
        snprintf(p, sizeof(p), "%s/0000:%02x:00.0", gpudir, i + 1);
        if (mkdir(p, 0755) != 0)
            return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    char p[192];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s/0000:%02x:00.0", gpudir, i + 1);
        rmdir(p);
    }
    rmdir(gpudir);
    rmdir(subdir);
    unlink(script);
    rmdir(tmpdir);
    clear_env();
    free(saved_cuda);
    saved_cuda = NULL;
    return 0;
}

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (fx == NULL)
        return -1;
    clear_env();
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    launcher_config_free(&fx->cfg);
    for (int i = 0; i < fx->argc; i++)
        free(fx->argv[i]);
    free(fx);
    clear_env();
    return 0;
}

/* Parses the NULL-terminated argument list; "@S" stands for the temp script path. The argv
 * stays alive in the fixture because cfg->script_argv borrows it. */
static int parse(struct fx *fx, ...)
{
    va_list ap;
    const char *a;

    launcher_config_free(&fx->cfg);
    for (int i = 0; i < fx->argc; i++)
        free(fx->argv[i]);
    fx->argc = 0;
    va_start(ap, fx);
    while ((a = va_arg(ap, const char *)) != NULL && fx->argc < MAX_ARGS)
        fx->argv[fx->argc++] = strdup(strcmp(a, "@S") == 0 ? script : a);
    va_end(ap);
    fx->argv[fx->argc] = NULL;
    memset(fx->err, 'x', sizeof(fx->err) - 1);
    fx->err[sizeof(fx->err) - 1] = '\0';
    return launcher_config_parse(fx->argc, fx->argv, &fx->cfg, fx->err, sizeof(fx->err));
}

/* An error is -EINVAL with a non-empty single-line reason. */
static void assert_einval(struct fx *fx, int rc)
{
    if (rc != -EINVAL)
        print_error("expected -EINVAL, got %d (err '%s')\n", rc, fx->err);
    assert_int_equal(rc, -EINVAL);
    assert_true(strlen(fx->err) > 0);
    assert_null(strchr(fx->err, '\n'));
}

/* Each OPTION, VALUE pair of the NULL-terminated list, given alone before the script, is refused
 * (assert_einval). */
static void refuse(struct fx *fx, ...)
{
    va_list ap;
    const char *opt;

    va_start(ap, fx);
    while ((opt = va_arg(ap, const char *)) != NULL) {
        const char *value = va_arg(ap, const char *);
        int rc = parse(fx, opt, value, "@S", NULL);
        if (rc != -EINVAL)
            print_error("%s '%s' was not refused\n", opt, value);
        assert_einval(fx, rc);
    }
    va_end(ap);
}

static void assert_ok(struct fx *fx, int rc)
{
    if (rc != 0)
        print_error("parse failed: %d '%s'\n", rc, fx->err);
    assert_int_equal(rc, 0);
    assert_string_equal(fx->err, "");
}

static void assert_uuid4(const char *s)
{
    assert_non_null(s);
    assert_int_equal(strlen(s), 36);
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            assert_int_equal(s[i], '-');
        else
            assert_non_null(strchr("0123456789abcdef", s[i]));
    }
    assert_int_equal(s[14], '4');
    assert_non_null(strchr("89ab", s[19]));
}

/* ---- the option table (options.def) ------------------------------------------------------- */

/* Every row is complete and consistent: a name and help, PET_<NAME> spelled from the name, a
 * value name exactly for options with a value, an error phrase for the generic parsers, unique
 * names, and a default that parses when given as the value. */
static void test_option_table(void **state)
{
    struct fx *fx = *state;

    for (int i = 0; i < O_COUNT_; i++) {
        const struct launcher_option *o = &launcher__options[i];
        char pet[64] = "PET_";

        assert_non_null(o->name);
        assert_true(o->help != NULL && o->help[0] != '\0');
        for (const char *l = o->help; *l != '\0';
             l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0))
            assert_true(strcspn(l, "\n") <= 70); /* --help's column 30 to 100 */
        assert_int_equal(o->kind == OPT_FLAG, o->arg == NULL);
        if (o->parse != OPT_P_CUSTOM && o->parse != OPT_P_FLAG && o->parse != OPT_P_FLAG_NONZERO &&
            o->parse != OPT_P_STRING)
            assert_non_null(o->must);
        for (size_t k = 0; o->name[k]; k++)
            pet[4 + k] = o->name[k] == '-' ? '_' : (char)(o->name[k] - 'a' + 'A');
        if (o->pet != NULL)
            assert_string_equal(o->pet, pet);
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(o->name, launcher__options[j].name);
            assert_true(o->short_name == 0 || o->short_name != launcher__options[j].short_name);
        }
        if (o->def != NULL && o->kind == OPT_VALUE) {
            char name[80];
            snprintf(name, sizeof(name), "--%s", o->name);
            assert_ok(fx, parse(fx, name, o->def, "@S", NULL));
        }
    }
}

/* ---- defaults, spellings ------------------------------------------------------------------ */

static void test_defaults(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "@S", NULL));
    struct launcher_config *c = &fx->cfg;
    assert_int_equal(c->min_nodes, 1);
    assert_int_equal(c->max_nodes, 1);
    assert_int_equal(c->nproc_per_node, 1);
    assert_string_equal(c->nproc_spec, "1");
    assert_int_equal(c->backend, LAUNCHER_BACKEND_MUSTER);
    assert_null(c->rdzv_endpoint);
    assert_null(c->rdzv_host);
    assert_uuid4(c->rdzv_id);
    assert_int_equal(c->standalone, 0);
    assert_int_equal(c->join_timeout_ms, 600000);
    assert_int_equal(c->last_call_timeout_ms, 30000);
    assert_int_equal(c->close_timeout_ms, 30000);
    assert_int_equal(c->heartbeat_timeout_ms, 3000);
    assert_int_equal(c->keep_alive_interval_ms, 1000);
    assert_int_equal(c->restart.max_restarts, 0);
    assert_true(c->monitor_interval > 0.0999 && c->monitor_interval < 0.1001);
    assert_int_equal(c->restart.shutdown_timeout_ms, 30000);
    assert_string_equal(c->role, "default");
    assert_int_equal(c->node_rank, 0);
    assert_string_equal(c->master_addr, "127.0.0.1");
    assert_int_equal(c->master_port, 0);
    assert_null(c->local_addr);
    assert_int_equal(c->module, 0);
    assert_int_equal(c->no_python, 0);
    assert_int_equal(c->run_path, 0);
    /* resolved on PATH once: an absolute path ending in /python3 */
    assert_true(c->python_exec[0] == '/');
    assert_string_equal(strrchr(c->python_exec, '/'), "/python3");
    assert_string_equal(c->script, script);
    assert_int_equal(c->script_argc, 0);
    assert_null(c->log_dir);
    assert_int_equal(c->redirects.all, 0);
    assert_int_equal(c->redirects.map_len, 0);
    assert_int_equal(c->tee.all, 0);
    assert_int_equal(c->tee.map_len, 0);
    assert_null(c->local_ranks_filter);
    assert_int_equal(c->dry_run, 0);
    assert_int_equal(c->help, 0);
    assert_null(c->token);
    /* torchrun exports its default list too; muster stops on each of them */
    assert_string_equal(c->signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
    assert_int_equal(c->nhandle_signals, 4);
    assert_int_equal(c->rdzv_is_host, -1);
    assert_int_equal(c->rdzv_read_timeout_ms, 60000);
    assert_string_equal(c->numa_binding, "");
    assert_int_equal(c->virtual_local_rank, 0);
    assert_string_equal(c->notes, "");
}

static void test_dash_and_underscore_spellings(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--nproc-per-node", "4", "--max-restarts", "3", "--rdzv-id", "j1",
                        "--rdzv-endpoint", "h1:1234", "--node-rank", "2", "--log-dir", "/l1", "@S",
                        NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 4);
    assert_int_equal(fx->cfg.restart.max_restarts, 3);
    assert_string_equal(fx->cfg.rdzv_id, "j1");
    assert_string_equal(fx->cfg.rdzv_host, "h1");
    assert_int_equal(fx->cfg.node_rank, 2);
    assert_string_equal(fx->cfg.log_dir, "/l1");

    assert_ok(fx, parse(fx, "--nproc_per_node", "5", "--max_restarts", "6", "--rdzv_id", "j2",
                        "--rdzv_endpoint", "h2:99", "--node_rank", "1", "--log_dir", "/l2", "@S",
                        NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 5);
    assert_string_equal(fx->cfg.nproc_spec, "5");
    assert_int_equal(fx->cfg.restart.max_restarts, 6);
    assert_string_equal(fx->cfg.rdzv_id, "j2");
    assert_string_equal(fx->cfg.rdzv_endpoint, "h2:99");
    assert_string_equal(fx->cfg.rdzv_host, "h2");
    assert_int_equal(fx->cfg.rdzv_port, 99);
    assert_int_equal(fx->cfg.node_rank, 1);
    assert_string_equal(fx->cfg.log_dir, "/l2");
}

static void test_equals_values(void **state)
{
    struct fx *fx = *state;
    setenv("MUSTER_TOKEN", "unit-token", 1); /* multi-node jobs need one */
    assert_ok(fx, parse(fx, "--nnodes=2:3", "--nproc_per_node=2", "--rdzv-endpoint=[::1]:29500",
                        "--role=trainer", "--monitor-interval=0.5", "--shutdown-timeout=2.5",
                        "--master-addr=10.1.2.3", "--master_port=1234", "--local-addr=10.9.9.9",
                        "--signals-to-handle=SIGTERM,SIGINT", "--rdzv-backend=c10d",
                        "--start-method=spawn", "--dry-run", "@S", NULL));
    struct launcher_config *c = &fx->cfg;
    assert_int_equal(c->min_nodes, 2);
    assert_int_equal(c->max_nodes, 3);
    assert_int_equal(c->nproc_per_node, 2);
    assert_string_equal(c->rdzv_host, "::1");
    assert_int_equal(c->rdzv_port, 29500);
    assert_string_equal(c->role, "trainer");
    assert_true(c->monitor_interval > 0.4999 && c->monitor_interval < 0.5001);
    assert_int_equal(c->restart.shutdown_timeout_ms, 2500);
    assert_string_equal(c->master_addr, "10.1.2.3");
    assert_int_equal(c->master_port, 1234);
    assert_string_equal(c->local_addr, "10.9.9.9");
    assert_string_equal(c->signals_to_handle, "SIGTERM,SIGINT");
    assert_int_equal(c->backend, LAUNCHER_BACKEND_C10D);
    assert_int_equal(c->dry_run, 1);
}

static void test_module_short_flag(void **state)
{
    struct fx *fx = *state;
    /* A module is not stat()ed. */
    assert_ok(fx, parse(fx, "-m", "pkg.train", "--lr", "1", NULL));
    assert_int_equal(fx->cfg.module, 1);
    assert_string_equal(fx->cfg.script, "pkg.train");
    assert_int_equal(fx->cfg.script_argc, 2);
    assert_string_equal(fx->cfg.script_argv[0], "--lr");
    assert_string_equal(fx->cfg.script_argv[1], "1");

    assert_ok(fx, parse(fx, "--module", "pkg.other", NULL));
    assert_int_equal(fx->cfg.module, 1);
    assert_string_equal(fx->cfg.script, "pkg.other");

    /* No bundling of short flags. */
    assert_einval(fx, parse(fx, "-mx", "pkg", NULL));
}

static void test_redirects_and_tee(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "-r", "3", "-t", "1", "@S", NULL));
    assert_int_equal(fx->cfg.redirects.all, 3);
    assert_int_equal(fx->cfg.redirects.map_len, 0);
    assert_int_equal(fx->cfg.tee.all, 1);

    assert_ok(fx, parse(fx, "-r2", "-t3", "@S", NULL));
    assert_int_equal(fx->cfg.redirects.all, 2);
    assert_int_equal(fx->cfg.tee.all, 3);

    assert_ok(fx, parse(fx, "--redirects", "0:1,2:3", "--tee=1:2", "@S", NULL));
    const struct launcher_std_spec *r = &fx->cfg.redirects;
    assert_int_equal(r->all, -1);
    assert_int_equal(r->map_len, 2);
    assert_int_equal(r->map_rank[0], 0);
    assert_int_equal(r->map_val[0], 1);
    assert_int_equal(r->map_rank[1], 2);
    assert_int_equal(r->map_val[1], 3);
    assert_int_equal(launcher_std_for_rank(r, 0), 1);
    assert_int_equal(launcher_std_for_rank(r, 1), 0);
    assert_int_equal(launcher_std_for_rank(r, 2), 3);
    assert_int_equal(launcher_std_for_rank(&fx->cfg.tee, 1), 2);
    assert_int_equal(launcher_std_for_rank(&fx->cfg.tee, 0), 0);

    refuse(fx, "-r", "4", "--tee", "x", "--redirects", "0:4", "--redirects", "0:1,,1:2",
           "--redirects", "a:1", "--redirects", "3,0:1", NULL);
    assert_einval(fx, parse(fx, "-r", NULL));
}

static void test_std_for_rank_plain(void **state)
{
    (void)state;
    struct launcher_std_spec all = {.all = 3, .map_len = 0};
    assert_int_equal(launcher_std_for_rank(&all, 0), 3);
    assert_int_equal(launcher_std_for_rank(&all, 17), 3);
    struct launcher_std_spec mixed = {.all = 1, .map_len = 1, .map_rank = {5}, .map_val = {2}};
    assert_int_equal(launcher_std_for_rank(&mixed, 5), 2);
    assert_int_equal(launcher_std_for_rank(&mixed, 4), 1);
    struct launcher_std_spec only_map = {.all = -1, .map_len = 1, .map_rank = {0}, .map_val = {0}};
    assert_int_equal(launcher_std_for_rank(&only_map, 0), 0);
    assert_int_equal(launcher_std_for_rank(&only_map, 1), 0);
}

static void test_local_ranks_filter(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_int_equal(launcher_rank_shown(&fx->cfg, 0), 1);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 7), 1);

    assert_ok(fx, parse(fx, "--local-ranks-filter", "0,2,10", "@S", NULL));
    assert_int_equal(fx->cfg.local_ranks_filter_len, 3);
    assert_int_equal(fx->cfg.local_ranks_filter[0], 0);
    assert_int_equal(fx->cfg.local_ranks_filter[1], 2);
    assert_int_equal(fx->cfg.local_ranks_filter[2], 10);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 0), 1);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 1), 0);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 2), 1);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 3), 0);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 10), 1);

    assert_ok(fx, parse(fx, "--local_ranks_filter=1", "@S", NULL));
    assert_int_equal(fx->cfg.local_ranks_filter_len, 1);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 0), 0);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 1), 1);

    refuse(fx, "--local-ranks-filter", "a", "--local-ranks-filter", "0,,1", "--local-ranks-filter",
           "-1", NULL);
}

static void test_output_flags(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_null(fx->cfg.dup_filters[0]);
    assert_null(fx->cfg.dup_filters[1]);
    assert_int_equal(fx->cfg.no_prefix, 0);
    assert_int_equal(fx->cfg.dedup_ms, 0);

    assert_ok(fx, parse(fx, "--duplicate-stdout-filters", "a,,b,c",
                        "--duplicate_stderr_filters=", "--no-prefix", "--dedup", "@S", NULL));
    assert_string_equal(fx->cfg.dup_filters[0][0], "a,b");
    assert_string_equal(fx->cfg.dup_filters[0][1], "c");
    assert_null(fx->cfg.dup_filters[0][2]);
    assert_null(fx->cfg.dup_filters[1][0]); /* an empty list copies nothing */
    assert_int_equal(fx->cfg.no_prefix, 1);
    assert_int_equal(fx->cfg.dedup_ms, 100);
    assert_ok(fx, parse(fx, "--dedup=250", "@S", NULL));
    assert_int_equal(fx->cfg.dedup_ms, 250);
    assert_ok(fx, parse(fx, "--dedup=0", "@S", NULL));
    assert_int_equal(fx->cfg.dedup_ms, 0);
    assert_einval(fx, parse(fx, "--dedup=soon", "@S", NULL));
    assert_einval(fx, parse(fx, "--dedup=99999", "@S", NULL));

    /* the prefix template comes from the environment; empty counts as unset (torchrun) */
    setenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${role_name}${local_rank}]:", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_string_equal(fx->cfg.prefix_template, "[${role_name}${local_rank}]:");
    setenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_null(fx->cfg.prefix_template);
    unsetenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
}

/* ---- PET_* ----------------------------------------------------------------------------------- */

static void test_pet_env_fallback(void **state)
{
    struct fx *fx = *state;
    setenv("MUSTER_TOKEN", "unit-token", 1); /* multi-node jobs need one */
    setenv("PET_NPROC_PER_NODE", "3", 1);
    setenv("PET_MAX_RESTARTS", "5", 1);
    setenv("PET_RDZV_ENDPOINT", "envhost:4321", 1);
    setenv("PET_NNODES", "1:2", 1);
    setenv("PET_ROLE", "envrole", 1);
    setenv("PET_TEE", "3", 1);
    setenv("PET_RDZV_CONF", "join_timeout=7", 1);
    setenv("PET_LOCAL_RANKS_FILTER", "1", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 3);
    assert_int_equal(fx->cfg.restart.max_restarts, 5);
    assert_string_equal(fx->cfg.rdzv_host, "envhost");
    assert_int_equal(fx->cfg.rdzv_port, 4321);
    assert_int_equal(fx->cfg.min_nodes, 1);
    assert_int_equal(fx->cfg.max_nodes, 2);
    assert_string_equal(fx->cfg.role, "envrole");
    assert_int_equal(fx->cfg.tee.all, 3);
    assert_int_equal(fx->cfg.join_timeout_ms, 7000);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 0), 0);
    assert_int_equal(launcher_rank_shown(&fx->cfg, 1), 1);
}

static void test_command_line_beats_pet(void **state)
{
    struct fx *fx = *state;
    setenv("PET_NPROC_PER_NODE", "3", 1);
    setenv("PET_MAX_RESTARTS", "5", 1);
    setenv("PET_ROLE", "envrole", 1);
    setenv("PET_NNODES", "bogus", 1); /* overridden: never parsed */
    assert_ok(fx, parse(fx, "--nproc_per_node", "2", "--max-restarts=1", "--role", "cli",
                        "--nnodes", "1", "@S", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 2);
    assert_int_equal(fx->cfg.restart.max_restarts, 1);
    assert_string_equal(fx->cfg.role, "cli");
    assert_int_equal(fx->cfg.max_nodes, 1);
}

static void test_pet_flags(void **state)
{
    struct fx *fx = *state;
    setenv("PET_MODULE", "1", 1);
    assert_ok(fx, parse(fx, "pkg.mod", NULL));
    assert_int_equal(fx->cfg.module, 1);
    setenv("PET_MODULE", "0", 1);
    setenv("PET_STANDALONE", "true", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_int_equal(fx->cfg.module, 0);
    assert_int_equal(fx->cfg.standalone, 1);
    setenv("PET_STANDALONE", "yes", 1);
    assert_einval(fx, parse(fx, "@S", NULL));
    assert_non_null(strstr(fx->err, "PET_STANDALONE"));
    setenv("PET_STANDALONE", "", 1); /* empty = unset */
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_int_equal(fx->cfg.standalone, 0);
}

static void test_pet_bad_value_names_variable(void **state)
{
    struct fx *fx = *state;
    setenv("PET_REDIRECTS", "9", 1);
    assert_einval(fx, parse(fx, "@S", NULL));
    assert_non_null(strstr(fx->err, "PET_REDIRECTS"));
    assert_non_null(strstr(fx->err, "'9'"));
}

static void test_python_exec_and_token(void **state)
{
    struct fx *fx = *state;
    setenv("PYTHON_EXEC", "/bin/sh", 1); /* any executable: the interpreter is not run */
    setenv("MUSTER_TOKEN", "s3cret", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_string_equal(fx->cfg.python_exec, "/bin/sh");
    assert_string_equal(fx->cfg.token, "s3cret");
    /* a PYTHON_EXEC that is not there is one line now, not 127 from every worker */
    setenv("PYTHON_EXEC", "/opt/py/bin/python", 1);
    assert_int_not_equal(parse(fx, "@S", NULL), 0);
    assert_non_null(strstr(fx->err, "PYTHON_EXEC '/opt/py/bin/python' is not an executable file"));
    setenv("PYTHON_EXEC", "no-such-python-xyz", 1);
    assert_int_not_equal(parse(fx, "@S", NULL), 0);
    assert_non_null(strstr(fx->err, "PYTHON_EXEC 'no-such-python-xyz' not found on PATH"));
}

static void test_shutdown_timeout_sources(void **state)
{
    struct fx *fx = *state;
    setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_int_equal(fx->cfg.restart.shutdown_timeout_ms, 7000);
    setenv("PET_SHUTDOWN_TIMEOUT", "4", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_int_equal(fx->cfg.restart.shutdown_timeout_ms, 4000);
    assert_ok(fx, parse(fx, "--shutdown-timeout", "0.25", "@S", NULL));
    assert_int_equal(fx->cfg.restart.shutdown_timeout_ms, 250);
    refuse(fx, "--shutdown-timeout", "-1", "--shutdown-timeout", "abc", NULL);
}

/* --replicate-checkpoints needs --checkpoint-dir; the cap defaults to 100 MB/s. */
static void test_replicate_flags(void **state)
{
    struct fx *fx = *state;

    assert_ok(fx, parse(fx, "@S", NULL));
    assert_int_equal(fx->cfg.ckpt.replicate, 0);
    assert_true(fx->cfg.ckpt.replicate_mbps == 100.0); /* options.def's default */
    assert_ok(fx, parse(fx, "--checkpoint-dir", "/tmp", "--replicate-checkpoints", "2",
                        "--replicate_bandwidth", "12.5", "@S", NULL));
    assert_int_equal(fx->cfg.ckpt.replicate, 2);
    assert_true(fx->cfg.ckpt.replicate_mbps == 12.5);
    assert_ok(fx, parse(fx, "--checkpoint-dir", "/tmp", "--replicate-bandwidth", "0", "@S", NULL));
    assert_true(fx->cfg.ckpt.replicate_mbps == 0);
    assert_einval(fx, parse(fx, "--replicate-checkpoints", "1", "@S", NULL));
    assert_non_null(strstr(fx->err, "--checkpoint-dir"));
    assert_einval(
        fx, parse(fx, "--checkpoint-dir", "/tmp", "--replicate-checkpoints", "9", "@S", NULL));
    assert_einval(fx, parse(fx, "--replicate-bandwidth", "-1", "@S", NULL));
    assert_int_equal(fx->cfg.ckpt.replicate_port, 0); /* an ephemeral port unless given */
    assert_ok(fx, parse(fx, "--checkpoint-dir", "/tmp", "--replicate-port", "29555", "@S", NULL));
    assert_int_equal(fx->cfg.ckpt.replicate_port, 29555);
    assert_einval(fx, parse(fx, "--replicate-port", "65536", "@S", NULL));
    assert_non_null(strstr(fx->err, "--replicate-port"));
    assert_einval(fx, parse(fx, "--replicate-port", "http", "@S", NULL));
    assert_einval(fx, parse(fx, "--replicate-bandwidth", "fast", "@S", NULL));
}

/* ---- rendezvous ------------------------------------------------------------------------------ */

static void test_rdzv_conf(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--rdzv-conf",
                        "join_timeout=5,last_call_timeout=0.5,close_timeout=2,"
                        "heartbeat_timeout=10,keep_alive_interval=0.25,read_timeout=60,"
                        "is_host=1,timeout=9",
                        "@S", NULL));
    assert_int_equal(fx->cfg.join_timeout_ms, 5000);
    assert_int_equal(fx->cfg.last_call_timeout_ms, 500);
    assert_int_equal(fx->cfg.close_timeout_ms, 2000);
    assert_int_equal(fx->cfg.heartbeat_timeout_ms, 10000);
    assert_int_equal(fx->cfg.keep_alive_interval_ms, 250);

    assert_ok(fx, parse(fx, "--rdzv_conf=join_timeout=900", "@S", NULL));
    assert_int_equal(fx->cfg.join_timeout_ms, 900000);
    assert_int_equal(fx->cfg.last_call_timeout_ms, 30000);

    /* an unknown key is a warning, as torchrun ignores keys it has no use for */
    assert_ok(fx, parse(fx, "--rdzv-conf", "bogus_key=1", "@S", NULL));
    assert_non_null(strstr(fx->cfg.notes, "warning: --rdzv-conf: unknown key 'bogus_key'"));
    refuse(fx, "--rdzv-conf", "join_timeout", "--rdzv-conf", "join_timeout=abc", "--rdzv-conf",
           "join_timeout=-5", "--rdzv-conf", "join_timeout=inf", NULL);
}

/* torchrun's keys that muster has a use for, and the ones it says it has none for. */
static void test_rdzv_conf_torchrun_keys(void **state)
{
    struct fx *fx = *state;

    /* timeout: static's join deadline; join_timeout wins when both are given */
    assert_ok(fx, parse(fx, "--rdzv-conf", "timeout=100", "@S", NULL));
    assert_int_equal(fx->cfg.join_timeout_ms, 100000);
    assert_ok(fx, parse(fx, "--rdzv-conf", "join_timeout=7,timeout=100", "@S", NULL));
    assert_int_equal(fx->cfg.join_timeout_ms, 7000);
    /* keep_alive_interval x keep_alive_max_attempt is the lost-node deadline ... */
    assert_ok(
        fx, parse(fx, "--rdzv-conf", "keep_alive_interval=2,keep_alive_max_attempt=4", "@S", NULL));
    assert_int_equal(fx->cfg.keep_alive_interval_ms, 2000);
    assert_int_equal(fx->cfg.heartbeat_timeout_ms, 8000);
    assert_ok(fx, parse(fx, "--rdzv-conf", "keep_alive_interval=5", "@S", NULL));
    assert_int_equal(fx->cfg.heartbeat_timeout_ms, 15000); /* torchrun's 3 attempts */
    /* ... unless heartbeat_timeout itself is given */
    assert_ok(fx,
              parse(fx, "--rdzv-conf", "keep_alive_max_attempt=9,heartbeat_timeout=4", "@S", NULL));
    assert_int_equal(fx->cfg.heartbeat_timeout_ms, 4000);
    assert_ok(fx, parse(fx, "--rdzv-conf", "store_type=tcp,use_libuv=1", "@S", NULL));
    assert_string_equal(fx->cfg.notes, "");
    assert_ok(fx, parse(fx, "--rdzv-conf", "read_timeout=90", "@S", NULL));
    assert_int_equal(fx->cfg.rdzv_read_timeout_ms, 90000);
    assert_non_null(strstr(fx->cfg.notes, "read_timeout does nothing"));
    /* is_host: torchrun's boolean spellings */
    static const char *const yes[] = {"is_host=1", "is_host=true", "is_host=True", "is_host=yes"};
    for (int i = 0; i < 4; i++) {
        assert_ok(fx, parse(fx, "--rdzv-conf", yes[i], "@S", NULL));
        assert_int_equal(fx->cfg.rdzv_is_host, 1);
    }
    assert_ok(fx, parse(fx, "--rdzv-conf", "is_host=0", "@S", NULL));
    assert_int_equal(fx->cfg.rdzv_is_host, 0);
    assert_ok(fx, parse(fx, "--rdzv-conf", "is_host=False", "@S", NULL));
    assert_int_equal(fx->cfg.rdzv_is_host, 0);
    /* accepted, and muster says it does nothing with them */
    assert_ok(fx, parse(fx, "--rdzv-conf", "use_libuv=0,store_port=29401", "@S", NULL));
    assert_non_null(strstr(fx->cfg.notes, "use_libuv=0"));
    assert_non_null(strstr(fx->cfg.notes, "store_port does nothing"));
    /* bad values are errors that name the key */
    static const char *const bad[] = {"is_host=maybe",
                                      "use_libuv=2",
                                      "keep_alive_max_attempt=0",
                                      "keep_alive_max_attempt=x",
                                      "read_timeout=soon",
                                      "store_type=etcd",
                                      "store_port=70000",
                                      "timeout=-1"};
    for (int i = 0; i < 8; i++) {
        char key[32];
        assert_einval(fx, parse(fx, "--rdzv-conf", bad[i], "@S", NULL));
        snprintf(key, sizeof(key), "%.*s", (int)strcspn(bad[i], "="), bad[i]);
        assert_non_null(strstr(fx->err, key));
    }
    /* no file store: refused with the reason */
    assert_einval(fx, parse(fx, "--rdzv-conf", "store_type=file", "@S", NULL));
    assert_non_null(strstr(fx->err, "no file store"));
}

/* Quotes as a shell would have removed them: pytorch's own tests pass
 * --rdzv_conf='join_timeout=5,last_call_timeout=1' as one argv entry. */
static void test_rdzv_conf_quotes(void **state)
{
    struct fx *fx = *state;

    assert_ok(fx, parse(fx, "--rdzv_conf='join_timeout=5,last_call_timeout=1'", "@S", NULL));
    assert_int_equal(fx->cfg.join_timeout_ms, 5000);
    assert_int_equal(fx->cfg.last_call_timeout_ms, 1000);
    assert_ok(fx, parse(fx, "--rdzv-conf", "\"timeout=100\"", "@S", NULL));
    assert_int_equal(fx->cfg.join_timeout_ms, 100000);
    assert_ok(fx,
              parse(fx, "--rdzv-conf", "'join_timeout'='6', \"close_timeout\"=\"3\"", "@S", NULL));
    assert_int_equal(fx->cfg.join_timeout_ms, 6000);
    assert_int_equal(fx->cfg.close_timeout_ms, 3000);
    assert_ok(fx, parse(fx, "--rdzv-conf", " join_timeout = 8 ", "@S", NULL));
    assert_int_equal(fx->cfg.join_timeout_ms, 8000);
    assert_ok(fx, parse(fx, "--rdzv-conf", "''", "@S", NULL)); /* empty, as torchrun */
    refuse(fx, "--rdzv-conf", "join_timeout=5,", "--rdzv-conf", "join_timeout=''", "--rdzv-conf",
           "'=5'", NULL);
    assert_einval(fx, parse(fx, "--rdzv-conf", "'join_timeout=5", "@S", NULL)); /* unmatched */
}

/* argparse's unique prefixes, before the script only. */
static void test_option_prefixes(void **state)
{
    struct fx *fx = *state;

    assert_ok(fx, parse(fx, "--nnode", "1", "--nproc=3", "--max_rest", "2", "@S", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 3);
    assert_int_equal(fx->cfg.restart.max_restarts, 2);
    assert_ok(fx, parse(fx, "--nproc_per", "2", "--rdzv-i", "pj", "@S", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 2);
    assert_string_equal(fx->cfg.rdzv_id, "pj");
    /* --nproc also starts muster's --nproc-per-gpu: torchrun's meaning wins */
    assert_ok(fx, parse(fx, "--nproc", "4", "@S", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 4);
    /* ambiguous among torchrun's own: an error listing the candidates */
    assert_einval(fx, parse(fx, "--rdzv", "x", "@S", NULL));
    assert_non_null(strstr(fx->err, "ambiguous option: --rdzv could match"));
    assert_non_null(strstr(fx->err, "--rdzv-backend"));
    assert_non_null(strstr(fx->err, "--rdzv-conf"));
    assert_einval(fx, parse(fx, "--local=1", "@S", NULL));
    assert_non_null(strstr(fx->err, "--local-addr"));
    assert_non_null(strstr(fx->err, "--local-ranks-filter"));
    /* ambiguous among muster's own */
    assert_einval(fx, parse(fx, "--preflight-m", "1", "@S", NULL));
    assert_non_null(strstr(fx->err, "--preflight-min-busbw"));
    /* an exact name wins over the longer ones it starts (--tee vs nothing, --preflight vs
     * --preflight-timeout...) */
    assert_ok(fx, parse(fx, "--preflight", "off", "@S", NULL));
    assert_int_equal(fx->cfg.pf.on, 0);
    assert_ok(fx, parse(fx, "--stand", "@S", NULL));
    assert_int_equal(fx->cfg.standalone, 1);
    /* a flag's prefix takes no value, like the flag */
    assert_einval(fx, parse(fx, "--stand=1", "@S", NULL));
    /* after the script, nothing is an option */
    assert_ok(fx, parse(fx, "@S", "--nproc", "9", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 1);
    assert_int_equal(fx->cfg.script_argc, 2);
    assert_einval(fx, parse(fx, "--nprocx", "2", "@S", NULL));
    assert_non_null(strstr(fx->err, "unknown option"));
}

/* torchrun values muster has no use for are refused with the reason */
static void test_torchrun_values_refused(void **state)
{
    struct fx *fx = *state;

    assert_einval(fx, parse(fx, "--rdzv-backend", "etcd-v2", "@S", NULL));
    assert_non_null(strstr(fx->err, "no etcd client"));
    assert_einval(fx, parse(fx, "--nproc-per-node", "xpu", "@S", NULL));
    assert_non_null(strstr(fx->err, "NVIDIA GPUs only"));
}

static void test_logs_specs(void **state)
{
    struct fx *fx = *state;

    assert_ok(fx, parse(fx, "--logs-specs", "default", "@S", NULL));
    assert_ok(fx, parse(fx, "--logs_specs=default", "@S", NULL));
    assert_einval(fx, parse(fx, "--logs-specs", "my_plugin", "@S", NULL));
    assert_non_null(strstr(fx->err, "only 'default'"));
}

static void test_numa_binding(void **state)
{
    struct fx *fx = *state;
    static const char *const modes[] = {"node", "socket", "exclusive", "core-complex"};

    for (int i = 0; i < 4; i++) {
        assert_ok(fx, parse(fx, "--numa-binding", modes[i], "@S", NULL));
        assert_string_equal(fx->cfg.numa_binding, modes[i]);
    }
    assert_ok(fx, parse(fx, "--numa_binding=exclusive", "@S", NULL));
    assert_string_equal(fx->cfg.numa_binding, "exclusive");
    assert_einval(fx, parse(fx, "--numa-binding", "Node", "@S", NULL));
    assert_non_null(strstr(fx->err, "node, socket, exclusive or core-complex"));
    assert_einval(fx, parse(fx, "--numa-binding", "", "@S", NULL));
}

static void test_virtual_local_rank_flag(void **state)
{
    struct fx *fx = *state;

    setenv("CUDA_VISIBLE_DEVICES", "2,3,5", 1);
    assert_ok(fx, parse(fx, "--virtual-local-rank", "--nproc-per-node", "3", "@S", NULL));
    assert_int_equal(fx->cfg.virtual_local_rank, 1);
    assert_ok(fx, parse(fx, "--virtual_local_rank", "@S", NULL));
    assert_int_equal(fx->cfg.virtual_local_rank, 1);
    setenv("PET_VIRTUAL_LOCAL_RANK", "1", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_int_equal(fx->cfg.virtual_local_rank, 1);
    unsetenv("PET_VIRTUAL_LOCAL_RANK");
    assert_einval(fx, parse(fx, "--virtual-local-rank=1", "@S", NULL)); /* a flag */
    /* one GPU per worker: refused before anything starts (torchrun: in every worker) */
    assert_einval(fx, parse(fx, "--virtual-local-rank", "--nproc-per-node", "4", "@S", NULL));
    assert_non_null(strstr(fx->err, "CUDA_VISIBLE_DEVICES=2,3,5"));
    assert_ok(fx, parse(fx, "--nproc-per-node", "4", "@S", NULL));
    assert_int_equal(fx->cfg.virtual_local_rank, 0);
}

/* torchrun flags that do nothing in muster say so, only when given. */
static void test_noop_flags_noted(void **state)
{
    struct fx *fx = *state;

    assert_ok(fx, parse(fx, "@S", NULL));
    assert_string_equal(fx->cfg.notes, "");
    assert_ok(fx, parse(fx, "--monitor-interval", "5", "--start-method", "fork",
                        "--event-log-handler", "console", "@S", NULL));
    assert_non_null(strstr(fx->cfg.notes, "note: --monitor-interval does nothing"));
    assert_non_null(strstr(fx->cfg.notes, "note: --start-method does nothing"));
    assert_non_null(strstr(fx->cfg.notes, "note: --event-log-handler does nothing"));
    setenv("PET_START_METHOD", "spawn", 1);
    assert_ok(fx, parse(fx, "@S", NULL));
    assert_non_null(strstr(fx->cfg.notes, "note: PET_START_METHOD does nothing"));
}

static void test_signals_to_handle(void **state)
{
    struct fx *fx = *state;

    assert_ok(fx, parse(fx, "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,USR2",
                        "@S", NULL));
    assert_int_equal(fx->cfg.nhandle_signals, 6);
    assert_int_equal(fx->cfg.handle_signals[4], SIGUSR1);
    assert_int_equal(fx->cfg.handle_signals[5], SIGUSR2);
    assert_string_equal(fx->cfg.signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,USR2");
    assert_ok(fx, parse(fx, "--signals_to_handle=SIGUSR1, SIGHUP", "@S", NULL));
    assert_int_equal(fx->cfg.nhandle_signals, 2);
    assert_int_equal(fx->cfg.handle_signals[1], SIGHUP);
    assert_einval(fx, parse(fx, "--signals-to-handle", "SIGTERM,SIGNOPE", "@S", NULL));
    assert_non_null(strstr(fx->err, "SIGNOPE"));
    refuse(fx, "--signals-to-handle", "SIGKILL", "--signals-to-handle", "SIGCHLD",
           "--signals-to-handle", "SIGTERM,,SIGINT", NULL);
    /* shared-GPU mode's agent watches the default four only: more is refused, not ignored */
    setenv("CUDA_VISIBLE_DEVICES", "0", 1);
    assert_ok(
        fx, parse(fx, "--nproc-per-gpu", "2", "--signals-to-handle", "SIGTERM,SIGHUP", "@S", NULL));
    assert_einval(fx, parse(fx, "--nproc-per-gpu", "2", "--signals-to-handle", "SIGTERM,SIGUSR1",
                            "@S", NULL));
    assert_non_null(strstr(fx->err, "SIGUSR1"));
}

/* --master-addr reaches MASTER_ADDR as written: no resolution of names. */
static void test_master_addr_as_given(void **state)
{
    struct fx *fx = *state;

    assert_ok(fx, parse(fx, "--master-addr", "localhost", "@S", NULL));
    assert_string_equal(fx->cfg.master_addr, "localhost");
    assert_ok(fx, parse(fx, "--master_addr=[::1]", "@S", NULL));
    assert_string_equal(fx->cfg.master_addr, "[::1]");
}

/* A timeout the unsigned millisecond field cannot hold must be refused, not wrapped
 * (5000000 s = 5e9 ms > UINT_MAX). */
static void test_rdzv_conf_overflow(void **state)
{
    struct fx *fx = *state;
    int rc = parse(fx, "--rdzv-conf", "join_timeout=5000000", "@S", NULL);
    if (rc == 0)
        print_error("join_timeout=5000000 accepted as %u ms\n", fx->cfg.join_timeout_ms);
    assert_einval(fx, rc);
    rc = parse(fx, "--shutdown-timeout", "5000000", "@S", NULL);
    if (rc == 0)
        print_error("--shutdown-timeout 5000000 accepted as %u ms\n",
                    fx->cfg.restart.shutdown_timeout_ms);
    assert_einval(fx, rc);
}

static void test_nnodes(void **state)
{
    struct fx *fx = *state;
    setenv("MUSTER_TOKEN", "unit-token", 1); /* multi-node jobs need one */
    assert_ok(fx, parse(fx, "--nnodes", "3", "--rdzv-endpoint", "h:1", "@S", NULL));
    assert_int_equal(fx->cfg.min_nodes, 3);
    assert_int_equal(fx->cfg.max_nodes, 3);
    assert_ok(fx, parse(fx, "--nnodes", "2:4", "--rdzv-endpoint", "h:1", "@S", NULL));
    assert_int_equal(fx->cfg.min_nodes, 2);
    assert_int_equal(fx->cfg.max_nodes, 4);
    assert_ok(fx, parse(fx, "--nnodes", "1:1", "@S", NULL));
    assert_int_equal(fx->cfg.max_nodes, 1);

    assert_einval(fx, parse(fx, "--nnodes", "4:2", "--rdzv-endpoint", "h:1", "@S", NULL));
    refuse(fx, "--nnodes", "0", "--nnodes", "2:", "--nnodes", ":2", "--nnodes", "abc", "--nnodes",
           "2x", "--nnodes", "", NULL);
    /* several nodes without an endpoint: torchrun's static recipe, which needs a fixed N; c10d
     * needs an endpoint */
    assert_einval(fx, parse(fx, "--nnodes", "2:3", "@S", NULL));
    assert_non_null(strstr(fx->err, "fixed N"));
    assert_einval(fx, parse(fx, "--nnodes", "2", "--rdzv-backend", "c10d", "@S", NULL));
    assert_non_null(strstr(fx->err, "rdzv-endpoint"));
}

/* torchrun's static recipe: node rank 0 hosts the rendezvous on MASTER_PORT + 1, the
 * run id is the same on every node, MASTER_ADDR and MASTER_PORT stay as given. */
static void test_static_recipe(void **state)
{
    struct fx *fx = *state;

    setenv("HOME", tmpdir, 1); /* the per-user token goes there, not into the real home */
    assert_ok(fx, parse(fx, "--nnodes", "2", "--node-rank", "1", "--master-addr", "node0",
                        "--master-port", "29500", "@S", NULL));
    assert_true(fx->cfg.static_recipe);
    assert_int_equal(fx->cfg.backend, LAUNCHER_BACKEND_STATIC);
    assert_string_equal(fx->cfg.rdzv_host, "node0");
    assert_int_equal(fx->cfg.rdzv_port, 29501);
    assert_int_equal(fx->cfg.master_port, 29500);
    assert_string_equal(fx->cfg.master_addr, "node0");
    assert_string_equal(fx->cfg.rdzv_id, "static-node0-29500");
    assert_non_null(fx->cfg.token); /* the per-user token */
    assert_ok(fx, parse(fx, "--nnodes", "2", "--node-rank", "0", "@S", NULL));
    assert_int_equal(fx->cfg.rdzv_port, 29501); /* torchrun's default MASTER_PORT 29500 */
    assert_ok(fx, parse(fx, "--nnodes", "2", "--rdzv-backend", "static", "--rdzv-id", "j7",
                        "--master-addr", "10.0.0.1", "--master-port", "40000", "@S", NULL));
    assert_string_equal(fx->cfg.rdzv_id, "j7");
    assert_int_equal(fx->cfg.rdzv_port, 40001);
    assert_einval(fx, parse(fx, "--nnodes", "2", "--node-rank", "2", "@S", NULL));
    assert_non_null(strstr(fx->err, "--node-rank 2 must be below --nnodes 2"));
    assert_einval(fx, parse(fx, "--nnodes", "2", "--master-port", "65535", "@S", NULL));
    assert_non_null(strstr(fx->err, "MASTER_PORT + 1"));
}

static void test_nproc_per_node(void **state)
{
    struct fx *fx = *state;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    assert_ok(fx, parse(fx, "--nproc-per-node", "cpu", "@S", NULL));
    assert_string_equal(fx->cfg.nproc_spec, "cpu");
    assert_int_equal(fx->cfg.nproc_per_node, cpus);

    /* CUDA_VISIBLE_DEVICES="" hides every GPU: gpu fails, auto falls back to the CPUs. */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    assert_einval(fx, parse(fx, "--nproc-per-node", "gpu", "@S", NULL));
    assert_ok(fx, parse(fx, "--nproc-per-node", "auto", "@S", NULL));
    assert_string_equal(fx->cfg.nproc_spec, "auto");
    assert_int_equal(fx->cfg.nproc_per_node, cpus);

    assert_ok(fx, parse(fx, "--nproc-per-node", "8", "@S", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 8);
    refuse(fx, "--nproc-per-node", "0", "--nproc-per-node", "-2", "--nproc-per-node", "two",
           "--nproc-per-node", " 2", NULL);
}

static void test_endpoints(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--rdzv-endpoint", "node1", "@S", NULL));
    assert_string_equal(fx->cfg.rdzv_endpoint, "node1");
    assert_string_equal(fx->cfg.rdzv_host, "node1");
    assert_int_equal(fx->cfg.rdzv_port, 29400);
    assert_ok(fx, parse(fx, "--rdzv-endpoint", "[fe80::1]", "@S", NULL));
    assert_string_equal(fx->cfg.rdzv_host, "fe80::1");
    assert_int_equal(fx->cfg.rdzv_port, 29400);
    assert_ok(fx, parse(fx, "--rdzv-endpoint", "10.0.0.1:65535", "@S", NULL));
    assert_string_equal(fx->cfg.rdzv_host, "10.0.0.1");
    assert_int_equal(fx->cfg.rdzv_port, 65535);

    refuse(fx, "--rdzv-endpoint", "fe80::1:80", "--rdzv-endpoint", "host:", "--rdzv-endpoint",
           "host:70000", "--rdzv-endpoint", ":80", "--rdzv-endpoint", "[::1", "--rdzv-endpoint",
           "[::1]x", NULL);
}

static void test_backend_and_id(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--rdzv-backend", "static", "--rdzv-id", "none", "@S", NULL));
    assert_int_equal(fx->cfg.backend, LAUNCHER_BACKEND_STATIC);
    assert_uuid4(fx->cfg.rdzv_id);
    assert_ok(fx, parse(fx, "--rdzv-backend", "muster", "--rdzv-id", "abc-123", "@S", NULL));
    assert_int_equal(fx->cfg.backend, LAUNCHER_BACKEND_MUSTER);
    assert_string_equal(fx->cfg.rdzv_id, "abc-123");

    refuse(fx, "--rdzv-backend", "etcd", "--rdzv-id", "a b", "--rdzv-id", "a/b", "--rdzv-id", "",
           NULL);
    char longid[200];
    memset(longid, 'a', 129);
    longid[129] = '\0';
    assert_einval(fx, parse(fx, "--rdzv-id", longid, "@S", NULL));
    longid[128] = '\0';
    assert_ok(fx, parse(fx, "--rdzv-id", longid, "@S", NULL));
    assert_string_equal(fx->cfg.rdzv_id, longid);

    /* one id character set (common/ids.h): nothing that escapes --log-dir or forges lines */
    static const char *bad[] = {"..", ".", "../x", "a\nb", "\x1b[2J", "caf\xc3\xa9", "\xff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_einval(fx, parse(fx, "--rdzv-id", bad[i], "@S", NULL));
        assert_non_null(strstr(fx->err, "--rdzv-id '"));
        assert_null(strchr(fx->err, '\n'));
        assert_null(strchr(fx->err, '\x1b'));
    }
    assert_einval(fx, parse(fx, "--rdzv-id=a\nb", "@S", NULL));
    assert_null(strchr(fx->err, '\n')); /* "--rdzv-id=ID" is not echoed raw */
    static const char *good[] = {"12345", "12345_7", "12345+1", "u@h:job.v2"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_ok(fx, parse(fx, "--rdzv-id", good[i], "@S", NULL));
        assert_string_equal(fx->cfg.rdzv_id, good[i]);
    }
}

static void test_standalone(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--standalone", "--rdzv-id", "myjob", "--rdzv-endpoint", "h:1",
                        "--rdzv-backend", "c10d", "@S", NULL));
    assert_int_equal(fx->cfg.standalone, 1);
    assert_int_equal(fx->cfg.backend, LAUNCHER_BACKEND_MUSTER);
    assert_null(fx->cfg.rdzv_endpoint);
    assert_uuid4(fx->cfg.rdzv_id);
    assert_string_not_equal(fx->cfg.rdzv_id, "myjob");
    char first[64];
    snprintf(first, sizeof(first), "%s", fx->cfg.rdzv_id);

    assert_ok(fx, parse(fx, "--standalone", "@S", NULL));
    assert_uuid4(fx->cfg.rdzv_id);
    assert_string_not_equal(fx->cfg.rdzv_id, first);

    assert_einval(fx, parse(fx, "--standalone", "--nnodes", "2", "@S", NULL));
    assert_einval(fx, parse(fx, "--standalone=1", "@S", NULL));
}

static void test_numbers(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--rdzv-backend", "static", "--node-rank", "0", "--master-addr", "m1",
                        "--master-port", "29501", "--start-method", "fork", "@S", NULL));
    assert_string_equal(fx->cfg.master_addr, "m1");
    assert_int_equal(fx->cfg.master_port, 29501);

    refuse(fx, "--max-restarts", "-1", "--max-restarts", "1.5", "--master-port", "0",
           "--master-port", "65536", "--node-rank", "x", "--monitor-interval", "fast",
           "--start-method", "thread", "--role", "", "--log-dir", "", NULL);
}

/* ---- script and its arguments --------------------------------------------------------------- */

static void test_script_args_belong_to_script(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--nproc-per-node", "2", "@S", "--nnodes", "5", "-m", "--", "x", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 2);
    assert_int_equal(fx->cfg.min_nodes, 1);
    assert_int_equal(fx->cfg.max_nodes, 1);
    assert_int_equal(fx->cfg.module, 0);
    assert_string_equal(fx->cfg.script, script);
    assert_int_equal(fx->cfg.script_argc, 5);
    assert_ptr_equal(fx->cfg.script_argv, &fx->argv[3]);
    assert_string_equal(fx->cfg.script_argv[0], "--nnodes");
    assert_string_equal(fx->cfg.script_argv[1], "5");
    assert_string_equal(fx->cfg.script_argv[2], "-m");
    assert_string_equal(fx->cfg.script_argv[3], "--");
    assert_string_equal(fx->cfg.script_argv[4], "x");
    assert_null(fx->cfg.script_argv[5]);
}

static void test_double_dash_separator(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--nproc-per-node", "2", "--", "@S", "--nproc-per-node", "9", NULL));
    assert_int_equal(fx->cfg.nproc_per_node, 2);
    assert_string_equal(fx->cfg.script, script);
    assert_int_equal(fx->cfg.script_argc, 2);
    assert_string_equal(fx->cfg.script_argv[0], "--nproc-per-node");
    assert_string_equal(fx->cfg.script_argv[1], "9");

    /* after --, even a dash name is the script (here: a binary with --no-python, on PATH) */
    assert_ok(fx, parse(fx, "--no-python", "--", "-weird", NULL));
    assert_string_equal(fx->cfg.script, "-weird");
    assert_int_equal(fx->cfg.script_argc, 0);

    assert_einval(fx, parse(fx, "--nproc-per-node", "2", "--", NULL));
}

static void test_script_checks(void **state)
{
    struct fx *fx = *state;
    char missing[192];
    snprintf(missing, sizeof(missing), "%s/missing.py", tmpdir);

    assert_einval(fx, parse(fx, NULL));
    assert_einval(fx, parse(fx, "--nproc-per-node", "2", NULL));
    assert_einval(fx, parse(fx, missing, NULL));
    assert_non_null(strstr(fx->err, missing));
    assert_einval(fx, parse(fx, subdir, NULL));
    assert_einval(fx, parse(fx, "-m", "--no-python", "pkg", NULL));
    /* --no-python runs the file itself: it must be executable */
    assert_einval(fx, parse(fx, "--no-python", "@S", NULL));
    assert_ok(fx, parse(fx, "--no-python", "/bin/sh", "-c", "true", NULL));
    assert_int_equal(fx->cfg.no_python, 1);
    assert_int_equal(fx->cfg.script_argc, 2);
    assert_ok(fx, parse(fx, "--no-python", "some-binary-on-path", NULL));
    assert_string_equal(fx->cfg.script, "some-binary-on-path");
    /* --run-path wins over --no-python, so the (non-executable) script is fine */
    assert_ok(fx, parse(fx, "--run-path", "--no-python", "@S", NULL));
    assert_int_equal(fx->cfg.run_path, 1);
    assert_int_equal(fx->cfg.no_python, 0);
}

static void test_option_errors(void **state)
{
    struct fx *fx = *state;
    assert_einval(fx, parse(fx, "--bogus", "@S", NULL));
    assert_non_null(strstr(fx->err, "--bogus"));
    assert_einval(fx, parse(fx, "-x", "@S", NULL));
    assert_einval(fx, parse(fx, "--nnodes", NULL));
    assert_non_null(strstr(fx->err, "--nnodes"));
    assert_einval(fx, parse(fx, "--dry-run=yes", "@S", NULL));
    assert_einval(fx, parse(fx, "--=3", "@S", NULL));

    /* a short error buffer is still NUL-terminated */
    char small[8];
    char *argv[] = {"--bogus-option", NULL};
    assert_int_equal(launcher_config_parse(1, argv, &fx->cfg, small, sizeof(small)), -EINVAL);
    assert_int_equal(strlen(small), 7);
}

static void test_help_stops_parsing(void **state)
{
    struct fx *fx = *state;
    assert_ok(fx, parse(fx, "--help", NULL));
    assert_int_equal(fx->cfg.help, 1);
    assert_ok(fx, parse(fx, "--nnodes", "0", "-h", "--bogus", NULL));
    assert_int_equal(fx->cfg.help, 1);
    /* after the script, --help belongs to the script */
    assert_ok(fx, parse(fx, "@S", "--help", NULL));
    assert_int_equal(fx->cfg.help, 0);
    assert_int_equal(fx->cfg.script_argc, 1);
}

/* ---- GPU counting ---------------------------------------------------------------------------- */

static void test_count_gpus(void **state)
{
    (void)state;
    char missing[192];
    snprintf(missing, sizeof(missing), "%s/nope", tmpdir);

    assert_int_equal(launcher_count_gpus(gpudir, NULL), 4);
    assert_int_equal(launcher_count_gpus(gpudir, ""), 0);
    assert_int_equal(launcher_count_gpus(gpudir, "-1"), 0);
    assert_int_equal(launcher_count_gpus(gpudir, "0,2"), 2);
    assert_int_equal(launcher_count_gpus(gpudir, "3"), 1);
    assert_int_equal(launcher_count_gpus(gpudir, "1,7,2"), 1);
    assert_int_equal(launcher_count_gpus(gpudir, "0,0"), 1);
    assert_int_equal(launcher_count_gpus(gpudir, "0,1,2,3"), 4);
    assert_int_equal(launcher_count_gpus(gpudir, "4"), 0);
    assert_int_equal(launcher_count_gpus(gpudir, "x,0"), 0);
    assert_int_equal(launcher_count_gpus(gpudir, "0,,1"), 1);
    assert_int_equal(launcher_count_gpus(gpudir, "GPU-abc,MIG-x"), 2);
    assert_int_equal(launcher_count_gpus(missing, NULL), 0);
    assert_int_equal(launcher_count_gpus(missing, "0,1"), 0);
    assert_int_equal(launcher_count_gpus(missing, "GPU-abc"), 0);
}

/* Every connection is TLS keyed by the token: a multi-node job refuses to start without one,
 * --token-file is read with ssh-like permission checks and wins over MUSTER_TOKEN, and a
 * certificate set must be complete. */
static void test_security(void **state)
{
    struct fx *fx = *state;
    char path[256];
    FILE *f;

    struct stat st;

    /* no token: the per-user one, made on first use (0600 in a 0700 directory), then reused */
    snprintf(path, sizeof(path), "%s/home", tmpdir);
    assert_int_equal(mkdir(path, 0700), 0);
    setenv("HOME", path, 1);
    unsetenv("MUSTER_TOKEN");
    assert_ok(fx, parse(fx, "--nnodes", "2", "--rdzv-endpoint", "h:1", "@S", NULL));
    assert_non_null(fx->cfg.token);
    assert_non_null(strstr(fx->cfg.token_hint, "created just now"));
    snprintf(path, sizeof(path), "%s/home/.muster/token", tmpdir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    char first[64];
    snprintf(first, sizeof(first), "%s", fx->cfg.token);
    assert_ok(fx, parse(fx, "--nnodes", "2", "--rdzv-endpoint", "h:1", "@S", NULL));
    assert_string_equal(fx->cfg.token, first);
    assert_null(strstr(fx->cfg.token_hint, "created just now"));
    unlink(path);
    snprintf(path, sizeof(path), "%s/home/.muster", tmpdir);
    rmdir(path);
    snprintf(path, sizeof(path), "%s/home", tmpdir);
    rmdir(path);
    /* a home muster cannot use: one line that names the other ways */
    setenv("HOME", "/proc/self", 1);
    assert_einval(fx, parse(fx, "--nnodes", "2", "--rdzv-endpoint", "h:1", "@S", NULL));
    assert_non_null(strstr(fx->err, "needs a shared token (--token-file FILE, MUSTER_TOKEN"));
    setenv("HOME", tmpdir, 1);
    assert_ok(fx, parse(fx, "--nnodes", "1", "--rdzv-endpoint", "h:1", "@S", NULL));
    assert_null(fx->cfg.token); /* one node: run.c makes a random one */

    snprintf(path, sizeof(path), "%s/token", tmpdir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("  file-token  \n", f);
    fclose(f);
    chmod(path, 0644);
    assert_einval(
        fx, parse(fx, "--nnodes", "2", "--rdzv-endpoint", "h:1", "--token-file", path, "@S", NULL));
    assert_non_null(strstr(fx->err, "too open"));
    assert_null(strstr(fx->err, "file-token")); /* the secret never appears */
    chmod(path, 0600);
    setenv("MUSTER_TOKEN", "env-token", 1);
    assert_ok(
        fx, parse(fx, "--nnodes", "2", "--rdzv-endpoint", "h:1", "--token-file", path, "@S", NULL));
    assert_string_equal(fx->cfg.token, "file-token");
    unlink(path);

    assert_einval(fx, parse(fx, "--tls-cert", "/etc/hostname", "@S", NULL));
    assert_non_null(strstr(fx->err, "all of --tls-cert, --tls-key and --tls-ca"));
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_option_table),
        T(test_defaults),
        T(test_dash_and_underscore_spellings),
        T(test_static_recipe),
        T(test_equals_values),
        T(test_module_short_flag),
        T(test_redirects_and_tee),
        T(test_std_for_rank_plain),
        T(test_local_ranks_filter),
        T(test_output_flags),
        T(test_pet_env_fallback),
        T(test_command_line_beats_pet),
        T(test_pet_flags),
        T(test_pet_bad_value_names_variable),
        T(test_python_exec_and_token),
        T(test_shutdown_timeout_sources),
        T(test_replicate_flags),
        T(test_rdzv_conf),
        T(test_rdzv_conf_overflow),
        T(test_rdzv_conf_torchrun_keys),
        T(test_rdzv_conf_quotes),
        T(test_option_prefixes),
        T(test_logs_specs),
        T(test_torchrun_values_refused),
        T(test_numa_binding),
        T(test_virtual_local_rank_flag),
        T(test_noop_flags_noted),
        T(test_signals_to_handle),
        T(test_master_addr_as_given),
        T(test_nnodes),
        T(test_nproc_per_node),
        T(test_endpoints),
        T(test_backend_and_id),
        T(test_standalone),
        T(test_numbers),
        T(test_script_args_belong_to_script),
        T(test_double_dash_separator),
        T(test_script_checks),
        T(test_option_errors),
        T(test_help_stops_parsing),
        T(test_count_gpus),
        T(test_security),
    };
#undef T
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
