#!/bin/bash
# One log for the job (`muster logs`): three hosts (network namespaces) run one job of 4 ranks
# (nproc 1/2/1) on a `muster server` with a token file in a fourth host. `muster logs
# --follow` (the job's credential), started before the job, waits for it, then prints every
# rank's lines, in order per rank, until the job ends. Host 2's local rank 0 prints as fast as it can for 3 s (~100 MB/s where
# the host allows): it is capped (dropped and counted: /metrics, and muster logs says so), and
# the other ranks' lines, host 2's other rank among them, all arrive, each within 2 s of being
# printed (the ticks carry their own time; the follower stamps when it got them). Then: --rank,
# --dedup ("[ranks 0-3]: all ranks say hello"), --timestamps, the observer credential after the
# job ended; refused: the worker credential, another job's credential, a forged one; LOG floods
# from an agent connection that never joined, from a worker connection and from a node outside
# the round (its lines never show); bad input (one line, exit 2).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"
. "$(dirname "$0")/netns.sh"

need_tool POKE RDZV_POKE rdzv_poke
PYBIN=$(command -v python3) || skip "no python3"
PY="$MUSTER_SRC/tests/integration/log_worker.py"
ns_job nslog 4
SF=$T/server.token
HP=29401
ns_bg 4 server -- env -u MUSTER_TOKEN "$MUSTER_BIN" server --listen ${HOST_ADDR[4]}:$P \
    --token-file "$SF" --http ${HOST_ADDR[4]}:$HP
SPID=$MPID
wait_for 10 grep -q 'server listening on' "$T/server.err" || { cat "$T/server.err" >&2; fail "no server"; }
EP=${HOST_ADDR[4]}:$P
tok() { # tok OUT ARGS...: a credential from the server's token file
    local out=$1
    shift
    env -u MUSTER_TOKEN "$MUSTER_BIN" token --token-file "$SF" "$@" --out "$out" 2> "$T/tok.err" \
        || fail "muster token $*: $(cat "$T/tok.err")"
}
tok "$T/job.tok" --job "$JOB"
tok "$T/other.tok" --job "other-$$"
tok "$T/ro.tok" --read-only
echo "muster-job-v1:$JOB:$(printf '0%.0s' $(seq 64))" > "$T/forged.tok"
chmod 600 "$T/forged.tok"
# logs K OUT ERR TOKEN ARGS...: muster logs in host K; RC set
logs() {
    local k=$1 out=$2 err=$3 tok=$4
    shift 4
    RC=0
    ns_exec "$k" env -u MUSTER_TOKEN timeout -k 5 60 "$MUSTER_BIN" logs --rdzv-endpoint "$EP" \
        --rdzv-id "${LJOB:-$JOB}" --token-file "$tok" "$@" > "$out" 2> "$err" || RC=$?
}

# the follower, from host 1, before the job exists (it waits for it), stamping each line when
# it reads it
{
    ns_exec 1 env -u MUSTER_TOKEN timeout -k 5 90 "$MUSTER_BIN" logs --rdzv-endpoint "$EP" \
        --rdzv-id "$JOB" --token-file "$T/job.tok" --follow 2> "$T/follow.err"
    echo $? > "$T/follow.rc"
} | "$PYBIN" -c 'import sys, time
for l in sys.stdin:
    sys.stdout.write("%.3f %s" % (time.time(), l))
    sys.stdout.flush()' > "$T/follow.out" &
FPID=$!
IT_BG_PIDS="$IT_BG_PIDS $FPID"
wait_for 10 grep -q "job $JOB is not on the server yet: waiting" "$T/follow.err" \
    || { cat "$T/follow.err" >&2; fail "muster logs --follow did not wait for the job"; }
TICKS=120 # 6 s of ticks, every 50 ms: before, during and after the flood
ln -s /dev/null "$T/a2.out" # host 2's console gets the flood: not onto the disk
for k in 1 2 3; do
    np=1
    [ $k = 2 ] && np=2
    ns_bg $k a$k HOSTNO=$k FLOOD_HOST=2 FLOOD_WAIT=1.5 FLOOD_S=3 TICKS=$TICKS TICK_MS=50 \
        TOKEN_OUT="$T/worker.tok" -- "$MUSTER_BIN" run --nnodes 3 --nproc-per-node $np \
        --rdzv-endpoint $EP --rdzv-id $JOB --token-file "$T/job.tok" --rdzv-conf join_timeout=30 \
        "$PY"
done
agents_exit 120 0 a1 a2 a3
wait_rc $FPID 30
expect_eq "muster logs --follow after the job ended" 0 "$(cat "$T/follow.rc" 2>/dev/null)"
[ -s "$T/follow.out" ] || { cat "$T/follow.err" >&2; fail "muster logs --follow printed nothing"; }
grep -q "flood rank" "$T"/a2.err || { tail "$T/a2.err" >&2; fail "the flooding rank did not report"; }
note "$(grep -h 'flood rank' "$T"/a2.err)"

