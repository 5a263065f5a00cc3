"""Drives a door with the JSON-RPC client of PyPI a2a-sdk, unmodified.

Usage: a2a_python_client.py DOOR_URL

The door must be fresh, public, lifecycle.task_acceptance: single, running
the script agent. The client resolves the card with A2ACardResolver, is built
from it by ClientFactory (JSON-RPC, not streaming), and then, as a user of the
SDK would: sends a held message, sends one with returnImmediately and polls
GetTask, answers a task that asks for input, lists tasks (all, by context, by
state, page by page), cancels a working task, cancels it again and reads a
task that does not exist.

Every JSON-RPC exchange is also checked on the wire, through httpx event
hooks on the client's own httpx client: the request carries A2A-Version: 1.0
and a v1.0 method name, the response echoes the request's id, and every
result parses strictly (ignore_unknown_fields=False) as the lf.a2a.v1 message
the method answers.

Prints each step; on any mismatch prints MISMATCH and exits 1.
"""

import asyncio
import json
import sys
import time
import traceback
import uuid

import httpx
from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SendMessageResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    TaskNotCancelableError,
    TaskNotFoundError,
)

# What each method's result must parse as.
RESULT_TYPES = {
    "SendMessage": SendMessageResponse,
    "GetTask": Task,
    "ListTasks": ListTasksResponse,
    "CancelTask": Task,
}

NEVER_HELD = "tsk_0000000000000000000000000000dead"
CONTEXT = "ctx-python-interop"


class Mismatch(Exception):
    pass


def expect(condition, what):
    if not condition:
        raise Mismatch(what)


def state(task):
    return TaskState.Name(task.status.state)


def artifacts(task):
    """[(artifactId, [texts])] of a task."""
    return [(a.artifact_id, [p.text for p in a.parts]) for a in task.artifacts]


def show(task):
    return json.dumps(json_format.MessageToDict(task), sort_keys=True)


class Wire:
    """httpx event hooks that check and remember every JSON-RPC exchange."""

    def __init__(self):
        self.exchanges = []  # (method, request body, response body)

    async def on_response(self, response):
        request = response.request
        if request.method != "POST":
            return
        await response.aread()
        sent = json.loads(request.content)
        method = sent.get("method")
        expect(
            request.headers.get("A2A-Version") == "1.0",
            "%s went without A2A-Version: 1.0 (headers %s)" % (method, dict(request.headers)),
        )
        expect(method in RESULT_TYPES, "the client sent an unexpected method %r" % method)
        expect(
            response.status_code == 200,
            "%s answered HTTP %d: %s" % (method, response.status_code, response.text),
        )
        answer = response.json()
        expect(answer.get("jsonrpc") == "2.0", "%s: not JSON-RPC 2.0: %s" % (method, answer))
        expect(
            answer.get("id") == sent.get("id"),
            "%s: response id %r is not the request's %r" % (method, answer.get("id"), sent.get("id")),
        )
        if "result" in answer:
            kind = RESULT_TYPES[method]
            try:
                json_format.ParseDict(answer["result"], kind(), ignore_unknown_fields=False)
            except json_format.ParseError as e:
                raise Mismatch(
                    "%s result does not parse strictly as %s: %s\n%s"
                    % (method, kind.DESCRIPTOR.full_name, e, json.dumps(answer["result"]))
                )
        self.exchanges.append((method, sent, answer))

    def last(self):
        return self.exchanges[-1]


