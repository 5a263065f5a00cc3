//! The streams ("murmur.WatchSession", "SubscribeToTask", the stream
//! extension): SendStreamingMessage, SubscribeToTask and murmur.WatchSession
//! over `text/event-stream`.
//!
//! Each event is `id: N` (for an event of the session's log) and `data: ` one
//! JSON-RPC response whose `result` is a StreamResponse and whose `id` echoes
//! the request's. Murmur's frames ride in a message's metadata under the
//! stream extension's URI, sent only when the stream extension is active.
//!
//! How each stream ends:
//! - SendStreamingMessage follows the one turn its message starts or
//!   continues: it ends after the task's terminal status, or after the task
//!   pauses in TASK_STATE_INPUT_REQUIRED; the reply, sent with
//!   SendStreamingMessage naming the task, opens the stream of the next turn.
//! - SubscribeToTask follows the task to its end, through input-required and
//!   the reply's resumed TASK_STATE_WORKING.
//! - murmur.WatchSession follows every task until the door closes.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value, json};

use crate::imports::Imports;
use crate::imports::model::{
    Caller, Capsule, Delivery, Event, EventBody, Framed, Next, PassOn, ResidueItem, Started,
    Status, Task, TaskState, Transport,
};
use crate::methods::send::{self, Provenance};
use crate::methods::task::{Keyed, ResidueArtifact, TaskJson, TextArtifact};
use crate::rpc::Id;
use crate::rpc::errors::{InvalidParams, RpcError};
use crate::rpc::extensions;
use crate::rpc::http::Request;
use crate::timestamp::Rfc3339Ms;

/// An idle stream writes a comment this often so proxies keep it open.
pub const HEARTBEAT_MS: u64 = 15_000;

/// The SSE comment an idle stream writes.
pub const HEARTBEAT: &[u8] = b": heartbeat\n\n";

/// A stream the door opened: its head, what it writes first, and what it
/// follows after.
pub struct Stream<R> {
    pub headers: Vec<(String, String)>,
    id: Id,
    /// Written first, unnumbered: connection-ack, the opening task.
    opening: Opening,
    /// None: the stream ends after its opening (a rejected task).
    reader: Option<R>,
    follow: Follow,
    /// The stream extension is active: frames are written.
    frames: bool,
    /// The task a task stream follows, and who asks: read from the store
    /// when the events it ends on may have been lost.
    settles: Option<(Caller, String)>,
}

/// What a stream writes first: the task it follows (`{"task": …}`), or a
/// message (`{"message": …}`, the connection-ack).
enum Opening {
    Task(Box<Task>),
    Message(Value),
}

impl Serialize for Opening {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Opening::Task(task) => Keyed("task", TaskJson::as_held(task)).serialize(serializer),
            Opening::Message(message) => Keyed("message", message).serialize(serializer),
        }
    }
}

enum Follow {
    /// One task: ends after its terminal status, or its pause when
    /// `until_paused`.
    Task { until_paused: bool },
    /// Every task, until the door closes.
    Session,
}

/// The head every stream answers with; the A2A-Extensions it used.
fn headers(used: &[&str]) -> Vec<(String, String)> {
    let mut headers = vec![
        ("content-type".to_string(), "text/event-stream".to_string()),
        ("cache-control".to_string(), "no-cache".to_string()),
    ];
    if !used.is_empty() {
        headers.push((extensions::HEADER.to_string(), used.join(", ")));
    }
    headers
}

/// The request's `A2A-Extensions` names the stream extension.
fn activates_stream(request: &Request) -> bool {
    request
        .values(extensions::HEADER)
        .any(|value| value.split(',').any(|uri| uri.trim() == extensions::STREAM))
}

/// `Last-Event-ID`, when it is an event id.
fn last_event_id(request: &Request) -> Option<u64> {
    request.header("last-event-id").and_then(|v| v.parse().ok())
}

