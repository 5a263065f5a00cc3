//! The HTTP listener: each request answered by a door instance, one kept
//! from its caller's last request or a fresh one, which behaves as if it
//! were fresh (see [`crate::sandbox::idle`]).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::{Request, Response};
use tokio::sync::Semaphore;
use tracing::Instrument;
use wasmtime::Store;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::imports::request_body::BoxedBody;
use crate::listener::admission::{self, Account, Admission, Slot};
use crate::listener::body::{BodyBudget, BodyLimits, RequestBody, Tally};
use crate::listener::connections::{self, Busy, Connections};
use crate::listener::failure::{Failure, too_many_redeems};
use crate::listener::metrics::{self, Metrics};
use crate::listener::proxies::TrustedProxies;
use crate::listener::redeems::Redeems;
use crate::listener::response_body::{Failed, OpenStream, Probe, ResponseBody, Traced};
use crate::listener::run::{DoorRun, Run, answered};
use crate::manifest::planes;
use crate::sandbox::engine::{self, Door, DoorInstance};
use crate::sandbox::idle::{Idle, KeptFor};
use crate::sandbox::memory::{self, MemoryPool};
use crate::sandbox::request::{Limits, RequestState, Stores};
use crate::session::Session;
use crate::telemetry;
use crate::versions::card;
use crate::versions::control::{self, ControlToken};
use crate::versions::reuse::{self, ReuseKey};
use crate::versions::swap::{self, Doors, Live, Serving};

/// The largest request body the host reads (`--max-body-bytes`): every
/// text or data part a body this size can carry fits the default door
/// memory (`--max-memory-mb` 128) when a held SendMessage echoes it back,
/// with room to spare (8 MiB is about where 64 MiB would run out).
pub const MAX_BODY_BYTES: usize = 8 << 20;
/// Header lines a request head may carry (`--max-headers`).
pub const MAX_HEADERS: usize = 100;
/// Bytes a request head may take (`--max-header-bytes`); hyper's least is
/// 8192.
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// How long a client has to send a whole request head
/// (`--header-timeout-ms`).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client has, from its head, to send the whole body
/// (`--body-timeout-ms`).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of request bodies held at once across every connection
/// (`--max-body-memory-bytes`).
pub const MAX_BODY_MEMORY_BYTES: usize = 256 << 20;

/// What the clients of one listener may take of the host.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Bytes a request body may have (`--max-body-bytes`); past it, 413.
    pub max_body_bytes: usize,
    /// Header lines a request head may have (`--max-headers`); past it, 431.
    pub max_headers: usize,
    /// Bytes a request head may take (`--max-header-bytes`), at least 8192.
    pub max_header_bytes: usize,
    /// How long a client has to send a whole request head before it is
    /// disconnected (`--header-timeout-ms`).
    pub header_timeout: Duration,
    /// How long a client may take no byte of an answer that is not a
    /// stream before its connection is dropped.
    pub write_timeout: Duration,
    /// How long a client has, from its head, to send the whole body
    /// (`--body-timeout-ms`); past it, 408.
    pub body_timeout: Duration,
    /// Bytes of request bodies held at once across every connection
    /// (`--max-body-memory-bytes`); past it, 503.
    pub max_body_memory_bytes: usize,
    /// Connections open at once (`--max-connections`); at the cap the one
    /// that has done least is closed for a new one.
    pub max_connections: usize,
    /// Door instances alive at once; the engine's pool must hold one more
    /// (for a swap's trial instance).
    pub max_instances: u32,
    /// Door instances kept between requests (see [`crate::sandbox::idle`]); the
    /// engine's pool holds them beside `max_instances`.
    pub idle_instances: u32,
    /// Door instances one caller may hold at once (see
    /// [`admission::caller_share`]); past it, 429.
    pub max_instances_per_caller: u32,
    /// How long a request waits for a door instance when all are in use
    /// (`--instance-wait-ms`); then 503.
    pub instance_wait: Duration,
    /// Bytes of linear memory all live door instances hold together.
    pub max_door_memory_bytes: usize,
    /// How long a closing door waits for the requests in flight once it
    /// has stopped accepting connections (`--drain-ms`).
    pub drain: Duration,
    /// Bytes of reusable answers each door version keeps (`--reuse-bytes`,
    /// see [`crate::versions::reuse`]).
    pub reuse_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_body_bytes: MAX_BODY_BYTES,
            max_headers: MAX_HEADERS,
            max_header_bytes: MAX_HEADER_BYTES,
            header_timeout: HEADER_TIMEOUT,
            write_timeout: connections::WRITE_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            max_body_memory_bytes: MAX_BODY_MEMORY_BYTES,
            max_connections: connections::MAX_CONNECTIONS,
            max_instances: engine::MAX_INSTANCES,
            idle_instances: engine::IDLE_INSTANCES,
            max_instances_per_caller: admission::MAX_INSTANCES_PER_CALLER,
            instance_wait: admission::INSTANCE_WAIT,
            max_door_memory_bytes: memory::MAX_DOOR_MEMORY_BYTES,
            drain: DRAIN,
            reuse_bytes: reuse::REUSE_BYTES,
        }
    }
}

