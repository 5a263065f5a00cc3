//! Tasks through the door ("Task states", "Status timestamps", "Continuing a
//! task", "Answers", "GetTask", "Task metadata", "murmur.StopSession",
//! "Residue items", "Completion errors", "Door extension" peerTasks), driven
//! by the script agent.

use crate::common;

use common::{Door, settle};
use serde_json::{Value, json};

const SINGLE: &str = "name: my-agent\nversion: 0.1.0\n";
const QUEUE: &str = "name: my-agent\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n";

fn rpc(door: &Door, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    door.rpc(&body.to_string(), &[]).json()
}

fn send(door: &Door, text: &str, extra: Value) -> Value {
    let mut message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]});
    let mut params = json!({});
    for (key, value) in extra.as_object().unwrap() {
        if key == "configuration" {
            params["configuration"] = value.clone();
        } else {
            message[key] = value.clone();
        }
    }
    params["message"] = message;
    rpc(door, "SendMessage", params)
}

fn task_of(answer: &Value) -> Value {
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"]["task"].clone()
}

fn id_of(task: &Value) -> String {
    task["id"].as_str().unwrap().to_string()
}

fn immediately() -> Value {
    json!({"configuration": {"returnImmediately": true}})
}

/// `prefix` and 32 lowercase hex digits.
fn assert_id(id: &str, prefix: &str) {
    let hex = id
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{id} lacks {prefix}"));
    assert_eq!(hex.len(), 32, "{id}");
    assert!(
        hex.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{id}"
    );
}

/// RFC 3339 UTC with milliseconds and a Z.
fn assert_timestamp(value: &Value) {
    let text = value.as_str().unwrap();
    let bytes = text.as_bytes();
    assert_eq!(text.len(), 24, "{text}");
    assert_eq!(
        (bytes[4], bytes[10], bytes[19], bytes[23]),
        (b'-', b'T', b'.', b'Z'),
        "{text}"
    );
}

// "Answers": a bare SendMessage is held until the task settles, then answered
// with the task as GetTask reports it; the completed example's shape.
#[test]
fn a_held_send_message_answers_the_completed_task() {
    let door = Door::start(SINGLE);
    let task = task_of(&send(&door, "reply four", json!({})));
    let id = id_of(&task);
    assert_id(&id, "tsk_");
    assert_id(task["contextId"].as_str().unwrap(), "ctx_");
    assert_timestamp(&task["status"]["timestamp"]);
    assert_eq!(
        task,
        json!({"id": id, "contextId": task["contextId"],
               "status": {"state": "TASK_STATE_COMPLETED", "message": completed_message(&task), "timestamp": task["status"]["timestamp"]},
               "artifacts": [{"artifactId": "response", "name": "response", "parts": [{"text": "four", "mediaType": "text/plain"}]}]})
    );
    assert_eq!(rpc(&door, "GetTask", json!({"id": id}))["result"], task);
}