/// SendStreamingMessage: the same checks and refusals as SendMessage, each a
/// JSON body; a new task refused as busy or closing is a stream of that one
/// task; otherwise the task, then its events for this turn.
pub fn send_streaming_message<I: Imports>(
    imports: &I,
    capsule: &Capsule,
    request: &Request,
    params: &Map<String, Value>,
    caller: &Caller,
    provenance: Provenance,
    id: &Id,
) -> Result<Stream<I::Reader>, RpcError> {
    // Noted before the task starts, so its first events are read too.
    let mark = last_event_id(request).unwrap_or_else(|| imports.latest_event());
    // The stream opens with the task as first recorded and reads how it
    // settled from the log, like any other.
    let (message, Started { task, .. }) =
        send::accept(imports, capsule, params, caller, provenance, false)?;
    let frames = activates_stream(request);
    let mut used = Vec::new();
    if message.uses_door_extension {
        used.push(extensions::DOOR);
    }
    if frames {
        used.push(extensions::STREAM);
    }
    let reader = if task.status.state == TaskState::Rejected {
        None
    } else {
        Some(
            imports
                .task_events(caller, &task.id, Some(mark))
                .map_err(|e| RpcError::from_store(e, &task.id))?,
        )
    };
    let settles = Some((caller.clone(), task.id.clone()));
    Ok(Stream {
        headers: headers(&used),
        id: id.clone(),
        opening: Opening::Task(Box::new(task)),
        reader,
        follow: Follow::Task { until_paused: true },
        frames,
        settles,
    })
}

/// SubscribeToTask: refused as one JSON body when there is no id, the caller
/// does not see the task, or it has ended; otherwise the task as GetTask
/// answers it, then its later events until its end.
pub fn subscribe_to_task<I: Imports>(
    imports: &I,
    request: &Request,
    params: &Map<String, Value>,
    caller: &Caller,
    id: &Id,
) -> Result<Stream<I::Reader>, RpcError> {
    let task_id = params
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| RpcError::invalid_params(InvalidParams::NoId("SubscribeToTask")))?;
    // The reader first, so no event falls between the snapshot and it.
    let reader = imports
        .task_events(caller, task_id, last_event_id(request))
        .map_err(|e| RpcError::from_store(e, task_id))?;
    let task = imports
        .get(caller, task_id)
        .map_err(|e| RpcError::from_store(e, task_id))?;
    let state = task.status.state;
    if state.terminal() {
        return Err(RpcError::subscribes_ended_task(task_id, state.wire()));
    }
    let frames = activates_stream(request);
    Ok(Stream {
        headers: headers(if frames { &[extensions::STREAM] } else { &[] }),
        id: id.clone(),
        opening: Opening::Task(Box::new(task)),
        reader: Some(reader),
        follow: Follow::Task {
            until_paused: false,
        },
        frames,
        settles: Some((caller.clone(), task_id.to_string())),
    })
}

impl<R> Stream<R> {
    /// The reader the stream follows after its opening, if any.
    pub fn reader(&self) -> Option<&R> {
        self.reader.as_ref()
    }
}

/// murmur.WatchSession: connection-ack, the replay from Last-Event-ID, then
/// every task's live events; the stream extension always active.
pub fn watch_session<I: Imports>(
    imports: &I,
    capsule: &Capsule,
    request: &Request,
    id: &Id,
) -> Stream<I::Reader> {
    let reader = imports.session_events(last_event_id(request));
    let mode = match capsule.transport {
        Transport::Http => "stateless",
        Transport::Process => "stateful",
    };
    let ack = frame_message(
        imports,
        None,
        "connection-ack",
        json!({"frame": "connection-ack", "role": "observer", "conversationMode": mode}),
    );
    Stream {
        headers: headers(&[extensions::DOOR, extensions::STREAM]),
        id: id.clone(),
        opening: Opening::Message(ack),
        reader: Some(reader),
        follow: Follow::Session,
        frames: true,
        settles: None,
    }
}

