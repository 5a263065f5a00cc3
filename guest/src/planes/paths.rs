//! A plane's path and query as the door reads them ("Planes"): the path
//! after the plane's prefix, percent-decoded once, as segments; everything a
//! plane cannot mean by a path is refused here, before any file is looked at.

/// The segments of `rest` (what follows a plane's prefix: `""`, `/` or
/// `/out/report.md`), each percent-decoded once. `""` and `/` are the
/// plane's root, no segment. None, which the plane answers as a missing
/// file, for: an empty, `.` or `..` segment (a trailing slash, `//`), a
/// decoded `/` (`%2F`), a backslash or a NUL, a `%` not followed by two hex
/// digits, and bytes that are not UTF-8 once decoded (overlong forms
/// included).
pub fn segments(rest: &str) -> Option<Vec<String>> {
    if rest.is_empty() || rest == "/" {
        return Some(Vec::new());
    }
    rest.strip_prefix('/')?.split('/').map(segment).collect()
}

/// What a path under the operator plane names: its segments, and whether
/// it ends with `/`, which names a directory (as every file server reads
/// it). The plane's root (`""`, `/`) is a directory.
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    pub segments: Vec<String>,
    pub directory: bool,
}

/// The [`Target`] of `rest`: [`segments`] of it with one trailing `/`
/// taken off. None as for [`segments`] (`out//` included).
pub fn target(rest: &str) -> Option<Target> {
    if rest.is_empty() || rest == "/" {
        return Some(Target {
            segments: Vec::new(),
            directory: true,
        });
    }
    match rest.strip_suffix('/') {
        // `//` is no directory: its one segment is empty.
        Some("/") => None,
        Some(dir) => Some(Target {
            segments: segments(dir)?,
            directory: true,
        }),
        None => Some(Target {
            segments: segments(rest)?,
            directory: false,
        }),
    }
}

/// What no segment may hold, on a plane's path or in a manifest's exports
/// (`host/src/manifest/planes.rs` refuses them too): a backslash, which
/// some file systems read as a separator, and a NUL, which none can name.
pub const REFUSED_IN_SEGMENT: [char; 2] = ['\\', '\0'];

/// The segment that names the directory above, which leaves the workdir:
/// no plane's path and no export has one.
pub const PARENT: &str = "..";

/// Whether `text`, decoded, can be one segment of a path inside the
/// workdir: not empty, `.` or [`PARENT`], and holding no `/` nor anything
/// [`REFUSED_IN_SEGMENT`]. The host holds a peer handle's path and each
/// name it opens to the same rule.
pub fn is_segment(text: &str) -> bool {
    !(text.is_empty()
        || text == "."
        || text == PARENT
        || text.contains('/')
        || text.contains(REFUSED_IN_SEGMENT))
}

fn segment(raw: &str) -> Option<String> {
    let text = String::from_utf8(decode(raw)?).ok()?;
    is_segment(&text).then_some(text)
}

/// `raw` with each `%XX` replaced by its byte; None for a `%` without two
/// hex digits after it (a sign is not one: `%+1` is refused, which
/// `from_str_radix` would read as 1).
pub fn decode(raw: &str) -> Option<Vec<u8>> {
    let digit = |byte: &u8| char::from(*byte).to_digit(16);
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let high = bytes.get(at + 1).and_then(digit)?;
            let low = bytes.get(at + 2).and_then(digit)?;
            out.push((high * 16 + low) as u8);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    Some(out)
}

/// The query's parameters, each name and value percent-decoded once (`+`
/// left as it is); None for one that does not decode to UTF-8.
pub fn query(path_with_query: &str) -> Option<Vec<(String, String)>> {
    let Some((_, query)) = path_with_query.split_once('?') else {
        return Some(Vec::new());
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let text = |raw: &str| String::from_utf8(decode(raw)?).ok();
            Some((text(name)?, text(value)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(rest: &str) -> Option<Vec<String>> {
        segments(rest)
    }

    #[test]
    fn a_trailing_slash_names_a_directory() {
        let target = |segments: &[&str], directory| {
            Some(Target {
                segments: segments.iter().map(|s| s.to_string()).collect(),
                directory,
            })
        };
        assert_eq!(super::target(""), target(&[], true));
        assert_eq!(super::target("/"), target(&[], true));
        assert_eq!(super::target("/out"), target(&["out"], false));
        assert_eq!(super::target("/out/"), target(&["out"], true));
        assert_eq!(super::target("/out/d/"), target(&["out", "d"], true));
        for refused in ["//", "/out//", "/out/./", "/out/../", "/%2F/"] {
            assert_eq!(super::target(refused), None, "{refused}");
        }
    }

    #[test]
    fn a_path_is_its_segments_decoded_once() {
        assert_eq!(of(""), Some(vec![]));
        assert_eq!(of("/"), Some(vec![]));
        assert_eq!(
            of("/out/report.md"),
            Some(vec!["out".into(), "report.md".into()])
        );
        assert_eq!(of("/a%20b"), Some(vec!["a b".into()]));
        // Decoded once: `%252e` is the three characters `%2e`, a name.
        assert_eq!(of("/%252e%252e"), Some(vec!["%2e%2e".into()]));
        assert_eq!(of("/.hidden"), Some(vec![".hidden".into()]));
        assert_eq!(of("/report.md."), Some(vec!["report.md.".into()]));
    }

    /// Issue: "after one percent-decoding: a `.`, `..` or empty segment, a
    /// backslash, a NUL, or an encoded `/`" is refused.
    #[test]
    fn what_no_path_can_mean_is_refused() {
        for rest in [
            "out",
            "//",
            "/out/",
            "/out//a",
            "/.",
            "/..",
            "/out/..",
            "/%2e",
            "/%2E%2e",
            "/a%2fb",
            "/a%2Fb",
            "/a\\b",
            "/a%5cb",
            "/a%00b",
            "/a%",
            "/a%2",
            "/a%zz",
            // Issue 47: only two hex digits decode; a sign is not one.
            "/%+1",
            "/%-1",
            "/a%+f",
            "/a%2g",
            "/a%2+",
            "/a%g2",
            "/a%%41",
            "/%c0%ae%c0%ae",
            "/%ff",
            "/%e0%80%ae",
        ] {
            assert_eq!(of(rest), None, "{rest}");
        }
    }

    #[test]
    fn a_query_is_decoded_pairs() {
        assert_eq!(query("/x"), Some(vec![]));
        assert_eq!(
            query("/x?pageSize=2&pageToken=a%3D&flag"),
            Some(vec![
                ("pageSize".into(), "2".into()),
                ("pageToken".into(), "a=".into()),
                ("flag".into(), "".into())
            ])
        );
        assert_eq!(query("/x?a=%ff"), None);
        assert_eq!(query("/x?a=%+1"), None);
    }

    /// Issue 47: `%` takes exactly the two hex digits after it, in either
    /// case, and nothing else.
    #[test]
    fn only_two_hex_digits_decode() {
        assert_eq!(
            decode("%41%6a%6A%00%ff%FF"),
            Some(b"Ajj\0\xff\xff".to_vec())
        );
        assert_eq!(decode("%411"), Some(b"A1".to_vec()));
        for raw in [
            "%+1", "%+F", "%-0", "% 1", "%1", "%", "%1z", "%x1", "%\u{e9}1",
        ] {
            assert_eq!(decode(raw), None, "{raw}");
        }
    }
}
