//! Issue 36: answers the door declares reusable (GetTask, ListTasks) are
//! sent again without an instance while what they read holds. Random
//! interleavings of writes, reads, swaps, rollbacks and token changes, with
//! several credentials, on two servers of one session: one keeping answers,
//! one answering every request on a fresh instance. Every answer of the
//! first must be byte for byte the second's, asked at the same moment by the
//! same caller; so no caller ever receives an answer computed for another.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http_body_util::BodyExt;
use murmur_door_host::bindings::task_store::TaskState;
use murmur_door_host::engine::{self, Door};
use murmur_door_host::internal::reuse::ReuseCounts;
use murmur_door_host::manifest::{Manifest, Scope};
use murmur_door_host::server::{HttpLimits, Server};
use murmur_door_host::session::Session;
use murmur_door_host::tasks::store::Sees;
use serde_json::{Value, json};

use crate::common::tempdir::TempDir;

const MANIFEST: &str = "name: reuse\nversion: 0.1.0\nlifecycle: {task_acceptance: single}\n\
network:\n  authentication:\n    scheme: bearer\n    credentials:\n      alice:\n        \
scopes: [SendMessage, GetTask, ListTasks, CancelTask]\n";

/// A small generator of its own: the same seed, the same run.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }
}

/// An answer as a client receives it: status, header lines, body.
type Answer = (u16, Vec<(String, String)>, Bytes);

async fn ask(server: &Server, token: &str, body: &Value) -> Answer {
    let request = hyper::Request::post("/")
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .header("authorization", format!("Bearer {token}"))
        .body(Bytes::from(body.to_string()))
        .unwrap();
    let response = server.respond(request).await;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body)
}

