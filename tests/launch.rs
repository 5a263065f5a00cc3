//! Launching a door: the manifest it refuses, the tokens it mints ("Tokens"),
//! and what it logs.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::tempdir::TempDir;
use common::{Door, binary};

/// Runs `serve` on a manifest expected to be refused: a non-zero exit, a
/// message naming the key, and nothing listening.
fn refused(yaml: &str) -> String {
    let dir = TempDir::new("bad-manifest");
    let manifest = dir.path().join("murmur.yaml");
    std::fs::write(&manifest, yaml).unwrap();
    let tokens = dir.path().join("tokens.json");
    let output = Command::new(binary())
        .arg("serve")
        .arg(&manifest)
        .args(["--listen", "127.0.0.1:0", "--tokens-file"])
        .arg(&tokens)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "accepted: {yaml}");
    assert!(!stderr.contains("door listening"), "{stderr}");
    assert!(
        !tokens.exists(),
        "tokens were minted for a refused manifest"
    );
    stderr
}

#[test]
fn bad_manifests_stop_with_the_key_named() {
    for (yaml, expected) in [
        ("version: 0.1.0\n", "name: is required"),
        ("name: a\n", "version: is required"),
        ("name: [a]\nversion: 0.1.0\n", "name: expected a string"),
        (
            "name: a\nversion: 0.1.0\ntools: bash\n",
            "tools: expected a list of strings",
        ),
        (
            "name: a\nversion: 0.1.0\nlifecycle: {task_acceptance: sometimes}\n",
            "lifecycle.task_acceptance: expected one of single, queue, none, found 'sometimes'",
        ),
        (
            "name: a\nversion: 0.1.0\ncapabilities: {shell: {allow: yes}}\n",
            "capabilities.shell.allow: expected a list of strings",
        ),
        (
            "name: a\nversion: 0.1.0\nexports: {peer_tasks: {accept: maybe}}\n",
            "exports.peer_tasks.accept: expected a boolean",
        ),
        (
            "name: a\nversion: 0.1.0\ninference: {transport: grpc}\n",
            "inference.transport: expected one of http, process, found 'grpc'",
        ),
        (
            "name: a\nversion: 0.1.0\ncontext: {images: {max_bytes: -1}}\n",
            "context.images.max_bytes",
        ),
        (
            "name: a\nversion: 0.1.0\nnetwork: {authentication: {scheme: basic}}\n",
            "network.authentication.scheme: expected one of bearer, found 'basic'",
        ),
        (
            "name: a\nversion: 0.1.0\nnetwork: {authentication: {scheme: bearer, credentials: {w: {scopes: [GetTask, Fly]}}}}\n",
            "network.authentication.credentials.w.scopes: unknown scope 'Fly'",
        ),
        (
            "name: a\nversion: 0.1.0\nnetwork: {authentication: {scheme: bearer, credentials: {w: {scopes: [message/send]}}}}\n",
            "network.authentication.credentials.w.scopes: 'message/send' is an A2A 0.3 scope name; use 'SendMessage'",
        ),
        (
            "name: a\nversion: 0.1.0\nnetwork: {authentication: {scheme: bearer, credentials: {w: {scopes: [stream/watch]}}}}\n",
            "network.authentication.credentials.w.scopes: 'stream/watch' is an A2A 0.3 scope name; use 'murmur.WatchSession'",
        ),
        (
            "name: a\nversion: 0.1.0\nnetwork: {authentication: {scheme: bearer, credentials: {operator: {scopes: []}}}}\n",
            "operator",
        ),
        ("name: a\nversion: [0.1.0\n", "manifest"),
    ] {
        let stderr = refused(yaml);
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in {stderr:?}"
        );
    }
}

