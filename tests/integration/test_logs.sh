#!/bin/bash
# --log-dir layout, --redirects, --tee, per-rank maps, --local-ranks-filter, TORCHELASTIC_ERROR_FILE
# and the root-cause message taken from a worker's torchelastic error.json.
. "$(dirname "$0")/lib.sh"

# the only run directory under a log dir
run_dir() {
    local d
    d=$(find "$1" -mindepth 1 -maxdepth 1 -type d)
    [ "$(echo "$d" | grep -c .)" = 1 ] || fail "expected one run directory in $1, found: $d"
    echo "$d"
}
has_console() {  # has_console RANK STREAM(out|err): the worker's line reached muster's console
    local f="$T/out" w=hello
    [ "$2" = err ] && { f="$T/err"; w=stderr; }
    grep -qxF "[rank$1]: $w-from-rank-$1 attempt 0" "$f"
}
in_file() {  # in_file RUNDIR LOCAL_RANK STREAM(stdout|stderr)
    local w=hello
    [ "$3" = stderr ] && w=stderr
    grep -qF "$w-from-rank-$2 attempt 0" "$1/attempt_0/$2/$3.log" 2>/dev/null
}

# 1. --redirects 3: nothing on the console, everything in files; error file path
L="$T/l1"; D="$T/d1"; mkdir -p "$L" "$D"
mrun -- run --standalone --nproc-per-node 2 --log-dir "$L" --redirects 3 --no-python "$WORKER" dump "$D"
expect_rc "--redirects 3" 0
R=$(run_dir "$L")
expect_eq "run directory name = TORCHELASTIC_RUN_ID" "$(basename "$R")" "$(envval "$D/env.0.0" TORCHELASTIC_RUN_ID)"
for r in 0 1; do
    has_console $r out && fail "--redirects 3: rank $r stdout reached the console"
    has_console $r err && fail "--redirects 3: rank $r stderr reached the console"
    grep -q "from-rank-$r" "$T/out" "$T/err" && fail "--redirects 3: rank $r output on the console"
    in_file "$R" $r stdout || fail "--redirects 3: $R/attempt_0/$r/stdout.log lacks the output"
    in_file "$R" $r stderr || fail "--redirects 3: $R/attempt_0/$r/stderr.log lacks the output"
    expect_eq "rank $r TORCHELASTIC_ERROR_FILE" "$R/attempt_0/$r/error.json" "$(envval "$D/env.$r.0" TORCHELASTIC_ERROR_FILE)"
    # file content is the raw output, without the console prefix
    grep -q '^\[rank' "$R/attempt_0/$r/stdout.log" && fail "stdout.log lines carry the console prefix"
done

# 2. --tee 1: stdout on the console (prefixed) and in the file; stderr on the console
L="$T/l2"; D="$T/d2"; mkdir -p "$L" "$D"
mrun -- run --standalone --nproc-per-node 2 --log-dir "$L" --tee 1 --no-python "$WORKER" dump "$D"
expect_rc "--tee 1" 0
R=$(run_dir "$L")
for r in 0 1; do
    has_console $r out || { show_output; fail "--tee 1: rank $r stdout not on the console"; }
    in_file "$R" $r stdout || fail "--tee 1: rank $r stdout.log lacks the output"
    has_console $r err || { show_output; fail "--tee 1: rank $r stderr not on the console"; }
done

# 3. --tee 3 (-t 3): both streams both places
L="$T/l3"; D="$T/d3"; mkdir -p "$L" "$D"
mrun -- run --standalone --nproc-per-node 2 --log-dir "$L" -t 3 --no-python "$WORKER" dump "$D"
expect_rc "-t 3" 0
R=$(run_dir "$L")
for r in 0 1; do
    for s in out err; do has_console $r $s || fail "-t 3: rank $r std$s not on the console"; done
    for s in stdout stderr; do in_file "$R" $r $s || fail "-t 3: rank $r $s.log lacks the output"; done
done

# 4. per-rank map --redirects 0:3,1:0 (-r): rank 0 only in files, rank 1 on the console
L="$T/l4"; D="$T/d4"; mkdir -p "$L" "$D"
mrun -- run --standalone --nproc-per-node 2 --log-dir "$L" -r 0:3,1:0 --no-python "$WORKER" dump "$D"
expect_rc "-r 0:3,1:0" 0
R=$(run_dir "$L")
has_console 0 out && fail "-r 0:3,1:0: rank 0 stdout reached the console"
has_console 0 err && fail "-r 0:3,1:0: rank 0 stderr reached the console"
in_file "$R" 0 stdout || fail "-r 0:3,1:0: rank 0 stdout.log lacks the output"
in_file "$R" 0 stderr || fail "-r 0:3,1:0: rank 0 stderr.log lacks the output"
has_console 1 out || { show_output; fail "-r 0:3,1:0: rank 1 stdout not on the console"; }
has_console 1 err || { show_output; fail "-r 0:3,1:0: rank 1 stderr not on the console"; }

# 5. --local-ranks-filter 1 with --tee 3: only [rank1] on the console, files complete
L="$T/l5"; D="$T/d5"; mkdir -p "$L" "$D"
mrun -- run --standalone --nproc-per-node 3 --log-dir "$L" --tee 3 --local-ranks-filter 1 \
    --no-python "$WORKER" dump "$D"
expect_rc "--local-ranks-filter 1" 0
R=$(run_dir "$L")
has_console 1 out || { show_output; fail "--local-ranks-filter 1: rank 1 stdout not on the console"; }
has_console 1 err || { show_output; fail "--local-ranks-filter 1: rank 1 stderr not on the console"; }
other=$(grep -hE '^\[rank[02]\]: ' "$T/out" "$T/err" | head -3)
[ -z "$other" ] || fail "--local-ranks-filter 1: other ranks on the console: $other"
for r in 0 1 2; do
    for s in stdout stderr; do in_file "$R" $r $s || fail "--local-ranks-filter 1: rank $r $s.log incomplete"; done
done

# 6. error.json written by a worker -> its message in the root-cause summary
L="$T/l6"; D="$T/d6"; mkdir -p "$L" "$D"
mrun -- run --standalone --nproc-per-node 2 --log-dir "$L" --no-python "$WORKER" errorfile "$D" 1
expect_rc "worker writes error.json and exits 1" 1
R=$(run_dir "$L")
[ -f "$R/attempt_0/1/error.json" ] || fail "error file not at $R/attempt_0/1/error.json"
grep -q 'ValueError: boom' "$T/err" || { show_output; fail "root-cause summary lacks the error file's message 'ValueError: boom'"; }
grep -qE '^muster: +message +: .*ValueError: boom' "$T/err" || fail "'ValueError: boom' not on a 'message :' line"
grep -qE "^muster: +error file +: .*attempt_0/1/error.json" "$T/err" || fail "root cause lacks 'error file : .../attempt_0/1/error.json'"

# 7. the same without --log-dir: private temp dir, removed at exit
D="$T/d7"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 2 --no-python "$WORKER" errorfile "$D" 1
expect_rc "error.json without --log-dir" 1
grep -q 'ValueError: boom' "$T/err" || { show_output; fail "without --log-dir: root cause lacks 'ValueError: boom'"; }
ef=$(envval "$D/env.1.0" TORCHELASTIC_ERROR_FILE)
[ -n "$ef" ] || fail "without --log-dir: TORCHELASTIC_ERROR_FILE not set"
[ -e "$ef" ] && fail "without --log-dir: the private log dir ($ef) was not removed at exit"

assert_no_marked_left "end of test" 5
exit 0
