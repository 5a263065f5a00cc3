//! The card each kind of door serves ("Agent Card", "Keys", "Security",
//! "The public card of an authenticated door", "The extended card", "Door
//! extension", "Capsule extension", "Stream extension"): compared with the
//! reference's examples key for key, in order, up to the session id and url.

use crate::common;

use common::{Door, ordered};
use serde_json::{Value, json};

/// The reference's first card: my-agent 0.1.0, single, bash installed, shell
/// and network granted, exports.files declared, no network.authentication.
const PUBLIC_CARD: &str = r#"{
  "name": "my-agent",
  "description": "Murmur capsule my-agent 0.1.0",
  "version": "0.1.0",
  "supportedInterfaces": [
    { "url": "http://localhost:41873", "protocolBinding": "JSONRPC", "protocolVersion": "1.0" }
  ],
  "capabilities": {
    "streaming": true,
    "pushNotifications": false,
    "extendedAgentCard": false,
    "extensions": [
      {
        "uri": "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1",
        "description": "Every JSON-RPC method this door answers, A2A methods and murmur's own alike, the murmur ones named murmur.<Method>; whether it accepts tasks from peer capsules; and the forgetSession field a message's metadata may carry under this URI.",
        "required": false,
        "params": {
          "methods": ["SendMessage", "SendStreamingMessage", "murmur.WatchSession", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask", "murmur.StopSession"],
          "peerTasks": false
        }
      },
      {
        "uri": "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1",
        "description": "The session answering this address and what the capsule may do. Served only to authenticated callers once the door authenticates.",
        "required": false,
        "params": {
          "sessionId": "ses_019f01a940ce7761854e768ecbe3d399",
          "tools": ["bash"],
          "shell": true,
          "network": true,
          "planes": ["files"]
        }
      },
      {
        "uri": "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1",
        "description": "The murmur frames this capsule writes in addition to the A2A v1.0 events: sent on SendStreamingMessage and SubscribeToTask when the request's A2A-Extensions header names this URI, and always on murmur.WatchSession. Each is carried in a StreamResponse under metadata keyed by this URI.",
        "required": false,
        "params": {
          "frames": ["text", "thinking", "tool-call-started", "tool-call-progress", "artifact", "gap", "lagged", "connection-ack", "capsule-closed"]
        }
      }
    ]
  },
  "securitySchemes": {},
  "securityRequirements": [],
  "defaultInputModes": ["text/plain", "application/json"],
  "defaultOutputModes": ["text/plain", "application/json"],
  "skills": [
    {
      "id": "task",
      "name": "Run a task",
      "description": "Runs one task given as a text message and reports its outcome.",
      "tags": ["task"]
    }
  ]
}"#;

/// "The public card of an authenticated door".
const AUTHENTICATED_CARD: &str = r#"{
  "name": "my-agent",
  "description": "Murmur capsule my-agent 0.1.0",
  "version": "0.1.0",
  "supportedInterfaces": [
    { "url": "http://localhost:41873", "protocolBinding": "JSONRPC", "protocolVersion": "1.0" }
  ],
  "capabilities": {
    "streaming": true,
    "pushNotifications": false,
    "extendedAgentCard": true,
    "extensions": [
      {
        "uri": "https://docs.murmur.nexus/reference/agent-card/#murmur-door-v1",
        "description": "Every JSON-RPC method this door answers, A2A methods and murmur's own alike, the murmur ones named murmur.<Method>; whether it accepts tasks from peer capsules; and the forgetSession field a message's metadata may carry under this URI.",
        "required": false,
        "params": {
          "methods": ["SendMessage", "SendStreamingMessage", "murmur.WatchSession", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask", "murmur.StopSession", "GetExtendedAgentCard"],
          "peerTasks": false
        }
      },
      {
        "uri": "https://docs.murmur.nexus/reference/streaming-protocol/#murmur-stream-v1",
        "description": "The murmur frames this capsule writes in addition to the A2A v1.0 events: sent on SendStreamingMessage and SubscribeToTask when the request's A2A-Extensions header names this URI, and always on murmur.WatchSession. Each is carried in a StreamResponse under metadata keyed by this URI.",
        "required": false,
        "params": {
          "frames": ["text", "thinking", "tool-call-started", "tool-call-progress", "artifact", "gap", "lagged", "connection-ack", "capsule-closed"]
        }
      }
    ]
  },
  "securitySchemes": {
    "bearer": {
      "httpAuthSecurityScheme": {
        "scheme": "Bearer",
        "description": "A token this capsule's runtime mints at launch and accepts until the session ends."
      }
    }
  },
  "securityRequirements": [ { "schemes": { "bearer": { "list": [] } } } ],
  "defaultInputModes": ["text/plain", "application/json"],
  "defaultOutputModes": ["text/plain", "application/json"],
  "skills": [
    {
      "id": "task",
      "name": "Run a task",
      "description": "Runs one task given as a text message and reports its outcome.",
      "tags": ["task"],
      "securityRequirements": [
        { "schemes": { "bearer": { "list": ["SendMessage"] } } },
        { "schemes": { "bearer": { "list": ["SendStreamingMessage"] } } }
      ]
    }
  ]
}"#;

