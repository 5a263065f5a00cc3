//! The session's tasks: the durable record ([`store`]) and the hub that
//! coordinates what is live on top of it — capacity, the agent running each
//! task, replies, cancellation, completions, detached commands, and the
//! pollables a held SendMessage waits on.
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

pub mod agent;
pub mod events;
pub mod ids;
pub mod lock;
pub mod store;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, watch};
use tokio::task::AbortHandle;

pub use crate::bindings::session::{
    CompletionRefusal, DetachedShell, ResidueItem, StopReport, TaskAcceptance,
};
pub use crate::bindings::task_store::{
    Cursor, Image, ListQuery, NewTask, Origin, Page, RunningCommand, Status, Task, TaskError,
    TaskMetadata, TaskState,
};
pub use crate::bindings::tokens::Credential;
use crate::process;
use agent::{Agent, Outcome, TaskInput};
use events::{EventBody, EventLog, FrameKind, Reader};
use store::{NewRecord, Owner, Sees, Store, Transition};

/// A completed task's final status message ("Messages", "GetTask",
/// "ListTasks": the examples' `task completed`): stored with the ending, so
/// the terminal status a stream carries and what GetTask shows agree.
pub const COMPLETED: &str = "task completed";

/// How often an ending the store refused is tried again.
const END_RETRY: Duration = Duration::from_secs(1);

/// Who is asking: `None` is a caller of a public door.
pub type Caller = Option<Credential>;

/// The status message of a task refused because another one is live.
pub const BUSY: &str = "task rejected: capsule is busy";
/// The status message of a task refused because the session is closing.
pub const CLOSING: &str = "task rejected: the session is closing";
/// `runningCommands[].command` keeps this many characters, then `…`.
pub const COMMAND_CHARS: usize = 200;

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
    /// While `input-required`: where the reply goes.
    reply: Option<oneshot::Sender<String>>,
    watch: watch::Sender<Progress>,
}

/// What a settle pollable watches on a live task.
#[derive(Clone, Copy, Debug)]
struct Progress {
    state: TaskState,
    /// How many times the task has settled: a pollable made before a settle
    /// stays ready even when a reply moves the task on before it looks.
    settles: u64,
}

/// A delegation a live task awaits. It takes one completion: handed to the
/// waiting handle, or kept until the task asks for it again.
struct Awaited {
    task_id: String,
    waiter: Option<oneshot::Sender<String>>,
    /// A completion that arrived while no handle waited.
    arrived: Option<String>,
}

