//! The streams natively ("murmur.WatchSession", "SubscribeToTask", the stream
//! extension): the exact SSE bytes the door writes for what the event log
//! delivers.

use crate::common;

use common::{FakeHost, event, post};
use murmur_door_guest::imports::model::{Delivery, Event, EventBody, Status, TaskState};
use murmur_door_guest::methods::streams::pump;
use murmur_door_guest::{Reply, Request, handle};
use serde_json::{Value, json};

const DOOR: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
const STREAM: &str = "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1";

/// Runs a request that opens a stream; its headers and the SSE text.
fn stream(host: &FakeHost, request: &Request, body: &str) -> (Vec<(String, String)>, String) {
    let Reply::Stream(mut stream) = handle(host, request, || body.as_bytes().to_vec()) else {
        panic!("not a stream")
    };
    let headers = std::mem::take(&mut stream.headers);
    let mut out = Vec::new();
    pump(host, stream, &mut |bytes| {
        out.extend_from_slice(bytes);
        true
    });
    (headers, String::from_utf8(out).unwrap())
}

/// The SSE events as (id line, parsed data).
fn events(text: &str) -> Vec<(Option<String>, Value)> {
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let mut id = None;
            let mut data = Value::Null;
            for line in e.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_string());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).unwrap();
                }
            }
            (id, data)
        })
        .collect()
}

fn status(state: TaskState, message: Option<&str>, message_id: Option<&str>) -> EventBody {
    EventBody::Status {
        status: Status {
            state,
            message: message.map(Into::into),
            timestamp_ms: 1_791_882_000_123,
        },
        message_id: message_id.map(Into::into),
    }
}

