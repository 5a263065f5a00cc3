//! A task as A2A v1.0 ProtoJSON ("GetTask", "Task metadata", "Answers"): the
//! keys each state carries, the status message, artifacts and metadata.
//!
//! Each shape is a view that serializes straight to JSON, keys in the
//! reference's order: an answer is written once, with no JSON tree built
//! first.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::imports::model::{
    MemberStatus, ResidueItem, RunningCommand, Task, TaskMetadata, TaskState,
};
use crate::timestamp::Rfc3339Ms;

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

/// A task as GetTask (with [`Artifacts::AsHeld`]) or ListTasks renders it.
#[derive(Clone, Copy)]
pub struct TaskJson<'a> {
    pub task: &'a Task,
    pub artifacts: Artifacts,
}

impl<'a> TaskJson<'a> {
    /// The task as GetTask and every task answer render it.
    pub fn as_held(task: &'a Task) -> TaskJson<'a> {
        TaskJson {
            task,
            artifacts: Artifacts::AsHeld,
        }
    }
}

impl Serialize for TaskJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let task = self.task;
        let mut out = serializer.serialize_map(None)?;
        out.serialize_entry("id", &task.id)?;
        out.serialize_entry("contextId", &task.context_id)?;
        out.serialize_entry("status", &StatusJson(task))?;
        let held = HeldArtifacts(task);
        match self.artifacts {
            Artifacts::AsHeld if !held.is_empty() => out.serialize_entry("artifacts", &held)?,
            Artifacts::Always => out.serialize_entry("artifacts", &held)?,
            _ => {}
        }
        if task.status.state.terminal() && says_something(&task.metadata) {
            out.serialize_entry("metadata", &Keyed("murmur", Murmur(&task.metadata)))?;
        }
        out.end()
    }
}

/// `status`: the state, the final status message of a terminal task that said
/// something, and the timestamp of the task's last change.
struct StatusJson<'a>(&'a Task);

impl Serialize for StatusJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let task = self.0;
        let mut status = serializer.serialize_map(None)?;
        status.serialize_entry("state", task.status.state.wire())?;
        if let Some(text) = task
            .status
            .message
            .as_ref()
            .filter(|_| task.status.state.terminal())
        {
            status.serialize_entry("message", &StatusMessage { task, text })?;
        }
        status.serialize_entry("timestamp", &Rfc3339Ms(task.status.timestamp_ms))?;
        status.end()
    }
}

/// A task's status message: ROLE_AGENT, one text part, named after the task.
struct StatusMessage<'a> {
    task: &'a Task,
    text: &'a str,
}

impl Serialize for StatusMessage<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let task = self.task;
        let mut message = serializer.serialize_map(None)?;
        message.serialize_entry("messageId", &format_args!("msg_{}_status", task.id))?;
        message.serialize_entry("contextId", &task.context_id)?;
        message.serialize_entry("taskId", &task.id)?;
        message.serialize_entry("role", "ROLE_AGENT")?;
        message.serialize_entry("parts", &[TextPart(self.text)])?;
        message.end()
    }
}

/// Every text part the door writes has mediaType text/plain.
struct TextPart<'a>(&'a str);

impl Serialize for TextPart<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut part = serializer.serialize_map(Some(2))?;
        part.serialize_entry("text", self.0)?;
        part.serialize_entry("mediaType", "text/plain")?;
        part.end()
    }
}

/// response on a completed task, prompt on a waiting one, residue when the
/// session still ran something at its cancel; each at most once, named by id.
struct HeldArtifacts<'a>(&'a Task);

impl HeldArtifacts<'_> {
    fn response(&self) -> Option<&str> {
        let task = self.0;
        task.response
            .as_deref()
            .filter(|_| task.status.state == TaskState::Completed)
    }

    fn prompt(&self) -> Option<&str> {
        let task = self.0;
        task.prompt
            .as_deref()
            .filter(|_| task.status.state == TaskState::InputRequired)
    }

    fn is_empty(&self) -> bool {
        self.response().is_none() && self.prompt().is_none() && self.0.residue.is_empty()
    }
}

impl Serialize for HeldArtifacts<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let texts = [("response", self.response()), ("prompt", self.prompt())];
        let texts = texts.into_iter().filter_map(|(id, text)| {
            text.map(|text| ArtifactJson::Text(TextArtifact { id, text }))
        });
        let residue = (!self.0.residue.is_empty())
            .then(|| ArtifactJson::Residue(ResidueArtifact(&self.0.residue)));
        serializer.collect_seq(texts.chain(residue))
    }
}

enum ArtifactJson<'a> {
    Text(TextArtifact<'a>),
    Residue(ResidueArtifact<'a>),
}

impl Serialize for ArtifactJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ArtifactJson::Text(artifact) => artifact.serialize(serializer),
            ArtifactJson::Residue(artifact) => artifact.serialize(serializer),
        }
    }
}

