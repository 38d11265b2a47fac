#!/usr/bin/env bash
# A black-box agent trains through the gateway (label mpi): the example agent
# (examples/gateway_agent, the official openai client) runs episodes until a
# 3-step run (2 groups of 2 per step) finishes; then every episode in
# rollouts.h5 must hold exactly the tokens and behaviour logprobs the agent
# was given for each of its calls, and each call's context must extend the
# previous call's context and reply (token-in/token-out, no drift).
source "$(dirname "$0")/gateway_common.sh"

dir="$WORK/run"
log="$WORK/run.log"
start_gateway_run "$dir" "$log" --train.steps=3 --train.tasks=2 --train.group=2
"${AGENT[@]}" --gateway "$dir/gateway/0.json" --token "$FORGE_GATEWAY_TOKEN" --parallel 3 \
  --log "$WORK/calls.jsonl" || { cat "$log"; fail "the agent failed"; }
wait_run "$log"
grep -q "gateway listening on http://127.0.0.1:" "$log" || fail "the gateway did not bind to loopback"
# The URL file goes with the server (a stale one named a dead port).
[ ! -e "$dir/gateway/0.json" ] || fail "the gateway's URL file outlived the run"
/usr/bin/python3 "$SOURCE_DIR/tests/gateway/check_agent_tokens.py" "$dir/rollouts.h5" "$WORK/calls.jsonl" \
  --episodes 12 || fail "the trained tokens differ from the agent's"
echo "PASS"
