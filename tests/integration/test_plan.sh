#!/bin/bash
# `muster plan`: the seed's worked example through the real binary (human and --json output),
# one-line errors with exit 2 for bad input, --probe with a fake worker (a shell script that
# writes the probe JSON to $MUSTER_PROBE_FILE), a failing probe (exit 1), signal forwarding, and
# no nvidia-smi without --gpu-mem (exit 2).
. "$(dirname "$0")/lib.sh"

cd "$T" || fail "cd $T"
SEED=(--gpu-mem 48GiB --procs 3 --safety 0.85 --static 4GiB --per-sample 0.04GiB)

# line LABEL: the value after "LABEL:" in $T/out, spaces trimmed
line() {
    awk -v k="$1:" 'index($0, k) == 1 {sub(/^[^:]*:[ ]*/, ""); print; exit}' "$T/out"
}

# expect_usage_err DESC ARGS...: exit 2, exactly one stderr line starting "muster: error: "
expect_usage_err() {
    local desc=$1
    shift
    IT_TIMEOUT=20 mrun PATH="$T/nopath" -- plan "$@"
    expect_rc "$desc" 2
    [ "$(wc -l < "$T/err")" = 1 ] || { show_output; fail "$desc: expected one line on stderr"; }
    grep -q '^muster: error: ' "$T/err" || { show_output; fail "$desc: no 'muster: error:' line"; }
    [ -s "$T/out" ] && { show_output; fail "$desc: printed something on stdout"; }
    return 0
}

# --- the seed's example -------------------------------------------------------------------
IT_TIMEOUT=20 mrun -- plan "${SEED[@]}"
expect_rc "the seed's example" 0
expect_eq "available per process" "13.6 GiB (memory fraction 0.2833)" "$(line 'available per process')"
expect_eq "max batch" 240 "$(line 'max batch')"
expect_eq "starting batch" 192 "$(line 'starting batch (80 %)')"
expect_eq "GPU memory" "48.0 GiB (--gpu-mem)" "$(line 'GPU memory')"
expect_eq "processes" 3 "$(line processes)"
expect_eq "safety factor" 0.85 "$(line 'safety factor')"
expect_eq "static" "4.0 GiB" "$(line static)"
expect_eq "per sample" "41.0 MiB" "$(line 'per sample')"
[ -s "$T/err" ] && { show_output; fail "the seed's example wrote to stderr"; }

# synonyms and --name=VALUE
IT_TIMEOUT=20 mrun -- plan --gpu-mem=49152MiB --nproc-per-gpu=3 --gpu-mem-fraction 0.85 \
    --static=4096M --per-sample 0.04G
expect_rc "synonyms" 0
expect_eq "synonyms: max batch" 240 "$(line 'max batch')"

# --json
IT_TIMEOUT=20 mrun -- plan --json "${SEED[@]}"
expect_rc "--json" 0
[ "$(wc -l < "$T/out")" = 1 ] || { show_output; fail "--json: expected one line"; }
"$TORCH_PY" - "$T/out" <<'PY' || fail "--json: wrong JSON (above)"
import json, sys
j = json.load(open(sys.argv[1]))
want = {"gpu_mem_bytes": 48 << 30, "gpu_mem_source": "--gpu-mem", "procs": 3, "safety": 0.85,
        "per_proc_bytes": 14602888806, "static_bytes": 4 << 30, "per_sample_bytes": 42949673,
        "max_batch": 240, "start_batch": 192}
bad = {k: (j.get(k), v) for k, v in want.items() if j.get(k) != v}
if bad or abs(j["mem_fraction"] - 0.85 / 3) > 1e-5:
    print("got", j, "bad", bad, file=sys.stderr)
    sys.exit(1)
PY

# --help
IT_TIMEOUT=20 mrun -- plan --help
expect_rc "--help" 0
for w in --gpu-mem --procs --nproc-per-gpu --safety --gpu-mem-fraction --static --per-sample \
         --probe --json MUSTER_PROBE_FILE 'exit status'; do
    grep -q -- "$w" "$T/out" || fail "--help does not mention $w"
done

