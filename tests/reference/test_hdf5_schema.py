#!/usr/bin/env python3
"""Checks a rollouts.h5 against docs/hdf5-schema.md, with h5py.

Writes a file with `BUILD_DIR/forge train` on a tiny model (a real RL run
through RolloutStore), then:

1. every dataset in the document's "Datasets" table exists with the documented
   dtype and shape (symbolic dimensions such as n_tokens agree across
   datasets; numbers are exact), chunked with only the first dimension
   unlimited, shuffle and gzip level 4, the commit record's fill value -1,
   superblock 3; every attribute of the "attributes" table exists with the
   documented dtype and shape; the file holds no dataset, group or attribute
   that the document does not list;
2. the tables are consistent: offsets chain, loss_mask matches the call
   lengths, context tokens carry NaN / -1, codes index their names;
3. `forge inspect --json` and `forge export` read the same counts, and
   tools/plot_rollouts.py writes its PNGs.
"""
import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "hdf5-schema.md")


def doc_tables():
    """(datasets, attributes) from the document's markdown tables."""
    datasets, attributes = {}, {}
    cell = r"\s*([^|]*?)\s*"
    for line in open(DOC, encoding="utf-8"):
        m = re.match(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|" + cell + r"\|" + cell + r"\|", line)
        if m:  # | `object` | `attribute` | dtype | shape | meaning |
            attributes[(m.group(1), m.group(2))] = (m.group(3), m.group(4))
            continue
        m = re.match(r"^\|\s*`([^`]+)`\s*\|" + cell + r"\|" + cell + r"\|", line)
        if m:  # | `dataset` | dtype | shape | meaning |
            datasets[m.group(1)] = (m.group(2), m.group(3))
    return datasets, attributes


def parse_shape(text):
    text = text.strip()
    if text == "scalar":
        return ()
    assert text.startswith("[") and text.endswith("]"), text
    return tuple(d.strip() for d in text[1:-1].split(","))


def check_shape(where, actual, documented, symbols, failures):
    if len(actual) != len(documented):
        failures.append(f"{where}: shape {actual}, documented {documented}")
        return
    for a, d in zip(actual, documented):
        if d.isdigit():
            if a != int(d):
                failures.append(f"{where}: dimension {a}, documented {d}")
        elif symbols.setdefault(d, a) != a:
            failures.append(f"{where}: {d} = {a}, but {symbols[d]} elsewhere")


def check_schema(path):
    datasets, attributes = doc_tables()
    assert len(datasets) > 30 and len(attributes) >= 5, "could not parse " + DOC
    failures, symbols = [], {}
    with h5py.File(path, "r", swmr=True) as f:
        found_datasets, found_groups = set(), set()
        f.visititems(lambda name, obj: (found_datasets if isinstance(obj, h5py.Dataset) else found_groups).add(name))
        documented_groups = {name.rsplit("/", 1)[0] for name in datasets if "/" in name}
        for name in sorted(found_datasets - set(datasets)):
            failures.append(f"dataset {name} is not documented")
        for name in sorted(found_groups - documented_groups):
            failures.append(f"group {name} is not documented")
        for name, (dtype, shape) in datasets.items():
            if name not in f:
                failures.append(f"documented dataset {name} is missing")
                continue
            d = f[name]
            if d.dtype != np.dtype(dtype):
                failures.append(f"{name}: dtype {d.dtype}, documented {dtype}")
            check_shape(name, d.shape, parse_shape(shape), symbols, failures)
            if d.chunks is None or d.maxshape[0] is not None or tuple(d.maxshape[1:]) != tuple(d.shape[1:]):
                failures.append(f"{name}: maxshape {d.maxshape}, not chunked with only the first dimension unlimited")
            if d.compression != "gzip" or d.compression_opts != 4 or not d.shuffle:
                failures.append(f"{name}: compression {d.compression} level {d.compression_opts}, shuffle {d.shuffle}")
        # The commit record's fill value, which readers rely on to pass over
        # a row whose extent was set but whose data did not land.
        if "flushes" in f and f["flushes"].fillvalue != -1:
            failures.append(f"flushes: fill value {f['flushes'].fillvalue}, documented -1")
        # The latest file format (superblock 3), which SWMR needs.
        superblock = f.id.get_create_plist().get_version()[0]
        if superblock != 3:
            failures.append(f"superblock version {superblock}, documented 3 (the latest format, which SWMR needs)")

        objects = {"/": f.attrs}
        objects.update({name: f[name].attrs for name in found_datasets | found_groups})
        for obj, attrs in objects.items():
            for key in attrs.keys():
                if (obj, key) not in attributes:
                    failures.append(f"attribute {key} of {obj} is not documented")
        for (obj, key), (dtype, shape) in attributes.items():
            attrs = f.attrs if obj == "/" else f[obj].attrs if obj in f else {}
            if key not in attrs:
                failures.append(f"documented attribute {key} of {obj} is missing")
                continue
            value = np.asarray(attrs[key])
            ok = value.dtype.kind == "S" if dtype == "string" else value.dtype == np.dtype(dtype)
            if not ok:
                failures.append(f"attribute {key} of {obj}: dtype {value.dtype}, documented {dtype}")
            check_shape(f"attribute {key} of {obj}", value.shape, parse_shape(shape), symbols, failures)
    return failures


def check_consistency(path):
    failures = []
    with h5py.File(path, "r", swmr=True) as f:
        if f.attrs["format"] != b"forge-rollouts":
            failures.append(f"format attribute {f.attrs['format']!r}")
        off, ctx, gen = (f["calls/" + k][:] for k in ("token_offset", "context_len", "generated_len"))
        if not np.array_equal(off, np.concatenate([[0], np.cumsum(ctx + gen)[:-1]])):
            failures.append("calls/token_offset does not chain the call lengths")
        mask, lp, ver = f["loss_mask"][:], f["logprobs"][:], f["versions"][:]
        if mask.sum() != gen.sum() or len(mask) != (ctx + gen).sum():
            failures.append("loss_mask does not match the call lengths")
        if not (np.isnan(lp[mask == 0]).all() and (ver[mask == 0] == -1).all()):
            failures.append("context tokens must carry NaN logprobs and version -1")
        if not (np.isfinite(lp[mask == 1]).all() and (ver[mask == 1] >= 0).all()):
            failures.append("generated tokens must carry finite logprobs and versions >= 0")
        coff, ncalls = f["episodes/call_offset"][:], f["episodes/n_calls"][:]
        if not np.array_equal(coff, np.concatenate([[0], np.cumsum(ncalls)[:-1]])) or ncalls.sum() != len(off):
            failures.append("episodes/call_offset does not chain n_calls")
        if not np.array_equal(f["calls/episode"][:], np.repeat(np.arange(len(ncalls)), ncalls)):
            failures.append("calls/episode does not match the episodes' calls")
        for key in ("env", "template_family"):
            codes, names = f["episodes/" + key][:], f["episodes/" + key].attrs["names"]
            if codes.min() < 0 or codes.max() >= len(names):
                failures.append(f"episodes/{key} codes outside its names")
        hist = f["steps/staleness_hist"][:]
        stale = f["episodes/staleness"][:]
        if hist.sum() != (stale >= 0).sum():
            failures.append("steps/staleness_hist does not count the episodes")
        # The step's counts against its episodes, and its optimizer step
        # against the warm-up (optim.lr 0.001 over optim.warmup_steps 20 by
        # default: the k-th step taken has lr 0.001 (k + 1) / 20).
        consumed, abandoned = f["episodes/consumed_step"][:], f["episodes/abandoned"][:]
        groups, zero_var = f["steps/groups"][:], f["steps/zero_variance_groups"][:]
        for i, step in enumerate(f["steps/step"][:]):
            ids = f["episodes/group"][:][consumed == step]
            if groups[i] != len(set(ids.tolist())) or not 0 <= zero_var[i] <= groups[i]:
                failures.append(f"steps/groups {groups[i]} (zero variance {zero_var[i]}) at step {step}: "
                                f"its episodes have {len(set(ids.tolist()))} groups")
            if f["steps/abandoned"][i] != abandoned[consumed == step].sum():
                failures.append(f"steps/abandoned at step {step} does not count its abandoned episodes")
        # The commit record's last row names every table's rows (a closed file).
        sizes = [len(f["tokens"]), len(f["calls/token_offset"]), len(f["episodes/n_calls"]), len(f["steps/step"])]
        if len(f["flushes"]) == 0 or f["flushes"][-1].tolist() != sizes:
            failures.append(f"flushes[-1] {f['flushes'][-1:].tolist()} does not name the tables' rows {sizes}")
        if (f["steps/dropped_groups"][:] != 0).any() or (f["steps/masked_groups"][:] != 0).any():
            failures.append("one process has no staleness cap: dropped and masked groups must be 0")
        norm, lr = f["steps/grad_norm"][:], f["steps/lr"][:]
        expected = 0.001 * (np.cumsum(norm > 0)) / 20
        if not np.allclose(np.where(norm > 0, lr, 0), np.where(norm > 0, expected, 0), rtol=1e-6) or \
                (lr[norm == 0] != 0).any() or ((norm > 0) != (zero_var < groups)).any():
            failures.append(f"steps/lr {lr} does not follow the warm-up of the steps taken (grad_norm {norm})")
    return failures


def check_tools(build_dir, path, tmp):
    failures = []
    forge = os.path.join(build_dir, "forge")
    with h5py.File(path, "r", swmr=True) as f:
        n_episodes, n_steps = len(f["episodes/n_calls"]), len(f["steps/step"])
    out = subprocess.run([forge, "inspect", path, "--json"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return [f"forge inspect failed: {out.stderr}"]
    summary = json.loads(out.stdout)
    if summary["episodes"] != n_episodes or summary["steps"] != n_steps:
        failures.append(f"forge inspect counts {summary['episodes']}/{summary['steps']}")
    out = subprocess.run([forge, "export", path, "--format", "csv"], capture_output=True, text=True, timeout=120)
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    if out.returncode != 0 or len(rows) != n_episodes:
        failures.append(f"forge export: rc {out.returncode}, {len(rows)} rows: {out.stderr}")
    out = subprocess.run([forge, "export", path, "--format", "jsonl", "--episode", "0", "--decode"],
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    if out.returncode != 0 or not lines or not all(json.loads(line)["call"] >= 0 for line in lines):
        failures.append(f"forge export --decode: rc {out.returncode}, {len(lines)} lines: {out.stderr}")
    # Values, not only counts: the steps table and one episode's tokens read
    # back exactly as h5py reads them (six digits once rounded logprobs).
    with h5py.File(path, "r", swmr=True) as f:
        steps = {k: f["steps/" + k][:] for k in f["steps"].keys() if f["steps/" + k].ndim == 1}
        first, n_calls = f["episodes/call_offset"][0], f["episodes/n_calls"][0]
        off, ctx, gen = (f["calls/" + k][first:first + n_calls] for k in ("token_offset", "context_len", "generated_len"))
        logprobs = np.concatenate([f["logprobs"][o + c:o + c + g] for o, c, g in zip(off, ctx, gen)])
    out = subprocess.run([forge, "export", path, "--steps", "--format", "jsonl"], capture_output=True, text=True,
                         timeout=120)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    if out.returncode != 0 or len(rows) != n_steps:
        failures.append(f"forge export --steps: rc {out.returncode}, {len(rows)} rows: {out.stderr}")
    for key, column in steps.items():
        got = [r[key] for r in rows]
        want = [None if isinstance(v, float) and np.isnan(v) else v.item() for v in column]
        if got != want:
            failures.append(f"forge export --steps: {key} {got[:3]}..., the file {want[:3]}...")
    out = subprocess.run([forge, "export", path, "--episode", "0"], capture_output=True, text=True, timeout=120)
    exported = [float(r["logprob"]) for r in csv.DictReader(io.StringIO(out.stdout)) if r["loss_mask"] == "1"]
    if not np.array_equal(np.asarray(exported, dtype=np.float32), logprobs):
        failures.append("forge export --episode 0: logprobs do not read back as stored")
    # Text that is not UTF-8, and NUL (a byte-level model can generate
    # both): CSV stays UTF-8 with one row per call (NUL once cut a row).
    mangled = os.path.join(tmp, "mangled.h5")
    shutil.copy(path, mangled)
    with h5py.File(mangled, "r+") as f:
        tokens = f["tokens"]
        call = int(np.argmax(gen > 1))
        at = off[call] + ctx[call]
        tokens[at], tokens[at + 1] = 0, 0xFF
    out = subprocess.run([forge, "export", mangled, "--episode", "0", "--decode", "--format", "csv"],
                         capture_output=True, timeout=120)
    try:
        rows = list(csv.DictReader(io.StringIO(out.stdout.decode("utf-8"))))
        ok = out.returncode == 0 and len(rows) == n_calls and "\ufffd\ufffd" in rows[call]["generated"]
    except (UnicodeDecodeError, csv.Error) as e:
        ok = False
    if not ok:
        failures.append(f"forge export --decode CSV of NUL and a non-UTF-8 byte: rc {out.returncode}")
    # A token id no tokenizer has: exit 2 naming the file, episode and call
    # (it said only "token id -7 out of range").
    with h5py.File(mangled, "r+") as f:
        f["tokens"][at] = -7
    out = subprocess.run([forge, "export", mangled, "--episode", "0", "--decode"], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 2 or f"'{mangled}', episode 0, call {call}: token id -7" not in out.stderr:
        failures.append(f"forge export --decode of token id -7: rc {out.returncode}: {out.stderr[-300:]}")
    plots = os.path.join(tmp, "plots")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "plot_rollouts.py"), path, "--out", plots],
                         capture_output=True, text=True, timeout=300)
    pngs = sorted(p for p in os.listdir(plots) if p.endswith(".png")) if os.path.isdir(plots) else []
    if out.returncode != 0 or len(pngs) < 4:
        failures.append(f"plot_rollouts.py: rc {out.returncode}, {pngs}: {out.stderr}")
    # A file that is not HDF5 is bad input: exit 2, named, no output folder.
    bad = os.path.join(tmp, "not.h5")
    with open(bad, "w") as f:
        f.write("not hdf5")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "plot_rollouts.py"), bad, "--out",
                          os.path.join(tmp, "bad_plots")], capture_output=True, text=True, timeout=120)
    if out.returncode != 2 or "not an HDF5 file" not in out.stderr or os.path.exists(os.path.join(tmp, "bad_plots")):
        failures.append(f"plot_rollouts.py on a non-HDF5 file: rc {out.returncode}: {out.stderr}")
    # A file that says it is a rollout file but lacks its tables, and one of
    # a newer schema: exit 2, named, in both tools (not a traceback).
    empty, newer = os.path.join(tmp, "empty.h5"), os.path.join(tmp, "newer.h5")
    for name, version in ((empty, 4), (newer, 99)):
        with h5py.File(name, "w") as f:
            f.attrs["format"] = np.bytes_("forge-rollouts")
            f.attrs["schema_version"] = np.int64(version)
    for name, expect in ((empty, "damaged"), (newer, "schema version 99")):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "plot_rollouts.py"), name, "--out",
                              os.path.join(tmp, "bad_plots")], capture_output=True, text=True, timeout=120)
        if out.returncode != 2 or expect not in out.stderr:
            failures.append(f"plot_rollouts.py on {os.path.basename(name)}: rc {out.returncode}: {out.stderr}")
    for name in (empty, bad, newer):
        out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import demo_summary; "
                              "demo_summary.rollout_stats(sys.argv[2])", os.path.join(ROOT, "tools"), name],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 2 or "not a forge rollout file" not in out.stderr:
            failures.append(f"demo_summary.py on {os.path.basename(name)}: rc {out.returncode}: {out.stderr}")
    # Episode rows past the commit record (extended, never written: they
    # read as step 0, success 0) are not episodes to either tool.
    grown = os.path.join(tmp, "grown.h5")
    shutil.copy(path, grown)
    with h5py.File(grown, "r+") as f:
        for name in f["episodes"]:
            d = f["episodes/" + name]
            d.resize(d.shape[0] + 8, axis=0)
    counts = []
    for name in (path, grown):
        out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import demo_summary; "
                              "print(demo_summary.rollout_stats(sys.argv[2])['episodes'])", os.path.join(ROOT, "tools"),
                              name], capture_output=True, text=True, timeout=120)
        counts.append(out.stdout.strip() if out.returncode == 0 else out.stderr)
    if counts[0] != counts[1]:
        failures.append(f"demo_summary.py counts {counts[1]} episodes in a file grown past its record, {counts[0]} before")
    # A file without a record (schema 4) whose killed writer extended calls
    # and episodes by rows never written (zeros): they end at the first row
    # that does not follow, in both tools as in forge inspect.
    legacy = os.path.join(tmp, "legacy.h5")
    shutil.copy(path, legacy)
    with h5py.File(legacy, "r+") as f:
        del f["flushes"]
        f.attrs["schema_version"] = np.int64(4)
        for table in ("calls", "episodes"):
            for name in f[table]:
                d = f[table + "/" + name]
                d.resize(d.shape[0] + 3, axis=0)
                d[-3:] = 0
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import demo_summary; "
                          "print(demo_summary.rollout_stats(sys.argv[2])['episodes'])", os.path.join(ROOT, "tools"),
                          legacy], capture_output=True, text=True, timeout=120)
    if out.returncode != 0 or out.stdout.strip() != counts[0]:
        failures.append(f"demo_summary.py counts {out.stdout.strip() or out.stderr} episodes in a schema 4 file with "
                        f"3 unwritten rows, {counts[0]} in the file")
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import plot_rollouts  # noqa: E402
    for name in (path, legacy):
        e, _, _ = plot_rollouts.load(name)
        if str(len(e["turns"])) != counts[0]:
            failures.append(f"plot_rollouts.load reads {len(e['turns'])} episodes of {os.path.basename(name)}, "
                            f"{counts[0]} in the file")
    # A damaged staleness (2^31 - 1) asked plot_rollouts for 2^31 histogram bins.
    stale = os.path.join(tmp, "stale.h5")
    shutil.copy(path, stale)
    with h5py.File(stale, "r+") as f:
        f["episodes/staleness"][0] = 2**31 - 1
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "plot_rollouts.py"), stale, "--out",
                          os.path.join(tmp, "stale_plots")], capture_output=True, text=True, timeout=120)
    if out.returncode != 2 or "is damaged: episode 0 has staleness 2147483647" not in out.stderr:
        failures.append(f"plot_rollouts.py on a damaged staleness: rc {out.returncode}: {out.stderr[-300:]}")
    return failures


