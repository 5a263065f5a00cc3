"""An echo agent on PyPI a2a-sdk: its DefaultRequestHandler and
InMemoryTaskStore behind its JSON-RPC route on `/` and its card route, served
by uvicorn in one process (the in-memory store is per process). A message's
task goes working, gets one artifact echoing the message's text, and
completes with an agent message holding the same text.

Usage: python echo.py. Listens on 127.0.0.1 on a free port and prints
`listening on http://ADDR` once connections can queue.
"""

import socket

import uvicorn
from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    TaskState,
)
from starlette.applications import Starlette


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        if context.current_task is None:
            await event_queue.enqueue_event(
                new_task(
                    context.task_id,
                    context.context_id,
                    TaskState.TASK_STATE_SUBMITTED,
                    history=[context.message],
                )
            )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        await updater.add_artifact([new_text_part(text)], name="response", last_chunk=True)
        await updater.complete(updater.new_agent_message([new_text_part(text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def main() -> None:
    # IPPROTO_TCP named, as `uvicorn --port` gets it from getaddrinfo: asyncio
    # sets TCP_NODELAY only on sockets that name it, and without it the
    # answers wait on delayed ACKs (40 ms each).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)  # uvicorn's backlog; connections wait from here on
    url = "http://127.0.0.1:%d" % sock.getsockname()[1]
    card = AgentCard(
        name="echo",
        description="Echoes the text of each message",
        version="0.1.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="echo",
                name="Echo",
                description="Echoes the text of each message",
                tags=["echo"],
            )
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(
        routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/")
    )
    print("listening on " + url, flush=True)
    # Access logs off: the door and the other peers log nothing per request.
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