// "Answers": returnImmediately answers TASK_STATE_SUBMITTED at once; the
// context the message named is kept.
#[test]
fn return_immediately_answers_submitted() {
    let door = Door::start(SINGLE);
    let task = task_of(&send(
        &door,
        "sleep 300\nreply late",
        json!({"contextId": "ctx-client-1", "configuration": {"returnImmediately": true}}),
    ));
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(task["contextId"], "ctx-client-1");
    assert!(task.get("artifacts").is_none());
    let settled = settle(&door, None, &id_of(&task));
    assert_eq!(settled["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(settled["artifacts"][0]["parts"][0]["text"], "late");
    // returnImmediately false is the same as absent.
    let held = task_of(&send(
        &door,
        "reply now",
        json!({"configuration": {"returnImmediately": false}}),
    ));
    assert_eq!(held["status"]["state"], "TASK_STATE_COMPLETED");
}

// "GetTask": a failed task's status message is a ROLE_AGENT message named
// msg_<taskId>_status with one text part.
#[test]
fn a_failed_task_says_why() {
    let door = Door::start(SINGLE);
    let task = task_of(&send(
        &door,
        "progress warming up\nfail the driver failed",
        json!({}),
    ));
    let id = id_of(&task);
    assert_eq!(
        task["status"],
        json!({"state": "TASK_STATE_FAILED",
               "message": {"messageId": format!("msg_{id}_status"), "contextId": task["contextId"], "taskId": id,
                           "role": "ROLE_AGENT", "parts": [{"text": "the driver failed", "mediaType": "text/plain"}]},
               "timestamp": task["status"]["timestamp"]})
    );
    assert!(task.get("artifacts").is_none());
}

// "Continuing a task": a task waiting for input answers with its prompt; the
// reply names the task, is answered TASK_STATE_WORKING with
// returnImmediately, and held otherwise until the task settles again.
#[test]
fn asking_and_replying() {
    let door = Door::start(SINGLE);
    let waiting = task_of(&send(&door, "ask Which branch?", json!({})));
    let id = id_of(&waiting);
    assert_eq!(
        waiting,
        json!({"id": id, "contextId": waiting["contextId"], "status": {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": waiting["status"]["timestamp"]},
               "artifacts": [{"artifactId": "prompt", "name": "prompt", "parts": [{"text": "Which branch?", "mediaType": "text/plain"}]}]})
    );
    // A reply with another contextId is -32602.
    let answer = send(
        &door,
        "main",
        json!({"taskId": id, "contextId": "ctx_other"}),
    );
    assert_eq!(answer["error"]["code"], -32602);
    assert_eq!(
        answer["error"]["message"],
        format!(
            "Invalid params: message.contextId ctx_other is not the context of task {id}, which waits for input"
        )
    );
    // The reply's text runs as a script.
    let resumed = task_of(&send(
        &door,
        "ask And the remote?",
        json!({"taskId": id, "contextId": waiting["contextId"], "configuration": {"returnImmediately": true}}),
    ));
    assert_eq!(resumed["status"]["state"], "TASK_STATE_WORKING");
    let again = settle(&door, None, &id);
    assert_eq!(again["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(again["artifacts"][0]["parts"][0]["text"], "And the remote?");
    let done = task_of(&send(&door, "reply origin/main", json!({"taskId": id})));
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        done["artifacts"],
        json!([{"artifactId": "response", "name": "response", "parts": [{"text": "origin/main", "mediaType": "text/plain"}]}])
    );
}

// "Continuing a task": a taskId never held is -32001; a task not waiting is
// -32004 naming its state; "" names no task.
#[test]
fn messages_naming_tasks_that_do_not_take_them() {
    let door = Door::start(QUEUE);
    let never = "tsk_0000000000000000000000000000dead";
    assert_eq!(
        send(&door, "hello", json!({"taskId": never}))["error"],
        json!({"code": -32001, "message": "Task not found", "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
               "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org", "metadata": {"taskId": never}}]})
    );
    let ended = id_of(&task_of(&send(&door, "reply ok", json!({}))));
    assert_eq!(
        send(&door, "hello", json!({"taskId": ended}))["error"],
        json!({"code": -32004, "message": format!("Task {ended} has ended in TASK_STATE_COMPLETED; send a new message without taskId, in the same contextId, to start a new task"),
               "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNSUPPORTED_OPERATION",
                         "domain": "a2a-protocol.org", "metadata": {"taskId": ended, "state": "TASK_STATE_COMPLETED"}}]})
    );
    let working = id_of(&task_of(&send(&door, "sleep 2000", immediately())));
    common::wait_for(&door, None, &working, |s| s == "TASK_STATE_WORKING");
    assert_eq!(
        send(&door, "hello", json!({"taskId": working}))["error"]["message"],
        format!(
            "Task {working} is TASK_STATE_WORKING; a task takes a message only while it waits in TASK_STATE_INPUT_REQUIRED"
        )
    );
    let queued = id_of(&task_of(&send(&door, "reply queued", immediately())));
    assert_eq!(
        send(&door, "hello", json!({"taskId": queued}))["error"]["data"][0]["metadata"],
        json!({"taskId": queued, "state": "TASK_STATE_SUBMITTED"})
    );
    // taskId "" names no task: a new one.
    let fresh = task_of(&send(
        &door,
        "reply fresh",
        json!({"taskId": "", "configuration": {"returnImmediately": true}}),
    ));
    assert_ne!(id_of(&fresh), working);
}

