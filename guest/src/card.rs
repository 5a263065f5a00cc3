//! The Agent Card ("Agent Card", "Keys", "Security", "Extensions"): derived
//! from the capsule, with the keys in the order of the reference's examples.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::extensions;
use crate::http::{Request, Response};
use crate::methods::Method;
use crate::model::{Capsule, Transport};
use crate::timestamp;

/// How long a client may reuse the public card before it asks again
/// (`Cache-Control: max-age`, A2A §8.6.1). The card changes only with the
/// session (it names the session id) or with a door swap that changes it;
/// five minutes bounds how long a client keeps a card from before a
/// restart, and asking again costs a 304.
pub const MAX_AGE_SECONDS: u32 = 300;

/// `GET /.well-known/agent-card.json`, cacheable as A2A asks (§8.6.1): a
/// strong ETag derived from the card's bytes, `Cache-Control` with a
/// max-age, and `Last-Modified` at the session's start. A request whose
/// `If-None-Match` names the card's tag (or `*`), or, without
/// `If-None-Match`, whose `If-Modified-Since` is not before the session's
/// start, is answered 304 with the same headers and no body (RFC 9110
/// 13.1.2, 13.1.3, 15.4.5).
pub fn public_card(request: &Request, capsule: &Capsule) -> Response {
    let body = serde_json::to_vec(&card(capsule, CardKind::Public)).expect("a card serializes");
    let etag = etag(&body);
    let mut headers = vec![
        ("etag".to_string(), etag.clone()),
        (
            "cache-control".to_string(),
            format!("public, max-age={MAX_AGE_SECONDS}"),
        ),
    ];
    if let Some(started) = capsule.started_at_ms {
        headers.push(("last-modified".into(), timestamp::http_date(started)));
    }
    if not_modified(request, &etag, capsule.started_at_ms) {
        return Response {
            status: 304,
            headers,
            body: Vec::new(),
        };
    }
    let mut response = Response {
        status: 200,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("content-length".into(), body.len().to_string()),
        ],
        body,
    };
    response.headers.extend(headers);
    response
}

/// A strong entity tag: the first 128 bits of the bytes' SHA-256, quoted.
fn etag(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Whether the client's copy is current. If-None-Match is compared weakly
/// (a `W/` tag matches its strong twin) and, when present, decides alone.
fn not_modified(request: &Request, etag: &str, started_at_ms: Option<i64>) -> bool {
    let tags = request.header_values("if-none-match");
    if !tags.is_empty() {
        return tags
            .iter()
            .flat_map(|line| line.split(','))
            .map(|tag| tag.trim())
            .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag);
    }
    let since = request
        .header("if-modified-since")
        .and_then(|date| timestamp::parse_http_date(&date));
    match (since, started_at_ms) {
        (Some(since), Some(started)) => started.div_euclid(1000) <= since,
        _ => false,
    }
}

/// Which card to derive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CardKind {
    /// GET /.well-known/agent-card.json: on a public door it carries the
    /// capsule extension, on an authenticated door it does not.
    Public,
    /// GetExtendedAgentCard on an authenticated door: the capsule extension added.
    Extended,
}

const DOOR_DESCRIPTION: &str = "Every JSON-RPC method this door answers, A2A methods and murmur's own alike, the murmur ones named murmur.<Method>; whether it accepts tasks from peer capsules; and the forgetSession field a message's metadata may carry under this URI.";
const CAPSULE_DESCRIPTION: &str = "The session answering this address and what the capsule may do. Served only to authenticated callers once the door authenticates.";
const STREAM_DESCRIPTION: &str = "The murmur frames this capsule writes in addition to the A2A v1.0 events: sent on SendStreamingMessage and SubscribeToTask when the request's A2A-Extensions header names this URI, and always on murmur.WatchSession. Each is carried in a StreamResponse under metadata keyed by this URI.";
const BEARER_DESCRIPTION: &str =
    "A token this capsule's runtime mints at launch and accepts until the session ends.";
