/* libFuzzer target: the HTTP status port's request-head parser, rdzv_http_parse().
 * Oracle besides the sanitizers: the documented return codes only, NUL-terminated method and
 * path within their limits, a path that starts with '/' and has lost its "?query". The input is
 * copied to a buffer of exactly its size, so any read past len is an ASan report. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rdzv_http_req req;
    /* A private copy of exactly size bytes: ASan then catches any read at buf[size]. */
    char *buf = malloc(size ? size : 1);
    int rc;

    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    memset(&req, 0xA5, sizeof(req));
    rc = rdzv_http_parse(buf, size, &req);
    if (rc != 0 && rc != -EAGAIN && rc != -EMSGSIZE && rc != -EINVAL)
        abort();
    if (rc == 0) {
        if (memchr(req.method, '\0', sizeof(req.method)) == NULL ||
            memchr(req.path, '\0', sizeof(req.path)) == NULL)
            abort();
        if (req.method[0] == '\0' || req.path[0] != '/' || strchr(req.path, '?') != NULL)
            abort();
    }
    /* Incremental arrival: the same bytes cut in half must not crash either. */
    (void)rdzv_http_parse(buf, size / 2, &req);
    free(buf);
    return 0;
}
