#!/bin/bash
# Evidence before the kill, on one node with real PyTorch (gloo, 2 ranks, no heartbeat file, no
# code changes): a rank sleeping inside a function while the other waits in all_reduce, a
# mismatched collective (broadcast against all_reduce) and a DataLoader whose worker deadlocks
# are detected as hangs from output and CPU time alone; the root cause names the culprit rank,
# its function and line; the bundle under the log directory holds every rank's Python and
# native stacks and the last output. A rank that raises while the other waits is named as the
# one that failed first. A planted stacks file of a process that has no hook gets no signal.
. "$(dirname "$0")/lib.sh"

have_torch || skip "$TORCH_PY cannot import torch.distributed (install python3-torch)"
PY="$MUSTER_SRC/tests/integration/trainers/evidence_worker.py"
SLEEP_LINE=$(grep -n 'time.sleep(3600)' "$PY" | cut -d: -f1)

# run MODE NAME: a standalone 2-rank job, rank 1 the culprit; output in $T/NAME.{out,err}
run() {
    OUTF=$T/$2.out ERRF=$T/$2.err IT_TIMEOUT=150 mrun PYTHON_EXEC="$TORCH_PY" EVIDENCE_MODE=$1 \
        EVIDENCE_CULPRIT=1 -- run --standalone --nproc-per-node 2 --hang-timeout 3 \
        --max-restarts 0 --log-dir "$T/logs-$2" --rdzv-id ev-$2-$$ "$PY"
    [ "$RC" != 0 ] || { show_tails "$2 " "$T/$2.out" "$T/$2.err" 30; fail "$2: the job exited 0"; }
    [ "$RC" != 124 ] || fail "$2: the job did not end"
}
cause() { grep -m1 'root cause: ' "$T/$1.err" | sed 's/.*root cause: //'; }
bundle() { find "$T/logs-$1" -path "*/evidence/attempt_0" -type d | head -1; }

# (1) a rank asleep in load_batch while rank 0 waits in all_reduce
run sleep sleep
c=$(cause sleep)
echo "$c" | grep -q "^rank 1 (.*, local_rank 1) never entered all_reduce; it is in evidence_worker.py:$SLEEP_LINE in load_batch; rank 0 waited in all_reduce for [0-9]* s" \
    || { cat "$T/sleep.err" >&2; fail "sleep: the root cause does not name rank 1 in load_batch: '$c'"; }
grep -q "^muster:   message    : rank 1 .*never entered all_reduce" "$T/sleep.err" \
    || { cat "$T/sleep.err" >&2; fail "sleep: the job's summary does not carry the verdict"; }
grep -q "^muster:   rank       : 1 (local_rank 1)" "$T/sleep.err" \
    || { cat "$T/sleep.err" >&2; fail "sleep: the summary does not charge rank 1"; }
grep -q "stack of rank 1 (main thread" "$T/sleep.err" || fail "sleep: no stack in the root-cause block"
B=$(bundle sleep)
[ -n "$B" ] || { find "$T/logs-sleep" >&2; fail "sleep: no evidence bundle under the log directory"; }
for r in 0 1; do
    [ -s "$B/rank$r.txt" ] || fail "sleep: the bundle has no rank$r.txt"
    grep -q "== Python stacks" "$B/rank$r.txt" || fail "sleep: rank$r.txt has no Python stacks"
    grep -q "== threads (/proc) ==" "$B/rank$r.txt" || fail "sleep: rank$r.txt has no native stacks"
    grep -q "^thread [0-9]* (.*) state [A-Z]" "$B/rank$r.txt" || fail "sleep: rank$r.txt lists no thread"
    grep -q "== last output (stdout) ==" "$B/rank$r.txt" || fail "sleep: rank$r.txt has no output section"
done
grep -q "File \".*distributed_c10d.py\", line [0-9]* in all_reduce" "$B/rank0.txt" \
    || { cat "$B/rank0.txt" >&2; fail "sleep: rank 0's stacks do not show all_reduce"; }
grep -q "File \".*evidence_worker.py\", line $SLEEP_LINE in load_batch" "$B/rank1.txt" \
    || { cat "$B/rank1.txt" >&2; fail "sleep: rank 1's stacks do not show load_batch"; }
