//! Door instances kept between requests (`--idle-instances`).
//!
//! Instantiating a door and dropping its store is most of what a short
//! request costs in wasm. So an instance whose request ended cleanly is kept,
//! and the next request of the same caller to the same capsule's door runs
//! on it instead of on a fresh one.
//!
//! What one request leaves in the instance can be seen by no other caller
//! and no other capsule, whatever the door keeps (a door swapped in may keep
//! what it likes in a static):
//!
//! - an instance serves one [`KeptFor`] only: one credential (the exact
//!   `Authorization` value) from one client address (behind a trusted
//!   proxy, the client it names), and only on the capsule and session its
//!   store last served. Whatever its memory still holds came from that
//!   caller's own requests to that session. An instance that framed
//!   events ([`crate::sandbox::framing`]) frames only its session's events
//!   and never answers a request;
//! - the door keeps no state of its own between requests: `guest/` holds
//!   no `static`, `thread_local` or lazily set global (a test here reads
//!   its sources), so a request starts from what the host's imports answer,
//!   as on a fresh instance, and the store's own state (session, meters,
//!   limits' refusals, deadline) is set anew before each request;
//! - only a clean end is kept: a door that trapped (a loop stopped at
//!   `--max-cpu-ms`, a memory refused, a crash) or that left a host
//!   resource open is dropped with its store, as before;
//! - an instance is kept for at most [`MAX_USES`] requests and while its
//!   memory is at most [`MAX_KEPT_MEMORY`], so what a door leaks or
//!   fragments stays bounded.
//!
//! `--idle-instances 0` gives every request a fresh instance, for
//! comparison.
//!
//! What it costs: at most `--idle-instances` instances across the host
//! (every capsule of a host draws on one count), each holding its pool
//! slot, its fiber stack and at most [`MAX_KEPT_MEMORY`] of linear memory.
//! The engine's pool has room for them beside `--max-instances`, and their
//! memory is not counted in `--max-door-memory-mb` while they wait, so a
//! kept instance never takes a slot or memory a live door needs; it counts
//! again when taken back into use, and is dropped if the live doors have
//! no room for it. (An embedder's engine sized without room for them is
//! served all the same: a request that finds the pool full drops the kept
//! instances and instantiates again.)

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use hyper::header::HeaderValue;
use wasmtime::Store;

use crate::sandbox::engine::{Door, DoorInstance};
use crate::sandbox::request::{self, Limits, RequestState, Stores};
use crate::session::Session;

/// Requests one instance answers before it is dropped.
pub const MAX_USES: u32 = 1000;
/// An instance whose memory grew past this is not kept (a door answers a
/// short request in its first 1.1 MiB).
pub const MAX_KEPT_MEMORY: usize = 4 << 20;

/// Whom a kept instance may serve: the same caller, of a door compiled from
/// the same component, under the same limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptFor {
    /// The door's digest (one engine per host compiles a digest once).
    door: String,
    limits: Limits,
    authorization: Option<HeaderValue>,
    address: IpAddr,
    /// The plane its request was on: an instance that served a plane
    /// serves only that plane's requests, whose preopens its store is
    /// given anew each time, and never a JSON-RPC request.
    plane: Option<&'static str>,
    /// An instance that framed a session's events
    /// ([`crate::sandbox::framing`]) frames only that session's events,
    /// and never answers a request.
    framing: bool,
}

impl KeptFor {
    pub fn new(
        door: &Door,
        limits: Limits,
        authorization: Option<&HeaderValue>,
        address: IpAddr,
    ) -> KeptFor {
        KeptFor {
            door: door.digest.clone(),
            limits,
            authorization: authorization.cloned(),
            address,
            plane: None,
            framing: false,
        }
    }

    /// The framing of `door`'s events under `limits`, for no caller.
    pub fn framing(door: &Door, limits: Limits) -> KeptFor {
        KeptFor {
            door: door.digest.clone(),
            limits,
            authorization: None,
            address: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            plane: None,
            framing: true,
        }
    }

    /// The same caller, on `plane`.
    pub fn on_plane(mut self, plane: Option<&'static str>) -> KeptFor {
        self.plane = plane;
        self
    }
}

