/* The message handlers of the rendezvous server, one per message type, called by the
 * dispatcher (server.c) once it checked the sender's role and job; they use sjob.h and
 * service.h below them (docs/ARCHITECTURE.md "Adding a message type"). */
#ifndef MUSTER_RDZV_HANDLER_H
#define MUSTER_RDZV_HANDLER_H

#include "service.h"

/* handler.c: agent messages */
void rdzv__handle_hello(struct peer *p, const struct rdzv_hello *h);
void rdzv__handle_join(struct peer *p, const struct rdzv_join *j);
void rdzv__handle_failed(struct peer *p, const struct rdzv_failure *f, int leaving);
void rdzv__handle_done(struct peer *p, uint32_t round);
void rdzv__handle_heartbeat(struct peer *p, const struct rdzv_heartbeat *hb);
void rdzv__handle_rejoin(struct peer *p, const struct rdzv_rejoin *rj);
void rdzv__handle_ckpt(struct peer *p, const struct rdzv_ckpt *ck);
void rdzv__handle_preflight(struct peer *p, const struct rdzv_preflight *pf);
void rdzv__handle_goodput(struct peer *p, const struct rdzv_goodput *g);

/* handler_repl.c: checkpoint replicas relayed between agents of one job */
void rdzv__handle_repl_begin(struct peer *p, const struct rdzv_repl_begin *b);
void rdzv__handle_repl_data(struct peer *p, const struct rdzv_msg *m);
void rdzv__handle_repl_ack(struct peer *p, const struct rdzv_repl_ack *a);

/* handler_kv.c: worker and observer messages */
void rdzv__handle_attach(struct peer *p, const struct rdzv_attach *a);
void rdzv__handle_kv(struct peer *p, const struct rdzv_msg *m);
void rdzv__handle_status_req(struct peer *p, const struct rdzv_status_req *r);

/* handler_log.c: one log for the job */
void rdzv__handle_log(struct peer *p, const struct rdzv_log *l);
void rdzv__handle_logs_req(struct peer *p, const struct rdzv_logs_req *q);
/* sj is dropped: its log moves to the server's ended logs (RDZV_LOG_KEEP_*). */
void rdzv__log_keep(struct sjob *sj);
/* GET /logs: the newest n lines of rank (-1 all) of job job_id, running or ended, as JSON
 * {"job", "rank", "dropped", "ended", "lines": [{"seq", "time_ms", "rank", "stream", "text"}]}
 * (malloc'd; free() it). NULL with *status 404 (no such job), 400 (no such rank) or 500. */
char *rdzv__log_tail(struct rdzv_server *srv, const char *job_id, int32_t rank, size_t n,
                     int *status);

/* handler_tel.c: GPU telemetry of a member's node */
void rdzv__handle_telemetry(struct peer *p, const struct rdzv_telemetry *t);

/* handler_ev.c: evidence of failures and hangs, `muster debug` */
void rdzv__handle_evidence(struct peer *p, const struct rdzv_evidence *e);
void rdzv__handle_debug_req(struct peer *p, const struct rdzv_debug_req *r);
/* A FAILED that asks for evidence first: returns 1 when it is kept for the verdict (the
 * round goes on until every rank's evidence is in), 0 when it takes its course at once. */
int rdzv__ev_failed(struct peer *p, const struct rdzv_failure *f);
/* p leaves sj (it may be the reporter of the failure being judged). */
void rdzv__ev_member_gone(struct sjob *sj, struct peer *p);
/* sj is dropped: its evidence goes. */
void rdzv__ev_free(struct sjob *sj);

#endif
