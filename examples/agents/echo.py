#!/usr/bin/env python3
"""Echo agent for murmur-door.

Default (`serve --agent-stdio "python3 examples/agents/echo.py"`): one
long-lived process reads JSON lines on stdin and answers each
`{"type":"task","task":ID,...,"text":TEXT}` with `{"task":ID,"reply":TEXT}`;
other line types are ignored; `{"type":"stop"}` or EOF exits 0.

`--once` (`serve --agent-cmd "python3 examples/agents/echo.py --once"`): one
process per task, copying stdin (the task's text) to stdout unchanged.
"""

import json
import sys

MAX_LINE = 1 << 20  # bytes a line the host takes, its newline included

def once():
    sys.stdout.buffer.write(sys.stdin.buffer.read())
    sys.stdout.buffer.flush()


def encode(obj):
    try:
        return (DUMPS(obj) + "\n").encode()
    except UnicodeEncodeError:  # a lone surrogate: escape it instead
        return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def stdio():
    read = sys.stdin.buffer.readline
    out = sys.stdout.buffer
    loads = json.loads
    while True:
        line = read()
        if not line:
            return
        try:
            msg = loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        kind = msg.get("type")
        if kind == "task":
            task = msg.get("task")
            answer = encode({"task": task, "reply": msg.get("text", "")})
            if len(answer) > MAX_LINE:
                answer = encode({"task": task, "fail": "reply longer than a line may be"})
            out.write(answer)
            out.flush()
        elif kind == "stop":
            return


if __name__ == "__main__":
    if sys.argv[1:] == ["--once"]:
        once()
    else:
        stdio()
