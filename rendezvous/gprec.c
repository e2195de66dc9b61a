#include "gprec.h"

#include "escape.h"

static const char *const phase_names[RDZV_GP_NPHASES] = {
    [RDZV_GP_RENDEZVOUS] = "rendezvous", [RDZV_GP_PREFLIGHT] = "preflight",
    [RDZV_GP_STARTUP] = "startup",       [RDZV_GP_TRAINING] = "training",
    [RDZV_GP_STOPPING] = "stopping",     [RDZV_GP_RESTART_WAIT] = "restart_wait",
};

const char *rdzv_goodput_phase_name(int phase)
{
    return phase >= 0 && phase < RDZV_GP_NPHASES ? phase_names[phase] : "?";
}

const char *rdzv_goodput_check(const struct rdzv_goodput *g)
{
    uint64_t sum = 0;

    /* each bounded first: the sum of six figures under RDZV_GP_MAX_MS cannot wrap */
    if (g->wall_ms > RDZV_GP_MAX_MS || g->lost_ms > RDZV_GP_MAX_MS)
        return "a figure over ten years";
    for (int i = 0; i < RDZV_GP_NPHASES; i++) {
        if (g->phase_ms[i] > RDZV_GP_MAX_MS)
            return "a figure over ten years";
        sum += g->phase_ms[i];
    }
    if (sum != g->wall_ms)
        return "wall_ms is not the sum of the phases";
    if (g->lost_ms > g->phase_ms[RDZV_GP_TRAINING])
        return "lost_ms over training_ms";
    return NULL;
}

double rdzv_goodput_ratio(const struct rdzv_goodput *g)
{
    uint64_t train = g->phase_ms[RDZV_GP_TRAINING];

    if (g->wall_ms == 0 || g->lost_ms > train)
        return 0;
    return (double)(train - g->lost_ms) / (double)g->wall_ms;
}

json_t *rdzv_goodput_json(const struct rdzv_goodput *g, const char *host)
{
    json_t *s = json_object();
    json_t *o;

    if (s == NULL)
        return NULL;
    for (int i = 0; i < RDZV_GP_NPHASES; i++)
        json_object_set_new(s, phase_names[i], json_real(g->phase_ms[i] / 1000.0));
    o = json_pack("{s:s, s:I, s:I, s:f, s:o, s:f, s:f}", "host", host, "round",
                  (json_int_t)g->round, "restarts", (json_int_t)g->restarts, "wall_s",
                  g->wall_ms / 1000.0, "seconds", s, "lost_s", g->lost_ms / 1000.0, "ratio",
                  rdzv_goodput_ratio(g));
    return o;
}

static void sample(FILE *f, const char *job_id, const char *phase, double v)
{
    fputs("muster_job_seconds{job=\"", f);
    mc_prom_label(f, job_id);
    fprintf(f, "\",phase=\"%s\"} %.15g\n", phase, v);
}

void rdzv_goodput_metrics(FILE *f, const char *job_id, const struct rdzv_goodput *g, int ratio)
{
    if (ratio) {
        fputs("muster_job_goodput_ratio{job=\"", f);
        mc_prom_label(f, job_id);
        fprintf(f, "\"} %.6g\n", rdzv_goodput_ratio(g));
        return;
    }
    for (int i = 0; i < RDZV_GP_NPHASES; i++)
        sample(f, job_id, phase_names[i], g->phase_ms[i] / 1000.0);
    sample(f, job_id, "lost", g->lost_ms / 1000.0);
    sample(f, job_id, "wall", g->wall_ms / 1000.0);
}
