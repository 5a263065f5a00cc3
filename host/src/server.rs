//! The HTTP listener: one fresh store and door instance per request.

use std::convert::Infallible;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use wasmtime::StoreLimitsBuilder;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::control::{self, ControlToken};
use crate::cpu;
use crate::engine::{self, Door, Limits};
use crate::imports::RequestState;
use crate::session::Session;
use crate::swap::{self, Doors, Serving, Source};

/// The largest request body the host reads (`--max-body-bytes`).
pub const MAX_BODY_BYTES: usize = 16 << 20;
/// Header lines a request head may carry (`--max-headers`).
pub const MAX_HEADERS: usize = 100;
/// Bytes a request head may take (`--max-header-bytes`); hyper's least is
/// 8192.
pub const MAX_HEADER_BYTES: usize = 64 << 10;
/// How long a client has to send a whole request head
/// (`--header-timeout-ms`).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// What a request's HTTP side may take.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub max_body_bytes: usize,
    pub max_headers: usize,
    pub max_header_bytes: usize,
    pub header_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_body_bytes: MAX_BODY_BYTES,
            max_headers: MAX_HEADERS,
            max_header_bytes: MAX_HEADER_BYTES,
            header_timeout: HEADER_TIMEOUT,
        }
    }
}

pub struct Server {
    /// The live door and the previous one.
    pub doors: Doors,
    pub session: Arc<Session>,
    /// `host:port` of the listener, for requests that name no host.
    listener_authority: hyper::header::HeaderValue,
    /// The control surface's token; without one the host serves no control
    /// surface and its path reaches the door.
    control: Option<ControlToken>,
    /// The `--component` file SIGHUP reloads.
    component_file: Option<PathBuf>,
    /// What each request's store may use.
    limits: Limits,
    /// What each request's HTTP side may take.
    http: HttpLimits,
    /// The largest component a swap reads.
    max_component_bytes: usize,
}

/// A swap that took place.
pub struct SwapDone {
    pub swapped: swap::Swapped,
    /// Compiling, validating, a trial instantiation and the swap itself.
    pub took: Duration,
}

impl Server {
    /// Serves the embedded `door`, with no control surface.
    pub fn new(door: Door, session: Arc<Session>) -> Server {
        let authority = session.capsule.url.trim_start_matches("http://");
        let listener_authority = hyper::header::HeaderValue::from_str(authority)
            .unwrap_or(hyper::header::HeaderValue::from_static("localhost"));
        Server {
            doors: Doors::new(door, swap::EMBEDDED.to_string()),
            session,
            listener_authority,
            control: None,
            component_file: None,
            limits: Limits::default(),
            http: HttpLimits::default(),
            max_component_bytes: swap::MAX_COMPONENT_BYTES,
        }
    }

    /// A component to swap in is at most `max` bytes.
    pub fn with_max_component_bytes(mut self, max: usize) -> Server {
        self.max_component_bytes = max;
        self
    }

    /// The largest component a swap reads (`--max-component-bytes`).
    pub fn max_component_bytes(&self) -> usize {
        self.max_component_bytes
    }

    /// Each request's body, head and head's time limited to `http`.
    pub fn with_http_limits(mut self, http: HttpLimits) -> Server {
        self.http = http;
        self
    }

    /// Each request's store limited to `limits` (the engine's pool must
    /// allow `limits.max_memory_bytes`).
    pub fn with_limits(mut self, limits: Limits) -> Server {
        self.limits = limits;
        self
    }

    /// A store for one request, limited and metered (see [`engine::store`]).
    fn store(&self, door: &Door) -> wasmtime::Store<RequestState> {
        let state = RequestState::new(self.session.clone(), StoreLimitsBuilder::new().build());
        engine::store(door.pre.engine(), state, self.limits)
    }

    /// The door was loaded from `file`, which SIGHUP reloads.
    pub fn with_component_file(mut self, file: PathBuf) -> Server {
        let door = self.doors.live().door.clone();
        self.doors = Doors::new(door, file.display().to_string());
        self.component_file = Some(file);
        self
    }

