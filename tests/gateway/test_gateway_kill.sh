#!/usr/bin/env bash
# Killing a black-box agent mid-episode (label mpi): an agent opens an
# episode, makes one call and is SIGKILLed. The run goes on: after
# gateway.idle_deadline_s (4 s) the episode is closed as abandoned (strict
# FIFO: the learner waits for its group, the first), the
# example agent finishes the other episodes, the 2-step run ends normally,
# and rollouts.h5 holds the killed episode marked abandoned (not trained on:
# the learner logs it) and the others with exactly their tokens.
source "$(dirname "$0")/gateway_common.sh"

dir="$WORK/run"
log="$WORK/run.log"
start_gateway_run "$dir" "$log" --train.steps=2 --train.tasks=2 --train.group=2 --gateway.idle_deadline_s=4 \
  --pool.policy=fifo
python3 "$SOURCE_DIR/tests/gateway/hang_agent.py" "$url" "$FORGE_GATEWAY_TOKEN" >"$WORK/hang.log" 2>&1 &
hang=$!
for _ in $(seq 600); do
  grep -q "made a call" "$WORK/hang.log" && break
  kill -0 "$hang" 2>/dev/null || { cat "$WORK/hang.log"; fail "the hanging agent ended early"; }
  sleep 0.1
done
grep -q "made a call" "$WORK/hang.log" || fail "the hanging agent made no call within 60 s"
kill -KILL "$hang"
wait "$hang" 2>/dev/null || true
"${AGENT[@]}" --gateway "$url" --token "$FORGE_GATEWAY_TOKEN" --parallel 2 --log "$WORK/calls.jsonl" ||
  { cat "$log"; fail "the agent failed"; }
wait_run "$log"
grep -q "  abandoned 1 (held" "$log" || { cat "$log"; fail "the learner did not leave the abandoned episode out"; }
grep -q "episodes opened, [0-9]* closed, 1 abandoned" "$log" || { cat "$log"; fail "gateway counters"; }
/usr/bin/python3 "$SOURCE_DIR/tests/gateway/check_agent_tokens.py" "$dir/rollouts.h5" "$WORK/calls.jsonl" \
  --episodes 8 --abandoned 1 || fail "rollouts.h5"
echo "PASS"
