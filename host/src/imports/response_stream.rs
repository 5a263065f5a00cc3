//! `murmur:door/response-stream`: the body of an answer the door streams
//! from a one-call `answer`. Opening it readies the response head, sent
//! with what the door writes before it first waits ([`HeldHead`]); what the
//! door writes goes to hyper through `wasi:http`'s own outgoing body, in
//! writes of at most [`CHUNK_BYTES`] each, as many as
//! `--stream-queue-bytes` holds (as on the `wasi:http` edge), so an unread
//! stream queues that much in the host (128 KiB by default) before the
//! door waits.

use std::future::Future;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use hyper::header::{CONTENT_LENGTH, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use wasmtime::component::Resource;
use wasmtime_wasi::p2::{
    DynOutputStream, OutputStream as WasiOutputStream, Pollable, StreamResult,
};
use wasmtime_wasi_http::p2::body::{HostOutgoingBody, HyperOutgoingBody, StreamContext};
use wasmtime_wasi_http::{DEFAULT_FORBIDDEN_HEADERS, Error};

use crate::bindings::response_stream::{Host, OutputStream};
use crate::imports::ctx::{DoorCtxView, SentFile};

pub use crate::imports::ctx::{CHUNK_BYTES, HeadSender, HeldHead, QUEUE_BYTES, stream_chunks};

/// A stream's body with its head held back ([`HeldHead`]): the door's
/// writes queue behind it until the queue is full, when the head is sent
/// so that hyper takes them (a door waiting for room it never gets would
/// never end).
struct HeadFirst {
    inner: DynOutputStream,
    head: HeldHead,
}

#[wasmtime_wasi::async_trait]
impl Pollable for HeadFirst {
    async fn ready(&mut self) {
        // Sends the head when there is no room to wait for otherwise.
        let _ = WasiOutputStream::check_write(self);
        self.inner.ready().await
    }
}

#[wasmtime_wasi::async_trait]
impl WasiOutputStream for HeadFirst {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        let room = self.inner.check_write()?;
        if room == 0 {
            self.head.send();
        }
        Ok(room)
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}

/// A response as the door gave it, held to what the `wasi:http` edge lets a
/// door send: a valid status, valid headers but none of the ones `wasi:http`
/// forbids, and no `content-length` but the body's (`length`; a streamed
/// body has none).
pub fn response(
    status: u16,
    headers: Vec<(String, String)>,
    length: Option<usize>,
    body: HyperOutgoingBody,
) -> wasmtime::Result<Response<HyperOutgoingBody>> {
    let status = StatusCode::from_u16(status)
        .map_err(|_| wasmtime::Error::msg(format!("the door answered status {status}")))?;
    let mut answer = Response::new(body);
    *answer.status_mut() = status;
    let map = answer.headers_mut();
    map.reserve(headers.len());
    for (name, value) in headers {
        let refused = || {
            wasmtime::Error::msg(format!(
                "the door answered a header it may not send: {name:?}"
            ))
        };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| refused())?;
        let value = HeaderValue::from_str(&value).map_err(|_| refused())?;
        let wrong_length = header == CONTENT_LENGTH
            && length.is_none_or(|length| value.as_bytes() != length.to_string().as_bytes());
        if DEFAULT_FORBIDDEN_HEADERS.contains(&header) || wrong_length {
            return Err(refused());
        }
        map.append(header, value);
    }
    Ok(answer)
}

/// Bytes the first read of a served file takes; each read after it takes
/// twice the one before, up to [`MAX_FILE_CHUNK_BYTES`]. hyper asks for the
/// next read only once its queue (`--max-header-bytes`, 64 KiB) has room:
/// a client that takes nothing holds the first read, and one that stops
/// later at most the largest, until `--write-timeout-ms` drops it; a client
/// that reads is sent the file in reads large enough to keep up with it.
pub const FILE_CHUNK_BYTES: usize = 64 << 10;
/// The largest read of a served file.
pub const MAX_FILE_CHUNK_BYTES: usize = 512 << 10;

/// A served file's bytes, read a chunk at a time as hyper asks for them.
/// The first read is made on the request's own thread (it costs less there
/// than a trip through the blocking pool); the larger ones go through the
/// pool, so a slow disk never holds a worker for long.
struct FileBytes {
    file: Arc<std::fs::File>,
    offset: u64,
    left: u64,
    /// Bytes the next read takes.
    chunk: usize,
    reading: Option<tokio::task::JoinHandle<std::io::Result<Bytes>>>,
}

/// What `file` holds from `offset`, in `chunk`, as much as fits.
fn read_chunk(
    file: &std::fs::File,
    offset: u64,
    mut chunk: bytes::BytesMut,
) -> std::io::Result<Bytes> {
    let read = file.read_at(&mut chunk, offset)?;
    chunk.truncate(read);
    Ok(chunk.freeze())
}

