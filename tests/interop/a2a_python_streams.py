"""Follows a door's streams with the JSON-RPC client of PyPI a2a-sdk, unmodified.

Usage: a2a_python_streams.py DOOR_URL

The door must be fresh, public, lifecycle.task_acceptance: single, running
the script agent. The client resolves the card with A2ACardResolver, and
ClientFactory builds two clients from it over one httpx client: a streaming
one (ClientConfig(streaming=True)), whose send_message is
SendStreamingMessage and whose subscribe is SubscribeToTask, and a
non-streaming one for SendMessage with returnImmediately. Then, as a user of
the SDK would:

1. send_message streaming `progress step one` then `reply done`: the task
   (TASK_STATE_SUBMITTED), then its status and artifact updates, the progress
   status (TASK_STATE_WORKING, message "step one") among them, the response
   artifact and last TASK_STATE_COMPLETED; the stream ends there.
2. SendMessage `sleep 1500` then `reply later` with returnImmediately, and
   subscribe to it: the task as GetTask answers it, then its later events
   through the response artifact and TASK_STATE_COMPLETED, arriving live
   (the opening well before the end).
3. send_message streaming `ask Which branch?`: the turn ends at
   TASK_STATE_INPUT_REQUIRED after the prompt artifact
   (guest/src/methods/streams.rs: a SendStreamingMessage turn ends at the
   pause). A subscription opened on the waiting task stays open; the streaming
   reply naming the task opens with the task in TASK_STATE_WORKING and streams
   through the response artifact and TASK_STATE_COMPLETED; the subscription
   carries the same numbered events and ends there too.
4. The refusals a stream answers as one JSON body, raised by the client as
   its A2A errors: subscribe to an ended task (-32004, taskId and state),
   to a task never held (-32001), and a streaming reply naming an ended task
   (-32004).

Every stream is also checked on the wire, through an httpx response hook
that tees the body the client reads: the request carries A2A-Version: 1.0,
the head is 200, content-type: text/event-stream, cache-control: no-cache and
no content-length, every SSE event's data is one JSON-RPC 2.0 response
echoing the request id whose result parses strictly
(ignore_unknown_fields=False) as lf.a2a.v1.StreamResponse and equals what the
client yielded, the opening task is unnumbered and every later event has an
increasing `id:`, and the door closed the stream after its last event.

Prints each step; on any mismatch prints MISMATCH and exits 1.
"""

import asyncio
import json
import sys
import time
import traceback

import httpx
from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    GetTaskRequest,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, TaskNotFoundError, UnsupportedOperationError

from a2a_python_client import Mismatch, expect, run_script, send, show, state, user_message

NEVER_HELD = "tsk_0000000000000000000000000000dead"
STREAMS = ("SendStreamingMessage", "SubscribeToTask")
# What a JSON body answering each method must parse as.
RESULT_TYPES = {"SendMessage": SendMessageResponse, "GetTask": Task}


class Stream:
    """One SSE response as the client read it: its head and its events."""

    def __init__(self, method, sent, response):
        self.method = method
        self.sent = sent
        self.headers = response.headers
        self.events = []  # (event id or None, data as parsed JSON, arrival time)
        self.heartbeats = 0
        self.ended = False
        self._buffer = b""

    def feed(self, chunk):
        self._buffer += chunk
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            event_id, data = None, []
            for line in block.decode("utf-8").split("\n"):
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "":
                    self.heartbeats += 1
                elif field == "id":
                    expect(value.isdigit(), "%s: SSE id %r is not an event id" % (self.method, value))
                    event_id = int(value)
                elif field == "data":
                    data.append(value)
                else:
                    raise Mismatch("%s: unexpected SSE line %r" % (self.method, line))
            if data:
                try:
                    parsed = json.loads("\n".join(data))
                except json.JSONDecodeError as e:
                    raise Mismatch("%s: SSE data is not JSON (%s): %r" % (self.method, e, data))
                self.events.append((event_id, parsed, time.monotonic()))


class Tee(httpx.AsyncByteStream):
    """Passes a response body through to the client, feeding a Stream."""

    def __init__(self, inner, stream):
        self.inner = inner
        self.stream = stream

    async def __aiter__(self):
        async for chunk in self.inner:
            self.stream.feed(chunk)
            yield chunk
        self.stream.ended = True

    async def aclose(self):
        await self.inner.aclose()


