/* libFuzzer target: `muster run`'s command-line parser, launcher_config_parse().
 * The input is split into argv on NUL bytes (at most 64 arguments). PET_*, SLURM_* and MUSTER_*
 * variables are removed once at start so the host's environment cannot steer the parse. The
 * parser may stat() the script and --log-dir/--checkpoint-dir paths that the input names; it
 * writes nothing. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "fuzz_launcher.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_clean_env();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct launcher_config cfg;
    char *store = NULL;
    int argc = 0;
    char **argv = fuzz_split(data, size, 64, &argc, &store);

    if (argv == NULL)
        return 0;
    if (fuzz_config_parse(argc, argv, &cfg) == 0 && !cfg.help) {
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
