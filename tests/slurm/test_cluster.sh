#!/bin/bash
# The test cluster itself: munged, slurmctld and three slurmd come up, `srun -N3 hostname` runs
# one task on each node (n1 n2 n3, each resolving the others), and everything is gone afterwards.
. "$(dirname "$0")/cluster.sh"

sl_start
out=$(sl srun -N3 --ntasks-per-node=1 -t 1 bash -c 'echo "$(hostname) $SLURM_NODEID $(getent hosts n1 | cut -d" " -f1)"' 2>&1) ||
    { echo "$out" >&2; sl_fail "srun -N3 hostname failed"; }
note "srun: $(echo "$out" | tr '\n' ';')"
for k in 1 2 3; do
    echo "$out" | grep -q "^n$k $((k - 1)) ${HOST_ADDR[1]}\$" || { echo "$out" >&2; sl_fail "no line from n$k"; }
done
