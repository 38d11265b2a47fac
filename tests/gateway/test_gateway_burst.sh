#!/usr/bin/env bash
# A burst of agent requests on a healthy rollout rank (label mpi): 160 chat
# requests at once on a rollout engine of batch 4, with mpi.deadline_s = 3.
# The gateway rank keeps at most its share of the engine's batch outstanding
# at the rollout rank and queues the rest itself, so every request is
# answered 200 and the run ends normally; sending them all at once queued
# them in the engine past mpi.deadline_s, and the job aborted blaming the
# rollout rank (this test fails so on the old code; with 128 new tokens a
# request it did not, so the burst stays at 256: a request the engine serves
# at once still takes well under a second here, against the 3 s deadline).
source "$(dirname "$0")/gateway_common.sh"

dir="$WORK/run"
log="$WORK/run.log"
start_gateway_run "$dir" "$log" --train.steps=1 --train.tasks=2 --train.group=2 --mpi.env_groups=2 \
  --model.d_model=128 --model.n_layers=4 --model.n_heads=4 --model.n_kv_heads=4 --model.ffn_dim=256 \
  --agent.max_new_tokens=256 --mpi.deadline_s=3 --gateway.request_deadline_s=120
python3 "$SOURCE_DIR/tests/gateway/burst_client.py" "$url" "$FORGE_GATEWAY_TOKEN" 4 160 ||
  { cat "$log"; fail "a request of the burst was not answered 200"; }
wait_run "$log"
grep -q "4 episodes opened, 4 closed, 0 abandoned; 160 requests (0 past the deadline, 0 failed)" "$log" ||
  { cat "$log"; fail "gateway counters"; }
echo "PASS"
