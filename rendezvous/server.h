/* The rendezvous server: one libuv TCP listener holding many jobs keyed by job id.
 * The same object runs inside `muster run --standalone` (embedded) and, later, as the
 * `muster server` daemon. */
#ifndef MUSTER_RDZV_SERVER_H
#define MUSTER_RDZV_SERVER_H

#include <uv.h>

struct rdzv_server;

/* Binds host:port (port 0 = ephemeral) and starts listening on loop. token: required from
 * every peer when non-NULL and non-empty (copied). Returns 0 or a negative errno
 * (UV_EADDRINUSE, UV_EADDRNOTAVAIL, UV_EINVAL for an unparseable host...). Host may be a
 * numeric IPv4/IPv6 address or a name (resolved synchronously); NULL or "" means 0.0.0.0.
 * When bind or listen fails, the half-built server's memory is released by the loop's next
 * run (its listener handle must be closed asynchronously, like any libuv handle). */
int rdzv_server_new(uv_loop_t *loop, const char *host, unsigned port, const char *token,
                    struct rdzv_server **out);

/* The port actually bound (useful after port 0). */
unsigned rdzv_server_port(const struct rdzv_server *s);

/* Starts the read-only HTTP port of the server on host:port (port 0 = ephemeral; host as for
 * rdzv_server_new()): GET/HEAD of /metrics (Prometheus text format 0.0.4), /status (the JSON
 * document of PROTOCOL.md "STATUS") and / (a small HTML page). HTTP/1.0, one request per
 * connection, request head at most 8 KiB, 5 s idle timeout. Sets *bound_port (may be NULL) to
 * the port bound. Returns 0, UV_EALREADY when already listening, or a negative errno from
 * resolving, binding or listening (then nothing stays open). The port closes with the server. */
int rdzv_server_http_listen(struct rdzv_server *s, const char *host, unsigned port,
                            unsigned *bound_port);

/* Stops listening, closes every connection and frees the server from the last close callback,
 * then calls close_cb (may be NULL). Accepts NULL. */
void rdzv_server_close(struct rdzv_server *s, void (*close_cb)(void *data), void *data);

#endif
