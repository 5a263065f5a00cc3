//! The planes on the host's side ("Planes"): what `exports.files` and
//! `exports.peer_files` name in the capsule's workdir, checked at launch,
//! and the directories a request on a plane finds preopened: the narrowest
//! ones that hold the plane's exports, read-only. The door decides what of
//! them it serves; the preopens are what it can reach at all.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use murmur_door_guest::planes::on_plane;
pub use murmur_door_guest::planes::{FILES_PLANE, PEER_PLANE};
use rustix::fs::{Mode, OFlags};
use wasmtime_wasi::{FsPerms, WasiCtx};

/// One plane's exports: workdir-relative paths and globs, `/`-separated,
/// each checked: relative, no `..` segment, a glob that parses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exports(pub Vec<String>);

impl Exports {
    /// `patterns` checked; the error says what is wrong with the first one
    /// that is not an export.
    pub fn new(patterns: Vec<String>) -> Result<Exports, String> {
        for pattern in &patterns {
            check(pattern).map_err(|why| format!("{pattern:?} {why}"))?;
        }
        Ok(Exports(patterns))
    }

    /// The narrowest directories that hold every export, workdir-relative
    /// (`[]` is the workdir), none inside another: a pattern's segments up
    /// to its first glob, or, for a plain path, the path itself when it is
    /// a directory and the one above it otherwise.
    pub fn roots(&self, workdir: &Path) -> Vec<Vec<String>> {
        let mut roots: Vec<Vec<String>> = Vec::new();
        for pattern in &self.0 {
            let segments = segments(pattern);
            let literal: Vec<String> = segments
                .iter()
                .take_while(|s| !is_glob(s))
                .cloned()
                .collect();
            let globbed = literal.len() < segments.len();
            let root = if globbed || literal.is_empty() || workdir.join(literal.join("/")).is_dir()
            {
                literal
            } else {
                literal[..literal.len() - 1].to_vec()
            };
            roots.push(root);
        }
        roots.sort();
        roots.dedup();
        let all = roots.clone();
        roots.retain(|root| {
            !all.iter()
                .any(|other| other.len() < root.len() && root.starts_with(other))
        });
        roots
    }
}

fn check(pattern: &str) -> Result<(), &'static str> {
    if pattern.is_empty() {
        return Err("is empty");
    }
    if pattern.starts_with('/') {
        return Err("is absolute: exports are relative to the workdir");
    }
    if pattern.contains('\0') || pattern.contains('\\') {
        return Err("holds a NUL or a backslash");
    }
    if pattern.split('/').any(|s| s == "..") {
        return Err("has a `..` segment: exports stay inside the workdir");
    }
    glob::Pattern::new(pattern).map_err(|e| e.msg)?;
    Ok(())
}

/// A pattern's segments: no empty or `.` one (`./out/` is `out`).
fn segments(pattern: &str) -> Vec<String> {
    pattern
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .map(String::from)
        .collect()
}

fn is_glob(segment: &str) -> bool {
    segment.contains(['*', '?', '['])
}

/// What the capsule's planes export, and from where.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Planes {
    /// The directory the exports are relative to: the manifest's, or the
    /// one `--workdir` or a capsules file's `workdir:` names.
    pub workdir: PathBuf,
    /// `exports.files`, when declared.
    pub files: Option<Exports>,
    /// `exports.peer_files`, when declared.
    pub peer_files: Option<Exports>,
}

/// Which plane `path` is on, as the metrics name it: `files` or `peer`.
pub fn plane_of(path: &str) -> Option<&'static str> {
    if on_plane(path, FILES_PLANE) {
        Some("files")
    } else if on_plane(path, PEER_PLANE) {
        Some("peer")
    } else {
        None
    }
}

/// `path` as a log may show it: a peer handle is a secret, so the peer
/// plane's paths are shown without it.
pub fn logged(path: &str) -> &str {
    match plane_of(path) {
        Some("peer") => "/resources/peer/…",
        _ => path,
    }
}

