//! The control surface: the operator's view of the door versions and the
//! way to swap them, on the door's own listener under [`CONTROL_PATH`].
//!
//! The host answers it before a request reaches the door (the reference's
//! check order serves it without a door token), with its own token: minted
//! at launch, 256 bits from the OS RNG, written to its own file (mode 0600)
//! and compared in constant time.
//!
//! - `GET  CONTROL_PATH` → `{"live": {...}, "previous": {...} | null}`
//! - `POST CONTROL_PATH/swap`, the component's bytes as the body, or
//!   `{"path": "..."}` (`content-type: application/json`) to load a file →
//!   the new status and how long the swap took; 422 with the reason when the
//!   component is refused (the live door keeps serving)
//! - `POST CONTROL_PATH/rollback` → the previous door is live again; 409
//!   when there is none
//! - `POST CONTROL_PATH/handles` with `{"path", "audience", "ttlSeconds"?,
//!   "maxUses"?}` → 201 `{"handle", "handleId", "url", "expiresAt"}`: a peer
//!   handle (see [`crate::session::handles`]); 422 with the reason when the path is
//!   not under `exports.peer_files`
//! - `GET CONTROL_PATH/handles` → `{"handles": [...]}`: ids and metadata,
//!   never a handle's value
//! - `DELETE CONTROL_PATH/handles/<handleId>` → the handle is revoked
//! - `POST CONTROL_PATH/members` with `{"caller", "scopes"}` → 201
//!   `{"credential": "member:<caller>", "token"}`: a formation member's
//!   token, which replaces one minted for that caller before
//! - `GET CONTROL_PATH/members` → `{"members": [{"credential", "scopes"}]}`
//! - `DELETE CONTROL_PATH/members/<caller>` → the member's token is revoked

use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Response, StatusCode};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use murmur_door_guest::timestamp::Rfc3339Ms;

use crate::manifest::Scope;
use crate::sandbox::engine::NotAComponent;
use crate::sandbox::request::Stores;
use crate::session::handles;
use crate::session::tasks;
use crate::session::tokens;
use crate::versions::swap::{self, Doors};

/// Under `/.well-known/`: RFC 8615 reserves the prefix, so no path the door
/// serves (`/`, the card, the resource planes) nor any future A2A route can
/// collide with it, and it sits beside the card the host already publishes.
pub const CONTROL_PATH: &str = "/.well-known/murmur/control";

/// The control token.
pub struct ControlToken(String);

impl ControlToken {
    /// 256 bits from the OS RNG, as 64 lowercase hex characters.
    pub fn mint() -> anyhow::Result<ControlToken> {
        Ok(ControlToken(hex::encode(tokens::random::<32>()?)))
    }

    /// A token the operator gives (`MURMUR_DOOR_HOST_CONTROL_TOKEN`, from a
    /// secret store) instead of one minted at launch: 32 to 256 characters
    /// of an RFC 6750 bearer token (letters, digits, `-._~+/`, `=` at the
    /// end), so it fits a header and is not guessed from its length.
    pub fn given(text: &str) -> Result<ControlToken, String> {
        let body = text.trim_end_matches('=');
        let valid = (32..=256).contains(&text.len())
            && !body.is_empty()
            && body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
        match valid {
            true => Ok(ControlToken(text.to_string())),
            false => Err(
                "expected 32 to 256 characters of letters, digits, '-', '.', '_', '~', '+', '/' and a trailing '='"
                    .into(),
            ),
        }
    }

    /// Whether a request's `Authorization: Bearer` is the token.
    pub fn admits(&self, parts: &hyper::http::request::Parts) -> bool {
        let presented = parts
            .headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(bearer)
            .unwrap_or("");
        self.verify(presented)
    }

    /// Whether `presented` is the token, in constant time.
    pub fn verify(&self, presented: &str) -> bool {
        bool::from(presented.as_bytes().ct_eq(self.0.as_bytes()))
    }

