//! Accepting a listener's connections, within the connections a capsule
//! or a host allows, and handing each request to the server that answers
//! it: a capsule's own ([`serve`]), or the one a request's host name names
//! on a host's shared listener ([`crate::listener::hostnames`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::listener::connections::{Throttled, WriteDeadline};
use crate::listener::hostnames::{self, Hostnames};
use crate::listener::server::{HttpLimits, Server, Shared};

/// Warnings a flood of clients could repeat without end, once a second.
static ACCEPT_FAILED: Throttled = Throttled::new(Duration::from_secs(1));
static CONNECTIONS_FULL: Throttled = Throttled::new(Duration::from_secs(1));

/// Accepts connections on `listener` for `server` alone until the task is
/// dropped; they close when it is shut.
pub async fn serve(server: Arc<Server>, listener: TcpListener) {
    let (shared, http, shut) = (
        server.shared().clone(),
        *server.http_limits(),
        server.shut_signal(),
    );
    accept(listener, Route::One(server), shared, http, shut).await;
}

/// Which server answers a connection's requests.
#[derive(Clone)]
pub enum Route {
    /// Every request: a capsule's listener of its own.
    One(Arc<Server>),
    /// Each request the capsule its host name names: a host's shared
    /// listener.
    Hostnames(Arc<Hostnames>),
}

impl Route {
    fn server<B>(&self, request: &Request<B>) -> Option<Arc<Server>> {
        match self {
            Route::One(server) => Some(server.clone()),
            Route::Hostnames(names) => names.server(request),
        }
    }
}

/// Accepts connections on `listener` until the task is dropped, within the
/// connections of `shared` and the limits `http`, and answers each request
/// with the server `route` picks for it. A connection closes once `shut`
/// turns true.
pub async fn accept(
    listener: TcpListener,
    route: Route,
    shared: Shared,
    limits: HttpLimits,
    shut: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors and the like: pause, keep serving.
                if let Some(times) = ACCEPT_FAILED.due() {
                    tracing::warn!(error = %e, times, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(registered) = shared.connections.admit() else {
            if let Some(times) = CONNECTIONS_FULL.due() {
                tracing::warn!(
                    max = shared.connections.max(),
                    times,
                    "every connection is answering a request: new connections are closed"
                );
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let route = route.clone();
        let mut shut = shut.clone();
        tokio::spawn(async move {
            let registered = Arc::new(registered);
            let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
            let on_connection = registered.clone();
            let service = service_fn(move |request: Request<Incoming>| {
                let server = route.server(&request);
                let busy = on_connection.begin();
                async move {
                    Ok::<_, Infallible>(match server {
                        Some(server) => server.handle(request, peer.ip(), busy).await,
                        None => hostnames::unknown_host(),
                    })
                }
            });
            let connection = http1::Builder::new()
                .keep_alive(true)
                // A client may send its request and close its sending
                // side; it is still answered.
                .half_close(true)
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_headers(limits.max_headers)
                .max_buf_size(limits.max_header_bytes.max(8192))
                .serve_connection(
                    WriteDeadline::new(
                        TokioIo::new(stream),
                        registered.clone(),
                        limits.write_timeout,
                    ),
                    service,
                );
            let served = async {
                match connection.without_shutdown().await {
                    Ok(parts) => linger(parts.io.into_inner().into_inner()).await,
                    Err(e) => tracing::debug!(error = %e, "connection ended"),
                }
            };
            tokio::select! {
                _ = served => {}
                _ = registered.evicted() => tracing::debug!("connection closed to let a new one in"),
                _ = registered.stream_client_gone(fd) => tracing::debug!("stream closed: its client has gone"),
                _ = shut.wait_for(|shut| *shut) => tracing::debug!("connection closed: the server is shut"),
            }
        });
    }
}

/// How long a connection closed with its last body unread keeps
/// discarding what the client still sends.
const LINGER: Duration = Duration::from_secs(2);

/// Closes a connection hyper is done with: the write side first, then what
/// the client still sends is read and discarded until it closes too, for
/// at most [`LINGER`]. A client refused before its body was read (401, 413)
/// is often still writing it; closing with its bytes unread would reset the
/// connection, and the reset can destroy the answer before the client reads
/// it.
async fn linger(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut discard = [0u8; 16 << 10];
    let drain = async {
        while let Ok(n) = stream.read(&mut discard).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}
