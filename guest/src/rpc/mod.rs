//! What every answer of the door is made of: the HTTP request and response
//! ([`http`]), the extensions murmur declares ([`extensions`]), every error
//! ([`errors`]), the A2A-Version header ([`version`]), and here JSON-RPC 2.0
//! framing ("JSON-RPC request"): reading a request at steps 6 and 7, and
//! writing the response envelope.

pub mod errors;
pub mod extensions;
pub mod http;
pub mod version;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use crate::rpc::errors::RpcError;
use crate::rpc::http::{IdAt, Response, Reuse};

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
    let Body(members) =
        serde_json::from_slice(body).map_err(|_| (Value::Null, RpcError::parse_error()))?;
    let Some(members) = members else {
        return Err((Value::Null, RpcError::invalid_request()));
    };
    let id = members.id.filter(valid_id);
    let method = match members.method {
        Some(Value::String(method)) => Some(method),
        _ => None,
    };
    let version_ok = matches!(&members.jsonrpc, Some(Value::String(v)) if v == "2.0");
    match (id, method) {
        (Some(id), Some(method)) if version_ok => Ok(RpcRequest {
            id,
            method,
            params: members.params,
        }),
        (id, _) => Err((id.unwrap_or(Value::Null), RpcError::invalid_request())),
    }
}

/// Any JSON body: the four members of an object, each the last one sent,
/// as a JSON tree would hold them; None for a body that is not an object.
/// Read member by member, so the object itself is never built.
struct Body(Option<Members>);

#[derive(Default)]
struct Members {
    jsonrpc: Option<Value>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Body, D::Error> {
        deserializer.deserialize_any(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Body;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
        let mut members = Members::default();
        while let Some(key) = map.next_key::<Key>()? {
            // Every value is read whole, as a tree would read it (its
            // nesting limit included); only the four members are kept.
            let value = map.next_value::<Value>()?;
            match key {
                Key::Jsonrpc => members.jsonrpc = Some(value),
                Key::Id => members.id = Some(value),
                Key::Method => members.method = Some(value),
                Key::Params => members.params = Some(value),
                Key::Other => {}
            }
        }
        Ok(Body(Some(members)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Body, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        Ok(Body(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Body, E> {
        Ok(Body(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Body, E> {
        Ok(Body(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Body, E> {
        Ok(Body(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Body, E> {
        Ok(Body(None))
    }

    fn visit_str<E>(self, _: &str) -> Result<Body, E> {
        Ok(Body(None))
    }

    fn visit_unit<E>(self) -> Result<Body, E> {
        Ok(Body(None))
    }
}

/// A member's name, unescaped.
enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<Key, E> {
        Ok(match name {
            "jsonrpc" => Key::Jsonrpc,
            "id" => Key::Id,
            "method" => Key::Method,
            "params" => Key::Params,
            _ => Key::Other,
        })
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

/// A JSON-RPC success the door declares reusable (`murmur:door/answer`'s
/// `reusable`): one that depends on nothing but the request, its caller and
/// what the door read of the session's tasks, never on the clock. The id
/// sits right after the envelope's opening, `{"jsonrpc":"2.0","id":`.
pub fn reusable_result(id: &Id, value: &impl Serialize) -> Response {
    let mut response = result(id, value);
    let len = serde_json::to_vec(id).expect("an id serializes").len();
    response.reuse = Some(Reuse::Id(IdAt {
        at: ID_AT.len(),
        len,
    }));
    response
}

/// What precedes the id in every envelope this module writes.
const ID_AT: &str = r#"{"jsonrpc":"2.0","id":"#;

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
    use serde_json::json;

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

    /// The span a reusable answer declares is exactly its id, as written.
    #[test]
    fn a_reusable_result_names_where_its_id_is() {
        for id in [
            json!(7),
            json!("a\"b\u{e9}\u{1}"),
            json!(18446744073709551615u64),
            json!(-3),
        ] {
            let response = reusable_result(&id, &json!({"k": [1, "x"]}));
            let Some(Reuse::Id(at)) = response.reuse else {
                panic!("{response:?}")
            };
            let written = &response.body[at.at..at.at + at.len];
            assert_eq!(written, serde_json::to_vec(&id).unwrap().as_slice(), "{id}");
            assert_eq!(result(&id, &json!({"k": [1, "x"]})).body, response.body);
        }
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

    /// Steps 6 and 7 as the door first read them: the whole body as a JSON
    /// tree, then its members.
    fn parse_as_tree(body: &[u8]) -> Result<RpcRequest, (Id, i64)> {
        let value: Value = serde_json::from_slice(body).map_err(|_| (Value::Null, -32700))?;
        let Value::Object(mut object) = value else {
            return Err((Value::Null, -32600));
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
            (id, _) => Err((id.unwrap_or(Value::Null), -32600)),
        }
    }

    // Reading member by member answers every body as reading the whole tree
    // did: the last of a repeated member, escaped names, explicit nulls,
    // bodies that are not objects, nesting past the parser's limit inside
    // a member the door ignores, trailing bytes.
    #[test]
    fn reads_members_as_a_tree_would() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","x":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let mut bodies: Vec<Vec<u8>> = [
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","id":"b","method":"ListTasks"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","id":null}"#,
            r#"{"jsonrpc":"2.0","\u0069d":7,"m\u0065thod":"GetTask"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":null}"#,
            r#"{"jsonrpc":2.0,"id":1,"method":"GetTask"}"#,
            r#"{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"method":"GetTask"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask"} x"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask",}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"GetTask","extra":[1,{"b":[]}]}"#,
            r#"[1,2,{"id":1}]"#,
            r#"[1,2"#,
            r#""text""#,
            "null",
            "true",
            "-1.5e3",
            " {} ",
        ]
        .iter()
        .map(|b| b.as_bytes().to_vec())
        .collect();
        bodies.push(deep.into_bytes());
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        for entry in std::fs::read_dir(corpus).unwrap() {
            bodies.push(std::fs::read(entry.unwrap().path()).unwrap());
        }
        for body in &bodies {
            let read = parse(body).map_err(|(id, e)| (id, e.code));
            assert_eq!(
                read,
                parse_as_tree(body),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
