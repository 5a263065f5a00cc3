//! `cargo bench -p murmur-door-host --bench door`: the cost of one request
//! without sockets. Reports, per operation, the mean and the p50/p99 of
//! single runs:
//!
//! - instantiate: a fresh Store and door instance from the pre-instance,
//!   then dropped (the per-request instantiation cost);
//! - wasm door: a whole request through the host's `respond`, body
//!   collected (SendMessage held until the script agent completes it, in a
//!   session kept in memory), on the instance kept from the last request;
//!   "wasm door, fresh": on a new instance each time;
//! - native door: the same door logic built natively, for comparison.
//!
//! `cargo bench -p murmur-door-host --bench door -- GetTask` runs only the
//! operations whose name holds `GetTask`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use murmur_door_guest::imports::model as guest;
use murmur_door_guest::imports::tree::{Preopened, StdDir};
use murmur_door_host::engine::{self, Door};
use murmur_door_host::internal::cpu;
use murmur_door_host::internal::memory::DoorMemory;
use murmur_door_host::manifest::Manifest;
use murmur_door_host::request::{self, RequestState};
use murmur_door_host::server::{HttpLimits, Server};
use murmur_door_host::session::Session;

const MANIFEST: &str = "name: my-agent\nversion: 0.1.0\ntools: [bash]\ncapabilities: {shell: {allow: [bash]}}\nexports: {files: [out/]}\n";
const REFUSED: &str = r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#;
const RUN_FOR: Duration = Duration::from_secs(3);
/// Header lines a client library adds to a request's own.
const MORE_HEADERS: &[(&str, &str)] = &[
    ("user-agent", "a2a-client/1.0"),
    ("accept", "application/json"),
    ("accept-encoding", "gzip, deflate"),
    ("x-request-id", "0123456789abcdef"),
    (
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    ),
    ("x-forwarded-for", "10.0.0.1"),
    ("cache-control", "no-cache"),
    ("pragma", "no-cache"),
];

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = engine::engine().unwrap();
    let door = Door::load(&engine, engine::EMBEDDED_DOOR).unwrap();
    let manifest = Manifest::parse(MANIFEST).unwrap();
    let session = Arc::new(Session::launch(&manifest, "http://127.0.0.1:41873".into()).unwrap());
    let server = Server::new(door.clone(), session.clone());

    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>9}",
        "operation", "runs", "mean µs", "p50 µs", "p99 µs"
    );
    report("instantiate (pooled)", || {
        runtime.block_on(async {
            let state = RequestState::new(
                session.clone(),
                DoorMemory::unshared(murmur_door_host::internal::memory::MAX_MEMORY_BYTES),
            );
            let mut store = request::store(&engine, state, request::Limits::default());
            let meter = store.data().cpu.clone();
            cpu::metered(&meter, door.instantiate(&mut store))
                .await
                .unwrap();
        })
    });
    report("wasm door: GET card", || {
        runtime.block_on(async {
            let request = hyper::Request::get("/.well-known/agent-card.json")
                .body(Bytes::new())
                .unwrap();
            let response = server.respond(request).await;
            assert_eq!(response.status(), 200);
            response.into_body().collect().await.unwrap();
        })
    });
    // The same door with a fresh instance per request (--idle-instances 0).
    let fresh = Server::new(door.clone(), session.clone()).with_http_limits(HttpLimits {
        idle_instances: 0,
        ..HttpLimits::default()
    });
    // A refusal with its two header lines, and with the few more a
    // browser's or an SDK's client sends.
    for (name, server, more) in [
        ("wasm door: refused JSON-RPC", &server, &[][..]),
        ("wasm door, fresh: refused JSON-RPC", &fresh, &[]),
        ("wasm door: refused, 10 headers", &server, MORE_HEADERS),
    ] {
        report(name, || {
            runtime.block_on(async {
                let mut request = hyper::Request::post("/")
                    .header("content-type", "application/json")
                    .header("a2a-version", "1.0");
                for (name, value) in more {
                    request = request.header(*name, *value);
                }
                let request = request
                    .body(Bytes::from_static(REFUSED.as_bytes()))
                    .unwrap();
                let response = server.respond(request).await;
                assert_eq!(response.status(), 200);
                response.into_body().collect().await.unwrap();
            })
        });
    }

    let send = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"reply hi"}]}}}"#;
    let rpc = |body: String| {
        hyper::Request::post("/")
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(Bytes::from(body))
            .unwrap()
    };
    let mut task_id = String::new();
    report("wasm door: SendMessage held", || {
        runtime.block_on(async {
            let response = server.respond(rpc(send.to_string())).await;
            assert_eq!(response.status(), 200);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                answer["result"]["task"]["status"]["state"],
                "TASK_STATE_COMPLETED"
            );
            task_id = answer["result"]["task"]["id"].as_str().unwrap().to_string();
        })
    });
    let get =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{{"id":"{task_id}"}}}}"#);
    report("wasm door: GetTask", || {
        runtime.block_on(async {
            let response = server.respond(rpc(get.clone())).await;
            assert_eq!(response.status(), 200);
            response.into_body().collect().await.unwrap();
        })
    });

    let list = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":1}}"#;
    report("wasm door: ListTasks, a page of 1", || {
        runtime.block_on(async {
            let response = server.respond(rpc(list.to_string())).await;
            assert_eq!(response.status(), 200);
            response.into_body().collect().await.unwrap();
        })
    });

    native_door(&session);
}

