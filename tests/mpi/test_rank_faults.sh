#!/usr/bin/env bash
# No silent hangs (label mpi): a running `forge train` at 4 ranks
# (learner 0, rollout 1, environment 2 and 3) meets three faults:
#   kill  SIGKILL of environment rank 3: every rank has exited within 60 s
#         and the output names rank 3 (mpirun's own report: it sends SIGTERM
#         to the other ranks before forge's watchdog would notice; the stop
#         case checks forge's own message);
#   stop  SIGSTOP of rollout rank 1 (alive but stalled) with a 5 s deadline:
#         the job ends within 60 s with a message naming "rollout rank 1"
#         (the watchdog's, or an environment rank's unanswered request);
#   term  SIGTERM of every rank, as Slurm sends at the time limit: the learner
#         writes a checkpoint at the step boundary, says so, and the job ends
#         with exit code 143;
#   suspend  SIGSTOP of every rank for 12 s (past the 5 s deadline), then
#         SIGCONT, as a Slurm job suspend: no rank blames another for the
#         pause, training goes on (3 more steps), then SIGTERM ends it as in
#         term;
#   learner_term  (5 ranks, 2 learners, 40 steps) SIGTERM of the second
#         learner alone: only learner 0 stops a run, so the run completes,
#         evaluates and exits 0 (that rank once exited 143, and mpirun with it).
# Usage: test_rank_faults.sh kill|stop|term|suspend|learner_term
source "$(dirname "$0")/roles_common.sh"
mode=${1:?usage: test_rank_faults.sh kill|stop|term|suspend|learner_term}

dir="$WORK/run"
log="$WORK/run.log"
# stop and suspend are about the 5 s deadline; kill and term are not, and a
# longer one keeps a loaded machine's stall from ending them first.
deadline=5
case "$mode" in kill | term | learner_term) deadline=15 ;; esac
np=4 steps=1000000 extra=()
if [ "$mode" = learner_term ]; then np=5 steps=40 extra=(--mpi.learners=2); fi
timeout 300 "${MPIRUN[@]}" -np $np "$FORGE_BIN" train "${TINY[@]}" --run.dir="$dir" \
  --train.steps=$steps --train.tasks=2 --train.group=2 --mpi.deadline_s=$deadline "${extra[@]}" >"$log" 2>&1 &
job=$!

# Wait (at most 120 s) until training runs.
for _ in $(seq 1200); do
  grep -q "step    1 " "$log" 2>/dev/null && break
  kill -0 "$job" 2>/dev/null || { cat "$log"; fail "the job ended before its first step"; }
  sleep 0.1
done
grep -q "step    1 " "$log" || { cat "$log"; fail "no training step within 120 s"; }
mapfile -t pids < <(rank_pids "$dir")
[ "${#pids[@]}" -eq $np ] || { cat "$log"; fail "expected $np rank processes, found ${#pids[@]}"; }

# pids[r] is rank r (rank_pids reads each one's OMPI_COMM_WORLD_RANK).
start=$(date +%s)
case "$mode" in
  kill) kill -KILL "${pids[3]}"; expect="rank 3 .*exited on signal 9" ;;
  stop) kill -STOP "${pids[1]}"; expect="rollout rank 1 .*for [0-9.]* s" ;;
  term) kill -TERM "${pids[@]}"; expect="SIGTERM: stopping after" ;;
  suspend)
    kill -STOP "${pids[@]}"
    sleep 12
    steps_before=$(grep -c "step  *[0-9]* " "$log" || true)
    kill -CONT "${pids[@]}"
    for _ in $(seq 600); do
      [ "$(grep -c "step  *[0-9]* " "$log" || true)" -ge $((steps_before + 3)) ] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$job" 2>/dev/null || { cat "$log"; fail "suspend: the job ended after the whole-job pause"; }
    [ "$(grep -c "step  *[0-9]* " "$log" || true)" -ge $((steps_before + 3)) ] ||
      { cat "$log"; fail "suspend: fewer than 3 steps within 60 s of resuming"; }
    start=$(date +%s)
    kill -TERM "${pids[@]}"
    expect="SIGTERM: stopping after" ;;
  learner_term)
    kill -TERM "${pids[1]}" || { cat "$log"; fail "$mode: learner 1 ended before it could be signalled"; }
    expect="SIGTERM on learner 1 alone" ;;
  *) fail "unknown mode $mode" ;;
esac
deadline=$((start + 60))
while kill -0 "$job" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
if kill -0 "$job" 2>/dev/null; then
  kill -KILL "${pids[@]}" 2>/dev/null || true
  cat "$log"
  fail "$mode: the job still runs 60 s after the fault"
fi
wait "$job" && rc=0 || rc=$?
left=$(rank_pids "$dir" | wc -l)
[ "$left" -eq 0 ] || { kill -KILL $(rank_pids "$dir") 2>/dev/null || true; fail "$mode: $left rank(s) left running"; }
grep -q -e "$expect" "$log" || { cat "$log"; fail "$mode: the output does not say '$expect'"; }
if [ "$mode" = learner_term ]; then
  [ "$rc" -eq 0 ] || { cat "$log"; fail "$mode: the complete run exited $rc, not 0"; }
  grep -q "eval at step 40" "$log" || { cat "$log"; fail "$mode: no final evaluation"; }
  echo "PASS ($mode: the run completed and exited 0)"
  exit 0
fi
[ "$rc" -ne 0 ] || { cat "$log"; fail "$mode: the job exited 0"; }
if [ "$mode" = term ] || [ "$mode" = suspend ]; then
  # Stopped, not failed: the ranks exit 143 (128 + SIGTERM), and so does mpirun.
  [ "$rc" -eq 143 ] || { cat "$log"; fail "$mode: the job exited $rc, not 143"; }
  ls "$dir"/checkpoints/ckpt_step_*.h5 >/dev/null 2>&1 || { cat "$log"; fail "term: no checkpoint written"; }
  grep -q "continue with --resume" "$log" || { cat "$log"; fail "term: no resume hint"; }
fi
echo "PASS ($mode: ended $(( $(date +%s) - start )) s after the fault, exit code $rc)"
