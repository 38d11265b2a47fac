#!/usr/bin/python3
"""PNG plots of a rollouts.h5 (docs/hdf5-schema.md), with h5py and matplotlib.

    /usr/bin/python3 tools/plot_rollouts.py RUN_DIR/rollouts.h5 [--out DIR]

writes into DIR (default: the file's folder, plots/):
  reward.png     mean outcome, process and efficiency reward per training step,
                 and the outcome per domain
  success.png    success rate per step, overall and per domain
  staleness.png  histogram of episode staleness (learner version - oldest
                 token version), and per step its mean
  lengths.png    distributions of generated tokens and turns per episode
  training.png   clip and masked fractions, logprob mismatch, tree/linear token
                 ratio per step (when the file has steps)
The file may be one that is being written (it is opened in SWMR mode).
Per-step curves are averaged over a window of --smooth steps.
"""
import argparse
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rollouts_record import committed  # noqa: E402

SCHEMA_VERSION = 5  # the newest rollouts.h5 layout (docs/hdf5-schema.md)


def fail(message):
    """Bad input: the message and exit code 2, as forge's commands."""
    print(f"plot_rollouts: error: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        f = h5py.File(path, "r", swmr=True)
    except OSError as err:
        fail(f"'{path}' is not an HDF5 file ({err})")
    with f:
        if f.attrs.get("format") != b"forge-rollouts":
            fail(f"'{path}' is not a forge rollout file")
        version = f.attrs.get("schema_version")
        if not isinstance(version, (int, np.integer)) or not 1 <= version <= SCHEMA_VERSION:
            fail(f"'{path}' has rollout schema version {version}; this tool reads 1 to {SCHEMA_VERSION}")
        try:
            e = {k: f["episodes/" + k][:] for k in f["episodes"].keys()}
            s = {k: f["steps/" + k][:] for k in f["steps"].keys()}
            gen = f["calls/generated_len"][:]
            domains = [n.decode() for n in f["episodes/env"].attrs["names"]]
            # The rows the last flush completed (schema 5), the steps that increase (before).
            record = committed(f)
        except (KeyError, OSError, ValueError, TypeError, AttributeError) as err:
            fail(f"'{path}' is damaged or incomplete: {err!r}")
    # A live file may have extended some datasets and not yet others: keep
    # the rows present in every column whose calls are present.
    gen = gen[:record[0]]  # [:None]: all
    e = {k: v[:record[1]] for k, v in e.items()}
    s = {k: v[:record[2]] for k, v in s.items()}
    n = min(len(v) for v in e.values())
    e = {k: v[:n] for k, v in e.items()}
    n = int(np.searchsorted(e["call_offset"] + e["n_calls"], len(gen), side="right"))
    e = {k: v[:n] for k, v in e.items()}
    n_steps = min(len(v) for v in s.values()) if s else 0
    s = {k: v[:n_steps] for k, v in s.items()}
    total = np.concatenate([[0], np.cumsum(gen, dtype=np.int64)])
    e["generated_tokens"] = total[e["call_offset"] + e["n_calls"]] - total[e["call_offset"]]
    return e, s, domains


def per_step(steps, values):
    """Unique steps and the mean of values at each."""
    uniq, inv = np.unique(steps, return_inverse=True)
    return uniq, np.bincount(inv, weights=values) / np.bincount(inv)


def smooth(y, window):
    if window <= 1 or len(y) < window:
        return y
    return np.convolve(y, np.ones(window) / window, mode="valid")


def curve(ax, x, y, window, **kw):
    y = smooth(np.asarray(y, dtype=float), window)
    ax.plot(x[len(x) - len(y):], y, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--out", help="output folder (default: FILE's folder/plots)")
    ap.add_argument("--smooth", type=int, default=1, help="moving-average window in steps")
    args = ap.parse_args()
    if args.smooth < 1:
        fail(f"--smooth {args.smooth}: the window is at least 1 step")
    if not os.path.exists(args.file):
        fail(f"'{args.file}' does not exist")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.file)), "plots")
    e, s, domains = load(args.file)  # before the output folder is made
    step = e["consumed_step"]
    # The histograms have a bin per value: a damaged count (2^31 - 1) would
    # ask for billions. Staleness is at most the step that consumed it (the
    # learner's version then), and no episode takes a million turns.
    bad = np.flatnonzero((e["staleness"] > step) | (step < 0))
    if len(bad):
        i = int(bad[0])
        fail(f"'{args.file}' is damaged: episode {i} has staleness {e['staleness'][i]} at consumed step {step[i]}")
    if len(e["turns"]) and (e["turns"].max() > 10**6 or e["turns"].min() < 0):
        fail(f"'{args.file}' is damaged: an episode has {e['turns'].max()} turns")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as err:
        fail(f"cannot make the output folder '{out}': {err.strerror}")

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for key in ("outcome", "process", "efficiency"):
        x, y = per_step(step, e[key])
        curve(a, x, y, args.smooth, label=key)
    a.set(title="reward components", xlabel="step", ylabel="mean per episode")
    a.legend()
    for code, name in enumerate(domains):
        sel = e["env"] == code
        if sel.any():
            x, y = per_step(step[sel], e["outcome"][sel])
            curve(b, x, y, args.smooth, label=name)
    b.set(title="outcome by domain", xlabel="step")
    b.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "reward.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    x, y = per_step(step, e["success"].astype(float))
    curve(ax, x, y, args.smooth, label="all", color="black")
    for code, name in enumerate(domains):
        sel = e["env"] == code
        if sel.any():
            x, y = per_step(step[sel], e["success"][sel].astype(float))
            curve(ax, x, y, args.smooth, label=name)
    ax.set(title="success rate", xlabel="step", ylim=(-0.02, 1.02))
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "success.png"), dpi=100)
    plt.close(fig)

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    stale = e["staleness"][e["staleness"] >= 0]
    bins = np.arange(0, max(int(stale.max()) if len(stale) else 0, 1) + 2) - 0.5
    a.hist(stale, bins=bins)
    a.set(title="staleness", xlabel="learner version - oldest token version", ylabel="episodes")
    sel = e["staleness"] >= 0
    if sel.any():
        x, y = per_step(step[sel], e["staleness"][sel].astype(float))
        curve(b, x, y, args.smooth)
    b.set(title="mean staleness", xlabel="step")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "staleness.png"), dpi=100)
    plt.close(fig)

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.hist(e["generated_tokens"], bins=30)
    a.set(title="generated tokens per episode", xlabel="tokens", ylabel="episodes")
    turns = e["turns"]
    b.hist(turns, bins=np.arange(0, (turns.max() if len(turns) else 0) + 2) - 0.5)
    b.set(title="turns per episode", xlabel="turns")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "lengths.png"), dpi=100)
    plt.close(fig)

    if len(s.get("step", [])):
        optimizer = "grad_norm" in s  # schema 5
        fig, axes = plt.subplots(1, 4 if optimizer else 3, figsize=(18 if optimizer else 14, 4))
        x = s["step"]
        for key in ("clip_fraction", "masked_fraction"):
            curve(axes[0], x, s[key], args.smooth, label=key)
        axes[0].set(title="clipped / masked tokens", xlabel="step")
        axes[0].legend()
        if "engine_mismatch" in s:  # schema 3: the two figures apart
            for key, label in (("engine_mismatch", "engine/learner (staleness 0)"),
                               ("stale_drift", "drift (staleness >= 1)")):
                y = np.asarray(s[key], dtype=float)
                ok = ~np.isnan(y)
                if ok.any():
                    axes[1].plot(x[ok], y[ok], ".", markersize=3, label=label)
            axes[1].set_yscale("log")
            axes[1].legend()
        else:  # schema <= 2: one mixed figure
            curve(axes[1], x, s["logprob_mismatch"], args.smooth)
        axes[1].set(title="|lp - mu|", xlabel="step")
        curve(axes[2], x, s["tree_token_ratio"], args.smooth)
        axes[2].set(title="tree / linear tokens", xlabel="step")
        if optimizer:  # steps without an optimizer step (grad_norm 0) are left out
            took = np.asarray(s["grad_norm"]) > 0
            axes[3].plot(x[took], s["grad_norm"][took], ".", markersize=3, label="grad norm")
            axes[3].set(title="gradient norm (before clipping) and lr", xlabel="step")
            lr_axis = axes[3].twinx()
            lr_axis.plot(x[took], s["lr"][took], color="gray", linewidth=1)
            lr_axis.set_ylabel("lr", color="gray")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "training.png"), dpi=100)
        plt.close(fig)
    print(f"plots in {out}")


if __name__ == "__main__":
    main()
