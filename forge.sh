#!/usr/bin/env bash
# The entry point of the README.
#
#   ./forge.sh demo [--key=value ...]   set up, build, run the main job
#   ./forge.sh seeds [N ...] [--key=value ...]  the main job once per run.seed
#                                       (default 1 2 3) and the table of them
#   ./forge.sh code [--key=value ...]   set up, build, run the code domain's job
#   ./forge.sh smollm2 [--key=value ...] set up, build, run the real-model job
#   ./forge.sh test [ctest args ...]    set up, build, run every test
#   ./forge.sh build                    configure and build into build/
#
# demo (the main job, configs/agent_demo.ini, run folder runs/demo, or
# $FORGE_DEMO_DIR):
#   1. forge sft: the agent's warm start on solver demonstrations (at every
#      core, up to 8)
#   2. mpirun -np 5 forge train: asynchronous RL from it on 1 learner,
#      2 rollout and 2 environment ranks (at --optim.lr=1e-4, no warm-up)
#   3. forge eval of both checkpoints on the same 500 held-out tasks, seen
#      styles and the held-out template family
#   4. plots of the RL rollouts and runs/demo/summary.json; prints both
#      success rates
# code (configs/code_demo.ini, runs/code): the same four steps on the code
#   domain alone (fix a bug in a Python module; tests in the sandbox), RL at
#   --optim.lr=5e-5, evaluation on 300 held-out tasks
# smollm2 (a real pretrained model, configs/smollm2_agent.ini, runs/smollm2):
#   0. forge eval of SmolLM2-135M-Instruct itself (zero-shot)
#   1. forge sft from it; 2. mpirun -np 3 forge train (1 learner, 1 rollout,
#   1 environment rank, --optim.lr=2e-5); 3. forge eval of both checkpoints;
#   4. summary (runs/smollm2/summary.json)
# Extra arguments are overrides for every step (e.g. --train.steps=20), but
# --eval.tasks=N, which sets the evaluation steps' task count alone; the
# previous run folder is kept as DIR.prev (the one before it is removed).
# test passes extra arguments to ctest (e.g. `./forge.sh test -L unit`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

usage() {
  cat <<'USAGE'
Usage: ./forge.sh <command> [args]

Commands:
  demo [--key=value ...]  install what is missing (tools/setup.sh), build, then run
                          the main job: agent SFT, asynchronous RL under mpirun,
                          evaluation of both (configs/agent_demo.ini, runs/demo
                          or $FORGE_DEMO_DIR); extra arguments override the config
                          (every step's; not run.dir or train.init;
                          --eval.tasks=N sets the evaluation's task count).
                          Each job keeps its previous run folder as DIR.prev
  seeds [N ...] [--key=value ...]
                          the main job once per seed (default: 1 2 3) into
                          runs/demo-seed-N, then the table of their lifts
                          (runs/seeds.json; each seed as long as demo)
  code [--key=value ...]  install what is missing, build, then run the code domain's
                          job: SFT, asynchronous RL, evaluation of both on 300
                          held-out bug-fixing tasks (configs/code_demo.ini,
                          runs/code; about 20 minutes on 2 cores)
  smollm2 [--key=value ...]
                          install what is missing, build, then run the real-model
                          job: SmolLM2-135M-Instruct zero-shot, after SFT, after
                          asynchronous RL (configs/smollm2_agent.ini, runs/smollm2;
                          about 10-16 minutes on 2 cores)
  test [ctest args ...]   install what is missing, build, then run all tests:
                          ctest --test-dir build --output-on-failure
                          --no-tests=error -j2 (a -L or -R that picks no
                          test is an error)
                          (e.g. ./forge.sh test -L unit)
  build                   configure and build into build/ (Release)
USAGE
}

build() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j"$(nproc)"
}

