#!/bin/bash
# Goodput (docs/FAULT_TOLERANCE.md "Goodput"): a one-node job on a real server, two workers.
# Attempt 0: 0.5 s of start-up, a "step" line, rank 0 writes checkpoint ckpt_1.pt, 1 s more
# training, then rank 1 exits 1 while rank 0 takes 0.3 s to stop on SIGTERM. Attempt 1 resumes
# from ckpt_1.pt and waits for the test. While it runs, /metrics, /status and `muster status`
# show non-zero rendezvous, startup, training and stopping, work lost of about the 1 s after the
# checkpoint, and a ratio between 0 and 1. Hostile senders: a worker credential's GOODPUT is
# refused, a lying agent's too, and a node that does not hold group rank 0 changes nothing.
# At the end the final summary prints the same table.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_tool POKE RDZV_POKE rdzv_poke
need_cmd curl "for /metrics"

D=$T/w; C=$T/ck
mkdir -p "$D" "$C"
cat > "$T/w.sh" <<'W'
#!/bin/sh
d=$1; n=$TORCHELASTIC_RESTART_COUNT
env > "$d/env.$RANK.$n"
sleep 0.5
echo "step 1 rank $RANK attempt $n"
if [ "$n" = 0 ]; then
    if [ "$RANK" = 0 ]; then
        trap 'sleep 0.3; exit 0' TERM
        echo x > "$MUSTER_CHECKPOINT_DIR/.c.tmp" && mv "$MUSTER_CHECKPOINT_DIR/.c.tmp" "$MUSTER_CHECKPOINT_DIR/ckpt_1.pt"
        while ! grep -q ckpt_1.pt "$MUSTER_CHECKPOINT_DIR/.muster/registry.json" 2>/dev/null; do sleep 0.02; done
        : > "$d/saved"
        sleep 60 & wait
        exit 0
    fi
    while [ ! -f "$d/saved" ]; do sleep 0.02; done
    sleep 1
    exit 1
fi
: > "$d/running.$RANK"
while [ ! -f "$d/go" ]; do sleep 0.05; done
exit 0
W
chmod +x "$T/w.sh"

start_token_server
JOB=gp-$$
job_token "$T/job.tok" --job "$JOB"
agent a -u MUSTER_TOKEN -- --nnodes 1 --nproc-per-node 2 --rdzv-endpoint "$EP" --rdzv-id "$JOB" \
    --token-file "$T/job.tok" --max-restarts 1 --checkpoint-dir "$C" --no-python "$T/w.sh" "$D"

