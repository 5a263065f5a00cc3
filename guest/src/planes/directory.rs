//! A directory's answer: a page of the entries it holds that the plane
//! serves, sorted by name, paged the way ListTasks is (`pageSize`,
//! `pageToken`, `nextPageToken`).

use std::collections::BinaryHeap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};

use super::exports::ExportSet;
use crate::imports::tree::{self, Dir, Kind, Preopened, Resolved};
use crate::rpc::errors::Refusal;
use crate::rpc::http::Response;
use crate::timestamp::Rfc3339Ms;

/// Entries a page holds when `pageSize` is absent, and at most.
pub const DEFAULT_PAGE_SIZE: usize = 50;
pub const MAX_PAGE_SIZE: usize = 100;

/// Which page of a listing: its size, and the name the last one ended on.
#[derive(Debug, PartialEq, Eq)]
pub struct Page {
    pub size: usize,
    pub after: Option<String>,
}

/// The page the query asks for. Read before the path, so a refusal here
/// says nothing of what the path names.
pub fn page(query: &[(String, String)]) -> Result<Page, Refusal> {
    let one = |name: &str| {
        let mut values = query.iter().filter(|(n, _)| n == name).map(|(_, v)| v);
        let first = values.next();
        match values.next() {
            None => Ok(first),
            Some(_) => Err(()),
        }
    };
    let size = match one("pageSize") {
        Ok(None) => DEFAULT_PAGE_SIZE,
        Ok(Some(text)) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            match text.trim_start_matches('0') {
                "" => return Err(Refusal::InvalidPage(PAGE_SIZE)),
                digits if digits.len() > 3 => MAX_PAGE_SIZE,
                digits => digits
                    .parse::<usize>()
                    .map_or(MAX_PAGE_SIZE, |n| n.min(MAX_PAGE_SIZE)),
            }
        }
        _ => return Err(Refusal::InvalidPage(PAGE_SIZE)),
    };
    let after = match one("pageToken") {
        Ok(None) => None,
        Ok(Some(token)) if token.is_empty() => None,
        Ok(Some(token)) => Some(
            URL_SAFE_NO_PAD
                .decode(token)
                .ok()
                .and_then(|name| String::from_utf8(name).ok())
                .ok_or(Refusal::InvalidPage(PAGE_TOKEN))?,
        ),
        Err(()) => return Err(Refusal::InvalidPage(PAGE_TOKEN)),
    };
    Ok(Page { size, after })
}

pub const PAGE_SIZE: &str = "pageSize must be an integer from 1, given once";
pub const PAGE_TOKEN: &str = "pageToken must be a nextPageToken this plane answered, given once";
pub const QUERY: &str = "the query must be UTF-8 once percent-decoded";

/// Whether the plane serves what `path` names, being of `kind`: an
/// exported file, or a directory that is exported or on the way to an
/// export. A link is served as its target, and only when both the path
/// asked for and the path it really names are.
pub fn served(exports: &ExportSet, requested: &[String], resolved: &Resolved) -> bool {
    let visible = |path: &[String]| match resolved.entry.kind {
        Kind::File => exports.exported(path),
        Kind::Directory => exports.reaches(path),
        Kind::Symlink | Kind::Other => false,
    };
    visible(requested) && visible(&resolved.path)
}

/// The page of the directory `dir` (asked for as `requested`) that `page`
/// names: `{"entries": [...], "nextPageToken": "..."}`.
pub fn listing<D: Dir>(
    tree: &Preopened<D>,
    exports: &ExportSet,
    requested: &[String],
    dir: &Resolved,
    page: &Page,
) -> Response {
    let mut entries = Vec::with_capacity(page.size);
    let mut after = page.after.clone();
    let mut more = false;
    // Each pass reads the directory for the next names that may be served,
    // keeping no more of them than the page can still take (and one to see
    // whether more follow): memory stays a page's, however large the
    // directory. A pass that finds them all is the last.
    'passes: loop {
        let wanted = page.size + 1 - entries.len();
        let (names, last_pass) =
            next_names(tree, exports, requested, dir, after.as_deref(), wanted);
        for name in names {
            after = Some(name.clone());
            let mut child = requested.to_vec();
            child.push(name.clone());
            let Some(entry) = entry(tree, exports, &child, &name) else {
                continue;
            };
            if entries.len() == page.size {
                more = true;
                break 'passes;
            }
            entries.push(entry);
        }
        if last_pass {
            break;
        }
    }
    let next = match (more, entries.last()) {
        (true, Some(last)) => {
            let name = last["name"].as_str().unwrap_or_default();
            URL_SAFE_NO_PAD.encode(name)
        }
        _ => String::new(),
    };
    Response::json(200, &json!({"entries": entries, "nextPageToken": next}))
}

