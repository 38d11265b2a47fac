#!/usr/bin/env bash
# 1,000 concurrent requests from 250 episodes on loopback (label mpi):
# bench/bench_gateway_load.py checks that none is lost and no episode's
# tokens mix with another's; the run then trains on the 125 closed groups
# and ends. Latency percentiles: docs/performance.md.
source "$(dirname "$0")/gateway_common.sh"

dir="$WORK/run"
log="$WORK/run.log"
start_gateway_run "$dir" "$log" --train.steps=1 --train.tasks=125 --train.group=2 --agent.max_new_tokens=8 \
  --pool.inflight=128 --pool.window=128 --mpi.env_groups=128
python3 "$SOURCE_DIR/bench/bench_gateway_load.py" --url "$url" --token "$FORGE_GATEWAY_TOKEN" \
  --episodes 250 --requests 1000 || { cat "$log"; fail "load checks failed"; }
wait_run "$log"
grep -q "250 episodes opened, 250 closed, 0 abandoned; 1000 requests (0 past the deadline, 0 failed)" "$log" ||
  { cat "$log"; fail "gateway counters"; }
echo "PASS"
