//! The front of the JSON-RPC door ("What the door answers", "JSON-RPC
//! request", "A2A-Version", "Errors", "Push notifications", "Tenants"): every
//! step of the check order, with the exact status, headers, code, message and
//! ErrorInfo the reference gives.

use crate::common;

use common::Door;
use common::rpc::{a2a_error, assert_refusal, assert_rpc_error, rpc};
use serde_json::{Value, json};

const PUBLIC: &str = "
name: my-agent
version: 0.1.0
tools: [bash]
lifecycle: {task_acceptance: single}
exports: {files: [out/]}
";

const AUTHENTICATED: &str = "
name: my-agent
version: 0.1.0
lifecycle: {task_acceptance: single}
exports: {files: [out/]}
network:
  authentication:
    scheme: bearer
    credentials:
      watcher: {scopes: [murmur.WatchSession, GetTask]}
";

const DOOR_URI: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
const NOT_FOUND: &str = r#"{"error":"not_found","message":"this door answers GET /.well-known/agent-card.json and JSON-RPC as POST / with content-type: application/json and a body"}"#;

fn version_error(requested: &str) -> Value {
    a2a_error(
        -32009,
        &format!("A2A version '{requested}' is not supported; this agent speaks 1.0"),
        "VERSION_NOT_SUPPORTED",
        json!({"requestedVersion": requested, "supportedVersions": "1.0"}),
    )
}

fn method_not_found() -> Value {
    json!({"code": -32601, "message": "Method not found"})
}

/// GetTask without an id: the door reached step 14.
fn get_task_requires_an_id() -> Value {
    json!({"code": -32602, "message": "GetTask requires an id"})
}

fn unauthenticated() -> String {
    r#"{"error":"unauthenticated","message":"this door requires a token: send Authorization: Bearer <token>"}"#.into()
}

fn invalid_token(message: &str) -> String {
    format!(r#"{{"error":"invalid_token","message":"{message}"}}"#)
}

// Step 8 and "A2A-Version": every case of the table.
#[test]
fn step_8_a2a_version() {
    let door = Door::start(PUBLIC);
    let body = rpc("GetTask", "{}");
    let send = |headers: &[(&str, &str)]| {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        door.request("POST", "/", &all, body.as_bytes())
    };
    // Served: 1.0 and 1.0.<digits>, any header-name case, whitespace ignored.
    for headers in [
        vec![("A2A-Version", "1.0")],
        vec![("a2a-version", "1.0.1")],
        vec![("A2A-VERSION", "1.0.42")],
        vec![("A2a-Version", "  1.0  ")],
    ] {
        assert_rpc_error(&send(&headers), json!(1), get_task_requires_an_id());
    }
    // Refused: absent or empty reads as '', and every other value as sent.
    assert_rpc_error(&send(&[]), json!(1), version_error(""));
    assert_rpc_error(&send(&[("A2A-Version", "")]), json!(1), version_error(""));
    for value in ["0.3", "1", "1.1", "2.0", "1.0x", "1.0.", "1.0.1-rc", "v1.0"] {
        assert_rpc_error(
            &send(&[("A2A-Version", value)]),
            json!(1),
            version_error(value),
        );
    }
    // More than one line, whatever their values, joined with ",".
    assert_rpc_error(
        &send(&[("A2A-Version", "1.0"), ("a2a-version", "1.0")]),
        json!(1),
        version_error("1.0,1.0"),
    );
    assert_rpc_error(
        &send(&[("A2A-Version", "0.3"), ("A2A-Version", "1.0")]),
        json!(1),
        version_error("0.3,1.0"),
    );
    // A query parameter does not set the version.
    let reply = door.request(
        "POST",
        "/?A2A-Version=1.0",
        &[("content-type", "application/json")],
        body.as_bytes(),
    );
    assert_rpc_error(&reply, json!(1), version_error(""));
    // Every method is negotiated, streams and murmur's own included, as one
    // JSON body; nothing is stopped.
    for method in [
        "SendStreamingMessage",
        "murmur.WatchSession",
        "murmur.StopSession",
        "SendMessage",
        "NoSuchMethod",
    ] {
        let reply = door.request(
            "POST",
            "/",
            &[("content-type", "application/json")],
            rpc(method, "{}").as_bytes(),
        );
        assert_rpc_error(&reply, json!(1), version_error(""));
    }
}

// Step 10: the methods the door extension lists; every other name is -32601,
// the 0.3 names included; matched exactly.
#[test]
fn step_10_method_not_found() {
    let door = Door::start(PUBLIC);
    for method in [
        "message/send",
        "message/stream",
        "tasks/get",
        "tasks/cancel",
        "tasks/resubscribe",
        "agent/getAuthenticatedExtendedCard",
        "stream/watch",
        "session/stop",
        "gettask",
        " GetTask",
        "GetTask ",
        "WatchSession",
        "murmur.watchSession",
        "",
    ] {
        assert_rpc_error(
            &door.rpc(&rpc(method, "{}"), &[]),
            json!(1),
            method_not_found(),
        );
    }
}

// Step 14: murmur.StopSession answers session_id, canceled and residue, and
// names the door extension in A2A-Extensions ("murmur.StopSession", "Door
// extension"). A tenant refuses it before anything stops.
#[test]
fn step_14_stop_session() {
    let door = Door::start(PUBLIC);
    let card = door.get("/.well-known/agent-card.json").json();
    let session = card["capabilities"]["extensions"][1]["params"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let reply = door.rpc(&rpc("murmur.StopSession", "{}"), &[]);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("a2a-extensions"), Some(DOOR_URI));
    assert_eq!(
        reply.text(),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"canceled":[],"residue":[],"session_id":"{session}"}}}}"#
        )
    );
    // params is not read; a second call answers canceled: [] too.
    let again = door.rpc(
        r#"{"jsonrpc":"2.0","id":"s","method":"murmur.StopSession","params":{"x":1}}"#,
        &[],
    );
    assert_eq!(again.json()["result"]["canceled"], json!([]));
    assert_eq!(again.json()["id"], json!("s"));
}

