//! The end-to-end harness: starts the real `murmur-door` binary on an
//! ephemeral port and speaks raw HTTP/1.1 to it, so every header line is
//! exactly what the test wrote.

pub mod rpc;
pub mod setup;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// A running door, stopped when dropped.
pub struct Door {
    child: Child,
    pub addr: String,
    pub url: String,
    pub state: tempdir::TempDir,
    pub tokens: Value,
    pub stderr: mpsc::Receiver<String>,
    /// The manifest it serves, for a restart on the same state.
    pub manifest: PathBuf,
    /// What it logged up to its url.
    pub launched: Vec<String>,
}

pub mod tempdir {
    use std::path::{Path, PathBuf};

    /// A directory under the target dir, removed when dropped.
    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new(label: &str) -> TempDir {
            let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            let unique = format!("{label}-{}-{}", std::process::id(), super::counter());
            let dir = base.join(unique);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }

        /// Moves the directory out, leaving an empty handle that removes
        /// nothing when dropped.
        pub fn take(&mut self) -> TempDir {
            TempDir(std::mem::take(&mut self.0))
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            if !self.0.as_os_str().is_empty() {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }
}

fn counter() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_murmur-door"))
}

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

impl Door {
    /// Serves the manifest `yaml` on 127.0.0.1:0.
    pub fn start(yaml: &str) -> Door {
        Door::start_flagged(yaml, &[])
    }

    /// Serves the manifest `yaml` on 127.0.0.1:0 with `extra` flags; the
    /// manifest's directory (its workdir) is the state directory.
    pub fn start_flagged(yaml: &str, extra: &[&str]) -> Door {
        let state = tempdir::TempDir::new("door");
        let manifest = state.path().join("murmur.yaml");
        std::fs::write(&manifest, yaml).unwrap();
        Door::start_with(&manifest, state, extra)
    }

    /// Serves the manifest `yaml` logging at `level` (RUST_LOG).
    pub fn start_logged(yaml: &str, level: &str) -> Door {
        let state = tempdir::TempDir::new("door");
        let manifest = state.path().join("murmur.yaml");
        std::fs::write(&manifest, yaml).unwrap();
        Door::launch(&manifest, state, &[], level)
    }

    pub fn start_with(manifest: &Path, state: tempdir::TempDir, extra: &[&str]) -> Door {
        Door::launch(manifest, state, extra, "info")
    }

    pub fn launch(manifest: &Path, state: tempdir::TempDir, extra: &[&str], level: &str) -> Door {
        let command = Door::command(manifest, &state, extra, level);
        Door::spawn(command, manifest, state)
    }

    /// Serves the manifest `yaml` with `extra` flags, logging at `level`,
    /// with `env` set.
    pub fn start_env(yaml: &str, extra: &[&str], level: &str, env: &[(&str, &str)]) -> Door {
        let state = tempdir::TempDir::new("door");
        let manifest = state.path().join("murmur.yaml");
        std::fs::write(&manifest, yaml).unwrap();
        let mut command = Door::command(&manifest, &state, extra, level);
        command.envs(env.iter().copied());
        Door::spawn(command, &manifest, state)
    }

