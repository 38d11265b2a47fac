#!/usr/bin/env python3
"""A black-box agent: solves forge tasks through forge's OpenAI-compatible
gateway with the official `openai` client, knowing nothing of forge but the
gateway URL, its token and the episode endpoints.

Per episode:
  POST {gateway}/v1/episodes                 -> id, base_url, api_key, task (messages, tools)
  chat.completions.create(base_url, api_key)  the policy's reply: a tool call or an answer
  POST {gateway}/v1/episodes/{id}/tool        runs a tool call in forge's environment
  POST {gateway}/v1/episodes/{id}/answer      checks the final answer -> outcome
  POST {gateway}/v1/episodes/{id}/reward      the reward components this agent assigns
  POST {gateway}/v1/episodes/{id}/close

It keeps opening episodes until --episodes are done or the gateway says the
run has finished (HTTP 410, or its connection refused or reset as it shuts down); while the data pool is
full (503) it retries. A generation that failed (503) or timed out (504) is
retried; an episode that answers 409 to a call, a tool run or an answer
(its share of the slot is full, or the gateway closed it) is closed as
abandoned, and the agent goes on with the next. --log writes one JSON line per policy call: the
text the agent saw and the token ids the gateway reports for it.

  python3 examples/gateway_agent/agent.py --gateway runs/gw/gateway/0.json --token "$FORGE_GATEWAY_TOKEN"
"""
import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import openai


def gateway_url(spec, seconds):
    """A URL, or the JSON file a gateway rank writes ({"url": ...}) once it
    listens (waited for up to `seconds`)."""
    if spec.startswith("http://") or spec.startswith("https://"):
        return spec.rstrip("/")
    deadline = time.time() + seconds
    while not os.path.exists(spec):
        if time.time() > deadline:
            sys.exit(f"agent: no gateway file {spec} after {seconds} s")
        time.sleep(0.5)
    with open(spec) as f:
        return json.load(f)["url"]


class RunFinished(Exception):
    pass


class EpisodeGone(Exception):
    """The gateway closed the episode (e.g. idle past its deadline)."""


class Gateway:
    """The episode endpoints (plain HTTP + JSON)."""

    def __init__(self, url, token):
        self.url, self.token = url, token

    def post(self, path, body=None, key=None):
        # 503: no episode admitted yet (the data pool is full: retried until
        # the run ends), or for an answer the verifier could not run (retried
        # for five minutes, then an error: it may stay down).
        give_up = None if path == "/v1/episodes" else time.time() + 300
        while True:
            req = urllib.request.Request(self.url + path, data=json.dumps(body or {}).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {key or self.token}",
                                                  "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    return json.load(r)
            except urllib.error.HTTPError as e:
                message = json.load(e).get("error", {}).get("message", str(e))
                if e.code == 503 and (give_up is None or time.time() < give_up):
                    time.sleep(float(e.headers.get("Retry-After", "1")))
                    continue
                if e.code == 410:
                    raise RunFinished(message) from None
                if e.code == 409:
                    raise EpisodeGone(message) from None
                raise RuntimeError(f"POST {path}: HTTP {e.code}: {message}") from None


def wait_for_gateway(url, token, seconds):
    """Polls GET /v1/models until the gateway answers (the run may still be starting)."""
    deadline = time.time() + seconds
    while True:
        req = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=10):
                return
        except urllib.error.HTTPError as e:
            sys.exit(f"agent: the gateway at {url} refused us: HTTP {e.code} {json.load(e)}")
        except urllib.error.URLError as e:
            if time.time() > deadline:
                sys.exit(f"agent: no gateway at {url} after {seconds} s: {e.reason}")
            time.sleep(0.5)


def policy_reply(client, messages, tools, attempts=3):
    """One chat completion; a failed generation (503) or one past the
    gateway's deadline (504) is retried, after Retry-After where given."""
    for attempt in range(attempts):
        try:
            return client.chat.completions.create(model="forge-policy", messages=messages, tools=tools,
                                                  logprobs=True)
        except openai.APIStatusError as e:
            if e.status_code not in (503, 504) or attempt + 1 == attempts:
                raise
            time.sleep(float(e.response.headers.get("Retry-After", "1")))


def abandon(gw, eid, key):
    """Closes an episode that cannot go on (its share of the slot is full, or
    its generations kept failing) as abandoned, so that it leaves training
    now rather than at the idle deadline; one the gateway already closed
    answers 409, which is fine."""
    try:
        gw.post(f"/v1/episodes/{eid}/close", {"abandon": True}, key)
    except EpisodeGone:
        pass


