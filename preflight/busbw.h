/* Pre-flight arithmetic shared by muster-preflight and its tests: the nccl-tests bandwidth
 * formulas, the message-size sweep, size parsing, and the exactly-checkable all-reduce data.
 * Pure C (no CUDA), so it builds and is unit-tested on machines without a GPU. */
#ifndef MUSTER_PREFLIGHT_BUSBW_H
#define MUSTER_PREFLIGHT_BUSBW_H

#include <stddef.h>
#include <stdint.h>

/* Algorithm bandwidth in GB/s (1e9 bytes), as nccl-tests' AllReduceGetBw: bytes / 1e9 / seconds.
 * Returns 0 when seconds <= 0 or bytes < 0 (so a report never carries inf or NaN). */
double pf_algbw_gbps(double bytes, double seconds);

/* Bus bandwidth of an all-reduce: algbw * 2(n-1)/n (nccl-tests, doc/PERFORMANCE.md). For
 * nranks == 1 the factor is 0, as in nccl-tests, so busbw is 0: nothing crosses a bus.
 * nranks < 1 also gives 0. */
double pf_busbw_allreduce(double algbw, int nranks);

/* --preflight-min-busbw against the busbw at the largest size. With one rank an
 * all-reduce moves no data (busbw is 0 and algbw only times a local copy), so a floor cannot
 * apply: judging it would fail every one-GPU job. */
enum pf_busbw_verdict {
    PF_BUSBW_NO_FLOOR = 0, /* min_busbw <= 0: no floor given */
    PF_BUSBW_ONE_RANK,     /* nranks < 2: floor given but not applied (say so) */
    PF_BUSBW_OK,           /* busbw >= min_busbw */
    PF_BUSBW_BELOW         /* busbw < min_busbw: the pre-flight fails */
};
enum pf_busbw_verdict pf_busbw_judge(int nranks, double busbw, double min_busbw);

/* Fills out[] with min, min*factor, min*factor^2, ... while <= max, then max itself if the last
 * one was below it (max is always the last entry, even when it is not min * factor^k).
 * Returns the number of entries (>= 1), -EINVAL for min == 0, min > max or factor < 2, or
 * -ENOSPC when cap entries are not enough (out[] then holds the first cap). */
int pf_size_sweep(uint64_t min, uint64_t max, unsigned factor, uint64_t *out, int cap);

/* Parses a byte size: decimal digits, then optionally K, M, G (binary: 2^10, 2^20, 2^30) or
 * KiB, MiB, GiB, case-insensitive, also "B" alone. No sign, spaces or fractions. Sets *out and
 * returns 0, or -EINVAL for NULL, empty, junk, a sign, or a value over UINT64_MAX. */
int pf_parse_size(const char *s, uint64_t *out);

/* The correctness data: element i of communicator rank r out of n holds pf_check_value(r, n, i);
 * after an all-reduce sum every element must equal pf_check_expected(n, i) exactly. Every value,
 * partial sum and total is an integer below 2^24, so float sums are exact in any order (tree,
 * ring, NVLS). For n up to ~2200 the values differ per rank: (r + 1) + (i % 7) * 1024; beyond
 * that (where r + 1 would no longer sum exactly) every rank holds 1 + (i % 7). */
float pf_check_value(int r, int n, size_t i);
float pf_check_expected(int n, size_t i);

#endif
