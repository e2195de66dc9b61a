/* libFuzzer target: `muster run`'s command-line parser, launcher_config_parse().
 * The input is split into argv on NUL bytes (at most 64 arguments). PET_*, SLURM_* and MUSTER_*
 * variables are removed once at start so the host's environment cannot steer the parse. The
 * parser may stat() the script and --log-dir/--checkpoint-dir paths that the input names; it
 * writes nothing. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_clean_env();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct launcher_config cfg;
    char err[LAUNCHER_ERR_MAX];
    char *store = NULL;
    int argc = 0, rc;
    char **argv = fuzz_split(data, size, 64, &argc, &store);

    if (argv == NULL)
        return 0;
    memset(&cfg, 0, sizeof(cfg));
    rc = launcher_config_parse(argc, argv, &cfg, err, sizeof(err));
    if (rc != 0 && rc != -EINVAL && rc != -ENOMEM)
        abort();
    if (rc != 0 && memchr(err, '\0', sizeof(err)) == NULL)
        abort();
    if (rc == 0 && !cfg.help) {
        for (int r = 0; r < 8; r++) {
            (void)launcher_std_for_rank(&cfg.redirects, r);
            (void)launcher_std_for_rank(&cfg.tee, r);
            (void)launcher_rank_shown(&cfg, r);
        }
        if (cfg.min_nodes > cfg.max_nodes || cfg.nproc_per_node < 1 || cfg.rdzv_port > 65535)
            abort();
    }
    launcher_config_free(&cfg);
    free(argv);
    free(store);
    return 0;
}
