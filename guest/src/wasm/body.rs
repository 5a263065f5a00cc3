//! A response body written to its `wasi:io` output stream, on either edge:
//! every byte of an answer, or a stream's events until the stream ends.

use wasip2::io::streams::OutputStream;

use super::host::{Host, Reader};
use crate::methods::streams::{self, Stream};

/// Writes a stream's events to `sink` until the stream ends.
pub(super) fn pump(stream: Stream<Reader>, sink: OutputStream) {
    // Shared with the stream's reader, which hands it to the host to pass
    // framed events on; both are gone when the pump returns, before the
    // body ends.
    let sink = std::rc::Rc::new(sink);
    if let Some(reader) = stream.reader() {
        reader.pass_on_to(sink.clone());
    }
    streams::pump(&Host, stream, &mut |bytes| write_all(&sink, bytes));
}

/// Writes every byte; false once the client has left.
pub(super) fn write_all(sink: &OutputStream, bytes: &[u8]) -> bool {
    // blocking-write-and-flush takes at most 4096 bytes a call.
    bytes
        .chunks(4096)
        .all(|chunk| sink.blocking_write_and_flush(chunk).is_ok())
}
