//! Every error the door answers, in one place: the JSON-RPC codes with their
//! reasons and messages ("Errors", "Completion errors"), every -32602 text
//! ([`InvalidParams`], grouped by the reference section that words it), and
//! every HTTP refusal ([`Refusal`]): the check order's steps 2 (the token),
//! 3 (peer consent), 4 (the operator plane's scope), 5 (the 404 of anything
//! but the card, a plane or a JSON-RPC POST) and 11 (a method's scope)
//! ("What the door answers"), and a plane's own ("Planes": a file or
//! handle not served, a method, a range, a listing's page). The other
//! modules name an error; none spells a message.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use crate::imports::model::TaskError;
use crate::rpc::extensions;

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const A2A_DOMAIN: &str = "a2a-protocol.org";
const MURMUR_DOMAIN: &str = "murmur.nexus";

/// The google.rpc.ErrorInfo an A2A or murmur error carries in `error.data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorInfo {
    pub reason: &'static str,
    pub domain: &'static str,
    /// String values, in the order the reference lists them.
    pub metadata: Vec<(&'static str, String)>,
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    /// None for the standard JSON-RPC errors, which carry no data.
    pub info: Option<Box<ErrorInfo>>,
}

impl RpcError {
    fn standard(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            info: None,
        }
    }

    fn a2a(
        code: i64,
        reason: &'static str,
        message: impl Into<String>,
        metadata: Vec<(&'static str, String)>,
    ) -> RpcError {
        RpcError::with_info(
            code,
            message,
            ErrorInfo {
                reason,
                domain: A2A_DOMAIN,
                metadata,
            },
        )
    }

    fn murmur(
        code: i64,
        reason: &'static str,
        message: impl Into<String>,
        metadata: Vec<(&'static str, String)>,
    ) -> RpcError {
        RpcError::with_info(
            code,
            message,
            ErrorInfo {
                reason,
                domain: MURMUR_DOMAIN,
                metadata,
            },
        )
    }

    fn with_info(code: i64, message: impl Into<String>, info: ErrorInfo) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            info: Some(Box::new(info)),
        }
    }

    /// -32700: a body that is not JSON. Answered with id null.
    pub fn parse_error() -> RpcError {
        RpcError::standard(-32700, "Invalid JSON payload")
    }

    /// -32600: a body that is not a JSON-RPC 2.0 request.
    pub fn invalid_request() -> RpcError {
        RpcError::standard(-32600, "Request payload validation error")
    }

    /// -32601: a method the door extension does not list.
    pub fn method_not_found() -> RpcError {
        RpcError::standard(-32601, "Method not found")
    }

    /// -32602, naming the parameter.
    pub fn invalid_params(which: InvalidParams<'_>) -> RpcError {
        RpcError::standard(-32602, which.message())
    }

    /// -32603: the session could not take a request the door accepted.
    pub fn session_unavailable(why: &str) -> RpcError {
        RpcError::standard(
            -32603,
            format!("Internal error: the session could not take this request: {why}"),
        )
    }

    /// -32603: murmur.StopSession, when the store could not record every
    /// cancel.
    pub fn stop_unrecorded(why: &str) -> RpcError {
        RpcError::standard(
            -32603,
            format!("Internal error: the session could not record the stop: {why}"),
        )
    }

    /// A store refusal on a task the door already named.
    pub fn from_store(error: TaskError, task_id: &str) -> RpcError {
        match error {
            TaskError::NotFound => RpcError::task_not_found(task_id),
            TaskError::WrongState(state) => RpcError::task_in_state(task_id, state.wire()),
            TaskError::OtherContext => {
                RpcError::invalid_params(InvalidParams::WaitsInAnotherContext(task_id))
            }
            TaskError::Unavailable(why) => RpcError::session_unavailable(&why),
        }
    }

    /// -32001 TaskNotFoundError.
    pub fn task_not_found(task_id: &str) -> RpcError {
        RpcError::a2a(
            -32001,
            "TASK_NOT_FOUND",
            "Task not found",
            vec![("taskId", task_id.to_string())],
        )
    }

    /// -32002 TaskNotCancelableError, naming the state the task ended in.
    pub fn task_not_cancelable(task_id: &str, state: &str) -> RpcError {
        RpcError::a2a(
            -32002,
            "TASK_NOT_CANCELABLE",
            format!("Task cannot be canceled: it is already {state}"),
            vec![
                ("taskId", task_id.to_string()),
                ("state", state.to_string()),
            ],
        )
    }

    /// -32003 PushNotificationNotSupportedError.
    pub fn push_not_supported() -> RpcError {
        RpcError::a2a(
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "push notifications are not supported by this agent",
            vec![],
        )
    }

    /// -32004 UnsupportedOperationError for a method this door does not serve.
    fn unsupported_method(method: &str, why: &str) -> RpcError {
        RpcError::a2a(
            -32004,
            "UNSUPPORTED_OPERATION",
            format!("{method} is not supported: {why}"),
            vec![],
        )
    }

    /// -32004: GetExtendedAgentCard to a public door (step 10).
    pub fn no_extended_card(method: &str) -> RpcError {
        RpcError::unsupported_method(method, "this door is public and has no extended card")
    }

    /// -32004: SendStreamingMessage or SubscribeToTask to a door that starts no
    /// task (step 10).
    pub fn starts_no_task(method: &str) -> RpcError {
        RpcError::unsupported_method(
            method,
            "this capsule starts no task (lifecycle.task_acceptance: none)",
        )
    }

    /// -32004 ("Continuing a task"): a message naming a task that has ended.
    pub fn continues_ended_task(task_id: &str, state: &str) -> RpcError {
        RpcError::unsupported_for_task(
            format!(
                "Task {task_id} has ended in {state}; send a new message without taskId, in the same contextId, to start a new task"
            ),
            task_id,
            state,
        )
    }

    /// -32004 ("Continuing a task"): a message naming a task that is
    /// submitted or working.
    pub fn continues_busy_task(task_id: &str, state: &str) -> RpcError {
        RpcError::unsupported_for_task(
            format!(
                "Task {task_id} is {state}; a task takes a message only while it waits in TASK_STATE_INPUT_REQUIRED"
            ),
            task_id,
            state,
        )
    }

    /// -32004 ("SubscribeToTask"): a task that has ended.
    pub fn subscribes_ended_task(task_id: &str, state: &str) -> RpcError {
        RpcError::unsupported_for_task(
            format!("Task {task_id} has ended in {state}; there is nothing left to follow"),
            task_id,
            state,
        )
    }

    /// -32004: the store refused a task the door named for its state.
    pub fn task_in_state(task_id: &str, state: &str) -> RpcError {
        RpcError::unsupported_for_task(format!("Task {task_id} is {state}"), task_id, state)
    }

    /// -32004 UnsupportedOperationError naming a task and its state.
    fn unsupported_for_task(message: String, task_id: &str, state: &str) -> RpcError {
        RpcError::a2a(
            -32004,
            "UNSUPPORTED_OPERATION",
            message,
            vec![
                ("taskId", task_id.to_string()),
                ("state", state.to_string()),
            ],
        )
    }

    /// -32005 ("Parts"): the first url part.
    pub fn url_part(part_index: usize, media_type: Option<&str>) -> RpcError {
        RpcError::content_type_not_supported(
            format!("message.parts[{part_index}] is a url part; {PARTS_READ}"),
            part_index,
            media_type,
        )
    }

    /// -32005 ("Parts"): the first raw part that is not an image.
    pub fn raw_part(part_index: usize, media_type: Option<&str>) -> RpcError {
        let what = match media_type {
            Some(t) => format!("a raw part of media type {t}"),
            None => "a raw part without a media type".to_string(),
        };
        RpcError::content_type_not_supported(
            format!("message.parts[{part_index}] is {what}; {PARTS_READ}"),
            part_index,
            media_type,
        )
    }

    /// -32005 ContentTypeNotSupportedError for the first refused part.
    fn content_type_not_supported(
        message: String,
        part_index: usize,
        media_type: Option<&str>,
    ) -> RpcError {
        let mut metadata = vec![("partIndex", part_index.to_string())];
        if let Some(media_type) = media_type {
            metadata.push(("mediaType", media_type.to_string()));
        }
        RpcError::a2a(-32005, "CONTENT_TYPE_NOT_SUPPORTED", message, metadata)
    }

    /// -32009 VersionNotSupportedError: `requested` is the header's value as
    /// sent, "" when absent, every line's value joined with "," when several.
    pub fn version_not_supported(requested: &str) -> RpcError {
        RpcError::a2a(
            -32009,
            "VERSION_NOT_SUPPORTED",
            format!("A2A version '{requested}' is not supported; this agent speaks 1.0"),
            vec![
                ("requestedVersion", requested.to_string()),
                ("supportedVersions", "1.0".to_string()),
            ],
        )
    }

    /// -31001 COMPLETION_MISADDRESSED: never names the session running here.
    pub fn completion_misaddressed(addressed: &str) -> RpcError {
        let message = if addressed.is_empty() {
            "completion names no session in x-murmur-completion-session; it is not for this session"
                .to_string()
        } else {
            format!("completion is addressed to session {addressed}, not to this session")
        };
        RpcError::murmur(
            -31001,
            "COMPLETION_MISADDRESSED",
            message,
            vec![("addressedSession", addressed.to_string())],
        )
    }

    /// -31002 COMPLETION_NOT_AWAITED.
    pub fn completion_not_awaited(delegation_id: Option<&str>, ending: bool) -> RpcError {
        match delegation_id {
            None => RpcError::murmur(
                -31002,
                "COMPLETION_NOT_AWAITED",
                "completion names no delegation in x-murmur-delegation-id",
                vec![],
            ),
            Some(id) => RpcError::murmur(
                -31002,
                "COMPLETION_NOT_AWAITED",
                if ending {
                    format!("delegation {id} belongs to a session that is ending")
                } else {
                    format!("no task in this session is waiting for delegation {id}")
                },
                vec![("delegationId", id.to_string())],
            ),
        }
    }
}

