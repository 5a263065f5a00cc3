//! The lines of `--agent-stdio`: what the host writes to the agent's stdin
//! ([`HostLine`]) and what it reads from its stdout ([`AgentLine`]), one JSON
//! object a line, [`MAX_LINE_BYTES`] at most.

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::session::tasks::events::FrameKind;
use crate::session::tasks::{MemberStatus, Origin};

/// The longest line either side writes, its newline included.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// An image of a task or a reply, as a file the agent reads.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRef {
    pub path: String,
    pub media_type: String,
}

/// A line the host writes.
#[derive(Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum HostLine<'a> {
    /// A new task.
    Task {
        task: &'a str,
        context_id: &'a str,
        text: &'a str,
        images: Vec<ImageRef>,
        forget_session: bool,
        origin: &'static str,
        trust: Option<&'a str>,
        /// The task's trace context, when the door traces (W3C).
        #[serde(skip_serializing_if = "Option::is_none")]
        traceparent: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tracestate: Option<&'a str>,
    },
    /// The client's reply to the task's question.
    Input {
        task: &'a str,
        text: &'a str,
        images: Vec<ImageRef>,
    },
    /// The task was cancelled.
    Cancel { task: &'a str },
    /// A completion of a delegation the task awaits.
    Completion {
        task: &'a str,
        delegation: &'a str,
        text: &'a str,
    },
    /// What a request the agent numbered returned.
    Result {
        id: &'a Value,
        #[serde(flatten)]
        returned: Returned,
    },
    /// The session is closing.
    Stop,
}

/// What a numbered request returned.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Returned {
    WorkId(String),
    DelegationId(String),
    Error(String),
}

impl HostLine<'_> {
    /// The line, its newline included.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A line of strings, booleans and numbers always serializes.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// An origin as the task line spells it.
pub fn origin(origin: Origin) -> &'static str {
    match origin {
        Origin::Client => "client",
        Origin::Peer => "peer",
        Origin::Session => "session",
    }
}

/// What a line of the agent asks, for the task it names.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentLine {
    Frame(FrameKind, Map<String, Value>),
    Progress(String),
    Ask(String),
    Reply(String),
    Fail(String),
    NoAnswer(String),
    NoAnswerFrom {
        member: String,
        status: String,
        below: Vec<MemberStatus>,
    },
    Detach {
        command: String,
        id: Option<Value>,
    },
    Delegate {
        capsule: String,
        version: String,
        session_id: String,
        workdir: String,
        id: Option<Value>,
    },
    Await(String),
    DelegationEnded(String),
}

/// The keys that say what a line asks; a line has exactly one.
const ACTIONS: [&str; 11] = [
    "frame",
    "progress",
    "ask",
    "reply",
    "fail",
    "noAnswer",
    "noAnswerFrom",
    "detach",
    "delegate",
    "await",
    "delegationEnded",
];

/// Why a line was ignored: the log's words.
pub type Refusal = String;

