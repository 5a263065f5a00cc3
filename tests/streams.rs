//! The streams over real sockets ("murmur.WatchSession", "SubscribeToTask",
//! the stream extension, "Continuing a task" for streams): heads, event order
//! and ids, replay from Last-Event-ID, gap, extension activation and echo,
//! refusals as JSON bodies, and how each stream ends.

use crate::common;

use std::time::Duration;

use common::tempdir::TempDir;
use common::{Door, Sse, SseEvent};
use serde_json::{Value, json};

const DOOR: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
use common::{STREAM, event_kind as kind};
const SINGLE: &str = "name: my-agent\nversion: 0.1.0\n";

fn watch(door: &Door, headers: &[(&str, &str)]) -> Sse {
    door.open_stream(
        r#"{"jsonrpc":"2.0","id":"watch","method":"murmur.WatchSession","params":{}}"#,
        headers,
    )
}

fn send(door: &Door, text: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}});
    door.rpc(&body.to_string(), &[]).json()["result"]["task"].clone()
}

fn streaming(
    door: &Door,
    id: u64,
    text: &str,
    task_id: Option<&str>,
    headers: &[(&str, &str)],
) -> Sse {
    let mut message = json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(task_id) = task_id {
        message["taskId"] = json!(task_id);
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "SendStreamingMessage", "params": {"message": message}});
    door.open_stream(&body.to_string(), headers)
}

fn assert_stream_head(sse: &Sse, extensions: Option<&str>) {
    assert_eq!(sse.status, 200);
    assert_eq!(sse.header("content-type"), Some("text/event-stream"));
    assert_eq!(sse.header("cache-control"), Some("no-cache"));
    assert_eq!(sse.header("content-length"), None);
    assert_eq!(sse.header("a2a-extensions"), extensions);
}

/// Numbered events carry increasing ids; every event echoes the request id.
fn assert_ids(events: &[SseEvent], request_id: Value) {
    let ids: Vec<u64> = events.iter().filter_map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    for event in events {
        assert_eq!(event.data["jsonrpc"], "2.0");
        assert_eq!(event.data["id"], request_id);
    }
}

