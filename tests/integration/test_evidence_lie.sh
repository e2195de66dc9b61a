#!/bin/bash
# A lying peer in the evidence: a node of the job (rdzv_poke, a job credential of its own job)
# sends EVIDENCE claiming another node's rank sleeps in liar.py, then FAILED asking for a
# verdict. The server keeps a node's evidence for its own ranks only: the lie is dropped and
# logged, the root cause does not name the victim's rank, and the victim's node is not charged
# (--exclude-after 1 would exclude it); the job restarts and its node runs on.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

need_tool POKE RDZV_POKE rdzv_poke
start_server
JOB=evlie-$$
mkdir -p "$T/w"
agent a -- --nnodes 1:2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB \
    --rdzv-conf join_timeout=30,last_call_timeout=1 --max-restarts 2 --exclude-after 1 \
    --no-python "$WORKER" hold "$T/w"
wait_for 20 files_at_least 2 "$T/w/ready.*.0" || { show_all; fail "node a did not start"; }
# a's ranks: 0 and 1, the liar's 2 (it joins round 0's last call, or opens round 1), where it
# lies and fails
out=$(MUSTER_POKE_HOLD=8 timeout 40 "$POKE" 127.0.0.1:$SPORT evidencelie "$JOB" 2 0 2>&1)
echo "$out" | grep -q '^SENT EVIDENCE' || { show_all; fail "the liar did not get to send: $out"; }
wait_for 20 grep -q 'root cause: ' "$SERR" || { cat "$SERR" >&2; fail "no verdict"; }
grep -q 'EVIDENCE for rank 0, not one of this node' "$SERR" || { cat "$SERR" >&2; fail "the lie was not noticed"; }
c=$(grep -m1 'root cause: ' "$SERR" | sed 's/.*root cause: //')
case "$c" in
*liar.py* | "rank 0 "* | "rank 1 "*) cat "$SERR" >&2; fail "the lie made the verdict: '$c'" ;;
esac
grep -q "is excluded from job" "$T/a.err" && { cat "$T/a.err" >&2; fail "the victim's node was excluded"; }
# the job restarted around the liar's failure (without the silent liar): node a runs it
wait_for 30 files_at_least 2 "$T/w/ready.*.[1-9]" || { show_all; fail "node a did not restart its workers"; }
release_agents a
# node a ran without --log-dir: its private log directory stays, holding the bundle
kept=$(sed -n 's/^muster: evidence kept in //p' "$T/a.err")
[ -n "$kept" ] && [ -s "$(ls "$kept"/attempt_*/summary.txt 2>/dev/null | head -1)" ] \
    || { cat "$T/a.err" >&2; fail "no kept evidence bundle: '$kept'"; }
rm -rf "${kept%/evidence}"
stop_server
exit 0