/// The task a line names and what it asks of it.
pub fn parse(line: &[u8]) -> Result<(String, AgentLine), Refusal> {
    let value: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(mut object) = value else {
        return Err("not a JSON object".into());
    };
    let task = match object.remove("task") {
        Some(Value::String(task)) => task,
        _ => return Err("names no task (a string `task`)".into()),
    };
    let mut actions = ACTIONS.iter().filter(|key| object.contains_key(**key));
    let (Some(&action), None) = (actions.next(), actions.next()) else {
        return Err(format!("needs exactly one of {}", ACTIONS.join(", ")));
    };
    let value = object.remove(action).unwrap_or_default();
    let id = object.remove("id");
    let text = |value: Value| match value {
        Value::String(text) => Ok(text),
        _ => Err(format!("`{action}` takes a string")),
    };
    let line = match action {
        "frame" => {
            let kind = text(value)?;
            let kind = FrameKind::named(&kind).ok_or_else(|| format!("no frame kind {kind:?}"))?;
            let body = match object.remove("body") {
                None => Map::new(),
                Some(Value::Object(body)) => body,
                Some(_) => return Err("a frame's `body` is an object".into()),
            };
            AgentLine::Frame(kind, body)
        }
        "progress" => AgentLine::Progress(text(value)?),
        "ask" => AgentLine::Ask(text(value)?),
        "reply" => AgentLine::Reply(text(value)?),
        "fail" => AgentLine::Fail(text(value)?),
        "noAnswer" => AgentLine::NoAnswer(text(value)?),
        "noAnswerFrom" => {
            let Value::Object(mut from) = value else {
                return Err("`noAnswerFrom` takes {member, status, below}".into());
            };
            let (member, status) = member_status(&mut from)?;
            let below = match from.remove("below") {
                None => Vec::new(),
                Some(Value::Array(below)) => below
                    .into_iter()
                    .map(|m| match m {
                        Value::Object(mut m) => member_status(&mut m)
                            .map(|(member, status)| MemberStatus { member, status }),
                        _ => Err("`below` lists {member, status}".into()),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("`below` lists {member, status}".into()),
            };
            AgentLine::NoAnswerFrom {
                member,
                status,
                below,
            }
        }
        "detach" => AgentLine::Detach {
            command: text(value)?,
            id,
        },
        "delegate" => {
            let Value::Object(mut child) = value else {
                return Err("`delegate` takes {capsule, version, sessionId, workdir}".into());
            };
            let mut field = |key: &str| match child.remove(key) {
                Some(Value::String(v)) => Ok(v),
                _ => Err(format!("`delegate` needs a string `{key}`")),
            };
            AgentLine::Delegate {
                capsule: field("capsule")?,
                version: field("version")?,
                session_id: field("sessionId")?,
                workdir: field("workdir")?,
                id,
            }
        }
        "await" => AgentLine::Await(text(value)?),
        "delegationEnded" => AgentLine::DelegationEnded(text(value)?),
        _ => unreachable!("every action is matched"),
    };
    Ok((task, line))
}

fn member_status(object: &mut Map<String, Value>) -> Result<(String, String), Refusal> {
    match (object.remove("member"), object.remove("status")) {
        (Some(Value::String(member)), Some(Value::String(status))) => Ok((member, status)),
        _ => Err("a member is {member, status}, both strings".into()),
    }
}

/// One line read from the agent.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// A whole line, without its newline.
    Line,
    /// A line over [`MAX_LINE_BYTES`], read to its end and dropped.
    TooLong,
    /// The end of the stream.
    End,
}

/// Reads one line into `line` (cleared first), holding at most `max` bytes
/// of it: a longer line is consumed to its newline without being kept. A
/// last line without a newline counts as a line.
pub async fn read_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Read> {
    line.clear();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Read::TooLong,
                (false, true) => Read::End,
                (false, false) => Read::Line,
            });
        }
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (&buf[..at], Some(at + 1)),
            None => (buf, None),
        };
        if !too_long {
            if line.len() + chunk.len() + usize::from(found.is_some()) > max {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = found.unwrap_or(buf.len());
        reader.consume(used);
        if found.is_some() {
            return Ok(if too_long { Read::TooLong } else { Read::Line });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(line: Value) -> Result<(String, AgentLine), Refusal> {
        parse(line.to_string().as_bytes())
    }

    #[test]
    fn every_agent_line_parses() {
        let t = || "tsk_1".to_string();
        let body = json!({"toolCallId": "c1", "name": "search"});
        assert_eq!(
            parsed(json!({"task": "tsk_1", "frame": "tool-call-started", "body": body})),
            Ok((
                t(),
                AgentLine::Frame(
                    FrameKind::ToolCallStarted,
                    body.as_object().unwrap().clone()
                )
            ))
        );
        for (key, expected) in [
            ("progress", AgentLine::Progress("x".into())),
            ("ask", AgentLine::Ask("x".into())),
            ("reply", AgentLine::Reply("x".into())),
            ("fail", AgentLine::Fail("x".into())),
            ("noAnswer", AgentLine::NoAnswer("x".into())),
            ("await", AgentLine::Await("x".into())),
            ("delegationEnded", AgentLine::DelegationEnded("x".into())),
        ] {
            assert_eq!(
                parsed(json!({"task": "tsk_1", key: "x"})),
                Ok((t(), expected))
            );
        }
        assert_eq!(
            parsed(
                json!({"task": "tsk_1", "noAnswerFrom": {"member": "a", "status": "failed",
                "below": [{"member": "b", "status": "timeout"}]}})
            ),
            Ok((
                t(),
                AgentLine::NoAnswerFrom {
                    member: "a".into(),
                    status: "failed".into(),
                    below: vec![MemberStatus {
                        member: "b".into(),
                        status: "timeout".into()
                    }]
                }
            ))
        );
        assert_eq!(
            parsed(json!({"task": "tsk_1", "detach": "sleep 1", "id": 7})),
            Ok((
                t(),
                AgentLine::Detach {
                    command: "sleep 1".into(),
                    id: Some(json!(7))
                }
            ))
        );
        assert_eq!(
            parsed(
                json!({"task": "tsk_1", "delegate": {"capsule": "c", "version": "1",
                "sessionId": "ses_1", "workdir": "/w"}})
            ),
            Ok((
                t(),
                AgentLine::Delegate {
                    capsule: "c".into(),
                    version: "1".into(),
                    session_id: "ses_1".into(),
                    workdir: "/w".into(),
                    id: None
                }
            ))
        );
    }

    #[test]
    fn what_is_refused_says_why() {
        assert!(parse(b"not json").unwrap_err().starts_with("not JSON"));
        assert_eq!(parse(b"[1]").unwrap_err(), "not a JSON object");
        assert_eq!(
            parsed(json!({"reply": "x"})).unwrap_err(),
            "names no task (a string `task`)"
        );
        let one_of = "needs exactly one of frame, progress, ask, reply, fail, noAnswer, \
                      noAnswerFrom, detach, delegate, await, delegationEnded";
        assert_eq!(parsed(json!({"task": "t"})).unwrap_err(), one_of);
        assert_eq!(
            parsed(json!({"task": "t", "reply": "a", "fail": "b"})).unwrap_err(),
            one_of
        );
        assert_eq!(
            parsed(json!({"task": "t", "reply": 4})).unwrap_err(),
            "`reply` takes a string"
        );
        assert_eq!(
            parsed(json!({"task": "t", "frame": "status"})).unwrap_err(),
            "no frame kind \"status\""
        );
        assert_eq!(
            parsed(json!({"task": "t", "frame": "text", "body": "x"})).unwrap_err(),
            "a frame's `body` is an object"
        );
        assert_eq!(
            parsed(json!({"task": "t", "delegate": {"capsule": "c"}})).unwrap_err(),
            "`delegate` needs a string `version`"
        );
    }

    #[test]
    fn host_lines_have_the_contract_s_shape() {
        let task = HostLine::Task {
            task: "tsk_1",
            context_id: "ctx_1",
            text: "hi",
            images: vec![ImageRef {
                path: "/tmp/1.png".into(),
                media_type: "image/png".into(),
            }],
            forget_session: false,
            origin: "client",
            trust: None,
            traceparent: None,
            tracestate: None,
        };
        assert_eq!(
            String::from_utf8(task.to_bytes()).unwrap(),
            "{\"type\":\"task\",\"task\":\"tsk_1\",\"contextId\":\"ctx_1\",\"text\":\"hi\",\
             \"images\":[{\"path\":\"/tmp/1.png\",\"mediaType\":\"image/png\"}],\
             \"forgetSession\":false,\"origin\":\"client\",\"trust\":null}\n"
        );
        // Traced: the task's trace context after the rest.
        let traced = HostLine::Task {
            task: "tsk_1",
            context_id: "ctx_1",
            text: "hi",
            images: Vec::new(),
            forget_session: false,
            origin: "client",
            trust: None,
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            tracestate: Some("k=v"),
        };
        assert_eq!(
            String::from_utf8(traced.to_bytes()).unwrap(),
            "{\"type\":\"task\",\"task\":\"tsk_1\",\"contextId\":\"ctx_1\",\"text\":\"hi\",\
             \"images\":[],\"forgetSession\":false,\"origin\":\"client\",\"trust\":null,\
             \"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\",\
             \"tracestate\":\"k=v\"}\n"
        );
        let id = json!(3);
        for (line, expected) in [
            (
                HostLine::Cancel { task: "tsk_1" },
                r#"{"type":"cancel","task":"tsk_1"}"#,
            ),
            (
                HostLine::Completion {
                    task: "tsk_1",
                    delegation: "dlg_1",
                    text: "{}",
                },
                r#"{"type":"completion","task":"tsk_1","delegation":"dlg_1","text":"{}"}"#,
            ),
            (
                HostLine::Result {
                    id: &id,
                    returned: Returned::WorkId("wrk_1".into()),
                },
                r#"{"type":"result","id":3,"workId":"wrk_1"}"#,
            ),
            (
                HostLine::Result {
                    id: &id,
                    returned: Returned::Error("no".into()),
                },
                r#"{"type":"result","id":3,"error":"no"}"#,
            ),
            (HostLine::Stop, r#"{"type":"stop"}"#),
        ] {
            assert_eq!(line.to_bytes(), format!("{expected}\n").into_bytes());
        }
    }

    #[tokio::test]
    async fn a_long_line_is_dropped_whole() {
        let input = b"short\nxxxxxxxxxxxxxxxxxxxx\nnext\nlast".to_vec();
        // A reader that hands out a few bytes at a time.
        let mut reader = tokio::io::BufReader::with_capacity(3, &input[..]);
        let mut line = Vec::new();
        let mut got = Vec::new();
        loop {
            let read = read_line(&mut reader, &mut line, 10).await.unwrap();
            if read == Read::End {
                break;
            }
            got.push((read, String::from_utf8(line.clone()).unwrap()));
        }
        assert_eq!(
            got,
            [
                (Read::Line, "short".to_string()),
                (Read::TooLong, String::new()),
                (Read::Line, "next".to_string()),
                (Read::Line, "last".to_string()),
            ]
        );
    }
}
