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

const NONE: &str = "
name: idle
version: 1.0.0
lifecycle: {task_acceptance: none}
";

const DOOR_URI: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1";
const NOT_FOUND: &str = r#"{"error":"not_found","message":"this door answers GET /.well-known/agent-card.json and JSON-RPC as POST / with content-type: application/json and a body"}"#;
const PEER_NOT_ACCEPTED: &str = r#"{"error":"peer_not_accepted","message":"this capsule does not accept tasks from peer capsules"}"#;

fn version_error(requested: &str) -> Value {
    a2a_error(
        -32009,
        &format!("A2A version '{requested}' is not supported; this agent speaks 1.0"),
        "VERSION_NOT_SUPPORTED",
        json!({"requestedVersion": requested, "supportedVersions": "1.0"}),
    )
}

fn push_error() -> Value {
    a2a_error(
        -32003,
        "push notifications are not supported by this agent",
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
        json!({}),
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

// Step 5: anything but a POST / with content-type: application/json and a
// body is answered 404.
#[test]
fn step_5_anything_else_is_404() {
    let door = Door::start(PUBLIC);
    let body = rpc("GetTask", "{}");
    let json = [("content-type", "application/json"), ("A2A-Version", "1.0")];
    for reply in [
        door.get("/"),
        door.get("/nope"),
        door.get("/.well-known/agent-card.json/x"),
        door.request(
            "POST",
            "/.well-known/agent-card.json",
            &json,
            body.as_bytes(),
        ),
        door.request("POST", "/rpc", &json, body.as_bytes()),
        door.request("PUT", "/", &json, body.as_bytes()),
        door.request("POST", "/", &[("A2A-Version", "1.0")], body.as_bytes()),
        door.request(
            "POST",
            "/",
            &[("content-type", "text/plain"), ("A2A-Version", "1.0")],
            body.as_bytes(),
        ),
        door.request(
            "POST",
            "/",
            &[("content-type", "application/jsonx")],
            body.as_bytes(),
        ),
        door.request("POST", "/", &json, b""),
    ] {
        assert_refusal(&reply, 404, NOT_FOUND, None);
    }
    assert_eq!(
        door.request("HEAD", "/.well-known/agent-card.json", &[], b"")
            .status,
        404
    );
    // A media type in any case, with parameters, and a query on / are served.
    for (content_type, path) in [
        ("Application/JSON", "/"),
        ("application/json; charset=utf-8", "/"),
        ("application/json", "/?a=1"),
    ] {
        let reply = door.request(
            "POST",
            path,
            &[("content-type", content_type), ("A2A-Version", "1.0")],
            body.as_bytes(),
        );
        assert_rpc_error(&reply, json!(1), get_task_requires_an_id());
    }
}

// Step 6: -32700 Invalid JSON payload, with id null and no data.
#[test]
fn step_6_not_json() {
    let door = Door::start(PUBLIC);
    for body in [
        "{",
        "nope",
        "{\"jsonrpc\":\"2.0\",\"id\":1,",
        "\u{feff}{}",
        "\u{ff}",
    ] {
        let reply = door.rpc(body, &[]);
        assert_rpc_error(
            &reply,
            Value::Null,
            json!({"code": -32700, "message": "Invalid JSON payload"}),
        );
    }
    // The body is read before the version: no A2A-Version still answers -32700.
    let reply = door.request("POST", "/", &[("content-type", "application/json")], b"{");
    assert_rpc_error(
        &reply,
        Value::Null,
        json!({"code": -32700, "message": "Invalid JSON payload"}),
    );
}

// Step 7 and "JSON-RPC request": the id is echoed only when it is valid.
#[test]
fn step_7_not_a_request() {
    let door = Door::start(PUBLIC);
    let invalid = json!({"code": -32600, "message": "Request payload validation error"});
    for (body, id) in [
        ("[]", Value::Null),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]"#,
            Value::Null,
        ),
        ("7", Value::Null),
        (r#""GetTask""#, Value::Null),
        (r#"{"jsonrpc":"2.0","method":"GetTask"}"#, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"GetTask"}"#,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"GetTask"}"#,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"GetTask"}"#,
            Value::Null,
        ),
        (r#"{"jsonrpc":"2.0","id":7}"#, json!(7)),
        (r#"{"jsonrpc":"2.0","id":"a","method":7}"#, json!("a")),
        (
            r#"{"jsonrpc":"1.0","id":"a","method":"GetTask"}"#,
            json!("a"),
        ),
        (r#"{"jsonrpc":2.0,"id":-4,"method":"GetTask"}"#, json!(-4)),
        (r#"{"id":"b","method":"GetTask"}"#, json!("b")),
    ] {
        assert_rpc_error(&door.rpc(body, &[]), id, invalid.clone());
    }
    // Step 7 comes before step 8: no version header still answers -32600.
    let reply = door.request(
        "POST",
        "/",
        &[("content-type", "application/json")],
        br#"{"id":3}"#,
    );
    assert_rpc_error(&reply, json!(3), invalid);
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

// Step 10 and "Push notifications": the four push config methods answer
// -32003 on every door, before any scope or params check.
#[test]
fn step_10_push_config_methods() {
    let names = [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ];
    for yaml in [PUBLIC, NONE] {
        let door = Door::start(yaml);
        for method in names {
            for params in ["{}", "[1]", r#"{"tenant":"acme"}"#, "null"] {
                assert_rpc_error(&door.rpc(&rpc(method, params), &[]), json!(1), push_error());
            }
        }
    }
    // Before the scope: a credential without any task scope gets -32003.
    let door = Door::start(AUTHENTICATED);
    for method in names {
        let reply = door.rpc_as(&door.token("watcher"), &rpc(method, "7"));
        assert_rpc_error(&reply, json!(1), push_error());
    }
}

// Step 10: GetExtendedAgentCard on a public door, and the task methods on a
// door that starts no task.
#[test]
fn step_10_unsupported_operations() {
    let door = Door::start(PUBLIC);
    let reply = door.rpc(&rpc("GetExtendedAgentCard", "{}"), &[]);
    let error = a2a_error(
        -32004,
        "GetExtendedAgentCard is not supported: this door is public and has no extended card",
        "UNSUPPORTED_OPERATION",
        json!({}),
    );
    assert_rpc_error(&reply, json!(1), error);

    let door = Door::start(NONE);
    assert_rpc_error(
        &door.rpc(&rpc("SendMessage", "{}"), &[]),
        json!(1),
        method_not_found(),
    );
    for method in ["SendStreamingMessage", "SubscribeToTask"] {
        let error = a2a_error(
            -32004,
            &format!(
                "{method} is not supported: this capsule starts no task (lifecycle.task_acceptance: none)"
            ),
            "UNSUPPORTED_OPERATION",
            json!({}),
        );
        assert_rpc_error(
            &door.rpc(&rpc(method, r#"{"id":"tsk_x"}"#), &[]),
            json!(1),
            error,
        );
    }
}

// Step 12: params present and not an object.
#[test]
fn step_12_params_not_an_object() {
    let door = Door::start(PUBLIC);
    let error = json!({"code": -32602, "message": "Invalid params: params must be an object"});
    for params in ["[]", "[1]", "\"x\"", "5", "null", "true"] {
        assert_rpc_error(
            &door.rpc(&rpc("GetTask", params), &[]),
            json!(1),
            error.clone(),
        );
        assert_rpc_error(
            &door.rpc(&rpc("murmur.StopSession", params), &[]),
            json!(1),
            error.clone(),
        );
    }
    // Omitted params reads as {}.
    let reply = door.rpc(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask"}"#, &[]);
    assert_rpc_error(&reply, json!(1), get_task_requires_an_id());
}

// Step 13 and "Tenants": a tenant other than "" is -32602, its value shown as
// JSON; "" reads as absent; -32601, -32003 and -32009 still come first.
#[test]
fn step_13_tenant() {
    let door = Door::start(PUBLIC);
    let tenant = |shown: &str| json!({"code": -32602, "message": format!("Invalid params: tenant {shown} names a tenant; this agent serves no tenants, so omit tenant")});
    for (value, shown) in [
        (r#""acme""#, r#""acme""#),
        ("7", "7"),
        ("null", "null"),
        ("false", "false"),
        (r#"{"a":1}"#, r#"{"a":1}"#),
        (r#"" ""#, r#"" ""#),
    ] {
        for method in [
            "GetTask",
            "ListTasks",
            "CancelTask",
            "SendMessage",
            "murmur.StopSession",
            "murmur.WatchSession",
        ] {
            let reply = door.rpc(&rpc(method, &format!(r#"{{"tenant":{value}}}"#)), &[]);
            assert_rpc_error(&reply, json!(1), tenant(shown));
        }
    }
    let served = door.rpc(&rpc("GetTask", r#"{"tenant":"","id":"tsk_x"}"#), &[]);
    assert_rpc_error(
        &served,
        json!(1),
        json!({"code": -32001, "message": "Task not found", "data": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TASK_NOT_FOUND",
            "domain": "a2a-protocol.org", "metadata": {"taskId": "tsk_x"}}]}),
    );
    assert_rpc_error(
        &door.rpc(&rpc("tasks/get", r#"{"tenant":"acme"}"#), &[]),
        json!(1),
        method_not_found(),
    );
    let unversioned = door.request(
        "POST",
        "/",
        &[("content-type", "application/json")],
        rpc("GetTask", r#"{"tenant":"acme"}"#).as_bytes(),
    );
    assert_rpc_error(&unversioned, json!(1), version_error(""));
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

// A public door ignores Authorization.
#[test]
fn step_2_public_door_ignores_authorization() {
    let door = Door::start(PUBLIC);
    for auth in ["Bearer nope", "Basic x", ""] {
        let reply = door.rpc(&rpc("GetTask", "{}"), &[("Authorization", auth)]);
        assert_rpc_error(&reply, json!(1), get_task_requires_an_id());
    }
}

// Step 3: peer consent, on every door, before the path, the body or the
// method; byte-identical for every request it refuses.
#[test]
fn step_3_peer_consent() {
    let peer = ("x-murmur-task-origin", "peer");
    let door = Door::start(PUBLIC);
    for reply in [
        door.rpc(&rpc("SendMessage", "{}"), &[peer]),
        door.rpc(&rpc("NoSuchMethod", "[]"), &[peer]),
        door.request("GET", "/nope", &[peer], b""),
        door.request("POST", "/", &[peer], b"{"),
        door.request("GET", "/resources/files/a", &[peer], b""),
    ] {
        assert_refusal(&reply, 403, PEER_NOT_ACCEPTED, None);
    }
    // The card is served before consent is checked (step 1).
    assert_eq!(
        door.request("GET", "/.well-known/agent-card.json", &[peer], b"")
            .status,
        200
    );

    // On an authenticated door the token comes first, then consent.
    let door = Door::start(AUTHENTICATED);
    let reply = door.rpc(&rpc("GetTask", "{}"), &[peer]);
    assert_refusal(
        &reply,
        401,
        &unauthenticated(),
        Some(r#"Bearer realm="my-agent""#),
    );
    let auth = format!("Bearer {}", door.token("operator"));
    let reply = door.rpc(&rpc("GetTask", "{}"), &[peer, ("Authorization", &auth)]);
    assert_refusal(&reply, 403, PEER_NOT_ACCEPTED, None);

    // A capsule that accepts peer tasks serves them.
    let door =
        Door::start("name: my-agent\nversion: 0.1.0\nexports: {peer_tasks: {accept: true}}\n");
    let reply = door.rpc(&rpc("GetTask", "{}"), &[peer]);
    assert_rpc_error(&reply, json!(1), get_task_requires_an_id());
}

// Step 4 and "Planes": the operator plane's scope, then the plane; step 1:
// the peer plane needs no door token.
#[test]
fn step_4_operator_plane() {
    let door = Door::start(AUTHENTICATED);
    let watcher = format!("Bearer {}", door.token("watcher"));
    let operator = format!("Bearer {}", door.token("operator"));
    let reply = door.request(
        "GET",
        "/resources/files/a.txt",
        &[("Authorization", &watcher)],
        b"",
    );
    assert_refusal(
        &reply,
        403,
        r#"{"error":"insufficient_scope","message":"credential 'watcher' does not reach resources/files"}"#,
        Some(r#"Bearer realm="my-agent", error="insufficient_scope", scope="resources/files""#),
    );
    let reply = door.request("GET", "/resources/files", &[], b"");
    assert_refusal(
        &reply,
        401,
        &unauthenticated(),
        Some(r#"Bearer realm="my-agent""#),
    );
    let reply = door.request(
        "GET",
        "/resources/files/a.txt",
        &[("Authorization", &operator)],
        b"",
    );
    assert_refusal(
        &reply,
        501,
        r#"{"error":"plane_not_served","message":"the files plane is declared, but this door does not serve it"}"#,
        None,
    );
    // The peer plane is reached without a token; undeclared, it refuses.
    let reply = door.request("GET", "/resources/peer/h_1", &[], b"");
    assert_refusal(
        &reply,
        404,
        r#"{"error":"plane_not_declared","message":"this capsule declares no peer_files plane"}"#,
        None,
    );
    // An undeclared operator plane refuses every request.
    let door = Door::start(NONE);
    let reply = door.request("POST", "/resources/files/x", &[], b"x");
    assert_refusal(
        &reply,
        404,
        r#"{"error":"plane_not_declared","message":"this capsule declares no files plane"}"#,
        None,
    );
    // /resources/filesx is not the plane.
    assert_refusal(&door.get("/resources/filesx"), 404, NOT_FOUND, None);
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

// Step 9 and "Completion errors": a completion addressed to another session
// is -31001 before its method is read; any method but SendMessage is
// -32601; one no task awaits is -31002 before its params are read.
#[test]
fn step_9_completions() {
    let door = Door::start(PUBLIC);
    let card = door.get("/.well-known/agent-card.json").json();
    let session = card["capabilities"]["extensions"][1]["params"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let origin = ("x-murmur-task-origin", "completion");
    let murmur_error = |code: i64, message: &str, reason: &str, metadata: Value| {
        json!({"code": code, "message": message, "data": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "murmur.nexus",
            "metadata": metadata,
        }]})
    };

    let reply = door.rpc(&rpc("NoSuchMethod", "[]"), &[origin]);
    assert_rpc_error(
        &reply,
        json!(1),
        murmur_error(
            -31001,
            "completion names no session in x-murmur-completion-session; it is not for this session",
            "COMPLETION_MISADDRESSED",
            json!({"addressedSession": ""}),
        ),
    );
    let other = "ses_0000000000000000000000000000beef";
    let reply = door.rpc(
        &rpc("SendMessage", "{}"),
        &[origin, ("x-murmur-completion-session", other)],
    );
    assert_rpc_error(
        &reply,
        json!(1),
        murmur_error(
            -31001,
            &format!("completion is addressed to session {other}, not to this session"),
            "COMPLETION_MISADDRESSED",
            json!({"addressedSession": other}),
        ),
    );
    // The version is negotiated first.
    let reply = door.request(
        "POST",
        "/",
        &[
            ("content-type", "application/json"),
            origin,
            ("x-murmur-completion-session", other),
        ],
        rpc("SendMessage", "{}").as_bytes(),
    );
    assert_rpc_error(&reply, json!(1), version_error(""));

    let here = ("x-murmur-completion-session", session.as_str());
    for method in ["GetTask", "murmur.StopSession", "NoSuchMethod"] {
        assert_rpc_error(
            &door.rpc(&rpc(method, "{}"), &[origin, here]),
            json!(1),
            method_not_found(),
        );
    }
    let reply = door.rpc(&rpc("SendMessage", "[]"), &[origin, here]);
    assert_rpc_error(
        &reply,
        json!(1),
        murmur_error(
            -31002,
            "completion names no delegation in x-murmur-delegation-id",
            "COMPLETION_NOT_AWAITED",
            json!({}),
        ),
    );
    let reply = door.rpc(
        &rpc("SendMessage", "[]"),
        &[origin, here, ("x-murmur-delegation-id", "dlg_7b31de")],
    );
    assert_rpc_error(
        &reply,
        json!(1),
        murmur_error(
            -31002,
            "no task in this session is waiting for delegation dlg_7b31de",
            "COMPLETION_NOT_AWAITED",
            json!({"delegationId": "dlg_7b31de"}),
        ),
    );
}

// "Every answer from step 6 on is a JSON-RPC response with HTTP status 200":
// the id is echoed as sent, strings and large integers alike.
#[test]
fn ids_are_echoed_exactly() {
    let door = Door::start(PUBLIC);
    for id in [r#""sub-1""#, "0", "-7", "18446744073709551615", r#""""#] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"NoSuchMethod"}}"#);
        let reply = door.rpc(&body, &[]);
        assert_eq!(
            reply.text(),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#
            )
        );
    }
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