    /// Serves the control surface, for the bearer of `token`.
    pub fn with_control(mut self, token: ControlToken) -> Server {
        self.control = Some(token);
        self
    }

    /// Compiles `bytes` off the request path, checks it is a door this host
    /// serves, instantiates it once in a throwaway store, then makes it the
    /// live door. On any failure the live door stays and the reason is
    /// returned.
    pub async fn swap(&self, bytes: Vec<u8>, source: Source) -> anyhow::Result<SwapDone> {
        let started = Instant::now();
        let engine = self.doors.live().door.pre.engine().clone();
        let door = tokio::task::spawn_blocking(move || Door::load_checked(&engine, &bytes))
            .await
            .map_err(|e| anyhow::anyhow!("the compiling task failed: {e}"))?;
        let door = match door {
            Ok(door) => door,
            Err(e) => {
                tracing::warn!(%source, error = %format!("{e:#}"), "door swap refused");
                return Err(e);
            }
        };
        if let Err(e) = self.trial(&door).await {
            tracing::warn!(%source, digest = %door.digest, error = %format!("{e:#}"), "door swap refused");
            return Err(e);
        }
        let swapped = self.doors.install(door, source);
        let took = started.elapsed();
        tracing::info!(
            old_version = swapped.old.version,
            old_digest = %swapped.old.door.digest,
            version = swapped.new.version,
            digest = %swapped.new.door.digest,
            source = %swapped.new.source,
            millis = took.as_millis() as u64,
            "door swapped"
        );
        Ok(SwapDone { swapped, took })
    }

    /// Instantiates `door` once in a store of its own, answering nothing.
    async fn trial(&self, door: &Door) -> anyhow::Result<()> {
        let mut store = self.store(door);
        let meter = store.data().cpu.clone();
        cpu::metered(&meter, door.pre.instantiate_async(&mut store))
            .await
            .map(drop)
            .map_err(|e| anyhow::Error::from(e).context("instantiating the door component"))
    }

    /// Makes the previous door live again; None when there is none.
    pub fn rollback(&self) -> Option<swap::Swapped> {
        let swapped = self.doors.rollback()?;
        tracing::info!(
            old_version = swapped.old.version,
            old_digest = %swapped.old.door.digest,
            version = swapped.new.version,
            digest = %swapped.new.door.digest,
            "door rolled back"
        );
        Some(swapped)
    }

    /// SIGHUP: loads the `--component` file again and swaps to it.
    pub async fn reload(&self) {
        let Some(file) = &self.component_file else {
            tracing::info!("SIGHUP: serving the embedded door, no --component file to reload");
            return;
        };
        tracing::info!(path = %file.display(), "SIGHUP: reloading the door component");
        match swap::read_component(file, self.max_component_bytes).await {
            // A refusal is logged by swap.
            Ok(bytes) => drop(self.swap(bytes, file.display().to_string()).await),
            Err(e) => {
                tracing::warn!(path = %file.display(), error = %format!("{e:#}"), "door swap refused: the file cannot be read")
            }
        }
    }

