//! Hot swap: the door replaced while it serves, through the control surface
//! and SIGHUP. Requests in flight finish on the version they started on, new
//! ones get the new version, a component that is not our door is refused
//! with its reason while the live door keeps serving, and a rollback brings
//! the previous version back.
//!
//! The second door version is the embedded door with a custom section
//! appended: the same code, another digest.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Door, Reply, tempdir::TempDir};
use murmur_door_host::control::CONTROL_PATH;
use murmur_door_host::engine::{EMBEDDED_DOOR, digest};
use murmur_door_host::swap;
use serde_json::{Value, json};

const MANIFEST: &str = "name: swapped\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n";

/// The embedded door with a custom section `murmur-swap-test` holding `tag`.
fn variant(tag: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"murmur-swap-test";
    let mut content = Vec::new();
    leb(name.len(), &mut content);
    content.extend_from_slice(name);
    content.extend_from_slice(tag.as_bytes());
    let mut bytes = EMBEDDED_DOOR.to_vec();
    bytes.push(0);
    leb(content.len(), &mut bytes);
    bytes.extend_from_slice(&content);
    bytes
}

fn control_token(door: &Door) -> String {
    std::fs::read_to_string(door.state.path().join("control-token"))
        .unwrap()
        .trim()
        .to_string()
}

/// A request to the control surface (`action` is "", "/swap" or
/// "/rollback") with `token`.
fn control(
    door: &Door,
    token: Option<&str>,
    method: &str,
    action: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if let Some(auth) = &auth {
        all.push(("authorization", auth));
    }
    door.request(method, &format!("{CONTROL_PATH}{action}"), &all, body)
}

