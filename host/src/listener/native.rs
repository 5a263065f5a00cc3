//! The native baseline (feature `native-door`): the door's rules, the
//! `murmur-door-guest` crate compiled into the host, answering on the same
//! server through the same import implementations as the wasm door, with no
//! wasm in between. It exists to be measured beside the component
//! (`bench/native.sh`); it has no sandbox, no memory or CPU limit, and is
//! never built by default.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper::{Request, Response};
use murmur_door_guest::imports::model::*;
use murmur_door_guest::imports::tree::{Preopened, StdDir};
use murmur_door_guest::{Imports, Reply};
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi_http::Error;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::bindings::{events, session, task_store as store, tokens};
use crate::imports::{DoorCtx, DoorCtxView};
use crate::session::Session;

// The same conversions the wasm door's edge makes.
include!("../../../guest/src/wasm/convert.rs");

/// Answers one request with the native door; `body` has been read whole.
pub async fn respond(
    session: Arc<Session>,
    request: Request<Bytes>,
) -> Response<HyperOutgoingBody> {
    let (parts, body) = request.into_parts();
    let head = murmur_door_guest::Request::new(
        parts.method.as_str(),
        parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes())),
    );
    let mut imports = Native::new(session, tokio::runtime::Handle::current());
    imports.path = parts.uri.path().to_string();
    // The rules run on the request's own task, as the component's instance
    // does; what blocks in them (a held SendMessage) blocks in place.
    match murmur_door_guest::handle(&imports, &head, || body.to_vec()) {
        Reply::Whole(response) => whole(response),
        Reply::File(file) => {
            // Opened as the component's `send-file` has the host open it.
            let planes = imports.call(|v| v.ctx.session.planes.clone());
            let opened = crate::manifest::planes::plane_of(parts.uri.path())
                .and_then(|plane| planes.open_served(plane, &file.path));
            match opened {
                Some((opened, _)) => {
                    let body = crate::imports::response_stream::file_bytes(
                        Arc::new(opened),
                        file.offset,
                        file.len,
                    );
                    let mut head = Response::builder().status(file.head.status);
                    for (name, value) in file.head.headers {
                        head = head.header(name, value);
                    }
                    head.body(body).expect("the door's head is valid")
                }
                None => whole(murmur_door_guest::door::refusal(&file.missing)),
            }
        }
        Reply::Unread => Response::builder()
            .status(500)
            .body(empty())
            .expect("a plain head is valid"),
        Reply::Stream(mut stream) => {
            let (frames, body) = tokio::sync::mpsc::channel::<Bytes>(32);
            let mut head = Response::builder().status(200);
            for (name, value) in std::mem::take(&mut stream.headers) {
                head = head.header(name, value);
            }
            // A stream waits for events for as long as it is open: a
            // thread of the blocking pool each.
            tokio::task::spawn_blocking(move || {
                murmur_door_guest::methods::streams::pump(&imports, stream, &mut |bytes| {
                    frames.blocking_send(Bytes::copy_from_slice(bytes)).is_ok()
                });
            });
            head.body(BodyExt::boxed_unsync(Chunks(body)))
                .expect("the door's head is valid")
        }
    }
}

fn whole(response: murmur_door_guest::Response) -> Response<HyperOutgoingBody> {
    let mut head = Response::builder().status(response.status);
    for (name, value) in response.headers {
        head = head.header(name, value);
    }
    let body = Full::new(Bytes::from(response.body)).map_err(|never| -> Error { match never {} });
    head.body(BodyExt::boxed_unsync(body))
        .expect("the door's head is valid")
}

fn empty() -> HyperOutgoingBody {
    BodyExt::boxed_unsync(
        http_body_util::Empty::<Bytes>::new().map_err(|never| -> Error { match never {} }),
    )
}

