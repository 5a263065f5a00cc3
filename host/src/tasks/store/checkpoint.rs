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
//! which a busy writer never leaves the thread the time for. Once the log
//! holds [`RESTART_PAGES`], the writer itself, between two commits and with
//! the thread not on its store, copies what is left and has the next commit
//! start the log over (RESTART): a wait of two fsyncs, most of its pages
//! copied already, once every couple of seconds under load. That bounds the
//! log on disk to about [`RESTART_PAGES`] pages.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// How often at most one log is copied while its commits come: each copy
/// syncs the log and the file.
const EVERY: Duration = Duration::from_millis(25);
/// Pages in the log (2 KiB each: 32 MiB) at which the writer has it started
/// over.
pub const RESTART_PAGES: i64 = 16_384;
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
    /// The log's pages as the last checkpoint found them.
    pages: AtomicI64,
    /// When the thread may copy the log again.
    due: Mutex<Instant>,
}

impl Checkpoints {
    /// Checkpoints for the file at `path`, which `writer` writes: from now
    /// on its commits do not checkpoint.
    pub fn new(path: &Path, writer: &Connection) -> rusqlite::Result<Checkpoints> {
        writer.pragma_update(None, "wal_autocheckpoint", 0)?;
        Ok(Checkpoints {
            log: Arc::new(Log {
                path: path.to_path_buf(),
                conn: Mutex::new(None),
                queued: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                pages: AtomicI64::new(0),
                due: Mutex::new(Instant::now()),
            }),
        })
    }

    /// The writer has committed on `writer`: the log is queued for the
    /// thread, or, once it is long, the writer starts it over.
    pub fn committed(&self, writer: &Connection) {
        let log = &self.log;
        if log.pages.load(Ordering::Relaxed) >= RESTART_PAGES
            && let Some(_thread_away) = try_lock(&log.conn)
        {
            if restart(writer) {
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
            let _ = writer.pragma_update(None, "wal_autocheckpoint", SQLITE_AUTOCHECKPOINT);
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
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1)) {
            Ok(pages) => log.pages.store(pages, Ordering::Relaxed),
            Err(e) => tracing::debug!(error = %e, "checkpoint failed; the next commit asks again"),
        }
    }
}

fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = super::open::open_file(path)?;
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