#[test]
fn a_missing_manifest_names_its_path() {
    let output = Command::new(binary())
        .args([
            "serve",
            "/nonexistent/murmur.yaml",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/murmur.yaml"));
}

// "Tokens": the operator token, then one per declared credential, written
// 0600 as {"operator": …, "<credential>": …} before the door answers.
#[test]
fn tokens_are_minted_and_written_0600() {
    let door = Door::start(
        "name: a\nversion: 0.1.0\nnetwork:\n  authentication:\n    scheme: bearer\n    credentials:\n      zed: {scopes: [GetTask]}\n      alpha: {scopes: [ListTasks]}\n",
    );
    let path = door.state.path().join("tokens.json");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    let keys: Vec<&String> = door.tokens.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["operator", "zed", "alpha"]);
    let ordered: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(
        ordered.keys().collect::<Vec<_>>(),
        ["operator", "zed", "alpha"]
    );
    for key in ["operator", "zed", "alpha"] {
        let token = door.token(key);
        assert_eq!(token.len(), 64, "256 bits as hex");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    // A public door mints the operator token too.
    let public = Door::start("name: a\nversion: 0.1.0\n");
    assert_eq!(
        public
            .tokens
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["operator"]
    );
}

// "Tokens": a restart mints new ones; the old ones are refused.
#[test]
fn a_restart_mints_new_tokens() {
    let yaml = "name: a\nversion: 0.1.0\nnetwork: {authentication: {scheme: bearer}}\n";
    let first = Door::start(yaml);
    let old = first.token("operator");
    drop(first);
    let second = Door::start(yaml);
    assert_ne!(second.token("operator"), old);
    let reply = second.rpc_as(
        &old,
        r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#,
    );
    assert_eq!(reply.status, 401);
    let reply = second.rpc_as(
        &second.token("operator"),
        r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#,
    );
    assert_eq!(reply.status, 200);
}

// Tokens never appear in logs, even at trace with every request logged.
#[test]
fn tokens_never_reach_the_log() {
    let door = Door::start_logged(
        "name: a\nversion: 0.1.0\nnetwork: {authentication: {scheme: bearer, credentials: {c: {scopes: [GetTask]}}}}\n",
        "trace",
    );
    let tokens: Vec<String> = ["operator", "c"].iter().map(|c| door.token(c)).collect();
    for token in &tokens {
        door.rpc_as(
            token,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}"#,
        );
        door.rpc_as(
            token,
            r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#,
        );
        door.request(
            "GET",
            "/nope",
            &[("Authorization", &format!("Basic {token}"))],
            b"",
        );
    }
    let log = door.stop().join("\n");
    assert!(
        log.contains("request"),
        "requests are logged at debug: {log}"
    );
    for token in &tokens {
        assert!(!log.contains(token.as_str()), "a token reached the log");
    }
}

#[test]
fn the_default_listen_address_is_the_references_port() {
    let output = Command::new(binary())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("[default: 127.0.0.1:41873]"), "{help}");
}

/// The line a launch logs for its door, and whether it says `compiled` or
/// `cached`.
fn compiled(door: &Door) -> &'static str {
    let line = door
        .launched
        .iter()
        .find(|l| l.contains("door component loaded"))
        .expect("the launch names its door");
    if line.contains("compiled=cached") {
        "cached"
    } else if line.contains("compiled=compiled") {
        "compiled"
    } else {
        panic!("{line}")
    }
}

/// A door compiled once is loaded from the compile cache at the next launch;
/// an entry damaged on disk (a flipped byte, cut short) is compiled again
/// and replaced, never loaded; a cache directory others may write is not
/// used at all.
#[test]
fn compiled_doors_are_cached_and_a_damaged_entry_is_compiled_again() {
    let cache = TempDir::new("compile-cache");
    let dir = cache.path().join("doors");
    let launch = || {
        let state = TempDir::new("cached-door");
        let manifest = state.path().join("murmur.yaml");
        std::fs::write(&manifest, "name: cached\nversion: 0.1.0\n").unwrap();
        let door = Door::start_with(
            &manifest,
            state,
            &["--compile-cache", dir.to_str().unwrap()],
        );
        assert_eq!(door.get("/.well-known/agent-card.json").status, 200);
        door
    };
    let entry = || {
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert!(entries[0].to_str().unwrap().ends_with(".cwasm"));
        assert_eq!(
            std::fs::metadata(&entries[0]).unwrap().permissions().mode() & 0o777,
            0o600
        );
        entries[0].clone()
    };

    let door = launch();
    assert_eq!(compiled(&door), "compiled");
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let path = entry();
    door.stop();
    let door = launch();
    assert_eq!(compiled(&door), "cached");
    door.stop();

    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let door = launch();
    assert_eq!(compiled(&door), "compiled");
    assert!(
        door.launched.iter().any(|l| l
            .contains("a compile cache entry is damaged: compiling again")
            && l.contains("its checksum does not match")),
        "{:#?}",
        door.launched
    );
    door.stop();
    // Replaced whole: the next launch loads it.
    assert_eq!(entry(), path);
    let door = launch();
    assert_eq!(compiled(&door), "cached");
    door.stop();

    std::fs::write(&path, b"short").unwrap();
    let door = launch();
    assert_eq!(compiled(&door), "compiled");
    assert!(
        door.launched
            .iter()
            .any(|l| l.contains("shorter than its checksum"))
    );
    door.stop();

    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let door = launch();
    assert_eq!(compiled(&door), "compiled");
    assert!(
        door.launched
            .iter()
            .any(|l| l.contains("compiled doors are not cached")
                && l.contains("that others cannot write")),
        "{:#?}",
        door.launched
    );
    door.stop();
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// The threads of `pid` named `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == name)
        .count()
}

// `--workers N` runs requests on N threads, one per core by default.
#[test]
fn workers_are_the_threads_requests_run_on() {
    let manifest = "name: a\nversion: 0.1.0\n";
    let state = TempDir::new("workers");
    let path = state.path().join("murmur.yaml");
    std::fs::write(&path, manifest).unwrap();
    let door = Door::start_with(&path, state, &["--workers", "3"]);
    assert_eq!(door.get("/.well-known/agent-card.json").status, 200);
    assert_eq!(threads_named(door.pid(), "tokio-rt-worker"), 3);
    let door = Door::start(manifest);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(threads_named(door.pid(), "tokio-rt-worker"), cores);
}

