//! `murmur:door/request-body`: the body of a request the door answers in
//! one call, read whole only when the door asks for it (step 5 of the check
//! order), within the limits [`crate::body::RequestBody`] reads it under.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};

use crate::bindings::request_body::Host;
use crate::imports::DoorCtxView;

/// A request body as the door reads it.
pub type BoxedBody = UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>;

/// The body of the request a one-call answer serves.
#[derive(Default)]
pub enum OneCallBody {
    /// No request, or its body could not be read whole.
    #[default]
    Absent,
    /// Not asked for yet.
    Unread(BoxedBody),
    /// Read whole: kept until the call returns, for a request that turns out
    /// to open a stream and is handed, body and all, to `wasi:http`.
    Read(Bytes),
}

impl OneCallBody {
    /// The body to answer the same request through `wasi:http`.
    pub fn take(&mut self) -> Option<BoxedBody> {
        match std::mem::take(self) {
            OneCallBody::Absent => None,
            OneCallBody::Unread(body) => Some(body),
            OneCallBody::Read(bytes) => Some(
                Full::new(bytes)
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            ),
        }
    }
}

impl Host for DoorCtxView<'_> {
    async fn read(&mut self) -> Option<Vec<u8>> {
        let OneCallBody::Unread(body) = std::mem::take(&mut self.ctx.body) else {
            return None;
        };
        // A body past a limit ends in an error, which the tally has noted:
        // the door answers `unread`, and the host answers for it.
        let bytes = body.collect().await.ok()?.to_bytes();
        let copy = bytes.to_vec();
        self.ctx.body = OneCallBody::Read(bytes);
        Some(copy)
    }
}
