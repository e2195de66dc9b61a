/* GPU telemetry (docs/TELEMETRY.md): a joined member's agent reports its own node's GPUs with
 * TELEMETRY; the server keeps the latest sample per connection (the node) for /status and
 * /metrics, and the job's warnings, each once. The message names no node: the sender's
 * connection is the node, so an agent cannot speak for another one. */
#include <stdlib.h>
#include <string.h>

#include "handler.h"
#include "sjob.h"

/* Adds w to the job's warnings unless it is there already (at most SJOB_WARN_MAX). */
static void add_warning(struct sjob *sj, const char *w)
{
    if (w[0] == '\0')
        return;
    for (unsigned i = 0; i < sj->n_warnings; i++)
        if (strcmp(sj->warnings[i], w) == 0)
            return;
    if (sj->n_warnings >= SJOB_WARN_MAX)
        return;
    if (sj->warnings == NULL &&
        (sj->warnings = calloc(SJOB_WARN_MAX, sizeof(sj->warnings[0]))) == NULL)
        return;
    memcpy(sj->warnings[sj->n_warnings], w, strnlen(w, RDZV_TEL_WARN_LEN));
    sj->n_warnings++;
}

void rdzv__handle_telemetry(struct peer *p, const struct rdzv_telemetry *t)
{
    struct sjob *sj = p->job;

    if (sj == NULL) {
        rdzv__peer_event(p, SRV_EV_PROTOCOL, "TELEMETRY before JOIN");
        rdzv__send_error(p, RDZV_ERR_PROTOCOL,
                         "TELEMETRY before JOIN: only a joined agent may report its node's GPUs");
        return;
    }
    if (rdzv_job_find(sj->job, p) < 0)
        return; /* a spare or a node waiting for a round: it holds no ranks to report on */
    if (p->tel == NULL && (p->tel = malloc(sizeof(*p->tel))) == NULL)
        return; /* out of memory: telemetry is display only */
    memcpy(p->tel, t, sizeof(*t));
    for (uint32_t i = 0; i < t->nwarn; i++)
        add_warning(sj, t->warn[i]);
}
