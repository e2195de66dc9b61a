#!/bin/bash
# Checkpoint replication on network-namespace hosts joined by veth links and a bridge:
#   1. throughput: a MB-megabyte checkpoint replicated from host 1 (group rank 0) to host 2 on
#      the direct agent-to-agent link (--replicate-bandwidth 0: no cap; the server on host 3
#      only starts it), against raw TCP on the same links (python sendfile host 1 -> host 2,
#      and host 1 -> host 3 -> host 2 through a plain-TCP relay, the path of muster's fallback
#      relay, and host 1 -> host 2 into a file on the receiver's disk, fsynced: the ceiling of a
#      replica, which lands there), the median of REPS runs each;
#   2. step time of a synthetic trainer (bench/replicate_step.py: 2 ranks, fixed work per step,
#      a CKPT_MB checkpoint every EVERY steps) without and with --replicate-checkpoints 1 at the
#      default --replicate-bandwidth.
# Root needed. Prints one line per figure and a summary:
#     replicate_bench: relay_mb_s=.. raw_tcp_mb_s=.. raw_relay_mb_s=.. raw_tcp_disk_mb_s=..
#                      ratio=..% ratio_disk=..% streams=.. mb=.. (part 1 only), or step_ms_off=..
#                      step_ms_on=.. step_slowdown=..%
#     sudo MUSTER_BIN=build/muster bench/replicate_bench.sh
# Environment: MB (200), REPS (3), STEPS (60), EVERY (10), CKPT_MB (50), BW (replication cap
# of part 2 in MB/s; default: muster's), SKIP_THROUGHPUT=1 (part 2 only), SKIP_STEPS=1 (part 1
# only: no PyTorch needed), MUSTER_REPLICATE_STREAMS (bulk streams per copy; 0: the chunks on
# the TLS link), TMPDIR (where the hosts' directories are: its disk is the receiver's).
export MUSTER_SRC=${MUSTER_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
. "$MUSTER_SRC/tests/integration/ft.sh"
. "$MUSTER_SRC/tests/integration/multi.sh"
. "$MUSTER_SRC/tests/integration/netns.sh"

MB=${MB:-200}
REPS=${REPS:-3}
STEPS=${STEPS:-60}
EVERY=${EVERY:-10}
CKPT_MB=${CKPT_MB:-50}
STEP_PY="$MUSTER_SRC/bench/replicate_step.py"
ns_job rbench 3 3
say() { echo "replicate_bench: $*" >&2; }
median() { sort -n | awk '{a[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.0f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

relay=n/a raw=n/a rawrelay=n/a rawdisk=n/a
if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
# --- 1a. raw TCP: python's sendfile of the same file, receiver counts bytes -----------------
head -c ${MB}M /dev/urandom > "$T/blob"
cat > "$T/sink.py" <<'EOP'
import os, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
c, _ = s.accept(); n = 0; t = None; buf = bytearray(1 << 20)
out = open(sys.argv[3], "wb", buffering=0) if len(sys.argv) > 3 else None
while True:
    k = c.recv_into(buf)
    if t is None: t = time.perf_counter()
    if not k: break
    if out: out.write(memoryview(buf)[:k])
    n += k
if out: os.fsync(out.fileno()); out.close()  # kept: a replica is kept, and its pages stay used
print(f"{n} {time.perf_counter() - t:.6f}", flush=True)
EOP
cat > "$T/relay.py" <<'EOP'
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
c, _ = s.accept(); o = socket.create_connection((sys.argv[3], int(sys.argv[4])))
buf = bytearray(1 << 20)
while True:
    k = c.recv_into(buf)
    if not k: break
    o.sendall(memoryview(buf)[:k])
o.close()
EOP
cat > "$T/src.py" <<'EOP'
import socket, sys
o = socket.create_connection((sys.argv[1], int(sys.argv[2])))
with open(sys.argv[3], "rb") as f: o.sendfile(f)
o.close()
EOP
raw_once() { # raw_once relay(0|1) [file] -> MB/s (file: the receiver writes it and fsyncs)
    local port=$((30000 + RANDOM % 20000)) dst=${HOST_ADDR[2]}
    ns_exec 2 python3 "$T/sink.py" "$dst" $port ${2:+"$2"} > "$T/sink.out" &
    local sink=$! to=$dst tport=$port
    sleep 0.3
    if [ "$1" = 1 ]; then
        ns_exec 3 python3 "$T/relay.py" "${HOST_ADDR[3]}" $((port + 1)) "$dst" $port &
        to=${HOST_ADDR[3]} tport=$((port + 1))
        sleep 0.3
    fi
    ns_exec 1 python3 "$T/src.py" "$to" $tport "$T/blob"
    wait $sink
    awk '{printf "%.0f\n", $1 / 1e6 / $2}' "$T/sink.out"
}
cat "$T/blob" > /dev/null # in the page cache, as a just-written checkpoint is
raws=() relays=() disks=()
for i in $(seq "$REPS"); do
    raws+=("$(raw_once 0)")
    relays+=("$(raw_once 1)")
    disks+=("$(raw_once 0 "$T/rawdisk$i.bin")") # as a replica lands: a file on the same disk
done
raw=$(printf '%s\n' "${raws[@]}" | median)
rawrelay=$(printf '%s\n' "${relays[@]}" | median)
rawdisk=$(printf '%s\n' "${disks[@]}" | median)
say "raw TCP host1->host2: ${raws[*]} MB/s (median $raw); through a TCP relay on host 3: ${relays[*]} (median $rawrelay); into a file on the receiver's disk, fsynced: ${disks[*]} (median $rawdisk)"

# --- 1b. muster's replica of the same size -----------------------------------------------------
cat > "$T/big.sh" <<EOW
#!/bin/bash
[ "\$RANK" = 0 ] && cp "$T/blob" "\$MUSTER_CHECKPOINT_DIR/.ckpt_1.bin.tmp" &&
    mv "\$MUSTER_CHECKPOINT_DIR/.ckpt_1.bin.tmp" "\$MUSTER_CHECKPOINT_DIR/ckpt_1.bin"
for i in \$(seq 1200); do [ -e "\$MUSTER_CHECKPOINT_DIR/../release" ] && exit 0; sleep 0.05; done
EOW
chmod +x "$T/big.sh"
replica_or_gone() { # replica_or_gone ERRFILE AGENT... : the replica logged, or no agent left
    grep_in "$1" "replicated to group rank 1" && return 0
    shift
    local a
    for a in "$@"; do kill -0 "${NS_BGPID[$a]}" 2>/dev/null && return 1; done
    return 0
}
rel=()
for i in $(seq "$REPS"); do
    d="$T/r$i"
    mkdir -p "$d"
    for k in 1 2; do
        ns_bg $k r$i-a$k -- "$MUSTER_BIN" run --nnodes 2 --nproc-per-node 1 \
            --rdzv-endpoint "${HOST_ADDR[3]}:$P" --rdzv-id "$JOB-$i" --local-addr "${HOST_ADDR[$k]}" \
            --checkpoint-dir "$d/c$k" --replicate-checkpoints 1 --replicate-bandwidth 0 \
            --preflight off --no-python "$T/big.sh"
        sleep 0.3
    done
    # the replica, or both agents gone (a pre-flight that refused them, say): no 2-minute poll
    wait_for 120 replica_or_gone "$T/r$i-a1.err" r$i-a1 r$i-a2
    grep_in "$T/r$i-a1.err" "replicated to group rank 1" || { cat "$T/r$i-a"*.err >&2; fail "no replica (the agents' output above)"; }
    ms=$(sed -n 's/.*replicated to group rank 1 ([0-9]* bytes in \([0-9]*\) ms.*/\1/p' "$T/r$i-a1.err")
    rel+=("$(( MB * 1048576 / 1000 / ms ))")
    touch "$d/c1/../release"
    agents_exit 30 0 r$i-a1 r$i-a2
done
relay=$(printf '%s\n' "${rel[@]}" | median)
grep -q "ms, direct link" "$T/r1-a1.err" || fail "the replica did not go on the direct link"
say "muster replica host1->host2 on the direct link (bulk streams unless MUSTER_REPLICATE_STREAMS=0): ${rel[*]} MB/s (median $relay)"
fi

if [ "${SKIP_STEPS:-0}" = 1 ]; then
    echo "replicate_bench: relay_mb_s=$relay raw_tcp_mb_s=$raw raw_relay_mb_s=$rawrelay raw_tcp_disk_mb_s=$rawdisk ratio=$(awk -v a="$relay" -v b="$raw" 'BEGIN {printf "%.0f", 100 * a / b}')% ratio_disk=$(awk -v a="$relay" -v b="$rawdisk" 'BEGIN {printf "%.0f", 100 * a / b}')% streams=${MUSTER_REPLICATE_STREAMS:-default} mb=$MB"
    stop_server
    exit 0
fi

# --- 2. trainer step time with and without replication ------------------------------------------
steps_run() { # steps_run TAG EXTRA_ARGS... -> mean step ms
    local tag=$1
    shift
    for k in 1 2; do
        ns_bg $k $tag-a$k PYTHON_EXEC="$TORCH_PY" GLOO_SOCKET_IFNAME=$NS_IF -- "$MUSTER_BIN" run \
            --nnodes 2 --nproc-per-node 1 --rdzv-endpoint "${HOST_ADDR[3]}:$P" \
            --rdzv-id "$JOB-$tag" --local-addr "${HOST_ADDR[$k]}" --checkpoint-dir "$T/$tag/c$k" \
            "$@" "$STEP_PY" "$STEPS" "$EVERY" "$CKPT_MB"
        sleep 0.3
    done
    agents_exit 300 0 $tag-a1 $tag-a2
    sed -n 's/.*steps [0-9]* mean_ms \([0-9.]*\) .*/\1/p' "$T/$tag-a1.out" "$T/$tag-a2.out" | head -1
}
bwarg=()
[ -n "${BW:-}" ] && bwarg=(--replicate-bandwidth "$BW")
offs=() ons=()
for i in 1 2; do
    offs+=("$(steps_run off$i)")
    ons+=("$(steps_run on$i --replicate-checkpoints 1 "${bwarg[@]}")")
    grep -q "replicated to group rank 1" "$T/on$i-a1.err" || fail "run on$i replicated nothing"
done
off=$(printf '%s\n' "${offs[@]}" | sort -n | head -1)
on=$(printf '%s\n' "${ons[@]}" | sort -n | head -1)
say "step ms without replication: ${offs[*]} (best $off); with: ${ons[*]} (best $on)"
ratio=n/a
[ "$raw" = n/a ] || ratio=$(awk -v a="$relay" -v b="$raw" 'BEGIN {printf "%.0f", 100 * a / b}')
slow=$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.1f", 100 * (a - b) / b}')
echo "replicate_bench: relay_mb_s=$relay raw_tcp_mb_s=$raw raw_relay_mb_s=$rawrelay ratio=${ratio}% step_ms_off=$off step_ms_on=$on step_slowdown=${slow}% mb=$MB ckpt_mb=$CKPT_MB every=$EVERY"
stop_server
exit 0
