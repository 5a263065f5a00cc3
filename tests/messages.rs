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
