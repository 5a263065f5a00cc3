//! The session's tasks: the durable record ([`store`]) and the hub that
//! coordinates what is live on top of it. Each concern is a type of its
//! own, under the hub's one lock ([`live`]): `capacity` (acceptance, the
//! queue, and the starts written in one batch), `lifecycle` (each live
//! task's state, from submitted to its ending), `delegations` (the
//! sub-capsules a task delegated to, and the completions it awaits),
//! `detached` (the commands a task leaves running), `settled` (the pollables
//! a held SendMessage waits on), `unwritten` (the held tasks not written
//! yet) and `own` (what the session's own tasks say). [`Hub`], defined here, is the one place that changes several of
//! them together; an agent reaches it through its [`RunningTask`]
//! (`handle`), which knows it only as what the task reports to.
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
mod capacity;
mod delegations;
pub(crate) mod detached;
pub mod events;
mod handle;
pub mod ids;
mod lifecycle;
mod live;
pub mod lock;
mod model;
pub mod own;
mod record;
mod settled;
pub mod store;
#[cfg(test)]
pub(crate) mod testing;
mod unwritten;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tracing::Instrument;

pub use crate::bindings::session::{
    CompletionRefusal, DetachedShell, ResidueItem, StopReport, TaskAcceptance,
};
pub use crate::bindings::task_store::{
    Cursor, Image, ListQuery, MemberStatus, NewTask, Origin, Page, RunningCommand, Status, Task,
    TaskError, TaskMetadata, TaskState,
};
pub use crate::bindings::tokens::Credential;
use crate::telemetry;
use agent::{Agent, Outcome, TaskInput};
use capacity::{Asked, Started, Starts};
use events::{EventBody, EventLog, FrameKind, Reader};
use handle::TaskReports;
use lifecycle::{WORKING_WITHIN, ending};
use live::Live;
use opentelemetry::KeyValue;
use record::{steps_events, submitted_event, unavailable, unavailable_now};
use store::{Batch, NewRecord, Owner, Sees, Store, Transition, state_word};
use unwritten::Kept;

