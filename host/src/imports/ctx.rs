//! What the door's imports answer from, per request ([`DoorCtx`]), lent to
//! each interface's file through [`DoorCtxView`], and the types those files
//! share with it: the one-call body and head, and the framing of events.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::Response;
use tokio::sync::oneshot;
use wasmtime::component::ResourceTable;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::bindings::events::Event;
use crate::bindings::task_store::Caller;
use crate::session::Session;
use crate::session::tasks::Settled;

/// A request body as the door reads it.
pub type BoxedBody = UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>;

/// Bytes a door's streamed body queues ahead of the socket, on either edge
/// (`--stream-queue-bytes`).
pub const QUEUE_BYTES: usize = 128 << 10;
/// Bytes one write of a door's body carries at most, on either edge.
pub const CHUNK_BYTES: usize = 4096;

/// The writes of at most [`CHUNK_BYTES`] a streamed body queues when it may
/// queue `queue_bytes`: one at least.
pub const fn stream_chunks(queue_bytes: usize) -> usize {
    match queue_bytes.div_ceil(CHUNK_BYTES) {
        0 => 1,
        chunks => chunks,
    }
}

/// Where a one-call answer's head goes: the request's response.
pub type HeadSender = oneshot::Sender<Result<Response<HyperOutgoingBody>, ErrorCode>>;

/// Events' framings, in their order: each its SSE bytes and where the
/// request id goes; none for one the door could not frame.
pub type Framed = Pin<Box<dyn Future<Output = Vec<Option<(Vec<u8>, usize)>>> + Send>>;

/// Frames events as one door version does, on an instance of their own
/// (the door's `framing` export).
pub trait FrameEvents: Send + Sync {
    /// Frames `events` for the streams, one after the other on one
    /// instance: each its SSE bytes and where the request id goes, or None
    /// when the door could not frame it.
    fn frame(self: Arc<Self>, events: Vec<Arc<Event>>) -> Framed;
}

/// What the door's imports answer from, per request.
pub struct DoorCtx {
    /// The session the imports answer from.
    pub session: Arc<Session>,
    /// Set once the door has changed the session (started, continued or
    /// canceled a task, stopped the session, delivered a completion): a
    /// door failing after that had accepted its request.
    pub changed: Arc<AtomicBool>,
    /// The door version serving the request: its streams pass on what
    /// streams of the same version framed (see [`crate::session::tasks::events`]).
    pub version: u64,
    /// The declared plane the request is on (`files` or `peer`), whose
    /// exports are what `send-file` may open. None off the planes.
    pub plane: Option<&'static str>,
    /// The body of a request answered in one call, until the door reads it.
    pub body: Option<BoxedBody>,
    /// Where a one-call answer that streams sends its head.
    pub head: Option<HeadSender>,
    /// A stream's head, held back while the door writes what it has at
    /// once ([`HeldHead`]).
    pub held_head: Option<HeldHead>,
    /// The task this request started, and who started it (see
    /// [`DoorCtx::started_by`]).
    pub started: Option<(Caller, String)>,
    /// The settle pollable on the task it started, once the door waits on
    /// it: the task as its ending wrote it, answered without a read.
    pub settling: Option<Settled>,
    /// What frames events for this version's streams apart from them,
    /// when the door can (see [`FrameEvents`]).
    pub framer: Option<Arc<dyn FrameEvents>>,
    /// Writes of at most [`CHUNK_BYTES`] a streamed body
    /// queues ahead of the socket.
    pub stream_chunks: usize,
    /// Whether an answer the door declares reusable may be kept (decided
    /// before the call): only then are its body, its answer and what it
    /// read noted for it.
    pub keeping: bool,
    /// The body the door read, kept for an answer it declares reusable.
    pub body_read: Option<Bytes>,
    /// The answer the door declared reusable, as sent.
    pub declared: Option<Declared>,
    /// The head and file the door sent through `send-file`, for a file's
    /// answer it then declares reusable.
    pub sent_file: Option<(Head, SentFile)>,
    /// What the door read that such an answer depends on.
    pub reads: Reads,
}

/// An answer the door declared reusable (`murmur:door/answer`'s
/// `reusable` and `reusable-file`), as the host sent it.
#[derive(Clone, Debug)]
pub struct Declared {
    /// Its status and headers, as the door gave them.
    pub status: u16,
    /// Its header lines.
    pub headers: Vec<(String, String)>,
    /// Its whole body (empty for a file's bytes, which [`FileDeclared`]
    /// names).
    pub body: Bytes,
    /// What it depends on beside the request and what the door read.
    pub depends: Depends,
}

/// What a declared answer depends on beside its request and the door's
/// reads.
#[derive(Clone, Debug)]
pub enum Depends {
    /// Nothing more; the request's JSON-RPC id sits in the body at `at`,
    /// `len` bytes long.
    Id {
        /// The id's first byte.
        at: usize,
        /// Its length in bytes.
        len: usize,
    },
    /// A file of a plane.
    File(FileDeclared),
}