/// An instance and its store, between two requests.
pub struct Kept {
    pub store: Store<RequestState>,
    pub instance: DoorInstance,
    /// Requests it has answered.
    pub uses: u32,
}

/// The instances kept idle, oldest first.
pub struct Idle {
    max: usize,
    kept: Mutex<VecDeque<(KeptFor, Kept)>>,
}

impl Idle {
    /// At most `max` instances kept; 0 keeps none.
    pub fn new(max: u32) -> Arc<Idle> {
        Arc::new(Idle {
            max: max as usize,
            kept: Mutex::default(),
        })
    }

    /// The instance kept last for `owner` on `session`, if any, its memory
    /// counted among the live doors' again; None, and the instance dropped,
    /// when they have no room for it.
    pub fn take(&self, owner: &KeptFor, session: &Arc<Session>) -> Option<Kept> {
        if self.max == 0 {
            return None;
        }
        let mut instance = {
            let mut kept = self.lock();
            let at = kept.iter().rposition(|(o, k)| {
                o == owner && Arc::ptr_eq(&k.store.data().door.session, session)
            })?;
            kept.remove(at).map(|(_, k)| k)?
        };
        instance
            .store
            .data_mut()
            .memory
            .reclaim()
            .then_some(instance)
    }

    /// A store for `owner`'s next call on `door` as `version`, in
    /// `stores`' session: the one its last call left, with its instance and
    /// the uses it has had, or a fresh one (no instance yet).
    pub fn store_for(
        &self,
        owner: &KeptFor,
        stores: &Stores,
        door: &Door,
        version: u64,
    ) -> (Store<RequestState>, Option<DoorInstance>, u32) {
        match self.take(owner, &stores.session) {
            Some(Kept {
                mut store,
                instance,
                uses,
            }) => {
                request::start_over(&mut store, stores.session.clone(), version);
                (store, Some(instance), uses)
            }
            None => {
                let mut store = stores.store(&door.engine);
                store.data_mut().door.version = version;
                (store, None, 0)
            }
        }
    }

    /// Keeps `instance`, which has just answered a request of `owner`
    /// cleanly, if it may be kept (not for a session that is closing); the
    /// oldest kept instance makes room.
    pub fn keep(&self, owner: KeptFor, mut instance: Kept) {
        if self.max == 0
            || instance.uses >= MAX_USES
            || !instance.store.data().reusable(MAX_KEPT_MEMORY)
            || instance.store.data().door.session.tasks.closing()
        {
            return;
        }
        instance.store.data_mut().memory.set_aside();
        let oldest = {
            let mut kept = self.lock();
            let oldest = (kept.len() >= self.max).then(|| kept.pop_front()).flatten();
            kept.push_back((owner, instance));
            oldest
        };
        // A store is dropped (its memory reset) outside the lock.
        drop(oldest);
    }

    /// Drops every instance whose store holds `session` (its last request
    /// was to it): for a session that closes, so that nothing keeps it open.
    pub fn forget(&self, session: &Arc<Session>) {
        let dropped: Vec<_> = {
            let mut kept = self.lock();
            let (theirs, others): (Vec<_>, Vec<_>) = std::mem::take(&mut *kept)
                .into_iter()
                .partition(|(_, k)| Arc::ptr_eq(&k.store.data().door.session, session));
            *kept = others.into();
            theirs
        };
        drop(dropped);
    }

    /// A new instance of `door` in `store`. Instances kept idle give way to
    /// it when the pool has no slot left (a pool sized without room for
    /// them).
    pub async fn instantiate(
        &self,
        door: &Door,
        store: &mut Store<RequestState>,
    ) -> wasmtime::Result<DoorInstance> {
        match door.instantiate(store).await {
            Err(e)
                if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                    .is_some()
                    && self.clear() > 0 =>
            {
                door.instantiate(store).await
            }
            instantiated => instantiated,
        }
    }

    /// Drops every kept instance, and says how many there were: for a pool
    /// that has no slot left for a request.
    pub fn clear(&self) -> usize {
        let dropped = std::mem::take(&mut *self.lock());
        dropped.len()
    }

