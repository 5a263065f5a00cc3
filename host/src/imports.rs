//! The host side of the door's imports (`wit/`): bindings, and the state each
//! request's store holds to answer them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::{
    RequestOptions, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use crate::cpu::Meter;
use crate::memory::DoorMemory;
use crate::session::Session;
use crate::tasks::events::Reader;
use crate::tokens;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "murmur:door/imports",
    with: {
        "wasi:io/poll": wasmtime_wasi::p2::bindings::io::poll,
        "murmur:door/events.events": crate::tasks::events::Reader,
    },
    // A reader handle the table does not hold is a host bug, not an answer:
    // it traps the request rather than panicking the host.
    imports: { "murmur:door/events": trappable },
    require_store_data_send: true,
    additional_derives: [PartialEq],
});

pub use murmur::door::{events, session, task_store, tokens as token_types};

/// What one request's store holds.
pub struct RequestState {
    pub session: Arc<Session>,
    /// The door's linear memory (`--max-memory-mb`, `--max-door-memory-mb`).
    pub memory: DoorMemory,
    /// The CPU the door has used since it last waited (`--max-cpu-ms`).
    pub cpu: Arc<Meter>,
    /// Set once the door has changed the session (started, continued or
    /// canceled a task, stopped the session, delivered a completion): a
    /// door failing after that had accepted its request.
    pub changed: Arc<AtomicBool>,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: NoOutgoingRequests,
    table: ResourceTable,
}

/// The door answers requests and sends none: the host's default hooks, with
/// outgoing HTTP refused (the crate's default sender is not compiled in).
struct NoOutgoingRequests;