grep -q "^step 2 rank 1" "$B/rank1.txt" || { cat "$B/rank1.txt" >&2; fail "sleep: rank 1's last output is missing"; }
grep -q "^rank 0 .*in all_reduce" "$B/summary.txt" || { cat "$B/summary.txt" >&2; fail "sleep: summary.txt"; }

# (2) a mismatched collective: rank 1 calls broadcast where rank 0 calls all_reduce
run mismatch mismatch
c=$(cause mismatch)
echo "$c" | grep -q "^rank 1 (.*, local_rank 1) called broadcast where rank 0 called all_reduce (mismatched collectives)" \
    || { cat "$T/mismatch.err" >&2; fail "mismatch: not named: '$c'"; }

# (3) a DataLoader worker deadlocked: rank 1 waits for its loader, rank 0 in all_reduce
run loader loader
c=$(cause loader)
echo "$c" | grep -q "^rank 1 (.*, local_rank 1) never entered all_reduce; it is in evidence_worker.py:[0-9]* in main (innermost: dataloader.py:[0-9]* in __next__" \
    || { cat "$T/loader.err" >&2; fail "loader: not named: '$c'"; }
B=$(bundle loader)
grep -q "== child processes ==" "$B/rank1.txt" || { cat "$B/rank1.txt" >&2; fail "loader: the loader's process is not in the bundle"; }

# (4) a rank raises while the other waits: it failed first
run crash crash
c=$(cause crash)
echo "$c" | grep -q "^rank 1 (.*, local_rank 1) failed first: it exited with code 1" \
    || { cat "$T/crash.err" >&2; fail "crash: not named: '$c'"; }

# (5) --evidence-timeout 0: no hook in the workers' environment, the job fails as before
OUTF=$T/off.out ERRF=$T/off.err IT_TIMEOUT=150 mrun PYTHON_EXEC="$TORCH_PY" EVIDENCE_MODE=sleep \
    EVIDENCE_CULPRIT=1 -- run --standalone --nproc-per-node 2 --hang-timeout 3 --max-restarts 0 \
    --evidence-timeout 0 --log-dir "$T/logs-off" "$PY"
[ "$RC" != 0 ] && [ "$RC" != 124 ] || fail "evidence off: the job exited $RC"
grep -q 'root cause: ' "$T/off.err" && fail "evidence off: a verdict was made"
grep -q 'hung: no progress' "$T/off.err" || { cat "$T/off.err" >&2; fail "evidence off: the hang was not detected"; }

# (6) the hook hides no one's sitecustomize: the user's on PYTHONPATH still runs, after the hook
mkdir -p "$T/sc"
echo 'import os; open(os.environ["SC_MARK"], "w").write("ran")' > "$T/sc/sitecustomize.py"
cat > "$T/probe.py" <<'PY'
import os, sys
d = os.environ["MUSTER_EVIDENCE_DIR"]
print("hooked", os.path.exists(os.path.join(d, "stacks-%d.txt" % os.getpid())))
print("sitecustomize", sys.modules["sitecustomize"].__file__)
PY
IT_TIMEOUT=60 mrun PYTHON_EXEC="$TORCH_PY" PYTHONPATH="$T/sc" SC_MARK="$T/sc.mark" -- run \
    --standalone --nproc-per-node 1 "$T/probe.py"
expect_rc "a job with the user's own sitecustomize" 0
grep -q "hooked True" "$T/out" || { show_output; fail "the hook did not install itself"; }
grep -q "sitecustomize $T/sc/sitecustomize.py" "$T/out" || { show_output; fail "the user's sitecustomize is not the module"; }
[ "$(cat "$T/sc.mark" 2>/dev/null)" = ran ] || fail "the user's sitecustomize did not run"

# (7) a bad value: one line, exit 2
IT_TIMEOUT=10 mrun -- run --standalone --evidence-timeout 500 --no-python true
expect_rc "--evidence-timeout 500" 2
grep -q -- "--evidence-timeout must be" "$T/err" || { cat "$T/err" >&2; fail "no error line for --evidence-timeout 500"; }
exit 0