/// How long a closing door waits, by default, for its requests in flight.
pub const DRAIN: Duration = Duration::from_secs(5);

/// What the requests of every door in a host draw from: connections, body
/// bytes, door instances and door memory (`HttpLimits`). A one-capsule
/// server has its own.
#[derive(Clone)]
pub struct Shared {
    pub(crate) connections: Arc<Connections>,
    bodies: BodyBudget,
    instances: Arc<Semaphore>,
    memory: Arc<MemoryPool>,
    idle: Arc<Idle>,
    /// Whose forwarding headers name the client (`--trusted-proxy`).
    proxies: Arc<TrustedProxies>,
}

impl Shared {
    /// Pools of their own, sized by `http`, trusting no proxy.
    pub fn new(http: &HttpLimits) -> Shared {
        Shared {
            connections: Connections::new(http.max_connections),
            bodies: BodyBudget::new(http.max_body_memory_bytes),
            instances: Arc::new(Semaphore::new(http.max_instances as usize)),
            memory: MemoryPool::new(http.max_door_memory_bytes),
            idle: Idle::new(http.idle_instances),
            proxies: Arc::default(),
        }
    }

    /// A request from one of `proxies` is its client's, as the proxies'
    /// forwarding headers name it (see [`crate::listener::proxies`]).
    pub fn trust_proxies(&mut self, proxies: TrustedProxies) {
        self.proxies = Arc::new(proxies);
    }

    /// Door instances free in the pool now.
    pub fn free_instances(&self) -> usize {
        self.instances.available_permits()
    }

    /// Door instances kept between requests now (see [`crate::sandbox::idle`]).
    pub fn idle_instances(&self) -> usize {
        self.idle.len()
    }

    /// Connections dropped because their client took no byte of an answer
    /// for `--write-timeout-ms`.
    pub fn write_timeouts(&self) -> u64 {
        self.connections.write_timeouts()
    }
}

/// A door's admission when its pool is its own.
fn own_admission(http: &HttpLimits) -> Arc<Admission> {
    Admission::new(
        http.max_instances,
        http.max_instances_per_caller,
        http.instance_wait,
    )
}

/// Answers one capsule's HTTP requests with its door: the versions it
/// serves, the stores its requests run in, and what they may take.
pub struct Server {
    /// The live door and the previous one.
    pub doors: Doors,
    /// The session, limits and shared memory each request's store is
    /// made of.
    pub stores: Stores,
    /// `host:port` of the listener, for requests that name no host.
    listener_authority: hyper::header::HeaderValue,
    /// The control surface's token; without one the host serves no control
    /// surface and its path reaches the door.
    control: Option<ControlToken>,
    /// What each request's HTTP side may take.
    http: HttpLimits,
    /// The connections, body bytes, instances and memory all requests share.
    shared: Shared,
    /// Who gets an instance of the pool.
    admission: Arc<Admission>,
    /// Set when the server is shut: every connection closes.
    shut: tokio::sync::watch::Sender<bool>,
    /// The capsule, as its requests' logs name it.
    name: Arc<str>,
    /// A host's counts, which this capsule's requests add to.
    metrics: Option<Arc<Metrics>>,
    /// Event streams open now.
    streams: Arc<AtomicU64>,
    /// Requests are answered by the native baseline, not the component.
    #[cfg(feature = "native-door")]
    native: bool,
    /// Failed peer handle redeems, by client address.
    redeems: Redeems,
}

