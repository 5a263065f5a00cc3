//! `murmur-door serve --resume` (issue 3, "Tokens", "Who sees a task",
//! "GetTask", "ListTasks", "Task states"): after a crash (SIGKILL) the same
//! state directory reopens the same session: the same session id, every task
//! answering GetTask and ListTasks as before, new tokens minted and the old
//! ones refused. A task live at the crash answers TASK_STATE_FAILED with
//! "the session restarted while this task was live". A launch without
//! --resume starts a new session.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tempdir::TempDir;
use common::{Door, binary, failed_task, id, ids, not_found};
use serde_json::{Value, json};

const AUTHENTICATED: &str = "
name: resumable
version: 0.1.0
lifecycle: {task_acceptance: single}
network:
  authentication:
    scheme: bearer
    credentials:
      alice: {scopes: [SendMessage, GetTask, ListTasks, CancelTask]}
";

const PUBLIC: &str = "name: resumable\nversion: 0.1.0\nlifecycle: {task_acceptance: single}\n";

const QUEUE: &str = "name: resumable\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n";

const RESTARTED: &str = "the session restarted while this task was live";

/// How GetTask answers a task that was live at the crash: failed, with the
/// restart as its status message ("GetTask": a ROLE_AGENT message with one
/// text part), and no artifact (a prompt goes with INPUT_REQUIRED).
fn failed_by_restart(before: &Value, after: &Value) -> Value {
    let task_id = before["id"].as_str().unwrap();
    let timestamp = &after["status"]["timestamp"];
    failed_task(
        task_id,
        &before["contextId"],
        RESTARTED,
        timestamp,
        json!({}),
    )
}

/// The old token is refused as one this session never minted.
fn assert_refused(door: &Door, token: &str) {
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#,
    ] {
        let reply = door.rpc_as(token, body);
        assert_eq!(reply.status, 401, "{}", reply.text());
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_eq!(
            reply.text(),
            r#"{"error":"invalid_token","message":"the bearer token is not one this session minted"}"#
        );
        assert_eq!(
            reply.header("www-authenticate"),
            Some(r#"Bearer realm="resumable", error="invalid_token""#)
        );
    }
}