class Tap:
    """An httpx response hook: checks every JSON-RPC exchange and tees every stream."""

    def __init__(self):
        self.streams = []
        self.bodies = []  # (method, request body, response body)

    async def on_response(self, response):
        request = response.request
        if request.method != "POST":
            return
        sent = json.loads(request.content)
        method = sent.get("method")
        expect(
            request.headers.get("A2A-Version") == "1.0",
            "%s went without A2A-Version: 1.0 (headers %s)" % (method, dict(request.headers)),
        )
        expect(method in STREAMS or method in RESULT_TYPES, "the client sent an unexpected method %r" % method)
        expect(response.status_code == 200, "%s answered HTTP %d" % (method, response.status_code))
        if response.headers.get("content-type") == "text/event-stream":
            expect(method in STREAMS, "%s answered a stream" % method)
            expect(
                response.headers.get("cache-control") == "no-cache" and "content-length" not in response.headers,
                "%s stream head: %s" % (method, dict(response.headers)),
            )
            stream = Stream(method, sent, response)
            response.stream = Tee(response.stream, stream)
            self.streams.append(stream)
            return
        # A JSON body: a non-streaming method, or a stream's refusal.
        await response.aread()
        expect(
            response.headers.get("content-type") == "application/json",
            "%s answered content-type %r" % (method, response.headers.get("content-type")),
        )
        answer = response.json()
        expect(answer.get("jsonrpc") == "2.0", "%s: not JSON-RPC 2.0: %s" % (method, answer))
        expect(
            answer.get("id") == sent.get("id"),
            "%s: response id %r is not the request's %r" % (method, answer.get("id"), sent.get("id")),
        )
        if method in STREAMS:
            expect("error" in answer, "%s answered a JSON result instead of a stream: %s" % (method, answer))
        elif "result" in answer:
            strict(answer["result"], RESULT_TYPES[method], method)
        self.bodies.append((method, sent, answer))


def strict(result, kind, what):
    try:
        return json_format.ParseDict(result, kind(), ignore_unknown_fields=False)
    except json_format.ParseError as e:
        raise Mismatch(
            "%s does not parse strictly as %s: %s\n%s" % (what, kind.DESCRIPTOR.full_name, e, json.dumps(result))
        )


def kind(event):
    """The StreamResponse member an event carries, with its state or artifact."""
    which = event.WhichOneof("payload")
    if which == "task":
        return "task " + state(event.task)
    if which == "status_update":
        return "status " + state(event.status_update)
    if which == "artifact_update":
        return "artifact " + event.artifact_update.artifact.artifact_id
    return which


def path(events):
    """The states a stream shows, its opening task's first, repeats merged."""
    states = []
    for event in events:
        which = event.WhichOneof("payload")
        if which in ("task", "status_update"):
            current = state(getattr(event, which))
            if not states or states[-1] != current:
                states.append(current)
    return states


async def collect(tap, calls):
    """The events an SDK stream yields until it ends, with the wire stream it read."""
    before = len(tap.streams)
    events = [event async for event in calls]
    expect(len(tap.streams) > before, "the call opened no stream")
    return events, tap.streams[before]


def check_wire(stream, events):
    """The stream on the wire: every event a strict StreamResponse echoing the
    request id, the one the client yielded; the opening unnumbered, the rest
    numbered and increasing; closed by the door after the last."""
    method = stream.method
    expect(stream.ended, "%s: the door did not end the stream" % method)
    expect(
        len(stream.events) == len(events),
        "%s: %d events on the wire, the client yielded %d" % (method, len(stream.events), len(events)),
    )
    ids = []
    for n, ((event_id, data, _), yielded) in enumerate(zip(stream.events, events)):
        expect(data.get("jsonrpc") == "2.0", "%s event %d is not JSON-RPC 2.0: %s" % (method, n, data))
        expect(
            data.get("id") == stream.sent["id"],
            "%s event %d: id %r is not the request's %r" % (method, n, data.get("id"), stream.sent["id"]),
        )
        expect("result" in data, "%s event %d has no result: %s" % (method, n, data))
        parsed = strict(data["result"], StreamResponse, "%s event %d" % (method, n))
        expect(parsed == yielded, "%s event %d: the client yielded %s for %s" % (method, n, show(yielded), data))
        if n == 0:
            expect(event_id is None, "%s: the opening task is numbered %s" % (method, event_id))
        else:
            expect(event_id is not None, "%s event %d (%s) has no id" % (method, n, kind(yielded)))
            ids.append(event_id)
    expect(ids == sorted(set(ids)), "%s: event ids not increasing: %s" % (method, ids))
    return ids


