#ifndef MUSTER_LAUNCHER_ENDPOINT_H
#define MUSTER_LAUNCHER_ENDPOINT_H

/* Splits "host:port", "[ipv6]:port" or "host" (port = defport). A bare IPv6 address without
 * brackets is refused (its colons are ambiguous). On success *host is a new string the caller
 * frees. Returns 0, -EINVAL for a malformed endpoint or -ENOMEM. */
int launcher_parse_endpoint(const char *v, unsigned defport, char **host, unsigned *port);

#endif
