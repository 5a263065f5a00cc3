//! One connection to the session's file, as every connection of the store
//! opens it: the writer's, the readers' and the checkpoints'.

use std::path::Path;

use rusqlite::Connection;

/// The VFS every connection of the store opens its file with: SQLite's
/// unix one, but for its locks. The first connection locks the file for
/// this process, for as long as the process has it open, and the log's
/// index lives in the process's memory, not in a `-shm` file. The store's
/// connections (its writer, its readers, its checkpoints) then coordinate
/// in memory: a read takes no file lock, where with the file locked a read
/// at a time, two readers were each other's main wait (a mutex held
/// across two fcntl calls a read). Another program cannot open the file
/// while the door has it, as with the state directory's lock; a crash lets
/// go of both with the process, and the next launch rebuilds the index
/// from the log.
pub(super) const VFS: &std::ffi::CStr = c"unix-excl";

/// Opens the store's file, creating it, with the store's [`VFS`].
pub(super) fn open_file(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags_and_vfs(path, rusqlite::OpenFlags::default(), VFS)
}
