#!/usr/bin/env bash
# The sbatch scripts' argument handling, without a cluster: each script runs
# with the Slurm variables a job would have and a stand-in `srun` first on
# PATH that records its arguments; the real forge resolves the configuration.
#
#   tests/slurm/test_sbatch_args.sh BUILD_DIR SOURCE_DIR
#
# Checks:
# - forge_hetjob.sbatch passes --resume through to forge train on both
#   components (forge config, which it asks for mpi.rollouts, does not take
#   the flag: the job used to end there with "unknown option '--resume'");
#   sets --mpi.learners from component 0's task count and refuses a user's
#   (exit 2); refuses a component 1 too small for mpi.rollouts plus an
#   environment rank (exit 2).
# - forge_job.sbatch passes --resume through, and FORGE_RESUME=1 adds it.
# - forge_job.sbatch requeued (SLURM_RESTART_COUNT > 0, FORGE_RESUME auto):
#   resumes when the run folder has a checkpoint; otherwise keeps a partial
#   rollouts.h5 aside as rollouts.restart-<n>.h5, and refuses (exit 2) to
#   move it over one already kept.
set -euo pipefail
# The caller's own settings would change what the scripts do.
unset FORGE_RESUME FORGE_RUN_DIR FORGE_CONFIG
for v in $(compgen -v SLURM_ || true); do unset "$v"; done

build_dir="$(cd "${1:?usage: test_sbatch_args.sh BUILD_DIR SOURCE_DIR}" && pwd)"
src_dir="$(cd "${2:?usage: test_sbatch_args.sh BUILD_DIR SOURCE_DIR}" && pwd)"
forge="$build_dir/forge"
[ -x "$forge" ] || { echo "FAIL: forge binary '$forge' not found (build the forge target)"; exit 1; }

work="$(mktemp -d /tmp/forge-sbatch-args.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/submit"
# The stand-in srun: one argument a line, then a separator.
cat >"$work/bin/srun" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$@" >>"$SRUN_LOG"
echo "--" >>"$SRUN_LOG"
EOF
chmod +x "$work/bin/srun"

fail() { echo "FAIL: $*"; exit 1; }
# run_script SCRIPT [ARG...]: runs it as a job would, from the submit folder;
# sets rc, out (stdout and stderr) and the srun log in $work/srun.log.
run_script() {
  local script="$1"
  shift
  rm -f "$work/srun.log"
  rc=0
  out="$(cd "$work/submit" && PATH="$work/bin:$PATH" SRUN_LOG="$work/srun.log" FORGE_BIN="$forge" \
    bash "$src_dir/slurm/$script" "$@" 2>&1)" || rc=$?
}
het() {
  SLURM_JOB_ID=77 SLURM_NTASKS_HET_GROUP_0="${L:-1}" SLURM_NTASKS_HET_GROUP_1="${O:-2}" run_script forge_hetjob.sbatch "$@"
}

# --- forge_hetjob.sbatch ---
het --resume --run.dir=r1
[ "$rc" -eq 0 ] || fail "forge_hetjob.sbatch --resume: exit $rc: $out"
[ "$(grep -cx -- '--resume' "$work/srun.log")" -eq 2 ] ||
  fail "forge_hetjob.sbatch --resume: srun did not get --resume once per component: $(cat "$work/srun.log")"
[ "$(grep -cx -- '--mpi.learners=1' "$work/srun.log")" -eq 2 ] ||
  fail "forge_hetjob.sbatch: --mpi.learners=1 (component 0's tasks) not passed: $(cat "$work/srun.log")"
grep -qx -- '--run.dir=r1' "$work/srun.log" || fail "forge_hetjob.sbatch: --run.dir=r1 not passed"

L=2 het --run.dir=r2
grep -qx -- '--mpi.learners=2' "$work/srun.log" || fail "forge_hetjob.sbatch: learners from component 0 (2) not passed"

het --mpi.learners=3
[ "$rc" -eq 2 ] || fail "forge_hetjob.sbatch --mpi.learners=3: exit $rc, expected 2: $out"
grep -q "component 0's task count" <<<"$out" || fail "forge_hetjob.sbatch --mpi.learners=3: message: $out"
[ ! -e "$work/srun.log" ] || fail "forge_hetjob.sbatch --mpi.learners=3 still ran srun"

O=2 het --mpi.rollouts=2
[ "$rc" -eq 2 ] || fail "forge_hetjob.sbatch with mpi.rollouts=2 on 2 tasks: exit $rc, expected 2: $out"
grep -q "needs mpi.rollouts (2) rollout ranks" <<<"$out" || fail "forge_hetjob.sbatch small component: message: $out"

