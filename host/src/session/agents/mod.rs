//! Agents: what runs a task. The Murmur runtime implements [`Agent`] with its
//! own model loop; the host embeds three for running a door standalone and
//! for tests: [`ScriptAgent`] (`--agent script`), [`CommandAgent`]
//! (`--agent-cmd`, a process a task) and [`StdioAgent`] (`--agent-stdio`,
//! a process a session speaking JSON lines).
//!
//! An agent is handed one task at a time through [`Agent::run`] and answers
//! with a future. While it runs, the [`RunningTask`] it was given is its line
//! to the session: progress, frames, questions, detached commands,
//! delegations. The future's output ends the task. Dropping the future
//! cancels the task (CancelTask, murmur.StopSession): an agent must let
//! nothing it started outlive its future, except what it detached through
//! the session.

pub mod command;
mod images;
pub mod script;
pub mod stdio;

use std::path::Path;
use std::sync::Arc;

pub use crate::session::tasks::agent::{Agent, AgentFaults, AgentFuture, Outcome, TaskInput};
pub use crate::session::tasks::events::FrameKind;
pub use crate::session::tasks::{Child, Delegation, Image, MemberStatus, Origin, RunningTask};
pub use command::CommandAgent;
pub use script::ScriptAgent;
pub use stdio::StdioAgent;

/// What runs a door's tasks: one agent every session shares, or a program
/// of its own started for each session.
#[derive(Clone)]
pub enum Agents {
    /// The same agent for every session (the script agent, `--agent-cmd`,
    /// a library agent).
    Shared(Arc<dyn Agent>),
    /// `--agent-stdio`: a process a session.
    Stdio(StdioAgent),
}

impl Agents {
    /// The agent of a new session of capsule `capsule`, working in
    /// `workdir`; `process_transport` is its `inference.transport: process`.
    pub fn for_session(
        &self,
        capsule: &str,
        workdir: &Path,
        process_transport: bool,
    ) -> Arc<dyn Agent> {
        match self {
            Agents::Shared(agent) => agent.clone(),
            Agents::Stdio(stdio) => Arc::new(stdio.open(capsule, workdir, process_transport)),
        }
    }
}

impl From<Arc<dyn Agent>> for Agents {
    fn from(agent: Arc<dyn Agent>) -> Agents {
        Agents::Shared(agent)
    }
}

impl From<StdioAgent> for Agents {
    fn from(agent: StdioAgent) -> Agents {
        Agents::Stdio(agent)
    }
}