/// The `wanted` smallest names after `after` in `dir` that an export may
/// lie at or under, sorted; and whether they are all there are.
fn next_names<D: Dir>(
    tree: &Preopened<D>,
    exports: &ExportSet,
    requested: &[String],
    dir: &Resolved,
    after: Option<&str>,
    wanted: usize,
) -> (Vec<String>, bool) {
    let mut smallest: BinaryHeap<String> = BinaryHeap::with_capacity(wanted + 1);
    let mut found = 0usize;
    let mut path = requested.to_vec();
    tree.names(&dir.path, &mut |name| {
        if after.is_some_and(|after| name.as_str() <= after) {
            return;
        }
        path.push(name);
        let candidate = exports.exported(&path) || exports.leads_to(&path);
        let name = path.pop().unwrap_or_default();
        if !candidate {
            return;
        }
        found += 1;
        smallest.push(name);
        if smallest.len() > wanted {
            smallest.pop();
        }
    });
    (smallest.into_sorted_vec(), found <= wanted)
}

/// The listing's entry for `name`, at `child`: None unless the plane
/// serves it.
fn entry<D: Dir>(
    tree: &Preopened<D>,
    exports: &ExportSet,
    child: &[String],
    name: &str,
) -> Option<Value> {
    let resolved = tree::resolve(tree, child)?;
    if !served(exports, child, &resolved) {
        return None;
    }
    let mut entry = Map::new();
    entry.insert("name".into(), name.into());
    let kind = match resolved.entry.kind {
        Kind::File => "file",
        _ => "directory",
    };
    entry.insert("kind".into(), kind.into());
    if resolved.entry.kind == Kind::File {
        entry.insert("size".into(), resolved.entry.size.into());
    }
    if let Some(modified) = resolved.entry.modified {
        let text = Rfc3339Ms(modified.millis()).to_string();
        entry.insert("modified".into(), text.into());
    }
    Some(Value::Object(entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// Reference, "ListTasks": pageSize "An integer from 1. Absent: 50.
    /// Above 100: 100".
    #[test]
    fn a_page_is_read_as_list_tasks_reads_it() {
        assert_eq!(
            page(&[]).unwrap(),
            Page {
                size: 50,
                after: None
            }
        );
        assert_eq!(page(&query(&[("pageSize", "7")])).unwrap().size, 7);
        assert_eq!(page(&query(&[("pageSize", "007")])).unwrap().size, 7);
        assert_eq!(page(&query(&[("pageSize", "101")])).unwrap().size, 100);
        assert_eq!(
            page(&query(&[("pageSize", "99999999999999999999999")]))
                .unwrap()
                .size,
            100
        );
        assert_eq!(
            page(&query(&[("pageToken", &URL_SAFE_NO_PAD.encode("b.txt"))]))
                .unwrap()
                .after,
            Some("b.txt".into())
        );
        assert_eq!(page(&query(&[("pageToken", "")])).unwrap().after, None);
        for bad in [
            query(&[("pageSize", "0")]),
            query(&[("pageSize", "")]),
            query(&[("pageSize", "-1")]),
            query(&[("pageSize", "2.0")]),
            query(&[("pageSize", "2"), ("pageSize", "3")]),
        ] {
            assert_eq!(
                page(&bad).unwrap_err(),
                Refusal::InvalidPage(PAGE_SIZE),
                "{bad:?}"
            );
        }
        for bad in [
            query(&[("pageToken", "!!")]),
            query(&[("pageToken", &URL_SAFE_NO_PAD.encode([0xff]))]),
            query(&[("pageToken", "YQ"), ("pageToken", "YQ")]),
        ] {
            assert_eq!(
                page(&bad).unwrap_err(),
                Refusal::InvalidPage(PAGE_TOKEN),
                "{bad:?}"
            );
        }
    }
}
