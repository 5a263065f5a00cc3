//! What the hub asks of an agent (see [`crate::session::agents`] for the ones the
//! host embeds): [`Agent::run`] one task, answered with a future whose
//! output ends it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use super::handle::Outcome;
use super::handle::RunningTask;
use crate::bindings::task_store::{Image, Origin};
use crate::telemetry::Trace;

/// A task as its agent receives it.
#[derive(Clone, Debug)]
pub struct TaskInput {
    /// `tsk_…`
    pub task_id: String,
    /// `ctx_…`, or the context the client named.
    pub context_id: String,
    /// The text the door composed from the message: its parts joined, data
    /// fences, the referenced-tasks block.
    pub text: String,
    /// The message's images, in part order, after its text.
    pub images: Vec<Image>,
    /// Where the task came from (`x-murmur-task-origin`).
    pub origin: Origin,
    /// The trust class the request carried (`x-murmur-task-trust`).
    pub trust: Option<String>,
    /// Start a new conversation in this context (forgetSession).
    pub forget_session: bool,
    /// The task's trace context when tracing is on, for the agent's own
    /// spans to join the caller's trace.
    pub trace: Option<Trace>,
}

/// The future an agent answers with.
pub type AgentFuture = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

/// Runs tasks. Shared by every task of the session.
pub trait Agent: Send + Sync + 'static {
    /// Runs `input`. Called before the task shows `working`: what `run`
    /// registers before returning (a delegation it will await) is in place
    /// by the time anyone can see the task run. The future is dropped, not
    /// awaited further, when the task is cancelled.
    fn run(&self, input: TaskInput, task: RunningTask) -> AgentFuture;

    /// How `input` ends, when the agent can tell without running anything
    /// (a script that only replies): the task is then recorded `working` and
    /// ended in one write, with the events of both, and `run` is not
    /// called. None (the default) runs it.
    fn ends_at_once(&self, input: &TaskInput) -> Option<Outcome> {
        let _ = input;
        None
    }

    /// Task `task_id`, which the agent was handed, was cancelled (CancelTask,
    /// murmur.StopSession): called as the cancel is recorded, before the
    /// next queued task is handed over, so that an agent of its own process
    /// hears of the cancel before that task. The task's future is dropped
    /// as well. Does nothing unless an agent needs it.
    fn cancelled(&self, task_id: &str) {
        let _ = task_id;
    }

    /// Called with a reply's text as it is delivered to a task waiting in
    /// `input-required`, before the reply is answered and before the future
    /// that asked resumes: what it registers (a delegation the reply leads
    /// to) is in place by the time the client learns the task works again.
    /// Does nothing unless an agent needs it.
    fn replied(&self, task: &RunningTask, text: &str) {
        let _ = (task, text);
    }

    /// The session closes: the agent lets go of what it keeps for the
    /// session, within `drain` and a moment more, and the future resolves
    /// once it has (a program of its own has ended). Nothing by default.
    fn close(&self, drain: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let _ = drain;
        Box::pin(async {})
    }

    /// What went wrong between the session and the agent, counted for the
    /// host's metrics. Zero for an agent that runs in the host.
    fn faults(&self) -> AgentFaults {
        AgentFaults::default()
    }
}

/// What an agent of its own process counts ([`Agent::faults`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentFaults {
    /// Lines ignored: not JSON, not an object, naming no task the agent
    /// holds, or no line the protocol has.
    pub ignored_lines: u64,
    /// Lines over the length limit, dropped whole.
    pub dropped_lines: u64,
    /// Processes started after the first, the one before having ended.
    pub restarts: u64,
}
