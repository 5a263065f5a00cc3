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
    fn changing<T, E>(&self, result: Result<T, E>) -> Result<T, E> {
        if result.is_ok() {
            self.changed.store(true, Ordering::Relaxed);
        }
        result
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
