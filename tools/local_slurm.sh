#!/usr/bin/env bash
# A real single-node Slurm on this machine, for trying and testing slurm/*.sbatch
# (Debian's slurm-wlm and munge; run as root). docs/slurm.md explains it.
#
#   tools/local_slurm.sh start    start munged (if not running), slurmctld, slurmd
#   tools/local_slurm.sh status   report; exit 0 when all three run and the node is usable
#   tools/local_slurm.sh stop     cancel the cluster's jobs, stop slurmd, slurmctld, and
#                                 munged if this script started it
#   tools/local_slurm.sh env      print `export SLURM_CONF=...` (for eval)
#
# Everything lives in FORGE_SLURM_ROOT (default /var/tmp/forge-slurm): etc/slurm.conf,
# state, spool, pid files, logs (log/slurmctld.log, log/slurmd.log) and the job
# completion record log/jobcomp.txt. The system's /etc/slurm is never touched:
# daemons get the config with -f and clients find it through SLURM_CONF, so run
#   eval "$(tools/local_slurm.sh env)"
# before sbatch/squeue/scontrol. The node is named after `hostname -s`, listens on
# 127.0.0.1 and claims FORGE_SLURM_CPUS CPUs (default 16, more than the machine may
# have: SlurmdParameters=config_overrides lets jobs of more tasks than cores run).
#
# start is idempotent (does nothing when our daemons run) and refuses to start
# (exit 3) when a slurmctld or slurmd that it did not start is running. Every
# wait has a deadline and fails (exit 1) with a message naming what did not come
# up and its log. Not root, or binaries missing: exit 1 with the reason.
set -euo pipefail

ROOT="${FORGE_SLURM_ROOT:-/var/tmp/forge-slurm}"
CONF="$ROOT/etc/slurm.conf"
CPUS="${FORGE_SLURM_CPUS:-16}"
HOST="$(hostname -s)"
MUNGE_RUN=/run/munge
export SLURM_CONF="$CONF"
export PATH="/usr/sbin:/sbin:$PATH"

say() { printf 'local_slurm: %s\n' "$*"; }
die() { printf 'local_slurm: error: %s\n' "$*" >&2; exit 1; }

# Runs "$@" every 0.5 s until it succeeds; fails after $1 seconds.
wait_until() {
  local seconds="$1"; shift
  local end=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.5
  done
}

# A live process (a zombie counts as gone).
pid_alive() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null && [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]
}
pid_gone() { ! pid_alive "$1"; }
# The pid in file $1 if that process is named $2 (a stale pid file whose pid
# was reused by another program yields nothing).
pid_of_file() {
  local p
  [ -s "$1" ] || return 0
  p="$(tr -dc '0-9' <"$1")"
  [ -n "$p" ] && [ "$(ps -o comm= -p "$p" 2>/dev/null)" = "$2" ] && echo "$p"
  return 0
}
ctld_pid() { pid_of_file "$ROOT/run/slurmctld.pid" slurmctld; }
slurmd_pid() { pid_of_file "$ROOT/run/slurmd.pid" slurmd; }
ours_running() { local p; p="$("$1"_pid)"; pid_alive "$p"; }

# Every client call is bounded by `timeout` (a hung daemon must not hang us).
no_jobs() { [ -z "$(timeout 10 squeue -h -o '%i' 2>/dev/null)" ]; }
munge_ok() { timeout 10 munge -n 2>/dev/null | timeout 10 unmunge >/dev/null 2>&1; }
ctld_up() { timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; }
# The node accepts jobs: idle, mixed or allocated (not down, drained or unknown).
node_usable() {
  local state
  state="$(timeout 10 sinfo -h -n "$HOST" -o '%T' 2>/dev/null | head -n1)"
  case "$state" in idle|mixed|allocated|completing) return 0 ;; *) return 1 ;; esac
}

require_root() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd runs jobs as any user; munged is started as user munge)"
}

