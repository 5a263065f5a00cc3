//! `--agent-stdio`: a Python program (examples/agents/showcase.py) is the
//! agent of the session, one process for every task, and produces every
//! field the door renders over the wire: frames on a stream with the stream
//! extension active ("The stream extension", the card's frames for
//! `transport: process`), a question and its reply ("Continuing a task"),
//! noAnswer and noAnswerBelow ("Task metadata"), residue and
//! runningCommands from a detach and a delegation in a cancel's residue
//! ("Residue items"), a completion reaching the task that awaits it
//! ("Completion errors" and "Answers"), and its faults contained
//! (docs/agents.md).

use crate::common;

use common::tempdir::TempDir;
use common::{Door, STREAM, event_kind as kind, settle};
use serde_json::{Value, json};

/// A door whose sessions run showcase.py, on `inference.transport: process`
/// (quota and suggested-prompt frames are a harness's).
fn showcase() -> Door {
    showcase_with("inference: {transport: process}\n")
}

/// A door whose sessions run showcase.py, its manifest ending with `more`.
fn showcase_with(more: &str) -> Door {
    let state = TempDir::new("stdio");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(
        &manifest,
        format!("name: showcase\nversion: 0.1.0\nlifecycle: {{task_acceptance: queue}}\n{more}"),
    )
    .unwrap();
    let agent = common::root().join("examples/agents/showcase.py");
    let command = format!("exec python3 {}", agent.display());
    Door::start_with(&manifest, state, &["--agent-stdio", &command])
}

fn message(text: &str, extra: Value) -> Value {
    let mut message =
        json!({"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]});
    if let (Value::Object(message), Value::Object(extra)) = (&mut message, extra) {
        message.extend(extra);
    }
    message
}

/// SendMessage, held unless `immediately`: the task.
fn send(door: &Door, message: Value, immediately: bool) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message, "configuration": {"returnImmediately": immediately}}});
    let answer = door.rpc(&body.to_string(), &[]).json();
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"]["task"].clone()
}

fn rpc(door: &Door, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    door.rpc(&body.to_string(), &[]).json()
}

fn response(task: &Value) -> &str {
    task["artifacts"][0]["parts"][0]["text"].as_str().unwrap()
}

fn status_text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or("")
}

/// Opens SendStreamingMessage of `text` (request id `id`): the stream and
/// its task's id, from its first event.
fn stream(door: &Door, id: u64, text: &str, headers: &[(&str, &str)]) -> (common::Sse, String) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "SendStreamingMessage",
        "params": {"message": message(text, json!({}))}});
    let mut sse = door.open_stream(&body.to_string(), headers);
    let first = sse.next();
    let task = first.data["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    (sse, task)
}