fn status(door: &Door, token: &str) -> Value {
    let reply = control(door, Some(token), "GET", "", &[], b"");
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

/// Swaps to `bytes`; the answer's status and JSON.
fn swap(door: &Door, token: &str, bytes: &[u8]) -> (u16, Value) {
    let reply = control(
        door,
        Some(token),
        "POST",
        "/swap",
        &[("content-type", "application/wasm")],
        bytes,
    );
    (reply.status, reply.json())
}

/// Swaps to the component in the file at `path`, named in a JSON body.
fn swap_path(door: &Door, token: &str, path: &str) -> Reply {
    control(
        door,
        Some(token),
        "POST",
        "/swap",
        &[("content-type", "application/json")],
        json!({ "path": path }).to_string().as_bytes(),
    )
}

/// Launches the binary on `component` and returns its stderr once it has
/// failed to start.
fn launch_refused(
    manifest: &std::path::Path,
    state: &std::path::Path,
    component: &std::path::Path,
    extra: &[&str],
) -> String {
    let output = std::process::Command::new(common::binary())
        .arg("serve")
        .arg(manifest)
        .args(["--listen", "127.0.0.1:0", "--state"])
        .arg(state)
        .arg("--component")
        .arg(component)
        .args(extra)
        .output()
        .unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn card_is_served(addr: &str) -> bool {
    let head = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    );
    let reply = common::exchange(addr, head.as_bytes(), b"");
    reply.status == 200 && reply.json()["name"] == "swapped"
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Requests answered as they should be, the others (why), every latency.
type Tally = (u64, Vec<String>, Vec<Duration>);

/// Threads sending GetTask and fetching the card in a loop until `stop`:
/// how many were answered as they should be, how many were not, and each
/// request's latency.
fn load(
    addr: &str,
    task_id: &str,
    threads: usize,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Tally>> {
    (0..threads)
        .map(|t| {
            let (addr, task_id, stop) = (addr.to_string(), task_id.to_string(), stop.clone());
            std::thread::spawn(move || {
                let (mut ok, mut failed, mut latencies) = (0u64, Vec::new(), Vec::new());
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let started = Instant::now();
                    let good = if (n + t as u64).is_multiple_of(2) {
                        let body = json!({"jsonrpc": "2.0", "id": n, "method": "GetTask", "params": {"id": task_id}});
                        let reply = common::post(&addr, &body.to_string());
                        let good = reply.status == 200 && reply.json()["result"]["id"] == task_id;
                        (!good).then(|| format!("GetTask: {} {}", reply.status, reply.text()))
                    } else {
                        (!card_is_served(&addr)).then(|| "the card".to_string())
                    };
                    latencies.push(started.elapsed());
                    match good {
                        None => ok += 1,
                        Some(why) => failed.push(why),
                    }
                }
                (ok, failed, latencies)
            })
        })
        .collect()
}

fn finish(handles: Vec<std::thread::JoinHandle<Tally>>) -> Tally {
    let (mut ok, mut failed, mut latencies) = (0, Vec::new(), Vec::new());
    for handle in handles {
        let (o, f, l) = handle.join().unwrap();
        ok += o;
        failed.extend(f);
        latencies.extend(l);
    }
    latencies.sort();
    (ok, failed, latencies)
}

/// How many swaps the load test makes: 50, or `MURMUR_SWAPS` (the closing
/// note's numbers are from `MURMUR_SWAPS=100 cargo test --release -p
/// murmur-door-host --test e2e -- --nocapture swap::under_load`).
fn swaps() -> u64 {
    std::env::var("MURMUR_SWAPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50)
}

#[test]
fn swaps_under_load_fail_no_request() {
    let door = Door::start(MANIFEST);
    let token = control_token(&door);
    let task = door.send_task(None, "reply hello", json!({}));
    let task_id = task["id"].as_str().unwrap().to_string();
    let (a, b) = (variant("a"), variant("b"));

    // Without swaps, for a baseline.
    let stop = Arc::new(AtomicBool::new(false));
    let handles = load(&door.addr, &task_id, 4, stop.clone());
    let quiet_started = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let (quiet_ok, quiet_failed, quiet) = finish(handles);
    let quiet_secs = quiet_started.elapsed().as_secs_f64();

    // Back and forth between two versions.
    let stop = Arc::new(AtomicBool::new(false));
    let handles = load(&door.addr, &task_id, 4, stop.clone());
    let swaps_started = Instant::now();
    let mut took = Vec::new();
    let swaps = swaps();
    for n in 0..swaps {
        let (code, answer) = swap(&door, &token, if n % 2 == 0 { &a } else { &b });
        assert_eq!(code, 200, "{answer}");
        assert_eq!(answer["live"]["version"], n + 2);
        took.push(Duration::from_secs_f64(
            answer["tookMs"].as_f64().unwrap() / 1000.0,
        ));
    }
    let swaps_secs = swaps_started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (busy_ok, busy_failed, busy) = finish(handles);
    took.sort();

    println!(
        "without swaps: {quiet_ok} served, {} failed in {quiet_secs:.1} s; p50 {:?}, p99 {:?}",
        quiet_failed.len(),
        percentile(&quiet, 0.5),
        percentile(&quiet, 0.99)
    );
    println!(
        "{swaps} swaps in {swaps_secs:.1} s: {busy_ok} served, {} failed; p50 {:?}, p99 {:?}",
        busy_failed.len(),
        percentile(&busy, 0.5),
        percentile(&busy, 0.99)
    );
    println!(
        "swap time (compile, validate, trial instance, swap): min {:?}, median {:?}, max {:?}",
        took[0],
        percentile(&took, 0.5),
        took[took.len() - 1]
    );
    assert!(quiet_failed.is_empty(), "{quiet_failed:?}");
    assert!(busy_failed.is_empty(), "{busy_failed:?}");
    assert!(busy_ok > swaps, "the load ran: {busy_ok}");
    let now = status(&door, &token);
    assert_eq!(now["live"]["version"], swaps + 1);
    assert_eq!(now["live"]["digest"], digest(&b));
    assert_eq!(now["live"]["source"], "upload");
    assert_eq!(now["previous"]["digest"], digest(&a));
}

#[test]
fn a_stream_opened_before_a_swap_finishes_on_its_version() {
    let state = TempDir::new("door");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let door = Door::launch(&manifest, state, &[], "info,murmur_door_host=debug");
    let token = control_token(&door);
    let mut sse = door.open_stream(
        r#"{"jsonrpc":"2.0","id":"watch","method":"murmur.WatchSession","params":{}}"#,
        &[],
    );
    assert_eq!(sse.status, 200);
    let ack = sse.next();
    assert_eq!(
        ack.data["result"]["message"]["parts"][0]["text"],
        "connection-ack"
    );
    let before = status(&door, &token);
    assert_eq!(before["live"]["version"], 1);
    assert_eq!(before["live"]["inFlight"], 1, "{before}");

    let (code, answer) = swap(&door, &token, &variant("a"));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["live"]["version"], 2);
    // The stream still holds version 1.
    assert_eq!(answer["previous"]["version"], 1);
    assert_eq!(answer["previous"]["inFlight"], 1, "{answer}");
    assert_eq!(answer["live"]["inFlight"], 0, "{answer}");

    // It keeps streaming: a task started after the swap reaches it.
    let task = door.send_task(None, "reply after the swap", json!({}));
    let task_id = task["id"].as_str().unwrap();
    let mut seen = false;
    while !seen {
        let event = sse.next();
        seen = event.data.to_string().contains(task_id);
    }
    // New requests are served by version 2.
    assert!(card_is_served(&door.addr));
    assert_eq!(status(&door, &token)["live"]["version"], 2);

    // The session closes: the stream ends with capsule-closed, on version 1.
    unsafe { libc::kill(door.pid() as i32, libc::SIGTERM) };
    let rest = sse.rest();
    assert!(
        rest.iter()
            .any(|e| e.data.to_string().contains("capsule-closed")),
        "{rest:?}"
    );
    let lines = door.stop();
    let swapped = lines
        .iter()
        .position(|l| l.contains("door swapped"))
        .expect("the swap is logged");
    assert!(
        lines[swapped].contains("old_version=1") && lines[swapped].contains("version=2"),
        "{}",
        lines[swapped]
    );
    let after = &lines[swapped..];
    assert!(
        after
            .iter()
            .any(|l| l.contains("door instance done") && l.contains("door=1")),
        "the stream's instance ends on version 1: {after:#?}"
    );
    assert!(
        after.iter().any(|l| l.contains("request")
            && l.contains("/.well-known/agent-card.json")
            && l.contains("door=2")),
        "the card after the swap is served by version 2: {after:#?}"
    );
}

// Issue 13 ("Agent Card"): the door derives the public card from the
// session alone, so the host keeps each door version's answer to a plain GET
// of it, as an HTTP cache in front of the door would. The door answers the
// first, every conditional GET, and the first after a swap; the rest get its
// bytes and headers unchanged.
#[test]
fn the_card_is_kept_per_door_version() {
    const CARD: &str = "/.well-known/agent-card.json";
    let door = Door::start_logged(MANIFEST, "info,murmur_door_host=debug");
    let token = control_token(&door);
    let first = door.get(CARD);
    assert_eq!(first.status, 200);
    let without_date = |reply: &Reply| -> Vec<(String, String)> {
        let mut headers = reply.headers.clone();
        headers.retain(|(name, _)| name != "date");
        headers
    };
    for path in [CARD, "/.well-known/agent-card.json?fresh=1"] {
        let kept = door.get(path);
        assert_eq!(kept.status, 200);
        assert_eq!(kept.body, first.body);
        assert_eq!(without_date(&kept), without_date(&first));
    }
    let etag = first.header("etag").unwrap().to_string();
    let revalidated = door.request("GET", CARD, &[("if-none-match", &etag)], b"");
    assert_eq!(revalidated.status, 304);
    let (status, swapped) = swap(&door, &token, &variant("card"));
    assert_eq!(status, 200, "{swapped}");
    for _ in 0..2 {
        let after = door.get(CARD);
        assert_eq!((after.status, &after.body), (200, &first.body));
    }
    // Each request's last line, logged before its answer is sent.
    let answered: Vec<(bool, bool)> = door
        .stop()
        .iter()
        .filter(|l| l.contains(CARD) && l.contains(" request status="))
        .map(|l| (l.contains("door=1"), l.contains("kept_card=true")))
        .collect();
    assert_eq!(
        answered,
        [
            (true, false),
            (true, true),
            (true, true),
            (true, false),
            (false, false),
            (false, true),
        ],
        "(version 1, kept): the first GET and the conditional one answered by the door, the others kept; after the swap, the first answered by version 2"
    );
}

/// A component exporting `wasi:http/incoming-handler` that imports only
/// `wasi:http/types` (the trapping door of the fault tests): it links, but
/// it would answer from no session at all, like a door composed with a
/// provider of its own.
fn door_without_session() -> Vec<u8> {
    common::handler_component("", "", "unreachable")
}

/// A component of another world: it exports a function `run` and no handler.
fn wrong_world() -> Vec<u8> {
    wat::parse_str(
        r#"(component
  (core module $m (func (export "run")))
  (core instance $i (instantiate $m))
  (func $run (canon lift (core func $i "run")))
  (export "run" (func $run)))"#,
    )
    .unwrap()
}

/// A handler that imports an interface the host does not provide.
fn foreign_import() -> Vec<u8> {
    common::handler_component(
        r#"(import "acme:vault/secrets@1.0.0" (instance $vault))"#,
        "",
        "unreachable",
    )
}

#[test]
fn a_component_that_is_not_our_door_is_refused() {
    let door = Door::start(MANIFEST);
    let token = control_token(&door);
    let embedded = digest(EMBEDDED_DOOR);
    let truncated = &EMBEDDED_DOOR[..EMBEDDED_DOOR.len() / 2];
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "corrupt",
            b"not a component".to_vec(),
            "compiling the door component",
        ),
        (
            "truncated",
            truncated.to_vec(),
            "compiling the door component",
        ),
        (
            "wrong world",
            wrong_world(),
            "does not export wasi:http/incoming-handler",
        ),
        (
            "no session",
            door_without_session(),
            "does not import [\"murmur:door/session\", \"murmur:door/tokens\"]",
        ),
        (
            "foreign import",
            foreign_import(),
            "imports what the host does not provide: [\"acme:vault/secrets\"]",
        ),
    ];
    for (label, bytes, reason) in cases {
        let (code, answer) = swap(&door, &token, &bytes);
        assert_eq!(code, 422, "{label}: {answer}");
        assert_eq!(answer["error"], "refused", "{label}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains(reason), "{label}: {message}");
        assert!(
            message.ends_with("the live door keeps serving"),
            "{label}: {message}"
        );
        let now = status(&door, &token);
        assert_eq!(now["live"]["version"], 1, "{label}");
        assert_eq!(now["live"]["digest"], embedded, "{label}");
        assert_eq!(now["previous"], Value::Null, "{label}");
        assert!(card_is_served(&door.addr), "{label}");
    }
    // A file that cannot be read, named in a JSON body.
    let reply = swap_path(&door, &token, "/nonexistent/door.wasm");
    assert_eq!(reply.status, 422, "{}", reply.text());
    assert!(reply.text().contains("/nonexistent/door.wasm"));
    // A file that can be.
    let file = door.state.path().join("v2.wasm");
    std::fs::write(&file, variant("file")).unwrap();
    let reply = swap_path(&door, &token, &file.display().to_string());
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["live"]["source"], file.display().to_string());
    assert_eq!(reply.json()["live"]["version"], 2);
    let lines = door.stop();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("door swap refused"))
            .count(),
        6,
        "{lines:#?}"
    );
}

