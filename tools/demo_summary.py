#!/usr/bin/python3
"""A job's summary (./forge.sh demo, ./forge.sh smollm2): the held-out results
of its checkpoints side by side.

    /usr/bin/python3 tools/demo_summary.py RUN_DIR [--seconds SFT RL EVAL TOTAL]

reads RUN_DIR/eval_sft.json and RUN_DIR/eval_rl.json (`forge eval --json`,
same tasks, greedy), RUN_DIR/eval_zero.json (the pretrained model before any
training) when present, and RUN_DIR/rl/rollouts.h5 when present; prints the
success rates with the change from SFT to SFT+RL in percentage points and
what moved (per domain and by the tool calls a task needs, turns, recovery
after tool errors, malformed calls, why the failed episodes failed (`forge
eval`'s causes, when its JSON has them), staleness, the held-out template
families, the engine/learner mismatch and the drift of stale tokens), and
writes RUN_DIR/summary.json with the run's seed, the lift, the recovery
figures, the held-out family ratio and both mismatch figures at the top.
Exit code 2 when an input is missing or not what forge writes.
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
        e["checkpoint"]
        for key in ("success", "episodes"):
            v = e["seen"]["all"][key]
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise TypeError(f"seen.all.{key} is {v!r}, not a number")
        return e
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"demo_summary: {path}: not a `forge eval --json` result ({err})", file=sys.stderr)
        sys.exit(2)


def rollout_stats(path):
    """Staleness, per-step success and the two mismatch figures of the RL
    run, from rollouts.h5 (schema 3: steps/engine_mismatch is the mean
    |log pi_learner - log pi_behaviour| on staleness-0 tokens, NaN in a step
    without any; steps/stale_drift the same on stale tokens)."""
    if not os.path.exists(path):
        return None
    import h5py
    import numpy as np

    from rollouts_record import committed

    try:
        with h5py.File(path, "r", swmr=True) as f:
            if f.attrs.get("format") != b"forge-rollouts":
                raise ValueError("no format = forge-rollouts attribute")
            version = f.attrs.get("schema_version")
            if not isinstance(version, (int, np.integer)) or not 1 <= version <= 5:
                raise ValueError(f"schema version {version}; this tool reads 1 to 5")
            stale = f["episodes/staleness"][:]
            step = f["episodes/consumed_step"][:]
            success = f["episodes/success"][:]
            steps = f["steps"]
            mismatch = steps["engine_mismatch"][:] if "engine_mismatch" in steps else np.array([])
            drift = steps["stale_drift"][:] if "stale_drift" in steps else np.array([])
            # Only the rows the last flush completed (schema 5; rows past it
            # are unwritten or a cut resume's, read as step 0, success 0), or
            # before schema 5 the steps that increase.
            record = committed(f)
            stale, step, success = stale[:record[1]], step[:record[1]], success[:record[1]]
            mismatch, drift = mismatch[:record[2]], drift[:record[2]]
    except (OSError, KeyError, ValueError, TypeError) as err:
        print(f"demo_summary: {path}: not a forge rollout file it reads ({err})", file=sys.stderr)
        sys.exit(2)
    # A writer killed mid-flush may have extended some columns and not others.
    n = min(len(stale), len(step), len(success))
    stale, step, success = stale[:n], step[:n], success[:n]
    if len(step) == 0:
        return None
    first, last = step.min(), step.max()
    span = max(1, (last - first + 1) // 5)
    mismatch = mismatch[np.isfinite(mismatch)]
    drift = drift[np.isfinite(drift)]
    stale = stale[stale >= 0]  # -1: an episode with no generated token
    return {
        "episodes": int(len(step)),
        "staleness_mean": float(stale.mean()) if len(stale) else None,
        "staleness_max": int(stale.max()) if len(stale) else None,
        "train_success_first_fifth": float(success[step < first + span].mean()),
        "train_success_last_fifth": float(success[step > last - span].mean()),
        "engine_mismatch_max": float(mismatch.max()) if len(mismatch) else None,
        "engine_mismatch_median": float(np.median(mismatch)) if len(mismatch) else None,
        "stale_drift_mean": float(drift.mean()) if len(drift) else None,
    }


def run_seed(run_dir):
    """run.seed from the SFT run's config.ini (forge writes it), else None."""
    try:
        with open(os.path.join(run_dir, "sft", "config.ini")) as f:
            section = ""
            for line in f:
                line = line.split(";")[0].strip()
                if line.startswith("["):
                    section = line.strip("[]")
                elif section == "run" and line.startswith("seed") and "=" in line:
                    return int(line.split("=", 1)[1])
    except (OSError, ValueError):
        pass
    return None


