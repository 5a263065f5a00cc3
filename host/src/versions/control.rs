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
//! - `CONTROL_PATH/handles` and `CONTROL_PATH/members`: what the operator
//!   asks of the session (peer handles, members' tokens), answered by the
//!   session ([`crate::session::operator`])

use std::path::Path;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use crate::sandbox::engine::NotAComponent;
use crate::sandbox::request::Stores;
use crate::session::{operator, tokens};
use crate::surface::{self, Reply, json_reply, refusal};
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

/// The routes the capsule's control surface answers itself, beside the
/// session's ([`operator::ROUTES`]).
const ROUTES: [&str; 3] = ["", "/swap", "/rollback"];

/// Serves a request to the control surface: `doors` are swapped and
/// rolled back, a new version tried in a store `stores` makes; what the
/// operator asks of the session, the session answers.
pub async fn serve(
    doors: &Doors,
    stores: &Stores,
    token: &ControlToken,
    parts: hyper::http::request::Parts,
    body: Incoming,
) -> Reply {
    // Before the body is read: a stranger's upload is not compiled, nor read.
    if !token.admits(&parts) {
        return surface::unauthorized();
    }
    let route = &parts.uri.path()[CONTROL_PATH.len()..];
    match (route, &parts.method) {
        ("", &Method::GET) => return json_reply(StatusCode::OK, doors.status()),
        ("/swap", &Method::POST) => {
            let max = doors.max_component_bytes();
            return match read_upload(body, max).await {
                Ok(body) => swap(doors, stores, &parts, body).await,
                Err(refused) => refused,
            };
        }
        ("/rollback", &Method::POST) => {
            return match doors.rollback() {
                Some(_) => json_reply(StatusCode::OK, doors.status()),
                None => refusal(
                    StatusCode::CONFLICT,
                    "no_previous",
                    "there is no previous door to roll back to".into(),
                ),
            };
        }
        _ => {}
    }
    if let Some(reply) = operator::serve(stores.session.operated(), &parts, route, body).await {
        return reply;
    }
    let routes: Vec<&str> = ROUTES.iter().chain(&operator::ROUTES).copied().collect();
    surface::unrouted(
        &parts,
        route,
        &routes,
        &format!(
            "the control surface serves {CONTROL_PATH}, {CONTROL_PATH}/swap, {CONTROL_PATH}/rollback, {CONTROL_PATH}/handles and {CONTROL_PATH}/members"
        ),
    )
}

/// The body of a swap, at most `max` bytes.
pub(crate) async fn read_upload(body: Incoming, max: usize) -> Result<Bytes, Reply> {
    surface::read_limited(body, max, || {
        format!("a component is at most {max} bytes (--max-component-bytes)")
    })
    .await
}

/// A component to swap in: the body's bytes, or with `content-type:
/// application/json` the file `{"path": ...}` names. Its bytes, where they
/// came from, and whether a file was named.
pub(crate) async fn component(
    parts: &hyper::http::request::Parts,
    body: Bytes,
    max: usize,
) -> Result<(Vec<u8>, swap::Source, bool), Reply> {
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
        return Err(refusal(
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
            Err(refusal(
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
pub(crate) fn swap_refused(e: &anyhow::Error, by_path: bool) -> Reply {
    let message = if by_path && e.downcast_ref::<NotAComponent>().is_some() {
        format!("{NotAComponent}; the live door keeps serving")
    } else {
        format!("{e:#}; the live door keeps serving")
    };
    refusal(StatusCode::UNPROCESSABLE_ENTITY, "refused", message)
}

async fn swap(
    doors: &Doors,
    stores: &Stores,
    parts: &hyper::http::request::Parts,
    body: Bytes,
) -> Reply {
    let (bytes, source, by_path) = match component(parts, body, doors.max_component_bytes()).await {
        Ok(component) => component,
        Err(refused) => return refused,
    };
    match doors.swap(bytes, source, stores).await {
        Ok(swapped) => {
            let mut status = doors.status();
            status["tookMs"] = json!(swapped.took.as_secs_f64() * 1000.0);
            json_reply(StatusCode::OK, status)
        }
        Err(e) => swap_refused(&e, by_path),
    }
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
