//! A host of capsules: one wasmtime engine (one pooling allocator, one
//! epoch ticker), and for each door version one compiled component and
//! pre-instantiation, shared by every capsule; capsules added and removed
//! while it runs. Each capsule keeps its own manifest, listener, state
//! directory (lock, `session.db`, tokens, control token), task hub and event
//! log; its requests run in stores of their own, drawing on the host's pool
//! of instances up to the capsule's share. A capsule listens on a port of
//! its own, or is one of many on the host's shared listener, reached by the
//! host names its entry claims ([`crate::listener::hostnames`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::hosting::capsule::{Capsule, CapsuleConfig, listener_url};
use crate::hosting::roster::{self, Entry, Listen, RosterError};
use crate::listener::accept::{self, Route};
use crate::listener::hostnames::Hostnames;
use crate::listener::metrics::{CapsuleLabel, Metrics};
use crate::listener::proxies::TrustedProxies;
use crate::listener::server::{HttpLimits, Shared};
use crate::sandbox::engine::{Door, DoorEngine};
use crate::sandbox::request::Limits;
use crate::session::agents::Agents;
use crate::session::tasks::events::Replay;
use crate::telemetry;
use crate::versions::swap::{self, Source};

/// What every capsule of a host runs under.
#[derive(Clone, Copy, Debug)]
pub struct HostLimits {
    /// What each request's store may use, in every capsule.
    pub limits: Limits,
    /// The pool (`max_instances`), connections, body bytes and door memory
    /// are the host's, shared by every capsule.
    pub http: HttpLimits,
    /// Instances of the pool one capsule may hold at once.
    pub capsule_instances: u32,
    /// Bytes a door component to swap in may have (`--max-component-bytes`).
    pub max_component_bytes: usize,
}

/// The capsules a host runs, on its one engine and pool, and the door each
/// capsule added starts on.
pub struct Host {
    engine: DoorEngine,
    limits: HostLimits,
    shared: Shared,
    agent: Agents,
    /// The flag that chose the host's agent, when one did: an entry may then
    /// not choose its own.
    agent_flag: Option<&'static str>,
    replay: Replay,
    /// The door a capsule added now starts on: the last version swapped
    /// into every capsule.
    door: Mutex<(Door, Source)>,
    capsules: Mutex<BTreeMap<String, Hosted>>,
    /// What every capsule's requests add to.
    metrics: Arc<Metrics>,
    /// The listener capsules are reached on by host name, once there is one.
    shared_listener: Mutex<Option<SharedListener>>,
    /// Capsules without authentication may listen past loopback (`--public`).
    public: bool,
}

/// A host's listener for the capsules reached by host name.
struct SharedListener {
    address: SocketAddr,
    names: Arc<Hostnames>,
    accepting: tokio::task::JoinHandle<()>,
    /// Closes its connections, once every capsule has closed.
    shut: tokio::sync::watch::Sender<bool>,
}

struct Hosted {
    entry: Entry,
    /// None while the capsule opens, and once it has exited.
    capsule: Option<Arc<Capsule>>,
    /// Its session, once it exited (`lifecycle.after_task: exit`): listed
    /// until it is removed.
    exited: Option<String>,
}

/// A name that is no capsule of the host's (a swap's or rollback's
/// `capsules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCapsule(pub String);

impl std::fmt::Display for UnknownCapsule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "there is no capsule named {}", self.0)
    }
}

impl std::error::Error for UnknownCapsule {}

/// What a host-wide or partial swap did.
pub struct HostSwap {
    /// `sha256:<hex>` of the new version's bytes.
    pub digest: String,
    /// Capsules now live on the new version.
    pub swapped: Vec<String>,
    /// Capsules that kept their door, and why.
    pub refused: Vec<(String, String)>,
    /// Compiling (or loading from the cache) the new version once.
    pub compile: Duration,
    /// The whole swap, compiling included.
    pub took: Duration,
}

