//! The host's control surface, on a listener of its own (the capsules
//! file's `control.listen`), for the bearer of the host's control token
//! (minted at launch, or given in `MURMUR_DOOR_HOST_CONTROL_TOKEN`):
//!
//! - `GET /capsules` → every capsule: name, url, session, live door
//! - `POST /capsules`, an entry of the capsules file as JSON → 201 and its
//!   url; 422 naming the capsule and key when refused (the others are
//!   untouched)
//! - `DELETE /capsules/NAME` → the capsule closed as SIGTERM closes a door
//! - `POST /swap[?capsules=a,b]`, a component as the body or `{"path":
//!   ...}` → compiled once, live in the capsules named (every capsule, and
//!   those added later, without `capsules`)
//! - `POST /rollback[?capsules=a,b]` → each capsule's previous door
//! - `GET /metrics` → Prometheus text ([`Host::metrics`])
//! - `GET /healthz`, without the token → 200 `{"status": "ok"}`, for a
//!   scheduler's probes: the surface listens once every capsule of the file
//!   has opened, and stops first on SIGTERM
//!
//! Each capsule's own control surface still answers on its own listener.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tracing::Instrument;

use crate::hosting::host::{Host, UnknownCapsule};
use crate::hosting::roster::Entry;
use crate::surface::{self, Reply, bytes_reply, json_reply, refusal};
use crate::telemetry;
use crate::versions::control::{self, ControlToken};

/// Answered without the token, for a scheduler's liveness and readiness
/// probes.
pub const HEALTH_PATH: &str = "/healthz";

/// Bytes an entry sent to `POST /capsules` may have.
const MAX_ENTRY_BYTES: usize = 64 << 10;

/// The routes the surface serves, as [`surface::unrouted`] names them.
const ROUTES: [&str; 5] = ["/capsules", "/capsules/", "/swap", "/rollback", "/metrics"];

/// Serves the host's control surface on `listener` until the task is
/// dropped. Paths in entries are relative to `base`.
pub async fn serve(
    host: Arc<Host>,
    token: Arc<ControlToken>,
    base: PathBuf,
    listener: TcpListener,
) {
    let base = Arc::new(base);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let (host, token, base) = (host.clone(), token.clone(), base.clone());
        // A control client meets the header bound a door's clients meet.
        let header_timeout = host.http_limits().header_timeout;
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let (host, token, base) = (host.clone(), token.clone(), base.clone());
                let span = match telemetry::on() {
                    true => {
                        let path = request.uri().path();
                        let route = NAMED_ROUTES
                            .iter()
                            .copied()
                            .find(|r| route_matches(r, path));
                        telemetry::control_span(request.method(), route, request.headers())
                    }
                    false => tracing::Span::none(),
                };
                async move {
                    let reply = respond(&host, &token, &base, request)
                        .instrument(span.clone())
                        .await;
                    telemetry::served(&span, reply.status().as_u16(), None, false);
                    Ok::<_, Infallible>(reply)
                }
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The routes a traced request's span is named by.
const NAMED_ROUTES: &[&str] = &[
    HEALTH_PATH,
    "/capsules",
    "/capsules/{name}",
    "/metrics",
    "/swap",
    "/rollback",
];

/// Whether `path` is on `route`, whose `{name}` is one segment.
fn route_matches(route: &str, path: &str) -> bool {
    match route.strip_suffix("{name}") {
        Some(prefix) => path
            .strip_prefix(prefix)
            .is_some_and(|name| !name.is_empty() && !name.contains('/')),
        None => path == route,
    }
}

async fn respond(
    host: &Arc<Host>,
    token: &ControlToken,
    base: &std::path::Path,
    request: Request<Incoming>,
) -> Reply {
    let (parts, body) = request.into_parts();
    // A probe's: says the host is up (it listens once every capsule of its
    // file has opened, and stops first on SIGTERM), and nothing else.
    if parts.uri.path() == HEALTH_PATH && parts.method == Method::GET {
        return json_reply(StatusCode::OK, json!({"status": "ok"}));
    }
    // Before the body is read.
    if !token.admits(&parts) {
        return surface::unauthorized();
    }
    let names = chosen(parts.uri.query());
    let path = parts.uri.path().to_string();
    match (path.as_str(), &parts.method) {
        ("/capsules", &Method::GET) => json_reply(StatusCode::OK, host.list()),
        ("/metrics", &Method::GET) => bytes_reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Bytes::from(host.metrics()),
        ),
        ("/capsules", &Method::POST) => {
            let body = match surface::read_limited(body, MAX_ENTRY_BYTES, || {
                format!("an entry is at most {MAX_ENTRY_BYTES} bytes")
            })
            .await
            {
                Ok(body) => body,
                Err(refused) => return refused,
            };
            let entry = serde_yaml::from_slice::<serde_yaml::Value>(&body)
                .map_err(|e| e.to_string())
                .and_then(|v| Entry::parse(&v, base, "entry").map_err(|e| e.to_string()));
            let entry = match entry {
                Ok(entry) => entry,
                Err(why) => return refusal(StatusCode::UNPROCESSABLE_ENTITY, "refused", why),
            };
            let name = entry.name.clone();
            match host.add(entry).await {
                Ok(url) => json_reply(StatusCode::CREATED, json!({"name": name, "url": url})),
                Err(why) => refusal(StatusCode::UNPROCESSABLE_ENTITY, "refused", why.to_string()),
            }
        }
        (path, &Method::DELETE) if path.starts_with("/capsules/") => {
            let name = &path["/capsules/".len()..];
            if host.remove(name).await {
                json_reply(StatusCode::OK, json!({"removed": name}))
            } else {
                refusal(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    UnknownCapsule(name.to_string()).to_string(),
                )
            }
        }
        ("/swap", &Method::POST) => {
            let max = host.max_component_bytes();
            let body = match control::read_upload(body, max).await {
                Ok(body) => body,
                Err(refused) => return refused,
            };
            let (bytes, source, by_path) = match control::component(&parts, body, max).await {
                Ok(component) => component,
                Err(refused) => return refused,
            };
            match host.swap(bytes, source, names.as_deref()).await {
                Ok(done) => json_reply(
                    StatusCode::OK,
                    json!({
                        "digest": done.digest,
                        "swapped": done.swapped,
                        "refused": done.refused.iter().map(|(name, why)| json!({"name": name, "reason": why})).collect::<Vec<Value>>(),
                        "compileMs": done.compile.as_secs_f64() * 1000.0,
                        "tookMs": done.took.as_secs_f64() * 1000.0,
                    }),
                ),
                Err(e) if e.is::<UnknownCapsule>() => {
                    refusal(StatusCode::NOT_FOUND, "not_found", e.to_string())
                }
                Err(e) => control::swap_refused(&e, by_path),
            }
        }
        ("/rollback", &Method::POST) => match host.rollback(names.as_deref()) {
            Ok(rolled) => json_reply(StatusCode::OK, json!({"rolledBack": rolled})),
            Err(unknown) => refusal(StatusCode::NOT_FOUND, "not_found", unknown.to_string()),
        },
        (route, _) => surface::unrouted(
            &parts,
            route,
            &ROUTES,
            "the host's control surface serves /capsules, /capsules/NAME, /swap, /rollback and /metrics",
        ),
    }
}

/// The capsules `?capsules=a,b` names; None for every capsule.
fn chosen(query: Option<&str>) -> Option<Vec<String>> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("capsules="))?;
    Some(
        value
            .split(',')
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect(),
    )
}
