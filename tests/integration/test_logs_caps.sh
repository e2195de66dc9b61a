#!/bin/bash
# `muster server --log-lines-per-sec`: the server's cap on a job's log is the flag's. One node,
# 2 ranks: rank 0 prints 600 lines at once, rank 1 a line every 100 ms. With
# --log-lines-per-sec 40 a rank may pass 10 lines a second (a burst of 20): rank 0's burst is
# cut to ~20 lines (counted as reason "rate" in /metrics while the job runs), rank 1 keeps every
# line, and rank 0's last line, printed 2.5 s later, is there; muster logs ends with the
# dropped count; a worker's ESC and C1 controls are shown escaped (\x1b), its tab as it is.
# (The agent's own cap, 1000 lines/s, lets the 600 through: the server cuts.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

start_server -- --log-lines-per-sec 40 --log-ring-bytes 64K
[ -n "$SHTTP" ] || fail "no HTTP port: $(cat "$SERR")"
JOB=caps-$$
cat > "$T/w.py" <<'PY'
import os, sys, time
r = int(os.environ["RANK"])
if r == 0:
    sys.stdout.write("".join("burst %d %s\n" % (i, "y" * 200) for i in range(600)))
    sys.stdout.flush()
    time.sleep(2.5)
    print("last rank 0", flush=True)
else:
    print("evil \x1b[2J\tcol \x9b31m end", flush=True)  # controls are escaped, tabs kept
    for i in range(30):
        print("tick %d" % i, flush=True)
        time.sleep(0.1)
PY
agent a1 -- --nnodes 1 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB "$T/w.py"
wait_for 30 grep -q '^\[rank1\]: tick 3' "$T/a1.out" || { show_all; fail "the job did not start"; }
sleep 0.5 # the burst's batches are in
http_get "$SHTTP" /metrics
grep -qE "^muster_job_log_dropped_total\{job=\"$JOB\",reason=\"rate\"\} (5[0-9][0-9])$" "$T/http.body" \
    || { grep log_ "$T/http.body" >&2; fail "/metrics does not count rank 0's ~580 dropped lines"; }
grep -qE "^muster_job_log_held_bytes\{job=\"$JOB\"\} [1-9]" "$T/http.body" || fail "no held bytes in /metrics"
agent_wait a1 60
expect_eq "the job's exit" 0 "$RC"
OUTF=$T/l.out ERRF=$T/l.err IT_TIMEOUT=20 mrun -- logs --rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $JOB
[ "$RC" = 0 ] || { cat "$T/l.err" >&2; fail "muster logs exited $RC"; }
n0=$(grep -c '^\[rank0\]: burst ' "$T/l.out")
n1=$(grep -c '^\[rank1\]: tick ' "$T/l.out")
note "rank 0's burst: $n0 of 600 lines kept; rank 1: $n1 of 30"
[ "$n0" -ge 5 ] && [ "$n0" -le 25 ] || fail "rank 0's burst kept $n0 lines (cap: 10/s, burst 20)"
expect_eq "rank 1's ticks" 30 "$n1"
grep -q '^\[rank0\]: last rank 0$' "$T/l.out" || fail "rank 0's line after the burst is missing"
grep -q "the server dropped [0-9]* lines of job $JOB" "$T/l.err" || { cat "$T/l.err" >&2; fail "no dropped line"; }
grep -qF "$(printf '[rank1]: evil \\x1b[2J\tcol \\xc2\\x9b31m end')" "$T/l.out" \
    || { grep evil "$T/l.out" | od -c | head >&2; fail "a worker's terminal escapes were not escaped"; }
LC_ALL=C grep -q "$(printf '\033')" "$T/l.out" && fail "an ESC byte reached muster logs' output"
stop_server
exit 0
