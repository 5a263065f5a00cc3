// Follows a door's streams with the JSON-RPC client of npm @a2a-js/sdk, unmodified.
//
// Usage: node a2a_js_streams.cjs DOOR_URL
// (with the package installed: tests/interop.rs runs npm ci into
// target/js-interop and sets NODE_PATH to its node_modules)
//
// The door must be fresh, public, lifecycle.task_acceptance: single, running
// the script agent. The card is resolved with DefaultAgentCardResolver and
// the client built from it by ClientFactory, whose JSON-RPC transport is
// given a fetch that passes every request through unchanged and reads a
// clone of every answer. Then, as a user of the SDK would:
//
// 1. sendMessageStream `progress step one` then `reply done`: the task
//    (TASK_STATE_SUBMITTED), then its status and artifact updates, the
//    progress status (TASK_STATE_WORKING, message "step one") among them, the
//    response artifact and last TASK_STATE_COMPLETED; the stream ends there.
// 2. sendMessage `sleep 1500` then `reply later` with returnImmediately, and
//    resubscribeTask (SubscribeToTask): the task as GetTask answers it, then
//    its later events through the response artifact and
//    TASK_STATE_COMPLETED, arriving live (the opening well before the end).
// 3. sendMessageStream `ask Which branch?`: the turn ends at
//    TASK_STATE_INPUT_REQUIRED after the prompt artifact
//    (guest/src/methods/streams.rs: a SendStreamingMessage turn ends at the
//    pause). A resubscribeTask opened on the waiting task stays open;
//    sendMessageStream of the reply naming the task opens with the task in
//    TASK_STATE_WORKING and streams through the response artifact and
//    TASK_STATE_COMPLETED; the subscription carries the same numbered events
//    and ends there too.
// 4. The refusals a stream answers as one JSON body, thrown by the client as
//    its A2A errors: resubscribeTask of an ended task (-32004, taskId and
//    state), of a task never held (-32001), and sendMessageStream of a reply
//    naming an ended task (-32004).
//
// The SDK's SSE reader itself requires every event to echo the request id.
// Every stream is also checked on the wire: A2A-Version: 1.0 on the request;
// a 200 head with content-type: text/event-stream, cache-control: no-cache
// and no content-length; every event's data one JSON-RPC 2.0 response echoing
// the request id whose result is an lf.a2a.v1 StreamResponse as the SDK's
// generated types know it (StreamResponse.toJSON(fromJSON(result)) gives the
// result back, default values aside, so no field is dropped as unknown) and
// is what the client yielded; the opening task unnumbered and every later
// event with an increasing `id:`; the door closing the stream after its last
// event. Prints each step; on any mismatch prints MISMATCH and exits 1.

"use strict";

const {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} = require("@a2a-js/sdk/client");
const { StreamResponse, taskStateToJSON } = require("@a2a-js/sdk");
const {
  Mismatch,
  expect,
  same,
  state,
  artifacts,
  show,
  userMessage,
  send,
  runScript,
} = require("./a2a_js_client.cjs");

const NEVER_HELD = "tsk_0000000000000000000000000000dead";
const STREAMS = ["SendStreamingMessage", "SubscribeToTask"];

// Every stream as read on the wire, and every JSON body.
const streams = [];
const bodies = [];

// Reads a clone of an SSE body: its events, with their ids and arrival times.
async function readSse(body, stream) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let id = null;
      const data = [];
      for (const line of block.split("\n")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "") stream.heartbeats += 1;
        else if (field === "id") {
          expect(/^\d+$/.test(value), `${stream.method}: SSE id ${value} is not an event id`);
          id = Number(value);
        } else if (field === "data") data.push(value);
        else throw new Mismatch(`${stream.method}: unexpected SSE line ${show(line)}`);
      }
      if (data.length) stream.events.push({ id, data: JSON.parse(data.join("\n")), at: Date.now() });
    }
  }
  stream.ended = true;
}

