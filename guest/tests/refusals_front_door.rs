//! The front of the door natively ("What the door answers", "JSON-RPC
//! request", "A2A-Version", "Errors", "Push notifications", "Tenants",
//! "Completion errors"): every refusal of the check order that needs no
//! socket, with the exact status, headers, code, message and ErrorInfo the
//! end-to-end tests in `tests/front_door.rs` assert.

use crate::common;

use common::{
    FakeHost, a2a_error, answer, assert_refusal, assert_rpc_error, invalid, post, request, rpc,
};
use murmur_door_guest::imports::model::TaskAcceptance;
use murmur_door_guest::{Reply, handle};
use serde_json::{Value, json};

const JSON: (&str, &str) = ("content-type", "application/json");
const VERSION: (&str, &str) = ("A2A-Version", "1.0");
const NOT_FOUND: &str = r#"{"error":"not_found","message":"this door answers GET /.well-known/agent-card.json and JSON-RPC as POST / with content-type: application/json and a body"}"#;
const PEER_NOT_ACCEPTED: &str = r#"{"error":"peer_not_accepted","message":"this capsule does not accept tasks from peer capsules"}"#;
const UNAUTHENTICATED: &str = r#"{"error":"unauthenticated","message":"this door requires a token: send Authorization: Bearer <token>"}"#;
const REALM: &str = r#"Bearer realm="my-agent""#;
const INVALID_TOKEN: &str = r#"Bearer realm="my-agent", error="invalid_token""#;

/// A public door: `task_acceptance: single`, `exports.files` declared.
fn public() -> FakeHost {
    FakeHost::new(false)
}

/// A public door under `lifecycle.task_acceptance: none`, no plane declared.
fn none() -> FakeHost {
    let mut host = FakeHost::new(false);
    host.capsule.task_acceptance = TaskAcceptance::None;
    host.capsule.files_plane = false;
    host
}

/// A JSON-RPC POST / with content-type and A2A-Version, and `headers`.
fn call(host: &FakeHost, body: &str, headers: &[(&str, &str)]) -> murmur_door_guest::Response {
    answer(host, &post(headers), body.as_bytes())
}

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
    invalid("GetTask requires an id")
}

