/* `muster-preflight p2p` (docs/PREFLIGHT.md "What runs"): the peer-to-peer bandwidth matrix of this
 * node's GPUs. */
#ifndef MUSTER_PREFLIGHT_P2P_RUN_H
#define MUSTER_PREFLIGHT_P2P_RUN_H

/* Test-only: MUSTER_PREFLIGHT_SIMULATE_SLOW_P2P=<src>:<dst>:<factor> scales the measured
 * figure of that ordered pair by factor (0 < factor <= 1), so the "pair named as slow" path
 * runs on a healthy host (tests/gpu/preflight_p2p.sh). Never set it in a real job. */
#define PF_SIMULATE_SLOW_P2P_ENV "MUSTER_PREFLIGHT_SIMULATE_SLOW_P2P"

/* argv[0] is "p2p". Times cudaMemcpyPeerAsync between every ordered pair of CUDA devices
 * 0..N-1 (N = --devices, default all visible) with events on the source's stream, peer access
 * enabled where cudaDeviceCanAccessPeer allows (otherwise the copy is staged by the driver,
 * and "peer_access" says so), and writes one JSON object to --out (or stdout):
 *   {"gpus": [{"index", "uuid", "pci"}], "bytes", "iters", "warmup",
 *    "gbps": [[...]] (row = source, column = destination, 0 on the diagonal),
 *    "peer_access": [[0/1...]], "simulated_slow": "S:D:F" (when set)}
 * With fewer than 2 devices: {"gpus": [...], "skipped": "..."} and no figures. Returns
 * PFG_EXIT_OK, PFG_EXIT_USAGE, PFG_EXIT_START (CUDA cannot start) or PFG_EXIT_CHECK (a CUDA
 * error during a copy: the JSON then carries "error"). */
int pf_p2p_main(int argc, char **argv);

/* Parses "S:D:F"; returns F when (S, D) == (src, dst) and 0 < F <= 1, else 1. */
double pf_p2p_slow_factor(const char *value, int src, int dst);

#endif
