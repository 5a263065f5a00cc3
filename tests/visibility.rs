//! Who sees a task ("Who sees a task", "GetTask", "ListTasks", "Continuing a
//! task", "Referenced tasks"): a public door's callers and the operator see
//! every task; a declared credential's token sees only the tasks its requests
//! started; a task not seen is answered exactly like an id the session never
//! held, in GetTask, CancelTask, a message's taskId and referenceTaskIds, and
//! ListTasks, page tokens included.

use crate::common;

use common::{Door, id, ids, not_found};
use serde_json::{Value, json};

/// Two credentials that may start tasks, one that may only read, and the
/// operator. `queue`, so tasks started back to back all run.
const AUTHENTICATED: &str = "
name: shared
version: 0.1.0
lifecycle: {task_acceptance: queue}
network:
  authentication:
    scheme: bearer
    credentials:
      alice: {scopes: [SendMessage, GetTask, ListTasks, CancelTask]}
      bob: {scopes: [SendMessage, GetTask, ListTasks, CancelTask]}
      auditor: {scopes: [GetTask, ListTasks, CancelTask]}
";

const PUBLIC: &str = "name: open\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n";

/// An id the session never held.
const NEVER: &str = "tsk_00000000000000000000000000000000";

/// -32001 exactly as the reference writes it.
struct Tokens {
    operator: String,
    alice: String,
    bob: String,
    auditor: String,
}

fn tokens(door: &Door) -> Tokens {
    Tokens {
        operator: door.token("operator"),
        alice: door.token("alice"),
        bob: door.token("bob"),
        auditor: door.token("auditor"),
    }
}

/// A task `token` starts and that completes with `answer`.
fn completed(door: &Door, token: &str, answer: &str, extra: Value) -> String {
    let task = door.send_task(Some(token), &format!("reply {answer}"), extra);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    id(&task)
}

fn list(door: &Door, token: &str, params: Value) -> Value {
    door.result(Some(token), "ListTasks", params)
}

/// The response artifact's text of a completed task.
fn response(task: &Value) -> &str {
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["artifactId"], "response", "{task}");
    task["artifacts"][0]["parts"][0]["text"].as_str().unwrap()
}

// "Who sees a task", "GetTask": a credential's token reaches the tasks its
// requests started; another credential's task, the operator's, and an id
// never held are all -32001 with metadata.taskId. The operator sees every
// task. A scope reaches a method, not a task: the auditor sees none.
#[test]
fn get_task_answers_only_a_task_the_caller_sees() {
    let door = Door::start(AUTHENTICATED);
    let t = tokens(&door);
    let a = completed(&door, &t.alice, "from alice", json!({}));
    let b = completed(&door, &t.bob, "from bob", json!({}));
    let o = completed(&door, &t.operator, "from the operator", json!({}));
    let never = NEVER.to_string();

    for (token, sees, unseen) in [
        (&t.alice, vec![&a], vec![&b, &o]),
        (&t.bob, vec![&b], vec![&a, &o]),
        (&t.auditor, vec![], vec![&a, &b, &o]),
        (&t.operator, vec![&a, &b, &o], vec![]),
    ] {
        for task in sees {
            let seen = door.get_task(Some(token), task);
            assert_eq!(seen, door.get_task(Some(&t.operator), task));
            assert_eq!(seen["id"], json!(task));
        }
        for task in unseen.into_iter().chain([&never]) {
            let error = door.error(Some(token), "GetTask", json!({"id": task}));
            assert_eq!(error, not_found(task), "{task}");
        }
    }
    assert_eq!(response(&door.get_task(Some(&t.alice), &a)), "from alice");
    assert_eq!(response(&door.get_task(Some(&t.operator), &b)), "from bob");
}

