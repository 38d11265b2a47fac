# Shared by the gateway tests (sourced): a `forge train` whose environment
# rank is a gateway, on 3 ranks (learner 0, rollout 1, gateway 2), the tiny
# model of tests/mpi/roles_common.sh, from random weights.
#   FORGE_BIN  the forge executable (set by CTest)
source "$(dirname "${BASH_SOURCE[0]}")/../mpi/roles_common.sh"
SOURCE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export FORGE_GATEWAY_TOKEN="gw-test-$$-$RANDOM"
AGENT=(python3 "$SOURCE_DIR/examples/gateway_agent/agent.py")

# start_gateway_run DIR LOG [overrides...]: starts the job in the background
# (pid in $job) and waits for the gateway's URL (in $url).
start_gateway_run() {
  local dir=$1 log=$2
  shift 2
  timeout 300 "${MPIRUN[@]}" -np 3 "$FORGE_BIN" train "${TINY[@]}" --run.dir="$dir" \
    --gateway.enabled=true --gateway.port=0 --mpi.rollouts=1 "$@" >"$log" 2>&1 &
  job=$!
  for _ in $(seq 600); do
    [ -f "$dir/gateway/0.json" ] && break
    kill -0 "$job" 2>/dev/null || { cat "$log"; fail "the job ended before its gateway listened"; }
    sleep 0.1
  done
  [ -f "$dir/gateway/0.json" ] || { cat "$log"; fail "no gateway URL within 60 s"; }
  url=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["url"])' "$dir/gateway/0.json")
}

# wait_run LOG: the job must exit 0 (the launch's timeout bounds it: 300 s).
wait_run() {
  local log=$1 code=0
  wait "$job" || code=$?
  [ "$code" -eq 0 ] || { cat "$log"; fail "forge train exited with $code"; }
}
