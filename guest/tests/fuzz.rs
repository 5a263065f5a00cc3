//! A fuzz target over the door's request handling, natively: a head, its
//! headers and a body in, a response out, through every step of the check
//! order ("What the door answers") against the fake host. Each case is built
//! by `arbitrary` from random bytes: a request of `fuzz/corpus/` mutated
//! node by node (values, keys and strings from the reference's vocabulary),
//! or bytes flipped in its text, with headers drawn from the same
//! vocabulary. Whatever comes in, the door answers: no panic, a status the
//! reference lists, and a body that is the JSON (or the SSE) it promises.
//!
//! CI runs `FUZZ_CASES` cases (default 20,000) from a fixed seed. A long run:
//!
//! ```sh
//! FUZZ_SECONDS=600 FUZZ_SEED=$RANDOM cargo test --release -p murmur-door-guest --test door fuzz:: -- --nocapture
//! ```

use crate::common;

use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use common::FakeHost;
use murmur_door_guest::imports::model::{Delivery, Event, EventBody, Status, TaskState};
use murmur_door_guest::{Reply, Request, handle};
use serde_json::{Map, Value, json};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus");

/// Strings the reference gives meaning to.
const WORDS: &[&str] = &[
    "2.0",
    "1.0",
    "0.3",
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "GetExtendedAgentCard",
    "murmur.WatchSession",
    "murmur.StopSession",
    "CreateTaskPushNotificationConfig",
    "message/send",
    "ROLE_USER",
    "ROLE_AGENT",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_WORKING",
    "TASK_STATE_UNSPECIFIED",
    "UNRECOGNIZED",
    "text/plain",
    "application/json",
    "image/png",
    "image/jpeg",
    "tsk_00000000000000000000000000000000",
    "ctx_00000000000000000000000000000000",
    "msg_1",
    "",
    " ",
    "\u{0}",
    "é",
    "iVBORw0KGgo=",
    "2026-11-30T12:00:00Z",
    "-1",
    "1e400",
];

/// Keys the reference reads.
const KEYS: &[&str] = &[
    "jsonrpc",
    "id",
    "method",
    "params",
    "message",
    "messageId",
    "role",
    "parts",
    "text",
    "data",
    "raw",
    "url",
    "mediaType",
    "filename",
    "taskId",
    "contextId",
    "referenceTaskIds",
    "configuration",
    "returnImmediately",
    "historyLength",
    "acceptedOutputModes",
    "taskPushNotificationConfig",
    "metadata",
    "extensions",
    "tenant",
    "status",
    "statusTimestampAfter",
    "pageSize",
    "pageToken",
    "includeArtifacts",
    "forgetSession",
];

const HEADERS: &[(&str, &[&str])] = &[
    (
        "authorization",
        &[
            "Bearer op",
            "Bearer watcher",
            "bearer op",
            "Bearer",
            "Basic op",
            "Bearer  op",
        ],
    ),
    ("a2a-version", &["1.0", "0.3", "", "1.0, 0.3"]),
    (
        "content-type",
        &[
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
        ],
    ),
    (
        "a2a-extensions",
        &[
            "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1",
            "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1",
            "urn:unknown",
        ],
    ),
    (
        "x-murmur-task-origin",
        &["peer", "session", "client", "PEER"],
    ),
    ("x-murmur-task-trust", &["untrusted", "trusted", ""]),
    (
        "x-murmur-completion-session",
        &["ses_019f01a940ce7761854e768ecbe3d399", "ses_x"],
    ),
    ("x-murmur-delegation-id", &["dlg_awaited", "dlg_other"]),
    (
        "last-event-id",
        &["0", "39", "41", "-1", "x", "18446744073709551616"],
    ),
];

fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(CORPUS)
        .expect("the corpus")
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| (path.display().to_string(), std::fs::read(&path).unwrap()))
        .collect()
}

fn word(u: &mut Unstructured) -> Result<String> {
    Ok(if u.ratio(3, 4)? {
        u.choose(WORDS)?.to_string()
    } else {
        u.arbitrary()?
    })
}

