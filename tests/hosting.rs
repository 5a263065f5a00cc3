//! `murmur-door host`: many capsules in one process, one engine and one
//! compiled door shared by all, each capsule with its own listener, state
//! directory, tokens and session; the host's control surface.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::tempdir::TempDir;
use common::{Reply, binary, request, root};
use murmur_door_host::engine::EMBEDDED_DOOR;
use serde_json::{Value, json};

const PUBLIC: &str = "name: alpha\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n";
const SECURED: &str =
    "name: NAME\nversion: 0.1.0\nnetwork:\n  authentication:\n    scheme: bearer\n";

/// A running host: its capsules' urls by name, its control address.
struct Hosted {
    child: Child,
    dir: TempDir,
    urls: HashMap<String, String>,
    control: String,
    token: String,
    stderr: mpsc::Receiver<String>,
}

impl Drop for Hosted {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes the manifests and a capsules file of `entries` (YAML flow
/// mappings) in a fresh directory.
fn files(entries: &[&str]) -> (TempDir, PathBuf) {
    files_with("", entries)
}

/// As [`files`], the file's top-level keys beside `control` in `top`.
fn files_with(top: &str, entries: &[&str]) -> (TempDir, PathBuf) {
    let dir = TempDir::new("host");
    std::fs::write(dir.path().join("alpha.yaml"), PUBLIC).unwrap();
    for name in ["beta", "gamma"] {
        std::fs::write(
            dir.path().join(format!("{name}.yaml")),
            SECURED.replace("NAME", name),
        )
        .unwrap();
    }
    let mut file = format!("control: {{listen: 127.0.0.1:0}}\n{top}capsules:\n");
    for entry in entries {
        file.push_str(&format!("  - {entry}\n"));
    }
    let path = dir.path().join("capsules.yaml");
    std::fs::write(&path, file).unwrap();
    (dir, path)
}

fn command(path: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(binary());
    // No trace leaves a test unless it asks (tests/traces.rs).
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    command
        .arg("host")
        .arg(path)
        .args(extra)
        .env("RUST_LOG", "info")
        .env("XDG_CACHE_HOME", root().join("target/e2e-cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

const THREE: [&str; 3] = [
    "{manifest: alpha.yaml, listen: 127.0.0.1:0, state: alpha}",
    "{manifest: beta.yaml, listen: 127.0.0.1:0, state: beta}",
    "{manifest: gamma.yaml, listen: 127.0.0.1:0, state: gamma}",
];

/// Launches a host of `entries` and waits for its control listener.
fn launch(entries: &[&str], extra: &[&str]) -> Hosted {
    launch_file(files(entries), extra)
}

/// Launches the host of the capsules file `(dir, path)`.
fn launch_file((dir, path): (TempDir, PathBuf), extra: &[&str]) -> Hosted {
    let mut child = command(&path, extra).spawn().unwrap();
    let stderr = common::stderr_lines(&mut child);
    let mut urls = HashMap::new();
    let control = loop {
        let line = stderr
            .recv_timeout(Duration::from_secs(60))
            .expect("the host announces its control url");
        let url = |line: &str| {
            let at = line.find("url=").unwrap();
            line[at + 4..]
                .trim()
                .trim_start_matches("http://")
                .to_string()
        };
        if line.contains("door listening") {
            let at = line.find("capsule=").unwrap() + "capsule=".len();
            let name = line[at..].split_whitespace().next().unwrap().to_string();
            urls.insert(name, url(&line));
        } else if line.contains("host listening") {
            break url(&line);
        }
    };
    let token = std::fs::read_to_string(dir.path().join("host-control-token"))
        .unwrap()
        .trim()
        .to_string();
    Hosted {
        child,
        dir,
        urls,
        control,
        token,
        stderr,
    }
}

impl Hosted {
    fn control(&self, method: &str, path: &str, body: &[u8]) -> Reply {
        let auth = format!("Bearer {}", self.token);
        request(
            &self.control,
            method,
            path,
            &[("authorization", &auth)],
            body,
        )
    }

    fn capsules(&self) -> Value {
        let reply = self.control("GET", "/capsules", b"");
        assert_eq!(reply.status, 200, "{}", reply.text());
        reply.json()
    }

    /// Each capsule's live door version, by name.
    fn versions(&self) -> HashMap<String, u64> {
        self.capsules()["capsules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_string(),
                    c["door"]["version"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    fn card(&self, name: &str) -> Reply {
        request(
            &self.urls[name],
            "GET",
            "/.well-known/agent-card.json",
            &[],
            b"",
        )
    }

    fn tokens(&self, name: &str) -> Value {
        let file = self.dir.path().join(name).join("tokens.json");
        serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
    }

    /// The operator token capsule `name` minted.
    fn operator(&self, name: &str) -> String {
        self.tokens(name)["operator"].as_str().unwrap().to_string()
    }

    /// GetTask of a task no one has, with `token`, on capsule `name`.
    fn get_task(&self, name: &str, token: &str) -> Reply {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"tsk_none"}}"#;
        let auth = format!("Bearer {token}");
        request(
            &self.urls[name],
            "POST",
            "/",
            &[
                ("content-type", "application/json"),
                ("a2a-version", "1.0"),
                ("authorization", &auth),
            ],
            body.as_bytes(),
        )
    }

    /// Every line logged so far.
    fn log(&self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(100));
        self.stderr.try_iter().collect()
    }
}

/// Each capsule answers on its own listener with its own card and tokens;
/// one capsule's token opens no other's door.
#[test]
fn each_capsule_is_its_own_door() {
    let host = launch(&THREE, &[]);
    assert_eq!(host.urls.len(), 3);
    for name in ["alpha", "beta", "gamma"] {
        let card = host.card(name);
        assert_eq!(card.status, 200);
        assert_eq!(card.json()["name"], name);
    }
    let beta = host.operator("beta");
    let gamma = host.operator("gamma");
    assert_ne!(beta, gamma);
    // A task no one has: the token is good on its own capsule only.
    assert_eq!(host.get_task("beta", &beta).json()["error"]["code"], -32001);
    assert_eq!(host.get_task("gamma", &beta).status, 401);
    assert_eq!(host.get_task("beta", &gamma).status, 401);
    assert_eq!(
        host.get_task("gamma", &gamma).json()["error"]["code"],
        -32001
    );
    // Each capsule has its own state directory and its own control token.
    for name in ["alpha", "beta", "gamma"] {
        let state = host.dir.path().join(name);
        assert!(state.join("session.db").exists());
        assert!(state.join("control-token").exists());
    }
    let listed = host.capsules();
    let names: Vec<&str> = listed["capsules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    // The host's surface needs its own token.
    assert_eq!(
        request(&host.control, "GET", "/capsules", &[], b"").status,
        401
    );
    let auth = format!("Bearer {beta}");
    assert_eq!(
        request(
            &host.control,
            "GET",
            "/capsules",
            &[("authorization", &auth)],
            b""
        )
        .status,
        401
    );
}

/// One compile swaps every capsule; a swap or rollback can name capsules;
/// an unknown one is refused.
#[test]
fn one_compile_swaps_every_capsule_or_the_ones_named() {
    let host = launch(&THREE, &[]);
    let reply = host.control("POST", "/swap", EMBEDDED_DOOR);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let swapped = reply.json();
    assert_eq!(swapped["swapped"], json!(["alpha", "beta", "gamma"]));
    assert_eq!(swapped["refused"], json!([]));
    let all =
        |v: u64| HashMap::from([("alpha".into(), v), ("beta".into(), v), ("gamma".into(), v)]);
    assert_eq!(host.versions(), all(2));
    let log = host.log();
    assert_eq!(log.iter().filter(|l| l.contains("host swap")).count(), 1);
    assert_eq!(log.iter().filter(|l| l.contains("door swapped")).count(), 3);

    let reply = host.control("POST", "/swap?capsules=beta", EMBEDDED_DOOR);
    assert_eq!(reply.json()["swapped"], json!(["beta"]));
    let mut expected = all(2);
    expected.insert("beta".into(), 3);
    assert_eq!(host.versions(), expected);
    let reply = host.control("POST", "/rollback?capsules=beta", b"");
    assert_eq!(reply.json()["rolledBack"], json!(["beta"]));
    assert_eq!(host.versions()["beta"], 2);

    let reply = host.control("POST", "/swap?capsules=delta", EMBEDDED_DOOR);
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["message"], "there is no capsule named delta");
    let reply = host.control("POST", "/swap", b"not a component");
    assert_eq!(reply.status, 422);
    assert_eq!(host.versions(), {
        let mut v = all(2);
        v.insert("beta".into(), 2);
        v
    });
    for name in ["alpha", "beta", "gamma"] {
        assert_eq!(host.card(name).status, 200);
    }
}

/// Removing a capsule closes it alone and releases its state directory: it
/// can be added again. A bad entry is refused naming its key.
#[test]
fn capsules_are_added_and_removed_while_the_host_runs() {
    let host = launch(&THREE[..2], &[]);
    let reply = host.control("DELETE", "/capsules/beta", b"");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(std::net::TcpStream::connect(&host.urls["beta"]).is_err());
    assert_eq!(host.card("alpha").status, 200);
    assert_eq!(host.control("DELETE", "/capsules/beta", b"").status, 404);
    // One toolkit for both control surfaces: a route served with another
    // method is 405, any other path 404 naming what is served.
    let reply = host.control("GET", "/capsules/alpha", b"");
    assert_eq!(reply.status, 405);
    assert_eq!(
        reply.json(),
        json!({"error": "method_not_allowed", "message": "GET is not served on /capsules/alpha"})
    );
    let reply = host.control("GET", "/capsule", b"");
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.json(),
        json!({"error": "not_found", "message": "the host's control surface serves /capsules, /capsules/NAME, /swap, /rollback and /metrics"})
    );

    // The same state directory opens again: its lock was released.
    let entry = json!({"manifest": "beta.yaml", "listen": "127.0.0.1:0", "state": "beta"});
    let reply = host.control("POST", "/capsules", entry.to_string().as_bytes());
    assert_eq!(reply.status, 201, "{}", reply.text());
    let url = reply.json()["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let card = request(&url, "GET", "/.well-known/agent-card.json", &[], b"");
    assert_eq!(card.json()["name"], "beta");

    for (entry, message) in [
        (
            json!({"manifest": "beta.yaml", "listen": "127.0.0.1:0", "state": "other"}),
            "capsule beta: name: another capsule has this name",
        ),
        (
            json!({"name": "delta", "manifest": "beta.yaml", "listen": "127.0.0.1:0", "state": "alpha"}),
            "capsule delta: state: another capsule has this state directory",
        ),
        (
            json!({"name": "delta", "manifest": "beta.yaml", "listen": 7, "state": "d"}),
            "entry (delta): listen: expected an address such as 127.0.0.1:41873",
        ),
    ] {
        let reply = host.control("POST", "/capsules", entry.to_string().as_bytes());
        assert_eq!(reply.status, 422);
        assert_eq!(reply.json()["message"], message);
    }
    assert_eq!(host.capsules()["capsules"].as_array().unwrap().len(), 2);
}

/// A capsule holds at most its share of the pool (its entry's `instances`,
/// else `--capsule-instances`): a full share in one leaves the others
/// answering.
#[test]
fn a_full_share_leaves_the_other_capsules_answering() {
    // Alpha's entry asks for a share of 2; beta has the host's 4.
    let host = launch(
        &[
            "{manifest: alpha.yaml, listen: 127.0.0.1:0, state: alpha, instances: 2}",
            THREE[1],
        ],
        &["--capsule-instances", "4", "--instance-wait-ms", "100"],
    );
    let held = |n: usize| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"SendMessage","params":{{"message":{{"messageId":"m{n}","role":"ROLE_USER","parts":[{{"text":"sleep 3000"}}]}}}}}}"#
        );
        let addr = host.urls["alpha"].clone();
        std::thread::spawn(move || common::post(&addr, &body))
    };
    let holding: Vec<_> = (0..2).map(held).collect();
    std::thread::sleep(Duration::from_millis(300));
    let refused = host.card("alpha");
    assert_eq!(refused.status, 503, "{}", refused.text());
    let beta = host.card("beta");
    assert_eq!(beta.status, 200);
    for held in holding {
        held.join().unwrap();
    }
    assert_eq!(host.card("alpha").status, 200);
}

/// At launch nothing listens until every entry is valid: a bad one stops
/// the host naming its capsule and key.
#[test]
fn a_bad_entry_stops_the_launch_naming_it() {
    let (_dir, path) = files(&[
        THREE[0],
        "{name: beta, manifest: beta.yaml, listen: 127.0.0.1:0, state: beta, colour: red}",
    ]);
    let output = command(&path, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("capsules[1] (beta): colour: is not a key here"),
        "{stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");
}

/// The host's `GET /metrics`: Prometheus text with each capsule's requests
/// by method, status and JSON-RPC code, tasks by state, swaps, and the
/// host's pool and compiles.
#[test]
fn metrics_count_each_capsules_requests_and_tasks() {
    let host = launch(&THREE, &[]);
    let beta = host.operator("beta");
    assert_eq!(host.get_task("beta", &beta).json()["error"]["code"], -32001);
    assert_eq!(host.get_task("beta", "nope").status, 401);
    assert_eq!(host.card("alpha").status, 200);
    let message = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}"#;
    assert_eq!(common::post(&host.urls["alpha"], message).status, 200);
    let bogus = r#"{"jsonrpc":"2.0","id":1,"method":"Bogus"}"#;
    assert_eq!(
        common::post(&host.urls["alpha"], bogus).json()["error"]["code"],
        -32601
    );

