#!/usr/bin/env bash
# The entry point of the README.
#
#   ./forge.sh demo [--key=value ...]   set up, build, run the main job
#   ./forge.sh test [ctest args ...]    set up, build, run every test
#   ./forge.sh build                    configure and build into build/
#
# demo (the main job, configs/agent_demo.ini, run folder runs/demo):
#   1. forge sft: the agent's warm start on solver demonstrations
#   2. mpirun -np 5 forge train: asynchronous RL from it on 1 learner,
#      2 rollout and 2 environment ranks (at --optim.lr=3e-4, no warm-up)
#   3. forge eval of both checkpoints on the same 500 held-out tasks
#   4. plots of the RL rollouts and runs/demo/summary.json; prints both
#      success rates
# Extra arguments are overrides for every step (e.g. --train.steps=20).
# test passes extra arguments to ctest (e.g. `./forge.sh test -L unit`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

usage() {
  cat <<'USAGE'
Usage: ./forge.sh <command> [args]

Commands:
  demo [--key=value ...]  install what is missing (tools/setup.sh), build, then run
                          the main job: agent SFT, asynchronous RL under mpirun,
                          evaluation of both (configs/agent_demo.ini, runs/demo);
                          extra arguments override the config
  test [ctest args ...]   install what is missing, build, then run all tests:
                          ctest --test-dir build --output-on-failure -j2
                          (e.g. ./forge.sh test -L unit)
  build                   configure and build into build/ (Release)
USAGE
}

build() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j"$(nproc)"
}

# The main job; see the top of this file.
demo() {
  local cfg=configs/agent_demo.ini dir=runs/demo forge=./build/forge
  local mpirun=(mpirun --oversubscribe -np 5)
  [ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
  rm -rf "$dir"
  mkdir -p "$dir"
  local t0=$SECONDS
  echo "== 1/4 SFT warm start (forge sft) =="
  "$forge" sft --config "$cfg" --run.dir="$dir/sft" "$@"
  local t1=$SECONDS
  echo "== 2/4 asynchronous RL on 5 MPI ranks (forge train) =="
  "${mpirun[@]}" "$forge" train --config "$cfg" --train.init="$dir/sft" --run.dir="$dir/rl" \
    --optim.lr=3e-4 --optim.warmup_steps=0 "$@"
  local t2=$SECONDS
  echo "== 3/4 evaluation of both checkpoints on 500 held-out tasks (forge eval) =="
  "$forge" eval "$dir/sft" --config "$cfg" --eval.tasks=500 --json true "$@" >"$dir/eval_sft.json"
  "$forge" eval "$dir/rl" --config "$cfg" --eval.tasks=500 --json true "$@" >"$dir/eval_rl.json"
  local t3=$SECONDS
  echo "== 4/4 plots and summary =="
  /usr/bin/python3 tools/plot_rollouts.py "$dir/rl/rollouts.h5" --out "$dir/plots" --smooth 10
  /usr/bin/python3 tools/demo_summary.py "$dir" --seconds "$((t1 - t0))" "$((t2 - t1))" "$((t3 - t2))" \
    "$((SECONDS - t0))"
}

command="${1:-}"
case "$command" in
  demo)
    shift
    ./tools/setup.sh
    build
    demo "$@"
    ;;
  test)
    shift
    ./tools/setup.sh
    build
    ctest --test-dir build --output-on-failure -j2 "$@"
    ;;
  build)
    shift
    if [ "$#" -gt 0 ]; then
      echo "forge.sh: build takes no arguments" >&2
      usage >&2
      exit 2
    fi
    build
    ;;
  -h|--help|help)
    usage
    ;;
  "")
    usage >&2
    exit 2
    ;;
  *)
    echo "forge.sh: unknown command '$command'" >&2
    usage >&2
    exit 2
    ;;
esac
