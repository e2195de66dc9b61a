#!/bin/sh
# The worker of test_dashboard_browser.sh (started with --no-python): writes `env` to
# DIR/env.<RANK>.<restart> and its pid to DIR/pid.<RANK>.<restart>, creates
# DIR/ready.<RANK>.<restart>, then waits until DIR/release exists and exits 0. Rank 0 writes the
# checkpoint ckpt_000120.pt (step 120) into MUSTER_CHECKPOINT_DIR once DIR/ckpt.go exists (any
# attempt, once), atomically (temporary name, rename), then creates DIR/ckpt.done.
dir=$1
r=${RANK:?RANK is not set}
n=${TORCHELASTIC_RESTART_COUNT:-0}
env > "$dir/.env.$r.$n.$$" && mv "$dir/.env.$r.$n.$$" "$dir/env.$r.$n"
echo $$ > "$dir/.pid.$r.$n" && mv "$dir/.pid.$r.$n" "$dir/pid.$r.$n"
: > "$dir/ready.$r.$n"
echo "dash_worker rank $r attempt $n ready"
echo "dash_worker rank $r says <b id=\"logevil\">bold</b><img src=x onerror=\"window.__pwned=2\">"
while [ ! -e "$dir/release" ]; do
    if [ "$r" = 0 ] && [ -e "$dir/ckpt.go" ] && [ ! -e "$dir/ckpt.done" ]; then
        c=${MUSTER_CHECKPOINT_DIR:?MUSTER_CHECKPOINT_DIR is not set}
        { echo "checkpoint step 120 attempt $n"; head -c 4096 /dev/urandom; } > "$c/.ckpt.tmp"
        mv "$c/.ckpt.tmp" "$c/ckpt_000120.pt"
        : > "$dir/ckpt.done"
        echo "dash_worker wrote ckpt_000120.pt"
    fi
    sleep 0.05
done
exit 0