// "ListTasks": one page of the tasks the caller sees; totalSize counts only
// them, whatever the filters.
#[test]
fn list_tasks_lists_only_the_tasks_the_caller_sees() {
    let door = Door::start(AUTHENTICATED);
    let t = tokens(&door);
    let shared = json!({"message": {"contextId": "ctx-shared"}});
    let a1 = completed(&door, &t.alice, "a1", shared.clone());
    let b1 = completed(&door, &t.bob, "b1", shared.clone());
    let o1 = completed(&door, &t.operator, "o1", shared.clone());
    let a2 = completed(&door, &t.alice, "a2", json!({}));
    let failed = door.send_task(Some(&t.bob), "fail no", json!({}));
    assert_eq!(failed["status"]["state"], "TASK_STATE_FAILED");
    let b2 = id(&failed);

    for (token, params, expected) in [
        (&t.alice, json!({}), vec![&a2, &a1]),
        (&t.bob, json!({}), vec![&b2, &b1]),
        (&t.auditor, json!({}), vec![]),
        (&t.operator, json!({}), vec![&b2, &a2, &o1, &b1, &a1]),
        (&t.alice, json!({"contextId": "ctx-shared"}), vec![&a1]),
        (&t.bob, json!({"contextId": "ctx-shared"}), vec![&b1]),
        (&t.auditor, json!({"contextId": "ctx-shared"}), vec![]),
        (
            &t.operator,
            json!({"contextId": "ctx-shared"}),
            vec![&o1, &b1, &a1],
        ),
        (
            &t.alice,
            json!({"status": "TASK_STATE_COMPLETED"}),
            vec![&a2, &a1],
        ),
        (&t.alice, json!({"status": "TASK_STATE_FAILED"}), vec![]),
        (&t.bob, json!({"status": "TASK_STATE_FAILED"}), vec![&b2]),
        (
            &t.alice,
            json!({"statusTimestampAfter": "1970-01-01T00:00:00Z"}),
            vec![&a2, &a1],
        ),
        (&t.alice, json!({"includeArtifacts": true}), vec![&a2, &a1]),
    ] {
        let page = list(&door, token, params.clone());
        assert_eq!(ids(&page), expected, "{params}");
        assert_eq!(page["totalSize"], expected.len(), "{params}");
        assert_eq!(page["nextPageToken"], "", "{params}");
        // Each task exactly as GetTask answers it to the same caller.
        for task in page["tasks"].as_array().unwrap() {
            let mut got = door.get_task(Some(token), task["id"].as_str().unwrap());
            if params.get("includeArtifacts").is_none() {
                got.as_object_mut().unwrap().remove("artifacts");
            }
            assert_eq!(*task, got);
        }
    }
}

// "Who sees a task", "GetTask": CancelTask reaches only a task the caller
// sees. An unseen live task is -32001 and keeps running; an unseen ended one
// is -32001 too, never -32002, which would tell its state. The operator
// reaches every task.
#[test]
fn cancel_task_reaches_only_a_task_the_caller_sees() {
    let door = Door::start(AUTHENTICATED);
    let t = tokens(&door);
    let sleep = json!({"configuration": {"returnImmediately": true}});
    let live = id(&door.send_task(Some(&t.alice), "sleep 60000", sleep.clone()));
    door.wait_state(Some(&t.alice), &live, "TASK_STATE_WORKING");
    for token in [&t.bob, &t.auditor] {
        let error = door.error(Some(token), "CancelTask", json!({"id": live}));
        assert_eq!(error, not_found(&live));
        let error = door.error(Some(token), "CancelTask", json!({"id": NEVER}));
        assert_eq!(error, not_found(NEVER));
    }
    let still = door.get_task(Some(&t.alice), &live);
    assert_eq!(still["status"]["state"], "TASK_STATE_WORKING");

    let canceled = door.result(Some(&t.alice), "CancelTask", json!({"id": live}));
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(canceled, door.get_task(Some(&t.alice), &live));
    for token in [&t.bob, &t.auditor] {
        let error = door.error(Some(token), "CancelTask", json!({"id": live}));
        assert_eq!(error, not_found(&live));
    }
    // The owner and the operator are told it has ended.
    for token in [&t.alice, &t.operator] {
        let error = door.error(Some(token), "CancelTask", json!({"id": live}));
        assert_eq!(error["code"], -32002, "{error}");
        assert_eq!(error["data"][0]["metadata"]["taskId"], json!(live));
        assert_eq!(error["data"][0]["metadata"]["state"], "TASK_STATE_CANCELED");
    }

    // The operator cancels bob's task.
    let bobs = id(&door.send_task(Some(&t.bob), "sleep 60000", sleep));
    door.wait_state(Some(&t.bob), &bobs, "TASK_STATE_WORKING");
    assert_eq!(
        door.error(Some(&t.alice), "CancelTask", json!({"id": bobs})),
        not_found(&bobs)
    );
    let canceled = door.result(Some(&t.operator), "CancelTask", json!({"id": bobs}));
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(
        door.get_task(Some(&t.bob), &bobs)["status"]["state"],
        "TASK_STATE_CANCELED"
    );
}