    /// Instances kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(KeptFor, Kept)>> {
        // A panic while holding the lock leaves the list whole.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use bytes::Bytes;
    use http_body_util::BodyExt;

    use crate::listener::server::{HttpLimits, Server, Shared};
    use crate::manifest::Manifest;
    use crate::sandbox::engine::{self, Door};
    use crate::sandbox::request::Limits;

    fn session() -> Arc<Session> {
        named("m")
    }

    fn named(name: &str) -> Arc<Session> {
        let manifest = Manifest::parse(&format!(
            "name: {name}\nversion: 0.1.0\nlifecycle: {{task_acceptance: queue}}\n"
        ))
        .unwrap();
        Arc::new(Session::launch(&manifest, "http://127.0.0.1:1".into()).unwrap())
    }

    fn door() -> Door {
        Door::load(&engine::engine().unwrap(), engine::EMBEDDED_DOOR).unwrap()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A JSON-RPC request from the caller holding `token`.
    fn rpc(token: &str, body: &str) -> hyper::Request<Bytes> {
        hyper::Request::post("/")
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .header("authorization", format!("Bearer {token}"))
            .body(Bytes::from(body.to_string()))
            .unwrap()
    }

    /// Status, headers and body of `server`'s answer to `request`.
    async fn respond_to(server: &Server, request: hyper::Request<Bytes>) -> (u16, String, Bytes) {
        let response = server.respond(request).await;
        let status = response.status().as_u16();
        let headers = format!("{:?}", response.headers());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, headers, body)
    }

    /// (Authorization, door version last served, uses) of each kept
    /// instance, oldest first.
    fn kept(idle: &Idle) -> Vec<(Option<HeaderValue>, u64, u32)> {
        idle.lock()
            .iter()
            .map(|(o, k)| (o.authorization.clone(), k.store.data().door.version, k.uses))
            .collect()
    }

    fn bearer(token: &str) -> Option<HeaderValue> {
        Some(HeaderValue::from_str(&format!("Bearer {token}")).unwrap())
    }

    const REFUSED: &str = r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#;

