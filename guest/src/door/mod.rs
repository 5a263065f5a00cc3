//! The door's check order ("What the door answers"): one function that reads
//! like the reference's list, each step a named call. Beside it, the Agent
//! Card ([`card`]) and who may call the door ([`security`]).

pub mod card;
pub mod security;

use serde_json::{Map, Value, json};

use crate::door::card::CardKind;
use crate::door::security::{TASK_ORIGIN, TASK_TRUST};
use crate::imports::Imports;
use crate::imports::model::{Caller, Capsule, CompletionRefusal, Origin, ResidueItem, Scope};
use crate::methods::extension_methods::Method;
use crate::methods::send::{self, Provenance};
use crate::methods::streams::{self, Stream};
use crate::methods::task::TaskJson;
use crate::methods::task_methods;
use crate::planes::{self, FILES_PLANE, FileBody, PEER_PLANE, Served, on_plane};
use crate::rpc::errors::{self, InvalidParams, RpcError};
use crate::rpc::extensions;
use crate::rpc::http::{Request, Response};
use crate::rpc::version;
use crate::rpc::{self, Id};

pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// What the door answers: a whole response, or a stream.
pub enum Reply<R> {
    Whole(Response),
    Stream(Stream<R>),
    /// A served file's head, then its bytes, which the edge sends from the
    /// file itself.
    File(FileBody),
    /// The body could not be read whole: too large, too slow, or cut. The
    /// host that bounds bodies knows which, and answers for the door.
    Unread,
}

impl<R> Reply<R> {
    /// The whole response; None for a stream.
    pub fn whole(self) -> Option<Response> {
        match self {
            Reply::Whole(response) => Some(response),
            Reply::Stream(_) | Reply::File(_) | Reply::Unread => None,
        }
    }
}

/// Answers one request. `read_body` is called at most once, and only when the
/// check order reaches the body (step 5).
pub fn handle<I: Imports>(
    imports: &I,
    request: &Request,
    read_body: impl FnOnce() -> Vec<u8>,
) -> Reply<I::Reader> {
    handle_unless_unread(imports, request, || Some(read_body()))
}

/// As [`handle`], for a body that may not be read whole: `read_body` answers
/// None, and the door [`Reply::Unread`].
pub fn handle_unless_unread<I: Imports>(
    imports: &I,
    request: &Request,
    read_body: impl FnOnce() -> Option<Vec<u8>>,
) -> Reply<I::Reader> {
    let capsule = imports.capsule();
    match check(imports, &capsule, request, read_body) {
        Ok(reply) => reply,
        Err(Refusal::Http(refusal)) => Reply::Whole(refused(&refusal, imports)),
        Err(Refusal::Rpc(id, error)) => Reply::Whole(rpc::error(&id, &error)),
    }
}

/// How a request is refused: an HTTP refusal, or a JSON-RPC error.
enum Refusal {
    Http(errors::Refusal),
    Rpc(Id, RpcError),
}

impl From<errors::Refusal> for Refusal {
    fn from(refusal: errors::Refusal) -> Refusal {
        Refusal::Http(refusal)
    }
}