/// The file a declared answer was made of, as the door read it.
#[derive(Clone, Debug)]
pub struct FileDeclared {
    /// Its workdir-relative path, as requested: every segment but the last
    /// a directory, none a link.
    pub path: Vec<String>,
    /// Its size, as the door found it.
    pub size: u64,
    /// Its last change, as the door found it: seconds and nanoseconds since
    /// the epoch.
    pub modified: (u64, u32),
    /// The range of it the answer's body was, and the file the door opened
    /// for it; None for a whole answer (a HEAD, a 304).
    pub sent: Option<SentFile>,
}

/// An answer's status and header lines.
pub type Head = (u16, Vec<(String, String)>);

/// A range of a file sent through `response-stream.send-file`.
#[derive(Clone, Debug)]
pub struct SentFile {
    /// The file the host opened for the door.
    pub file: Arc<std::fs::File>,
    /// Its first byte sent.
    pub offset: u64,
    /// Bytes sent.
    pub length: u64,
}

/// What a request's door read through its imports, for an answer it
/// declares reusable: the versions it read at, what it read, and whether it
/// called anything such an answer cannot stand for.
#[derive(Debug, Default)]
pub struct Reads {
    /// The store's last write (see [`crate::session::tasks::store::writes`])
    /// before its first read of a task or a page.
    pub tasks_since: Option<u64>,
    /// The tasks `get` answered.
    pub tasks: Vec<String>,
    /// Whether it read a page of the listing, which any write changes.
    pub listing: bool,
    /// The tokens' version before its first `verify`.
    pub tokens_since: Option<u64>,
    /// It changed the session, waited on it, streamed, redeemed a handle,
    /// asked whether the session closes, or was refused a task: its answer
    /// is never reused.
    pub other: bool,
}

/// A stream's head the host holds back so that what the door writes at
/// once goes out with it: a stream whose task ended as it started is sent
/// in one write, head, events and end, where sending the head at once cost
/// a write of its own. It is sent as soon as the door waits for anything
/// (events not there yet, the idle timer, room in the body's queue), hands
/// a delivery back to the door, or ends its call: the client waits for no
/// more than the door's writing of what it already has.
#[derive(Clone)]
pub struct HeldHead(Arc<Mutex<Option<Unsent>>>);

/// A response head not sent yet, and where it goes.
type Unsent = (HeadSender, Response<HyperOutgoingBody>);

impl HeldHead {
    /// `response`, to be sent to `head`.
    pub fn new(head: HeadSender, response: Response<HyperOutgoingBody>) -> HeldHead {
        HeldHead(Arc::new(Mutex::new(Some((head, response)))))
    }

    /// Sends the head, once.
    pub fn send(&self) {
        let held = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((head, response)) = held {
            let _ = head.send(Ok(response));
        }
    }
}

impl DoorCtx {
    /// Sends the stream's head held back, if any.
    pub fn send_head(&mut self) {
        if let Some(held) = self.held_head.take() {
            held.send();
        }
    }

    /// A request's imports, answering from `session`, nothing changed yet.
    pub fn new(session: Arc<Session>) -> DoorCtx {
        DoorCtx {
            session,
            changed: Arc::default(),
            version: 0,
            plane: None,
            body: None,
            head: None,
            held_head: None,
            started: None,
            settling: None,
            framer: None,
            stream_chunks: stream_chunks(QUEUE_BYTES),
            keeping: false,
            body_read: None,
            declared: None,
            sent_file: None,
            reads: Reads::default(),
        }
    }

    /// Whether this request started `task_id` for `caller`: then the caller
    /// is known to see it (it owns it), and the stream or settle pollable
    /// that follows needs no look-up in the store.
    pub(super) fn started_by(&self, caller: &Caller, task_id: &str) -> bool {
        self.started
            .as_ref()
            .is_some_and(|(by, id)| by == caller && id == task_id)
    }

    /// Notes a change the door made, when `result` says it made one.
    pub(super) fn changing<T, E>(&mut self, result: Result<T, E>) -> Result<T, E> {
        self.reads.other = true;
        if result.is_ok() {
            self.changed.store(true, Ordering::Relaxed);
        }
        result
    }

    /// The store's last write, taken before the request's first read of it.
    pub(super) fn reading_tasks(&mut self) {
        let writes = self.session.tasks.store().writes();
        self.reads.tasks_since.get_or_insert_with(|| writes.now());
    }
}

/// The context and the resource table the imports use, borrowed from a
/// store's data.
pub struct DoorCtxView<'a> {
    /// The request's context.
    pub ctx: &'a mut DoorCtx,
    /// The store's table: event readers and pollables live beside
    /// wasi's resources.
    pub table: &'a mut ResourceTable,
}

/// Store data that can answer the door's imports.
pub trait DoorView: Send {
    /// Lends out the context and the table, for one import call.
    fn door(&mut self) -> DoorCtxView<'_>;
}
