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

# The pids of the ranks of a run (its run.dir is unique), in rank order: by
# the OMPI_COMM_WORLD_RANK in each one's environment (pids need not ascend
# with ranks: they wrap, and Open MPI need not start ranks in order; a
# process without one is a forge on its own, rank 0).
rank_pids() {
  local dir=$1 pid rank
  { pgrep -a -f -- "--run.dir=$dir" || true; } | { grep -v -e mpirun -e timeout || true; } | awk '{print $1}' |
    while read -r pid; do
      rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
      [ -e "/proc/$pid" ] || continue
      echo "${rank:-0} $pid"  # a forge not started by mpirun is one process: rank 0
    done | sort -n | awk '{print $2}'
}