# --- bad input: one line, exit 2 -----------------------------------------------------------
# expect_usage_err runs muster with PATH=$T/nopath, which holds `timeout` (mrun's wrapper) alone:
# no nvidia-smi can be found, whatever the machine
mkdir -p "$T/nopath"
ln -s "$(command -v timeout)" "$T/nopath/timeout" || fail "no timeout(1)"
expect_usage_err "no arguments"
expect_usage_err "unknown option" "${SEED[@]}" --frobnicate
expect_usage_err "missing value" "${SEED[@]}" --procs
expect_usage_err "junk size" --gpu-mem 48 GiB --static 4GiB --per-sample 0.04GiB
expect_usage_err "GB" --gpu-mem 48GB --static 4GiB --per-sample 0.04GiB
expect_usage_err "negative size" --gpu-mem 48GiB --static -4GiB --per-sample 0.04GiB
expect_usage_err "nan size" --gpu-mem nan --static 4GiB --per-sample 0.04GiB
expect_usage_err "empty size" --gpu-mem '' --static 4GiB --per-sample 0.04GiB
expect_usage_err "procs 0" "${SEED[@]}" --procs 0
expect_usage_err "procs junk" "${SEED[@]}" --procs 3x
expect_usage_err "safety 0" "${SEED[@]}" --safety 0
expect_usage_err "safety 1.5" "${SEED[@]}" --safety 1.5
expect_usage_err "safety -0.5" "${SEED[@]}" --safety -0.5
expect_usage_err "per-sample 0" --gpu-mem 48GiB --static 4GiB --per-sample 0
grep -q 'per-sample memory must be above zero' "$T/err" || fail "per-sample 0: wrong reason"
expect_usage_err "no --per-sample" --gpu-mem 48GiB --static 4GiB
expect_usage_err "flag with a value" "${SEED[@]}" --json=1
expect_usage_err "command without --probe" "${SEED[@]}" -- true
expect_usage_err "--probe without a command" --gpu-mem 48GiB --probe
expect_usage_err "--probe with --static" --gpu-mem 48GiB --probe --static 1G -- true
expect_usage_err "static too large" --gpu-mem 48GiB --procs 3 --static 20GiB --per-sample 0.04GiB
expect_eq "static too large: reason" \
    "muster: error: static memory 20.0 GiB does not fit in the 13.6 GiB share of each of 3 processes on a 48.0 GiB GPU" \
    "$(cat "$T/err")"
expect_usage_err "no sample fits" --gpu-mem 48GiB --procs 3 --static 13GiB --per-sample 1GiB
grep -q 'max batch is 0' "$T/err" || fail "no sample fits: wrong reason"

# --- no nvidia-smi and no --gpu-mem --------------------------------------------------------
expect_usage_err "no nvidia-smi" --procs 3 --static 4GiB --per-sample 0.04GiB
expect_eq "no nvidia-smi: message" \
    "muster: error: cannot learn the GPU's memory (no nvidia-smi on PATH); pass --gpu-mem SIZE" \
    "$(cat "$T/err")"

# a fake nvidia-smi: the first id of CUDA_VISIBLE_DEVICES, MiB on stdout
mkdir -p "$T/fakebin"
cat > "$T/fakebin/nvidia-smi" <<EOF2
#!/bin/sh
echo "\$*" > "$T/smi-args"
echo 49152
EOF2
chmod +x "$T/fakebin/nvidia-smi"
IT_TIMEOUT=20 mrun PATH="$T/fakebin:/usr/bin:/bin" CUDA_VISIBLE_DEVICES=5,2 -- \
    plan --procs 3 --static 4GiB --per-sample 0.04GiB
expect_rc "fake nvidia-smi" 0
expect_eq "fake nvidia-smi: GPU memory" "48.0 GiB (nvidia-smi)" "$(line 'GPU memory')"
expect_eq "fake nvidia-smi: max batch" 240 "$(line 'max batch')"
expect_eq "fake nvidia-smi: args" \
    "--query-gpu=memory.total --format=csv,noheader,nounits -i 5" "$(cat "$T/smi-args")"
# nvidia-smi that fails (no GPU)
printf '#!/bin/sh\necho "No devices were found" >&2\nexit 6\n' > "$T/fakebin/nvidia-smi"
IT_TIMEOUT=20 mrun PATH="$T/fakebin:/usr/bin:/bin" -- plan --static 4GiB --per-sample 0.04GiB
expect_rc "failing nvidia-smi" 2
grep -q "^muster: error: cannot learn the GPU's memory (.*status 6.*); pass --gpu-mem SIZE$" "$T/err" ||
    { show_output; fail "failing nvidia-smi: wrong message"; }

# --- --probe with a fake worker -------------------------------------------------------------
export PROBE_SEEN=$T/seen
cat > "$T/probe.sh" <<'EOF2'
#!/bin/sh
# writes the seed's figures as measured at batch 8; $1 = total_bytes or "none"
[ -n "$MUSTER_PROBE_FILE" ] || { echo "no MUSTER_PROBE_FILE" >&2; exit 9; }
echo "$MUSTER_PROBE_FILE" > "$PROBE_SEEN"
echo "probe worker says hello"
if [ "$1" = none ]; then
    printf '{"static_bytes": 4294967296, "peak_bytes": 4638564680, "batch": 8}\n' > "$MUSTER_PROBE_FILE"