async function tapFetch(url, init) {
  const response = await fetch(url, init);
  const sent = JSON.parse(init.body);
  expect(
    init.headers["A2A-Version"] === "1.0",
    `${sent.method} went without A2A-Version: 1.0 (headers ${show(init.headers)})`,
  );
  expect(response.status === 200, `${sent.method} answered HTTP ${response.status}`);
  const type = response.headers.get("content-type");
  if (type === "text/event-stream") {
    expect(STREAMS.includes(sent.method), `${sent.method} answered a stream`);
    expect(
      response.headers.get("cache-control") === "no-cache" && !response.headers.has("content-length"),
      `${sent.method} stream head: ${show([...response.headers])}`,
    );
    const stream = { method: sent.method, sent, headers: response.headers, events: [], heartbeats: 0, ended: false };
    // Settles with the stream; a mismatch found while reading is kept for checkWire.
    stream.read = readSse(response.clone().body, stream).then(
      () => null,
      (e) => e,
    );
    streams.push(stream);
    return response;
  }
  // A JSON body: a non-streaming method, or a stream's refusal.
  expect(type === "application/json", `${sent.method} answered content-type ${type}`);
  const answer = await response.clone().json();
  expect(answer.jsonrpc === "2.0", `${sent.method}: not JSON-RPC 2.0: ${show(answer)}`);
  expect(answer.id === sent.id, `${sent.method}: response id ${answer.id} is not the request's ${sent.id}`);
  if (STREAMS.includes(sent.method)) {
    expect("error" in answer, `${sent.method} answered a JSON result instead of a stream: ${show(answer)}`);
  }
  bodies.push({ method: sent.method, sent, answer });
  return response;
}

// The StreamResponse member an event carries, with its state or artifact.
function kind(event) {
  const { $case, value } = event.payload ?? {};
  if ($case === "task") return `task ${state(value)}`;
  if ($case === "statusUpdate") return `status ${state(value)}`;
  if ($case === "artifactUpdate") return `artifact ${value.artifact.artifactId}`;
  return String($case);
}

// The states a stream shows, its opening task's first, repeats merged.
function path(events) {
  const states = [];
  for (const event of events) {
    const { $case, value } = event.payload;
    if ($case === "task" || $case === "statusUpdate") {
      const current = state(value);
      if (states[states.length - 1] !== current) states.push(current);
    }
  }
  return states;
}

// JSON without the values proto3 JSON leaves out (empty strings, lists and
// objects, false and 0), keys sorted.
function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    const out = {};
    for (const key of Object.keys(value).sort()) {
      const v = canonical(value[key]);
      const empty =
        v === "" || v === false || v === 0 || v === null || v === undefined ||
        (Array.isArray(v) && v.length === 0) ||
        (typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 0);
      if (!empty) out[key] = v;
    }
    return out;
  }
  return value;
}

// The events an SDK stream yields until it ends, with the wire stream it read.
async function collect(iterable) {
  const before = streams.length;
  const events = [];
  for await (const event of iterable) events.push(event);
  expect(streams.length > before, "the call opened no stream");
  const stream = streams[before];
  const error = await stream.read;
  if (error) throw error;
  return { events, stream };
}