fn rpc(id: &Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

struct Run {
    session: Arc<Session>,
    keeping: Server,
    fresh: Server,
    door: Door,
    /// Callers' tokens: the operator, alice, and members minted as it runs.
    tokens: Vec<(String, String)>,
    tasks: Vec<String>,
    /// The last read asked, and with which token.
    asked: Option<(String, Value)>,
    random: Lcg,
}

impl Run {
    fn token(&mut self) -> String {
        self.tokens[self.random.below(self.tokens.len())].1.clone()
    }

    fn id(&mut self) -> Value {
        match self.random.below(3) {
            0 => json!(self.random.below(1000)),
            1 => json!(format!("r-{}", self.random.below(1000))),
            _ => json!(u64::MAX - self.random.below(9) as u64),
        }
    }

    /// A write, through the fresh server, settled before the next step.
    async fn write(&mut self) {
        let token = self.token();
        let id = self.id();
        let known = !self.tasks.is_empty();
        let body = match self.random.below(if known { 4 } else { 1 }) {
            0 => {
                let text = ["reply done", "ask Which one?", "fail broken"][self.random.below(3)];
                let message = json!({"messageId": format!("m{}", self.random.below(1 << 30)),
                                     "role": "ROLE_USER", "parts": [{"text": text}]});
                rpc(&id, "SendMessage", json!({"message": message}))
            }
            1 | 2 => {
                let task = self.tasks[self.random.below(self.tasks.len())].clone();
                let message = json!({"messageId": format!("m{}", self.random.below(1 << 30)),
                                     "role": "ROLE_USER", "taskId": task,
                                     "parts": [{"text": "reply answered"}]});
                rpc(&id, "SendMessage", json!({"message": message}))
            }
            _ => {
                let task = self.tasks[self.random.below(self.tasks.len())].clone();
                rpc(&id, "CancelTask", json!({"id": task}))
            }
        };
        let (_, _, answer) = ask(&self.fresh, &token, &body).await;
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        if let Some(task) = answer["result"]["task"]["id"].as_str() {
            if !self.tasks.iter().any(|t| t == task) {
                self.tasks.push(task.to_string());
            }
            self.settle(task).await;
        }
    }

    /// Waits until `task` no longer works: a held send answers first.
    async fn settle(&self, task: &str) {
        for _ in 0..500 {
            let state = self.session.tasks.store().get(task, &Sees::Every);
            let working = state.ok().flatten().is_some_and(|t| {
                matches!(t.status.state, TaskState::Submitted | TaskState::Working)
            });
            if !working {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// A read, asked of both servers: the keeping one must answer what a
    /// fresh instance answers.
    async fn read(&mut self) {
        // Half the reads ask again what an earlier one asked (with an id
        // of their own), whatever changed since: a token revoked, a swap.
        if let Some((token, mut body)) = self.asked.clone().filter(|_| self.random.below(2) == 0) {
            body["id"] = self.id();
            return self.compare(&token, &body).await;
        }
        let token = self.token();
        let id = self.id();
        let body = match self.random.below(3) {
            0 if !self.tasks.is_empty() => {
                let task = self.tasks[self.random.below(self.tasks.len())].clone();
                rpc(&id, "GetTask", json!({"id": task}))
            }
            0 => rpc(&id, "GetTask", json!({"id": "tsk_0"})),
            1 => rpc(
                &id,
                "ListTasks",
                json!({"pageSize": 1 + self.random.below(3)}),
            ),
            _ => rpc(&id, "ListTasks", json!({"status": "TASK_STATE_COMPLETED"})),
        };
        self.asked = Some((token.clone(), body.clone()));
        self.compare(&token, &body).await;
    }

    /// `body` asked of both servers, twice: the second may be a kept
    /// answer, and must be what a fresh instance answers.
    async fn compare(&self, token: &str, body: &Value) {
        for _ in 0..2 {
            let kept = ask(&self.keeping, token, body).await;
            let fresh = ask(&self.fresh, token, body).await;
            assert_eq!(kept, fresh, "{body}");
        }
    }

    /// A member's token minted again (the old one stops working), or a new
    /// member's minted.
    fn mint(&mut self) {
        let name = format!("m{}", self.random.below(3));
        let scopes = [Scope::SendMessage, Scope::GetTask, Scope::ListTasks];
        let token = self.session.tokens.mint_member(&name, &scopes).unwrap();
        // A token minted before for the same member stays in the mix: it
        // must now be refused.
        self.tokens.push((name, token));
    }
}

#[test]
fn a_reused_answer_is_what_a_fresh_door_answers() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = engine::engine().unwrap();
    let door = Door::load(&engine, engine::EMBEDDED_DOOR).unwrap();
    let manifest = Manifest::parse(MANIFEST).unwrap();
    let dir = TempDir::new("reuse");
    for seed in 1..=4u64 {
        let session = runtime.block_on(async {
            Arc::new(Session::launch(&manifest, "http://127.0.0.1:41873".into()).unwrap())
        });
        let file = dir.path().join(format!("tokens-{seed}.json"));
        session.tokens.write_file(&file).unwrap();
        let minted: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let tokens = ["operator", "alice"]
            .map(|name| (name.to_string(), minted[name].as_str().unwrap().to_string()));
        let fresh_limits = HttpLimits {
            idle_instances: 0,
            reuse_bytes: 0,
            ..HttpLimits::default()
        };
        let mut run = Run {
            keeping: Server::new(door.clone(), session.clone()),
            fresh: Server::new(door.clone(), session.clone()).with_http_limits(fresh_limits),
            session,
            door: door.clone(),
            tokens: tokens.to_vec(),
            tasks: Vec::new(),
            asked: None,
            random: Lcg(seed),
        };
        let counts = run.keeping.doors.reuse_counts.clone();
        let steps = async {
            for _ in 0..300 {
                match run.random.below(20) {
                    0..=5 => run.write().await,
                    6 => run.mint(),
                    7 => {
                        let name = format!("m{}", run.random.below(3));
                        run.session.tokens.revoke_member(&name);
                    }
                    8 => drop(run.keeping.doors.install(run.door.clone(), "swap".into())),
                    9 => drop(run.keeping.doors.rollback()),
                    _ => run.read().await,
                }
            }
        };
        run_steps(&runtime, seed, steps, &counts, (20, 5));
    }
}

/// Over the wire: a repeat of a kept GetTask is answered with its own id;
/// a caller whose token is refused is answered 401 at once, its body
/// unread, while answers are kept for others (reference, "What the door
/// answers", step 2: the token before the body).
#[test]
fn a_refused_token_is_answered_before_its_body_while_answers_are_kept() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    let door = crate::common::Door::start(MANIFEST);
    let operator = door.token("operator");
    let task = door.send_task(Some(&operator), "reply kept", json!({}));
    let get = |id: u64| {
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "GetTask", "params": {"id": task["id"]}});
        door.rpc_as(&operator, &body.to_string())
    };
    let (first, second) = (get(1), get(22));
    assert_eq!(second.json()["id"], 22);
    assert_eq!(second.json()["result"], first.json()["result"]);
    assert_eq!(
        second.header("content-length"),
        Some(second.body.len().to_string().as_str())
    );

    let mut stream = std::net::TcpStream::connect(&door.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\na2a-version: 1.0\r\n\
         authorization: Bearer {}\r\ncontent-length: 100\r\n\r\n{{",
        door.addr,
        "0".repeat(64)
    );
    let started = Instant::now();
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = [0u8; 12];
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 401");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// Runs a property test's `steps` for at most two minutes, then checks that
/// they found and dropped more answers than `least` (hits, drops): enough
/// for the property to have been tested.
pub fn run_steps(
    runtime: &tokio::runtime::Runtime,
    seed: u64,
    steps: impl std::future::Future<Output = ()>,
    counts: &ReuseCounts,
    least: (u64, u64),
) {
    let bound = std::time::Duration::from_secs(120);
    runtime
        .block_on(async { tokio::time::timeout(bound, steps).await })
        .unwrap_or_else(|_| panic!("seed {seed}: the steps took over {bound:?}"));
    let (hits, dropped) = (
        counts.hits.load(Ordering::Relaxed),
        counts.dropped.load(Ordering::Relaxed),
    );
    assert!(
        hits > least.0 && dropped > least.1,
        "seed {seed}: {hits} hits, {dropped} dropped"
    );
}
