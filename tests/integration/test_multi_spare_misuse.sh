#!/bin/bash
# Hot spares, careless and hostile uses. `--spare` where there is nothing to replace
# or no rendezvous to wait in (--standalone, also from PET_SPARE; torchrun's static recipe; one
# node without --rdzv-endpoint) is a usage error: one line, exit 2, no worker. On a shared
# server with job credentials: a spare holding job A's credential is refused by job B (ERROR
# AUTH, exit 3), so is a spare of B with other --nnodes (MISMATCH); two spares of B wait while
# B's one node runs (neither fills the round nor starts a worker; both warn that without
# --max-restarts they can never be used) and exit 0 with the job.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/multi.sh"

one_line_usage() { # WHAT PATTERN
    expect_rc "$1" 2
    [ "$(wc -l < "$T/err")" = 1 ] && grep -q -- "$2" "$T/err" \
        || fail "$1: expected one line matching '$2', got: $(cat "$T/err")"
    [ -e "$T/ran" ] && fail "$1: a worker started"
    return 0
}
W=(--no-python /bin/touch "$T/ran")
mrun -- run --spare --standalone --nproc-per-node 1 "${W[@]}"
one_line_usage "--spare --standalone" "^muster: error: --spare waits to replace a node of a job on a shared rendezvous server: --standalone runs one node alone"
mrun PET_SPARE=1 -- run --standalone --nproc-per-node 1 "${W[@]}"
one_line_usage "PET_SPARE=1 --standalone" "--standalone runs one node alone"
mrun -- run --spare --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --nproc-per-node 1 "${W[@]}"
one_line_usage "--spare with the static recipe" "the static recipe and backend fix every node's rank"
mrun -- run --spare --nnodes 1 --nproc-per-node 1 "${W[@]}"
one_line_usage "--spare without --rdzv-endpoint" "it needs --rdzv-endpoint HOST:PORT"
mrun -- run --spare --nnodes 2 --rdzv-endpoint 127.0.0.1:1 --rdzv-id x --nproc-per-node 1 --dry-run "${W[@]}"
expect_rc "--spare --dry-run" 0
grep -qx 'spare=1 (waits to replace a lost or excluded node)' "$T/out" || { show_output; fail "--dry-run lacks spare=1"; }

# a shared server with a token file; job credentials of A and B
start_token_server
A=ja-$$ B=jb-$$
for j in A B; do
    job_token "$T/$j.tok" --job "${!j}"
done
mkdir -p "$T/w"
b=(--rdzv-endpoint 127.0.0.1:$SPORT --rdzv-id $B --rdzv-conf join_timeout=60 --nproc-per-node 1)
agent m -u MUSTER_TOKEN -- --nnodes 1 "${b[@]}" --token-file "$T/B.tok" --no-python "$WORKER" hold "$T/w"
wait_for 30 test -e "$T/w/ready.0.0" || { show_all; fail "job B did not start"; }

agent thief -u MUSTER_TOKEN NODE=thief -- --nnodes 1 "${b[@]}" --token-file "$T/A.tok" --spare \
    --no-python "$WORKER" hold "$T/w"
agent_wait thief 20
expect_agent_rc thief 3
grep -q "this credential does not admit job $B" "$T/thief.err" \
    || { show_agent thief; fail "the spare with A's credential was not refused by B"; }
agent odd -u MUSTER_TOKEN -- --nnodes 2 "${b[@]}" --token-file "$T/B.tok" --spare --no-python "$WORKER" hold "$T/w"
agent_wait odd 20
expect_agent_rc odd 3
grep -q "job $B has nnodes 1:1, this node asked for 2:2" "$T/odd.err" \
    || { show_agent odd; fail "a spare with other --nnodes was not refused"; }

for s in s1 s2; do
    agent $s -u MUSTER_TOKEN -- --nnodes 1 "${b[@]}" --token-file "$T/B.tok" --spare \
        --no-python "$WORKER" hold "$T/w"
done
wait_for 20 bash -c "grep -q 'as a spare' '$T/s1.err' && grep -q 'as a spare' '$T/s2.err'" \
    || { show_all; fail "the spares did not join"; }
grep -q "warning: --max-restarts 0: a lost node ends the job, so a spare is never used" "$T/s1.err" \
    || { show_agent s1; fail "a spare of a job without restarts was not warned"; }
# "as a spare" is logged when the JOIN is sent: the server may not have it yet
spares_2() { http_get "$SHTTP" /status; grep -q '"spares":2' "$T/http.body"; }
wait_for 20 spares_2 || { cat "$T/http.body" >&2; fail "/status does not count 2 spares"; }
[ "$(grep -c . "$T/w/starts")" = 1 ] || { show_all; fail "a spare started a worker: $(cat "$T/w/starts")"; }
release_agents m s1 s2
[ "$(grep -c . "$T/w/starts")" = 1 ] || fail "a spare started a worker: $(cat "$T/w/starts")"
grep -q "refused 127.0.0.1: job_scope: JOIN for job $B outside the credential's scope" "$SERR" || { cat "$SERR" >&2; fail "the server did not log the refused credential"; }
stop_server
assert_no_marked_left "after the job" 5
exit 0
