//! The wasmtime host of a Murmur capsule's door: it runs the door component
//! sandboxed, each request in an instance of its own (kept for the same
//! caller's next request, see [`idle`]), and answers its imports from
//! the session it keeps.
//!
//! One rule for locks: a poisoned lock is recovered, everywhere. Each guards
//! data that every step under it leaves whole, so a panic while it was held
//! (a host bug) leaves nothing half-written, and the requests after it
//! should not fail too.

pub mod bindings;
pub mod hosting;
pub mod imports;
pub mod listener;
pub mod manifest;
pub mod sandbox;
pub mod session;
pub mod versions;

pub use hosting::{capsule, host, host_control, roster};
#[cfg(feature = "native-door")]
pub use listener::native;
pub use listener::{admission, body, connections, metrics, proxies, redeems, server};
pub use manifest::planes;
pub use sandbox::{cache, cpu, engine, framing, idle, memory, one_call, request};
pub use session::{agents, handles, process, tasks, tokens};
pub use versions::{card_cache, control, swap};

#[cfg(test)]
mod layers;