const PUBLIC: &str = "
name: my-agent
version: 0.1.0
tools: [bash]
lifecycle: {task_acceptance: single}
capabilities:
  shell: {allow: [bash]}
  network: {allow: [api.example.com]}
exports: {files: [out/]}
";

const AUTHENTICATED: &str = "
name: my-agent
version: 0.1.0
tools: [bash]
lifecycle: {task_acceptance: single}
capabilities:
  shell: {allow: [bash]}
  network: {allow: [api.example.com]}
exports: {files: [out/]}
network:
  authentication:
    scheme: bearer
    credentials:
      watcher: {scopes: [murmur.WatchSession]}
";

const CAPSULE_URI: &str = "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1";

/// The reference's example with this door's session id and url.
fn expected(example: &str, door: &Door) -> Value {
    let text = example
        .replace("ses_019f01a940ce7761854e768ecbe3d399", &session_id(door))
        .replace("http://localhost:41873", &door.url);
    serde_json::from_str(&text).unwrap()
}

/// The session id the door announced in its log.
fn session_id(door: &Door) -> String {
    let card = door.get("/.well-known/agent-card.json").json();
    let extensions = card["capabilities"]["extensions"].as_array().unwrap();
    match extensions.iter().find(|e| e["uri"] == CAPSULE_URI) {
        Some(capsule) => capsule["params"]["sessionId"].as_str().unwrap().to_string(),
        None => {
            let token = door.token("operator");
            let extended = door
                .rpc_as(
                    &token,
                    r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#,
                )
                .json();
            extended["result"]["capabilities"]["extensions"][1]["params"]["sessionId"]
                .as_str()
                .unwrap()
                .to_string()
        }
    }
}

fn served_card(door: &Door) -> (String, Value) {
    let reply = door.get("/.well-known/agent-card.json");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    (ordered(&reply.text()), reply.json())
}

fn assert_same(served: &str, expected: &Value) {
    assert_eq!(served, serde_json::to_string(expected).unwrap());
}

// "Security": a public door's card is exactly the card at the top of the page.
#[test]
fn public_door_serves_the_reference_card() {
    let door = Door::start(PUBLIC);
    let (served, card) = served_card(&door);
    assert_same(&served, &expected(PUBLIC_CARD, &door));
    // "supportedInterfaces": the address this capsule's listener answers on.
    assert!(
        card["supportedInterfaces"][0]["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:")
    );
    let session = session_id(&door);
    assert_eq!(session.len(), 36);
    assert!(session.starts_with("ses_"));
    // "Keys": no provider, documentationUrl, iconUrl or signatures.
    for key in ["provider", "documentationUrl", "iconUrl", "signatures"] {
        assert!(card.get(key).is_none(), "{key}");
    }
}

// "The public card of an authenticated door".
#[test]
fn authenticated_door_serves_its_public_card() {
    let door = Door::start(AUTHENTICATED);
    let (served, _) = served_card(&door);
    assert_same(&served, &expected(AUTHENTICATED_CARD, &door));
    // Step 1: the card needs no token, and a wrong one changes nothing.
    let with_bad_token = door.request(
        "GET",
        "/.well-known/agent-card.json",
        &[("Authorization", "Bearer nope")],
        b"",
    );
    assert_eq!(with_bad_token.status, 200);
    assert_eq!(ordered(&with_bad_token.text()), served);
}