// "Continuing a task": under single a new task while one is live is answered
// at once, TASK_STATE_REJECTED, "task rejected: capsule is busy".
#[test]
fn a_busy_capsule_rejects_new_tasks() {
    let door = Door::start(SINGLE);
    let live = id_of(&task_of(&send(&door, "sleep 5000", immediately())));
    let rejected = task_of(&send(&door, "reply never", json!({})));
    let id = id_of(&rejected);
    assert_ne!(id, live);
    assert_eq!(
        rejected["status"],
        json!({"state": "TASK_STATE_REJECTED",
               "message": {"messageId": format!("msg_{id}_status"), "contextId": rejected["contextId"], "taskId": id,
                           "role": "ROLE_AGENT", "parts": [{"text": "task rejected: capsule is busy", "mediaType": "text/plain"}]},
               "timestamp": rejected["status"]["timestamp"]})
    );
    // A reply to a waiting task does not consult capacity.
    rpc(&door, "CancelTask", json!({"id": live}));
    let waiting = id_of(&task_of(&send(&door, "ask ready?", json!({}))));
    assert_eq!(
        task_of(&send(&door, "reply yes", json!({"taskId": waiting})))["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

// "lifecycle.task_acceptance: queue": new tasks wait in order.
#[test]
fn a_queue_runs_tasks_in_order() {
    let door = Door::start(QUEUE);
    let ids: Vec<String> = (0..3)
        .map(|n| {
            id_of(&task_of(&send(
                &door,
                &format!("sleep 100\nreply {n}"),
                immediately(),
            )))
        })
        .collect();
    let last = settle(&door, None, &ids[2]);
    assert_eq!(last["artifacts"][0]["parts"][0]["text"], "2");
    for (n, id) in ids.iter().enumerate() {
        let task = rpc(&door, "GetTask", json!({"id": id}))["result"].clone();
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], n.to_string());
    }
    // Each completed after the one before it.
    let stamps: Vec<String> = ids
        .iter()
        .map(|id| {
            rpc(&door, "GetTask", json!({"id": id}))["result"]["status"]["timestamp"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        stamps[0] <= stamps[1] && stamps[1] <= stamps[2],
        "{stamps:?}"
    );
}

// "GetTask" and "Errors": CancelTask on a live task answers it canceled; on
// an ended one -32002 naming the state, the task left unchanged.
#[test]
fn cancel_task() {
    let door = Door::start(SINGLE);
    for params in [json!({}), json!({"id": ""})] {
        assert_eq!(
            rpc(&door, "CancelTask", params)["error"],
            json!({"code": -32602, "message": "CancelTask requires an id"})
        );
    }
    let live = id_of(&task_of(&send(&door, "sleep 10000", immediately())));
    let canceled = rpc(&door, "CancelTask", json!({"id": live}))["result"].clone();
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    assert!(
        canceled.get("artifacts").is_none(),
        "nothing runs, so no residue: {canceled}"
    );
    let again = rpc(&door, "CancelTask", json!({"id": live}));
    assert_eq!(
        again["error"],
        json!({"code": -32002, "message": "Task cannot be canceled: it is already TASK_STATE_CANCELED",
               "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TASK_NOT_CANCELABLE",
                         "domain": "a2a-protocol.org", "metadata": {"taskId": live, "state": "TASK_STATE_CANCELED"}}]})
    );
    let done = task_of(&send(&door, "reply ok", json!({})));
    let id = id_of(&done);
    assert_eq!(
        rpc(&door, "CancelTask", json!({"id": id}))["error"]["data"][0]["metadata"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(rpc(&door, "GetTask", json!({"id": id}))["result"], done);
}

/// Where the door's PATH finds `sleep` (the test's PATH is the door's).
fn sleep_path() -> String {
    let found = std::process::Command::new("sh")
        .args(["-c", "command -v sleep"])
        .output()
        .unwrap();
    String::from_utf8(found.stdout).unwrap().trim().to_string()
}

// "GetTask" and "Residue items": a cancel while a detached command still
// runs carries a residue artifact, its `binary` the command's first word
// as written; "Task metadata": a task that ends with one running says so
// in runningCommands, its `binary` the path.
#[test]
fn residue_and_running_commands() {
    let door = Door::start(SINGLE);
    let done = task_of(&send(&door, "detach sleep 30\nreply started", json!({})));
    let commands = &done["metadata"]["murmur"]["runningCommands"];
    assert_eq!(commands.as_array().unwrap().len(), 1, "{done}");
    assert_id(commands[0]["workId"].as_str().unwrap(), "wrk_");
    // "Task metadata": the binary's path, as `/usr/bin/bash` in the example.
    let sleep = sleep_path();
    assert_eq!(commands[0]["binary"], sleep.as_str());
    assert_eq!(commands[0]["command"], "sleep 30");
    assert!(commands[0]["runningMs"].as_u64().is_some());
    assert_eq!(done["artifacts"][0]["artifactId"], "response");

    let live = id_of(&task_of(&send(&door, "sleep 10000", immediately())));
    let canceled = rpc(&door, "CancelTask", json!({"id": live}))["result"].clone();
    let parts = canceled["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(canceled["artifacts"][0]["artifactId"], "residue");
    assert_eq!(canceled["artifacts"][0]["name"], "residue");
    assert_eq!(parts.len(), 1);
    let item = &parts[0]["data"];
    assert_eq!(parts[0]["mediaType"], "application/json");
    let keys: Vec<&String> = item.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["kind", "work_id", "binary", "command", "started_at_ms"]
    );
    assert_eq!(
        (
            item["kind"].as_str(),
            item["binary"].as_str(),
            item["command"].as_str()
        ),
        (Some("detached_shell"), Some("sleep"), Some("sleep 30"))
    );
    // The residue artifact is the same on every read.
    assert_eq!(
        rpc(&door, "GetTask", json!({"id": live}))["result"]["artifacts"],
        canceled["artifacts"]
    );
}

// "murmur.StopSession": cancels every live task, sorted, with the residue;
// a second call answers canceled [].
#[test]
fn stop_session() {
    let door = Door::start(QUEUE);
    task_of(&send(&door, "detach sleep 30\nreply ok", json!({})));
    let mut live: Vec<String> = (0..3)
        .map(|_| id_of(&task_of(&send(&door, "sleep 10000", immediately()))))
        .collect();
    live.sort();
    let reply = door.rpc(
        r#"{"jsonrpc":"2.0","id":1,"method":"murmur.StopSession","params":{}}"#,
        &[],
    );
    let result = reply.json()["result"].clone();
    assert_eq!(result["canceled"], json!(live));
    let keys: Vec<&String> = result.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["canceled", "residue", "session_id"]);
    let residue = result["residue"].as_array().unwrap();
    assert_eq!(residue.len(), 1);
    let keys: Vec<&String> = residue[0].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["binary", "command", "kind", "started_at_ms", "work_id"]
    );
    for id in &live {
        assert_eq!(
            rpc(&door, "GetTask", json!({"id": id}))["result"]["status"]["state"],
            "TASK_STATE_CANCELED"
        );
    }
    let again = rpc(&door, "murmur.StopSession", json!({}));
    assert_eq!(again["result"]["canceled"], json!([]));
    // The door still answers and takes tasks.
    assert_eq!(
        task_of(&send(&door, "reply still here", json!({})))["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

// "Door extension" peerTasks and "Runtime headers": a capsule that accepts
// peer tasks serves x-murmur-task-origin: peer.
#[test]
fn peer_tasks_when_accepted() {
    let door = Door::start("name: p\nversion: 0.1.0\nexports: {peer_tasks: {accept: true}}\n");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "reply from a peer"}]}}});
    let reply = door.rpc(
        &body.to_string(),
        &[
            ("x-murmur-task-origin", "peer"),
            ("x-murmur-task-trust", "trusted"),
        ],
    );
    assert_eq!(
        reply.json()["result"]["task"]["artifacts"][0]["parts"][0]["text"],
        "from a peer"
    );
}