struct Detached {
    item: DetachedShell,
    task_id: String,
    /// The process group (the `sh` that leads it).
    pgid: i32,
    /// Set once the `sh` has exited and been reaped.
    done: Arc<AtomicBool>,
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
        })
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
        _live: &Live,
        id: &str,
        to: &Transition,
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        let bodies = transition_events(to, now);
        let Some((task, ids)) = self.store.transition(id, to, now, bodies.len() as u64)? else {
            return Ok(None);
        };
        self.events.publish(ids, &task.id, &task.context_id, bodies);
        Ok(Some(task))
    }

    /// Starts a task: stored `submitted` and handed to the agent, or queued
    /// behind the live one (`queue`); stored `rejected` with [`BUSY`] when
    /// another task is live (`single`), or [`CLOSING`] when the session is
    /// closing. Answers the task as first recorded. Needs a tokio runtime.
    pub fn start(self: &Arc<Self>, new: NewTask) -> Result<Task, TaskError> {
        let id = ids::task_id();
        let context_id = new.context_id.unwrap_or_else(ids::context_id);
        let mut live = self.lock();
        let refusal = if self.closing() {
            Some(CLOSING)
        } else if self.acceptance != TaskAcceptance::Queue && !live.tasks.is_empty() {
            Some(BUSY)
        } else {
            None
        };
        let record = NewRecord {
            id: id.clone(),
            context_id: context_id.clone(),
            owner: Owner::of(&new.caller),
            origin: new.origin,
            trust: new.trust.clone(),
            state: if refusal.is_some() {
                TaskState::Rejected
            } else {
                TaskState::Submitted
            },
            status_message: refusal.map(str::to_string),
            reference_task_ids: new.reference_task_ids,
            forget_session: new.forget_session,
        };
        let now = now_ms();
        let first = events::status(record.state, record.status_message.clone(), None, now);
        let (task, ids) = self.store.insert(&record, now, 1).map_err(unavailable)?;
        self.events
            .publish(ids, &task.id, &task.context_id, vec![first]);
        if refusal.is_some() {
            return Ok(task);
        }
        let input = TaskInput {
            task_id: id.clone(),
            context_id: context_id.clone(),
            text: new.text,
            images: new.images,
            origin: new.origin,
            trust: new.trust,
            forget_session: new.forget_session,
        };
        let run_now = !live.tasks.values().any(|t| t.started) && live.queue.is_empty();
        live.tasks.insert(
            id.clone(),
            Running {
                state: TaskState::Submitted,
                context_id,
                started: run_now,
                runner: None,
                reply: None,
                watch: watch::Sender::new(Progress {
                    state: TaskState::Submitted,
                    settles: 0,
                }),
            },
        );
        if run_now {
            drop(live);
            self.launch(input);
        } else {
            live.queue.push_back((id, input));
        }
        Ok(task)
    }

    /// Hands a task to the agent and moves it to `working`. The agent's `run`
    /// is called before the task shows `working`, outside the lock, so what
    /// it registers at once (a delegation it awaits) is in place by then.
    fn launch(self: &Arc<Self>, input: TaskInput) {
        let id = input.task_id.clone();
        let handle = RunningTask {
            hub: self.clone(),
            id: id.clone(),
            context_id: input.context_id.clone(),
        };
        let future = self.agent.run(input, handle);
        let mut live = self.lock();
        if !live.tasks.contains_key(&id) {
            // Cancelled before it ran.
            return;
        }
        if let Err(e) = self.write(&live, &id, &Transition::to(TaskState::Working), now_ms()) {
            tracing::error!(task = %id, error = %e, "recording a task's start failed");
        }
        let running = live.tasks.get_mut(&id).expect("checked above");
        running.state = TaskState::Working;
        running.watch.send_modify(|p| p.state = TaskState::Working);
        let hub = self.clone();
        let task_id = id.clone();
        let runner = tokio::spawn(async move {
            let outcome = future.await;
            hub.finish(&task_id, outcome);
        });
        running.runner = Some(runner.abort_handle());
    }

    /// Records what the agent answered, unless the task ended meanwhile.
    fn finish(self: &Arc<Self>, id: &str, outcome: Outcome) {
        let mut live = self.lock();
        let Some(running) = live.tasks.get_mut(id) else {
            return;
        };
        // The runner is returning: nothing to abort.
        running.runner = None;
        let mut to = match outcome {
            Outcome::Completed(response) => {
                let mut to = Transition::to(TaskState::Completed);
                to.message = Some(COMPLETED.to_string());
                to.response = Some(response);
                to
            }
            Outcome::Failed(message) => {
                let mut to = Transition::to(TaskState::Failed);
                to.message = Some(message);
                to
            }
        };
        let now = now_ms();
        to.running_commands = running_commands(&live.detached, id, now);
        if let Err(e) = self.end(&mut live, id, &to, now) {
            tracing::error!(task = %id, error = %e, "recording a task's end failed; retrying each second");
            drop(live);
            self.retry_end(id.to_string(), to);
            return;
        }
        self.launch_next(live);
    }

    /// Keeps trying to record an ending the store refused (a full disk),
    /// once a second while the task is live and the session open: the task
    /// ends once there is room, and the requests waiting for it are answered
    /// then. Until it does, it stays live and holds its capacity.
    fn retry_end(self: &Arc<Self>, id: String, to: Transition) {
        let hub = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(END_RETRY).await;
                let mut live = hub.lock();
                if !live.tasks.contains_key(&id) || hub.closing() {
                    return;
                }
                if hub.end(&mut live, &id, &to, now_ms()).is_ok() {
                    tracing::info!(task = %id, "a task's end recorded after a retry");
                    hub.launch_next(live);
                    return;
                }
            }
        });
    }

    /// Starts the next queued task, if nothing runs.
    fn launch_next(self: &Arc<Self>, mut live: MutexGuard<'_, Live>) {
        let next = self.next_queued(&mut live);
        drop(live);
        if let Some(input) = next {
            self.launch(input);
        }
    }

    /// Writes a live task's ending, then lets go of everything live about
    /// it: its runner (dropping the agent's future), the reply it waited
    /// for, the delegations it awaited; its watchers see the final state.
    fn end(
        &self,
        live: &mut Live,
        id: &str,
        to: &Transition,
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        let task = self.write(live, id, to, now)?;
        if let Some(running) = live.tasks.remove(id) {
            if let Some(runner) = running.runner {
                runner.abort();
            }
            running.watch.send_modify(|p| {
                p.state = to.state;
                p.settles += 1;
            });
        }
        live.queue.retain(|(queued, _)| queued != id);
        live.delegations.retain(|_, a| a.task_id != id);
        Ok(task)
    }

    /// `queue`: the next waiting task, once nothing runs; marked started.
    fn next_queued(&self, live: &mut Live) -> Option<TaskInput> {
        if live.tasks.values().any(|t| t.started) {
            return None;
        }
        let (id, input) = live.queue.pop_front()?;
        if let Some(running) = live.tasks.get_mut(&id) {
            running.started = true;
        }
        Some(input)
    }

    /// Delivers `text` to a task waiting in `input-required` and answers it
    /// in `working`. Capacity is not consulted.
    pub fn reply(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        context_id: Option<&str>,
        text: String,
    ) -> Result<Task, TaskError> {
        let mut live = self.lock();
        let task = self.seen(caller, id)?;
        let Some(running) = live.tasks.get(id) else {
            return Err(TaskError::WrongState(task.status.state));
        };
        if running.state != TaskState::InputRequired {
            return Err(TaskError::WrongState(running.state));
        }
        if context_id.is_some_and(|c| c != running.context_id) {
            return Err(TaskError::OtherContext);
        }
        let task = self
            .write(&live, id, &Transition::to(TaskState::Working), now_ms())
            .map_err(unavailable)?
            .ok_or(TaskError::NotFound)?;
        let running = live.tasks.get_mut(id).expect("checked above");
        running.state = TaskState::Working;
        running.watch.send_modify(|p| p.state = TaskState::Working);
        let waiting = running.reply.take();
        let handle = RunningTask {
            hub: self.clone(),
            id: id.to_string(),
            context_id: running.context_id.clone(),
        };
        drop(live);
        // Before the reply is answered, outside the lock (the agent may call
        // back into the hub).
        self.agent.replied(&handle, &text);
        if let Some(waiting) = waiting {
            let _ = waiting.send(text);
        }
        Ok(task)
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

    /// Cancels a live task: `canceled`, with the residue of what the session
    /// still runs. An ended task answers `wrong-state` with its state.
    pub fn cancel(self: &Arc<Self>, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        let mut live = self.lock();
        let task = self.seen(caller, id)?;
        if !live.tasks.contains_key(id) {
            return Err(TaskError::WrongState(task.status.state));
        }
        let residue = residue(&live.detached);
        let task = self
            .cancel_locked(&mut live, id, residue, now_ms())
            .map_err(unavailable)?
            .ok_or(TaskError::NotFound)?;
        let next = self.next_queued(&mut live);
        drop(live);
        if let Some(input) = next {
            self.launch(input);
        }
        Ok(task)
    }

    fn cancel_locked(
        &self,
        live: &mut Live,
        id: &str,
        residue: Vec<ResidueItem>,
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        let mut to = Transition::to(TaskState::Canceled);
        to.residue = residue;
        to.running_commands = running_commands(&live.detached, id, now);
        self.end(live, id, &to, now)
    }

    /// One page of the tasks the caller sees.
    pub fn list(&self, caller: &Caller, query: &ListQuery) -> Result<Page, TaskError> {
        self.store
            .list(&Sees::of(caller), query)
            .map_err(unavailable)
    }

    /// A pollable for a held SendMessage: ready once the task settles (ends,
    /// or pauses in `input-required`) or the session closes.
    pub fn settled(&self, caller: &Caller, id: &str) -> Result<Settled, TaskError> {
        let live = self.lock();
        self.seen(caller, id)?;
        let closed = self.closed.subscribe();
        Ok(match live.tasks.get(id) {
            Some(running) => {
                let watch = running.watch.subscribe();
                let since = watch.borrow().settles;
                Settled {
                    watch: Some(watch),
                    since,
                    closed,
                }
            }
            None => Settled {
                watch: None,
                since: 0,
                closed,
            },
        })
    }

    /// murmur.StopSession: cancels every live task and reports the sorted
    /// ids and what the session still runs. Does not close the session. An
    /// error names the tasks whose cancel the store could not record: they
    /// stay as they were, and a later stop may cancel them.
    pub fn stop(self: &Arc<Self>) -> Result<StopReport, String> {
        let mut live = self.lock();
        let mut canceled: Vec<String> = live.tasks.keys().cloned().collect();
        canceled.sort();
        let residue = residue(&live.detached);
        let now = now_ms();
        let mut failed = Vec::new();
        for id in &canceled {
            if let Err(e) = self.cancel_locked(&mut live, id, residue.clone(), now) {
                tracing::error!(task = %id, error = %e, "recording a stopped task failed");
                failed.push(format!("{id} ({e})"));
            }
        }
        if !failed.is_empty() {
            return Err(format!(
                "the store could not record the cancel of {}",
                failed.join(", ")
            ));
        }
        live.queue.clear();
        Ok(StopReport { canceled, residue })
    }

    /// Whether a live task awaits `delegation_id`.
    pub fn awaits_delegation(&self, delegation_id: &str) -> Result<(), CompletionRefusal> {
        if self.closing() {
            return Err(CompletionRefusal::Ending);
        }
        let live = self.lock();
        if live
            .delegations
            .get(delegation_id)
            .is_some_and(|a| a.arrived.is_none())
        {
            Ok(())
        } else {
            Err(CompletionRefusal::NotAwaited)
        }
    }

    /// Hands a completion's message to the task awaiting `delegation_id`;
    /// answers that task's context. A delegation takes one completion.
    pub fn deliver_completion(
        &self,
        delegation_id: &str,
        message: String,
    ) -> Result<String, CompletionRefusal> {
        if self.closing() {
            return Err(CompletionRefusal::Ending);
        }
        let mut live = self.lock();
        let awaited = live
            .delegations
            .get_mut(delegation_id)
            .filter(|a| a.arrived.is_none())
            .ok_or(CompletionRefusal::NotAwaited)?;
        let task_id = awaited.task_id.clone();
        let unsent = match awaited.waiter.take() {
            Some(waiter) => waiter.send(message).err(),
            None => Some(message),
        };
        match unsent {
            // Kept until the task asks for it again.
            Some(message) => awaited.arrived = Some(message),
            None => {
                live.delegations.remove(delegation_id);
            }
        }
        live.tasks
            .get(&task_id)
            .map(|t| t.context_id.clone())
            .ok_or(CompletionRefusal::NotAwaited)
    }

    /// What the session still runs: its detached commands not yet exited.
    pub fn residue(&self) -> Vec<ResidueItem> {
        residue(&self.lock().detached)
    }

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

    /// Kills the process groups of the detached commands still running.
    fn kill_detached(live: &Live) {
        for detached in &live.detached {
            if !detached.done.load(Ordering::SeqCst) {
                process::kill_group(detached.pgid);
            }
        }
    }

    // What a running task asks of its session (through `RunningTask`).

    /// A `working` status whose message is `message`, written as it
    /// happens: its own message id, timestamped now.
    fn progress(&self, id: &str, message: &str) {
        let live = self.lock();
        let Some(running) = live.tasks.get(id) else {
            return;
        };
        if running.state != TaskState::Working {
            return;
        }
        let status = events::status(
            TaskState::Working,
            Some(message.to_string()),
            Some(ids::message_id()),
            now_ms(),
        );
        match self.store.note(id, message, 1) {
            Ok(ids) => self
                .events
                .publish(ids, id, &running.context_id, vec![status]),
            Err(e) => tracing::error!(task = %id, error = %e, "recording progress failed"),
        }
    }

    /// A frame the agent of a live task reports.
    fn frame(&self, id: &str, kind: FrameKind, body: &serde_json::Map<String, serde_json::Value>) {
        let live = self.lock();
        let Some(running) = live.tasks.get(id) else {
            return;
        };
        match self.store.number(1) {
            Ok(ids) => self.events.publish(
                ids,
                id,
                &running.context_id,
                vec![events::frame(kind, body)],
            ),
            Err(e) => tracing::error!(task = %id, error = %e, "numbering a frame failed"),
        }
    }

    fn pause(&self, id: &str, prompt: String) -> Option<oneshot::Receiver<String>> {
        let mut live = self.lock();
        if live.tasks.get(id)?.state != TaskState::Working {
            return None;
        }
        let mut to = Transition::to(TaskState::InputRequired);
        to.prompt = Some(prompt);
        if let Err(e) = self.write(&live, id, &to, now_ms()) {
            tracing::error!(task = %id, error = %e, "recording a question failed");
            return None;
        }
        let running = live.tasks.get_mut(id).expect("checked above");
        let (sender, receiver) = oneshot::channel();
        running.state = TaskState::InputRequired;
        running.reply = Some(sender);
        running.watch.send_modify(|p| {
            p.state = TaskState::InputRequired;
            p.settles += 1;
        });
        Some(receiver)
    }

    fn expect(&self, task_id: &str, delegation_id: String) -> oneshot::Receiver<String> {
        let (waiter, receiver) = oneshot::channel();
        let mut live = self.lock();
        if !live.tasks.contains_key(task_id) {
            return receiver;
        }
        let awaited = live
            .delegations
            .entry(delegation_id.clone())
            .or_insert_with(|| Awaited {
                task_id: task_id.to_string(),
                waiter: None,
                arrived: None,
            });
        if awaited.task_id != task_id {
            // Another task's delegation: this one takes it over.
            awaited.task_id = task_id.to_string();
            awaited.arrived = None;
        }
        match awaited.arrived.take() {
            Some(message) => {
                let _ = waiter.send(message);
                live.delegations.remove(&delegation_id);
            }
            None => awaited.waiter = Some(waiter),
        }
        receiver
    }

    fn detach(&self, task_id: &str, command: &str) -> io::Result<DetachedShell> {
        let mut live = self.lock();
        if !live.tasks.contains_key(task_id) {
            return Err(io::Error::other("the task has ended"));
        }
        if self.closing() {
            return Err(io::Error::other("the session is closing"));
        }
        let started_at_ms = now_ms();
        let mut child = process::shell(command)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let pgid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .ok_or_else(|| io::Error::other("the command exited at once"))?;
        let done = Arc::new(AtomicBool::new(false));
        let reaped = done.clone();
        tokio::spawn(async move {
            let _ = child.wait().await;
            reaped.store(true, Ordering::SeqCst);
        });
        let item = DetachedShell {
            work_id: ids::work_id(),
            binary: command.split_whitespace().next().unwrap_or("").to_string(),
            command: command.to_string(),
            started_at_ms: started_at_ms as u64,
        };
        live.detached.push(Detached {
            item: item.clone(),
            task_id: task_id.to_string(),
            pgid,
            done,
        });
        Ok(item)
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

fn unavailable(e: rusqlite::Error) -> TaskError {
    tracing::error!(error = %e, "the task store failed");
    TaskError::Unavailable(format!("the task store failed: {e}"))
}

fn residue(detached: &[Detached]) -> Vec<ResidueItem> {
    detached
        .iter()
        .filter(|d| !d.done.load(Ordering::SeqCst))
        .map(|d| ResidueItem::DetachedShell(d.item.clone()))
        .collect()
}

/// The detached commands `task_id` started that still run, oldest first, as
/// the task's metadata says them at `now`.
fn running_commands(detached: &[Detached], task_id: &str, now: i64) -> Vec<RunningCommand> {
    detached
        .iter()
        .filter(|d| d.task_id == task_id && !d.done.load(Ordering::SeqCst))
        .map(|d| RunningCommand {
            work_id: d.item.work_id.clone(),
            binary: d.item.binary.clone(),
            command: cut(&d.item.command),
            running_ms: (now.max(0) as u64).saturating_sub(d.item.started_at_ms),
        })
        .collect()
}

/// A command cut to [`COMMAND_CHARS`] characters followed by `…`.
fn cut(command: &str) -> String {
    match command.char_indices().nth(COMMAND_CHARS) {
        Some((at, _)) => format!("{}…", &command[..at]),
        None => command.to_string(),
    }
}

/// A running task's line to its session: what an [`Agent`] may ask while it
/// runs the task. Clones share the task.
#[derive(Clone)]
pub struct RunningTask {
    hub: Arc<Hub>,
    id: String,
    context_id: String,
}

impl RunningTask {
    /// `tsk_…`
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn context_id(&self) -> &str {
        &self.context_id
    }

    /// A `working` status whose message is `message`: GetTask shows it as
    /// the task's status message, and streams receive it as a status update.
    /// Ignored unless the task is `working`.
    pub fn progress(&self, message: &str) {
        self.hub.progress(&self.id, message);
    }

    /// Reports a murmur frame beside the task's A2A events: `kind`, and the
    /// frame's fields (`{"text": …}` for [`FrameKind::Text`]), which streams
    /// carry as the agent wrote them. Ignored once the task has ended.
    pub fn frame(&self, kind: FrameKind, body: &serde_json::Map<String, serde_json::Value>) {
        self.hub.frame(&self.id, kind, body);
    }

    /// A [`FrameKind::Text`] frame: `{"text": text}`.
    pub fn text(&self, text: &str) {
        let mut body = serde_json::Map::new();
        body.insert("text".into(), text.into());
        self.frame(FrameKind::Text, &body);
    }

    /// Pauses the task in `input-required` with `prompt` and resolves with
    /// the reply's text, the task `working` again. Never resolves when the
    /// task ends first (its agent's future is then dropped).
    pub async fn ask(&self, prompt: &str) -> String {
        match self.hub.pause(&self.id, prompt.to_string()) {
            Some(reply) => match reply.await {
                Ok(text) => text,
                Err(_) => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }

    /// Starts `sh -c command` in its own process group, detached: it outlives
    /// the task, is listed in the session's residue while it runs, and is
    /// killed when the session ends.
    pub fn detach(&self, command: &str) -> io::Result<DetachedShell> {
        self.hub.detach(&self.id, command)
    }

    /// Declares that this task awaits a completion for `delegation_id`: from
    /// now until the task ends, the door accepts one completion for it, and
    /// the returned [`Delegation`] resolves with its message. Asking again
    /// for the same id gives a new handle on the same delegation, which
    /// resolves at once when the completion arrived meanwhile.
    pub fn expect_delegation(&self, delegation_id: &str) -> Delegation {
        Delegation(self.hub.expect(&self.id, delegation_id.to_string()))
    }
}

/// A completion a task awaits; see [`RunningTask::expect_delegation`].
pub struct Delegation(oneshot::Receiver<String>);

impl Delegation {
    /// The completion's A2A message, as the child sent it (JSON). Never
    /// resolves when the task ends first.
    pub async fn completion(self) -> String {
        match self.0.await {
            Ok(message) => message,
            Err(_) => std::future::pending().await,
        }
    }
}

/// The pollable behind `task-store.settled`: ready once its task settles or
/// the session closes. Waiting holds no thread: it awaits a watch channel.
pub struct Settled {
    /// `None`: the task had ended when the pollable was made.
    watch: Option<watch::Receiver<Progress>>,
    since: u64,
    closed: watch::Receiver<bool>,
}

impl Settled {
    /// Resolves once the task has settled or the session closed; at once if
    /// it already has. Cancel-safe, and ready for good once ready.
    pub async fn wait(&mut self) {
        let Some(watch) = &mut self.watch else {
            return;
        };
        loop {
            if *self.closed.borrow_and_update() {
                return;
            }
            {
                let now = watch.borrow_and_update();
                if now.settles > self.since || is_settled(now.state) {
                    return;
                }
            }
            tokio::select! {
                changed = watch.changed() => if changed.is_err() {
                    // The task ended and its sender is gone.
                    return;
                },
                _ = self.closed.changed() => {}
            }
        }
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for Settled {
    async fn ready(&mut self) {
        self.wait().await;
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// A hub over an in-memory store, running tasks with `agent`.
    pub fn hub_with(agent: impl Agent, acceptance: TaskAcceptance) -> Arc<Hub> {
        hub_buffered(agent, acceptance, events::DEFAULT_REPLAY_BUFFER)
    }

    /// [`hub_with`], its event log replaying `replay_buffer` events.
    pub fn hub_buffered(
        agent: impl Agent,
        acceptance: TaskAcceptance,
        replay_buffer: usize,
    ) -> Arc<Hub> {
        Hub::new(
            Store::in_memory(now_ms()).unwrap(),
            Arc::new(agent),
            acceptance,
            replay_buffer,
        )
    }

    /// A message from `caller` whose text is `text`.
    pub fn new_task(caller: Caller, text: &str) -> NewTask {
        NewTask {
            caller,
            context_id: None,
            text: text.to_string(),
            images: Vec::new(),
            reference_task_ids: Vec::new(),
            origin: Origin::Client,
            trust: None,
            forget_session: false,
        }
    }

    /// Waits until the task is in `state` (10 s at most), and answers it.
    pub async fn until(hub: &Hub, id: &str, state: TaskState) -> Task {
        for _ in 0..2000 {
            let task = hub.get(&None, id).unwrap();
            if task.status.state == state {
                return task;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{id} never reached {state:?}: {:?}", hub.get(&None, id));
    }

    /// Waits for the task to settle (10 s at most), and answers it.
    pub async fn settle(hub: &Hub, id: &str) -> Task {
        let mut settled = hub.settled(&None, id).unwrap();
        tokio::time::timeout(Duration::from_secs(10), settled.wait())
            .await
            .expect("the task settles");
        hub.get(&None, id).unwrap()
    }

    /// Starts `text` as a task and waits for it to settle.
    pub async fn run(hub: &Arc<Hub>, text: &str) -> Task {
        let task = hub.start(new_task(None, text)).unwrap();
        settle(hub, &task.id).await
    }

    /// A fresh directory under the system temp dir, removed on drop.
    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new(label: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!(
                "murmur-door-{label}-{}-{}",
                std::process::id(),
                super::ids::work_id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests;
