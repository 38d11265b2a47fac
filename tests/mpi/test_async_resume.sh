#!/usr/bin/env bash
# Lossless resume of forge train on MPI ranks (label mpi). A run of STEPS
# steps (2 groups of 2 episodes each) is interrupted twice:
#   kill  SIGKILL of every rank after the checkpoint of step 4 (checkpoints
#         every 2 steps): whatever the data pool held is lost with the job;
#   term  SIGTERM of every rank (Slurm's time limit): the learner checkpoints
#         at the step boundary, with the groups it had already taken, and
#         every rank exits 143 (mpirun too);
#   term_sync  the same run in one process (no mpirun: the synchronous
#         loop), SIGTERMed: it checkpoints at the step boundary and exits 143
#         (it once died at once, losing every step since the last checkpoint);
# each time `forge train --resume` finishes the run (and after the first, a
# damaged newest checkpoint is refused naming the one before it). rollouts.h5 must then
# hold exactly STEPS x 2 groups of 2 episodes, each slot complete and none
# twice, and no slot left untrained more than W - 1 below the highest
# trained one: no group lost or trained twice across the restarts. The interrupted
# job runs on past STEPS until the signal lands (a step of this tiny model
# takes tens of ms, and the ranks have been seen to reach step 9 after the
# log showed step 3), so STEPS leaves room: a checkpoint beyond the run's
# length would make the resume a no-op and the check meaningless.
source "$(dirname "$0")/roles_common.sh"

STEPS=30
ARGS=(--train.steps=$STEPS --train.tasks=2 --train.group=2 --run.checkpoint_every=2 --pool.inflight=6
      --pool.window=3 --mpi.deadline_s=60)

interrupt_then_resume() {
  local mode=$1 dir="$WORK/$1" log="$WORK/$1.log"
  local launch=("${MPIRUN[@]}" -np 4)
  [ "$mode" = term_sync ] && launch=()
  timeout 300 "${launch[@]}" "$FORGE_BIN" train "${TINY[@]}" "${ARGS[@]}" --run.dir="$dir" \
    --train.steps=1000000 >"$log" 2>&1 &
  local job=$!
  local want="step    5 "
  [ "$mode" != kill ] && want="step    3 "
  for _ in $(seq 1200); do
    grep -q "$want" "$log" 2>/dev/null && break
    kill -0 "$job" 2>/dev/null || { cat "$log"; fail "$mode: the job ended early"; }
    sleep 0.1
  done
  grep -q "$want" "$log" || { cat "$log"; fail "$mode: no '$want' within 120 s"; }
  mapfile -t pids < <(rank_pids "$dir")
  if [ "$mode" = kill ]; then kill -KILL "${pids[@]}"; else kill -TERM "${pids[@]}"; fi
  local rc=0
  wait "$job" || rc=$?
  [ -z "$(rank_pids "$dir")" ] || fail "$mode: ranks left running"
  if [ "$mode" != kill ]; then
    # Every rank exits 143; mpirun passes a rank's code on (143 here too).
    [ "$rc" = 143 ] || { cat "$log"; fail "$mode: exit code $rc after SIGTERM, expected 143"; }
    grep -q "continue with --resume" "$log" || { cat "$log"; fail "$mode: no checkpoint at SIGTERM"; }
  fi
  ls "$dir"/checkpoints/ckpt_step_*.h5 >/dev/null 2>&1 || { cat "$log"; fail "$mode: no checkpoint"; }
  # Resume with the run's real length.
  if ! timeout 300 "${launch[@]}" "$FORGE_BIN" train "${TINY[@]}" "${ARGS[@]}" --run.dir="$dir" \
      --resume >"$log.resume" 2>&1; then
    cat "$log" "$log.resume"
    fail "$mode: the resumed run failed"
  fi
  grep -q "resumed from" "$log.resume" || { cat "$log.resume"; fail "$mode: no resume message"; }
  /usr/bin/python3 - "$dir/rollouts.h5" "$STEPS" <<'PY' || { cat "$log" "$log.resume"; fail "$mode: rollouts.h5 check"; }
import sys, collections
import h5py
f = h5py.File(sys.argv[1], "r")
n = int(sys.argv[2])
ids = f["episodes/episode_id"][:].tolist()
steps = f["episodes/consumed_step"][:].tolist()
if len(ids) != n * 2 * 2:
    sys.exit(f"{len(ids)} episodes, expected {n * 4}")
if len(set(ids)) != len(ids):
    sys.exit("an episode was trained twice: " + str([i for i, c in collections.Counter(ids).items() if c > 1]))
slots = collections.Counter(i // 2 for i in ids)
if any(c != 2 for c in slots.values()):
    sys.exit("an incomplete group")
# No slot lost: a slot never trained lies at most W - 1 (pool.window 3) below
# the highest trained one (the pool's window; in-flight slots are generated
# again on resume under their own numbers).
top = max(slots)
lost = [s for s in range(top) if s not in slots and s <= top - 3]
if lost:
    sys.exit(f"slots {lost[:5]} were never trained, more than W-1 below slot {top}")
per_step = collections.Counter(steps)
if sorted(per_step) != list(range(n)) or any(c != 4 for c in per_step.values()):
    sys.exit(f"episodes per step: {dict(per_step)}")
print(f"ok: {len(ids)} episodes in {len(slots)} slots, slots {min(slots)}..{max(slots)}")
PY
  echo "$mode: $(grep -o 'resumed from.*' "$log.resume")"
}

interrupt_then_resume kill
# A damaged newest checkpoint is refused naming the one before it (learner 0
# read the data pool's state from it first, and said only "truncated").
newest=$(ls "$WORK/kill"/checkpoints/ckpt_step_*.h5 | tail -n 1)
truncate -s $(($(stat -c %s "$newest") / 2)) "$newest"
rc=0
timeout 120 "${MPIRUN[@]}" -np 4 "$FORGE_BIN" train "${TINY[@]}" "${ARGS[@]}" --run.dir="$WORK/kill" --resume \
  >"$WORK/damaged.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$WORK/damaged.log"; fail "a damaged newest checkpoint: exit code $rc, expected 2"; }
grep -q "move it out of .*--resume then continues from '.*ckpt_step_[0-9]*\.h5'" "$WORK/damaged.log" ||
  { cat "$WORK/damaged.log"; fail "a damaged newest checkpoint: no hint naming the one before"; }
interrupt_then_resume term
interrupt_then_resume term_sync
echo PASS
