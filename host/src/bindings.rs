//! The door's imports (`wit/`) as Rust: the generated types, the host traits
//! each interface's file in [`crate::imports`] implements, and the one-call
//! export the host calls ([`answers`]).
//!
//! The events interface's `events` resource is the generated marker type:
//! the reader behind it is the task layer's own (see
//! [`crate::imports::events`]), so these bindings depend on no other module.
//!
//! Generated items carry no Rust docs: the WIT in `wit/` is where each is
//! documented.
#![allow(missing_docs)]

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
    // waits for its batch to be written; `read` for the request's body.
    imports: {
        "murmur:door/events": trappable,
        "murmur:door/events.[method]events.pass-on": async | trappable,
        "murmur:door/task-store.start": async,
        "murmur:door/request-body.read": async,
        "murmur:door/response-stream.open": trappable,
        "murmur:door/response-stream.send-file": trappable,
    },
    require_store_data_send: true,
    additional_derives: [PartialEq],
});

pub use murmur::door::{events, request_body, response_stream, session, task_store, tokens};

/// The door's one-call `answer` export, as the host calls it.
pub mod answers {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "murmur:door/answers",
        exports: { default: async },
        // The head is lowered from the request's own header map.
        ownership: Borrowing { duplicate_if_necessary: false },
        require_store_data_send: true,
    });

    pub use exports::murmur::door::answer::{FieldLine, Reply, RequestHead, Response};
}

/// The door's `framing` export, as the host calls it on an instance of its
/// own (see [`crate::sandbox::framing`]); its types are the imports' own.
pub mod framings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "murmur:door/framings",
        exports: { default: async },
        with: {
            "wasi:io/poll": wasmtime_wasi::p2::bindings::io::poll,
            "wasi:io/streams": wasmtime_wasi::p2::bindings::io::streams,
            "wasi:io/error": wasmtime_wasi::p2::bindings::io::error,
            "murmur:door/session": crate::bindings::session,
            "murmur:door/task-store": crate::bindings::task_store,
            "murmur:door/events": crate::bindings::events,
        },
        require_store_data_send: true,
    });
}
