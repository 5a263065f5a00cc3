//! What both control surfaces are made of: the capsule's (under
//! `/.well-known/murmur/control`, `versions::control`) and the host's (on
//! a listener of its own, `hosting::host_control`). Each names its routes
//! in one `match`; this module reads the bounded bodies they take, writes
//! their JSON replies and refusals (`{"error": CODE, "message": ...}`),
//! and answers what no route matched: 405 for a route served with another
//! method, 404 for a path it does not serve.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

/// A control surface's reply.
pub type Reply = Response<HyperOutgoingBody>;

/// `body` as JSON with `status`, never kept by a cache.
pub fn json_reply(status: StatusCode, body: Value) -> Reply {
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON value serializes"));
    bytes_reply(status, "application/json", bytes)
}

/// `bytes` of `content_type` with `status`, never kept by a cache.
pub fn bytes_reply(status: StatusCode, content_type: &'static str, bytes: Bytes) -> Reply {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("cache-control", "no-store")
        .body(
            Full::new(bytes)
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("a valid response")
}

/// A refusal: `{"error": code, "message": message}` with `status`.
pub fn refusal(status: StatusCode, code: &str, message: String) -> Reply {
    json_reply(status, json!({"error": code, "message": message}))
}

/// 401 for a request without the surface's token, before its body is read.
pub fn unauthorized() -> Reply {
    let mut reply = refusal(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "the control surface needs Authorization: Bearer <control token>".into(),
    );
    reply.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    reply
}

/// What no route of a surface matched. `route` is the path as the surface
/// names its routes; `routes` are those it serves, a name ending in `/`
/// standing for every path under it (`/handles/` for
/// `/handles/<handleId>`). A route served with another method is 405, any
/// other path 404 saying `serves`.
pub fn unrouted(parts: &Parts, route: &str, routes: &[&str], serves: &str) -> Reply {
    let known = routes.iter().any(|served| match served.strip_suffix('/') {
        Some(_) => route.len() > served.len() && route.starts_with(served),
        None => route == *served,
    });
    match known {
        true => refusal(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{} is not served on {}", parts.method, parts.uri.path()),
        ),
        false => refusal(StatusCode::NOT_FOUND, "not_found", serves.to_string()),
    }
}

/// A body of at most `max` bytes; past it, 413 saying `why`.
pub async fn read_limited(
    body: Incoming,
    max: usize,
    why: impl FnOnce() -> String,
) -> Result<Bytes, Reply> {
    match Limited::new(body, max).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            why(),
        )),
        Err(_) => Err(refusal(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the request body could not be read".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, path: &str) -> Parts {
        hyper::Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    async fn body(reply: Reply) -> (StatusCode, Value) {
        let status = reply.status();
        let bytes = reply.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_route_served_otherwise_is_405_and_any_other_path_404() {
        let routes = ["", "/swap", "/handles", "/handles/"];
        let serves = "this surface serves /, /swap and /handles";
        let unrouted = |method, path: &str, route| {
            body(unrouted(&parts(method, path), route, &routes, serves))
        };
        let not_allowed = |message: &str| {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                json!({"error": "method_not_allowed", "message": message}),
            )
        };
        let not_found = (
            StatusCode::NOT_FOUND,
            json!({"error": "not_found", "message": serves}),
        );
        assert_eq!(
            unrouted("PUT", "/c/swap", "/swap").await,
            not_allowed("PUT is not served on /c/swap")
        );
        assert_eq!(
            unrouted("GET", "/c", "").await,
            not_allowed("GET is not served on /c")
        );
        assert_eq!(
            unrouted("PATCH", "/c/handles/h1", "/handles/h1").await,
            not_allowed("PATCH is not served on /c/handles/h1")
        );
        // `/handles/` names what is under it, not itself; nor a longer name.
        assert_eq!(unrouted("GET", "/c/handles/", "/handles/").await, not_found);
        assert_eq!(unrouted("GET", "/c/handlesx", "/handlesx").await, not_found);
        assert_eq!(unrouted("GET", "/c/swap/x", "/swap/x").await, not_found);
    }

    #[tokio::test]
    async fn a_refusal_is_an_error_code_and_a_message_never_cached() {
        let reply = unauthorized();
        assert_eq!(reply.headers()["www-authenticate"], "Bearer");
        assert_eq!(reply.headers()["cache-control"], "no-store");
        assert_eq!(reply.headers()["content-type"], "application/json");
        assert_eq!(
            body(reply).await,
            (
                StatusCode::UNAUTHORIZED,
                json!({"error": "unauthorized", "message": "the control surface needs Authorization: Bearer <control token>"})
            )
        );
    }
}
