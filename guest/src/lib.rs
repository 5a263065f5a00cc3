//! The door of a Murmur capsule: every rule of the door reference that can be
//! decided from the request and from what the host's imports answer.
//!
//! The logic is plain Rust written against [`Imports`], so it compiles and is
//! tested natively; `wasm` is the edge that runs it as a component: the
//! one-call `answer` the host calls (`wasm/answer.rs`), and the
//! `wasi:http` handler any `wasi:http` host calls.

pub mod agent_text;
pub mod card;
pub mod door;
pub mod errors;
pub mod extensions;
pub mod http;
pub mod imports;
pub mod listing;
pub mod message;
pub mod methods;
pub mod model;
pub mod planes;
pub mod rpc;
pub mod security;
pub mod send;
pub mod streams;
pub mod task;
pub mod task_methods;
pub mod timestamp;
pub mod version;

pub use door::{Reply, handle, handle_unless_unread};
pub use http::{Request, Response};
pub use imports::Imports;

#[cfg(target_arch = "wasm32")]
mod wasm;
