//! Delegations: a task records the sub-capsules it delegates to (a cancel
//! lists each one still open as residue), declares the completions it
//! awaits, and the door hands each one to the task that awaits it (murmur's
//! completion delivery). A delegation takes one completion, held for its
//! task when no handle waits; it is let go when its task ends.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;

use tokio::sync::oneshot;

use super::ids;
use crate::bindings::session::{Delegation as Delegated, ResidueItem};

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

/// The delegations of the live tasks: the sub-capsules each delegated to,
/// still open, and the completions they await.
#[derive(Default)]
pub(super) struct Delegations {
    /// Delegations a live task waits for, by delegation id.
    awaited: HashMap<String, Awaited>,
    /// The sub-capsules each live task delegated to, still open, by task id.
    open: HashMap<String, Vec<Delegated>>,
}

/// A delegation a live task awaits. It takes one completion: handed to the
/// waiting handle, or kept until the task asks for it again.
struct Awaited {
    task_id: String,
    waiter: Option<oneshot::Sender<String>>,
    /// A completion that arrived while no handle waited.
    arrived: Option<String>,
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

/// `child` as a delegation records it, its id not yet minted: refused
/// unless its workdir is absolute and UTF-8.
pub(super) fn checked(child: Child) -> io::Result<Delegated> {
    if !child.workdir.is_absolute() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a child's workdir is an absolute path",
        ));
    }
    let child_workdir = child
        .workdir
        .into_os_string()
        .into_string()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a workdir not in UTF-8"))?;
    Ok(Delegated {
        delegation_id: String::new(),
        capsule: child.capsule,
        version: child.version,
        child_session_id: child.session_id,
        child_workdir,
    })
}

impl Delegations {
    /// Whether a live task awaits `delegation_id` and has no completion for
    /// it yet.
    pub(super) fn awaits(&self, delegation_id: &str) -> bool {
        self.awaited
            .get(delegation_id)
            .is_some_and(|a| a.arrived.is_none())
    }

    /// Hands a completion's message to the task awaiting `delegation_id`,
    /// or keeps it for the task when no handle waits; answers that task's
    /// id. A delegation takes one completion: `None` when none is awaited.
    pub(super) fn deliver(&mut self, delegation_id: &str, message: String) -> Option<String> {
        let awaited = self
            .awaited
            .get_mut(delegation_id)
            .filter(|a| a.arrived.is_none())?;
        let task_id = awaited.task_id.clone();
        let unsent = match awaited.waiter.take() {
            Some(waiter) => waiter.send(message).err(),
            None => Some(message),
        };
        match unsent {
            // Kept until the task asks for it again.
            Some(message) => awaited.arrived = Some(message),
            None => {
                self.awaited.remove(delegation_id);
            }
        }
        Some(task_id)
    }

    /// Records that live task `task_id` delegated to `child` (from
    /// [`checked`]); answers the delegation's id.
    pub(super) fn open(&mut self, task_id: &str, mut child: Delegated) -> String {
        let delegation_id = ids::delegation_id();
        child.delegation_id = delegation_id.clone();
        self.open
            .entry(task_id.to_string())
            .or_default()
            .push(child);
        delegation_id
    }

    /// Task `task_id`'s delegation `delegation_id` has ended.
    pub(super) fn ended(&mut self, task_id: &str, delegation_id: &str) {
        if let Some(open) = self.open.get_mut(task_id) {
            open.retain(|d| d.delegation_id != delegation_id);
        }
    }

    /// The delegations task `task_id` has open, as residue items: a cancel
    /// ends them.
    pub(super) fn residue(&self, task_id: &str) -> Vec<ResidueItem> {
        self.open.get(task_id).map_or_else(Vec::new, |open| {
            open.iter().cloned().map(ResidueItem::Delegation).collect()
        })
    }

    /// Registers that live task `task_id` awaits `delegation_id`.
    pub(super) fn expect(
        &mut self,
        task_id: &str,
        delegation_id: String,
    ) -> oneshot::Receiver<String> {
        let (waiter, receiver) = oneshot::channel();
        let awaited = self
            .awaited
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
                self.awaited.remove(&delegation_id);
            }
            None => awaited.waiter = Some(waiter),
        }
        receiver
    }

    /// Task `task_id` has ended: its delegations and what it awaited are
    /// let go.
    pub(super) fn forget(&mut self, task_id: &str) {
        self.open.remove(task_id);
        self.awaited.retain(|_, a| a.task_id != task_id);
    }
}