impl Host {
    /// A host whose capsules start on `door`, on the engine it was
    /// compiled for.
    pub fn new(
        door: Door,
        source: Source,
        limits: HostLimits,
        agent: impl Into<Agents>,
        replay: Replay,
    ) -> Host {
        Host {
            engine: door.engine.clone(),
            shared: Shared::new(&limits.http),
            limits,
            agent: agent.into(),
            agent_flag: None,
            replay,
            door: Mutex::new((door, source)),
            capsules: Mutex::new(BTreeMap::new()),
            metrics: Arc::default(),
            shared_listener: Mutex::new(None),
            public: false,
        }
    }

    /// Serves the capsules whose entries name `hostnames` on `listener`, by
    /// each request's host name; its url. One per host: a second replaces
    /// nothing and is refused.
    pub fn listen_by_hostname(&self, listener: TcpListener) -> anyhow::Result<String> {
        let mut shared_listener = self
            .shared_listener
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        anyhow::ensure!(
            shared_listener.is_none(),
            "the host already has a shared listener"
        );
        let address = listener.local_addr()?;
        let names = Arc::new(Hostnames::default());
        let shut = tokio::sync::watch::Sender::new(false);
        let accepting = tokio::spawn(accept::accept(
            listener,
            Route::Hostnames(names.clone()),
            self.shared.clone(),
            self.limits.http,
            shut.subscribe(),
        ));
        *shared_listener = Some(SharedListener {
            address,
            names,
            accepting,
            shut,
        });
        Ok(listener_url(address))
    }

    /// The shared listener's address and routes, if the host has one.
    fn shared(&self) -> Option<(SocketAddr, Arc<Hostnames>)> {
        let shared_listener = self
            .shared_listener
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let shared = shared_listener.as_ref()?;
        Some((shared.address, shared.names.clone()))
    }

    /// A request from one of `proxies`, to any capsule, is its client's,
    /// as the proxies' forwarding headers name it.
    pub fn with_trusted_proxies(mut self, proxies: TrustedProxies) -> Host {
        self.shared.trust_proxies(proxies);
        self
    }

    /// Whether a capsule that declares no `network.authentication` may be
    /// reached past loopback (`--public`); otherwise it is refused.
    pub fn with_public(mut self, public: bool) -> Host {
        self.public = public;
        self
    }

    /// The flag that chose the host's agent (`--agent-cmd`,
    /// `--agent-stdio`): an entry's `agent_stdio` then conflicts with it.
    pub fn with_agent_flag(mut self, flag: Option<&'static str>) -> Host {
        self.agent_flag = flag;
        self
    }

    /// Opens the capsule `entry` describes and serves it; its url. Refused
    /// when another capsule has its name, state directory, address or a
    /// host name of it, when it names host names and the host has no shared
    /// listener, or when it cannot open (its state locked, its address
    /// taken): the other capsules are untouched.
    pub async fn add(self: &Arc<Self>, entry: Entry) -> Result<String, RosterError> {
        if let (Some(flag), Some(_)) = (self.agent_flag, &entry.agent_stdio) {
            return Err(RosterError {
                at: format!("capsule {}", entry.name),
                key: "agent_stdio".into(),
                message: format!("conflicts with the host's {flag}"),
            });
        }
        let by_name = self.shared();
        if let (Listen::Hostnames(_), None) = (&entry.listen, &by_name) {
            return Err(RosterError {
                at: format!("capsule {}", entry.name),
                key: "hostnames".into(),
                message: "the host has no shared listener (the capsules file's top-level listen)"
                    .into(),
            });
        }
        {
            let mut capsules = self.capsules.lock().unwrap_or_else(|e| e.into_inner());
            roster::check_unique(capsules.values().map(|h| &h.entry), &entry)?;
            capsules.insert(
                entry.name.clone(),
                Hosted {
                    entry: entry.clone(),
                    capsule: None,
                    exited: None,
                },
            );
        }
        let name = entry.name.clone();
        let share = entry
            .instances
            .unwrap_or(self.limits.capsule_instances)
            .min(self.limits.http.max_instances);
        let (door, source) = self.door.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let limits = self.limits;
        let shared = self.shared.clone();
        let metrics = self.metrics.clone();
        let exits_after_task = entry.manifest.exit_after_task;
        let config = CapsuleConfig {
            entry,
            agent: self.agent.clone(),
            replay: self.replay,
            shared: by_name.as_ref().map(|(address, _)| *address),
            public: self.public,
        };
        let opened = Capsule::open(config, door, |server| {
            server
                .with_limits(limits.limits)
                .with_http_limits(limits.http)
                .with_max_component_bytes(limits.max_component_bytes)
                .with_source(source)
                .in_host(shared, share)
                .with_metrics(metrics)
        })
        .await;
        let mut capsules = self.capsules.lock().unwrap_or_else(|e| e.into_inner());
        match opened {
            Ok(capsule) => {
                let url = capsule.url.clone();
                if let Some((_, names)) = &by_name {
                    names.insert(&capsule.hostnames, &capsule.server);
                }
                if exits_after_task {
                    let ended = capsule.launch_task_ended();
                    let (host, session) = (Arc::downgrade(self), capsule.session.id().to_string());
                    let name = name.clone();
                    tokio::spawn(async move {
                        ended.await;
                        if let Some(host) = host.upgrade() {
                            host.exit(&name, &session).await;
                        }
                    });
                }
                if let Some(hosted) = capsules.get_mut(&name) {
                    hosted.capsule = Some(Arc::new(capsule));
                }
                Ok(url)
            }
            Err(e) => {
                capsules.remove(&name);
                Err(RosterError {
                    at: format!("capsule {name}"),
                    key: String::new(),
                    message: format!("{e:#}"),
                })
            }
        }
    }

