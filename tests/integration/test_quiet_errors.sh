#!/bin/bash
# --quiet hides information, never errors: each error exit below prints the line that explains
# it (`muster: error: ...`) and no informational line (common/log.h: an error is shown at every
# level). The checkpoint and log directories are refused after the agent has started, where its
# lines go through the console queue: the case where the one line that explained an exit 2 used
# to be lost.
. "$(dirname "$0")/lib.sh"

cd "$T" || fail "cd $T"
printf '#!/bin/sh\n: > %s/STARTED\n' "$T" > prog.sh
chmod +x prog.sh
: > afile
mkdir open && chmod 0777 open

# expect_quiet_error WHAT CODE PATTERN -- ARGS...: exit CODE, a stderr line 'muster: error: '
# matching PATTERN, every stderr line an error or a warning, no worker started.
expect_quiet_error() {
    local what=$1 code=$2 pattern=$3
    shift 3 # "--" stays: mrun's separator
    rm -f "$T/STARTED"
    IT_TIMEOUT=30 mrun -u PET_NPROC_PER_NODE -u PET_NNODES "$@"
    if [ "$RC" != "$code" ]; then
        show_output
        fail "$what: expected exit code $code, got $RC"
    fi
    if ! grep -Eq "^muster: error: .*$pattern" "$T/err"; then
        show_output
        fail "$what: --quiet printed no 'muster: error: ...$pattern' line"
    fi
    if grep -Ev '^muster: (error|warning): ' "$T/err" | grep -q .; then
        show_output
        fail "$what: --quiet printed lines that are neither errors nor warnings"
    fi
    [ -e "$T/STARTED" ] && fail "$what: a worker was started"
    return 0
}

run1=(run --quiet --standalone --nproc-per-node 1 --no-python)

expect_quiet_error "world-writable --checkpoint-dir" 2 "checkpoint-dir .*writable by others" -- \
    "${run1[@]}" --checkpoint-dir "$T/open" ./prog.sh
expect_quiet_error "--checkpoint-dir below a world-writable one" 2 "writable by others" -- \
    "${run1[@]}" --checkpoint-dir "$T/open/ckpt" ./prog.sh
expect_quiet_error "--log-dir below a file" 2 "log-dir .*not a directory" -- \
    "${run1[@]}" --log-dir "$T/afile/logs" ./prog.sh
expect_quiet_error "world-writable --log-dir" 2 "log-dir .*writable by others" -- \
    "${run1[@]}" --log-dir "$T/open" ./prog.sh
expect_quiet_error "bad --nproc-per-node" 2 "nproc-per-node" -- \
    run --quiet --standalone --nproc-per-node abc --no-python ./prog.sh
expect_quiet_error "unknown flag" 2 "no-such-flag" -- \
    run --quiet --standalone --no-such-flag 1 ./prog.sh

# a --master-port another process listens on
python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(60)' > "$T/port" &
IT_BG_PIDS="$IT_BG_PIDS $!"
for _ in $(seq 50); do [ -s "$T/port" ] && break; sleep 0.1; done
port=$(cat "$T/port")
[ -n "$port" ] || fail "the port holder did not start"
expect_quiet_error "busy --master-port" 2 "MASTER_PORT $port is in use" -- \
    "${run1[@]}" --master-port "$port" ./prog.sh

# and without --quiet the same refusal is the same one line
IT_TIMEOUT=30 mrun -u PET_NPROC_PER_NODE -- run --standalone --nproc-per-node 1 --no-python \
    --checkpoint-dir "$T/open" ./prog.sh
[ "$RC" = 2 ] && grep -q '^muster: error: .*writable by others' "$T/err" ||
    { show_output; fail "without --quiet: expected exit 2 and the refusal"; }
exit 0