// "murmur.WatchSession": the head, connection-ack in an unnumbered message
// event exactly as the reference shows, then the log's events byte for byte,
// then capsule-closed when the door closes.
#[test]
fn watch_session_writes_the_references_events() {
    let host = FakeHost::new(false);
    host.log.borrow_mut().push(Delivery::Event(Event {
        id: 42,
        task_id: "tsk_0199c4e2f1b7712a9d3e4f5061728394".into(),
        context_id: "ctx_0199c4e2f1b7712a9d3e4f50617283a1".into(),
        body: EventBody::Status {
            status: Status {
                state: TaskState::Working,
                message: Some("inference turn 2".into()),
                timestamp_ms: 1_791_882_000_123,
            },
            message_id: Some("msg_0199c4e2f1b87a01b2c3d4e5f6071829".into()),
        },
    }));
    let request = post(&[("Last-Event-ID", "41")]);
    let (headers, text) = stream(
        &host,
        &request,
        r#"{"jsonrpc":"2.0","id":1,"method":"murmur.WatchSession","params":{}}"#,
    );
    assert_eq!(
        headers,
        [
            ("content-type".to_string(), "text/event-stream".to_string()),
            ("cache-control".to_string(), "no-cache".to_string()),
            ("A2A-Extensions".to_string(), format!("{DOOR}, {STREAM}")),
        ]
    );
    assert_eq!(*host.opened.borrow(), [(None, Some(41))]);
    let mut lines = text.split("\n\n");
    assert_eq!(
        lines.next().unwrap(),
        format!(
            r#"data: {{"jsonrpc":"2.0","id":1,"result":{{"message":{{"messageId":"msg_00000000000000000000000000000001","role":"ROLE_AGENT","parts":[{{"mediaType":"text/plain","text":"connection-ack"}}],"metadata":{{"{STREAM}":{{"frame":"connection-ack","role":"observer","conversationMode":"stateless"}}}}}}}}}}"#
        )
    );
    assert_eq!(
        lines.next().unwrap(),
        r#"id: 42
data: {"jsonrpc":"2.0","id":1,"result":{"statusUpdate":{"taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394","contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"msg_0199c4e2f1b87a01b2c3d4e5f6071829","contextId":"ctx_0199c4e2f1b7712a9d3e4f50617283a1","taskId":"tsk_0199c4e2f1b7712a9d3e4f5061728394","role":"ROLE_AGENT","parts":[{"mediaType":"text/plain","text":"inference turn 2"}]},"timestamp":"2026-10-13T09:00:00.123Z"}}}}"#
    );
    let closed = events(lines.next().unwrap());
    assert_eq!(closed[0].0, None);
    assert_eq!(
        closed[0].1["result"]["message"]["metadata"][STREAM],
        json!({"frame": "capsule-closed"})
    );
    assert_eq!(lines.collect::<String>(), "");
}

// "murmur.WatchSession": a gap frame first when the buffer cannot supply
// every event after Last-Event-ID; frames ride in a message's metadata.
#[test]
fn watch_session_gap_and_frames() {
    let host = FakeHost::new(false);
    host.log.borrow_mut().extend([
        Delivery::Gap(3, 9),
        event(
            10,
            "tsk_a",
            EventBody::Frame {
                kind: "text".into(),
                body: json!({"text": "hello"}),
            },
        ),
        event(
            11,
            "tsk_a",
            EventBody::Frame {
                kind: "thinking".into(),
                body: json!({"summary": "hm"}),
            },
        ),
        Delivery::Lagged(11, 20),
    ]);
    let (_, text) = stream(
        &host,
        &post(&[("last-event-id", "3")]),
        r#"{"jsonrpc":"2.0","id":"w","method":"murmur.WatchSession"}"#,
    );
    let events = events(&text);
    let frames: Vec<(Option<String>, Value)> = events
        .iter()
        .map(|(id, data)| {
            (
                id.clone(),
                data["result"]["message"]["metadata"][STREAM].clone(),
            )
        })
        .collect();
    assert_eq!(
        frames,
        [
            (
                None,
                json!({"frame": "connection-ack", "role": "observer", "conversationMode": "stateless"})
            ),
            (None, json!({"frame": "gap", "after": 3, "through": 9})),
            (Some("10".into()), json!({"frame": "text", "text": "hello"})),
            (
                Some("11".into()),
                json!({"frame": "thinking", "summary": "hm"})
            ),
            (None, json!({"frame": "lagged", "after": 11, "through": 20})),
            (None, json!({"frame": "capsule-closed"})),
        ]
    );
    let text_frame = &events[2].1["result"]["message"];
    assert_eq!(
        (&text_frame["taskId"], &text_frame["contextId"]),
        (&json!("tsk_a"), &json!("ctx_1"))
    );
    assert_eq!(
        text_frame["parts"],
        json!([{"mediaType": "text/plain", "text": "hello"}])
    );
    assert_eq!(
        events[3].1["result"]["message"]["parts"],
        json!([{"mediaType": "text/plain", "text": "thinking"}])
    );
    assert!(events.iter().all(|(_, data)| data["id"] == "w"));
}

fn send_streaming(extra: &[(&str, &str)], text: &str) -> (FakeHost, Vec<(String, String)>, String) {
    let host = FakeHost::new(false);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}})
    .to_string();
    let first = "tsk_00000000000000000000000000000001";
    host.log.borrow_mut().extend([
        event(41, first, status(TaskState::Working, None, None)),
        event(
            42,
            first,
            EventBody::Frame {
                kind: "text".into(),
                body: json!({"text": "step"}),
            },
        ),
        event(
            43,
            first,
            EventBody::Artifact {
                artifact_id: "response".into(),
                text: Some("four".into()),
                residue: vec![],
            },
        ),
        event(44, first, status(TaskState::Completed, None, None)),
        event(45, first, status(TaskState::Working, None, None)),
    ]);
    let (headers, text) = stream(&host, &post(extra), &body);
    (host, headers, text)
}

