//! `murmur:door/events`: readers of the session's event log.
//!
//! The door holds an `events` resource; the request's table holds the
//! task layer's [`Reader`] under the same handle. The bindings know only
//! their marker type, so each call names the reader by the handle's rep.

use std::time::Duration;

use wasmtime::component::Resource;

use super::DoorCtxView;
use crate::bindings::events::{Events, Host, HostEvents, OutputStream, Passed};
use crate::bindings::task_store::{Caller, TaskError, TaskState};
use crate::tasks::events::{Read, Reader};

/// The table's reader behind the door's handle.
pub(crate) fn reader(handle: &Resource<Events>) -> Resource<Reader> {
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
        let tasks = &self.ctx.session.tasks;
        let events = if self.ctx.started_by(&caller, &task_id) {
            Ok(tasks.events().task_reader(&task_id, after))
        } else {
            tasks.task_events(&caller, &task_id, after)
        };
        match events {
            Ok(reader) => {
                let reader = reader.for_version(self.ctx.version);
                Ok(Ok(handle(self.table.push(reader)?)))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    fn session_events(&mut self, after: Option<u64>) -> wasmtime::Result<Resource<Events>> {
        let reader = self
            .ctx
            .session
            .tasks
            .session_events(after)
            .for_version(self.ctx.version);
        Ok(handle(self.table.push(reader)?))
    }
}

impl HostEvents for DoorCtxView<'_> {
    fn keep_framed(
        &mut self,
        events: Resource<Events>,
        id: u64,
        sse: Vec<u8>,
        request_id_at: u32,
    ) -> wasmtime::Result<()> {
        self.table
            .get_mut(&reader(&events))?
            .keep_framed(id, sse, request_id_at as usize);
        Ok(())
    }

    /// The stream's loop for what its door version already framed: each
    /// such event costs a copy and a write, and no call into the door.
    async fn pass_on(
        &mut self,
        events: Resource<Events>,
        out: Resource<OutputStream>,
        request_id: Vec<u8>,
        frames: bool,
        ends_at: Vec<TaskState>,
        wait_ms: u64,
    ) -> wasmtime::Result<Passed> {
        // One timer for the whole call, however many events it passes on
        // (a timer set and cleared at each wait cost a delivery about 3%).
        let idle = tokio::time::sleep(Duration::from_millis(wait_ms));
        tokio::pin!(idle);
        loop {
            let reader = self.table.get_mut(&reader(&events))?;
            let Some(read) = reader.read() else {
                tokio::select! {
                    biased;
                    () = reader.wait() => continue,
                    () = &mut idle => return Ok(Passed::Idle),
                }
            };
            let Read::Framed {
                state,
                frame,
                framing,
                ..
            } = &read
            else {
                return Ok(Passed::Delivery(read.into_delivery()));
            };
            if state.is_some_and(|state| ends_at.contains(&state)) {
                // The door writes the event a stream ends on, and ends it.
                return Ok(Passed::Delivery(read.into_delivery()));
            }
            if *frame && !frames {
                continue;
            }
            let (first, rest) = framing.with_request_id(&request_id);
            let out = self.table.get_mut(&out)?;
            let written = match out.blocking_write_and_flush(first).await {
                Ok(()) if rest.is_empty() => Ok(()),
                Ok(()) => out.blocking_write_and_flush(rest).await,
                Err(e) => Err(e),
            };
            if written.is_err() {
                return Ok(Passed::Left);
            }
        }
    }

    /// Frees the reader: nothing of it is left in the log.
    fn drop(&mut self, events: Resource<Events>) -> wasmtime::Result<()> {
        self.table.delete(reader(&events))?;
        Ok(())
    }
}
