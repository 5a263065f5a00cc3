//! Reading a message natively ("Messages", "Parts", "Image parts",
//! "forgetSession", "Push notifications"): every refusal in the reference's
//! order with the exact code, message and ErrorInfo the end-to-end tests in
//! `tests/messages.rs` assert, and that a refused message starts no task and
//! delivers nothing.

use crate::common;

use base64::Engine;
use common::{FakeHost, a2a_error, call, invalid};
use murmur_door_guest::imports::model::{TaskAcceptance, Transport};
use serde_json::{Value, json};

const DOOR_URI: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

/// A public door under `task_acceptance: queue`, images limited to 64 bytes
/// and 2 a message.
fn public() -> FakeHost {
    let mut host = FakeHost::new(false);
    host.capsule.task_acceptance = TaskAcceptance::Queue;
    host
}

/// A capsule on `inference.transport: process`.
fn process() -> FakeHost {
    let mut host = FakeHost::new(false);
    host.capsule.transport = Transport::Process;
    host
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn message(parts: Value) -> Value {
    json!({"messageId": "m1", "role": "ROLE_USER", "parts": parts})
}

/// SendMessage with these params: the answer, its A2A-Extensions, and the
/// whole response for its headers.
fn send(host: &FakeHost, params: Value) -> (Value, Option<String>) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params});
    let (response, value) = call(host, &[], &body.to_string());
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    (value, response.header("a2a-extensions").map(str::to_string))
}

/// The error a message is refused with; nothing started, nothing delivered,
/// no A2A-Extensions.
#[track_caller]
fn refused(host: &FakeHost, params: Value) -> Value {
    let (answer, extensions) = send(host, params);
    assert!(
        host.started.borrow().is_empty(),
        "a refused message starts no task"
    );
    assert!(host.replies.borrow().is_empty(), "nor delivers a reply");
    assert_eq!(extensions, None);
    assert_eq!(answer["id"], 1);
    answer["error"].clone()
}

fn content_type(message: &str, index: &str, media_type: Option<&str>) -> Value {
    let mut metadata = json!({"partIndex": index});
    if let Some(media_type) = media_type {
        metadata["mediaType"] = json!(media_type);
    }
    a2a_error(-32005, message, "CONTENT_TYPE_NOT_SUPPORTED", metadata)
}