# A job places its steps' run folders itself: --run.dir and --train.init
# among its overrides are refused (before set-up and build).
refuse_run_folders() {
  local job=$1
  shift
  for a in "$@"; do
    case "$a" in
      --run.dir|--run.dir=*|--train.init|--train.init=*)
        local moved=""
        [ "$job" = demo ] && moved=" (FORGE_DEMO_DIR moves the main job's folder)"
        [ "$job" = seeds ] && moved=" (seed N runs in runs/demo-seed-N)"
        echo "forge.sh: ${a%%=*} cannot be overridden: $job sets each step's$moved" >&2
        exit 2
        ;;
      --run.seed|--run.seed=*)
        # seeds passes each seed last, where it would silently win.
        if [ "$job" = seeds ]; then
          echo "forge.sh: seeds takes its seeds as bare numbers (./forge.sh seeds 1 2 3), not ${a%%=*}" >&2
          exit 2
        fi
        ;;
    esac
  done
}

# The value of [SECTION] KEY in the INI text `forge config` prints (stdin);
# slurm/forge_hetjob.sbatch reads mpi.rollouts with the same awk.
ini_value() {
  awk -F' *= *' -v section="[$1]" -v key="$2" '/^\[/{s=$0} s==section && $1==key{print $2}'
}

# The config and the overrides, read as forge reads them (exit 2 on a bad
# key or value), and the RL step's roles against its NP ranks, before a job
# moves its old run folder aside: check_overrides JOB CONFIG NP [--key=value ...]
check_overrides() {
  local job=$1 cfg=$2 np=$3 resolved learners rollouts
  shift 3
  resolved=$(./build/forge config --config "$cfg" "$@")
  learners=$(ini_value mpi learners <<<"$resolved")
  rollouts=$(ini_value mpi rollouts <<<"$resolved")
  if [[ "$learners" =~ ^[0-9]+$ && "$rollouts" =~ ^[0-9]+$ ]] && ((learners + rollouts + 1 > np)); then
    echo "forge.sh: $job runs RL on $np MPI ranks: mpi.learners = $learners + mpi.rollouts = $rollouts leave no" \
      "environment rank; lower mpi.learners or mpi.rollouts" >&2
    exit 2
  fi
}

# A job's run folder, empty; the previous run's is kept as DIR.prev (one
# generation: an older DIR.prev is removed).
fresh_run_folder() {
  local dir=${1%/}
  if [ -e "$dir" ]; then
    rm -rf "$dir.prev"
    mv "$dir" "$dir.prev"
    echo "forge.sh: the previous $dir is now $dir.prev"
  fi
  mkdir -p "$dir"
}

# --eval.tasks=N among a job's arguments is the evaluation steps' task count
# (forge sft and train have no such key): eval_tasks_of DEFAULT ARGS... sets
# EVAL_TASKS, and JOB_ARGS to the other arguments.
eval_tasks_of() {
  EVAL_TASKS=$1
  JOB_ARGS=()
  shift
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --eval.tasks=*) EVAL_TASKS=${1#--eval.tasks=} ;;
      --eval.tasks) EVAL_TASKS= ;;  # without its value
      *) JOB_ARGS+=("$1") ;;
    esac
    shift
  done
  # forge eval's range, checked before the job's first step.
  if ! [[ "$EVAL_TASKS" =~ ^[1-9][0-9]{0,6}$ ]] || ((EVAL_TASKS > 1000000)); then
    echo "forge.sh: --eval.tasks = '$EVAL_TASKS' must be a whole number in [1, 1000000]" >&2
    exit 2
  fi
}

# -h or --help among a job's arguments: its usage, and nothing is run.
wants_help() {
  for a in "$@"; do
    case "$a" in -h|--help) return 0 ;; esac
  done
  return 1
}

# The main job; see the top of this file.
demo() {
  agent_job demo configs/agent_demo.ini "${FORGE_DEMO_DIR:-runs/demo}" 1e-4 500 "$@"
}