/// A small JSON value.
fn value(u: &mut Unstructured, depth: u32) -> Result<Value> {
    Ok(match u.int_in_range(0..=7)? {
        0 => Value::Null,
        1 => json!(u.arbitrary::<bool>()?),
        2 => json!(u.arbitrary::<i64>()?),
        3 => json!(u.arbitrary::<f64>()?).clone(),
        4 | 5 => json!(word(u)?),
        6 if depth > 0 => Value::Array(
            (0..u.int_in_range(0..=3)?)
                .map(|_| value(u, depth - 1))
                .collect::<Result<_>>()?,
        ),
        _ if depth > 0 => {
            let mut map = Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                map.insert(u.choose(KEYS)?.to_string(), value(u, depth - 1)?);
            }
            Value::Object(map)
        }
        _ => Value::Null,
    })
}

/// Changes one node of `v`, somewhere below it.
fn mutate(u: &mut Unstructured, v: &mut Value) -> Result<()> {
    let descend = u.ratio(2, 3)?;
    match v {
        Value::Object(map) if descend && !map.is_empty() => {
            let key = u.choose(&map.keys().cloned().collect::<Vec<_>>())?.clone();
            match u.int_in_range(0..=3)? {
                0 => {
                    map.remove(&key);
                }
                1 => {
                    map.insert(u.choose(KEYS)?.to_string(), value(u, 2)?);
                }
                _ => mutate(u, map.get_mut(&key).unwrap())?,
            }
        }
        Value::Array(items) if descend && !items.is_empty() => {
            let at = u.choose_index(items.len())?;
            match u.int_in_range(0..=3)? {
                0 => {
                    items.remove(at);
                }
                1 => {
                    let copy = items[at].clone();
                    items.push(copy);
                }
                _ => mutate(u, &mut items[at])?,
            }
        }
        _ => *v = value(u, 2)?,
    }
    Ok(())
}

/// A body: a corpus request mutated as JSON, its text mutated as bytes, or
/// bytes alone.
fn body(u: &mut Unstructured, corpus: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
    let (_, seed) = u.choose(corpus)?;
    let mut bytes = match serde_json::from_slice::<Value>(seed) {
        Ok(mut v) => {
            // Mostly the params: the envelope's refusals come early.
            for _ in 0..u.int_in_range(0..=4)? {
                match v.get_mut("params") {
                    Some(params) if u.ratio(4, 5)? => mutate(u, params)?,
                    _ => mutate(u, &mut v)?,
                }
            }
            serde_json::to_vec(&v).unwrap()
        }
        Err(_) => seed.clone(),
    };
    let byte_mutations = if u.ratio(1, 5)? {
        u.int_in_range(1..=3)?
    } else {
        0
    };
    for _ in 0..byte_mutations {
        if bytes.is_empty() || u.ratio(1, 3)? {
            let at = u.int_in_range(0..=bytes.len())?;
            bytes.insert(at, u.arbitrary()?);
        } else if u.ratio(1, 2)? {
            let at = u.choose_index(bytes.len())?;
            bytes[at] = u.arbitrary()?;
        } else {
            let at = u.choose_index(bytes.len())?;
            bytes.truncate(at);
        }
    }
    Ok(bytes)
}

fn request(u: &mut Unstructured) -> Result<Request> {
    let method = if u.ratio(9, 10)? {
        "POST"
    } else {
        *u.choose(&["GET", "PUT", "HEAD"])?
    };
    let path = if u.ratio(9, 10)? {
        "/".to_string()
    } else {
        u.choose(&[
            "/.well-known/agent-card.json",
            "/resources/files/x",
            "/resources/peer",
            "/?q=1",
            "//",
        ])?
        .to_string()
    };
    let mut headers = Vec::new();
    for (name, values) in HEADERS {
        // The headers a request needs are mostly there and mostly right;
        // the others come now and then.
        let wanted = matches!(*name, "a2a-version" | "content-type" | "authorization");
        if u.ratio(if wanted { 19 } else { 1 }, 20)? {
            let value: Vec<u8> = if wanted && u.ratio(4, 5)? {
                values[0].as_bytes().to_vec()
            } else if u.ratio(9, 10)? {
                u.choose(values)?.as_bytes().to_vec()
            } else {
                u.arbitrary()?
            };
            headers.push((*name, value));
            if u.ratio(1, 20)? {
                headers.push(headers.last().unwrap().clone());
            }
        }
    }
    Ok(Request::new(method, path, headers))
}