def check_turn(events, opening, states, artifact, text):
    """A task stream: the task first in `opening`, then only updates of that
    task, its states `states`, the last its final status with the artifact
    `artifact` holding `text` just before it and no other artifact."""
    kinds = [kind(e) for e in events]
    expect(kinds and kinds[0] == "task " + opening, "the stream opened with %s" % kinds[:1])
    task = events[0].task
    for event in events[1:]:
        which = event.WhichOneof("payload")
        expect(which in ("status_update", "artifact_update"), "a %s in a task stream: %s" % (which, show(event)))
        update = getattr(event, which)
        expect(
            (update.task_id, update.context_id) == (task.id, task.context_id),
            "an update of another task: %s" % show(event),
        )
    expect(path(events) == states, "the stream went %s, not %s" % (" -> ".join(path(events)), " -> ".join(states)))
    expect(kinds[-1] == "status " + states[-1], "the stream ended with %s" % kinds[-1])
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    expect(
        kinds[-2] == "artifact " + artifact and len(artifacts) == 1,
        "not exactly the %s artifact before the end: %s" % (artifact, kinds),
    )
    texts = [p.text for p in artifacts[0].parts]
    expect(texts == [text], "the %s artifact holds %s, not %r" % (artifact, texts, text))
    stamps = [e.status_update.status.timestamp.ToMilliseconds() for e in events if e.HasField("status_update")]
    expect(all(s > 0 for s in stamps) and stamps == sorted(stamps), "status timestamps %s" % stamps)
    return kinds


async def expect_refusal(call, error_type, code, data, what):
    try:
        events = [event async for event in call]
    except A2AError as e:
        expect(type(e) is error_type, "%s raised %s(%r), not %s" % (what, type(e).__name__, e, error_type.__name__))
        expect(e.data == data, "%s: error data %r, expected %r" % (what, e.data, data))
        return e
    raise Mismatch("%s was streamed: %s" % (what, [kind(e) for e in events]))


