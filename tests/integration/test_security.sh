#!/bin/bash
# The launcher's side of the secure control plane: a multi-node agent without a token refuses to
# start and says how to make one; `muster server --token-file` writes a fresh 0600 token when the
# file is missing and refuses a token file others can read; `muster status` is refused without the
# right token; a job with a token file runs; secrets appear in no output.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

# 1. no token across nodes: the per-user token ~/.muster/token (made 0600 on first use, in a
#    0700 directory); a home where it cannot be made: exit 2, one line naming the other ways
IT_TIMEOUT=20 mrun -u MUSTER_TOKEN HOME=/proc/self -- run --nnodes 2 --rdzv-endpoint \
    127.0.0.1:29999 --rdzv-id sec --no-python /bin/true
[ "$RC" = 2 ] || fail "multi-node without a usable per-user token: expected exit 2, got $RC"
[ "$(wc -l < "$T/err")" = 1 ] || { cat "$T/err" >&2; fail "expected exactly one line on stderr"; }
grep -q "^muster: error: a multi-node job needs a shared token (--token-file FILE, MUSTER_TOKEN, or the per-user ~/.muster/token), but cannot create" "$T/err" \
    || { cat "$T/err" >&2; fail "the error does not say how to give a token"; }
mkdir -m 700 "$T/home"
P=$(free_port)
for i in 1 2; do
    agent u$i -u MUSTER_TOKEN HOME="$T/home" -- --nnodes 2 --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:$P --rdzv-id usertok --no-python /bin/true
done
for i in 1 2; do agent_wait u$i 60; expect_agent_rc u$i 0; done
[ "$(stat -c %a "$T/home/.muster/token")" = 600 ] || fail "~/.muster/token is not 0600"
[ "$(stat -c %a "$T/home/.muster")" = 700 ] || fail "~/.muster is not 0700"

# 2. a server writes a new token file (0600) when it is missing
TF=$T/job.token
SERVER_NO_HTTP=1 start_server -u MUSTER_TOKEN -- --token-file "$TF"
[ -f "$TF" ] || fail "muster server did not write $TF"
[ "$(stat -c %a "$TF")" = 600 ] || fail "token file mode is $(stat -c %a "$TF"), not 600"
TOKEN=$(cat "$TF")
[ "${#TOKEN}" -ge 32 ] || fail "token too short: ${#TOKEN} characters"
grep -q "wrote a new server secret to $TF (0600; keep it on this host): mint one credential per job" "$SERR" || fail "the server did not say it wrote $TF and what to hand the nodes"
grep -qF "$TOKEN" "$SERR" && fail "the server printed the token"

# 3. agents with --token-file run a 2-node job; status needs the token
JOB=sec-$$
mkdir -p "$T/w"
for i in 1 2; do
    agent a$i -u MUSTER_TOKEN -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT \
        --rdzv-id $JOB --token-file "$TF" --rdzv-conf join_timeout=30 --no-python "$WORKER" hold "$T/w"
done
wait_for 30 files_at_least 2 "$T/w/ready.*.0" || { show_all; fail "the workers did not start"; }
OUTF=$T/st.out ERRF=$T/st.err IT_TIMEOUT=10 mrun -u MUSTER_TOKEN -- status \
    --rdzv-endpoint 127.0.0.1:$SPORT --token-file "$TF"
[ "$RC" = 0 ] && grep -q "$JOB" "$T/st.out" || { cat "$T/st.out" "$T/st.err" >&2; fail "muster status with the token failed"; }
OUTF=$T/st2.out ERRF=$T/st2.err IT_TIMEOUT=10 mrun MUSTER_TOKEN=wrong-token -- status \
    --rdzv-endpoint 127.0.0.1:$SPORT
[ "$RC" != 0 ] || fail "muster status with a wrong token was answered"
grep -q "refused" "$T/st2.err" || { cat "$T/st2.err" >&2; fail "no 'refused' reason for a wrong token"; }
grep -qF "$TOKEN" "$T/st.out" "$T/st.err" "$T/st2.out" "$T/st2.err" "$T"/a*.err "$T"/a*.out \
    && fail "a token appeared in some output"
for i in 1 2; do kill -TERM "${APID[a$i]}" 2>/dev/null; done
for i in 1 2; do agent_wait a$i 30; done
stop_server

# 4. a token file others can read is refused, without printing the token
chmod 644 "$TF"
IT_TIMEOUT=20 mrun -u MUSTER_TOKEN -- run --nnodes 2 --rdzv-endpoint 127.0.0.1:29999 \
    --rdzv-id sec --token-file "$TF" --no-python /bin/true
[ "$RC" = 2 ] || fail "a 0644 token file: expected exit 2, got $RC"
grep -q "too open" "$T/err" || { cat "$T/err" >&2; fail "no 'too open' reason"; }
grep -qF "$TOKEN" "$T/err" && fail "the token was printed"
assert_no_marked_left "after the test" 5