pub use capacity::{BUSY, CLOSING};
pub use delegations::{Child, Delegation};
pub use detached::COMMAND_CHARS;
pub use handle::RunningTask;
pub use lifecycle::{COMPLETED, NO_ANSWER_BELOW};
pub use model::{Caller, is_live, is_settled, now_ms};
pub use settled::Settled;

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
    /// Starts waiting to be written in one batch.
    starts: Starts,
    /// Whether held tasks wait unwritten ([`Live::unwritten`]): a read
    /// writes them first.
    unwritten: AtomicBool,
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
            starts: Starts::default(),
            unwritten: AtomicBool::new(false),
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

    /// Writes a transition and publishes its events. The `&mut Live` is the
    /// proof the live lock is held, which keeps the log's ids in order.
    fn write(
        &self,
        live: &mut Live,
        id: &str,
        to: &Transition,
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        self.write_steps(live, id, &[to], now)
    }

    /// Writes the last of `steps` as one change, and publishes the events
    /// of every step in order: a task that passes through a state (working)
    /// on its way to another in the same moment has its events, but the
    /// store is written once. A held task not written yet is inserted so,
    /// its submission's events first. The held tasks answered and not
    /// written yet are written first, so that events keep the order of
    /// what happened.
    fn write_steps(
        &self,
        live: &mut Live,
        id: &str,
        steps: &[&Transition],
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        let Some(to) = steps.last() else {
            return Ok(None);
        };
        if let Some(record) = live.unwritten.take(id) {
            let mut held: Vec<_> = live
                .unwritten
                .take_ended()
                .into_iter()
                .map(|kept| (kept, &[][..], 0))
                .collect();
            held.push((record.into(), steps, now));
            let mut written = self.insert_held(live, held)?;
            return written.pop().expect("one task inserted").map(Some);
        }
        self.write_ended(live);
        let bodies = steps_events(steps, now);
        let Some((task, ids)) = self.store.transition(id, to, now, bodies.len() as u64)? else {
            return Ok(None);
        };
        self.events.publish(ids, &task.id, &task.context_id, bodies);
        Ok(Some(task))
    }

    /// Writes every held task not written yet: as it was submitted, or
    /// ended as its agent answered it.
    fn write_unwritten(&self, live: &mut Live) {
        let kept = live.unwritten.take_all();
        self.write_kept(live, kept);
    }

    /// Writes the held tasks answered and not written yet, ended.
    fn write_ended(&self, live: &mut Live) {
        let kept = live.unwritten.take_ended();
        self.write_kept(live, kept);
    }

    /// Writes `kept`, held tasks not written yet ([`Hub::insert_held`]).
    fn write_kept(&self, live: &mut Live, kept: Vec<Kept>) {
        if kept.is_empty() {
            return;
        }
        let held = kept.into_iter().map(|k| (k, &[][..], 0)).collect();
        match self.insert_held(live, held) {
            Ok(written) => {
                for e in written.into_iter().filter_map(Result::err) {
                    tracing::error!(error = %e, "recording a held task failed");
                }
            }
            Err(e) => tracing::error!(error = %e, "recording the held tasks failed"),
        }
    }

    /// Inserts held tasks not written yet in one batch, each
    /// `(kept, steps, now)` as the last of its steps leaves it at `now`
    /// (as it was submitted when there is none), with its submission's
    /// events first, and publishes the events of each written. One its
    /// agent answered is written `working`, then ended, and let go. One
    /// the store refuses stays unwritten, for a later write to try again.
    fn insert_held(
        &self,
        live: &mut Live,
        held: Vec<(Kept, &[&Transition], i64)>,
    ) -> rusqlite::Result<Vec<rusqlite::Result<Task>>> {
        let working = Transition::to(TaskState::Working);
        let (written, bodies) = {
            let steps: Vec<(Vec<&Transition>, i64)> = held
                .iter()
                .map(|(kept, steps, now)| match &kept.ending {
                    Some((to, at)) => (vec![&working, to], *at),
                    None => (steps.to_vec(), *now),
                })
                .collect();
            let bodies: Vec<Vec<EventBody>> = held
                .iter()
                .zip(&steps)
                .map(|((kept, _, _), (steps, now))| {
                    let mut bodies = vec![submitted_event(&kept.record)];
                    bodies.extend(steps_events(steps, *now));
                    bodies
                })
                .collect();
            let written = self.store.batch(|batch| {
                held.iter()
                    .zip(&steps)
                    .zip(&bodies)
                    .map(|(((kept, _, _), (steps, now)), bodies)| {
                        let record = &kept.record;
                        let at = if steps.is_empty() {
                            record.created_ms
                        } else {
                            *now
                        };
                        let events = bodies.len() as u64;
                        batch.insert_ended(record, steps.last().copied(), at, events)
                    })
                    .collect::<Vec<_>>()
            });
            (written, bodies)
        };
        let answer = match written {
            Ok(written) => Ok(held
                .into_iter()
                .zip(written)
                .zip(bodies)
                .map(|(((kept, _, _), written), bodies)| match written {
                    Ok((task, ids)) => {
                        self.events.publish(ids, &task.id, &task.context_id, bodies);
                        if let Some((to, _)) = &kept.ending {
                            live.ended(&task.id, to.state, Some(&task));
                        }
                        Ok(task)
                    }
                    Err(e) => {
                        live.unwritten.put_back(kept);
                        Err(e)
                    }
                })
                .collect()),
            Err(e) => {
                for (kept, _, _) in held.into_iter().rev() {
                    live.unwritten.put_back(kept);
                }
                Err(e)
            }
        };
        self.unwritten
            .store(!live.unwritten.is_empty(), Ordering::Relaxed);
        answer
    }

    /// Keeps `record`, a held task, unwritten, and makes sure it is written
    /// once it has waited [`UNWRITTEN_AT_MOST`](unwritten::UNWRITTEN_AT_MOST):
    /// a task of the runtime's writes the overdue ones, until none waits.
    fn keep_unwritten(self: &Arc<Self>, live: &mut Live, record: NewRecord) {
        let id = record.id.clone();
        let watch = live.unwritten.keep(record);
        self.unwritten.store(true, Ordering::Relaxed);
        // Answers read before it no longer hold.
        self.store.changing(vec![id]);
        if !watch {
            return;
        }
        let hub = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut wait = unwritten::UNWRITTEN_AT_MOST;
            loop {
                tokio::time::sleep(Duration::from_millis(wait.max(1) as u64)).await;
                let Some(hub) = hub.upgrade() else {
                    return;
                };
                let mut live = hub.lock();
                let now = now_ms();
                let overdue = live.unwritten.take_overdue(now);
                hub.write_kept(&mut live, overdue);
                match live.unwritten.watch_until() {
                    // One the store refused is tried again after as long.
                    Some(until) if until <= now => wait = unwritten::UNWRITTEN_AT_MOST,
                    Some(until) => wait = until - now,
                    None => return,
                }
            }
        });
    }

    /// Writes the held tasks not written yet, for a read of the store to
    /// find every task the session took (`None`), or task `id`.
    fn write_held(&self, id: Option<&str>) {
        if self.unwritten.load(Ordering::Relaxed) {
            self.write_held_locked(&mut self.lock(), id);
        }
    }

    /// [`Hub::write_held`] under the live lock. The tasks are written
    /// together, in the order they came, whichever one is read.
    fn write_held_locked(&self, live: &mut Live, id: Option<&str>) {
        if id.is_none_or(|id| live.unwritten.holds(id)) {
            self.write_unwritten(live);
        }
    }

    /// The images task `id` started with, in part order, for the runtime
    /// that shows them to its model (the door never reads them back).
    pub fn images(&self, id: &str) -> Result<Vec<Image>, TaskError> {
        self.write_held(Some(id));
        self.store.images(id).map_err(unavailable)
    }

    /// The task as it stands, when the caller sees it.
    pub fn get(&self, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        self.write_held(Some(id));
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
        self.write_held(None);
        self.store
            .list(&Sees::of(caller), query)
            .map_err(unavailable)
    }

    /// How many tasks are in each state (murmur's words).
    pub fn count_by_state(&self) -> Result<Vec<(String, u64)>, TaskError> {
        self.write_held(None);
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
        let mut live = self.lock();
        self.write_unwritten(&mut live);
        self.closed.send_replace(true);
        self.events.close();
        live.detached.kill();
    }
}