/// Writes the stream until it ends, or until `sink` says the client left.
///
/// Each event is framed once: the first stream of this door version to
/// deliver it keeps the SSE event it wrote, and the host writes it to every
/// other such stream itself (`pass`), leaving the door what it must decide
/// (an event not framed yet, the status a stream ends on, a gap, a lag, the
/// close, a heartbeat).
pub fn pump<I: Imports>(
    imports: &I,
    stream: Stream<I::Reader>,
    sink: &mut dyn FnMut(&[u8]) -> bool,
) {
    if !sse_to(sink, None, &stream.id, &stream.opening) {
        return;
    }
    let Some(reader) = &stream.reader else { return };
    let pass = PassOn {
        request_id: stream.id.to_string().into_bytes(),
        frames: stream.frames,
        ends_at: stream.follow.ends_at(),
    };
    // Whether the stream ends after an event that wrote `state`.
    let ends = |state: Option<TaskState>| state.is_some_and(|s| pass.ends_at.contains(&s));
    // The task as the store has it, once it has ended while the event
    // saying so may have left the replay buffer unwritten (a lag, or an
    // event dropped before any of it was written): what the log still
    // holds is read without waiting, then the stream ends on this status.
    let mut settled: Option<Task> = None;
    let ended_in_store = || {
        let (caller, task_id) = stream.settles.as_ref()?;
        let task = imports.get(caller, task_id).ok()?;
        ends(Some(task.status.state)).then_some(task)
    };
    loop {
        let wait = if settled.is_some() { 0 } else { HEARTBEAT_MS };
        let delivery = match imports.next_event(reader, wait, &pass) {
            Next::Idle => {
                if let Some(task) = settled.take() {
                    let update = Rendered::Status(StatusUpdate {
                        task_id: task.id,
                        context_id: task.context_id,
                        status: task.status,
                        message_id: None,
                    });
                    sse_to(sink, None, &stream.id, &update);
                    return;
                }
                if !sink(HEARTBEAT) {
                    return;
                }
                // A stream idle this long on an ended task lost its end.
                settled = ended_in_store();
                continue;
            }
            Next::Left | Next::Ended => return,
            Next::Delivery(delivery) => delivery,
        };
        let (framed, ends) = match delivery {
            Delivery::Event(event) => {
                let (id, state) = (event.id, event.state());
                // Rendered with its frames whatever this stream sends: the
                // streams that send them pass this framing on.
                let framed = render(imports, event, true).map(|result| {
                    let framed = frame(id, state, &result);
                    imports.keep_framed(reader, &framed);
                    framed
                });
                (framed, ends(state))
            }
            Delivery::Framed(framed) => {
                let ends = ends(framed.state);
                (Some(framed), ends)
            }
            Delivery::Gap(after, through) | Delivery::Lagged(after, through) => {
                let kind = if matches!(delivery, Delivery::Gap(..)) {
                    "gap"
                } else {
                    "lagged"
                };
                let frame = stream.frames.then(|| {
                    let message = frame_message(
                        imports,
                        None,
                        kind,
                        json!({"frame": kind, "after": after, "through": through}),
                    );
                    sse(None, &stream.id, &json!({"message": message}))
                });
                let left = frame.is_some_and(|bytes| !sink(&bytes));
                if left {
                    return;
                }
                if settled.is_none() {
                    settled = ended_in_store();
                }
                continue;
            }
            Delivery::Closed => {
                if stream.frames {
                    let message = frame_message(
                        imports,
                        None,
                        "capsule-closed",
                        json!({"frame": "capsule-closed"}),
                    );
                    sink(&sse(None, &stream.id, &json!({"message": message})));
                }
                return;
            }
        };
        let sent = framed.filter(|f| !f.frame || stream.frames);
        let left = sent.is_some_and(|f| {
            let (first, rest) = f.split_for(&pass.request_id);
            !(sink(&first) && (rest.is_empty() || sink(rest)))
        });
        if left || ends {
            return;
        }
    }
}

impl Follow {
    /// The states a stream ends after.
    fn ends_at(&self) -> Vec<TaskState> {
        match self {
            Follow::Task { until_paused } => TaskState::ALL
                .into_iter()
                .filter(|s| s.terminal() || (*until_paused && *s == TaskState::InputRequired))
                .collect(),
            Follow::Session => Vec::new(),
        }
    }
}

/// The SSE event every stream of this door version writes for `event`
/// (with its frames, which the streams that send them pass on), its
/// request id cut out: what the host asks of an instance of its own
/// (`framing`), so no stream's instance holds an event's bytes.
pub fn frame_event<I: Imports>(imports: &I, event: Event) -> Framed {
    let (id, state) = (event.id, event.state());
    let result = render(imports, event, true).expect("rendered with its frames");
    frame(id, state, &result)
}

