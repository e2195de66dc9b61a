#!/bin/bash
# On a GPU host (docs/PREFLIGHT.md): the P2P matrix, per-GPU results on the rendezvous server, and the
# pre-flight of a node that joins a running elastic job. One command from a clean tree:
#
#   tests/gpu/preflight_p2p.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds muster and muster-preflight built on the build host with
#   cmake -S . -B build-gpu -DMUSTER_STATIC_DEPS=ON -DMUSTER_PREFLIGHT_GPU=ON -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-gpu --target muster muster-preflight
# (only the two binaries need to travel). Works with one GPU (the matrix is then checked to be
# skipped cleanly) and with several (the matrix is measured). Checks:
#   1. `muster-preflight p2p` directly: with >= 2 GPUs an N x N matrix of positive figures both
#      ways; with CUDA_VISIBLE_DEVICES=0 (always run): "skipped", no figures
#   2. `muster preflight` on every GPU: passes; the node line has "P2P min .. median .. over
#      N(N-1) pairs" (>= 2 GPUs) or "P2P skipped: one GPU" (1 GPU); the report has the matrix
#   3. (>= 2 GPUs) a slow pair simulated with the test-only MUSTER_PREFLIGHT_SIMULATE_SLOW_P2P=0:1:0.2:
#      named with node, both GPUs and its figure, exit 4; with --preflight-allow-slow exit 0
#   4. a real `muster run` through a `muster server --http` on loopback (two agents with one GPU
#      each when there are >= 2 GPUs, else one agent), --preflight on: while the workers run,
#      /status lists each node's GPUs with GEMM/HBM figures and levels, /metrics has
#      muster_preflight_gpu_gemm_tflops samples
#   5. elastic --nnodes 1:2: a second agent joins the running job; it is pre-flighted alone
#      ("joined the running job"), passes, its workers start after; /status shows it "joined"
# Results: OUT_DIR/summary.txt (+ logs, reports). Exit 0 when every check passed.
set -u
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
gpu_init "$@" /tmp/muster-gpu-p2p
export MUSTER_TOKEN=gpu-p2p-test-token-0123456789abcdef
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 1; }

log "# muster pre-flight P2P / server / join $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L | tee -a "$OUT/summary.txt"
nvidia-smi topo -m 2>/dev/null | tee -a "$OUT/summary.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
[ -x "$B/muster-preflight" ] || { log "FAIL muster-preflight was not built in $B"; exit 1; }
H=$(hostname)

# 1. muster-preflight p2p by itself
t=$(date +%s%N)
"$B/muster-preflight" p2p --out "$OUT/p2p_direct.json" 2>"$OUT/p2p_direct.err"
rc=$?; tm=$(ms "$t")
check "$rc" 0 "muster-preflight p2p over $ngpu GPU(s) (${tm} ms)"
python3 - "$OUT/p2p_direct.json" "$ngpu" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2])
if n < 2:
    print("PASS one GPU: skipped (%s)" % r.get("skipped") if "skipped" in r and "gbps" not in r else "FAIL one GPU: %s" % r)
else:
    g = r["gbps"]
    ok = len(g) == n and all(len(row) == n for row in g) and all(g[s][d] > 0 for s in range(n) for d in range(n) if s != d)
    print(("PASS" if ok else "FAIL") + " %dx%d matrix, %s bytes x%s, peer access %s" % (n, n, r.get("bytes"), r.get("iters"), r.get("peer_access")))
    for s in range(n):
        print("  GPU %d -> " % s + " ".join("%7.1f" % v for v in g[s]) + " GB/s")
PY
grep -q '^FAIL' "$OUT/summary.txt" && FAILS=$((FAILS + 1))
CUDA_VISIBLE_DEVICES=0 "$B/muster-preflight" p2p --out "$OUT/p2p_one.json" 2>"$OUT/p2p_one.err"
check "$?" 0 "muster-preflight p2p with one visible GPU"
grep -q '"skipped"' "$OUT/p2p_one.json" && ! grep -q '"gbps"' "$OUT/p2p_one.json"
check "$?" 0 "one GPU: skipped, no figures ($(cat "$OUT/p2p_one.json"))"

