#!/bin/bash
# Plain-PSK joins: an agent with --rdzv-conf forward_secrecy=0 joins a default
# server beside a default (ECDHE-PSK) agent, and their job runs; a server started with
# --require-forward-secrecy refuses the plain-PSK agent (non-zero exit, a clear line, no worker
# started) and still admits the default agent; a bad value is a usage error.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

TOK=fs-$$-secret
start_server MUSTER_TOKEN=$TOK
mkdir -p "$T/w"
agent plain MUSTER_TOKEN=$TOK -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT \
    --rdzv-id fs-$$ --rdzv-conf join_timeout=30,forward_secrecy=0 --no-python "$WORKER" dump "$T/w"
agent fs MUSTER_TOKEN=$TOK -- --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT \
    --rdzv-id fs-$$ --rdzv-conf join_timeout=30 --no-python "$WORKER" dump "$T/w"
agent_wait plain 60
agent_wait fs 60
expect_agent_rc plain 0
expect_agent_rc fs 0
check_ranks "$T/w" 0 2 2
stop_server

SERVER_TAG=strict start_server MUSTER_TOKEN=$TOK -- --require-forward-secrecy
rm -rf "$T/w2" && mkdir -p "$T/w2"
agent plain2 MUSTER_TOKEN=$TOK -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT \
    --rdzv-id fs2-$$ --rdzv-conf join_timeout=10,forward_secrecy=false --no-python "$WORKER" dump "$T/w2"
agent_wait plain2 40
[ "$RC" != 0 ] || fail "a plain-PSK agent joined a server that requires forward secrecy"
[ -z "$(ls "$T/w2")" ] || fail "a worker started although the handshake was refused"
grep -qi "handshake\|TLS" "$T/plain2.err" || { show_all; fail "no TLS reason in the refused agent's stderr"; }
agent fs2 MUSTER_TOKEN=$TOK -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$SPORT \
    --rdzv-id fs2-$$ --rdzv-conf join_timeout=20 --no-python "$WORKER" dump "$T/w2"
agent_wait fs2 40
expect_agent_rc fs2 0
stop_server

out=$("$MUSTER_BIN" run --dry-run --standalone --rdzv-conf forward_secrecy=maybe --no-python /bin/true 2>&1)
rc=$?
expect_eq "exit code of forward_secrecy=maybe" 2 "$rc"
echo "$out" | grep -q "forward_secrecy must be true or false" || fail "no clear line for a bad value: $out"
assert_no_marked_left "after the jobs" 5
