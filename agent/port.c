#include "port.h"

#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

int agent_port_reserve(int *fd, unsigned *port)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    socklen_t len = sizeof(a);
    int one = 1, zero = 0, rc;
    int s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (s < 0) {
        /* no IPv6 on this host: the IPv4 wildcard is all there is */
        struct sockaddr_in a4 = {.sin_family = AF_INET};
        socklen_t len4 = sizeof(a4);
        if ((s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
            return -errno;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(s, (struct sockaddr *)&a4, sizeof(a4)) != 0 ||
            getsockname(s, (struct sockaddr *)&a4, &len4) != 0)
            goto fail;
        *fd = s;
        *port = ntohs(a4.sin_port);
        return 0;
    }
    /* dual-stack wildcard: the port is free for IPv4 and IPv6 alike */
    setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) != 0)
        goto fail;
    *fd = s;
    *port = ntohs(a.sin6_port);
    return 0;
fail:
    rc = -errno;
    close(s);
    return rc;
}
