//! The HTTP listener: one fresh store and door instance per request.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use wasmtime::{Store, StoreLimitsBuilder};
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::engine::{Door, MAX_MEMORY_BYTES};
use crate::imports::RequestState;
use crate::session::Session;

/// The largest request body the host reads.
pub const MAX_BODY_BYTES: usize = 16 << 20;

pub struct Server {
    pub door: Door,
    pub session: Arc<Session>,
    /// `host:port` of the listener, for requests that name no host.
    listener_authority: hyper::header::HeaderValue,
}

impl Server {
    pub fn new(door: Door, session: Arc<Session>) -> Server {
        let authority = session.capsule.url.trim_start_matches("http://");
        let listener_authority = hyper::header::HeaderValue::from_str(authority)
            .unwrap_or(hyper::header::HeaderValue::from_static("localhost"));
        Server {
            door,
            session,
            listener_authority,
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
                let service = service_fn(move |request| server.clone().handle(request));
                let connection = http1::Builder::new()
                    .keep_alive(true)
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
        let response = match Limited::new(body, MAX_BODY_BYTES).collect().await {
            Ok(body) => {
                self.respond(Request::from_parts(parts, body.to_bytes()))
                    .await
            }
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Failure::TooLarge.response(),
            Err(_) => Failure::ClientGone.response(),
        };
        tracing::debug!(%method, %path, status = response.status().as_u16(), micros = started.elapsed().as_micros() as u64, "request");
        Ok(response)
    }

    /// Runs a fresh door instance on a request whose body has been read.
    pub async fn respond(&self, request: Request<Bytes>) -> Response<HyperOutgoingBody> {
        match self.run(request).await {
            Ok(response) => response,
            Err(failure) => failure.response(),
        }
    }

    async fn run(&self, request: Request<Bytes>) -> Result<Response<HyperOutgoingBody>, Failure> {
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

        let limits = StoreLimitsBuilder::new()
            .memory_size(MAX_MEMORY_BYTES)
            .instances(8)
            .build();
        let mut store = Store::new(
            self.door.pre.engine(),
            RequestState::new(self.session.clone(), limits),
        );
        store.limiter(|state| &mut state.limits);
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
        // response head.
        let pre = self.door.pre.clone();
        let task = tokio::spawn(async move {
            let proxy = pre.instantiate_async(&mut store).await?;
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, incoming, outparam)
                .await
        });

        match receiver.await {
            Ok(Ok(response)) => Ok(response),
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

/// Why a request was answered by the host rather than the door.
enum Failure {
    /// The body is larger than [`MAX_BODY_BYTES`].
    TooLarge,
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
            Failure::TooLarge => plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                serde_json::json!({"error": "payload_too_large", "message": format!("the request body is larger than {MAX_BODY_BYTES} bytes")}),
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
                tracing::error!(error = %why, "the door failed");
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
    use super::request_id;
    use serde_json::json;

    #[test]
    fn request_id_only_when_valid() {
        assert_eq!(request_id(br#"{"id":1}"#), Some(json!(1)));
        assert_eq!(request_id(br#"{"id":"a"}"#), Some(json!("a")));
        assert_eq!(request_id(br#"{"id":1.5}"#), None);
        assert_eq!(request_id(br#"{"id":null}"#), None);
        assert_eq!(request_id(b"nope"), None);
    }
}