    /// Accepts connections until the listener fails for good.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: pause, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let server = self.clone();
            tokio::spawn(async move {
                let limits = server.http;
                let service = service_fn(move |request| server.clone().handle(request));
                let connection = http1::Builder::new()
                    .keep_alive(true)
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .max_headers(limits.max_headers)
                    .max_buf_size(limits.max_header_bytes.max(8192))
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "connection ended");
                }
            });
        }
    }

    /// Answers one request; never fails, whatever the client or the door does.
    pub async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<HyperOutgoingBody>, Infallible> {
        let started = Instant::now();
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let (parts, body) = request.into_parts();
        if let Some(token) = self.control.as_ref().filter(|_| control::is_control(&path)) {
            let response = control::answer(&self, token, parts, body).await;
            tracing::debug!(%method, %path, status = response.status().as_u16(), micros = started.elapsed().as_micros() as u64, "control request");
            return Ok(response);
        }
        let serving = self.doors.serving();
        let version = serving.live().version;
        let max_body_bytes = self.http.max_body_bytes;
        let response = match Limited::new(body, max_body_bytes).collect().await {
            Ok(body) => {
                self.respond_on(serving, Request::from_parts(parts, body.to_bytes()))
                    .await
            }
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                Failure::TooLarge(max_body_bytes).response()
            }
            Err(_) => Failure::ClientGone.response(),
        };
        tracing::debug!(%method, %path, status = response.status().as_u16(), micros = started.elapsed().as_micros() as u64, door = version, "request");
        Ok(response)
    }

    /// Runs a fresh door instance on a request whose body has been read.
    pub async fn respond(&self, request: Request<Bytes>) -> Response<HyperOutgoingBody> {
        self.respond_on(self.doors.serving(), request).await
    }

    /// Runs a fresh instance of the door version `serving` holds.
    async fn respond_on(
        &self,
        serving: Serving,
        request: Request<Bytes>,
    ) -> Response<HyperOutgoingBody> {
        match self.run(serving, request).await {
            Ok(response) => response,
            Err(failure) => failure.response(),
        }
    }

    async fn run(
        &self,
        serving: Serving,
        request: Request<Bytes>,
    ) -> Result<Response<HyperOutgoingBody>, Failure> {
        let (mut parts, body) = request.into_parts();
        // wasi:http needs an authority; a request without a usable Host
        // (HTTP/1.0, a malformed value) reaches the door as sent to this
        // listener.
        let host_usable = parts
            .headers
            .get(hyper::header::HOST)
            .is_some_and(|h| h.to_str().is_ok());
        if parts.uri.authority().is_none() && !host_usable {
            parts
                .headers
                .insert(hyper::header::HOST, self.listener_authority.clone());
        }
        let request = Request::from_parts(
            parts,
            Full::new(body.clone())
                .map_err(|never| -> wasmtime_wasi_http::Error { match never {} }),
        );

        let mut store = self.store(&serving.live().door);
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let incoming = store
            .data_mut()
            .http()
            .new_incoming_request(Scheme::Http, request)
            .map_err(Failure::host)?;
        let outparam = store
            .data_mut()
            .http()
            .new_response_outparam(sender)
            .map_err(Failure::host)?;

        // The door runs in its own task so a body it streams can outlive the
        // response head. The task holds the door version until the guest
        // returns, after the body's last write: a stream opened on one
        // version finishes on it, whatever was swapped in meanwhile.
        let meter = store.data().cpu.clone();
        let failed = Failed::default();
        let failure = failed.clone();
        let task = tokio::spawn(async move {
            let door = async {
                let pre = &serving.live().door.pre;
                let proxy = pre.instantiate_async(&mut store).await?;
                proxy
                    .wasi_http_incoming_handler()
                    .call_handle(&mut store, incoming, outparam)
                    .await
            };
            let answered = cpu::metered(&meter, door).await;
            if let Err(trap) = &answered {
                // Before the store (and with it the body's sender) drops.
                let _ = failure.set(format!("{trap:#}"));
            }
            tracing::debug!(door = serving.live().version, "door instance done");
            answered
        });

        match receiver.await {
            Ok(Ok(response)) => Ok(response.map(|body| Guarded { body, failed }.boxed_unsync())),
            Ok(Err(code)) => Err(Failure::Guest(
                format!("the door answered an error: {code:?}"),
                body,
            )),
            Err(_) => {
                let why = match task.await {
                    Ok(Ok(())) => "the door returned without answering".to_string(),
                    Ok(Err(trap)) => format!("{trap:#}"),
                    Err(join) => format!("the door's task failed: {join}"),
                };
                Err(Failure::Guest(why, body))
            }
        }
    }
}

/// Why the door failed, once it has; set before its store drops.
type Failed = Arc<OnceLock<String>>;