    /// Writes the token and a newline, mode 0600, atomically.
    pub fn write_file(&self, path: &Path) -> anyhow::Result<()> {
        tokens::write_secret(path, &format!("{}\n", self.0))
    }
}

impl std::fmt::Debug for ControlToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlToken(..)")
    }
}

/// Whether `path` is the control surface's.
pub fn is_control(path: &str) -> bool {
    path.strip_prefix(CONTROL_PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The token of `Bearer <token>`, the scheme in any case (RFC 9110
/// 11.1), as the door reads it.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Answers a request to the control surface: `doors` are swapped and
/// rolled back, a new version tried in a store `stores` makes.
pub async fn answer(
    doors: &Doors,
    stores: &Stores,
    token: &ControlToken,
    parts: hyper::http::request::Parts,
    body: Incoming,
) -> Response<HyperOutgoingBody> {
    // Before the body is read: a stranger's upload is not compiled, nor read.
    if !token.admits(&parts) {
        return unauthorized();
    }
    let action = &parts.uri.path()[CONTROL_PATH.len()..];
    match (action, &parts.method) {
        ("", &Method::GET) => json_response(StatusCode::OK, doors.status()),
        ("/swap", &Method::POST) => {
            let max = doors.max_component_bytes();
            let body = match read_upload(body, max).await {
                Ok(body) => body,
                Err(refused) => return refused,
            };
            swap(doors, stores, &parts, body).await
        }
        ("/rollback", &Method::POST) => match doors.rollback() {
            Some(_) => json_response(StatusCode::OK, doors.status()),
            None => error(
                StatusCode::CONFLICT,
                "no_previous",
                "there is no previous door to roll back to".into(),
            ),
        },
        ("/handles", &Method::POST) => match read_limited(body, MAX_MINT_BYTES, || {
            format!("a handle's request is at most {MAX_MINT_BYTES} bytes")
        })
        .await
        {
            Ok(body) => mint_handle(stores, &body),
            Err(refused) => refused,
        },
        ("/handles", &Method::GET) => {
            let handles = stores.session.handles.list(tasks::now_ms());
            let listed: Vec<Value> = handles.iter().map(handle_json).collect();
            json_response(StatusCode::OK, json!({"handles": listed}))
        }
        (path, &Method::DELETE) if path.starts_with("/handles/") => {
            let id = &path["/handles/".len()..];
            match stores.session.handles.revoke(id) {
                true => json_response(StatusCode::OK, json!({"revoked": id})),
                false => error(
                    StatusCode::NOT_FOUND,
                    "handle_not_found",
                    format!("no live handle has the id {id:?}"),
                ),
            }
        }
        ("/members", &Method::POST) => match read_limited(body, MAX_MINT_BYTES, || {
            format!("a member's request is at most {MAX_MINT_BYTES} bytes")
        })
        .await
        {
            Ok(body) => mint_member(stores, &body),
            Err(refused) => refused,
        },
        ("/members", &Method::GET) => {
            let members: Vec<Value> = stores
                .session
                .tokens
                .members()
                .iter()
                .map(|grant| {
                    let scopes: Vec<&str> = grant.scopes.iter().map(|s| s.name()).collect();
                    json!({"credential": grant.credential.to_string(), "scopes": scopes})
                })
                .collect();
            json_response(StatusCode::OK, json!({"members": members}))
        }
        (path, &Method::DELETE) if path.starts_with("/members/") => {
            let caller = &path["/members/".len()..];
            match stores.session.tokens.revoke_member(caller) {
                true => {
                    tracing::info!(credential = %format!("member:{caller}"), "member token revoked");
                    json_response(
                        StatusCode::OK,
                        json!({"revoked": format!("member:{caller}")}),
                    )
                }
                false => error(
                    StatusCode::NOT_FOUND,
                    "member_not_found",
                    format!("no member token is held by {caller:?}"),
                ),
            }
        }
        ("" | "/swap" | "/rollback" | "/handles" | "/members", _) => method_not_allowed(&parts),
        (path, _) if path.starts_with("/handles/") || path.starts_with("/members/") => {
            method_not_allowed(&parts)
        }
        _ => error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "the control surface serves {CONTROL_PATH}, {CONTROL_PATH}/swap, {CONTROL_PATH}/rollback, {CONTROL_PATH}/handles and {CONTROL_PATH}/members"
            ),
        ),
    }
}

/// The most a handle's minting may send.
const MAX_MINT_BYTES: usize = 16 << 10;

/// Mints a peer handle from a JSON body: 201 with the handle, 400 for a
/// body that is not the request, 422 for a handle the session refuses.
fn mint_handle(stores: &Stores, body: &[u8]) -> Response<HyperOutgoingBody> {
    let session = &stores.session;
    let Some(exports) = session.planes.peer_files.as_ref() else {
        return error(
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
    match session.handles.mint(exports, mint, tasks::now_ms()) {
        Ok(minted) => {
            tracing::info!(handle_id = %minted.info.id, audience = %minted.info.audience, path = %minted.info.path, "peer handle minted");
            let url = format!(
                "{}{}/{}",
                session.identity.url,
                crate::manifest::planes::PEER_PLANE,
                minted.handle
            );
            json_response(
                StatusCode::CREATED,
                json!({
                    "handle": minted.handle,
                    "handleId": minted.info.id,
                    "url": url,
                    "expiresAt": Rfc3339Ms(minted.info.expires_at_ms).to_string(),
                }),
            )
        }
        Err(why) => error(StatusCode::UNPROCESSABLE_ENTITY, "handle_refused", why),
    }
}

/// Mints a formation member's token from `{"caller", "scopes"}`: 201 with
/// the token, 400 for a body that is not that object, 422 for a caller or
/// scope the session refuses.
fn mint_member(stores: &Stores, body: &[u8]) -> Response<HyperOutgoingBody> {
    let shape = "{\"caller\", \"scopes\": [...]}";
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let caller = request.get("caller").and_then(Value::as_str);
    let scopes = request.get("scopes").and_then(Value::as_array);
    let (Some(caller), Some(scopes)) = (caller, scopes) else {
        return error(
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
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "member_refused",
                    format!("{scope} is not a scope: a door method's name, or resources/files"),
                );
            }
        }
    }
    match stores.session.tokens.mint_member(caller, &granted) {
        Ok(token) => {
            let credential = format!("member:{caller}");
            tracing::info!(%credential, "member token minted");
            json_response(
                StatusCode::CREATED,
                json!({"credential": credential, "token": token}),
            )
        }
        Err(why) => error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "member_refused",
            why.to_string(),
        ),
    }
}

