#!/bin/bash
# A console nobody reads (docs/OUTPUT.md): muster's stdout is a FIFO whose read end the test
# holds open (exec 3<>, so that muster gets neither ENXIO nor EPIPE) and never reads, while a
# worker prints up to 100 MB of lines. Before, the agent blocked in its console write (poll(-1))
# and acted on nothing else: SIGTERM waited, heartbeats stopped and the server declared the node
# lost.
#   (a) --standalone, --shutdown-timeout 2: SIGTERM makes muster exit 143 within 3 s
#       (the timeout + 1 s), saying how many bytes it could not write; its memory stays bounded
#       (the console's budget, not the 100 MB); (a2) the same with stderr on that FIFO too;
#   (b) a server and two agents, one of them with the stalled console: its heartbeats stay on
#       time (/status heartbeat_gap_max_ms <= interval 1000 ms + 1000 ms margin on this loaded
#       2-core VM), no node is lost while its worker is blocked on its output, and SIGTERM ends
#       it within 3 s as well.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

GAP_MAX=${STALLED_GAP_MAX_MS:-2000}
RSS_MAX_KB=$((64 * 1024))

cat > "$T/flood.sh" <<'EOF'
#!/bin/sh
# 100 MB of 100-byte lines, then wait to be stopped
yes "$RANK: a line that a console which never reads will never see, padded out to 100 bytes" |
    head -c 100000000
exec sleep 600
EOF
cat > "$T/hold.sh" <<EOF
#!/bin/sh
while [ ! -e "$T/release" ]; do sleep 0.1; done
EOF
chmod +x "$T/flood.sh" "$T/hold.sh"

# stalled_fifo NAME: a FIFO $T/NAME whose read end this shell holds on a new fd, never read
stalled_fifo() {
    mkfifo "$T/$1" || fail "mkfifo $T/$1"
    exec {FIFO_FD}<> "$T/$1"
}

# sigterm_exit PID WHAT: SIGTERM to PID, then wait for it; sets EXIT_MS (signal -> exit) and RC
sigterm_exit() {
    local t=$(now_ms)
    kill -TERM "$1"
    wait_for 10 pid_gone "$1" || { show_all; fail "$2: still running 10 s after SIGTERM"; }
    EXIT_MS=$(($(now_ms) - t))
    RC=0
    wait "$1" || RC=$?
}

# rss_kb PID: its resident memory
rss_kb() {
    awk '/^VmRSS:/ {print $2}' "/proc/$1/status"
}

# (a) standalone
stalled_fifo a.fifo
OUTF=$T/a.fifo ERRF=$T/a.err mrun_bg -- run --standalone --nproc-per-node 1 \
    --shutdown-timeout 2 --no-python "$T/flood.sh"
apid=$MPID
# the worker fills the pipe, the FIFO (64 KiB) and the console's budget in well under a second
sleep 2
kill -0 "$apid" 2>/dev/null || { cat "$T/a.err" >&2; fail "(a) muster exited early"; }
rss=$(rss_kb "$apid")
note "(a) muster's RSS with a stalled console: ${rss} kB"
[ "$rss" -le $RSS_MAX_KB ] || fail "(a) muster holds ${rss} kB (limit $RSS_MAX_KB): unbounded"
sigterm_exit "$apid" "(a)"
note "(a) SIGTERM -> exit with a stalled console: ${EXIT_MS} ms, exit code $RC"
[ "$RC" = 143 ] || { cat "$T/a.err" >&2; fail "(a) exit code $RC, expected 143 (SIGTERM)"; }
[ "$EXIT_MS" -le 3000 ] || fail "(a) exit ${EXIT_MS} ms after SIGTERM (limit 3000: timeout 2 s + 1 s)"
grep -q "bytes of output were not written" "$T/a.err" ||
    { cat "$T/a.err" >&2; fail "(a) muster did not say what it could not write"; }
exec {FIFO_FD}>&-

# (a2) stderr on the stalled FIFO as well (muster ... 2>&1 | a stalled reader): muster's own
# lines must not hold it up either
stalled_fifo a2.fifo
OUTF=$T/a2.fifo ERRF=$T/a2.fifo mrun_bg -- run --standalone --nproc-per-node 1 \
    --shutdown-timeout 2 --no-python "$T/flood.sh"
apid=$MPID
sleep 2
kill -0 "$apid" 2>/dev/null || fail "(a2) muster exited early"
sigterm_exit "$apid" "(a2)"
note "(a2) SIGTERM -> exit with stdout and stderr stalled: ${EXIT_MS} ms, exit code $RC"
[ "$RC" = 143 ] || fail "(a2) exit code $RC, expected 143 (SIGTERM)"
[ "$EXIT_MS" -le 3000 ] || fail "(a2) exit ${EXIT_MS} ms after SIGTERM (limit 3000)"
exec {FIFO_FD}>&-

# (b) two agents, one with a stalled console; the job must not lose it
start_server
JOB=stalled-$$
stalled_fifo b.fifo
conf=join_timeout=30,last_call_timeout=0.5
OUTF=$T/b1.out
agent b1 -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
    --rdzv-conf $conf --shutdown-timeout 2 --no-python "$T/hold.sh"
OUTF=$T/b.fifo ERRF=$T/b2.err mrun_bg -- run --nnodes 2 --nproc-per-node 1 \
    --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB --rdzv-conf $conf --shutdown-timeout 2 \
    --no-python "$T/flood.sh"
APID[b2]=$MPID
unset OUTF
job_running() {
    http_get "$SHTTP" /status
    jq -e --arg job "$JOB" '.jobs[] | select(.id == $job) | select(.nodes | length == 2) |
        all(.nodes[]; .state == "running")' "$T/http.body" > /dev/null 2>&1
}
wait_for 30 job_running || { show_all; fail "(b) the job did not start on 2 nodes"; }
# 3 heartbeat timeouts' worth of a blocked worker
sleep 9
http_get "$SHTTP" /status
[ "$HTTP_CODE" = 200 ] || fail "(b) GET /status: $HTTP_CODE"
jq -e --arg job "$JOB" '.jobs[] | select(.id == $job)' "$T/http.body" > "$T/job.json" ||
    fail "(b) job $JOB not in /status"
note "(b) heartbeat_gap_max_ms: $(jq -c '[.nodes[] | {group_rank, heartbeat_gap_max_ms}]' "$T/job.json")"
jq -e --argjson max "$GAP_MAX" 'all(.nodes[]; .heartbeat_gap_max_ms != null and
    .heartbeat_gap_max_ms <= $max and .state == "running")' "$T/job.json" > /dev/null ||
    { show_all; fail "(b) an agent was silent over $GAP_MAX ms or is not running: $(jq -c .nodes "$T/job.json")"; }
jq -e '.restart_count == 0 and .round == 0' "$T/job.json" > /dev/null ||
    { show_all; fail "(b) a node was lost: $(jq -c . "$T/job.json")"; }
kill -0 "${APID[b2]}" 2>/dev/null || { show_all; fail "(b) the stalled agent exited"; }
sigterm_exit "${APID[b2]}" "(b)"
note "(b) SIGTERM -> exit of the stalled agent: ${EXIT_MS} ms, exit code $RC"
[ "$RC" = 143 ] || { show_all; fail "(b) exit code $RC, expected 143 (SIGTERM)"; }
[ "$EXIT_MS" -le 3000 ] || fail "(b) exit ${EXIT_MS} ms after SIGTERM (limit 3000)"
exec {FIFO_FD}>&-
sigterm_exit "${APID[b1]}" "(b) the other agent"
stop_server
assert_no_marked_left "after the job" 5