def run_episode(gw, args, log, lock):
    ep = gw.post("/v1/episodes")
    try:
        return play_episode(gw, ep, args, log, lock)
    except (EpisodeGone, openai.ConflictError) as e:
        abandon(gw, ep["id"], ep["api_key"])
        raise EpisodeGone(str(e)) from None
    except openai.APIStatusError as e:
        if e.status_code in (503, 504):  # generations that kept failing: the episode cannot go on
            abandon(gw, ep["id"], ep["api_key"])
        raise


def play_episode(gw, ep, args, log, lock):
    eid, key = ep["id"], ep["api_key"]
    client = openai.OpenAI(base_url=ep["base_url"], api_key=key, max_retries=0, timeout=300)
    messages = list(ep["task"]["messages"])
    tools = ep["task"]["tools"]
    outcome = 0.0
    answer = None
    for turn in range(args.max_turns):
        try:
            reply = policy_reply(client, messages, tools)
        except openai.BadRequestError as e:
            if "context" not in str(e):
                raise
            break  # the conversation outgrew the policy's context: the episode fails
        choice = reply.choices[0]
        msg = choice.message
        messages.append(msg.model_dump(exclude_none=True))
        extra = (reply.model_extra or {}).get("forge", {})
        if log:
            with lock:
                log.write(json.dumps({"episode": eid, "call": extra.get("call_index"), "text": msg.content,
                                      "tool_calls": [c.model_dump() for c in msg.tool_calls or []],
                                      "token_ids": extra.get("token_ids"), "logprobs": extra.get("logprobs")}) + "\n")
                log.flush()
        if msg.tool_calls:
            for call in msg.tool_calls:
                result = gw.post(f"/v1/episodes/{eid}/tool",
                                 {"name": call.function.name, "arguments": call.function.arguments}, key)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result["content"]})
            continue
        answer = msg.content or ""
        break
    if answer is not None:
        outcome = gw.post(f"/v1/episodes/{eid}/answer", {"answer": answer}, key)["outcome"]
    # This agent's reward: the verifier's outcome (0 without an answer); forge
    # computes the rest.
    gw.post(f"/v1/episodes/{eid}/reward", {"outcome": outcome}, key)
    gw.post(f"/v1/episodes/{eid}/close", {}, key)
    return outcome


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gateway", required=True, help="gateway URL, or the gateway/<k>.json file of a run")
    p.add_argument("--token", required=True, help="the gateway's bearer token (gateway.token)")
    p.add_argument("--episodes", type=int, default=0, help="stop after this many (0: until the run finishes)")
    p.add_argument("--parallel", type=int, default=4, help="episodes at once")
    p.add_argument("--max-turns", type=int, default=8)
    p.add_argument("--log", help="JSON lines of every policy call (text and token ids)")
    p.add_argument("--wait", type=float, default=120, help="seconds to wait for the gateway to come up")
    args = p.parse_args()

    url = gateway_url(args.gateway, args.wait)
    wait_for_gateway(url, args.token, args.wait)
    gw = Gateway(url, args.token)
    log = open(args.log, "a") if args.log else None
    lock = threading.Lock()
    stats = {"episodes": 0, "done": 0, "solved": 0}  # started, finished, solved
    failures = []

    def worker():
        while True:
            with lock:
                if args.episodes and stats["episodes"] >= args.episodes:
                    return
                stats["episodes"] += 1
            try:
                outcome = run_episode(gw, args, log, lock)
            except EpisodeGone:
                continue
            except (RunFinished, openai.APIStatusError) as e:
                if isinstance(e, openai.APIStatusError) and e.status_code != 410:
                    with lock:
                        failures.append(repr(e))
                    return
                with lock:
                    stats["episodes"] -= 1
                    stats.setdefault("finished", str(e))
                return
            # the run is gone: refused, or the connection reset while the gateway shut down
            except (urllib.error.URLError, openai.APIConnectionError, ConnectionError):
                with lock:
                    stats["episodes"] -= 1
                return
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    failures.append(repr(e))
                return
            with lock:
                stats["solved"] += outcome >= 1.0
                stats["done"] += 1
                if stats["done"] % 100 == 0:
                    print(f"agent: {stats['done']} episodes finished, {stats['solved']} solved", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(args.parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"agent: {stats['episodes']} episodes, {stats['solved']} solved"
          + (f"; gateway: {stats['finished']}" if "finished" in stats else ""), flush=True)
    if failures:
        print("agent: failed: " + "; ".join(failures[:5]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
