//! [`RunningTask`]: a running task's line to its session, what an
//! [`Agent`](super::agent::Agent) may ask while it runs the task. It speaks
//! to the session through [`TaskReports`], which the hub implements, so
//! neither the agent nor the handle reaches the hub itself.

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::delegations::{Child, Delegation};
use super::events::FrameKind;
use crate::bindings::session::DetachedShell;
use crate::bindings::task_store::MemberStatus;

/// What a running task reports to its session, and asks of it, by the
/// task's id.
pub(super) trait TaskReports: Send + Sync {
    /// The agent ends the task with `outcome`, outside its future.
    fn answer(self: Arc<Self>, id: &str, outcome: Outcome);

    /// A `working` status whose message is `message`.
    fn progress(&self, id: &str, message: &str);

    /// A frame the agent of a live task reports.
    fn frame(&self, id: &str, kind: FrameKind, body: &serde_json::Map<String, serde_json::Value>);

    /// Pauses the task in `input-required` with `prompt`: where the reply
    /// will come, or `None` when the task is not working.
    fn pause(&self, id: &str, prompt: String) -> Option<oneshot::Receiver<String>>;

    /// Starts `command` for the task, detached.
    fn detach(self: Arc<Self>, id: &str, command: &str) -> io::Result<DetachedShell>;

    /// Records `command` for the task as detached, without running it.
    fn record_detached(&self, id: &str, command: &str) -> io::Result<DetachedShell>;

    /// Records that the task delegated to `child`; answers the delegation's
    /// id.
    fn delegated(&self, id: &str, child: Child) -> io::Result<String>;

    /// The task's delegation `delegation_id` has ended.
    fn delegation_ended(&self, id: &str, delegation_id: &str);

    /// `first`, and the members it reported below itself, gave the task no
    /// answer.
    fn no_answer_from(&self, id: &str, first: &MemberStatus, below: &[MemberStatus]);

    /// Registers that the task awaits `delegation_id`: where its completion
    /// will come.
    fn expect(&self, id: &str, delegation_id: String) -> oneshot::Receiver<String>;
}

/// How a task ends, when its agent ends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `completed`, with the response artifact's text.
    Completed(String),
    /// `failed`, with the status message saying why.
    Failed(String),
    /// `failed` with `noAnswer: true` ("Task metadata"): a formation member
    /// ended with end-without-answer. The status message says why.
    NoAnswer(String),
}

/// A running task's line to its session: what an
/// [`Agent`](super::agent::Agent) may ask while it runs the task. Clones
/// share the task.
#[derive(Clone)]
pub struct RunningTask {
    session: Arc<dyn TaskReports>,
    id: String,
    context_id: String,
}

impl RunningTask {
    /// The handle on task `id`, in `context_id`, that reports to `session`.
    pub(super) fn new(
        session: Arc<dyn TaskReports>,
        id: String,
        context_id: String,
    ) -> RunningTask {
        RunningTask {
            session,
            id,
            context_id,
        }
    }

    /// `tsk_…`
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `ctx_…`, or the context the client named.
    pub fn context_id(&self) -> &str {
        &self.context_id
    }

    /// A `working` status whose message is `message`: streams receive it
    /// as a status update, as it happens (GetTask shows a status message
    /// only on a terminal task, reference "GetTask"). Ignored unless the
    /// task is `working`.
    pub fn progress(&self, message: &str) {
        self.session.progress(&self.id, message);
    }

    /// Reports a murmur frame beside the task's A2A events: `kind`, and the
    /// frame's fields (`{"text": …}` for [`FrameKind::Text`]), which streams
    /// carry as the agent wrote them. Ignored once the task has ended.
    pub fn frame(&self, kind: FrameKind, body: &serde_json::Map<String, serde_json::Value>) {
        self.session.frame(&self.id, kind, body);
    }

    /// A [`FrameKind::Text`] frame: `{"text": text}`.
    pub fn text(&self, text: &str) {
        let mut body = serde_json::Map::new();
        body.insert("text".into(), text.into());
        self.frame(FrameKind::Text, &body);
    }

    /// Ends the task with `outcome` now, as the agent's future answering it
    /// would, and drops that future: for an agent that learns how a task
    /// ends outside the future (a line of its own process). Ignored once
    /// the task has ended.
    pub fn answer(&self, outcome: Outcome) {
        self.session.clone().answer(&self.id, outcome);
    }

    /// Pauses the task in `input-required` with `prompt` and resolves with
    /// the reply's text, the task `working` again. Never resolves when the
    /// task ends first (its agent's future is then dropped).
    pub async fn ask(&self, prompt: &str) -> String {
        self.ask_now(prompt).await
    }

    /// [`RunningTask::ask`], pausing the task now rather than when the
    /// future is first polled: for an agent that must order the question
    /// among its other reports.
    pub fn ask_now(&self, prompt: &str) -> impl Future<Output = String> + Send + 'static {
        let paused = self.session.pause(&self.id, prompt.to_string());
        async move {
            match paused {
                Some(reply) => match reply.await {
                    Ok(reply) => reply,
                    Err(_) => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        }
    }

    /// Starts `sh -c command` in its own process group, detached: it outlives
    /// the task, is listed in the session's residue while it runs, and is
    /// killed when the session ends.
    pub fn detach(&self, command: &str) -> io::Result<DetachedShell> {
        self.session.clone().detach(&self.id, command)
    }

    /// Records `command` as detached without running anything: residue and
    /// `runningCommands` as [`RunningTask::detach`]'s are, until the session
    /// ends or a cancel of this task ends it, with no result. For an agent
    /// whose command text comes from a caller, which must reach no shell.
    pub fn record_detached(&self, command: &str) -> io::Result<DetachedShell> {
        self.session.record_detached(&self.id, command)
    }

    /// Records that this task delegated to a sub-capsule, `child`: until
    /// the task ends or [`RunningTask::delegation_ended`] is called, a
    /// cancel of the task lists it as a `delegation` residue item (the
    /// cancel ends it). Answers the delegation's `dlg_…` id, which
    /// [`RunningTask::expect_delegation`] awaits a completion for. Refused
    /// when the task has ended or `child.workdir` is not absolute.
    pub fn delegate(&self, child: Child) -> io::Result<String> {
        self.session.delegated(&self.id, child)
    }

    /// The delegation `delegation_id` has ended: it is no longer residue.
    pub fn delegation_ended(&self, delegation_id: &str) {
        self.session.delegation_ended(&self.id, delegation_id);
    }

    /// Records that `member`, which this task called, gave it no answer,
    /// with its `member_call` status (anything but `completed`), and the
    /// members that member reported below itself: the task's terminal
    /// `noAnswerBelow` lists each member once, in the order they were
    /// reported, [`NO_ANSWER_BELOW`](super::NO_ANSWER_BELOW) at most.
    /// Ignored once the task has ended; a member whose status is
    /// `completed` is left out.
    pub fn no_answer_from(&self, member: &str, status: &str, below: &[MemberStatus]) {
        if status == "completed" {
            return;
        }
        let first = MemberStatus {
            member: member.to_string(),
            status: status.to_string(),
        };
        self.session.no_answer_from(&self.id, &first, below);
    }

    /// Declares that this task awaits a completion for `delegation_id`: from
    /// now until the task ends, the door accepts one completion for it, and
    /// the returned [`Delegation`] resolves with its message. Asking again
    /// for the same id gives a new handle on the same delegation, which
    /// resolves at once when the completion arrived meanwhile.
    pub fn expect_delegation(&self, delegation_id: &str) -> Delegation {
        Delegation(self.session.expect(&self.id, delegation_id.to_string()))
    }
}