# metric PHASE: muster_job_seconds of the job for PHASE from $T/http.body ("" when absent)
metric() {
    sed -n "s/^muster_job_seconds{job=\"$JOB\",phase=\"$1\"} \([0-9.e+-]*\)$/\1/p" "$T/http.body"
}
lost_shown() {
    http_get "$SHTTP" /metrics && [ -n "$(metric lost)" ] && [ "$(metric lost)" != 0 ]
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
# attempt 1's first line (its GOODPUT) comes before running.0
wait_for 60 test -f "$D/running.0" || { show_all; fail "attempt 1 did not start"; }
wait_for 10 lost_shown || { show_all; cat "$T/http.body" >&2; fail "/metrics shows no work lost"; }
for p in rendezvous startup training stopping; do
    v=$(metric "$p")
    ge "$v" 0.001 || { cat "$T/http.body" >&2; fail "muster_job_seconds phase=$p is '$v', not > 0"; }
done
ge "$(metric startup)" 0.9 || fail "startup $(metric startup) s: two attempts slept 0.5 s before their first line"
ge "$(metric stopping)" 0.28 || fail "stopping $(metric stopping) s: rank 0 took 0.3 s to stop"
lost=$(metric lost); train=$(metric training)
# lost: rank 1 failed 1 s after the checkpoint was recorded (plus the registry's poll of it)
ge "$lost" 0.9 && ge 3.0 "$lost" || { show_all; fail "work lost $lost s, not about 1 s"; }
ge "$train" "$lost" || fail "work lost $lost s over training $train s"
ratio=$(sed -n "s/^muster_job_goodput_ratio{job=\"$JOB\"} \(.*\)$/\1/p" "$T/http.body")
ge "$ratio" 0.0001 && ge 0.9999 "$ratio" || fail "muster_job_goodput_ratio '$ratio' not in (0, 1)"
sum=$(awk -v j="$JOB" -F'[ ]' 'index($1, "job=\"" j "\"") && $1 !~ /lost|wall/ && /^muster_job_seconds/ { s += $2 } END { print s }' "$T/http.body")
awk -v s="$sum" -v w="$(metric wall)" 'BEGIN { exit !(s - w < 0.002 && w - s < 0.002) }' \
    || fail "phases add up to $sum s, wall says $(metric wall) s"

http_get "$SHTTP" /status
grep -q '"goodput":{"host":"'"$(hostname)"'"' "$T/http.body" || { cat "$T/http.body" >&2; fail "/status has no goodput of this node"; }
IT_TIMEOUT=10 mrun -- status --rdzv-endpoint "$EP" --rdzv-id "$JOB" --token-file "$T/job.tok"
grep -q "^  goodput 0\.[0-9]* (wall .*training [0-9.]* s, stopping [0-9.]* s, restart_wait .* lost [0-9.]* s$" "$T/out" \
    || { cat "$T/out" "$T/err" >&2; fail "muster status shows no goodput line"; }

# hostile senders, while the real agent sits in training (it sends nothing until its end)
http_get "$SHTTP" /metrics; cp "$T/http.body" "$T/metrics.2"
wtok=$(envval "$D/env.0.1" MUSTER_TOKEN)
out=$(MUSTER_TOKEN=$wtok timeout 20 "$POKE" "$EP" workergoodput "$JOB" 2>&1)
case "$out" in ERROR*) ;; *) fail "a worker credential's GOODPUT: got '$out'" ;; esac
out=$(MUSTER_TOKEN=$(cat "$T/job.tok") timeout 20 "$POKE" "$EP" goodput "$JOB" 1 5000 1000 4000 2>&1)
[ "$out" = "ERROR 1 GOODPUT refused: lost_ms over training_ms" ] || fail "a lying GOODPUT: got '$out'"
out=$(MUSTER_TOKEN=$(cat "$T/job.tok") timeout 20 "$POKE" "$EP" goodput "$JOB" 1 999000 999000 0 2>&1)
[ "$out" = "SENT GOODPUT" ] || fail "a plausible GOODPUT from a node without group rank 0: got '$out'"
http_get "$SHTTP" /metrics
diff <(grep "^muster_job_.*job=\"$JOB\"" "$T/metrics.2") <(grep "^muster_job_.*job=\"$JOB\"" "$T/http.body") >&2 \
    || fail "the hostile GOODPUTs changed the job's figures"
# both refusals counted (the log names an address once: the worker's refusal came first)
perr() { sed -n 's/^muster_protocol_errors_total{reason="protocol"} //p' "$1"; }
[ "$(perr "$T/http.body")" = $(($(perr "$T/metrics.2") + 2)) ] \
    || fail "protocol errors $(perr "$T/metrics.2") -> $(perr "$T/http.body"), not +2"
grep -q 'GOODPUT from a client of role 2' "$SERR" || fail "the server did not log the worker's GOODPUT"

: > "$D/go"
agent_wait a 30
expect_agent_rc a 0
err=$T/a.err
for p in rendezvous startup training stopping; do
    grep -Eq "^muster:   $p +[0-9]+\.[0-9] s +[0-9.]+ %$" "$err" || { show_agent a; fail "final summary lacks $p"; }
done
grep -Eq "^muster:   (startup|training|stopping) +0\.0 s" "$err" && { show_agent a; fail "a phase of the summary is 0"; }
flost=$(sed -n 's/^muster:   work lost *\([0-9.]*\) s.*/\1/p' "$err")
awk -v a="$flost" -v b="$lost" 'BEGIN { exit !(a - b < 0.06 && b - a < 0.06) }' \
    || fail "final work lost $flost s, /metrics said $lost s (no failure since)"
fr=$(sed -n 's/^muster:   goodput ratio \([0-9.]*\) .*/\1/p' "$err")
ge "$fr" 0.0001 && ge 0.9999 "$fr" || fail "final goodput ratio '$fr' not in (0, 1)"

stop_server
assert_no_marked_left "after the job" 5
exit 0
