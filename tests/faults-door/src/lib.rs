//! A door component that answers garbage, for `tests/guest_faults.rs`: it
//! exports `wasi:http/incoming-handler` and misbehaves according to the
//! request's path.
//!
//! | Path | What the door does |
//! | --- | --- |
//! | `/error-code` | answers an `error-code` (internal-error with a 1 MiB message) instead of a response |
//! | `/short-body` | declares `content-length: 100`, writes 9 bytes, waits 100 ms and finishes |
//! | `/cut-stream` | starts an event stream, writes one event, waits 100 ms and traps |
//! | `/pile-resources` | makes header fields without end and never drops them |
//! | `/huge-head` | pads one header field without end |
//! | `/sticky` | answers what the first request its instance served said (`Authorization`, authority), kept in a static |
//! | `/.well-known/agent-card.json` | a random number, `cache-control: private` with `?private`, else public |
//! | `/garbage-head` | tries a status of 1000 and malformed and forbidden headers, then answers 200 listing what the host refused |
//!
//! It is built for wasm32-wasip2 by the test; natively it is empty.

#[cfg(target_arch = "wasm32")]
mod wasm;
