//! `murmur:door/events`: readers of the session's event log.
//!
//! The door holds an `events` resource; the request's table holds the
//! task layer's [`Reader`] under the same handle. The bindings know only
//! their marker type, so each call names the reader by the handle's rep.

use wasmtime::component::Resource;
use wasmtime_wasi::p2::DynPollable;

use super::DoorCtxView;
use crate::bindings::events::{Delivery, Events, Host, HostEvents};
use crate::bindings::task_store::{Caller, TaskError};
use crate::tasks::events::Reader;

/// The table's reader behind the door's handle.
fn reader(handle: &Resource<Events>) -> Resource<Reader> {
    if handle.owned() {
        Resource::new_own(handle.rep())
    } else {
        Resource::new_borrow(handle.rep())
    }
}

/// The handle the door holds for a reader the table took.
fn handle(reader: Resource<Reader>) -> Resource<Events> {
    Resource::new_own(reader.rep())
}

impl Host for DoorCtxView<'_> {
    fn latest(&mut self) -> wasmtime::Result<u64> {
        Ok(self.ctx.session.tasks.events().latest())
    }

    fn task_events(
        &mut self,
        caller: Caller,
        task_id: String,
        after: Option<u64>,
    ) -> wasmtime::Result<Result<Resource<Events>, TaskError>> {
        match self.ctx.session.tasks.task_events(&caller, &task_id, after) {
            Ok(reader) => {
                let reader = reader.for_version(self.ctx.version);
                Ok(Ok(handle(self.table.push(reader)?)))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    fn session_events(&mut self, after: Option<u64>) -> wasmtime::Result<Resource<Events>> {
        let reader = (self.ctx.session.tasks.session_events(after)).for_version(self.ctx.version);
        Ok(handle(self.table.push(reader)?))
    }
}

impl HostEvents for DoorCtxView<'_> {
    fn subscribe(&mut self, events: Resource<Events>) -> wasmtime::Result<Resource<DynPollable>> {
        wasmtime_wasi::p2::subscribe(self.table, reader(&events))
    }

    fn next(&mut self, events: Resource<Events>) -> wasmtime::Result<Option<Delivery>> {
        Ok(self.table.get_mut(&reader(&events))?.next_delivery())
    }

    fn keep_framed(
        &mut self,
        events: Resource<Events>,
        id: u64,
        stream_response: Vec<u8>,
    ) -> wasmtime::Result<()> {
        self.table
            .get_mut(&reader(&events))?
            .keep_framed(id, stream_response);
        Ok(())
    }

    /// Frees the reader: nothing of it is left in the log.
    fn drop(&mut self, events: Resource<Events>) -> wasmtime::Result<()> {
        self.table.delete(reader(&events))?;
        Ok(())
    }
}
