//! The planes ("Planes"): the operator plane under /resources/files serves
//! what `exports.files` names. The door reads the files through the
//! directories the host preopened for the request, read-only, so the
//! sandbox holds the export whatever these rules do; the rules decide what
//! of those directories is served, and refuse everything else with one
//! answer that tells a file that is not exported from one that is missing.

pub mod directory;
pub mod exports;
pub mod file;
pub mod paths;
pub mod tree;

pub use file::FileBody;

use crate::errors::Refusal;
use crate::http::{Request, Response};
use crate::imports::Imports;
use exports::ExportSet;
use file::FileAnswer;
use tree::Kind;

pub const FILES_PLANE: &str = "/resources/files";
pub const PEER_PLANE: &str = "/resources/peer";

/// A plane's answer: whole, or a file's bytes after a head.
#[derive(Debug)]
pub enum Served {
    Whole(Response),
    File(FileBody),
}

/// Whether `path` is under `plane`: the plane itself, or below it.
pub fn on_plane(path: &str, plane: &str) -> bool {
    path.strip_prefix(plane)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// A request under the operator plane, once its scope is checked (step 4):
/// its method, then its query, then its path, and only then the files.
pub fn files<I: Imports>(imports: &I, request: &Request) -> Result<Served, Refusal> {
    if !matches!(request.method.as_str(), "GET" | "HEAD") {
        return Err(Refusal::MethodNotAllowed);
    }
    let query =
        paths::query(&request.path_with_query).ok_or(Refusal::InvalidPage(directory::QUERY))?;
    let page = directory::page(&query)?;
    let rest = request.path().strip_prefix(FILES_PLANE).unwrap_or_default();
    let requested = paths::segments(rest).ok_or(Refusal::FileNotFound)?;
    let exports = ExportSet::new(&imports.exports().files);
    let tree = imports.preopens();
    let resolved = tree::resolve(&tree, &requested).ok_or(Refusal::FileNotFound)?;
    if !directory::served(&exports, &requested, &resolved) {
        return Err(Refusal::FileNotFound);
    }
    match resolved.entry.kind {
        Kind::Directory => Ok(Served::Whole(directory::listing(
            &tree, &exports, &requested, &resolved, &page,
        ))),
        Kind::File => Ok(
            match file::answer(request, &resolved.path, &resolved.entry)? {
                FileAnswer::Whole(response) => Served::Whole(response),
                FileAnswer::Bytes(body) => Served::File(body),
            },
        ),
        Kind::Symlink | Kind::Other => Err(Refusal::FileNotFound),
    }
}
