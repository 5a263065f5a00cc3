//! JSON-RPC 2.0 framing ("JSON-RPC request"): reading a request at steps 6
//! and 7, and writing the response envelope.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};

use crate::errors::RpcError;
use crate::http::Response;

/// A request id: a string or an integer, echoed exactly as sent.
pub type Id = Value;

/// A JSON-RPC 2.0 request the door can route.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcRequest {
    pub id: Id,
    pub method: String,
    /// `params` as sent; None when omitted.
    pub params: Option<Value>,
}

/// Steps 6 and 7: the body is JSON, then a JSON-RPC 2.0 request. The error
/// carries the id to answer with: null for -32700, and for -32600 the
/// request's id when that id itself is valid.
pub fn parse(body: &[u8]) -> Result<RpcRequest, (Id, RpcError)> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| (Value::Null, RpcError::parse_error()))?;
    let Value::Object(mut object) = value else {
        return Err((Value::Null, RpcError::invalid_request()));
    };
    let id = object.remove("id").filter(valid_id);
    let method = match object.remove("method") {
        Some(Value::String(method)) => Some(method),
        _ => None,
    };
    let version_ok = object.get("jsonrpc") == Some(&json!("2.0"));
    match (id, method) {
        (Some(id), Some(method)) if version_ok => Ok(RpcRequest {
            id,
            method,
            params: object.remove("params"),
        }),
        (id, _) => Err((id.unwrap_or(Value::Null), RpcError::invalid_request())),
    }
}

/// A string, or a number that is an integer (not 1.0, not 1e3).
fn valid_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// A JSON-RPC success, HTTP 200.
pub fn result(id: &Id, result: &impl Serialize) -> Response {
    Response::json(
        200,
        &Envelope {
            id,
            member: "result",
            value: result,
        },
    )
}

/// A JSON-RPC error, HTTP 200.
pub fn error(id: &Id, error: &RpcError) -> Response {
    Response::json(
        200,
        &Envelope {
            id,
            member: "error",
            value: error,
        },
    )
}

/// `{"jsonrpc": "2.0", "id": …, "result" or "error": …}`, written straight
/// from the answer's own view.
struct Envelope<'a, T> {
    id: &'a Id,
    member: &'static str,
    value: &'a T,
}

impl<T: Serialize> Serialize for Envelope<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut envelope = serializer.serialize_map(Some(3))?;
        envelope.serialize_entry("jsonrpc", "2.0")?;
        envelope.serialize_entry("id", self.id)?;
        envelope.serialize_entry(self.member, self.value)?;
        envelope.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> (Id, i64) {
        let (id, e) = parse(body.as_bytes()).unwrap_err();
        (id, e.code)
    }

    // Reference, "What the door answers" step 6: -32700 with id null.
    #[test]
    fn not_json_is_parse_error() {
        assert_eq!(refused("{"), (Value::Null, -32700));
        assert_eq!(refused("\u{feff}{}"), (Value::Null, -32700));
        assert_eq!(refused(""), (Value::Null, -32700));
    }

    // Reference, "JSON-RPC request": step 7 echoes the id only when valid.
    #[test]
    fn invalid_request_echoes_valid_ids_only() {
        assert_eq!(refused("[]"), (Value::Null, -32600));
        assert_eq!(
            refused(r#"[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]"#),
            (Value::Null, -32600)
        );
        assert_eq!(refused(r#"{"jsonrpc":"2.0","id":7}"#), (json!(7), -32600));
        assert_eq!(
            refused(r#"{"jsonrpc":"1.0","id":"a","method":"GetTask"}"#),
            (json!("a"), -32600)
        );
        assert_eq!(
            refused(r#"{"id":"a","method":"GetTask"}"#),
            (json!("a"), -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","method":"GetTask"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1.5,"method":"GetTask"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1.0,"method":"GetTask"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":null,"method":"GetTask"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":true,"method":"GetTask"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":[1],"method":"GetTask"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":-3,"method":7}"#),
            (json!(-3), -32600)
        );
    }

    #[test]
    fn reads_the_four_members() {
        let r = parse(br#"{"jsonrpc":"2.0","id":"x","method":"GetTask","params":[1],"extra":1}"#)
            .unwrap();
        assert_eq!(
            r,
            RpcRequest {
                id: json!("x"),
                method: "GetTask".into(),
                params: Some(json!([1]))
            }
        );
        let r = parse(br#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}"#).unwrap();
        assert_eq!(r.id.to_string(), "18446744073709551615");
    }
}