else
    printf '{"static_bytes": 4294967296, "peak_bytes": 4638564680, "batch": 8, "total_bytes": %s}\n' \
        "$1" > "$MUSTER_PROBE_FILE"
fi
EOF2
chmod +x "$T/probe.sh"
IT_TIMEOUT=20 mrun -- \
    plan --probe --gpu-mem 48GiB --procs 3 -- "$T/probe.sh" none
expect_rc "--probe" 0
expect_eq "--probe: max batch" 240 "$(line 'max batch')"
expect_eq "--probe: starting batch" 192 "$(line 'starting batch (80 %)')"
grep -q '^probe worker says hello$' "$T/out" || fail "--probe: the worker's stdout was not passed on"
probe_file=$(cat "$T/seen")
case "$probe_file" in */probe.json) ;; *) fail "--probe: MUSTER_PROBE_FILE=$probe_file" ;; esac
[ -e "$(dirname "$probe_file")" ] && fail "--probe: left its directory $(dirname "$probe_file")"

# total_bytes from the probe file is used without --gpu-mem (and nvidia-smi is not needed)
IT_TIMEOUT=20 mrun PATH="$T/nopath:/usr/bin:/bin" -- \
    plan --probe --procs 3 --json -- "$T/probe.sh" 51539607552
expect_rc "--probe with total_bytes" 0
[ "$(wc -l < "$T/out")" = 1 ] || { show_output; fail "--probe --json: stdout is not the JSON alone"; }
grep -q '"gpu_mem_source":"probe"' "$T/out" || { show_output; fail "--probe: total_bytes unused"; }
grep -q '"max_batch":240' "$T/out" || { show_output; fail "--probe --json: max_batch"; }
grep -q 'probe worker says hello' "$T/err" || fail "--probe --json: worker's stdout not on stderr"

# without total_bytes, --gpu-mem or nvidia-smi: exit 2
IT_TIMEOUT=20 mrun PATH="$T/nopath" -- plan --probe --procs 3 -- "$T/probe.sh" none
expect_rc "--probe, no GPU memory" 2
expect_eq "--probe, no GPU memory: message" \
    "muster: error: cannot learn the GPU's memory (no nvidia-smi on PATH); pass --gpu-mem SIZE" \
    "$(cat "$T/err")"

# a probe that fails: exit 1, distinct from usage errors
IT_TIMEOUT=20 mrun -- plan --probe --gpu-mem 48GiB -- sh -c 'exit 1'
expect_rc "failing probe" 1
expect_eq "failing probe: message" "muster: error: probe run failed: exit 1" "$(cat "$T/err")"
# a probe that writes nothing, or junk
IT_TIMEOUT=20 mrun -- plan --probe --gpu-mem 48GiB -- true
expect_rc "probe without file" 1
grep -q '^muster: error: probe run wrote no probe file' "$T/err" || { show_output; fail "probe without file"; }
IT_TIMEOUT=20 mrun -- plan --probe --gpu-mem 48GiB -- sh -c 'echo "{\"batch\": 1" > "$MUSTER_PROBE_FILE"'
expect_rc "probe with junk" 1
[ "$(wc -l < "$T/err")" = 1 ] && grep -q '^muster: error: probe file is not JSON' "$T/err" ||
    { show_output; fail "probe with junk"; }
IT_TIMEOUT=20 mrun -- plan --probe --gpu-mem 48GiB -- sh -c \
    'echo "{\"static_bytes\": 10, \"peak_bytes\": 10, \"batch\": 4}" > "$MUSTER_PROBE_FILE"'
expect_rc "probe peak = static" 1
grep -q 'peak memory 10 B is not above static memory 10 B' "$T/err" || { show_output; fail "peak = static"; }
IT_TIMEOUT=20 mrun -- plan --probe --gpu-mem 48GiB -- "$T/no-such-program"
expect_rc "probe that cannot start" 1

# SIGTERM while the probe runs: forwarded to the worker, nothing left behind
cat > "$T/slow.sh" <<EOF2
#!/bin/sh
trap 'echo forwarded > "$T/term"; exit 5' TERM
sleep 60 &
: > "$T/started"
wait
EOF2
chmod +x "$T/slow.sh"
mrun_bg -- plan --probe --gpu-mem 48GiB -- "$T/slow.sh"
wait_for 10 test -e "$T/started" || { show_output; fail "the probe worker did not start"; }
kill -TERM "$MPID"
rc=0
wait "$MPID" || rc=$?
expect_eq "SIGTERM: exit code" 143 "$rc"
expect_eq "SIGTERM: worker got it" forwarded "$(cat "$T/term" 2>/dev/null)"
assert_no_marked_left "end of test" 5
exit 0
