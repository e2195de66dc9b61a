/* What the launcher_config_parse() fuzz targets share. Header-only: each target is one .c file. */
#ifndef MUSTER_FUZZ_LAUNCHER_H
#define MUSTER_FUZZ_LAUNCHER_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* launcher_config_parse() on a zeroed cfg, with the checks every input must pass: an error code
 * from its contract (-EINVAL, -ENOMEM) and, on error, a NUL-terminated message. Aborts otherwise
 * (the fuzzer reports it). Returns the parse's rc; the caller frees cfg with
 * launcher_config_free() either way. */
static inline int fuzz_config_parse(int argc, char **argv, struct launcher_config *cfg)
{
    char err[LAUNCHER_ERR_MAX];
    int rc;

    memset(cfg, 0, sizeof(*cfg));
    rc = launcher_config_parse(argc, argv, cfg, err, sizeof(err));
    if (rc != 0 && rc != -EINVAL && rc != -ENOMEM)
        abort();
    if (rc != 0 && memchr(err, '\0', sizeof(err)) == NULL)
        abort();
    return rc;
}

#endif
