#!/usr/bin/env python3
"""The summary scripts and the async benchmark refuse what they cannot use.

tools/demo_summary.py and tools/seeds_summary.py run on small hand-written
inputs (the fields they read, as forge eval --json and demo_summary.py write
them):

1. demo_summary.py on two evaluations of 10 tasks: exit 0, summary.json with
   the lift; on evaluations of different task counts (a lift between two task
   sets): exit 2 naming both counts; on a success that is a string: exit 2.
2. seeds_summary.py on that summary: exit 0; on one whose lift is null:
   exit 2 naming lift_pp (it raised a TypeError at the table). Both on
   evaluations where no episode met a tool error (null shares): n/a.
3. bench/bench_async_vs_sync.py with --out a folder holding a file it did not
   write: exit 2, and the file is still there (the folder was deleted whole).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(args):
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, timeout=120)


def evaluation(success, episodes=10):
    return {"checkpoint": "run/ckpt", "seen": {"all": {
        "success": success, "episodes": episodes, "turns": 3.0, "met_tool_error": 0.2,
        "recovered_after_error": 0.5, "success_after_error": 0.3, "malformed_calls": 0.1}}}


def write_run(folder, sft, rl):
    os.makedirs(folder, exist_ok=True)
    for name, e in (("eval_sft.json", sft), ("eval_rl.json", rl)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(e, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build")
    a = ap.parse_args()
    failures = []
    demo = os.path.join(ROOT, "tools", "demo_summary.py")
    seeds = os.path.join(ROOT, "tools", "seeds_summary.py")
    with tempfile.TemporaryDirectory() as tmp:
        good = os.path.join(tmp, "good")
        write_run(good, evaluation(0.4), evaluation(0.5))
        out = run([demo, good])
        if out.returncode != 0 or "(+10.0 points)" not in out.stdout:
            failures.append(f"demo_summary.py on a good run: rc {out.returncode}: {out.stdout} {out.stderr}")

        mixed = os.path.join(tmp, "mixed")
        write_run(mixed, evaluation(0.4, 500), evaluation(0.5, 10))
        out = run([demo, mixed])
        if out.returncode != 2 or "SFT 500" not in out.stderr or "SFT+RL 10" not in out.stderr:
            failures.append(f"demo_summary.py on 500 against 10 tasks: rc {out.returncode}: {out.stderr}")
        if os.path.exists(os.path.join(mixed, "summary.json")):
            failures.append("demo_summary.py on 500 against 10 tasks wrote summary.json")

        # No episode met a tool error: forge eval --json writes null shares
        # (they read 0, a recovery of 0%), and the summaries say n/a.
        calm_eval = evaluation(0.4)
        calm_eval["seen"]["all"].update(met_tool_error=0, recovered_after_error=None, success_after_error=None)
        calm = os.path.join(tmp, "calm")
        write_run(calm, calm_eval, evaluation(0.5))
        out = run([demo, calm])
        if out.returncode != 0 or "recovery after a tool error: n/a" not in out.stdout:
            failures.append(f"demo_summary.py without tool errors: rc {out.returncode}: {out.stdout} {out.stderr}")
        else:
            out = run([seeds, calm])
            if out.returncode != 0 or "smallest recovery gain n/a" not in out.stdout:
                failures.append(f"seeds_summary.py without tool errors: rc {out.returncode}: {out.stdout} {out.stderr}")

        text = os.path.join(tmp, "text")
        write_run(text, evaluation("0.4"), evaluation(0.5))
        out = run([demo, text])
        if out.returncode != 2 or "seen.all.success" not in out.stderr:
            failures.append(f"demo_summary.py on a string success: rc {out.returncode}: {out.stderr}")

        out = run([seeds, good])
        if out.returncode != 0 or "smallest lift +10.0 points" not in out.stdout:
            failures.append(f"seeds_summary.py on a good summary: rc {out.returncode}: {out.stdout} {out.stderr}")
        path = os.path.join(good, "summary.json")
        with open(path) as f:
            summary = json.load(f)
        summary["lift_pp"] = None
        with open(path, "w") as f:
            json.dump(summary, f)
        out = run([seeds, good])
        if out.returncode != 2 or "lift_pp" not in out.stderr:
            failures.append(f"seeds_summary.py on a null lift: rc {out.returncode}: {out.stderr}")

        victim = os.path.join(tmp, "victim")
        os.makedirs(victim)
        with open(os.path.join(victim, "keep.txt"), "w") as f:
            f.write("precious")
        out = run([os.path.join(ROOT, "bench", "bench_async_vs_sync.py"), "--sft", tmp, "--out", victim,
                   "--build-dir", os.path.abspath(a.build_dir)])
        if out.returncode != 2 or "did not write" not in out.stderr:
            failures.append(f"bench_async_vs_sync.py --out a folder of other files: rc {out.returncode}: {out.stderr}")
        if not os.path.exists(os.path.join(victim, "keep.txt")):
            failures.append("bench_async_vs_sync.py deleted a file it did not write")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("test_summary_tools: the summary scripts and bench_async_vs_sync refuse bad input with exit 2")


if __name__ == "__main__":
    main()