// Step 2: the token, before the path, the body or the method is read.
#[test]
fn step_2_token() {
    let door = Door::start(AUTHENTICATED);
    let realm = r#"Bearer realm="my-agent""#;
    let invalid = r#"Bearer realm="my-agent", error="invalid_token""#;
    let body = rpc("GetTask", "{}");
    let json = [("content-type", "application/json"), ("A2A-Version", "1.0")];

    // No Authorization: 401 unauthenticated, whatever the path or body.
    for reply in [
        door.rpc(&body, &[]),
        door.get("/nope"),
        door.request("POST", "/", &[], b"{"),
        door.request(
            "POST",
            "/",
            &[("content-type", "application/json")],
            body.as_bytes(),
        ),
        door.rpc(&rpc("CreateTaskPushNotificationConfig", "{}"), &[]),
        door.rpc(&rpc("tasks/get", "{}"), &[]),
    ] {
        assert_refusal(&reply, 401, &unauthenticated(), Some(realm));
    }

    // Not Bearer <token>, a token never minted, more than one Authorization.
    let operator = door.token("operator");
    let not_bearer = invalid_token("the Authorization header is not Bearer <token>");
    let not_minted = invalid_token("the bearer token is not one this session minted");
    let repeated = invalid_token("more than one Authorization header");
    let cases: Vec<(Vec<(&str, String)>, &String)> = vec![
        (
            vec![("Authorization", format!("Basic {operator}"))],
            &not_bearer,
        ),
        (vec![("Authorization", operator.clone())], &not_bearer),
        (vec![("Authorization", "Bearer".into())], &not_bearer),
        (vec![("Authorization", "".into())], &not_bearer),
        (
            vec![("Authorization", format!("Bearer {operator} x"))],
            &not_bearer,
        ),
        (vec![("Authorization", "Bearer nope".into())], &not_minted),
        (
            vec![(
                "Authorization",
                format!("Bearer {}", operator.to_uppercase()),
            )],
            &not_minted,
        ),
        (
            vec![("Authorization", format!("Bearer {}", &operator[..63]))],
            &not_minted,
        ),
        (
            vec![("Authorization", format!("Bearer {operator}x"))],
            &not_minted,
        ),
        (
            vec![
                ("Authorization", format!("Bearer {operator}")),
                ("authorization", format!("Bearer {operator}")),
            ],
            &repeated,
        ),
    ];
    for (headers, body_text) in cases {
        let mut all: Vec<(&str, &str)> = json.to_vec();
        all.extend(headers.iter().map(|(n, v)| (*n, v.as_str())));
        let reply = door.request("POST", "/", &all, body.as_bytes());
        assert_refusal(&reply, 401, body_text, Some(invalid));
    }
    // A refusal here says nothing about whether a path exists.
    let reply = door.request("GET", "/nope", &[("Authorization", "Bearer nope")], b"");
    assert_refusal(&reply, 401, &not_minted, Some(invalid));

    // The scheme matches in any case; the operator reaches every method.
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} {operator}");
        let reply = door.rpc(&body, &[("Authorization", &auth)]);
        assert_rpc_error(&reply, json!(1), get_task_requires_an_id());
    }
    // With a valid token, the rest of the order applies: 404, -32009.
    let auth = format!("Bearer {operator}");
    assert_refusal(
        &door.request("GET", "/nope", &[("Authorization", &auth)], b""),
        404,
        NOT_FOUND,
        None,
    );
    let reply = door.request(
        "POST",
        "/",
        &[
            ("content-type", "application/json"),
            ("Authorization", &auth),
        ],
        body.as_bytes(),
    );
    assert_rpc_error(&reply, json!(1), version_error(""));
}

