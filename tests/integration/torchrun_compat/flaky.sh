#!/bin/sh
# Worker for test_torchrun_compat.sh (--no-python): records DIR/start.$RANK.$TORCHELASTIC_RESTART_COUNT;
# on the first attempt (restart count 0) rank 1 exits 3 once every rank has started, later
# attempts succeed and touch DIR/$RANK.
dir=$1
n=${TORCHELASTIC_RESTART_COUNT:?}
: > "$dir/start.$RANK.$n"
if [ "$n" = 0 ]; then
    if [ "$RANK" = 1 ]; then
        i=0
        while [ ! -e "$dir/start.0.0" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
        echo "rank 1 fails in attempt 0"
        exit 3
    fi
    # rank 0 waits to be stopped by muster (at most 60 s)
    sleep 60
    exit 0
fi
echo "attempt $n ok"
touch "$dir/$RANK"
