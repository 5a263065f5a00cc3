//! The one-call edge (`murmur:door/answer`): the request's head comes in as
//! one record, the body is read through `request-body` only when the check
//! order reaches it, and a whole answer goes back as one record; a stream is
//! written, within the same call, to the body `response-stream` opens.
//! Beside it, the `framing` export frames events for the streams, on an
//! instance the host calls for nothing else.

use super::host::exports::murmur::door::answer::{
    FileRead, Guest, Reply as Wire, RequestHead, Response, Reusable, ReusableFile,
};
use super::host::exports::murmur::door::framing;
use super::host::murmur::door::events;
use super::host::murmur::door::{request_body, response_stream};
use super::host::{Host, export};
use crate::door::{self, Reply};
use crate::rpc::http::{self, Request, Reuse};

struct OneCall;

export!(OneCall with_types_in super::host);

impl Guest for OneCall {
    fn answer(head: RequestHead) -> Wire {
        let lines = head
            .lines
            .into_iter()
            .map(|line| (line.name_len, line.value_len))
            .collect();
        let request = Request::from_fields(head.method, head.path_with_query, head.fields, lines);
        match door::handle_unless_unread(&Host, &request, request_body::read) {
            Reply::Whole(response) => whole(response),
            Reply::Unread => Wire::Unread,
            Reply::Stream(mut stream) => {
                let headers = std::mem::take(&mut stream.headers);
                super::body::pump(stream, response_stream::open(200, &headers));
                Wire::Streamed
            }
            // The host opens the file, beneath the workdir and following
            // no link, and reads its bytes after the call.
            Reply::File(file) => {
                let head = file.head;
                if !response_stream::send_file(
                    head.status,
                    &head.headers,
                    &file.path,
                    file.offset,
                    file.len,
                ) {
                    return whole(door::refusal(&file.missing));
                }
                match file.read {
                    Some(read) => Wire::ReusableFile(ReusableFile {
                        whole: None,
                        file: file_read(read),
                    }),
                    None => Wire::Streamed,
                }
            }
        }
    }
}

fn whole(response: http::Response) -> Wire {
    let reuse = response.reuse;
    let response = Response {
        status: response.status,
        headers: response.headers,
        body: response.body,
    };
    match reuse {
        // An answer's body is far under 4 GiB (the door's memory).
        Some(Reuse::Id(id)) => Wire::Reusable(Reusable {
            response,
            id_at: id.at as u32,
            id_len: id.len as u32,
        }),
        Some(Reuse::File(read)) => Wire::ReusableFile(ReusableFile {
            whole: Some(response),
            file: file_read(read),
        }),
        None => Wire::Whole(response),
    }
}

fn file_read(read: http::FileRead) -> FileRead {
    FileRead {
        path: read.path,
        size: read.size,
        modified_seconds: read.modified.seconds,
        modified_nanoseconds: read.modified.nanoseconds,
    }
}

impl framing::Guest for OneCall {
    fn frame(event: events::Event) -> events::Framed {
        super::host::frame(event)
    }
}
