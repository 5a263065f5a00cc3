// Drives a door with the JSON-RPC client of npm @a2a-js/sdk, unmodified.
//
// Usage: node a2a_js_client.cjs DOOR_URL
// (with the package installed: tests/interop.rs runs npm ci into
// target/js-interop and sets NODE_PATH to its node_modules)
//
// The door must be fresh, public, lifecycle.task_acceptance: single, running
// the script agent. The card is resolved with the SDK's
// DefaultAgentCardResolver and the client built from it by ClientFactory,
// whose JSON-RPC transport is given a fetch that passes every request through
// unchanged and remembers it. Then, as a user of the SDK would: a held
// message, one with returnImmediately polled with GetTask, a task that asks
// for input and the message that answers it, ListTasks, CancelTask twice, and
// GetTask of a task that does not exist.
//
// listTasks({}) sends status "UNRECOGNIZED" (ts-proto's toJSON of an unset
// enum), which the door refuses with -32602 per the reference ("ListTasks":
// status is a TASK_STATE_* name); that refusal is checked, and tasks are
// listed with an explicit status, TASK_STATE_UNSPECIFIED meaning every state.
//
// Every exchange is checked on the wire: A2A-Version: 1.0 on the request, and
// the response echoing its id. Prints each step; on any mismatch prints
// MISMATCH and exits 1.

"use strict";

const {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} = require("@a2a-js/sdk/client");
const { Role, TaskState, taskStateToJSON } = require("@a2a-js/sdk");

const NEVER_HELD = "tsk_0000000000000000000000000000dead";
const CONTEXT = "ctx-js-interop";

class Mismatch extends Error {}

function expect(condition, what) {
  if (!condition) throw new Mismatch(what);
}

function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

const state = (task) => taskStateToJSON(task.status?.state);

// [[artifactId, [texts]]] of a task.
const artifacts = (task) =>
  (task.artifacts ?? []).map((a) => [a.artifactId, a.parts.map((p) => p.content?.value)]);

const show = (value) =>
  JSON.stringify(value, (_, v) => (typeof v === "bigint" ? String(v) : v));

// Every JSON-RPC exchange, as sent and as answered.
const wire = [];

async function tracingFetch(url, init) {
  const response = await fetch(url, init);
  const sent = JSON.parse(init.body);
  const answer = await response.clone().json();
  expect(
    init.headers["A2A-Version"] === "1.0",
    `${sent.method} went without A2A-Version: 1.0 (headers ${show(init.headers)})`,
  );
  expect(response.status === 200, `${sent.method} answered HTTP ${response.status}: ${show(answer)}`);
  expect(answer.id === sent.id, `${sent.method}: response id ${answer.id} is not the request's ${sent.id}`);
  wire.push({ method: sent.method, params: sent.params, answer });
  return response;
}

const last = () => wire[wire.length - 1];

let counter = 0;
function userMessage(text, extra = {}) {
  counter += 1;
  return {
    messageId: `msg-js-${process.pid}-${counter}`,
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text } }],
    ...extra,
  };
}

async function send(client, message, configuration) {
  const result = await client.sendMessage(configuration ? { message, configuration } : { message });
  expect(result && "status" in result && !("messageId" in result), `sendMessage answered no task: ${show(result)}`);
  return result;
}

