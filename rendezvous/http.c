/* HTTP port of the server: placeholder until the HTTP step lands. */
#include "server.h"
#include "server_priv.h"

void http_close(struct rdzv_http *h)
{
    (void)h;
}

int rdzv_server_http_listen(struct rdzv_server *s, const char *host, unsigned port,
                            unsigned *bound_port)
{
    (void)s;
    (void)host;
    (void)port;
    (void)bound_port;
    return UV_ENOSYS;
}
