//! A door that traps, loops, hogs memory, answers nothing or answers garbage
//! costs only its own request: the client gets -32603 (or 500 without a
//! JSON-RPC id), or a response cut short once its head is out, and the host
//! keeps serving. The broken doors are components written in text here, and
//! the garbage ones `tests/faults-door`, built by the test.

use crate::common;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::tempdir::TempDir;
use murmur_door_host::engine::{self, Door, MAX_INSTANCES};
use murmur_door_host::internal::accept;
use murmur_door_host::manifest::Manifest;
use murmur_door_host::request::Limits;
use murmur_door_host::server::{HttpLimits, Server};
use murmur_door_host::session::Session;
use serde_json::json;

/// A component exporting `wasi:http/incoming-handler` whose `handle` runs
/// `body` (core wasm) instead of answering.
pub(crate) fn broken_door(body: &str) -> Vec<u8> {
    broken_door_with("", body)
}

/// [`broken_door`] whose core module also declares `fields` (a memory).
pub(crate) fn broken_door_with(fields: &str, body: &str) -> Vec<u8> {
    common::handler_component("", fields, body)
}

/// The component of `tests/faults-door`, built once for wasm32-wasip2 in the
/// door's own target dir (`target/wasm`, where its dependencies are built).
pub(crate) fn faults_door() -> &'static [u8] {
    static BUILT: OnceLock<Vec<u8>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target_dir = common::root().join("target/wasm");
        let mut build = common::setup::cargo();
        build
            .args(["build", "-p", "murmur-door-faults"])
            .args(["--target", "wasm32-wasip2", "--profile", "wasm"])
            .arg("--target-dir")
            .arg(&target_dir);
        if let Err(e) = common::setup::run(&mut build) {
            panic!("building the faults door: {e}");
        }
        let built = target_dir.join("wasm32-wasip2/wasm/murmur_door_faults.wasm");
        std::fs::read(&built).unwrap_or_else(|e| panic!("reading {}: {e}", built.display()))
    })
}

/// Serves `component` on an ephemeral port from a runtime of its own.
fn serve(component: &[u8]) -> (tokio::runtime::Runtime, String) {
    let (runtime, addrs) = serve_all(&[component], Limits::default());
    (runtime, addrs.into_iter().next().unwrap())
}

/// Serves each of `components` on a port of its own, all from one runtime
/// of 2 workers and one engine, each request's store within `limits`.
fn serve_all(components: &[&[u8]], limits: Limits) -> (tokio::runtime::Runtime, Vec<String>) {
    serve_limited(components, limits, HttpLimits::default())
}

/// [`serve_all`], each request's HTTP side within `http`.
fn serve_limited(
    components: &[&[u8]],
    limits: Limits,
    http: HttpLimits,
) -> (tokio::runtime::Runtime, Vec<String>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let http = HttpLimits {
        max_instances: 64,
        ..http
    };
    let addrs = runtime.block_on(async {
        let engine = engine::engine_for(http.max_instances, limits.max_memory_bytes).unwrap();
        let mut addrs = Vec::new();
        for component in components {
            let door = Door::load(&engine, component).unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let manifest = Manifest::parse("name: broken\nversion: 0.0.1\n").unwrap();
            let session = Arc::new(Session::launch(&manifest, format!("http://{addr}")).unwrap());
            let server = Arc::new(
                Server::new(door, session)
                    .with_limits(limits)
                    .with_http_limits(http),
            );
            tokio::spawn(accept::serve(server, listener));
            addrs.push(addr.to_string());
        }
        addrs
    });
    (runtime, addrs)
}

/// The resident set of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// What 200 failing requests cost the host: each `ask(n)` must be answered
/// `expected(n)` (-32603 with id n, unless said otherwise). Prints, and
/// returns, the time each took and the resident set before and after, in
/// KiB.
fn cost_of_failures(what: &str, ask: impl Fn(u64) -> common::Reply) -> (Duration, u64, u64) {
    cost_of_failures_answered(what, ask, |n| internal(json!(n)))
}

