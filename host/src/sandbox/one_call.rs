//! The door's one-call answer (`murmur:door/answer`): the request's head
//! lowered once, its body read through `request-body` only when the door
//! asks for it, and the answer lifted once, or, for a stream, its head
//! readied when the door opens `response-stream` (and sent with what the
//! door writes before it first waits) and its events written there within
//! the same call. A request then costs one call instead of the ~18
//! `wasi:http` calls and resources of the incoming handler, and a whole
//! answer no channel between the door and hyper. A door without the export
//! is answered through `wasi:http`.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::HeaderMap;
use hyper::http::request::Parts;
use wasmtime::Store;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;

use crate::bindings::answers::{Answers, FieldLine, Reply, RequestHead};
use crate::imports::request_body::BoxedBody;
use crate::imports::response_stream::{self, HeadSender};
use crate::imports::{Declared, Depends, FileDeclared};
use crate::sandbox::request::RequestState;

/// Asks the door `answers` belongs to for its answer to the request `parts`
/// and `body` make, and sends its head to `head`. An error is the door's
/// trap, or an answer the host will not send.
pub async fn answer(
    answers: &Answers,
    store: &mut Store<RequestState>,
    parts: &Parts,
    body: BoxedBody,
    head: HeadSender,
) -> wasmtime::Result<()> {
    let (fields, lines) = header_lines(&parts.headers);
    let request = RequestHead {
        method: parts.method.as_str(),
        path_with_query: parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        fields: &fields,
        lines: &lines,
    };
    let door = &mut store.data_mut().door;
    door.body = Some(body);
    door.head = Some(head);
    let reply = answers
        .murmur_door_answer()
        .call_answer(&mut *store, request)
        .await;
    let door = &mut store.data_mut().door;
    door.send_head();
    // A body the door did not read is not kept past the call.
    door.body = None;
    let head = door.head.take();
    let sent_file = door.sent_file.take();
    // What the door declared is noted only when the host may keep it.
    let keeping = door.keeping;
    let (response, depends, head) = match (reply?, head) {
        (Reply::Whole(response), Some(head)) => (response, None, head),
        (Reply::Reusable(r), Some(head)) => {
            let (at, len) = (r.id_at as usize, r.id_len as usize);
            (r.response, Some(Depends::Id { at, len }), head)
        }
        (Reply::ReusableFile(r), head) => {
            let declared = |sent| {
                Depends::File(FileDeclared {
                    path: r.file.path,
                    size: r.file.size,
                    modified: (r.file.modified_seconds, r.file.modified_nanoseconds),
                    sent,
                })
            };
            match (r.whole, head, sent_file) {
                (Some(response), Some(head), None) => (response, Some(declared(None)), head),
                // Sent through `send-file`: its head is out already.
                (None, None, Some(((status, headers), sent))) => {
                    store.data_mut().door.declared = keeping.then(|| Declared {
                        status,
                        headers,
                        body: Bytes::new(),
                        depends: declared(Some(sent)),
                    });
                    return Ok(());
                }
                _ => {
                    return Err(wasmtime::Error::msg(
                        "the door declared a file's answer it did not send",
                    ));
                }
            }
        }
        (Reply::Unread, Some(head)) => {
            let _ = head.send(Err(ErrorCode::InternalError(Some(
                "the request body could not be read whole".into(),
            ))));
            return Ok(());
        }
        (Reply::Streamed, None) => return Ok(()),
        (Reply::Streamed, Some(_)) => {
            return Err(wasmtime::Error::msg(
                "the door answered a stream it never opened",
            ));
        }
        (Reply::Whole(_) | Reply::Reusable(_) | Reply::Unread, None) => {
            return Err(wasmtime::Error::msg(
                "the door answered whole after opening a stream",
            ));
        }
    };
    let body = Bytes::from(response.body);
    let declared = depends.filter(|_| keeping).map(|depends| Declared {
        status: response.status,
        headers: response.headers.clone(),
        body: body.clone(),
        depends,
    });
    let length = match parts.method == hyper::Method::HEAD && body.is_empty() {
        // A HEAD's answer names the length its GET's body would have, and
        // has none.
        true => declared_length(&response.headers).unwrap_or(0),
        false => body.len(),
    };
    let body = Full::new(body)
        .map_err(|never| match never {})
        .boxed_unsync();
    let response =
        response_stream::response(response.status, response.headers, Some(length), body)?;
    store.data_mut().door.declared = declared;
    let _ = head.send(Ok(response));
    Ok(())
}

/// The `content-length` an answer's headers name, if one does.
pub fn declared_length(headers: &[(String, String)]) -> Option<usize> {
    headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse().ok())
}

/// The request's header lines as `request-head` carries them: every name
/// and value one after the other, and their lengths. Lowered as two lists
/// whatever the number of lines, where a list of strings would cost a call
/// into the door for each name and each value.
fn header_lines(headers: &HeaderMap) -> (Vec<u8>, Vec<FieldLine>) {
    let bytes = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    let mut fields = Vec::with_capacity(bytes);
    let mut lines = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        fields.extend_from_slice(name.as_str().as_bytes());
        fields.extend_from_slice(value.as_bytes());
        // hyper holds a head to `--max-header-bytes`, far under 4 GiB.
        lines.push(FieldLine {
            name_len: name.as_str().len() as u32,
            value_len: value.len() as u32,
        });
    }
    (fields, lines)
}
