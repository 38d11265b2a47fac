#!/usr/bin/python3
"""The main job across seeds (./forge.sh seeds): one row per run folder.

    /usr/bin/python3 tools/seeds_summary.py RUN_DIR [RUN_DIR ...] [--out FILE]

reads each RUN_DIR/summary.json (tools/demo_summary.py writes it) and prints,
per seed: held-out success of the SFT checkpoint and after RL (500 tasks,
greedy, same tasks), the lift in points, recovery after tool errors (share
of the episodes that met one), the held-out template families' success as a
share of the seen styles', the largest per-step engine/learner mismatch and
the wall time; then the median success after RL and the smallest lift.
Writes the rows and those two figures to FILE (JSON) when asked. Exit code 2
when a summary is missing or not what demo_summary.py writes.
"""
import argparse
import json
import os
import statistics
import sys


def load(run_dir):
    path = os.path.join(run_dir, "summary.json")
    try:
        with open(path) as f:
            s = json.load(f)
        for name, v in (("lift_pp", s["lift_pp"]), ("success_rl", s["success_rl"]),
                        ("success_sft", s["success_sft"]), ("recovery.gain_pp", s["recovery"]["gain_pp"])):
            if name == "recovery.gain_pp" and v is None:  # an evaluation where no episode met a tool error
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise TypeError(f"{name} is {v!r}, not a number")
        for phase in ("sft", "rl"):
            s["recovery"][phase]["recovered_given_error"]
        return s
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"seeds_summary: {path}: not a summary of tools/demo_summary.py ({err})", file=sys.stderr)
        sys.exit(2)


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+")
    ap.add_argument("--out", help="write the rows and the aggregate as JSON")
    a = ap.parse_args()
    rows = []
    for d in a.run_dirs:
        s = load(d)
        rec = s["recovery"]
        hf = s.get("heldout_family") or {}
        rows.append({
            "run_dir": d,
            "seed": s.get("seed"),
            "success_sft": s["success_sft"],
            "success_rl": s["success_rl"],
            "lift_pp": s["lift_pp"],
            "recovery_sft": rec["sft"]["recovered_given_error"],
            "recovery_rl": rec["rl"]["recovered_given_error"],
            "recovery_gain_pp": rec["gain_pp"],
            "heldout_family_rl": hf.get("success_rl"),
            "heldout_family_ratio": hf.get("ratio_to_seen_rl"),
            "engine_mismatch_max": s.get("engine_mismatch_max"),
            "stale_drift_mean": s.get("stale_drift_mean"),
            "seconds": (s.get("seconds") or {}).get("total"),
        })
    print(f"{'seed':>6} {'SFT':>7} {'SFT+RL':>7} {'lift':>7} {'recovery SFT -> RL':>20} "
          f"{'held-out fam.':>14} {'ratio':>6} {'mismatch':>9} {'time':>6}")
    for r in rows:
        ratio = "n/a" if r["heldout_family_ratio"] is None else f"{r['heldout_family_ratio']:.2f}"
        mism = "n/a" if r["engine_mismatch_max"] is None else f"{r['engine_mismatch_max']:.1e}"
        secs = "n/a" if r["seconds"] is None else f"{r['seconds']} s"
        print(f"{str(r['seed']):>6} {pct(r['success_sft']):>7} {pct(r['success_rl']):>7} {r['lift_pp']:+6.1f} "
              f"{pct(r['recovery_sft']) + ' -> ' + pct(r['recovery_rl']):>20} {pct(r['heldout_family_rl']):>14} "
              f"{ratio:>6} {mism:>9} {secs:>6}")
    aggregate = {
        "median_success_rl": statistics.median(r["success_rl"] for r in rows),
        "min_lift_pp": min(r["lift_pp"] for r in rows),
        "min_recovery_gain_pp": min((r["recovery_gain_pp"] for r in rows if r["recovery_gain_pp"] is not None),
                                    default=None),
    }
    gain = aggregate["min_recovery_gain_pp"]
    print(f"median success after RL {pct(aggregate['median_success_rl'])}; smallest lift "
          f"{aggregate['min_lift_pp']:+.1f} points; smallest recovery gain "
          + ("n/a" if gain is None else f"{gain:+.1f} points"))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"runs": rows, **aggregate}, f, indent=2)
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