// getTask until done(state) holds, for at most 20 s; records each state seen.
async function poll(client, id, done, seen) {
  const deadline = Date.now() + 20000;
  for (;;) {
    const task = await client.getTask({ id });
    if (seen[seen.length - 1] !== state(task)) seen.push(state(task));
    if (done(state(task))) return task;
    expect(Date.now() < deadline, `task ${id} stayed ${state(task)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

// The error a call rejects with: its class name and JSON-RPC code.
async function expectError(call, name, code, what) {
  let result;
  try {
    result = await call;
  } catch (e) {
    if (e instanceof Mismatch) throw e;
    expect(e.name === name, `${what} rejected with ${e.name}: ${e.message}, not ${name}`);
    expect(e.envelopeCode === code, `${what}: code ${e.envelopeCode}, expected ${code}`);
    return e;
  }
  throw new Mismatch(`${what} was served: ${show(result)}`);
}

async function run(url) {
  // The card, by the SDK's resolver; the client, by its factory.
  const resolver = new DefaultAgentCardResolver();
  const card = await resolver.resolve(url);
  const interfaces = (card.supportedInterfaces ?? []).map((i) => [i.url, i.protocolBinding, i.protocolVersion]);
  expect(same(interfaces, [[url, "JSONRPC", "1.0"]]), `card.supportedInterfaces is ${show(interfaces)}`);
  console.log(`card: ${card.name} ${card.version}, interfaces ${show(interfaces)}`);
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl: tracingFetch })],
      cardResolver: resolver,
    }),
  );
  const client = await factory.createFromAgentCard(card);
  expect(client.transport.protocolName === "JSONRPC", `the factory chose ${client.transport.protocolName}`);
  console.log(`client: from ClientFactory over ${client.transport.protocolName}, A2A ${client.protocolVersion}`);

  // A held sendMessage: answered once the task completes.
  const held = await send(client, userMessage("reply four"));
  expect(held.id.startsWith("tsk_"), `task id ${held.id}`);
  expect(held.contextId.startsWith("ctx_"), `context id ${held.contextId}`);
  expect(state(held) === "TASK_STATE_COMPLETED", `held send answered ${show(held)}`);
  expect(same(artifacts(held), [["response", ["four"]]]), `held send artifacts ${show(held)}`);
  expect(typeof held.status.timestamp === "string", `status.timestamp ${show(held.status)}`);
  // The reference's example: a completed task's status says so.
  const said = held.status.message;
  expect(
    said?.messageId === `msg_${held.id}_status` && said.taskId === held.id &&
      said.contextId === held.contextId && same(said.parts.map((p) => p.content?.value), ["task completed"]),
    `status.message ${show(held.status)}`,
  );
  console.log(`SendMessage held: ${held.id} ${state(held)} "task completed", response "four"`);

  // getTask answers the task exactly as sendMessage did.
  const got = await client.getTask({ id: held.id });
  expect(same(got, held), `GetTask ${show(got)}\n  differs from SendMessage's ${show(held)}`);
  console.log(`GetTask: ${got.id} ${state(got)}, same task as SendMessage answered`);

  // returnImmediately: SUBMITTED at once, then polled to completion.
  const quick = await send(client, userMessage("sleep 300\nreply five", { contextId: CONTEXT }), {
    returnImmediately: true,
  });
  expect(same(last().params.configuration, { returnImmediately: true }), `sent ${show(last().params)}`);
  expect(state(quick) === "TASK_STATE_SUBMITTED", `returnImmediately answered ${show(quick)}`);
  expect(quick.contextId === CONTEXT, `the context named was not kept: ${show(quick)}`);
  expect(quick.artifacts.length === 0, `a submitted task has artifacts: ${show(quick)}`);
  const seen = [];
  const polled = await poll(client, quick.id, (s) => s === "TASK_STATE_COMPLETED", seen);
  expect(same(artifacts(polled), [["response", ["five"]]]), `polled task ${show(polled)}`);
  console.log(`SendMessage returnImmediately: ${quick.id} SUBMITTED; GetTask polled ${seen.join(" -> ")}`);

  // A task that asks, answered by a message naming it.
  const asking = await send(client, userMessage("ask Which branch?"));
  expect(state(asking) === "TASK_STATE_INPUT_REQUIRED", `ask answered ${show(asking)}`);
  expect(same(artifacts(asking), [["prompt", ["Which branch?"]]]), `ask artifacts ${show(asking)}`);
  const answered = await send(
    client,
    userMessage("reply main", { taskId: asking.id, contextId: asking.contextId }),
  );
  expect(answered.id === asking.id, `the reply answered another task: ${show(answered)}`);
  expect(state(answered) === "TASK_STATE_COMPLETED", `the reply answered ${show(answered)}`);
  expect(same(artifacts(answered), [["response", ["main"]]]), `reply artifacts ${show(answered)}`);
  console.log(`SendMessage ask: ${asking.id} INPUT_REQUIRED "Which branch?"; reply naming it: COMPLETED "main"`);

  // listTasks({}) sends status "UNRECOGNIZED": the door's documented -32602.
  const refused = await expectError(client.listTasks({}), "RequestMalformedError", -32602, "listTasks({})");
  expect(same(last().params, { status: "UNRECOGNIZED" }), `listTasks({}) sent ${show(last().params)}`);
  expect(/status/.test(refused.message), `the refusal does not name status: ${refused.message}`);
  console.log(`ListTasks {} (the client sends status "UNRECOGNIZED"): -32602 "${refused.message}"`);

  // ListTasks with an explicit status: every task, most recently changed first.
  const order = [asking.id, quick.id, held.id];
  const listed = await client.listTasks({ status: TaskState.TASK_STATE_UNSPECIFIED });
  expect(same(last().params, {}), `listTasks UNSPECIFIED sent ${show(last().params)}`);
  const ids = listed.tasks.map((t) => t.id);
  expect(same(ids, order), `ListTasks order ${show(ids)}, expected ${show(order)}`);
  expect(
    listed.totalSize === 3 && listed.pageSize === 50 && listed.nextPageToken === "",
    `ListTasks page ${show(listed)}`,
  );
  expect(listed.tasks.every((t) => t.artifacts.length === 0), "ListTasks without includeArtifacts has artifacts");
  console.log(`ListTasks status TASK_STATE_UNSPECIFIED: ${listed.totalSize} tasks, most recent first`);

  const byContext = await client.listTasks({ status: TaskState.TASK_STATE_UNSPECIFIED, contextId: CONTEXT });
  expect(same(byContext.tasks.map((t) => t.id), [quick.id]), `ListTasks contextId: ${show(byContext)}`);
  const waiting = await client.listTasks({ status: TaskState.TASK_STATE_INPUT_REQUIRED });
  expect(waiting.tasks.length === 0 && waiting.totalSize === 0, `ListTasks INPUT_REQUIRED: ${show(waiting)}`);
  console.log(`ListTasks contextId ${CONTEXT}: 1 task; status TASK_STATE_INPUT_REQUIRED: none`);

  const first = await client.listTasks({
    status: TaskState.TASK_STATE_COMPLETED,
    pageSize: 2,
    includeArtifacts: true,
  });
  expect(
    same(last().params, { status: "TASK_STATE_COMPLETED", pageSize: 2, includeArtifacts: true }),
    `listTasks sent ${show(last().params)}`,
  );
  expect(same(first.tasks.map((t) => t.id), order.slice(0, 2)), `page 1: ${show(first)}`);
  expect(first.totalSize === 3 && first.pageSize === 2 && first.nextPageToken !== "", `page 1: ${show(first)}`);
  expect(same(artifacts(first.tasks[0]), [["response", ["main"]]]), `includeArtifacts: ${show(first.tasks[0])}`);
  const second = await client.listTasks({
    status: TaskState.TASK_STATE_COMPLETED,
    pageSize: 2,
    pageToken: first.nextPageToken,
  });
  expect(same(second.tasks.map((t) => t.id), order.slice(2)), `page 2: ${show(second)}`);
  expect(second.nextPageToken === "", `page 2 is not the last: ${show(second)}`);
  console.log("ListTasks status TASK_STATE_COMPLETED pageSize 2: pages of 2 and 1, with artifacts on request");

  // cancelTask on a working task, then again on the canceled one.
  const sleeper = await send(client, userMessage("sleep 10000"), { returnImmediately: true });
  expect(state(sleeper) === "TASK_STATE_SUBMITTED", `sleep answered ${show(sleeper)}`);
  await poll(client, sleeper.id, (s) => s === "TASK_STATE_WORKING", []);
  const canceled = await client.cancelTask({ id: sleeper.id });
  expect(canceled.id === sleeper.id, `CancelTask answered another task: ${show(canceled)}`);
  expect(state(canceled) === "TASK_STATE_CANCELED", `CancelTask answered ${show(canceled)}`);
  const after = await client.getTask({ id: sleeper.id });
  expect(state(after) === "TASK_STATE_CANCELED", `GetTask after CancelTask: ${show(after)}`);
  console.log(`CancelTask: ${sleeper.id} WORKING -> ${state(canceled)}`);

  const again = await expectError(
    client.cancelTask({ id: sleeper.id }),
    "TaskNotCancelableError",
    -32002,
    "cancelTask of a canceled task",
  );
  const info = again.data?.[0];
  expect(
    info?.reason === "TASK_NOT_CANCELABLE" &&
      same(info.metadata, { taskId: sleeper.id, state: "TASK_STATE_CANCELED" }),
    `cancelTask again: error data ${show(again.data)}`,
  );
  console.log(`CancelTask again: ${again.name} -32002 "${again.message}", metadata ${show(info.metadata)}`);

  const missing = await expectError(
    client.getTask({ id: NEVER_HELD }),
    "TaskNotFoundError",
    -32001,
    "getTask of a task never held",
  );
  expect(same(missing.data?.[0]?.metadata, { taskId: NEVER_HELD }), `getTask never held: ${show(missing.data)}`);
  console.log(`GetTask never held: ${missing.name} -32001 "${missing.message}"`);

  const end = await client.listTasks({ status: TaskState.TASK_STATE_UNSPECIFIED });
  expect(end.tasks[0]?.id === sleeper.id && end.totalSize === 4, `ListTasks at the end: ${show(end)}`);
  console.log(`wire: ${wire.length} JSON-RPC exchanges, each with A2A-Version: 1.0 and its id echoed`);
}

// Runs `run(url)` for at most 60 s: exit 0 and `ok` when it passes, 1 and a
// MISMATCH line when it does not, 2 on a wrong command line.
async function runScript(run, usage, ok) {
  const url = process.argv[2];
  if (!url || process.argv.length !== 3) {
    console.error(`usage: node ${usage} DOOR_URL`);
    process.exit(2);
  }
  const timer = setTimeout(() => {
    console.error("MISMATCH: the run took over 60 s");
    process.exit(1);
  }, 60000);
  try {
    await run(url);
  } catch (e) {
    if (e instanceof Mismatch) {
      console.error(`MISMATCH: ${e.message}`);
    } else {
      console.error(e.stack);
      console.error(`MISMATCH: unexpected ${e.name}: ${e.message}`);
    }
    process.exit(1);
  }
  clearTimeout(timer);
  console.log(ok);
}

// a2a_js_streams.cjs reuses the helpers.
module.exports = { Mismatch, expect, same, state, artifacts, show, userMessage, send, runScript };

if (require.main === module) runScript(run, "a2a_js_client.cjs", "ok: @a2a-js/sdk drove the door");
