# Shared by the tests of `forge train` on MPI ranks (sourced, not run):
# the tiny model and run every test uses, and the launcher.
#   FORGE_BIN   the forge executable (set by CTest)
set -euo pipefail

: "${FORGE_BIN:?FORGE_BIN must name the forge executable}"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
TINY=(--model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 --model.ffn_dim=64
      --agent.max_new_tokens=16 --train.eval_tasks=4 --run.threads=1 --run.log_every=1)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/forge_roles.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The pids of the ranks of a run (its run.dir is unique), in rank order.
rank_pids() {
  local dir=$1
  { pgrep -a -f -- "--run.dir=$dir" || true; } | { grep -v -e mpirun -e timeout || true; } |
    awk '{print $1}' | sort -n
}