    /// `lifecycle.after_task: exit`: the launch task of capsule `name`'s
    /// session `session` has ended, so the capsule closes as SIGTERM closes
    /// a door, and is listed as exited until it is removed. Nothing when
    /// that session is no longer the capsule's (it was removed, the host
    /// closes).
    async fn exit(&self, name: &str, session: &str) {
        let capsule = {
            let mut capsules = self.capsules.lock().unwrap_or_else(|e| e.into_inner());
            let Some(hosted) = capsules.get_mut(name).filter(|h| {
                h.capsule
                    .as_ref()
                    .is_some_and(|c| c.session.id() == session)
            }) else {
                return;
            };
            hosted.exited = Some(session.to_string());
            hosted.capsule.take()
        };
        let Some(capsule) = capsule else {
            return;
        };
        self.forget_hostnames(&capsule);
        close(capsule).await;
        tracing::info!(
            capsule = name,
            session,
            "capsule exited: its launch task ended (lifecycle.after_task: exit)"
        );
    }

    /// Closes the capsule `name` as SIGTERM closes a door, and forgets it
    /// (one that exited is only forgotten); false when there is none (or
    /// it is still opening).
    pub async fn remove(&self, name: &str) -> bool {
        let capsule = {
            let mut capsules = self.capsules.lock().unwrap_or_else(|e| e.into_inner());
            match capsules.get(name) {
                Some(Hosted {
                    capsule: Some(_), ..
                }) => capsules.remove(name).and_then(|h| h.capsule),
                Some(Hosted {
                    exited: Some(_), ..
                }) => {
                    capsules.remove(name);
                    tracing::info!(capsule = name, "exited capsule removed");
                    return true;
                }
                _ => None,
            }
        };
        let Some(capsule) = capsule else {
            return false;
        };
        // Its host names reach no capsule from now on; what it answers
        // already finishes.
        self.forget_hostnames(&capsule);
        close(capsule).await;
        tracing::info!(capsule = name, "capsule removed");
        true
    }

    /// The session of the capsule `name`, for the runtime's own calls on
    /// it (member tokens, its own tasks, peer handles); None when there is
    /// none (or it is still opening).
    pub fn session(&self, name: &str) -> Option<Arc<crate::session::Session>> {
        let capsules = self.capsules.lock().unwrap_or_else(|e| e.into_inner());
        let hosted = capsules.get(name)?;
        hosted.capsule.as_ref().map(|c| c.session.clone())
    }

