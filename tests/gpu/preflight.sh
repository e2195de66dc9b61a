#!/bin/bash
# Pre-flight on a GPU host, one command from a clean tree:
#
#   tests/gpu/preflight.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster and muster-preflight built with -DMUSTER_STATIC_DEPS=ON. Checks:
#   1. `muster preflight` on every GPU: passes; whole wall time (3 runs; target <= 3 s)
#   2. busbw of muster-preflight vs a PyTorch dist.all_reduce loop (bench/gpu/torch_allreduce.py)
#      on the same GPUs and sizes, in this run (target >= 95 % at 256 MiB), and a 1 GiB sweep
#   3. a rank killed before NCCL init: named, within the deadline (--preflight-timeout 10)
#   4. two workers pointed at one GPU (two "nodes" on this host, both CUDA_VISIBLE_DEVICES=0):
#      caught by the unique-GPU check
#   5. `muster run` of a real NCCL DDP job: pre-flight (auto) first, then the workers
# Results: OUT_DIR/summary.txt (+ logs, reports). Exit 0 when every check passed.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu
export MUSTER_TOKEN=gpu-preflight-test-token-0123456789

log "# muster pre-flight on GPUs $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L | tee -a "$OUT/summary.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
[ -x "$B/muster-preflight" ] || { log "FAIL muster-preflight was not built in $B"; exit 1; }
"$B/muster-preflight" inventory >"$OUT/inventory.json" 2>"$OUT/inventory.err"
check $? 0 "muster-preflight inventory"
head -c 600 "$OUT/inventory.json" | tee -a "$OUT/summary.txt"; echo | tee -a "$OUT/summary.txt"

# 1. the whole pre-flight, three times
for i in 1 2 3; do
    pf pf$i
    check "$rc" 0 "muster preflight on $ngpu GPUs, run $i: ${tm} ms"
done
cat "$OUT/pf3.err" | tee -a "$OUT/summary.txt"
cp "$OUT/logs/pf3/preflight.json" "$OUT/preflight_report.json" 2>/dev/null

# 2. busbw beside PyTorch on the same GPUs and sizes
timeout -k 5 150 torchrun --standalone --nproc_per_node "$ngpu" "$SRC/bench/gpu/torch_allreduce.py" \
    --out "$OUT/torch_allreduce.json" >"$OUT/torch_allreduce.log" 2>&1
check $? 0 "PyTorch dist.all_reduce loop"
cat "$OUT/torch_allreduce.log" | grep -v Warning | tail -8 | tee -a "$OUT/summary.txt"
python3 - "$OUT/preflight_report.json" "$OUT/torch_allreduce.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
rep = json.load(open(sys.argv[1])); tor = json.load(open(sys.argv[2]))
mine = None
for node in rep["nccl"]:
    for r in node["ranks"]:
        if r["rank"] == 0:
            mine = [s for s in r["stages"] if s["stage"] == "all"][0]["sizes"]
t = {s["bytes"]: s for s in tor["sizes"]}
print("size_MiB  muster_busbw  torch_busbw  ratio")
for s in mine:
    o = t.get(s["bytes"])
    if o:
        print("%8.0f  %12.1f  %11.1f  %5.3f" % (s["bytes"] / 2**20, s["busbw"], o["busbw"], s["busbw"] / o["busbw"]))
big = mine[-1]; o = t.get(big["bytes"])
if o:
    print("RATIO_256MIB %.3f" % (big["busbw"] / o["busbw"]))
PY
ratio=$(sed -n 's/^RATIO_256MIB //p' "$OUT/summary.txt" | tail -1)
python3 -c "import sys; sys.exit(0 if float('${ratio:-0}') >= 0.95 else 1)"
check $? 0 "busbw at 256 MiB >= 95 % of PyTorch's (ratio ${ratio:-?})"
timeout -k 5 150 "$M" preflight --preflight-max-bytes 1GiB --log-dir "$OUT/logs" --rdzv-id pf1g >"$OUT/pf1g.out" 2>"$OUT/pf1g.err"
check $? 0 "muster preflight with a 1 GiB sweep"
grep -A8 "NCCL all-reduce" "$OUT/pf1g.err" | tee -a "$OUT/summary.txt"

# 3. a rank dies before NCCL init: a wrapper kills rank 1 at start
cat >"$OUT/die_rank1.sh" <<SH
#!/bin/bash
[ "\$1" = allreduce ] && [ "\$RANK" = 1 ] && kill -9 \$\$
exec "$B/muster-preflight" "\$@"
SH
chmod +x "$OUT/die_rank1.sh"
t=$(date +%s%N)
MUSTER_PREFLIGHT_BIN=$OUT/die_rank1.sh timeout -k 5 150 "$M" preflight --preflight-timeout 10 >"$OUT/pf_dead.out" 2>"$OUT/pf_dead.err"
rc=$?; tm=$(ms "$t")
check "$rc" 4 "rank killed before init: pre-flight fails (${tm} ms, deadline 10 s)"
grep -q "rank 1 .*never arrived" "$OUT/pf_dead.err"; check $? 0 "the missing rank 1 is named"
grep -E "never arrived|! " "$OUT/pf_dead.err" | head -4 | tee -a "$OUT/summary.txt"

# 4. two workers on one GPU: two agents on this host, both see only GPU 0
"$M" server --listen 127.0.0.1:0 >"$OUT/server.out" 2>"$OUT/server.err" &
spid=$!
sleep 1
sport=$(sed -n 's/.*server listening on .*:\([0-9][0-9]*\).*/\1/p' "$OUT/server.err" | head -1)
for k in 1 2; do
    CUDA_VISIBLE_DEVICES=0 timeout -k 5 150 "$M" preflight --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$sport \
        --rdzv-id dup --preflight-timeout 10 >"$OUT/dup$k.out" 2>"$OUT/dup$k.err" &
    eval "dpid$k=\$!"
done
wait $dpid1; rc1=$?; wait $dpid2; rc2=$?
check "$rc1/$rc2" "4/4" "two workers pointed at one GPU: both nodes fail"
cat "$OUT/dup1.err" "$OUT/dup2.err" | grep -q "use the same GPU"; check $? 0 "the shared GPU is named"
cat "$OUT/dup1.err" "$OUT/dup2.err" | grep -E "same GPU" | head -2 | tee -a "$OUT/summary.txt"
kill $spid 2>/dev/null; wait $spid 2>/dev/null

# 5. a real job: pre-flight (auto: GPUs present) then NCCL DDP
t=$(date +%s%N)
timeout -k 5 150 "$M" run --standalone --nproc-per-node gpu "$SRC/examples/pytorch/train_ddp.py" --backend nccl --steps 100 >"$OUT/ddp.out" 2>"$OUT/ddp.err"
rc=$?; tm=$(ms "$t")
check "$rc" 0 "muster run with the pre-flight, then NCCL DDP (${tm} ms)"
grep -q "preflight: passed" "$OUT/ddp.err"; check $? 0 "the pre-flight ran before the workers"

log "# $FAILS failed"
[ "$FAILS" = 0 ]