require_binaries() {
  local missing=() b
  for b in munged munge unmunge slurmctld slurmd scontrol sinfo squeue scancel; do
    command -v "$b" >/dev/null 2>&1 || missing+=("$b")
  done
  [ "${#missing[@]}" -eq 0 ] ||
    die "not installed: ${missing[*]} (Debian packages slurm-wlm and munge; tools/setup.sh installs them)"
}

write_conf() {
  mkdir -p "$ROOT/etc" "$ROOT/state" "$ROOT/spool" "$ROOT/run" "$ROOT/log"
  # An empty plugstack.conf beside slurm.conf: the system's SPANK plugins stay out.
  : >"$ROOT/etc/plugstack.conf"
  cat >"$CONF" <<EOF
# Written by tools/local_slurm.sh: one node ($HOST) on 127.0.0.1, root daemons.
ClusterName=forge-local
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$ROOT/run/slurmctld.pid
SlurmdPidFile=$ROOT/run/slurmd.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
PlugStackConfig=$ROOT/etc/plugstack.conf
# No cgroups: processes are tracked by parent pid, tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd (so no sacct); finished jobs stay in scontrol for MinJobAge
# seconds and each one leaves a line in the completion record.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$ROOT/log/jobcomp.txt
MinJobAge=3600
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# Seconds between SIGTERM and SIGKILL at the time limit or on scancel.
KillWait=30
SlurmdParameters=config_overrides
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=20000 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
}