impl WasiHttpHooks for NoOutgoingRequests {
    /// A stream's events queue up to this many writes ahead of the socket, so
    /// the door does not wait on the connection's task for every event.
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        32
    }

    fn send_request(
        &mut self,
        _request: hyper::Request<HyperOutgoingBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn Future<Output = OutgoingResult> + Send> {
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

type OutgoingResult = Result<
    (
        hyper::Response<HyperOutgoingBody>,
        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ),
    wasmtime_wasi_http::Error,
>;

/// Host resources (header fields, bodies, streams, pollables, event
/// readers) a request's door may hold at once; past it the host call that
/// would make one traps. A door needs a few dozen; the default of 1,000,000
/// would let a door pile up host memory the store's limits do not see.
pub const MAX_RESOURCES: usize = 1024;
/// Bytes one header fields object the door builds may hold; past it
/// `append` and `set` fail. With [`MAX_RESOURCES`] it keeps what a door can
/// make the host hold within 64 MiB.
pub const MAX_FIELDS_BYTES: usize = 64 << 10;

impl RequestState {
    pub fn new(session: Arc<Session>, memory: DoorMemory) -> RequestState {
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(MAX_FIELDS_BYTES);
        RequestState {
            session,
            memory,
            cpu: Arc::default(),
            changed: Arc::default(),
            // The door gets no environment, arguments, files or stdio.
            wasi: WasiCtx::builder().build(),
            http,
            hooks: NoOutgoingRequests,
            table,
        }
    }
}

impl WasiView for RequestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for RequestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl session::Host for RequestState {
    fn describe(&mut self) -> session::Capsule {
        self.session.capsule.clone()
    }

    fn closing(&mut self) -> bool {
        self.session.closing()
    }

    /// murmur.StopSession: every live task canceled, and what the session
    /// still runs.
    fn stop(&mut self) -> Result<session::StopReport, String> {
        self.changed.store(true, Ordering::Relaxed);
        self.session.tasks.stop()
    }

    fn awaits_delegation(
        &mut self,
        delegation_id: String,
    ) -> Result<(), session::CompletionRefusal> {
        self.session.tasks.awaits_delegation(&delegation_id)
    }

    fn deliver_completion(
        &mut self,
        delegation_id: String,
        message: String,
    ) -> Result<session::CompletionReceipt, session::CompletionRefusal> {
        let context_id = self
            .session
            .tasks
            .deliver_completion(&delegation_id, message)?;
        self.changed.store(true, Ordering::Relaxed);
        Ok(session::CompletionReceipt { context_id })
    }
}

impl RequestState {
    /// Notes a change the door made, when `result` says it made one.
    fn changing<T, E>(&self, result: Result<T, E>) -> Result<T, E> {
        if result.is_ok() {
            self.changed.store(true, Ordering::Relaxed);
        }
        result
    }
}

impl task_store::Host for RequestState {
    fn start(
        &mut self,
        task: task_store::NewTask,
    ) -> Result<task_store::Task, task_store::TaskError> {
        self.changing(self.session.tasks.start(task))
    }

    fn reply(
        &mut self,
        caller: task_store::Caller,
        task_id: String,
        context_id: Option<String>,
        text: String,
    ) -> Result<task_store::Task, task_store::TaskError> {
        let replied = self
            .session
            .tasks
            .reply(&caller, &task_id, context_id.as_deref(), text);
        self.changing(replied)
    }

    fn get(
        &mut self,
        caller: task_store::Caller,
        task_id: String,
    ) -> Result<task_store::Task, task_store::TaskError> {
        self.session.tasks.get(&caller, &task_id)
    }

    fn cancel(
        &mut self,
        caller: task_store::Caller,
        task_id: String,
    ) -> Result<task_store::Task, task_store::TaskError> {
        let canceled = self.session.tasks.cancel(&caller, &task_id);
        self.changing(canceled)
    }

    /// The WIT's `list` has no error case: a store that fails answers an
    /// empty page (and logs why).
    fn list(
        &mut self,
        caller: task_store::Caller,
        query: task_store::ListQuery,
    ) -> Result<task_store::Page, task_store::TaskError> {
        self.session.tasks.list(&caller, &query)
    }

    fn settled(
        &mut self,
        caller: task_store::Caller,
        task_id: String,
    ) -> Result<Resource<DynPollable>, task_store::TaskError> {
        let settled = self.session.tasks.settled(&caller, &task_id)?;
        let full = |e: &dyn std::fmt::Display| {
            task_store::TaskError::Unavailable(format!("the request holds too many resources: {e}"))
        };
        let resource = self.table.push(settled).map_err(|e| full(&e))?;
        wasmtime_wasi::p2::subscribe(&mut self.table, resource).map_err(|e| full(&e))
    }
}

impl events::Host for RequestState {
    fn latest(&mut self) -> wasmtime::Result<u64> {
        Ok(self.session.tasks.events().latest())
    }

    fn task_events(
        &mut self,
        caller: task_store::Caller,
        task_id: String,
        after: Option<u64>,
    ) -> wasmtime::Result<Result<Resource<Reader>, task_store::TaskError>> {
        match self.session.tasks.task_events(&caller, &task_id, after) {
            Ok(reader) => Ok(Ok(self.table.push(reader)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    fn session_events(&mut self, after: Option<u64>) -> wasmtime::Result<Resource<Reader>> {
        let reader = self.session.tasks.session_events(after);
        Ok(self.table.push(reader)?)
    }
}

impl events::HostEvents for RequestState {
    fn subscribe(&mut self, reader: Resource<Reader>) -> wasmtime::Result<Resource<DynPollable>> {
        wasmtime_wasi::p2::subscribe(&mut self.table, reader)
    }

    fn next(&mut self, reader: Resource<Reader>) -> wasmtime::Result<Option<events::Delivery>> {
        Ok(self.table.get_mut(&reader)?.next_delivery())
    }

    /// Frees the reader: nothing of it is left in the log.
    fn drop(&mut self, reader: Resource<Reader>) -> wasmtime::Result<()> {
        self.table.delete(reader)?;
        Ok(())
    }
}

impl token_types::Host for RequestState {
    fn verify(&mut self, token: String) -> Option<token_types::Grant> {
        let grant = self.session.tokens.verify(&token)?;
        let credential = match grant.credential {
            tokens::Credential::Operator => token_types::Credential::Operator,
            tokens::Credential::Declared(name) => token_types::Credential::Declared(name),
            tokens::Credential::Member(caller) => token_types::Credential::Member(caller),
        };
        let scopes = grant
            .scopes
            .iter()
            .fold(token_types::Scopes::empty(), |all, scope| {
                all | scope_flag(*scope)
            });
        Some(token_types::Grant { credential, scopes })
    }
}

fn scope_flag(scope: crate::manifest::Scope) -> token_types::Scopes {
    use crate::manifest::Scope;
    use token_types::Scopes;
    match scope {
        Scope::SendMessage => Scopes::SEND_MESSAGE,
        Scope::SendStreamingMessage => Scopes::SEND_STREAMING_MESSAGE,
        Scope::WatchSession => Scopes::WATCH_SESSION,
        Scope::GetTask => Scopes::GET_TASK,
        Scope::ListTasks => Scopes::LIST_TASKS,
        Scope::CancelTask => Scopes::CANCEL_TASK,
        Scope::SubscribeToTask => Scopes::SUBSCRIBE_TO_TASK,
        Scope::StopSession => Scopes::STOP_SESSION,
        Scope::ResourcesFiles => Scopes::RESOURCES_FILES,
    }
}
