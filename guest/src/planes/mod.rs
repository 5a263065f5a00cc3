//! The planes ("Planes"): the operator plane under /resources/files serves
//! what `exports.files` names, and the peer plane under
//! /resources/peer/<handle> the one file of `exports.peer_files` a handle
//! the runtime minted grants its audience. The door reads the files through the
//! directories the host preopened for the request, read-only, so the
//! sandbox holds the export whatever these rules do; the rules decide what
//! of those directories is served, and refuse everything else with one
//! answer that tells a file that is not exported from one that is missing.

pub mod directory;
pub mod exports;
pub mod file;
pub mod paths;

pub use file::FileBody;

use crate::imports::Imports;
use crate::imports::tree::{self, Kind};
use crate::rpc::errors::Refusal;
use crate::rpc::http::{FileRead, Request, Response};
use exports::ExportSet;
use file::FileAnswer;

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
    let target = paths::target(rest).ok_or(Refusal::FileNotFound)?;
    let requested = target.segments;
    let exported = imports.exports();
    let exports = ExportSet::new(&exported.files).withholding(&exported.withheld);
    // The exports first: a path no export names costs no look at the
    // files, so its answer's timing tells it from a missing one no more
    // than its bytes do.
    if !(exports.exported(&requested) || exports.reaches(&requested)) {
        return Err(Refusal::FileNotFound);
    }
    let tree = imports.preopens();
    let resolved = tree::resolve(&tree, &requested).ok_or(Refusal::FileNotFound)?;
    if !directory::served(&exports, &requested, &resolved) {
        return Err(Refusal::FileNotFound);
    }
    match resolved.entry.kind {
        // `out` is the directory `out/`, as every file server answers it.
        Kind::Directory if !target.directory => Ok(Served::Whole(to_directory(request))),
        Kind::Directory => Ok(Served::Whole(directory::listing(
            &tree, &exports, &requested, &resolved, &page,
        ))),
        // A trailing slash names a directory: a file is not there.
        Kind::File if target.directory => Err(Refusal::FileNotFound),
        // A listing is never reused: it depends on every entry it names.
        Kind::File => Ok(
            match file::answer(
                request,
                &resolved.path,
                &resolved.entry,
                FileRead::of(&requested, &resolved.path, &resolved.entry),
            )? {
                FileAnswer::Whole(response) => Served::Whole(response),
                FileAnswer::Bytes(body) => Served::File(body),
            },
        ),
        Kind::Symlink | Kind::Other => Err(Refusal::FileNotFound),
    }
}

/// `301` to the directory a path without its trailing `/` names: the path
/// as the client wrote it, a `/` after it, then its query.
fn to_directory(request: &Request) -> Response {
    let location = match request.path_with_query.split_once('?') {
        Some((path, query)) => format!("{path}/?{query}"),
        None => format!("{}/", request.path_with_query),
    };
    Response {
        status: 301,
        headers: vec![
            ("location".into(), location),
            ("content-length".into(), "0".into()),
        ],
        body: Vec::new(),
        reuse: None,
    }
}

/// The header naming the capsule that redeems a peer handle.
pub const AUDIENCE: &str = "x-murmur-audience";
/// The header naming the handle a peer plane's answer was served for.
pub const HANDLE_ID: &str = "x-murmur-handle-id";

/// A request under the peer plane (step 1: no door token, whatever peer
/// consent says): its method, then one segment, the handle, redeemed for
/// the `x-murmur-audience` it carries, then the file the handle grants,
/// served as the operator plane serves a file, naming the handle's id.
/// Anything else is one byte-identical `handle_not_found`.
pub fn peer<I: Imports>(imports: &I, request: &Request) -> Result<Served, Refusal> {
    if !matches!(request.method.as_str(), "GET" | "HEAD") {
        return Err(Refusal::MethodNotAllowed);
    }
    let rest = request.path().strip_prefix(PEER_PLANE).unwrap_or_default();
    let segments = paths::segments(rest).ok_or(Refusal::HandleNotFound)?;
    let [handle] = segments.as_slice() else {
        return Err(Refusal::HandleNotFound);
    };
    let audience = request
        .header_once(AUDIENCE)
        .filter(|audience| !audience.is_empty())
        .ok_or(Refusal::HandleNotFound)?;
    let redeemed = imports
        .redeem(handle, &audience)
        .ok_or(Refusal::HandleNotFound)?;
    let path: Vec<String> = redeemed.path.split('/').map(String::from).collect();
    let exported = imports.exports();
    let exports = ExportSet::new(&exported.peer_files).withholding(&exported.withheld);
    if !exports.exported(&path) {
        return Err(Refusal::HandleNotFound);
    }
    let tree = imports.preopens();
    let resolved = tree::resolve(&tree, &path).ok_or(Refusal::HandleNotFound)?;
    if resolved.entry.kind != Kind::File || !directory::served(&exports, &path, &resolved) {
        return Err(Refusal::HandleNotFound);
    }
    let named = |mut head: Response| {
        head.headers
            .push((HANDLE_ID.into(), redeemed.handle_id.clone()));
        head
    };
    // A redeem changes the handle (its uses), so its answer is never reused.
    Ok(
        match file::answer(request, &resolved.path, &resolved.entry, None)? {
            FileAnswer::Whole(response) => Served::Whole(named(response)),
            FileAnswer::Bytes(mut body) => {
                body.head = named(body.head);
                body.missing = Refusal::HandleNotFound;
                Served::File(body)
            }
        },
    )
}