fn check<I: Imports>(
    imports: &I,
    capsule: &Capsule,
    request: &Request,
    read_body: impl FnOnce() -> Option<Vec<u8>>,
) -> Result<Reply<I::Reader>, Refusal> {
    // 1. The card and the peer plane need no door token.
    if request.method == "GET" && request.path() == CARD_PATH {
        let card = card::public_card(request, capsule, &imports.identity());
        return Ok(Reply::Whole(card));
    }
    if on_plane(request.path(), PEER_PLANE) {
        if !capsule.peer_files_plane {
            return Err(errors::Refusal::PlaneNotDeclared("peer_files").into());
        }
        return Ok(served(planes::peer(imports, request)?));
    }
    // 2. The token, before the path, the body or the method is read.
    let grant = security::authenticate(request, capsule, imports)?;
    // 3. Peer consent, on every door.
    security::peer_consent(request, capsule)?;
    // 4. The operator plane: its scope, then the plane.
    if on_plane(request.path(), FILES_PLANE) {
        security::require_scope(grant.as_ref(), Scope::ResourcesFiles)?;
        if !capsule.files_plane {
            return Err(errors::Refusal::PlaneNotDeclared("files").into());
        }
        return Ok(served(planes::files(imports, request)?));
    }
    // 5. Anything but a POST / with content-type: application/json and a body.
    if !(request.method == "POST" && request.path() == "/" && is_json(request)) {
        return Err(errors::Refusal::NotFound.into());
    }
    let Some(body) = read_body() else {
        return Ok(Reply::Unread);
    };
    if body.is_empty() {
        return Err(errors::Refusal::NotFound.into());
    }
    // 6. and 7. A JSON body, then a JSON-RPC 2.0 request.
    let mut rpc = rpc::parse(&body).map_err(|(id, error)| Refusal::Rpc(id, error))?;
    // The parsed request holds what the door needs; a door's memory is
    // bounded, and the body may be most of it.
    drop(body);
    let fail = |error: RpcError| Refusal::Rpc(rpc.id.clone(), error);
    // 8. The A2A-Version header.
    version::check(request).map_err(fail)?;
    // 9. A completion addressed to another session.
    let completion = is_completion(request);
    if completion {
        completion_addressed_here(request, imports).map_err(fail)?;
    }
    // 10. The method; a completion is only ever a SendMessage.
    let method = Method::resolve(&rpc.method, capsule).map_err(fail)?;
    if completion && method != Method::SendMessage {
        return Err(fail(RpcError::method_not_found()));
    }
    // 11. The method's scope.
    if let Some(scope) = method.scope() {
        security::require_scope(grant.as_ref(), scope)?;
    }
    // A completion names a delegation some task waits for, before its params
    // are read ("Completion errors").
    if completion {
        delegation_awaited(request, imports).map_err(fail)?;
    }
    // 12. params, when present, is an object.
    let params = params_object(rpc.params.take()).map_err(fail)?;
    // 13. No tenant.
    no_tenant(&params).map_err(fail)?;
    // 14. The method itself.
    let call = Call {
        request,
        method,
        completion,
        params,
        caller: grant.map(|g| g.credential),
        id: &rpc.id,
    };
    serve(imports, capsule, &call).map_err(fail)
}

/// A plane's answer as the door's reply.
fn served<R>(served: Served) -> Reply<R> {
    match served {
        Served::Whole(response) => Reply::Whole(response),
        Served::File(body) => Reply::File(body),
    }
}

/// `content-type: application/json`, in any case, parameters allowed.
fn is_json(request: &Request) -> bool {
    request.header_once("content-type").is_some_and(|value| {
        let media_type = value.split(';').next().unwrap_or("").trim();
        media_type.eq_ignore_ascii_case("application/json")
    })
}

fn is_peer(request: &Request) -> bool {
    request
        .values(TASK_ORIGIN)
        .any(|v| v.eq_ignore_ascii_case("peer"))
}

fn is_completion(request: &Request) -> bool {
    request
        .values(TASK_ORIGIN)
        .any(|v| v.eq_ignore_ascii_case("completion"))
}

/// Step 9: -31001 unless `x-murmur-completion-session` names this session.
fn completion_addressed_here<I: Imports>(request: &Request, imports: &I) -> Result<(), RpcError> {
    let addressed = request
        .header_values("x-murmur-completion-session")
        .join(",");
    if addressed == imports.identity().session_id {
        Ok(())
    } else {
        Err(RpcError::completion_misaddressed(&addressed))
    }
}

/// -31002 unless `x-murmur-delegation-id` names a delegation a task awaits.
fn delegation_awaited(request: &Request, imports: &impl Imports) -> Result<(), RpcError> {
    let Some(id) = request
        .header("x-murmur-delegation-id")
        .filter(|id| !id.is_empty())
    else {
        return Err(RpcError::completion_not_awaited(None, false));
    };
    imports.awaits_delegation(&id).map_err(|refusal| {
        RpcError::completion_not_awaited(Some(&id), refusal == CompletionRefusal::Ending)
    })
}

/// Step 12: params omitted reads as {}.
fn params_object(params: Option<Value>) -> Result<Map<String, Value>, RpcError> {
    match params {
        None => Ok(Map::new()),
        Some(Value::Object(params)) => Ok(params),
        Some(_) => Err(RpcError::invalid_params(InvalidParams::ParamsNotObject)),
    }
}

/// Step 13: a tenant other than "" is refused; "" reads as absent.
fn no_tenant(params: &Map<String, Value>) -> Result<(), RpcError> {
    match params.get("tenant") {
        None => Ok(()),
        Some(Value::String(tenant)) if tenant.is_empty() => Ok(()),
        Some(tenant) => Err(RpcError::invalid_params(InvalidParams::Tenant(tenant))),
    }
}

/// A request that passed steps 1 to 13.
struct Call<'a> {
    request: &'a Request,
    method: Method,
    completion: bool,
    params: Map<String, Value>,
    /// Who asks the task store: none on a public door.
    caller: Caller,
    id: &'a Id,
}