    /// Launches with resource limits set first, as a shell's `ulimit` would:
    /// each `(resource, soft, hard)`, such as `libc::RLIMIT_NOFILE`.
    pub fn launch_limited(
        manifest: &Path,
        state: tempdir::TempDir,
        extra: &[&str],
        limits: &[(libc::__rlimit_resource_t, u64, u64)],
    ) -> Door {
        use std::os::unix::process::CommandExt;
        let mut command = Door::command(manifest, &state, extra, "info");
        let limits = limits.to_vec();
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            command.pre_exec(move || {
                for &(resource, soft, hard) in &limits {
                    let limit = libc::rlimit {
                        rlim_cur: soft,
                        rlim_max: hard,
                    };
                    if libc::setrlimit(resource, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Door::spawn(command, manifest, state)
    }

    /// Sets a resource limit of the running door (prlimit).
    pub fn set_limit(&self, resource: libc::__rlimit_resource_t, soft: u64, hard: u64) {
        let limit = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: prlimit on our own child, with a valid rlimit.
        let set =
            unsafe { libc::prlimit(self.pid() as i32, resource, &limit, std::ptr::null_mut()) };
        assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
    }

    fn command(manifest: &Path, state: &tempdir::TempDir, extra: &[&str], level: &str) -> Command {
        let mut command = Command::new(binary());
        // No trace leaves a test unless it asks (tests/traces.rs).
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        command
            .arg("serve")
            .arg(manifest)
            .args(["--listen", "127.0.0.1:0", "--state"])
            .arg(state.path())
            .arg("--tokens-file")
            .arg(state.path().join("tokens.json"))
            .args(extra)
            .env("RUST_LOG", level)
            // The doors the tests launch share one compile cache, under
            // target/, not the user's.
            .env("XDG_CACHE_HOME", root().join("target/e2e-cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    fn spawn(mut command: Command, manifest: &Path, state: tempdir::TempDir) -> Door {
        let tokens_file = state.path().join("tokens.json");
        let mut child = command.spawn().expect("starting murmur-door");
        let stderr = stderr_lines(&mut child);
        let mut launched = Vec::new();
        let url = loop {
            let line = stderr
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!(
                        "murmur-door did not announce its url: {:?}",
                        child.try_wait()
                    )
                });
            if let Some(at) = line.find("url=") {
                let url = line[at + 4..].trim().to_string();
                launched.push(line);
                break url;
            }
            launched.push(line);
        };
        let addr = url.strip_prefix("http://").unwrap().to_string();
        let tokens = serde_json::from_slice(&std::fs::read(&tokens_file).unwrap()).unwrap();
        Door {
            child,
            addr,
            url,
            state,
            tokens,
            stderr,
            manifest: manifest.to_path_buf(),
            launched,
        }
    }

    /// The door's resident memory, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    pub fn token(&self, credential: &str) -> String {
        self.tokens[credential].as_str().unwrap().to_string()
    }

    /// Sends raw header lines and a body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        request(&self.addr, method, path, headers, body)
    }

    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[], b"")
    }

    /// A JSON-RPC POST / with `A2A-Version: 1.0` and the extra headers.
    pub fn rpc(&self, body: &str, headers: &[(&str, &str)]) -> Reply {
        let mut all = vec![("content-type", "application/json"), ("A2A-Version", "1.0")];
        all.extend_from_slice(headers);
        self.request("POST", "/", &all, body.as_bytes())
    }

    /// `rpc` with a bearer token.
    pub fn rpc_as(&self, token: &str, body: &str) -> Reply {
        let auth = format!("Bearer {token}");
        self.rpc(body, &[("Authorization", &auth)])
    }

