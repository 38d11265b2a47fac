#!/usr/bin/env python3
"""Opens EPISODES episodes and sends REQUESTS chat requests among them at
once; prints the status counts and exits 1 unless every request got 200.

  burst_client.py URL TOKEN EPISODES REQUESTS
"""
import collections
import http.client
import json
import sys
import threading
import urllib.parse


def call(url, method, path, body, token):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    c.request(method, path, body=json.dumps(body), headers={"Authorization": "Bearer " + token,
                                                              "Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read().decode(errors="replace")


def main():
    url, token, n_episodes, n_requests = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    episodes = []
    for _ in range(n_episodes):
        status, body = call(url, "POST", "/v1/episodes", {}, token)
        if status != 200:
            print(f"opening an episode: {status} {body[:200]}")
            return 1
        episodes.append(json.loads(body))
    counts = collections.Counter()
    lock = threading.Lock()

    def one(i):
        e = episodes[i % len(episodes)]
        try:
            status, body = call(url, "POST", f"/episodes/{e['id']}/v1/chat/completions",
                                {"messages": e["task"]["messages"]}, e["api_key"])
            key = status if status == 200 else f"{status} {body[:120]}"
        except Exception as ex:  # a connection the gateway dropped
            key = repr(ex)[:120]
        with lock:
            counts[key] += 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n_requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in episodes:
        call(url, "POST", f"/v1/episodes/{e['id']}/close", {}, e["api_key"])
    print(dict(counts))
    return 0 if counts == {200: n_requests} else 1


if __name__ == "__main__":
    sys.exit(main())