/// A stream's body: the chunks its pump sends, until it drops the sender.
struct Chunks(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// The imports as the wasm door's host calls answer them: a request's
/// context and table, called on the request's own thread.
struct Native {
    state: RefCell<(DoorCtx, ResourceTable)>,
    runtime: tokio::runtime::Handle,
    /// The request's path: a plane's request reads that plane's exports.
    path: String,
}

impl Native {
    fn new(session: Arc<Session>, runtime: tokio::runtime::Handle) -> Native {
        Native {
            state: RefCell::new((DoorCtx::new(session), ResourceTable::new())),
            runtime,
            path: String::new(),
        }
    }

    /// Runs `call` on the request's imports, as one host call.
    fn call<T>(&self, call: impl FnOnce(&mut DoorCtxView<'_>) -> T) -> T {
        let mut state = self.state.borrow_mut();
        let (ctx, table) = &mut *state;
        call(&mut DoorCtxView { ctx, table })
    }
}

impl Imports for Native {
    fn capsule(&self) -> Capsule {
        from_capsule(self.call(|v| session::Host::describe(v)))
    }

    fn identity(&self) -> Identity {
        from_identity(self.call(|v| session::Host::identify(v)))
    }

    fn exports(&self) -> Exports {
        let exports = self.call(|v| session::Host::exports(v));
        Exports {
            files: exports.files,
            peer_files: exports.peer_files,
            withheld: exports.withheld,
        }
    }

    type Dir = StdDir;

    /// The plane's roots read with `std::fs`: the baseline has no sandbox.
    fn preopens(&self) -> Preopened<StdDir> {
        let planes = self.call(|v| v.ctx.session.planes.clone());
        let roots = match planes.of(&self.path) {
            Some(exports) => exports.roots(&planes.workdir),
            None => Vec::new(),
        };
        Preopened::new(roots.into_iter().map(|root| {
            let dir = StdDir(planes.workdir.join(root.join("/")));
            (crate::manifest::planes::root_name(&root), dir)
        }))
    }

    fn redeem(&self, handle: &str, audience: &str) -> Option<Redeemed> {
        self.call(|v| tokens::Host::redeem_handle(v, handle.to_string(), audience.to_string()))
            .map(|r| Redeemed {
                handle_id: r.handle_id,
                path: r.path,
            })
    }

    fn verify(&self, token: &str) -> Option<Grant> {
        self.call(|v| tokens::Host::verify(v, token.to_string()))
            .map(from_grant)
    }

    fn stop(&self) -> Result<StopReport, String> {
        self.call(|v| session::Host::stop(v)).map(from_stop_report)
    }

    fn awaits_delegation(&self, delegation_id: &str) -> Result<(), CompletionRefusal> {
        self.call(|v| session::Host::awaits_delegation(v, delegation_id.to_string()))
            .map_err(completion_refusal)
    }

    fn deliver_completion(
        &self,
        delegation_id: &str,
        message: &str,
    ) -> Result<String, CompletionRefusal> {
        self.call(|v| {
            session::Host::deliver_completion(v, delegation_id.to_string(), message.to_string())
        })
        .map(|receipt| receipt.context_id)
        .map_err(completion_refusal)
    }

    fn start(&self, task: NewTask) -> Result<Started, TaskError> {
        let start = |v: &mut DoorCtxView<'_>| {
            tokio::task::block_in_place(|| {
                self.runtime
                    .block_on(store::Host::start(v, to_new_task(task)))
            })
        };
        self.call(start).map(from_started).map_err(task_error)
    }

    fn reply(
        &self,
        who: &Caller,
        task_id: &str,
        context_id: Option<&str>,
        text: &str,
    ) -> Result<Task, TaskError> {
        self.call(|v| {
            store::Host::reply(
                v,
                caller(who),
                task_id.to_string(),
                context_id.map(str::to_string),
                text.to_string(),
            )
        })
        .map(from_store)
        .map_err(task_error)
    }

    fn get(&self, who: &Caller, task_id: &str) -> Result<Task, TaskError> {
        self.call(|v| store::Host::get(v, caller(who), task_id.to_string()))
            .map(from_store)
            .map_err(task_error)
    }

    fn cancel(&self, who: &Caller, task_id: &str) -> Result<Task, TaskError> {
        self.call(|v| store::Host::cancel(v, caller(who), task_id.to_string()))
            .map(from_store)
            .map_err(task_error)
    }

    fn list(&self, who: &Caller, query: &ListQuery) -> Result<Page, TaskError> {
        self.call(|v| store::Host::list(v, caller(who), to_list_query(query)))
            .map(from_page)
            .map_err(task_error)
    }

    fn wait_settled(&self, who: &Caller, task_id: &str) -> Result<(), TaskError> {
        let mut settled = self
            .call(|v| v.ctx.session.tasks.settled(&caller(who), task_id))
            .map_err(task_error)?;
        tokio::task::block_in_place(|| {
            self.runtime
                .block_on(wasmtime_wasi::p2::Pollable::ready(&mut settled))
        });
        Ok(())
    }

    type Reader = Resource<events::Events>;

    fn latest_event(&self) -> u64 {
        self.call(|v| events::Host::latest(v)).unwrap_or(0)
    }

    fn task_events(
        &self,
        who: &Caller,
        task_id: &str,
        after: Option<u64>,
    ) -> Result<Self::Reader, TaskError> {
        self.call(|v| events::Host::task_events(v, caller(who), task_id.to_string(), after))
            .expect("the table has room for a reader")
            .map_err(task_error)
    }

    fn session_events(&self, after: Option<u64>) -> Self::Reader {
        self.call(|v| events::Host::session_events(v, after))
            .expect("the table has room for a reader")
    }

    /// The wasm door's host writes framed events itself; here the rules
    /// write every delivery. On a thread of the blocking pool.
    fn next_event(&self, reader: &Self::Reader, wait_ms: u64, _pass: &PassOn) -> Next {
        let mut state = self.state.borrow_mut();
        let reader = state
            .1
            .get_mut(&crate::imports::events::reader(reader))
            .expect("the reader is in the table");
        if let Some(delivery) = reader.next_delivery() {
            return Next::Delivery(from_delivery(delivery));
        }
        let waited = self.runtime.block_on(tokio::time::timeout(
            Duration::from_millis(wait_ms),
            reader.wait(),
        ));
        match waited.ok().and_then(|()| reader.next_delivery()) {
            Some(delivery) => Next::Delivery(from_delivery(delivery)),
            None => Next::Idle,
        }
    }

    fn keep_framed(&self, reader: &Self::Reader, framed: &Framed) {
        let reader = Resource::new_borrow(reader.rep());
        let _ = self.call(|v| {
            events::HostEvents::keep_framed(
                v,
                reader,
                framed.id,
                framed.sse.clone(),
                framed.request_id_at as u32,
            )
        });
    }

    fn new_message_id(&self) -> String {
        crate::session::tasks::ids::message_id()
    }
}