// SendStreamingMessage: the task first, then its events from the mark taken
// before it started; frames only when A2A-Extensions names the stream
// extension; the stream ends after the terminal status.
#[test]
fn send_streaming_message_follows_its_task_to_the_end() {
    let (host, headers, text) = send_streaming(&[], "reply four");
    assert_eq!(
        *host.opened.borrow(),
        [(
            Some("tsk_00000000000000000000000000000001".into()),
            Some(40)
        )]
    );
    assert!(!headers.iter().any(|(n, _)| n == "A2A-Extensions"));
    let events = events(&text);
    let kinds: Vec<(Option<&str>, Vec<&String>)> = events
        .iter()
        .map(|(id, data)| {
            (
                id.as_deref(),
                data["result"].as_object().unwrap().keys().collect(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (None, vec![&"task".to_string()]),
            (Some("41"), vec![&"statusUpdate".to_string()]),
            (Some("43"), vec![&"artifactUpdate".to_string()]),
            (Some("44"), vec![&"statusUpdate".to_string()]),
        ]
    );
    assert_eq!(
        events[0].1["result"]["task"]["status"]["state"],
        "TASK_STATE_SUBMITTED"
    );
    assert_eq!(
        events[2].1["result"]["artifactUpdate"],
        json!({"taskId": "tsk_00000000000000000000000000000001", "contextId": "ctx_1",
               "artifact": {"artifactId": "response", "name": "response", "parts": [{"text": "four", "mediaType": "text/plain"}]}})
    );
    assert!(
        events
            .iter()
            .all(|(_, data)| data["id"] == 7 && data["jsonrpc"] == "2.0")
    );

    // Activated: the frame rides along and the answer echoes the URI.
    let (_, headers, text) = send_streaming(
        &[(
            "A2A-Extensions",
            &format!("https://x.example/ext, {STREAM}"),
        )],
        "reply four",
    );
    assert_eq!(
        headers.last().unwrap(),
        &("A2A-Extensions".to_string(), STREAM.to_string())
    );
    let ids: Vec<Option<String>> = self::events(&text).into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        ids,
        [
            None,
            Some("41".into()),
            Some("42".into()),
            Some("43".into()),
            Some("44".into())
        ]
    );
}

// SendStreamingMessage ends its turn when the task pauses for input;
// SubscribeToTask stays open through the pause to the end.
#[test]
fn a_pause_ends_the_turn_not_the_subscription() {
    let host = FakeHost::new(false);
    let id = host.hold(None, TaskState::Working, None, None);
    host.log.borrow_mut().extend([
        event(
            50,
            &id,
            status(
                TaskState::InputRequired,
                Some("Which branch?"),
                Some("msg_q"),
            ),
        ),
        event(51, &id, status(TaskState::Working, None, None)),
        event(52, &id, status(TaskState::Completed, None, None)),
    ]);
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": id}})
            .to_string();
    let (_, text) = stream(&host, &post(&[]), &body);
    let ids: Vec<Option<String>> = events(&text).into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        ids,
        [
            None,
            Some("50".into()),
            Some("51".into()),
            Some("52".into())
        ]
    );
    assert_eq!(*host.opened.borrow(), [(Some(id.clone()), None)]);
    let pause = &events(&text)[1].1["result"]["statusUpdate"]["status"];
    assert_eq!(pause["message"]["messageId"], "msg_q");
    assert_eq!(
        pause["message"]["parts"],
        json!([{"mediaType": "text/plain", "text": "Which branch?"}])
    );

    let (_, _, text) = {
        let host = FakeHost::new(false);
        let first = "tsk_00000000000000000000000000000001";
        host.log.borrow_mut().extend([
            event(
                41,
                first,
                status(
                    TaskState::InputRequired,
                    Some("Which branch?"),
                    Some("msg_q"),
                ),
            ),
            event(42, first, status(TaskState::Working, None, None)),
        ]);
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "ask"}]}}})
        .to_string();
        let (headers, text) = stream(&host, &post(&[]), &body);
        (host, headers, text)
    };
    let ids: Vec<Option<String>> = events(&text).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, [None, Some("41".into())]);
}

// "SubscribeToTask": each refusal is one JSON body; no stream opens.
#[test]
fn subscribe_refusals_are_json_bodies() {
    let host = FakeHost::new(false);
    let ended = host.hold(None, TaskState::Completed, None, Some("x"));
    let answer = |params: Value| {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": params})
                .to_string();
        let reply = handle(&host, &post(&[]), || body.into_bytes())
            .whole()
            .expect("a JSON body");
        serde_json::from_slice::<Value>(&reply.body).unwrap()["error"].clone()
    };
    assert_eq!(
        answer(json!({})),
        json!({"code": -32602, "message": "SubscribeToTask requires an id"})
    );
    assert_eq!(answer(json!({"id": "tsk_nope"}))["code"], -32001);
    assert_eq!(
        answer(json!({"id": ended})),
        json!({"code": -32004, "message": format!("Task {ended} has ended in TASK_STATE_COMPLETED; there is nothing left to follow"),
               "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNSUPPORTED_OPERATION",
                         "domain": "a2a-protocol.org", "metadata": {"taskId": ended, "state": "TASK_STATE_COMPLETED"}}]})
    );
}