/// A task in each state a resume meets: answered (alice's), failed and
/// canceled (the operator's), completed in `ctx-kept` and waiting for input
/// (alice's).
fn tasks_of_every_kind(door: &Door, op: Option<&str>, al: Option<&str>) -> [Value; 5] {
    let answered = door.send_task(al, "reply four", json!({}));
    assert_eq!(answered["status"]["state"], "TASK_STATE_COMPLETED");
    let failed = door.send_task(op, "fail the driver failed", json!({}));
    assert_eq!(failed["status"]["state"], "TASK_STATE_FAILED");
    let sleeping = door.send_task(
        op,
        "sleep 60000",
        json!({"configuration": {"returnImmediately": true}}),
    );
    door.wait_state(op, &id(&sleeping), "TASK_STATE_WORKING");
    let canceled = door.result(op, "CancelTask", json!({"id": id(&sleeping)}));
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    let kept = door.send_task(
        al,
        "reply kept",
        json!({"message": {"contextId": "ctx-kept"}}),
    );
    assert_eq!(kept["status"]["state"], "TASK_STATE_COMPLETED");
    let waiting = door.send_task(al, "ask Which branch?", json!({}));
    assert_eq!(waiting["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    [answered, failed, sleeping, kept, waiting]
}

// Issue 3, "Tokens", "Who sees a task": --resume keeps the session id and
// every task, each answering GetTask and ListTasks exactly as before; the
// task waiting for input at the crash answers FAILED; new tokens are minted,
// the old ones refused; each credential still sees only its own tasks.
#[test]
fn resume_keeps_the_session_and_every_task() {
    let door = Door::start(AUTHENTICATED);
    let session = door.session_id();
    let (operator, alice) = (door.token("operator"), door.token("alice"));
    let (op, al) = (Some(operator.as_str()), Some(alice.as_str()));

    let [answered, failed, sleeping, kept, waiting] = tasks_of_every_kind(&door, op, al);

    let ended: Vec<String> = [&answered, &failed, &sleeping, &kept]
        .iter()
        .map(|t| id(t))
        .collect();
    let gets: Vec<Value> = ended.iter().map(|t| door.get_task(op, t)).collect();
    let waiting_before = door.get_task(al, &id(&waiting));
    let listings = |door: &Door, op: Option<&str>, al: Option<&str>| -> Vec<Value> {
        vec![
            door.result(op, "ListTasks", json!({})),
            door.result(op, "ListTasks", json!({"includeArtifacts": true})),
            door.result(op, "ListTasks", json!({"status": "TASK_STATE_COMPLETED"})),
            door.result(op, "ListTasks", json!({"contextId": "ctx-kept"})),
            door.result(al, "ListTasks", json!({})),
        ]
    };
    let lists_before = listings(&door, op, al);
    assert_eq!(lists_before[0]["totalSize"], 5);
    assert_eq!(lists_before[4]["totalSize"], 3);

    let door = door.restart(&["--resume"]);
    assert_eq!(door.session_id(), session);
    let (operator2, alice2) = (door.token("operator"), door.token("alice"));
    assert_ne!(operator2, operator);
    assert_ne!(alice2, alice);
    assert_refused(&door, &operator);
    assert_refused(&door, &alice);
    let (op, al) = (Some(operator2.as_str()), Some(alice2.as_str()));

    // Every ended task, exactly as before.
    for (task, before) in ended.iter().zip(&gets) {
        assert_eq!(&door.get_task(op, task), before);
    }
    // The waiting task failed with the restart; its change is the newest.
    let waiting_after = door.get_task(al, &id(&waiting));
    assert_eq!(
        waiting_after,
        failed_by_restart(&waiting_before, &waiting_after)
    );
    assert!(
        waiting_after["status"]["timestamp"].as_str()
            >= waiting_before["status"]["timestamp"].as_str()
    );
    assert_eq!(door.get_task(op, &id(&waiting)), waiting_after);

    // ListTasks: the failed task moved to the front, the others as before.
    let lists_after = listings(&door, op, al);
    let moved = |before: &Value, artifacts: bool| -> Value {
        let mut after = before.clone();
        let tasks = after["tasks"].as_array_mut().unwrap();
        tasks.retain(|t| t["id"] != waiting["id"]);
        let mut failed = waiting_after.clone();
        if artifacts {
            failed["artifacts"] = json!([]);
        }
        tasks.insert(0, failed);
        after
    };
    assert_eq!(lists_after[0], moved(&lists_before[0], false));
    assert_eq!(lists_after[1], moved(&lists_before[1], true));
    assert_eq!(lists_after[2], lists_before[2]);
    assert_eq!(lists_after[3], lists_before[3]);
    assert_eq!(lists_after[4], moved(&lists_before[4], false));
    assert_eq!(
        ids(&lists_after[4]),
        [id(&waiting), id(&kept), id(&answered)]
    );
    assert_eq!(
        door.result(op, "ListTasks", json!({"status": "TASK_STATE_FAILED"}))["totalSize"],
        2
    );
    assert_eq!(
        door.result(
            op,
            "ListTasks",
            json!({"status": "TASK_STATE_INPUT_REQUIRED"})
        )["totalSize"],
        0
    );

    // Alice's new token still sees only her tasks.
    for task in [&failed, &sleeping] {
        assert_eq!(
            door.error(al, "GetTask", json!({"id": id(task)})),
            not_found(&id(task))
        );
    }
    // The failed task takes no reply.
    let answer = door.send(
        al,
        "reply main",
        json!({"message": {"taskId": id(&waiting)}}),
    );
    assert_eq!(
        answer["error"],
        json!({"code": -32004,
               "message": format!("Task {} has ended in TASK_STATE_FAILED; send a new message without taskId, in the same contextId, to start a new task", id(&waiting)),
               "data": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                         "reason": "UNSUPPORTED_OPERATION",
                         "domain": "a2a-protocol.org",
                         "metadata": {"taskId": id(&waiting), "state": "TASK_STATE_FAILED"}}]}),
        "{answer}"
    );
    // The session goes on: a new task runs and is listed first.
    let next = door.send_task(al, "reply again", json!({}));
    assert_eq!(next["status"]["state"], "TASK_STATE_COMPLETED", "{next}");
    assert!(
        ![&answered, &failed, &sleeping, &kept, &waiting]
            .iter()
            .any(|t| t["id"] == next["id"])
    );
    let page = door.result(op, "ListTasks", json!({}));
    assert_eq!(page["tasks"][0]["id"], next["id"]);
    assert_eq!(page["totalSize"], 6);
}