// The stream on the wire: every event an lf.a2a.v1 StreamResponse echoing the
// request id, the one the client yielded; the opening unnumbered, the rest
// numbered and increasing; closed by the door after the last.
function checkWire(stream, events) {
  const { method } = stream;
  expect(stream.ended, `${method}: the door did not end the stream`);
  expect(
    stream.events.length === events.length,
    `${method}: ${stream.events.length} events on the wire, the client yielded ${events.length}`,
  );
  const ids = [];
  stream.events.forEach(({ id, data }, n) => {
    expect(data.jsonrpc === "2.0", `${method} event ${n} is not JSON-RPC 2.0: ${show(data)}`);
    expect(data.id === stream.sent.id, `${method} event ${n}: id ${data.id} is not the request's ${stream.sent.id}`);
    expect("result" in data, `${method} event ${n} has no result: ${show(data)}`);
    const parsed = StreamResponse.toJSON(StreamResponse.fromJSON(data.result));
    expect(
      same(canonical(parsed), canonical(data.result)),
      `${method} event ${n} is not a StreamResponse as the SDK knows it:\n  wire ${show(data.result)}\n  read ${show(parsed)}`,
    );
    expect(
      same(StreamResponse.toJSON(events[n]), parsed),
      `${method} event ${n}: the client yielded ${show(events[n])} for ${show(data.result)}`,
    );
    if (n === 0) {
      expect(id === null, `${method}: the opening task is numbered ${id}`);
    } else {
      expect(id !== null, `${method} event ${n} (${kind(events[n])}) has no id`);
      ids.push(id);
    }
  });
  expect(ids.every((id, n) => n === 0 || id > ids[n - 1]), `${method}: event ids not increasing: ${show(ids)}`);
  return ids;
}

// A task stream: the task first in `opening`, then only updates of that
// task, its states `states`, the last its final status with the artifact
// `artifact` holding `text` just before it and no other artifact.
function checkTurn(events, opening, states, artifact, text) {
  const kinds = events.map(kind);
  expect(kinds[0] === `task ${opening}`, `the stream opened with ${show(kinds.slice(0, 1))}`);
  const task = events[0].payload.value;
  for (const event of events.slice(1)) {
    const { $case, value } = event.payload;
    expect($case === "statusUpdate" || $case === "artifactUpdate", `a ${$case} in a task stream: ${show(event)}`);
    expect(value.taskId === task.id && value.contextId === task.contextId, `an update of another task: ${show(event)}`);
  }
  expect(same(path(events), states), `the stream went ${path(events).join(" -> ")}, not ${states.join(" -> ")}`);
  expect(kinds[kinds.length - 1] === `status ${states[states.length - 1]}`, `the stream ended with ${kinds[kinds.length - 1]}`);
  const found = events.filter((e) => e.payload.$case === "artifactUpdate").map((e) => e.payload.value.artifact);
  expect(
    kinds[kinds.length - 2] === `artifact ${artifact}` && found.length === 1,
    `not exactly the ${artifact} artifact before the end: ${show(kinds)}`,
  );
  const texts = found[0].parts.map((p) => p.content?.value);
  expect(same(texts, [text]), `the ${artifact} artifact holds ${show(texts)}, not ${show(text)}`);
  const stamps = events
    .filter((e) => e.payload.$case === "statusUpdate")
    .map((e) => Date.parse(e.payload.value.status.timestamp));
  expect(stamps.every((s, n) => s > 0 && (n === 0 || s >= stamps[n - 1])), `status timestamps ${show(stamps)}`);
  return kinds;
}

// The error a stream call throws before any event: its class and code.
async function expectRefusal(iterable, name, code, metadata, what) {
  const events = [];
  try {
    for await (const event of iterable) events.push(event);
  } catch (e) {
    if (e instanceof Mismatch) throw e;
    expect(e.name === name, `${what} threw ${e.name}: ${e.message}, not ${name}`);
    expect(e.envelopeCode === code, `${what}: code ${e.envelopeCode}, expected ${code}`);
    expect(same(e.data?.[0]?.metadata, metadata), `${what}: error data ${show(e.data)}`);
    return e;
  }
  throw new Mismatch(`${what} was streamed: ${show(events.map(kind))}`);
}