/// The SSE event for event `id` whose StreamResponse is `result`, its
/// request id cut out: what every stream of this door version writes.
fn frame(id: u64, state: Option<TaskState>, result: &Rendered) -> Framed {
    let mut sse = format!("id: {id}\ndata: {{\"jsonrpc\":\"2.0\",\"id\":").into_bytes();
    let request_id_at = sse.len();
    sse.extend_from_slice(br#","result":"#);
    serde_json::to_writer(&mut sse, result).expect("an event serializes");
    sse.extend_from_slice(b"}\n\n");
    Framed {
        id,
        state,
        frame: matches!(result, Rendered::Frame(_)),
        sse,
        request_id_at,
    }
}

/// An event as a StreamResponse; None for a frame when frames are off.
fn render<I: Imports>(imports: &I, event: Event, frames: bool) -> Option<Rendered> {
    let Event {
        task_id,
        context_id,
        body,
        ..
    } = event;
    match body {
        EventBody::Status { status, message_id } => Some(Rendered::Status(StatusUpdate {
            task_id,
            context_id,
            status,
            message_id,
        })),
        EventBody::Artifact {
            artifact_id,
            text,
            residue,
        } => Some(Rendered::Artifact(ArtifactUpdate {
            task_id,
            context_id,
            artifact_id,
            text: text.unwrap_or_default(),
            residue,
        })),
        EventBody::Frame { kind, body } => frames.then(|| {
            // A text frame's text is its message's part, and a field of
            // its metadata too.
            let text = match body.get("text").and_then(Value::as_str) {
                Some(text) if kind == "text" => text.to_string(),
                _ => kind.clone(),
            };
            let mut fields = Map::new();
            fields.insert("frame".into(), json!(kind));
            if let Value::Object(body) = body {
                fields.extend(body.into_iter().filter(|(k, _)| k != "frame"));
            }
            let event = (&task_id, &context_id);
            Rendered::Frame(json!({"message": frame_message(imports, Some(event), &text, Value::Object(fields))}))
        }),
    }
}

/// A StreamResponse an event renders as: written straight from the event,
/// but for a frame, whose fields are the agent's own JSON.
enum Rendered {
    Status(StatusUpdate),
    Artifact(ArtifactUpdate),
    Frame(Value),
}

impl Serialize for Rendered {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Rendered::Status(update) => Keyed("statusUpdate", update).serialize(serializer),
            Rendered::Artifact(update) => Keyed("artifactUpdate", update).serialize(serializer),
            Rendered::Frame(message) => message.serialize(serializer),
        }
    }
}

/// `statusUpdate`: the status as it happened, its message named by the id the
/// event carries, or after the task for a terminal status.
struct StatusUpdate {
    task_id: String,
    context_id: String,
    status: Status,
    message_id: Option<String>,
}

impl Serialize for StatusUpdate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut update = serializer.serialize_map(Some(3))?;
        update.serialize_entry("taskId", &self.task_id)?;
        update.serialize_entry("contextId", &self.context_id)?;
        update.serialize_entry("status", &StatusJson(self))?;
        update.end()
    }
}

struct StatusJson<'a>(&'a StatusUpdate);

impl Serialize for StatusJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let update = self.0;
        let mut status = serializer.serialize_map(None)?;
        status.serialize_entry("state", update.status.state.wire())?;
        if let Some(text) = &update.status.message {
            status.serialize_entry("message", &StatusMessage { update, text })?;
        }
        status.serialize_entry("timestamp", &Rfc3339Ms(update.status.timestamp_ms))?;
        status.end()
    }
}

struct StatusMessage<'a> {
    update: &'a StatusUpdate,
    text: &'a str,
}

impl Serialize for StatusMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let update = self.update;
        let mut message = serializer.serialize_map(Some(5))?;
        match &update.message_id {
            Some(id) => message.serialize_entry("messageId", id)?,
            None => message
                .serialize_entry("messageId", &format_args!("msg_{}_status", update.task_id))?,
        }
        message.serialize_entry("contextId", &update.context_id)?;
        message.serialize_entry("taskId", &update.task_id)?;
        message.serialize_entry("role", "ROLE_AGENT")?;
        message.serialize_entry("parts", &[StreamText(self.text)])?;
        message.end()
    }
}

/// `artifactUpdate`: the artifact whole, as GetTask carries it.
struct ArtifactUpdate {
    task_id: String,
    context_id: String,
    artifact_id: String,
    text: String,
    residue: Vec<ResidueItem>,
}

