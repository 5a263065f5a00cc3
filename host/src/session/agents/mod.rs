//! Agents: what runs a task. The Murmur runtime implements [`Agent`] with its
//! own model loop; the host embeds two for running a door standalone and for
//! tests: [`ScriptAgent`] (`--agent script`) and [`CommandAgent`]
//! (`--agent-cmd`).
//!
//! An agent is handed one task at a time through [`Agent::run`] and answers
//! with a future. While it runs, the [`RunningTask`] it was given is its line
//! to the session: progress, frames, questions, detached commands,
//! delegations. The future's output ends the task. Dropping the future
//! cancels the task (CancelTask, murmur.StopSession): an agent must let
//! nothing it started outlive its future, except what it detached through
//! the session.

pub mod command;
pub mod script;

pub use crate::session::tasks::agent::{Agent, AgentFuture, Outcome, TaskInput};
pub use crate::session::tasks::events::FrameKind;
pub use crate::session::tasks::{Child, Delegation, Image, MemberStatus, Origin, RunningTask};
pub use command::CommandAgent;
pub use script::ScriptAgent;
