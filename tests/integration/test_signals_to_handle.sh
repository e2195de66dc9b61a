#!/bin/bash
# --signals-to-handle as torchrun's: a listed signal (SIGUSR1, SIGUSR2 for Slurm) stops the job.
# Each worker gets that same signal in its process group, muster waits for them and exits
# 128+N; an unlisted SIGUSR1 is not muster's to catch. Workers trap USR1/USR2 and write a file.
. "$(dirname "$0")/lib.sh"

cat > "$T/w.sh" <<'W'
#!/bin/bash
d=$1
sleep 60 &
p=$!
for s in USR1 USR2 HUP; do
    trap "echo $s > $d/sig.\$LOCAL_RANK; kill $p 2>/dev/null; exit 0" $s
done
: > "$d/ready.$LOCAL_RANK"
wait $p
W
chmod +x "$T/w.sh"

N=2
for sig in USR1; do
    D="$T/$sig"; mkdir -p "$D"
    mrun_bg -- run --standalone --nproc-per-node $N \
        --signals-to-handle "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2" --no-python "$T/w.sh" "$D"
    wait_for 60 files_at_least $N "$D/ready.*" || { show_output; fail "SIG$sig: workers did not start"; }
    kill -s "$sig" "$MPID"
    wait_rc "$MPID" 30
    expect_rc "muster after SIG$sig" $((128 + $(kill -l "$sig")))
    for r in $(seq 0 $((N - 1))); do
        [ -f "$D/sig.$r" ] || { show_output; fail "SIG$sig: local rank $r never got it"; }
        expect_eq "signal seen by local rank $r" "$sig" "$(cat "$D/sig.$r")"
    done
    grep -q "received SIG$sig: stopping the workers" "$T/err" || { show_output; fail "SIG$sig: no line saying so"; }
    assert_no_marked_left "muster exited on SIG$sig but workers remain" 0
done

# the list also reaches the workers, as torchrun exports it
D="$T/env"; mkdir -p "$D"
mrun -- run --standalone --signals-to-handle SIGTERM,SIGUSR1 --no-python /bin/sh -c \
    'echo "$TORCHELASTIC_SIGNALS_TO_HANDLE" > '"$D"'/list'
expect_rc "muster with /bin/sh" 0
expect_eq "TORCHELASTIC_SIGNALS_TO_HANDLE" "SIGTERM,SIGUSR1" "$(cat "$D/list")"

# a name that is no signal, or one muster cannot stop on: exit 2 before anything starts
mrun -- run --standalone --signals-to-handle SIGTERM,SIGFOO --no-python "$T/w.sh" "$T"
expect_rc "--signals-to-handle SIGFOO" 2
grep -q "SIGFOO" "$T/err" || { show_output; fail "the error does not name SIGFOO"; }
mrun -- run --standalone --signals-to-handle SIGKILL --no-python "$T/w.sh" "$T"
expect_rc "--signals-to-handle SIGKILL" 2
exit 0
