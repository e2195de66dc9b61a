/* libFuzzer target: the value parsers behind single `muster run` options, reached through
 * launcher_config_parse() (they are static in config.c). Byte 0 picks the option, the rest
 * (up to the first NUL) is its value; argv is {"--OPTION", VALUE, "-m", "mod"} so that no
 * training script has to exist. --rdzv-conf, --redirects, --tee and --local-ranks-filter are
 * the ones with a grammar of their own; the others are cheap to include. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_launcher.h"

static const char *const options[] = {
    "--rdzv-conf",
    "--redirects",
    "--tee",
    "--local-ranks-filter",
    "--nnodes",
    "--nproc-per-node",
    "--rdzv-endpoint",
    "--rdzv-id",
    "--preempt-signal",
    "--monitor-interval",
    "--shutdown-timeout",
    "--hang-timeout",
    "--master-port",
    "--rdzv-backend",
    "--start-method",
    "--standalone",
    "-r",
    "-t",
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_clean_env();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct launcher_config cfg;
    char opt[32], mflag[] = "-m", mod[] = "mod";
    char *value, *argv[5];

    if (size == 0)
        return 0;
    value = fuzz_strndup(data + 1, size - 1);
    if (value == NULL)
        return 0;
    strcpy(opt, options[data[0] % NOPTIONS]);
    argv[0] = opt;
    argv[1] = value;
    argv[2] = mflag;
    argv[3] = mod;
    argv[4] = NULL;
    if (fuzz_config_parse(4, argv, &cfg) == 0) {
        for (int r = 0; r < 70; r++) {
            int s = launcher_std_for_rank(&cfg.redirects, r) | launcher_std_for_rank(&cfg.tee, r);
            if (s < 0 || s > 3)
                abort();
            (void)launcher_rank_shown(&cfg, r);
        }
        if (cfg.redirects.map_len > 64 || cfg.tee.map_len > 64 || cfg.local_ranks_filter_len < 0)
            abort();
    }
    launcher_config_free(&cfg);
    free(value);
    return 0;
}
