//! `--agent-stdio CMD`: any program is the agent. `sh -c CMD` is started
//! once for each session, in the capsule's workdir and a process group of
//! its own, and serves every task of the session over JSON lines: the host
//! writes a task, a reply, a cancel, a completion, the result of a request,
//! and `stop` to its stdin (`HostLine`); the agent writes frames,
//! progress, questions, endings, detached commands and delegations to its
//! stdout (`AgentLine`). Its stderr goes to the log under the
//! capsule's name. docs/agents.md is the protocol's page.
//!
//! Faults stay with the agent:
//! - a line that is not JSON, not an object, not a line of the protocol, or
//!   names no task the agent holds is logged (at most [`LOGGED_FAULTS`] a
//!   [`FAULT_WINDOW`]), counted and ignored; a line over
//!   [`MAX_LINE_BYTES`] is dropped whole, and counted;
//! - when the process exits or closes its stdout, every task it held fails
//!   saying so, and the next task starts another, after a pause that grows
//!   while processes keep ending young ([`restart_delay`]);
//! - lines for a process that does not read its stdin wait, at most
//!   [`MAX_WAITING_BYTES`] of them a session; a line that would pass that
//!   fails its task at once.
//!
//! Whatever the agent writes goes through the same [`RunningTask`] calls a
//! library agent makes, so the door's checks still apply.

mod lines;
mod process;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::images::ImageFiles;
use crate::session::tasks::agent::{Agent, AgentFaults, AgentFuture, Outcome, TaskInput};
use crate::session::tasks::events::FrameKind;
use crate::session::tasks::{Child, Delegation, Image, RunningTask};
pub use lines::MAX_LINE_BYTES;
use lines::{AgentLine, HostLine, ImageRef, Returned};
use process::{Launch, Outbox, Process, Reports};

/// Bytes of lines that may wait for an agent to read its stdin, a session.
pub const MAX_WAITING_BYTES: usize = 4 << 20;

/// Faults logged at most this many times a [`FAULT_WINDOW`]; the others are
/// counted, and their number logged when the window ends.
pub const LOGGED_FAULTS: u32 = 5;
/// See [`LOGGED_FAULTS`].
pub const FAULT_WINDOW: Duration = Duration::from_secs(10);

/// A process that lived less than this ended young: the next waits longer.
const YOUNG: Duration = Duration::from_secs(10);

/// How long the next process waits to start after `young` processes in a
/// row ended young: nothing after none, then 200 ms, doubling, 5 s at most.
pub fn restart_delay(young: u32) -> Duration {
    match young {
        0 => Duration::ZERO,
        n => Duration::from_millis(200u64 << (n - 1).min(5)).min(Duration::from_secs(5)),
    }
}

/// `--agent-stdio CMD`: the command every session of the door starts.
#[derive(Clone, Debug)]
pub struct StdioAgent {
    command: String,
    max_waiting: usize,
}

impl StdioAgent {
    /// Runs `command` through `sh -c`, one process a session.
    pub fn new(command: impl Into<String>) -> StdioAgent {
        StdioAgent {
            command: command.into(),
            max_waiting: MAX_WAITING_BYTES,
        }
    }

    /// With another bound on the bytes of lines waiting for the agent
    /// (at least one line's, [`MAX_LINE_BYTES`], to be of use).
    pub fn with_max_waiting(mut self, bytes: usize) -> StdioAgent {
        self.max_waiting = bytes;
        self
    }

    /// The command.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The agent of one session of capsule `capsule`: its process starts
    /// now, in `workdir`. `process_transport` is the capsule's
    /// `inference.transport: process`, without which `quota` and
    /// `suggested-prompt` frames are refused.
    pub fn open(&self, capsule: &str, workdir: &Path, process_transport: bool) -> StdioSession {
        let shared = Arc::new(Shared {
            command: self.command.clone(),
            capsule: capsule.to_string(),
            workdir: workdir.to_path_buf(),
            process_transport,
            max_waiting: self.max_waiting,
            state: Mutex::new(State::default()),
            faults: Faults::default(),
            logged: Mutex::new(Logged::default()),
        });
        {
            let mut state = shared.lock();
            if let Err(e) = shared.start(&mut state) {
                tracing::error!(capsule = %capsule, error = %e, "the agent did not start");
            }
        }
        StdioSession { shared }
    }
}

