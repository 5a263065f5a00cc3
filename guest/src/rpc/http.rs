//! The HTTP request and response the door sees, free of any `wasi:http` type.

use std::borrow::Cow;

use crate::imports::tree::{Entry, Modified};

/// A request's head. The body is read separately, and only once the check
/// order reaches it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The method as sent: `GET`, `POST`, ...
    pub method: String,
    /// The path with its query, as sent: `/`, `/?x=1`, ...
    pub path_with_query: String,
    /// Every header line in order, names as sent, values as bytes: each
    /// line's name and value one after the other in `fields`, and their
    /// lengths in `lines` (the shape the host passes them in, see
    /// `wit/answer.wit`).
    fields: Vec<u8>,
    lines: Vec<(u32, u32)>,
}

impl Request {
    /// A request with these header lines, in order.
    pub fn new<N: AsRef<[u8]>, V: AsRef<[u8]>>(
        method: impl Into<String>,
        path_with_query: impl Into<String>,
        headers: impl IntoIterator<Item = (N, V)>,
    ) -> Request {
        let mut fields = Vec::new();
        let mut lines = Vec::new();
        for (name, value) in headers {
            let (name, value) = (name.as_ref(), value.as_ref());
            fields.extend_from_slice(name);
            fields.extend_from_slice(value);
            lines.push((name.len() as u32, value.len() as u32));
        }
        Request::from_fields(method, path_with_query, fields, lines)
    }

    /// A request whose header lines are `lines` (each a name's and a
    /// value's length) laid one after the other in `fields`. Lines past
    /// the end of `fields` are not seen.
    pub fn from_fields(
        method: impl Into<String>,
        path_with_query: impl Into<String>,
        fields: Vec<u8>,
        lines: Vec<(u32, u32)>,
    ) -> Request {
        Request {
            method: method.into(),
            path_with_query: path_with_query.into(),
            fields,
            lines,
        }
    }

    /// Every header line in order: its name as sent, and its value.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let mut at = 0usize;
        self.lines.iter().map_while(move |&(name, value)| {
            let name_end = at.checked_add(name as usize)?;
            let value_end = name_end.checked_add(value as usize)?;
            let line = (
                self.fields.get(at..name_end)?,
                self.fields.get(name_end..value_end)?,
            );
            at = value_end;
            Some(line)
        })
    }

    /// The path without its query.
    pub fn path(&self) -> &str {
        let p = &self.path_with_query;
        p.split_once('?').map_or(p.as_str(), |(path, _)| path)
    }

    /// Every value of the header `name` (matched in any case), in order,
    /// with surrounding whitespace removed.
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.values(name).map(Cow::into_owned).collect()
    }

    /// [`Request::header_values`], borrowed from the request where a value
    /// is UTF-8 (every value a well-behaved client sends): the checks every
    /// request passes read headers without allocating.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = Cow<'a, str>> + 'a {
        self.headers()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| match String::from_utf8_lossy(v) {
                Cow::Borrowed(value) => Cow::Borrowed(value.trim()),
                Cow::Owned(value) => Cow::Owned(value.trim().to_string()),
            })
    }

    /// The header's value when it is sent exactly once.
    pub fn header(&self, name: &str) -> Option<String> {
        self.header_once(name).map(Cow::into_owned)
    }

    /// [`Request::header`], borrowed where it can be.
    pub fn header_once<'a>(&'a self, name: &'a str) -> Option<Cow<'a, str>> {
        let mut values = self.values(name);
        let one = values.next()?;
        values.next().is_none().then_some(one)
    }
}

/// A response: status, headers and a complete body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Set on an answer the door declares reusable (`murmur:door/answer`'s
    /// `reusable` and `reusable-file`): what it depends on.
    pub reuse: Option<Reuse>,
}

/// What an answer the door declares reusable depends on, beside the
/// request and its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reuse {
    /// What the door read of the session's tasks and tokens; the request's
    /// JSON-RPC id sits in the body here.
    Id(IdAt),
    /// A file, as the door read it (a HEAD's or a 304's answer).
    File(FileRead),
}