fn cost_of_failures_answered(
    what: &str,
    ask: impl Fn(u64) -> common::Reply,
    expected: impl Fn(u64) -> serde_json::Value,
) -> (Duration, u64, u64) {
    const N: u64 = 200;
    let before = rss_kib();
    let started = Instant::now();
    for n in 1..=N {
        assert_eq!(ask(n).json(), expected(n));
    }
    let each = started.elapsed() / N as u32;
    let after = rss_kib();
    println!("{N} {what}: {each:?} each; RSS {before} -> {after} KiB");
    (each, before, after)
}

/// GetTask with id `n`, posted to `addr`.
fn get_task(addr: &str, n: u64) -> common::Reply {
    common::post(
        addr,
        &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"GetTask"}}"#),
    )
}

const INTERNAL: &str = "Internal error: the door failed while answering this request";

#[test]
fn a_trapping_door_costs_only_its_request() {
    let (_runtime, addr) = serve(&broken_door("unreachable"));
    // More requests than the pool has instances: a trap frees its slot.
    for n in 0..u64::from(MAX_INSTANCES + 44) {
        let reply = get_task(&addr, n);
        assert_eq!(reply.status, 200);
        assert_eq!(reply.json(), internal(json!(n)));
    }
    // Without a JSON-RPC id the answer is a 500.
    for body in ["", "{", r#"{"id":1.5}"#] {
        let reply = common::post(&addr, body);
        assert_eq!(reply.status, 500);
        assert_eq!(
            reply.json(),
            json!({"error": "internal", "message": INTERNAL})
        );
    }
    let head = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    );
    assert_eq!(common::exchange(&addr, head.as_bytes(), b"").status, 500);
}

#[test]
fn a_door_that_never_answers_is_answered_for() {
    let (_runtime, addr) = serve(&broken_door("nop"));
    let reply = common::post(&addr, r#"{"jsonrpc":"2.0","id":"q","method":"GetTask"}"#);
    assert_eq!(
        reply.json(),
        json!({"jsonrpc": "2.0", "id": "q", "error": {"code": -32603, "message": INTERNAL}})
    );
    let reply = common::post(&addr, "not json");
    assert_eq!(reply.status, 500);
}

fn internal(id: serde_json::Value) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": INTERNAL}})
}

