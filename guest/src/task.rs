//! A task as A2A v1.0 ProtoJSON ("GetTask", "Task metadata", "Answers"): the
//! keys each state carries, the status message, artifacts and metadata.

use serde_json::{Map, Value, json};

use crate::model::{ResidueItem, Task, TaskMetadata, TaskState};
use crate::timestamp;

/// Which artifacts a rendering carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Artifacts {
    /// GetTask and every task answer: the task's artifacts, key absent when
    /// it has none.
    AsHeld,
    /// ListTasks without includeArtifacts.
    Omitted,
    /// ListTasks with includeArtifacts: `artifacts` always, `[]` when none.
    Always,
}

/// The task as GetTask answers it.
pub fn task(task: &Task, artifacts: Artifacts) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), json!(task.id));
    out.insert("contextId".into(), json!(task.context_id));
    out.insert("status".into(), status(task));
    let held = artifact_list(task);
    match artifacts {
        Artifacts::AsHeld if !held.is_empty() => {
            out.insert("artifacts".into(), Value::Array(held));
        }
        Artifacts::Always => {
            out.insert("artifacts".into(), Value::Array(held));
        }
        _ => {}
    }
    if let Some(murmur) = metadata(&task.metadata).filter(|_| task.status.state.terminal()) {
        out.insert("metadata".into(), json!({"murmur": murmur}));
    }
    Value::Object(out)
}

/// `status`: the state, the final status message of a terminal task that said
/// something, and the timestamp of the task's last change.
fn status(task: &Task) -> Value {
    let mut status = Map::new();
    status.insert("state".into(), json!(task.status.state.wire()));
    if let Some(text) = task
        .status
        .message
        .as_ref()
        .filter(|_| task.status.state.terminal())
    {
        status.insert("message".into(), status_message(task, text));
    }
    status.insert(
        "timestamp".into(),
        json!(timestamp::format_ms(task.status.timestamp_ms)),
    );
    Value::Object(status)
}

/// A task's status message: ROLE_AGENT, one text part, named after the task.
pub fn status_message(task: &Task, text: &str) -> Value {
    json!({
        "messageId": format!("msg_{}_status", task.id),
        "contextId": task.context_id,
        "taskId": task.id,
        "role": "ROLE_AGENT",
        "parts": [text_part(text)],
    })
}

/// Every text part the door writes has mediaType text/plain. An owned text
/// is moved in, not copied.
pub fn text_part(text: impl Into<String>) -> Value {
    let mut part = Map::new();
    part.insert("text".into(), Value::String(text.into()));
    part.insert("mediaType".into(), json!("text/plain"));
    Value::Object(part)
}

/// response on a completed task, prompt on a waiting one, residue when the
/// session still ran something at its cancel; each at most once, named by id.
fn artifact_list(task: &Task) -> Vec<Value> {
    let mut artifacts = Vec::new();
    if let (TaskState::Completed, Some(response)) = (task.status.state, &task.response) {
        artifacts.push(text_artifact("response", response));
    }
    if let (TaskState::InputRequired, Some(prompt)) = (task.status.state, &task.prompt) {
        artifacts.push(text_artifact("prompt", prompt));
    }
    if !task.residue.is_empty() {
        artifacts.push(residue_artifact(&task.residue));
    }
    artifacts
}

/// An artifact of one text part; its id is its name.
pub fn text_artifact(id: &str, text: impl Into<String>) -> Value {
    let mut artifact = Map::new();
    artifact.insert("artifactId".into(), json!(id));
    artifact.insert("name".into(), json!(id));
    artifact.insert("parts".into(), Value::Array(vec![text_part(text)]));
    Value::Object(artifact)
}

/// The residue artifact: one data part per item.
pub fn residue_artifact(residue: &[ResidueItem]) -> Value {
    let parts: Vec<Value> = residue
        .iter()
        .map(|item| json!({"data": residue_data(item), "mediaType": "application/json"}))
        .collect();
    json!({"artifactId": "residue", "name": "residue", "parts": parts})
}

/// A residue item as a cancel's residue artifact carries it ("GetTask").
pub fn residue_data(item: &ResidueItem) -> Value {
    match item {
        ResidueItem::DetachedShell {
            work_id,
            binary,
            command,
            started_at_ms,
        } => json!({
            "kind": "detached_shell", "work_id": work_id, "binary": binary,
            "command": command, "started_at_ms": started_at_ms,
        }),
        ResidueItem::Delegation {
            delegation_id,
            capsule,
            version,
            child_session_id,
            child_workdir,
        } => json!({
            "kind": "delegation", "delegation_id": delegation_id, "capsule": capsule, "version": version,
            "child_session_id": child_session_id, "child_workdir": child_workdir,
        }),
    }
}