/// Reads a stream until a working status whose message starts with
/// `prefix`: that message's text.
fn progress_starting(sse: &mut common::Sse, prefix: &str) -> String {
    loop {
        let event = sse.next();
        let text = event.data["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap_or("");
        if text.starts_with(prefix) {
            return text.to_string();
        }
    }
}

#[test]
fn a_program_produces_every_field_over_the_wire() {
    let door = showcase();
    frames(&door);
    question(&door);
    no_answer(&door);
    let detaching = detach(&door);
    delegation(&door);
    let canceled = open_delegation(&door);
    // Both cancels reached the agent, in order.
    let seen = send(&door, message("cancelled", json!({})), false);
    assert_eq!(
        response(&seen),
        format!("{detaching},{}", canceled["id"].as_str().unwrap())
    );
    let failed = send(&door, message("fail", json!({})), false);
    assert_eq!(failed["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(status_text(&failed), "it broke");
}

/// "The stream extension": frames ride a stream with the extension active.
fn frames(door: &Door) {
    // Frames ride a stream with the extension active, in the order written.
    let (mut sse, _) = stream(door, 9, "frames", &[("A2A-Extensions", STREAM)]);
    let events = sse.rest();
    let kinds: Vec<String> = events.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "status TASK_STATE_SUBMITTED",
            "status TASK_STATE_WORKING",
            "frame text",
            "frame thinking",
            "frame tool-call-started",
            "frame tool-call-progress",
            "frame artifact",
            "frame quota",
            "frame suggested-prompt",
            "status TASK_STATE_WORKING",
            "artifact response",
            "status TASK_STATE_COMPLETED",
        ]
    );
    let frames: Vec<&Value> = events[2..9]
        .iter()
        .map(|e| &e.data["result"]["message"])
        .collect();
    assert_eq!(
        frames[0]["parts"],
        json!([{"mediaType": "text/plain", "text": "hello"}])
    );
    assert_eq!(
        frames[2]["metadata"][STREAM],
        json!({"frame": "tool-call-started", "toolCallId": "call_1", "name": "search", "input": {"q": "door"}})
    );
    assert_eq!(
        frames[5]["metadata"][STREAM],
        json!({"frame": "quota", "used": 1, "limit": 10})
    );
    let progress = &events[9].data["result"]["statusUpdate"]["status"]["message"]["parts"][0];
    assert_eq!(progress["text"], "frames written");
    let done = &events[10].data["result"]["artifactUpdate"]["artifact"]["parts"][0];
    assert_eq!(done["text"], "frames done");
}

/// "Continuing a task".
fn question(door: &Door) {
    // A question, then the client's reply: input-required with its
    // prompt, and the input reaches the agent (with no images: "Images go
    // on the message that starts a task").
    let asked = send(door, message("ask", json!({})), false);
    assert_eq!(asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(asked["artifacts"][0]["artifactId"], "prompt");
    assert_eq!(response(&asked), "Which branch?");
    let reply = message("main", json!({"taskId": asked["id"]}));
    let answered = send(door, reply, false);
    assert_eq!(answered["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(response(&answered), "you said: main (0 images)");
}

/// "Task metadata": noAnswer, noAnswerBelow.
fn no_answer(door: &Door) {
    // The members that gave no answer, and an ending without one.
    let lacking = send(door, message("no-answer", json!({})), false);
    assert_eq!(lacking["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(status_text(&lacking), "no member answered");
    assert_eq!(
        lacking["metadata"],
        json!({"murmur": {"noAnswer": true, "noAnswerBelow": [
            {"member": "scout", "status": "failed"}, {"member": "mapper", "status": "timeout"}]}})
    );
}

/// "Residue items", "Task metadata": the detaching task's id.
fn detach(door: &Door) -> String {
    // A detached command: the host runs it; the cancel lists it as residue,
    // and the ending's runningCommands names it.
    let (mut sse, detaching) = stream(door, 2, "detach", &[]);
    let detached = progress_starting(&mut sse, "detached ");
    let work_id = detached.strip_prefix("detached ").unwrap().to_string();
    assert!(work_id.starts_with("wrk_"), "{work_id}");
    let canceled = rpc(door, "CancelTask", json!({"id": detaching}))["result"].clone();
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(canceled["artifacts"][0]["artifactId"], "residue");
    let item = &canceled["artifacts"][0]["parts"][0]["data"];
    assert_eq!(item["kind"], "detached_shell");
    assert_eq!(item["work_id"], work_id.as_str());
    assert_eq!(item["binary"], "sleep");
    assert_eq!(item["command"], "sleep 300");
    let commands = &canceled["metadata"]["murmur"]["runningCommands"];
    assert_eq!(commands[0]["workId"], work_id.as_str());
    assert_eq!(commands[0]["command"], "sleep 300");

    detaching
}

/// "Completion errors" and "Answers".
fn delegation(door: &Door) {
    // A delegation: awaited, its completion delivered over the wire as a
    // runtime delivers it, and the task replies with it.
    let (mut sse, delegating) = stream(door, 3, "delegate", &[]);
    let awaiting = progress_starting(&mut sse, "awaiting ");
    let delegation = awaiting.strip_prefix("awaiting ").unwrap().to_string();
    assert!(delegation.starts_with("dlg_"), "{delegation}");
    let session = door.session_id();
    let completion = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "c1", "role": "ROLE_USER",
                               "parts": [{"text": "the child's answer"}]}}});
    let headers = [
        ("x-murmur-task-origin", "completion"),
        ("x-murmur-completion-session", session.as_str()),
        ("x-murmur-delegation-id", delegation.as_str()),
    ];
    let received = door.rpc(&completion.to_string(), &headers).json();
    assert_eq!(
        received["result"]["message"]["parts"][0]["data"],
        json!({"delegation_id": delegation, "received": true})
    );
    let kinds: Vec<String> = sse.rest().iter().map(kind).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["artifact response", "status TASK_STATE_COMPLETED"]
    );
    let delegated = settle(door, None, &delegating);
    let said = response(&delegated);
    assert!(said.starts_with("child said: {"), "{said}");
    assert!(said.contains("the child's answer"), "{said}");
}

/// "Residue items": the cancelled task.
fn open_delegation(door: &Door) -> Value {
    // A delegation still open when its task is cancelled is residue.
    let (mut sse, open_task) = stream(door, 4, "delegate again", &[]);
    let awaiting = progress_starting(&mut sse, "awaiting ");
    let open = awaiting.strip_prefix("awaiting ").unwrap();
    let canceled = rpc(door, "CancelTask", json!({"id": open_task}))["result"].clone();
    let items: Vec<&Value> = canceled["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["data"])
        .collect();
    let delegation_item = items
        .iter()
        .find(|i| i["kind"] == "delegation")
        .expect("the delegation is residue");
    assert_eq!(delegation_item["delegation_id"], open);
    assert_eq!(delegation_item["capsule"], "child");
    assert_eq!(delegation_item["version"], "1.0.0");
    assert_eq!(
        delegation_item["child_workdir"],
        "/tmp/murmur-children/child-1"
    );

    canceled
}

/// docs/agents.md "Faults": lines that are no protocol are ignored, a
/// process that ends fails the task it held, and the next task starts
/// another.
#[test]
fn the_agent_s_faults_stay_with_it() {
    let door = showcase();
    let garbage = send(&door, message("garbage", json!({})), false);
    assert_eq!(response(&garbage), "garbage sent");
    let before = response(&send(&door, message("pid", json!({})), false)).to_string();
    let crashed = send(&door, message("crash", json!({})), false);
    assert_eq!(crashed["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(status_text(&crashed), "the agent ended (exit status 3)");
    let after = send(&door, message("pid", json!({})), false);
    assert_eq!(after["status"]["state"], "TASK_STATE_COMPLETED");
    assert_ne!(response(&after), before);
}

/// docs/agents.md, "Completions, for a runtime": on an authenticated
/// parent, the runtime mints the child a member token reaching SendMessage
/// (the control surface's members), and the child's completion carries it
/// to the task that awaits the delegation; without a token it is refused
/// as any request is.
#[test]
fn a_member_token_carries_a_completion_to_an_authenticated_parent() {
    let door = showcase_with("network:\n  authentication:\n    scheme: bearer\n");
    let operator = door.token("operator");
    let control = std::fs::read_to_string(door.state.path().join("control-token")).unwrap();
    let minted = door.request(
        "POST",
        "/.well-known/murmur/control/members",
        &[
            ("authorization", &format!("Bearer {}", control.trim())),
            ("content-type", "application/json"),
        ],
        json!({"caller": "child", "scopes": ["SendMessage"]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(minted.status, 201, "{}", minted.text());
    let child = minted.json()["token"].as_str().unwrap().to_string();
    let bearer = format!("Bearer {operator}");
    let (mut sse, _) = stream(&door, 5, "delegate", &[("Authorization", &bearer)]);
    let awaiting = progress_starting(&mut sse, "awaiting ");
    let delegation = awaiting.strip_prefix("awaiting ").unwrap().to_string();
    let session = door.session_id();
    let completion = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "c1", "role": "ROLE_USER",
                               "parts": [{"text": "from the child"}]}}});
    let headers = |auth: Option<&str>| {
        let mut headers = vec![
            ("x-murmur-task-origin", "completion".to_string()),
            ("x-murmur-completion-session", session.clone()),
            ("x-murmur-delegation-id", delegation.clone()),
        ];
        if let Some(auth) = auth {
            headers.push(("Authorization", format!("Bearer {auth}")));
        }
        headers
    };
    let send = |auth: Option<&str>| {
        let headers = headers(auth);
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        door.rpc(&completion.to_string(), &headers)
    };
    assert_eq!(send(None).status, 401);
    let received = send(Some(&child)).json();
    assert_eq!(
        received["result"]["message"]["parts"][0]["data"],
        json!({"delegation_id": delegation, "received": true}),
        "{received}"
    );
    let events = sse.rest();
    let said =
        events[events.len() - 2].data["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"]
            .as_str()
            .unwrap();
    assert!(said.contains("from the child"), "{said}");
}
