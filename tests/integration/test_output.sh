#!/bin/bash
# Worker output as torchrun users expect: '\r' progress updates and partial lines
# reach the console while the worker still runs (log files get the raw bytes),
# TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE and --no-prefix, -r 3 -t 3 (tee wins: console and
# files), --duplicate-stdout-filters (filtered_stdout.log has exactly the matching lines),
# --dedup ("[ranks 0-3]:" once, a rank's own line keeps "[rank2]:"), and a re-run with the same
# --rdzv-id and --log-dir keeping the first run's files.
. "$(dirname "$0")/lib.sh"

# Workers wait for files the test creates, so "shown while running" never depends on timing.
cat > "$T/progress.sh" <<'EOF'
#!/bin/bash
# progress.sh DIR: three '\r' updates, wait for DIR/seen; a partial line, wait for DIR/seen2
for i in 1 2 3; do printf 'p%d\r' "$i"; sleep 0.2; done
for _ in $(seq 1200); do [ -e "$1/seen" ] && break; sleep 0.05; done
printf 'partial line'
for _ in $(seq 1200); do [ -e "$1/seen2" ] && break; sleep 0.05; done
printf ' and its end\n'
EOF
cat > "$T/lines.sh" <<'EOF'
#!/bin/bash
# lines.sh DIR N: every rank waits until N ranks are ready, then prints a common line, its own
# line (rank 2 only: a line nobody else says), filter material and a last common line
touch "$1/ready.$RANK"
for _ in $(seq 1200); do [ "$(ls "$1" | grep -c '^ready\.')" -ge "$2" ] && break; sleep 0.02; done
echo "same for all"
[ "$RANK" = 2 ] && echo "only rank two"
echo "loss=0.$RANK, step $RANK"
echo "no match $RANK"
echo "all done"
echo "stderr of $RANK" >&2
EOF
chmod +x "$T/progress.sh" "$T/lines.sh"

# 1. '\r' updates: the first one is on the console while the worker waits (it waits for us),
#    prefixed once per update; the partial line is shown without waiting for its newline.
#    With -t 1 and --log-dir the file gets the raw bytes.
L="$T/l1"; P="$T/p1"; mkdir -p "$L" "$P"
mrun_bg -- run --standalone --nproc-per-node 1 --log-dir "$L" -t 1 --no-python "$T/progress.sh" "$P"
seen() { grep -qF "$1" "$T/out"; }
wait_for 60 seen "p1" || { show_output; fail "the first '\\r' update did not reach the console while the worker ran"; }
wait_for 60 seen "p3" || { show_output; fail "the third '\\r' update did not reach the console"; }
kill -0 "$MPID" || fail "muster ended before the worker was released"
expect_eq "console bytes of the updates" "$(printf '[rank0]: p1\r[rank0]: p2\r[rank0]: p3\r' | od -c)" \
    "$(head -c 36 "$T/out" | od -c)"
touch "$P/seen"
wait_for 60 seen "[rank0]: partial line" ||
    { show_output; fail "a partial line was held back instead of shown"; }
touch "$P/seen2"
wait_rc "$MPID" 60
expect_rc "progress run" 0
# the rest of the line follows the shown part, without a second prefix
grep -qF "[rank0]: partial line and its end" "$T/out" || { show_output; fail "the end of the partial line is missing or prefixed again"; }
R=$(find "$L" -mindepth 1 -maxdepth 1 -type d)
expect_eq "stdout.log: raw bytes" "$(printf 'p1\rp2\rp3\rpartial line and its end\n' | od -c)" \
    "$(od -c < "$R/attempt_0/0/stdout.log")"

# 2. TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, then --no-prefix
D="$T/d2"; mkdir -p "$D"
mrun TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='${role_name}${local_rank}|$rank> ' -- run \
    --standalone --nproc-per-node 2 --role trainer --no-python "$T/lines.sh" "$D" 2
expect_rc "prefix template" 0
grep -qxF "trainer1|1> all done" "$T/out" || { show_output; fail "prefix template not applied"; }
grep -qxF "trainer0|0> stderr of 0" "$T/err" || { show_output; fail "prefix template not on stderr"; }
grep -q '^\[rank' "$T/out" && fail "the default prefix is still there with a template"
D="$T/d3"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 2 --no-prefix --no-python "$T/lines.sh" "$D" 2
expect_rc "--no-prefix" 0
expect_eq "--no-prefix: 'all done' lines" 2 "$(grep -cxF "all done" "$T/out")"
grep -q '^\[' "$T/out" && { show_output; fail "--no-prefix still prefixed"; }

# 3. -r 3 -t 3: tee wins, so the lines are on the console and in the files;
#    --duplicate-stdout-filters copies exactly the lines that contain any filter, prefixed, to
#    attempt_0/filtered_stdout.log (",," is a literal comma)
L="$T/l4"; D="$T/d4"; mkdir -p "$L" "$D"
mrun -- run --standalone --nproc-per-node 2 --log-dir "$L" -r 3 -t 3 \
    --duplicate-stdout-filters 'step 0,no match 1' --no-python "$T/lines.sh" "$D" 2
