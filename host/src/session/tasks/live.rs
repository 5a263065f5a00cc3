//! What is live in the session, guarded by the hub's one lock: the live
//! tasks, the queue, the delegations, the detached commands and the held
//! tasks not written yet, which a task's start, ending and cancel change
//! together.

use super::agent::TaskInput;
use super::capacity::Queue;
use super::delegations::Delegations;
use super::detached::DetachedCommands;
use super::lifecycle::Tasks;
use super::unwritten::Unwritten;
use crate::bindings::task_store::{Task, TaskMetadata, TaskState};

/// What is live, guarded by one mutex.
#[derive(Default)]
pub(super) struct Live {
    /// Every live task (submitted, working, input-required).
    pub(super) tasks: Tasks,
    /// `queue`: tasks waiting for the capsule.
    pub(super) queue: Queue,
    /// The delegations of the live tasks.
    pub(super) delegations: Delegations,
    /// Every detached command of the session.
    pub(super) detached: DetachedCommands,
    /// The held tasks not written yet.
    pub(super) unwritten: Unwritten,
}

impl Live {
    /// What task `id`'s metadata says if it ends at `now`: the commands it
    /// detached that still run, and the members that gave it no answer.
    pub(super) fn metadata(&self, id: &str, now: i64) -> TaskMetadata {
        TaskMetadata {
            no_answer: false,
            no_answer_below: self.tasks.no_answer_below(id),
            running_commands: self.detached.running_commands(id, now),
        }
    }

    /// `queue`: the next waiting task, once nothing runs; marked started.
    pub(super) fn next_queued(&mut self) -> Option<TaskInput> {
        if self.tasks.any_started() {
            return None;
        }
        let (id, input) = self.queue.pop()?;
        self.tasks.start(&id);
        Some(input)
    }

    /// Task `id` has ended in `state` (written already, as `task`):
    /// everything live about it is let go.
    pub(super) fn ended(&mut self, id: &str, state: TaskState, task: Option<&Task>) {
        self.tasks.end(id, state, task);
        self.queue.remove(id);
        self.delegations.forget(id);
    }
}