impl Drop for Hub {
    /// A session dropped without closing still ends what it detached.
    fn drop(&mut self) {
        self.lock().detached.kill();
    }
}

// Starting tasks: capacity, then the record, then the lifecycle.
impl Hub {
    /// Starts a task: stored `submitted` and handed to the agent, or queued
    /// behind the live one (`queue`); stored `rejected` with [`BUSY`] when
    /// another task is live (`single`; the session's own tasks wait
    /// instead), or [`CLOSING`] when the session is closing. A task that
    /// runs at once and that its agent ends at once
    /// ([`Agent::ends_at_once`]) is written ended. Answers the task as first
    /// recorded. Needs a tokio runtime.
    pub fn start(self: &Arc<Self>, new: NewTask) -> Result<Task, TaskError> {
        self.start_settled(new).map(|(task, _)| task)
    }

    /// Starts a task on the session's own behalf ("Who sees a task": the
    /// launch's own task, a detached command's result, a report of lost
    /// commands): origin `session`, seen by the operator and by every
    /// caller of a public door, by no declared credential or member.
    pub fn start_own(self: &Arc<Self>, text: String) -> Result<Task, TaskError> {
        self.start(NewTask {
            caller: None,
            context_id: None,
            text,
            images: Vec::new(),
            reference_task_ids: Vec::new(),
            origin: Origin::Session,
            trust: None,
            forget_session: false,
            held: false,
        })
    }

    /// [`Hub::start`], and the task as it settled when it was written ended:
    /// what a held SendMessage answers, without waiting or reading it again.
    pub fn start_settled(self: &Arc<Self>, new: NewTask) -> Started {
        self.start_asked(vec![(new, telemetry::request_span())])
            .pop()
            .unwrap_or_else(|| Err(unavailable_now("no start was written")))
    }

    /// [`Hub::start_settled`], written in one batch with the starts other
    /// requests make meanwhile: one commit for them all. The first start to
    /// find no batch forming leads one: it lets the runtime's other ready
    /// requests run first (each adds its start and waits), then writes them
    /// all. While batches hold one start, it writes at once but one time in
    /// [`PROBE_EVERY`](capacity::PROBE_EVERY). Starts that arrive while a
    /// batch is written make the next batch, which a task of its own
    /// writes, so a request leads one batch at most.
    pub async fn start_batched(self: &Arc<Self>, new: NewTask) -> Started {
        let (answer, answered) = oneshot::channel();
        let (lead, wait) = self.starts.join(((new, telemetry::request_span()), answer));
        if lead {
            let mut lead = Lead(Some(self.clone()));
            if wait {
                tokio::task::yield_now().await;
            }
            lead.write();
        }
        answered
            .await
            .unwrap_or_else(|_| Err(unavailable_now("its batch was never written")))
    }

