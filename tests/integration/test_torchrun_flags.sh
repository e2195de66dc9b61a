#!/bin/bash
# torchrun's command line as torchrun users write it: argparse prefixes (--nproc=2),
# --master-addr passed on as written, NCCL_ASYNC_ERROR_HANDLING beside the TORCH_ one,
# --virtual-local-rank, --logs-specs default, notes for the flags muster has no use for, and
# --numa-binding: on this machine, and on a fake 2-node sysfs (MUSTER_SYSFS_ROOT), where each
# worker's /proc/self/status Cpus_allowed_list must be its node's CPUs.
. "$(dirname "$0")/lib.sh"

cat > "$T/w.sh" <<'W'
#!/bin/sh
env > "$1/env.$RANK"
grep '^Cpus_allowed_list:' /proc/self/status | cut -f2 > "$1/cpus.$RANK"
W
chmod +x "$T/w.sh"

# ---- environment ----
D="$T/env"; mkdir -p "$D"
mrun -u TORCH_NCCL_ASYNC_ERROR_HANDLING -u NCCL_ASYNC_ERROR_HANDLING CUDA_VISIBLE_DEVICES=3,5 -- \
    run --nproc=2 --master-addr localhost --virtual-local-rank --logs-specs default \
    --monitor_interval 5 --no-python "$T/w.sh" "$D"
expect_rc "muster --nproc=2 --master-addr localhost --virtual-local-rank" 0
for r in 0 1; do
    [ -f "$D/env.$r" ] || { show_output; fail "rank $r did not run"; }
    expect_eq "MASTER_ADDR of rank $r" localhost "$(envval "$D/env.$r" MASTER_ADDR)"
    expect_eq "NCCL_ASYNC_ERROR_HANDLING of rank $r" 1 "$(envval "$D/env.$r" NCCL_ASYNC_ERROR_HANDLING)"
    expect_eq "TORCH_NCCL_ASYNC_ERROR_HANDLING of rank $r" 1 \
        "$(envval "$D/env.$r" TORCH_NCCL_ASYNC_ERROR_HANDLING)"
    expect_eq "LOCAL_RANK of rank $r (virtual)" 0 "$(envval "$D/env.$r" LOCAL_RANK)"
    expect_eq "LOCAL_WORLD_SIZE of rank $r" 2 "$(envval "$D/env.$r" LOCAL_WORLD_SIZE)"
done
expect_eq "CUDA_VISIBLE_DEVICES of rank 0" 3 "$(envval "$D/env.0" CUDA_VISIBLE_DEVICES)"
expect_eq "CUDA_VISIBLE_DEVICES of rank 1" 5 "$(envval "$D/env.1" CUDA_VISIBLE_DEVICES)"
grep -q '^muster: note: --monitor_interval does nothing' "$T/err" ||
    { show_output; fail "no note that --monitor-interval does nothing"; }

# an inherited NCCL_ASYNC_ERROR_HANDLING is the worker's, untouched
D="$T/env2"; mkdir -p "$D"
mrun -u TORCH_NCCL_ASYNC_ERROR_HANDLING NCCL_ASYNC_ERROR_HANDLING=0 -- \
    run --standalone --no-python "$T/w.sh" "$D"
expect_rc "muster with NCCL_ASYNC_ERROR_HANDLING=0" 0
expect_eq "inherited NCCL_ASYNC_ERROR_HANDLING" 0 "$(envval "$D/env.0" NCCL_ASYNC_ERROR_HANDLING)"
expect_eq "TORCH_NCCL_ASYNC_ERROR_HANDLING" 1 "$(envval "$D/env.0" TORCH_NCCL_ASYNC_ERROR_HANDLING)"

# refused with the reason, nothing started
mrun -- run --standalone --logs-specs custom --no-python "$T/w.sh" "$T"
expect_rc "--logs-specs custom" 2
mrun -- run --standalone --rdzv "x" --no-python "$T/w.sh" "$T"
expect_rc "--rdzv (ambiguous)" 2
grep -q 'ambiguous option: --rdzv could match' "$T/err" || { show_output; fail "ambiguity not explained"; }

# ---- --numa-binding on this machine ----
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
D="$T/numa"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 2 --numa-binding node --dry-run --no-python "$T/w.sh" "$D"
expect_rc "--numa-binding node --dry-run" 0
if [ "$nodes" -le 1 ]; then
    grep -q '^# one NUMA node on this machine' "$T/out" || { show_output; fail "dry-run: no one-node note"; }
