#!/bin/bash
# Recording big checkpoints never stalls the agent ("no checkpoint work on the event
# loop"): rank 0 writes a 20 GB checkpoint file (sparse: the hashing path reads all 20 GB, the
# disk holds none of it) renamed into place, then a 30,000-file directory written in place and
# completed DCP-style (.metadata renamed in last). Both are recorded while the agent's heartbeats
# keep their 1 s interval: the server's /status says the longest silence of the agent since its
# JOIN (heartbeat_gap_max_ms) stayed within interval + 100 ms, and no node was lost.
. "$(dirname "$0")/ft.sh"
. "$(dirname "$0")/multi.sh"

start_job bigrec
C="$T/ck"
cat > "$T/wk.sh" << 'EOW'
#!/bin/bash
set -e
c=$MUSTER_CHECKPOINT_DIR
wait_recorded() { # NAME: until the registry lists it (at most 300 s)
    for _ in $(seq 3000); do
        grep -qF "\"$1\"" "$c/.muster/registry.json" 2> /dev/null && return 0
        sleep 0.1
    done
    echo "worker: $1 not recorded within 300 s" >&2
    exit 9
}
truncate -s 20G "$c/.big_1.bin.tmp"
mv "$c/.big_1.bin.tmp" "$c/big_1.bin"
wait_recorded big_1.bin
python3 - "$c/step-2" << 'EOP'
import os, sys
d = sys.argv[1]
os.mkdir(d)
for i in range(30000):
    with open(os.path.join(d, "__%d_0.distcp" % i), "wb") as f:
        f.write(os.urandom(64))
with open(os.path.join(d, ".metadata.tmp"), "wb") as f:
    f.write(b"meta")
os.rename(os.path.join(d, ".metadata.tmp"), os.path.join(d, ".metadata"))
EOP
wait_recorded step-2
echo "worker: both recorded"
EOW
chmod +x "$T/wk.sh"
agent a1 -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id "$JOB" \
    --checkpoint-dir "$C" --no-python "$T/wk.sh"
# the gap is read while the agent is still in the job (a finished job leaves /status)
wait_for 400 grep_in "$T/a1.err" "checkpoint step-2 recorded" || { show_all; fail "step-2 was not recorded"; }
http_get "$SHTTP" /status
[ "$HTTP_CODE" = 200 ] || fail "/status: HTTP $HTTP_CODE"
gap=$(python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
gaps = [n["heartbeat_gap_max_ms"] for j in doc["jobs"] if j["id"] == sys.argv[2] for n in j["nodes"]]
print(max(g for g in gaps if g is not None) if gaps else "")' "$T/http.body" "$JOB")
agent_wait a1 60
expect_eq "exit code" 0 "$RC"
grep -q "worker: both recorded" "$T/a1.out" || { show_all; fail "the worker did not see both recorded"; }
grep -q "checkpoint big_1.bin recorded (step 1, 21474836480 bytes" "$T/a1.err" || { show_all; fail "big_1.bin not recorded whole"; }
grep -q "checkpoint step-2 recorded (step 2, 1920004 bytes" "$T/a1.err" || { show_all; fail "step-2 not recorded with its 30,000 members"; }
grep -qi "lost node\|no heartbeat" "$SERR" "$T/a1.err" && { show_all; fail "a node was reported lost while recording"; }
[ -n "$gap" ] || { cat "$T/http.body" >&2; fail "no heartbeat_gap_max_ms in /status"; }
note "largest silence of the agent while recording 20 GB + 30,000 files: $gap ms (heartbeat every 1000 ms); $(grep -m1 'big_1.bin hashed' "$T/a1.err")"
# the goal (interval + 100 ms) is measured in bench/ckpt_bench.sh on a quiet machine; here other
# tests share the two cores, so the bound only proves the loop never waited for the hash (a
# blocked loop is silent for the whole 20 GB: seconds)
[ "$gap" -le 1500 ] || fail "the agent was silent for $gap ms while recording (limit 1500: interval + 500 ms)"
stop_server
assert_no_marked_left "end of test" 10
exit 0
