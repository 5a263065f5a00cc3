#!/usr/bin/env python3
"""Showcase agent for `murmur-door serve --agent-stdio`: every line kind.

One process serves every task of its session, several at once: it reads the
host's JSON lines on stdin and keeps each task's state by its id. The first
word of a task's text picks what it does (the rest of the text is not used,
so a caller's text never reaches `detach`):

  frames     a text, thinking, tool-call-started, tool-call-progress,
             artifact, quota and suggested-prompt frame, a progress line,
             then replies "frames done"
  ask        asks "Which branch?" and replies with the input it gets
  images     replies "images: N (TYPE, ...)" once each image's path exists
  fail       fails with "it broke"
  no-answer  names the members that gave no answer, then ends without one
  detach     detaches `sleep 300` and stays working until cancelled
  delegate   delegates to child 1.0.0, awaits it and replies with its answer
  wait       stays working until cancelled
  cancelled  replies with the ids of the tasks cancelled so far, in order
  pid        replies with this process's pid
  crash      exits at once with status 3
  garbage    writes lines the host must drop, then replies "garbage sent"
  (other)    replies with the whole text

A cancel forgets the task; `{"type":"stop"}` or the end of stdin exits 0.
"""

import json
import os
import secrets
import sys

MAX_LINE = 1 << 20  # bytes a line, its newline included

DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
OUT = sys.stdout.buffer

tasks = {}  # task id -> what it waits for: {"kind": ..., ...}
requests = {}  # detach/delegate request id -> task id
cancelled = []  # ids of the cancelled tasks, in arrival order
next_request = 0


def encode(obj):
    try:
        return (DUMPS(obj) + "\n").encode()
    except UnicodeEncodeError:  # a lone surrogate: escape it instead
        return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def raw(line):
    OUT.write(line.encode() + b"\n")
    OUT.flush()


def send(task, **fields):
    line = encode({"task": task, **fields})
    if len(line) > MAX_LINE:
        line = encode({"task": task, "fail": f"answer too long: {len(line)} bytes a line"})
    OUT.write(line)
    OUT.flush()


def request(task, kind, **fields):
    global next_request
    next_request += 1
    requests[next_request] = task
    tasks[task] = {"kind": kind, "request": next_request}
    send(task, **fields, id=next_request)


def start(msg):
    task = msg["task"]
    text = msg.get("text") or ""
    lines = text.split("\n", 1)
    words = lines[0].split(None, 1)
    word = words[0] if words else ""
    print(f"showcase: task {task}: {word or '(empty)'}", file=sys.stderr, flush=True)
    tasks.pop(task, None)
    if word == "frames":
        for kind, body in (
            ("text", {"text": "hello"}),
            ("thinking", {"text": "pondering"}),
            ("tool-call-started", {"toolCallId": "call_1", "name": "search", "input": {"q": "door"}}),
            ("tool-call-progress", {"toolCallId": "call_1", "text": "half way"}),
            ("artifact", {"name": "notes.md", "text": "# notes"}),
            ("quota", {"used": 1, "limit": 10}),
            ("suggested-prompt", {"text": "and then?"}),
        ):
            send(task, frame=kind, body=body)
        send(task, progress="frames written")
        send(task, reply="frames done")
    elif word == "ask":
        tasks[task] = {"kind": "ask"}
        send(task, ask="Which branch?")
    elif word == "images":
        images = msg.get("images") or []
        for image in images:
            path = image.get("path", "")
            if not os.path.exists(path):
                send(task, fail=f"missing image {path}")
                return
        types = ", ".join(str(image.get("mediaType", "")) for image in images)
        send(task, reply=f"images: {len(images)} ({types})")
    elif word == "fail":
        send(task, fail="it broke")
    elif word == "no-answer":
        below = [{"member": "mapper", "status": "timeout"}]
        send(task, noAnswerFrom={"member": "scout", "status": "failed", "below": below})
        send(task, noAnswer="no member answered")
    elif word == "detach":
        request(task, "detach", detach="sleep 300")
    elif word == "delegate":
        child = {
            "capsule": "child",
            "version": "1.0.0",
            "sessionId": "ses_" + secrets.token_hex(16),
            "workdir": "/tmp/murmur-children/child-1",
        }
        request(task, "delegate", delegate=child)
    elif word == "wait":
        tasks[task] = {"kind": "wait"}
    elif word == "cancelled":
        send(task, reply=",".join(cancelled))
    elif word == "pid":
        send(task, reply=str(os.getpid()))
    elif word == "crash":
        sys.stdout.flush()
        os._exit(3)
    elif word == "garbage":
        raw("not json")
        raw("[1,2]")
        raw('{"task":"tsk_nobody","reply":"x"}')
        send(task, reply="garbage sent")
    else:
        send(task, reply=text)


def result(msg):
    task = requests.pop(msg.get("id"), None)
    state = tasks.get(task)
    if state is None or state.get("request") != msg.get("id"):
        return  # cancelled meanwhile, or not ours
    if "error" in msg:
        del tasks[task]
        send(task, fail=f"{state['kind']}: {msg['error']}")
    elif state["kind"] == "detach":
        tasks[task] = {"kind": "wait"}
        send(task, progress=f"detached {msg.get('workId')}")
    else:
        delegation = msg.get("delegationId")
        tasks[task] = {"kind": "await", "delegation": delegation}
        send(task, **{"await": delegation})
        send(task, progress=f"awaiting {delegation}")


def completion(msg):
    task = msg["task"]
    state = tasks.get(task)
    delegation = msg.get("delegation")
    if state is None or state["kind"] != "await" or state["delegation"] != delegation:
        return
    del tasks[task]
    send(task, delegationEnded=delegation)
    send(task, reply=f"child said: {msg.get('text') or ''}")


def answer(msg):
    task = msg["task"]
    if tasks.get(task, {}).get("kind") != "ask":
        return
    del tasks[task]
    images = msg.get("images") or []
    send(task, reply=f"you said: {msg.get('text') or ''} ({len(images)} images)")


def cancel(msg):
    task = msg["task"]
    if task not in cancelled:
        cancelled.append(task)
    state = tasks.pop(task, None)
    if state and "request" in state:
        requests.pop(state["request"], None)


HANDLERS = {
    "task": start,
    "input": answer,
    "completion": completion,
    "cancel": cancel,
}


def main():
    for line in iter(sys.stdin.buffer.readline, b""):
        try:
            msg = json.loads(line)
        except ValueError:
            print("showcase: dropped a line that is not JSON", file=sys.stderr, flush=True)
            continue
        if not isinstance(msg, dict):
            continue
        kind = msg.get("type")
        if kind == "stop":
            return
        try:
            if kind == "result":
                result(msg)
            elif kind in HANDLERS and isinstance(msg.get("task"), str):
                HANDLERS[kind](msg)
        except (AttributeError, KeyError, TypeError) as e:
            print(f"showcase: dropped a malformed {kind} line: {e!r}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the host went away
        os._exit(0)
