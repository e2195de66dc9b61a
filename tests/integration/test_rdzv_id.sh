#!/bin/bash
# --rdzv-id is honoured without --standalone: one node whose address is the rendezvous endpoint
# (the agent hosts the rendezvous itself, as torchrun's c10d backend with is_host does).
. "$(dirname "$0")/lib.sh"

port=$("$TORCH_PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) \
    || port=$(( 20000 + RANDOM % 20000 ))
D="$T/w"; mkdir -p "$D"
IT_TIMEOUT=60 mrun -- run --nnodes 1 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id myjob-$$ \
    --nproc-per-node 2 --no-python "$WORKER" dump "$D"
expect_rc "--nnodes 1 --rdzv-endpoint 127.0.0.1:$port --rdzv-id myjob-$$" 0
for r in 0 1; do
    expect_eq "rank $r TORCHELASTIC_RUN_ID" "myjob-$$" "$(envval "$D/env.$r.0" TORCHELASTIC_RUN_ID)"
    expect_eq "rank $r MUSTER_JOB_ID" "myjob-$$" "$(envval "$D/env.$r.0" MUSTER_JOB_ID)"
done

# --standalone ignores --rdzv-id (as torchrun does: a random id)
D="$T/s"; mkdir -p "$D"
mrun -- run --standalone --rdzv-id fixedid --nproc-per-node 1 --no-python "$WORKER" dump "$D"
expect_rc "--standalone --rdzv-id fixedid" 0
rid=$(envval "$D/env.0.0" TORCHELASTIC_RUN_ID)
[ -n "$rid" ] && [ "$rid" != fixedid ] || fail "--standalone must replace --rdzv-id by a random id, got '$rid'"
assert_no_marked_left "end of test" 5
exit 0
