#!/bin/bash
# Containers: under a PID 1 that never reaps orphans (many container entrypoints; here
# a Python process that waits only for the musters it starts, in a PID namespace of its own), ten
# runs leave no zombie behind: muster's reaper ends as muster's child, not PID 1's.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root for a PID namespace (unshare --pid)"
command -v unshare >/dev/null || skip "needs unshare (util-linux)"
unshare --pid --fork --mount-proc /bin/true 2>/dev/null || skip "cannot make a PID namespace here"

out=$(timeout 120 unshare --pid --fork --mount-proc /usr/bin/python3 \
    "$MUSTER_SRC/tests/integration/container/pid1.py" "$MUSTER_BIN" 10 2>"$T/err")
note "$out"
case "$out" in
failed=0\ zombies=0*) ;;
failed=0*) fail "zombies left under a non-reaping PID 1 after 10 runs: $out" ;;
*) cat "$T/err" >&2; fail "the runs under a non-reaping PID 1 failed: $out" ;;
esac
exit 0
