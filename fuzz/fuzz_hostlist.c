/* libFuzzer target: Slurm's hostlist syntax, launcher_hostlist_expand(). The input up to the
 * first NUL is the list. Oracle: the documented bounds (at most LAUNCHER_HOSTLIST_MAX hosts,
 * each shorter than LAUNCHER_HOST_MAX, none empty) and a clean result on error. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "slurm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char **hosts = (char **)1;
    size_t n = 12345;
    char *list = fuzz_strndup(data, size);
    int rc;

    if (list == NULL)
        return 0;
    rc = launcher_hostlist_expand(list, &hosts, &n);
    if (rc == 0) {
        if (n == 0 || n > LAUNCHER_HOSTLIST_MAX || hosts == NULL)
            abort();
        for (size_t i = 0; i < n; i++) {
            size_t len = strlen(hosts[i]);
            if (len == 0 || len >= LAUNCHER_HOST_MAX)
                abort();
        }
        launcher_hostlist_free(hosts, n);
    } else {
        if ((rc != -EINVAL && rc != -E2BIG && rc != -ENOMEM) || hosts != NULL || n != 0)
            abort();
    }
    free(list);
    return 0;
}
