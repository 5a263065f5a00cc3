//! What every part of the session's tasks speaks of: who asks, the time,
//! and which states a task can still leave or a held SendMessage answers.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::bindings::task_store::TaskState;
use crate::bindings::tokens::Credential;

/// Who is asking: `None` is a caller of a public door.
pub type Caller = Option<Credential>;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Whether a state is one a task can still leave.
pub fn is_live(state: TaskState) -> bool {
    matches!(
        state,
        TaskState::Submitted | TaskState::Working | TaskState::InputRequired
    )
}

/// Whether a held SendMessage answers a task in this state.
pub fn is_settled(state: TaskState) -> bool {
    !matches!(state, TaskState::Submitted | TaskState::Working)
}
