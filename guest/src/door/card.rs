//! The Agent Card ("Agent Card", "Keys", "Security", "Extensions"): derived
//! from the capsule, with the keys in the order of the reference's examples.

use serde::Serialize;

use crate::imports::model::{Capsule, Identity, Transport};
use crate::methods::extension_methods::Method;
use crate::rpc::extensions;
use crate::rpc::http::{self, Request, Response};
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
pub fn public_card(request: &Request, capsule: &Capsule, identity: &Identity) -> Response {
    // A card is about 2 KiB: written into one buffer, never grown.
    let mut body = Vec::with_capacity(4096);
    serde_json::to_writer(&mut body, &card(capsule, identity, CardKind::Public))
        .expect("a card serializes");
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
    if http::not_modified(request, &etag, capsule.started_at_ms) {
        return Response {
            status: 304,
            headers,
            body: Vec::new(),
            reuse: None,
        };
    }
    let mut response = Response {
        status: 200,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("content-length".into(), body.len().to_string()),
        ],
        body,
        reuse: None,
    };
    response.headers.extend(headers);
    response
}

/// A strong entity tag: the bytes' 128-bit XXH3, quoted. A tag only has to
/// change when the bytes do; SHA-256, computed in wasm without the
/// processor's SHA instructions, was nearly half of what a derived card
/// cost.
fn etag(bytes: &[u8]) -> String {
    format!("\"{:032x}\"", xxhash_rust::xxh3::xxh3_128(bytes))
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

/// The card of `kind` for this capsule, serialized straight from the
/// capsule: its fields are in the order they are written.
pub fn card<'a>(capsule: &Capsule, identity: &'a Identity, kind: CardKind) -> Card<'a> {
    let with_capsule_extension = kind == CardKind::Extended || !capsule.authenticated;
    let mut extensions = vec![door_extension(capsule)];
    if with_capsule_extension {
        extensions.push(capsule_extension(capsule, identity));
    }
    extensions.push(stream_extension(capsule));
    let bearer = capsule.authenticated.then_some(BearerScheme {
        http_auth_security_scheme: HttpAuth {
            scheme: "Bearer",
            description: BEARER_DESCRIPTION,
        },
    });
    let security_requirements = if capsule.authenticated {
        vec![bearer_requirement(&[])]
    } else {
        Vec::new()
    };
    Card {
        name: &identity.name,
        description: format!("Murmur capsule {} {}", identity.name, identity.version),
        version: &identity.version,
        supported_interfaces: [Interface {
            url: &identity.url,
            protocol_binding: "JSONRPC",
            protocol_version: "1.0",
        }],
        capabilities: Capabilities {
            streaming: Method::SendStreamingMessage.served_by(capsule),
            push_notifications: false,
            extended_agent_card: capsule.authenticated,
            extensions,
        },
        security_schemes: SecuritySchemes { bearer },
        security_requirements,
        default_input_modes: MODES,
        default_output_modes: MODES,
        skills: skills(capsule),
    }
}

/// The Agent Card, keys in the reference's order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Card<'a> {
    name: &'a str,
    description: String,
    version: &'a str,
    supported_interfaces: [Interface<'a>; 1],
    capabilities: Capabilities<'a>,
    security_schemes: SecuritySchemes,
    security_requirements: Vec<Requirement>,
    default_input_modes: [&'static str; 2],
    default_output_modes: [&'static str; 2],
    skills: Vec<Skill>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Interface<'a> {
    url: &'a str,
    protocol_binding: &'static str,
    protocol_version: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Capabilities<'a> {
    streaming: bool,
    push_notifications: bool,
    extended_agent_card: bool,
    extensions: Vec<Extension<'a>>,
}

/// `{}` on a public door; the bearer scheme on an authenticated one.
#[derive(Serialize)]
struct SecuritySchemes {
    #[serde(skip_serializing_if = "Option::is_none")]
    bearer: Option<BearerScheme>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BearerScheme {
    http_auth_security_scheme: HttpAuth,
}

#[derive(Serialize)]
struct HttpAuth {
    scheme: &'static str,
    description: &'static str,
}

/// `{"schemes": {"bearer": {"list": [scopes]}}}`.
#[derive(Serialize)]
struct Requirement {
    schemes: RequirementSchemes,
}

#[derive(Serialize)]
struct RequirementSchemes {
    bearer: ScopeList,
}

#[derive(Serialize)]
struct ScopeList {
    list: Vec<&'static str>,
}

fn bearer_requirement(scopes: &[&'static str]) -> Requirement {
    Requirement {
        schemes: RequirementSchemes {
            bearer: ScopeList {
                list: scopes.to_vec(),
            },
        },
    }
}

#[derive(Serialize)]
struct Extension<'a> {
    uri: &'static str,
    description: &'static str,
    required: bool,
    params: ExtensionParams<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ExtensionParams<'a> {
    #[serde(rename_all = "camelCase")]
    Door {
        methods: Vec<&'static str>,
        peer_tasks: bool,
    },
    #[serde(rename_all = "camelCase")]
    Capsule {
        session_id: &'a str,
        tools: &'a [String],
        shell: bool,
        network: bool,
        planes: Vec<&'static str>,
    },
    Stream {
        frames: Vec<&'static str>,
    },
}

fn door_extension(capsule: &Capsule) -> Extension<'static> {
    Extension {
        uri: extensions::DOOR,
        description: DOOR_DESCRIPTION,
        required: false,
        params: ExtensionParams::Door {
            methods: Method::served(capsule),
            peer_tasks: capsule.peer_tasks,
        },
    }
}

fn capsule_extension<'a>(capsule: &Capsule, identity: &'a Identity) -> Extension<'a> {
    let mut planes = Vec::new();
    if capsule.files_plane {
        planes.push("files");
    }
    if capsule.peer_files_plane {
        planes.push("peer_files");
    }
    Extension {
        uri: extensions::CAPSULE,
        description: CAPSULE_DESCRIPTION,
        required: false,
        params: ExtensionParams::Capsule {
            session_id: &identity.session_id,
            tools: &identity.tools,
            shell: capsule.shell,
            network: capsule.network,
            planes,
        },
    }
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

fn stream_extension(capsule: &Capsule) -> Extension<'static> {
    Extension {
        uri: extensions::STREAM,
        description: STREAM_DESCRIPTION,
        required: false,
        params: ExtensionParams::Stream {
            frames: stream_frames(capsule.transport),
        },
    }
}

/// One skill: running a task.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Skill {
    id: &'static str,
    name: &'static str,
    description: &'static str,
    tags: [&'static str; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    security_requirements: Option<Vec<Requirement>>,
}

/// One skill, running a task, on a door that serves SendMessage; none under
/// `task_acceptance: none`. An authenticated door names the scope each
/// task-starting method needs.
fn skills(capsule: &Capsule) -> Vec<Skill> {
    if !Method::SendMessage.served_by(capsule) {
        return Vec::new();
    }
    let security_requirements = capsule.authenticated.then(|| {
        [Method::SendMessage, Method::SendStreamingMessage]
            .into_iter()
            .filter(|m| m.served_by(capsule))
            .map(|m| bearer_requirement(&[m.name()]))
            .collect()
    });
    vec![Skill {
        id: "task",
        name: "Run a task",
        description: "Runs one task given as a text message and reports its outcome.",
        tags: ["task"],
        security_requirements,
    }]
}
