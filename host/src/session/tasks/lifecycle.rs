//! A task's lifecycle while it is live: the task moves to `working` when
//! its agent runs, pauses in `input-required` for a reply, and ends with
//! what the agent answered, a cancel, or murmur.StopSession. [`Tasks`] holds
//! the live state of each task: its state, its runner, the reply it waits
//! for, what its settle pollables watch.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::AbortHandle;

use super::agent::Outcome;
use super::settled::{Progress, Settled};
use super::store::{Transition, state_word};
use crate::bindings::task_store::{MemberStatus, Task, TaskMetadata, TaskState};
use crate::telemetry;

/// A completed task's final status message ("Messages", "GetTask",
/// "ListTasks": the examples' `task completed`): stored with the ending, so
/// the terminal status a stream carries and what GetTask shows agree.
pub const COMPLETED: &str = "task completed";

/// `noAnswerBelow` holds this many members at most ("Task metadata").
pub const NO_ANSWER_BELOW: usize = 8;

/// A running task is recorded `working` when its agent first reports
/// anything or asks anything of the session, or when it has run this long,
/// whichever is first; an agent that ends it sooner has `working` and the
/// ending recorded in one write, with the events of both in order, as one
/// that ends at once does. Writes are what a task costs the door most.
pub const WORKING_WITHIN: Duration = Duration::from_millis(1);

/// The ending an agent's outcome records, with what the task's metadata
/// says at its end.
pub(super) fn ending(outcome: Outcome, mut metadata: TaskMetadata) -> Transition {
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
        Outcome::NoAnswer(message) => {
            metadata.no_answer = true;
            let mut to = Transition::to(TaskState::Failed);
            to.message = Some(message);
            to
        }
    };
    to.metadata = metadata;
    to
}

/// Every live task (submitted, working, input-required), by id.
#[derive(Default)]
pub(super) struct Tasks(HashMap<String, Running>);

/// A live task.
pub(super) struct Running {
    state: TaskState,
    context_id: String,
    /// The agent has been handed the task and has not answered it (`queue`
    /// runs one at a time).
    started: bool,
    /// The runner, once the agent's future runs: aborting it drops that
    /// future.
    runner: Option<AbortHandle>,
    /// The agent runs it, and `working` is not recorded yet (see
    /// [`WORKING_WITHIN`]).
    working_unrecorded: bool,
    /// While `input-required`: where the reply goes.
    reply: Option<oneshot::Sender<String>>,
    watch: watch::Sender<Progress>,
    /// The members that gave it no answer (`noAnswerBelow`).
    no_answer_below: Vec<MemberStatus>,
    /// Its span, when the request that started it is traced: it ends with
    /// the task.
    span: Option<tracing::Span>,
}

impl Tasks {
    /// Enters a task just written `submitted`; `started` when its agent is
    /// handed it now.
    pub(super) fn submitted(
        &mut self,
        id: String,
        context_id: String,
        started: bool,
        span: Option<tracing::Span>,
    ) {
        self.0.insert(
            id,
            Running {
                state: TaskState::Submitted,
                context_id,
                started,
                runner: None,
                working_unrecorded: false,
                reply: None,
                watch: watch::Sender::new(Progress {
                    state: TaskState::Submitted,
                    settles: 0,
                    ended: None,
                }),
                no_answer_below: Vec::new(),
                span,
            },
        );
    }

    pub(super) fn get(&self, id: &str) -> Option<&Running> {
        self.0.get(id)
    }

    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Running> {
        self.0.get_mut(id)
    }

