//! Capacity: whether a new task runs, waits or is refused. `none` and
//! `single` take one live task and reject the others ([`BUSY`]); `queue`
//! keeps the others waiting in order and hands the next one to the agent
//! once nothing runs. A closing session rejects every new task ([`CLOSING`]).

use std::ops::Range;
use std::sync::{Arc, MutexGuard};

use tokio::sync::{oneshot, watch};

use super::TaskState;
use super::agent::TaskInput;
use super::events::{self, EventBody};
use super::ids;
use super::lifecycle::{ending, metadata};
use super::settled::Progress;
use super::store::{Batch, NewRecord, Owner, Transition};
use super::{Hub, Live, NewTask, Origin, Running, Status, Task, TaskAcceptance, TaskError};
use super::{now_ms, steps_events, unavailable};

/// The status message of a task refused because another one is live.
pub const BUSY: &str = "task rejected: capsule is busy";
/// The status message of a task refused because the session is closing.
pub const CLOSING: &str = "task rejected: the session is closing";

impl Hub {
    /// Starts a task: stored `submitted` and handed to the agent, or queued
    /// behind the live one (`queue`); stored `rejected` with [`BUSY`] when
    /// another task is live (`single`; the session's own tasks wait
    /// instead), or [`CLOSING`] when the session is closing. A task that
    /// runs at once and that its agent ends at once
    /// ([`super::agent::Agent::ends_at_once`]) is written ended. Answers the
    /// task as first recorded. Needs a tokio runtime.
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
        })
    }

    /// [`Hub::start`], and the task as it settled when it was written ended:
    /// what a held SendMessage answers, without waiting or reading it again.
    pub fn start_settled(self: &Arc<Self>, new: NewTask) -> Started {
        self.start_all(vec![new])
            .pop()
            .unwrap_or_else(|| Err(unavailable_now("no start was written")))
    }

    /// [`Hub::start_settled`], written in one batch with the starts other
    /// requests make meanwhile: one commit for them all. The first start to
    /// find no batch forming leads one: it lets the runtime's other ready
    /// requests run first (each adds its start and waits), then writes them
    /// all. While batches hold one start, it writes at once but one time in
    /// [`PROBE_EVERY`]. Starts that arrive while a batch is written make the
    /// next batch, which a task of its own writes, so a request leads one
    /// batch at most.
    pub async fn start_batched(self: &Arc<Self>, new: NewTask) -> Started {
        let (answer, answered) = oneshot::channel();
        let (lead, wait) = {
            let mut starting = self.starting();
            starting.waiting.push((new, answer));
            let lead = !std::mem::replace(&mut starting.leading, true);
            // After a batch of many, always; while batches hold one, now
            // and then, to find out whether others have come.
            let wait = starting.lone.is_multiple_of(PROBE_EVERY);
            (lead.then(|| Lead(Some(self.clone()))), wait)
        };
        if let Some(mut lead) = lead {
            if wait {
                tokio::task::yield_now().await;
            }
            lead.write();
        }
        answered
            .await
            .unwrap_or_else(|_| Err(unavailable_now("its batch was never written")))
    }

    fn starting(&self) -> MutexGuard<'_, Starting> {
        self.starting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the starts waiting, [`MAX_BATCH`] at most, as one batch;
    /// hands the others, and the ones that come meanwhile, to the next.
    fn write_starting(self: &Arc<Self>) {
        let waiting = {
            let mut starting = self.starting();
            starting.lone = match starting.waiting.len() {
                1 => starting.lone.wrapping_add(1),
                _ => 0,
            };
            let taken = starting.waiting.len().min(MAX_BATCH);
            starting.waiting.drain(..taken).collect::<Vec<_>>()
        };
        let (news, answers): (Vec<_>, Vec<_>) = waiting.into_iter().unzip();
        for (started, answer) in self.start_all(news).into_iter().zip(answers) {
            let _ = answer.send(started);
        }
        let mut starting = self.starting();
        if starting.waiting.is_empty() {
            starting.leading = false;
            return;
        }
        drop(starting);
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
        let count = news.len();
        let mut live = self.lock();
        // What the batch's earlier starts leave live.
        let mut entered = false;
        let mut running = live.tasks.values().any(|t| t.started);
        let mut queued = !live.queue.is_empty();
        let written = self.store.batch(|batch| {
            news.into_iter()
                .map(|new| {
                    let refused = self.refusal(&live, entered, new.origin);
                    let run_now = refused.is_none() && !running && !queued;
                    let written = self.write_start(batch, &live, new, refused, run_now)?;
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
                self.events
                    .publish(written.ids, &task.id, &task.context_id, written.bodies);
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
                live.tasks.insert(
                    task.id.clone(),
                    Running {
                        state: TaskState::Submitted,
                        context_id: task.context_id.clone(),
                        started: written.run_now,
                        runner: None,
                        working_unrecorded: false,
                        reply: None,
                        watch: watch::Sender::new(Progress {
                            state: TaskState::Submitted,
                            settles: 0,
                        }),
                        delegated: Vec::new(),
                        no_answer_below: Vec::new(),
                    },
                );
                if written.run_now {
                    launch.push(written.input);
                } else {
                    live.queue.push_back((task.id.clone(), written.input));
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

    /// Why a new task is refused, if it is: `entered` says a start of the
    /// same batch is live already.
    /// The session's own tasks are never refused for being busy: one that
    /// finds the capsule busy waits its turn, as in `queue`.
    fn refusal(&self, live: &Live, entered: bool, origin: Origin) -> Option<&'static str> {
        if self.closing() {
            Some(CLOSING)
        } else if self.acceptance != TaskAcceptance::Queue
            && origin != Origin::Session
            && (entered || !live.tasks.is_empty())
        {
            Some(BUSY)
        } else {
            None
        }
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
        };
        let now = now_ms();
        let input = TaskInput {
            task_id: id.clone(),
            context_id,
            text: new.text,
            images: new.images,
            origin: new.origin,
            trust: new.trust,
            forget_session: new.forget_session,
        };
        // A task that runs now and that its agent ends at once is written
        // ended, in one change with the events of all three states.
        let ended = run_now
            .then(|| self.agent.ends_at_once(&input))
            .flatten()
            .map(|outcome| ending(outcome, metadata(live, &id, now)));
        let mut bodies = vec![events::status(
            record.state,
            record.status_message.clone(),
            None,
            now,
        )];
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
        })
    }

    /// Starts the next queued task, if nothing runs.
    pub(super) fn launch_next(self: &Arc<Self>, mut live: MutexGuard<'_, Live>) {
        let next = self.next_queued(&mut live);
        drop(live);
        if let Some(input) = next {
            self.launch(input);
        }
    }

    /// `queue`: the next waiting task, once nothing runs; marked started.
    pub(super) fn next_queued(&self, live: &mut Live) -> Option<TaskInput> {
        if live.tasks.values().any(|t| t.started) {
            return None;
        }
        let (id, input) = live.queue.pop_front()?;
        if let Some(running) = live.tasks.get_mut(&id) {
            running.started = true;
        }
        Some(input)
    }
}

/// A start as [`Hub::start_settled`] answers it: the task as first
/// recorded, and as it settled when it was written ended.
pub type Started = Result<(Task, Option<Task>), TaskError>;

/// The starts waiting for a batch ([`Hub::start_batched`]).
#[derive(Default)]
pub(super) struct Starting {
    waiting: Vec<(NewTask, oneshot::Sender<Started>)>,
    /// A batch is forming or being written: new starts join it or the next.
    leading: bool,
    /// How many batches in a row held one start: 0 after one that held
    /// more (or before the first), when the next lead waits for others to
    /// join.
    lone: u32,
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
}

impl Written {
    /// The task stays live: submitted, to run now or to wait.
    fn waits(&self) -> bool {
        !self.refused && !self.ended
    }
}

fn unavailable_now(why: &str) -> TaskError {
    TaskError::Unavailable(format!("the task store failed: {why}"))
}
