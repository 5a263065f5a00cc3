//! The planes' files through `wasi:filesystem`: the directories the host
//! preopened for the request, read as [`Dir`]s, and a served file opened
//! for its bytes. Every call is relative to a preopen, which the host gave
//! read-only: the sandbox, not these calls, keeps the door inside it.

use wasip2::filesystem::preopens;
use wasip2::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, OpenFlags, PathFlags,
};

use crate::planes::tree::{Dir, Entry, Kind, Modified, Preopened};

/// The directories the host preopened for this request.
pub(super) fn preopened() -> Preopened<Descriptor> {
    Preopened::new(
        preopens::get_directories()
            .into_iter()
            .map(|(descriptor, name)| (name, descriptor)),
    )
}

/// The file at `path` (workdir-relative, no link in it), opened to read;
/// None when it is gone or is not a file.
pub(super) fn open(path: &[String]) -> Option<Descriptor> {
    let preopens = preopened();
    let (dir, within) = preopens.locate(path)?;
    let file = dir
        .open_at(
            PathFlags::empty(),
            &within,
            OpenFlags::empty(),
            DescriptorFlags::READ,
        )
        .ok()?;
    (file.get_type().ok()? == DescriptorType::RegularFile).then_some(file)
}

impl Dir for Descriptor {
    fn entry(&self, path: &str) -> Option<Entry> {
        let stat = match path {
            "" => self.stat(),
            path => self.stat_at(PathFlags::empty(), path),
        }
        .ok()?;
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
        self.readlink_at(path).ok()
    }

    fn names(&self, path: &str, each: &mut dyn FnMut(String)) -> bool {
        let opened;
        let dir = match path {
            "" => self,
            path => {
                opened = self
                    .open_at(
                        PathFlags::empty(),
                        path,
                        OpenFlags::DIRECTORY,
                        DescriptorFlags::READ,
                    )
                    .ok();
                match &opened {
                    Some(dir) => dir,
                    None => return false,
                }
            }
        };
        let Ok(entries) = dir.read_directory() else {
            return false;
        };
        while let Ok(Some(entry)) = entries.read_directory_entry() {
            each(entry.name);
        }
        true
    }
}