/// An artifact of one text part; its id is its name.
pub struct TextArtifact<'a> {
    pub id: &'a str,
    pub text: &'a str,
}

impl Serialize for TextArtifact<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut artifact = serializer.serialize_map(Some(3))?;
        artifact.serialize_entry("artifactId", self.id)?;
        artifact.serialize_entry("name", self.id)?;
        artifact.serialize_entry("parts", &[TextPart(self.text)])?;
        artifact.end()
    }
}

/// The residue artifact: one data part per item.
pub struct ResidueArtifact<'a>(pub &'a [ResidueItem]);

impl Serialize for ResidueArtifact<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut artifact = serializer.serialize_map(Some(3))?;
        artifact.serialize_entry("artifactId", "residue")?;
        artifact.serialize_entry("name", "residue")?;
        artifact.serialize_entry("parts", &Seq(self.0.iter().map(ResiduePart)))?;
        artifact.end()
    }
}

struct ResiduePart<'a>(&'a ResidueItem);

impl Serialize for ResiduePart<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut part = serializer.serialize_map(Some(2))?;
        part.serialize_entry("data", &ResidueData(self.0))?;
        part.serialize_entry("mediaType", "application/json")?;
        part.end()
    }
}

/// A residue item as a cancel's residue artifact carries it ("GetTask").
struct ResidueData<'a>(&'a ResidueItem);

impl Serialize for ResidueData<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut data = serializer.serialize_map(None)?;
        match self.0 {
            ResidueItem::DetachedShell {
                work_id,
                binary,
                command,
                started_at_ms,
            } => {
                data.serialize_entry("kind", "detached_shell")?;
                data.serialize_entry("work_id", work_id)?;
                data.serialize_entry("binary", binary)?;
                data.serialize_entry("command", command)?;
                data.serialize_entry("started_at_ms", started_at_ms)?;
            }
            ResidueItem::Delegation {
                delegation_id,
                capsule,
                version,
                child_session_id,
                child_workdir,
            } => {
                data.serialize_entry("kind", "delegation")?;
                data.serialize_entry("delegation_id", delegation_id)?;
                data.serialize_entry("capsule", capsule)?;
                data.serialize_entry("version", version)?;
                data.serialize_entry("child_session_id", child_session_id)?;
                data.serialize_entry("child_workdir", child_workdir)?;
            }
        }
        data.end()
    }
}

/// Whether `metadata.murmur` ("Task metadata") has anything to say.
fn says_something(metadata: &TaskMetadata) -> bool {
    metadata.no_answer
        || !metadata.no_answer_below.is_empty()
        || !metadata.running_commands.is_empty()
}

/// `metadata.murmur`: each member only when it says something.
struct Murmur<'a>(&'a TaskMetadata);

impl Serialize for Murmur<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let metadata = self.0;
        let mut murmur = serializer.serialize_map(None)?;
        if metadata.no_answer {
            murmur.serialize_entry("noAnswer", &true)?;
        }
        if !metadata.no_answer_below.is_empty() {
            let below = metadata.no_answer_below.iter().take(8).map(Below);
            murmur.serialize_entry("noAnswerBelow", &Seq(below))?;
        }
        if !metadata.running_commands.is_empty() {
            let commands = metadata.running_commands.iter().map(Command);
            murmur.serialize_entry("runningCommands", &Seq(commands))?;
        }
        murmur.end()
    }
}

struct Below<'a>(&'a MemberStatus);

impl Serialize for Below<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut member = serializer.serialize_map(Some(2))?;
        member.serialize_entry("member", &self.0.member)?;
        member.serialize_entry("status", &self.0.status)?;
        member.end()
    }
}

struct Command<'a>(&'a RunningCommand);

impl Serialize for Command<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut command = serializer.serialize_map(Some(4))?;
        command.serialize_entry("workId", &c.work_id)?;
        command.serialize_entry("binary", &c.binary)?;
        command.serialize_entry("command", &c.command)?;
        command.serialize_entry("runningMs", &c.running_ms)?;
        command.end()
    }
}

/// An object of one member: `{"task": …}`.
pub struct Keyed<T>(pub &'static str, pub T);

impl<T: Serialize> Serialize for Keyed<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut object = serializer.serialize_map(Some(1))?;
        object.serialize_entry(self.0, &self.1)?;
        object.end()
    }
}

/// An iterator of views, written as a JSON array.
pub struct Seq<I>(pub I);

impl<I> Serialize for Seq<I>
where
    I: Iterator + Clone,
    I::Item: Serialize,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imports::model::Status;
    use serde_json::{Value, json};

    /// The task as GetTask (or ListTasks) renders it, as a JSON value.
    fn task(task: &Task, artifacts: Artifacts) -> Value {
        serde_json::to_value(TaskJson { task, artifacts }).unwrap()
    }

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
