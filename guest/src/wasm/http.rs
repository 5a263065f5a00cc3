//! The `wasi:http` edge: turns the incoming request into a [`Request`], runs
//! the door, and writes its [`Response`].

use wasip2::http::types::{
    ErrorCode, Fields, IncomingRequest, Method as HttpMethod, OutgoingBody, OutgoingResponse,
    ResponseOutparam,
};
use wasip2::io::streams::{OutputStream, StreamError};

use super::body::{pump, write_all};
use super::files;
use super::host::Host;
use crate::door::{self, Reply};
use crate::rpc::http::{Request, Response};

struct Door;

wasip2::http::proxy::export!(Door);

impl wasip2::exports::http::incoming_handler::Guest for Door {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let head = Request::new(
            method_name(request.method()),
            request.path_with_query().unwrap_or_else(|| "/".into()),
            request.headers().entries(),
        );
        let declared = head
            .header("content-length")
            .and_then(|n| n.parse::<usize>().ok());
        match door::handle_unless_unread(&Host, &head, || read_body(&request, declared)) {
            Reply::Whole(response) => write(out, response),
            Reply::Unread => ResponseOutparam::set(
                out,
                Err(ErrorCode::InternalError(Some(
                    "the request body could not be read whole".into(),
                ))),
            ),
            Reply::Stream(mut stream) => {
                let headers = std::mem::take(&mut stream.headers);
                let Some((body, sink)) = open(out, 200, headers) else {
                    return;
                };
                pump(stream, sink);
                let _ = OutgoingBody::finish(body, None);
            }
            Reply::File(file) => send_file(out, file),
        }
    }
}

/// A served file's head, then its bytes spliced from the file to the body
/// in the host, never through the door's memory. A file that shrank since
/// it was looked at leaves the body short, and unfinished: the client sees
/// it cut, not complete.
fn send_file(out: ResponseOutparam, file: crate::planes::FileBody) {
    let Some(descriptor) = files::open(&file.path) else {
        return write(out, door::refusal(&file.missing));
    };
    let Ok(input) = descriptor.read_via_stream(file.offset) else {
        return write(out, door::refusal(&file.missing));
    };
    let Some((body, sink)) = open(out, file.head.status, file.head.headers) else {
        return;
    };
    let mut left = file.len;
    while left > 0 {
        match sink.blocking_splice(&input, left.min(SPLICE_BYTES)) {
            Ok(0) | Err(_) => break,
            Ok(sent) => left -= sent,
        }
    }
    drop((input, sink));
    if left == 0 {
        let _ = OutgoingBody::finish(body, None);
    }
}

/// Bytes one splice of a served file moves at most.
const SPLICE_BYTES: u64 = 64 * 1024;

fn method_name(method: HttpMethod) -> String {
    match method {
        HttpMethod::Get => "GET".into(),
        HttpMethod::Head => "HEAD".into(),
        HttpMethod::Post => "POST".into(),
        HttpMethod::Put => "PUT".into(),
        HttpMethod::Delete => "DELETE".into(),
        HttpMethod::Connect => "CONNECT".into(),
        HttpMethod::Options => "OPTIONS".into(),
        HttpMethod::Trace => "TRACE".into(),
        HttpMethod::Patch => "PATCH".into(),
        HttpMethod::Other(other) => other,
    }
}

/// The whole body, in one buffer; None when the host could not deliver it
/// whole (it bounds bodies, and answers such a request itself).
fn read_body(request: &IncomingRequest, declared: Option<usize>) -> Option<Vec<u8>> {
    let body = request.consume().ok()?;
    let mut bytes = Vec::new();
    {
        let stream = body.stream().ok()?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => {
                    // The host refuses a declared length past its limit
                    // before the first byte, so once one arrives the
                    // declared length is safe to reserve at once.
                    if bytes.capacity() == 0
                        && let Some(declared) = declared
                    {
                        bytes.reserve_exact(declared);
                    }
                    bytes.extend_from_slice(&chunk);
                    // The host frames the body by its declared length: once
                    // that many bytes are here, asking again would only be
                    // told the stream is closed.
                    if declared == Some(bytes.len()) {
                        break;
                    }
                }
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(_)) => return None,
            }
        }
    }
    // Dropped rather than finished: the door reads no trailers.
    drop(body);
    Some(bytes)
}

fn write(out: ResponseOutparam, response: Response) {
    let Some((body, sink)) = open(out, response.status, response.headers) else {
        return;
    };
    if write_all(&sink, &response.body) {
        drop(sink);
        let _ = OutgoingBody::finish(body, None);
    }
}

/// Sends the head and returns the body to write.
fn open(
    out: ResponseOutparam,
    status: u16,
    headers: Vec<(String, String)>,
) -> Option<(OutgoingBody, OutputStream)> {
    let headers: Vec<(String, Vec<u8>)> = headers
        .into_iter()
        .map(|(name, value)| (name, value.into_bytes()))
        .collect();
    let fields =
        Fields::from_list(&headers).expect("the door writes valid header names and values");
    let outgoing = OutgoingResponse::new(fields);
    // A new response is 200 already: one host call fewer for most answers.
    if status != 200 {
        outgoing
            .set_status_code(status)
            .expect("the door writes valid status codes");
    }
    let body = outgoing.body().expect("a new response has a body");
    ResponseOutparam::set(out, Ok(outgoing));
    let sink = body.write().ok()?;
    Some((body, sink))
}
