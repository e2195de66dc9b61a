/* The server's read-only HTTP port (see rdzv_server_http_listen() in server.h). This header
 * exposes the request parser so that it can be tested without sockets. */
#ifndef MUSTER_RDZV_HTTP_H
#define MUSTER_RDZV_HTTP_H

#include <stddef.h>

#define RDZV_HTTP_HEAD_MAX 8192  /* request line + headers */
#define RDZV_HTTP_IDLE_MS 5000   /* a connection that sends no complete head is closed */
#define RDZV_HTTP_SPARE_INPUT 32 /* eviction passes over at most this many with unread input */
#define RDZV_HTTP_CACHE_MS 250   /* /metrics and /status are rebuilt at most this often */
#define RDZV_HTTP_METHOD_MAX 15
#define RDZV_HTTP_PATH_MAX 1023
/* The Content-Security-Policy of every response: the dashboard's own script and style sheet
 * only (no inline script, style or event handler, nothing from elsewhere), fetches to this
 * origin, no framing, no form posting anywhere. */
#define RDZV_HTTP_CSP                                                                              \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "                 \
    "frame-ancestors 'none'"

struct rdzv_http_req {
    char method[RDZV_HTTP_METHOD_MAX + 1];
    char path[RDZV_HTTP_PATH_MAX + 1];  /* without "?query" */
    char query[RDZV_HTTP_PATH_MAX + 1]; /* after the '?', still %-encoded; "" none */
};

/* The value of name in the query q ("a=1&b=x%20y"), %-decoded ('+' is a space) into out (at most
 * outlen - 1 bytes). Returns 0, -ENOENT when absent, -EINVAL for a bad %-escape, a NUL or a
 * value that does not fit. */
int rdzv_http_query(const char *q, const char *name, char *out, size_t outlen);

/* Parses the request head in buf[0..len). Returns 0 when a complete, well-formed head (request
 * line "METHOD SP PATH SP HTTP/1.x", headers up to an empty line; CRLF or LF) was found and
 * fills *req; -EAGAIN when more bytes are needed; -EMSGSIZE when no complete head fits in
 * RDZV_HTTP_HEAD_MAX bytes; -EINVAL for a malformed head (answer 400). */
int rdzv_http_parse(const char *buf, size_t len, struct rdzv_http_req *req);

/* The value of header name (case-insensitive, without surrounding blanks) of the complete head
 * in buf[0..len) into out. Returns 0, -ENOENT (no such header or no complete head) or -EMSGSIZE
 * (the value does not fit outlen bytes with its NUL). */
int rdzv_http_header(const char *buf, size_t len, const char *name, char *out, size_t outlen);

/* For the dispatcher (server.c) as the server closes: every HTTP connection and the port. */
struct rdzv_http;
void rdzv__http_close(struct rdzv_http *h);

#endif
