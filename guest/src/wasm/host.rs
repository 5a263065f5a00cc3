//! The host's imports (`murmur:door/session`, `tokens`, `task-store` and
//! `events`), bound by wit-bindgen and seen through [`Imports`], beside the
//! bindings of the one-call `answer` export (see `super::answer`): each call
//! converts the plain model into the generated types and the answer back, so
//! the rules never see a generated type.

use std::fmt::Write;

use crate::imports::Imports;
use crate::imports::model::{
    Caller, Capsule, CompletionRefusal, Credential, Cursor, Delivery, Event, EventBody, Exports,
    Framed, Grant, Identity, ImageLimits, ListQuery, MemberStatus, NewTask, Next, Origin, Page,
    PassOn, Redeemed, ResidueItem, RunningCommand, Scope, Started, Status, StopReport, Task,
    TaskAcceptance, TaskError, TaskMetadata, TaskState, Transport,
};
use crate::imports::tree::Preopened;

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:door/guest",
    with: {
        "wasi:io/poll@0.2.12": wasip2::io::poll,
        "wasi:io/streams@0.2.12": wasip2::io::streams,
        "wasi:io/error@0.2.12": wasip2::io::error,
    },
});

use murmur::door::{events, session, task_store as store, tokens};

/// The host's imports, seen through [`Imports`].
pub(super) struct Host;

impl Imports for Host {
    fn capsule(&self) -> Capsule {
        from_capsule(session::describe())
    }

    fn identity(&self) -> Identity {
        from_identity(session::identify())
    }

    fn exports(&self) -> Exports {
        let exports = session::exports();
        Exports {
            files: exports.files,
            peer_files: exports.peer_files,
            withheld: exports.withheld,
        }
    }

    type Dir = wasip2::filesystem::types::Descriptor;

    fn preopens(&self) -> Preopened<Self::Dir> {
        super::files::preopened()
    }

    fn verify(&self, token: &str) -> Option<Grant> {
        tokens::verify(token).map(from_grant)
    }

    fn redeem(&self, handle: &str, audience: &str) -> Option<Redeemed> {
        tokens::redeem_handle(handle, audience).map(|r| Redeemed {
            handle_id: r.handle_id,
            path: r.path,
        })
    }

    fn stop(&self) -> Result<StopReport, String> {
        session::stop().map(from_stop_report)
    }

    fn awaits_delegation(&self, delegation_id: &str) -> Result<(), CompletionRefusal> {
        session::awaits_delegation(delegation_id).map_err(completion_refusal)
    }

    fn deliver_completion(
        &self,
        delegation_id: &str,
        message: &str,
    ) -> Result<String, CompletionRefusal> {
        session::deliver_completion(delegation_id, message)
            .map(|receipt| receipt.context_id)
            .map_err(completion_refusal)
    }

    fn start(&self, task: NewTask) -> Result<Started, TaskError> {
        store::start(&to_new_task(task))
            .map(from_started)
            .map_err(task_error)
    }

    fn reply(
        &self,
        who: &Caller,
        task_id: &str,
        context_id: Option<&str>,
        text: &str,
    ) -> Result<Task, TaskError> {
        store::reply(&caller(who), task_id, context_id, text)
            .map(from_store)
            .map_err(task_error)
    }

    fn get(&self, who: &Caller, task_id: &str) -> Result<Task, TaskError> {
        store::get(&caller(who), task_id)
            .map(from_store)
            .map_err(task_error)
    }

    fn cancel(&self, who: &Caller, task_id: &str) -> Result<Task, TaskError> {
        store::cancel(&caller(who), task_id)
            .map(from_store)
            .map_err(task_error)
    }

    fn list(&self, who: &Caller, query: &ListQuery) -> Result<Page, TaskError> {
        store::list(&caller(who), &to_list_query(query))
            .map(from_page)
            .map_err(task_error)
    }

    fn wait_settled(&self, who: &Caller, task_id: &str) -> Result<(), TaskError> {
        // Blocks on the host's pollable: the request holds no thread while it
        // waits.
        store::settled(&caller(who), task_id)
            .map_err(task_error)?
            .block();
        Ok(())
    }

    type Reader = Reader;

    fn latest_event(&self) -> u64 {
        events::latest()
    }

    fn task_events(
        &self,
        who: &Caller,
        task_id: &str,
        after: Option<u64>,
    ) -> Result<Reader, TaskError> {
        events::task_events(&caller(who), task_id, after)
            .map(Reader::new)
            .map_err(task_error)
    }

    fn session_events(&self, after: Option<u64>) -> Reader {
        Reader::new(events::session_events(after))
    }

    /// The host waits, passing on what this door version framed: the
    /// request holds no thread while the stream is idle.
    fn next_event(&self, reader: &Reader, wait_ms: u64, pass: &PassOn) -> Next {
        let Some(out) = &*reader.out.borrow() else {
            // No body to write to: nothing can be delivered.
            return Next::Left;
        };
        let ends_at: Vec<store::TaskState> =
            pass.ends_at.iter().copied().map(to_store_state).collect();
        match reader
            .events
            .pass_on(out, &pass.request_id, pass.frames, &ends_at, wait_ms)
        {
            events::Passed::Delivery(delivery) => Next::Delivery(from_delivery(delivery)),
            events::Passed::Idle => Next::Idle,
            events::Passed::Left => Next::Left,
            events::Passed::Ended => Next::Ended,
        }
    }

    fn keep_framed(&self, reader: &Reader, framed: &Framed) {
        reader
            .events
            .keep_framed(framed.id, &framed.sse, framed.request_id_at as u32);
    }

    fn new_message_id(&self) -> String {
        // Time-ordered: the wall clock's milliseconds, then random bits.
        let now = wasip2::clocks::wall_clock::now();
        let ms = now.seconds * 1000 + u64::from(now.nanoseconds / 1_000_000);
        let random = wasip2::random::random::get_random_bytes(10);
        let mut id = String::with_capacity(36);
        let _ = write!(id, "msg_{:012x}", ms & 0xffff_ffff_ffff);
        for byte in random {
            let _ = write!(id, "{byte:02x}");
        }
        id
    }
}

/// Frames `event` for the streams of this door version (see
/// [`crate::methods::streams::frame_event`]).
pub(super) fn frame(event: events::Event) -> events::Framed {
    let Delivery::Event(event) = from_delivery(events::Delivery::Event(event)) else {
        unreachable!("an event converts to an event")
    };
    let framed = crate::methods::streams::frame_event(&Host, event);
    events::Framed {
        id: framed.id,
        state: framed.state.map(to_store_state),
        frame: framed.frame,
        sse: framed.sse,
        request_id_at: framed.request_id_at as u32,
    }
}

// The conversions between the imports' types and the door's model, shared
// with the host's native build of the door (its benchmark baseline).
include!("convert.rs");

/// A reader of the event log and the body its stream writes to.
pub(super) struct Reader {
    /// The stream's body, once open: the host passes framed events on to it.
    out: std::cell::RefCell<Option<std::rc::Rc<wasip2::io::streams::OutputStream>>>,
    events: events::Events,
}

impl Reader {
    /// The stream's body is open: the host may write to it.
    pub(super) fn pass_on_to(&self, out: std::rc::Rc<wasip2::io::streams::OutputStream>) {
        *self.out.borrow_mut() = Some(out);
    }

    fn new(events: events::Events) -> Reader {
        Reader {
            out: std::cell::RefCell::new(None),
            events,
        }
    }
}
