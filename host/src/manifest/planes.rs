//! The planes on the host's side ("Planes"): what `exports.files` and
//! `exports.peer_files` name in the capsule's workdir, checked at launch,
//! and the directories a request on a plane finds preopened: the narrowest
//! ones that hold the plane's exports, read-only. The door decides what of
//! them it serves; the preopens are what it can reach at all.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use murmur_door_guest::planes::exports::ExportSet;
use murmur_door_guest::planes::on_plane;
use murmur_door_guest::planes::paths::{PARENT, REFUSED_IN_SEGMENT, is_segment};
pub use murmur_door_guest::planes::{FILES_PLANE, PEER_PLANE};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
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
    if pattern.contains(REFUSED_IN_SEGMENT) {
        return Err("holds a NUL or a backslash");
    }
    if pattern.split('/').any(|s| s == PARENT) {
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
    /// Workdir-relative paths neither plane serves or lists, whatever the
    /// exports: the door's own state inside the workdir (see
    /// [`Planes::withhold`]).
    pub withheld: Vec<String>,
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
        self.named(plane_of(path)?)
    }

    /// The exports of the declared plane `plane` (`files` or `peer`, as
    /// [`plane_of`] names it).
    pub fn named(&self, plane: &str) -> Option<&Exports> {
        match plane {
            "files" => self.files.as_ref(),
            _ => self.peer_files.as_ref(),
        }
    }

    /// The roots [`Exports::roots`] names for `exports`, less those inside
    /// the door's own state, which are never opened.
    fn roots(&self, exports: &Exports) -> Vec<Vec<String>> {
        let mut roots = exports.roots(&self.workdir);
        roots.retain(|root| !self.is_withheld(root));
        roots
    }

    /// A request's wasi context with `exports`' roots preopened read-only,
    /// each named by its workdir-relative path (`.` for the workdir), and
    /// what it opened. A root that is missing, is not a directory, or has a
    /// link anywhere on its way down from the workdir is left out: a root
    /// is opened one segment at a time, following no link, so whatever the
    /// workdir holds the preopens are inside it.
    pub fn preopened(&self, exports: &Exports) -> (WasiCtx, Opened) {
        let mut wasi = WasiCtx::builder();
        // A plane's door stats, opens and lists a few entries of a local
        // directory: on the request's own thread, each costs microseconds,
        // where a trip through the blocking pool cost ten times that.
        wasi.allow_blocking_current_thread(true);
        let mut opened = Opened::default();
        for root in self.roots(exports) {
            let Some((dir, way)) = open_root(&self.workdir, &root) else {
                continue;
            };
            let name = root_name(&root);
            // The directory as opened, by its descriptor: nothing can swap a
            // link in between the walk down and the preopen.
            let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&dir));
            match wasi.preopened_dir(&path, &name, FsPerms::ReadOnly) {
                Ok(_) => opened.0.push((root, way)),
                Err(e) => {
                    tracing::warn!(root = %name, "an export's directory could not be preopened: {e:#}")
                }
            }
        }
        (wasi.build(), opened)
    }

    /// Whether the preopens `opened` are still what [`Planes::preopened`]
    /// would open for `exports` now: the same roots, each reached through
    /// the same directories, none of them now a link. An instance whose
    /// preopens still hold keeps them, which saves a request opening them
    /// anew (the commonest cost of a small file).
    pub fn still(&self, exports: &Exports, opened: &Opened) -> bool {
        let roots = self.roots(exports);
        roots.len() == opened.0.len()
            && roots.iter().zip(&opened.0).all(|(root, (was, way))| {
                root == was && walk(&self.workdir, root).as_ref() == Some(way)
            })
    }
}

