//! The door's answer to `GET /.well-known/agent-card.json`, kept per door
//! version, as an HTTP cache in front of the door would keep it.
//!
//! The door derives the public card from the session's facts alone (the
//! reference's "Agent Card"): every plain GET of it is answered with the same
//! bytes for as long as the door version and the session are those that
//! answered the first. A capsule's session never changes under its server,
//! and each version of its door ([`crate::versions::swap::Live`]) keeps its own copy,
//! so a swap starts afresh and a rollback finds the copy it left. A
//! conditional GET (`If-None-Match`, `If-Modified-Since`) still reaches the
//! door, which alone decides what is current.
//!
//! Any door can be swapped in, so the door decides what is kept, as it would
//! for a shared cache: only an answer to a request without `Authorization`,
//! and only one whose `Cache-Control` says neither `private` nor `no-store`
//! (nor `no-cache`) and that names no `Vary`, which this cache cannot honour.
//! A door that answers callers differently says so, and every caller is
//! answered by the door.

use std::sync::OnceLock;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body;
use hyper::http::request::Parts;
use hyper::{HeaderMap, Method, Response, StatusCode, header};

/// Where the door serves its public card.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// The largest card kept; a larger one is answered by the door each time.
const MAX_CARD_BYTES: usize = 1 << 20;

/// One door version's card: empty until the door first answers a plain GET.
#[derive(Default)]
pub struct KeptCard(OnceLock<Card>);

/// A whole answer of the door's, status 200.
struct Card {
    headers: HeaderMap,
    body: Bytes,
}

/// Whether the door's answer to this request may be the same for every
/// request like it: a GET of the card's path (whatever its query) that asks
/// for no comparison with a copy the client holds and presents no
/// credential.
pub fn keepable(parts: &Parts) -> bool {
    parts.method == Method::GET
        && parts.uri.path() == CARD_PATH
        && !parts.headers.contains_key(header::IF_NONE_MATCH)
        && !parts.headers.contains_key(header::IF_MODIFIED_SINCE)
        && !parts.headers.contains_key(header::AUTHORIZATION)
}

/// Whether the door lets a shared cache keep its answer: no `Vary`, and no
/// `private`, `no-store` or `no-cache` in `Cache-Control`.
fn shareable(headers: &HeaderMap) -> bool {
    let forbids = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("private").split(','))
        .any(|directive| {
            let name = directive.split('=').next().unwrap_or("").trim();
            ["private", "no-store", "no-cache"]
                .iter()
                .any(|d| name.eq_ignore_ascii_case(d))
        });
    !forbids && !headers.contains_key(header::VARY)
}

impl KeptCard {
    /// The card as the door answered it, if it has.
    pub fn get(&self) -> Option<Response<Full<Bytes>>> {
        let card = self.0.get()?;
        let mut response = Response::new(Full::new(card.body.clone()));
        *response.headers_mut() = card.headers.clone();
        Some(response)
    }

    /// Reads the door's answer to a [`keepable`] request whole, keeps it
    /// when it is a card the door lets a shared cache keep (status 200, at
    /// most [`MAX_CARD_BYTES`], see [`shareable`]), and gives it back whole.
    /// A body that fails is given back as its error.
    pub async fn keep<B: Body<Data = Bytes>>(
        &self,
        response: Response<B>,
    ) -> Result<Response<Full<Bytes>>, B::Error> {
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        if parts.status == StatusCode::OK
            && body.len() <= MAX_CARD_BYTES
            && shareable(&parts.headers)
        {
            let _ = self.0.set(Card {
                headers: parts.headers.clone(),
                body: body.clone(),
            });
        }
        Ok(Response::from_parts(parts, Full::new(body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Request;

    fn parts(method: &str, uri: &str, header: Option<(&str, &str)>) -> Parts {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some((name, value)) = header {
            request = request.header(name, value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_a_plain_get_of_the_card_is_kept() {
        assert!(keepable(&parts("GET", CARD_PATH, None)));
        assert!(keepable(&parts(
            "GET",
            "/.well-known/agent-card.json?x=1",
            None
        )));
        assert!(!keepable(&parts(
            "GET",
            CARD_PATH,
            Some(("authorization", "Bearer x"))
        )));
        assert!(!keepable(&parts("HEAD", CARD_PATH, None)));
        assert!(!keepable(&parts("POST", CARD_PATH, None)));
        assert!(!keepable(&parts("GET", "/", None)));
        assert!(!keepable(&parts(
            "GET",
            "/.well-known/agent-card.json/",
            None
        )));
        assert!(!keepable(&parts(
            "GET",
            CARD_PATH,
            Some(("if-none-match", "*"))
        )));
        assert!(!keepable(&parts(
            "GET",
            CARD_PATH,
            Some(("If-Modified-Since", "Thu, 01 Jan 1970 00:00:00 GMT"))
        )));
    }

    #[tokio::test]
    async fn a_card_is_kept_and_anything_else_is_not() {
        let cache = KeptCard::default();
        let refused = Response::builder()
            .status(503)
            .body(Full::new(Bytes::from_static(b"busy")))
            .unwrap();
        let given = cache.keep(refused).await.unwrap();
        assert_eq!(given.status(), 503);
        assert!(cache.get().is_none());

        let card = Response::builder()
            .header("etag", "\"1\"")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        cache.keep(card).await.unwrap();
        let kept = cache.get().unwrap();
        assert_eq!(kept.status(), 200);
        assert_eq!(kept.headers()["etag"], "\"1\"");
        let body = kept.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{}");
    }

    /// What a door marks as not for a shared cache is answered by the door
    /// every time.
    #[tokio::test]
    async fn an_answer_the_door_keeps_private_is_not_kept() {
        for (name, value) in [
            ("cache-control", "private, max-age=60"),
            ("cache-control", "public, no-store"),
            ("Cache-Control", "No-Cache"),
            ("vary", "authorization"),
        ] {
            let cache = KeptCard::default();
            let card = Response::builder()
                .header(name, value)
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap();
            let given = cache.keep(card).await.unwrap();
            assert_eq!(given.status(), 200);
            assert!(cache.get().is_none(), "{name}: {value}");
        }
        let cache = KeptCard::default();
        let public = Response::builder()
            .header("cache-control", "public, max-age=300")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        cache.keep(public).await.unwrap();
        assert!(cache.get().is_some());
    }
}