    /// Writes the starts waiting, [`MAX_BATCH`](capacity::MAX_BATCH) at
    /// most, as one batch; hands the others, and the ones that come
    /// meanwhile, to the next.
    fn write_starting(self: &Arc<Self>) {
        let waiting = self.starts.take();
        let (asked, answers): (Vec<_>, Vec<_>) = waiting.into_iter().unzip();
        for (started, answer) in self.start_asked(asked).into_iter().zip(answers) {
            let _ = answer.send(started);
        }
        if !self.starts.more() {
            return;
        }
        let hub = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move { hub.write_starting() })),
            Err(_) => hub.write_starting(),
        }
    }

    /// Starts `news` in order, written in one transaction. Each is decided
    /// as if the ones before it were already live: in `queue`, one that
    /// runs makes the rest wait; in `single`, one live task rejects the
    /// rest. Nothing is announced (the live state, events, the agent) until
    /// the transaction commits.
    pub fn start_all(self: &Arc<Self>, news: Vec<NewTask>) -> Vec<Started> {
        let request = telemetry::request_span();
        let asked = news.into_iter().map(|new| (new, request.clone()));
        self.start_asked(asked.collect())
    }

    /// [`Hub::start_all`], each start with the span of the request that
    /// asked for it, its task's span's parent.
    fn start_asked(self: &Arc<Self>, news: Vec<Asked>) -> Vec<Started> {
        let count = news.len();
        let mut live = self.lock();
        // What the batch's earlier starts leave live.
        let mut entered = false;
        let mut running = live.tasks.any_started();
        let mut queued = !live.queue.is_empty();
        let written = self.store.batch(|batch| {
            news.into_iter()
                .map(|(new, request)| {
                    let busy = entered || !live.tasks.is_empty();
                    let refused =
                        capacity::refusal(self.closing(), self.acceptance, new.origin, busy);
                    let run_now = refused.is_none() && !running && !queued;
                    let written = self.write_start(batch, &live, new, refused, run_now)?;
                    let written = written.traced(request.as_ref());
                    if written.waits() {
                        entered = true;
                        running |= run_now;
                        queued |= !run_now;
                    }
                    Ok(written)
                })
                .collect::<Vec<Result<Written, TaskError>>>()
        });
        let written = match written {
            Ok(written) => written,
            Err(e) => {
                let e = unavailable(e);
                return (0..count).map(|_| Err(e.clone())).collect();
            }
        };
        let mut launch = Vec::new();
        let started = written
            .into_iter()
            .map(|written| {
                let written = written?;
                let task = written.task;
                let span = written.span;
                match written.unwritten {
                    Some(record) => self.keep_unwritten(&mut live, record),
                    None => {
                        self.events
                            .publish(written.ids, &task.id, &task.context_id, written.bodies)
                    }
                }
                if (written.refused || written.ended)
                    && let Some(span) = &span
                {
                    let state = task.status.state;
                    telemetry::task_ended(span, state_word(state), state == TaskState::Failed);
                }
                if written.refused {
                    return Ok((task, None));
                }
                if written.ended {
                    // As first recorded, like any other.
                    let first = Task {
                        status: Status {
                            state: TaskState::Submitted,
                            message: None,
                            timestamp_ms: task.status.timestamp_ms,
                        },
                        response: None,
                        ..task.clone()
                    };
                    return Ok((first, Some(task)));
                }
                live.tasks.submitted(
                    task.id.clone(),
                    task.context_id.clone(),
                    written.run_now,
                    span,
                );
                if written.run_now {
                    launch.push(written.input);
                } else {
                    live.queue.push(task.id.clone(), written.input);
                }
                Ok((task, None))
            })
            .collect();
        drop(live);
        for input in launch {
            self.launch(input);
        }
        started
    }

    /// Writes one start in `batch`: rejected with `refused`, or submitted,
    /// and ended at once when it runs now and its agent ends it at once.
    fn write_start(
        &self,
        batch: &mut Batch<'_>,
        live: &Live,
        new: NewTask,
        refused: Option<&'static str>,
        run_now: bool,
    ) -> Result<Written, TaskError> {
        let id = ids::task_id();
        let context_id = new.context_id.unwrap_or_else(ids::context_id);
        let now = now_ms();
        let record = NewRecord {
            id: id.clone(),
            context_id: context_id.clone(),
            owner: Owner::of(&new.caller),
            origin: new.origin,
            trust: new.trust.clone(),
            state: if refused.is_some() {
                TaskState::Rejected
            } else {
                TaskState::Submitted
            },
            status_message: refused.map(str::to_string),
            reference_task_ids: new.reference_task_ids,
            forget_session: new.forget_session,
            images: new.images.clone(),
            created_ms: now,
        };
        let input = TaskInput {
            task_id: id.clone(),
            context_id,
            text: new.text,
            images: new.images,
            origin: new.origin,
            trust: new.trust,
            forget_session: new.forget_session,
            trace: None,
        };
        // A task that runs now and that its agent ends at once is written
        // ended, in one change with the events of all three states.
        let ended = run_now
            .then(|| self.agent.ends_at_once(&input))
            .flatten()
            .map(|outcome| ending(outcome, live.metadata(&id, now)));
        if new.held && refused.is_none() && ended.is_none() {
            // Nobody is told of it before it settles: written with its
            // first change (see `unwritten`).
            return Ok(Written {
                task: unwritten_task(&record),
                ids: 0..0,
                bodies: Vec::new(),
                refused: false,
                ended: false,
                run_now,
                input,
                span: None,
                unwritten: Some(record),
            });
        }
        let mut bodies = vec![submitted_event(&record)];
        if let Some(to) = &ended {
            bodies.extend(steps_events(
                &[&Transition::to(TaskState::Working), to],
                now,
            ));
        }
        let (task, ids) = batch
            .insert_ended(&record, ended.as_ref(), now, bodies.len() as u64)
            .map_err(unavailable)?;
        Ok(Written {
            task,
            ids,
            bodies,
            refused: refused.is_some(),
            ended: ended.is_some(),
            run_now,
            input,
            span: None,
            unwritten: None,
        })
    }

    /// Starts the next queued task, if nothing runs.
    fn launch_next(self: &Arc<Self>, mut live: MutexGuard<'_, Live>) {
        let next = live.next_queued();
        drop(live);
        if let Some(input) = next {
            self.launch(input);
        }
    }
}

/// The lead of a batch not yet written. Should the leading request go
/// before it writes it (its future dropped), the batch is written then, so
/// no start waits for a lead that is gone.
struct Lead(Option<Arc<Hub>>);

impl Lead {
    fn write(&mut self) {
        if let Some(hub) = self.0.take() {
            hub.write_starting();
        }
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        self.write();
    }
}

