/* `muster --version`: what a bug report needs to know about this binary. */
#include "version.h"

#include <jansson.h>
#include <mbedtls/version.h>
#include <string.h>
#include <uv.h>
#include <xxhash.h>

#include "message.h"
#include "muster_version.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define UV_HEADERS_VERSION STR(UV_VERSION_MAJOR) "." STR(UV_VERSION_MINOR) "." STR(UV_VERSION_PATCH)
#define XXH_HEADERS_VERSION                                                                        \
    STR(XXH_VERSION_MAJOR) "." STR(XXH_VERSION_MINOR) "." STR(XXH_VERSION_RELEASE)

void launcher_print_version(FILE *out)
{
    const char *uv_rt = uv_version_string();

    fprintf(out, "muster %s\n", MUSTER_VERSION);
    fprintf(out, "protocol %d; built with libuv %s, mbedTLS %s, jansson %s, xxHash %s",
            RDZV_PROTO_VERSION, UV_HEADERS_VERSION, MBEDTLS_VERSION_STRING, JANSSON_VERSION,
            XXH_HEADERS_VERSION);
    /* only a shared libuv can differ; the static libraries are the headers' own */
    if (strcmp(uv_rt, UV_HEADERS_VERSION) != 0)
        fprintf(out, " (libuv %s at run time)", uv_rt);
    fputc('\n', out);
}
