#!/usr/bin/env python3
"""A job's summary (./forge.sh demo, ./forge.sh smollm2): the held-out results
of its checkpoints side by side.

    python3 tools/demo_summary.py RUN_DIR [--seconds SFT RL EVAL TOTAL]

reads RUN_DIR/eval_sft.json and RUN_DIR/eval_rl.json (`forge eval --json`,
same tasks, greedy), RUN_DIR/eval_zero.json (the pretrained model before any
training) when present, and RUN_DIR/rl/rollouts.h5 when present; prints the
success rates with the change from SFT to SFT+RL in percentage points and
what moved (per domain, turns, recovery after tool errors, malformed calls,
staleness), and writes RUN_DIR/summary.json. Exit code 2 when an input is
missing or not what forge writes.
"""
import argparse
import json
import os
import sys

KEYS = ("success", "turns", "met_tool_error", "recovered_after_error", "success_after_error", "malformed_calls")


def load_eval(path):
    try:
        with open(path) as f:
            e = json.load(f)
        e["seen"]["all"]["success"]
        return e
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"demo_summary: {path}: not a `forge eval --json` result ({err})", file=sys.stderr)
        sys.exit(2)


def rollout_stats(path):
    """Staleness and per-step success of the RL run, from rollouts.h5."""
    if not os.path.exists(path):
        return None
    import h5py
    import numpy as np

    with h5py.File(path, "r", swmr=True) as f:
        stale = f["episodes/staleness"][:]
        step = f["episodes/consumed_step"][:]
        success = f["episodes/success"][:]
    if len(step) == 0:
        return None
    first, last = step.min(), step.max()
    span = max(1, (last - first + 1) // 5)
    return {
        "episodes": int(len(step)),
        "staleness_mean": float(stale.mean()),
        "staleness_max": int(stale.max()),
        "train_success_first_fifth": float(success[step < first + span].mean()),
        "train_success_last_fifth": float(success[step > last - span].mean()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--seconds", nargs=4, type=int, metavar=("SFT", "RL", "EVAL", "TOTAL"))
    a = ap.parse_args()
    sft = load_eval(os.path.join(a.run_dir, "eval_sft.json"))
    rl = load_eval(os.path.join(a.run_dir, "eval_rl.json"))
    zero_path = os.path.join(a.run_dir, "eval_zero.json")
    zero = load_eval(zero_path) if os.path.exists(zero_path) else None
    columns = ([("zero-shot", zero)] if zero else []) + [("SFT", sft), ("SFT+RL", rl)]
    summary = {"sft": {"checkpoint": sft["checkpoint"]}, "rl": {"checkpoint": rl["checkpoint"]}}
    if zero:
        summary["zero_shot"] = {"checkpoint": zero["checkpoint"]}
    for name, e in (("sft", sft), ("rl", rl)) + ((("zero_shot", zero),) if zero else ()):
        for styles in ("seen", "heldout_family"):
            if styles in e:
                summary[name][styles] = e[styles]
    tasks = sft["seen"]["all"]["episodes"]
    delta = 100 * (rl["seen"]["all"]["success"] - sft["seen"]["all"]["success"])
    summary["heldout_tasks"] = tasks
    summary["success_gain_pp"] = delta
    summary["rollouts"] = rollout_stats(os.path.join(a.run_dir, "rl", "rollouts.h5"))
    if a.seconds:
        summary["seconds"] = dict(zip(("sft", "rl", "eval", "total"), a.seconds))
    with open(os.path.join(a.run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)

    print(f"held-out success on {tasks} tasks per checkpoint (greedy, seen styles):")
    print(f"  {'':18s}" + "".join(f" {name:>9s}" for name, _ in columns))
    for domain in sft["seen"]:
        print(f"  {domain + ' success':18s}" +
              "".join(f" {100 * e['seen'].get(domain, {}).get('success', 0):8.1f}%" for _, e in columns))
    s, r = sft["seen"]["all"], rl["seen"]["all"]
    for key, label, scale in (("turns", "turns", 1), ("met_tool_error", "met a tool error", 100),
                              ("recovered_after_error", "  then recovered", 100),
                              ("success_after_error", "  then solved", 100),
                              ("malformed_calls", "malformed calls", 1)):
        if key in s:
            unit = "%" if scale == 100 else " "
            print(f"  {label:18s}" + "".join(f" {scale * e['seen']['all'].get(key, 0):8.2f}{unit}" for _, e in columns))
    ro = summary["rollouts"]
    if ro:
        print(f"  RL rollouts: {ro['episodes']} episodes, staleness mean {ro['staleness_mean']:.2f} "
              f"max {ro['staleness_max']}; training success {100 * ro['train_success_first_fifth']:.1f}% "
              f"-> {100 * ro['train_success_last_fifth']:.1f}%")
    start = f"zero-shot {100 * zero['seen']['all']['success']:.1f}% -> " if zero else ""
    print(f"{start}SFT {100 * s['success']:.1f}% -> SFT+RL {100 * r['success']:.1f}% ({delta:+.1f} points)")
    if a.seconds:
        sec = summary["seconds"]
        print(f"time: SFT {sec['sft']} s, RL {sec['rl']} s, evaluation {sec['eval']} s, total {sec['total']} s")
    print(f"summary: {os.path.join(a.run_dir, 'summary.json')}")


if __name__ == "__main__":
    main()
