//! `murmur:door/request-body`: the body of a request the door answers in
//! one call, read only when the door asks for it (step 5 of the check
//! order), within the limits [`crate::listener::body::RequestBody`] reads it under.
//! The host collects it whole and copies it into the door's memory; the
//! request keeps a reference to it until its answer is sent, for an answer
//! the door declares reusable (`crate::versions::reuse`), and no longer.

use http_body_util::BodyExt;

use crate::bindings::request_body::Host;
use crate::imports::ctx::DoorCtxView;

pub use crate::imports::ctx::BoxedBody;

impl Host for DoorCtxView<'_> {
    async fn read(&mut self) -> Option<Vec<u8>> {
        let body = self.ctx.body.take()?;
        // A body past a limit ends in an error, which the tally has noted:
        // the door answers `unread`, and the host answers for it.
        let bytes = body.collect().await.ok()?.to_bytes();
        if self.ctx.keeping {
            self.ctx.body_read = Some(bytes.clone());
        }
        Some(Vec::from(bytes))
    }
}