/// One start written in a batch, to announce once the batch commits.
struct Written {
    task: Task,
    ids: Range<u64>,
    bodies: Vec<EventBody>,
    refused: bool,
    ended: bool,
    run_now: bool,
    input: TaskInput,
    /// The task's span, when the request that started it is traced.
    span: Option<tracing::Span>,
    /// A held task's record, kept to be written with its first change.
    unwritten: Option<NewRecord>,
}

impl Written {
    /// The start of a task asked for in `request`'s span: the task's span,
    /// and its trace context for the agent.
    fn traced(mut self, request: Option<&tracing::Span>) -> Written {
        if let Some(request) = request {
            let span = telemetry::task_span(request, &self.task.id, &self.task.context_id);
            self.input.trace = telemetry::trace_of(&span);
            self.span = Some(span);
        }
        self
    }

    /// The task stays live: submitted, to run now or to wait.
    fn waits(&self) -> bool {
        !self.refused && !self.ended
    }
}

/// A held task as the session took it, before it is written: `submitted`,
/// outside the change order (`change` 0) until its first write.
fn unwritten_task(record: &NewRecord) -> Task {
    let start = Transition::to(TaskState::Submitted);
    Task {
        id: record.id.clone(),
        context_id: record.context_id.clone(),
        status: Status {
            state: TaskState::Submitted,
            message: None,
            timestamp_ms: record.created_ms,
        },
        response: None,
        prompt: None,
        residue: Vec::new(),
        metadata: start.metadata,
        change: 0,
    }
}

/// How often an ending the store refused is tried again.
const END_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

// A task's lifecycle: the agent running it, replies, endings, cancels.
impl Hub {
    /// Hands a task to the agent and moves it to `working`; a task its agent
    /// ends at once is recorded ended, and the next queued task launched in
    /// turn.
    fn launch(self: &Arc<Self>, input: TaskInput) {
        let mut next = Some(input);
        while let Some(input) = next {
            next = self.launch_one(input);
        }
    }

    /// Launches one task. An agent that can tell how the task ends without
    /// running anything ([`Agent::ends_at_once`]) has it recorded `working`
    /// and ended in one write, with the events of both, and nothing spawned;
    /// then the next queued task, if any, is answered for the caller to
    /// launch (a loop, where recursion could run deep).
    ///
    /// Otherwise the agent's `run` is called before the task shows
    /// `working`, outside the lock, so what it registers at once (a
    /// delegation it awaits) is in place by then.
    fn launch_one(self: &Arc<Self>, input: TaskInput) -> Option<TaskInput> {
        if let Some(outcome) = self.agent.ends_at_once(&input) {
            let mut live = self.lock();
            if !live.tasks.contains(&input.task_id) {
                // Cancelled before it ran.
                return None;
            }
            let now = now_ms();
            let to = ending(outcome, live.metadata(&input.task_id, now));
            let working = Transition::to(TaskState::Working);
            match self.end_steps(&mut live, &input.task_id, &[&working, &to], now) {
                Ok(_) => return live.next_queued(),
                // Nothing was written: the task runs as any other, and its
                // ending is retried if the store still refuses it.
                Err(e) => {
                    tracing::error!(task = %input.task_id, error = %e, "recording a task that ended at once failed");
                }
            }
        }
        let id = input.task_id.clone();
        {
            let mut live = self.lock();
            let Some(running) = live.tasks.get_mut(&id) else {
                // Cancelled before it ran.
                return None;
            };
            running.runs();
        }
        let handle = self.handle(id.clone(), input.context_id.clone());
        let future = self.agent.run(input, handle);
        let mut live = self.lock();
        let Some(running) = live.tasks.get_mut(&id) else {
            // Ended while `run` was called (a cancel, or the agent's answer
            // through its handle): the future is dropped unpolled.
            drop(live);
            drop(future);
            return None;
        };
        let hub = self.clone();
        let task_id = id.clone();
        let run = async move {
            let mut future = future;
            let outcome = tokio::select! {
                biased;
                outcome = &mut future => outcome,
                _ = tokio::time::sleep(WORKING_WITHIN) => {
                    hub.record_working(&task_id);
                    future.await
                }
            };
            hub.finish(&task_id, outcome, true);
        };
        // What the agent logs names its task's trace.
        let runner = match running.span() {
            Some(span) => tokio::spawn(run.instrument(span.clone())),
            None => tokio::spawn(run),
        };
        running.runner(runner.abort_handle());
        None
    }

    /// The handle an agent gets on task `id`.
    fn handle(self: &Arc<Self>, id: String, context_id: String) -> RunningTask {
        let session: Arc<dyn TaskReports> = self.clone();
        RunningTask::new(session, id, context_id)
    }

