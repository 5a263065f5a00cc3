//! What the operator asks of a session on its door's control surface
//! (`versions::control`, which checks the control token first): the peer
//! handles the session mints (`/handles`) and the tokens of a formation's
//! members (`/members`).
//!
//! - `POST /handles` with `{"path", "audience", "ttlSeconds"?, "maxUses"?}`
//!   → 201 `{"handle", "handleId", "url", "expiresAt"}`; 422 with the
//!   reason when the path is not under `exports.peer_files`
//! - `GET /handles` → `{"handles": [...]}`: ids and metadata, never a
//!   handle's value
//! - `DELETE /handles/<handleId>` → the handle is revoked
//! - `POST /members` with `{"caller", "scopes"}` → 201 `{"credential":
//!   "member:<caller>", "token"}`, which replaces one minted for that
//!   caller before
//! - `GET /members` → `{"members": [{"credential", "scopes"}]}`
//! - `DELETE /members/<caller>` → the member's token is revoked

use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use murmur_door_guest::timestamp::Rfc3339Ms;

use crate::manifest::Scope;
use crate::manifest::planes::{Exports, PEER_PLANE};
use crate::session::handles::{self, Handles};
use crate::session::tasks::now_ms;
use crate::session::tokens::Tokens;
use crate::surface::{self, Reply, json_reply, refusal};

/// The routes [`serve`] answers, as [`surface::unrouted`] names them.
pub const ROUTES: [&str; 4] = ["/handles", "/handles/", "/members", "/members/"];

/// The most a handle's or a member's request may send.
const MAX_MINT_BYTES: usize = 16 << 10;

/// What of a session the operator's requests reach.
pub struct Operated<'a> {
    /// The peer handles minted for the session.
    pub handles: &'a Handles,
    /// What `exports.peer_files` names, when declared.
    pub peer_files: Option<&'a Exports>,
    /// The url the session answers on, which a handle's url starts with.
    pub url: &'a str,
    /// The session's tokens, the members' among them.
    pub tokens: &'a Tokens,
}

/// Answers `route` (the path after the surface's own) when it is one of
/// [`ROUTES`] served with `parts`' method; None otherwise.
pub async fn serve(
    session: Operated<'_>,
    parts: &Parts,
    route: &str,
    body: Incoming,
) -> Option<Reply> {
    let reply = match (route, &parts.method) {
        ("/handles", &Method::POST) => match read_mint(body, "a handle's").await {
            Ok(body) => mint_handle(&session, &body),
            Err(refused) => refused,
        },
        ("/handles", &Method::GET) => {
            let listed: Vec<Value> = session
                .handles
                .list(now_ms())
                .iter()
                .map(handle_json)
                .collect();
            json_reply(StatusCode::OK, json!({"handles": listed}))
        }
        (route, &Method::DELETE) if route.starts_with("/handles/") => {
            let id = &route["/handles/".len()..];
            match session.handles.revoke(id) {
                true => json_reply(StatusCode::OK, json!({"revoked": id})),
                false => refusal(
                    StatusCode::NOT_FOUND,
                    "handle_not_found",
                    format!("no live handle has the id {id:?}"),
                ),
            }
        }
        ("/members", &Method::POST) => match read_mint(body, "a member's").await {
            Ok(body) => mint_member(session.tokens, &body),
            Err(refused) => refused,
        },
        ("/members", &Method::GET) => {
            let members: Vec<Value> = session
                .tokens
                .members()
                .iter()
                .map(|grant| {
                    let scopes: Vec<&str> = grant.scopes.iter().map(|s| s.name()).collect();
                    json!({"credential": grant.credential.to_string(), "scopes": scopes})
                })
                .collect();
            json_reply(StatusCode::OK, json!({"members": members}))
        }
        (route, &Method::DELETE) if route.starts_with("/members/") => {
            let caller = &route["/members/".len()..];
            let credential = format!("member:{caller}");
            match session.tokens.revoke_member(caller) {
                true => {
                    tracing::info!(%credential, "member token revoked");
                    json_reply(StatusCode::OK, json!({"revoked": credential}))
                }
                false => refusal(
                    StatusCode::NOT_FOUND,
                    "member_not_found",
                    format!("no member token is held by {caller:?}"),
                ),
            }
        }
        _ => return None,
    };
    Some(reply)
}

