#!/bin/bash
# The same failure across nodes, decided by a real `muster server`: two loopback agents of a
# 2-node job (--max-restarts 5). Agent b's worker prints a Python traceback (KeyError in step(),
# train.py line 7) and exits 1 in every attempt; agent a's worker just runs. After 2 attempts the
# server ends the job "not retryable": BOTH agents exit 6, both print the signature (a got it
# from the server in JOB_FAILED), and no third attempt starts. The server's restart count says 1.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server
JOB=sig-$$
D="$T/w"
mkdir -p "$D"
common=(--nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB
        --rdzv-conf join_timeout=30,last_call_timeout=1 --max-restarts 5)
work=(--no-python /bin/bash -c 'echo "${BUG:-0} $TORCHELASTIC_RESTART_COUNT" >> "$1/starts"
    if [ "${BUG:-0}" = 1 ]; then
        printf "Traceback (most recent call last):\n  File \"/job/train.py\", line 7, in step\n    b = d[k]\nKeyError: %s\n" $$ >&2
        exit 1
    fi
    sleep 30' "$(hostname)" "$D")
agent a -- "${common[@]}" --local-addr 127.0.0.1 "${work[@]}"
agent b BUG=1 -- "${common[@]}" --local-addr 127.0.0.2 "${work[@]}"
agent_wait a 60
agent_wait b 60
expect_agent_rc a 6
expect_agent_rc b 6
SIG='KeyError at train.py:7 in step'
for n in a b; do
    grep -qF "muster: not retrying: the same failure ($SIG) ended 2 attempts in a row with no newer checkpoint (--max-same-failure 2)" "$T/$n.err" ||
        { show_all; fail "agent $n lacks the 'not retrying' line"; }
    grep -qF "muster:   signature  : $SIG (script)" "$T/$n.err" || { show_all; fail "agent $n's summary lacks the signature"; }
done
grep -q 'restarting workers (restart 1/5)' "$T/a.err" || { show_all; fail "a did not restart once"; }
grep -q 'restart 2/5' "$T/a.err" "$T/b.err" && { show_all; fail "a second restart happened"; }
# b's worker records each start before it fails: exactly attempts 0 and 1. a's worker of attempt
# 1 may be stopped (b failed at once) before its first line runs, so a has 1 or 2 lines.
expect_eq "b's attempts" "$(printf '1 0\n1 1')" "$(grep '^1 ' "$D/starts" | sort)"
grep -q '^0 0$' "$D/starts" || { cat "$D/starts" >&2; fail "a's first attempt did not start"; }
grep -q ' [2-9]$' "$D/starts" && { cat "$D/starts" >&2; fail "a third attempt started"; }
stop_server
assert_no_marked_left "after the job" 5
exit 0
