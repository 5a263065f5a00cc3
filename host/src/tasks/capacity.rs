//! Capacity: whether a new task runs, waits or is refused. `none` and
//! `single` take one live task and reject the others ([`BUSY`]); `queue`
//! keeps the others waiting in order and hands the next one to the agent
//! once nothing runs. A closing session rejects every new task ([`CLOSING`]).

use std::sync::{Arc, MutexGuard};

use tokio::sync::watch;

use super::agent::TaskInput;
use super::detached::running_commands;
use super::events;
use super::ids;
use super::lifecycle::ending;
use super::settled::Progress;
use super::store::{NewRecord, Owner, Transition};
use super::{Hub, Live, NewTask, Running, Status, Task, TaskAcceptance, TaskError, TaskState};
use super::{now_ms, steps_events, unavailable};

/// The status message of a task refused because another one is live.
pub const BUSY: &str = "task rejected: capsule is busy";
/// The status message of a task refused because the session is closing.
pub const CLOSING: &str = "task rejected: the session is closing";

impl Hub {
    /// Starts a task: stored `submitted` and handed to the agent, or queued
    /// behind the live one (`queue`); stored `rejected` with [`BUSY`] when
    /// another task is live (`single`), or [`CLOSING`] when the session is
    /// closing. A task that runs at once and that its agent ends at once
    /// ([`super::agent::Agent::ends_at_once`]) is written ended. Answers the
    /// task as first recorded. Needs a tokio runtime.
    pub fn start(self: &Arc<Self>, new: NewTask) -> Result<Task, TaskError> {
        self.start_settled(new).map(|(task, _)| task)
    }

    /// [`Hub::start`], and the task as it settled when it was written ended:
    /// what a held SendMessage answers, without waiting or reading it again.
    pub fn start_settled(
        self: &Arc<Self>,
        new: NewTask,
    ) -> Result<(Task, Option<Task>), TaskError> {
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
        let input = TaskInput {
            task_id: id.clone(),
            context_id: context_id.clone(),
            text: new.text,
            images: new.images,
            origin: new.origin,
            trust: new.trust,
            forget_session: new.forget_session,
        };
        let run_now =
            refusal.is_none() && !live.tasks.values().any(|t| t.started) && live.queue.is_empty();
        // A task that runs now and that its agent ends at once is written
        // ended, in one change with the events of all three states.
        let ended = run_now
            .then(|| self.agent.ends_at_once(&input))
            .flatten()
            .map(|outcome| ending(outcome, running_commands(&live.detached, &id, now)));
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
        let (task, ids) = self
            .store
            .insert_ended(&record, ended.as_ref(), now, bodies.len() as u64)
            .map_err(unavailable)?;
        self.events.publish(ids, &task.id, &task.context_id, bodies);
        if refusal.is_some() {
            return Ok((task, None));
        }
        if ended.is_some() {
            // As first recorded, like any other.
            let first = Task {
                status: Status {
                    state: TaskState::Submitted,
                    message: None,
                    timestamp_ms: now,
                },
                response: None,
                ..task.clone()
            };
            return Ok((first, Some(task)));
        }
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
        Ok((task, None))
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