/// One session's agent process, and the tasks it holds.
pub struct StdioSession {
    shared: Arc<Shared>,
}

struct Shared {
    command: String,
    capsule: String,
    workdir: PathBuf,
    process_transport: bool,
    max_waiting: usize,
    state: Mutex<State>,
    faults: Faults,
    logged: Mutex<Logged>,
}

#[derive(Default)]
struct State {
    /// The process serving tasks, while it runs.
    process: Option<Process>,
    /// How many processes were started.
    started: u64,
    /// The tasks the agent was given and has not ended.
    held: HashMap<String, Held>,
    /// Processes in a row that ended young.
    young: u32,
    /// When the last process ended.
    last_end: Option<Instant>,
    closed: bool,
}

impl State {
    /// When the next process may start: [`restart_delay`] after the last
    /// one ended; now when none has.
    fn restart_at(&self) -> Instant {
        self.last_end
            .map_or_else(Instant::now, |end| end + restart_delay(self.young))
    }
}

/// A task the agent holds.
struct Held {
    task: RunningTask,
    /// The process it was given to.
    generation: u64,
    wants: mpsc::UnboundedSender<Want>,
}

/// Where a task's lines go, or how long until a process may start.
enum Hold {
    Given(Outbox),
    After(Duration),
}

/// What a task's future waits for on the agent's behalf.
enum Want {
    Reply(Pin<Box<dyn Future<Output = String> + Send>>),
    Completion(String, Delegation),
}

/// What a task's future learned, to tell the agent.
enum Ready {
    Reply(String),
    Completion(String, String),
}

#[derive(Default)]
struct Faults {
    ignored: AtomicU64,
    dropped: AtomicU64,
    restarts: AtomicU64,
}

#[derive(Default)]
struct Logged {
    since: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a process, the state's new current one.
    fn start(self: &Arc<Self>, state: &mut State) -> std::io::Result<()> {
        state.started += 1;
        if state.started > 1 {
            self.faults.restarts.fetch_add(1, Ordering::Relaxed);
        }
        let generation = state.started;
        let launch = Launch {
            command: &self.command,
            workdir: &self.workdir,
            capsule: &self.capsule,
            max_waiting: self.max_waiting,
        };
        match Process::spawn(&launch, self.clone(), generation) {
            Ok(process) => {
                tracing::info!(capsule = %self.capsule, pid = process.pgid, generation, "agent started");
                state.process = Some(process);
                Ok(())
            }
            Err(e) => {
                state.young += 1;
                state.last_end = Some(Instant::now());
                Err(e)
            }
        }
    }

    /// Holds task `id` for the running process, starting one when none
    /// runs and [`restart_delay`] has passed: answers where its lines go,
    /// or how long to wait before asking again.
    fn try_hold(
        self: &Arc<Self>,
        id: &str,
        task: &RunningTask,
        wants: &mpsc::UnboundedSender<Want>,
    ) -> Result<Hold, String> {
        let mut state = self.lock();
        if state.closed {
            return Err("the session is closing".into());
        }
        let restart_at = state.restart_at();
        if state.process.is_none() && restart_at <= Instant::now() {
            self.start(&mut state)
                .map_err(|e| format!("the agent cannot start: {e}"))?;
        }
        let Some(process) = &state.process else {
            return Ok(Hold::After(
                restart_at.saturating_duration_since(Instant::now()),
            ));
        };
        let (generation, outbox) = (process.generation, process.outbox.clone());
        let held = Held {
            task: task.clone(),
            generation,
            wants: wants.clone(),
        };
        state.held.insert(id.to_string(), held);
        Ok(Hold::Given(outbox))
    }

