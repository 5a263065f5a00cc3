//! The door of a Murmur capsule: every rule of the door reference that can be
//! decided from the request and from what the host's imports answer.
//!
//! The logic is plain Rust written against [`Imports`], so it compiles and is
//! tested natively. Its folders are layers, bottom to top, each using only
//! those below it (`host/src/layers.rs` checks it): [`imports`] (what the door
//! asks the host, and the facts it answers), [`rpc`] (HTTP, JSON-RPC, every
//! error, A2A-Version, the extensions), [`planes`] (the operator and peer
//! planes) and [`methods`] (the A2A methods), then [`door`] (the check order,
//! the card, who may call); [`timestamp`] is the dates below them all.
//! `wasm` is the edge that runs the door as a component: the one-call
//! `answer` the host calls (`wasm/answer.rs`), and the `wasi:http` handler
//! any `wasi:http` host calls (`wasm/http.rs`).

pub mod door;
pub mod imports;
pub mod methods;
pub mod planes;
pub mod rpc;
pub mod timestamp;

pub use door::{Reply, handle, handle_unless_unread};
pub use imports::Imports;
pub use rpc::http::{Request, Response};

#[cfg(target_arch = "wasm32")]
mod wasm;