const MODES: [&str; 2] = ["text/plain", "application/json"];

/// The card of `kind` for this capsule.
pub fn card(capsule: &Capsule, kind: CardKind) -> Value {
    let with_capsule_extension = kind == CardKind::Extended || !capsule.authenticated;
    let mut extensions = vec![door_extension(capsule)];
    if with_capsule_extension {
        extensions.push(capsule_extension(capsule));
    }
    extensions.push(stream_extension(capsule));

    let (schemes, requirements) = if capsule.authenticated {
        (
            json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": BEARER_DESCRIPTION}}}),
            json!([bearer_requirement(&[])]),
        )
    } else {
        (json!({}), json!([]))
    };

    json!({
        "name": capsule.name,
        "description": format!("Murmur capsule {} {}", capsule.name, capsule.version),
        "version": capsule.version,
        "supportedInterfaces": [
            {"url": capsule.url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "streaming": Method::SendStreamingMessage.served_by(capsule),
            "pushNotifications": false,
            "extendedAgentCard": capsule.authenticated,
            "extensions": extensions,
        },
        "securitySchemes": schemes,
        "securityRequirements": requirements,
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
        "skills": skills(capsule),
    })
}

/// `{"schemes": {"bearer": {"list": [scopes]}}}`.
fn bearer_requirement(scopes: &[&str]) -> Value {
    json!({"schemes": {"bearer": {"list": scopes}}})
}

fn door_extension(capsule: &Capsule) -> Value {
    json!({
        "uri": extensions::DOOR,
        "description": DOOR_DESCRIPTION,
        "required": false,
        "params": {"methods": Method::served(capsule), "peerTasks": capsule.peer_tasks},
    })
}

fn capsule_extension(capsule: &Capsule) -> Value {
    let mut planes = Vec::new();
    if capsule.files_plane {
        planes.push("files");
    }
    if capsule.peer_files_plane {
        planes.push("peer_files");
    }
    json!({
        "uri": extensions::CAPSULE,
        "description": CAPSULE_DESCRIPTION,
        "required": false,
        "params": {
            "sessionId": capsule.session_id,
            "tools": capsule.tools,
            "shell": capsule.shell,
            "network": capsule.network,
            "planes": planes,
        },
    })
}

/// The frames a connection can receive: a harness (`transport: process`)
/// also reports quota and suggested prompts.
pub fn stream_frames(transport: Transport) -> Vec<&'static str> {
    let mut frames = vec![
        "text",
        "thinking",
        "tool-call-started",
        "tool-call-progress",
        "artifact",
    ];
    if transport == Transport::Process {
        frames.extend(["quota", "suggested-prompt"]);
    }
    frames.extend(["gap", "lagged", "connection-ack", "capsule-closed"]);
    frames
}

fn stream_extension(capsule: &Capsule) -> Value {
    json!({
        "uri": extensions::STREAM,
        "description": STREAM_DESCRIPTION,
        "required": false,
        "params": {"frames": stream_frames(capsule.transport)},
    })
}

/// One skill, running a task, on a door that serves SendMessage; none under
/// `task_acceptance: none`. An authenticated door names the scope each
/// task-starting method needs.
fn skills(capsule: &Capsule) -> Value {
    if !Method::SendMessage.served_by(capsule) {
        return json!([]);
    }
    let mut skill = json!({
        "id": "task",
        "name": "Run a task",
        "description": "Runs one task given as a text message and reports its outcome.",
        "tags": ["task"],
    });
    if capsule.authenticated {
        let requirements: Vec<Value> = [Method::SendMessage, Method::SendStreamingMessage]
            .into_iter()
            .filter(|m| m.served_by(capsule))
            .map(|m| bearer_requirement(&[m.name()]))
            .collect();
        skill["securityRequirements"] = Value::Array(requirements);
    }
    json!([skill])
}