    /// Stops the door and returns every line it logged after its url.
    pub fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(50));
        self.stderr.try_iter().collect()
    }

    /// The door's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// How the process ended, waiting up to `wait` for it; None while it
    /// still runs.
    pub fn exited_within(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the door as a crash would (SIGKILL: nothing is flushed or
    /// closed) and launches it again on the same manifest, state directory
    /// and tokens file, with `extra` arguments such as `--resume`. The new
    /// door reads the tokens it minted.
    pub fn restart(mut self, extra: &[&str]) -> Door {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let state = self.state.take();
        let manifest = self.manifest.clone();
        drop(self);
        Door::launch(&manifest, state, extra, "info")
    }

    /// A JSON-RPC call answered as one JSON body (HTTP 200,
    /// application/json): the whole response object. `token` goes in
    /// `Authorization: Bearer`.
    pub fn call(&self, token: Option<&str>, method: &str, params: Value) -> Value {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
                .to_string();
        let reply = match token {
            Some(token) => self.rpc_as(token, &body),
            None => self.rpc(&body, &[]),
        };
        assert_eq!(reply.status, 200, "{body}: {}", reply.text());
        assert_eq!(
            reply.header("content-type"),
            Some("application/json"),
            "{body}: {}",
            reply.text()
        );
        reply.json()
    }

    /// `call`'s result; panics showing the answer when it is an error.
    pub fn result(&self, token: Option<&str>, method: &str, params: Value) -> Value {
        let answer = self.call(token, method, params.clone());
        match answer.get("result") {
            Some(result) => result.clone(),
            None => panic!("{method} {params} answered {answer}"),
        }
    }

    /// `call`'s error object; panics showing the answer when it is a result.
    pub fn error(&self, token: Option<&str>, method: &str, params: Value) -> Value {
        let answer = self.call(token, method, params.clone());
        match answer.get("error") {
            Some(error) => error.clone(),
            None => panic!("{method} {params} was served: {answer}"),
        }
    }

    /// SendMessage of one text part, with a fresh messageId. `extra`'s
    /// `message` members are merged into the message (contextId, taskId,
    /// referenceTaskIds, parts, …) and its other members into params
    /// (configuration, …). Returns the whole response object.
    pub fn send(&self, token: Option<&str>, text: &str, extra: Value) -> Value {
        let mut message = serde_json::json!({
            "messageId": format!("m{}", counter()),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        });
        let mut params = serde_json::Map::new();
        if let Value::Object(extra) = extra {
            for (key, value) in extra {
                match (key.as_str(), value) {
                    ("message", Value::Object(members)) => {
                        for (k, v) in members {
                            message[k] = v;
                        }
                    }
                    (_, value) => {
                        params.insert(key, value);
                    }
                }
            }
        }
        params.insert("message".into(), message);
        self.call(token, "SendMessage", Value::Object(params))
    }

    /// The task a SendMessage answered; panics showing any other answer.
    pub fn send_task(&self, token: Option<&str>, text: &str, extra: Value) -> Value {
        let answer = self.send(token, text, extra);
        match answer.pointer("/result/task") {
            Some(task) => task.clone(),
            None => panic!("SendMessage {text:?} answered {answer}"),
        }
    }

    /// GetTask's task.
    pub fn get_task(&self, token: Option<&str>, id: &str) -> Value {
        self.result(token, "GetTask", serde_json::json!({"id": id}))
    }

    /// Polls GetTask until `done` holds for the task (at most 30 s), and
    /// returns it.
    pub fn wait_task(&self, token: Option<&str>, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let task = self.get_task(token, id);
            if done(&task) {
                return task;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "task {id} never got there: {task}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls GetTask until the task is in `state`.
    pub fn wait_state(&self, token: Option<&str>, id: &str, state: &str) -> Value {
        self.wait_task(token, id, |task| task["status"]["state"] == state)
    }

    /// The capsule extension's params.sessionId: on the public card of a
    /// public door, on the extended card (read with the operator token) of
    /// an authenticated one.
    pub fn session_id(&self) -> String {
        const CAPSULE: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1";
        let find = |card: &Value| -> Option<String> {
            card["capabilities"]["extensions"]
                .as_array()?
                .iter()
                .find(|e| e["uri"] == CAPSULE)
                .and_then(|e| e["params"]["sessionId"].as_str())
                .map(str::to_string)
        };
        let card = self.get("/.well-known/agent-card.json").json();
        if let Some(id) = find(&card) {
            return id;
        }
        let operator = self.token("operator");
        let extended = self.result(
            Some(&operator),
            "GetExtendedAgentCard",
            serde_json::json!({}),
        );
        find(&extended).expect("the extended card carries the capsule extension")
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `method path` to `addr` with `headers` and `body`, on a connection of
/// its own.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    exchange(addr, head.as_bytes(), body)
}

/// Each of `held` (held SendMessages in flight when the door closed) was
/// answered, none reset: 200 and its task as it stood, as the reference
/// answers a held request when the door closes.
pub fn answered_as_the_door_closed(held: Vec<std::thread::JoinHandle<Reply>>) {
    for held in held {
        let reply = held.join().expect("a held request was answered");
        assert_eq!(reply.status, 200, "{}", reply.text());
        let state = reply.json()["result"]["task"]["status"]["state"].clone();
        assert!(
            state == "TASK_STATE_WORKING" || state == "TASK_STATE_SUBMITTED",
            "{state}"
        );
    }
}

/// The lines `child` writes to its piped stderr, as they arrive.
pub fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (lines, received) = mpsc::channel();
    let pipe = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    received
}

/// Writes a request's head and body on a new connection and reads the
/// response until the server closes it.
pub fn exchange(addr: &str, head: &[u8], body: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(head).unwrap();
    stream.write_all(body).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    Reply::parse(&raw)
}

/// A POST / of `body` with `connection: close`.
pub fn post(addr: &str, body: &str) -> Reply {
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\nA2A-Version: 1.0\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    exchange(addr, head.as_bytes(), body.as_bytes())
}

/// An HTTP response as it arrived.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Header lines in order, names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn parse(raw: &[u8]) -> Reply {
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a response head");
        let head = std::str::from_utf8(&raw[..split]).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.trim().to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        let mut body = raw[split + 4..].to_vec();
        if headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v == "chunked")
        {
            body = dechunk(&body);
        }
        Reply {
            status,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let end = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&body[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[end + 2..end + 2 + size]);
        body = &body[end + 2 + size + 2..];
    }
}

/// Parses JSON keeping key order, so `to_string` shows the order served.
pub fn ordered(text: &str) -> String {
    serde_json::to_string(&serde_json::from_str::<Value>(text).unwrap()).unwrap()
}

/// A TASK_STATE_FAILED task as GetTask answers it ("GetTask"): its status
/// message a ROLE_AGENT message with one text part, named after the task,
/// and nothing else but `extra`'s members (metadata).
pub fn failed_task(
    task_id: &str,
    context_id: &Value,
    message: &str,
    timestamp: &Value,
    extra: Value,
) -> Value {
    let mut task = serde_json::json!({
        "id": task_id,
        "contextId": context_id,
        "status": {
            "state": "TASK_STATE_FAILED",
            "message": {
                "messageId": format!("msg_{task_id}_status"),
                "contextId": context_id,
                "taskId": task_id,
                "role": "ROLE_AGENT",
                "parts": [{"text": message, "mediaType": "text/plain"}],
            },
            "timestamp": timestamp,
        },
    });
    if let Value::Object(extra) = extra {
        task.as_object_mut().unwrap().extend(extra);
    }
    task
}

/// GetTask until the task settles (ends, or waits for input), for at most
/// 20 s; `token` on an authenticated door.
pub fn settle(door: &Door, token: Option<&str>, task_id: &str) -> Value {
    wait_for(door, token, task_id, |state| {
        !matches!(state, "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING")
    })
}

/// GetTask until `done(state)` holds, for at most 20 s.
pub fn wait_for(
    door: &Door,
    token: Option<&str>,
    task_id: &str,
    done: impl Fn(&str) -> bool,
) -> Value {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}).to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let reply = match token {
            Some(token) => door.rpc_as(token, &body),
            None => door.rpc(&body, &[]),
        };
        let task = reply.json()["result"].clone();
        if task["status"]["state"].as_str().is_some_and(&done) {
            return task;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "task {task_id} stayed {}",
            task["status"]["state"]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An open `text/event-stream` response, read event by event.
pub struct Sse {
    stream: TcpStream,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Bytes received and not yet de-chunked.
    raw: Vec<u8>,
    /// De-chunked text not yet split into events.
    text: String,
    /// The server ended the body (the last chunk) or closed the connection.
    pub ended: bool,
    chunked: bool,
}

/// One SSE event: its `id` line, its data parsed, and whether it was a
/// comment (a heartbeat).
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<u64>,
    pub data: Value,
    pub comment: bool,
}