/// Step 14: the method itself.
fn serve<I: Imports>(
    imports: &I,
    capsule: &Capsule,
    call: &Call,
) -> Result<Reply<I::Reader>, RpcError> {
    let Call {
        request,
        method,
        completion,
        params,
        caller,
        id,
    } = call;
    let (params, caller, id) = (params, caller, *id);
    let provenance = || Provenance {
        origin: if is_peer(request) {
            Origin::Peer
        } else {
            Origin::Client
        },
        trust: request.header(TASK_TRUST),
    };
    let response = match *method {
        Method::SendMessage if *completion => {
            let delegation_id = request.header("x-murmur-delegation-id").unwrap_or_default();
            return send::deliver_completion(imports, params, &delegation_id, id).map(Reply::Whole);
        }
        Method::SendMessage => {
            return send::send_message(imports, capsule, params, caller, provenance(), id)
                .map(Reply::Whole);
        }
        Method::SendStreamingMessage => {
            let stream = streams::send_streaming_message(
                imports,
                capsule,
                request,
                params,
                caller,
                provenance(),
                id,
            )?;
            return Ok(Reply::Stream(stream));
        }
        Method::SubscribeToTask => {
            return Ok(Reply::Stream(streams::subscribe_to_task(
                imports, request, params, caller, id,
            )?));
        }
        Method::WatchSession => {
            return Ok(Reply::Stream(streams::watch_session(
                imports, capsule, request, id,
            )));
        }
        // A task and a page are what the store holds: the same request from
        // the same caller answers the same bytes until a write changes them.
        Method::GetTask => {
            let task = task_methods::get_task(imports, params, caller)?;
            rpc::reusable_result(id, &TaskJson::as_held(&task))
        }
        Method::CancelTask => {
            let task = task_methods::cancel_task(imports, params, caller)?;
            rpc::result(id, &TaskJson::as_held(&task))
        }
        Method::ListTasks => {
            rpc::reusable_result(id, &task_methods::list_tasks(imports, params, caller)?)
        }
        Method::GetExtendedAgentCard => {
            let identity = imports.identity();
            rpc::result(id, &card::card(capsule, &identity, CardKind::Extended))
        }
        Method::StopSession => {
            let report = imports
                .stop()
                .map_err(|why| RpcError::stop_unrecorded(&why))?;
            let result = json!({
                "canceled": report.canceled,
                "residue": report.residue.iter().map(residue_item).collect::<Vec<_>>(),
                "session_id": imports.identity().session_id,
            });
            return Ok(Reply::Whole(
                rpc::result(id, &result).with_header(extensions::HEADER, extensions::DOOR),
            ));
        }
        // Step 10 answers the push config methods.
        Method::PushConfig => return Err(RpcError::push_not_supported()),
    };
    Ok(Reply::Whole(response))
}

/// A residue item as murmur.StopSession lists it, keys in the reference's
/// example order.
fn residue_item(item: &ResidueItem) -> Value {
    match item {
        ResidueItem::DetachedShell {
            work_id,
            binary,
            command,
            started_at_ms,
        } => json!({
            "binary": binary, "command": command, "kind": "detached_shell",
            "started_at_ms": started_at_ms, "work_id": work_id,
        }),
        ResidueItem::Delegation {
            delegation_id,
            capsule,
            version,
            child_session_id,
            child_workdir,
        } => json!({
            "capsule": capsule, "child_session_id": child_session_id, "child_workdir": child_workdir,
            "delegation_id": delegation_id, "kind": "delegation", "version": version,
        }),
    }
}

/// An HTTP refusal: `{"error", "message"}` and, on the token and scope
/// refusals, `www-authenticate`.
fn refused<I: Imports>(refusal: &errors::Refusal, imports: &I) -> Response {
    let mut response = refusal_body(refusal);
    if let Some(challenge) = refusal.www_authenticate(|| imports.identity().name) {
        response = response.with_header("www-authenticate", challenge);
    }
    response
}

/// A refusal that names no realm: its status, body and headers.
pub fn refusal(refusal: &errors::Refusal) -> Response {
    debug_assert!(refusal.www_authenticate(String::new).is_none());
    refusal_body(refusal)
}

fn refusal_body(refusal: &errors::Refusal) -> Response {
    let body = json!({"error": refusal.code(), "message": refusal.message()});
    let response = Response::json(refusal.status(), &body);
    match refusal.headers() {
        Some((name, value)) => response.with_header(name, value),
        None => response,
    }
}
