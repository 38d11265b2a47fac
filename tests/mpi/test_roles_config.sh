#!/usr/bin/env bash
# Role counts that do not fit the world (label mpi): at 2 ranks the default
# 1 learner + 1 rollout leave no environment rank, so forge train must exit
# with code 2 and a message naming mpi.learners and the -np it needs, without
# starting anything; `--mpi.learners=0` likewise. A run folder that holds an
# earlier run's rollouts.h5 is refused the same way (learner 0 checks it and
# aborts the job), and the file is left as it was; a --resume of a folder
# that does not exist leaves none behind. A data pool larger than its host
# can hold is refused by name.
source "$(dirname "$0")/roles_common.sh"

expect_input_error() {
  local np=$1 want=$2; shift 2
  local rc=0
  timeout 120 "${MPIRUN[@]}" -np "$np" "$FORGE_BIN" train "${TINY[@]}" --run.dir="$WORK/x" "$@" \
    >"$WORK/log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || { cat "$WORK/log"; fail "-np $np $*: exit code $rc, expected 2"; }
  grep -q -e "$want" "$WORK/log" || { cat "$WORK/log"; fail "-np $np $*: no message '$want'"; }
  [ ! -e "$WORK/x/rollouts.h5" ] || fail "-np $np $*: a run was started"
}

expect_input_error 2 "cannot hold mpi.learners = 1 + mpi.rollouts = 1.*-np 3"
expect_input_error 4 "mpi.learners" --mpi.learners=0
# A data pool past the host's memory names its keys (Open MPI ended the job
# in MPI_Win_allocate, exit 53, naming none of them).
# A progress deadline that learner 0's step, holding waits of mpi.deadline_s
# on the other learners, could outlast is refused by name.
expect_input_error 3 "mpi.progress_deadline_s = 100 must exceed mpi.deadline_s = 120" --mpi.progress_deadline_s=100
expect_input_error 3 "learner rank 0: error: the data pool's payload.*2000000 MiB.*lower pool.inflight, pool.memory or pool.slot_mib" \
  --pool.inflight=1000000 --pool.memory=1000000 --pool.slot_mib=1

mkdir -p "$WORK/held"
echo "an earlier run's rollouts" >"$WORK/held/rollouts.h5"
rc=0
timeout 120 "${MPIRUN[@]}" -np 3 "$FORGE_BIN" train "${TINY[@]}" --run.dir="$WORK/held" >"$WORK/log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$WORK/log"; fail "a run folder holding rollouts.h5: exit code $rc, expected 2"; }
grep -q "learner rank 0.*holds the rollouts of an earlier run" "$WORK/log" ||
  { cat "$WORK/log"; fail "no message naming learner rank 0 and the earlier run"; }
[ "$(cat "$WORK/held/rollouts.h5")" = "an earlier run's rollouts" ] || fail "the earlier rollouts.h5 was changed"
# A --resume of a run folder that does not exist is refused by learner 0,
# and the folder it took (forge.lock) does not stay behind; with two
# learners too (the second one's refusal killed learner 0 before it removed
# the folder).
for learners in 1 2; do
  rc=0
  timeout 120 "${MPIRUN[@]}" -np $((learners + 2)) "$FORGE_BIN" train "${TINY[@]}" --mpi.learners=$learners \
    --resume --run.dir="$WORK/no_such_run" >"$WORK/log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || { cat "$WORK/log"; fail "--resume of a missing run: exit code $rc, expected 2"; }
  grep -q "no checkpoint in" "$WORK/log" || { cat "$WORK/log"; fail "--resume of a missing run: no message"; }
  [ ! -e "$WORK/no_such_run" ] ||
    fail "--resume of a missing run ($learners learners) left $(ls -A "$WORK/no_such_run" | tr '\n' ' ')"
done
echo PASS