    /// The door's sources declare no global a request could leave state in:
    /// no `static` item (a `&'static` lifetime is no global), no
    /// `thread_local!`, no lazily set cell.
    #[test]
    fn the_door_declares_no_global_state() {
        let mut files = Vec::new();
        crate::layers::sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest/src"),
            &mut files,
        );
        assert!(files.len() > 10, "{files:?}");
        let global = |line: &str| {
            let code = line.split("//").next().unwrap_or("").replace("'static", "");
            let words: Vec<&str> = code
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .collect();
            [
                "static",
                "thread_local",
                "OnceLock",
                "OnceCell",
                "LazyLock",
                "lazy_static",
            ]
            .iter()
            .any(|name| words.contains(name))
        };
        let mut found = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                if global(line) {
                    found.push(format!("{}:{}: {line}", file.display(), n + 1));
                }
            }
        }
        assert!(found.is_empty(), "{found:#?}");
        assert!(global("static CACHE: Mutex<u8> = Mutex::new(0);"));
        assert!(global("    thread_local! {"));
        assert!(!global("pub reason: &'static str,"));
        assert!(global("static NAME: &'static str = \"door\";"));
    }

    /// An instance answers its own caller's next requests, and no one
    /// else's: another credential gets an instance of its own.
    #[test]
    fn a_kept_instance_serves_only_its_own_caller() {
        let runtime = runtime();
        let server = Server::new(door(), session());
        runtime.block_on(async {
            respond_to(&server, rpc("a", REFUSED)).await;
            respond_to(&server, rpc("a", REFUSED)).await;
            assert_eq!(kept(server.idle()), [(bearer("a"), 1, 2)]);
            respond_to(&server, rpc("b", REFUSED)).await;
            assert_eq!(
                kept(server.idle()),
                [(bearer("a"), 1, 2), (bearer("b"), 1, 1)]
            );
            respond_to(&server, rpc("a", REFUSED)).await;
            assert_eq!(
                kept(server.idle()),
                [(bearer("b"), 1, 1), (bearer("a"), 1, 3)]
            );
        });
    }

    /// A request answered on a kept instance is answered byte for byte as
    /// on a fresh one (`--idle-instances 0`), whatever came before it.
    #[test]
    fn a_kept_instance_answers_as_a_fresh_one() {
        let runtime = runtime();
        let session = session();
        let door = door();
        // Every request on an instance: no answer kept (`--reuse-bytes 0`).
        let no_reuse = HttpLimits {
            reuse_bytes: 0,
            ..HttpLimits::default()
        };
        let kept_server = Server::new(door.clone(), session.clone()).with_http_limits(no_reuse);
        let fresh = Server::new(door, session).with_http_limits(HttpLimits {
            idle_instances: 0,
            ..no_reuse
        });
        let requests = || {
            let card = hyper::Request::get("/.well-known/agent-card.json")
                .header("if-none-match", "\"never\"")
                .body(Bytes::new())
                .unwrap();
            let mut unversioned = rpc(
                "a",
                r#"{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"tsk_1"}}"#,
            );
            unversioned.headers_mut().remove("a2a-version");
            vec![
                rpc("a", REFUSED),
                rpc("a", "{not json"),
                card,
                rpc(
                    "a",
                    r#"{"jsonrpc":"2.0","id":"x","method":"GetTask","params":{"id":"tsk_0"}}"#,
                ),
                unversioned,
                rpc(
                    "a",
                    r#"{"jsonrpc":"2.0","id":3,"method":"ListTasks","params":{"pageSize":5}}"#,
                ),
                rpc(
                    "a",
                    r#"{"jsonrpc":"2.0","id":4,"method":"SendMessage","params":{}}"#,
                ),
            ]
        };
        runtime.block_on(async {
            for _ in 0..3 {
                for (k, f) in requests().into_iter().zip(requests()) {
                    let (kept_answer, fresh_answer) = (
                        respond_to(&kept_server, k).await,
                        respond_to(&fresh, f).await,
                    );
                    assert_eq!(kept_answer, fresh_answer);
                }
            }
        });
        assert!(fresh.idle().is_empty());
        // The card (no credential) and the rest (token a) each ran on one
        // instance throughout.
        let uses: Vec<u32> = kept(kept_server.idle()).iter().map(|k| k.2).collect();
        assert_eq!(uses, [3, 18]);
    }

    /// A door that failed (here refused memory past `--max-memory-mb`) is
    /// not kept, nor is one whose memory grew past MAX_KEPT_MEMORY; the
    /// caller's next request runs on a fresh instance, answered as usual.
    #[test]
    fn a_door_that_failed_or_grew_is_not_kept() {
        let runtime = runtime();
        let server = Server::new(door(), session()).with_limits(Limits {
            max_memory_bytes: 3 << 20,
            ..Limits::default()
        });
        runtime.block_on(async {
            let huge = "x".repeat(4 << 20);
            let (status, _, _) = respond_to(&server, rpc("a", &huge)).await;
            assert_eq!(status, 413);
            assert!(server.idle().is_empty());
            let (status, _, _) = respond_to(&server, rpc("a", REFUSED)).await;
            assert_eq!(status, 200);
            assert_eq!(kept(server.idle()), [(bearer("a"), 1, 1)]);
        });
        let server = Server::new(door(), session());
        runtime.block_on(async {
            let big = "x".repeat(MAX_KEPT_MEMORY);
            let (status, _, _) = respond_to(&server, rpc("a", &big)).await;
            assert_eq!(status, 200, "a parse error");
            assert!(server.idle().is_empty());
        });
    }

    /// The host keeps at most `--idle-instances`, dropping the oldest; a
    /// kept instance counts nothing against `--max-door-memory-mb`.
    #[test]
    fn at_most_idle_instances_are_kept_and_their_memory_is_set_aside() {
        let runtime = runtime();
        let server = Server::new(door(), session()).with_http_limits(HttpLimits {
            idle_instances: 2,
            ..HttpLimits::default()
        });
        let total = server.stores.memory.free();
        runtime.block_on(async {
            for token in ["a", "b", "c"] {
                respond_to(&server, rpc(token, REFUSED)).await;
            }
        });
        assert_eq!(
            kept(server.idle()),
            [(bearer("b"), 1, 1), (bearer("c"), 1, 1)]
        );
        assert_eq!(server.stores.memory.free(), total);
    }

    /// An instance serves the door version live now: one of the same
    /// component is taken by it, one of another component is not (and is
    /// dropped in its turn). A session that closes keeps none.
    #[test]
    fn a_swap_or_a_close_is_followed() {
        let runtime = runtime();
        let door = door();
        let server = Server::new(door.clone(), session());
        runtime.block_on(async {
            respond_to(&server, rpc("a", REFUSED)).await;
            respond_to(&server, rpc("b", REFUSED)).await;
            server
                .doors
                .install(door.clone(), "the same door again".into());
            respond_to(&server, rpc("a", REFUSED)).await;
            assert_eq!(
                kept(server.idle()),
                [(bearer("b"), 1, 1), (bearer("a"), 2, 2)]
            );
            let mut other = door.clone();
            other.digest = "sha256:another".into();
            server.doors.install(other, "another door".into());
            respond_to(&server, rpc("a", REFUSED)).await;
            assert_eq!(
                kept(server.idle()),
                [
                    (bearer("b"), 1, 1),
                    (bearer("a"), 2, 2),
                    (bearer("a"), 3, 1)
                ]
            );
            server.shut();
            assert!(server.idle().is_empty());
            server.stores.session.close();
            respond_to(&server, rpc("a", REFUSED)).await;
            assert!(server.idle().is_empty());
        });
    }

    /// A pool sized without room for kept instances (an embedder's engine)
    /// still serves every request: when it is full, the kept instances are
    /// dropped to make room.
    #[test]
    fn kept_instances_give_way_to_a_request() {
        let runtime = runtime();
        // Four slots: one request's, one for a swap's trial instance and
        // two for framing events, which kept instances fill first.
        let engine = engine::engine_for(1, 16 << 20).unwrap();
        let door = Door::load(&engine, engine::EMBEDDED_DOOR).unwrap();
        let server = Server::new(door, session()).with_limits(Limits {
            max_memory_bytes: 16 << 20,
            ..Limits::default()
        });
        runtime.block_on(async {
            let first = respond_to(&server, rpc("a", REFUSED)).await;
            assert!(!String::from_utf8_lossy(&first.2).contains("-32603"));
            for token in ["b", "c", "d", "e"] {
                assert_eq!(respond_to(&server, rpc(token, REFUSED)).await, first);
            }
        });
        assert_eq!(kept(server.idle()), [(bearer("e"), 1, 1)]);
    }

    /// In a host, a caller's instance serves its next request to the same
    /// capsule only: another capsule of the same door gets a fresh one.
    #[test]
    fn a_kept_instance_stays_with_its_capsule() {
        let runtime = runtime();
        let door = door();
        let shared = Shared::new(&HttpLimits::default());
        let alpha = Server::new(door.clone(), named("alpha")).in_host(shared.clone(), 8);
        let beta = Server::new(door.clone(), named("beta")).in_host(shared.clone(), 8);
        let fresh = Server::new(door, beta.stores.session.clone()).with_http_limits(HttpLimits {
            idle_instances: 0,
            ..HttpLimits::default()
        });
        let card = || {
            let mut request = rpc("a", "");
            *request.method_mut() = hyper::Method::GET;
            *request.uri_mut() = "/.well-known/agent-card.json".parse().unwrap();
            request
                .headers_mut()
                .insert("if-none-match", HeaderValue::from_static("\"never\""));
            request
        };
        runtime.block_on(async {
            respond_to(&alpha, card()).await;
            let (status, headers, body) = respond_to(&beta, card()).await;
            assert_eq!(
                kept(beta.idle()),
                [(bearer("a"), 1, 1), (bearer("a"), 1, 1)]
            );
            assert_eq!(
                (status, headers, body.clone()),
                respond_to(&fresh, card()).await
            );
            assert!(String::from_utf8_lossy(&body).contains(r#""name":"beta""#));
        });
        // Closing alpha drops its instance alone.
        alpha.shut();
        assert_eq!(beta.idle().len(), 1);
        beta.shut();
        assert!(beta.idle().is_empty());
    }
}