    pub(super) fn contains(&self, id: &str) -> bool {
        self.0.contains_key(id)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an agent has been handed a live task.
    pub(super) fn any_started(&self) -> bool {
        self.0.values().any(|t| t.started)
    }

    /// Marks task `id` handed to its agent.
    pub(super) fn start(&mut self, id: &str) {
        if let Some(running) = self.0.get_mut(id) {
            running.started = true;
        }
    }

    /// The ids of the live tasks, sorted.
    pub(super) fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.0.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Task `id` has ended in `state`, written as `task`: its runner is
    /// aborted (dropping the agent's future), the reply it waited for let
    /// go, and its watchers see the final state and the task.
    pub(super) fn end(&mut self, id: &str, state: TaskState, task: Option<&Task>) {
        if let Some(running) = self.0.remove(id) {
            if let Some(runner) = running.runner {
                runner.abort();
            }
            if let Some(span) = &running.span {
                telemetry::task_ended(span, state_word(state), state == TaskState::Failed);
            }
            // Copied only for a request waiting on it.
            let watched = running.watch.receiver_count() > 0;
            let ended = task.filter(|_| watched).cloned().map(Arc::new);
            running.watch.send_modify(|p| {
                p.state = state;
                p.settles += 1;
                p.ended = ended;
            });
        }
    }

    /// A settle pollable on task `id`: ready once it settles, or the
    /// session closes (`closed`).
    pub(super) fn settled(&self, id: &str, closed: watch::Receiver<bool>) -> Settled {
        Settled::new(self.0.get(id).map(|r| r.watch.subscribe()), closed)
    }

    /// The members that gave task `id` no answer.
    pub(super) fn no_answer_below(&self, id: &str) -> Vec<MemberStatus> {
        self.0
            .get(id)
            .map_or_else(Vec::new, |t| t.no_answer_below.clone())
    }
}

impl Running {
    pub(super) fn state(&self) -> TaskState {
        self.state
    }

    /// Its span, when traced.
    pub(super) fn span(&self) -> Option<&tracing::Span> {
        self.span.as_ref()
    }

    pub(super) fn context_id(&self) -> &str {
        &self.context_id
    }

    /// Its agent is handed it: `working`, not recorded yet. What the agent
    /// reports from now on is the task's, even before its future runs.
    pub(super) fn runs(&mut self) {
        self.state = TaskState::Working;
        self.working_unrecorded = true;
    }

    /// Its agent's future runs in `runner`.
    pub(super) fn runner(&mut self, runner: AbortHandle) {
        self.runner = Some(runner);
    }

    /// Whether its agent has been handed it, and has not answered it.
    pub(super) fn started(&self) -> bool {
        self.started
    }

    /// Its agent has answered it, ending it in `state`: its future is
    /// dropped, unless `returned` (its runner is returning: nothing to
    /// abort); nothing more it reports counts, and the agent may be handed
    /// the next queued task while the ending is written. Answers whether
    /// `working` was left unrecorded.
    pub(super) fn answered(&mut self, state: TaskState, returned: bool) -> bool {
        if let Some(runner) = self.runner.take().filter(|_| !returned) {
            runner.abort();
        }
        self.started = false;
        self.state = state;
        std::mem::take(&mut self.working_unrecorded)
    }

    /// Whether `working` is to be recorded now: true once, the first time
    /// after its agent runs it; its watchers see it working.
    pub(super) fn record_working(&mut self) -> bool {
        if !std::mem::take(&mut self.working_unrecorded) {
            return false;
        }
        self.watch.send_modify(|p| p.state = TaskState::Working);
        true
    }

    /// Paused in `input-required`: settled for its watchers; answers where
    /// the reply will come.
    pub(super) fn pause(&mut self) -> oneshot::Receiver<String> {
        let (sender, receiver) = oneshot::channel();
        self.state = TaskState::InputRequired;
        self.reply = Some(sender);
        self.watch.send_modify(|p| {
            p.state = TaskState::InputRequired;
            p.settles += 1;
        });
        receiver
    }

    /// Replied to: `working` again; answers where the reply goes.
    pub(super) fn resume(&mut self) -> Option<oneshot::Sender<String>> {
        self.state = TaskState::Working;
        self.watch.send_modify(|p| p.state = TaskState::Working);
        self.reply.take()
    }

    /// Records the members reported to have given it no answer: each once,
    /// in the order reported, [`NO_ANSWER_BELOW`] at most, none whose status
    /// is `completed`.
    pub(super) fn no_answer_from(&mut self, first: &MemberStatus, below: &[MemberStatus]) {
        let reported = std::iter::once(first).chain(below);
        for reported in reported.filter(|m| m.status != "completed") {
            let list = &mut self.no_answer_below;
            if list.len() < NO_ANSWER_BELOW && !list.iter().any(|m| m.member == reported.member) {
                list.push(reported.clone());
            }
        }
    }
}