/// The same reads answered by the door's rules compiled natively, with no
/// sandbox: what the sandbox costs is the difference.
fn native_door(session: &Session) {
    let native = Native(capsule(session), identity(session));
    let card = murmur_door_guest::Request::new(
        "GET",
        "/.well-known/agent-card.json",
        [] as [(&str, &str); 0],
    );
    report("native door: GET card", || {
        assert_eq!(
            murmur_door_guest::handle(&native, &card, Vec::new)
                .whole()
                .unwrap()
                .status,
            200
        );
    });
    let refused = |more: &[(&'static str, &'static str)]| {
        murmur_door_guest::Request::new(
            "POST",
            "/",
            [("content-type", "application/json"), ("a2a-version", "1.0")]
                .iter()
                .chain(more)
                .copied(),
        )
    };
    for (name, request) in [
        ("native door: refused JSON-RPC", refused(&[])),
        ("native door: refused, 10 headers", refused(MORE_HEADERS)),
    ] {
        report(name, || {
            assert_eq!(
                murmur_door_guest::handle(&native, &request, || REFUSED.as_bytes().to_vec())
                    .whole()
                    .unwrap()
                    .status,
                200
            );
        });
    }
}

/// Runs `op` for [`RUN_FOR`] after a warm-up and prints its timings.
fn report(name: &str, mut op: impl FnMut()) {
    // `cargo bench --bench door -- WORD` runs the operations named with WORD.
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if only.is_some_and(|word| !name.contains(&word)) {
        return;
    }
    for _ in 0..200 {
        op();
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    while started.elapsed() < RUN_FOR {
        let one = Instant::now();
        op();
        samples.push(one.elapsed());
    }
    samples.sort();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = samples.iter().map(|d| micros(*d)).sum::<f64>() / samples.len() as f64;
    let at = |q: f64| micros(samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)]);
    println!(
        "{name:<34} {:>9} {mean:>9.1} {:>9.1} {:>9.1}",
        samples.len(),
        at(0.5),
        at(0.99)
    );
}

/// The native door's imports: the same facts the host's session answers.
struct Native(guest::Capsule, guest::Identity);

impl murmur_door_guest::Imports for Native {
    fn capsule(&self) -> guest::Capsule {
        self.0.clone()
    }
    fn identity(&self) -> guest::Identity {
        self.1.clone()
    }
    fn exports(&self) -> guest::Exports {
        guest::Exports::default()
    }
    type Dir = StdDir;
    fn preopens(&self) -> Preopened<StdDir> {
        Preopened::new([])
    }
    fn verify(&self, _token: &str) -> Option<guest::Grant> {
        None
    }
    fn redeem(&self, _handle: &str, _audience: &str) -> Option<guest::Redeemed> {
        None
    }
    fn stop(&self) -> Result<guest::StopReport, String> {
        Ok(guest::StopReport::default())
    }
    fn awaits_delegation(&self, _id: &str) -> Result<(), guest::CompletionRefusal> {
        Err(guest::CompletionRefusal::NotAwaited)
    }
    fn deliver_completion(
        &self,
        _id: &str,
        _message: &str,
    ) -> Result<String, guest::CompletionRefusal> {
        Err(guest::CompletionRefusal::NotAwaited)
    }
    // The benchmarked requests never reach a task; the native door measured
    // here holds none.
    fn start(&self, _task: guest::NewTask) -> Result<guest::Started, guest::TaskError> {
        Err(no_store())
    }
    fn reply(
        &self,
        _: &guest::Caller,
        _: &str,
        _: Option<&str>,
        _: &str,
    ) -> Result<guest::Task, guest::TaskError> {
        Err(no_store())
    }
    fn get(&self, _: &guest::Caller, _: &str) -> Result<guest::Task, guest::TaskError> {
        Err(no_store())
    }
    fn cancel(&self, _: &guest::Caller, _: &str) -> Result<guest::Task, guest::TaskError> {
        Err(no_store())
    }
    fn list(
        &self,
        _: &guest::Caller,
        _: &guest::ListQuery,
    ) -> Result<guest::Page, guest::TaskError> {
        Ok(guest::Page::default())
    }
    fn wait_settled(&self, _: &guest::Caller, _: &str) -> Result<(), guest::TaskError> {
        Err(no_store())
    }
    type Reader = ();
    fn latest_event(&self) -> u64 {
        0
    }
    fn task_events(
        &self,
        _: &guest::Caller,
        _: &str,
        _: Option<u64>,
    ) -> Result<(), guest::TaskError> {
        Err(no_store())
    }
    fn session_events(&self, _: Option<u64>) {}
    fn keep_framed(&self, _: &(), _: &guest::Framed) {}
    fn next_event(&self, _: &(), _: u64, _: &guest::PassOn) -> guest::Next {
        guest::Next::Delivery(guest::Delivery::Closed)
    }
    fn new_message_id(&self) -> String {
        "msg_00000000000000000000000000000000".into()
    }
}

fn no_store() -> guest::TaskError {
    guest::TaskError::Unavailable("the benchmark's native door holds no tasks".into())
}

fn capsule(session: &Session) -> guest::Capsule {
    let c = &session.capsule;
    guest::Capsule {
        started_at_ms: c.started_at_ms,
        task_acceptance: guest::TaskAcceptance::Single,
        transport: guest::Transport::Http,
        authenticated: c.authenticated,
        peer_tasks: c.peer_tasks,
        shell: c.shell,
        network: c.network,
        files_plane: true,
        peer_files_plane: false,
        images: guest::ImageLimits {
            max_bytes: c.images.max_bytes,
            max_per_turn: c.images.max_per_turn,
        },
    }
}

fn identity(session: &Session) -> guest::Identity {
    let i = &session.identity;
    guest::Identity {
        name: i.name.clone(),
        version: i.version.clone(),
        session_id: i.session_id.clone(),
        url: i.url.clone(),
        tools: i.tools.clone(),
    }
}
