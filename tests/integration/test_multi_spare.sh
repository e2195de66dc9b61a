#!/bin/bash
# Hot spares: a fixed-size job (--nnodes 2, join_timeout 60 s) on loopback with three
# agents of distinct --local-addr: s (--spare, started first, 1 worker), a (1 worker), and b
# (2 workers: the first always fails, the second ignores SIGTERM; --shutdown-timeout 20), with
# --exclude-after 1. The spare fills no place of round 0 by itself (a waits alone at 1/2 while s
# is connected); while round 0 runs, `muster status` and /status list s as a spare apart from the
# round. Rank 0 (a) writes ckpt_1.pt and ckpt_2.pt into the shared --checkpoint-dir, then b's
# first worker exits 7: b is excluded, and s takes its place in the next round at once: neither
# after join_timeout nor after the 20 s b's agent spends stopping its stubborn worker before it
# would JOIN (and be refused). s gets b's group rank 1, a keeps group rank 0; both resume from
# ckpt_2.pt at world size 2 with restart count 1, finish, and exit 0; b exits 3 with the
# exclusion line.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_job spare
C=$T/ckpt
mkdir -p "$C"
FTW=$IT_DIR/ft_worker.sh
common=(--nnodes 2 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB
        --rdzv-conf join_timeout=60,keep_alive_interval=0.5,heartbeat_timeout=3
        --max-restarts 3 --exclude-after 1 --checkpoint-dir "$C")
work=(--nproc-per-node 1 --no-python "$FTW" spare "$T/w")
status() {
    OUTF=$T/st.out ERRF=$T/st.err IT_TIMEOUT=10 mrun -- status --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB
    [ "$RC" = 0 ] || { cat "$T/st.out" "$T/st.err" >&2; fail "muster status exited $RC"; }
}

agent s NODE=s -- "${common[@]}" --spare --local-addr 127.0.0.3 "${work[@]}"
wait_for 20 grep -q "joining job $JOB as a spare" "$T/s.err" || { show_all; fail "the spare did not say it joins as one"; }
agent a NODE=a -- "${common[@]}" --local-addr 127.0.0.1 "${work[@]}"
wait_for 20 grep -q "rendezvous $JOB: 1/2 nodes" "$T/a.err" || { show_all; fail "a did not wait at 1/2 nodes"; }
sleep 1 # the spare must not complete the round, however long it is given
[ -z "$(ls "$T/w" | grep '^env\.')" ] || { show_all; fail "a worker started with one node and the spare"; }
status
grep -qE '^  SPARE HOST +ADDR' "$T/st.out" && grep -qE '^  [^ ]+ +127\.0\.0\.3 +1 ' "$T/st.out" \
    || { cat "$T/st.out" >&2; fail "muster status does not list the spare apart"; }

agent b NODE=b FAIL=1 -- "${common[@]}" --local-addr 127.0.0.2 --shutdown-timeout 20 \
    --nproc-per-node 2 --no-python "$FTW" spare "$T/w"
wait_for 30 files_at_least 3 "$T/w/ready.*.0" || { show_all; fail "round 0 did not start"; }
check_ranks "$T/w" 0 3 2
expect_eq "node of group rank 0 in round 0" a "$(envval "$T/w/env.0.0" NODE)"
expect_eq "node of group rank 1 in round 0" b "$(envval "$T/w/env.1.0" NODE)"
wait_for 30 test -e "$T/w/ckpt.done" || { show_all; fail "rank 0 did not record its checkpoints"; }

# round 0 runs, the spare waits connected: listed as a spare, not as a member or a waiting node
status
grep -E '^  SPARE HOST' -A1 "$T/st.out" | grep -q '127\.0\.0\.3' \
    || { cat "$T/st.out" >&2; fail "muster status does not list the spare while the job runs"; }
grep -qE '^  [0-9]+ +[^ ]+ +127\.0\.0\.3 ' "$T/st.out" && { cat "$T/st.out" >&2; fail "the spare is listed as a member"; }
grep -q 'WAITING HOST' "$T/st.out" && { cat "$T/st.out" >&2; fail "the spare is listed as waiting"; }
if [ -n "$SHTTP" ]; then
    http_get "$SHTTP" /status
    grep -q '"state":"spare"' "$T/http.body" && grep -q '"spares":1' "$T/http.body" &&
        grep -q '"waiting":0' "$T/http.body" \
        || { cat "$T/http.body" >&2; fail "/status does not list the spare"; }
fi

t_go=$(now_ms)
: > "$T/w/go" # b's worker fails now
wait_for 30 files_at_least 2 "$T/w/ready.*.1" || { show_all; fail "round 1 did not start with the spare"; }
took=$(( $(now_ms) - t_go ))
note "b's failure -> round 1 running with the spare: $took ms"
[ "$took" -lt 10000 ] || fail "round 1 took $took ms: the spare should replace b at once, not after b's agent stopped its workers (20 s) or the join timeout (60 s)"
check_ranks "$T/w" 1 2 2
expect_eq "node of group rank 0 in round 1" a "$(envval "$T/w/env.0.1" NODE)"
expect_eq "node of group rank 1 in round 1 (b's)" s "$(envval "$T/w/env.1.1" NODE)"
for r in 0 1; do
    expect_eq "resume point of rank $r in round 1" "$C/ckpt_2.pt" "$(cat "$T/w/resume.$r.1")"
done

agents_exit 40 0 a s
agent_wait b 40
expect_agent_rc b 3
grep -q "node .* (127.0.0.2) is excluded from job $JOB: caused 1 failures within 3600 s" "$T/b.err" \
    || { show_all; fail "b's stderr lacks the exclusion line"; }
grep -q 'restarting workers (restart 1/3): rank 1 ' "$T/a.err" || { show_all; fail "a did not restart once for b"; }
grep -q 'restart 2/3' "$T/a.err" "$T/s.err" && { show_all; fail "a second restart happened"; }
ls "$T/w" | grep -q '^env\..*\.2$' && fail "a third round ran"
grep -q "attempt 1 resumes from $C/ckpt_2.pt" "$T/s.err" || { show_all; fail "the spare did not resume from ckpt_2.pt"; }
stop_server
assert_no_marked_left "after the job" 5
exit 0
