#!/usr/bin/env python3
"""forge's CPU model against an independent PyTorch oracle (torch_policy.py).

For a couple of seeds: run BUILD_DIR/tests/forge_oracle_dump into a temporary
directory, load the weights and the packed bins, recompute everything in
float64 with autograd, and compare per tensor (and for one seed more, the
same with what pretrained checkpoints bring: a head dimension other than
d_model / n_heads, tied embeddings, a q/k/v bias, Llama 3's RoPE scaling):

  forge (float32) vs torch (float64), relative error <= 1e-4:
    per bin: logits [R, V], logprob [E], entropy [R], loss
    per case: loss and every parameter gradient (accumulated over the bins)
  forge vs forge, relative error <= 1e-5 (same loss, different float order):
    split (several bins) vs one_bin; linear (unmerged chains) vs one_bin
  torch vs torch (float64, exact up to rounding), relative error <= 1e-9:
    the tree loss and gradients vs the linear computation over the unmerged
    samples (-sum_{s,p} coef[s,p] logprob(s,p)): merging, packing and the
    per-entry weights are exact
  forge's per-entry logprob vs the linear logprob at each of its references (1e-4)
  the bin weights vs the sum of the coefficients of their references (1e-6)
  the .npy reader on files NumPy wrote (and its errors on unsupported ones)

Relative error = ||a - b|| / max(||b||, tiny) over the whole tensor (b is the
reference). For a loss, the denominator is max(|b|, sum_e |w_e logprob_e|), the
magnitude of its terms, so that a loss that cancels to near zero is not judged
against its own tiny value.

Exit status 0 when every check passes, 1 otherwise (each failure names its
tensor).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_policy import TorchPolicy, load_case, load_manifest, load_samples, rel_err  # noqa: E402

TOL_FORGE = 1e-4    # float32 forge vs float64 torch
TOL_BINS = 1e-5     # forge vs forge: one bin vs several bins vs linear chains
TOL_EXACT = 1e-9    # float64 torch tree vs float64 torch linear
TOL_WEIGHTS = 1e-6  # float32 sums of a few float32 coefficients


class Checker:
    def __init__(self):
        self.rows = []
        self.failures = []

    def check(self, what, tensor, err, tol):
        ok = bool(np.isfinite(err)) and err <= tol
        self.rows.append((what, tensor, err, tol, ok))
        if not ok:
            self.failures.append("%s: %s relative error %.3e > %.0e" % (what, tensor, err, tol))
        return ok

    def print_table(self):
        w1 = max(len(r[0]) for r in self.rows)
        w2 = max(len(r[1]) for r in self.rows)
        print("%-*s  %-*s  %11s  %7s  %s" % (w1, "check", w2, "tensor", "rel.error", "tol", "result"))
        for what, tensor, err, tol, ok in self.rows:
            print("%-*s  %-*s  %11.3e  %7.0e  %s" % (w1, what, w2, tensor, err, tol, "ok" if ok else "FAIL"))


def loss_err(a, b, scale):
    return abs(float(a) - float(b)) / max(abs(float(b)), float(scale), 1e-30)


def run_dump(exe, out_dir, seed, variant):
    r = subprocess.run([exe, out_dir, "--seed", str(seed), "--variant", variant], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit("FAIL: %s exited with %d" % (exe, r.returncode))


def check_seed(chk, exe, seed, keep, variant="base"):
    out = tempfile.mkdtemp(prefix="forge_oracle_%d_" % seed)
    try:
        run_dump(exe, out, seed, variant)
        manifest = load_manifest(out)
        cases = {c["name"]: c for c in manifest["cases"]}
        model = TorchPolicy.from_dump(out, torch.float64)
        names = model.names
        samples = load_samples(out)
        tag = "seed %d" % seed if variant == "base" else "seed %d %s" % (seed, variant)

        forge_results = {}
        for name, case in cases.items():
            bins, fgrads, floss = load_case(out, case)
            inv_t = case["inv_temperature"]
            where = "%s %s" % (tag, name)
            model.zero_grad()
            total = 0
            scale = 0.0
            for k, b in enumerate(bins):
                with torch.enable_grad():
                    z, logprob, entropy, loss = model.bin_forward(b, inv_t)
                bw = "%s bin%d" % (where, k)
                chk.check(bw, "logits", rel_err(b["logits"], z.detach().numpy()), TOL_FORGE)
                chk.check(bw, "logprob", rel_err(b["logprob"], logprob.detach().numpy()), TOL_FORGE)
                chk.check(bw, "entropy", rel_err(b["entropy"], entropy.detach().numpy()), TOL_FORGE)
                bscale = float(np.abs(b["weights"].astype(np.float64) * logprob.detach().numpy()).sum())
                chk.check(bw, "loss", loss_err(b["loss"], loss.item(), bscale), TOL_FORGE)
                # weights: the sum of the coefficients of each entry's references
                coef = [s[2] for s in samples]
                w = np.array([sum(float(coef[b["ref_sample"][r]][b["ref_position"][r]])
                                  for r in range(b["ref_begin"][e], b["ref_begin"][e + 1]))
                              for e in range(len(b["target"]))])
                chk.check(bw, "weights", rel_err(b["weights"], w), TOL_WEIGHTS)
                b["weights64"] = w
                total = total + loss
                scale += bscale
            total.backward()
            tgrads = {n: g.detach().numpy().copy() for n, g in model.grads().items()}
            chk.check(where, "loss (all bins)", loss_err(floss, total.item(), scale), TOL_FORGE)
            for n in names:
                chk.check(where, "grad " + n, rel_err(fgrads[n], tgrads[n]), TOL_FORGE)
            forge_results[name] = (floss, fgrads, scale, bins)

        # forge: several bins and unmerged chains give the one-bin loss and gradients
        ref_loss, ref_grads, ref_scale, _ = forge_results["one_bin"]
        for other in ("split", "linear"):
            loss, grads, _, _ = forge_results[other]
            what = "%s forge %s vs one_bin" % (tag, other)
            chk.check(what, "loss", loss_err(loss, ref_loss, ref_scale), TOL_BINS)
            for n in names:
                chk.check(what, "grad " + n, rel_err(grads[n], ref_grads[n]), TOL_BINS)

        # torch float64: the tree computation equals the linear one over the samples
        for name in ("one_bin", "one_bin_t1"):
            inv_t = cases[name]["inv_temperature"]
            model.zero_grad()
            lin_loss = 0
            lin_lp = {}
            for s, (tokens, trainable, coef) in enumerate(samples):
                if len(tokens) < 2:
                    continue
                lp = model.sequence_logprobs(tokens, inv_t)  # lp[p - 1] = logprob(tokens[p])
                c = torch.as_tensor(coef[1:].astype(np.float64) * (trainable[1:] != 0))
                lin_loss = lin_loss - (c * lp).sum()
                lin_lp[s] = lp.detach().numpy()
            lin_loss.backward()
            lin_grads = {n: g.numpy().copy() for n, g in model.grads().items()}
            # the tree in float64 with float64 weights (forge's are float32 sums)
            model.zero_grad()
            tree_loss = 0
            for b in forge_results[name][3]:
                tree_loss = tree_loss + model.bin_forward(b, inv_t, weights=b["weights64"])[3]
            tree_loss.backward()
            what = "%s torch tree vs linear (%s)" % (tag, name)
            scale = forge_results[name][2]
            chk.check(what, "loss", loss_err(tree_loss.item(), lin_loss.item(), scale), TOL_EXACT)
            for n, g in model.grads().items():
                chk.check(what, "grad " + n, rel_err(g.numpy(), lin_grads[n]), TOL_EXACT)
            # forge's entry logprobs against the linear logprob at every reference
            got, want = [], []
            for b in forge_results[name][3]:
                for e in range(len(b["target"])):
                    for r in range(b["ref_begin"][e], b["ref_begin"][e + 1]):
                        got.append(b["logprob"][e])
                        want.append(lin_lp[b["ref_sample"][r]][b["ref_position"][r] - 1])
            chk.check("%s forge entries vs torch linear (%s)" % (tag, name), "logprob per reference",
                      rel_err(np.array(got), np.array(want)), TOL_FORGE)
    finally:
        if keep:
            print("kept dump: %s" % out)
        else:
            shutil.rmtree(out, ignore_errors=True)


def check_npy_reader(chk, exe):
    """forge's .npy reader on files NumPy wrote; unsupported files must be rejected
    with exit status 2 and a message naming the file."""
    d = tempfile.mkdtemp(prefix="forge_npy_")
    try:
        rng = np.random.RandomState(0)
        arrays = {
            "f4_2d": rng.randn(3, 5).astype("<f4"),
            "i4_1d": np.arange(-4, 7, dtype="<i4"),
            "f8_scalar": np.array(2.5e-7, dtype="<f8"),
            "f8_3d": rng.randn(2, 3, 4),
            "f4_empty": np.zeros((0, 3), dtype="<f4"),
        }
        for name, a in arrays.items():
            p = os.path.join(d, name + ".npy")
            np.save(p, a)
            r = subprocess.run([exe, "--npy-info", p], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True)
            ok = r.returncode == 0
            if ok:
                descr, rest = r.stdout.strip().split(" ", 1)
                shape_txt, total = rest.rsplit(" ", 1)
                shape = [int(x) for x in shape_txt.strip("[]").split(",") if x.strip()]
                ok = descr == a.dtype.str and shape == list(a.shape)
                err = abs(float(total) - float(a.astype(np.float64).sum())) / max(
                    float(np.abs(a.astype(np.float64)).sum()), 1e-30)
            else:
                err = float("inf")
            chk.check("npy reader", name, err if ok else float("inf"), 1e-12)
        bad = {
            "fortran": np.asfortranarray(rng.randn(3, 4).astype("<f4")),
            "int64": np.arange(5, dtype="<i8"),
            "big_endian": np.arange(5, dtype=">f4"),
        }
        for name, a in bad.items():
            p = os.path.join(d, name + ".npy")
            np.save(p, a)
            r = subprocess.run([exe, "--npy-info", p], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True)
            ok = r.returncode == 2 and p in r.stderr
            chk.check("npy reader rejects", name, 0.0 if ok else float("inf"), 0.0)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True, help="CMake build directory (holds tests/forge_oracle_dump)")
    ap.add_argument("--dump-exe", help="use this forge_oracle_dump instead of BUILD_DIR/tests/forge_oracle_dump")
    ap.add_argument("--seeds", default="1,2", help="comma-separated seeds (default 1,2)")
    ap.add_argument("--feature-seeds", default="3",
                    help="comma-separated seeds of the pretrained_features variant: head_dim 24 "
                         "(not d_model / n_heads), tied embeddings, a q/k/v bias, Llama 3 RoPE scaling "
                         "(default 3)")
    ap.add_argument("--keep", action="store_true", help="keep the dump directories")
    args = ap.parse_args()
    exe = args.dump_exe or os.path.join(args.build_dir, "tests", "forge_oracle_dump")
    if not os.path.isfile(exe):
        print("FAIL: %s not found (build the forge_oracle_dump target)" % exe)
        return 1
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead (and the box is shared)
    chk = Checker()
    check_npy_reader(chk, exe)
    for seed in [int(s) for s in args.seeds.split(",") if s]:
        check_seed(chk, exe, seed, args.keep)
    for seed in [int(s) for s in args.feature_seeds.split(",") if s]:
        check_seed(chk, exe, seed, args.keep, "pretrained_features")
    chk.print_table()
    n_fail = len(chk.failures)
    print("%d passed, %d failed" % (len(chk.rows) - n_fail, n_fail))
    for f in chk.failures:
        print("FAIL: " + f)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