    assert_eq!(
        request(&host.control, "GET", "/metrics", &[], b"").status,
        401
    );
    let reply = host.control("GET", "/metrics", b"");
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = reply.text();
    for line in [
        r#"murmur_door_requests_total{capsule="beta",method="GetTask",status="200",rpc_code="-32001"} 1"#,
        r#"murmur_door_requests_total{capsule="beta",method="other",status="401",rpc_code="none"} 1"#,
        r#"murmur_door_requests_total{capsule="alpha",method="card",status="200",rpc_code="none"} 1"#,
        r#"murmur_door_requests_total{capsule="alpha",method="SendMessage",status="200",rpc_code="none"} 1"#,
        r#"murmur_door_requests_total{capsule="alpha",method="other",status="200",rpc_code="-32601"} 1"#,
        r#"murmur_door_request_duration_seconds_count{capsule="alpha"} 3"#,
        r#"murmur_door_capsule_tasks{capsule="alpha",state="completed"} 1"#,
        r#"murmur_door_capsule_swaps_total{capsule="gamma",outcome="swapped"} 0"#,
        r#"murmur_door_capsule_streams{capsule="alpha"} 0"#,
        "murmur_door_capsules 3",
        "murmur_door_pool_instances 1100",
        "murmur_door_pool_instances_in_use 0",
        "murmur_door_write_timeouts_total 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
    // The requests above ended cleanly: their instances are kept, at most
    // --idle-instances of them.
    let idle: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("murmur_door_pool_instances_idle "))
        .unwrap_or_else(|| panic!("no murmur_door_pool_instances_idle in\n{text}"))
        .parse()
        .unwrap();
    assert!((1..=16).contains(&idle), "{idle}");
    let compiles: u64 = text
        .lines()
        .filter(|l| l.starts_with("murmur_door_compiles_total"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(compiles, 1, "{text}");
    assert!(text.trim_end().ends_with("# EOF"));
}

/// The value of the metric line `name` (labels included) in `metrics`.
fn metric(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
        .parse()
        .unwrap()
}

/// A hostile client asking hundreds of different ListTasks, each twice so
/// that each answer is kept, makes the host hold at most `--reuse-bytes` of
/// kept answers (docs/operations.md, "What a client can make the host
/// hold"): the oldest give way, every repeat is still answered from the
/// memo, a swap drops what the version swapped out kept, and a
/// well-behaved client is answered at once.
#[test]
fn kept_answers_hold_at_most_their_bytes() {
    const MAX: u64 = 32 << 10;
    let host = launch(&THREE[..1], &["--reuse-bytes", &MAX.to_string()]);
    let alpha = &host.urls["alpha"];
    let page = |id: u64, context: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"ListTasks","params":{{"contextId":"c{context}"}}}}"#
        )
    };
    let bytes = r#"murmur_door_capsule_reused_bytes{capsule="alpha"}"#;
    let outcome = |o: &str| {
        format!(r#"murmur_door_capsule_reused_answers_total{{capsule="alpha",outcome="{o}"}}"#)
    };
    let mut most = 0;
    for context in 0..400 {
        let first = common::post(alpha, &page(1, context));
        let again = common::post(alpha, &page(2, context));
        assert_eq!(first.status, 200, "{}", first.text());
        assert_eq!(
            first.json()["result"],
            json!({"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0})
        );
        assert_eq!(again.json()["id"], 2);
        assert_eq!(again.json()["result"], first.json()["result"]);
        if context % 50 == 49 {
            let metrics = host.control("GET", "/metrics", b"").text();
            let held = metric(&metrics, bytes);
            assert!(held <= MAX, "{held} bytes kept");
            most = most.max(held);
        }
    }
    let metrics = host.control("GET", "/metrics", b"").text();
    // Each repeat was found: the bound is what pushed answers out.
    assert_eq!(metric(&metrics, &outcome("hit")), 400, "{metrics}");
    assert!(most > MAX / 2, "{most}");
    assert!(metric(&metrics, &outcome("dropped")) > 300, "{metrics}");

    let started = std::time::Instant::now();
    assert_eq!(host.card("alpha").status, 200);
    assert_eq!(common::post(alpha, &page(3, 0)).status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    let reply = host.control("POST", "/swap?capsules=alpha", EMBEDDED_DOOR);
    assert_eq!(reply.json()["swapped"], json!(["alpha"]));
    let metrics = host.control("GET", "/metrics", b"").text();
    assert_eq!(metric(&metrics, bytes), 0, "{metrics}");
}

/// Issue 47 ("The memo's heads are not counted in `--reuse-bytes`"): a
/// kept answer holds its request's head twice, in its key and in the copy
/// a lookup reads, and both count. Requests whose heads are 32 KiB each,
/// each asked twice so that its answer is kept: the answers still kept (a
/// third round, newest first, finds exactly them) hold at most
/// `--reuse-bytes` in heads alone; before, about twice as many were kept.
#[test]
fn kept_answers_count_their_request_heads() {
    const MAX: usize = 1 << 20;
    const PAD: usize = 32 << 10;
    const ASKED: usize = 40;
    let host = launch(&THREE[..1], &["--reuse-bytes", &MAX.to_string()]);
    let alpha = &host.urls["alpha"];
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#;
    let ask = |n: usize| {
        let pad = format!("{n:04}{}", "p".repeat(PAD - 4));
        let headers = [
            ("content-type", "application/json"),
            ("a2a-version", "1.0"),
            ("x-pad", pad.as_str()),
        ];
        let reply = common::request(alpha, "POST", "/", &headers, body);
        assert_eq!(reply.status, 200, "{}", reply.text());
    };
    let hits = || {
        let metrics = host.control("GET", "/metrics", b"").text();
        let hit = r#"murmur_door_capsule_reused_answers_total{capsule="alpha",outcome="hit"}"#;
        metric(&metrics, hit) as usize
    };
    for n in 0..ASKED {
        ask(n);
        ask(n);
    }
    assert_eq!(hits(), ASKED);
    for n in (0..ASKED).rev() {
        ask(n);
    }
    let kept = hits() - ASKED;
    // Each kept answer holds its 32 KiB head twice: 16 fit in 1 MiB, less
    // what the rest of each answer takes.
    assert!(kept * 2 * PAD <= MAX, "{kept} answers kept");
    assert!(kept >= 12, "{kept} answers kept");
    let metrics = host.control("GET", "/metrics", b"").text();
    let held = metric(
        &metrics,
        r#"murmur_door_capsule_reused_bytes{capsule="alpha"}"#,
    );
    assert!(held as usize <= MAX, "{held}");
}

/// A capsule on the host's library: its entry in `dir`, named `name`.
fn entry(dir: &Path, name: &str) -> murmur_door_host::roster::Entry {
    let manifest = dir.join(format!("{name}.yaml"));
    std::fs::write(&manifest, format!("name: {name}\nversion: 0.1.0\n")).unwrap();
    let entry = json!({"manifest": manifest, "listen": "127.0.0.1:0", "state": dir.join(name)});
    let value: serde_yaml::Value = serde_json::from_value(entry).unwrap();
    murmur_door_host::roster::Entry::parse(&value, dir, "entry").unwrap()
}

/// A host of two capsules on its library: `bad` serves `door` (loaded
/// unchecked: it imports no session), `good` the embedded door, swapped in
/// for it alone. The runtime, host, state directory and both addresses.
struct FaultyHost {
    runtime: tokio::runtime::Runtime,
    host: std::sync::Arc<murmur_door_host::host::Host>,
    dir: TempDir,
    bad: String,
    good: String,
}

/// A host on the library, its capsules' tasks run by `agent`, and the
/// runtime it runs on.
fn library_host(
    door: &[u8],
    max_cpu_ms: u64,
    agent: std::sync::Arc<dyn murmur_door_host::agents::Agent>,
) -> (
    tokio::runtime::Runtime,
    std::sync::Arc<murmur_door_host::host::Host>,
) {
    use murmur_door_host::engine::{self, Door};
    use murmur_door_host::host::{Host, HostLimits};
    use murmur_door_host::request::Limits;
    use murmur_door_host::server::HttpLimits;
    use murmur_door_host::swap::MAX_COMPONENT_BYTES;
    use murmur_door_host::tasks::events::DEFAULT_REPLAY_BUFFER;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let limits = Limits {
        max_memory_bytes: 16 << 20,
        max_cpu_ms,
        ..Limits::default()
    };
    let http = HttpLimits {
        max_instances: 16,
        ..HttpLimits::default()
    };
    let engine = engine::engine_for(http.max_instances, limits.max_memory_bytes).unwrap();
    let door = Door::load(&engine, door).unwrap();
    let host = Host::new(
        door,
        "faulty".into(),
        HostLimits {
            limits,
            http,
            capsule_instances: 8,
            max_component_bytes: MAX_COMPONENT_BYTES,
        },
        agent,
        DEFAULT_REPLAY_BUFFER.into(),
    );
    (runtime, std::sync::Arc::new(host))
}

fn faulty_host(door: &[u8], max_cpu_ms: u64) -> FaultyHost {
    let agent = std::sync::Arc::new(murmur_door_host::agents::ScriptAgent);
    let (runtime, host) = library_host(door, max_cpu_ms, agent);
    let dir = TempDir::new("host-faults");
    let add = |name| {
        let entry = entry(dir.path(), name);
        runtime
            .block_on(host.add(entry))
            .unwrap()
            .trim_start_matches("http://")
            .to_string()
    };
    let (bad, good) = (add("bad"), add("good"));
    let swapped = runtime
        .block_on(host.swap(
            EMBEDDED_DOOR.to_vec(),
            "embedded".into(),
            Some(&["good".into()]),
        ))
        .unwrap();
    assert_eq!(swapped.swapped, ["good"]);
    FaultyHost {
        runtime,
        host,
        dir,
        bad,
        good,
    }
}

fn card(addr: &str) -> Reply {
    request(addr, "GET", "/.well-known/agent-card.json", &[], b"")
}

/// Issue 33, "The sandbox enforces the export, not only the rules": a door
/// that ignores every rule of the planes (the faults door) finds only the
/// directories holding the exports preopened, on a plane's request alone,
/// and can read nothing outside them and change nothing inside them.
#[test]
fn the_sandbox_holds_the_export_whatever_the_door_does() {
    use std::os::unix::fs::symlink;

    let faulty = faulty_host(crate::guest_faults::faults_door(), 1000);
    let work = faulty.dir.path().join("planes");
    std::fs::create_dir_all(work.join("out/deep")).unwrap();
    std::fs::write(work.join("out/a.txt"), b"inside").unwrap();
    std::fs::write(work.join("secret.txt"), b"outside").unwrap();
    symlink("../secret.txt", work.join("out/to-secret")).unwrap();
    symlink("/", work.join("out/to-root")).unwrap();
    let manifest = work.join("murmur.yaml");
    std::fs::write(
        &manifest,
        "name: planes\nversion: 0.1.0\nexports:\n  files: [out/**]\n  peer_files: [shared/**]\n",
    )
    .unwrap();
    let entry = json!({"manifest": manifest, "listen": "127.0.0.1:0", "state": work.join("state")});
    let value: serde_yaml::Value = serde_json::from_value(entry).unwrap();
    let entry = murmur_door_host::roster::Entry::parse(&value, faulty.dir.path(), "entry").unwrap();
    let addr = faulty.runtime.block_on(faulty.host.add(entry)).unwrap();
    let addr = addr.trim_start_matches("http://");

    let tried = request(addr, "GET", "/resources/files/x", &[], b"").text();
    assert_eq!(
        tried.lines().collect::<Vec<_>>(),
        [
            "preopens: out",
            "read inside: ok",
            "read ..: refused",
            "read absolute: refused",
            "read a link out: refused",
            "read a link to /: refused",
            "create: refused",
            "open to write: refused",
            "truncate: refused",
            "mkdir: refused",
            "rename: refused",
            "delete: refused",
            "rmdir: refused",
            "symlink: refused",
            "set times: refused",
            "set size: refused",
        ]
    );
    assert_eq!(std::fs::read(work.join("out/a.txt")).unwrap(), b"inside");
    assert!(!work.join("out/new.txt").exists() && !work.join("out/made").exists());
    // The peer plane's exports do not exist: nothing is preopened for it,
    // and a request off the planes finds nothing preopened either.
    let peer = request(addr, "GET", "/resources/peer/x", &[], b"").text();
    assert_eq!(peer.lines().next(), Some("preopens: "));
    assert_eq!(request(addr, "GET", "/preopens", &[], b"").text(), "");

    // docs/planes.md, "Metrics": plane requests by plane, their body
    // bytes, and peer redeems by outcome.
    let text = faulty.host.metrics();
    for line in [
        r#"murmur_door_requests_total{capsule="planes",method="files",status="200",rpc_code="none"} 1"#.to_string(),
        format!(r#"murmur_door_plane_bytes_total{{capsule="planes",plane="files"}} {}"#, tried.len()),
        // The faults door answered the redeem 200 itself.
        r#"murmur_door_peer_redeems_total{capsule="planes",outcome="served"} 1"#.to_string(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
}

/// The runtime's calls on a session, through the library alone (issue 34,
/// "The embedder's API"; issue 33, handles for an embedder): a member's
/// token it mints sees the tasks that member starts; a task it starts on
/// the session's behalf is listed to the operator and to no member; a peer
/// handle it mints is redeemed over HTTP.
#[test]
fn the_runtime_calls_on_a_session_through_the_library() {
    use murmur_door_host::handles::Mint;
    use murmur_door_host::manifest::Scope;

    let faulty = faulty_host(EMBEDDED_DOOR, 1000);
    let work = faulty.dir.path().join("library");
    std::fs::create_dir_all(work.join("shared")).unwrap();
    std::fs::write(work.join("shared/notes.txt"), b"for beta").unwrap();
    let manifest = work.join("murmur.yaml");
    std::fs::write(
        &manifest,
        "name: library\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n\
         network:\n  authentication:\n    scheme: bearer\n\
         exports:\n  peer_files: [shared/**]\n",
    )
    .unwrap();
    let entry = json!({"manifest": manifest, "listen": "127.0.0.1:0", "state": work.join("state")});
    let value: serde_yaml::Value = serde_json::from_value(entry).unwrap();
    let entry = murmur_door_host::roster::Entry::parse(&value, faulty.dir.path(), "entry").unwrap();
    let url = faulty.runtime.block_on(faulty.host.add(entry)).unwrap();
    let addr = url.trim_start_matches("http://").to_string();
    let session = faulty
        .host
        .session("library")
        .expect("the capsule's session");
    let operator: String =
        serde_json::from_slice::<Value>(&std::fs::read(work.join("state/tokens.json")).unwrap())
            .unwrap()["operator"]
            .as_str()
            .unwrap()
            .to_string();
    let rpc = |token: &str, method: &str, params: Value| {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let bearer = format!("Bearer {token}");
        request(
            &addr,
            "POST",
            "/",
            &[
                ("authorization", &bearer),
                ("content-type", "application/json"),
                ("a2a-version", "1.0"),
            ],
            body.as_bytes(),
        )
        .json()
    };

    let carol = session
        .tokens
        .mint_member("carol", &[Scope::SendMessage, Scope::ListTasks])
        .unwrap();
    let sent = rpc(
        &carol,
        "SendMessage",
        json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "reply from carol"}]}}),
    );
    let carols = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    let own = faulty
        .runtime
        .block_on(async { session.tasks.start_own("reply the session's own".into()) })
        .unwrap();
    let listed = |token: &str| -> Vec<String> {
        rpc(token, "ListTasks", json!({}))["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(&carol), std::slice::from_ref(&carols));
    let all = listed(&operator);
    assert!(all.contains(&carols) && all.contains(&own.id), "{all:?}");
    assert!(session.tokens.revoke_member("carol"));

    let exports = session.planes.peer_files.clone().unwrap();
    let mint = Mint {
        path: "shared/notes.txt".into(),
        audience: "beta".into(),
        ttl_seconds: Some(60),
        max_uses: None,
    };
    let minted = session
        .handles
        .mint(&exports, mint, murmur_door_host::tasks::now_ms())
        .unwrap();
    let redeemed = request(
        &addr,
        "GET",
        &format!("/resources/peer/{}", minted.handle),
        &[("x-murmur-audience", "beta")],
        b"",
    );
    assert_eq!(
        (redeemed.status, redeemed.body.as_slice()),
        (200, &b"for beta"[..])
    );
    assert_eq!(
        redeemed.header("x-murmur-handle-id"),
        Some(minted.info.id.as_str())
    );
}

/// The id of the delegation [`RuntimeAgent`] recorded.
static DELEGATED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The runtime's own agent, through the library alone: each task's text
/// names what it does with its `RunningTask`.
struct RuntimeAgent;

impl murmur_door_host::agents::Agent for RuntimeAgent {
    fn run(
        &self,
        input: murmur_door_host::agents::TaskInput,
        task: murmur_door_host::agents::RunningTask,
    ) -> murmur_door_host::agents::AgentFuture {
        use murmur_door_host::agents::{Child, MemberStatus, Outcome};
        Box::pin(async move {
            match input.text.as_str() {
                "delegate" => {
                    let child = Child {
                        capsule: "my-worker".into(),
                        version: "0.1.0".into(),
                        session_id: "ses_019ed2af76b57c42912b612f07dd4d51".into(),
                        workdir: "/home/me/.murmur/children/my-worker-7b31de".into(),
                    };
                    let delegation_id = task.delegate(child).unwrap();
                    let _ = DELEGATED.set(delegation_id);
                    std::future::pending().await
                }
                "lack" => {
                    let below = |member: &str, status: &str| MemberStatus {
                        member: member.into(),
                        status: status.into(),
                    };
                    // s answered: only the members that gave none are listed.
                    let below = [below("r", "failed"), below("s", "completed")];
                    task.no_answer_from("q", "timed_out", &below);
                    Outcome::NoAnswer("q gave no answer".into())
                }
                "detach" => {
                    task.detach("echo from the runtime").unwrap();
                    Outcome::Completed("detached".into())
                }
                text => Outcome::Completed(format!("{text} ({} images)", input.images.len())),
            }
        })
    }
}

/// A capsule named `runtime` that queues tasks and takes two images of 64
/// bytes at most, added to `host`: its state directory and its address.
fn runtime_capsule(
    runtime: &tokio::runtime::Runtime,
    host: &std::sync::Arc<murmur_door_host::host::Host>,
) -> (TempDir, String) {
    let dir = TempDir::new("runtime-agent");
    let manifest = dir.path().join("murmur.yaml");
    std::fs::write(
        &manifest,
        "name: runtime\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n\
         context: {images: {max_bytes: 64, max_per_turn: 2}}\n",
    )
    .unwrap();
    let entry =
        json!({"manifest": manifest, "listen": "127.0.0.1:0", "state": dir.path().join("state")});
    let value: serde_yaml::Value = serde_json::from_value(entry).unwrap();
    let entry = murmur_door_host::roster::Entry::parse(&value, dir.path(), "entry").unwrap();
    let addr = runtime
        .block_on(host.add(entry))
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    (dir, addr)
}

/// Issue 34, "The embedder's API": every row of the runtime's side made
/// through the library, and seen on the wire as the reference shows it: a
/// delegation in a cancel's residue ("Residue items"), noAnswer and
/// noAnswerBelow ("Task metadata"), a detached command's result and a
/// report of lost commands as the session's own tasks ("A task the runtime
/// starts itself"), and the images a task started with, read back whole.
#[test]
fn the_runtimes_agent_makes_every_field_through_the_library() {
    use base64::Engine;
    use murmur_door_host::tasks::{DetachedShell, own};

    let (runtime, host) = library_host(EMBEDDED_DOOR, 1000, std::sync::Arc::new(RuntimeAgent));
    let (_state, addr) = runtime_capsule(&runtime, &host);
    let session = host.session("runtime").unwrap();
    let rpc = |method: &str, params: Value| -> Value {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let headers = [("content-type", "application/json"), ("a2a-version", "1.0")];
        request(&addr, "POST", "/", &headers, body.as_bytes()).json()["result"].clone()
    };
    let send = |parts: Value, immediately: bool| -> Value {
        let message = json!({"messageId": format!("m{}", rand_suffix()), "role": "ROLE_USER", "parts": parts});
        rpc(
            "SendMessage",
            json!({"message": message, "configuration": {"returnImmediately": immediately}}),
        )["task"]
            .clone()
    };
    let settled = |id: &str, state: &str| -> Value {
        for _ in 0..1000 {
            let task = rpc("GetTask", json!({"id": id}));
            if task["status"]["state"] == state {
                return task;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("task {id} never reached {state}");
    };

    // A delegation, listed by the cancel that ends it.
    let delegating = send(json!([{"text": "delegate"}]), true);
    let id = delegating["id"].as_str().unwrap().to_string();
    settled(&id, "TASK_STATE_WORKING");
    let mut delegation_id = None;
    for _ in 0..1000 {
        delegation_id = DELEGATED.get().cloned();
        if delegation_id.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let delegation_id = delegation_id.expect("the agent delegated");
    let canceled = rpc("CancelTask", json!({"id": id}));
    assert_eq!(
        canceled["artifacts"][0]["parts"][0]["data"],
        json!({"kind": "delegation", "delegation_id": delegation_id, "capsule": "my-worker",
               "version": "0.1.0", "child_session_id": "ses_019ed2af76b57c42912b612f07dd4d51",
               "child_workdir": "/home/me/.murmur/children/my-worker-7b31de"})
    );

    // The answers a task lacks.
    let lacking = send(json!([{"text": "lack"}]), false);
    assert_eq!(lacking["status"]["state"], "TASK_STATE_FAILED");
    assert_eq!(
        lacking["metadata"],
        json!({"murmur": {"noAnswer": true, "noAnswerBelow": [
            {"member": "q", "status": "timed_out"}, {"member": "r", "status": "failed"}]}})
    );

    // A detached command's result, then a report of lost commands: tasks
    // of the session's own.
    let before = rpc("ListTasks", json!({}))["totalSize"].as_u64().unwrap();
    send(json!([{"text": "detach"}]), false);
    let mut tasks = rpc("ListTasks", json!({}));
    for _ in 0..1000 {
        if tasks["totalSize"].as_u64().unwrap() == before + 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        tasks = rpc("ListTasks", json!({}));
    }
    let result = settled(
        tasks["tasks"][0]["id"].as_str().unwrap(),
        "TASK_STATE_COMPLETED",
    );
    let text = result["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("detached command wrk_"), "{text}");
    assert!(
        text.ends_with(
            " ended: exit status 0\n$ echo from the runtime\nstdout:\nfrom the runtime\n (0 images)"
        ),
        "{text}"
    );
    let lost = DetachedShell {
        work_id: "wrk_1".into(),
        binary: "/usr/bin/sleep".into(),
        command: "sleep 30".into(),
        started_at_ms: 17,
    };
    let report = runtime
        .block_on(async { session.tasks.start_own(own::lost_commands(&[lost])) })
        .unwrap();
    let report = settled(&report.id, "TASK_STATE_COMPLETED");
    assert_eq!(
        report["artifacts"][0]["parts"][0]["text"],
        "the last run lost 1 detached command; their results will not arrive\n\
         wrk_1 started_at_ms 17: sleep 30\n (0 images)"
    );

    // The images a task started with, whole, in part order.
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    let gif = b"GIF89a..".to_vec();
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let looked = send(
        json!([{"text": "look"}, {"raw": b64(&png), "mediaType": "image/png"},
               {"raw": b64(&gif), "mediaType": "image/gif"}]),
        false,
    );
    assert_eq!(
        looked["artifacts"][0]["parts"][0]["text"],
        "look (2 images)"
    );
    let images = session
        .tasks
        .images(looked["id"].as_str().unwrap())
        .unwrap();
    let images: Vec<(&str, &[u8])> = images
        .iter()
        .map(|i| (i.media_type.as_str(), i.bytes.as_slice()))
        .collect();
    assert_eq!(images, [("image/png", &png[..]), ("image/gif", &gif[..])]);
}

/// A suffix no other message of this process has.
fn rand_suffix() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Whatever a swapped-in door keeps between requests, reuse carries none of
/// it across capsules or callers (docs/operations.md, "--idle-instances" and "The Agent
/// Card caches"). The faults door keeps what its instance's first request
/// said in a static: a kept instance serves only its caller on the capsule
/// it last served, and the card cache keeps only what the door lets a
/// shared cache keep, for requests without a credential.
#[test]
fn nothing_a_door_keeps_crosses_capsules_or_callers() {
    let faulty = faulty_host(crate::guest_faults::faults_door(), 1000);
    let alpha = faulty.bad.clone();
    let beta = faulty
        .runtime
        .block_on(faulty.host.add(entry(faulty.dir.path(), "beta")))
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let sticky = |addr: &str, token: &str| {
        let authorization = format!("Bearer {token}");
        request(
            addr,
            "GET",
            "/sticky",
            &[("authorization", &authorization)],
            b"",
        )
        .text()
    };
    assert_eq!(sticky(&alpha, "a"), format!("Bearer a at {alpha}"));
    // The same caller, the same door, another capsule: a fresh instance.
    assert_eq!(sticky(&beta, "a"), format!("Bearer a at {beta}"));
    assert_eq!(sticky(&alpha, "b"), format!("Bearer b at {alpha}"));
    // Its own kept instance again.
    assert_eq!(sticky(&alpha, "a"), format!("Bearer a at {alpha}"));

    let card = |query: &str, headers: &[(&str, &str)]| {
        let path = format!("/.well-known/agent-card.json{query}");
        request(&alpha, "GET", &path, headers, b"").text()
    };
    assert_ne!(card("?private", &[]), card("?private", &[]));
    let public = card("", &[]);
    assert_eq!(card("", &[]), public);
    assert_eq!(card("?private", &[]), public);
    assert_ne!(card("", &[("authorization", "Bearer a")]), public);
}

/// An endless loop in one capsule's door costs only that capsule's
/// requests: a capsule beside it answers at once, and neither touches the
/// other's state directory.
#[test]
fn a_looping_capsule_costs_only_its_requests() {
    use std::time::Instant;
    let budget = 300;
    let looping = crate::guest_faults::broken_door("(loop br 0)");
    let faulty = faulty_host(&looping, budget);
    let started = Instant::now();
    let loops: Vec<_> = (0..2)
        .map(|_| {
            let bad = faulty.bad.clone();
            std::thread::spawn(move || (card(&bad).status, started.elapsed()))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let asked = Instant::now();
    assert_eq!(card(&faulty.good).status, 200);
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(budget / 2),
        "the good capsule waited {took:?} beside two looping requests"
    );
    for looped in loops {
        let (status, took) = looped.join().unwrap();
        assert_eq!(status, 500);
        assert!(took >= Duration::from_millis(budget * 9 / 10), "{took:?}");
    }
    assert_eq!(card(&faulty.bad).status, 500);
    assert_eq!(card(&faulty.good).status, 200);

    // Each capsule's state directory holds its own session and files only.
    for name in ["bad", "good"] {
        let mut files: Vec<String> = std::fs::read_dir(faulty.dir.path().join(name))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("session.db-"))
            .collect();
        files.sort();
        assert_eq!(
            files,
            ["control-token", "lock", "session.db", "tokens.json"]
        );
    }
    faulty.runtime.block_on(faulty.host.close());
}

/// A door asking for more memory than an instance may have fails only its
/// own capsule's request (413, as a lone door answers); the capsule beside
/// it answers.
#[test]
fn a_memory_hog_capsule_costs_only_its_requests() {
    let hog = crate::guest_faults::broken_door_with(
        "(memory 1)",
        "(if (i32.eq (memory.grow (i32.const 65535)) (i32.const -1)) (then unreachable))",
    );
    let faulty = faulty_host(&hog, 1000);
    for _ in 0..20 {
        let reply = common::post(
            &faulty.bad,
            r#"{"jsonrpc":"2.0","id":"m","method":"GetTask"}"#,
        );
        assert_eq!(reply.status, 413);
        assert_eq!(
            reply.json()["message"],
            "serving this request needs more than the 16 MiB of memory a door instance has (--max-memory-mb)"
        );
        assert_eq!(card(&faulty.good).status, 200);
    }
    faulty.runtime.block_on(faulty.host.close());
}

/// `method path` to the host's shared listener `addr`, for the host name
/// `host` (no Host header when None), on a connection of its own.
fn by_host(
    addr: &str,
    host: Option<&str>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut head = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\n");
    if let Some(host) = host {
        head.push_str(&format!("host: {host}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if method == "POST" {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    common::exchange(addr, head.as_bytes(), body)
}

/// A JSON-RPC call to the capsule `host` names on the shared listener.
fn rpc_by_host(addr: &str, host: &str, token: &str, body: &Value) -> Reply {
    let auth = format!("Bearer {token}");
    by_host(
        addr,
        Some(host),
        "POST",
        "/",
        &[
            ("content-type", "application/json"),
            ("a2a-version", "1.0"),
            ("authorization", &auth),
        ],
        body.to_string().as_bytes(),
    )
}

/// A host of beta and gamma by host name on its shared listener, and alpha
/// on a port of its own; the shared listener's address and port.
fn launch_shared() -> (Hosted, String, String) {
    let host = launch_file(
        files_with(
            "listen: 127.0.0.1:0\n",
            &[
                "{manifest: beta.yaml, hostnames: [beta.example.com], state: beta}",
                "{manifest: gamma.yaml, hostnames: [gamma.example.com, g.example.com], state: gamma}",
                "{manifest: alpha.yaml, listen: 127.0.0.1:0, state: alpha}",
            ],
        ),
        &[],
    );
    let shared = host.capsules()["listen"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let port = shared.rsplit(':').next().unwrap().to_string();
    (host, shared, port)
}

/// The card of the capsule `name` names on the shared listener `shared`.
fn card_by_host(shared: &str, name: Option<&str>) -> Reply {
    by_host(
        shared,
        name,
        "GET",
        "/.well-known/agent-card.json",
        &[],
        b"",
    )
}

/// Issue 37, "Many capsules on one port": a request on the shared listener
/// reaches the capsule its Host names, port and case aside; a host name no
/// capsule claims, or none, gets one 404 naming no capsule. Capsules by
/// host name and by port mix in one file.
#[test]
fn capsules_on_one_port_are_reached_by_host_name() {
    let (host, shared, port) = launch_shared();
    let listed = host.capsules();
    assert_eq!(host.urls["beta"], format!("beta.example.com:{port}"));
    assert_eq!(host.urls["gamma"], format!("gamma.example.com:{port}"));
    assert_ne!(host.urls["alpha"], shared);
    let by_name = |c: &str| {
        listed["capsules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == c)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_name("gamma")["hostnames"],
        json!(["gamma.example.com", "g.example.com"])
    );
    assert_eq!(by_name("alpha")["hostnames"], json!([]));

    let card = |name: Option<&str>| {
        by_host(
            &shared,
            name,
            "GET",
            "/.well-known/agent-card.json",
            &[],
            b"",
        )
    };
    for (name, capsule) in [
        ("beta.example.com", "beta"),
        ("gamma.example.com", "gamma"),
        ("GAMMA.Example.Com:1", "gamma"),
        ("g.example.com.", "gamma"),
    ] {
        let reply = card(Some(name));
        assert_eq!(reply.status, 200, "{name}");
        let card = reply.json();
        assert_eq!(card["name"], capsule, "{name}");
        // The card names the capsule's first host name on the shared port.
        assert_eq!(
            card["supportedInterfaces"][0]["url"],
            format!("http://{capsule}.example.com:{port}")
        );
    }
    // One refusal for every request no capsule is claimed for.
    let alpha_by_port = host.urls["alpha"].clone();
    let unknown = [
        card(Some("alpha.example.com")),
        card(Some(&alpha_by_port)),
        card(Some(&shared)),
        card(Some("beta.example.com.evil")),
        card(None),
        by_host(&shared, Some("nobody.example"), "POST", "/", &[], b"{}"),
    ];
    for reply in &unknown {
        assert_eq!(reply.status, 404);
        assert_eq!(reply.header("content-type"), Some("application/json"));
        assert_eq!(
            reply.text(),
            r#"{"error":"unknown_host","message":"no capsule is served under this host name"}"#
        );
    }
}

/// Issue 47 ("A `Host` with userinfo is routed"): a host name with
/// userinfo before it, in the Host header or an absolute-form target, is
/// refused with the one unknown-host 404, not routed to the name after its
/// `@` (RFC 9110, section 4.2.4, forbids userinfo in both).
#[test]
fn a_host_name_with_userinfo_reaches_no_capsule() {
    let (_host, shared, port) = launch_shared();
    assert_eq!(
        card_by_host(&shared, Some("beta.example.com")).json()["name"],
        "beta"
    );
    let with_port = format!("x:y@gamma.example.com:{port}");
    let replies = [
        card_by_host(&shared, Some("x@beta.example.com")),
        card_by_host(&shared, Some(&with_port)),
        card_by_host(&shared, Some("@beta.example.com")),
        by_host(
            &shared,
            Some("beta.example.com"),
            "GET",
            "http://x@gamma.example.com/.well-known/agent-card.json",
            &[],
            b"",
        ),
    ];
    for reply in &replies {
        assert_eq!(
            (reply.status, reply.text()),
            (
                404,
                r#"{"error":"unknown_host","message":"no capsule is served under this host name"}"#
                    .to_string()
            )
        );
    }
}

/// Issue 37, "Many capsules on one port": the same token sent to two
/// capsules on one port opens only its own, and one capsule's task is none
/// of another's; capsules are added, refused on a host name's clash,
/// removed and counted as on ports.
#[test]
fn a_capsule_on_a_shared_port_is_reached_only_by_its_own_names() {
    let (host, shared, port) = launch_shared();
    let card = |name: Option<&str>| card_by_host(&shared, name);
    // The same token to both: it opens its own capsule only.
    let beta = host.operator("beta");
    let gamma = host.operator("gamma");
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "hello"}]}, "configuration": {"returnImmediately": true}}});
    let sent = rpc_by_host(&shared, "beta.example.com", &beta, &send);
    assert_eq!(sent.status, 200, "{}", sent.text());
    let task = sent.json()["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let get = json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task}});
    assert_eq!(
        rpc_by_host(&shared, "beta.example.com", &beta, &get).json()["result"]["id"],
        task
    );
    assert_eq!(
        rpc_by_host(&shared, "gamma.example.com", &beta, &get).status,
        401
    );
    assert_eq!(
        rpc_by_host(&shared, "g.example.com", &beta, &get).status,
        401
    );
    // Reference, "GetTask": a task of another capsule is not found here.
    let missing = rpc_by_host(&shared, "gamma.example.com", &gamma, &get).json();
    assert_eq!(missing["error"]["code"], -32001);
    assert_eq!(
        rpc_by_host(&shared, "beta.example.com", &gamma, &get).status,
        401
    );

    // Added at run time; a host name claimed twice is refused.
    let entry = json!({"name": "delta", "manifest": "beta.yaml", "hostnames": ["Delta.example.com"], "state": "delta"});
    let reply = host.control("POST", "/capsules", entry.to_string().as_bytes());
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        reply.json()["url"],
        format!("http://delta.example.com:{port}")
    );
    assert_eq!(card(Some("delta.example.com")).json()["name"], "beta");
    let clash = json!({"name": "epsilon", "manifest": "beta.yaml", "hostnames": ["x.example", "BETA.example.com"], "state": "epsilon"});
    let reply = host.control("POST", "/capsules", clash.to_string().as_bytes());
    assert_eq!(reply.status, 422);
    assert_eq!(
        reply.json()["message"],
        "capsule epsilon: hostnames: another capsule has the host name beta.example.com"
    );
    assert_eq!(card(Some("x.example")).status, 404);

    // Removed: its host names reach no capsule; the others still answer.
    assert_eq!(host.control("DELETE", "/capsules/beta", b"").status, 200);
    let gone = card(Some("beta.example.com"));
    assert_eq!(gone.status, 404);
    assert_eq!(gone.body, card(Some("nobody.example")).body);
    assert_eq!(card(Some("gamma.example.com")).json()["name"], "gamma");
    assert_eq!(host.card("alpha").json()["name"], "alpha");

    // Swapped and rolled back per capsule, as on ports.
    let reply = host.control("POST", "/swap?capsules=gamma", EMBEDDED_DOOR);
    assert_eq!(reply.json()["swapped"], json!(["gamma"]));
    assert_eq!(host.versions()["gamma"], 2);
    assert_eq!(host.versions()["alpha"], 1);
    assert_eq!(card(Some("g.example.com")).status, 200);
    let reply = host.control("POST", "/rollback?capsules=gamma", b"");
    assert_eq!(reply.json()["rolledBack"], json!(["gamma"]));
    assert_eq!(host.versions()["gamma"], 1);

    // Counted per capsule, as on ports: gamma's two cards, two refused
    // tokens, its swap and rollback.
    let metrics = host.control("GET", "/metrics", b"").text();
    assert!(
        metrics.lines().any(|l| l
            == r#"murmur_door_requests_total{capsule="gamma",method="card",status="200",rpc_code="none"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l
            == r#"murmur_door_requests_total{capsule="gamma",method="other",status="401",rpc_code="none"} 2"#),
        "{metrics}"
    );
    for outcome in ["swapped", "rolled_back"] {
        let line =
            format!(r#"murmur_door_capsule_swaps_total{{capsule="gamma",outcome="{outcome}"}} 1"#);
        assert!(metrics.lines().any(|l| l == line), "{metrics}");
    }
}

/// Issue 37: capsules by host name need the host's shared listener.
#[test]
fn host_names_need_a_shared_listener() {
    let host = launch(&THREE[..1], &[]);
    let entry = json!({"name": "delta", "manifest": "beta.yaml", "hostnames": ["delta.example.com"], "state": "delta"});
    let reply = host.control("POST", "/capsules", entry.to_string().as_bytes());
    assert_eq!(reply.status, 422);
    assert_eq!(
        reply.json()["message"],
        "capsule delta: hostnames: the host has no shared listener (the capsules file's top-level listen)"
    );
    assert_eq!(host.capsules()["listen"], Value::Null);
}

/// A JSON-RPC call, without a token, to the public capsule
/// alpha.example.com on the shared listener `shared`.
fn public_rpc(shared: &str, body: &Value) -> Reply {
    let headers = [("content-type", "application/json"), ("a2a-version", "1.0")];
    let body = body.to_string();
    by_host(
        shared,
        Some("alpha.example.com"),
        "POST",
        "/",
        &headers,
        body.as_bytes(),
    )
}

/// Issue 37, "Graceful rolling restarts": SIGTERM on a host stops every
/// listener first (the control surface's, the shared one), answers each
/// request in flight on the shared port with its task as it stands (as the
/// reference answers a held request when the door closes), none reset, and
/// exits 0 within `--drain-ms`; a resumed host holds every task.
#[test]
fn sigterm_drains_a_host_of_capsules_on_one_port() {
    let entry = "{manifest: alpha.yaml, hostnames: [alpha.example.com], state: alpha}";
    let mut host = launch_file(
        files_with("listen: 127.0.0.1:0\n", &[entry]),
        &["--drain-ms", "3000"],
    );
    let shared = host.capsules()["listen"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    let rpc = |body: Value| public_rpc(&shared, &body);
    let held: Vec<_> = (0..5)
        .map(|i| {
            let body = json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {
                "message": {"messageId": format!("m{i}"), "role": "ROLE_USER",
                            "parts": [{"text": "sleep 60000"}]}}});
            let shared = shared.clone();
            std::thread::spawn(move || public_rpc(&shared, &body))
        })
        .collect();
    let list = json!({"jsonrpc": "2.0", "id": 9, "method": "ListTasks", "params": {}});
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while rpc(list.clone()).json()["result"]["totalSize"] != 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "the five tasks were never written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let signalled = std::time::Instant::now();
    // SAFETY: a signal to a child this test started.
    unsafe { libc::kill(host.child.id() as i32, libc::SIGTERM) };
    for listener in [&shared, &host.control] {
        while std::net::TcpStream::connect(listener).is_ok() {
            assert!(
                signalled.elapsed() < Duration::from_secs(2),
                "{listener} still accepts"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    common::answered_as_the_door_closed(held);
    let status = loop {
        if let Some(status) = host.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(6),
            "the host outlived its drain"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");

    // No acknowledged task is lost.
    let dir = host.dir.take();
    let path = dir.path().join("capsules.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("state: alpha}", "state: alpha, resume: true}"),
    )
    .unwrap();
    let host = launch_file((dir, path), &[]);
    let shared = host.capsules()["listen"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_string();
    assert_eq!(public_rpc(&shared, &list).json()["result"]["totalSize"], 5);
}

/// `lifecycle.after_task: exit` on a host (docs/agents.md, "A session's
/// life"): once a capsule's launch task has ended, the host closes that
/// capsule as SIGTERM closes a door (its `--agent-stdio` program hears
/// `stop` and ends), lists it as exited until it is removed, and serves the
/// others on.
#[test]
fn a_capsule_that_exits_after_its_task_is_closed_and_listed() {
    let dir = TempDir::new("host-exit");
    std::fs::write(dir.path().join("alpha.yaml"), PUBLIC).unwrap();
    let once = dir.path().join("once");
    std::fs::create_dir(&once).unwrap();
    std::fs::write(
        once.join("once.yaml"),
        "name: once\nversion: 0.1.0\nlifecycle: {after_task: exit}\n",
    )
    .unwrap();
    std::fs::write(once.join("task.md"), "ask").unwrap();
    let showcase = root().join("examples/agents/showcase.py");
    let file = format!(
        "control: {{listen: 127.0.0.1:0}}\ncapsules:\n  \
         - {{manifest: alpha.yaml, listen: 127.0.0.1:0, state: alpha}}\n  \
         - {{manifest: once/once.yaml, listen: 127.0.0.1:0, state: once-state, \
             agent_stdio: 'exec python3 {}'}}\n",
        showcase.display()
    );
    let path = dir.path().join("capsules.yaml");
    std::fs::write(&path, file).unwrap();
    let host = launch_file((dir, path), &[]);
    let url = host.urls["once"].clone();
    let rpc = |body: Value| {
        let headers = [("content-type", "application/json"), ("a2a-version", "1.0")];
        request(&url, "POST", "/", &headers, body.to_string().as_bytes()).json()
    };
    let listed = rpc(json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}));
    let launch = listed["result"]["tasks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The agent program runs in the capsule's workdir.
    let agent = (0..200)
        .find_map(|_| {
            let found = agent_in(&once);
            if found.is_none() {
                std::thread::sleep(Duration::from_millis(25));
            }
            found
        })
        .expect("the capsule's agent runs");
    for _ in 0..400 {
        let get = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": launch}});
        if rpc(get)["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let reply = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
        {"messageId": "r", "role": "ROLE_USER", "taskId": launch, "parts": [{"text": "main"}]}}});
    let answered = rpc(reply);
    assert_eq!(
        answered["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answered}"
    );
    let exited = (0..400)
        .find_map(|_| {
            let capsules = host.capsules()["capsules"].clone();
            let once = capsules
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == "once" && c.get("exited").is_some())
                .cloned();
            if once.is_none() {
                std::thread::sleep(Duration::from_millis(25));
            }
            once
        })
        .expect("the host lists the capsule as exited");
    assert_eq!(
        exited,
        json!({"name": "once", "state": host.dir.path().join("once-state"),
               "session": exited["session"],
               "exited": "the launch task ended (lifecycle.after_task: exit)"})
    );
    assert!(exited["session"].as_str().unwrap().starts_with("ses_"));
    // Its agent heard stop and ended; its listener is closed; alpha answers.
    let gone = (0..200).any(|_| {
        let gone = !Path::new(&format!("/proc/{agent}")).exists()
            || std::fs::read_to_string(format!("/proc/{agent}/stat")).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            });
        if !gone {
            std::thread::sleep(Duration::from_millis(25));
        }
        gone
    });
    assert!(gone, "the agent {agent} still runs");
    assert!(std::net::TcpStream::connect(&url).is_err());
    assert_eq!(host.card("alpha").status, 200);
    // Removing it forgets it.
    assert_eq!(host.control("DELETE", "/capsules/once", b"").status, 200);
    let names: Vec<Value> = host.capsules()["capsules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(names, [json!("alpha")]);
}

/// The pid of a process whose working directory is `workdir` and whose
/// command line names showcase.py.
fn agent_in(workdir: &Path) -> Option<u32> {
    let workdir = workdir.canonicalize().ok()?;
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let names = String::from_utf8_lossy(&cmdline).contains("showcase.py");
        (cwd == workdir && names).then_some(pid)
    })
}
