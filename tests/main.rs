//! The end-to-end tests, one binary: each module starts the release binary
//! (or, for `guest_faults`, the host library) and speaks HTTP to it, one
//! rule family a module. `cargo test --release --test e2e <module>::` runs
//! one family; the helpers they share are in `common/`.

mod common;

mod agent_stdio;
mod agents;
mod card;
mod card_proto;
mod deploy;
mod drain;
mod exposure;
mod front_door;
mod guest_faults;
mod hostile;
mod hosting;
mod interop;
mod launch;
mod listing;
mod messages;
mod planes;
mod public_url;
mod resume;
mod reuse;
mod reuse_files;
mod runtime;
mod standalone;
mod streams;
mod swap;
mod tasks;
mod traces;
mod visibility;
