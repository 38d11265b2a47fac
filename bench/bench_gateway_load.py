#!/usr/bin/env python3
"""Load on a live gateway (loopback): opens --episodes episodes, then sends
--requests chat requests at once (spread evenly over the episodes, several
in flight per episode), each with a marker user turn "marker <episode> <k>.",
with the official openai async client. Checks, per request: an answer came
(none lost), its episode and call index are its own, the gateway recorded
exactly the returned tokens for that call, and that call's prompt holds this
request's marker (no tokens mixed between episodes). Closes every episode.
Prints a table, then one JSON line; exit 1 on any failed check.

  python3 bench/bench_gateway_load.py --url http://127.0.0.1:8300 --token "$FORGE_GATEWAY_TOKEN"
"""
import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.error
import urllib.request

import openai


def http(url, path, token, body=None):
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.load(r)
    except urllib.error.HTTPError as err:
        body = err.read().decode(errors="replace")[:300]
        sys.exit(f"bench_gateway_load: {req.get_method()} {url + path}: HTTP {err.code}: {body}")
    except (urllib.error.URLError, OSError) as err:
        sys.exit(f"bench_gateway_load: {req.get_method()} {url + path}: {getattr(err, 'reason', err)} "
                 "(is forge train running with gateway.enabled, and is --url its address?)")


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def one_request(ep, client, k, results):
    messages = list(ep["task"]["messages"]) + [{"role": "user", "content": f"marker {ep['id']} {k}."}]
    t0 = time.perf_counter()
    try:
        r = await client.chat.completions.create(model="forge-policy", messages=messages)
        results.append({"episode": ep["id"], "k": k, "s": time.perf_counter() - t0, "forge": r.model_extra["forge"]})
    except Exception as e:  # noqa: BLE001 - counted as lost
        cause = f" ({e.__cause__!r})" if e.__cause__ else ""
        results.append({"episode": ep["id"], "k": k, "s": time.perf_counter() - t0, "error": repr(e) + cause})


async def fire(episodes, per_episode, results):
    """The requests' wall seconds, from the first sent to the last answered:
    the clients are made before the clock starts (250 of them took 6 s)."""
    clients = [openai.AsyncOpenAI(base_url=ep["base_url"], api_key=ep["api_key"], max_retries=0, timeout=600)
               for ep in episodes]
    t0 = time.perf_counter()
    await asyncio.gather(*[one_request(ep, c, k, results)
                           for ep, c in zip(episodes, clients) for k in range(per_episode)])
    wall = time.perf_counter() - t0
    for c in clients:
        await c.close()
    return wall


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--episodes", type=int, default=250)
    p.add_argument("--requests", type=int, default=1000)
    a = p.parse_args()
    if a.episodes < 1 or a.requests < 0:
        p.error("--episodes must be at least 1 and --requests at least 0")
    per_episode = a.requests // a.episodes
    if per_episode * a.episodes != a.requests:
        p.error("--requests must be a multiple of --episodes")

    t_open = time.perf_counter()
    episodes = [http(a.url, "/v1/episodes", a.token, {}) for _ in range(a.episodes)]
    t_open = time.perf_counter() - t_open
    results = []
    wall = asyncio.run(fire(episodes, per_episode, results))

    errors = [r for r in results if "error" in r]
    problems = [f"{len(errors)} requests failed after {min(r['s'] for r in errors):.2f} to {max(r['s'] for r in errors):.2f} s: {errors[0]['error']}"] if errors else []
    if len(results) != a.requests:
        problems.append(f"{len(results)} answers for {a.requests} requests")
    by_episode = {ep["id"]: http(a.url, f"/v1/episodes/{ep['id']}", ep["api_key"]) for ep in episodes}
    recorded = sum(len(d["calls"]) for d in by_episode.values())
    if recorded != a.requests - len(errors):
        problems.append(f"{recorded} calls recorded for {a.requests - len(errors)} answered requests")
    mixed = 0
    for r in results:
        if "error" in r:
            continue
        f = r["forge"]
        calls = by_episode[r["episode"]]["calls"]
        ok = f["episode_id"] == r["episode"] and 0 <= f["call_index"] < len(calls)
        if ok:
            call = calls[f["call_index"]]
            marker = f"marker {r['episode']} {r['k']}.".encode()  # '.': "1" is not a prefix of "10"
            ok = call["token_ids"] == f["token_ids"] and marker in bytes(t for t in call["prompt_token_ids"] if t < 256)
        mixed += not ok
    if mixed:
        problems.append(f"{mixed} replies not matching their episode's recorded call (mixed tokens)")
    for ep in episodes:
        http(a.url, f"/v1/episodes/{ep['id']}/close", ep["api_key"], {})

    lat = [r["s"] for r in results if "error" not in r] or [0.0]
    tokens = sum(len(r["forge"]["token_ids"]) for r in results if "error" not in r)
    row = {"episodes": a.episodes, "requests": a.requests, "lost": len(errors) + a.requests - len(results),
           "mixed": mixed, "wall_s": round(wall, 3), "req_per_s": round(a.requests / wall, 1),
           "gen_tok_per_s": round(tokens / wall, 1), "open_s": round(t_open, 3),
           "p50_ms": round(1000 * percentile(lat, 50), 1), "p90_ms": round(1000 * percentile(lat, 90), 1),
           "p99_ms": round(1000 * percentile(lat, 99), 1), "max_ms": round(1000 * max(lat), 1),
           "mean_ms": round(1000 * statistics.mean(lat), 1)}
    print(f"{'episodes':>8} {'requests':>8} {'lost':>5} {'mixed':>5} {'wall s':>7} {'req/s':>7} "
          f"{'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    print(f"{row['episodes']:>8} {row['requests']:>8} {row['lost']:>5} {row['mixed']:>5} {row['wall_s']:>7} "
          f"{row['req_per_s']:>7} {row['p50_ms']:>8} {row['p90_ms']:>8} {row['p99_ms']:>8} {row['max_ms']:>8}")
    for prob in problems:
        print("FAIL:", prob, file=sys.stderr)
    print(json.dumps({"bench": "gateway_load", **row, "ok": not problems}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
