//! `murmur:door/events`: readers of the session's event log.
//!
//! The door holds an `events` resource; the request's table holds the
//! task layer's [`Reader`] under the same handle. The bindings know only
//! their marker type, so each call names the reader by the handle's rep.

use std::sync::{Arc, Weak};
use std::time::Duration;

use wasmtime::component::Resource;

use super::ctx::DoorCtxView;
use crate::bindings::events::{Events, Host, HostEvents, OutputStream, Passed};
use crate::bindings::task_store::{Caller, TaskError, TaskState};
use crate::session::tasks::events::{Claimed, Framing, Read, Reader};

pub use super::ctx::{FrameEvents, Framed};

/// How writing one framed event to a stream went.
enum Wrote {
    Whole,
    /// The event left the replay buffer before any of it was written: the
    /// stream reads on (it lagged).
    Skipped,
    /// The client left, or the event left the buffer half written.
    Cut,
}

/// Writes `framing` to `out` with `request_id` put in, a permit's worth
/// at a time. Between writes it holds the framing only weakly: a stream
/// whose client does not read keeps no event alive, only what it queued.
async fn write_framed(
    out: &mut OutputStream,
    framing: Weak<Framing>,
    request_id: &[u8],
    total: usize,
) -> Wrote {
    let mut at = 0;
    while at < total {
        let Ok(permit) = out.write_ready().await else {
            return Wrote::Cut;
        };
        let Some(framing) = framing.upgrade() else {
            return if at == 0 { Wrote::Skipped } else { Wrote::Cut };
        };
        let chunk = framing.copy_out(request_id, at, permit);
        drop(framing);
        at += chunk.len();
        if out.write(chunk).is_err() {
            return Wrote::Cut;
        }
    }
    match out.flush() {
        Ok(()) => Wrote::Whole,
        Err(_) => Wrote::Cut,
    }
}

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
        self.ctx.reads.other = true;
        Ok(self.ctx.session.tasks.events().latest())
    }

    fn task_events(
        &mut self,
        caller: Caller,
        task_id: String,
        after: Option<u64>,
    ) -> wasmtime::Result<Result<Resource<Events>, TaskError>> {
        self.ctx.reads.other = true;
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
        self.ctx.reads.other = true;
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
    /// such event costs a copy and a write, and no call into the door. An
    /// event not framed yet is framed once for every stream of the
    /// version, on an instance of its own, when the door exports `framing`.
    /// A stream's head held back goes once the loop waits for new events
    /// or hands the door anything but the stream's end, which the call's
    /// end sends with it ([`super::ctx::HeldHead`]).
    async fn pass_on(
        &mut self,
        events: Resource<Events>,
        out: Resource<OutputStream>,
        request_id: Vec<u8>,
        frames: bool,
        ends_at: Vec<TaskState>,
        wait_ms: u64,
    ) -> wasmtime::Result<Passed> {
        let passed = self
            .pass_framed_on(events, out, request_id, frames, ends_at, wait_ms)
            .await;
        if !matches!(passed, Ok(Passed::Ended)) {
            self.ctx.send_head();
        }
        passed
    }

    /// Frees the reader: nothing of it is left in the log.
    fn drop(&mut self, events: Resource<Events>) -> wasmtime::Result<()> {
        self.table.delete(reader(&events))?;
        Ok(())
    }
}

impl DoorCtxView<'_> {
    /// `events.pass-on`, but for the head.
    async fn pass_framed_on(
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
        let framer = self.ctx.framer.clone();
        loop {
            let reader = self.table.get_mut(&reader(&events))?;
            let read = match &framer {
                Some(framer) => match reader.read_claiming() {
                    Some(Claimed::Read(read)) => Some(read),
                    Some(Claimed::Frame(events)) => {
                        // In a task of its own: the framings are kept for
                        // every stream, whatever becomes of this one. Each
                        // claim is reported, framed or not.
                        let (log, version) = reader.log();
                        let log = log.clone();
                        let framer = framer.clone();
                        tokio::spawn(async move {
                            let ids: Vec<u64> = events.iter().map(|event| event.id).collect();
                            let mut framed = framer.frame(events).await.into_iter();
                            for id in ids {
                                log.framed(id, version, framed.next().flatten());
                            }
                        });
                        continue;
                    }
                    Some(Claimed::Wait) => {
                        tokio::select! {
                            biased;
                            () = reader.changed() => continue,
                            () = &mut idle => return Ok(Passed::Idle),
                        }
                    }
                    None => None,
                },
                None => reader.read(),
            };
            let Some(read) = read else {
                // Waiting for what is not there yet: the head goes first.
                self.ctx.send_head();
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
            } = read
            else {
                return Ok(Passed::Delivery(read.into_delivery()));
            };
            if frame && !frames {
                continue;
            }
            let ends = state.is_some_and(|state| ends_at.contains(&state));
            let total = framing.written_len(&request_id);
            let framing = Arc::downgrade(&framing);
            let out = self.table.get_mut(&out)?;
            match write_framed(out, framing, &request_id, total).await {
                Wrote::Whole if ends => return Ok(Passed::Ended),
                Wrote::Whole | Wrote::Skipped => {}
                Wrote::Cut => return Ok(Passed::Left),
            }
        }
    }
}