impl Door {
    /// POSTs a JSON-RPC request and returns the response as it streams.
    pub fn open_stream(&self, body: &str, headers: &[(&str, &str)]) -> Sse {
        let mut head = format!(
            "POST / HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nA2A-Version: 1.0\r\ncontent-length: {}\r\n",
            self.addr,
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
        let mut sse = Sse {
            stream,
            status: 0,
            headers: Vec::new(),
            raw: Vec::new(),
            text: String::new(),
            ended: false,
            chunked: false,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !sse.raw.windows(4).any(|w| w == b"\r\n\r\n") {
            assert!(sse.fill(), "the door closed before its head");
            assert!(std::time::Instant::now() < deadline, "no response head");
        }
        let split = sse.raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&sse.raw[..split]).into_owned();
        sse.raw.drain(..split + 4);
        let mut lines = head.split("\r\n");
        sse.status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        sse.headers = lines
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.trim().to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        sse.chunked = sse.header("transfer-encoding") == Some("chunked");
        sse
    }
}

impl Sse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Reads what arrived; false once the connection is closed.
    fn fill(&mut self) -> bool {
        let mut buf = [0u8; 16384];
        match self.stream.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                self.raw.extend_from_slice(&buf[..n]);
                true
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                true
            }
            Err(_) => false,
        }
    }

    /// Moves complete chunks from `raw` to `text`.
    fn dechunk(&mut self) {
        if !self.chunked {
            self.text
                .push_str(&String::from_utf8_lossy(&std::mem::take(&mut self.raw)));
            return;
        }
        loop {
            let Some(end) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&self.raw[..end]).unwrap().trim(), 16)
                    .unwrap();
            if size == 0 {
                self.ended = true;
                self.raw.clear();
                return;
            }
            if self.raw.len() < end + 2 + size + 2 {
                return;
            }
            self.text
                .push_str(std::str::from_utf8(&self.raw[end + 2..end + 2 + size]).unwrap());
            self.raw.drain(..end + 2 + size + 2);
        }
    }

    /// The next event, waiting at most `wait`; None when the stream ended or
    /// nothing came.
    pub fn next_within(&mut self, wait: Duration) -> Option<SseEvent> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            self.dechunk();
            if let Some(at) = self.text.find("\n\n") {
                let block: String = self.text.drain(..at + 2).collect();
                let mut event = SseEvent {
                    id: None,
                    data: Value::Null,
                    comment: false,
                };
                for line in block.lines() {
                    if let Some(id) = line.strip_prefix("id: ") {
                        event.id = Some(id.parse().unwrap());
                    } else if let Some(data) = line.strip_prefix("data: ") {
                        event.data = serde_json::from_str(data).unwrap();
                    } else if line.starts_with(':') {
                        event.comment = true;
                    }
                }
                return Some(event);
            }
            if self.ended || std::time::Instant::now() >= deadline {
                return None;
            }
            if !self.fill() {
                self.dechunk();
                self.ended = true;
            }
        }
    }

    /// The next event within 20 s; panics when none comes.
    pub fn next(&mut self) -> SseEvent {
        self.next_within(Duration::from_secs(20)).expect("an event")
    }

    /// Every event until the stream ends (at most 20 s).
    pub fn rest(&mut self) -> Vec<SseEvent> {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut events = Vec::new();
        while let Some(event) =
            self.next_within(deadline.saturating_duration_since(std::time::Instant::now()))
        {
            events.push(event);
        }
        assert!(self.ended, "the stream did not end");
        events
    }
}