async def run(url):
    tap = Tap()
    async with httpx.AsyncClient(timeout=30, event_hooks={"response": [tap.on_response]}) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        expect(card.capabilities.streaming, "card.capabilities.streaming is false")
        factory = ClientFactory(ClientConfig(streaming=True, httpx_client=http))
        streamer = factory.create(card)
        sender = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        print("card: %s %s, capabilities.streaming; clients from ClientFactory, JSON-RPC" % (card.name, card.version))

        # 1. A streaming send, to its end.
        events, stream = await collect(
            tap, streamer.send_message(SendMessageRequest(message=user_message("progress step one\nreply done")))
        )
        expect(stream.method == "SendStreamingMessage", "send_message streaming sent %s" % stream.method)
        expect("A2A-Extensions" not in stream.headers, "A2A-Extensions answered: %s" % dict(stream.headers))
        ids = check_wire(stream, events)
        kinds = check_turn(
            events, "TASK_STATE_SUBMITTED",
            ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], "response", "done",
        )
        task = events[0].task
        expect(task.id.startswith("tsk_") and task.context_id.startswith("ctx_"), "the task %s" % show(task))
        progress = [
            e.status_update.status for e in events
            if e.HasField("status_update") and [p.text for p in e.status_update.status.message.parts] == ["step one"]
        ]
        expect(
            len(progress) == 1 and TaskState.Name(progress[0].state) == "TASK_STATE_WORKING",
            "no single WORKING status saying 'step one': %s" % [show(e) for e in events],
        )
        message = progress[0].message
        expect(
            message.role == Role.ROLE_AGENT and message.message_id and (message.task_id, message.context_id) == (task.id, task.context_id),
            "the progress status message %s" % json_format.MessageToDict(message),
        )
        got = await sender.get_task(GetTaskRequest(id=task.id))
        expect(state(got) == "TASK_STATE_COMPLETED", "GetTask after the stream: %s" % show(got))
        print("SendStreamingMessage: %s, %d events: %s; SSE ids %s" % (task.id, len(events), ", ".join(kinds), ids))

        # 2. returnImmediately, then SubscribeToTask to its end.
        started = time.monotonic()
        quick = await send(sender, user_message("sleep 1500\nreply later"), return_immediately=True)
        expect(state(quick) == "TASK_STATE_SUBMITTED", "returnImmediately answered %s" % show(quick))
        events, stream = await collect(tap, streamer.subscribe(SubscribeToTaskRequest(id=quick.id)))
        expect(stream.method == "SubscribeToTask", "subscribe sent %s" % stream.method)
        expect(stream.sent["params"] == {"id": quick.id}, "subscribe sent params %s" % stream.sent["params"])
        ids = check_wire(stream, events)
        opening = state(events[0].task)
        states = ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
        if opening == "TASK_STATE_SUBMITTED":
            states.insert(0, opening)
        kinds = check_turn(events, opening, states, "response", "later")
        expect(events[0].task.id == quick.id, "subscribed to %s, opened with %s" % (quick.id, show(events[0])))
        live = stream.events[-1][2] - stream.events[0][2]
        expect(live > 0.5, "the whole subscription arrived within %.3f s of its opening" % live)
        print(
            "SubscribeToTask: %s (returnImmediately SUBMITTED), %d events over %.1f s: %s; SSE ids %s"
            % (quick.id, len(events), time.monotonic() - started, ", ".join(kinds), ids)
        )

        # 3. A streaming turn that pauses, a subscription across the pause,
        #    and the streaming reply.
        events, stream = await collect(
            tap, streamer.send_message(SendMessageRequest(message=user_message("ask Which branch?")))
        )
        check_wire(stream, events)
        kinds = check_turn(
            events, "TASK_STATE_SUBMITTED",
            ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"], "prompt", "Which branch?",
        )
        asking = events[0].task
        print("SendStreamingMessage ask: %s, the turn ends at the pause: %s" % (asking.id, ", ".join(kinds)))

        # The subscription runs beside the reply; the reply is sent once its
        # opening task has arrived.
        opened = len(tap.streams)
        subscription = asyncio.ensure_future(collect(tap, streamer.subscribe(SubscribeToTaskRequest(id=asking.id))))
        deadline = time.monotonic() + 10
        while not (len(tap.streams) > opened and tap.streams[opened].events):
            if subscription.done():
                error = subscription.exception()
                raise Mismatch("the subscription to the waiting task ended at once: %s" % (
                    error or [kind(e) for e in subscription.result()[0]]))
            expect(time.monotonic() < deadline, "the subscription to %s did not open" % asking.id)
            await asyncio.sleep(0.01)
        watcher = tap.streams[opened]

        events, replied = await collect(
            tap,
            streamer.send_message(SendMessageRequest(
                message=user_message("reply main", task_id=asking.id, context_id=asking.context_id))),
        )
        reply_ids = check_wire(replied, events)
        kinds = check_turn(events, "TASK_STATE_WORKING", ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], "response", "main")
        expect(events[0].task.id == asking.id, "the reply streamed another task: %s" % show(events[0]))
        print("SendStreamingMessage reply naming %s: %s" % (asking.id, ", ".join(kinds)))

        followed, stream = await asyncio.wait_for(subscription, 10)
        expect(stream is watcher, "the subscription read another stream")
        ids = check_wire(stream, followed)
        opening = followed[0].task
        expect(
            opening.id == asking.id and [(a.artifact_id, [p.text for p in a.parts]) for a in opening.artifacts]
            == [("prompt", ["Which branch?"])],
            "the subscription opened with %s" % show(opening),
        )
        sub_kinds = check_turn(
            followed, "TASK_STATE_INPUT_REQUIRED",
            ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], "response", "main",
        )
        followed_by_id = {i: d["result"] for i, d, _ in stream.events if i is not None}
        replied_by_id = {i: d["result"] for i, d, _ in replied.events if i is not None}
        expect(
            set(reply_ids) <= set(ids) and all(followed_by_id[i] == replied_by_id[i] for i in reply_ids),
            "the reply's events %s are not the subscription's %s" % (reply_ids, ids),
        )
        print("SubscribeToTask across the pause: %s; the reply's events %s among them" % (", ".join(sub_kinds), reply_ids))

        # 4. Refusals, each one JSON body.
        error = await expect_refusal(
            streamer.subscribe(SubscribeToTaskRequest(id=task.id)),
            UnsupportedOperationError, -32004, {"taskId": task.id, "state": "TASK_STATE_COMPLETED"},
            "subscribe to an ended task",
        )
        print("SubscribeToTask ended task: %s -32004 %r" % (type(error).__name__, error.message))
        error = await expect_refusal(
            streamer.subscribe(SubscribeToTaskRequest(id=NEVER_HELD)),
            TaskNotFoundError, -32001, {"taskId": NEVER_HELD}, "subscribe to a task never held",
        )
        print("SubscribeToTask never held: %s -32001 %r" % (type(error).__name__, error.message))
        error = await expect_refusal(
            streamer.send_message(SendMessageRequest(
                message=user_message("reply again", task_id=task.id, context_id=task.context_id))),
            UnsupportedOperationError, -32004, {"taskId": task.id, "state": "TASK_STATE_COMPLETED"},
            "a streaming reply naming an ended task",
        )
        print("SendStreamingMessage naming an ended task: %s -32004 %r" % (type(error).__name__, error.message))
        expect([m for m, _, _ in tap.bodies[-3:]] == ["SubscribeToTask", "SubscribeToTask", "SendStreamingMessage"],
               "the refusals were not JSON bodies: %s" % [m for m, _, _ in tap.bodies[-3:]])

        await streamer.close()
        await sender.close()
        heartbeats = sum(s.heartbeats for s in tap.streams)
        print(
            "wire: %d streams, %d SSE events, each a strict lf.a2a.v1.StreamResponse echoing its request id; "
            "%d JSON bodies; %d heartbeats"
            % (len(tap.streams), sum(len(s.events) for s in tap.streams), len(tap.bodies), heartbeats)
        )


def main(argv):
    return run_script(run, argv, "a2a_python_streams.py", "ok: a2a-sdk followed the door's streams")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