    /// Records what the agent answered, unless the task ended meanwhile:
    /// answered by its future (`returned`: its runner is returning) or
    /// through its handle (the future is dropped); then hands the agent the
    /// next queued task. A held task not written yet, answered while a task
    /// waits, is written with the ones answered after it: the agent is
    /// handed that task first, and works on it while the endings are
    /// written, at once when no other task waits behind it, else
    /// [`ENDED_AT_MOST`](unwritten::ENDED_AT_MOST) later at most (the
    /// clients of the others keep the agent busy meanwhile). Writes are
    /// what a task costs the door most.
    fn finish(self: &Arc<Self>, id: &str, outcome: Outcome, returned: bool) {
        let mut live = self.lock();
        if !live.tasks.contains(id) {
            return;
        }
        let now = now_ms();
        let to = ending(outcome, live.metadata(id, now));
        let running = live.tasks.get_mut(id).expect("live above");
        let unrecorded = running.answered(to.state, returned);
        if unrecorded
            && live.unwritten.holds(id)
            && let Some(next) = live.next_queued()
        {
            let last = live.queue.is_empty();
            match live.unwritten.end(id, to, now) {
                Some(n) if n >= unwritten::ENDED_AT_ONCE => self.write_ended(&mut live),
                Some(_) if last => self.write_ended_after(Duration::ZERO),
                Some(1) => self.write_ended_after(live.unwritten.ended_at_most),
                _ => {}
            }
            drop(live);
            self.launch(next);
            return;
        }
        if let Err(e) = self.end_ran(&mut live, id, (&to, unrecorded), now) {
            tracing::error!(task = %id, error = %e, "recording a task's end failed; retrying each second");
            drop(live);
            self.retry_end(id.to_string(), to, unrecorded);
            return;
        }
        self.launch_next(live);
    }

    /// Writes the held tasks answered and not written yet `wait` from now.
    fn write_ended_after(self: &Arc<Self>, wait: Duration) {
        let hub = Arc::downgrade(self);
        tokio::spawn(async move {
            // At once: no turn of the timer.
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if let Some(hub) = hub.upgrade() {
                let mut live = hub.lock();
                hub.write_ended(&mut live);
            }
        });
    }

    /// Ends task `id`, which its agent ran, with `to`: `working` and the
    /// ending in one write when `working` is not recorded yet
    /// (`unrecorded`).
    fn end_ran(
        &self,
        live: &mut Live,
        id: &str,
        (to, unrecorded): (&Transition, bool),
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        let working = Transition::to(TaskState::Working);
        let steps: &[&Transition] = match unrecorded {
            true => &[&working, to],
            false => &[to],
        };
        self.end_steps(live, id, steps, now)
    }

    /// Records task `id` `working`, when its agent runs it and that is not
    /// recorded yet ([`WORKING_WITHIN`]): before anything the agent reports,
    /// so its events follow the task's `working`.
    fn record_working(&self, id: &str) {
        let mut live = self.lock();
        self.record_working_locked(&mut live, id);
    }

    fn record_working_locked(&self, live: &mut Live, id: &str) {
        let Some(running) = live.tasks.get_mut(id) else {
            return;
        };
        if !running.record_working() {
            return;
        }
        if let Err(e) = self.write(live, id, &Transition::to(TaskState::Working), now_ms()) {
            tracing::error!(task = %id, error = %e, "recording a task's start failed");
        }
    }