    /// [`Shared::try_hold`], waiting for a process to start.
    async fn hold(
        self: &Arc<Self>,
        id: &str,
        task: &RunningTask,
        wants: &mpsc::UnboundedSender<Want>,
    ) -> Result<Outbox, String> {
        loop {
            match self.try_hold(id, task, wants)? {
                Hold::Given(outbox) => return Ok(outbox),
                Hold::After(wait) => tokio::time::sleep(wait).await,
            }
        }
    }

    /// Writes task `id`'s line, held: where its later lines go. The agent
    /// never had it when the line cannot wait.
    fn hand_over(&self, id: &str, outbox: Outbox, line: Vec<u8>) -> Result<Outbox, String> {
        match outbox.send(line) {
            Ok(()) => Ok(outbox),
            Err(why) => {
                self.lock().held.remove(id);
                Err(why)
            }
        }
    }

    /// Task `id` is no longer the agent's. When it still was (a cancel or
    /// murmur.StopSession, as it is recorded; or its future dropped), the
    /// agent is told.
    fn release(&self, id: &str) {
        let mut state = self.lock();
        let Some(held) = state.held.remove(id) else {
            return;
        };
        let Some(process) = state
            .process
            .as_ref()
            .filter(|p| p.generation == held.generation)
        else {
            return;
        };
        // A full outbox drops it: the agent is not reading anyway.
        let _ = process
            .outbox
            .send(HostLine::Cancel { task: id }.to_bytes());
    }

    /// What a line other than an ending asks of `task`, done outside the
    /// state's lock (the hub may be called).
    fn report(
        &self,
        line: AgentLine,
        task: &RunningTask,
        wants: &mpsc::UnboundedSender<Want>,
        outbox: &Outbox,
    ) {
        match line {
            AgentLine::Ask(prompt) => {
                // Paused now, in the order of the agent's lines.
                let reply = task.ask_now(&prompt);
                let _ = wants.send(Want::Reply(Box::pin(reply)));
            }
            AgentLine::Await(delegation) => {
                let awaited = task.expect_delegation(&delegation);
                let _ = wants.send(Want::Completion(delegation, awaited));
            }
            AgentLine::Frame(kind @ (FrameKind::Quota | FrameKind::SuggestedPrompt), _)
                if !self.process_transport =>
            {
                self.ignore(&format!(
                    "a {} frame needs inference.transport: process",
                    kind.as_str()
                ));
            }
            AgentLine::Frame(kind, body) => task.frame(kind, &body),
            AgentLine::Progress(text) => task.progress(&text),
            AgentLine::NoAnswerFrom {
                member,
                status,
                below,
            } => task.no_answer_from(&member, &status, &below),
            AgentLine::Detach { command, id } => {
                let returned = match task.detach(&command) {
                    Ok(detached) => Returned::WorkId(detached.work_id),
                    Err(e) => Returned::Error(e.to_string()),
                };
                self.write_result(outbox, id, returned);
            }
            AgentLine::Delegate {
                capsule,
                version,
                session_id,
                workdir,
                id,
            } => {
                let child = Child {
                    capsule,
                    version,
                    session_id,
                    workdir: PathBuf::from(workdir),
                };
                let returned = match task.delegate(child) {
                    Ok(delegation) => Returned::DelegationId(delegation),
                    Err(e) => Returned::Error(e.to_string()),
                };
                self.write_result(outbox, id, returned);
            }
            AgentLine::DelegationEnded(delegation) => task.delegation_ended(&delegation),
            // Endings are the caller's.
            AgentLine::Reply(_) | AgentLine::Fail(_) | AgentLine::NoAnswer(_) => {}
        }
    }

    /// Writes the result of a numbered request; an unnumbered one has none.
    fn write_result(&self, outbox: &Outbox, id: Option<serde_json::Value>, returned: Returned) {
        if let Some(id) = id
            && let Err(why) = outbox.send(HostLine::Result { id: &id, returned }.to_bytes())
        {
            tracing::warn!(capsule = %self.capsule, "a result was not written: {why}");
        }
    }

    /// A line ignored: counted, and logged unless this window logged
    /// enough.
    fn ignore(&self, why: &str) {
        self.faults.ignored.fetch_add(1, Ordering::Relaxed);
        self.log_fault(why);
    }

