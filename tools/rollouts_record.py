"""The commit record of a rollouts.h5 (schema 5, docs/hdf5-schema.md), read
as forge's RolloutReader reads it, for the tools that read the file with h5py
(plot_rollouts.py, demo_summary.py): only rows a flush completed count.

flushes[k] = (tokens, calls, episodes, steps) rows the k-th flush completed.
A row whose extent was set but whose data did not land reads the fill value,
-1 (skipped), or 0 in files written before that fill value (an all-zero row
after the first, skipped).
"""
import numpy as np


def last_record(dataset):
    """The last row a flush wrote ([0, 0, 0, 0] when none); ValueError for a
    row that counts a negative number of rows (damage)."""
    rows = dataset[:]
    fill = dataset.fillvalue
    for i in range(len(rows) - 1, -1, -1):
        row = rows[i]
        if (row == -1).all() if fill == -1 else (fill == 0 and i > 0 and not row.any()):
            continue
        if (row < 0).any():
            raise ValueError(f"flushes[{i}] counts {row.tolist()} rows: the file is damaged")
        return row
    return np.zeros(4, dtype=np.int64)


def increasing_prefix(steps):
    """Rows of steps/step up to the first that does not increase: a file
    without a record may hold extended rows never written, read as step 0."""
    for i in range(1, len(steps)):
        if steps[i] <= steps[i - 1]:
            return i
    return len(steps)


def whole_prefix(offset, length, limit):
    """Rows that lie back to back from 0 (row i starts where row i - 1 ends)
    inside [0, limit): a file without a record ends its calls and episodes
    at the first row that does not follow (a killed writer's extended rows
    read as offset 0, length 0), as forge's RolloutReader does."""
    offset = np.asarray(offset, dtype=np.int64)
    length = np.asarray(length, dtype=np.int64)
    n = min(len(offset), len(length))
    offset, length = offset[:n], length[:n]
    starts = np.concatenate([[0], np.cumsum(length)[:-1]]) if n else np.zeros(0, dtype=np.int64)
    ok = (offset == starts) & (length >= 0) & (offset + length <= limit)
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else n


def committed(f):
    """(calls, episodes, steps) rows the last flush completed; for a file
    before schema 5 (no record), the calls and episodes that lie back to back
    and the steps that increase."""
    if "flushes" not in f:
        ctx = f["calls/context_len"][:].astype(np.int64)
        gen = f["calls/generated_len"][:].astype(np.int64)
        n = min(len(ctx), len(gen))
        calls = whole_prefix(f["calls/token_offset"][:], ctx[:n] + gen[:n], len(f["tokens"]))
        episodes = whole_prefix(f["episodes/call_offset"][:], f["episodes/n_calls"][:], calls)
        return calls, episodes, increasing_prefix(f["steps/step"][:])
    row = last_record(f["flushes"])
    return int(row[1]), int(row[2]), int(row[3])
