//! Delegations: a task records the sub-capsules it delegates to (a cancel
//! lists each one still open as residue), declares the completions it
//! awaits, and the door hands each one to the task that awaits it (murmur's
//! completion delivery). A delegation takes one completion, held for its
//! task when no handle waits; it is let go when its task ends.

use std::io;
use std::path::PathBuf;

use tokio::sync::oneshot;

use super::{CompletionRefusal, Hub, ids};
use crate::bindings::session::Delegation as Delegated;

/// The sub-capsule a task delegates to ("Residue items": `delegation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    /// The capsule's name, as its manifest gives it.
    pub capsule: String,
    /// The capsule's version, as its manifest gives it.
    pub version: String,
    /// The child's session, `ses_…`.
    pub session_id: String,
    /// The child's work folder, absolute.
    pub workdir: PathBuf,
}

/// A delegation a live task awaits. It takes one completion: handed to the
/// waiting handle, or kept until the task asks for it again.
pub(super) struct Awaited {
    pub(super) task_id: String,
    pub(super) waiter: Option<oneshot::Sender<String>>,
    /// A completion that arrived while no handle waited.
    pub(super) arrived: Option<String>,
}

/// A completion a task awaits; see
/// [`RunningTask::expect_delegation`](super::RunningTask::expect_delegation).
pub struct Delegation(pub(super) oneshot::Receiver<String>);

impl Delegation {
    /// The completion's A2A message, as the child sent it (JSON). Never
    /// resolves when the task ends first.
    pub async fn completion(self) -> String {
        match self.0.await {
            Ok(message) => message,
            Err(_) => std::future::pending().await,
        }
    }
}

impl Hub {
    /// Whether a live task awaits `delegation_id`.
    pub fn awaits_delegation(&self, delegation_id: &str) -> Result<(), CompletionRefusal> {
        if self.closing() {
            return Err(CompletionRefusal::Ending);
        }
        let live = self.lock();
        if live
            .delegations
            .get(delegation_id)
            .is_some_and(|a| a.arrived.is_none())
        {
            Ok(())
        } else {
            Err(CompletionRefusal::NotAwaited)
        }
    }

    /// Hands a completion's message to the task awaiting `delegation_id`;
    /// answers that task's context. A delegation takes one completion.
    pub fn deliver_completion(
        &self,
        delegation_id: &str,
        message: String,
    ) -> Result<String, CompletionRefusal> {
        if self.closing() {
            return Err(CompletionRefusal::Ending);
        }
        let mut live = self.lock();
        let awaited = live
            .delegations
            .get_mut(delegation_id)
            .filter(|a| a.arrived.is_none())
            .ok_or(CompletionRefusal::NotAwaited)?;
        let task_id = awaited.task_id.clone();
        let unsent = match awaited.waiter.take() {
            Some(waiter) => waiter.send(message).err(),
            None => Some(message),
        };
        match unsent {
            // Kept until the task asks for it again.
            Some(message) => awaited.arrived = Some(message),
            None => {
                live.delegations.remove(delegation_id);
            }
        }
        live.tasks
            .get(&task_id)
            .map(|t| t.context_id.clone())
            .ok_or(CompletionRefusal::NotAwaited)
    }

    /// Records that live task `task_id` delegated to `child`
    /// ([`RunningTask::delegate`](super::RunningTask::delegate)).
    pub(super) fn delegated(&self, task_id: &str, child: Child) -> io::Result<String> {
        if !child.workdir.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a child's workdir is an absolute path",
            ));
        }
        let child_workdir =
            child.workdir.into_os_string().into_string().map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "a workdir not in UTF-8")
            })?;
        let mut live = self.lock();
        let running = live
            .tasks
            .get_mut(task_id)
            .ok_or_else(|| io::Error::other("the task has ended"))?;
        let delegation_id = ids::delegation_id();
        running.delegated.push(Delegated {
            delegation_id: delegation_id.clone(),
            capsule: child.capsule,
            version: child.version,
            child_session_id: child.session_id,
            child_workdir,
        });
        Ok(delegation_id)
    }

    /// Task `task_id`'s delegation `delegation_id` has ended.
    pub(super) fn delegation_ended(&self, task_id: &str, delegation_id: &str) {
        if let Some(running) = self.lock().tasks.get_mut(task_id) {
            running
                .delegated
                .retain(|d| d.delegation_id != delegation_id);
        }
    }

    /// Registers that `task_id` awaits `delegation_id`
    /// ([`RunningTask::expect_delegation`](super::RunningTask::expect_delegation)).
    pub(super) fn expect(&self, task_id: &str, delegation_id: String) -> oneshot::Receiver<String> {
        let (waiter, receiver) = oneshot::channel();
        let mut live = self.lock();
        if !live.tasks.contains_key(task_id) {
            return receiver;
        }
        let awaited = live
            .delegations
            .entry(delegation_id.clone())
            .or_insert_with(|| Awaited {
                task_id: task_id.to_string(),
                waiter: None,
                arrived: None,
            });
        if awaited.task_id != task_id {
            // Another task's delegation: this one takes it over.
            awaited.task_id = task_id.to_string();
            awaited.arrived = None;
        }
        match awaited.arrived.take() {
            Some(message) => {
                let _ = waiter.send(message);
                live.delegations.remove(&delegation_id);
            }
            None => awaited.waiter = Some(waiter),
        }
        receiver
    }
}
