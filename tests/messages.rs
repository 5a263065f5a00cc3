//! Reading a message ("Messages", "Parts", "Image parts", "forgetSession",
//! "Referenced tasks"): every refusal in the reference's order with its exact
//! code and message, and the text the agent receives, read back through the
//! script agent, which answers a text whose first line is no keyword with the
//! whole text it received.

use crate::common;

use base64::Engine;
use common::Door;
use serde_json::{Value, json};

const PUBLIC: &str = "name: my-agent\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\ncontext: {images: {max_bytes: 64, max_per_turn: 2}}\n";
const PROCESS: &str = "name: harnessed\nversion: 0.1.0\ninference: {transport: process}\n";
const DOOR_URI: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn send(door: &Door, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params});
    door.rpc(&body.to_string(), &[]).json()
}

fn message(parts: Value) -> Value {
    json!({"messageId": "m1", "role": "ROLE_USER", "parts": parts})
}

fn invalid(text: &str) -> Value {
    json!({"code": -32602, "message": text})
}

/// The error a request is answered, with the door holding no new task.
fn refused(door: &Door, params: Value) -> Value {
    let before = tasks(door);
    let answer = send(door, params);
    assert_eq!(tasks(door), before, "a refused message starts no task");
    answer["error"].clone()
}

fn tasks(door: &Door) -> u64 {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#;
    door.rpc(body, &[]).json()["result"]["totalSize"]
        .as_u64()
        .unwrap()
}

/// The text the agent received: the response of a task whose first line is
/// no keyword.
fn received(door: &Door, params: Value) -> String {
    let answer = send(door, params);
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

// "Messages": checks 1 to 7, each answered -32602 with the parameter named.
#[test]
fn message_checks_in_order() {
    let door = Door::start(PUBLIC);
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
        assert_eq!(refused(&door, params.clone()), invalid(text), "{params}");
    }
    // More than 16 distinct referenced tasks; 16 distinct with repeats is read.
    let ids: Vec<String> = (0..17).map(|n| format!("tsk_{n:032x}")).collect();
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "referenceTaskIds": ids}});
    assert_eq!(
        refused(&door, params),
        invalid("Invalid params: message.referenceTaskIds names 17 distinct tasks; at most 16")
    );
}

// "Parts" and check 8: a url part, or a raw part that is not an image, is
// -32005 naming the first refused part; after checks 1 to 7.
#[test]
fn url_and_file_parts_are_refused() {
    let door = Door::start(PUBLIC);
    let content = |message: &str, index: &str, media_type: Option<&str>| {
        let mut metadata = json!({"partIndex": index});
        if let Some(media_type) = media_type {
            metadata["mediaType"] = json!(media_type);
        }
        json!({"code": -32005, "message": message, "data": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "CONTENT_TYPE_NOT_SUPPORTED",
            "domain": "a2a-protocol.org", "metadata": metadata}]})
    };
    // The reference's example.
    let params = json!({"message": message(json!([{"text": "see"}, {"url": "https://x/a.pdf", "mediaType": "application/pdf"}, {"raw": "AA=="}]))});
    assert_eq!(
        refused(&door, params),
        content(
            "message.parts[1] is a url part; this agent reads text parts, data parts and image raw parts only",
            "1",
            Some("application/pdf")
        )
    );
    let params =
        json!({"message": message(json!([{"raw": b64(b"%PDF"), "mediaType": "application/pdf"}]))});
    assert_eq!(
        refused(&door, params),
        content(
            "message.parts[0] is a raw part of media type application/pdf; this agent reads text parts, data parts and image raw parts only",
            "0",
            Some("application/pdf")
        )
    );
    let params = json!({"message": message(json!([{"text": "a"}, {"data": 1}, {"raw": "AA=="}]))});
    assert_eq!(
        refused(&door, params),
        content(
            "message.parts[2] is a raw part without a media type; this agent reads text parts, data parts and image raw parts only",
            "2",
            None
        )
    );
    // Checks 1 to 7 come first.
    let params = json!({"message": message(json!([{"url": "x"}])), "configuration": {"returnImmediately": 0}});
    assert_eq!(
        refused(&door, params),
        invalid("configuration.returnImmediately must be a boolean")
    );
}

// Check 9 and "Push notifications": a push config in a message is -32003,
// after the part check; null is absent.
#[test]
fn push_config_in_a_message() {
    let door = Door::start(PUBLIC);
    let params = json!({"message": message(json!([{"text": "x"}])), "configuration": {"taskPushNotificationConfig": {"url": "https://hook"}}});
    assert_eq!(
        refused(&door, params),
        json!({"code": -32003, "message": "push notifications are not supported by this agent", "data": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "domain": "a2a-protocol.org", "metadata": {}}]})
    );
    let params = json!({"message": message(json!([{"url": "x"}])), "configuration": {"taskPushNotificationConfig": {}}});
    assert_eq!(refused(&door, params)["code"], -32005);
    let params = json!({"message": message(json!([{"text": "reply ok"}])), "configuration": {"taskPushNotificationConfig": null}});
    assert_eq!(
        send(&door, params)["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

// Check 10 and "forgetSession": only a capsule on transport: process has a
// harness session to forget.
#[test]
fn forget_session_needs_a_harness() {
    let door = Door::start(PUBLIC);
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "metadata": {DOOR_URI: {"forgetSession": true}}}});
    assert_eq!(
        refused(&door, params),
        json!({"code": -32602, "message": "forgetSession asks this capsule to forget the harness session this context names, and only a capsule on inference.transport: process has one"})
    );
    // false asks for nothing; other keys and other metadata are ignored.
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "reply ok"}],
        "metadata": {DOOR_URI: {"forgetSession": false, "other": 1}, "x": "y"}}});
    let reply = door.rpc(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}).to_string(),
        &[],
    );
    assert_eq!(
        reply.json()["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // A message using the door extension names it in A2A-Extensions.
    assert_eq!(reply.header("a2a-extensions"), Some(DOOR_URI));

    // On transport: process the forget is served.
    let door = Door::start(PROCESS);
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "contextId": "ctx_0193f2a1c4d87e01b2c3d4e5f6a7b8c9",
        "parts": [{"text": "carry on"}], "metadata": {DOOR_URI: {"forgetSession": true}}}, "configuration": {"returnImmediately": true}});
    let reply = door.rpc(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}).to_string(),
        &[],
    );
    assert_eq!(reply.header("a2a-extensions"), Some(DOOR_URI));
    let task = &reply.json()["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(task["contextId"], "ctx_0193f2a1c4d87e01b2c3d4e5f6a7b8c9");
}