/// Reference, "Who sees a task": "The launch's own task: mur run --task, or
/// a task.md or input.txt in the workdir. From the moment the door is
/// announced, so the first ListTasks lists it." It belongs to the session:
/// the operator sees it, a declared credential does not, and a `--resume`
/// does not start it again.
#[test]
fn the_launch_task_is_on_the_door_from_the_start() {
    use serde_json::json;
    let work = common::tempdir::TempDir::new("launch-task");
    let manifest = work.path().join("murmur.yaml");
    std::fs::write(
        &manifest,
        "name: launched\nversion: 0.1.0\nnetwork:\n  authentication:\n    scheme: bearer\n    \
         credentials:\n      alice: {scopes: [ListTasks, GetTask]}\n",
    )
    .unwrap();
    std::fs::write(work.path().join("input.txt"), "reply from input.txt").unwrap();
    std::fs::write(work.path().join("task.md"), "reply from task.md").unwrap();
    let door = Door::start_with(&manifest, common::tempdir::TempDir::new("state"), &[]);
    let operator = door.token("operator");
    let first = door.result(Some(&operator), "ListTasks", json!({}));
    let tasks = first["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{first}");
    let id = tasks[0]["id"].as_str().unwrap().to_string();
    let done = door.wait_state(Some(&operator), &id, "TASK_STATE_COMPLETED");
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "from task.md");
    let alice = door.token("alice");
    let theirs = door.result(Some(&alice), "ListTasks", json!({}));
    assert_eq!(theirs["tasks"], json!([]));

    // A resumed session has its launch task already.
    let door = door.restart(&["--resume"]);
    let operator = door.token("operator");
    let listed = door.result(Some(&operator), "ListTasks", json!({}));
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1, "{listed}");

    // --task names it instead of the workdir's files.
    let flagged = Door::start_with(
        &manifest,
        common::tempdir::TempDir::new("state"),
        &["--task", "reply from the flag"],
    );
    let operator = flagged.token("operator");
    let listed = flagged.result(Some(&operator), "ListTasks", json!({}));
    let id = listed["tasks"][0]["id"].as_str().unwrap().to_string();
    let done = flagged.wait_state(Some(&operator), &id, "TASK_STATE_COMPLETED");
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "from the flag");
}

/// Reference, "A held request ends one of three ways": "The door closes:
/// the capsule exits ... Under after_task: exit the task has settled by
/// then". With `lifecycle.after_task: exit` the process ends once its launch
/// task has ended: a request held on that task is answered with it settled,
/// then the process exits 0.
#[test]
fn after_task_exit_ends_the_process_once_the_launch_task_ends() {
    use serde_json::json;
    let work = common::tempdir::TempDir::new("after-task");
    let manifest = work.path().join("murmur.yaml");
    std::fs::write(
        &manifest,
        "name: once\nversion: 0.1.0\nlifecycle: {after_task: exit}\n",
    )
    .unwrap();
    std::fs::write(work.path().join("task.md"), "ask what now?").unwrap();
    let mut door = Door::start_with(&manifest, common::tempdir::TempDir::new("state"), &[]);
    let listed = door.result(None, "ListTasks", json!({}));
    let id = listed["tasks"][0]["id"].as_str().unwrap().to_string();
    door.wait_state(None, &id, "TASK_STATE_INPUT_REQUIRED");
    // Waiting for input is not an end: the door still answers.
    assert!(door.exited_within(Duration::from_millis(300)).is_none());
    // The reply is held until the task settles, and answered with it.
    let answered = door.send(None, "reply done", json!({"message": {"taskId": id}}));
    assert_eq!(
        answered["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answered}"
    );
    let status = door
        .exited_within(Duration::from_secs(10))
        .expect("the door exits");
    assert_eq!(status.code(), Some(0));
}

/// A door whose log has no reader (its collector gone, `| head`) goes on
/// answering: a line it cannot write is lost, and nothing panics.
#[test]
fn a_door_outlives_the_reader_of_its_log() {
    use std::io::{BufRead, BufReader};
    let dir = TempDir::new("lost-log");
    let manifest = dir.path().join("murmur.yaml");
    std::fs::write(&manifest, "name: alpha\nversion: 0.1.0\n").unwrap();
    let mut child = Command::new(binary())
        .arg("serve")
        .arg(&manifest)
        .args(["--listen", "127.0.0.1:0", "--state"])
        .arg(dir.path().join("state"))
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("the door announces its url").unwrap();
        if let Some(at) = line.find("url=http://") {
            break line[at + "url=http://".len()..].trim().to_string();
        }
    };
    // The log's reader goes; SIGHUP makes the door log a line.
    drop(lines);
    // SAFETY: a signal to a child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(300));
    let card = common::request(&addr, "GET", "/.well-known/agent-card.json", &[], b"");
    assert_eq!(card.status, 200);
    assert!(child.try_wait().unwrap().is_none(), "the door ended");
    // SIGTERM's lines are lost too, and the door still exits 0.
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the door did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}