    /// Every capsule's name, url, session and live door.
    pub fn list(&self) -> Value {
        let capsules = self.capsules.lock().unwrap_or_else(|e| e.into_inner());
        let listed: Vec<Value> = capsules
            .iter()
            .filter_map(|(name, hosted)| {
                if let Some(session) = &hosted.exited {
                    return Some(json!({
                        "name": name,
                        "state": hosted.entry.state,
                        "session": session,
                        "exited": "the launch task ended (lifecycle.after_task: exit)",
                    }));
                }
                let capsule = hosted.capsule.as_ref()?;
                let live = capsule.server.doors.live();
                Some(json!({
                    "name": name,
                    "url": capsule.url,
                    "hostnames": capsule.hostnames,
                    "session": capsule.session.id(),
                    "state": hosted.entry.state,
                    "door": {"version": live.version, "digest": live.door.digest},
                    "inFlight": capsule.server.doors.in_flight(),
                }))
            })
            .collect();
        let listen = self.shared().map(|(address, _)| listener_url(address));
        json!({"capsules": listed, "listen": listen, "freeInstances": self.shared.free_instances()})
    }

    /// The capsules `names` names (every capsule when None); an unknown
    /// name is refused.
    fn chosen(
        &self,
        names: Option<&[String]>,
    ) -> Result<Vec<(String, Arc<Capsule>)>, UnknownCapsule> {
        let capsules = self.capsules.lock().unwrap_or_else(|e| e.into_inner());
        let live =
            |(name, hosted): (&String, &Hosted)| Some((name.clone(), hosted.capsule.clone()?));
        match names {
            None => Ok(capsules.iter().filter_map(live).collect()),
            Some(names) => names
                .iter()
                .map(|name| {
                    capsules
                        .get_key_value(name)
                        .and_then(live)
                        .ok_or_else(|| UnknownCapsule(name.clone()))
                })
                .collect(),
        }
    }

    /// Compiles `bytes` once and makes it the live door of the capsules
    /// `names` names, or of every capsule (and of those added later) when
    /// None. Requests in flight finish on the version they started on. A
    /// capsule whose trial instance fails keeps its door.
    pub async fn swap(
        &self,
        bytes: Vec<u8>,
        source: Source,
        names: Option<&[String]>,
    ) -> anyhow::Result<HostSwap> {
        let started = Instant::now();
        let chosen = self.chosen(names)?;
        let door = swap::compile(&self.engine, bytes, &source).await?;
        let compile = started.elapsed();
        let mut swapped = Vec::new();
        let mut refused = Vec::new();
        for (name, capsule) in chosen {
            let server = &capsule.server;
            match server
                .doors
                .adopt(door.clone(), source.clone(), &server.stores)
                .await
            {
                Ok(_) => swapped.push(name),
                Err(e) => refused.push((name, format!("{e:#}"))),
            }
        }
        if names.is_none() && refused.is_empty() {
            *self.door.lock().unwrap_or_else(|e| e.into_inner()) = (door.clone(), source);
        }
        let took = started.elapsed();
        tracing::info!(
            digest = %door.digest,
            capsules = swapped.len(),
            refused = refused.len(),
            compile_ms = compile.as_millis() as u64,
            millis = took.as_millis() as u64,
            "host swap"
        );
        Ok(HostSwap {
            digest: door.digest,
            swapped,
            refused,
            compile,
            took,
        })
    }

    /// Makes each chosen capsule's previous door live again; the capsules
    /// rolled back (those with no previous door are not).
    pub fn rollback(&self, names: Option<&[String]>) -> Result<Vec<String>, UnknownCapsule> {
        Ok(self
            .chosen(names)?
            .into_iter()
            .filter(|(_, capsule)| capsule.server.doors.rollback().is_some())
            .map(|(name, _)| name)
            .collect())
    }

    /// Stops routing the host names `capsule` was reached by.
    fn forget_hostnames(&self, capsule: &Capsule) {
        if let Some((_, names)) = self.shared() {
            names.remove(&capsule.hostnames);
        }
    }