// "murmur.WatchSession": the head, connection-ack first, then every task's
// events, staying open across tasks.
#[test]
fn watch_session_follows_every_task() {
    let door = Door::start(SINGLE);
    let mut sse = watch(&door, &[]);
    assert_stream_head(&sse, Some(&format!("{DOOR}, {STREAM}")));
    let ack = sse.next();
    assert_eq!(ack.id, None);
    let message = &ack.data["result"]["message"];
    assert_eq!(message["role"], "ROLE_AGENT");
    assert_eq!(
        message["parts"],
        json!([{"mediaType": "text/plain", "text": "connection-ack"}])
    );
    assert_eq!(
        message["metadata"],
        json!({STREAM: {"frame": "connection-ack", "role": "observer", "conversationMode": "stateless"}})
    );
    let keys: Vec<&String> = message.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["messageId", "role", "parts", "metadata"]);

    let first = send(&door, "progress thinking hard\nreply one");
    let second = send(&door, "reply two");
    let mut seen = Vec::new();
    while !seen.iter().any(|e: &SseEvent| {
        e.data["result"]["statusUpdate"]["taskId"] == second["id"]
            && e.data["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    }) {
        seen.push(sse.next());
    }
    assert_ids(&seen, json!("watch"));
    let of = |task: &Value| -> Vec<String> {
        seen.iter()
            .filter(|e| {
                let r = &e.data["result"];
                r["statusUpdate"]["taskId"] == task["id"]
                    || r["artifactUpdate"]["taskId"] == task["id"]
                    || r["message"]["taskId"] == task["id"]
            })
            .map(kind)
            .collect()
    };
    let first_kinds = of(&first);
    assert_eq!(first_kinds.last().unwrap(), "status TASK_STATE_COMPLETED");
    assert!(
        first_kinds.contains(&"frame text".to_string()),
        "{first_kinds:?}"
    );
    let artifact = first_kinds
        .iter()
        .position(|k| k == "artifact response")
        .unwrap();
    assert_eq!(artifact, first_kinds.len() - 2, "{first_kinds:?}");
    // The progress status carries its message; the text frame its text.
    let progress = seen
        .iter()
        .find(|e| {
            e.data["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
                == "thinking hard"
        })
        .expect("the progress status");
    assert_eq!(
        progress.data["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    let text = seen
        .iter()
        .find(|e| e.data["result"]["message"]["metadata"][STREAM]["frame"] == "text")
        .unwrap();
    assert_eq!(
        text.data["result"]["message"]["parts"],
        json!([{"mediaType": "text/plain", "text": "thinking hard"}])
    );
    assert_eq!(of(&second).last().unwrap(), "status TASK_STATE_COMPLETED");
    // Still open after both tasks ended.
    assert!(!sse.ended);
}

// "What murmur.WatchSession writes": a stream frames each event once for
// every later stream: an observer replaying from Last-Event-ID after a live
// one read the events gets the same StreamResponses, the text frame's message
// under the same messageId, around its own request id.
#[test]
fn a_later_observer_gets_the_events_as_the_first_framed_them() {
    let door = Door::start(SINGLE);
    let mut live = watch(&door, &[]);
    live.next();
    send(&door, "progress thinking hard\nreply one");
    let until_completed = |sse: &mut Sse| {
        let mut seen = Vec::new();
        while seen.last().is_none_or(|e: &SseEvent| {
            e.data["result"]["statusUpdate"]["status"]["state"] != "TASK_STATE_COMPLETED"
        }) {
            seen.push(sse.next());
        }
        seen
    };
    let first = until_completed(&mut live);
    let mut replay = door.open_stream(
        r#"{"jsonrpc":"2.0","id":3,"method":"murmur.WatchSession","params":{}}"#,
        &[("Last-Event-ID", "0")],
    );
    replay.next();
    let later = until_completed(&mut replay);
    let results = |events: &[SseEvent]| -> Vec<(Option<u64>, Value)> {
        events
            .iter()
            .map(|e| (e.id, e.data["result"].clone()))
            .collect()
    };
    assert_eq!(results(&first), results(&later));
    assert_ids(&later, json!(3));
    let frame = later
        .iter()
        .find(|e| e.data["result"]["message"]["metadata"][STREAM]["frame"] == "text")
        .expect("the text frame");
    let message_id = frame.data["result"]["message"]["messageId"]
        .as_str()
        .unwrap();
    assert!(
        message_id.starts_with("msg_") && message_id.len() == 36,
        "{message_id}"
    );
}

// "murmur.WatchSession": the replay from Last-Event-ID, and a gap frame first
// when the buffer no longer holds every event after it.
#[test]
fn replay_from_last_event_id_and_gap() {
    let state = TempDir::new("replay");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(&manifest, SINGLE).unwrap();
    let door = Door::start_with(&manifest, state, &["--replay-buffer", "8"]);
    for n in 0..2 {
        send(&door, &format!("reply {n}"));
    }
    let mut sse = watch(&door, &[]);
    sse.next(); // connection-ack
    let mut replay = Vec::new();
    while let Some(event) = sse.next_within(Duration::from_millis(500)) {
        replay.push(event);
    }
    let ids: Vec<u64> = replay.iter().filter_map(|e| e.id).collect();
    assert!(ids.len() >= 6, "{ids:?}");
    // From an id: exactly the events after it.
    let from = ids[2];
    let mut again = watch(&door, &[("Last-Event-ID", &from.to_string())]);
    again.next();
    let mut after = Vec::new();
    while let Some(event) = again.next_within(Duration::from_millis(500)) {
        after.push(event.id.unwrap());
    }
    assert_eq!(after, ids[3..]);
    // More events than the buffer holds: a gap frame first.
    for n in 0..4 {
        send(&door, &format!("reply more {n}"));
    }
    let mut late = watch(&door, &[("Last-Event-ID", &ids[0].to_string())]);
    late.next();
    let gap = late.next();
    assert_eq!(gap.id, None);
    let frame = &gap.data["result"]["message"]["metadata"][STREAM];
    assert_eq!(frame["frame"], "gap");
    assert_eq!(frame["after"], ids[0]);
    let first_buffered = late.next().id.unwrap();
    assert_eq!(frame["through"], first_buffered - 1);
}

// SendStreamingMessage: the task first, then its status and artifact
// updates, ending after its terminal status; no frames unless activated.
#[test]
fn send_streaming_message_ends_after_the_terminal_status() {
    let door = Door::start(SINGLE);
    let mut sse = streaming(&door, 3, "progress step one\nreply done", None, &[]);
    assert_stream_head(&sse, None);
    let events = sse.rest();
    assert_ids(&events, json!(3));
    let kinds: Vec<String> = events.iter().map(kind).collect();
    assert_eq!(kinds.first().unwrap(), "task TASK_STATE_SUBMITTED");
    assert_eq!(
        kinds[kinds.len() - 2..],
        [
            "artifact response".to_string(),
            "status TASK_STATE_COMPLETED".to_string()
        ]
    );
    assert!(!kinds.iter().any(|k| k.starts_with("frame")), "{kinds:?}");
    assert_eq!(events[0].id, None);
    assert!(events[1..].iter().all(|e| e.id.is_some()));
    let response = &events[events.len() - 2].data["result"]["artifactUpdate"]["artifact"];
    assert_eq!(
        response,
        &json!({"artifactId": "response", "name": "response", "parts": [{"text": "done", "mediaType": "text/plain"}]})
    );

    // Activated: frames ride along and the answer names the extension.
    let mut sse = streaming(
        &door,
        4,
        "progress step one\nreply done",
        None,
        &[("A2A-Extensions", STREAM)],
    );
    assert_stream_head(&sse, Some(STREAM));
    let kinds: Vec<String> = sse.rest().iter().map(kind).collect();
    assert!(kinds.contains(&"frame text".to_string()), "{kinds:?}");
}

// A task its agent ends at once publishes its statuses and its response
// together: the first stream to meet them has them framed on one instance
// (the door's `framing` export), and each stream writes every event of the
// burst, in order, with its own request id, as every other stream does.
#[test]
fn a_burst_of_events_is_framed_once_for_every_stream() {
    let door = Door::start(SINGLE);
    let mut session = watch(&door, &[]);
    session.next();
    let events = streaming(&door, 7, "reply burst", None, &[]).rest();
    assert_ids(&events, json!(7));
    let kinds: Vec<String> = events.iter().map(kind).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        [
            "artifact response".to_string(),
            "status TASK_STATE_COMPLETED".to_string()
        ]
    );
    let mut watched = Vec::new();
    while watched.last().is_none_or(|e: &SseEvent| {
        e.data["result"]["statusUpdate"]["status"]["state"] != "TASK_STATE_COMPLETED"
    }) {
        watched.push(session.next());
    }
    assert_ids(&watched, json!("watch"));
    let numbered = |events: &[SseEvent]| -> Vec<(Option<u64>, Value)> {
        events
            .iter()
            .filter(|e| e.id.is_some())
            .map(|e| (e.id, e.data["result"].clone()))
            .collect()
    };
    let streamed = numbered(&events);
    assert!(streamed.len() >= 2, "{kinds:?}");
    let watched = numbered(&watched);
    assert_eq!(watched[watched.len() - streamed.len()..], streamed[..]);
}

// The instance that framed one task's burst is kept for the session's next
// burst: a later task's stream carries its own events and nothing of the
// first's, framed as the first's were (its ids, task and text aside).
#[test]
fn a_later_burst_is_framed_from_its_own_events_only() {
    let door = Door::start(SINGLE);
    let long = "a".repeat(20_000);
    let first = streaming(&door, 1, &format!("reply {long}"), None, &[]).rest();
    let second = streaming(&door, 1, "reply b", None, &[]).rest();
    let task = |events: &[SseEvent]| events[0].data["result"]["task"]["id"].clone();
    let (a, b) = (task(&first), task(&second));
    assert_ne!(a, b);
    let answer = |events: &[SseEvent]| {
        events[events.len() - 2].data["result"]["artifactUpdate"]["artifact"]["parts"].clone()
    };
    assert_eq!(
        answer(&first),
        json!([{"text": long, "mediaType": "text/plain"}])
    );
    assert_eq!(
        answer(&second),
        json!([{"text": "b", "mediaType": "text/plain"}])
    );
    // Each event as written, with the task's own ids and times put back
    // to one spelling.
    let shape = |events: &[SseEvent], task: &Value, text: &str| -> Vec<String> {
        let task = task.as_str().unwrap();
        let context = events[0].data["result"]["task"]["contextId"]
            .as_str()
            .unwrap();
        events
            .iter()
            .map(|e| {
                let mut data = e.data.clone();
                let at = |v: &mut Value| {
                    for key in ["task", "statusUpdate"] {
                        if let Some(status) = v["result"][key].get_mut("status") {
                            status["timestamp"] = json!("T");
                        }
                    }
                };
                at(&mut data);
                data.to_string()
                    .replace(task, "TASK")
                    .replace(context, "CONTEXT")
                    .replace(text, "TEXT")
            })
            .collect()
    };
    let second_shape = shape(&second, &b, "\"b\"");
    assert_eq!(shape(&first, &a, &format!("\"{long}\"")), second_shape);
    assert!(
        !second_shape.iter().any(|e| e.contains("aaaa")),
        "{second_shape:?}"
    );
}

// A stream's head waits while the door writes what it already has, so that
// a task ended at its start is sent in one write: never past the body's
// queue. With a queue of one 4 KiB write, a 100,000-byte answer
// (SendStreamingMessage) and a 100,000-byte question in a subscription's
// first event (SubscribeToTask: "the Task as it stands" first) each
// arrive whole, head first.
#[test]
fn an_event_larger_than_the_queue_is_sent_whole() {
    let door = Door::start_flagged(SINGLE, &["--stream-queue-bytes", "4096"]);
    let answer = "a".repeat(100_000);
    let mut stream = streaming(&door, 1, &format!("reply {answer}"), None, &[]);
    assert_stream_head(&stream, None);
    let events = stream.rest();
    assert_eq!(
        kinds_of(&events),
        [
            "task TASK_STATE_SUBMITTED",
            "status TASK_STATE_SUBMITTED",
            "status TASK_STATE_WORKING",
            "artifact response",
            "status TASK_STATE_COMPLETED"
        ]
    );
    assert_eq!(
        events[3].data["result"]["artifactUpdate"]["artifact"]["parts"],
        json!([{"text": answer, "mediaType": "text/plain"}])
    );

    let question = "b".repeat(100_000);
    let mut turn = streaming(&door, 2, &format!("ask {question}"), None, &[]);
    let task_id = turn.rest()[0].data["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "SubscribeToTask", "params": {"id": task_id}});
    let mut subscription = door.open_stream(&body.to_string(), &[]);
    assert_stream_head(&subscription, None);
    let opening = subscription.next();
    assert_eq!(
        opening.data["result"]["task"]["artifacts"][0]["parts"],
        json!([{"text": question, "mediaType": "text/plain"}])
    );
    let mut last = streaming(&door, 3, "reply done", Some(&task_id), &[]);
    assert_eq!(
        kinds_of(&last.rest()).last().unwrap(),
        "status TASK_STATE_COMPLETED"
    );
    assert_eq!(
        kinds_of(&subscription.rest()).last().unwrap(),
        "status TASK_STATE_COMPLETED"
    );
}

// SendStreamingMessage ends its turn at TASK_STATE_INPUT_REQUIRED; the reply
// streams the resumed TASK_STATE_WORKING and the rest. SubscribeToTask
// stays open through the pause to the end.
#[test]
fn input_required_ends_a_turn_and_not_a_subscription() {
    let door = Door::start(SINGLE);
    let mut turn = streaming(&door, 1, "ask Which branch?", None, &[]);
    let events = turn.rest();
    let task_id = events[0].data["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let kinds: Vec<String> = events.iter().map(kind).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        [
            "artifact prompt".to_string(),
            "status TASK_STATE_INPUT_REQUIRED".to_string()
        ]
    );

    let body = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "SubscribeToTask", "params": {"id": task_id}});
    let mut subscription = door.open_stream(&body.to_string(), &[]);
    assert_stream_head(&subscription, None);
    let opening = subscription.next();
    assert_eq!(opening.id, None);
    assert_eq!(
        opening.data["result"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    assert_eq!(
        opening.data["result"]["task"]["artifacts"][0]["artifactId"],
        "prompt"
    );

    let mut reply = streaming(&door, 2, "ask And the remote?", Some(&task_id), &[]);
    let kinds: Vec<String> = reply.rest().iter().map(kind).collect();
    assert_eq!(kinds.first().unwrap(), "task TASK_STATE_WORKING");
    assert_eq!(kinds.last().unwrap(), "status TASK_STATE_INPUT_REQUIRED");

    let mut last = streaming(&door, 5, "reply origin", Some(&task_id), &[]);
    assert_eq!(
        kinds_of(&last.rest()).last().unwrap(),
        "status TASK_STATE_COMPLETED"
    );

    let followed: Vec<String> = kinds_of(&subscription.rest());
    let working = followed
        .iter()
        .position(|k| k == "status TASK_STATE_WORKING")
        .expect("the resumed working status");
    assert!(
        followed[working..].contains(&"status TASK_STATE_INPUT_REQUIRED".to_string()),
        "{followed:?}"
    );
    assert_eq!(followed.last().unwrap(), "status TASK_STATE_COMPLETED");
}

fn kinds_of(events: &[SseEvent]) -> Vec<String> {
    events.iter().map(kind).collect()
}

// "Continuing a task": SendStreamingMessage answers each refusal as one JSON
// body; a new task refused as busy is a stream of one TASK_STATE_REJECTED
// task event.
#[test]
fn streaming_refusals_and_busy() {
    let door = Door::start(SINGLE);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "user", "parts": [{"text": "x"}]}}});
    let reply = door.rpc(&body.to_string(), &[]);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(
        reply.json()["error"],
        json!({"code": -32602, "message": "Invalid params: message.role must be ROLE_USER"})
    );

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "sleep 5000"}]}, "configuration": {"returnImmediately": true}}});
    door.rpc(&body.to_string(), &[]);
    let mut busy = streaming(&door, 9, "reply never", None, &[]);
    assert_stream_head(&busy, None);
    let events = busy.rest();
    assert_eq!(events.len(), 1);
    let task = &events[0].data["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED");
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"],
        "task rejected: capsule is busy"
    );
}

