#!/bin/bash
# Leftovers after kill -9: a muster killed with SIGKILL leaves its private
# $TMPDIR/muster-RUN_ID-* directory; the next muster of the same user removes it, never the
# directory of a muster still running, nor anything of another user; pre-flight reports of
# runs without --log-dir are pruned to the newest 8 of this user.
. "$(dirname "$0")/lib.sh"

TD="$T/tmp" && mkdir -m 0700 "$TD"
D="$T/w" && mkdir -p "$D"

# a muster killed with SIGKILL while its worker runs
mrun_bg TMPDIR="$TD" -- run --standalone --no-python "$WORKER" sleep "$D" 60
wait_for 30 files_at_least 1 "$D/ready.*" || { show_output; fail "the worker did not start"; }
kill -9 "$MPID"
wait "$MPID" 2>/dev/null
assert_no_marked_left "kill -9 of muster" 10
dead=$(ls -d "$TD"/muster-*/ 2>/dev/null)
[ -n "$dead" ] || fail "the killed muster left no private directory (nothing to test)"

# a muster that keeps running, and another user's marked directory
rm -f "$D"/ready.*
OUTF="$T/live.out" ERRF="$T/live.err" mrun_bg TMPDIR="$TD" -- run --standalone \
    --no-python "$WORKER" sleep "$D" 60
LIVE=$MPID
wait_for 30 files_at_least 1 "$D/ready.*" || { cat "$T/live.err" >&2; fail "the live worker did not start"; }
live=$(ls -d "$TD"/muster-*/ | grep -vxF "$dead")
[ -n "$live" ] || fail "the running muster has no private directory"
if [ "$(id -u)" = 0 ]; then
    mkdir "$TD/muster-other-1-abcdef" && : > "$TD/muster-other-1-abcdef/.muster-flat"
    chown -R 65534 "$TD/muster-other-1-abcdef"
    : > "$TD/muster-other-preflight.json" && chown 65534 "$TD/muster-other-preflight.json"
    touch -d '2000-01-01' "$TD/muster-other-preflight.json"
fi
# twelve old pre-flight reports of ours, each a minute apart
for i in $(seq 1 12); do
    echo '{}' > "$TD/muster-old$i-preflight.json"
    touch -d "2020-01-01 00:$(printf %02d $i):00" "$TD/muster-old$i-preflight.json"
done

mrun TMPDIR="$TD" -- run --standalone --no-python /bin/true
expect_rc "a run after the kill" 0
[ -e "$dead" ] && fail "the killed muster's directory is still there after the next run: $dead"
[ -d "$live" ] || fail "the next run removed the directory of a muster still running"
if [ "$(id -u)" = 0 ]; then
    [ -e "$TD/muster-other-1-abcdef/.muster-flat" ] || fail "another user's directory was removed"
    [ -e "$TD/muster-other-preflight.json" ] || fail "another user's report was removed"
fi
left=$(ls "$TD" | grep -c '^muster-old[0-9]*-preflight.json$')
expect_eq "reports of ours kept" 8 "$left"
for i in 5 12; do
    [ -e "$TD/muster-old$i-preflight.json" ] || fail "a newest report was removed: old$i"
done
[ -e "$TD/muster-old4-preflight.json" ] && fail "an old report beyond the newest 8 stayed: old4"

kill -TERM "$LIVE"
wait "$LIVE" 2>/dev/null
[ -e "$live" ] && fail "the live muster did not remove its own directory at exit: $live"
exit 0