/// A task's id.
pub fn id(task: &Value) -> String {
    task["id"].as_str().unwrap().to_string()
}

/// The ids of a ListTasks page's tasks, in order.
pub fn ids(page: &Value) -> Vec<&str> {
    page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect()
}

/// -32001 TaskNotFoundError for `task_id`, as "Errors" gives it.
pub fn not_found(task_id: &str) -> Value {
    serde_json::json!({"code": -32001, "message": "Task not found", "data": [{
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "TASK_NOT_FOUND",
        "domain": "a2a-protocol.org",
        "metadata": {"taskId": task_id},
    }]})
}

/// A component exporting `wasi:http/incoming-handler` written in text, for
/// doors that are not ours: it imports `wasi:http/types` and `imports` (more
/// component imports), and its `handle` runs `body` (core wasm) in a core
/// module that also declares `fields` (a memory, say).
pub fn handler_component(imports: &str, fields: &str, body: &str) -> Vec<u8> {
    let text = format!(
        r#"(component
  {imports}
  (import "wasi:http/types@0.2.12" (instance $types
    (export "incoming-request" (type (sub resource)))
    (export "response-outparam" (type (sub resource)))))
  (alias export $types "incoming-request" (type $request))
  (alias export $types "response-outparam" (type $outparam))
  (core module $m {fields} (func (export "handle") (param i32 i32) {body}))
  (core instance $i (instantiate $m))
  (func $handle (param "request" (own $request)) (param "response-out" (own $outparam))
    (canon lift (core func $i "handle")))
  (instance $handler (export "handle" (func $handle)))
  (export "wasi:http/incoming-handler@0.2.12" (instance $handler)))"#
    );
    wat::parse_str(text).expect("a valid component")
}

/// The stream extension's URI (reference, "Stream extension").
pub const STREAM: &str = "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1";

/// The StreamResponse member an event carries: `task STATE`, `status
/// STATE`, `artifact ID` or `frame KIND`.
pub fn event_kind(event: &SseEvent) -> String {
    let result = &event.data["result"];
    if let Some(task) = result.get("task") {
        format!("task {}", task["status"]["state"].as_str().unwrap())
    } else if let Some(update) = result.get("statusUpdate") {
        format!("status {}", update["status"]["state"].as_str().unwrap())
    } else if let Some(update) = result.get("artifactUpdate") {
        format!(
            "artifact {}",
            update["artifact"]["artifactId"].as_str().unwrap()
        )
    } else if let Some(message) = result.get("message") {
        format!(
            "frame {}",
            message["metadata"][STREAM]["frame"].as_str().unwrap()
        )
    } else {
        panic!("not a StreamResponse: {}", event.data)
    }
}
