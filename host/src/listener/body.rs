//! A request body as the door reads it: streamed, never collected by the
//! host, and bounded in size, time and the memory all bodies take together.
//!
//! The host does not read a body before the door asks for it. The reference's
//! check order reads the token (step 2) before the body (step 5), so a
//! request without a valid token is answered 401 having cost the host its
//! head, whatever its `Content-Length`. A body the door reads through
//! `wasi:http` arrives one chunk at a time and is copied into the door's own
//! memory; the host keeps one chunk and the first [`PREFIX_BYTES`] (to find
//! the JSON-RPC id should the door fail). One the door reads through
//! `request-body` (a one-call answer, [`crate::sandbox::one_call`]) is collected
//! whole, copied into the door's memory and dropped within that host call.
//! The budget counts its bytes either way.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::Error;

/// Bytes of a body the host keeps to find its JSON-RPC id.
pub const PREFIX_BYTES: usize = 4096;

/// Why a body was not read whole. The host answers the request for the door.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFailure {
    /// Longer than `--max-body-bytes`, declared or sent.
    TooLarge(usize),
    /// Not whole within `--body-timeout-ms` of its head.
    TooSlow(Duration),
    /// The bodies read at once hold `--max-body-memory-bytes`.
    Busy,
    /// The client stopped sending, or sent a malformed body.
    Broken,
}

/// The bytes of request bodies held at once across every connection
/// (`--max-body-memory-bytes`). A body holds what it has read until its
/// request's door instance ends, since the bytes live on in the door's memory.
#[derive(Clone, Debug)]
pub struct BodyBudget(Arc<Semaphore>);

impl BodyBudget {
    pub fn new(bytes: usize) -> BodyBudget {
        BodyBudget(Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))))
    }
}

/// What one request's body has cost and how it ended: its first bytes, why
/// it was not read whole, and the budget it took, held until the request's
/// door instance ends ([`Tally::release`]).
#[derive(Clone, Debug, Default)]
pub struct Tally(Arc<Mutex<TallyState>>);

#[derive(Debug, Default)]
struct TallyState {
    prefix: Vec<u8>,
    failure: Option<BodyFailure>,
    held: Option<OwnedSemaphorePermit>,
    /// The body, while it may still have bytes to read.
    rest: Option<Shared>,
    deadline: Option<Instant>,
}

type Shared = Arc<Mutex<Incoming>>;

impl TallyState {
    /// Keeps what of `data` the prefix has room for; false once it is whole.
    fn keep(&mut self, data: &[u8]) -> bool {
        let room = PREFIX_BYTES - self.prefix.len();
        self.prefix.extend_from_slice(&data[..data.len().min(room)]);
        self.prefix.len() < PREFIX_BYTES
    }
}

impl Tally {
    /// The tally of a body the host already holds whole.
    pub fn of(body: &[u8]) -> Tally {
        let tally = Tally::default();
        tally.0.lock().unwrap_or_else(|e| e.into_inner()).keep(body);
        tally
    }

    /// The JSON-RPC id within the first [`PREFIX_BYTES`] read (see
    /// [`request_id`]).
    pub fn request_id(&self) -> Option<serde_json::Value> {
        request_id(&self.0.lock().unwrap_or_else(|e| e.into_inner()).prefix)
    }

    /// The JSON-RPC method within the first [`PREFIX_BYTES`] read, for the
    /// logs (see [`request_method`]).
    pub fn request_method(&self) -> Option<String> {
        request_method(&self.0.lock().unwrap_or_else(|e| e.into_inner()).prefix)
    }