// "The extended card": the authenticated public card with the capsule
// extension added between the door and stream extensions.
#[test]
fn extended_card_adds_the_capsule_extension() {
    let door = Door::start(AUTHENTICATED);
    for credential in ["operator", "watcher"] {
        let reply = door.rpc_as(
            &door.token(credential),
            r#"{"jsonrpc":"2.0","id":"x","method":"GetExtendedAgentCard"}"#,
        );
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("a2a-extensions"), None);
        let body: Value = serde_json::from_str(&reply.text()).unwrap();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], "x");

        let mut card = expected(AUTHENTICATED_CARD, &door);
        let public = expected(PUBLIC_CARD, &door);
        let capsule = public["capabilities"]["extensions"][1].clone();
        card["capabilities"]["extensions"]
            .as_array_mut()
            .unwrap()
            .insert(1, capsule);
        assert_same(&serde_json::to_string(&body["result"]).unwrap(), &card);
    }
}

// "Door extension": under task_acceptance none, neither SendMessage,
// SendStreamingMessage nor SubscribeToTask is listed, streaming is false and
// skills is [].
#[test]
fn a_door_that_starts_no_task() {
    let door = Door::start(&PUBLIC.replace("task_acceptance: single", "task_acceptance: none"));
    let (served, _) = served_card(&door);
    let mut card = expected(PUBLIC_CARD, &door);
    card["capabilities"]["streaming"] = json!(false);
    card["capabilities"]["extensions"][0]["params"]["methods"] = json!([
        "murmur.WatchSession",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "murmur.StopSession"
    ]);
    card["skills"] = json!([]);
    assert_same(&served, &card);

    let door =
        Door::start(&AUTHENTICATED.replace("task_acceptance: single", "task_acceptance: none"));
    let (served, _) = served_card(&door);
    let mut card = expected(AUTHENTICATED_CARD, &door);
    card["capabilities"]["streaming"] = json!(false);
    card["capabilities"]["extensions"][0]["params"]["methods"] = json!([
        "murmur.WatchSession",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "murmur.StopSession",
        "GetExtendedAgentCard"
    ]);
    card["skills"] = json!([]);
    assert_same(&served, &card);
}

// "Stream extension": a transport: process capsule adds quota and
// suggested-prompt after artifact. "Planes": files, then peer_files.
// "Door extension": peerTasks is exports.peer_tasks.accept.
#[test]
fn process_transport_planes_and_peer_tasks() {
    let yaml = "
name: harnessed
version: 2.3.4
lifecycle: {task_acceptance: queue}
inference: {transport: process}
exports:
  peer_files: [shared/]
  files: [out/]
  peer_tasks: {accept: true}
";
    let door = Door::start(yaml);
    let (_, card) = served_card(&door);
    assert_eq!(card["description"], "Murmur capsule harnessed 2.3.4");
    let extensions = &card["capabilities"]["extensions"];
    assert_eq!(extensions[0]["params"]["peerTasks"], json!(true));
    assert_eq!(
        extensions[1]["params"],
        json!({"sessionId": session_id(&door), "tools": [], "shell": false, "network": false, "planes": ["files", "peer_files"]})
    );
    assert_eq!(
        extensions[2]["params"]["frames"],
        json!([
            "text",
            "thinking",
            "tool-call-started",
            "tool-call-progress",
            "artifact",
            "quota",
            "suggested-prompt",
            "gap",
            "lagged",
            "connection-ack",
            "capsule-closed"
        ])
    );
}

// "Tokens": a restart mints a new session id.
#[test]
fn every_launch_is_a_new_session() {
    let a = Door::start(PUBLIC);
    let b = Door::start(PUBLIC);
    assert_ne!(session_id(&a), session_id(&b));
}

const CARD_PATH: &str = "/.well-known/agent-card.json";

/// The card with `headers`.
fn card_with(door: &Door, headers: &[(&str, &str)]) -> common::Reply {
    door.request("GET", CARD_PATH, headers, b"")
}