impl hyper::body::Body for FileBytes {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let (offset, wanted) = (self.offset, self.left.min(self.chunk as u64) as usize);
        let read = if wanted <= FILE_CHUNK_BYTES && self.reading.is_none() {
            Ok(read_chunk(
                &self.file,
                offset,
                bytes::BytesMut::zeroed(wanted),
            ))
        } else {
            let file = self.file.clone();
            let reading = self.reading.get_or_insert_with(|| {
                // Allocated here, not on the blocking pool's thread: a
                // thread that allocates keeps a heap of its own.
                let chunk = bytes::BytesMut::zeroed(wanted);
                tokio::task::spawn_blocking(move || read_chunk(&file, offset, chunk))
            });
            let read = std::task::ready!(Pin::new(reading).poll(cx));
            self.reading = None;
            read
        };
        match read {
            // A file that shrank since the door looked at it: the body is
            // cut, never padded or finished short.
            Ok(Ok(chunk)) if chunk.is_empty() => {
                self.left = 0;
                Poll::Ready(Some(Err(Error::HttpResponseIncomplete)))
            }
            Ok(Ok(chunk)) => {
                self.offset += chunk.len() as u64;
                self.left -= chunk.len() as u64;
                self.chunk = (self.chunk * 2).min(MAX_FILE_CHUNK_BYTES);
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Ok(Err(e)) => {
                self.left = 0;
                Poll::Ready(Some(Err(Error::InternalError(Some(e.to_string())))))
            }
            Err(_) => {
                self.left = 0;
                Poll::Ready(Some(Err(Error::InternalError(None))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

/// `length` bytes of `file` from `offset`, as a response body.
pub fn file_bytes(file: Arc<std::fs::File>, offset: u64, length: u64) -> HyperOutgoingBody {
    FileBytes {
        file,
        offset,
        left: length,
        chunk: FILE_CHUNK_BYTES,
        reading: None,
    }
    .boxed_unsync()
}

impl Host for DoorCtxView<'_> {
    fn send_file(
        &mut self,
        status: u16,
        headers: Vec<(String, String)>,
        path: Vec<String>,
        offset: u64,
        length: u64,
    ) -> wasmtime::Result<bool> {
        // The export is enforced here, at the open: the file is reached
        // beneath the workdir following no link, opened without blocking,
        // and only served when the request's plane exports it and it is a
        // regular file. A door that names anything else sends nothing.
        let planes = &self.ctx.session.planes;
        let opened = (self.ctx.plane).and_then(|plane| planes.open_served(plane, &path));
        let Some((file, _)) = opened else {
            return Ok(false);
        };
        let head = self.ctx.head.take().ok_or_else(|| {
            wasmtime::Error::msg("the door sent a file with no request to answer")
        })?;
        let file = Arc::new(file);
        // Kept for an answer the door then declares reusable.
        let sent = SentFile {
            file: file.clone(),
            offset,
            length,
        };
        self.ctx.sent_file = Some(((status, headers.clone()), sent));
        let body = file_bytes(file, offset, length);
        let response = response(status, headers, Some(usize::try_from(length)?), body)?;
        let _ = head.send(Ok(response));
        Ok(true)
    }

    fn open(
        &mut self,
        status: u16,
        headers: Vec<(String, String)>,
    ) -> wasmtime::Result<Resource<OutputStream>> {
        self.ctx.reads.other = true;
        let head = self.ctx.head.take().ok_or_else(|| {
            wasmtime::Error::msg("the door opened a response stream with no request to answer")
        })?;
        // wasi:http's own outgoing body, bounded as the door's `wasi:http`
        // edge bounds it; dropping it unfinished ends the body once the
        // door drops the stream.
        let (mut outgoing, body) = HostOutgoingBody::new(
            StreamContext::Response,
            None,
            self.ctx.stream_chunks,
            CHUNK_BYTES,
        );
        let stream = outgoing
            .take_output_stream()
            .expect("a new body has its stream");
        let held = HeldHead::new(head, response(status, headers, None, body)?);
        self.ctx.held_head = Some(held.clone());
        let stream: DynOutputStream = Box::new(HeadFirst {
            inner: stream,
            head: held,
        });
        Ok(self.table.push(stream)?)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};

    use super::*;

    fn door_response(
        status: u16,
        headers: &[(&str, &str)],
        length: Option<usize>,
    ) -> wasmtime::Result<Response<HyperOutgoingBody>> {
        let headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let body = Full::new(Bytes::from_static(b"{}"))
            .map_err(|never| match never {})
            .boxed_unsync();
        response(status, headers, length, body)
    }

    /// What the door answers is sent as it wrote it: status, headers in
    /// order (repeated ones kept), and its body.
    #[tokio::test]
    async fn an_answer_is_sent_as_the_door_wrote_it() {
        let response = door_response(
            401,
            &[
                ("content-type", "application/json"),
                ("content-length", "2"),
                ("www-authenticate", "Bearer realm=\"a\""),
                ("www-authenticate", "Bearer realm=\"b\""),
            ],
            Some(2),
        )
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

    /// "What a head may not carry" (docs/operations.md, "What a client can make the host
    /// hold"): what the `wasi:http` edge refuses, the host refuses from a
    /// one-call answer too, and a streamed head carries no length.
    #[test]
    fn what_wasi_http_refuses_is_refused_here() {
        let refused = |status, headers: &[(&str, &str)], length| {
            door_response(status, headers, length)
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(
            refused(1000, &[], Some(2)).as_deref(),
            Some("the door answered status 1000")
        );
        for (header, length) in [
            (("connection", "close"), Some(2)),
            (("transfer-encoding", "chunked"), Some(2)),
            (("content-length", "3"), Some(2)),
            (("content-length", "2"), None),
            (("bad name", "x"), Some(2)),
            (("x-ok", "line\nbreak"), Some(2)),
        ] {
            assert_eq!(
                refused(200, &[header], length),
                Some(format!(
                    "the door answered a header it may not send: {:?}",
                    header.0
                )),
                "{header:?}"
            );
        }
        assert_eq!(refused(200, &[("content-length", "2")], Some(2)), None);
        assert_eq!(
            refused(200, &[("content-type", "text/event-stream")], None),
            None
        );
    }
}
