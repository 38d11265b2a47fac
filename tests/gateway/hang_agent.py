#!/usr/bin/env python3
"""An agent that opens an episode, makes one chat call, says so, then hangs
(test_gateway_kill.sh kills it there)."""
import json
import sys
import time
import urllib.request

import openai

url, token = sys.argv[1], sys.argv[2]
req = urllib.request.Request(url + "/v1/episodes", data=b"{}", method="POST",
                             headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=120) as r:
    ep = json.load(r)
client = openai.OpenAI(base_url=ep["base_url"], api_key=ep["api_key"], max_retries=0)
client.chat.completions.create(model="forge-policy", messages=ep["task"]["messages"])
print(f"episode {ep['id']} made a call", flush=True)
time.sleep(3600)