impl Serialize for ArtifactUpdate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut update = serializer.serialize_map(Some(3))?;
        update.serialize_entry("taskId", &self.task_id)?;
        update.serialize_entry("contextId", &self.context_id)?;
        if self.artifact_id == "residue" {
            update.serialize_entry("artifact", &ResidueArtifact(&self.residue))?;
        } else {
            let artifact = TextArtifact {
                id: &self.artifact_id,
                text: &self.text,
            };
            update.serialize_entry("artifact", &artifact)?;
        }
        update.end()
    }
}

/// A frame as a message: ROLE_AGENT, one text part, the frame's fields in
/// metadata under the stream extension's URI.
fn frame_message<I: Imports>(
    imports: &I,
    event: Option<(&String, &String)>,
    text: &str,
    fields: Value,
) -> Value {
    let mut message = Map::new();
    message.insert("messageId".into(), json!(imports.new_message_id()));
    if let Some((task_id, context_id)) = event {
        message.insert("contextId".into(), json!(context_id));
        message.insert("taskId".into(), json!(task_id));
    }
    message.insert("role".into(), json!("ROLE_AGENT"));
    message.insert("parts".into(), json!([StreamText(text)]));
    message.insert("metadata".into(), json!({(extensions::STREAM): fields}));
    Value::Object(message)
}

/// A text part as the streams write it (the reference's stream examples put
/// mediaType first).
struct StreamText<'a>(&'a str);

impl Serialize for StreamText<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut part = serializer.serialize_map(Some(2))?;
        part.serialize_entry("mediaType", "text/plain")?;
        part.serialize_entry("text", self.0)?;
        part.end()
    }
}

/// One SSE event as bytes (see [`sse_to`]).
pub fn sse(event_id: Option<u64>, request_id: &Id, result: &impl Serialize) -> Vec<u8> {
    let mut out = Vec::new();
    sse_to(
        &mut |bytes: &[u8]| {
            out.extend_from_slice(bytes);
            true
        },
        event_id,
        request_id,
        result,
    );
    out
}

/// Bytes an event is written in: the event is serialized straight into the
/// body this many bytes at a time, never held whole as text.
const CHUNK: usize = 4096;

/// Writes one SSE event to `sink`: `id: N` when numbered, then one JSON-RPC
/// response around `result`, serialized as it is written. False once the
/// client has left.
pub fn sse_to(
    sink: &mut dyn FnMut(&[u8]) -> bool,
    event_id: Option<u64>,
    request_id: &Id,
    result: &impl Serialize,
) -> bool {
    sse_around(sink, event_id, request_id, |out| {
        serde_json::to_writer(out, result).map_err(std::io::Error::from)
    })
}

/// One SSE event whose `result` `write_result` writes, in chunks of
/// [`CHUNK`].
fn sse_around(
    sink: &mut dyn FnMut(&[u8]) -> bool,
    event_id: Option<u64>,
    request_id: &Id,
    write_result: impl FnOnce(&mut Chunked) -> std::io::Result<()>,
) -> bool {
    use std::io::Write;
    let mut out = Chunked {
        sink,
        buffer: Vec::with_capacity(CHUNK),
    };
    let write = || -> std::io::Result<()> {
        if let Some(event_id) = event_id {
            writeln!(out, "id: {event_id}")?;
        }
        write!(
            out,
            r#"data: {{"jsonrpc":"2.0","id":{request_id},"result":"#
        )?;
        write_result(&mut out)?;
        out.write_all(b"}\n\n")?;
        out.flush()
    };
    write().is_ok()
}

/// A writer that hands its bytes to a sink in chunks of [`CHUNK`].
struct Chunked<'a> {
    sink: &'a mut dyn FnMut(&[u8]) -> bool,
    buffer: Vec<u8>,
}

impl std::io::Write for Chunked<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let room = CHUNK - self.buffer.len();
        let taken = bytes.len().min(room);
        self.buffer.extend_from_slice(&bytes[..taken]);
        if self.buffer.len() == CHUNK {
            self.flush()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.buffer.is_empty() && !(self.sink)(&self.buffer) {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        self.buffer.clear();
        Ok(())
    }
}