// Step 11: the method's scope, after the method (step 10) and before params
// (step 12); a 403 with the credential and scope named.
#[test]
fn step_11_scope() {
    let door = Door::start(AUTHENTICATED);
    let watcher = door.token("watcher");
    let refusal = |scope: &str| {
        (
            format!(
                r#"{{"error":"insufficient_scope","message":"credential 'watcher' does not reach {scope}"}}"#
            ),
            format!(r#"Bearer realm="my-agent", error="insufficient_scope", scope="{scope}""#),
        )
    };
    for method in [
        "SendMessage",
        "SendStreamingMessage",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
        "murmur.StopSession",
    ] {
        for params in ["{}", "[1]", r#"{"tenant":"acme"}"#] {
            let reply = door.rpc_as(&watcher, &rpc(method, params));
            let (body, challenge) = refusal(method);
            assert_refusal(&reply, 403, &body, Some(&challenge));
        }
    }
    // The scopes it holds are served; GetExtendedAgentCard needs none.
    assert_rpc_error(
        &door.rpc_as(&watcher, &rpc("GetTask", "{}")),
        json!(1),
        get_task_requires_an_id(),
    );
    let auth = format!("Bearer {watcher}");
    let watch = door.open_stream(
        &rpc("murmur.WatchSession", "{}"),
        &[("Authorization", &auth)],
    );
    assert_eq!(
        (watch.status, watch.header("content-type")),
        (200, Some("text/event-stream"))
    );
    assert_eq!(
        door.rpc_as(&watcher, &rpc("GetExtendedAgentCard", "{}"))
            .json()["result"]["name"],
        "my-agent"
    );
    // Step 10 before 11: an unknown method is -32601 for any token.
    assert_rpc_error(
        &door.rpc_as(&watcher, &rpc("message/send", "{}")),
        json!(1),
        method_not_found(),
    );
    // Step 12 after 11: a scope it holds, params not an object.
    assert_rpc_error(
        &door.rpc_as(&watcher, &rpc("GetTask", "[]")),
        json!(1),
        json!({"code": -32602, "message": "Invalid params: params must be an object"}),
    );
    // GetExtendedAgentCard takes no params, but params must still be an object.
    assert_rpc_error(
        &door.rpc_as(&watcher, &rpc("GetExtendedAgentCard", "[]")),
        json!(1),
        json!({"code": -32602, "message": "Invalid params: params must be an object"}),
    );
}

// A request that names no host (HTTP/1.0) or an unreadable one is still
// answered by the door.
#[test]
fn requests_without_a_usable_host_are_answered() {
    let door = Door::start(PUBLIC);
    let reply = common::exchange(
        &door.addr,
        b"GET /.well-known/agent-card.json HTTP/1.0\r\n\r\n",
        b"",
    );
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["name"], "my-agent");
    let head =
        b"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: \xff\xfe\r\nconnection: close\r\n\r\n";
    assert_eq!(common::exchange(&door.addr, head, b"").status, 200);
}