fn bad_mint(why: &str) -> Response<HyperOutgoingBody> {
    error(
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

/// The body of a swap, at most `max` bytes.
pub(crate) async fn read_upload(
    body: Incoming,
    max: usize,
) -> Result<Bytes, Response<HyperOutgoingBody>> {
    read_limited(body, max, || {
        format!("a component is at most {max} bytes (--max-component-bytes)")
    })
    .await
}

/// A body of at most `max` bytes; past it, 413 saying `why`.
async fn read_limited(
    body: Incoming,
    max: usize,
    why: impl FnOnce() -> String,
) -> Result<Bytes, Response<HyperOutgoingBody>> {
    match Limited::new(body, max).collect().await {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            why(),
        )),
        Err(_) => Err(error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the request body could not be read".into(),
        )),
    }
}

/// A component to swap in: the body's bytes, or with `content-type:
/// application/json` the file `{"path": ...}` names. Its bytes, where they
/// came from, and whether a file was named.
pub(crate) async fn component(
    parts: &hyper::http::request::Parts,
    body: Bytes,
    max: usize,
) -> Result<(Vec<u8>, swap::Source, bool), Response<HyperOutgoingBody>> {
    let is_json = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h.split(';').next().unwrap_or("").trim() == "application/json");
    if !is_json {
        return Ok((body.to_vec(), "upload".to_string(), false));
    }
    let path = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("path").and_then(Value::as_str).map(str::to_string));
    let Some(path) = path else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            r#"a JSON body is {"path": "<component file>"}"#.into(),
        ));
    };
    // A refusal never says what the file holds, nor whether it exists
    // or what kind of file it is: only what a component needs.
    match swap::read_component(path.as_ref(), max).await {
        Ok(bytes) => Ok((bytes, path, true)),
        Err(e) => {
            tracing::warn!(%path, error = %format!("{e:#}"), "door swap refused: the file cannot be read");
            Err(error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "refused",
                format!(
                    "{path} cannot be read as a component: it must be a regular file the host can read, of at most {max} bytes (--max-component-bytes); the live door keeps serving"
                ),
            ))
        }
    }
}