// Issue 3: a task working at the crash (after a progress status) does not
// stay working: it answers FAILED, and the capacity it held is free again.
// Resuming a second time changes nothing.
#[test]
fn a_task_working_at_the_crash_fails_and_frees_the_door() {
    let door = Door::start(PUBLIC);
    let session = door.session_id();
    let task = door.send_task(
        None,
        "progress half way\nsleep 60000",
        json!({"configuration": {"returnImmediately": true}}),
    );
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED");
    let live = id(&task);
    let before = door.wait_state(None, &live, "TASK_STATE_WORKING");
    let busy = door.send_task(None, "reply no room", json!({}));
    assert_eq!(busy["status"]["state"], "TASK_STATE_REJECTED");
    let busy_before = door.get_task(None, &id(&busy));

    let door = door.restart(&["--resume"]);
    assert_eq!(door.session_id(), session);
    let after = door.get_task(None, &live);
    assert_eq!(after, failed_by_restart(&before, &after));
    assert_eq!(door.get_task(None, &id(&busy)), busy_before);
    let page = door.result(None, "ListTasks", json!({}));
    assert_eq!(
        ids(&page),
        [live.as_str(), busy_before["id"].as_str().unwrap()]
    );
    assert_eq!(
        door.result(None, "ListTasks", json!({"status": "TASK_STATE_WORKING"}))["totalSize"],
        0
    );

    // Nothing is live: a single door takes a new task.
    let next = door.send_task(None, "reply after", json!({}));
    assert_eq!(next["status"]["state"], "TASK_STATE_COMPLETED", "{next}");
    let listing = door.result(None, "ListTasks", json!({"includeArtifacts": true}));
    assert_eq!(listing["totalSize"], 3);

    // A second resume keeps it all, the failed task's timestamp included.
    let door = door.restart(&["--resume"]);
    assert_eq!(door.session_id(), session);
    assert_eq!(
        door.result(None, "ListTasks", json!({"includeArtifacts": true})),
        listing
    );
    assert_eq!(door.get_task(None, &live), after);
}

// Issue 3, "Task states": every task live at the crash — working, or
// submitted and waiting in a queue — answers FAILED on resume; the queue does
// not run the task it held.
#[test]
fn queued_tasks_at_the_crash_fail_too() {
    let door = Door::start(QUEUE);
    let now = json!({"configuration": {"returnImmediately": true}});
    let done = door.send_task(None, "reply done", json!({}));
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED");
    let running = door.send_task(None, "sleep 60000", now.clone());
    let running_before = door.wait_state(None, &id(&running), "TASK_STATE_WORKING");
    let queued = door.send_task(None, "reply too late", now);
    assert_eq!(queued["status"]["state"], "TASK_STATE_SUBMITTED");
    let queued_before = door.get_task(None, &id(&queued));
    assert_eq!(queued_before["status"]["state"], "TASK_STATE_SUBMITTED");
    let done_before = door.get_task(None, &id(&done));

    let door = door.restart(&["--resume"]);
    for before in [&running_before, &queued_before] {
        let after = door.get_task(None, &id(before));
        assert_eq!(after, failed_by_restart(before, &after));
    }
    assert_eq!(door.get_task(None, &id(&done)), done_before);
    let page = door.result(None, "ListTasks", json!({}));
    let mut first_two = ids(&page)[..2].to_vec();
    first_two.sort();
    let mut failed = vec![id(&running), id(&queued)];
    failed.sort();
    assert_eq!(first_two, failed);
    assert_eq!(ids(&page)[2], id(&done));
    // Nothing is left to run: the queued task stays failed, and a new task
    // runs at once.
    let next = door.send_task(None, "reply next", json!({}));
    assert_eq!(next["status"]["state"], "TASK_STATE_COMPLETED", "{next}");
    assert_eq!(
        door.get_task(None, &id(&queued))["status"]["state"],
        "TASK_STATE_FAILED"
    );
}

