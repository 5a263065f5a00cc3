//! The wasmtime host of a Murmur capsule's door: it runs the door component
//! sandboxed, each request on an instance that behaves as if it were fresh,
//! and answers the door's imports from the session it keeps.
//!
//! Its folders are its layers, bottom to top (the README's layer table):
//! `bindings`, `surface` (what both control surfaces are made of) and
//! `telemetry` (the log and the traces),
//! `manifest`, `session`, `imports`, `sandbox`, `versions`, `listener`,
//! `hosting`. The crate root re-exports what an embedder calls:
//! a host of capsules ([`host::Host`], with [`roster::Entry`] and
//! [`host_control`]) or one capsule's door ([`capsule::Capsule`]); the
//! server, engine and imports beneath them ([`server::Server`] and its
//! [`proxies`], [`engine::Door`] and its compile [`cache`], the limits of
//! a [`request`], [`imports::add_to_linker`]); the swap of a door version
//! ([`swap`], [`control`]); and the session a runtime drives
//! ([`session::Session`], [`agents::Agent`], [`tasks::Hub`],
//! [`handles`]).
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
mod surface;
mod telemetry;
mod versions;

pub use hosting::{capsule, host, host_control, roster};
pub use listener::{proxies, server};
pub use sandbox::{cache, engine, request};
pub use session::{agents, handles, tasks};
pub use versions::{control, swap};

/// What the `murmur-door` binary, the benchmarks and the end-to-end tests
/// reach beneath an embedder's calls: the defaults the binary's flags show
/// and the helpers that fit them to the machine, the CPU and memory
/// meters, the counts of reused answers, the accept loop. It follows the
/// binary, not a promise to embedders.
#[doc(hidden)]
pub mod internal {
    pub use crate::listener::{accept, admission, connections};
    pub use crate::sandbox::{cpu, memory};
    /// The log and the traces, as the binary installs them.
    pub mod telemetry {
        pub use crate::telemetry::{Tracing, install};
    }
    pub use crate::versions::reuse;
}

#[cfg(test)]
mod layers;
