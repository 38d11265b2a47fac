#!/usr/bin/env bash
# forge train on MPI ranks end to end (label mpi): a tiny run at 4 ranks
# (1 learner, 1 rollout, 2 environment ranks) and one at 5 ranks with two
# data-parallel learners. Each must exit 0 and leave config.ini, a checkpoint
# and rollouts.h5 whose episodes show the Windowed FIFO at work: every
# consumed group complete (train.group episodes per slot), no episode twice,
# exactly steps x tasks groups, no slot skipped that lies more than W - 1 below
# the highest consumed slot, staleness within floor((N + M + W - 2) / B) + 1
# (fifo and windowed; N, M, W and the policy read from the run's config.ini,
# B = train.tasks), and every token's version no newer than the step that
# trained it, and a steps table whose group counts match the episodes and
# the progress lines. The 5-rank run also checks that a node's oversubscription
# warning is printed once (by the node's first rank), not by every rank.
source "$(dirname "$0")/roles_common.sh"

check_run() {
  local dir=$1 steps=$2 tasks=$3 group=$4
  [ -f "$dir/config.ini" ] || fail "$dir/config.ini missing"
  ls "$dir"/checkpoints/ckpt_step_*.h5 >/dev/null 2>&1 || fail "no checkpoint in $dir/checkpoints"
  /usr/bin/python3 - "$dir" "$steps" "$tasks" "$group" <<'PY'
import sys, collections, configparser, glob, re
import h5py, numpy as np
run, steps, tasks, group = sys.argv[1], *map(int, sys.argv[2:])
ini = configparser.ConfigParser(inline_comment_prefixes=(";",))
ini.read_string("[top]\n" + open(run + "/config.ini").read())  # keys before the first section
policy = ini["pool"]["policy"]
n, m, w = (int(ini["pool"][k]) for k in ("inflight", "memory", "window"))
if policy == "fifo":
    w = 1
f = h5py.File(run + "/rollouts.h5", "r")
ids = f["episodes/episode_id"][:]
step = f["episodes/consumed_step"][:]
stale = f["episodes/staleness"][:]
def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)
check(len(ids) == steps * tasks * group, f"{len(ids)} episodes, expected {steps * tasks * group}")
check(len(set(ids.tolist())) == len(ids), "an episode was trained twice")
slots = collections.Counter((ids // group).tolist())
check(all(c == group for c in slots.values()), "a group arrived incomplete")
consumed = set(slots)
top = max(consumed)
missing = [s for s in range(top) if s not in consumed]
if policy != "greedy":
    check(all(s > top - w for s in missing), f"slots {missing[:5]} skipped although more than W-1 below {top}")
    bound = (n + m + w - 2) // tasks + 1
    check(int(stale.max()) <= bound, f"staleness {stale.max()} above the bound {bound} (N {n}, M {m}, W {w}, B {tasks})")
else:
    bound = "none (greedy)"
check(sorted(set(step.tolist())) == list(range(steps)), "consumed steps are not 0..steps-1")
# The learner's log states that bound, and the finished groups the final
# checkpoint keeps untrained.
log = open(run + ".log").read()
said = re.search(r"\(staleness (<= \d+|unbounded)\)", log)
want = "unbounded" if policy == "greedy" else f"<= {bound}"
check(said is not None and said.group(1) == want,
      f"the train: line states the staleness as {said and said.group(1)}, not {want}")
final = sorted(glob.glob(run + "/checkpoints/ckpt_step_*.h5"))[-1]
kept = len(h5py.File(final, "r")["data_pool/kept_slot"])
said = re.search(r"pool at the end: (\d+) finished groups not trained", log)
check(said is not None and int(said.group(1)) == kept,
      f"the log says {said and said.group(1)} finished groups are left untrained, {final} keeps {kept}")
versions = f["versions"][:]
call_episode = f["calls/episode"][:]
tok_off = f["calls/token_offset"][:]
ends = np.append(tok_off[1:], len(versions))
oldest = {}  # episode row -> the oldest version among its generated tokens
for c in range(len(tok_off)):
    v = versions[tok_off[c]:ends[c]]
    v = v[v >= 0]
    check(len(v) == 0 or v.max() <= step[call_episode[c]], "a token newer than the step that trained it")
    if len(v):
        e = int(call_episode[c])
        oldest[e] = min(oldest.get(e, int(v.min())), int(v.min()))
# Every trained episode's generated tokens carry a version (were none
# stamped, the checks above and below would pass on nothing).
unversioned = [e for e, a in enumerate(f["episodes/abandoned"][:]) if not a and e not in oldest]
check(len(oldest) > 0 and not unversioned, f"{len(unversioned)} trained episodes without a versioned token")
# The staleness rollouts.h5 records (and bounded above) is the one the
# tokens carry: consumed step minus the oldest version, -1 without tokens
# (the store's arithmetic; the pool's own cap verdicts are checked below
# against the progress lines).
for e in range(len(ids)):
    want = int(step[e]) - oldest[e] if e in oldest else -1
    check(int(stale[e]) == want, f"episode row {e}: staleness {stale[e]}, its tokens say {want}")
# The steps table: each step trained train.tasks groups; the episodes it
# left out as abandoned are those recorded so.
check((f["steps/groups"][:] == tasks).all(), f"steps/groups {f['steps/groups'][:]}, expected {tasks} each")
abandoned = f["episodes/abandoned"][:]
check([int(abandoned[step == s].sum()) for s in range(steps)] == f["steps/abandoned"][:].tolist(),
      "steps/abandoned does not count the step's abandoned episodes")
print(f"ok: {len(ids)} episodes in {len(consumed)} slots, max slot {top}, staleness max {stale.max()} (bound {bound})")
PY
}

# The groups the staleness cap kept out, per step, as the progress lines
# counted them (run.log_every = 1).
# The groups the staleness cap kept out, per step, agree between the progress
# lines and steps/dropped_groups, masked_groups; and with `action` (none,
# drop, mask): none kept out without a cap, and with one only the action's
# column counts any (a cap that never fired, or drop and mask swapped, once
# passed: both columns all 0 agree).
check_cap_counts() {
  local dir=$1 action=$2
  /usr/bin/python3 - "$dir/rollouts.h5" "$dir.log" "$action" <<'PY'
import re, sys, h5py
f = h5py.File(sys.argv[1], "r")
logged = [(int(d), int(m)) for d, m in re.findall(r"dropped (\d+) masked (\d+)", open(sys.argv[2]).read())]
stored = list(zip(f["steps/dropped_groups"][:].tolist(), f["steps/masked_groups"][:].tolist()))
if logged != stored:
    sys.exit(f"FAIL: steps/dropped_groups and masked_groups {stored}, the progress lines {logged}")
dropped, masked = sum(d for d, _ in stored), sum(m for _, m in stored)
want = {"none": (dropped == 0 and masked == 0), "drop": (dropped > 0 and masked == 0),
        "mask": (masked > 0 and dropped == 0)}[sys.argv[3]]
if not want:
    sys.exit(f"FAIL: cap action {sys.argv[3]}: {dropped} groups dropped, {masked} masked over the run ({stored})")
print(f"ok: groups kept out by the staleness cap per step (dropped, masked): {stored}")
PY
}

run() {
  local np=$1 dir=$2; shift 2
  if ! timeout 300 "${MPIRUN[@]}" -np "$np" "$FORGE_BIN" train "${TINY[@]}" --run.dir="$dir" "$@" \
      >"$dir.log" 2>&1; then
    cat "$dir.log"
    fail "forge train at $np ranks failed"
  fi
  grep -q "eval at step" "$dir.log" || { cat "$dir.log"; fail "no final evaluation printed"; }
}

run 4 "$WORK/a" --train.steps=6 --train.tasks=3 --train.group=2 --pool.inflight=6 --pool.memory=3 --pool.window=3
check_run "$WORK/a" 6 3 2
check_cap_counts "$WORK/a" none
# A staleness cap of 0: groups generated while the learner stepped are kept
# out (counted, dropped here, masked in a second run).
for action in drop mask; do
  run 4 "$WORK/cap_$action" --train.steps=4 --train.tasks=2 --train.group=2 --pool.inflight=6 \
    --pool.staleness_cap=0 --pool.cap_action=$action
  check_cap_counts "$WORK/cap_$action" "$action"
done
run 5 "$WORK/b" --mpi.learners=2 --train.steps=4 --train.tasks=2 --train.group=3 --pool.policy=greedy \
  --pool.inflight=4
check_run "$WORK/b" 4 2 3
# Its three compute ranks (2 learners, 1 rollout, 1 thread each) oversubscribe
# a node of fewer than 3 cores: the node's first rank says so, once.
node_warnings=$(grep -c "the ranks on this node run" "$WORK/b.log" || true)
if [ "$(nproc)" -lt 3 ]; then
  [ "$node_warnings" -eq 1 ] || { cat "$WORK/b.log"; fail "$node_warnings oversubscription warnings, expected 1"; }
else
  [ "$node_warnings" -eq 0 ] || { cat "$WORK/b.log"; fail "an oversubscription warning on $(nproc) cores"; }
fi
# The code domain mixed with calc and search (its programs run in the
# sandbox on the environment ranks).
run 4 "$WORK/c" --train.steps=3 --train.tasks=3 --train.group=2 --env.code_weight=2
check_run "$WORK/c" 3 3 2
/usr/bin/python3 - "$WORK/c/rollouts.h5" <<'PY' || fail "the mixed run has no code episodes"
import sys, collections, h5py
f = h5py.File(sys.argv[1], "r")
names = [s.decode() for s in f["episodes/env"].attrs["names"]]
count = collections.Counter(names[e] for e in f["episodes/env"][:])
print("domains:", dict(count))
sys.exit(0 if count["code"] > 0 and len(count) >= 2 else 1)
PY
echo "PASS"