# every quiet rank's ticks, all of them, in order; each within 2 s of being printed
"$PYBIN" - "$T/follow.out" "$TICKS" > "$T/check.out" 2>&1 <<'EOF' || { cat "$T/check.out" >&2; fail "the follower's lines are wrong"; }
import re, sys
ticks = int(sys.argv[2])
seen, late, flood, hello, done, bye = {}, [], 0, set(), set(), set()
first = None
for l in open(sys.argv[1]):
    got, rest = l.split(" ", 1)
    first = first or float(got)  # lines printed before the follower came are not "late"
    m = re.match(r"\[rank(\d+)\]: (.*)$", rest.rstrip("\n"))
    assert m, "not a [rankN]: line: %r" % rest
    r, text = int(m.group(1)), m.group(2)
    t = re.match(r"tick (\d+) rank (\d+) at ([0-9.]+)$", text)
    if t:
        assert int(t.group(2)) == r, "rank %d printed %r" % (r, text)
        seen.setdefault(r, []).append(int(t.group(1)))
        if float(t.group(3)) > first:
            late.append((float(got) - float(t.group(3)), r, int(t.group(1))))
    elif text.startswith("flood done"):
        done.add(r)
    elif text.startswith("flood "):
        flood += 1
    elif text == "all ranks say hello":
        hello.add(r)
    elif text.startswith("bye rank"):
        bye.add(r)
assert hello == {0, 1, 2, 3}, "hello from %s" % sorted(hello)
assert bye == {0, 1, 2, 3}, "bye from %s" % sorted(bye)
assert len(done) == 1, "flood done from %s" % done
quiet = sorted(seen)
assert len(quiet) == 3, "ticks from ranks %s" % quiet
for r in quiet:
    assert seen[r] == list(range(ticks)), "rank %d ticks %s" % (r, seen[r][:5] + ["..."] + seen[r][-5:])