/// `metadata.murmur` ("Task metadata"), None when it has nothing to say.
fn metadata(metadata: &TaskMetadata) -> Option<Value> {
    let mut murmur = Map::new();
    if metadata.no_answer {
        murmur.insert("noAnswer".into(), json!(true));
    }
    if !metadata.no_answer_below.is_empty() {
        let below: Vec<Value> = metadata
            .no_answer_below
            .iter()
            .take(8)
            .map(|m| json!({"member": m.member, "status": m.status}))
            .collect();
        murmur.insert("noAnswerBelow".into(), Value::Array(below));
    }
    if !metadata.running_commands.is_empty() {
        let commands: Vec<Value> = metadata
            .running_commands
            .iter()
            .map(|c| json!({"workId": c.work_id, "binary": c.binary, "command": c.command, "runningMs": c.running_ms}))
            .collect();
        murmur.insert("runningCommands".into(), Value::Array(commands));
    }
    (!murmur.is_empty()).then_some(Value::Object(murmur))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RunningCommand, Status};

    fn sample(state: TaskState) -> Task {
        Task {
            id: "tsk_1".into(),
            context_id: "ctx_1".into(),
            status: Status {
                state,
                message: None,
                timestamp_ms: 1_760_346_000_123,
            },
            response: None,
            prompt: None,
            residue: vec![],
            metadata: TaskMetadata::default(),
            change: 1,
        }
    }

    fn text(value: &Value) -> String {
        serde_json::to_string(value).unwrap()
    }

    // "GetTask": the completed example, key for key.
    #[test]
    fn completed_task() {
        let mut t = sample(TaskState::Completed);
        t.status.message = Some("task completed".into());
        t.response = Some("four".into());
        assert_eq!(
            text(&task(&t, Artifacts::AsHeld)),
            r#"{"id":"tsk_1","contextId":"ctx_1","status":{"state":"TASK_STATE_COMPLETED","message":{"messageId":"msg_tsk_1_status","contextId":"ctx_1","taskId":"tsk_1","role":"ROLE_AGENT","parts":[{"text":"task completed","mediaType":"text/plain"}]},"timestamp":"2025-10-13T09:00:00.123Z"},"artifacts":[{"artifactId":"response","name":"response","parts":[{"text":"four","mediaType":"text/plain"}]}]}"#
        );
    }

    // "GetTask": a waiting task carries its prompt and no status message.
    #[test]
    fn waiting_task() {
        let mut t = sample(TaskState::InputRequired);
        t.prompt = Some("Which branch?".into());
        t.status.message = Some("Which branch?".into());
        assert_eq!(
            text(&task(&t, Artifacts::AsHeld)),
            r#"{"id":"tsk_1","contextId":"ctx_1","status":{"state":"TASK_STATE_INPUT_REQUIRED","timestamp":"2025-10-13T09:00:00.123Z"},"artifacts":[{"artifactId":"prompt","name":"prompt","parts":[{"text":"Which branch?","mediaType":"text/plain"}]}]}"#
        );
    }

    // "GetTask": the cancelled example with its residue artifact.
    #[test]
    fn canceled_task_with_residue() {
        let mut t = sample(TaskState::Canceled);
        t.residue = vec![ResidueItem::DetachedShell {
            work_id: "wrk_1".into(),
            binary: "sleep".into(),
            command: "sleep 30".into(),
            started_at_ms: 1_760_000_000_000,
        }];
        assert_eq!(
            text(&task(&t, Artifacts::AsHeld)),
            r#"{"id":"tsk_1","contextId":"ctx_1","status":{"state":"TASK_STATE_CANCELED","timestamp":"2025-10-13T09:00:00.123Z"},"artifacts":[{"artifactId":"residue","name":"residue","parts":[{"data":{"kind":"detached_shell","work_id":"wrk_1","binary":"sleep","command":"sleep 30","started_at_ms":1760000000000},"mediaType":"application/json"}]}]}"#
        );
        assert_eq!(task(&t, Artifacts::Omitted).get("artifacts"), None);
    }

    // "Task metadata": runningCommands on a terminal task; absent when empty.
    #[test]
    fn running_commands() {
        let mut t = sample(TaskState::Completed);
        assert_eq!(task(&t, Artifacts::AsHeld).get("metadata"), None);
        t.metadata.running_commands = vec![RunningCommand {
            work_id: "wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2".into(),
            binary: "/usr/bin/bash".into(),
            command: "cargo test --workspace".into(),
            running_ms: 312_004,
        }];
        assert_eq!(
            text(&task(&t, Artifacts::AsHeld)["metadata"]),
            r#"{"murmur":{"runningCommands":[{"workId":"wrk_0199a3f1c2d47e8ab5c6d7e8f9a0b1c2","binary":"/usr/bin/bash","command":"cargo test --workspace","runningMs":312004}]}}"#
        );
        // ListTasks with includeArtifacts: [] when there are none.
        assert_eq!(task(&t, Artifacts::Always)["artifacts"], json!([]));
    }
}
