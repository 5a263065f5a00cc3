//! The agent running each task, from launch to ending: the task moves to
//! `working` when its agent runs, pauses in `input-required` for a reply,
//! reports progress and frames, and ends with what the agent answered, a
//! cancel, or murmur.StopSession. [`RunningTask`] is the agent's side of it.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::TaskError;
use super::agent::{Outcome, TaskInput};
use super::delegations::{Child, Delegation};
use super::detached::{end_recorded, residue, running_commands};
use super::events::{self, FrameKind};
use super::ids;
use super::store::Transition;
use super::{Caller, DetachedShell, Hub, Live, MemberStatus, ResidueItem, StopReport, Task};
use super::{TaskMetadata, TaskState, now_ms, unavailable};

/// A completed task's final status message ("Messages", "GetTask",
/// "ListTasks": the examples' `task completed`): stored with the ending, so
/// the terminal status a stream carries and what GetTask shows agree.
pub const COMPLETED: &str = "task completed";

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

/// What task `id`'s metadata says if it ends at `now`: the commands it
/// detached that still run, and the members that gave it no answer.
pub(super) fn metadata(live: &Live, id: &str, now: i64) -> TaskMetadata {
    TaskMetadata {
        no_answer: false,
        no_answer_below: live
            .tasks
            .get(id)
            .map_or_else(Vec::new, |t| t.no_answer_below.clone()),
        running_commands: running_commands(&live.detached, id, now),
    }
}

/// The delegations task `id` has open, as residue items: a cancel ends
/// them.
fn delegations(live: &Live, id: &str) -> Vec<ResidueItem> {
    live.tasks.get(id).map_or_else(Vec::new, |t| {
        t.delegated
            .iter()
            .cloned()
            .map(ResidueItem::Delegation)
            .collect()
    })
}

/// `noAnswerBelow` holds this many members at most ("Task metadata").
pub const NO_ANSWER_BELOW: usize = 8;

/// A running task is recorded `working` when its agent first reports
/// anything or asks anything of the session, or when it has run this long,
/// whichever is first; an agent that ends it sooner has `working` and the
/// ending recorded in one write, with the events of both in order, as one
/// that ends at once does. Writes are what a task costs the door most.
pub const WORKING_WITHIN: Duration = Duration::from_millis(1);

/// How often an ending the store refused is tried again.
const END_RETRY: Duration = Duration::from_secs(1);

impl Hub {
    /// Hands a task to the agent and moves it to `working`; a task its agent
    /// ends at once is recorded ended, and the next queued task launched in
    /// turn.
    pub(super) fn launch(self: &Arc<Self>, input: TaskInput) {
        let mut next = Some(input);
        while let Some(input) = next {
            next = self.launch_one(input);
        }
    }

