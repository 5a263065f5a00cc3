//! A response body as the host sends it: the door's body or the host's own,
//! holding its connection busy until it ends, counted for the metrics, and
//! cut rather than ended when the door failed after its head.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::listener::connections::Busy;
use crate::listener::failure::{DOOR_FAILED, clipped};
use crate::listener::metrics::{self, Metrics};
use crate::telemetry;

/// Why the door failed, once it has; set before its store drops.
pub type Failed = Arc<OnceLock<String>>;

/// A response body as the host sends it. It keeps its request's [`Busy`]
/// (in progress on its connection) until it is sent or dropped. (A frame
/// mapper could own the guard, but would lose the body's size hint, and
/// with it the content-length.)
pub struct ResponseBody {
    pub body: HyperOutgoingBody,
    /// None for an answer the host made itself.
    pub door: Option<DoorBody>,
    pub _busy: Option<Busy>,
    /// Counts the request when its first bytes (or its end) pass.
    pub probe: Option<Probe>,
    /// Counted as an open stream until it ends.
    pub stream: Option<OpenStream>,
    /// Counts a plane's body bytes as they pass.
    pub bytes: Option<prometheus_client::metrics::counter::Counter>,
    /// The request's span when traced: it ends with the body.
    pub traced: Option<Traced>,
}

/// A traced request's span, kept until its body ends; the body's first
/// bytes give it the JSON-RPC error code.
pub struct Traced {
    span: tracing::Span,
    read: bool,
}

impl Traced {
    pub fn new(span: tracing::Span) -> Traced {
        Traced { span, read: false }
    }
}

/// One open event stream, counted until it drops; traced, a span of its
/// own (a child of the request's) from its head to its end.
pub struct OpenStream {
    count: Arc<AtomicU64>,
    _span: Option<tracing::Span>,
}

impl OpenStream {
    pub fn new(count: &Arc<AtomicU64>) -> OpenStream {
        count.fetch_add(1, Ordering::Relaxed);
        OpenStream {
            count: count.clone(),
            _span: telemetry::on().then(|| tracing::debug_span!("stream", otel.kind = "internal")),
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request to count once its body's first bytes show its JSON-RPC error
/// code.
pub struct Probe {
    pub metrics: Arc<Metrics>,
    pub capsule: Arc<str>,
    pub request: metrics::Request,
    /// To the response head.
    pub seconds: f64,
}

impl Probe {
    fn count(mut self, first: Option<&[u8]>) {
        if let Some(first) = first {
            self.request.rpc_code = metrics::rpc_code(first);
        }
        self.metrics
            .request(&self.capsule, self.request, self.seconds);
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        if let Some(probe) = self.probe.take() {
            probe.count(None);
        }
    }
}

/// What a door's body needs. A door that traps leaves its body unfinished,
/// and dropping the store would end that body as if it were whole; ended
/// after a failure, it ends with an error instead, so hyper cuts the
/// connection and the client can tell the response is incomplete. Dropped
/// before its end (the client has gone), it stops the door, releasing its
/// instance.
pub struct DoorBody {
    pub failed: Failed,
    /// The door's task while the body has not ended.
    pub task: Option<tokio::task::AbortHandle>,
    /// The request's, for what is logged once its head has gone.
    pub span: tracing::Span,
}

impl ResponseBody {
    pub fn host(body: HyperOutgoingBody) -> ResponseBody {
        ResponseBody {
            body,
            door: None,
            _busy: None,
            probe: None,
            stream: None,
            bytes: None,
            traced: None,
        }
    }

    /// A whole body the host answers with.
    pub fn whole(body: Full<Bytes>) -> ResponseBody {
        ResponseBody::host(body.map_err(|never| match never {}).boxed_unsync())
    }

    /// The body, ending `traced` (the request's span) when it ends.
    pub fn traced(mut self, traced: Option<Traced>) -> ResponseBody {
        self.traced = traced;
        self
    }

    /// The body, holding `busy` until it ends, counted by `probe`.
    pub fn busy(mut self, busy: Busy, probe: Option<Probe>) -> HyperOutgoingBody {
        self._busy = Some(busy);
        self.probe = probe;
        self.boxed_unsync()
    }
}

impl Drop for DoorBody {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl hyper::body::Body for ResponseBody {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(bytes)) = (&polled, &self.bytes)
            && let Some(data) = frame.data_ref()
        {
            bytes.inc_by(data.len() as u64);
        }
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(probe) = self.probe.take()
        {
            probe.count(frame.data_ref().map(|data| &data[..]));
        }
        if let (Poll::Ready(Some(Ok(frame))), Some(traced)) = (&polled, self.traced.as_mut())
            && !traced.read
            && let Some(data) = frame.data_ref()
        {
            // Only the first bytes say.
            traced.read = true;
            if let Some(code) = metrics::error_code(data) {
                telemetry::rpc_error(&traced.span, code);
            }
        }
        if let (Poll::Ready(None), Some(door)) = (&polled, self.door.as_mut()) {
            door.task = None;
            if let Some(why) = door.failed.get() {
                let _request = door.span.enter();
                if DOOR_FAILED.due().is_some() {
                    tracing::error!(error = %clipped(why), "the door failed after its response head: the response is cut");
                }
                return Poll::Ready(Some(Err(wasmtime_wasi_http::Error::InternalError(None))));
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.door.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