/// The file an answer was made of, as the door read it: the path as
/// requested (workdir-relative, reached with no link) and what its head
/// depends on, its size and last change. An answer made of it is the same
/// while that path reaches a file of that size and last change
/// (`murmur:door/answer`'s `reusable-file`): its head says nothing else of
/// the file, and its bytes are read when sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRead {
    pub path: Vec<String>,
    pub size: u64,
    pub modified: Modified,
}

impl FileRead {
    /// What an answer to `requested` made of `entry`, found at `resolved`,
    /// depends on; None when it cannot be declared reusable: a link was
    /// followed on the way (the answer would depend on where it points), or
    /// the file system keeps no time of its last change.
    pub fn of(requested: &[String], resolved: &[String], entry: &Entry) -> Option<FileRead> {
        (requested == resolved).then_some(())?;
        Some(FileRead {
            path: resolved.to_vec(),
            size: entry.size,
            modified: entry.modified?,
        })
    }
}

/// Where a request's JSON-RPC id sits in an answer's body: its first byte
/// and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdAt {
    pub at: usize,
    pub len: usize,
}

impl Response {
    /// A JSON body with the given status.
    pub fn json(status: u16, body: &impl serde::Serialize) -> Response {
        let body = serde_json::to_vec(body).expect("an answer serializes");
        Response {
            status,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("content-length".into(), body.len().to_string()),
            ],
            body,
            reuse: None,
        }
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// The value of a response header, for tests and the edge.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Whether the client's copy of an answer with `etag`, last changed at
/// `modified_ms`, is current (RFC 9110 13.1.2, 13.1.3). If-None-Match is
/// compared weakly (a `W/` tag matches its strong twin) and, when present,
/// decides alone.
pub fn not_modified(request: &Request, etag: &str, modified_ms: Option<i64>) -> bool {
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
        .and_then(|date| crate::timestamp::parse_http_date(&date));
    match (since, modified_ms) {
        (Some(since), Some(modified)) => modified.div_euclid(1000) <= since,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_come_back_in_order_as_sent() {
        let request = Request::new(
            "POST",
            "/",
            [
                ("Content-Type", &b"application/json"[..]),
                ("x-empty", b""),
                ("a2a-extensions", b"urn:a"),
                ("x-bytes", b"\xff\xfe"),
                ("A2A-Extensions", b" urn:b "),
            ],
        );
        let lines: Vec<(&[u8], &[u8])> = request.headers().collect();
        assert_eq!(
            lines,
            [
                (&b"Content-Type"[..], &b"application/json"[..]),
                (b"x-empty", b""),
                (b"a2a-extensions", b"urn:a"),
                (b"x-bytes", b"\xff\xfe"),
                (b"A2A-Extensions", b" urn:b "),
            ]
        );
        assert_eq!(request.header_values("a2a-extensions"), ["urn:a", "urn:b"]);
        assert_eq!(request.header("a2a-extensions"), None);
        assert_eq!(
            request.header("content-type").as_deref(),
            Some("application/json")
        );
        assert_eq!(request.header("x-empty").as_deref(), Some(""));
        assert_eq!(
            request.header("x-bytes").as_deref(),
            Some("\u{fffd}\u{fffd}")
        );
        assert_eq!(request.header("content-length"), None);
    }

    #[test]
    fn a_line_past_the_end_of_the_fields_is_not_seen() {
        let fields = b"a2a-version1.0accept*/*".to_vec();
        let request = Request::from_fields("GET", "/", fields, vec![(11, 3), (6, 3), (4, 9)]);
        assert_eq!(
            request.headers().collect::<Vec<_>>(),
            [(&b"a2a-version"[..], &b"1.0"[..]), (b"accept", b"*/*")]
        );
        let request = Request::from_fields("GET", "/", Vec::new(), vec![(u32::MAX, u32::MAX)]);
        assert_eq!(request.headers().count(), 0);
    }
}
