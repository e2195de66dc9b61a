#!/bin/bash
# Checkpoint replica throughput on the GPU host, CPU only: 16 cores, so the sender
# and the receiver each have cores of their own (on the 2-core build VM they share two with
# the test harness). One command from a clean tree:
#
#   tests/gpu/replica.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster built statically (see tests/gpu/launch.sh). Measures, each 3 times:
#  - on network-namespace hosts (when `ip netns` works here): bench/replicate_bench.sh part 1
#    (SKIP_STEPS=1): raw TCP vs muster's direct link on the same veth links;
#  - on loopback (always): a MB-megabyte checkpoint replicated between two agents of one job
#    (127.0.0.1 and 127.0.0.2, their own --checkpoint-dir, --replicate-bandwidth 0) against
#    raw TCP (python sendfile) between the same addresses, to a receiver that counts the bytes
#    and to one that writes them into a file of the same disk and fsyncs it (a replica's
#    ceiling); muster with its default bulk streams (a quarter of the cores, at most 4), with
#    8, and with 0 (the chunks on the TLS link, as before the bulk path).
# The agents run with --preflight off: two agents of one job on one GPU are rightly refused by
# the pre-flight, and nothing here is about the GPU.
# REPLICA_DIR (default /tmp) holds the checkpoints and the loopback part's files: /dev/shm takes the
# disk out of the figures (what the data path itself reaches).
# Results: OUT_DIR/summary.txt.
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-replica
MB=${MB:-2000}
log "# muster replica bench $(date -u +%FT%TZ) on $(hostname)"
log "$(nproc) cores, $(uname -r), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"); load $(cut -d' ' -f1-3 /proc/loadavg)"

MUSTER_BIN=$M SKIP_STEPS=1 REPS=3 MB=$MB TMPDIR=/tmp timeout -k 5 300 "$SRC/bench/replicate_bench.sh" > "$OUT/netns.out" 2> "$OUT/netns.err"
rc=$?
if [ "$rc" = 0 ]; then
    grep "replicate_bench:" "$OUT/netns.err" "$OUT/netns.out" | sed 's/^[^:]*://' | while read -r l; do log "netns: $l"; done
else
    log "netns: not measured (exit $rc): $(grep -m1 -E 'SKIP|FAIL' "$OUT/netns.err")"
fi

W=$(mktemp -d "${REPLICA_DIR:-/tmp}/muster-rb.XXXXXX") # REPLICA_DIR=/dev/shm: no disk under the copies
head -c ${MB}M /dev/urandom > "$W/blob"
cat "$W/blob" > /dev/null
cat > "$W/sink.py" <<'EOP'
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
print(f"{n / 1e6 / (time.perf_counter() - t):.0f}", flush=True)
EOP
cat > "$W/src.py" <<'EOP'
import socket, sys
o = socket.create_connection((sys.argv[1], int(sys.argv[2])))
with open(sys.argv[3], "rb") as f: o.sendfile(f)
o.close()
EOP
raws=() disks=()
for i in 1 2 3; do
    for to in null file; do
        port=$((31000 + RANDOM % 10000))
        python3 "$W/sink.py" 127.0.0.2 $port $([ $to = file ] && echo "$W/rawdisk$i.bin") > "$W/sink.out" &
        sleep 0.3
        python3 "$W/src.py" 127.0.0.2 $port "$W/blob"
        wait
        if [ $to = null ]; then raws+=("$(cat "$W/sink.out")"); else disks+=("$(cat "$W/sink.out")"); fi
    done
done
log "loopback raw TCP (python sendfile): ${raws[*]} MB/s; into a file of the same disk, fsynced: ${disks[*]} MB/s"

cat > "$W/wk.sh" <<EOW
#!/bin/bash
if [ "\$RANK" = 0 ]; then
    cp "$W/blob" "\$MUSTER_CHECKPOINT_DIR/.ckpt_1.bin.tmp" && mv "\$MUSTER_CHECKPOINT_DIR/.ckpt_1.bin.tmp" "\$MUSTER_CHECKPOINT_DIR/ckpt_1.bin"
fi
while [ ! -e "$W/release" ]; do sleep 0.5; done
EOW
chmod +x "$W/wk.sh"
echo "gpu-replica-secret" > "$W/tok"; chmod 600 "$W/tok"
once() { # once RUN STREAMS: one replica between two agents; logs the rate
    local i=$1 ms line
    rm -rf "$W/c1" "$W/c2" "$W/release"
    "$M" server --listen 127.0.0.1:29561 --token-file "$W/tok" 2> "$W/server.err" &
    local spid=$! pids=()
    sleep 0.3
    for k in 1 2; do
        MUSTER_REPLICATE_STREAMS=$2 "$M" run --nnodes 2 --nproc-per-node 1 \
            --rdzv-endpoint 127.0.0.1:29561 --rdzv-id rb$i-$2 --preflight off \
            --token-file "$W/tok" --local-addr 127.0.0.$k --checkpoint-dir "$W/c$k" \
            --replicate-checkpoints 1 --replicate-bandwidth 0 --no-python "$W/wk.sh" 2> "$W/a$k.err" &
        pids+=($!)
        sleep 0.2
    done
    for t in $(seq 480); do
        grep -q "replicated to group rank 1" "$W/a1.err" "$W/a2.err" && break
        kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null || break # both gone
        sleep 0.25
    done
    line=$(grep -h "replicated to group rank 1" "$W/a1.err" "$W/a2.err")
    ms=$(sed -n 's/.* bytes in \([0-9]*\) ms.*/\1/p' <<<"$line")
    touch "$W/release"
    wait "${pids[@]}" 2>/dev/null
    kill $spid; wait $spid 2>/dev/null
    if [ -n "$ms" ]; then
        reps+=("$(( MB * 1048576 / 1000 / ms ))")
        log "  streams=$2 run $i: $line"
        log "    $(grep -h "stored as a replica" "$W/a1.err" "$W/a2.err")"
    else
        log "FAIL streams=$2 run $i: no replica"; FAILS=$((FAILS + 1)); cat "$W"/a*.err >> "$OUT/summary.txt"
    fi
}
for streams in "" 8 0; do
    reps=()
    for i in 1 2 3; do once $i "$streams"; done
    log "loopback muster direct link, streams=${streams:-default}: ${reps[*]} MB/s"
done
rm -rf "$W"
log "result: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