// "Continuing a task": a new task refused as busy is a stream of one
// TASK_STATE_REJECTED task event.
#[test]
fn a_busy_rejection_is_a_stream_of_one_task() {
    let host = FakeHost::new(false);
    host.busy.set(true);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}})
    .to_string();
    let (_, text) = stream(&host, &post(&[]), &body);
    let events = events(&text);
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].1["result"]["task"]["status"]["state"],
        "TASK_STATE_REJECTED"
    );
    assert!(host.opened.borrow().is_empty());
}

// An idle stream writes an SSE comment heartbeat so proxies keep it open;
// the heartbeat is not an event.
#[test]
fn an_idle_stream_writes_heartbeats() {
    let host = FakeHost::new(false);
    host.idle_waits.set(2);
    let (_, text) = stream(
        &host,
        &post(&[]),
        r#"{"jsonrpc":"2.0","id":1,"method":"murmur.WatchSession"}"#,
    );
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(blocks[1..3], [": heartbeat", ": heartbeat"]);
    assert!(blocks[3].contains("capsule-closed"));
}

// A client that leaves ends the stream at the next write.
#[test]
fn a_client_that_leaves_ends_the_stream() {
    let host = FakeHost::new(false);
    host.idle_waits.set(1000);
    let Reply::Stream(stream) = handle(&host, &post(&[]), || {
        br#"{"jsonrpc":"2.0","id":1,"method":"murmur.WatchSession"}"#.to_vec()
    }) else {
        panic!("not a stream")
    };
    let mut writes = 0;
    pump(&host, stream, &mut |_| {
        writes += 1;
        writes < 3
    });
    assert_eq!(writes, 3);
    assert_eq!(host.idle_waits.get(), 998);
}

// Framed once ("What murmur.WatchSession writes"): a stream keeps each
// event's SSE event as it wrote it, with its request id cut out, frames
// included even where it does not send them; a stream given those framings
// writes the same SSE events without rendering, with its own request id,
// skips a frame unless the stream extension is active, and still ends on the
// terminal status.
#[test]
fn a_stream_frames_each_event_once_and_passes_framed_events_on() {
    let active = [("A2A-Extensions", STREAM)];
    let (host, _, first) = send_streaming(&[], "reply four");
    let kept = host.kept.borrow().clone();
    let ids: Vec<u64> = kept.iter().map(|f| f.id).collect();
    assert_eq!(ids, [41, 42, 43, 44]);
    let frames: Vec<bool> = kept.iter().map(|f| f.frame).collect();
    assert_eq!(frames, [false, true, false, false]);
    assert_eq!(kept[3].state, Some(TaskState::Completed));
    // What it wrote is what it kept, its request id put in; not the frame.
    let written: Vec<&str> = first.split_inclusive("\n\n").skip(1).collect();
    let kept_sse: Vec<String> = kept
        .iter()
        .filter(|f| !f.frame)
        .map(|f| String::from_utf8(f.with_request_id(b"7")).unwrap())
        .collect();
    assert_eq!(written, kept_sse);
    assert!(kept_sse[0].starts_with("id: 41\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":"));
    assert_eq!(
        String::from_utf8(kept[0].sse[..kept[0].request_id_at].to_vec()).unwrap(),
        "id: 41\ndata: {\"jsonrpc\":\"2.0\",\"id\":"
    );

    // A later stream given the framings (and 45, which it never reaches).
    let again = |extra: &[(&str, &str)], id: &str| {
        let host = FakeHost::new(false);
        host.log
            .borrow_mut()
            .extend(kept.iter().cloned().map(Delivery::Framed));
        host.log.borrow_mut().push(event(
            45,
            "tsk_00000000000000000000000000000001",
            status(TaskState::Working, None, None),
        ));
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "SendStreamingMessage",
            "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "reply four"}]}}})
        .to_string();
        let (_, text) = stream(&host, &post(extra), &body);
        assert!(
            host.kept.borrow().is_empty(),
            "framed events are framed once"
        );
        text
    };
    assert_eq!(again(&[], "7"), first.replace("\"id\":7", "\"id\":\"7\""));
    let active_ids: Vec<Option<String>> = events(&again(&active, "x"))
        .into_iter()
        .map(|(id, data)| {
            assert_eq!(data["id"], "x");
            id
        })
        .collect();
    assert_eq!(
        active_ids,
        [
            None,
            Some("41".into()),
            Some("42".into()),
            Some("43".into()),
            Some("44".into())
        ]
    );
}