impl Planes {
    /// Withholds from both planes each of `paths` that lies inside the
    /// workdir: the door's own state directory and files, which no glob
    /// may export. Paths are compared once both are resolved, so any
    /// spelling of the same directory is caught; a path that does not
    /// exist yet is resolved through its nearest existing parent. A path
    /// that is the workdir itself (a state directory there) withholds
    /// nothing by itself: its files are named one by one.
    pub fn withhold<'a>(&mut self, paths: impl IntoIterator<Item = &'a Path>) {
        let Some(workdir) = resolved(&self.workdir) else {
            return;
        };
        for path in paths {
            let Some(inside) =
                resolved(path).and_then(|p| p.strip_prefix(&workdir).ok().map(Path::to_path_buf))
            else {
                continue;
            };
            let inside: Vec<String> = inside
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if !inside.is_empty() && !self.is_withheld(&inside) {
                self.withheld.push(inside.join("/"));
            }
        }
    }

    /// Whether `path` (workdir-relative segments) is withheld or lies
    /// under a withheld path.
    fn is_withheld(&self, path: &[String]) -> bool {
        self.withheld.iter().any(|withheld| {
            let segments = withheld.split('/');
            segments.clone().count() <= path.len() && segments.zip(path).all(|(w, p)| w == p)
        })
    }

    /// Whether a plane exporting `exports` serves the file at `path`
    /// (workdir-relative segments, none a link): an export names it and it
    /// is not withheld.
    pub fn serves(&self, exports: &Exports, path: &[String]) -> bool {
        ExportSet::new(&exports.0)
            .withholding(&self.withheld)
            .exported(path)
    }

    /// The file at `path` (workdir-relative segments, none a link) that the
    /// plane `plane` serves, opened as [`Planes::open_file`] opens it: what
    /// a door's `send-file` sends. None when the plane is not declared, does
    /// not serve that path, or the open refuses it.
    pub fn open_served(
        &self,
        plane: &str,
        path: &[String],
    ) -> Option<(std::fs::File, rustix::fs::Stat)> {
        let exports = self.named(plane)?;
        if !self.serves(exports, path) {
            return None;
        }
        self.open_file(path)
    }

    /// The file at `path` (workdir-relative segments) as a repeat of a
    /// file's answer finds it (see [`crate::versions::reuse`]): opened to
    /// read with no link followed anywhere below the workdir and nothing
    /// reached outside it, and its status. None when a segment is not a
    /// name, or the file is missing, is reached through a link, or is not a
    /// regular file.
    pub fn open_file(&self, path: &[String]) -> Option<(std::fs::File, rustix::fs::Stat)> {
        if path.is_empty() || !path.iter().all(|s| is_segment(s)) {
            return None;
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let workdir = rustix::fs::open(&self.workdir, flags, Mode::empty()).ok()?;
        let resolve =
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH;
        // Nonblocking: a FIFO is opened without waiting for a writer, then
        // refused as no regular file.
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let file =
            rustix::fs::openat2(&workdir, path.join("/"), flags, Mode::empty(), resolve).ok()?;
        let stat = rustix::fs::fstat(&file).ok()?;
        let regular = FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile;
        regular.then(|| (std::fs::File::from(file), stat))
    }
}

/// `path` made absolute with every link resolved; a path that does not
/// exist yet, through its nearest parent that does.
fn resolved(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut missing = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return Some(missing.iter().rev().fold(real, |p, name| p.join(name)));
        }
        missing.push(at.file_name()?.to_os_string());
        at = at.parent()?;
    }
}

/// The directories a request's preopens were opened through: for each
/// root, the identity of the workdir and of every directory below it on
/// the way down.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opened(Vec<(Vec<String>, Vec<Identity>)>);

/// A directory's identity: its device and inode.
type Identity = (u64, u64);

fn identity(stat: &rustix::fs::Stat) -> Identity {
    (stat.st_dev, stat.st_ino)
}

