#!/bin/sh
# Worker for test_torchrun_compat_multi.sh (--no-python): writes its environment to
# DIR/w$WORLD_SIZE/env.$RANK.$TORCHELASTIC_RESTART_COUNT (one folder per world size, so a
# scale-up round does not overwrite the first round's files), then waits until DIR/release
# exists and exits 0. SIGTERM (the round being re-formed) also exits 0.
dir=$1
w=$dir/w$WORLD_SIZE
mkdir -p "$w"
env > "$w/.env.$RANK.$$" && mv "$w/.env.$RANK.$$" "$w/env.$RANK.$TORCHELASTIC_RESTART_COUNT"
echo "hold rank $RANK world $WORLD_SIZE"
trap 'exit 0' TERM INT
i=0
while [ ! -e "$dir/release" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$dir/release" ] || exit 5
