//! The session's tasks: the durable record ([`store`]) and the hub that
//! coordinates what is live on top of it. [`Hub`] is defined here with what
//! its parts share: the live state, writing a transition with its events,
//! reads, and closing. Its work is spread over one module per concern:
//! `capacity` (acceptance and the queue), `lifecycle` (the agent running each
//! task, replies, progress, endings and cancellation), `delegations` (the
//! completions a task awaits), `detached` (the commands a task leaves
//! running), `settled` (the pollables a held SendMessage waits on) and
//! `own` (what the session's own tasks say).
//!
//! Every state change is written to the store first, then announced (the
//! task's watchers, its settle pollables, the event log), so whatever a
//! watcher reads is already durable. One mutex guards what is live; it is
//! never held across an await, and it is always taken before the store's own
//! lock and the event log's.
//!
//! Every event is numbered by the store with the write it belongs to and
//! published to the [`events`] log while the live lock is still held, so the
//! log receives ids in order.
//!
//! The starts of concurrent requests are written together (`capacity`):
//! the first to find none forming leads a batch, lets the other ready
//! requests join it, and writes them in one transaction; nothing of any is
//! announced before it commits. A batch holds at most one start per door
//! run in progress, which admission bounds.

pub mod agent;
mod capacity;
mod delegations;
pub(crate) mod detached;
pub mod events;
pub mod ids;
mod lifecycle;
pub mod lock;
pub mod own;
mod settled;
pub mod store;
#[cfg(test)]
pub(crate) mod testing;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, watch};
use tokio::task::AbortHandle;

pub use crate::bindings::session::{
    CompletionRefusal, DetachedShell, ResidueItem, StopReport, TaskAcceptance,
};
pub use crate::bindings::task_store::{
    Cursor, Image, ListQuery, MemberStatus, NewTask, Origin, Page, RunningCommand, Status, Task,
    TaskError, TaskMetadata, TaskState,
};
pub use crate::bindings::tokens::Credential;
use agent::{Agent, TaskInput};
use delegations::Awaited;
use detached::Detached;
use events::{EventBody, EventLog, Reader};
use settled::Progress;
use store::{Sees, Store, Transition};

pub use capacity::{BUSY, CLOSING};
pub use delegations::{Child, Delegation};
pub use detached::COMMAND_CHARS;
pub use lifecycle::{COMPLETED, NO_ANSWER_BELOW, RunningTask};
pub use settled::Settled;

/// Who is asking: `None` is a caller of a public door.
pub type Caller = Option<Credential>;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Whether a state is one a task can still leave.
pub fn is_live(state: TaskState) -> bool {
    matches!(
        state,
        TaskState::Submitted | TaskState::Working | TaskState::InputRequired
    )
}

/// Whether a held SendMessage answers a task in this state.
pub fn is_settled(state: TaskState) -> bool {
    !matches!(state, TaskState::Submitted | TaskState::Working)
}

/// The session's tasks, live and recorded.
pub struct Hub {
    store: Store,
    agent: Arc<dyn Agent>,
    acceptance: TaskAcceptance,
    events: Arc<EventLog>,
    closing: AtomicBool,
    /// `true` once the session closes: wakes every settle pollable.
    closed: watch::Sender<bool>,
    live: Mutex<Live>,
    /// Starts waiting to be written in one batch (`capacity`).
    starting: Mutex<capacity::Starting>,
}

/// What is live, guarded by one mutex.
#[derive(Default)]
struct Live {
    /// Every live task (submitted, working, input-required).
    tasks: HashMap<String, Running>,
    /// `queue`: tasks waiting for the capsule, in order, with their input.
    queue: VecDeque<(String, TaskInput)>,
    /// Delegations a live task waits for, by delegation id.
    delegations: HashMap<String, Awaited>,
    /// Every detached command of the session, in the order they started.
    detached: Vec<Detached>,
}

struct Running {
    state: TaskState,
    context_id: String,
    /// The agent has been handed the task (`queue` runs one at a time).
    started: bool,
    /// The runner, once the agent runs: aborting it drops the agent's future.
    runner: Option<AbortHandle>,
    /// The agent runs it, and `working` is not recorded yet (see
    /// [`lifecycle::WORKING_WITHIN`]).
    working_unrecorded: bool,
    /// While `input-required`: where the reply goes.
    reply: Option<oneshot::Sender<String>>,
    watch: watch::Sender<Progress>,
    /// The sub-capsules it delegated to, still open.
    delegated: Vec<crate::bindings::session::Delegation>,
    /// The members that gave it no answer (`noAnswerBelow`).
    no_answer_below: Vec<MemberStatus>,
}

impl Hub {
    /// A hub over `store`, running each task with `agent`, its event log
    /// replaying the newest events `replay_buffer` keeps. The events of the
    /// tasks `--resume` failed are the log's first.
    pub fn new(
        store: Store,
        agent: Arc<dyn Agent>,
        acceptance: TaskAcceptance,
        replay_buffer: impl Into<events::Replay>,
    ) -> Arc<Hub> {
        let restarted = store.take_restarted();
        let before = restarted
            .first()
            .map_or(store.last_event(), |r| r.event_id - 1);
        let events = EventLog::new(replay_buffer, before);
        for task in restarted {
            events.publish(
                task.event_id..task.event_id + 1,
                &task.task_id,
                &task.context_id,
                vec![events::status(
                    TaskState::Failed,
                    Some(store::RESTARTED.to_string()),
                    None,
                    task.timestamp_ms,
                )],
            );
        }
        Arc::new(Hub {
            store,
            agent,
            acceptance,
            events,
            closing: AtomicBool::new(false),
            closed: watch::Sender::new(false),
            live: Mutex::new(Live::default()),
            starting: Mutex::default(),
        })
    }

