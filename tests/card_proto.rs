//! "Agent Card": the card parses as lf.a2a.v1.AgentCard, as defined by
//! a2a.proto at v1.0.1, under a strict protobuf JSON parser. Every kind of
//! card the door serves is written to a file and handed to
//! tests/proto/check_card.py, which parses it with
//! `google.protobuf.json_format.Parse(text, AgentCard(), ignore_unknown_fields=False)`
//! over the protobuf types of PyPI a2a-sdk (pinned in
//! tests/proto/requirements.txt), from a virtualenv this test creates itself
//! at target/py-venv.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::Door;
use common::setup::{python, show};
use serde_json::{Value, json};

const PUBLIC: &str = "
name: my-agent
version: 0.1.0
tools: [bash]
lifecycle:
  task_acceptance: single
capabilities:
  shell:
    allow: [bash, cargo]
  network:
    allow: [api.example.com]
exports:
  files: [out/]
";

const AUTHENTICATED: &str = "
name: my-agent
version: 0.1.0
tools: [bash]
lifecycle:
  task_acceptance: single
capabilities:
  shell:
    allow: [bash]
  network:
    allow: [api.example.com]
exports:
  files: [out/]
network:
  authentication:
    scheme: bearer
    credentials:
      watcher:
        scopes: [murmur.WatchSession, GetTask, ListTasks]
      client:
        scopes: [SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask]
";

const PROCESS: &str = "
name: harnessed
version: 2.3.4
lifecycle: {task_acceptance: queue}
inference: {transport: process}
exports:
  peer_files: [shared/]
  files: [out/]
  peer_tasks: {accept: true}
";

const EXTENDED_CARD_REQUEST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#;

fn checker() -> PathBuf {
    common::root().join("tests/proto/check_card.py")
}

/// Runs check_card.py on the files.
fn check(files: &[PathBuf]) -> Output {
    Command::new(python())
        .arg(checker())
        .args(files)
        .output()
        .expect("running check_card.py")
}

/// The card served at GET /.well-known/agent-card.json, as served.
fn public_card(door: &Door) -> String {
    let reply = door.get("/.well-known/agent-card.json");
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.text()
}

/// The `result` of GetExtendedAgentCard with the operator token.
fn extended_card(door: &Door) -> String {
    let reply = door.rpc_as(&door.token("operator"), EXTENDED_CARD_REQUEST);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    assert!(body.get("error").is_none(), "GetExtendedAgentCard: {body}");
    assert!(body["result"].is_object(), "GetExtendedAgentCard: {body}");
    serde_json::to_string(&body["result"]).unwrap()
}

fn write(door: &Door, name: &str, card: &str) -> PathBuf {
    let path = door.state.path().join(name);
    std::fs::write(&path, card).unwrap();
    path
}

// "Agent Card": every card kind the door serves parses as lf.a2a.v1.AgentCard
// under a strict protobuf JSON parser — "Security" (public and authenticated
// public card), "The extended card", "Door extension" (task_acceptance none:
// skills [] and streaming false; peerTasks), "Capsule extension" (planes) and
// "Stream extension" (transport: process frames).
#[test]
fn every_served_card_parses_as_lf_a2a_v1_agent_card() {
    let python = python();
    let mut doors = Vec::new();
    let mut files = Vec::new();

    let public = Door::start(PUBLIC);
    files.push(write(&public, "public.json", &public_card(&public)));
    doors.push(public);

    let authenticated = Door::start(AUTHENTICATED);
    files.push(write(
        &authenticated,
        "authenticated-public.json",
        &public_card(&authenticated),
    ));
    files.push(write(
        &authenticated,
        "authenticated-extended.json",
        &extended_card(&authenticated),
    ));
    doors.push(authenticated);

    let none = Door::start(&PUBLIC.replace("task_acceptance: single", "task_acceptance: none"));
    let card = public_card(&none);
    let parsed: Value = serde_json::from_str(&card).unwrap();
    assert_eq!(parsed["skills"], json!([]));
    assert_eq!(parsed["capabilities"]["streaming"], json!(false));
    files.push(write(&none, "none-public.json", &card));
    doors.push(none);

    let none =
        Door::start(&AUTHENTICATED.replace("task_acceptance: single", "task_acceptance: none"));
    let card = public_card(&none);
    let parsed: Value = serde_json::from_str(&card).unwrap();
    assert_eq!(parsed["skills"], json!([]));
    assert_eq!(parsed["capabilities"]["streaming"], json!(false));
    files.push(write(&none, "none-authenticated-public.json", &card));
    files.push(write(
        &none,
        "none-authenticated-extended.json",
        &extended_card(&none),
    ));
    doors.push(none);

    let process = Door::start(PROCESS);
    let card = public_card(&process);
    let parsed: Value = serde_json::from_str(&card).unwrap();
    assert_eq!(
        parsed["capabilities"]["extensions"][0]["params"]["peerTasks"],
        json!(true)
    );
    files.push(write(&process, "process-public.json", &card));
    doors.push(process);

    let output = Command::new(python)
        .arg(checker())
        .args(&files)
        .output()
        .expect("running check_card.py");
    assert!(
        output.status.success(),
        "a served card does not parse as lf.a2a.v1.AgentCard\n{}",
        show(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprint!("{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        files.len(),
        "{}",
        show(&output)
    );
    drop(doors);
}

// The negative control: the strict parser is proven able to fail, on a served
// card with an unknown key and on one with a wrongly typed value.
#[test]
fn the_strict_check_rejects_an_unknown_key_and_a_wrong_type() {
    let door = Door::start(PUBLIC);
    let card: Value = serde_json::from_str(&public_card(&door)).unwrap();

    let good = write(&door, "good.json", &card.to_string());
    let output = check(std::slice::from_ref(&good));
    assert!(
        output.status.success(),
        "the unmodified card must pass\n{}",
        show(&output)
    );

    let mut unknown = card.clone();
    unknown["provider2"] = json!({});
    let mut wrong_type = card.clone();
    wrong_type["skills"] = json!({"id": "task"});
    let mut wrong_scalar = card.clone();
    wrong_scalar["capabilities"]["streaming"] = json!(1);

    for (name, bad) in [
        ("unknown-key.json", unknown),
        ("wrong-type.json", wrong_type),
        ("wrong-scalar.json", wrong_scalar),
    ] {
        let file = write(&door, name, &bad.to_string());
        let output = check(std::slice::from_ref(&file));
        assert!(
            !output.status.success(),
            "{name} must be rejected\n{}",
            show(&output)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(name) && stderr.contains("ParseError"),
            "{name}\n{}",
            show(&output)
        );
    }
}
