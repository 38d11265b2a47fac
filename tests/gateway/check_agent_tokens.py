#!/usr/bin/env python3
"""Checks that the episodes in a rollouts.h5 hold exactly the tokens an agent
saw: each call's generated tokens and behaviour logprobs equal those the
gateway returned (the agent's --log), each call's context extends the
previous call's context + generated tokens, and episodes share an advantage
group exactly when they share a task (a gateway once put every episode in
group 0).

  check_agent_tokens.py ROLLOUTS.h5 CALLS.jsonl [--episodes N] [--abandoned K]
"""
import argparse
import json
import sys

import h5py
import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("rollouts")
    p.add_argument("calls")
    p.add_argument("--episodes", type=int, help="episodes the file must hold")
    p.add_argument("--abandoned", type=int, default=0, help="abandoned episodes it must hold")
    a = p.parse_args()
    seen = {}
    with open(a.calls) as f:
        for line in f:
            c = json.loads(line)
            seen[(c["episode"], c["call"])] = c
    errors = []
    with h5py.File(a.rollouts, "r") as f:
        tokens, logprobs = f["tokens"][:], f["logprobs"][:]
        offset, ctx, gen = f["calls/token_offset"][:], f["calls/context_len"][:], f["calls/generated_len"][:]
        ids, first, n_calls = f["episodes/episode_id"][:], f["episodes/call_offset"][:], f["episodes/n_calls"][:]
        abandoned = f["episodes/abandoned"][:]
        task, group = f["episodes/task_id"][:], f["episodes/group"][:]
    if a.episodes is not None and len(ids) != a.episodes:
        errors.append(f"{len(ids)} episodes in the file, expected {a.episodes}")
    if int(abandoned.sum()) != a.abandoned:
        errors.append(f"{int(abandoned.sum())} abandoned episodes, expected {a.abandoned}")
    group_of_task, task_of_group = {}, {}
    for t, g in zip(map(int, task), map(int, group)):
        if group_of_task.setdefault(t, g) != g or task_of_group.setdefault(g, t) != t:
            errors.append(f"task {t} and group {g}: a task's episodes must form one group of their own")
            break
    logged_calls = {}
    for (episode, _call) in seen:
        logged_calls[episode] = logged_calls.get(episode, 0) + 1
    checked = 0
    for e in range(len(ids)):
        if abandoned[e]:
            continue
        if logged_calls.get(int(ids[e]), 0) != n_calls[e]:
            errors.append(f"episode {int(ids[e])}: {n_calls[e]} calls trained, "
                          f"{logged_calls.get(int(ids[e]), 0)} returned to the agent")
        previous = None
        for k in range(n_calls[e]):
            c = first[e] + k
            o, lc, lg = offset[c], ctx[c], gen[c]
            context, generated = tokens[o:o + lc], tokens[o + lc:o + lc + lg]
            key = (int(ids[e]), k)
            if key not in seen:
                errors.append(f"episode {key[0]} call {k} trained but never returned to the agent")
                continue
            want = seen[key]
            if list(map(int, generated)) != want["token_ids"]:
                errors.append(f"episode {key[0]} call {k}: trained tokens differ from the returned ones")
            if not np.array_equal(logprobs[o + lc:o + lc + lg], np.float32(want["logprobs"])):
                errors.append(f"episode {key[0]} call {k}: behaviour logprobs differ")
            if previous is not None and not np.array_equal(context[:len(previous)], previous):
                errors.append(f"episode {key[0]} call {k}: context does not extend the previous call")
            previous = np.concatenate([context, generated])
            checked += 1
    if checked == 0:
        errors.append("no call checked")
    for e in errors[:20]:
        print("FAIL:", e, file=sys.stderr)
    print(f"checked {checked} calls of {len(ids)} episodes: {'ok' if not errors else f'{len(errors)} errors'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
