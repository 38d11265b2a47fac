#!/usr/bin/env python3
"""Drives a live gateway through its protocol and its errors (used by
test_gateway_http.sh; the run has one group of 2 episodes and
gateway.max_request_kib = 16):

  episode A  three chat calls: plain, streamed (SSE), and through the root
             /v1/chat/completions with the episode's key; tool results and
             user turns between them; answer, reward, close; logged to --log
             (episode, call, token ids, logprobs) for check_agent_tokens.py
  episode B  a /v1/completions call (token ids in), then closed as abandoned
  errors     401 (no token, wrong token, another episode's key), 400
             (malformed JSON, missing or bad fields, n > 1), 404 (unknown
             episode), 409 (after close), 413 (oversized body); after each,
             episode A goes on working
"""
import argparse
import json
import re
import sys
import urllib.error
import urllib.request

import openai

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def http(url, path, body=None, token=None, raw=None, method=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + path, data=data, headers=headers,
                                 method=method or ("POST" if data is not None else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def expect_error(status, body, code, words, what):
    msg = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
    check(status == code and words.lower() in msg.lower(), f"{what}: expected {code} '{words}', got {status} {body}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--log", required=True)
    a = p.parse_args()
    url, token = a.url, a.token
    log = open(a.log, "w")

    s, b = http(url, "/v1/models")
    expect_error(s, b, 401, "missing", "models without a token")
    s, b = http(url, "/v1/models", token="wrong-token-123")
    expect_error(s, b, 401, "token", "models with a wrong token")
    s, b = http(url, "/v1/models", token=token)
    check(s == 200 and b["data"][0]["id"] == "forge-policy", f"models: {s} {b}")
    s, b = http(url, "/v1/episodes", {}, token="wrong-token-123")
    expect_error(s, b, 401, "gateway token", "open with a wrong token")
    s, b = http(url, "/v1/episodes", raw=b"{not json", token=token)
    expect_error(s, b, 400, "malformed JSON", "open with malformed JSON")

    s, A = http(url, "/v1/episodes", {}, token=token)
    check(s == 200 and A["base_url"].endswith(f"/episodes/{A['id']}/v1"), f"open A: {s} {A}")
    s, B = http(url, "/v1/episodes", {}, token=token)
    check(s == 200 and B["id"] != A["id"], f"open B: {s} {B}")
    chat_path = f"/episodes/{A['id']}/v1/chat/completions"
    messages = list(A["task"]["messages"])

    # Errors on episode A's routes, none of which may disturb it.
    s, b = http(url, chat_path, {"messages": messages}, token=B["api_key"])
    expect_error(s, b, 401, "does not open", "A's chat with B's key")
    s, b = http(url, chat_path, raw=b'{"messages": [', token=A["api_key"])
    expect_error(s, b, 400, "malformed JSON", "chat with malformed JSON")
    s, b = http(url, chat_path, {"model": "forge-policy"}, token=A["api_key"])
    expect_error(s, b, 400, "messages", "chat without messages")
    s, b = http(url, chat_path, {"messages": messages, "n": 2}, token=A["api_key"])
    expect_error(s, b, 400, "n = 1", "chat with n = 2")
    s, b = http(url, chat_path, {"messages": [{"role": "wizard", "content": "x"}]}, token=A["api_key"])
    expect_error(s, b, 400, "messages[0]", "chat with a bad role")
    s, b = http(url, chat_path, {"messages": messages, "pad": "x" * 20000}, token=A["api_key"])
    check(s == 413 and "too large" in b.get("error", {}).get("message", ""), f"oversized body: {s} {b}")
    s, b = http(url, "/episodes/987654/v1/chat/completions", {"messages": messages}, token=token)
    expect_error(s, b, 404, "no open episode", "chat on an unknown episode")
    s, b = http(url, "/v1/chat/completions", {"messages": messages}, token=token)
    expect_error(s, b, 400, "which episode", "root chat with the gateway token")
    # A prompt past the context, as OpenAI codes it (clients shorten their history on it).
    s, b = http(url, chat_path, {"messages": messages + [{"role": "user", "content": "x" * 8000}]},
                token=A["api_key"])
    expect_error(s, b, 400, "maximum context length", "chat past the context")
    check(b.get("error", {}).get("code") == "context_length_exceeded", f"context error's code: {b}")

    def logged(reply_forge, call):
        log.write(json.dumps({"episode": A["id"], "call": call, "token_ids": reply_forge["token_ids"],
                              "logprobs": reply_forge["logprobs"]}) + "\n")

    def next_turn(message):
        messages.append(message)
        if message.get("tool_calls"):
            c = message["tool_calls"][0]
            s, r = http(url, f"/v1/episodes/{A['id']}/tool",
                        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}, token=A["api_key"])
            check(s == 200 and "content" in r, f"tool: {s} {r}")
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": r.get("content", "")})
        else:
            messages.append({"role": "user", "content": "Go on."})

    client = openai.OpenAI(base_url=A["base_url"], api_key=A["api_key"], max_retries=0)
    r = client.chat.completions.create(model="forge-policy", messages=messages, tools=A["task"]["tools"], logprobs=True)
    fr = r.model_extra["forge"]
    check(fr["call_index"] == 0 and len(r.choices[0].logprobs.content) == len(fr["token_ids"]), "call 0 logprobs")
    check([e.logprob for e in r.choices[0].logprobs.content] == fr["logprobs"], "call 0 logprobs are the recorded ones")
    # The message is what the recorded tokens say: the tool call's input or
    # the content appears in their text (as written, or JSON-escaped).
    said = b"".join(bytes(e.bytes) for e in r.choices[0].logprobs.content).decode("utf-8", errors="replace")
    m0 = r.choices[0].message
    shown = json.loads(m0.tool_calls[0].function.arguments)["input"] if m0.tool_calls else m0.content
    if isinstance(shown, str):  # invalid UTF-8 runs become one U+FFFD on both sides
        said, shown = re.sub("\ufffd+", "\ufffd", said), re.sub("\ufffd+", "\ufffd", shown)
        check(shown in said or json.dumps(shown, ensure_ascii=False)[1:-1] in said,
              f"call 0's message {shown!r} is not in its tokens {said!r}")
    logged(fr, 0)
    next_turn(r.choices[0].message.model_dump(exclude_none=True))

    # Streamed: assemble the message from the chunks.
    content, calls, forge, finish, streamed_logprobs = "", {}, None, None, []
    for chunk in client.chat.completions.create(model="forge-policy", messages=messages, stream=True, logprobs=True):
        d = chunk.choices[0].delta
        if chunk.choices[0].logprobs is not None:
            streamed_logprobs += chunk.choices[0].logprobs.content or []
        content += d.content or ""
        for c in d.tool_calls or []:
            calls[c.index] = {"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": c.function.arguments}}
        finish = chunk.choices[0].finish_reason or finish
        forge = (chunk.model_extra or {}).get("forge", forge)
    check(forge is not None and forge["call_index"] == 1 and finish is not None, "streamed reply")
    check([e.logprob for e in streamed_logprobs] == forge["logprobs"], "streamed reply's logprobs")
    logged(forge, 1)
    message = {"role": "assistant"}
    if calls:
        message["tool_calls"] = [calls[k] for k in sorted(calls)]
    else:
        message["content"] = content
    next_turn(message)

    # The root endpoint, the episode named by its key.
    root = openai.OpenAI(base_url=url + "/v1", api_key=A["api_key"], max_retries=0)
    check(root.models.retrieve("forge-policy").id == "forge-policy", "models.retrieve")
    r = root.chat.completions.create(model="forge-policy", messages=messages)
    check(r.model_extra["forge"]["episode_id"] == A["id"] and r.model_extra["forge"]["call_index"] == 2, "root chat")
    logged(r.model_extra["forge"], 2)

    s, d = http(url, f"/v1/episodes/{A['id']}", token=A["api_key"])
    check(s == 200 and len(d["calls"]) == 3, f"describe A: {s}")
    check(all(d["calls"][k + 1]["prompt_token_ids"][:len(d["calls"][k]["prompt_token_ids"]) + len(d["calls"][k]["token_ids"])]
              == d["calls"][k]["prompt_token_ids"] + d["calls"][k]["token_ids"] for k in range(2)),
          "A's calls extend each other")

    # Episode B: a completion from token ids, then abandoned by the agent.
    s, c = http(url, f"/episodes/{B['id']}/v1/completions", {"prompt": [257, 259, 104, 105], "max_tokens": 4,
                                                             "logprobs": 1}, token=B["api_key"])
    check(s == 200 and 1 <= len(c["forge"]["token_ids"]) <= 4 and c["object"] == "text_completion", f"completion: {s} {c}")
    check(c["choices"][0]["logprobs"]["token_logprobs"] == c["forge"]["logprobs"], f"completion logprobs: {c}")
    check(not c["choices"][0]["text"].endswith("<|eot|>"), f"completion text without the stop token: {c}")
    s, c = http(url, f"/episodes/{B['id']}/v1/completions", {"prompt": [257, 104], "max_tokens": 2, "logprobs": False},
                token=B["api_key"])
    check(s == 200 and c["choices"][0]["logprobs"] is None, f"completion with logprobs false: {s} {c}")
    s, c = http(url, f"/episodes/{B['id']}/v1/completions", {"prompt": [257], "logprobs": "yes"}, token=B["api_key"])
    expect_error(s, c, 400, "logprobs", "completion with logprobs of a string")
    s, c = http(url, f"/episodes/{B['id']}/v1/completions", {"prompt": [9999]}, token=B["api_key"])
    expect_error(s, c, 400, "token ids", "completion with a bad token id")
    s, c = http(url, f"/v1/episodes/{B['id']}/close", {"abandon": True}, token=B["api_key"])
    check(s == 200 and c["status"] == "abandoned", f"abandon B: {s} {c}")

    s, r = http(url, f"/v1/episodes/{A['id']}/answer", {"answer": "42"}, token=A["api_key"])
    check(s == 200 and "outcome" in r, f"answer: {s} {r}")
    s, r = http(url, f"/v1/episodes/{A['id']}/answer", {"answer": "43"}, token=A["api_key"])
    expect_error(s, r, 409, "already answered", "second answer")
    s, r = http(url, f"/v1/episodes/{A['id']}/reward", {"outcome": "high"}, token=A["api_key"])
    expect_error(s, r, 400, "finite number", "bad reward")
    s, r = http(url, f"/v1/episodes/{A['id']}/reward", {"outcome": 1e39}, token=A["api_key"])
    expect_error(s, r, 400, "finite number", "a reward beyond float range")
    s, r = http(url, f"/v1/episodes/{A['id']}/reward", {"outcome": 1.0, "process": 0.5}, token=A["api_key"])
    check(s == 200, f"reward: {s} {r}")
    s, r = http(url, f"/v1/episodes/{A['id']}/close", {}, token=token)
    check(s == 200 and r["status"] == "closed" and r["calls"] == 3, f"close: {s} {r}")
    s, r = http(url, chat_path, {"messages": messages}, token=token)
    expect_error(s, r, 409, "closed", "chat after close")
    s, r = http(url, f"/v1/episodes/{A['id']}/tool", {"name": "calc", "arguments": "{\"input\": \"1+1\"}"}, token=token)
    expect_error(s, r, 409, "closed", "tool after close")
    s, r = http(url, "/v1/chat/completions", {"messages": messages}, token=A["api_key"])
    expect_error(s, r, 409, "closed", "the root endpoint with a closed episode's key")
    s, r = http(url, f"/v1/episodes/{A['id']}/close", {}, token=A["api_key"])
    expect_error(s, r, 409, "closed", "close again with the episode's key")
    s, r = http(url, "/episodes/7x/v1/chat/completions", {"messages": messages}, token=token)
    expect_error(s, r, 404, "no episode", "a malformed episode id")
    print(f"protocol checks: {'ok' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
