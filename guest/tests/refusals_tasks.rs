//! The task methods' refusals natively ("ListTasks", "GetTask",
//! "SubscribeToTask", "Continuing a task", "Errors"): the exact code, message
//! and ErrorInfo the end-to-end tests in `tests/listing.rs`, `tests/tasks.rs`
//! and `tests/streams.rs` assert, against tasks the fake host holds in the
//! state each refusal names.

use crate::common;

use common::{FakeHost, a2a_error, call, invalid};
use murmur_door_guest::imports::model::TaskState;
use serde_json::{Value, json};

/// A JSON-RPC request with id 1; the answer, checked to be one JSON body.
fn rpc(host: &FakeHost, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let (response, answer) = call(host, &[], &body.to_string());
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    answer
}

/// SendMessage of one text part with `extra`'s members merged into the
/// message.
fn send(host: &FakeHost, text: &str, extra: Value) -> Value {
    let mut message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]});
    for (key, value) in extra.as_object().unwrap() {
        message[key] = value.clone();
    }
    rpc(host, "SendMessage", json!({"message": message}))
}

fn not_found(task_id: &str) -> Value {
    a2a_error(
        -32001,
        "Task not found",
        "TASK_NOT_FOUND",
        json!({"taskId": task_id}),
    )
}

// "ListTasks": the params are read in order and the first one refused
// answers -32602, naming it; every spelling of "no filter" and the members
// it ignores are served.
#[test]
fn each_param_refused_with_its_message_first_refused_answers() {
    let host = FakeHost::new(false);
    let context = "Invalid params: contextId must be a string";
    let status = "Invalid params: status must be a TASK_STATE_* name";
    let page_size = "Invalid params: pageSize must be an integer from 1";
    let page_token = "Invalid params: pageToken is not a page token this door answered";
    let after = "statusTimestampAfter must be an RFC 3339 timestamp, such as 2026-10-13T09:00:00Z";
    let artifacts = "Invalid params: includeArtifacts must be a boolean";
    // A token shaped like the door's but naming no task position: base64 of
    // "12:ctx_x".
    let forged = "MTI6Y3R4X3g=";
    for (params, message) in [
        (json!({"contextId": 5}), context),
        (json!({"contextId": null}), context),
        (json!({"contextId": ["ctx"]}), context),
        (
            json!({"contextId": 5, "status": "nope", "pageSize": 0, "pageToken": "x",
                   "statusTimestampAfter": "x", "includeArtifacts": "x"}),
            context,
        ),
        (json!({"status": "TASK_STATE_NOPE"}), status),
        (json!({"status": "working"}), status),
        (json!({"status": "task_state_working"}), status),
        (json!({"status": 3}), status),
        (json!({"status": ""}), status),
        (
            json!({"status": "completed", "pageSize": 0, "pageToken": "x",
                   "statusTimestampAfter": "x", "includeArtifacts": "x"}),
            status,
        ),
        (json!({"pageSize": 0}), page_size),
        (json!({"pageSize": -1}), page_size),
        (json!({"pageSize": 1.5}), page_size),
        (json!({"pageSize": "5"}), page_size),
        (json!({"pageSize": true}), page_size),
        (
            json!({"pageSize": 0, "pageToken": "x", "statusTimestampAfter": "x",
                   "includeArtifacts": "x"}),
            page_size,
        ),
        (json!({"pageToken": "nope"}), page_token),
        (json!({"pageToken": 5}), page_token),
        (json!({"pageToken": forged}), page_token),
        (
            json!({"pageToken": "nope", "statusTimestampAfter": "x", "includeArtifacts": "x"}),
            page_token,
        ),
        (json!({"statusTimestampAfter": "yesterday"}), after),
        (json!({"statusTimestampAfter": "2026-10-13"}), after),
        (
            json!({"statusTimestampAfter": "2026-10-13T09:00:00"}),
            after,
        ),
        (json!({"statusTimestampAfter": 1760346000}), after),
        (
            json!({"statusTimestampAfter": "x", "includeArtifacts": "x"}),
            after,
        ),
        (json!({"includeArtifacts": "true"}), artifacts),
        (json!({"includeArtifacts": 1}), artifacts),
    ] {
        let answer = rpc(&host, "ListTasks", params.clone());
        assert_eq!(
            answer,
            json!({"jsonrpc": "2.0", "id": 1, "error": invalid(message)}),
            "{params}"
        );
    }
    let everything = json!({"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0});
    for params in [
        json!({}),
        json!({"contextId": "", "status": "TASK_STATE_UNSPECIFIED", "pageToken": "",
               "statusTimestampAfter": null, "includeArtifacts": false}),
        json!({"historyLength": "any", "tenant": "", "other": {"x": 1}}),
    ] {
        assert_eq!(
            rpc(&host, "ListTasks", params.clone())["result"],
            everything,
            "{params}"
        );
    }
}

// "ListTasks": the four members are always present, in the reference's
// order, even when the caller sees no task.
#[test]
fn an_empty_listing() {
    let host = FakeHost::new(false);
    let (response, _) = call(
        &host,
        &[],
        r#"{"jsonrpc":"2.0","id":7,"method":"ListTasks","params":{}}"#,
    );
    assert_eq!(response.status, 200);
    assert_eq!(
        String::from_utf8(response.body).unwrap(),
        r#"{"jsonrpc":"2.0","id":7,"result":{"tasks":[],"nextPageToken":"","pageSize":50,"totalSize":0}}"#
    );
}

// "GetTask": an id is required ("GetTask requires an id"); one never held is
// -32001 naming it; historyLength is accepted and ignored.
#[test]
fn get_task() {
    let host = FakeHost::new(false);
    for params in [json!({}), json!({"id": ""}), json!({"id": 5})] {
        assert_eq!(
            rpc(&host, "GetTask", params)["error"],
            invalid("GetTask requires an id")
        );
    }
    let never = "tsk_0000000000000000000000000000beef";
    assert_eq!(
        rpc(&host, "GetTask", json!({"id": never}))["error"],
        not_found(never)
    );
    let id = host.hold(None, TaskState::Completed, None, Some("x"));
    assert_eq!(
        rpc(&host, "GetTask", json!({"id": id, "historyLength": 3}))["result"]["id"],
        id
    );
}

// "GetTask" and "Errors": CancelTask requires an id; a live task is answered
// canceled; one that had ended is -32002 naming the state it ended in, and is
// left unchanged.
#[test]
fn cancel_task() {
    let host = FakeHost::new(false);
    for params in [json!({}), json!({"id": ""})] {
        assert_eq!(
            rpc(&host, "CancelTask", params)["error"],
            invalid("CancelTask requires an id")
        );
    }
    let live = host.hold(None, TaskState::Working, None, None);
    let canceled = rpc(&host, "CancelTask", json!({"id": live}))["result"].clone();
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    assert!(canceled.get("artifacts").is_none(), "{canceled}");
    assert_eq!(
        rpc(&host, "CancelTask", json!({"id": live}))["error"],
        a2a_error(
            -32002,
            "Task cannot be canceled: it is already TASK_STATE_CANCELED",
            "TASK_NOT_CANCELABLE",
            json!({"taskId": live, "state": "TASK_STATE_CANCELED"}),
        )
    );
    let done = host.hold(
        None,
        TaskState::Completed,
        Some("task completed"),
        Some("ok"),
    );
    let before = rpc(&host, "GetTask", json!({"id": done}))["result"].clone();
    assert_eq!(
        rpc(&host, "CancelTask", json!({"id": done}))["error"]["data"][0]["metadata"],
        json!({"taskId": done, "state": "TASK_STATE_COMPLETED"})
    );
    assert_eq!(rpc(&host, "GetTask", json!({"id": done}))["result"], before);
}

// "Continuing a task": a taskId never held is -32001; a task that has ended,
// or one not waiting for input, is -32004 naming its state; a waiting task in
// another contextId is -32602; "" names no task. Nothing is delivered.
#[test]
fn messages_naming_tasks_that_do_not_take_them() {
    let host = FakeHost::new(false);
    let never = "tsk_0000000000000000000000000000dead";
    assert_eq!(
        send(&host, "hello", json!({"taskId": never}))["error"],
        not_found(never)
    );
    let ended = host.hold(None, TaskState::Completed, None, Some("ok"));
    assert_eq!(
        send(&host, "hello", json!({"taskId": ended}))["error"],
        a2a_error(
            -32004,
            &format!(
                "Task {ended} has ended in TASK_STATE_COMPLETED; send a new message without taskId, in the same contextId, to start a new task"
            ),
            "UNSUPPORTED_OPERATION",
            json!({"taskId": ended, "state": "TASK_STATE_COMPLETED"}),
        )
    );
    let working = host.hold(None, TaskState::Working, None, None);
    assert_eq!(
        send(&host, "hello", json!({"taskId": working}))["error"],
        a2a_error(
            -32004,
            &format!(
                "Task {working} is TASK_STATE_WORKING; a task takes a message only while it waits in TASK_STATE_INPUT_REQUIRED"
            ),
            "UNSUPPORTED_OPERATION",
            json!({"taskId": working, "state": "TASK_STATE_WORKING"}),
        )
    );
    let queued = host.hold(None, TaskState::Submitted, None, None);
    assert_eq!(
        send(&host, "hello", json!({"taskId": queued}))["error"]["data"][0]["metadata"],
        json!({"taskId": queued, "state": "TASK_STATE_SUBMITTED"})
    );
    let waiting = host.hold(None, TaskState::InputRequired, None, None);
    assert_eq!(
        send(
            &host,
            "yes",
            json!({"taskId": waiting, "contextId": "ctx_other"})
        )["error"],
        invalid(&format!(
            "Invalid params: message.contextId ctx_other is not the context of task {waiting}, which waits for input"
        ))
    );
    assert!(host.replies.borrow().is_empty());
    assert!(host.started.borrow().is_empty());

    let fresh = send(&host, "reply fresh", json!({"taskId": ""}));
    assert_eq!(
        fresh["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_ne!(fresh["result"]["task"]["id"], json!(working));
    assert_eq!(host.started.borrow().len(), 1);
}

// "SubscribeToTask": no id or "" is -32602 "SubscribeToTask requires an id";
// a task never held is -32001; one that has ended is -32004 with taskId and
// state. Each refusal is one JSON body; no stream opens.
#[test]
fn subscribe_refusals_are_json_bodies() {
    let host = FakeHost::new(false);
    for params in [json!({}), json!({"id": ""})] {
        assert_eq!(
            rpc(&host, "SubscribeToTask", params)["error"],
            invalid("SubscribeToTask requires an id")
        );
    }
    let never = "tsk_0000000000000000000000000000dead";
    assert_eq!(
        rpc(&host, "SubscribeToTask", json!({"id": never}))["error"],
        not_found(never)
    );
    let id = host.hold(None, TaskState::Completed, None, Some("ok"));
    assert_eq!(
        rpc(&host, "SubscribeToTask", json!({"id": id}))["error"],
        a2a_error(
            -32004,
            &format!(
                "Task {id} has ended in TASK_STATE_COMPLETED; there is nothing left to follow"
            ),
            "UNSUPPORTED_OPERATION",
            json!({"taskId": id, "state": "TASK_STATE_COMPLETED"}),
        )
    );
}