// "Messages": checks 1 to 7, each answered -32602 naming the parameter, the
// first failure answering.
#[test]
fn message_checks_in_order() {
    let host = public();
    let cases = [
        (json!({}), "Invalid params: message is required"),
        (
            json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}]}),
            "Invalid params: message is required",
        ),
        (
            json!({"message": "hi"}),
            "Invalid params: message must be an object",
        ),
        (
            json!({"message": {"role": "ROLE_USER", "parts": []}}),
            "Invalid params: message.messageId must be a non-empty string",
        ),
        (
            json!({"message": {"messageId": "", "role": "ROLE_USER"}}),
            "Invalid params: message.messageId must be a non-empty string",
        ),
        (
            json!({"message": {"messageId": 7}}),
            "Invalid params: message.messageId must be a non-empty string",
        ),
        (
            json!({"message": {"messageId": "m", "role": "user", "parts": [{"text": "x"}]}}),
            "Invalid params: message.role must be ROLE_USER",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}}),
            "Invalid params: message.role must be ROLE_USER",
        ),
        (
            json!({"message": {"messageId": "m", "parts": [{"text": "x"}]}}),
            "Invalid params: message.role must be ROLE_USER",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}),
            "Invalid params: message.parts must be a non-empty array",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": {"text": "x"}}}),
            "Invalid params: message.parts must be a non-empty array",
        ),
        (
            json!({"message": message(json!([{"text": "a"}, "b"]))}),
            "Invalid params: message.parts[1] must be an object",
        ),
        (
            json!({"message": message(json!([{"text": "a", "data": 1}]))}),
            "Invalid params: message.parts[0] must set exactly one of text, raw, url and data",
        ),
        (
            json!({"message": message(json!([{"kind": "text", "text2": "a"}]))}),
            "Invalid params: message.parts[0] must set exactly one of text, raw, url and data",
        ),
        // Check 3 runs over every part before check 4.
        (
            json!({"message": message(json!([{"text": 5}, {}]))}),
            "Invalid params: message.parts[1] must set exactly one of text, raw, url and data",
        ),
        (
            json!({"message": message(json!([{"text": 5}]))}),
            "Invalid params: message.parts[0].text must be a string",
        ),
        (
            json!({"message": message(json!([{"text": "a"}, {"data": 1, "mediaType": 3}]))}),
            "Invalid params: message.parts[1].mediaType must be a string",
        ),
        (
            json!({"message": message(json!([{"url": "x", "filename": null}]))}),
            "Invalid params: message.parts[0].filename must be a string",
        ),
        (
            json!({"message": message(json!([{"raw": 1}]))}),
            "Invalid params: message.parts[0].raw must be a string",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": 5}}),
            "Invalid params: message.taskId must be a string",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "contextId": ["c"]}}),
            "Invalid params: message.contextId must be a string",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "referenceTaskIds": "tsk_a"}}),
            "Invalid params: message.referenceTaskIds must be an array of non-empty strings",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "referenceTaskIds": ["tsk_a", ""]}}),
            "Invalid params: message.referenceTaskIds must be an array of non-empty strings",
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "metadata": {DOOR_URI: true}}}),
            &format!("Invalid params: message.metadata[\"{DOOR_URI}\"] must be an object"),
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "metadata": {DOOR_URI: {"forgetSession": "yes"}}}}),
            &format!(
                "Invalid params: message.metadata[\"{DOOR_URI}\"].forgetSession must be a boolean"
            ),
        ),
        (
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "taskId": "tsk_x", "metadata": {DOOR_URI: {"forgetSession": true}}}}),
            "Invalid params: forgetSession starts a new conversation, so it goes on a message that starts a task, not on one that continues task tsk_x",
        ),
        (
            json!({"message": message(json!([{"text": "x"}])), "configuration": {"returnImmediately": "yes"}}),
            "configuration.returnImmediately must be a boolean",
        ),
        (
            json!({"message": message(json!([{"text": "x"}])), "configuration": {"returnImmediately": 1}}),
            "configuration.returnImmediately must be a boolean",
        ),
    ];
    for (params, text) in cases {
        assert_eq!(refused(&host, params.clone()), invalid(text), "{params}");
    }
}