/// What every answer must be; answers what it was, for the tally.
fn check(
    reply: Reply<<FakeHost as murmur_door_guest::Imports>::Reader>,
    host: &FakeHost,
) -> String {
    match reply {
        Reply::Whole(response) => {
            assert!(
                [200, 400, 401, 403, 404, 405, 501].contains(&response.status),
                "status {}",
                response.status
            );
            assert_eq!(response.header("content-type"), Some("application/json"));
            assert_eq!(
                response.header("content-length"),
                Some(response.body.len().to_string().as_str())
            );
            let body: Value = serde_json::from_slice(&response.body).expect("a JSON body");
            if response.status != 200 || body.get("jsonrpc").is_none() {
                let refusal = body["error"].is_string() && body["message"].is_string();
                assert!(refusal || body.get("name").is_some(), "{body}");
                return format!(
                    "{} {}",
                    response.status,
                    body["error"].as_str().unwrap_or("card")
                );
            }
            assert_eq!(body["jsonrpc"], "2.0");
            assert!(body.get("id").is_some(), "{body}");
            match (body.get("result"), body.get("error")) {
                (Some(_), None) => "result".to_string(),
                (None, Some(error)) => {
                    let code = error["code"].as_i64().expect("an integer code");
                    assert!((-32768..=-31000).contains(&code), "{error}");
                    assert!(error["message"].is_string(), "{error}");
                    code.to_string()
                }
                _ => panic!("one of result and error: {body}"),
            }
        }
        Reply::Stream(stream) => {
            let mut written = Vec::new();
            murmur_door_guest::methods::streams::pump(host, stream, &mut |bytes| {
                written.extend_from_slice(bytes);
                true
            });
            let text = String::from_utf8(written).expect("UTF-8 events");
            for event in text.split("\n\n").filter(|e| !e.is_empty()) {
                for line in event.lines() {
                    if let Some(data) = line.strip_prefix("data: ") {
                        let data: Value = serde_json::from_str(data).expect("JSON data");
                        assert_eq!(data["jsonrpc"], "2.0");
                    } else {
                        assert!(line.starts_with("id: ") || line.starts_with(':'), "{line}");
                    }
                }
            }
            "stream".to_string()
        }
        Reply::Unread => panic!("a body that was read whole came back unread"),
        Reply::File(file) => panic!("a file served with nothing preopened: {file:?}"),
    }
}

fn case(data: &[u8], corpus: &[(String, Vec<u8>)]) -> Result<String> {
    let mut u = Unstructured::new(data);
    let host = FakeHost::new(u.ratio(1, 3)?);
    if u.ratio(1, 10)? {
        *host.failing.borrow_mut() = Some("disk I/O error".into());
    }
    host.busy.set(u.ratio(1, 5)?);
    host.log.borrow_mut().push(Delivery::Event(Event {
        id: 41,
        task_id: "tsk_00000000000000000000000000000000".into(),
        context_id: "ctx_00000000000000000000000000000000".into(),
        body: EventBody::Status {
            status: Status {
                state: TaskState::Completed,
                message: Some(word(&mut u)?),
                timestamp_ms: u.arbitrary()?,
            },
            message_id: None,
        },
    }));
    let request = request(&mut u)?;
    let body = body(&mut u, corpus)?;
    let reply = handle(&host, &request, || body.clone());
    Ok(check(reply, &host))
}

/// The number the environment variable `name` holds, or `default`.
fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn the_door_answers_whatever_comes_in() {
    let corpus = corpus();
    let (seed, cases) = (env_or("FUZZ_SEED", 1), env_or("FUZZ_CASES", 20_000));
    let seconds = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok());
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut data = vec![0u8; 4096];
    let started = Instant::now();
    let mut n = 0u64;
    let mut tally = std::collections::BTreeMap::<String, u64>::new();
    loop {
        let done = match deadline {
            Some(deadline) => Instant::now() >= deadline,
            None => n >= cases,
        };
        if done {
            break;
        }
        rng.fill(&mut data);
        let outcome = std::panic::catch_unwind(|| case(&data, &corpus));
        if let Ok(Ok(what)) = &outcome {
            *tally.entry(what.clone()).or_default() += 1;
        }
        if outcome.is_err() {
            let path = std::env::temp_dir().join(format!("murmur-door-fuzz-{seed}-{n}.bin"));
            std::fs::write(&path, &data).unwrap();
            panic!(
                "case {n} of seed {seed} failed; its bytes are in {}",
                path.display()
            );
        }
        n += 1;
    }
    println!(
        "{n} cases from seed {seed} in {:?}: {tally:?}",
        started.elapsed()
    );
    // The cases reach past the early refusals: results, streams and the
    // method errors all come up.
    for reached in ["result", "stream", "-32602", "-32001"] {
        assert!(tally.contains_key(reached), "no {reached} in {tally:?}");
    }
}

