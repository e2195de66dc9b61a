#!/bin/bash
# --exclude-after: three loopback agents of one elastic job (--nnodes 2:3, distinct
# --local-addr so the server sees three nodes), agent c's worker always fails. After 2 failures
# within the window the server excludes c: its re-JOIN is refused with a clear ERROR line and it
# exits non-zero; a and b go on as a 2-node job and finish. While they run, `muster status` and
# /status list c as excluded with the reason.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server
JOB=exclude-$$
common=(--nnodes 2:3 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB
        --rdzv-conf join_timeout=30,last_call_timeout=1 --max-restarts 5 --exclude-after 2)
# FAIL=1: this node's worker fails at once; the others run 4 s (long enough to be observed)
work=(--no-python /bin/bash -c '[ "${FAIL:-0}" = 1 ] && exit 7; sleep 4; exit 0')
agent a -- "${common[@]}" --local-addr 127.0.0.1 "${work[@]}"
agent b -- "${common[@]}" --local-addr 127.0.0.2 "${work[@]}"
agent c FAIL=1 -- "${common[@]}" --local-addr 127.0.0.3 "${work[@]}"

agent_wait c 40
expect_agent_rc c 3 # a rendezvous failure
grep -q "node .* (127.0.0.3) is excluded from job $JOB: caused 2 failures within 3600 s" "$T/c.err" \
    || { show_all; fail "agent c's stderr lacks the exclusion line"; }
[ "$(grep -c 'is excluded from job' "$T/c.err")" = 1 ] || fail "exclusion said more than once: $(cat "$T/c.err")"

# the job is still running (a and b): status names the excluded node and why
OUTF=$T/st.out ERRF=$T/st.err IT_TIMEOUT=10 mrun -- status --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB
[ "$RC" = 0 ] || { cat "$T/st.out" "$T/st.err" >&2; fail "muster status exited $RC"; }
grep -E "127\.0\.0\.3 +2 +caused 2 failures within 3600 s" "$T/st.out" \
    || { cat "$T/st.out" >&2; fail "muster status does not list the excluded node"; }
if [ -n "$SHTTP" ]; then
    http_get "$SHTTP" /status
    grep -q '"excluded":true' "$T/http.body" && grep -q '"addr":"127.0.0.3"' "$T/http.body" \
        || { cat "$T/http.body" >&2; fail "/status does not list the excluded node"; }
fi

agent_wait a 40
expect_agent_rc a 0
agent_wait b 40
expect_agent_rc b 0
grep -q 'restarting workers (restart 2/5)' "$T/a.err" || { show_all; fail "a did not restart twice"; }
grep -q 'restarting workers (restart 3/5)' "$T/a.err" && { show_all; fail "a restarted a third time"; }
grep -q "refused the JOIN of excluded node" "$SERR" || { cat "$SERR" >&2; fail "the server did not log the refusal"; }
stop_server
assert_no_marked_left "after the job" 5
exit 0
