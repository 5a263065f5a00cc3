//! The planes' files through `wasi:filesystem`: the directories the host
//! preopened for the request, read as [`Dir`]s, and a served file opened
//! for its bytes (on the `wasi:http` edge; the one-call edge has the host
//! open it). Every call is relative to a preopen, which the host gave
//! read-only, and walks down one segment at a time following no link: a
//! path whose directory is swapped for a link while it is read reaches
//! nothing, rather than wherever the link leads.

use wasip2::filesystem::preopens;
use wasip2::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, OpenFlags, PathFlags,
};

use crate::imports::tree::{Dir, Entry, Kind, Modified, Preopened};

/// The directories the host preopened for this request.
pub(super) fn preopened() -> Preopened<Descriptor> {
    Preopened::new(
        preopens::get_directories()
            .into_iter()
            .map(|(descriptor, name)| (name, descriptor)),
    )
}

/// The file at `path` (workdir-relative, no link in it), opened to read;
/// None when it is gone, a link is met, or it is not a file.
pub(super) fn open(path: &[String]) -> Option<Descriptor> {
    let preopens = preopened();
    let (dir, within) = preopens.locate(path)?;
    let (parents, name) = split(&within);
    let file = within_dir(dir, parents, |dir| {
        dir.open_at(
            PathFlags::empty(),
            name,
            OpenFlags::empty(),
            DescriptorFlags::READ,
        )
        .ok()
    })?;
    (file.get_type().ok()? == DescriptorType::RegularFile).then_some(file)
}

/// `path`'s directories and its last segment (`""` names the preopen).
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// Calls `with` on the directory `path` names below `dir`, opened one
/// segment at a time with no link followed (a link is refused at each
/// step, so no swap between steps redirects the walk).
fn within_dir<R>(
    dir: &Descriptor,
    path: &str,
    with: impl FnOnce(&Descriptor) -> Option<R>,
) -> Option<R> {
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let Some(first) = segments.next() else {
        return with(dir);
    };
    let mut opened = open_dir(dir, first)?;
    for segment in segments {
        opened = open_dir(&opened, segment)?;
    }
    with(&opened)
}

fn open_dir(dir: &Descriptor, name: &str) -> Option<Descriptor> {
    dir.open_at(
        PathFlags::empty(),
        name,
        OpenFlags::DIRECTORY,
        DescriptorFlags::READ,
    )
    .ok()
}

impl Dir for Descriptor {
    fn entry(&self, path: &str) -> Option<Entry> {
        let (parents, name) = split(path);
        let stat = within_dir(self, parents, |dir| {
            match name {
                "" => dir.stat(),
                name => dir.stat_at(PathFlags::empty(), name),
            }
            .ok()
        })?;
        let kind = match stat.type_ {
            DescriptorType::RegularFile => Kind::File,
            DescriptorType::Directory => Kind::Directory,
            DescriptorType::SymbolicLink => Kind::Symlink,
            _ => Kind::Other,
        };
        let modified = stat.data_modification_timestamp.map(|at| Modified {
            seconds: at.seconds,
            nanoseconds: at.nanoseconds,
        });
        Some(Entry {
            kind,
            size: stat.size,
            modified,
        })
    }

    fn link(&self, path: &str) -> Option<String> {
        let (parents, name) = split(path);
        within_dir(self, parents, |dir| dir.readlink_at(name).ok())
    }

    fn names(&self, path: &str, each: &mut dyn FnMut(String)) -> bool {
        within_dir(self, path, |dir| {
            let entries = dir.read_directory().ok()?;
            while let Ok(Some(entry)) = entries.read_directory_entry() {
                each(entry.name);
            }
            Some(())
        })
        .is_some()
    }
}
