//! The host side of the door's `murmur:door` imports: one file per WIT
//! interface, each implementing its generated host trait over
//! [`DoorCtxView`], the way wasi-http's host traits are implemented over its
//! view.
//!
//! An embedder keeps a [`DoorCtx`] and a [`ResourceTable`] in its own store
//! data, implements [`DoorView`] to lend them out, and calls
//! [`add_to_linker`]: the door's imports then answer from the session the
//! context names, whatever else the store holds.

pub mod events;
pub mod request_body;
pub mod response_stream;
pub mod session;
pub mod task_store;
pub mod tokens;

use std::sync::Arc;

use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::component::{HasData, Linker, ResourceTable};

use crate::bindings;
use crate::bindings::task_store::Caller;
use crate::session::Session;

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
    /// The body of a request answered in one call, until the door reads it.
    pub body: Option<request_body::BoxedBody>,
    /// Where a one-call answer that streams sends its head.
    pub head: Option<response_stream::HeadSender>,
    /// The task this request started, and who started it (see
    /// [`DoorCtx::started_by`]).
    pub started: Option<(Caller, String)>,
    /// What frames events for this version's streams apart from them,
    /// when the door can (see [`events::FrameEvents`]).
    pub framer: Option<Arc<dyn events::FrameEvents>>,
    /// Writes of at most [`response_stream::CHUNK_BYTES`] a streamed body
    /// queues ahead of the socket.
    pub stream_chunks: usize,
    /// The body the door read, kept for an answer it declares reusable.
    pub body_read: Option<Bytes>,
    /// The answer the door declared reusable, as sent.
    pub declared: Option<Declared>,
    /// What the door read that such an answer depends on.
    pub reads: Reads,
}

/// A whole answer the door declared reusable (`murmur:door/answer`'s
/// `reusable`), as the host sent it.
#[derive(Clone, Debug)]
pub struct Declared {
    /// Its status and headers, as the door gave them.
    pub status: u16,
    /// Its header lines.
    pub headers: Vec<(String, String)>,
    /// Its whole body.
    pub body: Bytes,
    /// Where the request's JSON-RPC id sits in `body`: its first byte and
    /// its length.
    pub id_at: usize,
    /// The id's length in bytes.
    pub id_len: usize,
}

/// What a request's door read through its imports, for an answer it
/// declares reusable: the versions it read at, what it read, and whether it
/// called anything such an answer cannot stand for.
#[derive(Debug, Default)]
pub struct Reads {
    /// The store's version (see [`crate::session::tasks::store::versions`])
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

impl DoorCtx {
    /// A request's imports, answering from `session`, nothing changed yet.
    pub fn new(session: Arc<Session>) -> DoorCtx {
        DoorCtx {
            session,
            changed: Arc::default(),
            version: 0,
            body: None,
            head: None,
            started: None,
            framer: None,
            stream_chunks: response_stream::QUEUE_BYTES / response_stream::CHUNK_BYTES,
            body_read: None,
            declared: None,
            reads: Reads::default(),
        }
    }

    /// Whether this request started `task_id` for `caller`: then the caller
    /// is known to see it (it owns it), and the stream or settle pollable
    /// that follows needs no look-up in the store.
    fn started_by(&self, caller: &Caller, task_id: &str) -> bool {
        self.started
            .as_ref()
            .is_some_and(|(by, id)| by == caller && id == task_id)
    }

    /// Notes a change the door made, when `result` says it made one.
    fn changing<T, E>(&mut self, result: Result<T, E>) -> Result<T, E> {
        self.reads.other = true;
        if result.is_ok() {
            self.changed.store(true, Ordering::Relaxed);
        }
        result
    }

    /// The store's version, taken before the request's first read of it.
    fn reading_tasks(&mut self) {
        let versions = self.session.tasks.store().versions();
        self.reads.tasks_since.get_or_insert_with(|| versions.now());
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

/// The [`HasData`] the generated `add_to_linker`s take.
struct HasDoor;

impl HasData for HasDoor {
    type Data<'a> = DoorCtxView<'a>;
}

/// Adds the `murmur:door` interfaces (session, tokens, task-store, events,
/// request-body, response-stream) to `linker`, answered through `T`'s [`DoorView`].
pub fn add_to_linker<T: DoorView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    bindings::session::add_to_linker::<T, HasDoor>(linker, T::door)?;
    bindings::tokens::add_to_linker::<T, HasDoor>(linker, T::door)?;
    bindings::task_store::add_to_linker::<T, HasDoor>(linker, T::door)?;
    bindings::events::add_to_linker::<T, HasDoor>(linker, T::door)?;
    bindings::request_body::add_to_linker::<T, HasDoor>(linker, T::door)?;
    bindings::response_stream::add_to_linker::<T, HasDoor>(linker, T::door)?;
    Ok(())
}