/// A door that never stops running is cut after `--max-cpu-ms` of wasm: the
/// request is answered -32603 (500 without an id), and the host serves the
/// next one. While two such doors run on the runtime's 2 workers, a good
/// door on the same runtime and engine still answers at once: the loops
/// yield at every epoch tick.
#[test]
fn an_endless_loop_costs_only_its_request() {
    let budget = 1000;
    let limits = Limits {
        max_cpu_ms: budget,
        ..Limits::default()
    };
    let looping = broken_door("(loop br 0)");
    let (_runtime, addrs) = serve_all(&[&looping, engine::EMBEDDED_DOOR], limits);
    let (bad, good) = (addrs[0].clone(), addrs[1].clone());

    let started = Instant::now();
    let loops: Vec<_> = (0..2)
        .map(|n| {
            let bad = bad.clone();
            std::thread::spawn(move || {
                let reply = get_task(&bad, n);
                (reply.status, reply.json(), started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    let head = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {good}\r\nconnection: close\r\n\r\n"
    );
    let card = common::exchange(&good, head.as_bytes(), b"");
    let card_took = asked.elapsed();
    assert_eq!(card.status, 200);
    assert!(
        card_took < Duration::from_millis(budget / 2),
        "the good door waited {card_took:?} beside two looping doors"
    );
    for (n, handle) in loops.into_iter().enumerate() {
        let (status, reply, took) = handle.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(reply, internal(json!(n)));
        assert!(
            took >= Duration::from_millis(budget * 9 / 10)
                && took < Duration::from_millis(budget * 10),
            "the loop was cut after {took:?}, the budget is {budget} ms"
        );
        println!(
            "loop {n} cut after {took:?} (budget {budget} ms); card beside it in {card_took:?}"
        );
    }
    // Without an id: 500; and the host keeps serving.
    let reply = common::post(&bad, "{");
    assert_eq!(reply.status, 500);
    assert_eq!(common::exchange(&good, head.as_bytes(), b"").status, 200);
}

/// What many cut loops cost the host: the time to answer each and the
/// resident set after them (small budget, so it runs quickly).
#[test]
fn endless_loops_leave_the_host_as_it_was() {
    let limits = Limits {
        max_cpu_ms: 20,
        ..Limits::default()
    };
    let looping = broken_door("(loop br 0)");
    let (_runtime, addrs) = serve_all(&[&looping], limits);
    let reply = common::post(&addrs[0], r#"{"jsonrpc":"2.0","id":0,"method":"GetTask"}"#);
    assert_eq!(reply.json(), internal(json!(0)));
    let (_, before, after) = cost_of_failures("loops cut at 20 ms", |n| get_task(&addrs[0], n));
    assert!(after < before + 32 * 1024, "RSS {before} -> {after} KiB");
}

/// A stream that waits costs no CPU budget: a WatchSession idle for many
/// times `--max-cpu-ms` stays open and still carries the next task's
/// events.
#[test]
fn an_idle_stream_is_not_cut() {
    let state = TempDir::new("cpu");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(&manifest, "name: idle\nversion: 0.1.0\n").unwrap();
    let door = common::Door::start_with(&manifest, state, &["--max-cpu-ms", "30"]);
    let mut sse = door.open_stream(
        r#"{"jsonrpc":"2.0","id":"watch","method":"murmur.WatchSession","params":{}}"#,
        &[],
    );
    assert_eq!(sse.status, 200);
    let ack = sse.next();
    assert_eq!(ack.data["id"], "watch");
    // Idle for 50 budgets.
    std::thread::sleep(Duration::from_millis(1500));
    while sse.next_within(Duration::from_millis(10)).is_some() {}
    assert!(!sse.ended, "the idle stream was ended");
    let task = door.send_task(None, "hello", json!({}));
    let task_id = task["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no event of the task arrived");
        let event = sse.next();
        if event.data["result"]["statusUpdate"]["taskId"] == task_id.as_str() {
            break;
        }
    }
    assert!(!sse.ended);
}

/// A stream busy with events is not cut either: its door runs a few
/// microseconds of wasm for each event, so a stream woken in every epoch
/// tick for many times `--max-cpu-ms` still carries the task to its end.
#[test]
fn a_busy_stream_is_not_cut() {
    const STEPS: usize = 300;
    let state = TempDir::new("cpu");
    let manifest = state.path().join("murmur.yaml");
    std::fs::write(&manifest, "name: busy\nversion: 0.1.0\n").unwrap();
    let door = common::Door::start_with(&manifest, state, &["--max-cpu-ms", "30"]);
    // A progress status every 2 ms: one or more in every 10 ms tick.
    let mut script: String = (0..STEPS)
        .map(|i| format!("progress p{i}\nsleep 2\n"))
        .collect();
    script.push_str("reply done");
    let body = json!({"jsonrpc": "2.0", "id": "busy", "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": script}]}}});
    let started = Instant::now();
    let mut sse = door.open_stream(&body.to_string(), &[]);
    assert_eq!(sse.status, 200);
    let events = sse.rest();
    let took = started.elapsed();
    let progress = events
        .iter()
        .filter(|e| {
            e.data["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with('p'))
        })
        .count();
    assert_eq!(progress, STEPS, "the stream was cut after {took:?}");
    let last = &events.last().unwrap().data["result"]["statusUpdate"]["status"]["state"];
    assert_eq!(last, "TASK_STATE_COMPLETED");
    assert!(took > Duration::from_millis(300), "{took:?}");
    println!(
        "a stream of {} events over {took:?} (a budget of 30 ms) ran to its end",
        events.len()
    );
}

/// A door that grows its memory until the host refuses (`--max-memory-mb`),
/// touching each new page, then traps, costs only its request; so does one
/// that asks for 4 GiB at once. A request that needs more memory than a door
/// has is answered 413, naming the limit. Prints what 200 of them cost the
/// host.
#[test]
fn a_memory_hog_costs_only_its_request() {
    let limits = Limits {
        max_memory_bytes: 16 << 20,
        ..Limits::default()
    };
    // Grow a page at a time and write to it, until memory.grow answers -1.
    let hog = broken_door_with(
        "(memory 1)",
        "(local $page i32)
         (loop $grow
           (local.set $page (memory.grow (i32.const 1)))
           (if (i32.ne (local.get $page) (i32.const -1))
             (then
               (i32.store (i32.mul (local.get $page) (i32.const 65536)) (i32.const 7))
               (br $grow))))
         unreachable",
    );
    let huge = broken_door_with(
        "(memory 1)",
        "(if (i32.eq (memory.grow (i32.const 65535)) (i32.const -1)) (then unreachable))",
    );
    let (_runtime, addrs) = serve_all(&[&hog, &huge, engine::EMBEDDED_DOOR], limits);
    let too_large = json!({"error": "payload_too_large", "message": "serving this request needs more than the 16 MiB of memory a door instance has (--max-memory-mb)"});
    for addr in &addrs[..2] {
        let reply = common::post(addr, r#"{"jsonrpc":"2.0","id":"m","method":"GetTask"}"#);
        assert_eq!(reply.status, 413);
        assert_eq!(reply.json(), too_large);
        assert_eq!(common::post(addr, "[").status, 413);
    }
    let (_, before, after) = cost_of_failures_answered(
        "hogs of 16 MiB",
        |n| get_task(&addrs[0], n),
        |_| too_large.clone(),
    );
    assert!(after < before + 64 * 1024, "RSS {before} -> {after} KiB");
    // The good door beside them still answers.
    let good = &addrs[2];
    let head = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {good}\r\nconnection: close\r\n\r\n"
    );
    assert_eq!(common::exchange(good, head.as_bytes(), b"").status, 200);
}

/// Everything the server sends for `head` until it closes the connection
/// (5 s at most), and how long it took.
fn raw(addr: &str, head: &[u8]) -> (Vec<u8>, Duration) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    stream.write_all(head).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    (out, started.elapsed())
}