# 2. the whole pre-flight: the node line and the report
pf all
check "$rc" 0 "muster preflight on $ngpu GPU(s) (${tm} ms)"
grep -E "preflight: node |passed in|^  [!~]" "$OUT/all.err" | tee -a "$OUT/summary.txt"
if [ "$ngpu" -ge 2 ]; then
    grep -q "P2P min [0-9.]* GB/s, median [0-9.]* GB/s over $((ngpu * (ngpu - 1))) pairs" "$OUT/all.err"
    check "$?" 0 "the node line has the P2P figures"
    grep -q '"gbps"' "$OUT/logs/all/preflight.json"; check "$?" 0 "the report has the matrix"
else
    grep -q "P2P skipped: one GPU" "$OUT/all.err"; check "$?" 0 "one GPU: P2P skipped, said so"
fi
CUDA_VISIBLE_DEVICES=0 pf one --nproc-per-node 1
check "$rc" 0 "muster preflight on one visible GPU (${tm} ms)"
grep -q "P2P skipped: one GPU" "$OUT/one.err" && ! grep -q "P2P min" "$OUT/one.err"
check "$?" 0 "one visible GPU: P2P skipped with a note, no figures"

# 3. a slow pair (test-only simulation)
if [ "$ngpu" -ge 2 ]; then
    MUSTER_PREFLIGHT_SIMULATE_SLOW_P2P=0:1:0.2 pf slowpair
    check "$rc" 4 "simulated slow pair 0 -> 1: the pre-flight fails (${tm} ms)"
    grep -q "! node .*: P2P GPU 0 (GPU-[0-9a-f-]*) -> GPU 1 (GPU-[0-9a-f-]*) [0-9.]* GB/s is .* below the node's median" "$OUT/slowpair.err"
    check "$?" 0 "the slow pair is named with node, both GPUs and its figure"
    grep -E "^  [!~]" "$OUT/slowpair.err" | head -3 | tee -a "$OUT/summary.txt"
    MUSTER_PREFLIGHT_SIMULATE_SLOW_P2P=0:1:0.2 pf slowpair_allow --preflight-allow-slow
    check "$rc" 0 "the same with --preflight-allow-slow: passes with a warning"
fi

# a server with HTTP, and a worker that holds until OUT/release exists
start_server() {
    "$M" server --listen 127.0.0.1:0 --http 127.0.0.1:0 >"$OUT/$1.out" 2>"$OUT/$1.err" &
    spid=$!
    for _ in $(seq 50); do grep -q "http on" "$OUT/$1.err" && break; sleep 0.2; done
    sport=$(sed -n 's/.*server listening on .*:\([0-9][0-9]*\).*/\1/p' "$OUT/$1.err" | head -1)
    shttp=$(sed -n 's/.*http on \([^ ]*:[0-9][0-9]*\).*/\1/p' "$OUT/$1.err" | head -1)
}
cat >"$OUT/hold.sh" <<'SH'
#!/bin/sh
: > "$HOLD_DIR/ready.$RANK.$TORCHELASTIC_RESTART_COUNT.$$"
while [ ! -e "$HOLD_DIR/release" ]; do sleep 0.1; done
SH
chmod +x "$OUT/hold.sh"
ready_count() { local f n=0; for f in "$1"/ready.*; do [ -e "$f" ] && n=$((n + 1)); done; echo "$n"; }
rank1_ready() { compgen -G "$OUT/w5/ready.1.*" >/dev/null; }
wait_ready() { for _ in $(seq 600); do [ "$(ready_count "$1")" -ge "$2" ] && return 0; sleep 0.1; done; return 1; }

# 4. a real job: per-GPU results in /status and /metrics
rm -rf "$OUT/w4"; mkdir -p "$OUT/w4"
start_server server4
nag=1; [ "$ngpu" -ge 2 ] && nag=2
for k in $(seq "$nag"); do
    CUDA_VISIBLE_DEVICES=$((k - 1)) HOLD_DIR=$OUT/w4 timeout -k 5 300 "$M" run --nnodes $nag --nproc-per-node 1 \
        --rdzv-endpoint 127.0.0.1:$sport --rdzv-id job4 --preflight on --rdzv-conf join_timeout=60 \
        --no-python "$OUT/hold.sh" >"$OUT/job4_$k.out" 2>"$OUT/job4_$k.err" &
    eval "apid$k=\$!"
done
wait_ready "$OUT/w4" "$nag"; check "$?" 0 "$nag agent(s) passed the pre-flight and started their workers"
curl -s -m 5 "http://$shttp/status" >"$OUT/status4.json"
curl -s -m 5 "http://$shttp/metrics" >"$OUT/metrics4.txt"
python3 - "$OUT/status4.json" "$nag" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
doc = json.load(open(sys.argv[1])); n = int(sys.argv[2])
job = [j for j in doc["jobs"] if j["id"] == "job4"][0]
pf = job.get("preflight", [])
ok = len(pf) == n and all(r["ok"] and len(r["gpus"]) == 1 and (r["gpus"][0]["gemm_tflops"] or 0) > 0
                          and (r["gpus"][0]["hbm_gbps"] or 0) > 0 for r in pf)