// "Completion errors" and "Answers": a completion for a delegation a task
// awaits is answered with the msg_<delegation>_received message, and the
// task goes on.
#[test]
fn an_awaited_completion_is_delivered() {
    let door = Door::start(SINGLE);
    let waiting = task_of(&send(
        &door,
        "await dlg_7b31de\nreply delivered",
        immediately(),
    ));
    let id = id_of(&waiting);
    common::wait_for(&door, None, &id, |s| s == "TASK_STATE_WORKING");
    let session = door.get("/.well-known/agent-card.json").json()["capabilities"]["extensions"][1]
        ["params"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "c1", "role": "ROLE_USER", "parts": [{"text": "the child's answer"}]}}});
    let headers = [
        ("x-murmur-task-origin", "completion"),
        ("x-murmur-completion-session", session.as_str()),
        ("x-murmur-delegation-id", "dlg_7b31de"),
    ];
    let reply = door.rpc(&body.to_string(), &headers).json();
    assert_eq!(
        reply["result"],
        json!({"message": {"messageId": "msg_dlg_7b31de_received", "contextId": waiting["contextId"], "role": "ROLE_AGENT",
                           "parts": [{"data": {"delegation_id": "dlg_7b31de", "received": true}, "mediaType": "application/json"}]}})
    );
    assert_eq!(
        settle(&door, None, &id)["artifacts"][0]["parts"][0]["text"],
        "delivered"
    );
    // Delivered once: a second completion is not awaited.
    let again = door.rpc(&body.to_string(), &headers).json();
    assert_eq!(again["error"]["code"], -31002);
}