    /// The agent running the session's tasks.
    pub fn agent(&self) -> &Arc<dyn Agent> {
        &self.agent
    }

    /// The session record this hub writes to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session's event log.
    pub fn events(&self) -> &Arc<EventLog> {
        &self.events
    }

    /// A reader of the events of task `id` after `after` (none: those
    /// written from now on), when the caller sees the task.
    pub fn task_events(
        &self,
        caller: &Caller,
        id: &str,
        after: Option<u64>,
    ) -> Result<Reader, TaskError> {
        self.seen(caller, id)?;
        Ok(self.events.task_reader(id, after))
    }

    /// A reader of every task's events after `after` (none: from the oldest
    /// the log still holds).
    pub fn session_events(&self, after: Option<u64>) -> Reader {
        self.events.session_reader(after)
    }

    /// Writes a transition and publishes its events. The `&Live` is the
    /// proof the live lock is held, which keeps the log's ids in order.
    fn write(
        &self,
        live: &Live,
        id: &str,
        to: &Transition,
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        self.write_steps(live, id, &[to], now)
    }

    /// Writes the last of `steps` as one change, and publishes the events
    /// of every step in order: a task that passes through a state (working)
    /// on its way to another in the same moment has its events, but the
    /// store is written once.
    fn write_steps(
        &self,
        _live: &Live,
        id: &str,
        steps: &[&Transition],
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        let Some(to) = steps.last() else {
            return Ok(None);
        };
        let bodies = steps_events(steps, now);
        let Some((task, ids)) = self.store.transition(id, to, now, bodies.len() as u64)? else {
            return Ok(None);
        };
        self.events.publish(ids, &task.id, &task.context_id, bodies);
        Ok(Some(task))
    }

    /// The images task `id` started with, in part order, for the runtime
    /// that shows them to its model (the door never reads them back).
    pub fn images(&self, id: &str) -> Result<Vec<Image>, TaskError> {
        self.store.images(id).map_err(unavailable)
    }

    /// The task as it stands, when the caller sees it.
    pub fn get(&self, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        self.seen(caller, id)
    }

    fn seen(&self, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        self.store
            .get(id, &Sees::of(caller))
            .map_err(unavailable)?
            .ok_or(TaskError::NotFound)
    }

    /// One page of the tasks the caller sees.
    pub fn list(&self, caller: &Caller, query: &ListQuery) -> Result<Page, TaskError> {
        self.store
            .list(&Sees::of(caller), query)
            .map_err(unavailable)
    }

    /// How many tasks are in each state (murmur's words).
    pub fn count_by_state(&self) -> Result<Vec<(String, u64)>, TaskError> {
        self.store.count_by_state().map_err(unavailable)
    }

    /// Whether [`Hub::close`] has been called: new tasks are rejected.
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// The session closes: new tasks are rejected, completions refused,
    /// every settle pollable is ready, every event reader ends with `closed`
    /// after what was written so far, and every detached command's process
    /// group is killed. Tasks keep their recorded state; the agents still
    /// running end with the process (or the embedder's runtime).
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.closed.send_replace(true);
        self.events.close();
        Hub::kill_detached(&self.lock());
    }
}

impl Drop for Hub {
    /// A session dropped without closing still ends what it detached.
    fn drop(&mut self) {
        Hub::kill_detached(&self.lock());
    }
}

/// The events a transition writes: the artifact it writes first (`response`,
/// `prompt`, or `residue` when the cancel left something running), then its
/// status. A question is the status message of its `input-required`, with a
/// message id of its own; a terminal status carries its message, if any.
fn transition_events(to: &Transition, now: i64) -> Vec<EventBody> {
    let mut bodies = Vec::new();
    let mut message = to.message.clone();
    let mut message_id = None;
    if let Some(response) = &to.response {
        bodies.push(events::text_artifact("response", response.clone()));
    }
    if let Some(prompt) = &to.prompt {
        bodies.push(events::text_artifact("prompt", prompt.clone()));
        message = Some(prompt.clone());
        message_id = Some(ids::message_id());
    }
    if !to.residue.is_empty() {
        bodies.push(events::residue_artifact(to.residue.clone()));
    }
    bodies.push(events::status(to.state, message, message_id, now));
    bodies
}

/// The events of passing through `steps` in order.
fn steps_events(steps: &[&Transition], now: i64) -> Vec<EventBody> {
    steps
        .iter()
        .flat_map(|step| transition_events(step, now))
        .collect()
}

fn unavailable(e: rusqlite::Error) -> TaskError {
    tracing::error!(error = %e, "the task store failed");
    TaskError::Unavailable(format!("the task store failed: {e}"))
}

#[cfg(test)]
mod tests;
