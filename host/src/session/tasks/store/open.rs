//! Opening the session record: a fresh launch archives the previous
//! session's file and starts a new one; `--resume` reopens it and fails the
//! tasks it left live.

use std::fs::{self, DirBuilder};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rusqlite::{Connection, params};

use super::base::{Restarted, Store};
use super::checkpoint::Checkpoints;
use super::readers::Readers;
use crate::bindings::session::DetachedShell;
use crate::session::tasks::ids;
use crate::session::tasks::lock::StateLock;

/// The file the current session lives in, under the state directory.
pub const SESSION_DB: &str = "session.db";
/// Where a fresh launch moves the previous session's file:
/// `STATE/sessions/<its session id>.db`.
pub const ARCHIVE_DIR: &str = "sessions";
/// What the store keeps in the state directory `state`: the session's
/// file and SQLite's files beside it, the lock, and the archive.
pub fn own_files(state: &Path) -> Vec<PathBuf> {
    let db = |suffix: &str| state.join(format!("{SESSION_DB}{suffix}"));
    vec![
        db(""),
        db("-wal"),
        db("-shm"),
        db("-journal"),
        state.join(crate::session::tasks::lock::LOCK_FILE),
        state.join(ARCHIVE_DIR),
    ]
}

/// The status message of a task that was live when its session stopped
/// without ending it, written by `--resume`.
pub const RESTARTED: &str = "the session restarted while this task was live";

/// What opening the state directory found.
pub struct Opened {
    /// The session's record, holding the state directory's lock while it lives.
    pub store: Store,
    /// `--resume`: the tasks that were live and are now failed, in the order
    /// they had last changed.
    pub failed_by_resume: Vec<String>,
    /// A fresh launch: where the previous session's file went.
    pub archived: Option<PathBuf>,
    /// `--resume`: the detached commands the previous run left running,
    /// oldest first. This process cannot follow them (their results are
    /// lost), so it reports them ([`crate::session::tasks::own::lost_commands`]).
    pub lost_commands: Vec<DetachedShell>,
}

impl Store {
    /// Opens the session record under `state`. A fresh launch moves an
    /// existing `session.db` to `sessions/<its session id>.db` and starts a
    /// new session; `resume` reopens it, keeping its session id, and moves
    /// every task that was live to `failed` with [`RESTARTED`].
    pub fn open(state: &Path, resume: bool, now_ms: i64) -> anyhow::Result<Opened> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state)
            .with_context(|| format!("cannot create the state directory {}", state.display()))?;
        let lock = StateLock::acquire(state)?;
        let mut opened = Store::open_locked(state, resume, now_ms)?;
        opened.store._lock = Some(lock);
        let path = state.join(SESSION_DB);
        let checkpoints = Checkpoints::new(&path, &mut opened.store.lock().conn)?;
        opened.store.checkpoints = Some(checkpoints);
        opened.store.readers = Some(Readers::new(&path));
        Ok(opened)
    }

    /// [`Store::open`] once this process holds the state directory.
    fn open_locked(state: &Path, resume: bool, now_ms: i64) -> anyhow::Result<Opened> {
        let path = state.join(SESSION_DB);
        if resume {
            if !path.exists() {
                bail!(
                    "--resume: there is no session to resume: {} does not exist",
                    path.display()
                );
            }
            let store = Store::from_connection(connect(&path)?)
                .with_context(|| format!("reading {}", path.display()))?;
            let failed_by_resume = store
                .fail_live(RESTARTED, now_ms)
                .context("failing the tasks the previous run left live")?;
            let lost_commands = store
                .take_detached()
                .context("reading the commands the previous run left running")?;
            return Ok(Opened {
                store,
                failed_by_resume,
                archived: None,
                lost_commands,
            });
        }
        let archived = if path.exists() {
            Some(archive(state, &path, now_ms)?)
        } else {
            None
        };
        let store =
            create(&path, now_ms).with_context(|| format!("creating {}", path.display()))?;
        Ok(Opened {
            store,
            failed_by_resume: Vec::new(),
            archived,
            lost_commands: Vec::new(),
        })
    }

    /// A session kept in memory only: nothing survives the process. For an
    /// embedder that needs no record, and for tests.
    pub fn in_memory(now_ms: i64) -> anyhow::Result<Store> {
        let conn = Connection::open_in_memory()?;
        Store::create(conn, ids::session_id(), now_ms)
    }

    /// Moves every live task to `failed` with `message`, in one transaction:
    /// each a change of its own and an event of its own, in the order they
    /// had last changed. The events wait in [`Store::take_restarted`].
    fn fail_live(&self, message: &str, now_ms: i64) -> rusqlite::Result<Vec<String>> {
        let live = self.live_ids()?;
        let mut inner = self.lock();
        let mut change = inner.last_change;
        let tx = inner.conn.unchecked_transaction()?;
        let mut restarted = Vec::new();
        for id in &live {
            change += 1;
            let context_id: String = tx.query_row(
                "UPDATE tasks SET state = 'failed', status_message = ?, status_ms = ?,
                    prompt = NULL, change = ? WHERE id = ? RETURNING context_id",
                params![message, now_ms, change as i64, id],
                |r| r.get(0),
            )?;
            restarted.push(Restarted {
                event_id: 0,
                task_id: id.clone(),
                context_id,
                timestamp_ms: now_ms,
            });
        }
        let ids = inner.number(&tx, restarted.len() as u64)?;
        tx.commit()?;
        inner.last_change = change;
        inner.last_event = ids.end - 1;
        for (task, id) in restarted.iter_mut().zip(ids) {
            task.event_id = id;
        }
        *self.restarted.lock().unwrap_or_else(|p| p.into_inner()) = restarted;
        Ok(live)
    }
}

