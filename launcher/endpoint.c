#include "endpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_port(const char *s, unsigned *port)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 0 || v > 65535 || *s == '+' || *s == '-')
        return -EINVAL;
    *port = (unsigned)v;
    return 0;
}

int launcher_parse_endpoint(const char *v, unsigned defport, char **host, unsigned *port)
{
    const char *h = v, *p = NULL;
    size_t hlen;

    if (v[0] == '[') {
        const char *close = strchr(v, ']');
        if (close == NULL || (close[1] != '\0' && close[1] != ':'))
            return -EINVAL;
        h = v + 1;
        hlen = (size_t)(close - h);
        p = close[1] == ':' ? close + 2 : NULL;
    } else {
        const char *colon = strrchr(v, ':');
        if (colon != NULL && strchr(v, ':') != colon)
            return -EINVAL; /* bare IPv6 needs brackets */
        hlen = colon ? (size_t)(colon - v) : strlen(v);
        p = colon ? colon + 1 : NULL;
    }
    if (hlen == 0 || hlen > 255)
        return -EINVAL;
    *port = defport;
    if (p != NULL && parse_port(p, port) != 0)
        return -EINVAL;
    *host = strndup(h, hlen);
    return *host ? 0 : -ENOMEM;
}

int launcher_parse_http(const char *v, char **host, unsigned *port)
{
    char full[300];
    int digits = v[0] != '\0' && v[strspn(v, "0123456789")] == '\0';

    if (strlen(v) > 255)
        return -EINVAL;
    snprintf(full, sizeof(full), "%s%s", digits ? "127.0.0.1:" : v[0] == ':' ? "127.0.0.1" : "", v);
    return launcher_parse_endpoint(full, 8080, host, port);
}
