#!/usr/bin/env python3
"""A fine-tuned pretrained model resumes bitwise (ctest Pretrained.ResumesBitwise).

A small random Qwen2 checkpoint (hf_reference.random_model, the SmolLM2
vocabulary and ChatML template) is warm-started by `forge sft` on agent
demonstrations (so that its episodes differ in length and its groups in
reward), then `forge train` (synchronous, one process) runs 4 RL steps from
it: once straight through, once as 2 steps and a --resume to 4. The two
step-4 checkpoints must hold the same weights and AdamW moments bit for bit
(h5diff, no tolerance), and steps 3-4 must have moved the weights.
Exit 77 (skip) without the reference packages or the SmolLM2 model file.

  test_hf_resume.py --build-dir BUILD
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout


def same(a, b, group):
    """h5diff exit code 0: every dataset under group equal, bit for bit."""
    return subprocess.run(["h5diff", "-q", a, b, group, group]).returncode == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    ref.require_smollm2()
    forge = os.path.join(args.build_dir, "forge")
    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "qwen2")
        ref.random_model("qwen2", source)
        sft = os.path.join(work, "sft")
        run([forge, "sft", f"--model.pretrained={source}", "--sft.task=agent", "--sft.steps=30", "--sft.batch=4",
             "--sft.eval_requests=1", "--optim.lr=3e-3", "--optim.warmup_steps=0", f"--run.dir={sft}"])
        common = [forge, "train", f"--model.pretrained={source}", f"--train.init={sft}", "--train.tasks=6",
                  "--train.group=4", "--train.eval_tasks=1", "--agent.max_turns=3", "--agent.max_new_tokens=32",
                  "--run.checkpoint_every=2", "--reward.efficiency_weight=1"]
        whole, split = os.path.join(work, "whole"), os.path.join(work, "split")
        run(common + ["--train.steps=4", f"--run.dir={whole}"])
        run(common + ["--train.steps=2", f"--run.dir={split}"])
        run(common + ["--train.steps=4", "--resume", f"--run.dir={split}"])
        step = lambda d, s: os.path.join(d, "checkpoints", f"ckpt_step_{s:08d}.h5")  # noqa: E731
        failures = 0
        for group in ("/model", "/optim"):
            if same(step(whole, 4), step(split, 4), group):
                print(f"  {group}: the resumed run's step-4 checkpoint equals the uninterrupted run's, bit for bit")
            else:
                print(f"  FAIL {group}: the resumed run's step-4 checkpoint differs from the uninterrupted run's")
                failures += 1
        if same(step(whole, 2), step(whole, 4), "/model"):
            print("  FAIL steps 3-4 did not move the weights: the comparison above proves nothing")
            failures += 1
    if failures:
        print(f"FAIL: {failures} checks")
        return 1
    print("OK: a fine-tuned pretrained model resumes bitwise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