/// Bytes of a page of a new session's file. A task's first write touches
/// a page of the table and of each index, count and log it is in, about a
/// dozen, and a commit writes each whole to the log: with SQLite's default
/// 4 KiB, about 48 KiB a held SendMessage. Half that page size writes half
/// as much (a held SendMessage over loopback: +20% a second, p99 -25%), and
/// left ListTasks as fast at 100,000 tasks. A session reopened with
/// `--resume` keeps the page size it was made with.
pub const PAGE_SIZE: i64 = 2048;

/// Creates a new session's file. Its header, journal mode and schema are
/// written without an fsync: synced, they cost five, half the time it takes
/// to add a capsule to a host. A power cut in the moment after can leave the
/// new file unreadable; it holds no task yet, and the next launch archives
/// it and starts another (`--resume` refuses it, naming the file). Every
/// commit after it is synced as [`connect`] says.
fn create(path: &Path, now_ms: i64) -> anyhow::Result<Store> {
    let conn = open_private(path)?;
    // Before the first access.
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .context("enabling WAL")?;
    let store = Store::create(conn, ids::session_id(), now_ms)?;
    store
        .lock()
        .conn
        .pragma_update(None, "synchronous", "NORMAL")?;
    Ok(store)
}

/// Opens a database file, creating it, that only its owner can read.
fn open_private(path: &Path) -> anyhow::Result<Connection> {
    let conn =
        super::file::open_file(path).with_context(|| format!("cannot open {}", path.display()))?;
    // The record is the session's own: only its owner reads it. SQLite gives
    // its log files the same mode.
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))?;
    Ok(conn)
}

/// Opens (creating) a database file with the store's settings.
pub(super) fn connect(path: &Path) -> anyhow::Result<Connection> {
    let conn = open_private(path)?;
    // WAL: readers never wait for the writer, and a commit appends to the
    // log instead of rewriting pages in place.
    //
    // synchronous=NORMAL: under WAL, a commit is written to the log before it
    // returns but fsynced only at checkpoints. A crash of the door's process
    // (what --resume recovers from) loses nothing; a power cut or kernel
    // crash may lose the last few changes but never corrupts the file. Every
    // task state change writes, several per request, so FULL's fsync per
    // commit would put a disk flush on the request path for a guarantee a
    // door that is restarted with its capsule does not need.
    //
    // Not SQLite's exclusive locking mode: the store's checkpoint thread
    // and its readers use connections of their own (see `checkpoint` and
    // `readers`), which the mode would lock out. Their VFS
    // (`file::VFS`) locks the file for the process instead.
    conn.pragma_update(None, "journal_mode", "WAL")
        .context("enabling WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// Moves the previous session's file to `STATE/sessions/<session id>.db`.
/// Opening and closing it first checkpoints its log into the file, so one
/// file holds all of it.
fn archive(state: &Path, path: &Path, now_ms: i64) -> anyhow::Result<PathBuf> {
    let session_id = Connection::open(path)
        .and_then(|conn| {
            conn.query_row("SELECT session_id FROM session WHERE id = 1", [], |r| {
                r.get::<_, String>(0)
            })
        })
        .ok()
        .filter(|id| {
            id.strip_prefix("ses_")
                .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        // A file that names no session is kept all the same.
        .unwrap_or_else(|| format!("unknown-{now_ms}"));
    let dir = state.join(ARCHIVE_DIR);
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let mut target = dir.join(format!("{session_id}.db"));
    let mut n = 1;
    while target.exists() {
        target = dir.join(format!("{session_id}.{n}.db"));
        n += 1;
    }
    fs::rename(path, &target).with_context(|| {
        format!(
            "cannot move the previous session {} to {}",
            path.display(),
            target.display()
        )
    })?;
    // A log the checkpoint could not fold in goes beside its file.
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        if side.exists() {
            let _ = fs::rename(&side, format!("{}{suffix}", target.display()));
        }
    }
    Ok(target)
}