def user_message(text, task_id="", context_id=""):
    return Message(
        message_id="msg-py-%s" % uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


async def send(client, message, return_immediately=False):
    """The one task a non-streaming send_message yields."""
    request = SendMessageRequest(message=message)
    if return_immediately:
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    events = [event async for event in client.send_message(request)]
    expect(len(events) == 1, "send_message yielded %d events, not 1: %s" % (len(events), events))
    expect(events[0].HasField("task"), "send_message answered no task: %s" % events[0])
    return events[0].task


async def poll(client, task_id, done, seen):
    """GetTask until done(state) holds, for at most 20 s; records each state seen."""
    deadline = time.monotonic() + 20
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if not seen or seen[-1] != state(task):
            seen.append(state(task))
        if done(state(task)):
            return task
        expect(time.monotonic() < deadline, "task %s stayed %s" % (task_id, state(task)))
        await asyncio.sleep(0.02)


async def expect_error(call, error_type, code, data, what):
    try:
        result = await call
    except A2AError as e:
        expect(
            type(e) is error_type,
            "%s raised %s(%r), not %s" % (what, type(e).__name__, e, error_type.__name__),
        )
        expect(
            JSON_RPC_ERROR_CODE_MAP[type(e)] == code,
            "%s: %s maps to %d" % (what, type(e).__name__, JSON_RPC_ERROR_CODE_MAP[type(e)]),
        )
        expect(e.data == data, "%s: error data %r, expected %r" % (what, e.data, data))
        return e
    raise Mismatch("%s was served: %s" % (what, result))


async def run(url):
    wire = Wire()
    async with httpx.AsyncClient(
        timeout=30, event_hooks={"response": [wire.on_response]}
    ) as http:
        # The card, by the SDK's resolver; the client, by its factory.
        card = await A2ACardResolver(http, url).get_agent_card()
        expect(isinstance(card, AgentCard), "the resolver answered %r" % card)
        interfaces = [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces]
        expect(
            interfaces == [(url, "JSONRPC", "1.0")],
            "card.supportedInterfaces is %s, not [(%s, JSONRPC, 1.0)]" % (interfaces, url),
        )
        print("card: %s %s, interfaces %s" % (card.name, card.version, interfaces))
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        print("client: %s from ClientFactory, JSON-RPC, streaming off" % type(client).__name__)

        # A held SendMessage: answered once the task completes.
        held = await send(client, user_message("reply four"))
        expect(held.id.startswith("tsk_"), "task id %r" % held.id)
        expect(held.context_id.startswith("ctx_"), "context id %r" % held.context_id)
        expect(state(held) == "TASK_STATE_COMPLETED", "held send answered %s" % show(held))
        expect(artifacts(held) == [("response", ["four"])], "held send artifacts %s" % show(held))
        expect(held.status.timestamp.seconds > 0, "no status.timestamp: %s" % show(held))
        # The reference's example: a completed task's status says so.
        said = held.status.message
        expect(said.message_id == "msg_%s_status" % held.id and said.task_id == held.id
               and said.context_id == held.context_id and Role.Name(said.role) == "ROLE_AGENT"
               and [p.text for p in said.parts] == ["task completed"],
               "status.message %s" % show(held))
        print("SendMessage held: %s %s %r, response %r" % (held.id, state(held), "task completed", "four"))

        # GetTask answers the task exactly as SendMessage did.
        got = await client.get_task(GetTaskRequest(id=held.id))
        expect(got == held, "GetTask %s\n  differs from SendMessage's %s" % (show(got), show(held)))
        print("GetTask: %s %s, same task as SendMessage answered" % (got.id, state(got)))

        # returnImmediately: SUBMITTED at once, then polled to completion.
        quick = await send(
            client, user_message("sleep 300\nreply five", context_id=CONTEXT), return_immediately=True
        )
        expect(state(quick) == "TASK_STATE_SUBMITTED", "returnImmediately answered %s" % show(quick))
        expect(quick.context_id == CONTEXT, "the context named was not kept: %s" % show(quick))
        expect(not quick.artifacts, "a submitted task has artifacts: %s" % show(quick))
        sent = wire.last()[1]["params"]
        expect(
            sent.get("configuration") == {"returnImmediately": True},
            "the client sent configuration %r" % sent.get("configuration"),
        )
        seen = []
        polled = await poll(client, quick.id, lambda s: s == "TASK_STATE_COMPLETED", seen)
        expect(artifacts(polled) == [("response", ["five"])], "polled task %s" % show(polled))
        print("SendMessage returnImmediately: %s SUBMITTED; GetTask polled %s" % (quick.id, " -> ".join(seen)))

        # A task that asks, answered by a message naming it.
        asking = await send(client, user_message("ask Which branch?"))
        expect(state(asking) == "TASK_STATE_INPUT_REQUIRED", "ask answered %s" % show(asking))
        expect(artifacts(asking) == [("prompt", ["Which branch?"])], "ask artifacts %s" % show(asking))
        answered = await send(
            client, user_message("reply main", task_id=asking.id, context_id=asking.context_id)
        )
        expect(answered.id == asking.id, "the reply answered another task: %s" % show(answered))
        expect(state(answered) == "TASK_STATE_COMPLETED", "the reply answered %s" % show(answered))
        expect(artifacts(answered) == [("response", ["main"])], "reply artifacts %s" % show(answered))
        print("SendMessage ask: %s INPUT_REQUIRED %r; reply naming it: COMPLETED %r" % (asking.id, "Which branch?", "main"))

        # ListTasks: every task, most recently changed first, no artifacts.
        order = [asking.id, quick.id, held.id]
        listed = await client.list_tasks(ListTasksRequest())
        expect(wire.last()[1]["params"] == {}, "ListTasks sent %r" % wire.last()[1]["params"])
        expect([t.id for t in listed.tasks] == order, "ListTasks order %s, expected %s" % ([t.id for t in listed.tasks], order))
        expect((listed.total_size, listed.page_size, listed.next_page_token) == (3, 50, ""), "ListTasks page %s" % listed)
        expect(all(not t.artifacts for t in listed.tasks), "ListTasks without includeArtifacts has artifacts")
        print("ListTasks: %d tasks, most recent first" % listed.total_size)

        by_context = await client.list_tasks(ListTasksRequest(context_id=CONTEXT))
        expect([t.id for t in by_context.tasks] == [quick.id], "ListTasks contextId: %s" % by_context)
        waiting = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_INPUT_REQUIRED))
        expect((list(waiting.tasks), waiting.total_size) == ([], 0), "ListTasks INPUT_REQUIRED: %s" % waiting)
        print("ListTasks contextId %s: 1 task; status TASK_STATE_INPUT_REQUIRED: none" % CONTEXT)

        first = await client.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=2, include_artifacts=True)
        )
        expect(wire.last()[1]["params"] == {"status": "TASK_STATE_COMPLETED", "pageSize": 2, "includeArtifacts": True},
               "ListTasks sent %r" % wire.last()[1]["params"])
        expect([t.id for t in first.tasks] == order[:2], "page 1: %s" % [t.id for t in first.tasks])
        expect((first.total_size, first.page_size) == (3, 2) and first.next_page_token, "page 1: %s" % first)
        expect(artifacts(first.tasks[0]) == [("response", ["main"])], "includeArtifacts: %s" % show(first.tasks[0]))
        second = await client.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=2, page_token=first.next_page_token)
        )
        expect([t.id for t in second.tasks] == order[2:], "page 2: %s" % [t.id for t in second.tasks])
        expect(second.next_page_token == "", "page 2 is not the last: %s" % second)
        print("ListTasks status TASK_STATE_COMPLETED pageSize 2: pages of 2 and 1, with artifacts on request")

        # CancelTask on a working task, then again on the canceled one.
        sleeper = await send(client, user_message("sleep 10000"), return_immediately=True)
        expect(state(sleeper) == "TASK_STATE_SUBMITTED", "sleep answered %s" % show(sleeper))
        await poll(client, sleeper.id, lambda s: s == "TASK_STATE_WORKING", [])
        canceled = await client.cancel_task(CancelTaskRequest(id=sleeper.id))
        expect(canceled.id == sleeper.id, "CancelTask answered another task: %s" % show(canceled))
        expect(state(canceled) == "TASK_STATE_CANCELED", "CancelTask answered %s" % show(canceled))
        after = await client.get_task(GetTaskRequest(id=sleeper.id))
        expect(state(after) == "TASK_STATE_CANCELED", "GetTask after CancelTask: %s" % show(after))
        print("CancelTask: %s WORKING -> %s" % (sleeper.id, state(canceled)))

        error = await expect_error(
            client.cancel_task(CancelTaskRequest(id=sleeper.id)),
            TaskNotCancelableError,
            -32002,
            {"taskId": sleeper.id, "state": "TASK_STATE_CANCELED"},
            "CancelTask of a canceled task",
        )
        wire_error = wire.last()[2]["error"]
        expect(wire_error["code"] == -32002, "the wire said %s" % wire_error)
        print("CancelTask again: %s -32002 %r, data %s" % (type(error).__name__, error.message, error.data))

        error = await expect_error(
            client.get_task(GetTaskRequest(id=NEVER_HELD)),
            TaskNotFoundError,
            -32001,
            {"taskId": NEVER_HELD},
            "GetTask of a task never held",
        )
        print("GetTask never held: %s -32001 %r" % (type(error).__name__, error.message))

        last = await client.list_tasks(ListTasksRequest())
        expect([t.id for t in last.tasks][:1] == [sleeper.id] and last.total_size == 4, "ListTasks at the end: %s" % last)
        await client.close()
        print("wire: %d JSON-RPC exchanges, each with A2A-Version: 1.0, its id echoed, every result strict lf.a2a.v1"
              % len(wire.exchanges))


def run_script(run, argv, usage, ok):
    """Runs `run(url)` for at most 60 s: 0 and `ok` when it passes, 1 and a
    MISMATCH line when it does not, 2 on a wrong command line."""
    if len(argv) != 1:
        print("usage: %s DOOR_URL" % usage, file=sys.stderr)
        return 2
    try:
        asyncio.run(asyncio.wait_for(run(argv[0]), timeout=60))
    except Mismatch as e:
        print("MISMATCH: %s" % e, file=sys.stderr)
        return 1
    except asyncio.TimeoutError:
        print("MISMATCH: the run took over 60 s", file=sys.stderr)
        return 1
    except Exception as e:  # an SDK error the run did not expect
        traceback.print_exc()
        print("MISMATCH: unexpected %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    print(ok)
    return 0


def main(argv):
    return run_script(run, argv, "a2a_python_client.py", "ok: a2a-sdk drove the door")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