def check_damaged_cut_chunk(build_dir, tmp):
    """A resume that would cut inside a damaged chunk of `tokens` is refused
    with exit 2 and leaves the file as it was (the cut decompressed it after
    the record of the cut was written: exit 1, the file changed)."""
    forge = os.path.join(build_dir, "forge")
    run_dir = os.path.join(tmp, "damaged")
    cmd = [forge, "train", "--model.d_model=32", "--model.n_layers=1", "--model.n_heads=2", "--model.n_kv_heads=2",
           "--model.ffn_dim=64", "--train.steps=4", "--run.checkpoint_every=2", "--train.tasks=2",
           "--train.group=2", "--train.eval_tasks=1", "--agent.max_turns=3", "--agent.max_new_tokens=16",
           "--run.dir=" + run_dir]
    env = dict(os.environ, OMP_NUM_THREADS="2")
    subprocess.run(cmd, check=True, timeout=300, capture_output=True, env=env)
    os.remove(os.path.join(run_dir, "checkpoints", "ckpt_step_00000004.h5"))  # resume at step 2: a cut
    path = os.path.join(run_dir, "rollouts.h5")
    with h5py.File(path, "r") as f:
        rows, chunk = len(f["tokens"]), f["tokens"].chunks[0]
        # the chunk holding the last row steps 0-1 keep (the cut point)
        kept = int(f["calls/token_offset"][f["episodes/call_offset"][
            int(np.searchsorted(f["episodes/consumed_step"][:], 2))]]) if rows else 0
        info = f["tokens"].id.get_chunk_info_by_coord((kept - kept % chunk,))
    if kept % chunk == 0 or kept >= rows:
        return [f"damaged-chunk case: the cut at row {kept} of {rows} is not inside a chunk of {chunk}"]
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        b = fh.read(1)
        fh.seek(info.byte_offset + info.size // 2)
        fh.write(bytes([b[0] ^ 0xFF]))
    before = open(path, "rb").read()
    out = subprocess.run(cmd + ["--resume"], timeout=300, capture_output=True, text=True, env=env)
    failures = []
    if out.returncode != 2 or "which the resume cuts, cannot be read" not in out.stderr:
        failures.append(f"resume over a damaged cut chunk: rc {out.returncode}: {out.stderr[-400:]}")
    if open(path, "rb").read() != before:
        failures.append("resume over a damaged cut chunk changed rollouts.h5")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    forge = os.path.join(args.build_dir, "forge")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        path = os.path.join(run_dir, "rollouts.h5")
        subprocess.run([forge, "train", "--model.d_model=32", "--model.n_layers=1", "--model.n_heads=2",
                        "--model.n_kv_heads=2", "--model.ffn_dim=64", "--train.steps=3", "--train.tasks=2",
                        "--train.group=2", "--train.eval_tasks=1", "--agent.max_turns=3",
                        "--agent.max_new_tokens=16", "--run.dir=" + run_dir],
                       check=True, timeout=300, capture_output=True,
                       env=dict(os.environ, OMP_NUM_THREADS="2"))
        failures = check_schema(path) + check_consistency(path) + check_tools(args.build_dir, path, tmp)
        failures += check_damaged_cut_chunk(args.build_dir, tmp)
    for msg in failures:
        print("FAIL:", msg)
    print("hdf5 schema:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