fn invalid_token(message: &str) -> String {
    format!(r#"{{"error":"invalid_token","message":"{message}"}}"#)
}

// Step 5: anything but a POST / with content-type: application/json and a
// body is answered 404; a media type in any case, with parameters, and a
// query on / are served.
#[test]
fn step_5_anything_else_is_404() {
    let host = public();
    let body = rpc("GetTask", "{}");
    let body = body.as_bytes();
    for (method, path, headers, body) in [
        ("GET", "/", &[][..], &b""[..]),
        ("GET", "/nope", &[], b""),
        ("GET", "/.well-known/agent-card.json/x", &[], b""),
        (
            "POST",
            "/.well-known/agent-card.json",
            &[JSON, VERSION],
            body,
        ),
        ("POST", "/rpc", &[JSON, VERSION], body),
        ("PUT", "/", &[JSON, VERSION], body),
        ("POST", "/", &[VERSION], body),
        (
            "POST",
            "/",
            &[("content-type", "text/plain"), VERSION],
            body,
        ),
        ("POST", "/", &[("content-type", "application/jsonx")], body),
        ("POST", "/", &[JSON, VERSION], b""),
    ] {
        let response = answer(&host, &request(method, path, headers), body);
        assert_refusal(&response, 404, NOT_FOUND, None);
    }
    let head = answer(
        &host,
        &request("HEAD", "/.well-known/agent-card.json", &[]),
        b"",
    );
    assert_eq!(head.status, 404);
    for (content_type, path) in [
        ("Application/JSON", "/"),
        ("application/json; charset=utf-8", "/"),
        ("application/json", "/?a=1"),
    ] {
        let headers = [("content-type", content_type), VERSION];
        let response = answer(&host, &request("POST", path, &headers), body);
        assert_rpc_error(&response, json!(1), get_task_requires_an_id());
    }
}

// Step 6: -32700 Invalid JSON payload, with id null and no data; the body is
// read before the version.
#[test]
fn step_6_not_json() {
    let host = public();
    let error = json!({"code": -32700, "message": "Invalid JSON payload"});
    for body in [
        "{",
        "nope",
        "{\"jsonrpc\":\"2.0\",\"id\":1,",
        "\u{feff}{}",
        "\u{ff}",
    ] {
        assert_rpc_error(&call(&host, body, &[]), Value::Null, error.clone());
    }
    let unversioned = answer(&host, &request("POST", "/", &[JSON]), b"{");
    assert_rpc_error(&unversioned, Value::Null, error);
}

// Step 7 and "JSON-RPC request": a batch, a notification, a bad id, method or
// jsonrpc is -32600; the id is echoed only when it is valid. Step 7 comes
// before step 8.
#[test]
fn step_7_not_a_request() {
    let host = public();
    let error = json!({"code": -32600, "message": "Request payload validation error"});
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
        assert_rpc_error(&call(&host, body, &[]), id, error.clone());
    }
    let unversioned = answer(&host, &request("POST", "/", &[JSON]), br#"{"id":3}"#);
    assert_rpc_error(&unversioned, json!(3), error);
}

// Step 8 and "A2A-Version": every row of the table. The header name in any
// case, whitespace ignored; absent or empty reads as ''; several lines are
// joined with ","; a query parameter sets nothing; every method is
// negotiated, streams and murmur's own included, as one JSON body.
#[test]
fn step_8_a2a_version() {
    let host = public();
    let body = rpc("GetTask", "{}");
    let send = |headers: &[(&str, &str)]| {
        let mut all = vec![JSON];
        all.extend_from_slice(headers);
        answer(&host, &request("POST", "/", &all), body.as_bytes())
    };
    for headers in [
        [("A2A-Version", "1.0")],
        [("a2a-version", "1.0.1")],
        [("A2A-VERSION", "1.0.42")],
        [("A2a-Version", "  1.0  ")],
    ] {
        assert_rpc_error(&send(&headers), json!(1), get_task_requires_an_id());
    }
    assert_rpc_error(&send(&[]), json!(1), version_error(""));
    assert_rpc_error(&send(&[("A2A-Version", "")]), json!(1), version_error(""));
    for value in ["0.3", "1", "1.1", "2.0", "1.0x", "1.0.", "1.0.1-rc", "v1.0"] {
        assert_rpc_error(
            &send(&[("A2A-Version", value)]),
            json!(1),
            version_error(value),
        );
    }
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
    let query = answer(
        &host,
        &request("POST", "/?A2A-Version=1.0", &[JSON]),
        body.as_bytes(),
    );
    assert_rpc_error(&query, json!(1), version_error(""));
    for method in [
        "SendStreamingMessage",
        "murmur.WatchSession",
        "murmur.StopSession",
        "SendMessage",
        "NoSuchMethod",
    ] {
        let response = answer(
            &host,
            &request("POST", "/", &[JSON]),
            rpc(method, "{}").as_bytes(),
        );
        assert_rpc_error(&response, json!(1), version_error(""));
    }
    assert_eq!(host.stops.get(), 0);
    assert!(host.started.borrow().is_empty());
}

// Step 10: every name the door extension does not list is -32601, the A2A
// 0.3 names included; names match exactly.
#[test]
fn step_10_method_not_found() {
    let host = public();
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
            &call(&host, &rpc(method, "{}"), &[]),
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
    for host in [public(), none()] {
        for method in names {
            for params in ["{}", "[1]", r#"{"tenant":"acme"}"#, "null"] {
                let response = call(&host, &rpc(method, params), &[]);
                assert_rpc_error(&response, json!(1), push_error());
            }
        }
    }
    let host = FakeHost::new(true);
    for method in names {
        let response = call(
            &host,
            &rpc(method, "7"),
            &[("Authorization", "Bearer watcher")],
        );
        assert_rpc_error(&response, json!(1), push_error());
    }
}

// Step 10: GetExtendedAgentCard on a public door is -32004; under
// task_acceptance none SendMessage is -32601, and SendStreamingMessage and
// SubscribeToTask are -32004 with metadata {}.
#[test]
fn step_10_unsupported_operations() {
    let response = call(&public(), &rpc("GetExtendedAgentCard", "{}"), &[]);
    let error = a2a_error(
        -32004,
        "GetExtendedAgentCard is not supported: this door is public and has no extended card",
        "UNSUPPORTED_OPERATION",
        json!({}),
    );
    assert_rpc_error(&response, json!(1), error);

    let host = none();
    assert_rpc_error(
        &call(&host, &rpc("SendMessage", "{}"), &[]),
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
        let response = call(&host, &rpc(method, r#"{"id":"tsk_x"}"#), &[]);
        assert_rpc_error(&response, json!(1), error);
    }
}

// Step 12: params present and not an object is -32602, and nothing stops;
// omitted params reads as {}.
#[test]
fn step_12_params_not_an_object() {
    let host = public();
    let error = invalid("Invalid params: params must be an object");
    for params in ["[]", "[1]", "\"x\"", "5", "null", "true"] {
        for method in ["GetTask", "murmur.StopSession"] {
            let response = call(&host, &rpc(method, params), &[]);
            assert_rpc_error(&response, json!(1), error.clone());
        }
    }
    assert_eq!(host.stops.get(), 0);
    let omitted = call(&host, r#"{"jsonrpc":"2.0","id":1,"method":"GetTask"}"#, &[]);
    assert_rpc_error(&omitted, json!(1), get_task_requires_an_id());
}

// Step 13 and "Tenants": a tenant other than "" is -32602, its value shown
// as JSON, on every method the door serves; "" reads as absent; -32601 and
// -32009 still come first.
#[test]
fn step_13_tenant() {
    let host = public();
    let tenant = |shown: &str| {
        invalid(&format!(
            "Invalid params: tenant {shown} names a tenant; this agent serves no tenants, so omit tenant"
        ))
    };
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
            let body = rpc(method, &format!(r#"{{"tenant":{value}}}"#));
            assert_rpc_error(&call(&host, &body, &[]), json!(1), tenant(shown));
        }
    }
    assert_eq!(host.stops.get(), 0);
    assert!(host.started.borrow().is_empty());
    let served = call(&host, &rpc("GetTask", r#"{"tenant":"","id":"tsk_x"}"#), &[]);
    assert_rpc_error(
        &served,
        json!(1),
        a2a_error(
            -32001,
            "Task not found",
            "TASK_NOT_FOUND",
            json!({"taskId": "tsk_x"}),
        ),
    );
    assert_rpc_error(
        &call(&host, &rpc("tasks/get", r#"{"tenant":"acme"}"#), &[]),
        json!(1),
        method_not_found(),
    );
    let unversioned = answer(
        &host,
        &request("POST", "/", &[JSON]),
        rpc("GetTask", r#"{"tenant":"acme"}"#).as_bytes(),
    );
    assert_rpc_error(&unversioned, json!(1), version_error(""));
}

// Step 2 and the refusal table: no Authorization is 401 unauthenticated,
// whatever the path or body; not `Bearer <token>`, a token the session did
// not mint (the host's verify answers none), or more than one Authorization
// is 401 invalid_token; a refusal says nothing about a path. The scheme
// matches in any case; with a valid token the rest of the order applies.
#[test]
fn step_2_token() {
    let host = FakeHost::new(true);
    let body = rpc("GetTask", "{}");
    for (method, path, headers, sent) in [
        ("POST", "/", &[JSON, VERSION][..], body.clone()),
        ("GET", "/nope", &[], String::new()),
        ("POST", "/", &[], "{".into()),
        ("POST", "/", &[JSON], body.clone()),
        (
            "POST",
            "/",
            &[JSON, VERSION],
            rpc("CreateTaskPushNotificationConfig", "{}"),
        ),
        ("POST", "/", &[JSON, VERSION], rpc("tasks/get", "{}")),
    ] {
        let response = answer(&host, &request(method, path, headers), sent.as_bytes());
        assert_refusal(&response, 401, UNAUTHENTICATED, Some(REALM));
    }

    let not_bearer = invalid_token("the Authorization header is not Bearer <token>");
    let not_minted = invalid_token("the bearer token is not one this session minted");
    let repeated = invalid_token("more than one Authorization header");
    let body = body.as_bytes();
    let cases: [(&[(&str, &str)], &String); 8] = [
        (&[("Authorization", "Basic op")], &not_bearer),
        (&[("Authorization", "op")], &not_bearer),
        (&[("Authorization", "Bearer")], &not_bearer),
        (&[("Authorization", "")], &not_bearer),
        (&[("Authorization", "Bearer op x")], &not_bearer),
        (&[("Authorization", "Bearer nope")], &not_minted),
        (&[("Authorization", "Bearer OP")], &not_minted),
        (
            &[
                ("Authorization", "Bearer op"),
                ("authorization", "Bearer op"),
            ],
            &repeated,
        ),
    ];
    for (headers, refusal) in cases {
        let response = answer(&host, &post(headers), body);
        assert_refusal(&response, 401, refusal, Some(INVALID_TOKEN));
    }
    let response = answer(
        &host,
        &request("GET", "/nope", &[("Authorization", "Bearer nope")]),
        b"",
    );
    assert_refusal(&response, 401, &not_minted, Some(INVALID_TOKEN));

    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} op");
        let response = answer(&host, &post(&[("Authorization", &auth)]), body);
        assert_rpc_error(&response, json!(1), get_task_requires_an_id());
    }
    let response = answer(
        &host,
        &request("GET", "/nope", &[("Authorization", "Bearer op")]),
        b"",
    );
    assert_refusal(&response, 404, NOT_FOUND, None);
    let response = answer(
        &host,
        &request("POST", "/", &[JSON, ("Authorization", "Bearer op")]),
        body,
    );
    assert_rpc_error(&response, json!(1), version_error(""));
}

// "Security": a public door ignores Authorization.
#[test]
fn step_2_public_door_ignores_authorization() {
    let host = public();
    for auth in ["Bearer nope", "Basic x", ""] {
        let response = call(&host, &rpc("GetTask", "{}"), &[("Authorization", auth)]);
        assert_rpc_error(&response, json!(1), get_task_requires_an_id());
    }
}

// Step 3: peer consent on every door, before the path, the body or the
// method; byte-identical for every request it refuses. The card comes first
// (step 1), the token before consent (step 2), and a capsule accepting peer
// tasks serves them.
#[test]
fn step_3_peer_consent() {
    let peer = ("x-murmur-task-origin", "peer");
    let host = public();
    for (method, path, headers, body) in [
        (
            "POST",
            "/",
            &[JSON, VERSION, peer][..],
            rpc("SendMessage", "{}"),
        ),
        (
            "POST",
            "/",
            &[JSON, VERSION, peer],
            rpc("NoSuchMethod", "[]"),
        ),
        ("GET", "/nope", &[peer], String::new()),
        ("POST", "/", &[peer], "{".into()),
        ("GET", "/resources/files/a", &[peer], String::new()),
    ] {
        let response = answer(&host, &request(method, path, headers), body.as_bytes());
        assert_refusal(&response, 403, PEER_NOT_ACCEPTED, None);
    }
    let card = answer(
        &host,
        &request("GET", "/.well-known/agent-card.json", &[peer]),
        b"",
    );
    assert_eq!(card.status, 200);

    let host = FakeHost::new(true);
    let response = call(&host, &rpc("GetTask", "{}"), &[peer]);
    assert_refusal(&response, 401, UNAUTHENTICATED, Some(REALM));
    let response = call(
        &host,
        &rpc("GetTask", "{}"),
        &[peer, ("Authorization", "Bearer op")],
    );
    assert_refusal(&response, 403, PEER_NOT_ACCEPTED, None);

    let mut host = public();
    host.capsule.peer_tasks = true;
    let response = call(&host, &rpc("GetTask", "{}"), &[peer]);
    assert_rpc_error(&response, json!(1), get_task_requires_an_id());
}

// Step 4 and "Planes": the operator plane's scope, then the plane; step 1:
// the peer plane needs no door token; an undeclared plane refuses every
// request; /resources/filesx is not the plane.
#[test]
fn step_4_operator_plane() {
    let host = FakeHost::new(true);
    let response = answer(
        &host,
        &request(
            "GET",
            "/resources/files/a.txt",
            &[("Authorization", "Bearer watcher")],
        ),
        b"",
    );
    assert_refusal(
        &response,
        403,
        r#"{"error":"insufficient_scope","message":"credential 'watcher' does not reach resources/files"}"#,
        Some(r#"Bearer realm="my-agent", error="insufficient_scope", scope="resources/files""#),
    );
    let response = answer(&host, &request("GET", "/resources/files", &[]), b"");
    assert_refusal(&response, 401, UNAUTHENTICATED, Some(REALM));
    let response = answer(
        &host,
        &request(
            "GET",
            "/resources/files/a.txt",
            &[("Authorization", "Bearer op")],
        ),
        b"",
    );
    // The plane itself, nothing exported: see tests/planes.rs end to end.
    assert_refusal(
        &response,
        404,
        r#"{"error":"file_not_found","message":"nothing this plane serves is at this path"}"#,
        None,
    );
    let response = answer(&host, &request("GET", "/resources/peer/h_1", &[]), b"");
    assert_refusal(
        &response,
        404,
        r#"{"error":"plane_not_declared","message":"this capsule declares no peer_files plane"}"#,
        None,
    );

    let host = none();
    let response = answer(&host, &request("POST", "/resources/files/x", &[]), b"x");
    assert_refusal(
        &response,
        404,
        r#"{"error":"plane_not_declared","message":"this capsule declares no files plane"}"#,
        None,
    );
    let response = answer(&host, &request("GET", "/resources/filesx", &[]), b"");
    assert_refusal(&response, 404, NOT_FOUND, None);
}

// Step 11: the method's scope, after the method (step 10) and before params
// (step 12): 403 naming the credential and the scope it lacks. The scopes a
// credential holds are served; GetExtendedAgentCard needs none.
#[test]
fn step_11_scope() {
    let host = FakeHost::new(true);
    let watcher = [("Authorization", "Bearer watcher")];
    for method in [
        "SendMessage",
        "SendStreamingMessage",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
        "murmur.StopSession",
    ] {
        for params in ["{}", "[1]", r#"{"tenant":"acme"}"#] {
            let response = call(&host, &rpc(method, params), &watcher);
            assert_refusal(
                &response,
                403,
                &format!(
                    r#"{{"error":"insufficient_scope","message":"credential 'watcher' does not reach {method}"}}"#
                ),
                Some(&format!(
                    r#"Bearer realm="my-agent", error="insufficient_scope", scope="{method}""#
                )),
            );
        }
    }
    assert_eq!(host.stops.get(), 0);
    assert_rpc_error(
        &call(&host, &rpc("GetTask", "{}"), &watcher),
        json!(1),
        get_task_requires_an_id(),
    );
    let watch = handle(&host, &post(&watcher), || {
        rpc("murmur.WatchSession", "{}").into_bytes()
    });
    let Reply::Stream(watch) = watch else {
        panic!("murmur.WatchSession opens a stream")
    };
    assert_eq!(
        watch
            .headers
            .iter()
            .find(|(n, _)| n == "content-type")
            .map(|(_, v)| v.as_str()),
        Some("text/event-stream")
    );
    let card = call(&host, &rpc("GetExtendedAgentCard", "{}"), &watcher);
    let card: Value = serde_json::from_slice(&card.body).unwrap();
    assert_eq!(card["result"]["name"], "my-agent");
    assert_rpc_error(
        &call(&host, &rpc("message/send", "{}"), &watcher),
        json!(1),
        method_not_found(),
    );
    for method in ["GetTask", "GetExtendedAgentCard"] {
        assert_rpc_error(
            &call(&host, &rpc(method, "[]"), &watcher),
            json!(1),
            invalid("Invalid params: params must be an object"),
        );
    }
}

// Step 9 and "Completion errors": addressed to no session or another one,
// -31001 before the method is read; the version is negotiated first; any
// method but SendMessage is -32601; no delegation, or one no task awaits,
// -31002 before params is read.
#[test]
fn step_9_completions() {
    let host = public();
    let session = host.identity.session_id.clone();
    let origin = ("x-murmur-task-origin", "completion");
    let murmur_error = |code: i64, message: &str, reason: &str, metadata: Value| {
        json!({"code": code, "message": message, "data": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "murmur.nexus",
            "metadata": metadata,
        }]})
    };

    assert_rpc_error(
        &call(&host, &rpc("NoSuchMethod", "[]"), &[origin]),
        json!(1),
        murmur_error(
            -31001,
            "completion names no session in x-murmur-completion-session; it is not for this session",
            "COMPLETION_MISADDRESSED",
            json!({"addressedSession": ""}),
        ),
    );
    let other = "ses_0000000000000000000000000000beef";
    let elsewhere = ("x-murmur-completion-session", other);
    assert_rpc_error(
        &call(&host, &rpc("SendMessage", "{}"), &[origin, elsewhere]),
        json!(1),
        murmur_error(
            -31001,
            &format!("completion is addressed to session {other}, not to this session"),
            "COMPLETION_MISADDRESSED",
            json!({"addressedSession": other}),
        ),
    );
    let unversioned = answer(
        &host,
        &request("POST", "/", &[JSON, origin, elsewhere]),
        rpc("SendMessage", "{}").as_bytes(),
    );
    assert_rpc_error(&unversioned, json!(1), version_error(""));

    let here = ("x-murmur-completion-session", session.as_str());
    for method in ["GetTask", "murmur.StopSession", "NoSuchMethod"] {
        assert_rpc_error(
            &call(&host, &rpc(method, "{}"), &[origin, here]),
            json!(1),
            method_not_found(),
        );
    }
    assert_rpc_error(
        &call(&host, &rpc("SendMessage", "[]"), &[origin, here]),
        json!(1),
        murmur_error(
            -31002,
            "completion names no delegation in x-murmur-delegation-id",
            "COMPLETION_NOT_AWAITED",
            json!({}),
        ),
    );
    let delegation = ("x-murmur-delegation-id", "dlg_7b31de");
    assert_rpc_error(
        &call(
            &host,
            &rpc("SendMessage", "[]"),
            &[origin, here, delegation],
        ),
        json!(1),
        murmur_error(
            -31002,
            "no task in this session is waiting for delegation dlg_7b31de",
            "COMPLETION_NOT_AWAITED",
            json!({"delegationId": "dlg_7b31de"}),
        ),
    );
    assert_eq!(*host.awaited.borrow(), ["dlg_7b31de"]);
}

// "Every answer from step 6 on is a JSON-RPC response with HTTP status 200":
// the id is echoed as sent, strings and large integers alike.
#[test]
fn ids_are_echoed_exactly() {
    let host = public();
    for id in [r#""sub-1""#, "0", "-7", "18446744073709551615", r#""""#] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"NoSuchMethod"}}"#);
        let response = call(&host, &body, &[]);
        assert_eq!(response.status, 200);
        assert_eq!(
            String::from_utf8(response.body).unwrap(),
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"Method not found"}}}}"#
            )
        );
    }
}
