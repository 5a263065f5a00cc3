//! What the door asks the host: the `session`, `tokens`, `task-store` and `events`
//! imports as a trait, so the same rules run in the component and natively
//! under test. [`model`] holds the facts they answer as plain Rust types, and
//! [`tree`] the workdir the host preopens for a plane's request.

pub mod model;
pub mod tree;

use crate::imports::model::{
    Caller, Capsule, CompletionRefusal, Exports, Framed, Grant, Identity, ListQuery, NewTask, Next,
    Page, PassOn, Redeemed, Started, StopReport, Task, TaskError,
};
use crate::imports::tree::{Dir, Preopened};

pub trait Imports {
    /// `session.describe`: the facts the rules read on every request.
    fn capsule(&self) -> Capsule;
    /// `session.identify`: the capsule's names, for the card and the few
    /// answers that name them.
    fn identity(&self) -> Identity;
    /// `session.exports`: what the planes export.
    fn exports(&self) -> Exports;
    /// A directory the host preopened (`wasi:filesystem`).
    type Dir: Dir;
    /// The directories the host preopened for this request: a plane's
    /// exports on a request on a plane, none on any other.
    fn preopens(&self) -> Preopened<Self::Dir>;
    /// `tokens.verify`: what a presented token grants, if this session minted it.
    fn verify(&self, token: &str) -> Option<Grant>;
    /// `tokens.redeem-handle`: the file a peer handle grants `audience`,
    /// one use counted.
    fn redeem(&self, handle: &str, audience: &str) -> Option<Redeemed>;
    /// `session.stop`: murmur.StopSession; an error says why the store
    /// could not record every cancel.
    fn stop(&self) -> Result<StopReport, String>;
    /// `session.awaits-delegation`: whether a task waits for this delegation.
    fn awaits_delegation(&self, delegation_id: &str) -> Result<(), CompletionRefusal>;
    /// `session.deliver-completion`: the waiting task's context id.
    fn deliver_completion(
        &self,
        delegation_id: &str,
        message: &str,
    ) -> Result<String, CompletionRefusal>;

    /// `task-store.start`.
    fn start(&self, task: NewTask) -> Result<Started, TaskError>;
    /// `task-store.reply`.
    fn reply(
        &self,
        caller: &Caller,
        task_id: &str,
        context_id: Option<&str>,
        text: &str,
    ) -> Result<Task, TaskError>;
    /// `task-store.get`.
    fn get(&self, caller: &Caller, task_id: &str) -> Result<Task, TaskError>;
    /// `task-store.cancel`.
    fn cancel(&self, caller: &Caller, task_id: &str) -> Result<Task, TaskError>;
    /// `task-store.list`.
    fn list(&self, caller: &Caller, query: &ListQuery) -> Result<Page, TaskError>;
    /// Blocks until the task settles or the door closes (`task-store.settled`,
    /// then the pollable's `block`).
    fn wait_settled(&self, caller: &Caller, task_id: &str) -> Result<(), TaskError>;

    /// A reader of the event log (`events.events`).
    type Reader;
    /// `events.latest`: the newest event id.
    fn latest_event(&self) -> u64;
    /// `events.task-events`.
    fn task_events(
        &self,
        caller: &Caller,
        task_id: &str,
        after: Option<u64>,
    ) -> Result<Self::Reader, TaskError>;
    /// `events.session-events`.
    fn session_events(&self, after: Option<u64>) -> Self::Reader;
    /// The reader's next delivery, waiting at most `wait_ms` for one; the
    /// host may write what `pass` leaves it before (`events.pass-on`).
    fn next_event(&self, reader: &Self::Reader, wait_ms: u64, pass: &PassOn) -> Next;
    /// `events.keep-framed`: the SSE event the door wrote for the event the
    /// reader last delivered, for the other streams to pass on.
    fn keep_framed(&self, reader: &Self::Reader, framed: &Framed);
    /// A fresh `msg_` id: 32 lowercase hex digits, time-ordered.
    fn new_message_id(&self) -> String;
}