start_munge() {
  if munge_ok; then
    say "munged: already running"
    return
  fi
  [ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing (reinstall the munge package, or create it with mungekey as user munge)"
  mkdir -p "$MUNGE_RUN"
  chown munge:munge "$MUNGE_RUN"
  chmod 0755 "$MUNGE_RUN"
  timeout 30 su -s /bin/sh munge -c "$(command -v munged)" ||
    die "munged failed to start (see /var/log/munge/munged.log)"
  wait_until 15 munge_ok ||
    die "munged did not answer within 15 s (munge -n | unmunge fails; see /var/log/munge/munged.log)"
  # Remember that munged is ours, so that stop stops it.
  pid_of_file "$MUNGE_RUN/munged.pid" munged >"$ROOT/run/munged.ours"
  say "munged: started (pid $(cat "$ROOT/run/munged.ours"))"
}

# Another Slurm on this machine (a real cluster node, or one started by hand)
# would fight over ports 6817/6818: refuse instead.
refuse_foreign() {
  local name="$1" ours="$2" p
  for p in $(pgrep -x "$name" || true); do
    [ "$p" = "$ours" ] && continue
    pid_alive "$p" || continue  # a zombie of an earlier run, not yet reaped
    # slurmd forks slurmstepd, not slurmd; any other process of that name is foreign.
    printf 'local_slurm: error: a %s not started by tools/local_slurm.sh is running (pid %s); stop it first\n' "$name" "$p" >&2
    exit 3
  done
}

cmd_start() {
  require_root
  require_binaries
  mkdir -p "$ROOT/run"
  if ours_running ctld && ours_running slurmd && ctld_up && node_usable; then
    say "already running: node $HOST $(timeout 10 sinfo -h -n "$HOST" -o '%T'); SLURM_CONF=$CONF"
    return 0
  fi
  refuse_foreign slurmctld "$(ctld_pid)"
  refuse_foreign slurmd "$(slurmd_pid)"
  start_munge
  if ! ours_running ctld; then
    write_conf
    # -c: a clean start, without the jobs of an earlier session.
    timeout 30 slurmctld -c -f "$CONF" || die "slurmctld failed to start (see $ROOT/log/slurmctld.log)"
  fi
  wait_until 30 ctld_up ||
    die "slurmctld did not answer within 30 s (scontrol ping; see $ROOT/log/slurmctld.log)"
  say "slurmctld: up (pid $(ctld_pid))"
  if ! ours_running slurmd; then
    timeout 30 slurmd -f "$CONF" || die "slurmd failed to start (see $ROOT/log/slurmd.log)"
  fi
  if ! wait_until 60 node_usable; then
    # A node left down or drained by an earlier session: bring it back once.
    timeout 10 scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true
    wait_until 30 node_usable ||
      die "node $HOST is not usable after 90 s (state: $(timeout 10 sinfo -h -n "$HOST" -o '%T %E' 2>/dev/null || echo unknown); see $ROOT/log/slurmd.log)"
  fi
  say "slurmd: up (pid $(slurmd_pid)); node $HOST $(timeout 10 sinfo -h -n "$HOST" -o '%T'), $CPUS CPUs"
  say "clients: export SLURM_CONF=$CONF"
}

cmd_status() {
  local rc=0 p
  if munge_ok; then say "munged: running"; else say "munged: not running"; rc=1; fi
  p="$(ctld_pid)"
  if pid_alive "$p"; then say "slurmctld: running (pid $p)"; else say "slurmctld: not running"; rc=1; fi
  p="$(slurmd_pid)"
  if pid_alive "$p"; then say "slurmd: running (pid $p)"; else say "slurmd: not running"; rc=1; fi
  if [ "$rc" -eq 0 ]; then
    if node_usable; then
      say "node $HOST: $(timeout 10 sinfo -h -n "$HOST" -o '%T'); SLURM_CONF=$CONF"
    else
      say "node $HOST: not usable ($(timeout 10 sinfo -h -n "$HOST" -o '%T %E' 2>/dev/null || echo 'no answer'))"
      rc=1
    fi
  fi
  return "$rc"
}

# Sends SIGTERM to pid $2 (named $1), then SIGKILL after 20 s; waits 5 s more.
stop_pid() {
  local name="$1" p="$2"
  pid_alive "$p" || return 0
  kill -TERM "$p" 2>/dev/null || true
  if ! wait_until 20 pid_gone "$p"; then
    say "$name (pid $p) ignored SIGTERM for 20 s: SIGKILL"
    kill -KILL "$p" 2>/dev/null || true
    wait_until 5 pid_gone "$p" || die "$name (pid $p) is still alive after SIGKILL"
  fi
  say "$name: stopped (pid $p)"
}

cmd_stop() {
  require_root
  if ours_running ctld && ctld_up; then
    # Jobs of this cluster first, so that no slurmstepd is left behind.
    local jobs=()
    # -r: one line per array element (123_4, which scancel takes; a pending
    # remainder otherwise lists as 123_[2-5], which it does not), every user's.
    mapfile -t jobs < <(timeout 10 squeue -h -r -o '%i' 2>/dev/null || true)
    if [ "${#jobs[@]}" -gt 0 ]; then
      say "cancelling jobs: ${jobs[*]}"
      timeout 30 scancel "${jobs[@]}" 2>/dev/null || true
      wait_until 60 no_jobs ||
        say "jobs still listed after 60 s: $(timeout 10 squeue -h -o '%i %T' | tr '\n' ' ')"
    fi
  fi
  stop_pid slurmd "$(slurmd_pid)"
  stop_pid slurmctld "$(ctld_pid)"
  if [ -s "$ROOT/run/munged.ours" ]; then
    stop_pid munged "$(pid_of_file "$ROOT/run/munged.ours" munged)"
    rm -f "$ROOT/run/munged.ours"
  elif munge_ok; then
    say "munged: left running (not started by this script)"
  fi
}

case "${1:-}" in
  start) cmd_start ;;
  status) cmd_status ;;
  stop) cmd_stop ;;
  env) printf 'export SLURM_CONF=%q\n' "$CONF" ;;
  *)
    echo "usage: tools/local_slurm.sh start|status|stop|env (see the comment at the top)" >&2
    exit 2
    ;;
esac