impl Server {
    /// Serves the embedded `door`, with no control surface.
    pub fn new(door: Door, session: Arc<Session>) -> Server {
        let authority = session.identity.url.trim_start_matches("http://");
        let listener_authority = hyper::header::HeaderValue::from_str(authority)
            .unwrap_or(hyper::header::HeaderValue::from_static("localhost"));
        let http = HttpLimits::default();
        let shared = Shared::new(&http);
        let name = session.identity.name.as_str().into();
        Server {
            admission: own_admission(&http),
            doors: Doors::new(door, swap::EMBEDDED.to_string()),
            stores: Stores {
                session,
                limits: Limits::default(),
                memory: shared.memory.clone(),
            },
            listener_authority,
            control: None,
            http,
            shared,
            shut: tokio::sync::watch::Sender::new(false),
            name,
            metrics: None,
            streams: Arc::default(),
            redeems: Redeems::default(),
            #[cfg(feature = "native-door")]
            native: false,
        }
    }

    /// Answers with the door's rules compiled natively (the benchmark
    /// baseline) when `native`.
    #[cfg(feature = "native-door")]
    pub fn with_native_door(mut self, native: bool) -> Server {
        self.native = native;
        self
    }

    /// Door instances this server's requests hold now.
    pub fn instances_in_use(&self) -> usize {
        self.admission.in_use()
    }

    /// Event streams open now.
    pub fn open_streams(&self) -> u64 {
        self.streams.load(Ordering::Relaxed)
    }

