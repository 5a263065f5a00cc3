//! The wasmtime host of a Murmur capsule's door: it runs the door component
//! sandboxed, each request on an instance that behaves as if it were fresh,
//! and answers the door's imports from the session it keeps.
//!
//! Its folders are its layers, bottom to top (the README's layer table):
//! `bindings`, `manifest`, `session`, `imports`, `sandbox`, `versions`,
//! `listener`, `hosting`. The crate root re-exports what an embedder uses:
//! a host of capsules ([`host::Host`], with [`roster::Entry`] and
//! [`host_control`]) or one capsule's door ([`capsule::Capsule`]); the
//! server, engine and imports beneath them ([`server::Server`],
//! [`engine::Door`], [`imports::add_to_linker`]); and the session a runtime
//! drives ([`session::Session`], [`agents::Agent`], [`tasks::Hub`]).
//!
//! One rule for locks: a poisoned lock is recovered, everywhere. Each guards
//! data that every step under it leaves whole, so a panic while it was held
//! (a host bug) leaves nothing half-written, and the requests after it
//! should not fail too.

#![warn(missing_docs)]

pub mod bindings;
mod hosting;
pub mod imports;
mod listener;
pub mod manifest;
mod sandbox;
pub mod session;
mod versions;

pub use hosting::{capsule, host, host_control, roster};
pub use listener::{accept, admission, connections, hostnames, proxies, server};
pub use sandbox::{cache, cpu, engine, memory, request};
pub use session::{agents, handles, tasks};
pub use versions::{control, reuse, swap};

#[cfg(test)]
mod layers;