late.sort()
assert len(late) > 3 * ticks // 2, "only %d ticks after the follower started" % len(late)
worst = late[-1]
print("quiet ranks' delay: median %.3f s, worst %.3f s (rank %d tick %d); flood lines shown %d"
      % (late[len(late) // 2][0], worst[0], worst[1], worst[2], flood))
assert worst[0] < 2.0, "a quiet rank's line came %.3f s late" % worst[0]
# capped: at most the rank's rate (1000 lines/s) over the flood and its 2 s burst, and some
assert 0 < flood <= 1000 * (3 + 2) + 1000, "flood lines shown: %d" % flood
EOF
note "$(cat "$T/check.out")"
grep -q "the server dropped [0-9]* lines of job $JOB" "$T/follow.err" \
    || { cat "$T/follow.err" >&2; fail "muster logs did not say that lines were dropped"; }

# after the job: the server keeps its log (the observer credential reads it)
logs 2 "$T/l.out" "$T/l.err" "$T/ro.tok" --rank 1
[ "$RC" = 0 ] || { cat "$T/l.err" >&2; fail "muster logs --rank 1 (observer) exited $RC"; }
grep -v '^\[rank1\]: ' "$T/l.out" | head -3 | grep -q . && fail "--rank 1 printed another rank"
grep -q '^\[rank1\]: bye rank 1$' "$T/l.out" || { tail -3 "$T/l.out" >&2; fail "--rank 1 lacks its last line"; }
logs 2 "$T/l.out" "$T/l.err" "$T/job.tok" --dedup
[ "$RC" = 0 ] || { cat "$T/l.err" >&2; fail "muster logs --dedup exited $RC"; }
grep -q '^\[ranks 0-3\]: all ranks say hello$' "$T/l.out" || { head -8 "$T/l.out" >&2; fail "--dedup did not merge the 4 ranks' hello"; }
logs 3 "$T/l.out" "$T/l.err" "$T/job.tok" --timestamps --rank 0
grep -qE '^20[0-9-]{8}T[0-9:]{8}\.[0-9]{3}Z \[rank0\]: ' "$T/l.out" || { head -3 "$T/l.out" >&2; fail "--timestamps"; }

# hostile credentials: nothing printed, a refusal, non-zero
for t in worker other forged; do
    [ -s "$T/$t.tok" ] || fail "no $t credential"
    chmod 600 "$T/$t.tok"
    logs 3 "$T/h.out" "$T/h.err" "$T/$t.tok"
    [ "$RC" != 0 ] || fail "muster logs with the $t credential exited 0"
    [ -s "$T/h.out" ] && { head -3 "$T/h.out" >&2; fail "the $t credential got lines"; }
    [ "$(wc -l < "$T/h.err")" -le 2 ] || { cat "$T/h.err" >&2; fail "more than a line or two for the $t credential"; }
    why="may not read the log\|may not act as an observer"
    [ $t = forged ] && why="refused this client"
    grep -q "$why" "$T/h.err" || { cat "$T/h.err" >&2; fail "no refusal line for the $t credential"; }
done

# bad input: one line, exit 2; an unknown job: exit 3
logs 1 "$T/b.out" "$T/b.err" "$T/job.tok" --rank x
expect_eq "muster logs --rank x" 2 "$RC"
logs 1 "$T/b.out" "$T/b.err" "$T/job.tok" --since yesterday
expect_eq "muster logs --since yesterday" 2 "$RC"
grep -q "since must be a duration" "$T/b.err" || fail "no line for a bad --since"
RC=0
ns_exec 1 "$MUSTER_BIN" logs --rdzv-endpoint "$EP" > "$T/b.out" 2> "$T/b.err" || RC=$?
expect_eq "muster logs without --rdzv-id" 2 "$RC"
grep -q "needs --rdzv-id" "$T/b.err" || fail "no line for a missing --rdzv-id"
RC=0
ns_exec 1 env -u MUSTER_TOKEN "$MUSTER_BIN" logs --rdzv-endpoint "$EP" --rdzv-id nosuch-$$ \
    --token-file "$T/ro.tok" > "$T/b.out" 2> "$T/b.err" || RC=$?
expect_eq "muster logs for an unknown job" 3 "$RC"
grep -q "no job nosuch-$$" "$T/b.err" || { cat "$T/b.err" >&2; fail "no line for an unknown job"; }

# LOG floods from peers that are not members of the job's round: a second job, running
JOB2=$JOB-b
tok "$T/job2.tok" --job "$JOB2"
for k in 1 2; do
    ns_bg $k c$k HOSTNO=$k TICKS=100 TICK_MS=50 -- "$MUSTER_BIN" run --nnodes 2 --nproc-per-node 1 \
        --rdzv-endpoint $EP --rdzv-id $JOB2 --token-file "$T/job2.tok" --rdzv-conf join_timeout=30 "$PY"
done
wait_for 30 grep -q '^\[rank0\]: tick 5 ' "$T/c1.out" "$T/c2.out" || { show_all 2>/dev/null; fail "job 2 did not start"; }
poke() { # poke MODE: rdzv_poke logflood with job 2's credential from host 3
    ns_exec 3 env MUSTER_TOKEN="$(cat "$T/job2.tok")" "$POKE" "$EP" logflood "$JOB2" "$1" 200 > "$T/poke.out" 2>&1 || true
}
poke nojoin
grep -q "^ERROR .*LOG before JOIN" "$T/poke.out" || { cat "$T/poke.out" >&2; fail "an agent that never joined was not refused"; }
poke worker
grep -q "^ERROR\|^FAIL" "$T/poke.out" || { cat "$T/poke.out" >&2; fail "a worker connection's LOG was not refused"; }
poke joined2
grep -q "^SENT LOG\|^ERROR" "$T/poke.out" || { cat "$T/poke.out" >&2; fail "logflood joined2: $(cat "$T/poke.out")"; }
ns_exec 4 "$PYBIN" -c "import urllib.request; print(urllib.request.urlopen('http://${HOST_ADDR[4]}:$HP/metrics').read().decode())" \
    > "$T/metrics" 2>&1 || fail "no /metrics"
grep -q "^muster_job_log_lines_total{job=\"$JOB2\"} [1-9]" "$T/metrics" || { grep log "$T/metrics" >&2; fail "no log lines counted for job 2"; }
# the node outside the round: its 200 x 256 lines dropped, counted
grep -q "^muster_job_log_dropped_total{job=\"$JOB2\",reason=\"foreign\"} 51200$" "$T/metrics" \
    || { grep log_dropped "$T/metrics" >&2; fail "the outsider's LOG lines are not counted as foreign"; }
agents_exit 60 0 c1 c2
LJOB=$JOB2 logs 1 "$T/l.out" "$T/l.err" "$T/job2.tok"
[ "$RC" = 0 ] || { cat "$T/l.err" >&2; fail "muster logs for job 2 exited $RC"; }
grep -q FORGED "$T/l.out" && fail "a forged LOG line reached the job's log"
[ "$(grep -c '^\[rank[01]\]: tick ' "$T/l.out")" = 200 ] || fail "job 2's log lacks ticks: $(grep -c tick "$T/l.out")"
kill -TERM "$SPID"
wait_rc "$SPID" 10
exit 0
