//! One connection to the session's file, as every connection of the store
//! opens it: the writer's, the readers' and the checkpoints'; and the
//! statements the writer's and the readers' keep prepared.

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

/// Keeps more of the store's statements prepared than rusqlite's 16. A
/// listing's statements depend on which filters it has and who asks
/// (`queries.rs`), so a client varying its filters makes dozens, which
/// would push out the writes' statements, each compiled again on its next
/// use. Each costs a few KB, and only the ones a session uses are kept.
///
/// Their plans are kept too (the query planner stability guarantee).
/// SQLite is built with STAT4, and without it a statement whose bound
/// values could change its plan (a task id, a cursor, a LIMIT) is compiled
/// again at every run: a third of a ListTasks in a session of 60,000. The
/// store keeps no statistics and names each listing's index, so no plan
/// could change.
pub(super) fn keep_statements(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(64);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}
