/* libFuzzer target: checkpoint-name parsing, agent_ckpt_parse_step() (and the two name checks
 * beside it, which the registry and the watcher apply to the same untrusted names).
 * Oracle: the step is -1 or non-negative; a valid name is shorter than AGENT_CKPT_NAME_MAX and
 * has no '/'. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_hash.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *name = fuzz_strndup(data, size);
    int64_t step;

    if (name == NULL)
        return 0;
    step = agent_ckpt_parse_step(name);
    if (step < -1)
        abort();
    (void)agent_ckpt_name_is_temp(name);
    if (agent_ckpt_name_valid(name) &&
        (strlen(name) == 0 || strlen(name) >= AGENT_CKPT_NAME_MAX || strchr(name, '/') != NULL ||
         strcmp(name, ".") == 0 || strcmp(name, "..") == 0))
        abort();
    free(name);
    return 0;
}