// "Continuing a task": a message whose taskId names a task the sender does
// not see is -32001, whatever the task's state, and delivers nothing. The
// operator may reply to any waiting task.
#[test]
fn a_message_naming_an_unseen_task_is_not_found() {
    let door = Door::start(AUTHENTICATED);
    let t = tokens(&door);
    let asked = door.send_task(Some(&t.alice), "ask Which branch?", json!({}));
    assert_eq!(asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let waiting = id(&asked);
    let before = door.get_task(Some(&t.alice), &waiting);

    let continuing = |task: &str| json!({"message": {"taskId": task}});
    let answer = door.send(Some(&t.bob), "reply stolen", continuing(&waiting));
    assert_eq!(answer["error"], not_found(&waiting), "{answer}");
    let answer = door.send(Some(&t.bob), "reply stolen", continuing(NEVER));
    assert_eq!(answer["error"], not_found(NEVER), "{answer}");
    // Also with the task's own contextId: still not found, not -32602.
    let answer = door.send(
        Some(&t.bob),
        "reply stolen",
        json!({"message": {"taskId": waiting, "contextId": before["contextId"]}}),
    );
    assert_eq!(answer["error"], not_found(&waiting), "{answer}");
    // With another contextId: -32001, not the -32602 that would tell it waits.
    let answer = door.send(
        Some(&t.bob),
        "reply stolen",
        json!({"message": {"taskId": waiting, "contextId": "ctx-other"}}),
    );
    assert_eq!(answer["error"], not_found(&waiting), "{answer}");
    assert_eq!(door.get_task(Some(&t.alice), &waiting), before);

    let done = door.send_task(Some(&t.alice), "reply main", continuing(&waiting));
    assert_eq!(response(&done), "main");
    // Ended: -32004 to its owner, still -32001 to bob.
    let answer = door.send(Some(&t.alice), "reply again", continuing(&waiting));
    assert_eq!(answer["error"]["code"], -32004, "{answer}");
    let answer = door.send(Some(&t.bob), "reply again", continuing(&waiting));
    assert_eq!(answer["error"], not_found(&waiting), "{answer}");

    // The operator sees bob's waiting task and replies to it.
    let bobs = id(&door.send_task(Some(&t.bob), "ask Which file?", json!({})));
    let answer = door.send(Some(&t.alice), "reply mine", continuing(&bobs));
    assert_eq!(answer["error"], not_found(&bobs), "{answer}");
    let done = door.send_task(Some(&t.operator), "reply README", continuing(&bobs));
    assert_eq!(response(&done), "README");
    assert_eq!(response(&door.get_task(Some(&t.bob), &bobs)), "README");
}

// "Referenced tasks": a referenced task the sender does not see reads
// "not a task this capsule holds", exactly as an id never held. The first
// line is no keyword, so the response is the text the door composed.
#[test]
fn referenced_tasks_the_sender_does_not_see_read_as_never_held() {
    let door = Door::start(AUTHENTICATED);
    let t = tokens(&door);
    let a = completed(&door, &t.alice, "four", json!({}));
    let failed = door.send_task(Some(&t.bob), "fail the driver failed", json!({}));
    let b = id(&failed);
    let look = |token: &str, refs: Vec<&str>| -> String {
        let task = door.send_task(
            Some(token),
            "look",
            json!({"message": {"referenceTaskIds": refs}}),
        );
        response(&task).to_string()
    };
    let held = |id: &str| format!("- {id}: not a task this capsule holds");
    let four = |id: &str| format!("- {id}: completed\n```response\nfour\n```");
    let driver = |id: &str| format!("- {id}: failed: the driver failed");

    assert_eq!(
        look(&t.bob, vec![a.as_str(), b.as_str(), NEVER]),
        format!(
            "look\n\nReferenced tasks:\n{}\n{}\n{}",
            held(&a),
            driver(&b),
            held(NEVER)
        )
    );
    assert_eq!(
        look(&t.alice, vec![b.as_str(), a.as_str()]),
        format!("look\n\nReferenced tasks:\n{}\n{}", held(&b), four(&a))
    );
    assert_eq!(
        look(&t.operator, vec![a.as_str(), b.as_str()]),
        format!("look\n\nReferenced tasks:\n{}\n{}", four(&a), driver(&b))
    );
}

// "ListTasks": a nextPageToken names a position and nothing else; passed to
// another caller it shows that caller only its own tasks after that position.
#[test]
fn a_page_token_passed_to_another_caller_shows_it_only_its_own_tasks() {
    let door = Door::start(AUTHENTICATED);
    let t = tokens(&door);
    let a1 = completed(&door, &t.alice, "a1", json!({}));
    let b1 = completed(&door, &t.bob, "b1", json!({}));
    let a2 = completed(&door, &t.alice, "a2", json!({}));
    let b2 = completed(&door, &t.bob, "b2", json!({}));
    let a3 = completed(&door, &t.alice, "a3", json!({}));

    // The operator's first page ends at b2.
    let page = list(&door, &t.operator, json!({"pageSize": 2}));
    assert_eq!(ids(&page), [&a3, &b2]);
    assert_eq!(page["totalSize"], 5);
    let token = page["nextPageToken"].as_str().unwrap().to_string();
    for (caller, expected, total) in [
        (&t.bob, vec![&b1], 2),
        (&t.alice, vec![&a2, &a1], 3),
        (&t.auditor, vec![], 0),
        (&t.operator, vec![&a2, &b1, &a1], 5),
    ] {
        let page = list(&door, caller, json!({"pageToken": token}));
        assert_eq!(ids(&page), expected);
        assert_eq!(page["totalSize"], total);
        assert_eq!(page["nextPageToken"], "");
    }

    // Alice's own first page ends at a3; bob continues from there.
    let page = list(&door, &t.alice, json!({"pageSize": 1}));
    assert_eq!(ids(&page), [&a3]);
    assert_eq!(page["totalSize"], 3);
    let token = page["nextPageToken"].as_str().unwrap().to_string();
    let page = list(&door, &t.bob, json!({"pageToken": token, "pageSize": 1}));
    assert_eq!(ids(&page), [&b2]);
    assert_eq!(page["totalSize"], 2);
    let next = page["nextPageToken"].as_str().unwrap().to_string();
    assert_ne!(next, "");
    // Bob's token from there, back to alice: her tasks after b2.
    let page = list(&door, &t.alice, json!({"pageToken": next}));
    assert_eq!(ids(&page), [&a2, &a1]);
    assert_eq!(page["nextPageToken"], "");
}

// "Who sees a task": every caller of a public door sees every task of the
// session; an Authorization header, even a bad one, is ignored.
#[test]
fn every_caller_of_a_public_door_sees_every_task() {
    let door = Door::start(PUBLIC);
    let operator = door.token("operator");
    let callers: [Option<&str>; 3] = [None, Some(&operator), Some("not-a-token")];
    let mut made = Vec::new();
    for (n, caller) in callers.iter().enumerate() {
        let task = door.send_task(*caller, &format!("reply {n}"), json!({}));
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
        made.push(id(&task));
    }
    made.reverse();
    for caller in callers {
        let page = door.result(caller, "ListTasks", json!({}));
        assert_eq!(ids(&page), made);
        assert_eq!(page["totalSize"], 3);
        for task in &made {
            assert_eq!(door.get_task(caller, task), door.get_task(None, task));
        }
    }
    // Any caller cancels any live task.
    let live = id(&door.send_task(
        None,
        "sleep 60000",
        json!({"configuration": {"returnImmediately": true}}),
    ));
    door.wait_state(Some("not-a-token"), &live, "TASK_STATE_WORKING");
    let canceled = door.result(Some(&operator), "CancelTask", json!({"id": live}));
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
}

/// POST or DELETE on the door's control surface, with its token.
fn control(door: &Door, method: &str, path: &str, body: Value) -> common::Reply {
    let token = std::fs::read_to_string(door.state.path().join("control-token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    door.request(
        method,
        &format!("/.well-known/murmur/control{path}"),
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    )
}

// "Who sees a task": a formation token, credential member:<caller>, sees
// the tasks that member started. The runtime mints it on the control
// surface while the session runs, and revokes it.
#[test]
fn a_formation_member_sees_only_the_tasks_it_started() {
    let door = Door::start(AUTHENTICATED);
    let t = tokens(&door);
    let minted = control(
        &door,
        "POST",
        "/members",
        json!({"caller": "carol", "scopes": ["SendMessage", "GetTask", "ListTasks"]}),
    );
    assert_eq!(minted.status, 201, "{}", minted.text());
    let minted = minted.json();
    assert_eq!(minted["credential"], "member:carol");
    let carol = minted["token"].as_str().unwrap().to_string();

    let c = completed(&door, &carol, "from carol", json!({}));
    let a = completed(&door, &t.alice, "from alice", json!({}));
    let o = completed(&door, &t.operator, "from the operator", json!({}));
    assert_eq!(response(&door.get_task(Some(&carol), &c)), "from carol");
    for unseen in [&a, &o] {
        let error = door.error(Some(&carol), "GetTask", json!({"id": unseen}));
        assert_eq!(error, not_found(unseen));
    }
    assert_eq!(ids(&list(&door, &carol, json!({}))), [c.as_str()]);
    // Alice does not see the member's task; the operator sees all three.
    let error = door.error(Some(&t.alice), "GetTask", json!({"id": c}));
    assert_eq!(error, not_found(&c));
    assert_eq!(ids(&list(&door, &t.operator, json!({}))), [o, a, c.clone()]);
    // A scope it was not given is refused by name.
    let cancel = door.rpc_as(
        &carol,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": c}})
            .to_string(),
    );
    assert_eq!(cancel.status, 403);
    assert_eq!(
        cancel.json()["message"],
        "credential 'member:carol' does not reach CancelTask"
    );

    let listed = control(&door, "GET", "/members", Value::Null).json();
    assert_eq!(
        listed,
        json!({"members": [{"credential": "member:carol", "scopes": ["SendMessage", "GetTask", "ListTasks"]}]})
    );
    assert!(!listed.to_string().contains(&carol));
    let revoked = control(&door, "DELETE", "/members/carol", Value::Null);
    assert_eq!(revoked.json(), json!({"revoked": "member:carol"}));
    let refused = door.rpc_as(
        &carol,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": c}}).to_string(),
    );
    assert_eq!(refused.status, 401);
    assert_eq!(
        control(&door, "DELETE", "/members/carol", Value::Null).status,
        404
    );
    let bad = control(
        &door,
        "POST",
        "/members",
        json!({"caller": "dave", "scopes": ["message/send"]}),
    );
    assert_eq!(bad.status, 422);
    assert_eq!(
        bad.json()["message"],
        "\"message/send\" is not a scope: a door method's name, or resources/files"
    );
}
