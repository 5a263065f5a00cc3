//! Reads off the writer's connection.
//!
//! The store's one connection is held by every write through its commit,
//! so a GetTask behind a batch of SendMessages waits for their commit, and
//! two concurrent reads wait for each other. Under WAL a reader on another
//! connection never waits for the writer and sees every transaction
//! committed before it starts: what a request has been told is there.
//!
//! A store of a file keeps at most [`READERS`] such connections, opened by
//! the first reads that find none idle, so a session never read holds none
//! and one read at a time holds one. A read that finds them all busy waits
//! for one, rather than read on the writer's connection: reads that take
//! long (a listing by status timestamp counts up to a session's tasks) hold
//! up other reads, never a write. Only a read that cannot open a reader
//! (no descriptor left) reads on the writer's. A store kept in memory has
//! no file to open again and reads on the writer's.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

use rusqlite::Connection;

/// Reader connections a store keeps at most: as many reads at once as a
/// 4-core host's workers make. Each holds two descriptors (the file and
/// its log), and is opened only when a read finds the others busy.
pub const READERS: usize = 4;

pub struct Readers {
    path: PathBuf,
    pool: Mutex<Pool>,
    /// A reader went back, or one could not be opened.
    freed: Condvar,
}

#[derive(Default)]
struct Pool {
    /// The connections not reading now.
    idle: Vec<Connection>,
    /// How many are open or opening.
    open: usize,
    /// Reads waiting for one: a reader that goes back wakes one only if
    /// there is one, since a wake is a system call whether or not anyone
    /// waits (a futex call a GetTask, in a trace).
    waiting: usize,
}

impl Readers {
    pub fn new(path: &Path) -> Readers {
        Readers {
            path: path.to_path_buf(),
            pool: Mutex::new(Pool::default()),
            freed: Condvar::new(),
        }
    }

    /// An idle reader, a new one while fewer than [`READERS`] are open, or
    /// else the first to go back; None when one cannot be opened. It is
    /// idle again once dropped.
    pub fn take(&self) -> Option<Reader<'_>> {
        Some(Reader {
            conn: Some(self.take_conn()?),
            readers: self,
        })
    }

    /// How many readers are open.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.lock().open
    }

    fn take_conn(&self) -> Option<Connection> {
        let mut pool = self.lock();
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Some(conn);
            }
            if pool.open < READERS {
                break;
            }
            pool.waiting += 1;
            pool = self.freed.wait(pool).unwrap_or_else(|p| p.into_inner());
            pool.waiting -= 1;
        }
        // Counted before it opens, outside the lock: another read need not
        // wait for the file to open.
        pool.open += 1;
        drop(pool);
        match open(&self.path) {
            Ok(conn) => Some(conn),
            Err(e) => {
                tracing::debug!(error = %e, "cannot open a reader; reading on the writer's connection");
                self.give_back(|pool| pool.open -= 1);
                None
            }
        }
    }

    /// Changes the pool, then wakes a read waiting for it, if any.
    fn give_back(&self, change: impl FnOnce(&mut Pool)) {
        let mut pool = self.lock();
        change(&mut pool);
        let waiting = pool.waiting > 0;
        drop(pool);
        if waiting {
            self.freed.notify_one();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A reader in use.
pub struct Reader<'a> {
    conn: Option<Connection>,
    readers: &'a Readers,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a reader holds its connection until dropped")
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.readers.give_back(|pool| pool.idle.push(conn));
        }
    }
}

/// A connection that only reads. Not opened read-only: SQLite gives a
/// read-only connection the file locks that the store's VFS spares the
/// others (`file::VFS`).
fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = super::file::open_file(path)?;
    conn.pragma_update(None, "query_only", true)?;
    super::file::keep_statements(&conn)?;
    Ok(conn)
}