/// The HTTP-date of a `ses_` id's second: a session id is a UUIDv7, whose
/// first 48 bits are its start in milliseconds.
fn started(session: &str) -> i64 {
    i64::from_str_radix(&session[4..16], 16).unwrap() / 1000
}

fn parse_http_date(text: &str) -> i64 {
    let format = time::format_description::parse_borrowed::<2>(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT",
    )
    .unwrap();
    time::PrimitiveDateTime::parse(text, &format)
        .unwrap()
        .assume_utc()
        .unix_timestamp()
}

// Issue 10, A2A §8.6.1 "Agent Card caching": the public card carries a
// strong ETag derived from its bytes, Cache-Control with a max-age and
// Last-Modified at the session's start; If-None-Match (any of a list, weak
// or strong, or *) and If-Modified-Since are answered 304 with the same
// headers and no body; anything else gets the whole card.
#[test]
fn the_public_card_caches() {
    let door = Door::start(PUBLIC);
    let first = card_with(&door, &[]);
    assert_eq!(first.status, 200);
    let hash = xxhash_rust::xxh3::xxh3_128(&first.body);
    let etag = format!("\"{hash:032x}\"");
    assert_eq!(first.header("etag"), Some(etag.as_str()));
    assert_eq!(first.header("cache-control"), Some("public, max-age=300"));
    let modified = first.header("last-modified").unwrap().to_string();
    assert_eq!(parse_http_date(&modified), started(&session_id(&door)));
    assert!(
        modified.ends_with(" GMT") && modified.len() == 29,
        "{modified}"
    );
    // Stable across requests.
    let again = card_with(&door, &[]);
    assert_eq!(
        (again.header("etag"), &again.body),
        (Some(etag.as_str()), &first.body)
    );
    // Matches: 304, the same headers, no body.
    let weak = format!("W/{etag}");
    let listed = format!("\"stale\", {etag}");
    for (name, value) in [
        ("if-none-match", etag.as_str()),
        ("if-none-match", listed.as_str()),
        ("if-none-match", weak.as_str()),
        ("if-none-match", "*"),
        ("if-modified-since", modified.as_str()),
    ] {
        let reply = card_with(&door, &[(name, value)]);
        assert_eq!(reply.status, 304, "{name}: {value}");
        assert_eq!(reply.body, b"", "{name}: {value}");
        assert_eq!(reply.header("etag"), Some(etag.as_str()));
        assert_eq!(reply.header("cache-control"), Some("public, max-age=300"));
        assert_eq!(reply.header("last-modified"), Some(modified.as_str()));
    }
    // No match: the whole card. If-None-Match decides alone when present.
    let earlier = "Thu, 01 Jan 1970 00:00:00 GMT";
    for headers in [
        vec![("if-none-match", "\"stale\"")],
        vec![
            ("if-none-match", "\"stale\""),
            ("if-modified-since", modified.as_str()),
        ],
        vec![("if-modified-since", earlier)],
        vec![("if-modified-since", "not a date")],
    ] {
        let reply = card_with(&door, &headers);
        assert_eq!(reply.status, 200, "{headers:?}");
        assert_eq!(reply.body, first.body, "{headers:?}");
        assert_eq!(reply.header("etag"), Some(etag.as_str()));
    }
    // The extended card is a JSON-RPC answer, not cached.
    let extended = door.rpc(
        r#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#,
        &[],
    );
    assert_eq!(extended.header("etag"), None);
    // A resumed session keeps its start (its card names the new listener's
    // port, so its tag follows the new bytes); a new session changes both.
    let door = door.restart(&["--resume"]);
    let resumed = card_with(&door, &[]);
    assert_eq!(resumed.header("last-modified"), Some(modified.as_str()));
    assert_ne!(resumed.header("etag"), Some(etag.as_str()));
    let door = door.restart(&[]);
    let fresh = card_with(&door, &[]);
    assert_ne!(fresh.header("etag"), resumed.header("etag"));
    assert_ne!(fresh.json()["capabilities"], resumed.json()["capabilities"]);
    assert_eq!(
        card_with(&door, &[("if-none-match", etag.as_str())]).status,
        200
    );
}