expect_rc "-r 3 -t 3" 0
R=$(find "$L" -mindepth 1 -maxdepth 1 -type d)
for r in 0 1; do
    grep -qxF "[rank$r]: all done" "$T/out" || { show_output; fail "-r 3 -t 3: rank $r stdout not on the console"; }
    grep -qxF "[rank$r]: stderr of $r" "$T/err" || { show_output; fail "-r 3 -t 3: rank $r stderr not on the console"; }
    grep -qxF "all done" "$R/attempt_0/$r/stdout.log" || fail "-r 3 -t 3: rank $r stdout.log lacks the output"
    grep -qxF "stderr of $r" "$R/attempt_0/$r/stderr.log" || fail "-r 3 -t 3: rank $r stderr.log lacks the output"
done
expect_eq "filtered_stdout.log" "$(printf '[rank0]: loss=0.0, step 0\n[rank1]: no match 1')" \
    "$(sort "$R/attempt_0/filtered_stdout.log")"
[ -e "$R/attempt_0/filtered_stderr.log" ] && fail "filtered_stderr.log without --duplicate-stderr-filters"
L="$T/l5"; D="$T/d5"; mkdir -p "$L" "$D"
mrun -- run --standalone --nproc-per-node 2 --log-dir "$L" -t 3 --duplicate-stdout-filters 'loss=0.1,,' \
    --no-python "$T/lines.sh" "$D" 2
expect_rc "filter with a literal comma" 0
R=$(find "$L" -mindepth 1 -maxdepth 1 -type d)
expect_eq "filtered_stdout.log (',,')" "[rank1]: loss=0.1, step 1" "$(cat "$R/attempt_0/filtered_stdout.log")"

# 4. --dedup (a wide window: the ranks of a loaded machine start far apart): the common lines
#    once as "[ranks 0-3]:", rank 2's own line with its own prefix, everyone's other lines too
D="$T/d6"; mkdir -p "$D"
mrun -- run --standalone --nproc-per-node 4 --dedup=2000 --no-python "$T/lines.sh" "$D" 4
expect_rc "--dedup" 0
expect_eq "--dedup: 'same for all'" "[ranks 0-3]: same for all" "$(grep -F "same for all" "$T/out")"
expect_eq "--dedup: 'all done'" "[ranks 0-3]: all done" "$(grep -F "all done" "$T/out")"
grep -qxF "[rank2]: only rank two" "$T/out" || { show_output; fail "--dedup: rank 2's own line lost its prefix"; }
for r in 0 1 2 3; do
    grep -qxF "[rank$r]: no match $r" "$T/out" || { show_output; fail "--dedup: rank $r's own line missing"; }
    # one rank's lines keep their order: common, own, common
    a=$(grep -nF "same for all" "$T/out" | cut -d: -f1)
    b=$(grep -nxF "[rank$r]: no match $r" "$T/out" | cut -d: -f1)
    c=$(grep -nF "all done" "$T/out" | cut -d: -f1)
    [ "$a" -lt "$b" ] && [ "$b" -lt "$c" ] || { show_output; fail "--dedup: rank $r's lines out of order"; }
done
expect_eq "--dedup: stderr lines" 4 "$(grep -c "stderr of" "$T/err")"

# 5. the same --rdzv-id and --log-dir twice: the second run gets RUN_ID.1, both runs' files stay
L="$T/l7"; D="$T/d7"; mkdir -p "$L" "$D"
for n in 1 2; do
    mrun -- run --nnodes 1 --nproc-per-node 1 --rdzv-id same-id --log-dir "$L" -t 1 \
        --no-python "$WORKER" dump "$D"
    expect_rc "re-run $n" 0
done
[ -d "$L/same-id" ] && [ -d "$L/same-id.1" ] || fail "re-run: expected same-id and same-id.1 in $L, found: $(ls "$L")"
grep -qF "worker logs in $L/same-id.1" "$T/err" || { show_output; fail "re-run: the new directory was not printed"; }
for d in same-id same-id.1; do
    [ "$(grep -c hello-from-rank-0 "$L/$d/attempt_0/0/stdout.log")" = 1 ] ||
        fail "re-run: $d/attempt_0/0/stdout.log lost or mixed its run's output"
done

# 6. a bad --dedup window is a usage error: one line, exit 2, nothing started
IT_TIMEOUT=30 mrun -- run --standalone --dedup=soon --no-python "$T/lines.sh" "$T/none" 1
expect_rc "--dedup=soon" 2
grep -q "^muster: error: .*--dedup" "$T/err" || { show_output; fail "--dedup=soon: no usage error naming --dedup"; }

assert_no_marked_left 10
exit 0
