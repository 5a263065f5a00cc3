//! The runtime's side of the door (issue 34): what the session itself
//! produces reaches the wire as the reference shows it. A cancel lists the
//! delegations it ends ("Residue items"); a task a member left unanswered
//! says so ("Task metadata"); images reach the agent ("Image parts"). A
//! detached command's result and a resumed launch's report of lost
//! commands are tasks of the session ("A task the runtime starts itself"):
//! the script agent runs no command, so `tests/hosting.rs` checks those
//! through the library's own agent.

use crate::common;

use std::time::Duration;

use base64::Engine;
use common::{Door, failed_task, id};
use serde_json::json;

const QUEUE: &str = "name: runtime\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n";

/// murmur.StopSession finds nothing the session still runs.
fn assert_nothing_runs(door: &Door) {
    assert_eq!(
        door.result(None, "murmur.StopSession", json!({}))["residue"],
        json!([])
    );
}

/// A task that delegates to `my-worker` at `version`, then works on: its
/// id, once the delegation is recorded.
fn delegating(door: &Door, version: &str) -> String {
    let task = door.send_task(
        None,
        &format!("delegate my-worker {version}\nsleep 20000"),
        json!({"configuration": {"returnImmediately": true}}),
    );
    let task_id = id(&task);
    door.wait_state(None, &task_id, "TASK_STATE_WORKING");
    // The script records the delegation as it starts; give it the moment.
    std::thread::sleep(Duration::from_millis(100));
    task_id
}

/// "Residue items": a cancelled task's residue artifact carries each
/// delegation it ends as one data part, its five keys in the reference's
/// order; murmur.StopSession lists the same item (its keys sorted).
#[test]
fn a_cancel_lists_each_delegation_it_ends() {
    let door = Door::start(QUEUE);
    let task_id = delegating(&door, "0.1.0");
    let canceled = door.result(None, "CancelTask", json!({"id": task_id}));
    let artifact = &canceled["artifacts"][0];
    assert_eq!(artifact["artifactId"], "residue");
    let data = &artifact["parts"][0]["data"];
    let keys: Vec<&str> = data
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "kind",
            "delegation_id",
            "capsule",
            "version",
            "child_session_id",
            "child_workdir"
        ]
    );
    assert_eq!(data["kind"], "delegation");
    assert_eq!(data["capsule"], "my-worker");
    assert_eq!(data["version"], "0.1.0");
    let delegation_id = data["delegation_id"].as_str().unwrap();
    assert!(
        delegation_id.starts_with("dlg_") && delegation_id.len() == 36,
        "{data}"
    );
    assert!(
        data["child_session_id"]
            .as_str()
            .unwrap()
            .starts_with("ses_"),
        "{data}"
    );
    assert!(
        data["child_workdir"].as_str().unwrap().starts_with('/'),
        "{data}"
    );
    assert_eq!(artifact["parts"][0]["mediaType"], "application/json");
    assert_eq!(artifact["parts"].as_array().unwrap().len(), 1);

    // Through murmur.StopSession: the item, as the stop lists it.
    delegating(&door, "0.2.0");
    let stopped = door.result(None, "murmur.StopSession", json!({}));
    let residue = stopped["residue"].as_array().unwrap();
    assert_eq!(residue.len(), 1, "{stopped}");
    let keys: Vec<&str> = residue[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "capsule",
            "child_session_id",
            "child_workdir",
            "delegation_id",
            "kind",
            "version"
        ]
    );
    assert_eq!(residue[0]["version"], "0.2.0");
    // Ended by the stop: a second stop has nothing left.
    assert_nothing_runs(&door);
}

/// "Task metadata": a task a member ended with end-without-answer is
/// failed with `noAnswer: true`, and `noAnswerBelow` names the members
/// that gave none; neither is there on a live task or an ordinary one.
#[test]
fn a_task_says_which_answers_it_lacks_once_it_ends() {
    let door = Door::start(QUEUE);
    let task = door.send_task(
        None,
        "no-answer q timed_out\nsleep 300\nend-without-answer q gave no answer",
        json!({"configuration": {"returnImmediately": true}}),
    );
    let task_id = id(&task);
    let working = door.wait_state(None, &task_id, "TASK_STATE_WORKING");
    assert_eq!(working.get("metadata"), None, "{working}");
    let failed = door.wait_state(None, &task_id, "TASK_STATE_FAILED");
    let timestamp = &failed["status"]["timestamp"];
    let metadata = json!({"metadata": {"murmur": {"noAnswer": true,
        "noAnswerBelow": [{"member": "q", "status": "timed_out"}]}}});
    assert_eq!(
        failed,
        failed_task(
            &task_id,
            &failed["contextId"],
            "q gave no answer",
            timestamp,
            metadata
        )
    );
    // A completed task keeps its response, and only says what it lacks.
    let completed = door.send_task(None, "no-answer r failed\nreply partial", json!({}));
    assert_eq!(completed["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(completed["artifacts"][0]["parts"][0]["text"], "partial");
    assert_eq!(
        completed["metadata"],
        json!({"murmur": {"noAnswerBelow": [{"member": "r", "status": "failed"}]}})
    );
    let plain = door.send_task(None, "reply fine", json!({}));
    assert_eq!(plain.get("metadata"), None, "{plain}");
}

/// "Image parts": the agent receives a message's images, in part order
/// (the script agent says how many and of which types).
#[test]
fn the_agent_receives_the_images() {
    let door = Door::start(
        "name: runtime\nversion: 0.1.0\ncontext: {images: {max_bytes: 64, max_per_turn: 2}}\n",
    );
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let parts = json!([
        {"text": "images"},
        {"raw": b64(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), "mediaType": "image/png"},
        {"raw": b64(b"GIF89a.."), "mediaType": "image/gif"},
    ]);
    let task = door.send_task(None, "", json!({"message": {"parts": parts}}));
    assert_eq!(
        task["artifacts"][0]["parts"][0]["text"],
        "images: 2 (image/png, image/gif)"
    );
}
