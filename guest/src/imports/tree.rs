//! The workdir as a request on a plane sees it: the directories the host
//! preopened for that plane, read-only, each named by its workdir-relative
//! path (`.` for the workdir). Paths here are workdir-relative segments.
//! The tree follows no link: [`resolve`] follows them one at a time, so the
//! plane can check where each one leads.

use std::collections::{BTreeSet, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    Symlink,
    /// A FIFO, a socket or a device: never served.
    Other,
}

/// When something last changed, since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Modified {
    pub seconds: u64,
    pub nanoseconds: u32,
}

impl Modified {
    pub fn millis(&self) -> i64 {
        i64::try_from(self.seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
            + i64::from(self.nanoseconds / 1_000_000)
    }
}

/// What is at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub size: u64,
    /// None where the door cannot read it (a directory above the preopens).
    pub modified: Option<Modified>,
}

impl Entry {
    const ABOVE: Entry = Entry {
        kind: Kind::Directory,
        size: 0,
        modified: None,
    };
}

/// One preopened directory, read relative to itself (`""` is itself),
/// following no link in the last segment.
pub trait Dir {
    /// What is at `path`.
    fn entry(&self, path: &str) -> Option<Entry>;
    /// The target the link at `path` names, as written.
    fn link(&self, path: &str) -> Option<String>;
    /// Calls `each` with every name the directory at `path` holds; false
    /// when there is no directory there to read.
    fn names(&self, path: &str, each: &mut dyn FnMut(String)) -> bool;
}

/// The preopened directories, by workdir-relative name.
pub struct Preopened<D> {
    dirs: Vec<(Vec<String>, D)>,
}

impl<D: Dir> Preopened<D> {
    /// The tree `dirs` make, each named by its workdir-relative path. A name
    /// with a `..` segment names no place in the workdir and is left out.
    pub fn new(dirs: impl IntoIterator<Item = (String, D)>) -> Preopened<D> {
        let dirs = dirs
            .into_iter()
            .filter_map(|(name, dir)| {
                let segments: Vec<String> = name
                    .split('/')
                    .filter(|s| !s.is_empty() && *s != ".")
                    .map(String::from)
                    .collect();
                (!segments.iter().any(|s| s == "..")).then_some((segments, dir))
            })
            .collect();
        Preopened { dirs }
    }

    /// The deepest preopen holding `path`, and `path` within it.
    pub fn locate(&self, path: &[String]) -> Option<(&D, String)> {
        self.dirs
            .iter()
            .filter(|(name, _)| path.starts_with(name))
            .max_by_key(|(name, _)| name.len())
            .map(|(name, dir)| (dir, path[name.len()..].join("/")))
    }

    /// The preopens strictly below `path`.
    fn below<'a>(&'a self, path: &'a [String]) -> impl Iterator<Item = &'a [String]> + 'a {
        self.dirs
            .iter()
            .map(|(name, _)| name.as_slice())
            .filter(move |name| name.len() > path.len() && name.starts_with(path))
    }

    /// What is at `path`; a directory above a preopen is a directory whose
    /// time the door cannot read.
    pub fn entry(&self, path: &[String]) -> Option<Entry> {
        match self.locate(path) {
            Some((dir, within)) => dir.entry(&within),
            None => self.below(path).next().map(|_| Entry::ABOVE),
        }
    }

    pub fn link(&self, path: &[String]) -> Option<String> {
        let (dir, within) = self.locate(path)?;
        dir.link(&within)
    }

    /// Calls `each` with every name the directory at `path` holds: what its
    /// preopen lists, or, above the preopens, the way down to each.
    pub fn names(&self, path: &[String], each: &mut dyn FnMut(String)) -> bool {
        if let Some((dir, within)) = self.locate(path) {
            return dir.names(&within, each);
        }
        let children: BTreeSet<&String> = self.below(path).map(|name| &name[path.len()]).collect();
        for child in &children {
            each(child.to_string());
        }
        !children.is_empty() || path.is_empty()
    }
}

/// Links followed for one path, at most: past them the path is not served.
pub const MAX_LINKS: usize = 8;

/// A requested path once its links are followed.
#[derive(Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The path it really names: no link in it.
    pub path: Vec<String>,
    pub entry: Entry,
}

/// Follows every link in `requested`, one segment at a time. None when a
/// segment is missing, a link's target is absolute or climbs out of the
/// workdir, more than [`MAX_LINKS`] links are met, or a file has more path
/// after it.
pub fn resolve<D: Dir>(tree: &Preopened<D>, requested: &[String]) -> Option<Resolved> {
    let mut real: Vec<String> = Vec::new();
    let mut todo: VecDeque<String> = requested.iter().cloned().collect();
    let mut links = 0;
    // What is at `real`, once a segment has been looked up and not left.
    let mut last = None;
    while let Some(segment) = todo.pop_front() {
        match segment.as_str() {
            "" | "." => continue,
            ".." => {
                real.pop()?;
                last = None;
                continue;
            }
            _ => real.push(segment),
        }
        let entry = tree.entry(&real)?;
        last = Some(entry);
        match entry.kind {
            Kind::Symlink => {
                links += 1;
                let target = tree.link(&real)?;
                if links > MAX_LINKS || target.starts_with('/') || target.contains('\0') {
                    return None;
                }
                real.pop();
                last = None;
                for segment in target.split('/').rev() {
                    todo.push_front(segment.to_string());
                }
            }
            Kind::Directory => {}
            Kind::File | Kind::Other if todo.is_empty() => {}
            Kind::File | Kind::Other => return None,
        }
    }
    let entry = match (last, real.is_empty()) {
        (Some(entry), _) => entry,
        (None, true) => tree.entry(&real).unwrap_or(Entry::ABOVE),
        (None, false) => tree.entry(&real)?,
    };
    Some(Resolved { path: real, entry })
}

/// A directory read with `std::fs`: the door's rules tested natively, and
/// the host's native baseline. It is no sandbox: [`resolve`] only ever asks
/// it for paths with no link before their last segment.
#[cfg(not(target_arch = "wasm32"))]
pub struct StdDir(pub std::path::PathBuf);

#[cfg(not(target_arch = "wasm32"))]
impl StdDir {
    fn at(&self, path: &str) -> std::path::PathBuf {
        match path {
            "" => self.0.clone(),
            path => self.0.join(path),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Dir for StdDir {
    fn entry(&self, path: &str) -> Option<Entry> {
        let meta = std::fs::symlink_metadata(self.at(path)).ok()?;
        let kind = match meta.file_type() {
            t if t.is_symlink() => Kind::Symlink,
            t if t.is_dir() => Kind::Directory,
            t if t.is_file() => Kind::File,
            _ => Kind::Other,
        };
        let modified = meta
            .modified()
            .ok()
            .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|since| Modified {
                seconds: since.as_secs(),
                nanoseconds: since.subsec_nanos(),
            });
        Some(Entry {
            kind,
            size: meta.len(),
            modified,
        })
    }

    fn link(&self, path: &str) -> Option<String> {
        let target = std::fs::read_link(self.at(path)).ok()?;
        target.into_os_string().into_string().ok()
    }

    fn names(&self, path: &str, each: &mut dyn FnMut(String)) -> bool {
        let Ok(entries) = std::fs::read_dir(self.at(path)) else {
            return false;
        };
        for entry in entries.flatten() {
            if let Ok(name) = entry.file_name().into_string() {
                each(name);
            }
        }
        true
    }
}