/// Segments a plane's path is drawn from: names in the fuzz workdir, dots,
/// slashes and their encodings, look-alikes, and bytes that are no UTF-8.
const PATH_WORDS: &[&str] = &[
    "out",
    "deep",
    "a.txt",
    "b.bin",
    "logs",
    "x.txt",
    "y.log",
    "report.md",
    "secret.txt",
    "murmur.yaml",
    "to-secret",
    "to-etc",
    "up",
    "loop",
    "fifo",
    "in",
    ".",
    "..",
    "",
    "%2e",
    "%2e%2e",
    "%2E%2e",
    "%2f",
    "%2F",
    "%5c",
    "\\",
    "%00",
    "%252e%252e",
    "%c0%ae",
    "%c0%af",
    "%e2%80%a4",
    "%ef%bc%8f",
    "%ff",
    "%",
    "OUT",
    "*",
    "**",
    "?",
    "[",
    "~",
    "/",
    "//",
];

/// A GET under the operator plane with a path made of `PATH_WORDS` and
/// random bytes.
fn plane_request(u: &mut Unstructured) -> Result<Request> {
    let mut path = String::from("/resources/files");
    for _ in 0..u.int_in_range(0..=8)? {
        path.push('/');
        if u.ratio(1, 8)? {
            let bytes: Vec<u8> = u.arbitrary()?;
            path.extend(bytes.iter().map(|b| format!("%{b:02x}")));
        } else {
            path.push_str(u.choose(PATH_WORDS)?);
        }
    }
    if u.ratio(1, 10)? {
        path.push_str("?pageSize=1");
    }
    let method = if u.ratio(1, 10)? { "HEAD" } else { "GET" };
    Ok(Request::new(method, path, [("range", "bytes=0-")]))
}

