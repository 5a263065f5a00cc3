//! Every error the door answers, in one place: the JSON-RPC codes with their
//! reasons and message templates ("Errors", "Completion errors"), and the HTTP
//! refusals of the check order's steps 2, 3, 4 and 11 ("What the door
//! answers").

use serde_json::{Map, Value, json};

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

    /// -32602 with the message as the reference words it.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::standard(-32602, message)
    }

    /// -32602: params present and not an object (step 12).
    pub fn params_not_object() -> RpcError {
        RpcError::invalid_params("Invalid params: params must be an object")
    }

    /// -32602: a tenant other than "" (step 13); the value shown as JSON.
    pub fn tenant(value: &Value) -> RpcError {
        RpcError::invalid_params(format!(
            "Invalid params: tenant {value} names a tenant; this agent serves no tenants, so omit tenant"
        ))
    }

    /// -32603: a request the door accepted and could not hand to the session.
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::standard(-32603, message)
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
    pub fn unsupported_method(method: &str, why: &str) -> RpcError {
        RpcError::a2a(
            -32004,
            "UNSUPPORTED_OPERATION",
            format!("{method} is not supported: {why}"),
            vec![],
        )
    }

    /// -32004 UnsupportedOperationError naming a task and its state.
    pub fn unsupported_for_task(
        message: impl Into<String>,
        task_id: &str,
        state: &str,
    ) -> RpcError {
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

    /// -32005 ContentTypeNotSupportedError for the first refused part.
    pub fn content_type_not_supported(
        message: impl Into<String>,
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

    /// The JSON-RPC `error` member.
    pub fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        if let Some(info) = &self.info {
            let metadata: Map<String, Value> = info
                .metadata
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            error.insert(
                "data".into(),
                json!([{
                    "@type": ERROR_INFO,
                    "reason": info.reason,
                    "domain": info.domain,
                    "metadata": metadata,
                }]),
            );
        }
        Value::Object(error)
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
    /// 501: a declared plane, which this door does not serve.
    PlaneNotServed(&'static str),
}

/// The sentences of the refusals that are the same on every request.
pub const UNAUTHENTICATED: &str = "this door requires a token: send Authorization: Bearer <token>";
pub const TOKEN_NOT_MINTED: &str = "the bearer token is not one this session minted";
pub const TOKEN_NOT_BEARER: &str = "the Authorization header is not Bearer <token>";
pub const TOKEN_REPEATED: &str = "more than one Authorization header";
pub const PEER_NOT_ACCEPTED: &str = "this capsule does not accept tasks from peer capsules";
pub const NOT_FOUND: &str = "this door answers GET /.well-known/agent-card.json and JSON-RPC as POST / with content-type: application/json and a body";

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Unauthenticated | Refusal::InvalidToken(_) => 401,
            Refusal::InsufficientScope { .. } | Refusal::PeerNotAccepted => 403,
            Refusal::NotFound | Refusal::PlaneNotDeclared(_) => 404,
            Refusal::PlaneNotServed(_) => 501,
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
            Refusal::PlaneNotServed(_) => "plane_not_served",
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
            Refusal::PlaneNotServed(plane) => {
                format!("the {plane} plane is declared, but this door does not serve it")
            }
        }
    }

    /// The `www-authenticate` value, on the token and scope refusals.
    pub fn www_authenticate(&self, realm: &str) -> Option<String> {
        let realm = quote(realm);
        match self {
            Refusal::Unauthenticated => Some(format!("Bearer realm={realm}")),
            Refusal::InvalidToken(_) => {
                Some(format!("Bearer realm={realm}, error=\"invalid_token\""))
            }
            Refusal::InsufficientScope { scope, .. } => Some(format!(
                "Bearer realm={realm}, error=\"insufficient_scope\", scope={}",
                quote(scope)
            )),
            _ => None,
        }
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
        let e = RpcError::parse_error().to_json();
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-32700,"message":"Invalid JSON payload"}"#
        );
    }

    // Reference, "Errors": the -32002 example, byte for byte up to the id.
    #[test]
    fn a2a_error_carries_one_error_info() {
        let e = RpcError::task_not_cancelable("tsk_1", "TASK_STATE_COMPLETED").to_json();
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-32002,"message":"Task cannot be canceled: it is already TASK_STATE_COMPLETED","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_CANCELABLE","domain":"a2a-protocol.org","metadata":{"taskId":"tsk_1","state":"TASK_STATE_COMPLETED"}}]}"#
        );
    }

    // Reference, "Completion errors": the -31002 example.
    #[test]
    fn completion_errors_are_in_murmur_domain() {
        let e = RpcError::completion_not_awaited(Some("dlg_1"), false).to_json();
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":-31002,"message":"no task in this session is waiting for delegation dlg_1","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"COMPLETION_NOT_AWAITED","domain":"murmur.nexus","metadata":{"delegationId":"dlg_1"}}]}"#
        );
    }

    #[test]
    fn realm_is_a_quoted_string() {
        let r = Refusal::InvalidToken(TOKEN_NOT_MINTED);
        assert_eq!(
            r.www_authenticate(r#"a"b"#).unwrap(),
            r#"Bearer realm="a\"b", error="invalid_token""#
        );
    }
}
