#!/usr/bin/env bash
# End-to-end test of slurm/forge_job.sbatch on a real single-node Slurm
# (tools/local_slurm.sh: Debian's slurmctld, slurmd and munge on localhost).
#
#   tests/slurm/test_slurm_job.sh BUILD_DIR SOURCE_DIR
#
# 1. Skips (exit 77, CTest's SKIP_RETURN_CODE) with a message when not root,
#    when Slurm or munge binaries are missing, or when a Slurm that
#    tools/local_slurm.sh did not start runs on this machine.
# 2. Starts the local cluster unless it already runs; stops it at exit only if
#    this test started it.
# 3. Checks that forge_job.sbatch refuses to run outside Slurm (exit 2) and that
#    srun offers --mpi=pmix.
# 4. Submits forge_job.sbatch with --ntasks=$FORGE_SLURM_NTASKS (default 3) and
#    a tiny config, polls scontrol until the job ends (deadline
#    FORGE_SLURM_DEADLINE, default 300 s; the job is cancelled past it), then
#    requires: JobState=COMPLETED with ExitCode=0:0 (scontrol keeps finished
#    jobs MinJobAge=3600 s), the same in the completion record
#    (log/jobcomp.txt; there is no accounting, so no sacct), the script's
#    "exited with code 0" line in the job output, and config.ini, rollouts.h5
#    and a checkpoint in the run folder.
#    Then a job array of two tasks (--array=1-2%1): each task COMPLETED, in
#    its own folder runs/slurm-<array id>_<task id>, with run.seed = task id.
# 5. `sbatch --test-only slurm/forge_hetjob.sbatch` must be accepted (a het job
#    needs a node per component, so it would stay pending on one node).
# 6. A long job is sent SIGTERM (scancel --signal=TERM, as --signal=TERM@120
#    does at the time limit) once it logs a step: forge says so, the script
#    reports exit code 143, a checkpoint is there; then a job with
#    FORGE_RESUME=1 on the same folder resumes from it and completes.
# On failure it prints the job output and the daemons' log tails.
set -euo pipefail
# The caller's own settings would reach the jobs (sbatch passes the
# environment on) and change what the script does.
unset FORGE_RESUME FORGE_RUN_DIR FORGE_CONFIG
for v in $(compgen -v SLURM_ || true); do unset "$v"; done  # a CI job's own

build_dir="${1:?usage: test_slurm_job.sh BUILD_DIR SOURCE_DIR}"
src_dir="${2:?usage: test_slurm_job.sh BUILD_DIR SOURCE_DIR}"
build_dir="$(cd "$build_dir" && pwd)"
src_dir="$(cd "$src_dir" && pwd)"
ntasks="${FORGE_SLURM_NTASKS:-3}"
deadline_s="${FORGE_SLURM_DEADLINE:-300}"
forge="$build_dir/forge"
local_slurm="$src_dir/tools/local_slurm.sh"
slurm_root="${FORGE_SLURM_ROOT:-/var/tmp/forge-slurm}"
export PATH="/usr/sbin:/sbin:$PATH"

say() { printf 'test_slurm_job: %s\n' "$*"; }
skip() { say "SKIPPED: $*"; exit 77; }

# --- 1. can it run here? ---
[ "$(id -u)" -eq 0 ] || skip "not root (a local slurmd must run as root)"
missing=()
for b in sbatch srun squeue scontrol scancel sinfo slurmctld slurmd munged munge unmunge; do
  command -v "$b" >/dev/null 2>&1 || missing+=("$b")
done
[ "${#missing[@]}" -eq 0 ] ||
  skip "not installed: ${missing[*]} (Debian packages slurm-wlm and munge: tools/setup.sh)"
[ -x "$forge" ] || { say "FAIL: forge binary '$forge' not found (build the forge target)"; exit 1; }

work="$(mktemp -d /tmp/forge-slurm-test.XXXXXX)"
started=0
job=""
failed=1
t0=$SECONDS

