//! Traces (docs/operations.md, "Traces"): with the OpenTelemetry variables
//! naming a collector, each request is a server span in its caller's trace,
//! sent over OTLP/HTTP to a real receiver (tests/traces/receiver.py, which
//! decodes the protobuf with PyPI's `opentelemetry-proto`); a collector that
//! is dead, or refuses, costs no client anything.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{OnceLock, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Door, root, setup};

const MANIFEST: &str = "name: traced\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n";
/// The caller's trace and span, as its `traceparent` names them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn python() -> &'static Path {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let installed = PYTHON.get_or_init(|| {
        setup::venv(
            &root().join("tests/traces/requirements.txt"),
            &root().join("target/otel-venv"),
        )
    });
    match installed {
        Ok(python) => python,
        Err(e) => panic!("could not install the OTLP receiver's packages: {e}"),
    }
}

/// The receiver, and the spans it printed.
struct Collector {
    child: Child,
    port: u16,
    spans: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Collector {
    fn start(args: &[&str]) -> Collector {
        let mut child = Command::new(python())
            .arg(root().join("tests/traces/receiver.py"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the receiver");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let port = first["port"].as_u64().unwrap() as u16;
        let (send, spans) = mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if send.send(serde_json::from_str(&line).unwrap()).is_err() {
                    return;
                }
            }
        });
        Collector {
            child,
            port,
            spans,
            seen: Vec::new(),
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The first span received that `matches`, within 20 s.
    fn span(&mut self, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(span) = self.seen.iter().find(|s| matches(s)) {
            return span.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.spans.recv_timeout(left) {
                Ok(span) => {
                    self.seen.push(span.clone());
                    if matches(&span) {
                        return span;
                    }
                }
                Err(_) => panic!("no such span; received: {:#?}", self.seen),
            }
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A door whose traces go to `endpoint`, sent every 100 ms.
fn traced(endpoint: &str, level: &str, more: &[(&str, &str)]) -> Door {
    traced_with(endpoint, &[], level, more)
}

/// [`traced`], with `extra` flags.
fn traced_with(endpoint: &str, extra: &[&str], level: &str, more: &[(&str, &str)]) -> Door {
    let mut env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    env.extend_from_slice(more);
    Door::start_env(MANIFEST, extra, level, &env)
}

fn send_body(text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}})
    .to_string()
}

#[test]
fn a_request_is_a_server_span_in_its_callers_trace_naming_its_method_and_task() {
    let mut collector = Collector::start(&[]);
    let door = traced(&collector.endpoint(), "info", &[]);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let reply = door.rpc(&send_body("reply hi"), &[("traceparent", &traceparent)]);
    assert_eq!(reply.status, 200);
    let task = reply.json()["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let span = collector.span(|s| s["trace_id"] == TRACE && s["kind"] == 2);
    assert_eq!(span["parent_span_id"], PARENT);
    assert_eq!(span["name"], "SendMessage");
    // SPAN_KIND_SERVER; STATUS_CODE_UNSET.
    assert_eq!(span["kind"], 2);
    assert_eq!(span["status"], 0);
    assert_eq!(span["service"], "murmur-door");
    let attributes = &span["attributes"];
    assert_eq!(attributes["rpc.system"], "jsonrpc");
    assert_eq!(attributes["rpc.method"], "SendMessage");
    assert_eq!(attributes["a2a.task.id"], task.as_str());
    assert_eq!(attributes["http.request.method"], "POST");
    assert_eq!(attributes["url.path"], "/");
    assert_eq!(attributes["http.response.status_code"], 200);
    assert_eq!(attributes["murmur.reused"], false);
    assert_eq!(attributes["murmur.capsule"], "traced");
    assert_eq!(attributes["murmur.session.id"], door.session_id().as_str());
    assert_eq!(attributes["murmur.door.version"], 1);
    assert!(
        attributes["murmur.door.digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(attributes["murmur.instance_wait_ms"].as_f64().unwrap() >= 0.0);
    // Nothing the caller wrote is an attribute.
    assert!(!span.to_string().contains("reply hi"), "{span}");
    // The task: a span of its own inside the request's, ended with it.
    let task_span = collector.span(|s| s["name"] == "task");
    assert_eq!(task_span["trace_id"], TRACE);
    assert_eq!(task_span["parent_span_id"], span["span_id"]);
    assert_eq!(task_span["kind"], 1);
    assert_eq!(task_span["attributes"]["a2a.task.id"], task.as_str());
    assert_eq!(task_span["attributes"]["a2a.task.state"], "completed");
}

/// The trace context an agent received, answered as the task's text, is
/// its task span's in the caller's trace.
fn agent_receives_the_tasks_trace(extra: &[&str]) {
    let mut collector = Collector::start(&[]);
    let door = traced_with(&collector.endpoint(), extra, "info", &[]);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let reply = door.rpc(&send_body("hi"), &[("traceparent", &traceparent)]);
    let task = reply.json()["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let task_span = collector.span(|s| s["name"] == "task");
    let received = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert_eq!(
        received.trim(),
        format!("00-{TRACE}-{}-01", task_span["span_id"].as_str().unwrap())
    );
    assert_eq!(task_span["attributes"]["a2a.task.state"], "completed");
}

#[test]
fn a_command_agent_gets_the_tasks_trace_in_its_environment() {
    agent_receives_the_tasks_trace(&["--agent-cmd", "printf %s \"$TRACEPARENT\""]);
}

#[test]
fn a_stdio_agent_gets_the_tasks_trace_on_its_task_line() {
    let agent = format!(
        "python3 {}",
        root().join("tests/traces/trace_agent.py").display()
    );
    agent_receives_the_tasks_trace(&["--agent-stdio", &agent]);
}

#[test]
fn an_untraced_door_hands_its_agent_no_trace() {
    let door = Door::start_env(
        MANIFEST,
        &["--agent-cmd", "printf '[%s]' \"$TRACEPARENT\""],
        "info",
        &[(
            "TRACEPARENT",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )],
    );
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let reply = door.rpc(&send_body("hi"), &[("traceparent", &traceparent)]);
    let task = reply.json()["result"]["task"].clone();
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "[]", "{task}");
}

#[test]
fn the_standard_variables_name_the_service_and_the_collectors_headers() {
    let mut collector = Collector::start(&[]);
    let door = traced(
        &collector.endpoint(),
        "info",
        &[
            ("OTEL_SERVICE_NAME", "door-a"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=k1"),
        ],
    );
    assert_eq!(door.get("/.well-known/agent-card.json").status, 200);
    let span = collector.span(|s| s["name"] == "GET /.well-known/agent-card.json");
    assert_eq!(span["service"], "door-a");
    assert_eq!(span["resource"]["deployment.environment"], "test");
    assert_eq!(
        span["resource"]["service.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(span["collector_key"], "k1");
}

#[test]
fn an_untraced_request_starts_a_trace_and_an_error_gives_its_code() {
    let mut collector = Collector::start(&[]);
    let door = traced(&collector.endpoint(), "info", &[]);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
        "params": {"id": "tsk_00000000000000000000000000"}});
    let reply = door.rpc(&body.to_string(), &[]);
    assert_eq!(reply.json()["error"]["code"], -32001);
    let span = collector.span(|s| s["name"] == "GetTask");
    assert_eq!(span["parent_span_id"], "");
    assert_eq!(span["trace_id"].as_str().unwrap().len(), 32);
    assert_eq!(span["attributes"]["rpc.jsonrpc.error_code"], -32001);
    assert_eq!(span["attributes"]["http.response.status_code"], 200);
    // The card: named by its route.
    assert_eq!(door.get("/.well-known/agent-card.json").status, 200);
    let card = collector.span(|s| s["name"] == "GET /.well-known/agent-card.json");
    assert_eq!(card["kind"], 2);
    assert_eq!(
        card["attributes"]["url.path"],
        "/.well-known/agent-card.json"
    );
    // A path no route serves: the method alone.
    assert_eq!(door.get("/no/such/path").status, 404);
    let other = collector.span(|s| s["attributes"]["url.path"] == "/no/such/path");
    assert_eq!(other["name"], "GET");
}

#[test]
fn a_stream_has_a_span_of_its_own_inside_its_request() {
    let mut collector = Collector::start(&[]);
    let door = traced(&collector.endpoint(), "info", &[]);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let body = send_body("reply hi").replace("SendMessage", "SendStreamingMessage");
    let mut sse = door.open_stream(&body, &[("traceparent", &traceparent)]);
    while sse.next_within(Duration::from_secs(5)).is_some() {}
    assert!(sse.ended);
    let request = collector.span(|s| s["name"] == "SendStreamingMessage");
    assert_eq!(request["trace_id"], TRACE);
    let stream = collector.span(|s| s["name"] == "stream");
    assert_eq!(stream["trace_id"], TRACE);
    assert_eq!(stream["parent_span_id"], request["span_id"]);
    // SPAN_KIND_INTERNAL.
    assert_eq!(stream["kind"], 1);
}

#[test]
fn log_lines_carry_the_trace_and_span_of_their_request() {
    let mut collector = Collector::start(&[]);
    let door = traced(&collector.endpoint(), "murmur_door_host=debug", &[]);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let reply = door.rpc(&send_body("reply hi"), &[("traceparent", &traceparent)]);
    assert_eq!(reply.status, 200);
    let span = collector.span(|s| s["trace_id"] == TRACE && s["name"] == "SendMessage");
    let ids = format!(
        "trace_id={TRACE} span_id={}",
        span["span_id"].as_str().unwrap()
    );
    let logged = door.stop();
    assert!(
        logged
            .iter()
            .any(|l| l.contains("request status=200") && l.ends_with(&ids)),
        "no request line ends with {ids}: {logged:#?}"
    );
}

/// Every request answered promptly, and the door stops promptly, with
/// the collector at `endpoint` dead, silent or refusing.
fn answered_promptly(endpoint: &str) {
    let mut door = traced(
        endpoint,
        "info",
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
        ],
    );
    let started = Instant::now();
    for _ in 0..40 {
        let reply = door.rpc(&send_body("reply hi"), &[]);
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.json()["result"]["task"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
    }
    let answered = started.elapsed();
    assert!(
        answered < Duration::from_secs(10),
        "40 requests took {answered:?}"
    );
    let stopping = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(door.pid() as i32, libc::SIGTERM) };
    let exited = door.exited_within(Duration::from_secs(10));
    let stopped = stopping.elapsed();
    assert!(exited.is_some_and(|status| status.success()), "{exited:?}");
    assert!(
        stopped < Duration::from_secs(8),
        "the door took {stopped:?} to stop"
    );
    std::thread::sleep(Duration::from_millis(50));
    let logged: Vec<String> = door.stderr.try_iter().collect();
    assert!(
        logged.iter().any(|l| l.contains("spans lost since launch")),
        "{logged:#?}"
    );
}

#[test]
fn a_dead_collector_costs_no_client_anything() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    answered_promptly(&format!("http://127.0.0.1:{port}"));
}

#[test]
fn a_collector_that_never_answers_costs_no_client_anything() {
    // Takes connections and never reads them.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    answered_promptly(&endpoint);
    drop(silent);
}

#[test]
fn a_refusing_collector_costs_no_client_anything() {
    let collector = Collector::start(&["--refuse"]);
    answered_promptly(&collector.endpoint());
}

/// A host of one capsule (`murmur-door host`) whose traces go to
/// `endpoint`: the process, its control address and token.
struct Host {
    child: Child,
    _dir: crate::common::tempdir::TempDir,
    control: String,
    capsule: String,
    token: String,
}

impl Host {
    fn start(endpoint: &str, more: &[(&str, &str)]) -> Host {
        let dir = crate::common::tempdir::TempDir::new("traced-host");
        std::fs::write(dir.path().join("alpha.yaml"), MANIFEST).unwrap();
        let file = dir.path().join("capsules.yaml");
        std::fs::write(
            &file,
            "control: {listen: 127.0.0.1:0}\ncapsules:\n  - {manifest: alpha.yaml, listen: 127.0.0.1:0, state: alpha}\n",
        )
        .unwrap();
        let mut child = Command::new(crate::common::binary())
            .arg("host")
            .arg(&file)
            .env("RUST_LOG", "info")
            .env("XDG_CACHE_HOME", root().join("target/e2e-cache"))
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .envs(more.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = crate::common::stderr_lines(&mut child);
        let url = |line: &str| line[line.find("url=").unwrap() + 11..].trim().to_string();
        let mut capsule = None;
        let control = loop {
            let line = stderr
                .recv_timeout(Duration::from_secs(60))
                .expect("the host announces its control url");
            if line.contains("door listening") {
                capsule = Some(url(&line));
            } else if line.contains("host listening") {
                break url(&line);
            }
        };
        let token = std::fs::read_to_string(dir.path().join("host-control-token")).unwrap();
        Host {
            child,
            _dir: dir,
            control,
            capsule: capsule.unwrap(),
            token: token.trim().to_string(),
        }
    }

    fn control(&self, path: &str, headers: &[(&str, &str)]) -> crate::common::Reply {
        let auth = format!("Bearer {}", self.token);
        let mut all = vec![("authorization", auth.as_str())];
        all.extend_from_slice(headers);
        crate::common::request(&self.control, "GET", path, &all, b"")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_hosts_control_surface_is_a_server_span_named_by_its_route() {
    let mut collector = Collector::start(&[]);
    let host = Host::start(&collector.endpoint(), &[]);
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let reply = host.control("/capsules", &[("traceparent", &traceparent)]);
    assert_eq!(reply.status, 200);
    let span = collector.span(|s| s["trace_id"] == TRACE);
    assert_eq!(span["name"], "GET /capsules");
    assert_eq!(span["parent_span_id"], PARENT);
    assert_eq!(span["kind"], 2);
    assert_eq!(span["attributes"]["http.route"], "/capsules");
    assert_eq!(span["attributes"]["http.response.status_code"], 200);
}

#[test]
fn spans_past_the_queue_are_dropped_and_counted_in_the_metrics() {
    // Takes connections and never reads them: the first export waits out
    // its timeout while the queue of two fills.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let host = Host::start(
        &endpoint,
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "2"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "20000"),
        ],
    );
    let dropped = |host: &Host| {
        let metrics = host.control("/metrics", &[]).text();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("murmur_door_trace_spans_dropped_total "))
            .unwrap_or_else(|| panic!("no dropped spans counter: {metrics}"))
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(dropped(&host), 0);
    let started = Instant::now();
    for _ in 0..10 {
        let card = crate::common::request(
            &host.capsule,
            "GET",
            "/.well-known/agent-card.json",
            &[],
            b"",
        );
        assert_eq!(card.status, 200);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // Ten card spans and the first metrics request's, two of them queued
    // (or in the export that waits), the rest dropped.
    assert!(dropped(&host) >= 6, "{}", dropped(&host));
    drop(silent);
}
