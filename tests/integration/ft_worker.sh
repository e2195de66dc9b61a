#!/bin/sh
# A fake worker for the fault-tolerance tests (test_ft_*.sh), started by muster with --no-python.
# It reads the worker environment (RANK, TORCHELASTIC_RESTART_COUNT, MUSTER_CHECKPOINT_DIR,
# MUSTER_RESUME_FROM, MUSTER_HEARTBEAT_FILE). Every mode first writes `env` to
# DIR/env.<RANK>.<restart> and MUSTER_RESUME_FROM (or "none") to DIR/resume.<RANK>.<restart>.
#
#   ft_worker.sh resume DIR            just that, exit 0
#   ft_worker.sh ckpt DIR NAME...      rank 0 writes each NAME into MUSTER_CHECKPOINT_DIR
#                                      atomically (temporary name, rename) and waits until muster
#                                      has recorded it in .muster/registry.json; exit 0
#   ft_worker.sh corrupt-fail DIR      attempt 0: rank 0 writes ckpt_1.pt and ckpt_2.pt (each
#                                      recorded), then appends bytes to ckpt_2.pt and exits 1;
#                                      the other ranks wait to be stopped. Later attempts: exit 0
#   ft_worker.sh beat DIR BEATS        every rank touches MUSTER_HEARTBEAT_FILE every 0.1 s.
#                                      Rank 1 in attempt 0 stops after BEATS touches, writes the
#                                      time right after its last touch (date +%s%N) to
#                                      DIR/lastbeat.1.0 and sleeps; rank 0 in attempt 0 beats
#                                      until stopped. Later attempts: BEATS touches, exit 0
#   ft_worker.sh nobeat DIR SECONDS    never touches the heartbeat file; sleeps, exit 0
#   ft_worker.sh chatty DIR SECONDS    never touches it either; prints a line every 0.2 s for
#                                      SECONDS, exit 0
#   ft_worker.sh spare DIR             hot-spare tests. Attempt 0: rank 0 writes ckpt_1.pt and
#                                      ckpt_2.pt (each recorded), then creates DIR/ckpt.done;
#                                      every rank creates DIR/ready.<RANK>.0; a worker with
#                                      FAIL=1 waits for DIR/ckpt.done and DIR/go, then exits 7
#                                      (local rank 0) or ignores SIGTERM until killed (the
#                                      others); the rest wait to be stopped (SIGTERM: exit 0). Later
#                                      attempts: ready.<RANK>.<restart>, then wait for
#                                      DIR/finish when HOLD=1, exit 0
#   ft_worker.sh trap DIR              creates DIR/ready.<RANK>.<restart>, waits; on SIGTERM,
#                                      SIGUSR1 or SIGINT writes the signal's name to
#                                      DIR/sig.<RANK>.<restart> and exits 0
. "$(dirname "$0")/worker_args.sh"

env > "$dir/.env.$r.$n.$$" && mv "$dir/.env.$r.$n.$$" "$dir/env.$r.$n"
printf '%s\n' "${MUSTER_RESUME_FROM:-none}" > "$dir/.resume.$r.$n.$$" &&
    mv "$dir/.resume.$r.$n.$$" "$dir/resume.$r.$n"
echo "ft_worker rank $r attempt $n resume ${MUSTER_RESUME_FROM:-none}"

# write_ckpt NAME: atomically, then wait (up to 20 s) until muster's registry lists it.
write_ckpt() {
    c=${MUSTER_CHECKPOINT_DIR:?MUSTER_CHECKPOINT_DIR is not set}
    { echo "checkpoint $1 rank $r attempt $n"; head -c 2048 /dev/urandom; } > "$c/.$1.tmp"
    mv "$c/.$1.tmp" "$c/$1"
    i=0
    while ! grep -qF "\"$1\"" "$c/.muster/registry.json" 2>/dev/null; do
        i=$((i + 1))
        if [ $i -gt 1000 ]; then
            echo "ft_worker: $1 was not recorded within 20 s" >&2
            exit 98
        fi
        sleep 0.02
    done
    echo "ft_worker wrote $1"
}

beat() {
    : > "${MUSTER_HEARTBEAT_FILE:?MUSTER_HEARTBEAT_FILE is not set}"
}

case "$mode" in
resume)
    exit 0
    ;;
ckpt)
    if [ "$r" = 0 ]; then
        for name in "$@"; do
            write_ckpt "$name"
        done
    fi
    exit 0
    ;;
corrupt-fail)
    [ "$n" != 0 ] && exit 0
    if [ "$r" = 0 ]; then
        write_ckpt ckpt_1.pt
        write_ckpt ckpt_2.pt
        printf 'garbage' >> "$MUSTER_CHECKPOINT_DIR/ckpt_2.pt"
        echo "ft_worker corrupted ckpt_2.pt, failing"
        exit 1
    fi
    exec sleep 60
    ;;
beat)
    beats=$1
    if [ "$n" = 0 ] && [ "$r" = 0 ]; then
        while :; do
            beat
            sleep 0.1
        done
    fi
    i=0
    while [ $i -lt "$beats" ]; do
        beat
        i=$((i + 1))
        [ $i -lt "$beats" ] && sleep 0.1
    done
    if [ "$n" = 0 ] && [ "$r" = 1 ]; then
        date +%s%N > "$dir/.lastbeat.$r.$n" && mv "$dir/.lastbeat.$r.$n" "$dir/lastbeat.$r.$n"
        echo "ft_worker rank $r stops beating"
        exec sleep 60
    fi
    exit 0
    ;;
nobeat)
    exec sleep "$1"
    ;;
chatty)
    end=$(( $(date +%s%N) / 1000000 + $1 * 1000 ))
    while [ "$(( $(date +%s%N) / 1000000 ))" -lt "$end" ]; do
        echo "working $RANK"
        sleep 0.2
    done
    ;;
spare)
    if [ "$n" != 0 ]; then
        : > "$dir/ready.$r.$n"
        while [ "${HOLD:-0}" = 1 ] && [ ! -e "$dir/finish" ]; do sleep 0.05; done
        exit 0
    fi
    trap 'exit 0' TERM INT
    [ "${FAIL:-0}" = 1 ] && [ "${LOCAL_RANK:-0}" != 0 ] && trap '' TERM INT
    if [ "$r" = 0 ]; then
        write_ckpt ckpt_1.pt
        write_ckpt ckpt_2.pt
        : > "$dir/ckpt.done"
    fi
    : > "$dir/ready.$r.$n"
    while [ ! -e "$dir/ckpt.done" ] || { [ "${FAIL:-0}" = 1 ] && [ ! -e "$dir/go" ]; } ||
        [ "${FAIL:-0}" != 1 ] || [ "${LOCAL_RANK:-0}" != 0 ]; do
        sleep 0.05
    done
    echo "ft_worker rank $r failing with 7 in attempt $n" >&2
    exit 7
    ;;
trap)
    sleep 60 &
    p=$!
    for s in TERM USR1 INT; do
        trap "echo $s > '$dir/sig.$r.$n'; kill \$p 2>/dev/null; wait \$p; exit 0" $s
    done
    : > "$dir/ready.$r.$n"
    wait $p
    exit 0
    ;;
*)
    echo "ft_worker.sh: unknown mode $mode" >&2
    exit 99
    ;;
esac
