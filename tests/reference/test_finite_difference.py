#!/usr/bin/env python3
"""Finite-difference check of the gradients, in double precision.

Runs BUILD_DIR/tests/forge_oracle_dump (seed 3 by default) and takes two cases
of the dump: one_bin (a merged prefix forest in one bin) and split (the same
forest over several bins, gradients accumulated), both at inv_temperature 0.7.
Per case the loss is L(theta) = sum over its bins of -sum_e w_e logprob_e, with
forge's float32 weights w_e, evaluated by the float64 PyTorch model of
torch_policy.py at forge's (float32) parameters. For every parameter tensor:

1. torch autograd vs central differences, per entry, for a random subset of
   entries (half drawn with probability proportional to |gradient|, half
   uniformly among the entries with a nonzero gradient):
       fd_i = (L(theta + eps e_i) - L(theta - eps e_i)) / (2 eps),  eps = 1e-6
   pass if |fd_i - g_i| <= 1e-6 * max(|g_i|, 1e-2 * max_j |g_j|).
2. forge's float32 gradient vs the same central differences, per entry:
   |fd_i - forge_i| <= 1e-3 * max(|fd_i|, 1e-2 * max_j |g_j|).
3. forge (and torch autograd) vs central differences of the directional
   derivative along unit directions v over the whole tensor (two random
   Gaussian directions and forge's own gradient direction):
       fd_v = (L(theta + eps v) - L(theta - eps v)) / (2 eps)
   pass if |fd_v - forge . v| <= 1e-3 * max(|fd_v|, ||g|| / sqrt(n))
   (1e-6 for torch autograd), where ||g|| / sqrt(n) is the standard deviation
   of g . v over random unit directions in n dimensions, so that a direction
   nearly orthogonal to g is not judged against its own tiny derivative.

Tolerances. In float64 the central difference has a truncation error of
about eps^2/6 |L'''| (~1e-12 here) and a rounding error of about
u |L| / eps with u = 1.1e-16 and the loss summing terms of magnitude ~10^2:
~1e-8 absolute at eps = 1e-6. Measured, the relative error of fd_i is
1e-10..1e-7 on entries with |g_i| >= 1e-2, so 1e-6 leaves a margin of 10 or
more while a wrong derivative (a sign, a missing term: relative errors of
order 1e-2..1) fails by orders of magnitude. The floor 1e-2 * max|g| makes the
check absolute (about 1e-8..1e-7 here) for entries much smaller than the
tensor's largest, where the relative rounding error of fd_i grows.
forge computes in float32 (u = 6e-8) with reductions over up to a few
thousand terms per output: its gradient tensors agree with float64 to
1e-6..5e-6 relative (see test_torch_oracle.py); single entries that are sums
with cancellation (a norm weight's gradient sums over all tokens) reach ~1e-4
against the floor. 1e-3 is a loose bound for rounding that still catches any
real bug (those give errors of 1e-2 and more).

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
from torch_policy import TorchPolicy, load_case, load_manifest  # noqa: E402

EPS = 1e-6
TOL_AUTOGRAD = 1e-6
TOL_FORGE = 1e-3
FLOOR = 1e-2  # fraction of the tensor's largest |gradient| below which errors are absolute


def check_case(model, case, bins, forge_grads, args, rng, rows, failures):
    inv_t = case["inv_temperature"]

    def loss():
        total = 0
        for b in bins:
            total = total + model.bin_forward(b, inv_t)[3]
        return total

    model.zero_grad()
    loss().backward()
    grads = {n: g.detach().numpy().ravel().copy() for n, g in model.grads().items()}

    def record(tensor, kind, detail, err, tol):
        ok = bool(np.isfinite(err)) and err <= tol
        rows.append((case["name"], tensor, kind, detail, err, tol, ok))
        if not ok:
            failures.append("%s %s: %s %s relative error %.3e > %.0e" % (case["name"], tensor, kind, detail,
                                                                          err, tol))

    with torch.no_grad():
        for name in model.names:
            p = model.params[name]
            flat = p.view(-1)
            g = grads[name]
            fg = forge_grads[name].astype(np.float64).ravel()
            n = g.size
            gmax = float(np.abs(g).max())
            if gmax == 0.0:
                record(name, "gradient", "all zero", float("inf"), 0.0)
                continue

            def central(direction):
                """(L(theta + eps d) - L(theta - eps d)) / (2 eps) for a flat direction d."""
                orig = flat.clone()
                d = torch.as_tensor(direction, dtype=flat.dtype)
                flat.copy_(orig + EPS * d)
                lp = loss().item()
                flat.copy_(orig - EPS * d)
                lm = loss().item()
                flat.copy_(orig)
                return (lp - lm) / (2 * EPS)

            # 1, 2: entries
            k_big = (args.entries + 1) // 2
            nz = np.flatnonzero(g)
            picks = list(rng.choice(n, k_big, replace=False, p=np.abs(g) / np.abs(g).sum()))
            picks += list(rng.choice(nz, min(len(nz), args.entries - k_big), replace=False))
            floor = FLOOR * gmax
            for i in picks:
                e = np.zeros(n)
                e[i] = 1.0
                fd = central(e)
                detail = "entry %d" % i
                record(name, "autograd vs fd", detail, abs(fd - g[i]) / max(abs(g[i]), floor), TOL_AUTOGRAD)
                record(name, "forge vs fd", detail, abs(fd - fg[i]) / max(abs(fd), floor), TOL_FORGE)

            # 3: directions over the whole tensor
            dirs = [("random %d" % j, rng.randn(n)) for j in range(args.directions)]
            dirs.append(("forge grad", fg.copy()))
            sigma = float(np.linalg.norm(g)) / np.sqrt(n)
            for label, v in dirs:
                nv = np.linalg.norm(v)
                if nv == 0.0:
                    record(name, "forge grad", "is zero", float("inf"), 0.0)
                    continue
                v = v / nv
                fd = central(v)
                denom = max(abs(fd), sigma)
                record(name, "autograd.v vs fd", label, abs(fd - float(g @ v)) / denom, TOL_AUTOGRAD)
                record(name, "forge.v vs fd", label, abs(fd - float(fg @ v)) / denom, TOL_FORGE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", required=True, help="CMake build directory (holds tests/forge_oracle_dump)")
    ap.add_argument("--dump-exe", help="use this forge_oracle_dump instead of BUILD_DIR/tests/forge_oracle_dump")
    ap.add_argument("--seed", type=int, default=3, help="dump seed (default 3)")
    ap.add_argument("--cases", default="one_bin,split",
                    help="comma-separated dump cases to check (default one_bin,split)")
    ap.add_argument("--entries", type=int, default=6, help="entries per tensor (default 6)")
    ap.add_argument("--directions", type=int, default=2, help="random directions per tensor (default 2)")
    args = ap.parse_args()
    exe = args.dump_exe or os.path.join(args.build_dir, "tests", "forge_oracle_dump")
    if not os.path.isfile(exe):
        print("FAIL: %s not found (build the forge_oracle_dump target)" % exe)
        return 1
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead (and the box is shared)

    out = tempfile.mkdtemp(prefix="forge_fd_")
    try:
        r = subprocess.run([exe, out, "--seed", str(args.seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            print("FAIL: %s exited with %d" % (exe, r.returncode))
            return 1
        manifest = load_manifest(out)
        cases = []
        for name in [c for c in args.cases.split(",") if c]:
            case = [c for c in manifest["cases"] if c["name"] == name]
            if not case:
                print("FAIL: no case '%s' in the dump" % name)
                return 1
            bins, forge_grads, _ = load_case(out, case[0])
            cases.append((case[0], bins, forge_grads))
        model = TorchPolicy.from_dump(out, torch.float64)
    finally:
        shutil.rmtree(out, ignore_errors=True)

    rng = np.random.RandomState(1234 + args.seed)
    rows = []  # (case, tensor, kind, detail, error, tol, ok)
    failures = []
    for case, bins, forge_grads in cases:
        check_case(model, case, bins, forge_grads, args, rng, rows, failures)

    wc = max(len(r[0]) for r in rows)
    w = max(len(r[1]) for r in rows)
    wk = max(len(r[2]) for r in rows)
    wd = max(len(r[3]) for r in rows)
    print("seed %d, eps %.0e" % (args.seed, EPS))
    print("%-*s  %-*s  %-*s  %-*s  %11s  %7s  %s" % (wc, "case", w, "tensor", wk, "check", wd, "where", "rel.error",
                                                   "tol", "result"))
    for cname, tensor, kind, detail, err, tol, ok in rows:
        print("%-*s  %-*s  %-*s  %-*s  %11.3e  %7.0e  %s" % (wc, cname, w, tensor, wk, kind, wd, detail, err, tol,
                                                           "ok" if ok else "FAIL"))
    print("%d passed, %d failed" % (len(rows) - len(failures), len(failures)))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
