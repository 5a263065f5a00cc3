//! The session's durable record: one SQLite file, `STATE/session.db`, holding
//! the session (its id and when it started) and every task it held.
//!
//! The store knows rows, not rules: which transitions are allowed, who may
//! start what and when an agent runs is the hub's business (`tasks/mod.rs`).
//! It answers reads already filtered by who is asking ([`Sees`]), so a task
//! the caller does not see cannot leak through a read.
//!
//! Every write is one statement or one transaction on one connection behind a
//! mutex: SQLite is fast enough for a door's rate of state changes, and one
//! writer keeps the session-wide change counter gap-free and ordered. New
//! tasks are written in batches ([`Store::batch`]): one transaction, each
//! write in a savepoint of its own, so that the tasks concurrent requests
//! start cost one commit, and the pages they share (the tree's newest
//! leaves, the counts, the session row) are written to the log once.
//!
//! The store also numbers the session's events (`tasks/events`): a write
//! that the hub publishes events for asks for that many ids, and the last id
//! is written to the session row in the same transaction, so ids keep
//! increasing across `--resume`.
//!
//! Opening the file (`open`) and each connection to it (`file`), the
//! connections that only read (`readers`), its tables (`schema`), the reads
//! and writes (`queries`), who sees a task (`visibility`), the conversions
//! between columns and the generated types (`codecs`), the numbers of its
//! committed writes, for reused answers (`writes`), and the copying of the
//! log into the file, off the writer's connection (`checkpoint`), are
//! modules of their own, over the store and the records the hub writes
//! with (`base`).

mod base;
mod checkpoint;
mod codecs;
mod file;
mod open;
mod queries;
mod readers;
mod schema;
mod visibility;
pub mod writes;

pub use base::{NewRecord, Restarted, Store, Transition};
pub use codecs::state_word;
pub use open::{ARCHIVE_DIR, Opened, RESTARTED, SESSION_DB, own_files};
pub use queries::Batch;
pub use visibility::{Owner, Sees};

#[cfg(test)]
mod tests;
