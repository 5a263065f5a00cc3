//! The text the agent receives ("Parts", "Referenced tasks"): the parts in
//! order joined by a newline, data parts in fences, then the referenced-tasks
//! block.

use serde_json::Value;

use crate::imports::model::{Task, TaskState};
use crate::methods::message::Part;

/// The parts as the agent reads them.
pub fn parts(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|part| match part {
            Part::Text(text) => text.clone(),
            Part::Data {
                value,
                media_type,
                filename,
            } => data_fence(value, media_type.as_deref(), filename.as_deref()),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A data part: its value pretty-printed in a fence labelled `data`, with
/// `media-type=` and `filename=` when the part has them.
fn data_fence(value: &Value, media_type: Option<&str>, filename: Option<&str>) -> String {
    let body = serde_json::to_string_pretty(value).expect("a JSON value serializes");
    let mut label = "data".to_string();
    if let Some(media_type) = media_type {
        label.push_str(&format!(" media-type={}", sanitise(media_type)));
    }
    if let Some(filename) = filename {
        label.push_str(&format!(" filename={}", sanitise(filename)));
    }
    fenced(&label, &body)
}

/// Whitespace, backticks and `=` become `_`, so a value cannot break the
/// fence's opening line.
fn sanitise(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_whitespace() || c == '`' || c == '=' {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// A fence one backtick longer than the longest run of backticks in `body`,
/// and at least three, so nothing in it closes the fence.
pub fn fenced(label: &str, body: &str) -> String {
    let longest = body.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}{label}\n{body}\n{fence}")
}

/// How a referenced task stood when the message arrived: the task, or None
/// when the session never held it or the sender does not see it.
pub type Referenced = (String, Option<Task>);

/// The block after the parts; empty when the message references nothing.
pub fn referenced_tasks(referenced: &[Referenced]) -> String {
    if referenced.is_empty() {
        return String::new();
    }
    let mut block = String::from("Referenced tasks:");
    for (id, task) in referenced {
        block.push_str(&format!("\n- {id}: "));
        let Some(task) = task else {
            block.push_str("not a task this capsule holds");
            continue;
        };
        let state = task.status.state;
        block.push_str(state.word());
        match (&task.response, &task.status.message) {
            (Some(response), _) if state == TaskState::Completed => {
                block.push('\n');
                block.push_str(&fenced("response", response));
            }
            (_, Some(message)) if state.terminal() => {
                block.push_str(": ");
                block.push_str(&message.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            _ => {}
        }
    }
    block
}

/// The whole text: the parts, then, after a blank line, the referenced tasks.
pub fn compose(parts_text: &str, referenced: &[Referenced]) -> String {
    let block = referenced_tasks(referenced);
    if block.is_empty() {
        parts_text.to_string()
    } else {
        format!("{parts_text}\n\n{block}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imports::model::{Status, TaskMetadata};
    use serde_json::json;

    // "Parts": the reference's example, fence and all.
    #[test]
    fn data_part_in_a_longer_fence() {
        let text = parts(&[
            Part::Text("summarise".into()),
            Part::Data {
                value: json!({"note": "a ``` b", "rows": [1, 2]}),
                media_type: Some("application/json".into()),
                filename: None,
            },
        ]);
        assert_eq!(
            text,
            "summarise\n````data media-type=application/json\n{\n  \"note\": \"a ``` b\",\n  \"rows\": [\n    1,\n    2\n  ]\n}\n````"
        );
    }

    #[test]
    fn data_labels_are_sanitised_and_null_is_read() {
        let text = parts(&[Part::Data {
            value: Value::Null,
            media_type: Some("text/x a`b=c".into()),
            filename: Some("my file.json".into()),
        }]);
        assert_eq!(
            text,
            "```data media-type=text/x_a_b_c filename=my_file.json\nnull\n```"
        );
    }

    fn task(state: TaskState, message: Option<&str>, response: Option<&str>) -> Option<Task> {
        Some(Task {
            id: "x".into(),
            context_id: "c".into(),
            status: Status {
                state,
                message: message.map(Into::into),
                timestamp_ms: 0,
            },
            response: response.map(Into::into),
            prompt: None,
            residue: vec![],
            metadata: TaskMetadata::default(),
            change: 0,
        })
    }

    // "Referenced tasks": the reference's example block.
    #[test]
    fn referenced_tasks_block() {
        let referenced = vec![
            (
                "tsk_a".to_string(),
                task(TaskState::Completed, None, Some("four")),
            ),
            (
                "tsk_b".to_string(),
                task(TaskState::Failed, Some("the driver\nfailed"), None),
            ),
            (
                "tsk_c".to_string(),
                task(TaskState::Working, Some("progress"), None),
            ),
            ("tsk_d".to_string(), None),
        ];
        assert_eq!(
            compose("<the parts>", &referenced),
            "<the parts>\n\nReferenced tasks:\n- tsk_a: completed\n```response\nfour\n```\n- tsk_b: failed: the driver failed\n- tsk_c: working\n- tsk_d: not a task this capsule holds"
        );
        assert_eq!(compose("just parts", &[]), "just parts");
    }
}