    /// Its requests are counted in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Server {
        self.metrics = Some(metrics);
        self
    }

    /// What counts a request answered `status`, once its body shows its
    /// JSON-RPC error code; None when nothing counts.
    /// The method label is worked out only when something counts.
    fn probe(
        &self,
        method: impl FnOnce() -> &'static str,
        status: u16,
        started: tokio::time::Instant,
    ) -> Option<Probe> {
        Some(Probe {
            metrics: self.metrics.clone()?,
            capsule: self.name.clone(),
            request: metrics::Request {
                method: method(),
                status,
                rpc_code: "none",
            },
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// A peer plane's answer, counted by its outcome.
    fn count_redeem(&self, status: u16) {
        if let Some(metrics) = &self.metrics {
            let outcome = match status {
                200 | 206 | 304 => "served",
                429 => "limited",
                _ => "refused",
            };
            metrics.redeem(&self.name, outcome);
        }
    }

    /// Its requests' logs name the capsule `name`.
    pub fn with_name(mut self, name: &str) -> Server {
        self.name = name.into();
        self
    }

    /// The limits it serves with.
    pub fn http_limits(&self) -> &HttpLimits {
        &self.http
    }

    /// Closes every connection (their requests unanswered): for a capsule
    /// whose session has closed and whose listener has stopped.
    pub fn shut(&self) {
        self.shut.send_replace(true);
        self.shared.idle.forget(&self.stores.session);
    }

    /// The door instances kept between requests, across the host.
    pub fn idle(&self) -> &Idle {
        &self.shared.idle
    }

    /// A component to swap in is at most `max` bytes.
    pub fn with_max_component_bytes(mut self, max: usize) -> Server {
        self.doors = self.doors.with_max_component_bytes(max);
        self
    }

    /// Each request's body, head and head's time limited to `http`.
    pub fn with_http_limits(mut self, http: HttpLimits) -> Server {
        self.http = http;
        self.doors = self.doors.with_reuse_bytes(http.reuse_bytes);
        self.shared = Shared::new(&http);
        self.stores.memory = self.shared.memory.clone();
        self.admission = own_admission(&http);
        self
    }

    /// A request from one of `proxies` is its client's, as the proxies'
    /// forwarding headers name it. After [`Server::with_http_limits`].
    pub fn with_trusted_proxies(mut self, proxies: TrustedProxies) -> Server {
        self.shared.trust_proxies(proxies);
        self
    }

    /// Serves as one door of a host: its requests draw on `shared`, and
    /// hold at most `share` of its instances.
    pub fn in_host(mut self, shared: Shared, share: u32) -> Server {
        self.stores.memory = shared.memory.clone();
        self.admission = Admission::within(
            Some(shared.instances.clone()),
            share,
            self.http.max_instances_per_caller,
            self.http.instance_wait,
        );
        self.shared = shared;
        self
    }

    /// Each request's store limited to `limits` (the engine's pool must
    /// allow `limits.max_memory_bytes`).
    pub fn with_limits(mut self, limits: Limits) -> Server {
        self.stores.limits = limits;
        self
    }

    /// The door came from `source` (a host's last swap).
    pub fn with_source(mut self, source: swap::Source) -> Server {
        self.doors = self.doors.with_source(source);
        self
    }

    /// The door was loaded from `file`, which SIGHUP reloads.
    pub fn with_component_file(mut self, file: PathBuf) -> Server {
        self.doors = self.doors.with_component_file(file);
        self
    }

    /// Serves the control surface, for the bearer of `token`.
    pub fn with_control(mut self, token: ControlToken) -> Server {
        self.control = Some(token);
        self
    }

    /// SIGHUP: loads the `--component` file again and swaps to it.
    pub async fn reload(&self) {
        self.doors.reload(&self.stores).await;
    }

    /// What its connections share with others (a host's capsules').
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Turns true when the server is shut: its connections close.
    pub fn shut_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shut.subscribe()
    }

    /// Answers one request in a span of its own (at debug), so every line it
    /// logs names the request: its id (counted from 1 since launch), HTTP
    /// method, path, JSON-RPC method once the body has been read, the door
    /// version serving it, and in a host of capsules, the capsule. Its last
    /// line (`request`, at debug) adds the status and the microseconds to the
    /// response head: recorded on the span itself, they cost a short request
    /// about 4% of its throughput. At info (the default) the span is not
    /// made, which saves a short request another 5%; the door's failure
    /// still names the JSON-RPC method it failed on.
    pub async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        address: std::net::IpAddr,
        busy: Busy,
    ) -> Response<HyperOutgoingBody> {
        let address = self.shared.proxies.client(address, request.headers());
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let span = match self.metrics {
            // Traced: a server span, named for its route until the body
            // names its JSON-RPC method, in the caller's trace.
            _ if telemetry::on() => {
                let span = tracing::debug_span!(
                    "request",
                    otel.kind = "server",
                    otel.name = route(request.method(), request.uri().path()),
                    capsule = &*self.name,
                    id,
                    method = %request.method(),
                    path = planes::logged(request.uri().path()),
                    rpc = tracing::field::Empty,
                    door = tracing::field::Empty,
                    "http.request.method" = %request.method(),
                    "url.path" = planes::logged(request.uri().path()),
                    "murmur.capsule" = &*self.name,
                    "murmur.session.id" = self.stores.session.id(),
                );
                telemetry::continue_trace(&span, request.headers());
                span
            }
            // One capsule of many: its name tells the lines apart.
            Some(_) => tracing::debug_span!(
                "request",
                capsule = &*self.name,
                id,
                method = %request.method(),
                path = planes::logged(request.uri().path()),
                rpc = tracing::field::Empty,
                door = tracing::field::Empty,
            ),
            None => tracing::debug_span!(
                "request",
                id,
                method = %request.method(),
                path = planes::logged(request.uri().path()),
                rpc = tracing::field::Empty,
                door = tracing::field::Empty,
            ),
        };
        self.serve(request, address, busy).instrument(span).await
    }

    /// Serves one request; never fails, whatever the client or the door does.
    async fn serve(
        self: Arc<Self>,
        request: Request<Incoming>,
        address: std::net::IpAddr,
        mut busy: Busy,
    ) -> Response<HyperOutgoingBody> {
        let started = tokio::time::Instant::now();
        let (mut parts, body) = request.into_parts();
        let control = self.control.as_ref();
        if let Some(token) = control.filter(|_| control::is_control(parts.uri.path())) {
            return self.serve_control(token, parts, body, busy, started).await;
        }
        // A client that spent its budget of failed redeems waits, before
        // any door runs.
        let plane = planes::plane_of(parts.uri.path());
        let peer = plane == Some("peer") && self.stores.session.planes.peer_files.is_some();
        if peer && let Some(wait) = self.redeems.limited(address, std::time::Instant::now()) {
            return self.redeems_spent(wait, busy, started);
        }
        let card = self.metrics.is_some() && parts.uri.path() == card::CARD_PATH;
        let serving = self.doors.serving();
        let version = serving.live().version;
        let span = tracing::Span::current();
        span.record("door", version);
        let traced = telemetry::on().then(|| {
            telemetry::door(&span, version, &serving.live().door.digest);
            Traced::new(span.clone())
        });
        // The door's card as it answered it before: no instance needed.
        let keepable = card::keepable(&parts);
        if let Some(response) = keepable.then(|| serving.live().card.get()).flatten() {
            drop(serving);
            return self.kept_card(response, traced, busy, started);
        }
        let keep_card = keepable.then(|| serving.version());
        let authorization = parts.headers.get(hyper::header::AUTHORIZATION);
        let caller = Account::of(
            self.stores.session.capsule.authenticated,
            authorization.map(|v| v.as_bytes()),
            address,
        );
        let owner = KeptFor::new(
            &serving.live().door,
            self.stores.limits,
            authorization,
            address,
        );
        let limits = BodyLimits {
            max_bytes: self.http.max_body_bytes,
            timeout: self.http.body_timeout,
            budget: self.shared.bodies.clone(),
        };
        let (body, tally) = RequestBody::new(body, limits, started);
        let client = self.client(address);
        let length = content_length(&parts);
        let repeat = self.reusing(&mut parts, length, body, client, &serving);
        let (response, was_reused) = match repeat.await {
            Reusing::Reused(response) => (response.map(ResponseBody::host), true),
            Reusing::Unread => {
                let failure = Failure::Guest("the request body could not be read".into(), None);
                (failure.response(&tally).map(ResponseBody::host), false)
            }
            Reusing::Run(body, reuse_key) => {
                let run = (serving, owner, reuse_key);
                let request = Request::from_parts(parts, body);
                (
                    self.admitted(request, caller, run, keep_card, &tally).await,
                    false,
                )
            }
        };
        let stream = is_event_stream(&response).then(|| {
            busy.streaming();
            OpenStream::new(&self.streams)
        });
        // Read from the body again only for a span or a metric that names it.
        let rpc = (self.metrics.is_some() || !span.is_disabled())
            .then(|| tally.request_method())
            .flatten();
        if let Some(rpc) = &rpc {
            span.record("rpc", rpc.as_str());
        }
        telemetry::served(
            &span,
            response.status().as_u16(),
            rpc.as_deref(),
            was_reused,
        );
        tracing::debug!(
            status = response.status().as_u16(),
            micros = started.elapsed().as_micros() as u64,
            reused = was_reused,
            "request"
        );
        let status = response.status().as_u16();
        if peer {
            if status == 404 {
                self.redeems.failed(address, std::time::Instant::now());
            }
            self.count_redeem(status);
        }
        let method = || {
            let path = if card { card::CARD_PATH } else { "" };
            match plane {
                Some(plane) => plane,
                None => metrics::method_label(rpc.as_deref(), path),
            }
        };
        let probe = self.probe(method, status, started);
        let bytes = plane
            .zip(self.metrics.as_ref())
            .map(|(plane, metrics)| metrics.plane_bytes(&self.name, plane));
        response.map(|mut answer| {
            answer.stream = stream;
            answer.bytes = bytes;
            answer.traced(traced).busy(busy, probe)
        })
    }

    /// The refusal of a client that spent its budget of failed redeems.
    fn redeems_spent(
        &self,
        wait: Duration,
        busy: Busy,
        started: tokio::time::Instant,
    ) -> Response<HyperOutgoingBody> {
        let response = too_many_redeems(wait);
        tracing::debug!(status = 429, "request");
        telemetry::served(&tracing::Span::current(), 429, None, false);
        self.count_redeem(429);
        let probe = self.probe(|| "peer", 429, started);
        response.map(|body| ResponseBody::host(body).busy(busy, probe))
    }

    /// The card as the door answered it before.
    fn kept_card(
        &self,
        response: Response<Full<Bytes>>,
        traced: Option<Traced>,
        busy: Busy,
        started: tokio::time::Instant,
    ) -> Response<HyperOutgoingBody> {
        let status = response.status().as_u16();
        tracing::debug!(
            status,
            micros = started.elapsed().as_micros() as u64,
            kept_card = true,
            "request"
        );
        telemetry::served(&tracing::Span::current(), status, None, true);
        let probe = self.probe(|| "card", status, started);
        response.map(|body| ResponseBody::whole(body).traced(traced).busy(busy, probe))
    }

    /// Serves a request to the control surface (see [`control`]).
    async fn serve_control(
        &self,
        token: &ControlToken,
        parts: Parts,
        body: Incoming,
        busy: Busy,
        started: tokio::time::Instant,
    ) -> Response<HyperOutgoingBody> {
        let response = control::serve(&self.doors, &self.stores, token, parts, body).await;
        // The request's span names its method and path.
        tracing::debug!(
            status = response.status().as_u16(),
            micros = started.elapsed().as_micros() as u64,
            "control request"
        );
        telemetry::served(
            &tracing::Span::current(),
            response.status().as_u16(),
            None,
            false,
        );
        let probe = self.probe(|| "control", response.status().as_u16(), started);
        response.map(|body| ResponseBody::host(body).busy(busy, probe))
    }

    /// The door's answer to a request, once admitted to an instance, or
    /// the host's when it is refused one or the door fails. A card the door
    /// answered is kept for the requests after it (`keep_card`).
    async fn admitted(
        &self,
        request: Request<BoxedBody>,
        caller: Account,
        (serving, owner, reuse_key): (Serving, KeptFor, ReuseKey),
        keep_card: Option<Arc<Live>>,
        tally: &Tally,
    ) -> Response<ResponseBody> {
        let waiting = telemetry::on().then(tokio::time::Instant::now);
        let admitted = self.admission.admit(caller).await;
        if let Some(waiting) = waiting {
            telemetry::waited(waiting.elapsed());
        }
        let slot = match admitted {
            Ok(slot) => slot,
            Err(refused) => {
                return Failure::Refused(refused)
                    .response(tally)
                    .map(ResponseBody::host);
            }
        };
        let run = self.run(serving, owner, reuse_key, request, slot, tally.clone());
        match run.await {
            Ok(response) => match keep_card {
                Some(live) => match live.card.keep(response).await {
                    Ok(kept) => kept.map(ResponseBody::whole),
                    Err(_) => Failure::Guest("the door's card was cut".into(), None)
                        .response(tally)
                        .map(ResponseBody::host),
                },
                None => response,
            },
            Err(failure) => {
                if matches!(failure, Failure::Guest(..)) {
                    tally.read_prefix().await;
                }
                failure.response(tally).map(ResponseBody::host)
            }
        }
    }

    /// Runs the door on a request whose body has been read, outside any
    /// listener's limits (benchmarks, embedders). Its caller is its
    /// `Authorization` from an unspecified address.
    pub async fn respond(&self, request: Request<Bytes>) -> Response<HyperOutgoingBody> {
        let (mut parts, body) = request.into_parts();
        let tally = Tally::of(&body);
        let length = Some(body.len());
        let body = Full::new(body).map_err(|never| -> wasmtime_wasi_http::Error { match never {} });
        let serving = self.doors.serving();
        let owner = KeptFor::new(
            &serving.live().door,
            self.stores.limits,
            parts.headers.get(hyper::header::AUTHORIZATION),
            std::net::Ipv4Addr::UNSPECIFIED.into(),
        );
        let client = self.client(std::net::Ipv4Addr::UNSPECIFIED.into());
        let repeat = self.reusing(&mut parts, length, body, client, &serving);
        let (body, reuse_key) = match repeat.await {
            Reusing::Reused(response) => return response,
            Reusing::Unread => {
                let failure = Failure::Guest("the request body could not be read".into(), None);
                return failure.response(&tally);
            }
            Reusing::Run(body, reuse_key) => (body, reuse_key),
        };
        let request = Request::from_parts(parts, body);
        let slot = Slot::unlimited();
        match self
            .run(serving, owner, reuse_key, request, slot, tally.clone())
            .await
        {
            Ok(response) => response.map(BodyExt::boxed_unsync),
            Err(failure) => failure.response(&tally),
        }
    }

    /// Who asks, as a reusable answer is kept for: on a public door, the
    /// client's address; on an authenticated one, its `Authorization` line
    /// says (see [`crate::versions::reuse`]).
    fn client(&self, address: IpAddr) -> Option<IpAddr> {
        (!self.stores.session.capsule.authenticated).then_some(address)
    }

    /// The answer `serving`'s version keeps for a repeat of this request,
    /// or the body to run the door on: read whole first when the request
    /// may be a repeat (a small POST of a head the version keeps answers
    /// for).
    async fn reusing<B>(
        &self,
        parts: &mut Parts,
        length: Option<usize>,
        body: B,
        client: Option<IpAddr>,
        serving: &Serving,
    ) -> Reusing
    where
        B: hyper::body::Body<Data = Bytes, Error = wasmtime_wasi_http::Error> + Send + 'static,
    {
        let reuse = &serving.live().reuse;
        let small = length.is_some_and(|length| length <= reuse::MAX_BODY);
        // A small POST (a JSON-RPC read), or a GET or HEAD of a plane's file.
        let planed = planes::plane_of(parts.uri.path()).is_some() && reuse::bodiless(parts);
        let unkept = ReuseKey {
            client,
            ..ReuseKey::default()
        };
        let may_repeat = parts.method == hyper::Method::POST && small || planed;
        let lookup = match may_repeat && reuse.holds_any() {
            true => reuse.samples(),
            false => None,
        };
        let Some(lookup) = lookup else {
            return Reusing::Run(body.boxed_unsync(), unkept);
        };
        let unkept = ReuseKey {
            lookup: Some(lookup),
            ..unkept
        };
        // Kept under the head the door was asked with.
        self.address(parts);
        let head = reuse::Head::of(parts, client);
        if !reuse.looks_up(&head) {
            let head = Some(head);
            return Reusing::Run(body.boxed_unsync(), ReuseKey { head, ..unkept });
        }
        let (request, body) = match planed {
            true => (Some(reuse::Request::bodiless(head)), body.boxed_unsync()),
            false => {
                let Ok(bytes) = body.collect().await.map(|whole| whole.to_bytes()) else {
                    return Reusing::Unread;
                };
                let request = reuse::Request::with_head(head, &bytes);
                let body = Full::new(bytes).map_err(|never| match never {});
                (request, body.boxed_unsync())
            }
        };
        let kept = request
            .as_ref()
            .and_then(|request| reuse.reused(request, &self.stores.session));
        // The door sent these head lines once; were they refused now, the
        // door answers instead.
        if let Some(response) = kept.and_then(reuse::Reused::response) {
            return Reusing::Reused(response);
        }
        Reusing::Run(body, ReuseKey { request, ..unkept })
    }

    /// Runs an instance of the door version `serving` holds, in `slot`: one
    /// kept from `owner`'s last request, or a fresh one.
    async fn run<B>(
        &self,
        serving: Serving,
        owner: KeptFor,
        reuse_key: ReuseKey,
        request: Request<B>,
        slot: Slot,
        tally: Tally,
    ) -> Result<Response<ResponseBody>, Failure>
    where
        B: hyper::body::Body<Data = Bytes, Error = wasmtime_wasi_http::Error> + Send + 'static,
    {
        #[cfg(feature = "native-door")]
        if self.native {
            return self.run_native(request, serving, slot, tally).await;
        }
        let (parts, body) = self.addressed(request);
        // A request on a plane finds that plane's directories preopened, on
        // an instance that serves only that plane.
        let exports = self.stores.session.planes.of(parts.uri.path());
        let plane = exports.and(planes::plane_of(parts.uri.path()));
        let owner = owner.on_plane(plane);
        let (mut store, instance, uses) = self.take_instance(&owner, &serving, exports);
        store.data_mut().door.plane = plane;
        let memory = store.data().memory.refused();
        let changed = store.data().door.changed.clone();
        // Out of memory before it changed the session, the door refused the
        // request; after, it had accepted it (-32603).
        let memory = move || {
            (!changed.load(std::sync::atomic::Ordering::Relaxed))
                .then(|| memory.get().copied())
                .flatten()
        };
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let failed = Failed::default();
        let span = tracing::Span::current();
        let run = Run {
            serving,
            owner,
            store,
            instance,
            uses,
            slot,
            held: tally,
            failure: failed.clone(),
            idle: self.shared.idle.clone(),
            reuse_key,
        };
        // The door runs on the request's task until it answers (see
        // `DoorRun`); one still running then goes on in a task of its own, so
        // a body it streams can outlive the response head.
        let door = DoorRun::new(run.door(parts, body, sender).instrument(span.clone()));
        answered(door, receiver, failed, span, memory).await
    }

    /// The native baseline's answer (a benchmark-only build): the same
    /// rules, compiled into the host, with no sandbox.
    #[cfg(feature = "native-door")]
    async fn run_native<B>(
        &self,
        request: Request<B>,
        serving: Serving,
        slot: Slot,
        tally: Tally,
    ) -> Result<Response<ResponseBody>, Failure>
    where
        B: hyper::body::Body<Data = Bytes, Error = wasmtime_wasi_http::Error> + Send + 'static,
    {
        let (parts, body) = request.into_parts();
        let body = body.collect().await.map_err(|e| {
            Failure::Guest(format!("the request body could not be read: {e}"), None)
        })?;
        let request = Request::from_parts(parts, body.to_bytes());
        let response = crate::listener::native::respond(self.stores.session.clone(), request).await;
        tally.release();
        drop((serving, slot));
        Ok(response.map(ResponseBody::host))
    }

    /// The request's head, with an authority `wasi:http` can read (see
    /// [`Server::address`]), and its body boxed.
    fn addressed<B>(&self, request: Request<B>) -> (Parts, BoxedBody)
    where
        B: hyper::body::Body<Data = Bytes, Error = wasmtime_wasi_http::Error> + Send + 'static,
    {
        let (mut parts, body) = request.into_parts();
        self.address(&mut parts);
        (parts, body.boxed_unsync())
    }

    /// A request without a usable Host (HTTP/1.0, a malformed value)
    /// reaches the door as sent to this listener.
    fn address(&self, parts: &mut Parts) {
        let host_usable = parts
            .headers
            .get(hyper::header::HOST)
            .is_some_and(|h| h.to_str().is_ok());
        if parts.uri.authority().is_none() && !host_usable {
            parts
                .headers
                .insert(hyper::header::HOST, self.listener_authority.clone());
        }
    }

    /// A store for `owner`'s request on the door version `serving` holds:
    /// the one its last request left, with its instance, or a fresh one (no
    /// instance yet). On a plane (`exports`), its preopens are the ones it
    /// kept while they are still what the exports name, else opened anew.
    fn take_instance(
        &self,
        owner: &KeptFor,
        serving: &Serving,
        exports: Option<&planes::Exports>,
    ) -> (Store<RequestState>, Option<DoorInstance>, u32) {
        let live = serving.live();
        let (mut store, instance, uses) =
            self.shared
                .idle
                .store_for(owner, &self.stores, &live.door, live.version);
        if let Some(exports) = exports {
            let planes = &self.stores.session.planes;
            let state = store.data_mut();
            if !state
                .opened
                .as_ref()
                .is_some_and(|o| planes.still(exports, o))
            {
                let (wasi, opened) = planes.preopened(exports);
                state.wasi = wasi;
                state.opened = Some(opened);
            }
        }
        store.data_mut().door.framer = serving.live().framer(&self.stores, &self.shared.idle);
        (store, instance, uses)
    }
}