/// The reference's completed status message for `task` ("A bare
/// SendMessage whose task completes", "GetTask", "ListTasks"), key for key.
fn completed_message(task: &Value) -> Value {
    json!({"messageId": format!("msg_{}_status", task["id"].as_str().unwrap()),
        "contextId": task["contextId"], "taskId": task["id"], "role": "ROLE_AGENT",
        "parts": [{"text": "task completed", "mediaType": "text/plain"}]})
}

/// A stream's last statusUpdate message.
fn terminal_message(events: &[common::SseEvent]) -> Value {
    let last = events.last().expect("events");
    let update = &last.data["result"]["statusUpdate"];
    assert_eq!(
        update["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        last.data
    );
    update["status"]["message"].clone()
}

// Issue 10: a completed task's status says "task completed" on every
// surface — the bare SendMessage answer, GetTask, ListTasks with and
// without includeArtifacts, the terminal status of SendStreamingMessage,
// SubscribeToTask and murmur.WatchSession, and after --resume — in the key
// order of the reference's examples.
#[test]
fn a_completed_task_says_task_completed_everywhere() {
    let door = Door::start(QUEUE);
    let watch = r#"{"jsonrpc":"2.0","id":"w","method":"murmur.WatchSession","params":{}}"#;
    let mut watching = door.open_stream(watch, &[]);
    let held = task_of(&send(&door, "reply four", json!({})));
    let expected = completed_message(&held);
    assert_eq!(
        common::ordered(&held["status"]["message"].to_string()),
        expected.to_string()
    );
    assert_eq!(held["status"]["message"], expected);
    let got = rpc(&door, "GetTask", json!({"id": held["id"]}))["result"].clone();
    assert_eq!(got, held);
    for include in [false, true] {
        let page = rpc(&door, "ListTasks", json!({"includeArtifacts": include}));
        assert_eq!(
            page["result"]["tasks"][0]["status"], held["status"],
            "{page}"
        );
    }
    // The streams' terminal status carries it too (a stream's text part puts
    // mediaType first, as the reference's stream examples do).
    let stream_message = |task: &Value| {
        let mut message = completed_message(task);
        message["parts"] = json!([{"mediaType": "text/plain", "text": "task completed"}]);
        message
    };
    let streaming = r#"{"jsonrpc":"2.0","id":2,"method":"SendStreamingMessage","params":{"message":{"messageId":"m2","role":"ROLE_USER","parts":[{"text":"sleep 300\nreply five"}]}}}"#;
    let mut sse = door.open_stream(streaming, &[]);
    let opened = sse.next();
    let task = opened.data["result"]["task"].clone();
    let subscribe = json!({"jsonrpc": "2.0", "id": 3, "method": "SubscribeToTask", "params": {"id": task["id"]}});
    let mut subscribed = door.open_stream(&subscribe.to_string(), &[]);
    assert_eq!(terminal_message(&sse.rest()), stream_message(&task));
    assert_eq!(terminal_message(&subscribed.rest()), stream_message(&task));
    let mut statuses = Vec::new();
    while let Some(event) = watching.next_within(std::time::Duration::from_millis(500)) {
        statuses.push(event);
    }
    let completed: Vec<&Value> = statuses
        .iter()
        .map(|e| &e.data["result"]["statusUpdate"])
        .filter(|u| u["status"]["state"] == "TASK_STATE_COMPLETED")
        .collect();
    assert_eq!(completed.len(), 2);
    assert_eq!(completed[0]["status"]["message"], stream_message(&held));
    assert_eq!(completed[1]["status"]["message"], stream_message(&task));
    // After --resume, as before.
    let door = door.restart(&["--resume"]);
    assert_eq!(
        rpc(&door, "GetTask", json!({"id": held["id"]}))["result"],
        held
    );
}