// Check 11 and "Image parts": each refusal names message.parts[i].
#[test]
fn image_parts() {
    let door = Door::start(PUBLIC);
    let image = |raw: String, media_type: &str| json!({"raw": raw, "mediaType": media_type});
    let with = |parts: Value| json!({"message": message(parts)});
    assert_eq!(
        refused(
            &door,
            with(json!([{"text": "look"}, image("%%%".into(), "image/png")]))
        ),
        invalid(
            "Invalid params: message.parts[1] is not base64: raw must hold the image's bytes in base64"
        )
    );
    assert_eq!(
        refused(&door, with(json!([image(b64(b"GIF89a"), "image/png")]))),
        invalid(
            "Invalid params: message.parts[0] is not a image/png image: its first bytes are not those of image/png"
        )
    );
    assert_eq!(
        refused(
            &door,
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
            &door,
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
        refused(&door, continuing),
        invalid(
            "Invalid params: message.parts[0] is an image, and images go on the message that starts a task, not on one that continues task tsk_x"
        )
    );
    // A message carrying only images starts a task; images are not text.
    let webp = image(b64(b"RIFF\0\0\0\0WEBPVP8 "), "image/webp");
    assert_eq!(received(&door, with(json!([png, webp]))), "");
    assert_eq!(
        received(&door, with(json!([{"text": "see"}, png, {"text": "this"}]))),
        "see\nthis"
    );

    let door = Door::start(PROCESS);
    assert_eq!(
        refused(&door, with(json!([{"text": "x"}, png]))),
        invalid(
            "Invalid params: message.parts[1] is an image, and a capsule on inference.transport: process takes no images from the door"
        )
    );
}

// "Parts": the agent reads the parts in order, joined by a newline; a data
// part in a fence labelled data, one backtick longer than the longest run.
#[test]
fn the_text_the_agent_receives() {
    let door = Door::start(PUBLIC);
    let parts = json!([
        {"text": "summarise", "mediaType": "text/markdown", "metadata": {"x": 1}},
        {"data": {"note": "a ``` b", "rows": [1, 2]}, "mediaType": "application/json"}
    ]);
    assert_eq!(
        received(&door, json!({"message": message(parts)})),
        "summarise\n````data media-type=application/json\n{\n  \"note\": \"a ``` b\",\n  \"rows\": [\n    1,\n    2\n  ]\n}\n````"
    );
    let parts = json!([{"data": null, "mediaType": "text/x y", "filename": "a=b`c.json"}, {"text": "after"}]);
    assert_eq!(
        received(&door, json!({"message": message(parts)})),
        "```data media-type=text/x_y filename=a_b_c.json\nnull\n```\nafter"
    );
}

// "Referenced tasks": each id once, in first-occurrence order, as each task
// stood when the message arrived.
#[test]
fn referenced_tasks_block() {
    let door = Door::start(PUBLIC);
    let done = send(
        &door,
        json!({"message": message(json!([{"text": "reply four"}]))}),
    );
    let done = done["result"]["task"]["id"].as_str().unwrap().to_string();
    let failed = send(
        &door,
        json!({"message": message(json!([{"text": "fail the driver\nfailed"}]))}),
    );
    let failed = failed["result"]["task"]["id"].as_str().unwrap().to_string();
    let live = send(
        &door,
        json!({"message": message(json!([{"text": "sleep 3000"}])), "configuration": {"returnImmediately": true}}),
    );
    let live = live["result"]["task"]["id"].as_str().unwrap().to_string();
    common::wait_for(&door, None, &live, |state| state == "TASK_STATE_WORKING");
    let never = "tsk_0000000000000000000000000000dead";
    let params = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "look"}],
        "referenceTaskIds": [done, failed, done, live, never]},
        "configuration": {"returnImmediately": true}});
    let task = send(&door, params)["result"]["task"].clone();
    let id = task["id"].as_str().unwrap();
    // Queued behind the sleeping task; cancel that so this one runs.
    door.rpc(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": live}})
            .to_string(),
        &[],
    );
    let got = common::settle(&door, None, id);
    assert_eq!(
        got["artifacts"][0]["parts"][0]["text"],
        format!(
            "look\n\nReferenced tasks:\n- {done}: completed\n```response\nfour\n```\n- {failed}: failed: the driver\n- {live}: working\n- {never}: not a task this capsule holds"
        )
    );
}
