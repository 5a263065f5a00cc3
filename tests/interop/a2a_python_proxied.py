"""Drives a door behind a reverse proxy with the JSON-RPC client of PyPI
a2a-sdk, unmodified: the client knows only the proxy's URL.

Usage: a2a_python_proxied.py DOOR_URL PUBLIC_URL

The door runs with `--public-url PUBLIC_URL`, an http URL on 127.0.0.1 whose
path is the prefix the proxy serves the door under. This script runs that
proxy: it forwards a request under the prefix to the door, the prefix cut,
and answers 404 to anything else, so a client that called the door's own
address, or the proxy without the prefix, would fail. The client resolves
the card through the proxy with A2ACardResolver, checks the card names the
public URL, is built from it by ClientFactory, sends a held message and
reads the task back with GetTask; every JSON-RPC call must have gone
through the proxy, to the public URL's path.

Prints each step; on any mismatch prints MISMATCH and exits 1.
"""

import asyncio
import http.client
import sys
import threading
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState

# Not forwarded: they describe one hop, not the request.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"}


class Mismatch(Exception):
    pass


def expect(condition, what):
    if not condition:
        raise Mismatch(what)


def proxy(door, prefix, seen):
    """A reverse proxy for the door under `prefix`, on a free port of
    127.0.0.1 chosen by the caller; `seen` collects (method, path) of every
    request it receives."""

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def forward(self):
            seen.append((self.command, self.path))
            if not (self.path == prefix or self.path.startswith(prefix + "/")):
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            path = self.path[len(prefix):] or "/"
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            upstream = http.client.HTTPConnection(door.hostname, door.port, timeout=30)
            upstream.request(self.command, path, body=body, headers=headers)
            answer = upstream.getresponse()
            payload = answer.read()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            upstream.close()

        do_GET = forward
        do_POST = forward
        do_HEAD = forward

    return Forward


async def run(door_url, public_url):
    door = urllib.parse.urlsplit(door_url)
    public = urllib.parse.urlsplit(public_url)
    expect(public.hostname == "127.0.0.1" and public.path, "PUBLIC_URL must be http://127.0.0.1:PORT/PREFIX")
    seen = []
    server = ThreadingHTTPServer(("127.0.0.1", public.port), proxy(door, public.path, seen))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            card = await A2ACardResolver(http, public_url).get_agent_card()
            urls = [i.url for i in card.supported_interfaces]
            expect(urls == [public_url], "the card through the proxy names %s, not [%s]" % (urls, public_url))
            print("card through the proxy: %s, interfaces %s" % (card.name, urls))
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
            message = Message(
                message_id="msg-py-%s" % uuid.uuid4().hex,
                role=Role.ROLE_USER,
                parts=[Part(text="reply through the proxy")],
            )
            events = [e async for e in client.send_message(SendMessageRequest(message=message))]
            expect(len(events) == 1 and events[0].HasField("task"), "send_message answered %s" % events)
            task = events[0].task
            expect(
                task.status.state == TaskState.TASK_STATE_COMPLETED,
                "the held task is %s" % TaskState.Name(task.status.state),
            )
            print("SendMessage through the proxy: task %s completed" % task.id)
            got = await client.get_task(GetTaskRequest(id=task.id))
            expect(got.id == task.id, "GetTask answered task %s, not %s" % (got.id, task.id))
            print("GetTask through the proxy: %s" % TaskState.Name(got.status.state))
    finally:
        server.shutdown()
    posts = [path for method, path in seen if method == "POST"]
    expect(posts == [public.path, public.path], "the JSON-RPC calls reached the proxy as %s" % posts)
    expect(
        ("GET", public.path + "/.well-known/agent-card.json") in seen,
        "the card was not resolved through the proxy: %s" % seen,
    )
    print("every call went through the proxy: %s" % seen)


def main(argv):
    if len(argv) != 2:
        print("usage: a2a_python_proxied.py DOOR_URL PUBLIC_URL", file=sys.stderr)
        return 2
    try:
        asyncio.run(asyncio.wait_for(run(*argv), timeout=60))
    except Mismatch as e:
        print("MISMATCH: %s" % e, file=sys.stderr)
        return 1
    except Exception as e:
        traceback.print_exc()
        print("MISMATCH: unexpected %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    print("ok: a2a-sdk reached the door through the proxy its card names")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