    /// Why the body was not read whole, once it was not.
    pub fn failure(&self) -> Option<BodyFailure> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).failure
    }

    /// Releases the budget the body took.
    pub fn release(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).held = None;
    }

    /// Reads the body on, within its deadline, until the prefix is whole:
    /// a door that failed before reading the body is answered with the id
    /// the body carries.
    pub async fn read_prefix(&self) {
        let (rest, deadline) = {
            let state = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if state.failure.is_some() || state.prefix.len() >= PREFIX_BYTES {
                return;
            }
            match (&state.rest, state.deadline) {
                (Some(rest), Some(deadline)) => (rest.clone(), deadline),
                _ => return,
            }
        };
        let read = async {
            loop {
                let frame = std::future::poll_fn(|cx| {
                    Pin::new(&mut *rest.lock().unwrap_or_else(|e| e.into_inner())).poll_frame(cx)
                })
                .await;
                let Some(Ok(frame)) = frame else { return };
                let Ok(data) = frame.into_data() else { return };
                if !self.0.lock().unwrap_or_else(|e| e.into_inner()).keep(&data) {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout_at(deadline, read).await;
    }
}

/// The limits a body is read under.
#[derive(Clone, Debug)]
pub struct BodyLimits {
    pub max_bytes: usize,
    pub timeout: Duration,
    pub budget: BodyBudget,
}

/// A request's body, bounded by [`BodyLimits`], ending in
/// [`Error::InternalError`] when a limit is hit (the door reads that as a body
/// it cannot read, and the host answers from the [`Tally`]).
pub struct RequestBody {
    inner: Shared,
    limits: BodyLimits,
    read: usize,
    deadline: Instant,
    /// Armed only once the body keeps the door waiting: most bodies have
    /// arrived whole by the time the door reads them.
    timer: Option<Pin<Box<Sleep>>>,
    tally: Tally,
    done: bool,
}

impl RequestBody {
    /// `started` is when the request's head arrived.
    pub fn new(inner: Incoming, limits: BodyLimits, started: Instant) -> (RequestBody, Tally) {
        let tally = Tally::default();
        let inner = Arc::new(Mutex::new(inner));
        {
            let mut state = tally.0.lock().unwrap_or_else(|e| e.into_inner());
            state.rest = Some(inner.clone());
            state.deadline = Some(started + limits.timeout);
        }
        let body = RequestBody {
            inner,
            deadline: started + limits.timeout,
            timer: None,
            limits,
            read: 0,
            tally: tally.clone(),
            done: false,
        };
        (body, tally)
    }

    fn fail(&mut self, failure: BodyFailure) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        self.done = true;
        let mut state = self.tally.0.lock().unwrap_or_else(|e| e.into_inner());
        state.failure = Some(failure);
        state.rest = None;
        drop(state);
        Poll::Ready(Some(Err(Error::InternalError(Some(format!(
            "{failure:?}"
        ))))))
    }

    /// Takes `len` more bytes of the budget, or says the budget is spent.
    fn charge(&mut self, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        let Ok(permit) = self
            .limits
            .budget
            .0
            .clone()
            .try_acquire_many_owned(len as u32)
        else {
            return false;
        };
        let mut state = self.tally.0.lock().unwrap_or_else(|e| e.into_inner());
        match &mut state.held {
            Some(held) => held.merge(permit),
            None => state.held = Some(permit),
        }
        true
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        // A declared length past the limit is refused before any byte is
        // read (and before hyper sends `100 Continue`).
        if self.read == 0
            && self
                .size_hint()
                .exact()
                .is_some_and(|n| n > self.limits.max_bytes as u64)
        {
            let max = self.limits.max_bytes;
            return self.fail(BodyFailure::TooLarge(max));
        }
        let polled =
            Pin::new(&mut *self.inner.lock().unwrap_or_else(|e| e.into_inner())).poll_frame(cx);
        let frame = match polled {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                let deadline = self.deadline;
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.as_mut().poll(cx).is_ready() {
                    let timeout = self.limits.timeout;
                    return self.fail(BodyFailure::TooSlow(timeout));
                }
                return Poll::Pending;
            }
        };
        let Some(frame) = frame else {
            self.done = true;
            self.tally.0.lock().unwrap_or_else(|e| e.into_inner()).rest = None;
            return Poll::Ready(None);
        };
        let Ok(frame) = frame else {
            return self.fail(BodyFailure::Broken);
        };
        if Instant::now() >= self.deadline {
            let timeout = self.limits.timeout;
            return self.fail(BodyFailure::TooSlow(timeout));
        }
        let Some(data) = frame.data_ref() else {
            // Trailers: the door reads none.
            return Poll::Ready(Some(Ok(frame)));
        };
        let len = data.len();
        if self.read + len > self.limits.max_bytes {
            let max = self.limits.max_bytes;
            return self.fail(BodyFailure::TooLarge(max));
        }
        if !self.charge(len) {
            return self.fail(BodyFailure::Busy);
        }
        if self.read < PREFIX_BYTES {
            self.tally
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .keep(data);
        }
        self.read += len;
        // The door copies each chunk into its memory as it reads; the host
        // keeps none of them.
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.done
            || self
                .inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .size_hint()
    }
}

/// The JSON-RPC id of a body from its first bytes: the top-level `id` when
/// it is a string or an integer and appears within `prefix`.
pub fn request_id(prefix: &[u8]) -> Option<serde_json::Value> {
    top_level(prefix, "id").filter(|id| id.is_string() || id.is_i64() || id.is_u64())
}

/// The JSON-RPC method a body names within its first bytes, for the logs.
pub fn request_method(prefix: &[u8]) -> Option<String> {
    match top_level(prefix, "method")? {
        serde_json::Value::String(method) => Some(method),
        _ => None,
    }
}

/// The value of the top-level member `key` of a JSON object that may be
/// cut short after it.
fn top_level(prefix: &[u8], key: &str) -> Option<serde_json::Value> {
    use serde::de::{Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};

    /// Visits the object until `key`, whose value it keeps; then stops,
    /// since what follows may be cut.
    struct Member<'a> {
        key: &'a str,
        found: &'a mut Option<serde_json::Value>,
    }

    impl<'de> Visitor<'de> for Member<'_> {
        type Value = ();

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON-RPC request object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == self.key {
                    *self.found = Some(map.next_value()?);
                    return Err(A::Error::custom("the member is found"));
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }

    let mut found = None;
    let member = Member {
        key,
        found: &mut found,
    };
    let _ = serde_json::Deserializer::from_slice(prefix).deserialize_map(member);
    found
}

#[cfg(test)]
mod tests {
    use super::{request_id, request_method};
    use serde_json::json;

    #[test]
    fn request_id_only_when_valid() {
        assert_eq!(request_id(br#"{"id":1}"#), Some(json!(1)));
        assert_eq!(request_id(br#"{"id":"a"}"#), Some(json!("a")));
        assert_eq!(request_id(br#"{"id":1.5}"#), None);
        assert_eq!(request_id(br#"{"id":null}"#), None);
        assert_eq!(request_id(b"nope"), None);
        assert_eq!(request_id(br#"[{"id":1}]"#), None);
    }

    #[test]
    fn request_id_from_a_cut_body() {
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","params":{"a":[1,{"id":9}]},"id":"x","method":"Get"#),
            Some(json!("x"))
        );
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","params":{"a":"#), None);
        assert_eq!(
            request_method(br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"#).as_deref(),
            Some("GetTask")
        );
        assert_eq!(request_method(br#"{"method":7}"#), None);
    }
}
