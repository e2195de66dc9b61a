#!/bin/bash
# Any start order: an agent whose rendezvous endpoint does not answer yet — a
# host still booting (TCP accepted, then silence), a server at its handshake limit (accepted,
# then closed before HELLO is answered) — retries with backoff until the join timeout and
# says so, instead of quitting after the 3 s heartbeat timeout or at the first close. Then the
# real server comes up on that port and the job runs to its exit code.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

PORT=$(free_port)
JOB=retry-$$
# phase 1 (5 s): accept and say nothing; phase 2 (4 s): accept and close at once
cat > "$T/fake.py" << 'EOP'
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
s.settimeout(0.2)
held, t0, n = [], time.monotonic(), [0, 0]
while time.monotonic() - t0 < 9:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    if time.monotonic() - t0 < 5:
        held.append(c); n[0] += 1
    else:
        c.close(); n[1] += 1
print("fake: %d held silent, %d closed" % tuple(n), flush=True)
EOP
python3 "$T/fake.py" "$PORT" > "$T/fake.out" 2>&1 &
FAKE=$!
# listening before the agent starts: an agent finding the port free would host the rendezvous
# there itself (node rank 0 of a c10d endpoint on this host) and never see the fake
listening() { ss -Hltn "sport = :$PORT" | grep -q .; }
wait_for 20 listening || fail "the fake endpoint did not listen on $PORT: $(cat "$T/fake.out")"
agent a1 -- --nnodes 1 --nproc-per-node 1 --rdzv-endpoint "127.0.0.1:$PORT" --rdzv-id "$JOB" \
    --no-python sh -c 'echo worker ran; exit 7'
wait "$FAKE"
grep -q "held silent" "$T/fake.out" || fail "the fake endpoint did not run: $(cat "$T/fake.out")"
kill -0 "${APID[a1]}" 2> /dev/null || { show_all; fail "the agent quit while the endpoint was not answering"; }
SERVER_PORT=$PORT start_server
agent_wait a1 60
expect_eq "exit code of the job (the worker's own)" 7 "$RC"
grep -q "worker ran" "$T/a1.out" || { show_all; fail "the worker did not run"; }
grep -q "waiting for the rendezvous at 127.0.0.1:$PORT (no answer" "$T/a1.err" ||
    { show_all; fail "the agent did not say it retries a silent endpoint"; }
note "$(cat "$T/fake.out"); agent: $(grep -m1 'waiting for the rendezvous' "$T/a1.err")"
stop_server
assert_no_marked_left "end of test" 10
exit 0