def recovery(e):
    """Recovery after tool errors on the seen styles: the share of episodes
    that met one, the share of those that retried successfully, and their
    product (the share of all episodes that met an error and recovered)."""
    a = e["seen"]["all"]
    met, rec = a.get("met_tool_error", 0), a.get("recovered_after_error", 0)  # rec null: none met one
    return {"met_error": met, "recovered_given_error": rec,
            "met_and_recovered": met * rec if rec is not None else 0.0}


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
    # The lift compares two evaluations of the same tasks (forge eval's tasks
    # are seeded by their index: the same count is the same tasks).
    counts = {name: e["seen"]["all"]["episodes"] for name, e in columns}
    if len(set(counts.values())) > 1:
        print(f"demo_summary: {a.run_dir}: the evaluations cover different task counts "
              f"({', '.join(f'{n} {c}' for n, c in counts.items())}); evaluate each checkpoint on the same tasks",
              file=sys.stderr)
        sys.exit(2)
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
    rec_sft, rec_rl = recovery(sft), recovery(rl)
    headline = {
        "seed": run_seed(a.run_dir),
        "success_sft": sft["seen"]["all"]["success"],
        "success_rl": rl["seen"]["all"]["success"],
        "lift_pp": delta,
        "recovery": {
            "sft": rec_sft,
            "rl": rec_rl,
            "gain_pp": (100 * (rec_rl["recovered_given_error"] - rec_sft["recovered_given_error"])
                        if None not in (rec_rl["recovered_given_error"], rec_sft["recovered_given_error"]) else None),
            "ratio": (rec_rl["recovered_given_error"] / rec_sft["recovered_given_error"]
                      if rec_rl["recovered_given_error"] is not None and rec_sft["recovered_given_error"] else None),
        },
    }
    # forge eval --json writes null when env.heldout_families is empty.
    if rl.get("heldout_family") and sft.get("heldout_family"):
        seen_rl, held_rl = rl["seen"]["all"]["success"], rl["heldout_family"]["all"]["success"]
        headline["heldout_family"] = {
            "success_sft": sft["heldout_family"]["all"]["success"],
            "success_rl": held_rl,
            "ratio_to_seen_rl": held_rl / seen_rl if seen_rl > 0 else None,
        }
    ro = summary["rollouts"] or {}
    headline["engine_mismatch_max"] = ro.get("engine_mismatch_max")
    headline["stale_drift_mean"] = ro.get("stale_drift_mean")
    summary = {**headline, **summary}
    if a.seconds:
        summary["seconds"] = dict(zip(("sft", "rl", "eval", "total"), a.seconds))
    with open(os.path.join(a.run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)

    print(f"held-out success on {tasks} tasks per checkpoint (greedy, seen styles):")
    print(f"  {'':18s}" + "".join(f" {name:>9s}" for name, _ in columns))
    for domain in sft["seen"]:
        print(f"  {domain + ' success':18s}" +
              "".join(f" {100 * e['seen'].get(domain, {}).get('success', 0):8.1f}%" for _, e in columns))
        if domain == "all" or not all("by_needed_calls" in e["seen"].get(domain, {}) for _, e in columns):
            continue
        for calls in sft["seen"][domain]["by_needed_calls"]:
            label = f"  {calls} call{'s' if calls != '1' else ''} needed"
            print(f"  {label:18s}" + "".join(
                f" {100 * e['seen'][domain]['by_needed_calls'].get(calls, {}).get('success', 0):8.1f}%" for _, e in columns))
    s, r = sft["seen"]["all"], rl["seen"]["all"]
    for key, label, scale in (("turns", "turns", 1), ("met_tool_error", "met a tool error", 100),
                              ("recovered_after_error", "  then recovered", 100),
                              ("success_after_error", "  then solved", 100),
                              ("malformed_calls", "malformed calls", 1)):
        if key in s:
            unit = "%" if scale == 100 else " "
            shown = [e["seen"]["all"].get(key, 0) for _, e in columns]  # null: no episode met a tool error
            print(f"  {label:18s}" + "".join(f" {scale * v:8.2f}{unit}" if v is not None else f" {'-':>8s} "
                                             for v in shown))
    if all("failures" in e["seen"]["all"] for _, e in columns):
        print("  failed episodes by cause (share of all; docs/environments.md):")
        for cause in s["failures"]:
            print(f"   {cause:17s}" + "".join(f" {100 * e['seen']['all']['failures'][cause]:8.1f}%" for _, e in columns))
    ro = summary["rollouts"]
    if ro:
        staleness = (f"staleness mean {ro['staleness_mean']:.2f} max {ro['staleness_max']}"
                     if ro["staleness_mean"] is not None else "no generated token")
        print(f"  RL rollouts: {ro['episodes']} episodes, {staleness}; training success {100 * ro['train_success_first_fifth']:.1f}% "
              f"-> {100 * ro['train_success_last_fifth']:.1f}%")
    rc = summary["recovery"]
    shares = [rc[k]["recovered_given_error"] for k in ("sft", "rl")]
    if None in shares:
        print("  recovery after a tool error: n/a (an evaluation had no episode that met one)")
    else:
        print(f"  recovery after a tool error: SFT {100 * shares[0]:.1f}% -> SFT+RL {100 * shares[1]:.1f}% of the "
              f"episodes that met one ({rc['gain_pp']:+.1f} points)")
    if "heldout_family" in summary:
        hf = summary["heldout_family"]
        ratio = f"{hf['ratio_to_seen_rl']:.2f}" if hf["ratio_to_seen_rl"] is not None else "n/a"
        print(f"  held-out template families: SFT {100 * hf['success_sft']:.1f}% -> SFT+RL "
              f"{100 * hf['success_rl']:.1f}% ({ratio} of the seen styles' success after RL)")
    if summary["engine_mismatch_max"] is not None:
        drift = summary["stale_drift_mean"]  # None: no stale token (a synchronous run, a cap of 0)
        print(f"  engine/learner mismatch (staleness 0) max {summary['engine_mismatch_max']:.2e} per step; "
              f"drift of stale tokens " + (f"{drift:.2e} mean" if drift is not None else "n/a (none was stale)"))
    start = f"zero-shot {100 * zero['seen']['all']['success']:.1f}% -> " if zero else ""
    print(f"{start}SFT {100 * s['success']:.1f}% -> SFT+RL {100 * r['success']:.1f}% ({delta:+.1f} points)")
    if a.seconds:
        sec = summary["seconds"]
        print(f"time: SFT {sec['sft']} s, RL {sec['rl']} s, evaluation {sec['eval']} s, total {sec['total']} s")
    print(f"summary: {os.path.join(a.run_dir, 'summary.json')}")


if __name__ == "__main__":
    main()
