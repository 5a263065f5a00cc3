//! Many capsules on one port: a host's shared listener answers each request
//! with the capsule whose host name the request names. The name is the
//! request target's authority when it has one (an absolute-form target),
//! else its `Host` header; its port is ignored, and one trailing `.` with
//! it. Names match exactly, in any case: no wildcard. A request naming no
//! capsule, or no host at all, gets one answer, the same whatever it named
//! ([`unknown_host`]), so a client cannot learn which capsules a host
//! serves by asking.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::listener::server::Server;

/// The body of every request a shared listener has no capsule for.
pub const UNKNOWN_HOST: &str =
    r#"{"error":"unknown_host","message":"no capsule is served under this host name"}"#;

/// The capsules of a shared listener, by host name.
#[derive(Default)]
pub struct Hostnames {
    servers: RwLock<HashMap<String, Arc<Server>>>,
}

impl Hostnames {
    /// Requests for any of `names` (lowercase) reach `server` from now on.
    pub fn insert(&self, names: &[String], server: &Arc<Server>) {
        let mut servers = self.servers.write().unwrap_or_else(|e| e.into_inner());
        for name in names {
            servers.insert(name.clone(), server.clone());
        }
    }

    /// Requests for `names` reach no capsule from now on; those already
    /// answering finish.
    pub fn remove(&self, names: &[String]) {
        let mut servers = self.servers.write().unwrap_or_else(|e| e.into_inner());
        for name in names {
            servers.remove(name);
        }
    }

    /// The server of the capsule `request` names, if any.
    pub fn server<B>(&self, request: &Request<B>) -> Option<Arc<Server>> {
        let name = host_name(request)?;
        let name = match name.bytes().any(|b| b.is_ascii_uppercase()) {
            true => Cow::Owned(name.to_ascii_lowercase()),
            false => Cow::Borrowed(name),
        };
        let servers = self.servers.read().unwrap_or_else(|e| e.into_inner());
        servers.get(name.as_ref()).cloned()
    }
}

/// The host name a request names, without its port or a trailing `.`:
/// its target's authority, else its `Host` header.
pub fn host_name<B>(request: &Request<B>) -> Option<&str> {
    let authority = match request.uri().authority() {
        Some(authority) => authority.as_str(),
        None => request.headers().get(hyper::header::HOST)?.to_str().ok()?,
    };
    // Userinfo is allowed in neither (RFC 9110, section 4.2.4): a request
    // carrying it names no capsule, rather than the one after its `@`.
    if authority.contains('@') {
        return None;
    }
    let host = authority;
    let host = match host.strip_prefix('[') {
        // An IPv6 literal: never a capsule's name, but not cut at its colons.
        Some(_) => host.split_inclusive(']').next().unwrap_or(host),
        None => host.split(':').next().unwrap_or(host),
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    (!host.is_empty()).then_some(host)
}

/// The answer to a request for a host name the listener serves no capsule
/// under: 404, and a body that names none.
pub fn unknown_host() -> Response<HyperOutgoingBody> {
    Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::CACHE_CONTROL, "no-store")
        .body(
            Full::new(Bytes::from_static(UNKNOWN_HOST.as_bytes()))
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(target: &str, host: Option<&str>) -> Option<String> {
        let mut request = Request::builder().uri(target);
        if let Some(host) = host {
            request = request.header("host", host);
        }
        host_name(&request.body(()).unwrap()).map(str::to_string)
    }

    #[test]
    fn a_request_names_its_host_without_port_or_trailing_dot() {
        let cases = [
            ("/", Some("alpha.example.com"), Some("alpha.example.com")),
            (
                "/",
                Some("alpha.example.com:8080"),
                Some("alpha.example.com"),
            ),
            ("/", Some("Alpha.Example.COM."), Some("Alpha.Example.COM")),
            ("/", Some("[::1]:8080"), Some("[::1]")),
            ("/", Some(""), None),
            ("/", Some(":8080"), None),
            ("/", None, None),
            // An absolute-form target's authority wins over Host (RFC 9112).
            (
                "http://beta.example.com:1/",
                Some("alpha.example.com"),
                Some("beta.example.com"),
            ),
            // Issue 47: userinfo names no host, in either place.
            ("/", Some("x@alpha.example.com"), None),
            ("/", Some("x:y@alpha.example.com:8080"), None),
            ("/", Some("@alpha.example.com"), None),
            (
                "http://x@beta.example.com/",
                Some("alpha.example.com"),
                None,
            ),
        ];
        for (target, host, expected) in cases {
            assert_eq!(
                named(target, host).as_deref(),
                expected,
                "{target} {host:?}"
            );
        }
    }
}