het --no.such.key=1
[ "$rc" -eq 2 ] || fail "forge_hetjob.sbatch --no.such.key=1: exit $rc, expected 2: $out"
grep -q "unknown option '--no.such.key'" <<<"$out" || fail "forge_hetjob.sbatch bad key: message: $out"

# --- forge_job.sbatch ---
SLURM_JOB_ID=78 SLURM_NTASKS=3 run_script forge_job.sbatch --resume --run.dir=j1
[ "$rc" -eq 0 ] || fail "forge_job.sbatch --resume: exit $rc: $out"
grep -qx -- '--resume' "$work/srun.log" || fail "forge_job.sbatch --resume: not passed to srun: $(cat "$work/srun.log")"
SLURM_JOB_ID=78 SLURM_NTASKS=3 FORGE_RESUME=1 run_script forge_job.sbatch --run.dir=j1
grep -qx -- '--resume' "$work/srun.log" || fail "forge_job.sbatch FORGE_RESUME=1: --resume not added"


# --- forge_job.sbatch requeued ---
requeued() { SLURM_JOB_ID=79 SLURM_NTASKS=3 SLURM_RESTART_COUNT="$1" run_script forge_job.sbatch --run.dir=q; }
mkdir -p "$work/submit/q"
echo partial >"$work/submit/q/rollouts.h5"
requeued 1
[ "$rc" -eq 0 ] && [ -e "$work/srun.log" ] || fail "requeued without a checkpoint: exit $rc: $out"
grep -qx -- '--resume' "$work/srun.log" && fail "requeued without a checkpoint: --resume added"
[ -e "$work/submit/q/rollouts.restart-1.h5" ] && [ ! -e "$work/submit/q/rollouts.h5" ] ||
  fail "requeued without a checkpoint: rollouts.h5 not kept as rollouts.restart-1.h5: $(ls "$work/submit/q")"
echo partial2 >"$work/submit/q/rollouts.h5"
requeued 1
[ "$rc" -eq 2 ] || fail "requeued onto a kept rollouts.restart-1.h5: exit $rc, expected 2: $out"
grep -q "already exists" <<<"$out" || fail "requeued onto a kept file: message: $out"
[ "$(cat "$work/submit/q/rollouts.restart-1.h5")" = partial ] || fail "the kept rollouts.restart-1.h5 was overwritten"
[ ! -e "$work/srun.log" ] || fail "requeued onto a kept file: srun still ran"
requeued 2
[ "$rc" -eq 0 ] && [ "$(cat "$work/submit/q/rollouts.restart-2.h5")" = partial2 ] ||
  fail "second requeue: rollouts.h5 not kept as rollouts.restart-2.h5 (exit $rc): $out"
mkdir -p "$work/submit/q/checkpoints"
requeued 3
[ "$rc" -eq 0 ] && [ -e "$work/srun.log" ] || fail "requeued with an empty checkpoints folder: exit $rc: $out"
grep -qx -- '--resume' "$work/srun.log" && fail "requeued with an empty checkpoints folder: --resume added"
echo ckpt >"$work/submit/q/checkpoints/ckpt_step_00000004.h5"
requeued 4
[ "$rc" -eq 0 ] || fail "requeued with a checkpoint: exit $rc: $out"
grep -qx -- '--resume' "$work/srun.log" || fail "requeued with a checkpoint: --resume not added: $(cat "$work/srun.log")"

# --- forge_hetjob.sbatch requeued: the same block, both components ---
mkdir -p "$work/submit/h"
echo partial >"$work/submit/h/rollouts.h5"
SLURM_RESTART_COUNT=1 het --run.dir=h
[ "$rc" -eq 0 ] && [ -e "$work/submit/h/rollouts.restart-1.h5" ] ||
  fail "het job requeued without a checkpoint: rollouts.h5 not kept aside (exit $rc): $out"
echo partial2 >"$work/submit/h/rollouts.h5"
SLURM_RESTART_COUNT=1 het --run.dir=h
[ "$rc" -eq 2 ] && [ "$(cat "$work/submit/h/rollouts.restart-1.h5")" = partial ] ||
  fail "het job requeued onto a kept file: exit $rc (expected 2) or the kept file overwritten: $out"
mkdir -p "$work/submit/h/checkpoints"
echo ckpt >"$work/submit/h/checkpoints/ckpt_step_00000002.h5"
SLURM_RESTART_COUNT=2 het --run.dir=h
[ "$rc" -eq 0 ] && [ "$(grep -cx -- '--resume' "$work/srun.log")" -eq 2 ] ||
  fail "het job requeued with a checkpoint: --resume not passed to both components (exit $rc): $out"
echo "test_sbatch_args: both sbatch scripts' arguments as documented"