impl Planes {
    /// The exports of the declared plane `path` is on; None off the
    /// planes, and on a plane the manifest does not declare.
    pub fn of(&self, path: &str) -> Option<&Exports> {
        match plane_of(path) {
            Some("files") => self.files.as_ref(),
            Some(_) => self.peer_files.as_ref(),
            None => None,
        }
    }

    /// A request's wasi context with `exports`' roots preopened read-only,
    /// each named by its workdir-relative path (`.` for the workdir). A
    /// root that is missing, is not a directory, or has a link anywhere on
    /// its way down from the workdir is left out: a root is opened one
    /// segment at a time, following no link, so whatever the workdir holds
    /// the preopens are inside it.
    pub fn preopened(&self, exports: &Exports) -> WasiCtx {
        let mut wasi = WasiCtx::builder();
        // A plane's door stats, opens and lists a few entries of a local
        // directory: on the request's own thread, each costs microseconds,
        // where a trip through the blocking pool cost ten times that.
        wasi.allow_blocking_current_thread(true);
        for root in exports.roots(&self.workdir) {
            let Some(dir) = open_root(&self.workdir, &root) else {
                continue;
            };
            let name = root_name(&root);
            // The directory as opened, by its descriptor: nothing can swap a
            // link in between the walk down and the preopen.
            let opened = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir));
            if let Err(e) = wasi.preopened_dir(&opened, &name, FsPerms::ReadOnly) {
                tracing::warn!(root = %name, "an export's directory could not be preopened: {e:#}");
            }
        }
        wasi.build()
    }
}

/// The name a root is preopened under: its workdir-relative path, `.` for
/// the workdir itself.
pub fn root_name(root: &[String]) -> String {
    match root.is_empty() {
        true => ".".to_string(),
        false => root.join("/"),
    }
}

/// The directory `root` below `workdir`, opened one segment at a time with
/// no link followed.
fn open_root(workdir: &Path, root: &[String]) -> Option<std::os::fd::OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(workdir, flags, Mode::empty()).ok()?;
    for segment in root {
        dir = rustix::fs::openat(
            dir.as_fd(),
            segment.as_str(),
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .ok()?;
    }
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exports(patterns: &[&str]) -> Exports {
        Exports::new(patterns.iter().map(|p| p.to_string()).collect()).unwrap()
    }

    /// Issue 33: "The launch stops, naming the key, on any of these: an
    /// absolute path, a `..` segment, or a glob that does not parse."
    #[test]
    fn what_is_not_an_export_is_refused() {
        for (pattern, why) in [
            (
                "/etc/passwd",
                "is absolute: exports are relative to the workdir",
            ),
            (
                "../secret",
                "has a `..` segment: exports stay inside the workdir",
            ),
            (
                "out/../../x",
                "has a `..` segment: exports stay inside the workdir",
            ),
            ("out/[x", "invalid range pattern"),
            (
                "out/a**",
                "recursive wildcards must form a single path component",
            ),
            ("", "is empty"),
            ("a\\b", "holds a NUL or a backslash"),
        ] {
            assert_eq!(
                Exports::new(vec![pattern.into()]).unwrap_err(),
                format!("{pattern:?} {why}")
            );
        }
    }

    #[test]
    fn the_roots_are_the_narrowest_directories_holding_the_exports() {
        let workdir = std::env::temp_dir().join(format!("murmur-roots-{}", std::process::id()));
        std::fs::create_dir_all(workdir.join("data/deep")).unwrap();
        let roots = |patterns: &[&str]| exports(patterns).roots(&workdir);
        let path = |p: &str| {
            p.split('/')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            roots(&["out/**", "logs/*.txt"]),
            [path("logs"), path("out")]
        );
        assert_eq!(roots(&["report.md", "out/**"]), [path("")]);
        assert_eq!(roots(&["data", "data/deep/x"]), [path("data")]);
        assert_eq!(roots(&["./data/deep/"]), [path("data/deep")]);
        assert_eq!(roots(&["*/x.txt"]), [path("")]);
        assert_eq!(roots(&["a/b/c.txt"]), [path("a/b")]);
        assert!(roots(&[]).is_empty());
        std::fs::remove_dir_all(&workdir).unwrap();
    }
}
