#!/usr/bin/env bash
# The gateway's protocol and errors on a live run (label mpi):
# check_gateway_protocol.py drives two episodes of the run's only group
# (chat plain/streamed/root, completions, tools, answer, reward, close) and
# every error it must return; the run then trains on them and ends, and
# rollouts.h5 holds episode A with exactly the tokens it was given and B
# marked abandoned.
source "$(dirname "$0")/gateway_common.sh"

dir="$WORK/run"
log="$WORK/run.log"
start_gateway_run "$dir" "$log" --train.steps=1 --train.tasks=1 --train.group=2 --gateway.max_request_kib=16
python3 "$SOURCE_DIR/tests/gateway/check_gateway_protocol.py" --url "$url" --token "$FORGE_GATEWAY_TOKEN" \
  --log "$WORK/calls.jsonl" || { cat "$log"; fail "protocol checks failed"; }
wait_run "$log"
grep -q "2 episodes opened, 1 closed, 1 abandoned" "$log" || { cat "$log"; fail "gateway counters"; }
/usr/bin/python3 "$SOURCE_DIR/tests/gateway/check_agent_tokens.py" "$dir/rollouts.h5" "$WORK/calls.jsonl" \
  --episodes 2 --abandoned 1 || fail "the trained tokens differ from the returned ones"
"$FORGE_BIN" inspect "$dir/rollouts.h5" | grep -q "1 episodes abandoned" || fail "forge inspect does not count the abandoned episode"
"$FORGE_BIN" inspect "$dir/rollouts.h5" --json true | grep -q '"abandoned_episodes": 1' || fail "inspect --json"
# Its rewards are the trained episode's (A), not the abandoned one's too.
"$FORGE_BIN" inspect "$dir/rollouts.h5" --json true | grep -q '"rewards": {"episodes": 1,' ||
  fail "inspect --json counts the abandoned episode in its rewards"
echo "PASS"
