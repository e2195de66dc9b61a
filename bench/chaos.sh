#!/bin/bash
# The long chaos run: the driver of tests/integration/test_chaos.sh with 100 faults.
# Root, network namespaces and Debian's python3-torch needed; prints one summary line
#
#     chaos: seed=S faults=N/100 worker_kill=.. ... wall_s=.. ref_wall_s=.. lost_per_fault_s=..
#            params=.. ref_params=.. identical=yes|no restarts=..
#
# and exits 0 when the run passed every check of test_chaos (bit-identical weights, agents exit
# 0, nothing left running, no recorded checkpoint lost).
#
#     sudo MUSTER_BIN=build/muster SEED=4242 FAULTS=100 bench/chaos.sh 2>&1 | tee chaos.log
#
# Environment: SEED (default random, printed), FAULTS (100), STEPS (default 5 x FAULTS + 150:
# the job must outlive the schedule), and every CHAOS_* variable of tests/integration/chaos.sh.
# IT_KEEP=1 keeps the logs (the path is printed).
export CHAOS_SEED=${SEED:-${CHAOS_SEED:-$(( $(date +%s%N) % 32768 ))}}
export CHAOS_FAULTS=${FAULTS:-${CHAOS_FAULTS:-100}}
export CHAOS_STEPS=${STEPS:-${CHAOS_STEPS:-$(( CHAOS_FAULTS * 5 + 150 ))}}
export CHAOS_WALL_S=${CHAOS_WALL_S:-7200}
export MUSTER_SRC=${MUSTER_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
# lib.sh names the test after $0; keep the bench's own name in its messages
. "$MUSTER_SRC/tests/integration/ft.sh"
. "$MUSTER_SRC/tests/integration/multi.sh"
. "$MUSTER_SRC/tests/integration/netns.sh"
. "$MUSTER_SRC/tests/integration/chaos.sh"

chaos_main
exit 0
