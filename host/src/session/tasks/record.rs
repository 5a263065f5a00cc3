//! What a change of the record announces: the events each transition
//! writes, and the error a failed write answers.

use super::events::{self, EventBody};
use super::ids;
use super::store::{NewRecord, Transition};
use crate::bindings::task_store::TaskError;

/// The events a transition writes: the artifact it writes first (`response`,
/// `prompt`, or `residue` when the cancel left something running), then its
/// status. A question is the status message of its `input-required`, with a
/// message id of its own; a terminal status carries its message, if any.
fn transition_events(to: &Transition, now: i64) -> Vec<EventBody> {
    let mut bodies = Vec::new();
    let mut message = to.message.clone();
    let mut message_id = None;
    if let Some(response) = &to.response {
        bodies.push(events::text_artifact("response", response.clone()));
    }
    if let Some(prompt) = &to.prompt {
        bodies.push(events::text_artifact("prompt", prompt.clone()));
        message = Some(prompt.clone());
        message_id = Some(ids::message_id());
    }
    if !to.residue.is_empty() {
        bodies.push(events::residue_artifact(to.residue.clone()));
    }
    bodies.push(events::status(to.state, message, message_id, now));
    bodies
}

/// The event of a task's submission (or refusal), as `record` first
/// recorded it.
pub(super) fn submitted_event(record: &NewRecord) -> EventBody {
    events::status(
        record.state,
        record.status_message.clone(),
        None,
        record.created_ms,
    )
}

/// The events of passing through `steps` in order.
pub(super) fn steps_events(steps: &[&Transition], now: i64) -> Vec<EventBody> {
    steps
        .iter()
        .flat_map(|step| transition_events(step, now))
        .collect()
}

/// What a caller is answered when the store fails.
pub(super) fn unavailable(e: rusqlite::Error) -> TaskError {
    tracing::error!(error = %e, "the task store failed");
    TaskError::Unavailable(format!("the task store failed: {e}"))
}

/// What a start is answered when its batch could not answer it.
pub(super) fn unavailable_now(why: &str) -> TaskError {
    TaskError::Unavailable(format!("the task store failed: {why}"))
}
