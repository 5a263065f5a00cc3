//! The store and what it holds: the writer's connection behind a mutex,
//! the connections that only read, the checkpoints, the numbered writes;
//! and the records the hub writes with. Opening it (`open`), its tables
//! (`schema`) and its reads and writes (`queries`) stand on this.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use super::checkpoint::Checkpoints;
use super::readers::Readers;
use super::visibility::Owner;
use super::writes::Writes;
use crate::bindings::session::ResidueItem;
use crate::bindings::task_store::{Image, Origin, TaskMetadata, TaskState};
use crate::session::tasks::lock::StateLock;

/// A task as the hub first records it.
#[derive(Clone, Debug)]
pub struct NewRecord {
    /// `tsk_…`
    pub id: String,
    /// `ctx_…`, or the context the client named.
    pub context_id: String,
    /// Who the task belongs to: whose requests see it.
    pub owner: Owner,
    /// Where the task came from (`x-murmur-task-origin`).
    pub origin: Origin,
    /// `x-murmur-task-trust`, when the request carried one.
    pub trust: Option<String>,
    /// `submitted`, or `rejected` for a task the door had no room for.
    pub state: TaskState,
    /// Why a `rejected` task was refused; None for a `submitted` one.
    pub status_message: Option<String>,
    /// The tasks the message referenced, each once, in first-occurrence order.
    pub reference_task_ids: Vec<String>,
    /// forgetSession: drop the harness session this context names first.
    pub forget_session: bool,
    /// The message's images, kept for the runtime (never for a rejected
    /// task).
    pub images: Vec<Image>,
    /// When the task was submitted: milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// A task's new status and the artifacts and metadata that go with it. Every
/// field replaces what the task held: a task leaving `input-required` drops
/// its prompt, and only a completed one carries a response.
#[derive(Clone, Debug)]
pub struct Transition {
    /// The task's new state.
    pub state: TaskState,
    /// The new status's message, when it has one.
    pub message: Option<String>,
    /// The response artifact: only a completed task carries one.
    pub response: Option<String>,
    /// The prompt artifact of a task waiting for input.
    pub prompt: Option<String>,
    /// The residue artifact of a cancelled task: what the session still runs.
    pub residue: Vec<ResidueItem>,
    /// What a terminal task says of the answers it lacks and the commands
    /// it left running.
    pub metadata: TaskMetadata,
}

impl Transition {
    /// `state` with nothing else to say.
    pub fn to(state: TaskState) -> Transition {
        Transition {
            state,
            message: None,
            response: None,
            prompt: None,
            residue: Vec::new(),
            metadata: TaskMetadata {
                no_answer: false,
                no_answer_below: Vec::new(),
                running_commands: Vec::new(),
            },
        }
    }
}

/// A task `--resume` failed, and the id of the status event that says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restarted {
    /// The id of the `failed` status event.
    pub event_id: u64,
    /// The task `--resume` failed.
    pub task_id: String,
    /// Its context, `ctx_…`.
    pub context_id: String,
    /// When it was failed, in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

/// The session's record: `STATE/session.db` ([`Store::open`]), or a
/// database in memory ([`Store::in_memory`]).
pub struct Store {
    pub(super) session_id: String,
    pub(super) created_ms: i64,
    /// Connections that only read (a file's store). Before the writer's:
    /// they close first, leaving the log to the connections that write.
    pub(super) readers: Option<Readers>,
    pub(super) inner: Mutex<Inner>,
    /// The tasks `--resume` failed, until the hub publishes their events.
    pub(super) restarted: Mutex<Vec<Restarted>>,
    /// Transactions committed by [`Store::batch`] since the store opened.
    pub(super) commits: AtomicU64,
    /// What each committed write to a task changed, for answers reused
    /// while they hold.
    pub(super) writes: Writes,
    /// Copies the log into the file off the request path (a file's store).
    /// Before the lock: its connection closes before the directory is let go.
    pub(super) checkpoints: Option<Checkpoints>,
    /// The state directory's lock, held while the store lives.
    pub(super) _lock: Option<StateLock>,
}

pub(super) struct Inner {
    pub(super) conn: Connection,
    /// The highest change number written.
    pub(super) last_change: u64,
    /// The id of the newest event numbered.
    pub(super) last_event: u64,
}

impl Store {
    /// `ses_…`
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// When the session started, in milliseconds since the Unix epoch.
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }

    /// How many transactions [`Store::batch`] has committed: a batch of
    /// writes is one.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// The id of the newest event numbered, 0 before the first.
    pub fn last_event(&self) -> u64 {
        self.lock().last_event
    }

    /// The tasks `--resume` failed and their events' ids, once: the hub
    /// publishes them when it starts.
    pub fn take_restarted(&self) -> Vec<Restarted> {
        std::mem::take(&mut self.restarted.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The store's writes, numbered (see [`writes`](super::writes)).
    pub fn writes(&self) -> &Writes {
        &self.writes
    }

    /// After a commit on `writer` (see [`checkpoint`](super::checkpoint)) that changed `tasks`.
    /// `tasks` changed ahead of their write (a held task the session took
    /// and writes later): an answer read before no longer holds.
    pub fn changing(&self, tasks: Vec<String>) {
        self.writes.committed(tasks);
    }

    pub(super) fn committed(&self, writer: &Connection, tasks: Vec<String>) {
        self.writes.committed(tasks);
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.committed(writer);
        }
    }

    /// Runs `read` on a reader, waiting for one while all are busy; on the
    /// writer's connection when none can be opened or the store is kept in
    /// memory (see [`readers`](super::readers)).
    pub(super) fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        match self.readers.as_ref().and_then(|readers| readers.take()) {
            Some(reader) => read(&reader),
            None => read(&self.lock().conn),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the connection usable: every
        // write is one statement or transaction, which SQLite keeps whole.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
