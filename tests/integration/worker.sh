#!/bin/sh
# A configurable fake training worker for the integration tests, started by muster with
# --no-python. It reads the torchrun worker environment (RANK, TORCHELASTIC_RESTART_COUNT, ...).
#
#   worker.sh dump DIR [SLEEP_S]       write `env` to DIR/env.<RANK>.<restart>, print one line on
#                                      stdout and one on stderr, optionally sleep, exit 0
#   worker.sh fail-once DIR RANK CODE  dump; the worker with RANK exits CODE in attempt 0 once
#                                      every worker of the attempt has dumped
#   worker.sh exit DIR RANK CODE       dump; the worker with RANK exits CODE (every attempt),
#                                      after the others are ready; the others sleep 60 s
#   worker.sh killself DIR RANK        dump; the worker with RANK SIGKILLs itself; others sleep
#   worker.sh trap DIR                 dump, create DIR/ready.<RANK>, wait; on SIGTERM/SIGINT
#                                      write the signal name to DIR/sig.<RANK> and exit 0
#   worker.sh ignore DIR               like trap but ignores SIGTERM/SIGINT (needs SIGKILL)
#   worker.sh sleep DIR SECONDS        dump, create DIR/ready.<RANK>, sleep
#   worker.sh hold DIR                 dump, create DIR/ready.<RANK>.<restart>, then wait until
#                                      DIR/release exists and exit 0; on SIGTERM/SIGINT write
#                                      the time (date +%s%N) to DIR/stop.<RANK>.<restart>, exit 0.
#                                      Each start also appends "<RANK> <restart> <pid>" to
#                                      DIR/starts (the multi-node tests count starts with it)
#   worker.sh errorfile DIR RANK       dump; the worker with RANK writes a torchelastic error.json
#                                      ("ValueError: boom") to $TORCHELASTIC_ERROR_FILE, exits 1
. "$(dirname "$0")/worker_args.sh"

dump() {
    env > "$dir/.env.$r.$n.$$" && mv "$dir/.env.$r.$n.$$" "$dir/env.$r.$n"
    echo "hello-from-rank-$r attempt $n"
    echo "stderr-from-rank-$r attempt $n" >&2
}

ready() {
    : > "$dir/ready.$r.$n"
}

# Waits until N workers of this attempt are ready (so a failure does not race the others' start).
wait_all_ready() {
    i=0
    while [ "$(ls "$dir" | grep -c "^ready\..*\.$n\$")" -lt "${LOCAL_WORLD_SIZE:-1}" ] && [ $i -lt 500 ]; do
        sleep 0.02
        i=$((i + 1))
    done
}

case "$mode" in
dump)
    dump
    [ $# -ge 1 ] && sleep "$1"
    exit 0
    ;;
fail-once)
    dump
    ready
    if [ "$r" = "$1" ] && [ "$n" = 0 ]; then
        wait_all_ready
        echo "rank $r failing with $2 in attempt $n" >&2
        exit "$2"
    fi
    exit 0
    ;;
exit)
    dump
    ready
    if [ "$r" = "$1" ]; then
        wait_all_ready
        echo "rank $r exiting with $2" >&2
        exit "$2"
    fi
    exec sleep 60
    ;;
killself)
    dump
    ready
    if [ "$r" = "$1" ]; then
        wait_all_ready
        kill -9 $$
    fi
    exec sleep 60
    ;;
trap)
    dump
    sleep 60 &
    p=$!
    trap 'echo TERM > "$dir/sig.$r"; kill $p 2>/dev/null; wait $p; exit 0' TERM
    trap 'echo INT > "$dir/sig.$r"; kill $p 2>/dev/null; wait $p; exit 0' INT
    ready
    wait $p
    exit 0
    ;;
ignore)
    trap '' TERM INT
    dump
    ready
    # the sleep inherits the ignored dispositions; only SIGKILL ends the pair
    sleep 60
    sleep 60
    exit 0
    ;;
sleep)
    dump
    ready
    exec sleep "$1"
    ;;
hold)
    dump
    echo "$r $n $$" >> "$dir/starts"
    trap 'date +%s%N > "$dir/stop.$r.$n"; exit 0' TERM INT
    ready
    while [ ! -e "$dir/release" ]; do
        sleep 0.05
    done
    exit 0
    ;;
errorfile)
    dump
    ready
    if [ "$r" = "$1" ]; then
        wait_all_ready
        cat > "$TORCHELASTIC_ERROR_FILE" <<EOF
{"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\nValueError: boom\n", "timestamp": "1700000000"}}}
EOF
        exit 1
    fi
    exit 0
    ;;
*)
    echo "worker.sh: unknown mode $mode" >&2
    exit 99
    ;;
esac