    /// Launches one task. An agent that can tell how the task ends without
    /// running anything ([`super::agent::Agent::ends_at_once`]) has it
    /// recorded `working` and ended in one write, with the events of both,
    /// and nothing spawned; then the next queued task, if any, is answered
    /// for the caller to launch (a loop, where recursion could run deep).
    ///
    /// Otherwise the agent's `run` is called before the task shows
    /// `working`, outside the lock, so what it registers at once (a
    /// delegation it awaits) is in place by then.
    fn launch_one(self: &Arc<Self>, input: TaskInput) -> Option<TaskInput> {
        if let Some(outcome) = self.agent.ends_at_once(&input) {
            let mut live = self.lock();
            if !live.tasks.contains_key(&input.task_id) {
                // Cancelled before it ran.
                return None;
            }
            let now = now_ms();
            let to = ending(outcome, metadata(&live, &input.task_id, now));
            let working = Transition::to(TaskState::Working);
            match self.end_steps(&mut live, &input.task_id, &[&working, &to], now) {
                Ok(_) => return self.next_queued(&mut live),
                // Nothing was written: the task runs as any other, and its
                // ending is retried if the store still refuses it.
                Err(e) => {
                    tracing::error!(task = %input.task_id, error = %e, "recording a task that ended at once failed");
                }
            }
        }
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
            return None;
        }
        let running = live.tasks.get_mut(&id).expect("checked above");
        running.state = TaskState::Working;
        running.working_unrecorded = true;
        let hub = self.clone();
        let task_id = id.clone();
        let runner = tokio::spawn(async move {
            let mut future = future;
            let outcome = tokio::select! {
                biased;
                outcome = &mut future => outcome,
                _ = tokio::time::sleep(WORKING_WITHIN) => {
                    hub.record_working(&task_id);
                    future.await
                }
            };
            hub.finish(&task_id, outcome);
        });
        running.runner = Some(runner.abort_handle());
        None
    }

    /// Records what the agent answered, unless the task ended meanwhile.
    fn finish(self: &Arc<Self>, id: &str, outcome: Outcome) {
        let mut live = self.lock();
        let Some(running) = live.tasks.get_mut(id) else {
            return;
        };
        // The runner is returning: nothing to abort.
        running.runner = None;
        let now = now_ms();
        let to = ending(outcome, metadata(&live, id, now));
        if let Err(e) = self.end_ran(&mut live, id, &to, now) {
            tracing::error!(task = %id, error = %e, "recording a task's end failed; retrying each second");
            drop(live);
            self.retry_end(id.to_string(), to);
            return;
        }
        self.launch_next(live);
    }

    /// Ends task `id`, which its agent ran, with `to`: `working` and the
    /// ending in one write when `working` is not recorded yet.
    fn end_ran(
        &self,
        live: &mut Live,
        id: &str,
        to: &Transition,
        now: i64,
    ) -> rusqlite::Result<Option<Task>> {
        let unrecorded = live.tasks.get(id).is_some_and(|r| r.working_unrecorded);
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
    pub(super) fn record_working(&self, id: &str) {
        let mut live = self.lock();
        self.record_working_locked(&mut live, id);
    }

    pub(super) fn record_working_locked(&self, live: &mut Live, id: &str) {
        let Some(running) = live.tasks.get_mut(id) else {
            return;
        };
        if !std::mem::take(&mut running.working_unrecorded) {
            return;
        }
        running.watch.send_modify(|p| p.state = TaskState::Working);
        if let Err(e) = self.write(live, id, &Transition::to(TaskState::Working), now_ms()) {
            tracing::error!(task = %id, error = %e, "recording a task's start failed");
        }
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
                if hub.end_ran(&mut live, &id, &to, now_ms()).is_ok() {
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

    /// Cancels a live task: `canceled`, with the residue of what the session
    /// still runs. An ended task answers `wrong-state` with its state.
    pub fn cancel(self: &Arc<Self>, caller: &Caller, id: &str) -> Result<Task, TaskError> {
        let mut live = self.lock();
        let task = self.seen(caller, id)?;
        if !live.tasks.contains_key(id) {
            return Err(TaskError::WrongState(task.status.state));
        }
        let mut residue = residue(&live.detached);
        residue.extend(delegations(&live, id));
        let task = self
            .cancel_locked(&mut live, id, residue, now_ms())
            .map_err(unavailable)?
            .ok_or(TaskError::NotFound)?;
        // Listed as residue, as a delegation is, then ended by the cancel.
        end_recorded(&live.detached, id);
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
        to.metadata = metadata(live, id, now);
        self.end(live, id, &to, now)
    }

    /// murmur.StopSession: cancels every live task and reports the sorted
    /// ids and what the session still runs. Does not close the session. An
    /// error names the tasks whose cancel the store could not record: they
    /// stay as they were, and a later stop may cancel them.
    pub fn stop(self: &Arc<Self>) -> Result<StopReport, String> {
        let mut live = self.lock();
        let mut canceled: Vec<String> = live.tasks.keys().cloned().collect();
        canceled.sort();
        let detached = residue(&live.detached);
        let mut ended = Vec::new();
        let now = now_ms();
        let mut failed = Vec::new();
        for id in &canceled {
            let own = delegations(&live, id);
            let residue = [detached.clone(), own.clone()].concat();
            if let Err(e) = self.cancel_locked(&mut live, id, residue, now) {
                tracing::error!(task = %id, error = %e, "recording a stopped task failed");
                failed.push(format!("{id} ({e})"));
            } else {
                end_recorded(&live.detached, id);
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

    // What a running task asks of its session (through `RunningTask`).

    /// A `working` status whose message is `message`, written as it
    /// happens: its own message id, timestamped now.
    fn progress(&self, id: &str, message: &str) {
        let mut live = self.lock();
        self.record_working_locked(&mut live, id);
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
        let mut live = self.lock();
        self.record_working_locked(&mut live, id);
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
        self.record_working_locked(&mut live, id);
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
}

/// A running task's line to its session: what an
/// [`Agent`](super::agent::Agent) may ask while it runs the task. Clones
/// share the task.
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

    /// `ctx_…`, or the context the client named.
    pub fn context_id(&self) -> &str {
        &self.context_id
    }

    /// A `working` status whose message is `message`: streams receive it
    /// as a status update, as it happens (GetTask shows a status message
    /// only on a terminal task, reference "GetTask"). Ignored unless the
    /// task is `working`.
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
        self.ask_now(prompt).await
    }

    /// [`RunningTask::ask`], pausing the task now rather than when the
    /// future is first polled: for an agent that must order the question
    /// among its other reports.
    pub fn ask_now(&self, prompt: &str) -> impl Future<Output = String> + Send + 'static {
        let paused = self.hub.pause(&self.id, prompt.to_string());
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
        self.hub.detach(&self.id, command)
    }

    /// Records `command` as detached without running anything: residue and
    /// `runningCommands` as [`RunningTask::detach`]'s are, until the session
    /// ends or a cancel of this task ends it, with no result. For an agent
    /// whose command text comes from a caller, which must reach no shell.
    pub fn record_detached(&self, command: &str) -> io::Result<DetachedShell> {
        self.hub.record_detached(&self.id, command)
    }

    /// Records that this task delegated to a sub-capsule, `child`: until
    /// the task ends or [`RunningTask::delegation_ended`] is called, a
    /// cancel of the task lists it as a `delegation` residue item (the
    /// cancel ends it). Answers the delegation's `dlg_…` id, which
    /// [`RunningTask::expect_delegation`] awaits a completion for. Refused
    /// when the task has ended or `child.workdir` is not absolute.
    pub fn delegate(&self, child: Child) -> io::Result<String> {
        self.hub.delegated(&self.id, child)
    }

    /// The delegation `delegation_id` has ended: it is no longer residue.
    pub fn delegation_ended(&self, delegation_id: &str) {
        self.hub.delegation_ended(&self.id, delegation_id);
    }

    /// Records that `member`, which this task called, gave it no answer,
    /// with its `member_call` status (anything but `completed`), and the
    /// members that member reported below itself: the task's terminal
    /// `noAnswerBelow` lists each member once, in the order they were
    /// reported, [`NO_ANSWER_BELOW`] at most. Ignored once the task has
    /// ended; a member whose status is `completed` is left out.
    pub fn no_answer_from(&self, member: &str, status: &str, below: &[MemberStatus]) {
        if status == "completed" {
            return;
        }
        let first = MemberStatus {
            member: member.to_string(),
            status: status.to_string(),
        };
        let mut live = self.hub.lock();
        let Some(running) = live.tasks.get_mut(&self.id) else {
            return;
        };
        let reported = std::iter::once(&first).chain(below);
        for reported in reported.filter(|m| m.status != "completed") {
            let list = &mut running.no_answer_below;
            if list.len() < NO_ANSWER_BELOW && !list.iter().any(|m| m.member == reported.member) {
                list.push(reported.clone());
            }
        }
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
