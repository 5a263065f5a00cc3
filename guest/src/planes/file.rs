//! A served file's answer: its headers, a 304 for a current copy, one
//! range (206), or the whole file (RFC 9110 sections 8.8, 13 and 14).

use crate::imports::tree::Entry;
use crate::rpc::errors::Refusal;
use crate::rpc::http::{self, FileRead, Request, Response, Reuse};
use crate::timestamp;

/// What a GET of a file sends after its head: `len` bytes of the file at
/// `path` (workdir-relative, no link in it) from `offset`. The edge sends
/// them from the file itself, not through the door's memory.
#[derive(Debug, PartialEq, Eq)]
pub struct FileBody {
    /// Status and headers; the body is empty.
    pub head: Response,
    pub path: Vec<String>,
    pub offset: u64,
    pub len: u64,
    /// Set when the door declares the answer reusable: the file it read.
    pub read: Option<FileRead>,
    /// What the plane answers when the file is not there to open by the
    /// time its bytes are sent: `file_not_found`, or the peer plane's one
    /// `handle_not_found`.
    pub missing: Refusal,
}

/// A file's answer: whole (a HEAD, a 304, an empty file), or its bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum FileAnswer {
    Whole(Response),
    Bytes(FileBody),
}

/// The answer to a GET or HEAD of the file at `path`, as `entry` describes
/// it, declared reusable when `read` says what it depends on.
pub fn answer(
    request: &Request,
    path: &[String],
    entry: &Entry,
    read: Option<FileRead>,
) -> Result<FileAnswer, Refusal> {
    let name = path.last().map_or("", String::as_str);
    let etag = etag(entry);
    let modified_ms = entry.modified.map(|m| m.millis());
    let mut validators = vec![("etag".to_string(), etag.clone())];
    if let Some(ms) = modified_ms {
        validators.push(("last-modified".into(), timestamp::http_date(ms)));
    }
    if http::not_modified(request, &etag, modified_ms) {
        return Ok(FileAnswer::Whole(Response {
            status: 304,
            headers: validators,
            body: Vec::new(),
            reuse: read.map(Reuse::File),
        }));
    }
    let size = entry.size;
    // Range is defined for GET alone (RFC 9110 14.2).
    let range = match request.method.as_str() {
        "GET" => range(request, &etag, modified_ms, size)?,
        _ => None,
    };
    let (status, offset, len) = match range {
        Some((first, last)) => (206, first, last - first + 1),
        None => (200, 0, size),
    };
    let content_type = mime_guess::from_path(name)
        .first_raw()
        .unwrap_or("application/octet-stream");
    let mut headers = vec![
        ("content-type".to_string(), content_type.to_string()),
        ("content-length".into(), len.to_string()),
    ];
    headers.extend(validators);
    headers.push(("accept-ranges".into(), "bytes".into()));
    if let Some((first, last)) = range {
        headers.push((
            "content-range".into(),
            format!("bytes {first}-{last}/{size}"),
        ));
    }
    // A file is served as its type says, never sniffed into another.
    headers.push(("x-content-type-options".into(), "nosniff".into()));
    let mut head = Response {
        status,
        headers,
        body: Vec::new(),
        reuse: None,
    };
    if request.method != "GET" || len == 0 {
        head.reuse = read.map(Reuse::File);
        return Ok(FileAnswer::Whole(head));
    }
    Ok(FileAnswer::Bytes(FileBody {
        head,
        path: path.to_vec(),
        offset,
        len,
        read,
        missing: Refusal::FileNotFound,
    }))
}

/// A strong tag: the size and the time of the last change, to the
/// nanosecond, as the file system keeps them.
fn etag(entry: &Entry) -> String {
    match entry.modified {
        Some(m) => format!("\"{:x}-{:x}.{:x}\"", entry.size, m.seconds, m.nanoseconds),
        None => format!("\"{:x}\"", entry.size),
    }
}