    fn log_fault(&self, why: &str) {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if logged.since.is_none_or(|since| now - since >= FAULT_WINDOW) {
            if logged.suppressed > 0 {
                tracing::warn!(capsule = %self.capsule, more = logged.suppressed, "more agent lines were ignored");
            }
            *logged = Logged {
                since: Some(now),
                logged: 0,
                suppressed: 0,
            };
        }
        if logged.logged < LOGGED_FAULTS {
            logged.logged += 1;
            tracing::warn!(capsule = %self.capsule, "agent line ignored: {why}");
        } else {
            logged.suppressed += 1;
        }
    }
}

impl Reports for Shared {
    /// A line process `generation` wrote.
    fn line(&self, generation: u64, outbox: &Outbox, line: &[u8]) {
        let (id, line) = match lines::parse(line) {
            Ok(parsed) => parsed,
            Err(why) => return self.ignore(&why),
        };
        let mut state = self.lock();
        let Some(held) = state
            .held
            .get(&id)
            .filter(|held| held.generation == generation)
        else {
            drop(state);
            return self.ignore(&format!("names {id:?}, no task the agent holds"));
        };
        let outcome = match line {
            AgentLine::Reply(text) => Outcome::Completed(text),
            AgentLine::Fail(text) => Outcome::Failed(text),
            AgentLine::NoAnswer(text) => Outcome::NoAnswer(text),
            line => {
                let (task, wants) = (held.task.clone(), held.wants.clone());
                drop(state);
                return self.report(line, &task, &wants, outbox);
            }
        };
        // The ending: the task is no longer the agent's. Recorded from
        // here, so that the next task's line follows it at once.
        if let Some(held) = state.held.remove(&id) {
            drop(state);
            held.task.answer(outcome);
        }
    }

    /// A line over the limit, dropped.
    fn line_too_long(&self) {
        self.faults.dropped.fetch_add(1, Ordering::Relaxed);
        self.log_fault(&format!(
            "a line over {} bytes was dropped",
            lines::MAX_LINE_BYTES
        ));
    }

    /// Process `generation` has ended: every task it held fails with `why`
    /// (unless the session is closing: tasks then keep their state).
    fn ended(&self, generation: u64, lived: Duration, why: String) {
        let mut state = self.lock();
        if state.process.as_ref().map(|p| p.generation) == Some(generation) {
            state.process = None;
        }
        state.last_end = Some(Instant::now());
        state.young = if lived < YOUNG { state.young + 1 } else { 0 };
        let closed = state.closed;
        let held: Vec<Held> = state
            .held
            .extract_if(|_, h| h.generation == generation)
            .map(|(_, held)| held)
            .collect();
        drop(state);
        tracing::warn!(capsule = %self.capsule, generation, tasks = held.len(), "{why}");
        if !closed {
            for held in held {
                held.task.answer(Outcome::Failed(why.clone()));
            }
        }
    }
}

impl Agent for StdioSession {
    fn run(&self, input: TaskInput, task: RunningTask) -> AgentFuture {
        run(&self.shared, input, task)
    }

    fn cancelled(&self, task_id: &str) {
        self.shared.release(task_id);
    }

    fn close(&self, drain: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let process = {
            let mut state = self.shared.lock();
            state.closed = true;
            state.process.as_ref().map(Process::stopping)
        };
        Box::pin(async move {
            if let Some(stopping) = process {
                stopping.stop(drain).await;
            }
        })
    }

    fn faults(&self) -> AgentFaults {
        let faults = &self.shared.faults;
        AgentFaults {
            ignored_lines: faults.ignored.load(Ordering::Relaxed),
            dropped_lines: faults.dropped.load(Ordering::Relaxed),
            restarts: faults.restarts.load(Ordering::Relaxed),
        }
    }
}

impl Drop for StdioSession {
    /// A session dropped without closing still ends its process.
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.closed = true;
        if let Some(process) = &state.process {
            process.kill();
        }
    }
}

/// Lets go of the task when its future ends or is dropped.
struct Holding {
    shared: Arc<Shared>,
    id: String,
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.shared.release(&self.id);
    }
}