async function run(url) {
  const resolver = new DefaultAgentCardResolver();
  const card = await resolver.resolve(url);
  expect(card.capabilities?.streaming === true, `card.capabilities ${show(card.capabilities)}`);
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl: tapFetch })],
      cardResolver: resolver,
    }),
  );
  const client = await factory.createFromAgentCard(card);
  expect(client.transport.protocolName === "JSONRPC", `the factory chose ${client.transport.protocolName}`);
  console.log(`card: ${card.name} ${card.version}, capabilities.streaming; client from ClientFactory over JSONRPC`);

  // 1. sendMessageStream, to its end.
  let { events, stream } = await collect(client.sendMessageStream({ message: userMessage("progress step one\nreply done") }));
  expect(stream.method === "SendStreamingMessage", `sendMessageStream sent ${stream.method}`);
  expect(!stream.headers.has("A2A-Extensions"), `A2A-Extensions answered: ${stream.headers.get("A2A-Extensions")}`);
  let ids = checkWire(stream, events);
  let kinds = checkTurn(
    events,
    "TASK_STATE_SUBMITTED",
    ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
    "response",
    "done",
  );
  const task = events[0].payload.value;
  expect(task.id.startsWith("tsk_") && task.contextId.startsWith("ctx_"), `the task ${show(task)}`);
  const progress = events
    .filter((e) => e.payload.$case === "statusUpdate")
    .map((e) => e.payload.value.status)
    .filter((s) => same(s.message?.parts.map((p) => p.content?.value), ["step one"]));
  expect(
    progress.length === 1 && taskStateToJSON(progress[0].state) === "TASK_STATE_WORKING",
    `no single WORKING status saying "step one": ${show(events)}`,
  );
  const message = progress[0].message;
  expect(
    message.role === 2 && message.messageId && message.taskId === task.id && message.contextId === task.contextId,
    `the progress status message ${show(message)}`,
  );
  const got = await client.getTask({ id: task.id });
  expect(state(got) === "TASK_STATE_COMPLETED", `GetTask after the stream: ${show(got)}`);
  console.log(`SendStreamingMessage: ${task.id}, ${events.length} events: ${kinds.join(", ")}; SSE ids ${show(ids)}`);

  // 2. returnImmediately, then resubscribeTask to its end.
  const started = Date.now();
  const quick = await send(client, userMessage("sleep 1500\nreply later"), { returnImmediately: true });
  expect(state(quick) === "TASK_STATE_SUBMITTED", `returnImmediately answered ${show(quick)}`);
  ({ events, stream } = await collect(client.resubscribeTask({ id: quick.id })));
  expect(stream.method === "SubscribeToTask", `resubscribeTask sent ${stream.method}`);
  expect(same(stream.sent.params, { id: quick.id }), `resubscribeTask sent params ${show(stream.sent.params)}`);
  ids = checkWire(stream, events);
  const opening = state(events[0].payload.value);
  const states = ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"];
  if (opening === "TASK_STATE_SUBMITTED") states.unshift(opening);
  kinds = checkTurn(events, opening, states, "response", "later");
  expect(events[0].payload.value.id === quick.id, `subscribed to ${quick.id}, opened with ${show(events[0])}`);
  const live = stream.events[stream.events.length - 1].at - stream.events[0].at;
  expect(live > 500, `the whole subscription arrived within ${live} ms of its opening`);
  console.log(
    `SubscribeToTask (resubscribeTask): ${quick.id} (returnImmediately SUBMITTED), ${events.length} events ` +
      `over ${((Date.now() - started) / 1000).toFixed(1)} s: ${kinds.join(", ")}; SSE ids ${show(ids)}`,
  );

  // 3. A streaming turn that pauses, a subscription across the pause, and
  //    the streaming reply.
  ({ events, stream } = await collect(client.sendMessageStream({ message: userMessage("ask Which branch?") })));
  checkWire(stream, events);
  kinds = checkTurn(
    events,
    "TASK_STATE_SUBMITTED",
    ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"],
    "prompt",
    "Which branch?",
  );
  const asking = events[0].payload.value;
  console.log(`SendStreamingMessage ask: ${asking.id}, the turn ends at the pause: ${kinds.join(", ")}`);

  // The subscription runs beside the reply; the reply is sent once its
  // opening task has arrived.
  const opened = streams.length;
  let settled = null;
  const subscription = collect(client.resubscribeTask({ id: asking.id })).then(
    (value) => (settled = { value }),
    (error) => (settled = { error }),
  );
  const deadline = Date.now() + 10000;
  while (!(streams.length > opened && streams[opened].events.length)) {
    if (settled) {
      throw settled.error ?? new Mismatch(`the subscription to the waiting task ended at once: ${show(settled.value.events.map(kind))}`);
    }
    expect(Date.now() < deadline, `the subscription to ${asking.id} did not open`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const watcher = streams[opened];

  const reply = await collect(
    client.sendMessageStream({ message: userMessage("reply main", { taskId: asking.id, contextId: asking.contextId }) }),
  );
  const replyIds = checkWire(reply.stream, reply.events);
  kinds = checkTurn(reply.events, "TASK_STATE_WORKING", ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], "response", "main");
  expect(reply.events[0].payload.value.id === asking.id, `the reply streamed another task: ${show(reply.events[0])}`);
  console.log(`SendStreamingMessage reply naming ${asking.id}: ${kinds.join(", ")}`);

  await subscription;
  if (settled.error) throw settled.error;
  ({ events, stream } = settled.value);
  expect(stream === watcher, "the subscription read another stream");
  ids = checkWire(stream, events);
  const waiting = events[0].payload.value;
  expect(
    waiting.id === asking.id && same(artifacts(waiting), [["prompt", ["Which branch?"]]]),
    `the subscription opened with ${show(waiting)}`,
  );
  kinds = checkTurn(
    events,
    "TASK_STATE_INPUT_REQUIRED",
    ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
    "response",
    "main",
  );
  const byId = (s) => new Map(s.events.filter((e) => e.id !== null).map((e) => [e.id, e.data.result]));
  const followed = byId(stream);
  const replied = byId(reply.stream);
  expect(
    replyIds.every((id) => followed.has(id) && same(followed.get(id), replied.get(id))),
    `the reply's events ${show(replyIds)} are not the subscription's ${show(ids)}`,
  );
  console.log(`SubscribeToTask across the pause: ${kinds.join(", ")}; the reply's events ${show(replyIds)} among them`);

  // 4. Refusals, each one JSON body.
  let error = await expectRefusal(
    client.resubscribeTask({ id: task.id }),
    "UnsupportedOperationError",
    -32004,
    { taskId: task.id, state: "TASK_STATE_COMPLETED" },
    "resubscribeTask of an ended task",
  );
  console.log(`SubscribeToTask ended task: ${error.name} -32004 "${error.message}"`);
  error = await expectRefusal(
    client.resubscribeTask({ id: NEVER_HELD }),
    "TaskNotFoundError",
    -32001,
    { taskId: NEVER_HELD },
    "resubscribeTask of a task never held",
  );
  console.log(`SubscribeToTask never held: ${error.name} -32001 "${error.message}"`);
  error = await expectRefusal(
    client.sendMessageStream({ message: userMessage("reply again", { taskId: task.id, contextId: task.contextId }) }),
    "UnsupportedOperationError",
    -32004,
    { taskId: task.id, state: "TASK_STATE_COMPLETED" },
    "sendMessageStream of a reply naming an ended task",
  );
  console.log(`SendStreamingMessage naming an ended task: ${error.name} -32004 "${error.message}"`);
  const refused = bodies.slice(-3).map((b) => b.method);
  expect(
    same(refused, ["SubscribeToTask", "SubscribeToTask", "SendStreamingMessage"]),
    `the refusals were not JSON bodies: ${show(refused)}`,
  );

  const total = streams.reduce((n, s) => n + s.events.length, 0);
  const heartbeats = streams.reduce((n, s) => n + s.heartbeats, 0);
  console.log(
    `wire: ${streams.length} streams, ${total} SSE events, each an lf.a2a.v1 StreamResponse echoing its ` +
      `request id; ${bodies.length} JSON bodies; ${heartbeats} heartbeats`,
  );
}

runScript(run, "a2a_js_streams.cjs", "ok: @a2a-js/sdk followed the door's streams");