/// The identities of the directories on the way from `workdir` down to
/// `root` now, looked up with no link followed below the workdir; None
/// when one is missing, a link, or not a directory.
fn walk(workdir: &Path, root: &[String]) -> Option<Vec<Identity>> {
    let directory = |stat: &rustix::fs::Stat| {
        rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory
    };
    let top = rustix::fs::stat(workdir).ok().filter(directory)?;
    let mut way = vec![identity(&top)];
    let mut path = workdir.to_path_buf();
    for segment in root {
        path.push(segment);
        let stat = rustix::fs::lstat(&path).ok().filter(directory)?;
        way.push(identity(&stat));
    }
    Some(way)
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
/// no link followed, and the identity of each directory on the way.
fn open_root(workdir: &Path, root: &[String]) -> Option<(OwnedFd, Vec<Identity>)> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(workdir, flags, Mode::empty()).ok()?;
    let mut way = vec![identity(&rustix::fs::fstat(&dir).ok()?)];
    for segment in root {
        dir = rustix::fs::openat(
            dir.as_fd(),
            segment.as_str(),
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .ok()?;
        way.push(identity(&rustix::fs::fstat(&dir).ok()?));
    }
    Some((dir, way))
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

    /// Issue 33, "The sandbox enforces the export": preopens an instance
    /// keeps are the ones a fresh open would give, or they are opened anew.
    #[test]
    fn kept_preopens_hold_only_while_their_directories_do() {
        let workdir = std::env::temp_dir().join(format!("murmur-still-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&workdir);
        std::fs::create_dir_all(workdir.join("out/deep")).unwrap();
        let planes = Planes {
            workdir: workdir.clone(),
            files: None,
            peer_files: None,
            withheld: Vec::new(),
        };
        let exports = exports(&["out/deep/**"]);
        let (_, opened) = planes.preopened(&exports);
        assert_eq!(opened.0.len(), 1);
        assert!(planes.still(&exports, &opened));
        // Another directory where the root was.
        std::fs::rename(workdir.join("out/deep"), workdir.join("old")).unwrap();
        std::fs::create_dir(workdir.join("out/deep")).unwrap();
        assert!(!planes.still(&exports, &opened));
        let (_, opened) = planes.preopened(&exports);
        assert!(planes.still(&exports, &opened));
        // A link on the way down, to the very directory that was opened.
        std::fs::rename(workdir.join("out"), workdir.join("moved")).unwrap();
        std::os::unix::fs::symlink(workdir.join("moved"), workdir.join("out")).unwrap();
        assert!(!planes.still(&exports, &opened));
        let (_, reopened) = planes.preopened(&exports);
        assert_eq!(reopened, Opened::default());
        // Other exports name other roots.
        assert!(!planes.still(&self::exports(&["old/**"]), &opened));
        std::fs::remove_dir_all(&workdir).unwrap();
    }

    /// A repeat of a file's answer finds the file by its path alone: no
    /// link anywhere below the workdir, nothing outside it, nothing but a
    /// regular file.
    #[test]
    fn a_file_is_found_again_only_by_its_own_path() {
        let workdir = std::env::temp_dir().join(format!("murmur-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&workdir);
        std::fs::create_dir_all(workdir.join("out/deep")).unwrap();
        std::fs::write(workdir.join("out/deep/a.txt"), "a").unwrap();
        std::fs::write(workdir.join("secret"), "s").unwrap();
        // A name no plane's path can have, though this file system allows it.
        std::fs::write(workdir.join("out/a\\b"), "b").unwrap();
        std::os::unix::fs::symlink("deep", workdir.join("out/link")).unwrap();
        std::os::unix::fs::symlink("../secret", workdir.join("out/up")).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            workdir.join("out/fifo"),
            Mode::RUSR | Mode::WUSR,
        )
        .unwrap();
        let planes = Planes {
            workdir: workdir.clone(),
            files: None,
            peer_files: None,
            withheld: Vec::new(),
        };
        let path = |p: &str| p.split('/').map(String::from).collect::<Vec<_>>();
        let (_, stat) = planes.open_file(&path("out/deep/a.txt")).unwrap();
        assert_eq!(stat.st_size, 1);
        for refused in [
            "out/link/a.txt",
            "out/up",
            "out/fifo",
            "out/deep",
            "out/deep/../../secret",
            "out/./deep/a.txt",
            "out//deep/a.txt",
            "out/missing",
        ] {
            assert!(planes.open_file(&path(refused)).is_none(), "{refused}");
        }
        assert!(
            planes
                .open_file(&["out/deep".into(), "a.txt".into()])
                .is_none()
        );
        assert!(planes.open_file(&[]).is_none());
        assert!(planes.open_file(&["out".into(), "a\\b".into()]).is_none());
        std::fs::remove_dir_all(&workdir).unwrap();
    }

    /// Issue 47: the door's own state inside the workdir is withheld from
    /// both planes, whatever the globs and however its path is spelled, and
    /// is never preopened; a state that is the workdir is withheld file by
    /// file.
    #[test]
    fn the_doors_own_state_is_withheld() {
        let workdir = std::env::temp_dir().join(format!("murmur-withheld-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&workdir);
        std::fs::create_dir_all(workdir.join(".murmur-door")).unwrap();
        std::fs::create_dir_all(workdir.join("out")).unwrap();
        std::os::unix::fs::symlink(".murmur-door", workdir.join("state-link")).unwrap();
        let mut planes = Planes {
            workdir: workdir.join("out/.."),
            files: None,
            peer_files: None,
            withheld: Vec::new(),
        };
        planes.withhold([
            workdir.join(".murmur-door").as_path(),
            workdir.join("state-link/control-token").as_path(),
            workdir.join("cache/not/yet/made").as_path(),
            workdir.join(".").as_path(),
            workdir.join("session.db").as_path(),
            Path::new("/nowhere-near/tokens.json"),
        ]);
        assert_eq!(
            planes.withheld,
            [".murmur-door", "cache/not/yet/made", "session.db"]
        );
        let path = |p: &str| p.split('/').map(String::from).collect::<Vec<_>>();
        for patterns in [&["**"][..], &["*"], &[".murmur-door/**"], &["."]] {
            let exports = exports(patterns);
            for hidden in [
                ".murmur-door",
                ".murmur-door/tokens.json",
                "cache/not/yet/made/x",
            ] {
                assert!(
                    !planes.serves(&exports, &path(hidden)),
                    "{patterns:?} {hidden}"
                );
            }
        }
        assert!(planes.serves(&exports(&["**"]), &path("out/report.md")));
        let (_, opened) = planes.preopened(&exports(&[".murmur-door/**"]));
        assert_eq!(opened, Opened::default(), "the state is never preopened");
        assert!(planes.still(&exports(&[".murmur-door/**"]), &opened));
        std::fs::remove_dir_all(&workdir).unwrap();
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
