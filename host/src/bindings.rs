//! The door's imports (`wit/`) as Rust: the generated types, the host traits
//! each interface's file in [`crate::imports`] implements, and nothing else.
//!
//! The events interface's `events` resource is the generated marker type:
//! the reader behind it is the task layer's own (see
//! [`crate::imports::events`]), so these bindings depend on no other module.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "murmur:door/imports",
    with: {
        "wasi:io/poll": wasmtime_wasi::p2::bindings::io::poll,
        "wasi:io/streams": wasmtime_wasi::p2::bindings::io::streams,
        "wasi:io/error": wasmtime_wasi::p2::bindings::io::error,
    },
    // A reader handle the table does not hold is a host bug, not an answer:
    // it traps the request rather than panicking the host.
    // `pass-on` waits for events and for the client to take them; `start`
    // waits for its batch to be written.
    imports: {
        "murmur:door/events": trappable,
        "murmur:door/events.[method]events.pass-on": async | trappable,
        "murmur:door/task-store.start": async,
    },
    require_store_data_send: true,
    additional_derives: [PartialEq],
});

pub use murmur::door::{events, session, task_store, tokens};
