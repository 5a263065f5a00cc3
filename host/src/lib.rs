//! The wasmtime host of a Murmur capsule's door: it runs the door component
//! sandboxed, each request in an instance of its own (kept for the same
//! caller's next request, see [`idle`]), and answers its imports from
//! the session it keeps.
//!
//! One rule for locks: a poisoned lock is recovered, everywhere. Each guards
//! data that every step under it leaves whole, so a panic while it was held
//! (a host bug) leaves nothing half-written, and the requests after it
//! should not fail too.

pub mod admission;
pub mod agents;
pub mod bindings;
pub mod body;
pub mod cache;
pub mod capsule;
pub mod card_cache;
pub mod connections;
pub mod control;
pub mod cpu;
pub mod engine;
pub mod framing;
pub mod handles;
pub mod host;
pub mod host_control;
pub mod idle;
pub mod imports;
pub mod manifest;
pub mod memory;
pub mod metrics;
#[cfg(feature = "native-door")]
pub mod native;
pub mod one_call;
pub mod planes;
pub mod process;
pub mod proxies;
pub mod redeems;
pub mod request;
pub mod roster;
pub mod server;
pub mod session;
pub mod swap;
pub mod tasks;
pub mod tokens;

#[cfg(test)]
mod layers;
