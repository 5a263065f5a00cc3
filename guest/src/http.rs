//! The HTTP request and response the door sees, free of any `wasi:http` type.

use std::borrow::Cow;

/// A request's head. The body is read separately, and only once the check
/// order reaches it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The method as sent: `GET`, `POST`, ...
    pub method: String,
    /// The path with its query, as sent: `/`, `/?x=1`, ...
    pub path_with_query: String,
    /// Every header line in order; names as sent, values as bytes.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Request {
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
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
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