// A door that closes sends capsule-closed and ends every stream.
#[test]
fn a_closing_door_ends_every_stream() {
    let door = Door::start(SINGLE);
    let mut sse = watch(&door, &[]);
    sse.next();
    let pid = door.pid();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let events = sse.rest();
    let last = events.last().expect("capsule-closed");
    assert_eq!(
        last.data["result"]["message"]["metadata"][STREAM]["frame"],
        "capsule-closed"
    );
}

/// Issue 47 ("a SubscribeToTask stream whose task's final status left the
/// buffer before the stream wrote it must still end"): a subscriber that
/// reads nothing while its task ends and another task's events push the
/// ending out of a four-event replay buffer still gets the task's final
/// status, as the store has it, and the stream ends; it used to stay open
/// until the door closed.
#[test]
fn a_subscription_whose_end_left_the_buffer_still_ends() {
    let door = Door::start_flagged(
        "name: lag\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n",
        &["--replay-buffer", "4", "--max-body-bytes", "33554432"],
    );
    let later = json!({"configuration": {"returnImmediately": true}});
    // A question 12 MiB long: the subscription opens with the task and its
    // prompt, more than the sockets hold, so its door waits for the client
    // to read, and reads no event meanwhile.
    let big = "x".repeat(12 << 20);
    let task = door.send_task(None, &format!("ask {big}"), later.clone());
    let task_id = common::id(&task);
    door.wait_state(None, &task_id, "TASK_STATE_INPUT_REQUIRED");
    let body = json!({"jsonrpc": "2.0", "id": "sub", "method": "SubscribeToTask", "params": {"id": task_id}});
    let mut subscription = door.open_stream(&body.to_string(), &[]);
    assert_eq!(subscription.status, 200);
    let reply =
        json!({"message": {"taskId": task_id}, "configuration": {"returnImmediately": true}});
    door.send_task(None, "reply done", reply);
    // Then a task of eight events: the first task's end is gone from the
    // buffer by the time the subscriber reads.
    let next = door.send_task(
        None,
        "progress a\nprogress b\nprogress c\nreply next",
        later,
    );
    door.wait_state(None, &common::id(&next), "TASK_STATE_COMPLETED");
    let ended = door.get_task(None, &task_id);
    assert_eq!(ended["status"]["state"], "TASK_STATE_COMPLETED");

    let opening = subscription.next();
    assert_eq!(kind(&opening), "task TASK_STATE_INPUT_REQUIRED");
    let last = subscription
        .next_within(Duration::from_secs(5))
        .expect("the task's final status");
    assert_eq!(last.id, None);
    assert_eq!(
        last.data,
        json!({"jsonrpc": "2.0", "id": "sub", "result": {"statusUpdate": {
            "taskId": task_id,
            "contextId": ended["contextId"],
            "status": ended["status"],
        }}})
    );
    let after = subscription.next_within(Duration::from_secs(5));
    assert_eq!(after.map(|e| e.data), None);
    assert!(subscription.ended);
}