cleanup() {
  if [ -n "$job" ] && [ "$failed" -ne 0 ]; then
    timeout 30 scancel "$job" >/dev/null 2>&1 || true
  fi
  if [ "$started" -eq 1 ]; then
    "$local_slurm" stop || say "warning: tools/local_slurm.sh stop failed"
  fi
  if [ "$failed" -eq 0 ]; then rm -rf "$work"; else say "work folder kept: $work"; fi
}
trap cleanup EXIT
# A Ctrl-C or a TERM (ctest's timeout with CMake 3.27's TIMEOUT_SIGNAL_NAME;
# older ctest sends SIGKILL, which nothing can catch) cleans up too (jobs
# cancelled, daemons stopped), then ends the script by that signal.
on_signal() {
  trap - EXIT INT TERM
  cleanup
  kill -"$1" $$
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

fail() {
  say "FAIL: $*"
  local f
  for f in "$work"/job-*.out; do
    [ -f "$f" ] || continue
    say "---- job output $f ----"
    cat "$f"
  done
  if [ -n "$job" ]; then
    say "---- scontrol show job $job ----"
    timeout 30 scontrol show job "$job" 2>&1 || true
  fi
  for f in "$slurm_root/log/slurmctld.log" "$slurm_root/log/slurmd.log"; do
    [ -f "$f" ] && { say "---- tail $f ----"; tail -n 20 "$f"; }
  done
  exit 1
}

# --- 2. the local cluster ---
if "$local_slurm" status >/dev/null 2>&1; then
  say "local Slurm already running: using it, leaving it running"
else
  rc=0
  "$local_slurm" start || rc=$?
  [ "$rc" -ne 3 ] || skip "another Slurm runs on this machine (see the message above)"
  started=1  # a start that failed part-way may have left daemons: stop them too
  [ "$rc" -eq 0 ] || fail "tools/local_slurm.sh start failed (exit $rc)"
fi
eval "$("$local_slurm" env)"

# --- 3. the script refuses to run outside Slurm; pmix is there ---
rc=0
env -u SLURM_JOB_ID bash "$src_dir/slurm/forge_job.sbatch" >/dev/null 2>"$work/refuse.err" || rc=$?
if [ "$rc" -ne 2 ] || ! grep -q 'SLURM_JOB_ID is unset' "$work/refuse.err"; then
  fail "forge_job.sbatch outside Slurm: expected exit 2 and a message, got exit $rc: $(cat "$work/refuse.err")"
fi
timeout 30 srun --mpi=list 2>&1 | grep -qw pmix ||
  fail "srun --mpi=list offers no pmix (Debian's slurm-wlm-basic-plugins has mpi_pmix.so)"

# --- 4. a tiny training job ---
cat >"$work/tiny.ini" <<'EOF'
[model]
d_model = 32
n_layers = 1
n_heads = 2
n_kv_heads = 2
ffn_dim = 64
[train]
steps = 2
tasks = 2
group = 2
eval_tasks = 4
[agent]
max_new_tokens = 16
[run]
threads = 1
EOF
cd "$work"
# Submits forge_job.sbatch with the tiny config and ARGS; sets job.
submit_job() {
  local out
  out="$(FORGE_BIN="$forge" FORGE_CONFIG="$work/tiny.ini" timeout 60 \
    sbatch --parsable --ntasks="$ntasks" --time=00:10:00 --output="$work/job-%j.out" \
    "$src_dir/slurm/forge_job.sbatch" "$@" 2>&1)" || fail "sbatch failed: $out"
  job="${out%%;*}"
  [[ "$job" =~ ^[0-9]+$ ]] || fail "sbatch printed no job id: $out"
  say "submitted job $job ($ntasks tasks): $*"
}

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }
# Polls scontrol until $job ends (deadline_s); sets state and info.
wait_job() {
  local end=$((SECONDS + deadline_s))
  while :; do
    info="$(timeout 30 scontrol show job -o "$job" 2>/dev/null || true)"
    state="$(field JobState "$info")"
    case "$state" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE|OUT_OF_MEMORY) break ;;
    esac
    [ "$SECONDS" -lt "$end" ] ||
      fail "job $job not finished after ${deadline_s} s (state ${state:-unknown}, reason $(field Reason "$info")); cancelled"
    sleep 1
  done
  say "job $job ended: JobState=$state ExitCode=$(field ExitCode "$info") after $((SECONDS - t0)) s"
}

state=""
info=""
submit_job --run.dir="$work/run"
wait_job
[ "$state" = COMPLETED ] || fail "job $job ended in state $state, not COMPLETED"
[ "$(field ExitCode "$info")" = "0:0" ] || fail "job $job: ExitCode=$(field ExitCode "$info"), not 0:0"

