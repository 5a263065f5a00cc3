//! The answers the host makes itself when the door does not answer: no
//! instance for the request, a body the host stopped reading, a door out of
//! memory or failed.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};
use std::time::Duration;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::listener::admission;
use crate::listener::body::{BodyFailure, Tally};
use crate::listener::connections::Throttled;
use crate::listener::redeems;
use crate::sandbox::memory::MemoryLimit;

/// Warnings a flood of clients could repeat without end, once a second.
static INSTANCES_FULL: Throttled = Throttled::new(Duration::from_secs(1));
static BODIES_FULL: Throttled = Throttled::new(Duration::from_secs(1));
pub static DOOR_FAILED: Throttled = Throttled::new(Duration::from_secs(1));
static MEMORY_FULL: Throttled = Throttled::new(Duration::from_secs(1));

/// Why a request was answered by the host rather than the door.
pub enum Failure {
    /// No door instance for it.
    Refused(admission::Refused),
    /// The door trapped, answered an error code or nothing: the reason,
    /// and the memory limit it met, if it met one.
    Guest(String, Option<MemoryLimit>),
}

impl Failure {
    /// The answer. A body the host stopped reading (too large, too slow, no
    /// room) is what made the door give up, so it is what the client hears.
    pub fn response(self, tally: &Tally) -> Response<HyperOutgoingBody> {
        if let Some(failure) = tally.failure() {
            return body_refused(failure);
        }
        match self {
            Failure::Refused(admission::Refused::CallerShare(share)) => retry_later(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                format!(
                    "this caller holds {share} door instances, its share; retry once one of its requests ends"
                ),
            ),
            Failure::Refused(admission::Refused::Full) => {
                if let Some(times) = INSTANCES_FULL.due() {
                    tracing::warn!(
                        times,
                        "every door instance is in use: requests are refused 503"
                    );
                }
                retry_later(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "busy",
                    "every door instance is in use; retry shortly".to_string(),
                )
            }
            // Out of memory: the request needs more than a door has, or the
            // doors together hold all they may. Either way it is not a fault.
            Failure::Guest(_, Some(MemoryLimit::Instance(max))) => plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                serde_json::json!({"error": "payload_too_large", "message": format!("serving this request needs more than the {} MiB of memory a door instance has (--max-memory-mb)", max >> 20)}),
            ),
            Failure::Guest(_, Some(MemoryLimit::Shared(max))) => {
                if let Some(times) = MEMORY_FULL.due() {
                    tracing::warn!(
                        times,
                        "the doors hold --max-door-memory-mb: requests are refused 503"
                    );
                }
                retry_later(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "busy",
                    format!(
                        "the door instances hold all the memory they may ({} MiB); retry shortly",
                        max >> 20
                    ),
                )
            }
            Failure::Guest(why, None) => {
                if let Some(times) = DOOR_FAILED.due() {
                    let rpc = tally.request_method();
                    tracing::error!(error = %clipped(&why), times, rpc = rpc.as_deref(), "the door failed");
                }
                internal_error(tally.request_id())
            }
        }
    }
}

/// The answer to a request whose body the host stopped reading.
fn body_refused(failure: BodyFailure) -> Response<HyperOutgoingBody> {
    match failure {
        BodyFailure::TooLarge(max) => plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            serde_json::json!({"error": "payload_too_large", "message": format!("the request body is larger than {max} bytes")}),
        ),
        BodyFailure::TooSlow(timeout) => plain(
            StatusCode::REQUEST_TIMEOUT,
            serde_json::json!({"error": "request_timeout", "message": format!("the request body did not arrive within {} ms", timeout.as_millis())}),
        ),
        BodyFailure::Busy => {
            if let Some(times) = BODIES_FULL.due() {
                tracing::warn!(
                    times,
                    "request bodies hold --max-body-memory-bytes: requests are refused 503"
                );
            }
            retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "the door holds as many request body bytes as it may; retry shortly".to_string(),
            )
        }
        BodyFailure::Broken => plain(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "bad_request", "message": "the request body could not be read"}),
        ),
    }
}

/// 429 for a client that spent its budget of failed redeems, with how
/// long it waits.
pub fn too_many_redeems(wait: std::time::Duration) -> Response<HyperOutgoingBody> {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut response = retry_later(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_redeems",
        format!(
            "more than {} failed redeems from this address in {} s: wait {seconds} s",
            redeems::BUDGET,
            redeems::WINDOW.as_secs()
        ),
    );
    response
        .headers_mut()
        .insert(hyper::header::RETRY_AFTER, seconds.into());
    response
}

/// A refusal the client may retry in a second.
fn retry_later(status: StatusCode, code: &str, message: String) -> Response<HyperOutgoingBody> {
    let mut response = plain(
        status,
        serde_json::json!({"error": code, "message": message}),
    );
    response.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    response
}

/// The answer to a request the door could not answer: -32603 with the
/// request's JSON-RPC id when its body's first bytes carry a valid one, else
/// 500.
fn internal_error(id: Option<serde_json::Value>) -> Response<HyperOutgoingBody> {
    const MESSAGE: &str = "Internal error: the door failed while answering this request";
    match id {
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
pub fn clipped(why: &str) -> std::borrow::Cow<'_, str> {
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
    use super::clipped;

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
