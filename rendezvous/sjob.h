/* Jobs on the server (sjob.c: the round logic of job.h driven by the members' connections, its
 * timer, broadcasts) and the relay's per-job table (handler_repl.c), for the handlers and the
 * dispatcher above; below them all is service.h. */
#ifndef MUSTER_RDZV_SJOB_H
#define MUSTER_RDZV_SJOB_H

#include "service.h"

/* sjob.c */
struct sjob *rdzv__sjob_find(struct rdzv_server *srv, const char *id);
int rdzv__sjob_new(struct rdzv_server *srv, const struct rdzv_join *j, struct rdzv__scope *scope,
                   struct sjob **out);
void rdzv__sjob_drop(struct sjob *sj);
void rdzv__sjob_apply(struct sjob *sj, enum rdzv_job_event ev);
void rdzv__sjob_arm(struct sjob *sj);
void rdzv__sjob_attach(struct sjob *sj, struct peer *p);
int rdzv__sjob_worker_admit(struct sjob *sj, struct peer *p);
void rdzv__sjob_detach(struct sjob *sj, struct peer *p, const char *reason);

/* handler_repl.c: ends every relayed transfer of agent p (its connection goes), telling the
 * other side */
void rdzv__repl_forget(struct sjob *sj, struct peer *p);

#endif