print(("PASS" if ok else "FAIL") + " /status: %d pre-flight record(s) with per-GPU figures" % len(pf))
for r in pf:
    for g in r["gpus"]:
        print("  %s GPU %d %s %s: GEMM %s TFLOP/s, HBM %s GB/s, %s %s; p2p %s" % (r["host"], g["index"], g["uuid"], g["model"],
              g["gemm_tflops"], g["hbm_gbps"], g["level"], g["note"], json.dumps(r["p2p"])))
PY
grep -q '^FAIL /status' "$OUT/summary.txt" && FAILS=$((FAILS + 1))
grep '^muster_preflight_' "$OUT/metrics4.txt" | tee -a "$OUT/summary.txt"
[ "$(grep -c "^muster_preflight_gpu_gemm_tflops{job=\"job4\",host=\"$H\"" "$OUT/metrics4.txt")" = "$nag" ]
check "$?" 0 "/metrics: one GEMM sample per GPU of the job"
: >"$OUT/w4/release"
for k in $(seq "$nag"); do eval "wait \$apid$k"; check "$?" 0 "job4 agent $k exits 0"; done
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null

# 5. a node joins a running elastic job (GPU 1 when there is one, else GPU 0 again: the
#    workers here do not use the GPU, the joining node's check is its own)
rm -rf "$OUT/w5"; mkdir -p "$OUT/w5"
start_server server5
g2=0; [ "$ngpu" -ge 2 ] && g2=1
CUDA_VISIBLE_DEVICES=0 HOLD_DIR=$OUT/w5 timeout -k 5 300 "$M" run --nnodes 1:2 --nproc-per-node 1 \
    --rdzv-endpoint 127.0.0.1:$sport --rdzv-id job5 --preflight on \
    --rdzv-conf join_timeout=60,last_call_timeout=1 --no-python "$OUT/hold.sh" >"$OUT/job5_1.out" 2>"$OUT/job5_1.err" &
a1=$!
wait_ready "$OUT/w5" 1; check "$?" 0 "elastic job: the first node runs"
t=$(date +%s%N)
CUDA_VISIBLE_DEVICES=$g2 HOLD_DIR=$OUT/w5 timeout -k 5 300 "$M" run --nnodes 1:2 --nproc-per-node 1 \
    --rdzv-endpoint 127.0.0.1:$sport --rdzv-id job5 --preflight on \
    --rdzv-conf join_timeout=60,last_call_timeout=1 --no-python "$OUT/hold.sh" >"$OUT/job5_2.out" 2>"$OUT/job5_2.err" &
a2=$!
for _ in $(seq 600); do rank1_ready && break; sleep 0.1; done
rank1_ready; check "$?" 0 "the joining node's worker (rank 1) started ($(ms "$t") ms after it was launched)"
grep -q "this node joined the running job in round" "$OUT/job5_2.err"; check "$?" 0 "the joining node says it checks itself"
grep -q "preflight: passed" "$OUT/job5_2.err"; check "$?" 0 "the joining node's pre-flight passed"
grep -E "pre-flight|preflight" "$OUT/job5_2.err" | tee -a "$OUT/summary.txt"
curl -s -m 5 "http://$shttp/status" >"$OUT/status5.json"
python3 - "$OUT/status5.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
job = [j for j in json.load(open(sys.argv[1]))["jobs"] if j["id"] == "job5"][0]
j = [r for r in job.get("preflight", []) if r["joined"]]
ok = len(j) == 1 and j[0]["ok"] and j[0]["round"] >= 1 and (j[0]["gpus"][0]["gemm_tflops"] or 0) > 0
print(("PASS" if ok else "FAIL") + " /status: the joined node's record: %s" % json.dumps(j))
PY
grep -q '^FAIL /status: the joined' "$OUT/summary.txt" && FAILS=$((FAILS + 1))
: >"$OUT/w5/release"
wait $a1; check "$?" 0 "job5 agent 1 exits 0"
wait $a2; check "$?" 0 "job5 agent 2 exits 0"
kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null

log "# $FAILS failed"
[ "$FAILS" = 0 ]