    /// Keeps trying to record an ending the store refused (a full disk),
    /// once a second while the task is live and the session open: the task
    /// ends once there is room, and the requests waiting for it are answered
    /// then. Until it does, it stays live and holds its capacity.
    fn retry_end(self: &Arc<Self>, id: String, to: Transition, unrecorded: bool) {
        let hub = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(END_RETRY).await;
                let mut live = hub.lock();
                if !live.tasks.contains(&id) || hub.closing() {
                    return;
                }
                if hub
                    .end_ran(&mut live, &id, (&to, unrecorded), now_ms())
                    .is_ok()
                {
                    tracing::info!(task = %id, "a task's end recorded after a retry");
                    hub.launch_next(live);
                    return;
                }
            }
        });
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
        self.end_steps(live, id, &[to], now)
    }

    /// [`Hub::end`] through `steps`, the last the ending, written as one
    /// change ([`Hub::write_steps`]).
    fn end_steps(
        &self,
        live: &mut Live,
        id: &str,
        steps: &[&Transition],
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        let Some(to) = steps.last() else {
            return Ok(None);
        };
        let task = self.write_steps(live, id, steps, now)?;
        live.ended(id, to.state, task.as_ref());
        Ok(task)
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
        self.write_held_locked(&mut live, Some(id));
        let task = self.seen(caller, id)?;
        let Some(running) = live.tasks.get(id) else {
            return Err(TaskError::WrongState(task.status.state));
        };
        if running.state() != TaskState::InputRequired {
            return Err(TaskError::WrongState(running.state()));
        }
        if context_id.is_some_and(|c| c != running.context_id()) {
            return Err(TaskError::OtherContext);
        }
        let task = self
            .write(&mut live, id, &Transition::to(TaskState::Working), now_ms())
            .map_err(unavailable)?
            .ok_or(TaskError::NotFound)?;
        let running = live.tasks.get_mut(id).expect("checked above");
        let waiting = running.resume();
        let handle = self.handle(id.to_string(), running.context_id().to_string());
        drop(live);
        // Before the reply is answered, outside the lock (the agent may call
        // back into the hub).
        self.agent.replied(&handle, &text);
        if let Some(waiting) = waiting {
            let _ = waiting.send(text);
        }
        Ok(task)
    }

    /// Cancels a live task: `canceled`, with the residue of what the session
    /// still runs. An ended task answers `wrong-state` with its state.
    pub fn cancel(self: &Arc<Self>, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        let mut live = self.lock();
        self.write_held_locked(&mut live, Some(id));
        let task = self.seen(caller, id)?;
        if !live.tasks.contains(id) {
            return Err(TaskError::WrongState(task.status.state));
        }
        let mut residue = live.detached.residue();
        residue.extend(live.delegations.residue(id));
        let task = self
            .cancel_locked(&mut live, id, residue, now_ms())
            .map_err(unavailable)?
            .ok_or(TaskError::NotFound)?;
        // Listed as residue, as a delegation is, then ended by the cancel.
        live.detached.end_recorded(id);
        let next = live.next_queued();
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
        to.metadata = live.metadata(id, now);
        let started = live.tasks.get(id).is_some_and(|r| r.started());
        let task = self.end(live, id, &to, now)?;
        if started {
            self.agent.cancelled(id);
        }
        Ok(task)
    }

    /// murmur.StopSession: cancels every live task and reports the sorted
    /// ids and what the session still runs. Does not close the session. An
    /// error names the tasks whose cancel the store could not record: they
    /// stay as they were, and a later stop may cancel them.
    pub fn stop(self: &Arc<Self>) -> Result<StopReport, String> {
        let mut live = self.lock();
        let canceled = live.tasks.ids();
        let detached = live.detached.residue();
        let mut ended = Vec::new();
        let now = now_ms();
        let mut failed = Vec::new();
        for id in &canceled {
            let own = live.delegations.residue(id);
            let residue = [detached.clone(), own.clone()].concat();
            if let Err(e) = self.cancel_locked(&mut live, id, residue, now) {
                tracing::error!(task = %id, error = %e, "recording a stopped task failed");
                failed.push(format!("{id} ({e})"));
            } else {
                live.detached.end_recorded(id);
                ended.extend(own);
            }
        }
        if !failed.is_empty() {
            return Err(format!(
                "the store could not record the cancel of {}",
                failed.join(", ")
            ));
        }
        live.queue.clear();
        Ok(StopReport {
            canceled,
            residue: [detached, ended].concat(),
        })
    }
}

// Delegations, detached commands and settle pollables, as the door asks
// for them.
impl Hub {
    /// Whether a live task awaits `delegation_id`.
    pub fn awaits_delegation(&self, delegation_id: &str) -> Result<(), CompletionRefusal> {
        if self.closing() {
            return Err(CompletionRefusal::Ending);
        }
        if self.lock().delegations.awaits(delegation_id) {
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
        let task_id = live
            .delegations
            .deliver(delegation_id, message)
            .ok_or(CompletionRefusal::NotAwaited)?;
        live.tasks
            .get(&task_id)
            .map(|t| t.context_id().to_string())
            .ok_or(CompletionRefusal::NotAwaited)
    }

    /// What the session still runs: its detached commands not yet exited.
    pub fn residue(&self) -> Vec<ResidueItem> {
        self.lock().detached.residue()
    }

    /// Refuses a command detached for a task that has ended, or in a
    /// session that is closing; otherwise records the task working first
    /// (a detached command is something its agent reports).
    fn may_detach(&self, live: &mut Live, task_id: &str) -> std::io::Result<()> {
        if !live.tasks.contains(task_id) {
            return Err(std::io::Error::other("the task has ended"));
        }
        if self.closing() {
            return Err(std::io::Error::other("the session is closing"));
        }
        self.record_working_locked(live, task_id);
        Ok(())
    }

    /// A pollable for a held SendMessage: ready once the task settles (ends,
    /// or pauses in `input-required`) or the session closes.
    pub fn settled(&self, caller: &Caller, id: &str) -> Result<Settled, TaskError> {
        let mut live = self.lock();
        self.write_held_locked(&mut live, Some(id));
        self.seen(caller, id)?;
        Ok(live.tasks.settled(id, self.closed.subscribe()))
    }

    /// [`Hub::settled`] for a task its caller is known to see: one the same
    /// request started. No read of the store.
    pub fn settled_started(&self, id: &str) -> Settled {
        self.lock().tasks.settled(id, self.closed.subscribe())
    }
}

/// What a running task asks of its session (through [`RunningTask`]).
impl TaskReports for Hub {
    fn answer(self: Arc<Self>, id: &str, outcome: Outcome) {
        self.finish(id, outcome, false);
    }

    /// A `working` status whose message is `message`, written as it
    /// happens: its own message id, timestamped now.
    fn progress(&self, id: &str, message: &str) {
        let mut live = self.lock();
        self.record_working_locked(&mut live, id);
        let Some(running) = live.tasks.get(id) else {
            return;
        };
        if running.state() != TaskState::Working {
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
                .publish(ids, id, running.context_id(), vec![status]),
            Err(e) => tracing::error!(task = %id, error = %e, "recording progress failed"),
        }
    }

