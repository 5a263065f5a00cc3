//! Checkpoints off the request path.
//!
//! Under WAL a commit appends its pages to the log, and a checkpoint copies
//! the log into the file with two fsyncs (the log's, then the file's). Left
//! to SQLite, the commit that fills the log to 1,000 pages checkpoints it
//! there and then, holding the store, and every request waits behind those
//! fsyncs: with the state on disk, a held SendMessage went a third faster
//! without them.
//!
//! So the writer's commits do not checkpoint. One thread of the process
//! copies the logs of the stores that committed into their files (PASSIVE),
//! each on a connection of its own, while their writers go on: a commit
//! puts its store in the thread's queue unless it is there already, so a
//! store waits its turn behind at most one checkpoint of every other, and
//! one log is copied at most once every [`EVERY`]. The thread starts with
//! the first commit; a store's connection opens with its first checkpoint,
//! so a session never written holds neither.
//!
//! A log is started over only by a commit that finds all of it copied,
//! which a busy writer never leaves the thread the time for. So the writer
//! starts it over itself (RESTART): it copies what is left, and the commit
//! after it writes the log from its start, every request to the store
//! waiting meanwhile. That wait is what a held SendMessage's p99 is made
//! of (3 to 4 ms with no restart at all, 9 to 12 with a long one), so the
//! restart is made short:
//! - it comes right after a copy of the thread's, with little left: a copy
//!   that leaves [`RESTART_PAGES`] or more in the log has the writer's
//!   next commit start it over;
//! - the thread syncs the file after each copy: SQLite syncs it only after
//!   a copy that reached the log's end, which commits meanwhile never let
//!   it, so every page copied since the last restart was left for the
//!   restart's sync to write.
//!
//! A restart took 9 to 17 ms, and takes about 5 (3.6 to 12). The writer
//! also counts the log's pages after each of its commits (SQLite's wal
//! hook), and starts a log of [`LONGEST_PAGES`] over whether or not the
//! thread has copied it: a thread that falls behind, on a loaded machine,
//! does not let the log grow past that.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// How often at most one log is copied while its commits come: each copy
/// syncs the log and the file.
const EVERY: Duration = Duration::from_millis(25);
/// Pages left in the log (2 KiB each: 32 MiB) by a copy of the thread's
/// at which the writer starts it over.
pub const RESTART_PAGES: i64 = 16_384;
/// Pages in the log at which the writer starts it over without waiting for
/// the thread's copy (48 MiB).
pub const LONGEST_PAGES: i64 = RESTART_PAGES * 3 / 2;
/// How long the writer waits for a lock SQLite's own way (rusqlite's
/// default, which the restart sets aside).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// What SQLite checkpoints at by itself, where the thread cannot run.
const SQLITE_AUTOCHECKPOINT: i64 = 1000;

/// A store's side of the checkpoints.
pub struct Checkpoints {
    log: Arc<Log>,
}

/// One store's log, as the thread and the writer share it.
struct Log {
    path: PathBuf,
    /// The thread's connection; None until its first checkpoint, and once
    /// the store has let go of it.
    conn: Mutex<Option<Connection>>,
    /// In the thread's queue.
    queued: AtomicBool,
    /// The store is gone: the thread opens nothing more for it.
    closed: AtomicBool,
    /// The thread's last checkpoint left [`RESTART_PAGES`] or more in the
    /// log: the writer is to start it over.
    restart: AtomicBool,
    /// The log's pages after the writer's last commit.
    pages: AtomicI64,
    /// When the thread may copy the log again.
    due: Mutex<Instant>,
}

impl Checkpoints {
    /// Checkpoints for the file at `path`, which `writer` writes: from now
    /// on its commits do not checkpoint, and count the log's pages.
    pub fn new(path: &Path, writer: &mut Connection) -> rusqlite::Result<Checkpoints> {
        let log = Arc::new(Log {
            path: path.to_path_buf(),
            conn: Mutex::new(None),
            queued: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            restart: AtomicBool::new(false),
            pages: AtomicI64::new(0),
            due: Mutex::new(Instant::now()),
        });
        // In place of SQLite's own hook, which checkpoints there and then
        // (`wal_autocheckpoint`).
        let counted = log.clone();
        writer.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages| {
            counted.pages.store(i64::from(pages), Ordering::Relaxed);
            Ok(())
        }))?;
        Ok(Checkpoints { log })
    }

    /// The writer has committed on `writer`: the log is queued for the
    /// thread, or, once it is long, the writer starts it over.
    pub fn committed(&self, writer: &Connection) {
        let log = &self.log;
        let pages = log.pages.load(Ordering::Relaxed);
        let thread_away = if pages >= LONGEST_PAGES {
            // Waits for a copy under way: the log goes no further.
            Some(lock(&log.conn))
        } else if pages >= RESTART_PAGES && log.restart.load(Ordering::Relaxed) {
            try_lock(&log.conn)
        } else {
            None
        };
        if let Some(_thread_away) = thread_away {
            if restart(writer) {
                log.restart.store(false, Ordering::Relaxed);
                log.pages.store(0, Ordering::Relaxed);
            }
            return;
        }
        if log.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let sent = thread().is_some_and(|queue| queue.send(log.clone()).is_ok());
        if !sent {
            tracing::warn!(
                "no checkpoint thread: this store's commits checkpoint its log themselves"
            );
            // SQLite's own hook, in place of the one counting pages.
            let _ = writer.pragma_update(None, "wal_autocheckpoint", SQLITE_AUTOCHECKPOINT);
            log.pages.store(0, Ordering::Relaxed);
        }
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        // Waits for a checkpoint under way; the connection, closed after
        // the writer's, copies what is left and removes the log.
        self.log.closed.store(true, Ordering::Release);
        drop(lock(&self.log.conn).take());
    }
}