// "Messages": at most 16 distinct referenced tasks, repeats counted once.
#[test]
fn at_most_16_referenced_tasks() {
    let host = public();
    let ids: Vec<String> = (0..17).map(|n| format!("tsk_{n:032x}")).collect();
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "referenceTaskIds": ids}});
    assert_eq!(
        refused(&host, params),
        invalid("Invalid params: message.referenceTaskIds names 17 distinct tasks; at most 16")
    );
    // 16 distinct, some repeated, is read.
    let mut ids: Vec<String> = (0..16).map(|n| format!("tsk_{n:032x}")).collect();
    ids.extend(ids.clone());
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "referenceTaskIds": ids}});
    assert_eq!(
        send(&host, params).0["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(host.started.borrow()[0].reference_task_ids.len(), 16);
}

// "Parts", "Errors" and check 8: a url part, or a raw part that is not an
// image, is -32005 naming the first refused part (the reference's example
// first); checks 1 to 7 come before it.
#[test]
fn url_and_file_parts_are_refused() {
    let host = public();
    let params = json!({"message": message(json!([{"text": "see"}, {"url": "https://x/a.pdf", "mediaType": "application/pdf"}, {"raw": "AA=="}]))});
    assert_eq!(
        refused(&host, params),
        content_type(
            "message.parts[1] is a url part; this agent reads text parts, data parts and image raw parts only",
            "1",
            Some("application/pdf")
        )
    );
    let params =
        json!({"message": message(json!([{"raw": b64(b"%PDF"), "mediaType": "application/pdf"}]))});
    assert_eq!(
        refused(&host, params),
        content_type(
            "message.parts[0] is a raw part of media type application/pdf; this agent reads text parts, data parts and image raw parts only",
            "0",
            Some("application/pdf")
        )
    );
    let params = json!({"message": message(json!([{"text": "a"}, {"data": 1}, {"raw": "AA=="}]))});
    assert_eq!(
        refused(&host, params),
        content_type(
            "message.parts[2] is a raw part without a media type; this agent reads text parts, data parts and image raw parts only",
            "2",
            None
        )
    );
    let params = json!({"message": message(json!([{"url": "x"}])), "configuration": {"returnImmediately": 0}});
    assert_eq!(
        refused(&host, params),
        invalid("configuration.returnImmediately must be a boolean")
    );
}

// Check 9 and "Push notifications": a push config in a message is -32003
// with metadata {}, after the part check; null reads as absent.
#[test]
fn push_config_in_a_message() {
    let host = public();
    let params = json!({"message": message(json!([{"text": "x"}])), "configuration": {"taskPushNotificationConfig": {"url": "https://hook"}}});
    assert_eq!(
        refused(&host, params),
        a2a_error(
            -32003,
            "push notifications are not supported by this agent",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            json!({})
        )
    );
    let params = json!({"message": message(json!([{"url": "x"}])), "configuration": {"taskPushNotificationConfig": {}}});
    assert_eq!(refused(&host, params)["code"], -32005);
    let params = json!({"message": message(json!([{"text": "reply ok"}])), "configuration": {"taskPushNotificationConfig": null}});
    assert_eq!(
        send(&host, params).0["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

// Check 10 and "forgetSession": only a capsule on transport: process has a
// harness session to forget. false asks for nothing, other keys are ignored,
// and a message using the door extension names it in A2A-Extensions.
#[test]
fn forget_session_needs_a_harness() {
    let host = public();
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "metadata": {DOOR_URI: {"forgetSession": true}}}});
    assert_eq!(
        refused(&host, params),
        invalid(
            "forgetSession asks this capsule to forget the harness session this context names, and only a capsule on inference.transport: process has one"
        )
    );
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "reply ok"}],
        "metadata": {DOOR_URI: {"forgetSession": false, "other": 1}, "x": "y"}}});
    let (answer, extensions) = send(&host, params);
    assert_eq!(
        answer["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(extensions.as_deref(), Some(DOOR_URI));
    assert!(!host.started.borrow()[0].forget_session);

    let host = process();
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "contextId": "ctx_0193f2a1c4d87e01b2c3d4e5f6a7b8c9",
        "parts": [{"text": "carry on"}], "metadata": {DOOR_URI: {"forgetSession": true}}}, "configuration": {"returnImmediately": true}});
    let (answer, extensions) = send(&host, params);
    assert_eq!(extensions.as_deref(), Some(DOOR_URI));
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(task["contextId"], "ctx_0193f2a1c4d87e01b2c3d4e5f6a7b8c9");
    assert!(host.started.borrow()[0].forget_session);
    assert_eq!(host.waits.get(), 0, "returnImmediately holds nothing");
}

