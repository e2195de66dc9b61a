/* Runtime GPU telemetry (docs/TELEMETRY.md): every --gpu-telemetry period the agent samples
 * its node's GPUs through NVML, loaded with dlopen (MUSTER_NVML_LIBRARY names another library,
 * for tests; default libnvidia-ml.so.1), off the event loop (uv_queue_work: an NVML call can
 * block). Each GPU's compute processes are mapped to ranks by the workers' PIDs, a descendant
 * of a worker counting as that worker's. The sample goes to the server as TELEMETRY, with the
 * warnings found so far; each warning is logged once per job on the agent's console.
 *
 * No library, no nvmlInit, or no GPU: nothing is sampled, sent or logged, and the timer stops. */
#ifndef MUSTER_AGENT_TELEMETRY_H
#define MUSTER_AGENT_TELEMETRY_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "message.h"

#define AGENT_TELEM_WORKERS_MAX 256
/* A GPU without the process of its rank is named once the attempt has run this long;
 * MUSTER_TELEMETRY_GRACE_MS replaces it (tests). */
#define AGENT_TELEM_GRACE_MS 60000
#define AGENT_TELEM_GPU_OWN (-1)
#define AGENT_TELEM_GPU_GIVEN (-2)
/* A worker using this close to its memory cap (in % of it) is warned of. */
#define AGENT_TELEM_CAP_PCT 5

/* One running worker: its pid and ranks. Shared-GPU mode (agent/shared.c) names each task by
 * its index (rank and local rank), the GPU it was given and its memory cap. */
struct agent_telem_worker {
    pid_t pid;
    int rank, local_rank;
    int gpu; /* the NVML index of the GPU it was given; AGENT_TELEM_GPU_OWN: its local rank's;
              * AGENT_TELEM_GPU_GIVEN: one it was given, index unknown (a UUID) */
    uint64_t cap_bytes; /* its memory cap (MPS's pinned limit); 0: cap_frac of its GPU's */
    double cap_frac;    /* its share of its GPU's memory (--gpu-mem-fraction / K); 0: no cap */
};

struct agent_telem_io {
    /* sends one TELEMETRY (m borrowed); its result is ignored: the next sample follows */
    int (*send)(void *ctx, const struct rdzv_msg *m);
    /* the running workers into w (at most cap); returns how many */
    int (*workers)(void *ctx, struct agent_telem_worker *w, int cap);
    void *ctx;
};

struct agent_telem;

/* Starts sampling every period_ms (> 0). host names the node in the warnings. io->send may be
 * NULL (shared-GPU mode: no server, the console only). NULL when out of memory (the job runs
 * without telemetry). */
struct agent_telem *agent_telem_new(uv_loop_t *loop, unsigned period_ms, const char *host,
                                    const struct agent_telem_io *io);

/* An attempt's workers started at now_ms (uv_now): the grace of the "no process" warning runs
 * from here. */
void agent_telem_attempt(struct agent_telem *t, uint64_t now_ms);

/* Stops sampling; t is freed once its timer and any sample in flight are done. */
void agent_telem_close(struct agent_telem *t);

/* One warning: key names the finding (the same finding, the same key: it is logged once per
 * job), text is the line shown on the console and in /status. */
struct agent_telem_finding {
    char key[32];
    char text[RDZV_TEL_WARN_LEN + 1];
};

/* The warnings of one sample (pure, for the unit tests): s with procs[].rank mapped, the
 * node's nw workers, host for the text, ran_ms: how long the attempt has run (the "no process"
 * warning waits grace_ms). Writes at most cap findings; returns how many. */
int agent_telem_findings(const struct rdzv_telemetry *s, const struct agent_telem_worker *w, int nw,
                         const char *host, uint64_t ran_ms, uint64_t grace_ms,
                         struct agent_telem_finding *out, int cap);

#endif
