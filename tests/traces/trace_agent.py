"""A JSON-lines agent (--agent-stdio) for tests/traces.rs: answers each task
with the `traceparent` its task line carried ("" for none)."""
import json
import sys

for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("type") == "task":
        reply = {"task": msg["task"], "reply": msg.get("traceparent", "")}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    elif msg.get("type") == "stop":
        break
