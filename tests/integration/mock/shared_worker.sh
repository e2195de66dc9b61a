#!/bin/bash
# Worker for the shared-GPU tests (test_shared_*.sh); not a mock, it lives here beside them.
# Usage: shared_worker.sh MODE DIR [ARGS]
# Every start appends "pid restart_count" to DIR/starts.TASK and dumps its environment to
# DIR/env.TASK.RESTART. Modes:
#   loop N                 N iterations of a 0.1 s sleep, one line each in DIR/ticks.TASK; exit 0
#   fail-once TASK CODE    that task exits CODE in its first start (a marker file), else loop 15
#   always TASK CODE       that task always exits CODE; the others loop 10
#   sleep                  sleeps until killed (writes DIR/up.TASK first)
set -u
mode=$1 dir=$2
shift 2
i=$MUSTER_TASK_INDEX
echo "$$ $TORCHELASTIC_RESTART_COUNT" >> "$dir/starts.$i"
env > "$dir/env.$i.$TORCHELASTIC_RESTART_COUNT"
loop() {
    for ((k = 0; k < $1; k++)); do
        echo "$$ $k" >> "$dir/ticks.$i"
        sleep 0.1
    done
    touch "$dir/done.$i"
    exit 0
}
case $mode in
loop) loop "$1" ;;
fail-once)
    if [ "$i" = "$1" ] && [ ! -e "$dir/failed.$i" ]; then
        touch "$dir/failed.$i"
        sleep 0.3
        exit "$2"
    fi
    loop 15 ;;
always)
    if [ "$i" = "$1" ]; then
        sleep 0.1
        exit "$2"
    fi
    loop 10 ;;
sleep)
    touch "$dir/up.$i"
    exec sleep 1000 ;;
esac
echo "shared_worker.sh: unknown mode $mode" >&2
exit 64
