//! Rows and columns to the generated types and back: a task read from its
//! row, murmur's words for states and origins, and the JSON the residue and
//! running-commands columns hold.

use rusqlite::Row;
use serde_json::{Value, json};

use crate::bindings::session::{Delegation, DetachedShell, ResidueItem};
use crate::bindings::task_store::{
    MemberStatus, Origin, RunningCommand, Status, Task, TaskMetadata, TaskState,
};

/// The columns [`task_from_row`] reads, in its order.
pub(super) const TASK_COLUMNS: &str = "id, context_id, state, status_message, status_ms, response, prompt, \
     residue, running_commands, change, no_answer, no_answer_below";

pub(super) fn task_from_row(row: &Row<'_>) -> rusqlite::Result<Task> {
    let state: String = row.get(2)?;
    let residue: String = row.get(7)?;
    let running: String = row.get(8)?;
    let change: i64 = row.get(9)?;
    let below: String = row.get(11)?;
    Ok(Task {
        id: row.get(0)?,
        context_id: row.get(1)?,
        status: Status {
            state: parse_state(&state).ok_or_else(|| corrupt(2, format!("state {state}")))?,
            message: row.get(3)?,
            timestamp_ms: row.get(4)?,
        },
        response: row.get(5)?,
        prompt: row.get(6)?,
        residue: parse_residue(&residue).ok_or_else(|| corrupt(7, residue.clone()))?,
        metadata: TaskMetadata {
            no_answer: row.get(10)?,
            no_answer_below: parse_below(&below).ok_or_else(|| corrupt(11, below.clone()))?,
            running_commands: parse_running(&running).ok_or_else(|| corrupt(8, running.clone()))?,
        },
        change: change as u64,
    })
}

fn corrupt(column: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        column,
        rusqlite::types::Type::Text,
        format!("unreadable value in the task record: {what}").into(),
    )
}

/// Murmur's word for a state, as the store and the trace spell it.
pub fn state_word(state: TaskState) -> &'static str {
    match state {
        TaskState::Submitted => "submitted",
        TaskState::Working => "working",
        TaskState::InputRequired => "input-required",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Rejected => "rejected",
        TaskState::Canceled => "canceled",
    }
}

fn parse_state(word: &str) -> Option<TaskState> {
    Some(match word {
        "submitted" => TaskState::Submitted,
        "working" => TaskState::Working,
        "input-required" => TaskState::InputRequired,
        "completed" => TaskState::Completed,
        "failed" => TaskState::Failed,
        "rejected" => TaskState::Rejected,
        "canceled" => TaskState::Canceled,
        _ => return None,
    })
}

pub(super) fn origin_word(origin: Origin) -> &'static str {
    match origin {
        Origin::Client => "client",
        Origin::Peer => "peer",
        Origin::Session => "session",
    }
}

/// Residue items as the reference spells them (`kind`, snake_case keys).
pub(super) fn residue_json(items: &[ResidueItem]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|item| match item {
                ResidueItem::DetachedShell(d) => json!({
                    "kind": "detached_shell",
                    "work_id": d.work_id,
                    "binary": d.binary,
                    "command": d.command,
                    "started_at_ms": d.started_at_ms,
                }),
                ResidueItem::Delegation(d) => json!({
                    "kind": "delegation",
                    "delegation_id": d.delegation_id,
                    "capsule": d.capsule,
                    "version": d.version,
                    "child_session_id": d.child_session_id,
                    "child_workdir": d.child_workdir,
                }),
            })
            .collect(),
    )
}

fn parse_residue(text: &str) -> Option<Vec<ResidueItem>> {
    let items: Vec<Value> = serde_json::from_str(text).ok()?;
    let s = |v: &Value, key: &str| v.get(key)?.as_str().map(str::to_string);
    items
        .iter()
        .map(|v| match v.get("kind")?.as_str()? {
            "detached_shell" => Some(ResidueItem::DetachedShell(DetachedShell {
                work_id: s(v, "work_id")?,
                binary: s(v, "binary")?,
                command: s(v, "command")?,
                started_at_ms: v.get("started_at_ms")?.as_u64()?,
            })),
            "delegation" => Some(ResidueItem::Delegation(Delegation {
                delegation_id: s(v, "delegation_id")?,
                capsule: s(v, "capsule")?,
                version: s(v, "version")?,
                child_session_id: s(v, "child_session_id")?,
                child_workdir: s(v, "child_workdir")?,
            })),
            _ => None,
        })
        .collect()
}

pub(super) fn running_json(commands: &[RunningCommand]) -> Value {
    Value::Array(
        commands
            .iter()
            .map(|c| {
                json!({
                    "workId": c.work_id,
                    "binary": c.binary,
                    "command": c.command,
                    "runningMs": c.running_ms,
                })
            })
            .collect(),
    )
}

fn parse_running(text: &str) -> Option<Vec<RunningCommand>> {
    let items: Vec<Value> = serde_json::from_str(text).ok()?;
    items
        .iter()
        .map(|v| {
            Some(RunningCommand {
                work_id: v.get("workId")?.as_str()?.to_string(),
                binary: v.get("binary")?.as_str()?.to_string(),
                command: v.get("command")?.as_str()?.to_string(),
                running_ms: v.get("runningMs")?.as_u64()?,
            })
        })
        .collect()
}

/// `noAnswerBelow` as the store keeps it: `[{member, status}]`.
pub(super) fn below_json(below: &[MemberStatus]) -> Value {
    Value::Array(
        below
            .iter()
            .map(|b| json!({"member": b.member, "status": b.status}))
            .collect(),
    )
}

fn parse_below(text: &str) -> Option<Vec<MemberStatus>> {
    let items: Vec<Value> = serde_json::from_str(text).ok()?;
    items
        .iter()
        .map(|v| {
            Some(MemberStatus {
                member: v.get("member")?.as_str()?.to_string(),
                status: v.get("status")?.as_str()?.to_string(),
            })
        })
        .collect()
}