/// The queue of the process's checkpoint thread, started at the first call;
/// None if it could not be.
fn thread() -> Option<&'static Sender<Arc<Log>>> {
    static QUEUE: OnceLock<Option<Sender<Arc<Log>>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (queue, queued) = channel();
            std::thread::Builder::new()
                .name("checkpoints".into())
                .spawn(move || copy_queued(&queued))
                .map_err(|e| tracing::warn!(error = %e, "cannot start the checkpoint thread"))
                .ok()
                .map(|_| queue)
        })
        .as_ref()
}

/// The thread: a PASSIVE checkpoint of each log queued, in turn.
fn copy_queued(queued: &Receiver<Arc<Log>>) {
    while let Ok(log) = queued.recv() {
        let due = *log.due.lock().unwrap_or_else(|p| p.into_inner());
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        // Commits from now on queue the log again.
        log.queued.store(false, Ordering::Release);
        *log.due.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now() + EVERY;
        let mut conn = lock(&log.conn);
        if log.closed.load(Ordering::Acquire) {
            continue;
        }
        if conn.is_none() {
            match open(&log.path) {
                Ok(opened) => *conn = Some(opened),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot open a log to checkpoint; its next commit asks again");
                    continue;
                }
            }
        }
        let Some(conn) = conn.as_ref() else { continue };
        let copied = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match copied {
            Ok((pages, copied)) => {
                // SQLite syncs the file only after a copy that reached the
                // log's end, which commits meanwhile never let it; unsynced,
                // the copies pile up for the restart's sync to write.
                if copied > 0 && !sync_file(conn) {
                    tracing::debug!("cannot sync a checkpointed file; the restart will");
                }
                if pages >= RESTART_PAGES {
                    log.restart.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => tracing::debug!(error = %e, "checkpoint failed; the next commit asks again"),
        }
    }
}

/// Syncs the database file through `conn`'s own handle on it (SQLite's
/// `xSync`). A descriptor of our own would not do: closing it would drop
/// the process's lock on the file (`file::VFS`).
pub(super) fn sync_file(conn: &Connection) -> bool {
    use rusqlite::ffi;
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: `conn` is open for the whole call; FILE_POINTER writes the
    // main database's file object, which the connection owns while open.
    let found = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        )
    };
    if found != ffi::SQLITE_OK || file.is_null() {
        return false;
    }
    // SAFETY: `file` is the open file object found above; its methods are
    // its VFS's, and xSync takes the object and the sync flags.
    unsafe {
        match (*file).pMethods.as_ref().and_then(|methods| methods.xSync) {
            Some(sync) => sync(file, ffi::SQLITE_SYNC_NORMAL) == ffi::SQLITE_OK,
            None => false,
        }
    }
}

fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = super::file::open_file(path)?;
    // Its checkpoints sync the log, then the file, as the writer's did.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// Copies what is left of the log and has the next commit start it over;
/// false if a reader (one of the store's `readers`) still reads the log: no
/// request waits for it, and a later commit tries again.
fn restart(writer: &Connection) -> bool {
    if writer.busy_timeout(Duration::ZERO).is_err() {
        return false;
    }
    let busy = writer.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0));
    let _ = writer.busy_timeout(BUSY_TIMEOUT);
    busy.is_ok_and(|busy| busy == 0)
}

fn lock(conn: &Mutex<Option<Connection>>) -> MutexGuard<'_, Option<Connection>> {
    conn.lock().unwrap_or_else(|p| p.into_inner())
}

/// The lock, unless the thread holds it.
fn try_lock(conn: &Mutex<Option<Connection>>) -> Option<MutexGuard<'_, Option<Connection>>> {
    match conn.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::tasks::testing::TempDir;

    // A log the thread never copies (the thread takes it for queued) is
    // still started over by the writer at LONGEST_PAGES, counted by the
    // wal hook after each commit.
    #[test]
    fn the_writer_bounds_a_log_the_thread_has_not_copied() {
        let dir = TempDir::new("checkpoint-longest");
        let path = dir.path().join("log.db");
        let mut writer = super::super::open::connect(&path).unwrap();
        writer.execute_batch("CREATE TABLE t (b BLOB)").unwrap();
        let checkpoints = Checkpoints::new(&path, &mut writer).unwrap();
        checkpoints.log.queued.store(true, Ordering::Release);
        let log = dir.path().join("log.db-wal");
        let page: i64 = writer
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        let frame = page as u64 + 24;
        let (mut largest, mut restarts, mut last) = (0, 0, 0);
        for _ in 0..12_000 {
            writer
                .execute("INSERT INTO t VALUES (zeroblob(8000))", [])
                .unwrap();
            checkpoints.committed(&writer);
            let pages = checkpoints.log.pages.load(Ordering::Relaxed);
            if pages < last {
                restarts += 1;
            }
            last = pages;
            largest = largest.max(std::fs::metadata(&log).unwrap().len());
        }
        assert!(restarts >= 1, "never started over");
        // One commit (five pages or so) past the bound at most.
        let bound = (LONGEST_PAGES as u64 + 8) * frame + 32;
        assert!(largest <= bound, "the log grew to {largest}, over {bound}");
        assert!(largest >= LONGEST_PAGES as u64 * frame, "{largest}");
    }
}