/// The one range of a `Range: bytes=…` header, as its first and last byte;
/// None to send the whole file: no Range, one that does not parse, several
/// ranges, several Range lines, or an If-Range the file no longer matches.
/// A range that starts past the end is refused (416).
fn range(
    request: &Request,
    etag: &str,
    modified_ms: Option<i64>,
    size: u64,
) -> Result<Option<(u64, u64)>, Refusal> {
    let lines = request.header_values("range");
    let [line] = lines.as_slice() else {
        return Ok(None);
    };
    if let Some(condition) = request.header("if-range") {
        let current = match condition.strip_prefix('"') {
            // An entity tag is compared strongly: a W/ tag never matches.
            Some(_) => condition == etag,
            None => match (timestamp::parse_http_date(&condition), modified_ms) {
                (Some(date), Some(ms)) => ms.div_euclid(1000) == date,
                _ => false,
            },
        };
        if !current {
            return Ok(None);
        }
    }
    let Some((unit, set)) = line.split_once('=') else {
        return Ok(None);
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") || set.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = set.trim().split_once('-') else {
        return Ok(None);
    };
    let number = |text: &str| {
        let text = text.trim();
        (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse::<u64>().ok())
            .flatten()
    };
    let unsatisfiable = || Refusal::RangeNotSatisfiable(size);
    match (number(first), number(last)) {
        // bytes=-N: the last N bytes.
        (None, Some(suffix)) if first.trim().is_empty() => match suffix {
            0 => Err(unsatisfiable()),
            _ if size == 0 => Err(unsatisfiable()),
            n => Ok(Some((size.saturating_sub(n), size - 1))),
        },
        // bytes=A- and bytes=A-B.
        (Some(first), last_pos) if last.trim().is_empty() || last_pos.is_some() => {
            if last_pos.is_some_and(|last| last < first) {
                return Ok(None);
            }
            if first >= size {
                return Err(unsatisfiable());
            }
            let last = last_pos.map_or(size - 1, |last| last.min(size - 1));
            Ok(Some((first, last)))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imports::tree::{Kind, Modified};

    const ENTRY: Entry = Entry {
        kind: Kind::File,
        size: 1000,
        modified: Some(Modified {
            seconds: 784_111_777,
            nanoseconds: 5,
        }),
    };

    fn get(headers: &[(&str, &str)]) -> Result<FileAnswer, Refusal> {
        let request = Request::new("GET", "/resources/files/out/a.txt", headers.iter().copied());
        answer(&request, &["out".into(), "a.txt".into()], &ENTRY, None)
    }

    fn bytes(answer: Result<FileAnswer, Refusal>) -> FileBody {
        match answer {
            Ok(FileAnswer::Bytes(body)) => body,
            other => panic!("{other:?}"),
        }
    }

    /// Issue 33, "A file": its bytes with Content-Type from its extension,
    /// Content-Length, a strong ETag, Last-Modified and Accept-Ranges.
    #[test]
    fn a_file_is_sent_with_its_validators() {
        let body = bytes(get(&[]));
        assert_eq!(body.path, ["out", "a.txt"]);
        assert_eq!((body.offset, body.len), (0, 1000));
        assert_eq!(body.head.status, 200);
        assert_eq!(
            body.head.headers,
            [
                ("content-type", "text/plain"),
                ("content-length", "1000"),
                ("etag", "\"3e8-2ebc98a1.5\""),
                ("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ("accept-ranges", "bytes"),
                ("x-content-type-options", "nosniff"),
            ]
            .map(|(n, v)| (n.to_string(), v.to_string()))
        );
    }

    #[test]
    fn a_current_copy_is_not_sent_again() {
        for condition in [
            ("if-none-match", "\"3e8-2ebc98a1.5\""),
            ("if-none-match", "W/\"3e8-2ebc98a1.5\""),
            ("if-none-match", "\"x\", \"3e8-2ebc98a1.5\""),
            ("if-none-match", "*"),
            ("if-modified-since", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("if-modified-since", "Mon, 07 Nov 1994 08:49:37 GMT"),
        ] {
            let Ok(FileAnswer::Whole(response)) = get(&[condition]) else {
                panic!("{condition:?}");
            };
            assert_eq!(response.status, 304, "{condition:?}");
            assert_eq!(response.header("etag"), Some("\"3e8-2ebc98a1.5\""));
            assert!(response.body.is_empty());
        }
        for stale in [
            [
                ("if-none-match", "\"other\""),
                ("if-modified-since", "Mon, 07 Nov 1994 08:49:37 GMT"),
            ],
            [
                ("if-modified-since", "Sat, 05 Nov 1994 08:49:37 GMT"),
                ("x", ""),
            ],
        ] {
            assert_eq!(bytes(get(&stale)).head.status, 200, "{stale:?}");
        }
    }

    #[test]
    fn one_range_is_sent_as_a_part() {
        for (range, first, last) in [
            ("bytes=0-99", 0, 99),
            ("bytes=900-", 900, 999),
            ("bytes=-10", 990, 999),
            ("bytes=-5000", 0, 999),
            ("bytes=990-5000", 990, 999),
            ("Bytes = 5-5", 5, 5),
        ] {
            let body = bytes(get(&[("range", range)]));
            assert_eq!(body.head.status, 206, "{range}");
            assert_eq!(
                (body.offset, body.len),
                (first, last - first + 1),
                "{range}"
            );
            assert_eq!(
                body.head.header("content-range"),
                Some(format!("bytes {first}-{last}/1000").as_str())
            );
            assert_eq!(
                body.head.header("content-length"),
                Some((last - first + 1).to_string().as_str())
            );
        }
    }

    #[test]
    fn a_range_past_the_end_is_refused() {
        for range in ["bytes=1000-", "bytes=5000-6000", "bytes=-0"] {
            assert_eq!(
                get(&[("range", range)]).unwrap_err(),
                Refusal::RangeNotSatisfiable(1000),
                "{range}"
            );
        }
    }

    #[test]
    fn what_is_not_one_range_sends_the_whole_file() {
        for headers in [
            vec![("range", "bytes=0-1,5-6")],
            vec![("range", "bytes=0-1"), ("range", "bytes=5-6")],
            vec![("range", "items=0-1")],
            vec![("range", "bytes=5-1")],
            vec![("range", "bytes=x-1")],
            vec![("range", "bytes=+1-2")],
            vec![("range", "bytes=0-1"), ("if-range", "\"stale\"")],
            vec![("range", "bytes=0-1"), ("if-range", "W/\"3e8-2ebc98a1.5\"")],
            vec![
                ("range", "bytes=0-1"),
                ("if-range", "Sat, 05 Nov 1994 08:49:37 GMT"),
            ],
        ] {
            let body = bytes(get(&headers));
            assert_eq!((body.head.status, body.len), (200, 1000), "{headers:?}");
        }
        let current = [("range", "bytes=0-1"), ("if-range", "\"3e8-2ebc98a1.5\"")];
        assert_eq!(bytes(get(&current)).head.status, 206);
    }

    /// Issue 36 for files: an answer made of a file reached with no link
    /// declares what it depends on, whole (a HEAD, a 304) or sent.
    #[test]
    fn a_file_reached_with_no_link_is_declared_reusable() {
        let path: Vec<String> = vec!["out".into(), "a.txt".into()];
        let read = FileRead::of(&path, &path, &ENTRY).unwrap();
        assert_eq!(
            read,
            FileRead {
                path: path.clone(),
                size: 1000,
                modified: ENTRY.modified.unwrap(),
            }
        );
        let linked = ["out".to_string(), "link.txt".to_string()];
        assert_eq!(FileRead::of(&linked, &path, &ENTRY), None);
        let timeless = Entry {
            modified: None,
            ..ENTRY
        };
        assert_eq!(FileRead::of(&path, &path, &timeless), None);

        let request = Request::new("GET", "/", [("if-none-match", "\"3e8-2ebc98a1.5\"")]);
        let Ok(FileAnswer::Whole(not_modified)) =
            answer(&request, &path, &ENTRY, Some(read.clone()))
        else {
            panic!()
        };
        assert_eq!(not_modified.status, 304);
        assert_eq!(not_modified.reuse, Some(Reuse::File(read.clone())));
        let request = Request::new("GET", "/", [("range", "bytes=0-1")]);
        let sent = bytes(answer(&request, &path, &ENTRY, Some(read.clone())));
        assert_eq!((sent.head.status, sent.read), (206, Some(read)));
        assert_eq!(sent.head.reuse, None);
    }

    #[test]
    fn a_head_sends_the_head_alone() {
        let request = Request::new("HEAD", "/", [("range", "bytes=0-1")]);
        let Ok(FileAnswer::Whole(head)) = answer(&request, &["x.bin".into()], &ENTRY, None) else {
            panic!()
        };
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-length"), Some("1000"));
        assert_eq!(
            head.header("content-type"),
            Some("application/octet-stream")
        );
        assert!(head.body.is_empty());
    }
}
