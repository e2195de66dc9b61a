#!/bin/bash
# --resume-arg: scripts that resume only when told on their command line (nanoGPT's
# --init_from=resume, HF's --resume_from_checkpoint PATH) get the templates appended, "{}"
# replaced by the verified checkpoint's path — only in an attempt that resumes, never in a fresh
# one; a worker that wrote in place and was killed mid-write gets the last good version put back
# first. Bad uses are refused with one line and exit 2.
. "$(dirname "$0")/ft.sh"

C="$T/ck"
cat > "$T/wk.sh" << 'EOW'
#!/bin/bash
# args of each attempt, one per line; attempt 0 writes ckpt.pt in place (a zip, as torch.save
# does), then starts rewriting it and is killed in the middle (the file is cut)
n=$TORCHELASTIC_RESTART_COUNT
printf '%s\n' "$@" > "$WDIR/args.$n"
c=$MUSTER_CHECKPOINT_DIR
if [ "$n" = 0 ]; then
    { printf 'PK\003\004'; head -c 5000 /dev/zero; printf 'PK\005\006'; head -c 18 /dev/zero; } > "$c/ckpt.pt"
    for _ in $(seq 200); do
        grep -q '"ckpt.pt"' "$c/.muster/good.json" 2> /dev/null && break
        sleep 0.05
    done
    { printf 'PK\003\004'; head -c 1000 /dev/zero; } > "$c/ckpt.pt" # the rewrite, cut here
    kill -9 $$
fi
exit 0
EOW
chmod +x "$T/wk.sh"
mkdir -p "$T/w"
IT_TIMEOUT=60 mrun WDIR="$T/w" "${FT_CLEAN_ENV[@]}" -- run --standalone --nproc-per-node 1 \
    --max-restarts 1 --checkpoint-dir "$C" --resume-arg --init_from=resume \
    --resume-arg --resume_from_checkpoint --resume-arg 'path={}' --no-python "$T/wk.sh" --lr 3
expect_rc "a worker killed in the middle of its rewrite, restarted once" 0
expect_eq "attempt 0 arguments (a fresh start: none added)" "--lr 3" "$(tr '\n' ' ' < "$T/w/args.0" | sed 's/ $//')"
expect_eq "attempt 1 arguments" "--lr 3 --init_from=resume --resume_from_checkpoint path=$C/ckpt.pt" \
    "$(tr '\n' ' ' < "$T/w/args.1" | sed 's/ $//')"
grep -q "^muster: checkpoint ckpt.pt restored from its last good copy (step -1, 5026 bytes, xxh3 [0-9a-f]*): the file in place: size 1004 != recorded 5026 (truncated?)$" "$T/err" ||
    { show_output; fail "no line saying the cut ckpt.pt was restored, and why"; }
expect_eq "ckpt.pt in place after the restart" 5026 "$(stat -c %s "$C/ckpt.pt")"
grep -q "attempt 1 resumes from $C/ckpt.pt" "$T/err" || { show_output; fail "attempt 1 did not resume from ckpt.pt"; }

# bad uses: one line, exit 2
IT_TIMEOUT=20 mrun -- run --standalone --resume-arg --init_from=resume --no-python true
expect_rc "--resume-arg without --checkpoint-dir" 2
grep -q "resume-arg needs --checkpoint-dir" "$T/err" || { show_output; fail "no reason for --resume-arg without --checkpoint-dir"; }
IT_TIMEOUT=20 mrun -- run --standalone --checkpoint-dir "$C" --checkpoint-settle 0 --no-python true
expect_rc "--checkpoint-settle 0" 2
grep -q "checkpoint-settle must be a number of seconds" "$T/err" || { show_output; fail "no reason for --checkpoint-settle 0"; }
IT_TIMEOUT=20 mrun -- run --standalone --checkpoint-dir "$C" --checkpoint-marker a/b --no-python true
expect_rc "--checkpoint-marker a/b" 2
grep -q "checkpoint-marker must be a file name" "$T/err" || { show_output; fail "no reason for --checkpoint-marker a/b"; }
exit 0
