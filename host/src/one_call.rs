//! The door's one-call answer (`murmur:door/answer`): the request's head
//! lowered once, its body read through `request-body` only when the door
//! asks for it, and the whole answer lifted once. A short request then costs
//! one call instead of the ~18 `wasi:http` calls and resources of the
//! incoming handler, and no channel between the door and hyper.
//!
//! A request that opens a stream is handed back untouched (the door changes
//! nothing before it says so) and answered through `wasi:http`, as is every
//! request of a door without the export.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_LENGTH, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use wasmtime::Store;
use wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::bindings::answers::{Answers, Reply, RequestHead, Response as DoorResponse};
use crate::imports::request_body::{BoxedBody, OneCallBody};
use crate::request::RequestState;

/// What one call answered.
pub enum OneCall {
    Whole(Response<HyperOutgoingBody>),
    /// The body could not be read whole: the host answers for the door.
    Unread,
    /// For `wasi:http`'s incoming handler: a request that opens a stream,
    /// with its body.
    ToHandler(BoxedBody),
}

/// Asks the door `answers` belongs to for the whole answer to the request
/// `parts` and `body` make. An error is the door's trap, or an answer the
/// host will not send.
pub async fn answer(
    answers: &Answers,
    store: &mut Store<RequestState>,
    parts: &Parts,
    body: BoxedBody,
) -> wasmtime::Result<OneCall> {
    let headers: Vec<(&str, &[u8])> = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect();
    let head = RequestHead {
        method: parts.method.as_str(),
        path_with_query: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        headers: &headers,
    };
    store.data_mut().door.body = OneCallBody::Unread(body);
    let reply = answers
        .murmur_door_answer()
        .call_answer(&mut *store, head)
        .await;
    // Whatever the door did with it, the body is not kept past the call.
    let body = store.data_mut().door.body.take();
    Ok(match reply? {
        Reply::Whole(response) => OneCall::Whole(response_of(response)?),
        Reply::Unread => OneCall::Unread,
        Reply::OpensStream => OneCall::ToHandler(body.ok_or_else(|| {
            wasmtime::Error::msg("the door opened a stream after a body it could not read")
        })?),
    })
}

/// The door's answer as hyper sends it, held to what the `wasi:http` edge
/// lets a door send: a valid status, valid headers but none of the ones
/// `wasi:http` forbids, and a `content-length`, when it gives one, that is
/// the body's.
fn response_of(response: DoorResponse) -> wasmtime::Result<Response<HyperOutgoingBody>> {
    let status = StatusCode::from_u16(response.status).map_err(|_| {
        wasmtime::Error::msg(format!("the door answered status {}", response.status))
    })?;
    let length = response.body.len();
    let body = Full::new(Bytes::from(response.body))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut answer = Response::new(body);
    *answer.status_mut() = status;
    let headers = answer.headers_mut();
    headers.reserve(response.headers.len());
    for (name, value) in response.headers {
        let refused = || {
            wasmtime::Error::msg(format!(
                "the door answered a header it may not send: {name:?}"
            ))
        };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| refused())?;
        let value = HeaderValue::from_str(&value).map_err(|_| refused())?;
        if DEFAULT_FORBIDDEN_HEADERS.contains(&header)
            || (header == CONTENT_LENGTH && value.as_bytes() != length.to_string().as_bytes())
        {
            return Err(refused());
        }
        headers.append(header, value);
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn door_response(status: u16, headers: &[(&str, &str)], body: &str) -> DoorResponse {
        DoorResponse {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    /// What the door answers is sent as it wrote it: status, headers in
    /// order (repeated ones kept), and its body.
    #[tokio::test]
    async fn an_answer_is_sent_as_the_door_wrote_it() {
        let response = response_of(door_response(
            401,
            &[
                ("content-type", "application/json"),
                ("content-length", "2"),
                ("www-authenticate", "Bearer realm=\"a\""),
                ("www-authenticate", "Bearer realm=\"b\""),
            ],
            "{}",
        ))
        .unwrap();
        assert_eq!(response.status(), 401);
        let challenges: Vec<_> = response
            .headers()
            .get_all("www-authenticate")
            .iter()
            .collect();
        assert_eq!(challenges, ["Bearer realm=\"a\"", "Bearer realm=\"b\""]);
        assert_eq!(response.headers()["content-length"], "2");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "{}");
    }

    /// "What a head may not carry" (README, "What a client can make the host
    /// hold"): what the `wasi:http` edge refuses, the host refuses from a
    /// one-call answer too.
    #[test]
    fn what_wasi_http_refuses_is_refused_here() {
        let refused = |status, headers: &[(&str, &str)]| {
            response_of(door_response(status, headers, "{}"))
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(
            refused(1000, &[]).as_deref(),
            Some("the door answered status 1000")
        );
        for header in [
            ("connection", "close"),
            ("transfer-encoding", "chunked"),
            ("content-length", "3"),
            ("bad name", "x"),
            ("x-ok", "line\nbreak"),
        ] {
            assert_eq!(
                refused(200, &[header]),
                Some(format!(
                    "the door answered a header it may not send: {:?}",
                    header.0
                )),
                "{header:?}"
            );
        }
        assert_eq!(refused(200, &[("content-length", "2")]), None);
    }
}