    fn frame(&self, id: &str, kind: FrameKind, body: &serde_json::Map<String, serde_json::Value>) {
        let mut live = self.lock();
        self.record_working_locked(&mut live, id);
        // Not once its agent has answered it.
        let Some(running) = live.tasks.get(id).filter(|r| is_live(r.state())) else {
            return;
        };
        match self.store.number(1) {
            Ok(ids) => self.events.publish(
                ids,
                id,
                running.context_id(),
                vec![events::frame(kind, body)],
            ),
            Err(e) => tracing::error!(task = %id, error = %e, "numbering a frame failed"),
        }
    }

    fn pause(&self, id: &str, prompt: String) -> Option<oneshot::Receiver<String>> {
        let mut live = self.lock();
        self.record_working_locked(&mut live, id);
        if live.tasks.get(id)?.state() != TaskState::Working {
            return None;
        }
        let mut to = Transition::to(TaskState::InputRequired);
        to.prompt = Some(prompt);
        if let Err(e) = self.write(&mut live, id, &to, now_ms()) {
            tracing::error!(task = %id, error = %e, "recording a question failed");
            return None;
        }
        let running = live.tasks.get_mut(id).expect("checked above");
        if let Some(span) = running.span() {
            telemetry::task_event(span, "input-required", Vec::new());
        }
        Some(running.pause())
    }

    /// Starts `command` for `task_id`, detached. Its output is kept, the
    /// last [`OUTPUT_TAIL`](detached::OUTPUT_TAIL) bytes of each stream,
    /// and once it exits its result is a task of the session's own
    /// ([`own`]).
    fn detach(self: Arc<Self>, task_id: &str, command: &str) -> std::io::Result<DetachedShell> {
        let mut live = self.lock();
        self.may_detach(&mut live, task_id)?;
        let (item, exit) = live.detached.start(task_id, command)?;
        if let Some(span) = live.tasks.get(task_id).and_then(|t| t.span()) {
            // The command's first word, never the command.
            let attributes = vec![
                KeyValue::new("murmur.work_id", item.work_id.clone()),
                KeyValue::new("murmur.binary", item.binary.clone()),
            ];
            telemetry::task_event(span, "detached", attributes);
        }
        if let Err(e) = self.store.detached_started(task_id, &item) {
            // Only a resumed launch's report of lost commands misses it.
            tracing::error!(work = %item.work_id, error = %e, "recording a detached command failed");
        }
        // The command holds no hub: a session dropped while it runs still
        // kills it.
        let hub = Arc::downgrade(&self);
        let ran = item.clone();
        tokio::spawn(async move {
            let (status, out, err) = exit.wait().await;
            let Some(hub) = hub.upgrade() else { return };
            if let Err(e) = hub.store.detached_ended(&ran.work_id) {
                tracing::error!(work = %ran.work_id, error = %e, "recording a detached command's end failed");
            }
            if hub.closing() {
                return;
            }
            let text = own::command_result(&ran, status, &out, &err);
            if let Err(e) = hub.start_own(text) {
                tracing::error!(work = %ran.work_id, error = ?e, "starting a detached command's result task failed");
            }
        });
        Ok(item)
    }

    /// Records `command` for `task_id` as detached without running it.
    /// Nothing is stored: a resumed launch lost nothing.
    fn record_detached(&self, task_id: &str, command: &str) -> std::io::Result<DetachedShell> {
        let mut live = self.lock();
        self.may_detach(&mut live, task_id)?;
        Ok(live.detached.record(task_id, command))
    }

    fn delegated(&self, task_id: &str, child: Child) -> std::io::Result<String> {
        let child = delegations::checked(child)?;
        let mut live = self.lock();
        let Some(running) = live.tasks.get(task_id) else {
            return Err(std::io::Error::other("the task has ended"));
        };
        let span = running.span().cloned();
        let capsule = child.capsule.clone();
        let delegation = live.delegations.open(task_id, child);
        if let Some(span) = span {
            let attributes = vec![
                KeyValue::new("murmur.delegation.id", delegation.clone()),
                KeyValue::new("murmur.delegation.capsule", capsule),
            ];
            telemetry::task_event(&span, "delegated", attributes);
        }
        Ok(delegation)
    }

    fn delegation_ended(&self, task_id: &str, delegation_id: &str) {
        self.lock().delegations.ended(task_id, delegation_id);
    }

    fn no_answer_from(&self, task_id: &str, first: &MemberStatus, below: &[MemberStatus]) {
        if let Some(running) = self.lock().tasks.get_mut(task_id) {
            running.no_answer_from(first, below);
        }
    }

    fn expect(&self, task_id: &str, delegation_id: String) -> oneshot::Receiver<String> {
        let mut live = self.lock();
        if !live.tasks.contains(task_id) {
            return oneshot::channel().1;
        }
        live.delegations.expect(task_id, delegation_id)
    }
}

#[cfg(test)]
mod tests;