// Issue 3: a launch without --resume on the same state directory starts a
// new session: a new session id and no tasks. --resume then reopens that
// new session.
#[test]
fn a_launch_without_resume_starts_a_new_session() {
    let door = Door::start(PUBLIC);
    let first = door.session_id();
    let old = id(&door.send_task(None, "reply old", json!({})));

    let door = door.restart(&[]);
    let second = door.session_id();
    assert_ne!(second, first);
    assert_eq!(
        door.result(None, "ListTasks", json!({})),
        json!({"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0})
    );
    assert_eq!(
        door.error(None, "GetTask", json!({"id": old})),
        not_found(&old)
    );
    let new = id(&door.send_task(None, "reply new", json!({})));

    let door = door.restart(&["--resume"]);
    assert_eq!(door.session_id(), second);
    let page = door.result(None, "ListTasks", json!({}));
    assert_eq!(ids(&page), [new.as_str()]);
    assert_eq!(
        door.error(None, "GetTask", json!({"id": old})),
        not_found(&old)
    );
}

/// Runs `serve --resume` on `state`, expecting it to stop by itself.
fn resume_refused(state: &std::path::Path) -> String {
    launch_refused(state, &["--resume"])
}

/// The stderr of a launch on `state` with `extra` flags, which must stop
/// without listening.
fn launch_refused(state: &std::path::Path, extra: &[&str]) -> String {
    let dir = TempDir::new("resume-refused");
    let manifest = dir.path().join("murmur.yaml");
    std::fs::write(&manifest, PUBLIC).unwrap();
    let mut child = Command::new(binary())
        .arg("serve")
        .arg(&manifest)
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--state")
        .arg(state)
        .arg("--tokens-file")
        .arg(dir.path().join("tokens.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the launch with {extra:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(!stderr.contains("door listening"), "{stderr}");
    stderr
}

// Issue 3: --resume with nothing to resume stops with a message naming
// --resume and the state directory, and nothing listens.
#[test]
fn resume_with_no_session_exits_with_a_message() {
    let empty = TempDir::new("resume-empty");
    let missing = empty.path().join("never-created");
    for state in [empty.path(), missing.as_path()] {
        let stderr = resume_refused(state);
        assert!(stderr.contains("--resume"), "{stderr}");
        assert!(
            stderr.contains(&state.display().to_string()),
            "the message names the state directory: {stderr}"
        );
    }
}

// One door to a state directory: a second launch on it, resuming or not,
// stops with a message naming the directory and the door that holds it, and
// leaves the session as it was; once the first door has stopped, the
// session resumes.
#[test]
fn a_state_directory_serves_one_door_at_a_time() {
    let state = TempDir::new("locked");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(&manifest, PUBLIC).unwrap();
    let door = Door::start_with(&manifest, state, &[]);
    let session = door.session_id();
    let task = door.send_task(None, "reply kept", json!({}));
    let expected = format!(
        "the state directory {} is in use by another murmur-door (pid {})",
        door.state.path().display(),
        door.pid()
    );
    for extra in [&[][..], &["--resume"][..]] {
        let stderr = launch_refused(door.state.path(), extra);
        assert!(stderr.contains(&expected), "{extra:?}: {stderr}");
    }
    assert_eq!(door.session_id(), session);
    let door = door.restart(&["--resume"]);
    assert_eq!(door.session_id(), session);
    assert_eq!(door.get_task(None, &id(&task))["id"], task["id"]);
}

// "Task states", and the promise of `--resume` in docs/operations.md: under load,
// every task acknowledged to a client before a crash (SIGKILL mid-work)
// answers GetTask after the resume: completed as it was, or failed by the
// restart if it was live. Nothing acknowledged is lost.
#[test]
fn every_acknowledged_task_survives_a_crash_under_load() {
    use std::sync::{Arc, Mutex};
    let door = Door::start(QUEUE);
    let addr = door.addr.clone();
    let acknowledged: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let senders: Vec<_> = (0..4)
        .map(|worker| {
            let (addr, acknowledged, stop) = (addr.clone(), acknowledged.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    // Some complete at once, some sleep past the crash.
                    let text = if n % 3 == 0 {
                        "sleep 50\nreply late"
                    } else {
                        "reply now"
                    };
                    let body = json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage",
                        "params": {"configuration": {"returnImmediately": worker % 2 == 0},
                            "message": {"messageId": format!("m{worker}-{n}"), "role": "ROLE_USER",
                                "parts": [{"text": text}]}}});
                    let Ok(reply) =
                        std::panic::catch_unwind(|| common::post(&addr, &body.to_string()))
                    else {
                        break;
                    };
                    if let Some(task) = reply.json().pointer("/result/task") {
                        let state = task["status"]["state"].as_str().unwrap().to_string();
                        acknowledged.lock().unwrap().push((id(task), state));
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    while acknowledged.lock().unwrap().len() < 150 && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let door = door.restart(&["--resume"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for sender in senders {
        let _ = sender.join();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() >= 150,
        "{} acknowledged",
        acknowledged.len()
    );
    let (mut completed, mut failed) = (0, 0);
    for (task_id, state) in &acknowledged {
        let task = door.get_task(None, task_id);
        match task["status"]["state"].as_str().unwrap() {
            "TASK_STATE_COMPLETED" => completed += 1,
            "TASK_STATE_FAILED" => {
                assert_ne!(state, "TASK_STATE_COMPLETED", "{task}");
                assert_eq!(task["status"]["message"]["parts"][0]["text"], RESTARTED);
                failed += 1;
            }
            other => panic!("{task_id} acknowledged {state}, resumed {other}: {task}"),
        }
    }
    println!(
        "{} acknowledged before the crash: {completed} completed, {failed} failed by the restart",
        acknowledged.len()
    );
}