# The completion record is written as the job ends: allow it a few seconds.
record=""
for _ in $(seq 20); do
  record="$(grep "^JobId=$job " "$slurm_root/log/jobcomp.txt" 2>/dev/null || true)"
  [ -n "$record" ] && break
  sleep 0.5
done
[ -n "$record" ] || fail "no line for job $job in $slurm_root/log/jobcomp.txt after 10 s"
[ "$(field JobState "$record")" = COMPLETED ] || fail "completion record of job $job: $record"

out="$work/job-$job.out"
[ -f "$out" ] || fail "job output $out is missing"
grep -q 'forge_job.sbatch: forge train exited with code 0' "$out" ||
  fail "job output lacks 'forge train exited with code 0'"
for f in config.ini rollouts.h5; do
  [ -s "$work/run/$f" ] || fail "run folder $work/run lacks $f"
done
compgen -G "$work/run/checkpoints/ckpt_step_*.h5" >/dev/null ||
  fail "run folder $work/run has no checkpoint (checkpoints/ckpt_step_*.h5)"

# --- 4b. a job array: one run per task, run.seed = the task id, a folder each ---
first=$job  # the single job of step 4, named by the PASS line
SBATCH_ARRAY_INX=1-2%1 submit_job --train.steps=1  # sbatch reads --array from SBATCH_ARRAY_INX
array=$job
for t in 1 2; do
  job="${array}_$t"
  wait_job
  [ "$state" = COMPLETED ] || fail "array task $job ended in state $state, not COMPLETED"
  dir="$work/runs/slurm-${array}_$t"
  [ -s "$dir/config.ini" ] || fail "array task $job: no run folder $dir with its config.ini"
  seed="$(awk '/^\[/{r=($0=="[run]")} r && $1=="seed" {print $3}' "$dir/config.ini")"
  [ "$seed" = "$t" ] || fail "array task $job: run.seed is '$seed' in $dir/config.ini, not $t"
done
job=$array

# --- 5. the heterogeneous job is accepted ---
het_out="$(timeout 60 sbatch --test-only "$src_dir/slurm/forge_hetjob.sbatch" 2>&1)" ||
  fail "sbatch --test-only slurm/forge_hetjob.sbatch rejected it: $het_out"
grep -q 'to start at' <<<"$het_out" || fail "sbatch --test-only forge_hetjob.sbatch: unexpected answer: $het_out"

# --- 6. SIGTERM (Slurm's at --signal=TERM@120) checkpoints; a job on that folder resumes ---
submit_job --run.dir="$work/long" --train.steps=100000
end=$((SECONDS + deadline_s))
until grep -q "step  *[0-9][0-9]* " "$work/job-$job.out" 2>/dev/null; do
  [ "$SECONDS" -lt "$end" ] || fail "job $job: no training step within ${deadline_s} s"
  sleep 0.5
done
timeout 30 scancel --signal=TERM "$job" || fail "scancel --signal=TERM $job failed"
wait_job
grep -q "SIGTERM: stopping after" "$work/job-$job.out" || fail "job $job: forge did not stop on SIGTERM"
grep -q "forge_job.sbatch: forge train exited with code 143" "$work/job-$job.out" ||
  fail "job $job: the script did not report exit code 143 (128 + SIGTERM)"
ckpt="$(compgen -G "$work/long/checkpoints/ckpt_step_*.h5" | sort | tail -n 1)" ||
  fail "job $job: SIGTERM left no checkpoint in $work/long/checkpoints"
done_steps=$((10#$(basename "$ckpt" .h5 | sed 's/ckpt_step_//')))
FORGE_RESUME=1 submit_job --run.dir="$work/long" --train.steps=$((done_steps + 2))
wait_job
[ "$state" = COMPLETED ] || fail "resumed job $job ended in state $state, not COMPLETED"
grep -q "resumed from .*ckpt_step_0*$done_steps.h5 at step $done_steps" "$work/job-$job.out" ||
  fail "job $job did not resume from $ckpt"

failed=0
say "PASS: job $first ($ntasks tasks) COMPLETED with its run folder; SIGTERM checkpointed at step $done_steps" \
  "and job $job resumed from it; hetjob accepted by --test-only; $((SECONDS - t0)) s"