// "Answers": a held message is answered once its task settles, as GetTask
// reports it then; a task its agent ended in the same write as its start is
// answered as it settled, with no wait and no read of it again.
#[test]
fn a_task_settled_as_it_started_is_answered_at_once() {
    let host = public();
    host.settles_at_start.set(true);
    let params = json!({"message": message(json!([{"text": "reply ok"}]))});
    let (answer, _) = send(&host, params);
    assert_eq!(
        answer["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(host.waits.get(), 0);

    // returnImmediately: the task as first recorded, settled or not.
    let params = json!({"message": message(json!([{"text": "reply ok"}])), "configuration": {"returnImmediately": true}});
    let (answer, _) = send(&host, params);
    assert_eq!(
        answer["result"]["task"]["status"]["state"],
        "TASK_STATE_SUBMITTED"
    );

    // Without it, the door waits for the task to settle.
    let host = public();
    let params = json!({"message": message(json!([{"text": "reply ok"}]))});
    let (answer, _) = send(&host, params);
    assert_eq!(
        answer["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(host.waits.get(), 1);
}

// Check 11 and "Image parts": each refusal names message.parts[i], in the
// table's order; a message carrying only images starts a task, and images
// are not text.
#[test]
fn image_parts() {
    let host = public();
    let image = |raw: String, media_type: &str| json!({"raw": raw, "mediaType": media_type});
    let with = |parts: Value| json!({"message": message(parts)});
    assert_eq!(
        refused(
            &host,
            with(json!([{"text": "look"}, image("%%%".into(), "image/png")]))
        ),
        invalid(
            "Invalid params: message.parts[1] is not base64: raw must hold the image's bytes in base64"
        )
    );
    assert_eq!(
        refused(&host, with(json!([image(b64(b"GIF89a"), "image/png")]))),
        invalid(
            "Invalid params: message.parts[0] is not a image/png image: its first bytes are not those of image/png"
        )
    );
    assert_eq!(
        refused(
            &host,
            with(json!([image(
                b64(&[PNG, &[0u8; 60]].concat()),
                "image/png"
            )]))
        ),
        invalid(
            "Invalid params: message.parts[0] is 76 bytes, larger than context.images.max_bytes (64)"
        )
    );
    let png = image(b64(PNG), "image/png");
    assert_eq!(
        refused(
            &host,
            with(json!([
                png,
                image(b64(b"GIF87a.."), "image/gif"),
                image(b64(b"\xff\xd8\xff\xe0"), "image/jpeg")
            ]))
        ),
        invalid(
            "Invalid params: message.parts[2] is one image more than context.images.max_per_turn (2) allows in a message"
        )
    );
    let continuing = json!({"message": {"messageId": "m", "role": "ROLE_USER", "taskId": "tsk_x", "parts": [png]}});
    assert_eq!(
        refused(&host, continuing),
        invalid(
            "Invalid params: message.parts[0] is an image, and images go on the message that starts a task, not on one that continues task tsk_x"
        )
    );
    let webp = image(b64(b"RIFF\0\0\0\0WEBPVP8 "), "image/webp");
    send(&host, with(json!([png, webp])));
    send(&host, with(json!([{"text": "see"}, png, {"text": "this"}])));
    let started = host.started.borrow();
    let read: Vec<(&str, Vec<&str>)> = started
        .iter()
        .map(|t| {
            let types = t.images.iter().map(|i| i.media_type.as_str()).collect();
            (t.text.as_str(), types)
        })
        .collect();
    assert_eq!(
        read,
        [
            ("", vec!["image/png", "image/webp"]),
            ("see\nthis", vec!["image/png"])
        ]
    );
    assert_eq!(started[0].images[0].bytes, PNG);
    drop(started);

    let host = process();
    assert_eq!(
        refused(&host, with(json!([{"text": "x"}, png]))),
        invalid(
            "Invalid params: message.parts[1] is an image, and a capsule on inference.transport: process takes no images from the door"
        )
    );
}

// "Continuing a task", "Messages": SendStreamingMessage answers a refused
// message as one JSON body, before any stream.
#[test]
fn streaming_refusals_are_json_bodies() {
    let host = public();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "user", "parts": [{"text": "x"}]}}});
    let (response, answer) = call(&host, &[], &body.to_string());
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "id": 1, "error": invalid("Invalid params: message.role must be ROLE_USER")})
    );
    assert!(host.started.borrow().is_empty());
}