/// A minting request's body, at most [`MAX_MINT_BYTES`].
async fn read_mint(body: Incoming, whose: &str) -> Result<bytes::Bytes, Reply> {
    surface::read_limited(body, MAX_MINT_BYTES, || {
        format!("{whose} request is at most {MAX_MINT_BYTES} bytes")
    })
    .await
}

/// Mints a peer handle from a JSON body: 201 with the handle, 400 for a
/// body that is not the request, 422 for a handle the session refuses.
fn mint_handle(session: &Operated<'_>, body: &[u8]) -> Reply {
    let Some(exports) = session.peer_files else {
        return refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "handle_refused",
            "this capsule declares no peer_files plane".into(),
        );
    };
    let request: Value = match serde_json::from_slice(body) {
        Ok(Value::Object(request)) => Value::Object(request),
        _ => return bad_mint("the body must be a JSON object"),
    };
    let text = |key: &str| request.get(key).and_then(Value::as_str).map(String::from);
    let (Some(path), Some(audience)) = (text("path"), text("audience")) else {
        return bad_mint("path and audience must be strings");
    };
    let number = |key: &str| match request.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or(()),
    };
    let (Ok(ttl_seconds), Ok(max_uses)) = (number("ttlSeconds"), number("maxUses")) else {
        return bad_mint("ttlSeconds and maxUses must be non-negative integers");
    };
    let mint = handles::Mint {
        path,
        audience,
        ttl_seconds,
        max_uses: max_uses.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
    };
    match session.handles.mint(exports, mint, now_ms()) {
        Ok(minted) => {
            tracing::info!(handle_id = %minted.info.id, audience = %minted.info.audience, path = %minted.info.path, "peer handle minted");
            let url = format!("{}{PEER_PLANE}/{}", session.url, minted.handle);
            json_reply(
                StatusCode::CREATED,
                json!({
                    "handle": minted.handle,
                    "handleId": minted.info.id,
                    "url": url,
                    "expiresAt": Rfc3339Ms(minted.info.expires_at_ms).to_string(),
                }),
            )
        }
        Err(why) => refusal(StatusCode::UNPROCESSABLE_ENTITY, "handle_refused", why),
    }
}

/// Mints a formation member's token from `{"caller", "scopes"}`: 201 with
/// the token, 400 for a body that is not that object, 422 for a caller or
/// scope the session refuses.
fn mint_member(tokens: &Tokens, body: &[u8]) -> Reply {
    let shape = "{\"caller\", \"scopes\": [...]}";
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let caller = request.get("caller").and_then(Value::as_str);
    let scopes = request.get("scopes").and_then(Value::as_array);
    let (Some(caller), Some(scopes)) = (caller, scopes) else {
        return refusal(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("the body must be {shape}, caller a string and scopes a list"),
        );
    };
    let mut granted = Vec::with_capacity(scopes.len());
    for scope in scopes {
        match scope.as_str().and_then(Scope::parse) {
            Some(scope) => granted.push(scope),
            None => {
                return refusal(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "member_refused",
                    format!("{scope} is not a scope: a door method's name, or resources/files"),
                );
            }
        }
    }
    match tokens.mint_member(caller, &granted) {
        Ok(token) => {
            let credential = format!("member:{caller}");
            tracing::info!(%credential, "member token minted");
            json_reply(
                StatusCode::CREATED,
                json!({"credential": credential, "token": token}),
            )
        }
        Err(why) => refusal(
            StatusCode::UNPROCESSABLE_ENTITY,
            "member_refused",
            why.to_string(),
        ),
    }
}

fn bad_mint(why: &str) -> Reply {
    refusal(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        format!("{why}: {{\"path\", \"audience\", \"ttlSeconds\"?, \"maxUses\"?}}"),
    )
}

/// A handle as listed: its id and metadata, never its value.
fn handle_json(info: &handles::HandleInfo) -> Value {
    json!({
        "handleId": info.id,
        "path": info.path,
        "audience": info.audience,
        "createdAt": Rfc3339Ms(info.created_at_ms).to_string(),
        "expiresAt": Rfc3339Ms(info.expires_at_ms).to_string(),
        "maxUses": info.max_uses,
        "uses": info.uses,
    })
}