    /// Closes every capsule, together, as SIGTERM closes a door: first
    /// every listener stops accepting (the shared one here, each capsule's
    /// own as it closes), then each capsule's session closes and its
    /// requests in flight are answered, and last the shared listener's
    /// connections close.
    pub async fn close(&self) {
        let mut shared_listener = self
            .shared_listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(shared) = &mut shared_listener {
            shared.accepting.abort();
            // Dropped, with its listener, once the abort has taken.
            let _ = (&mut shared.accepting).await;
        }
        let capsules: Vec<Arc<Capsule>> = {
            let mut capsules = self.capsules.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *capsules)
                .into_values()
                .filter_map(|h| h.capsule)
                .collect()
        };
        let closing: Vec<_> = capsules
            .into_iter()
            .map(|c| tokio::spawn(close(c)))
            .collect();
        for closed in closing {
            let _ = closed.await;
        }
        if let Some(shared) = shared_listener {
            shared.shut.send_replace(true);
        }
    }

    /// Registers what is read of each capsule when scraped: instances in
    /// use, open streams, tasks by state, swaps and reused answers by
    /// outcome. Answers how many capsules there are.
    fn capsule_metrics(&self, registry: &mut Registry) -> usize {
        let instances = Family::<CapsuleLabel, Gauge>::default();
        let streams = Family::<CapsuleLabel, Gauge>::default();
        let tasks = Family::<TaskLabels, Gauge>::default();
        let swaps = Family::<OutcomeLabels, Counter>::default();
        let reuses = Family::<OutcomeLabels, Counter>::default();
        let reused_bytes = Family::<CapsuleLabel, Gauge>::default();
        let agent_lines = Family::<OutcomeLabels, Counter>::default();
        let agent_restarts = Family::<CapsuleLabel, Counter>::default();
        let capsules: Vec<(String, Arc<Capsule>)> = self.chosen(None).unwrap_or_default();
        for (name, capsule) in &capsules {
            let label = CapsuleLabel {
                capsule: name.clone(),
            };
            let server = &capsule.server;
            instances
                .get_or_create(&label)
                .set(server.instances_in_use() as i64);
            streams
                .get_or_create(&label)
                .set(server.open_streams() as i64);
            reused_bytes
                .get_or_create(&label)
                .set(server.doors.reused_bytes() as i64);
            for (state, count) in capsule.session.tasks.count_by_state().unwrap_or_default() {
                let labels = TaskLabels {
                    capsule: name.clone(),
                    state,
                };
                tasks.get_or_create(&labels).set(count as i64);
            }
            let faults = capsule.session.tasks.agent().faults();
            agent_restarts.get_or_create(&label).inc_by(faults.restarts);
            for (outcome, count) in [
                ("ignored", faults.ignored_lines),
                ("dropped", faults.dropped_lines),
            ] {
                let labels = OutcomeLabels {
                    capsule: name.clone(),
                    outcome,
                };
                agent_lines.get_or_create(&labels).inc_by(count);
            }
            let counts = &server.doors.counts;
            let reused = &server.doors.reuse_counts;
            for (family, outcome, count) in [
                (&swaps, "swapped", &counts.swapped),
                (&swaps, "refused", &counts.refused),
                (&swaps, "rolled_back", &counts.rolled_back),
                (&reuses, "hit", &reused.hits),
                (&reuses, "miss", &reused.misses),
                (&reuses, "kept", &reused.kept),
                (&reuses, "dropped", &reused.dropped),
            ] {
                let labels = OutcomeLabels {
                    capsule: name.clone(),
                    outcome,
                };
                family
                    .get_or_create(&labels)
                    .inc_by(count.load(Ordering::Relaxed));
            }
        }
        registry.register(
            "murmur_door_capsule_instances",
            "Door instances a capsule's requests hold",
            instances,
        );
        registry.register(
            "murmur_door_capsule_streams",
            "Event streams open on a capsule",
            streams,
        );
        registry.register(
            "murmur_door_capsule_tasks",
            "A capsule's tasks by state",
            tasks,
        );
        registry.register(
            "murmur_door_capsule_swaps",
            "Door swaps of a capsule, by outcome",
            swaps,
        );
        registry.register(
            "murmur_door_capsule_reused_answers",
            "Answers a capsule's door declared reusable: looked up and sent again (hit), looked up and not found (miss), kept, dropped",
            reuses,
        );
        registry.register(
            "murmur_door_capsule_reused_bytes",
            "Bytes of answers a capsule's door keeps to send again (at most --reuse-bytes)",
            reused_bytes,
        );
        registry.register(
            "murmur_door_capsule_agent_lines",
            "Lines a capsule's agent process wrote that were ignored (no line of the protocol, or naming no task it holds) or dropped (over 1 MiB)",
            agent_lines,
        );
        registry.register(
            "murmur_door_capsule_agent_restarts",
            "Agent processes a capsule started after the one before it ended",
            agent_restarts,
        );

        capsules.len()
    }

    /// Prometheus text (OpenMetrics): each capsule's requests by method,
    /// status and JSON-RPC code, their latency, instances in use, open
    /// streams, tasks by state, swaps and reused answers by outcome; the
    /// host's pool, compiles and resident memory; the spans traces lost.
    pub fn metrics(&self) -> String {
        let mut registry = Registry::default();
        self.metrics.register(&mut registry);
        let capsules = self.capsule_metrics(&mut registry);
        let gauge = |value: i64| {
            let gauge = Gauge::<i64>::default();
            gauge.set(value);
            gauge
        };
        let pool = self.limits.http.max_instances as i64;
        registry.register(
            "murmur_door_capsules",
            "Capsules the host serves",
            gauge(capsules as i64),
        );
        registry.register(
            "murmur_door_pool_instances",
            "Door instances the host's pool holds",
            gauge(pool),
        );
        registry.register(
            "murmur_door_pool_instances_in_use",
            "Door instances in use across every capsule",
            gauge(pool - self.shared.free_instances() as i64),
        );
        registry.register(
            "murmur_door_pool_instances_idle",
            "Door instances kept between requests, in slots beside the pool's",
            gauge(self.shared.idle_instances() as i64),
        );
        let write_timeouts = Counter::<u64>::default();
        write_timeouts.inc_by(self.shared.write_timeouts());
        registry.register(
            "murmur_door_write_timeouts",
            "Connections dropped because their client took no byte of an answer for --write-timeout-ms",
            write_timeouts,
        );
        let spans_dropped = Counter::<u64>::default();
        spans_dropped.inc_by(telemetry::dropped());
        registry.register(
            "murmur_door_trace_spans_dropped",
            "Spans dropped because the queue to the OTLP collector was full (OTEL_BSP_MAX_QUEUE_SIZE)",
            spans_dropped,
        );
        let spans_failed = Counter::<u64>::default();
        spans_failed.inc_by(telemetry::export_failures());
        registry.register(
            "murmur_door_trace_spans_export_failed",
            "Spans the OTLP collector refused, or did not take within the export timeout",
            spans_failed,
        );
        let compiles = Family::<CompileLabels, Counter>::default();
        for (how, count) in [
            ("compiled", &self.engine.compiles.compiled),
            ("cached", &self.engine.compiles.cached),
        ] {
            compiles
                .get_or_create(&CompileLabels { how })
                .inc_by(count.load(Ordering::Relaxed));
        }
        registry.register(
            "murmur_door_compiles",
            "Door components compiled, or loaded from the compile cache",
            compiles,
        );
        registry.register(
            "murmur_door_resident_bytes",
            "The host's resident memory",
            gauge(resident_bytes()),
        );
        let mut text = String::new();
        // Writing to a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }

    /// The engine every capsule runs on.
    pub fn engine(&self) -> &DoorEngine {
        &self.engine
    }

    /// The bounds every capsule's connections meet.
    pub fn http_limits(&self) -> &crate::listener::server::HttpLimits {
        &self.limits.http
    }

    /// The largest component a swap reads.
    pub fn max_component_bytes(&self) -> usize {
        self.limits.max_component_bytes
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    capsule: String,
    state: String,
}

/// A capsule and how something of it ended: a swap, a reused answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    capsule: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CompileLabels {
    how: &'static str,
}

/// This process's resident memory, in bytes (0 when it cannot be read).
fn resident_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Closes `capsule` once nothing else holds it.
async fn close(capsule: Arc<Capsule>) {
    match Arc::try_unwrap(capsule) {
        Ok(capsule) => capsule.close().await,
        // A swap, rollback or scrape holds it for a moment: it closes at
        // once, without waiting for its requests.
        Err(shared) => shared.close_now(),
    }
}
