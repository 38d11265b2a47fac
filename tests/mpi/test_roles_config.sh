#!/usr/bin/env bash
# Role counts that do not fit the world (label mpi): at 2 ranks the default
# 1 learner + 1 rollout leave no environment rank, so forge train must exit
# with code 2 and a message naming mpi.learners and the -np it needs, without
# starting anything; `--mpi.learners=0` likewise.
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
echo PASS
