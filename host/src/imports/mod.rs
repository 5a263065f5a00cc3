//! The host side of the door's `murmur:door` imports: one file per WIT
//! interface, each implementing its generated host trait over
//! [`DoorCtxView`], the way wasi-http's host traits are implemented over its
//! view.
//!
//! An embedder keeps a [`DoorCtx`] and a
//! [`ResourceTable`](wasmtime::component::ResourceTable) in its own store
//! data, implements [`DoorView`] to lend them out, and calls
//! [`add_to_linker`]: the door's imports then answer from the session the
//! context names, whatever else the store holds.

mod ctx;
pub mod events;
pub mod request_body;
pub mod response_stream;
pub mod session;
pub mod task_store;
pub mod tokens;

pub use ctx::{Declared, Depends, DoorCtx, DoorCtxView, DoorView, FileDeclared, Reads, SentFile};
use wasmtime::component::{HasData, Linker};

use crate::bindings;

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