/// The standalone door (`tools/compose`: the door with the fixture plugged
/// into its `murmur:door` imports), as tests/standalone.rs builds it: it
/// links, but answers from the fixture's state, not the session's.
fn composed() -> Vec<u8> {
    std::fs::read(crate::standalone::component()).unwrap()
}

#[test]
fn the_door_composed_with_a_provider_is_refused() {
    let door = Door::start(MANIFEST);
    let token = control_token(&door);
    let (code, answer) = swap(&door, &token, &composed());
    assert_eq!(code, 422, "{answer}");
    assert!(
        answer["message"].as_str().unwrap().contains(
            "does not import [\"murmur:door/session\", \"murmur:door/tokens\"]: it would answer from state of its own"
        ),
        "{answer}"
    );
    assert_eq!(status(&door, &token)["live"]["version"], 1);
    assert!(card_is_served(&door.addr));
}

#[test]
fn rollback_and_the_control_token() {
    let door = Door::start(MANIFEST);
    let token = control_token(&door);
    assert_eq!(token.len(), 64);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(door.state.path().join("control-token"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    // The tokens file is untouched: credentials only.
    assert_eq!(
        door.tokens.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["operator"]
    );

    // No token, a door token, a near miss: 401, nothing read or swapped.
    let mut near = token.clone().into_bytes();
    near[63] = if near[63] == b'0' { b'1' } else { b'0' };
    let near = String::from_utf8(near).unwrap();
    let operator = door.token("operator");
    for presented in [None, Some(operator.as_str()), Some(near.as_str()), Some("")] {
        for (method, action) in [("GET", ""), ("POST", "/swap"), ("POST", "/rollback")] {
            let reply = control(&door, presented, method, action, &[], b"\0asm");
            assert_eq!(reply.status, 401, "{method} {action}: {}", reply.text());
            assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
            assert_eq!(reply.json()["error"], "unauthorized");
        }
    }
    assert_eq!(status(&door, &token)["live"]["version"], 1);

    // Nothing to roll back to yet.
    let reply = control(&door, Some(&token), "POST", "/rollback", &[], b"");
    assert_eq!(reply.status, 409, "{}", reply.text());
    assert_eq!(reply.json()["error"], "no_previous");

    let v2 = variant("v2");
    let (code, answer) = swap(&door, &token, &v2);
    assert_eq!(code, 200, "{answer}");
    let reply = control(&door, Some(&token), "POST", "/rollback", &[], b"");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let back = reply.json();
    assert_eq!(back["live"]["version"], 1);
    assert_eq!(back["live"]["digest"], digest(EMBEDDED_DOOR));
    assert_eq!(back["live"]["source"], "embedded");
    assert_eq!(back["previous"]["version"], 2);
    assert_eq!(back["previous"]["digest"], digest(&v2));
    assert!(card_is_served(&door.addr));
    // A second rollback undoes the first.
    let reply = control(&door, Some(&token), "POST", "/rollback", &[], b"");
    assert_eq!(reply.json()["live"]["version"], 2);
    assert_eq!(reply.json()["previous"]["version"], 1);
    // The next swap is version 3.
    let (_, answer) = swap(&door, &token, &variant("v3"));
    assert_eq!(answer["live"]["version"], 3);
    assert_eq!(answer["previous"]["version"], 2);

    // Other methods and paths.
    assert_eq!(
        control(&door, Some(&token), "GET", "/swap", &[], b"").status,
        405
    );
    assert_eq!(
        control(&door, Some(&token), "GET", "/nope", &[], b"").status,
        404
    );
}

#[test]
fn sighup_reloads_the_component_file() {
    let state = TempDir::new("door");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let file = state.path().join("door.wasm");
    let (a, b) = (variant("a"), variant("b"));
    std::fs::write(&file, &a).unwrap();
    let door = Door::start_with(&manifest, state, &["--component", file.to_str().unwrap()]);
    let token = control_token(&door);
    let now = status(&door, &token);
    assert_eq!(now["live"]["version"], 1);
    assert_eq!(now["live"]["digest"], digest(&a));
    assert_eq!(now["live"]["source"], file.display().to_string());
    assert!(card_is_served(&door.addr));

    let wait_version = |version: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = status(&door, &token);
            if now["live"]["version"] == version {
                return now;
            }
            assert!(Instant::now() < deadline, "never version {version}: {now}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    std::fs::write(&file, &b).unwrap();
    unsafe { libc::kill(door.pid() as i32, libc::SIGHUP) };
    let now = wait_version(2);
    assert_eq!(now["live"]["digest"], digest(&b));
    assert_eq!(now["previous"]["digest"], digest(&a));
    assert!(card_is_served(&door.addr));

    // A broken file is refused; version 2 keeps serving.
    std::fs::write(&file, b"garbage").unwrap();
    unsafe { libc::kill(door.pid() as i32, libc::SIGHUP) };
    std::fs::write(&file, &a).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(door.pid() as i32, libc::SIGHUP) };
    let now = wait_version(3);
    assert_eq!(now["live"]["digest"], digest(&a));
    let mut door = door;
    assert!(door.alive());
    let lines = door.stop();
    assert!(
        lines.iter().filter(|l| l.contains("door swapped")).count() == 2,
        "{lines:#?}"
    );
}

#[test]
fn sighup_on_the_embedded_door_changes_nothing() {
    let mut door = Door::start(MANIFEST);
    let token = control_token(&door);
    unsafe { libc::kill(door.pid() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(door.alive());
    assert!(card_is_served(&door.addr));
    assert_eq!(status(&door, &token)["live"]["version"], 1);
    let lines = door.stop();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("no --component file to reload")),
        "{lines:#?}"
    );
}

#[test]
fn a_component_file_that_is_not_our_door_stops_the_launch() {
    let state = TempDir::new("door");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let file = state.path().join("door.wasm");
    std::fs::write(&file, door_without_session()).unwrap();
    let stderr = launch_refused(&manifest, state.path(), &file, &[]);
    assert!(
        stderr.contains("does not import [\"murmur:door/session\", \"murmur:door/tokens\"]"),
        "{stderr}"
    );
}

/// `--max-component-bytes` bounds every component the host reads: an upload
/// past it is answered 413 without being read to its end, a file named to
/// the control surface 422, and a `--component` file stops the launch. The
/// live door keeps serving.
#[test]
fn a_component_past_the_limit_is_not_read() {
    // Room for variant("small"), not for the longer tag.
    let max = EMBEDDED_DOOR.len() + 40;
    let state = TempDir::new("door");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(&manifest, MANIFEST).unwrap();
    let big = state.path().join("big.wasm");
    std::fs::write(&big, variant("a tag longer than ten bytes")).unwrap();
    let limit = max.to_string();
    let door = Door::start_with(&manifest, state, &["--max-component-bytes", &limit]);
    let token = control_token(&door);

    let (code, body) = swap(&door, &token, &variant("a tag longer than ten bytes"));
    assert_eq!(code, 413);
    assert_eq!(
        body,
        json!({"error": "payload_too_large", "message": format!("a component is at most {max} bytes (--max-component-bytes)")})
    );
    let path = big.display().to_string();
    let reply = swap_path(&door, &token, &path);
    assert_eq!(reply.status, 422);
    let size = std::fs::metadata(&big).unwrap().len();
    assert_eq!(reply.json(), unreadable(&path, max));
    // One within the limit swaps.
    let (code, _) = swap(&door, &token, &variant("small"));
    assert_eq!(code, 200);
    assert_eq!(status(&door, &token)["live"]["version"], 2);
    assert!(card_is_served(&door.addr));

    let second = door.state.path().join("second");
    let stderr = launch_refused(&manifest, &second, &big, &["--max-component-bytes", &limit]);
    assert!(
        stderr.contains(&format!(
            "reading the door component {path}: the file has {size} bytes; a component is at most {max} bytes"
        )),
        "{stderr}"
    );
}

/// The refusal of a file named to the control surface that cannot be read
/// as a component: the same whatever the reason.
fn unreadable(path: &str, max: usize) -> Value {
    json!({"error": "refused", "message": format!("{path} cannot be read as a component: it must be a regular file the host can read, of at most {max} bytes (--max-component-bytes); the live door keeps serving")})
}

/// A swap by path never quotes the file, nor tells whether it exists or
/// what kind it is; a FIFO with no writer is refused at once.
#[test]
fn a_swap_by_path_tells_nothing_of_the_file() {
    let door = Door::start(MANIFEST);
    let token = control_token(&door);
    let max = swap::MAX_COMPONENT_BYTES;
    let dir = door.state.path();
    let secret = dir.join("secret");
    std::fs::write(&secret, "root:$6$salt$hash:19000:0:99999:7:::\n").unwrap();
    let fifo = dir.join("fifo");
    let fifo_c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: mkfifo on a path this test owns.
    assert_eq!(unsafe { libc::mkfifo(fifo_c.as_ptr(), 0o600) }, 0);
    // A file that is not a component: what a component is, not what it holds.
    let reply = swap_path(&door, &token, &secret.display().to_string());
    assert_eq!(reply.status, 422);
    assert_eq!(
        reply.json(),
        json!({"error": "refused", "message": "not a WebAssembly component: a door is a component of the `door` world (wit/door.wit); the live door keeps serving"})
    );
    assert!(!reply.text().contains("0x72") && !reply.text().contains("root"));
    // Missing, a directory, a FIFO: one answer, at once.
    for path in [dir.join("missing"), dir.to_path_buf(), fifo] {
        let path = path.display().to_string();
        let started = std::time::Instant::now();
        let reply = swap_path(&door, &token, &path);
        assert!(started.elapsed() < Duration::from_secs(2), "{path}");
        assert_eq!(reply.status, 422);
        assert_eq!(reply.json(), unreadable(&path, max));
    }
    assert_eq!(status(&door, &token)["live"]["version"], 1);
}

/// The control surface reads the scheme of `Bearer <token>` in any case,
/// as the door does ("What the door answers").
#[test]
fn the_control_scheme_matches_in_any_case() {
    let door = Door::start(MANIFEST);
    let token = control_token(&door);
    for scheme in ["bearer", "BEARER", "bEaReR"] {
        let auth = format!("{scheme} {token}");
        let reply = door.request("GET", CONTROL_PATH, &[("authorization", &auth)], b"");
        assert_eq!(reply.status, 200, "{scheme}: {}", reply.text());
    }
    let reply = door.request(
        "GET",
        CONTROL_PATH,
        &[("authorization", &format!("Basic {token}"))],
        b"",
    );
    assert_eq!(reply.status, 401);
}
