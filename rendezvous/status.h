/* The status document of a rendezvous server: one JSON text (built with jansson), served as
 * the STATUS message and as HTTP /status. Layout in PROTOCOL.md ("STATUS (23)"). */
#ifndef MUSTER_RDZV_STATUS_H
#define MUSTER_RDZV_STATUS_H

#include <stddef.h>

struct rdzv_server;

/* Writes the document for job `job_id` ("" or NULL: every job; "prefix*": every job whose id
 * starts with prefix, as a credential scope, cred.h) into buf (cap bytes, NUL
 * terminated), *len = its length without the NUL. When the full document does not fit, the
 * nodes' telemetry is left out (null, "telemetry_truncated": true); when that does not fit
 * either, the nodes and checkpoints lists are left out and "truncated": true is added. Borrows srv.
 * Returns 0, -EMSGSIZE when even that does not fit, or -ENOMEM. */
int rdzv_status_json(struct rdzv_server *srv, const char *job_id, char *buf, size_t cap,
                     size_t *len);

#endif
