#!/bin/bash
# The chaos run, short schedule: 3 network-namespace hosts + a server host, the real
# PyTorch client (examples/pytorch/train_ckpt.py, gloo, deterministic), about 10 seeded random
# faults (worker kill -9, agent kill -9 + restart, worker SIGSTOP, newest checkpoint corrupted,
# server kill -9 + restart, link cut). The job must finish with weights bit-identical to a
# fault-free run's, every agent exits 0, no process is left, no recorded checkpoint is lost.
# See chaos.sh for the details and the CHAOS_* variables (CHAOS_SEED=N reruns a schedule).
# Heavy: a reference run (computed once, then kept in build/tests/cache under a hash of its
# inputs: chaos.sh ch_ref_key) plus the chaos run, about 2-3 minutes on 2 cores.
. "$(dirname "$0")/ft.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"
. "$(dirname "$0")/chaos.sh"

chaos_main
exit 0
