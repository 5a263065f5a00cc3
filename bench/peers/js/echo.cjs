// An echo agent on npm @a2a-js/sdk: its DefaultRequestHandler and
// InMemoryTaskStore behind its express JSON-RPC handler on `/` and its card
// handler, in one Node process. A message's task goes working, gets one
// artifact echoing the message's text, and completes with an agent message
// holding the same text.
//
// Usage: node echo.cjs. Listens on 127.0.0.1 on a free port and prints
// `listening on http://ADDR` once it accepts connections.
"use strict";

const { randomUUID } = require("node:crypto");
const express = require("express");
const { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } = require("@a2a-js/sdk/server");
const { agentCardHandler, jsonRpcHandler, UserBuilder } = require("@a2a-js/sdk/server/express");
const { Role, TaskState } = require("@a2a-js/sdk");

const textPart = (text) => ({
  content: { $case: "text", value: text },
  metadata: undefined,
  filename: "",
  mediaType: "text/plain",
});

class Echo {
  async execute(request, bus) {
    const { taskId, contextId } = request;
    const message = request.userMessage;
    const part = message.parts.find((p) => p.content?.$case === "text");
    const text = part ? part.content.value : "";
    const status = (state, reply) =>
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: { state, message: reply, timestamp: new Date().toISOString() },
        metadata: undefined,
      });
    if (!request.task) {
      bus.publish(
        AgentEvent.task({
          id: taskId,
          contextId,
          status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: new Date().toISOString() },
          artifacts: [],
          history: [message],
          metadata: undefined,
        }),
      );
    }
    bus.publish(status(TaskState.TASK_STATE_WORKING, undefined));
    bus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: {
          artifactId: randomUUID(),
          name: "response",
          description: "",
          parts: [textPart(text)],
          metadata: undefined,
          extensions: [],
        },
        append: false,
        lastChunk: true,
        metadata: undefined,
      }),
    );
    const reply = {
      role: Role.ROLE_AGENT,
      messageId: randomUUID(),
      parts: [textPart(text)],
      taskId,
      contextId,
      extensions: [],
      metadata: undefined,
      referenceTaskIds: [],
    };
    bus.publish(status(TaskState.TASK_STATE_COMPLETED, reply));
  }

  async cancelTask() {}
}

const app = express();
const server = app.listen(0, "127.0.0.1", () => {
  const url = `http://127.0.0.1:${server.address().port}`;
  const card = {
    name: "echo",
    description: "Echoes the text of each message",
    supportedInterfaces: [{ url, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" }],
    provider: undefined,
    version: "0.1.0",
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [
      {
        id: "echo",
        name: "Echo",
        description: "Echoes the text of each message",
        tags: ["echo"],
        examples: [],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Echo());
  app.use("/.well-known/agent-card.json", agentCardHandler({ agentCardProvider: handler }));
  app.use("/", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  console.log(`listening on ${url}`);
});
