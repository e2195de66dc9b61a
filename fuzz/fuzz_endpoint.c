/* libFuzzer target: launcher_parse_endpoint() ("host:port", "[v6]:port", "host").
 * Byte 0..1 give the default port; the rest (up to the first NUL) is the endpoint. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *v, *host = NULL;
    unsigned port = 0, defport;
    int rc;

    if (size < 2)
        return 0;
    defport = (unsigned)data[0] << 8 | data[1];
    v = fuzz_strndup(data + 2, size - 2);
    if (v == NULL)
        return 0;
    rc = launcher_parse_endpoint(v, defport, &host, &port);
    if (rc == 0) {
        size_t n = strlen(host);
        if (n == 0 || n > 255 || port > 65535 || strstr(v, host) == NULL)
            abort();
        free(host);
    } else if (rc != -EINVAL && rc != -ENOMEM) {
        abort();
    }
    free(v);
    return 0;
}