/// A request's route, to name its span before its JSON-RPC method is
/// known: the card, a plane, the control surface or the JSON-RPC endpoint,
/// and the method alone for any other path, so a client cannot make names
/// without end.
fn route(method: &hyper::Method, path: &str) -> String {
    let route = match planes::plane_of(path) {
        Some("files") => "/resources/files/{path}",
        Some(_) => "/resources/peer/{handle}/{path}",
        None if path == "/" || path == card::CARD_PATH => path,
        None if control::is_control(path) => control::CONTROL_PATH,
        None => return method.to_string(),
    };
    format!("{method} {route}")
}

/// The length a request's head declares for its body.
fn content_length(parts: &Parts) -> Option<usize> {
    let length = parts.headers.get(hyper::header::CONTENT_LENGTH)?;
    length.to_str().ok()?.parse().ok()
}

/// A request's answer kept by its door version, or what runs the door.
enum Reusing {
    /// A repeat of an answer the version keeps, answered again.
    Reused(Response<HyperOutgoingBody>),
    /// The body to run the door on, and what its answer is kept under.
    Run(BoxedBody, ReuseKey),
    /// The body could not be read whole (too large, too slow, cut).
    Unread,
}

/// Whether a response is an event stream, whose client is watched for
/// leaving.
fn is_event_stream<B>(response: &Response<B>) -> bool {
    response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}