/// A door that answers with an error code instead of a response (here with
/// a 1 MiB message, which the log clips) is answered for like a trap.
#[test]
fn a_door_answering_an_error_code_is_answered_for() {
    let (_runtime, addr) = serve(faults_door());
    let head = |len: usize| {
        format!(
            "POST /error-code HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n"
        )
    };
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"GetTask"}"#;
    let reply = common::exchange(&addr, head(body.len()).as_bytes(), body.as_bytes());
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), internal(json!(7)));
    let reply = common::exchange(&addr, head(1).as_bytes(), b"{");
    assert_eq!(reply.status, 500);
    assert_eq!(
        reply.json(),
        json!({"error": "internal", "message": INTERNAL})
    );
}

/// Once a door has set its head, the host cannot take it back: a body
/// shorter than its content-length, or a stream the door traps in, ends the
/// connection at once after what the door wrote (here given time to reach
/// the client), so the client is not left waiting and can tell the response
/// is incomplete: the short body lacks bytes, and the stream its last chunk.
/// The next request is served.
#[test]
fn a_door_cut_short_after_its_head_closes_the_connection() {
    let (_runtime, addr) = serve(faults_door());
    // What the door sent, the date aside: a body short of its length, and an
    // event stream without its last chunk.
    let cases = [
        ("/short-body", "content-length: 100\r\n", "only this"),
        (
            "/cut-stream",
            "content-type: text/event-stream\r\ntransfer-encoding: chunked\r\n",
            "B\r\ndata: one\n\n\r\n",
        ),
    ];
    for (path, headers, body) in cases {
        // Kept alive: the close is the host's doing.
        let head = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n");
        let (answer, took) = raw(&addr, head.as_bytes());
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let date = answer
            .find("date: ")
            .map_or("", |at| &answer[at + 6..at + 35]);
        let sent = format!("HTTP/1.1 200 OK\r\n{headers}date: {date}\r\n\r\n{body}");
        assert_eq!(answer, sent, "{path}");
        assert!(
            took < Duration::from_secs(4),
            "{path}: closed after {took:?}"
        );
    }

    let last = format!("GET /garbage-head HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    assert_eq!(common::exchange(&addr, last.as_bytes(), b"").status, 200);
}

/// What a response head may not hold never reaches the client: the host
/// refuses a status of 1000, a malformed header name, a value that would
/// split the head, and the headers it frames itself; the door answers with
/// what was refused. A door that pads a header past 64 KiB is stopped.
#[test]
fn garbage_in_a_head_is_refused_at_the_boundary() {
    let (_runtime, addr) = serve(faults_door());
    let head = format!("GET /garbage-head HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    let reply = common::exchange(&addr, head.as_bytes(), b"");
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.text(),
        "bad name: HeaderError::InvalidSyntax\nx-split: HeaderError::InvalidSyntax\n\
         connection: HeaderError::Forbidden\n\
         transfer-encoding: HeaderError::Forbidden\nstatus 1000"
    );
    for name in ["x-injected", "bad name", "x-split"] {
        assert_eq!(reply.header(name), None, "{name}");
    }
    // hyper's own framing, not the door's gzip.
    assert_eq!(reply.header("transfer-encoding"), Some("chunked"));

    let body = r#"{"jsonrpc":"2.0","id":"h","method":"GetTask"}"#;
    let head = format!(
        "POST /huge-head HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let reply = common::exchange(&addr, head.as_bytes(), body.as_bytes());
    assert_eq!(reply.json(), internal(json!("h")));
}

/// A door that makes host resources without end is stopped at 1,024 of
/// them: its request is answered -32603 at once, and 200 such requests
/// leave the host's memory as it was.
#[test]
fn a_door_piling_host_resources_costs_only_its_request() {
    let (_runtime, addr) = serve(faults_door());
    let ask = |n: u64| {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"GetTask"}}"#);
        let head = format!(
            "POST /pile-resources HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        common::exchange(&addr, head.as_bytes(), body.as_bytes())
    };
    assert_eq!(ask(0).json(), internal(json!(0)));
    let (each, before, after) = cost_of_failures("doors piling host resources", ask);
    assert!(each < Duration::from_millis(200), "{each:?} each");
    assert!(after < before + 32 * 1024, "RSS {before} -> {after} KiB");
}

/// The HTTP limits: a body over `--max-body-bytes` is answered 413 in JSON;
/// a head with more than `--max-headers` lines, or larger than
/// `--max-header-bytes`, is answered 431 by hyper and the connection
/// closed; a client that sends half a head and stalls is disconnected after
/// `--header-timeout-ms`. The host serves on.
#[test]
fn request_limits() {
    let http = HttpLimits {
        max_body_bytes: 1000,
        max_headers: 20,
        max_header_bytes: 8192,
        header_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    };
    let (_runtime, addrs) = serve_limited(&[engine::EMBEDDED_DOOR], Limits::default(), http);
    let addr = &addrs[0];
    let card = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    );

    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{{"id":"{}"}}}}"#,
        "x".repeat(1000)
    );
    let reply = common::post(addr, &body);
    assert_eq!(reply.status, 413);
    assert_eq!(reply.json()["error"], "payload_too_large");
    assert_eq!(
        reply.json()["message"],
        "the request body is larger than 1000 bytes"
    );

    let mut many = format!("GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {addr}\r\n");
    for n in 0..40 {
        many.push_str(&format!("x-h{n}: v\r\n"));
    }
    many.push_str("\r\n");
    let (answer, took) = raw(addr, many.as_bytes());
    assert!(answer.starts_with(b"HTTP/1.1 431"), "{answer:?}");
    assert!(took < Duration::from_secs(4), "not closed: {took:?}");

    let big = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {addr}\r\nx-big: {}\r\n\r\n",
        "b".repeat(20_000)
    );
    let (answer, took) = raw(addr, big.as_bytes());
    assert!(answer.starts_with(b"HTTP/1.1 431"), "{answer:?}");
    assert!(took < Duration::from_secs(4), "not closed: {took:?}");

    let half = format!("GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {addr}\r\n");
    let (answer, took) = raw(addr, half.as_bytes());
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(4),
        "a stalled head was closed after {took:?}: {answer:?}"
    );
    assert_eq!(answer, b"");
    println!("stalled head closed after {took:?}, answered nothing");

    assert_eq!(common::exchange(addr, card.as_bytes(), b"").status, 200);
}
