#ifndef MUSTER_LAUNCHER_ENDPOINT_H
#define MUSTER_LAUNCHER_ENDPOINT_H

/* Splits "host:port", "[ipv6]:port" or "host" (port = defport). A bare IPv6 address without
 * brackets is refused (its colons are ambiguous). On success *host is a new string the caller
 * frees. Returns 0, -EINVAL for a malformed endpoint or -ENOMEM. */
int launcher_parse_endpoint(const char *v, unsigned defport, char **host, unsigned *port);

/* An --http address (`muster server`, `muster run`): "PORT" or ":PORT" alone is loopback, the
 * safe default for a port without TLS; else as launcher_parse_endpoint, default port 8080. */
int launcher_parse_http(const char *v, char **host, unsigned *port);

#endif