/// The fuzz workdir: `out/**`, `report.md` and `logs/*.txt` exported,
/// beside files that are not and links that lead out of the exports, out
/// of the workdir, in a loop and back in.
fn plane_workdir() -> std::path::PathBuf {
    use std::os::unix::fs::symlink;
    let dir = std::env::temp_dir().join(format!("murmur-door-fuzz-planes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in [
        ("out/a.txt", "a"),
        ("out/deep/b.bin", "b"),
        ("report.md", "r"),
        ("logs/x.txt", "x"),
        ("logs/y.log", "SECRET"),
        ("secret.txt", "SECRET"),
        ("murmur.yaml", "SECRET"),
    ] {
        std::fs::create_dir_all(dir.join(path).parent().unwrap()).unwrap();
        std::fs::write(dir.join(path), text).unwrap();
    }
    for (link, target) in [
        ("out/to-secret", "../secret.txt"),
        ("out/to-etc", "/etc/passwd"),
        ("out/up", "../.."),
        ("out/loop", "loop"),
        ("out/in", "../logs"),
        ("out/deep/to-secret", "../../secret.txt"),
    ] {
        symlink(target, dir.join(link)).unwrap();
    }
    dir
}

/// Issue 33, "A fuzz target over the path resolver": whatever path comes
/// in, the plane serves only what is exported. A file it sends is one of
/// the exported files, and a listing names nothing that is not served.
#[test]
fn no_path_resolves_outside_the_exports() {
    let workdir = plane_workdir();
    let host = FakeHost::new(false);
    *host.exports.borrow_mut() = murmur_door_guest::imports::model::Exports {
        files: vec!["out/**".into(), "report.md".into(), "logs/*.txt".into()],
        peer_files: Vec::new(),
        withheld: Vec::new(),
    };
    *host.preopened.borrow_mut() = vec![(".".into(), workdir.clone())];
    let served_files = ["out/a.txt", "out/deep/b.bin", "report.md", "logs/x.txt"];
    let hidden = [
        "y.log",
        "secret.txt",
        "murmur.yaml",
        "to-secret",
        "to-etc",
        "up",
        "loop",
    ];
    let (seed, cases) = (env_or("FUZZ_SEED", 1), env_or("FUZZ_CASES", 20_000));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut data = vec![0u8; 256];
    let mut tally = std::collections::BTreeMap::<u16, u64>::new();
    for n in 0..cases {
        rng.fill(&mut data);
        let Ok(request) = plane_request(&mut Unstructured::new(&data)) else {
            continue;
        };
        let status = match handle(&host, &request, Vec::new) {
            Reply::File(file) => {
                let path = file.path.join("/");
                assert!(
                    served_files.contains(&path.as_str()),
                    "case {n}: {} sent {path}",
                    request.path_with_query
                );
                let real = std::fs::canonicalize(workdir.join(&path)).unwrap();
                assert_eq!(real, workdir.join(&path), "case {n}: {path} is a link");
                file.head.status
            }
            // A HEAD of a file: its GET sends a file that is served.
            Reply::Whole(response) if response.status == 200 && response.body.is_empty() => {
                let get = Request::new("GET", request.path_with_query.clone(), [("x", "")]);
                let Reply::File(file) = handle(&host, &get, Vec::new) else {
                    panic!(
                        "case {n}: a HEAD of {} is no file's",
                        request.path_with_query
                    );
                };
                assert!(
                    served_files.contains(&file.path.join("/").as_str()),
                    "case {n}"
                );
                response.status
            }
            Reply::Whole(response) => {
                if response.status == 200 {
                    let listing: Value = serde_json::from_slice(&response.body).unwrap();
                    for entry in listing["entries"].as_array().unwrap() {
                        let name = entry["name"].as_str().unwrap();
                        assert!(
                            !hidden.contains(&name),
                            "case {n}: {} lists {name}",
                            request.path_with_query
                        );
                    }
                } else if response.status == 301 {
                    // A directory named without its `/`: the location lists.
                    let location = response.header("location").unwrap().to_string();
                    let get = Request::new("GET", location.clone(), [("x", "")]);
                    let Reply::Whole(listed) = handle(&host, &get, Vec::new) else {
                        panic!("case {n}: {location} is no listing");
                    };
                    assert_eq!(listed.status, 200, "case {n}: {location}");
                } else {
                    assert!(
                        [304, 400, 404].contains(&response.status),
                        "case {n}: {}",
                        response.status
                    );
                }
                response.status
            }
            Reply::Stream(_) | Reply::Unread => panic!("case {n}: a plane answered a stream"),
        };
        *tally.entry(status).or_default() += 1;
    }
    println!("{cases} plane paths from seed {seed}: {tally:?}");
    // The paths reach files, listings and the refusal alike.
    assert!(tally.len() >= 3 && tally.contains_key(&404), "{tally:?}");
    std::fs::remove_dir_all(&workdir).unwrap();
}

/// Issue 47: the exports are checked on the requested path before any file
/// is looked at, so a path no export names is answered without touching
/// the workdir (its timing tells nothing); a withheld path (the door's own
/// state) is never served or listed, whatever the globs.
#[test]
fn the_exports_come_first_and_withheld_paths_are_never_served() {
    let workdir = std::env::temp_dir().join(format!("murmur-door-withheld-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&workdir);
    std::fs::create_dir_all(workdir.join(".murmur-door")).unwrap();
    std::fs::write(workdir.join(".murmur-door/control-token"), "SECRET").unwrap();
    std::fs::write(workdir.join("secret.txt"), "exported by **").unwrap();
    let host = FakeHost::new(false);
    *host.exports.borrow_mut() = murmur_door_guest::imports::model::Exports {
        files: vec!["out/**".into(), "**".into()],
        peer_files: Vec::new(),
        withheld: vec![".murmur-door".into()],
    };
    *host.preopened.borrow_mut() = vec![(".".into(), workdir.clone())];
    let get = |path: &str| match handle(&host, &Request::new("GET", path, [("x", "")]), Vec::new) {
        Reply::Whole(response) => (response.status, response.body),
        Reply::File(file) => (file.head.status, Vec::new()),
        _ => panic!("{path}: not a plane's answer"),
    };
    let missing = get("/resources/files/nothing-here");
    assert_eq!(missing.0, 404);
    for hidden in [
        "/resources/files/.murmur-door/control-token",
        "/resources/files/.murmur-door/",
        "/resources/files/.murmur-door/nothing-here",
    ] {
        let asked = host.preopens_asked.get();
        assert_eq!(get(hidden), missing, "{hidden}");
        assert_eq!(
            host.preopens_asked.get(),
            asked,
            "{hidden} looked at the files"
        );
    }
    let (status, listing) = get("/resources/files/");
    assert_eq!(status, 200);
    let listing = String::from_utf8(listing).unwrap();
    assert!(!listing.contains(".murmur-door"), "{listing}");
    assert!(listing.contains("secret.txt"), "{listing}");
    std::fs::remove_dir_all(&workdir).unwrap();
}
