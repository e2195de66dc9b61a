#!/bin/bash
# A worker killed from outside (kill -9 of its pid, as an operator or the OOM killer would) is
# an infrastructure-like failure: the same signature "signal 9 (SIGKILL)" in every attempt does
# not stop the job (--max-same-failure 2, the default), it restarts until --max-restarts is
# spent (4 attempts of --max-restarts 3) and exits 128 + 9. Then the opposite on the same shell
# worker: a Python traceback in its stderr with exit 1 (a script error) twice in a row stops
# after 2 attempts with exit 6.
. "$(dirname "$0")/lib.sh"

D="$T/w"
mkdir -p "$D"
mrun_bg -- run --standalone --nproc-per-node 2 --max-restarts 3 --no-python "$WORKER" hold "$D"
for k in 0 1 2 3; do
    _started() { grep -q "^0 $k " "$D/starts" 2>/dev/null; }
    wait_for 30 _started || { show_output; fail "attempt $k of rank 0 never started"; }
    pid=$(sed -n "s/^0 $k \([0-9]*\)$/\1/p" "$D/starts")
    kill -9 "$pid" || fail "cannot kill rank 0's pid $pid"
done
wait_rc "$MPID" 60
expect_rc "rank 0 SIGKILLed from outside in each of 4 attempts" 137
expect_eq "attempts of rank 0" 4 "$(grep -c '^0 ' "$D/starts")"
grep -q 'not retrying' "$T/err" && { show_output; fail "a kill from outside was taken for the same failure"; }
grep -q 'restarting workers (restart 3/3)' "$T/err" || { show_output; fail "not every restart was used"; }
grep -qF '(SIGKILL) [' "$T/err" && { show_output; fail "the failure line repeats the signal as a signature"; }
grep -qF 'muster:   signature  : signal 9 (SIGKILL) (signal)' "$T/err" ||
    { show_output; fail "the summary lacks the signal's signature"; }

# a script error from a shell worker: its traceback on stderr decides, not the language
S="$T/bug.sh"
cat > "$S" <<'EOS'
#!/bin/sh
echo "start $TORCHELASTIC_RESTART_COUNT" >> "$1/bug-starts"
printf 'Traceback (most recent call last):\n  File "/x/train.py", line 7, in step\n    d[k]\nKeyError: %s\n' "$$" >&2
exit 1
EOS
chmod +x "$S"
mrun -- run --standalone --max-restarts 3 --no-python "$S" "$D"
expect_rc "the same traceback twice" 6
expect_eq "attempts of the script error" 2 "$(wc -l < "$D/bug-starts")"
grep -qF 'muster: not retrying: the same failure (KeyError at train.py:7 in step) ended 2 attempts in a row' "$T/err" ||
    { show_output; fail "no 'not retrying' line naming the signature"; }
assert_no_marked_left "end of test" 5
exit 0
