//! The shapes of the door's answers that many tests assert exactly.

use serde_json::{Value, json};

use super::{Reply, ordered};

/// A JSON-RPC request with id 1.
pub fn rpc(method: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#)
}

/// A JSON-RPC answer: HTTP 200, application/json, the exact error object, no
/// A2A-Extensions (a refusal carries none).
pub fn assert_rpc_error(reply: &Reply, id: Value, error: Value) {
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.header("a2a-extensions"), None);
    let expected = json!({"jsonrpc": "2.0", "id": id, "error": error});
    assert_eq!(
        ordered(&reply.text()),
        serde_json::to_string(&expected).unwrap()
    );
}

/// An A2A error object with its one ErrorInfo.
pub fn a2a_error(code: i64, message: &str, reason: &str, metadata: Value) -> Value {
    json!({"code": code, "message": message, "data": [{
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": metadata,
    }]})
}

/// An HTTP refusal: `status`, application/json, exactly `body`, the
/// WWW-Authenticate `challenge` if any, no A2A-Extensions.
pub fn assert_refusal(reply: &Reply, status: u16, body: &str, challenge: Option<&str>) {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.text(), body);
    assert_eq!(reply.header("www-authenticate"), challenge);
    assert_eq!(reply.header("a2a-extensions"), None);
}