/// A swap refused: 422 with the reason; a file's bytes stay unquoted (an
/// upload's are the caller's own).
pub(crate) fn swap_refused(e: &anyhow::Error, by_path: bool) -> Response<HyperOutgoingBody> {
    let message = if by_path && e.downcast_ref::<NotAComponent>().is_some() {
        format!("{NotAComponent}; the live door keeps serving")
    } else {
        format!("{e:#}; the live door keeps serving")
    };
    error(StatusCode::UNPROCESSABLE_ENTITY, "refused", message)
}

async fn swap(
    doors: &Doors,
    stores: &Stores,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Response<HyperOutgoingBody> {
    let (bytes, source, by_path) = match component(parts, body, doors.max_component_bytes()).await {
        Ok(component) => component,
        Err(refused) => return refused,
    };
    match doors.swap(bytes, source, stores).await {
        Ok(swapped) => {
            let mut status = doors.status();
            status["tookMs"] = json!(swapped.took.as_secs_f64() * 1000.0);
            json_response(StatusCode::OK, status)
        }
        Err(e) => swap_refused(&e, by_path),
    }
}

/// 405 for a path served with another method.
pub(crate) fn method_not_allowed(
    parts: &hyper::http::request::Parts,
) -> Response<HyperOutgoingBody> {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not served on {}", parts.method, parts.uri.path()),
    )
}

pub(crate) fn unauthorized() -> Response<HyperOutgoingBody> {
    let mut response = error(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "the control surface needs Authorization: Bearer <control token>".into(),
    );
    response.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    response
}

pub(crate) fn error(
    status: StatusCode,
    code: &str,
    message: String,
) -> Response<HyperOutgoingBody> {
    json_response(status, json!({"error": code, "message": message}))
}

pub(crate) fn json_response(status: StatusCode, body: Value) -> Response<HyperOutgoingBody> {
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON value serializes"));
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .body(
            Full::new(bytes)
                .map_err(|never| match never {})
                .boxed_unsync(),
        )
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_token_is_a_long_bearer_token() {
        for good in [
            &"a".repeat(32),
            "abcdefghijklmnopqrstuvwxyz0123456789-._~+/==",
            &"Z".repeat(256),
        ] {
            assert!(ControlToken::given(good).is_ok(), "{good}");
        }
        for bad in [
            &"a".repeat(31),
            &"a".repeat(257),
            &format!("{} b", "a".repeat(32)),
            &"=".repeat(40),
            &format!("{}=a", "a".repeat(32)),
            &format!("{}\n", "a".repeat(32)),
        ] {
            assert!(ControlToken::given(bad).is_err(), "{bad:?}");
        }
        let token = ControlToken::given(&"k".repeat(40)).unwrap();
        assert!(token.verify(&"k".repeat(40)));
        assert!(!token.verify(&"k".repeat(39)));
    }
}
