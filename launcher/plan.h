/* The batch-size planner for shared-GPU runs: pure arithmetic, size parsing and the probe file.
 *
 * The rule (seed document, "Batch size sizing rule"):
 *     available per process = (M_gpu / N_proc) x F
 *     max batch             = floor((available - M_static) / M_sample)
 *     starting batch        = floor(0.8 x max batch)
 * Nothing here touches a GPU or a process; `muster plan` (plan_cmd.c) gathers the numbers. */
#ifndef MUSTER_LAUNCHER_PLAN_H
#define MUSTER_LAUNCHER_PLAN_H

#include <stddef.h>

#define LAUNCHER_PLAN_GIB (1024.0 * 1024.0 * 1024.0)
#define LAUNCHER_PLAN_MIB (1024.0 * 1024.0)
/* The starting batch is this share of the maximum (the seed: 240 -> 192). */
#define LAUNCHER_PLAN_START_SHARE 0.8
/* Largest size launcher_parse_mem accepts: 2^62 bytes (4 EiB), far beyond any GPU, and small
 * enough that every byte count converts to a 64-bit integer exactly enough for JSON. */
#define LAUNCHER_PLAN_MEM_MAX 4611686018427387904.0
/* A larger max batch means per-sample memory is nonsense (e.g. 1 byte on 48 GiB). */
#define LAUNCHER_PLAN_BATCH_MAX 1000000000000L

struct launcher_plan_in {
    double gpu_mem;    /* M_gpu: the GPU's total memory, bytes */
    double static_mem; /* M_static: model + gradients + optimizer state, bytes */
    double per_sample; /* M_sample: activation memory of one sample, bytes */
    double safety;     /* F, in (0, 1] */
    unsigned procs;    /* N_proc, processes sharing the GPU */
};

struct launcher_plan_out {
    double per_proc;  /* (M_gpu / N_proc) x F, bytes */
    long max_batch;   /* >= 1 */
    long start_batch; /* floor(0.8 x max_batch), at least 1 */
};

/* What a probe run measured (the JSON the worker writes to MUSTER_PROBE_FILE). */
struct launcher_plan_probe {
    double static_bytes; /* memory allocated after model + optimizer state exist */
    double peak_bytes;   /* peak allocated during one forward + backward at `batch` */
    long batch;          /* the probe batch size, >= 1 */
    double per_sample;   /* (peak_bytes - static_bytes) / batch */
    double total_bytes;  /* the GPU's total memory as torch saw it; 0 when the file lacks it */
};

/* Parses a size: a non-negative decimal number ("48", "0.04", ".5") with an optional binary unit
 * K/M/G/T, KiB/MiB/GiB/TiB or B (letters in any case, one optional space before the unit), e.g.
 * "48GiB", "48G", "4096MiB", "512M", "1.5T", "1000000". "GB"/"MB" are refused: they would be
 * ambiguous between 10^9 and 2^30. Sets *bytes and returns 0, or returns -EINVAL (sign, junk,
 * empty, hex, inf/nan, above LAUNCHER_PLAN_MEM_MAX) and leaves *bytes alone. Borrows s. */
int launcher_parse_mem(const char *s, double *bytes);

/* floor() that forgives floating-point error just below an integer: (13.6 - 4) / 0.04 computes
 * to 239.99999999999997 and must give 240. Adds 1e-9 relative (at least 1e-9 absolute). */
double launcher_plan_floor(double x);

/* Applies the rule. Returns 0 and fills *out, or -EINVAL with a one-line reason in err (errlen
 * bytes, always NUL-terminated when errlen > 0): no processes, safety factor outside (0, 1],
 * GPU memory or per-sample memory not above zero, negative static memory, static memory that
 * does not fit in one process's share, or a share that leaves room for no sample at all.
 * Borrows in, out and err. */
int launcher_plan_compute(const struct launcher_plan_in *in, struct launcher_plan_out *out,
                          char *err, size_t errlen);

/* Parses the probe file's text: {"static_bytes": N, "peak_bytes": N, "batch": B,
 * "total_bytes": N (optional)}. Returns 0 and fills *out, or -EINVAL with a one-line reason in
 * err: not JSON / not an object, a missing or non-numeric field, negative bytes, batch not an
 * integer >= 1, peak not above static. Borrows everything. */
int launcher_plan_from_probe(const char *json_text, struct launcher_plan_probe *out, char *err,
                             size_t errlen);

/* Formats bytes for people: "13.6 GiB" from 1 GiB up, "41.0 MiB" from 1 MiB, then KiB, then
 * "512 B". Returns buf. */
const char *launcher_plan_fmt_size(double bytes, char *buf, size_t len);

#endif
