#!/bin/bash
# A server whose stderr nobody reads ("nothing blocks an event loop"): its log lines
# go through a bounded queue written by a thread, so 1,500 refused addresses (one line each,
# ~250 KB into a 64 KB FIFO that is never read) do not hold the loop. Before, each line waited up
# to 1 s for room: the server answered nobody for minutes. A job still joins and finishes with
# its own exit code, and SIGTERM still stops the server within a few seconds.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

PORT=$(free_port)
mkfifo "$T/err.fifo"
exec 3<>"$T/err.fifo" # holds the FIFO open for the server; nobody ever reads it
TOK=stall-$$-secret
env MUSTER_TOKEN=$TOK MUSTER_IT_MARK="$MARK" "$MUSTER_BIN" server --listen "127.0.0.1:$PORT" \
    --first-byte-timeout-ms 300 >/dev/null 2>"$T/err.fifo" &
SRV=$!
IT_BG_PIDS="$IT_BG_PIDS $SRV"
up() { (exec 4<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }
wait_for 10 up || fail "the server did not listen on $PORT"

# 1,500 silent connections, each from a /24 of its own: each closed after 300 ms and logged
silent_flood -t 30 127.0.0.1 "$PORT" 1500 1 127.100.0.2
sleep 2 # every first-byte deadline passed: ~1,500 lines queued behind the full FIFO

t0=$(now_ms)
IT_TIMEOUT=60 mrun MUSTER_TOKEN=$TOK -- run --nnodes 1 --nproc-per-node 2 \
    --rdzv-endpoint "127.0.0.1:$PORT" --rdzv-id stall-$$ --no-python /bin/sh -c 'exit 5'
dt=$(($(now_ms) - t0))
note "a job against the server with a stalled stderr: exit $RC in $dt ms"
expect_rc "the job's own exit code" 5
[ "$dt" -lt 30000 ] || fail "the job took $dt ms: the server's loop waited on its stderr"

t1=$(now_ms)
kill -TERM "$SRV"
wait_for 10 pid_gone "$SRV" || fail "the server did not stop within 10 s of SIGTERM (stderr stalled)"
note "server stopped $(($(now_ms) - t1)) ms after SIGTERM"
kill "$FPID" 2>/dev/null
exec 3<&-
exit 0