/// The image files of a task or a reply, and their lines' references.
fn image_files(key: &str, images: &[Image]) -> Result<(ImageFiles, Vec<ImageRef>), String> {
    let files = ImageFiles::write(key, images).map_err(|e| format!("cannot write images: {e}"))?;
    let refs = files
        .files()
        .iter()
        .zip(images)
        .map(|(path, image)| ImageRef {
            path: path.display().to_string(),
            media_type: image.media_type.clone(),
        })
        .collect();
    Ok((files, refs))
}

/// Hands task `input` to the agent: its line is written now when a
/// process runs, or once one has started. The future serves what the task
/// waits for on the agent's behalf (replies, completions) and ends only
/// when the task cannot be handed over: the agent's ending is recorded
/// through the task's handle, and the future dropped.
fn run(shared: &Arc<Shared>, input: TaskInput, task: RunningTask) -> AgentFuture {
    let id = input.task_id.clone();
    // Removed when the task ends, with the future.
    let (images, refs) = match image_files(&id, &input.images) {
        Ok(written) => written,
        Err(why) => return Box::pin(std::future::ready(Outcome::Failed(why))),
    };
    let line = HostLine::Task {
        task: &id,
        context_id: &input.context_id,
        text: &input.text,
        images: refs,
        forget_session: input.forget_session,
        origin: lines::origin(input.origin),
        trust: input.trust.as_deref(),
        traceparent: input.trace.as_ref().map(|t| t.traceparent.as_str()),
        tracestate: input.trace.as_ref().and_then(|t| t.tracestate.as_deref()),
    }
    .to_bytes();
    let (wants, wanted) = mpsc::unbounded_channel();
    let shared = shared.clone();
    let holding = Holding {
        shared: shared.clone(),
        id: id.clone(),
    };
    // Handed over now, or the line kept until a process has started.
    let now = match shared.try_hold(&id, &task, &wants) {
        Ok(Hold::Given(outbox)) => Ok(shared.hand_over(&id, outbox, line)),
        Ok(Hold::After(_)) => Err(line),
        Err(why) => Ok(Err(why)),
    };
    Box::pin(async move {
        let handed = match now {
            Ok(handed) => handed,
            Err(line) => match shared.hold(&id, &task, &wants).await {
                Ok(outbox) => shared.hand_over(&id, outbox, line),
                Err(why) => Err(why),
            },
        };
        match handed {
            Ok(outbox) => serve(id, outbox, wanted, images, holding).await,
            Err(why) => Outcome::Failed(why),
        }
    })
}

/// What task `id` waits for on the agent's behalf, until the task ends and
/// the future is dropped (with `holding`, letting go of the task, and the
/// task's `images`).
async fn serve(
    id: String,
    outbox: Outbox,
    mut wanted: mpsc::UnboundedReceiver<Want>,
    images: ImageFiles,
    holding: Holding,
) -> Outcome {
    let _kept = (images, holding);
    let mut waiting: JoinSet<Ready> = JoinSet::new();
    loop {
        tokio::select! {
            Some(want) = wanted.recv() => match want {
                Want::Reply(reply) => {
                    waiting.spawn(async move { Ready::Reply(reply.await) });
                }
                Want::Completion(delegation, awaited) => {
                    waiting.spawn(async move {
                        Ready::Completion(delegation, awaited.completion().await)
                    });
                }
            },
            Some(Ok(ready)) = waiting.join_next(), if !waiting.is_empty() => {
                let line = match ready {
                    // A reply carries no images ("Images go on the message
                    // that starts a task"): the line's list is empty.
                    Ready::Reply(text) => HostLine::Input {
                        task: &id,
                        text: &text,
                        images: Vec::new(),
                    }
                    .to_bytes(),
                    Ready::Completion(delegation, text) => HostLine::Completion {
                        task: &id,
                        delegation: &delegation,
                        text: &text,
                    }
                    .to_bytes(),
                };
                if let Err(why) = outbox.send(line) {
                    return Outcome::Failed(why);
                }
            }
            // Ended (its ending is being recorded), or the session closed
            // with the task held: it keeps its state.
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests;