else
    [ "$(grep -c '^# numa_binding=node: cpus ' "$T/out")" = 2 ] || { show_output; fail "dry-run: no bindings"; }
fi
mrun -- run --standalone --nproc-per-node 2 --numa-binding node --no-python "$T/w.sh" "$D"
expect_rc "--numa-binding node" 0
[ -f "$D/cpus.0" ] && [ -f "$D/cpus.1" ] || { show_output; fail "--numa-binding node: workers did not run"; }

# ---- a fake 2-node machine: node0 = CPU A, node1 = CPU B, one GPU on each ----
allowed=$(grep '^Cpus_allowed_list:' /proc/self/status | cut -f2)
cpus=()
IFS=, read -ra parts <<<"$allowed"
for p in "${parts[@]}"; do
    lo=${p%-*} hi=${p#*-}
    for ((c = lo; c <= hi && ${#cpus[@]} < 2; c++)); do cpus+=("$c"); done
done
[ "${#cpus[@]}" -ge 2 ] || { note "fewer than 2 CPUs allowed ($allowed): fake 2-node test skipped"; exit 0; }
A=${cpus[0]} B=${cpus[1]}
S="$T/sys"
for n in 0 1; do mkdir -p "$S/devices/system/node/node$n"; done
echo "$A" > "$S/devices/system/node/node0/cpulist"
echo "$B" > "$S/devices/system/node/node1/cpulist"
fake_gpu() { # BDF NODE
    mkdir -p "$S/bus/pci/drivers/nvidia/$1" "$S/bus/pci/devices/$1"
    echo "$2" > "$S/bus/pci/devices/$1/numa_node"
}
fake_gpu 0000:3b:00.0 0
fake_gpu 0000:86:00.0 1
for mode in node socket; do
    D="$T/fake-$mode"; mkdir -p "$D"
    mrun -u CUDA_VISIBLE_DEVICES MUSTER_SYSFS_ROOT="$S" -- \
        run --standalone --nproc-per-node 2 --numa-binding $mode --no-python "$T/w.sh" "$D"
    expect_rc "--numa-binding $mode on the fake 2-node sysfs" 0
    expect_eq "$mode: CPUs of local rank 0 (GPU 0, node 0)" "$A" "$(cat "$D/cpus.0")"
    expect_eq "$mode: CPUs of local rank 1 (GPU 1, node 1)" "$B" "$(cat "$D/cpus.1")"
done
# CUDA_VISIBLE_DEVICES=1,0: local rank 0 drives GPU 1, on node 1
D="$T/fake-cvd"; mkdir -p "$D"
mrun MUSTER_SYSFS_ROOT="$S" CUDA_VISIBLE_DEVICES=1,0 -- \
    run --standalone --nproc-per-node 2 --numa-binding node --no-python "$T/w.sh" "$D"
expect_rc "--numa-binding node, CUDA_VISIBLE_DEVICES=1,0" 0
expect_eq "CPUs of local rank 0 (GPU 1)" "$B" "$(cat "$D/cpus.0")"
expect_eq "CPUs of local rank 1 (GPU 0)" "$A" "$(cat "$D/cpus.1")"
# exclusive: both GPUs on node 0, which now has both CPUs: one each
echo "$A,$B" > "$S/devices/system/node/node0/cpulist"
echo 0 > "$S/bus/pci/devices/0000:86:00.0/numa_node"
D="$T/fake-excl"; mkdir -p "$D"
mrun -u CUDA_VISIBLE_DEVICES MUSTER_SYSFS_ROOT="$S" -- \
    run --standalone --nproc-per-node 2 --numa-binding exclusive --dry-run --no-python "$T/w.sh" "$D"
expect_rc "--numa-binding exclusive --dry-run" 0
grep -q "^# numa_binding=exclusive: cpus $A\$" "$T/out" || { show_output; fail "exclusive: rank 0 not on CPU $A"; }
grep -q "^# numa_binding=exclusive: cpus $B\$" "$T/out" || { show_output; fail "exclusive: rank 1 not on CPU $B"; }
mrun -u CUDA_VISIBLE_DEVICES MUSTER_SYSFS_ROOT="$S" -- \
    run --standalone --nproc-per-node 2 --numa-binding exclusive --no-python "$T/w.sh" "$D"
expect_rc "--numa-binding exclusive" 0
expect_eq "exclusive: CPUs of local rank 0" "$A" "$(cat "$D/cpus.0")"
expect_eq "exclusive: CPUs of local rank 1" "$B" "$(cat "$D/cpus.1")"
exit 0