# SFT, asynchronous RL at learning rate $4, evaluation of both on $5 tasks:
# agent_job JOB CONFIG RUN_DIR RL_LR EVAL_TASKS [--key=value ...]
agent_job() {
  local job=$1 cfg=$2 dir=$3 lr=$4 forge=./build/forge np=5
  shift
  eval_tasks_of "$4" "${@:5}"
  local tasks=$EVAL_TASKS
  set -- "${JOB_ARGS[@]+"${JOB_ARGS[@]}"}"
  # SFT and evaluation run alone: every core (up to 8) for their one process;
  # the RL ranks keep the config's run.threads (one each).
  local threads
  threads=$(nproc)
  ((threads > 8)) && threads=8
  # The 5 ranks share the cores: OpenMP threads wait passively, so that a
  # --run.threads above 1 does not spin (12x slower RL on 2 cores).
  local mpirun=(mpirun --oversubscribe -np "$np" -x OMP_WAIT_POLICY=PASSIVE)
  [ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
  check_overrides "$job" "$cfg" "$np" "$@"
  fresh_run_folder "$dir"
  local t0=$SECONDS
  echo "== 1/4 SFT warm start (forge sft) =="
  "$forge" sft --config "$cfg" --run.dir="$dir/sft" --run.threads="$threads" "$@"
  local t1=$SECONDS
  echo "== 2/4 asynchronous RL on $np MPI ranks (forge train) =="
  "${mpirun[@]}" "$forge" train --config "$cfg" --train.init="$dir/sft" --run.dir="$dir/rl" \
    --optim.lr="$lr" --optim.warmup_steps=0 "$@"
  local t2=$SECONDS
  echo "== 3/4 evaluation of both checkpoints on $tasks held-out tasks (forge eval) =="
  "$forge" eval "$dir/sft" --config "$cfg" --eval.tasks="$tasks" --run.threads="$threads" --json true "$@" \
    >"$dir/eval_sft.json"
  "$forge" eval "$dir/rl" --config "$cfg" --eval.tasks="$tasks" --run.threads="$threads" --json true "$@" \
    >"$dir/eval_rl.json"
  local t3=$SECONDS
  echo "== 4/4 plots and summary =="
  /usr/bin/python3 tools/plot_rollouts.py "$dir/rl/rollouts.h5" --out "$dir/plots" --smooth 10
  /usr/bin/python3 tools/demo_summary.py "$dir" --seconds "$((t1 - t0))" "$((t2 - t1))" "$((t3 - t2))" \
    "$((SECONDS - t0))"
}

# The main job per seed; see the top of this file.
seeds() {
  local seeds=() overrides=() dirs=()
  for a in "$@"; do
    if [[ "$a" =~ ^[0-9]+$ ]]; then seeds+=("$a"); else overrides+=("$a"); fi
  done
  [ "${#seeds[@]}" -eq 0 ] && seeds=(1 2 3)
  for s in "${seeds[@]}"; do
    echo "==== the main job with --run.seed=$s (runs/demo-seed-$s) ===="
    FORGE_DEMO_DIR="runs/demo-seed-$s" demo "${overrides[@]}" --run.seed="$s"
    dirs+=("runs/demo-seed-$s")
  done
  /usr/bin/python3 tools/seeds_summary.py "${dirs[@]}" --out runs/seeds.json
}

# The real-model job; see the top of this file.
smollm2() {
  local cfg=configs/smollm2_agent.ini dir=runs/smollm2 forge=./build/forge np=3
  eval_tasks_of 100 "$@"
  local tasks=$EVAL_TASKS
  set -- "${JOB_ARGS[@]+"${JOB_ARGS[@]}"}"
  local model='$FORGE_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf'
  local mpirun=(mpirun --oversubscribe -np "$np" -x OMP_WAIT_POLICY=PASSIVE)
  [ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
  if [ ! -f "${FORGE_CACHE:-$HOME/.cache/forge}/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    echo "forge.sh: SmolLM2-135M-Instruct is not in the cache; tools/setup.sh fetches it (it needs network)" >&2
    exit 2
  fi
  check_overrides smollm2 "$cfg" "$np" "$@"
  fresh_run_folder "$dir"
  local t0=$SECONDS
  echo "== 0/4 zero-shot evaluation of the pretrained model on $tasks held-out tasks (forge eval) =="
  "$forge" eval "$model" --config "$cfg" --run.threads=2 --eval.tasks=$tasks --json true "$@" >"$dir/eval_zero.json"
  local t1=$SECONDS
  echo "== 1/4 SFT on solver demonstrations (forge sft) =="
  "$forge" sft --config "$cfg" --run.threads=2 --run.dir="$dir/sft" "$@"
  local t2=$SECONDS
  echo "== 2/4 asynchronous RL on $np MPI ranks (forge train) =="
  "${mpirun[@]}" "$forge" train --config "$cfg" --train.init="$dir/sft" --run.dir="$dir/rl" \
    --optim.lr=2e-5 --optim.warmup_steps=0 "$@"
  local t3=$SECONDS
  echo "== 3/4 evaluation of both checkpoints on the same $tasks held-out tasks (forge eval) =="
  "$forge" eval "$dir/sft" --config "$cfg" --run.threads=2 --eval.tasks=$tasks --json true "$@" >"$dir/eval_sft.json"
  "$forge" eval "$dir/rl" --config "$cfg" --run.threads=2 --eval.tasks=$tasks --json true "$@" >"$dir/eval_rl.json"
  local t4=$SECONDS
  echo "== 4/4 summary =="
  /usr/bin/python3 tools/demo_summary.py "$dir" --seconds "$((t2 - t1))" "$((t3 - t2))" "$((t4 - t3 + t1 - t0))" \
    "$((SECONDS - t0))"
}

command="${1:-}"
if [ "$#" -gt 1 ] && [[ "$command" =~ ^(demo|seeds|code|smollm2)$ ]] && wants_help "${@:2}"; then
  usage
  exit 0
fi
# A job's overrides are --key=value words (a bare --flag is a bool set true;
# seeds also takes bare seed numbers): '--train.steps 50' would hand the 50
# to seeds as a seed, and the flag to forge without its value. Refused before
# set-up and build.
if [[ "$command" =~ ^(demo|seeds|code|smollm2)$ ]]; then
  prev=""
  for a in "${@:2}"; do
    if [[ "$prev" == --* && "$prev" != *=* && "$a" != -* ]]; then
      echo "forge.sh: $command takes overrides as --key=value: write '$prev=$a', not '$prev $a'" \
        "(a bare bool flag is true: put seed numbers before it)" >&2
      exit 2
    fi
    prev="$a"
  done
  eval_tasks_of 1 "${@:2}"  # a bad --eval.tasks, refused here too
  refuse_run_folders "$command" "${@:2}"
  # A seed given twice would run twice into one folder and count twice.
  if [ "$command" = seeds ]; then
    seen=" "
    for a in "${@:2}"; do
      [[ "$a" =~ ^[0-9]+$ ]] || continue
      n=${a#"${a%%[!0]*}"}  # without leading zeros (as text: no 64-bit wrap)
      n=${n:-0}
      if [[ "$seen" == *" $n "* ]]; then
        echo "forge.sh: seeds: seed $a is given twice" >&2
        exit 2
      fi
      # run.seed is unsigned 64-bit: refused here, not after the seeds before it ran.
      if [ "${#n}" -gt 20 ] || { [ "${#n}" -eq 20 ] && [[ "$n" > 18446744073709551615 ]]; }; then
        echo "forge.sh: seeds: seed $a is out of range (run.seed is unsigned 64-bit)" >&2
        exit 2
      fi
      seen+="$n "
    done
  fi
fi
case "$command" in
  demo)
    shift
    ./tools/setup.sh
    build
    demo "$@"
    ;;
  seeds)
    shift
    ./tools/setup.sh
    build
    seeds "$@"
    ;;
  code)
    shift
    ./tools/setup.sh
    build
    agent_job code configs/code_demo.ini runs/code 5e-5 300 "$@"
    ;;
  smollm2)
    shift
    ./tools/setup.sh
    build
    smollm2 "$@"
    ;;
  test)
    shift
    ./tools/setup.sh
    build
    # --no-tests=error: a mistyped -L or -R runs nothing, which ctest calls a pass
    ctest --test-dir build --output-on-failure --no-tests=error -j2 "$@"
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
