#!/usr/bin/env python3
"""Synchronous versus asynchronous RL on the main job: time to the same
held-out success.

    /usr/bin/python3 bench/bench_async_vs_sync.py [--build-dir build] [--steps 150]
        [--every 50] [--tasks 300] [--sft runs/demo/sft] [--out /tmp/forge_async_vs_sync] [--lr 1e-4]

Both runs start from the same SFT checkpoint (the main job's, runs/demo/sft by
default; `./forge.sh demo` makes it) with configs/agent_demo.ini and the main
job's RL settings (learning rate --lr, the main job's 1e-4 by default; no
warm-up), and write a checkpoint every --every steps. --sft and --out are
read from the current folder (--sft also from the repository root); --out
must be new, empty, or an earlier run's of this benchmark (which it replaces):
  sync   forge train in one process (generate a batch, train, repeat), with
         run.threads = 2 (both cores)
  async  mpirun -np 5 forge train (1 learner, 2 rollout, 2 environment ranks,
         windowed pool), one thread per rank
Afterwards (not timed) every checkpoint is evaluated greedily on the same
--tasks held-out tasks. The wall time of a checkpoint is its file's mtime
minus the run's start. The target is the lower of the two runs' best held-out
success; the result is each run's time to first reach it, and their ratio.
Prints a table, then one JSON line; its "host" is forge's start-up line of the
sync run (CPU level, kernels, BLAS library and core), which the C++
benchmarks' JSON holds as separate keys.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = ".bench_async_vs_sync"  # in --out: this benchmark's folder, which a rerun may empty


def run(cmd, log):
    t0 = time.time()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.stderr.write(open(log).read()[-3000:])
        sys.exit(f"bench_async_vs_sync: {' '.join(cmd[:4])} ... failed with code {rc}")
    return t0


def evaluate(forge, ckpt, tasks):
    out = subprocess.check_output([forge, "eval", ckpt, "--config", "configs/agent_demo.ini",
                                   f"--eval.tasks={tasks}", "--json", "true"], cwd=ROOT,
                                  stderr=subprocess.DEVNULL)
    return json.loads(out)["seen"]["all"]["success"]


def curve(forge, run_dir, t0, tasks):
    points = []
    for ckpt in sorted(glob.glob(os.path.join(run_dir, "checkpoints", "ckpt_step_*.h5"))):
        step = int(re.search(r"ckpt_step_(\d+)", ckpt).group(1))
        points.append((step, os.path.getmtime(ckpt) - t0, evaluate(forge, ckpt, tasks)))
    return points


def host_line(log):
    """What forge ran on, from its start-up line in `log` ("forge train: CPU
    x86-64-v4 (kernels x86-64-v4), BLAS BLIS 0.9.0 core zen3, 2 cores")."""
    with open(log, errors="replace") as f:
        for line in f:
            m = re.search(r"forge train: (CPU .*)$", line)
            if m:
                return m.group(1)
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--sft", default="runs/demo/sft")
    ap.add_argument("--out", default="/tmp/forge_async_vs_sync")
    ap.add_argument("--lr", type=float, default=1e-4, help="RL learning rate (the main job's: forge.sh demo)")
    a = ap.parse_args()
    for name in ("steps", "every", "tasks"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if not a.lr > 0:
        ap.error("--lr must be positive")
    forge = os.path.join(ROOT, a.build_dir, "forge")
    # forge runs in the repository root: paths the caller gave are made
    # absolute first (a relative --out was written there and looked for here).
    sft = next((p for p in (os.path.abspath(a.sft), os.path.join(ROOT, a.sft)) if os.path.exists(p)), None)
    if sft is None:
        ap.error(f"no SFT run at {a.sft}; run ./forge.sh demo first")
    if not os.access(forge, os.X_OK):
        ap.error(f"no forge binary at {forge}; build it (./forge.sh build) or give --build-dir")
    a.sft, a.out = sft, os.path.abspath(a.out)
    # Only a folder this benchmark made (its marker inside) is emptied: --out
    # runs or --out . would have deleted the caller's own files.
    marker = os.path.join(a.out, MARKER)
    if os.path.isdir(a.out) and os.listdir(a.out) and not os.path.exists(marker):
        ap.error(f"--out {a.out} holds files this benchmark did not write; give an empty or new folder")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        ap.error(f"--out {a.out} is not a folder")
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    open(marker, "w").close()
    common = ["--config", "configs/agent_demo.ini", f"--train.init={a.sft}", f"--optim.lr={a.lr}",
              "--optim.warmup_steps=0", f"--train.steps={a.steps}", f"--run.checkpoint_every={a.every}",
              "--run.keep_checkpoints=0", "--train.eval_tasks=1"]
    mpirun = ["mpirun", "--oversubscribe", "-np", "5"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    runs = {
        "sync": [forge, "train"] + common + ["--run.threads=2", f"--run.dir={a.out}/sync"],
        "async": mpirun + [forge, "train"] + common + [f"--run.dir={a.out}/async"],
    }
    curves, walls = {}, {}
    for name, cmd in runs.items():
        t0 = run(cmd, f"{a.out}/{name}.log")
        walls[name] = time.time() - t0
        curves[name] = curve(forge, f"{a.out}/{name}", t0, a.tasks)
        if not curves[name]:
            sys.exit(f"bench_async_vs_sync: the {name} run wrote no checkpoint in {a.out}/{name}/checkpoints")
    start = evaluate(forge, a.sft, a.tasks)
    host = host_line(f"{a.out}/sync.log")
    target = min(max(p[2] for p in c) for c in curves.values())
    reach = {n: next(p[1] for p in c if p[2] >= target) for n, c in curves.items()}

    print(f"held-out success ({a.tasks} tasks, greedy) from the SFT checkpoint ({100 * start:.1f}%)")
    print(f"| run | step | wall s | success |")
    print(f"|---|---|---|---|")
    for name, c in curves.items():
        for step, wall, s in c:
            print(f"| {name} | {step} | {wall:.0f} | {100 * s:.1f}% |")
    print(f"target {100 * target:.1f}%: sync reaches it in {reach['sync']:.0f} s, async in "
          f"{reach['async']:.0f} s (async speedup {reach['sync'] / reach['async']:.2f}x); "
          f"{a.steps} steps take {walls['sync']:.0f} s sync, {walls['async']:.0f} s async")
    print(f"host: {host}")
    print(json.dumps({"bench": "async_vs_sync", "host": host, "steps": a.steps, "tasks": a.tasks, "sft_success": start,
                      "target": target, "sync_s_to_target": reach["sync"], "async_s_to_target": reach["async"],
                      "speedup": reach["sync"] / reach["async"], "sync_wall_s": walls["sync"],
                      "async_wall_s": walls["async"],
                      "curves": {n: [{"step": s, "wall_s": w, "success": v} for s, w, v in c]
                                 for n, c in curves.items()}}))


if __name__ == "__main__":
    main()