/// A door's response body. A door that traps leaves its body unfinished, and
/// dropping the store would end that body as if it were whole; ended after a
/// failure, it ends with an error instead, so hyper cuts the connection and
/// the client can tell the response is incomplete.
struct Guarded {
    body: HyperOutgoingBody,
    failed: Failed,
}

impl hyper::body::Body for Guarded {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let (Poll::Ready(None), Some(why)) = (&polled, self.failed.get()) {
            tracing::error!(error = %clipped(why), "the door failed after its response head: the response is cut");
            return Poll::Ready(Some(Err(wasmtime_wasi_http::Error::InternalError(None))));
        }
        polled
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Why a request was answered by the host rather than the door.
enum Failure {
    /// The body is larger than its limit (`--max-body-bytes`).
    TooLarge(usize),
    /// The client stopped sending its body.
    ClientGone,
    /// The host could not set the request up.
    Host(String),
    /// The door trapped or answered nothing: the reason and the request body.
    Guest(String, Bytes),
}

impl Failure {
    fn host(e: impl std::fmt::Display) -> Failure {
        Failure::Host(e.to_string())
    }

    fn response(self) -> Response<HyperOutgoingBody> {
        match self {
            Failure::TooLarge(max) => plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                serde_json::json!({"error": "payload_too_large", "message": format!("the request body is larger than {max} bytes")}),
            ),
            Failure::ClientGone => plain(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"error": "bad_request", "message": "the request body could not be read"}),
            ),
            Failure::Host(why) => {
                tracing::error!(error = %why, "request setup failed");
                internal_error(None)
            }
            Failure::Guest(why, body) => {
                tracing::error!(error = %clipped(&why), "the door failed");
                internal_error(Some(&body))
            }
        }
    }
}

/// The answer to a request the door could not answer: -32603 when the body
/// is a JSON-RPC request with a valid id, else 500.
fn internal_error(body: Option<&Bytes>) -> Response<HyperOutgoingBody> {
    const MESSAGE: &str = "Internal error: the door failed while answering this request";
    match body.and_then(|body| request_id(body)) {
        Some(id) => plain(
            StatusCode::OK,
            serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": MESSAGE}}),
        ),
        None => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({"error": "internal", "message": MESSAGE}),
        ),
    }
}

/// At most [`LOGGED_BYTES`] of what a door said, for the log: a door may
/// put a megabyte in an error code.
fn clipped(why: &str) -> std::borrow::Cow<'_, str> {
    if why.len() <= LOGGED_BYTES {
        return why.into();
    }
    let mut end = LOGGED_BYTES;
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &why[..end], why.len()).into()
}

const LOGGED_BYTES: usize = 1024;

/// The JSON-RPC id of a body, when it is a string or an integer.
fn request_id(body: &[u8]) -> Option<serde_json::Value> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let id = value.get("id")?;
    (id.is_string() || id.is_i64() || id.is_u64()).then(|| id.clone())
}

fn plain(status: StatusCode, body: serde_json::Value) -> Response<HyperOutgoingBody> {
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON value serializes"));
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(
            Full::new(bytes)
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::{clipped, request_id};
    use serde_json::json;

    #[test]
    fn request_id_only_when_valid() {
        assert_eq!(request_id(br#"{"id":1}"#), Some(json!(1)));
        assert_eq!(request_id(br#"{"id":"a"}"#), Some(json!("a")));
        assert_eq!(request_id(br#"{"id":1.5}"#), None);
        assert_eq!(request_id(br#"{"id":null}"#), None);
        assert_eq!(request_id(b"nope"), None);
    }

    #[test]
    fn a_long_reason_is_clipped_for_the_log() {
        assert_eq!(clipped("trap"), "trap");
        let long = format!("é{}", "x".repeat(2000));
        assert_eq!(
            clipped(&long),
            format!("é{}… (2002 bytes in all)", "x".repeat(1022))
        );
    }
}