/// `{"code", "message", "data": [ErrorInfo]}`; no `data` for a standard
/// JSON-RPC error.
impl Serialize for RpcError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut error = serializer.serialize_map(None)?;
        error.serialize_entry("code", &self.code)?;
        error.serialize_entry("message", &self.message)?;
        if let Some(info) = &self.info {
            error.serialize_entry("data", &[info.as_ref()])?;
        }
        error.end()
    }
}

impl Serialize for ErrorInfo {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut info = serializer.serialize_map(Some(4))?;
        info.serialize_entry("@type", ERROR_INFO)?;
        info.serialize_entry("reason", self.reason)?;
        info.serialize_entry("domain", self.domain)?;
        info.serialize_entry("metadata", &Metadata(&self.metadata))?;
        info.end()
    }
}

/// ErrorInfo's metadata: string values, in the reference's order.
struct Metadata<'a>(&'a [(&'static str, String)]);

impl Serialize for Metadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// What a -32005 message says the door reads ("Parts").
const PARTS_READ: &str = "this agent reads text parts, data parts and image raw parts only";

/// Every -32602 the door answers, each worded once. The reference's own
/// wording is quoted where it gives one; the rest name the parameter as the
/// "Errors" table asks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InvalidParams<'a> {
    // "What the door answers", steps 12 and 13; "Tenants".
    /// params present and not an object.
    ParamsNotObject,
    /// params.tenant other than "", shown as JSON: "Invalid params: tenant
    /// "acme" names a tenant; this agent serves no tenants, so omit tenant".
    Tenant(&'a Value),

    // "Messages", checks 1 to 5 and 7.
    MessageNotObject,
    MessageRequired,
    MessageId,
    Role,
    Parts,
    PartNotObject(usize),
    /// A part setting none, or more than one, of text, raw, url and data.
    PartKind(usize),
    /// A part's text, raw, url, mediaType or filename that is not a string.
    PartField {
        index: usize,
        key: &'static str,
    },
    /// taskId or contextId that is not a string.
    MessageField(&'a str),
    References,
    /// referenceTaskIds naming more distinct tasks than the most it may.
    TooManyReferences {
        names: usize,
        most: usize,
    },
    ReturnImmediately,

    // "forgetSession": its table, word for word.
    DoorMetadataNotObject,
    ForgetSessionNotBoolean,
    /// forgetSession: true on a message naming this taskId.
    ForgetSessionContinues(&'a str),
    ForgetSessionWithoutProcess,

    // "Image parts": its table's rows, naming message.parts[<i>].
    ImageNotBase64(usize),
    ImageNotOfType {
        index: usize,
        media_type: &'a str,
    },
    ImageTooLarge {
        index: usize,
        bytes: usize,
        max_bytes: u64,
    },
    ImageOverLimit {
        index: usize,
        max_per_turn: u32,
    },
    ImageContinues {
        index: usize,
        task_id: &'a str,
    },
    ImageToProcess(usize),

    // "Continuing a task": a waiting task in another contextId.
    OtherContext {
        context_id: &'a str,
        task_id: &'a str,
    },
    /// The store's answer when the door named no contextId of its own.
    WaitsInAnotherContext(&'a str),

    // "GetTask", "SubscribeToTask": "GetTask requires an id", "SubscribeToTask
    // requires an id", and CancelTask's alike.
    NoId(&'a str),

    // "ListTasks", in the order its params are read.
    ContextId,
    Status,
    PageSize,
    PageToken,
    /// The reference's wording.
    StatusTimestampAfter,
    IncludeArtifacts,
}

impl InvalidParams<'_> {
    pub fn message(&self) -> String {
        use InvalidParams as P;
        let door = extensions::DOOR;
        match *self {
            P::ParamsNotObject => "Invalid params: params must be an object".into(),
            P::Tenant(value) => format!(
                "Invalid params: tenant {value} names a tenant; this agent serves no tenants, so omit tenant"
            ),

            P::MessageNotObject => "Invalid params: message must be an object".into(),
            P::MessageRequired => "Invalid params: message is required".into(),
            P::MessageId => "Invalid params: message.messageId must be a non-empty string".into(),
            P::Role => "Invalid params: message.role must be ROLE_USER".into(),
            P::Parts => "Invalid params: message.parts must be a non-empty array".into(),
            P::PartNotObject(i) => format!("Invalid params: message.parts[{i}] must be an object"),
            P::PartKind(i) => format!(
                "Invalid params: message.parts[{i}] must set exactly one of text, raw, url and data"
            ),
            P::PartField { index, key } => {
                format!("Invalid params: message.parts[{index}].{key} must be a string")
            }
            P::MessageField(key) => format!("Invalid params: message.{key} must be a string"),
            P::References => {
                "Invalid params: message.referenceTaskIds must be an array of non-empty strings"
                    .into()
            }
            P::TooManyReferences { names, most } => format!(
                "Invalid params: message.referenceTaskIds names {names} distinct tasks; at most {most}"
            ),
            P::ReturnImmediately => "configuration.returnImmediately must be a boolean".into(),

            P::DoorMetadataNotObject => {
                format!("Invalid params: message.metadata[\"{door}\"] must be an object")
            }
            P::ForgetSessionNotBoolean => format!(
                "Invalid params: message.metadata[\"{door}\"].forgetSession must be a boolean"
            ),
            P::ForgetSessionContinues(task_id) => format!(
                "Invalid params: forgetSession starts a new conversation, so it goes on a message that starts a task, not on one that continues task {task_id}"
            ),
            P::ForgetSessionWithoutProcess => "forgetSession asks this capsule to forget the harness session this context names, and only a capsule on inference.transport: process has one".into(),

            P::ImageNotBase64(i) => format!(
                "Invalid params: message.parts[{i}] is not base64: raw must hold the image's bytes in base64"
            ),
            P::ImageNotOfType { index, media_type } => format!(
                "Invalid params: message.parts[{index}] is not a {media_type} image: its first bytes are not those of {media_type}"
            ),
            P::ImageTooLarge {
                index,
                bytes,
                max_bytes,
            } => format!(
                "Invalid params: message.parts[{index}] is {bytes} bytes, larger than context.images.max_bytes ({max_bytes})"
            ),
            P::ImageOverLimit {
                index,
                max_per_turn,
            } => format!(
                "Invalid params: message.parts[{index}] is one image more than context.images.max_per_turn ({max_per_turn}) allows in a message"
            ),
            P::ImageContinues { index, task_id } => format!(
                "Invalid params: message.parts[{index}] is an image, and images go on the message that starts a task, not on one that continues task {task_id}"
            ),
            P::ImageToProcess(i) => format!(
                "Invalid params: message.parts[{i}] is an image, and a capsule on inference.transport: process takes no images from the door"
            ),

            P::OtherContext {
                context_id,
                task_id,
            } => format!(
                "Invalid params: message.contextId {context_id} is not the context of task {task_id}, which waits for input"
            ),
            P::WaitsInAnotherContext(task_id) => {
                format!("Invalid params: task {task_id} waits in another context")
            }

            P::NoId(method) => format!("{method} requires an id"),

            P::ContextId => "Invalid params: contextId must be a string".into(),
            P::Status => "Invalid params: status must be a TASK_STATE_* name".into(),
            P::PageSize => "Invalid params: pageSize must be an integer from 1".into(),
            P::PageToken => {
                "Invalid params: pageToken is not a page token this door answered".into()
            }
            P::StatusTimestampAfter => "statusTimestampAfter must be an RFC 3339 timestamp, such as 2026-10-13T09:00:00Z".into(),
            P::IncludeArtifacts => "Invalid params: includeArtifacts must be a boolean".into(),
        }
    }
}

/// The HTTP refusals of steps 2, 3, 4 and 11, and the door's 404s: a status
/// and a `{"error", "message"}` body, never a JSON-RPC envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no Authorization header.
    Unauthenticated,
    /// 401: not `Bearer <token>`, a token this session did not mint, or more
    /// than one Authorization header.
    InvalidToken(&'static str),
    /// 403: a valid token whose credential lacks the scope.
    InsufficientScope {
        credential: String,
        scope: &'static str,
    },
    /// 403: a peer-origin request to a capsule that accepts no peer tasks.
    /// Byte-identical for every request.
    PeerNotAccepted,
    /// 404: anything but the card, a plane or a JSON-RPC POST /.
    NotFound,
    /// 404: a plane the manifest does not declare.
    PlaneNotDeclared(&'static str),
    /// 404: a peer handle that is unknown, expired, revoked or used up,
    /// issued to another audience, or whose file is gone or no longer
    /// exported: byte-identical whatever the cause.
    HandleNotFound,
    /// 404: anything a plane does not serve, byte-identical whatever the
    /// cause: not exported, missing, a path no file can have, a link out
    /// of the exports, a FIFO, socket or device.
    FileNotFound,
    /// 405: a plane answers GET and HEAD alone.
    MethodNotAllowed,
    /// 416: a range that starts past the end of a served file of this
    /// many bytes.
    RangeNotSatisfiable(u64),
    /// 400: a listing's `pageSize` or `pageToken` the plane cannot read,
    /// refused before the path is.
    InvalidPage(&'static str),
}

/// The sentences of the refusals that are the same on every request.
pub const UNAUTHENTICATED: &str = "this door requires a token: send Authorization: Bearer <token>";
pub const TOKEN_NOT_MINTED: &str = "the bearer token is not one this session minted";
pub const TOKEN_NOT_BEARER: &str = "the Authorization header is not Bearer <token>";
pub const TOKEN_REPEATED: &str = "more than one Authorization header";
pub const PEER_NOT_ACCEPTED: &str = "this capsule does not accept tasks from peer capsules";
pub const HANDLE_NOT_FOUND: &str = "this plane serves no file for that handle and audience";
pub const FILE_NOT_FOUND: &str = "nothing this plane serves is at this path";
pub const NOT_FOUND: &str = "this door answers GET /.well-known/agent-card.json and JSON-RPC as POST / with content-type: application/json and a body";

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Unauthenticated | Refusal::InvalidToken(_) => 401,
            Refusal::InsufficientScope { .. } | Refusal::PeerNotAccepted => 403,
            Refusal::NotFound | Refusal::PlaneNotDeclared(_) => 404,
            Refusal::HandleNotFound => 404,
            Refusal::FileNotFound => 404,
            Refusal::MethodNotAllowed => 405,
            Refusal::RangeNotSatisfiable(_) => 416,
            Refusal::InvalidPage(_) => 400,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::InvalidToken(_) => "invalid_token",
            Refusal::InsufficientScope { .. } => "insufficient_scope",
            Refusal::PeerNotAccepted => "peer_not_accepted",
            Refusal::NotFound => "not_found",
            Refusal::PlaneNotDeclared(_) => "plane_not_declared",
            Refusal::HandleNotFound => "handle_not_found",
            Refusal::FileNotFound => "file_not_found",
            Refusal::MethodNotAllowed => "method_not_allowed",
            Refusal::RangeNotSatisfiable(_) => "range_not_satisfiable",
            Refusal::InvalidPage(_) => "invalid_page",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Unauthenticated => UNAUTHENTICATED.to_string(),
            Refusal::InvalidToken(why) => why.to_string(),
            Refusal::InsufficientScope { credential, scope } => {
                format!("credential '{credential}' does not reach {scope}")
            }
            Refusal::PeerNotAccepted => PEER_NOT_ACCEPTED.to_string(),
            Refusal::NotFound => NOT_FOUND.to_string(),
            Refusal::PlaneNotDeclared(plane) => format!("this capsule declares no {plane} plane"),
            Refusal::HandleNotFound => HANDLE_NOT_FOUND.to_string(),
            Refusal::FileNotFound => FILE_NOT_FOUND.to_string(),
            Refusal::MethodNotAllowed => "a plane answers GET and HEAD".to_string(),
            Refusal::RangeNotSatisfiable(size) => {
                format!("the range starts past the end of the file's {size} bytes")
            }
            Refusal::InvalidPage(why) => why.to_string(),
        }
    }

    /// Headers a refusal carries beside its body and challenge.
    pub fn headers(&self) -> Option<(&'static str, String)> {
        match self {
            Refusal::MethodNotAllowed => Some(("allow", "GET, HEAD".into())),
            Refusal::RangeNotSatisfiable(size) => {
                Some(("content-range", format!("bytes */{size}")))
            }
            _ => None,
        }
    }

    /// The `www-authenticate` value, on the token and scope refusals; its
    /// realm (the capsule's name) is asked for only then.
    pub fn www_authenticate(&self, realm: impl FnOnce() -> String) -> Option<String> {
        let error = match self {
            Refusal::Unauthenticated => String::new(),
            Refusal::InvalidToken(_) => ", error=\"invalid_token\"".to_string(),
            Refusal::InsufficientScope { scope, .. } => {
                format!(", error=\"insufficient_scope\", scope={}", quote(scope))
            }
            _ => return None,
        };
        Some(format!("Bearer realm={}{error}", quote(&realm())))
    }
}

/// An HTTP quoted-string (RFC 9110 5.6.4).
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference, "Errors": standard JSON-RPC errors carry no data.
    #[test]
    fn standard_errors_carry_no_data() {
        let e = RpcError::parse_error();
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-32700,"message":"Invalid JSON payload"}"#
        );
    }

    // Reference, "Errors": the -32002 example, byte for byte up to the id.
    #[test]
    fn a2a_error_carries_one_error_info() {
        let e = RpcError::task_not_cancelable("tsk_1", "TASK_STATE_COMPLETED");
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-32002,"message":"Task cannot be canceled: it is already TASK_STATE_COMPLETED","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_CANCELABLE","domain":"a2a-protocol.org","metadata":{"taskId":"tsk_1","state":"TASK_STATE_COMPLETED"}}]}"#
        );
    }

    // Reference, "Completion errors": the -31002 example.
    #[test]
    fn completion_errors_are_in_murmur_domain() {
        let e = RpcError::completion_not_awaited(Some("dlg_1"), false);
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-31002,"message":"no task in this session is waiting for delegation dlg_1","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"COMPLETION_NOT_AWAITED","domain":"murmur.nexus","metadata":{"delegationId":"dlg_1"}}]}"#
        );
    }

    #[test]
    fn realm_is_a_quoted_string() {
        let r = Refusal::InvalidToken(TOKEN_NOT_MINTED);
        assert_eq!(
            r.www_authenticate(|| r#"a"b"#.into()).unwrap(),
            r#"Bearer realm="a\"b", error="invalid_token""#
        );
    }
}
