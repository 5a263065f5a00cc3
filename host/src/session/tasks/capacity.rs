//! Capacity: whether a new task runs, waits or is refused. `none` and
//! `single` take one live task and reject the others ([`BUSY`]); `queue`
//! keeps the others waiting in order ([`Queue`]) and hands the next one to
//! the agent once nothing runs. A closing session rejects every new task
//! ([`CLOSING`]).
//!
//! The starts of concurrent requests are written together ([`Starts`]):
//! the first to find none forming leads a batch, lets the other ready
//! requests join it, and writes them in one transaction; nothing of any is
//! announced before it commits. A batch holds at most one start per door
//! run in progress, which admission bounds.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::agent::TaskInput;
use crate::bindings::session::TaskAcceptance;
use crate::bindings::task_store::{NewTask, Origin, Task, TaskError};

/// The status message of a task refused because another one is live.
pub const BUSY: &str = "task rejected: capsule is busy";
/// The status message of a task refused because the session is closing.
pub const CLOSING: &str = "task rejected: the session is closing";

/// Why a new task is refused, if it is: the session is `closing`, or,
/// unless `acceptance` queues, a task is live (`busy`). The session's own
/// tasks are never refused for being busy: one that finds the capsule busy
/// waits its turn, as in `queue`.
pub(super) fn refusal(
    closing: bool,
    acceptance: TaskAcceptance,
    origin: Origin,
    busy: bool,
) -> Option<&'static str> {
    if closing {
        Some(CLOSING)
    } else if acceptance != TaskAcceptance::Queue && origin != Origin::Session && busy {
        Some(BUSY)
    } else {
        None
    }
}

/// `queue`: the tasks waiting for the capsule, in order, with their input.
#[derive(Default)]
pub(super) struct Queue(VecDeque<(String, TaskInput)>);

impl Queue {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Task `id` waits, last.
    pub(super) fn push(&mut self, id: String, input: TaskInput) {
        self.0.push_back((id, input));
    }

    /// The task that waited longest, and its input.
    pub(super) fn pop(&mut self) -> Option<(String, TaskInput)> {
        self.0.pop_front()
    }

    /// Task `id` waits no more.
    pub(super) fn remove(&mut self, id: &str) {
        self.0.retain(|(queued, _)| queued != id);
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// A start as [`Hub::start_settled`](super::Hub::start_settled) answers it:
/// the task as first recorded, and as it settled when it was written ended.
pub type Started = Result<(Task, Option<Task>), TaskError>;

/// A start, and the span of the request that asked for it (when traced).
pub(super) type Asked = (NewTask, Option<tracing::Span>);

/// A start waiting for its batch, and where its answer goes.
pub(super) type Waiting = (Asked, oneshot::Sender<Started>);

/// The starts waiting for a batch
/// ([`Hub::start_batched`](super::Hub::start_batched)), behind a lock of
/// their own.
#[derive(Default)]
pub(super) struct Starts(Mutex<Starting>);

#[derive(Default)]
struct Starting {
    waiting: Vec<Waiting>,
    /// A batch is forming or being written: new starts join it or the next.
    leading: bool,
    /// How many batches in a row held one start: 0 after one that held
    /// more (or before the first), when the next lead waits for others to
    /// join.
    lone: u32,
}

impl Starts {
    fn lock(&self) -> MutexGuard<'_, Starting> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a start to the batch forming. Answers whether it leads the
    /// batch (none was forming), and whether the lead waits for others to
    /// join: after a batch of many, always; while batches hold one, now and
    /// then ([`PROBE_EVERY`]), to find out whether others have come.
    pub(super) fn join(&self, waiting: Waiting) -> (bool, bool) {
        let mut starting = self.lock();
        starting.waiting.push(waiting);
        let lead = !std::mem::replace(&mut starting.leading, true);
        let wait = starting.lone.is_multiple_of(PROBE_EVERY);
        (lead, wait)
    }

    /// The starts of the next batch: those waiting, [`MAX_BATCH`] at most.
    pub(super) fn take(&self) -> Vec<Waiting> {
        let mut starting = self.lock();
        starting.lone = match starting.waiting.len() {
            1 => starting.lone.wrapping_add(1),
            _ => 0,
        };
        let taken = starting.waiting.len().min(MAX_BATCH);
        starting.waiting.drain(..taken).collect()
    }

    /// Whether starts wait for another batch, which the same lead writes;
    /// with none, the lead is let go.
    pub(super) fn more(&self) -> bool {
        let mut starting = self.lock();
        if starting.waiting.is_empty() {
            starting.leading = false;
            return false;
        }
        true
    }
}

/// The most starts one batch writes. A batch holds the live state and the
/// store while it is written, and a start's statements take about 15 µs:
/// bounded, a read waits about a millisecond at most behind a batch,
/// however many requests start tasks at once.
pub(super) const MAX_BATCH: usize = 64;

/// Once batches hold one start, the lead waits for others to join one
/// time in this many: a lone client's starts mostly cost no yield, and
/// clients that come find the batches again.
pub(super) const PROBE_EVERY: u32 = 16;
