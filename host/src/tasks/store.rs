//! The session's durable record: one SQLite file, `STATE/session.db`, holding
//! the session (its id and when it started) and every task it held.
//!
//! The store knows rows, not rules: which transitions are allowed, who may
//! start what and when an agent runs is the hub's business (`tasks/mod.rs`).
//! It answers reads already filtered by who is asking ([`Sees`]), so a task
//! the caller does not see cannot leak through a read.
//!
//! Every write is one statement or one transaction on one connection behind a
//! mutex: SQLite is fast enough for a door's rate of state changes, and one
//! writer keeps the session-wide change counter gap-free and ordered.
//!
//! The store also numbers the session's events (`tasks/events`): a write
//! that the hub publishes events for asks for that many ids, and the last id
//! is written to the session row in the same transaction, so ids keep
//! increasing across `--resume`.

use std::fs::{self, DirBuilder};
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use anyhow::{Context, bail};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde_json::{Value, json};

use crate::bindings::session::{Delegation, DetachedShell, ResidueItem};
use crate::bindings::task_store::{
    Cursor, ListQuery, Origin, Page, RunningCommand, Status, Task, TaskMetadata, TaskState,
};
use crate::bindings::tokens::Credential;

use super::ids;
use super::lock::StateLock;

/// The file the current session lives in, under the state directory.
pub const SESSION_DB: &str = "session.db";
/// Where a fresh launch moves the previous session's file:
/// `STATE/sessions/<its session id>.db`.
pub const ARCHIVE_DIR: &str = "sessions";
/// The status message of a task that was live when its session stopped
/// without ending it, written by `--resume`.
pub const RESTARTED: &str = "the session restarted while this task was live";

/// Bumped when the tables change shape; a file of another version is refused
/// (version 1, before events were numbered, is brought up to date).
const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE session (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    session_id  TEXT    NOT NULL,
    created_ms  INTEGER NOT NULL,
    -- The id of the newest event the session numbered, 0 before the first.
    last_event  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE tasks (
    id                  TEXT    PRIMARY KEY,
    context_id          TEXT    NOT NULL,
    -- public | operator | declared | member, and the credential's name
    -- ('' for public and operator).
    owner_kind          TEXT    NOT NULL,
    owner_name          TEXT    NOT NULL,
    -- client | peer | session
    origin              TEXT    NOT NULL,
    trust               TEXT,
    -- murmur's words: submitted, working, input-required, completed, ...
    state               TEXT    NOT NULL,
    status_message      TEXT,
    -- When the task last changed: milliseconds since the Unix epoch.
    status_ms           INTEGER NOT NULL,
    response            TEXT,
    prompt              TEXT,
    -- JSON: residue items as the reference spells them.
    residue             TEXT    NOT NULL,
    -- JSON: [{workId, binary, command, runningMs}]
    running_commands    TEXT    NOT NULL,
    -- JSON: [\"tsk_...\"]
    reference_task_ids  TEXT    NOT NULL,
    forget_session      INTEGER NOT NULL,
    created_ms          INTEGER NOT NULL,
    -- The session-wide change order: ListTasks answers change DESC.
    change              INTEGER NOT NULL UNIQUE
);
CREATE INDEX tasks_by_context ON tasks (context_id, change);
CREATE INDEX tasks_by_state   ON tasks (state, change);
CREATE INDEX tasks_by_owner   ON tasks (owner_kind, owner_name, change);
CREATE INDEX tasks_by_status  ON tasks (status_ms);
";

const TASK_COLUMNS: &str = "id, context_id, state, status_message, status_ms, response, prompt, \
     residue, running_commands, change";

/// Who a task belongs to: whose requests see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Started by a caller of a public door, or by the session itself.
    Public,
    Operator,
    Declared(String),
    Member(String),
}

impl Owner {
    /// The owner of a task a request carrying `caller` starts.
    pub fn of(caller: &Option<Credential>) -> Owner {
        match caller {
            None => Owner::Public,
            Some(Credential::Operator) => Owner::Operator,
            Some(Credential::Declared(name)) => Owner::Declared(name.clone()),
            Some(Credential::Member(name)) => Owner::Member(name.clone()),
        }
    }

    fn columns(&self) -> (&'static str, &str) {
        match self {
            Owner::Public => ("public", ""),
            Owner::Operator => ("operator", ""),
            Owner::Declared(name) => ("declared", name),
            Owner::Member(name) => ("member", name),
        }
    }
}

/// Which tasks a caller sees ("Who sees a task").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sees {
    /// A public door's caller, and the operator.
    Every,
    /// A declared credential or a formation member: the tasks it started.
    Own(Owner),
}

impl Sees {
    pub fn of(caller: &Option<Credential>) -> Sees {
        match caller {
            None | Some(Credential::Operator) => Sees::Every,
            Some(_) => Sees::Own(Owner::of(caller)),
        }
    }

    /// A SQL condition and its parameters.
    fn condition(&self) -> Option<(&'static str, [SqlValue; 2])> {
        match self {
            Sees::Every => None,
            Sees::Own(owner) => {
                let (kind, name) = owner.columns();
                Some((
                    "owner_kind = ? AND owner_name = ?",
                    [kind.to_string().into(), name.to_string().into()],
                ))
            }
        }
    }
}

/// A task as the hub first records it.
#[derive(Clone, Debug)]
pub struct NewRecord {
    pub id: String,
    pub context_id: String,
    pub owner: Owner,
    pub origin: Origin,
    pub trust: Option<String>,
    /// `submitted`, or `rejected` for a task the door had no room for.
    pub state: TaskState,
    pub status_message: Option<String>,
    pub reference_task_ids: Vec<String>,
    pub forget_session: bool,
}

/// A task's new status and the artifacts and metadata that go with it. Every
/// field replaces what the task held: a task leaving `input-required` drops
/// its prompt, and only a completed one carries a response.
#[derive(Clone, Debug)]
pub struct Transition {
    pub state: TaskState,
    pub message: Option<String>,
    pub response: Option<String>,
    pub prompt: Option<String>,
    pub residue: Vec<ResidueItem>,
    pub running_commands: Vec<RunningCommand>,
}

impl Transition {
    /// `state` with nothing else to say.
    pub fn to(state: TaskState) -> Transition {
        Transition {
            state,
            message: None,
            response: None,
            prompt: None,
            residue: Vec::new(),
            running_commands: Vec::new(),
        }
    }
}

/// A task `--resume` failed, and the id of the status event that says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restarted {
    pub event_id: u64,
    pub task_id: String,
    pub context_id: String,
    pub timestamp_ms: i64,
}

/// What opening the state directory found.
pub struct Opened {
    pub store: Store,
    /// `--resume`: the tasks that were live and are now failed, in the order
    /// they had last changed.
    pub failed_by_resume: Vec<String>,
    /// A fresh launch: where the previous session's file went.
    pub archived: Option<PathBuf>,
}

pub struct Store {
    session_id: String,
    created_ms: i64,
    inner: Mutex<Inner>,
    /// The tasks `--resume` failed, until the hub publishes their events.
    restarted: Mutex<Vec<Restarted>>,
    /// The state directory's lock, held while the store lives.
    _lock: Option<StateLock>,
}

struct Inner {
    conn: Connection,
    /// The highest change number written.
    last_change: u64,
    /// The id of the newest event numbered.
    last_event: u64,
}

impl Inner {
    /// Numbers `events` ids after the last one, writing the new last id to
    /// the session row through `conn` (the caller's open transaction). The
    /// caller sets `last_event` to the range's end - 1 once it commits.
    fn number(&self, conn: &Connection, events: u64) -> rusqlite::Result<Range<u64>> {
        let ids = self.last_event + 1..self.last_event + 1 + events;
        if events > 0 {
            conn.prepare_cached("UPDATE session SET last_event = ? WHERE id = 1")?
                .execute(params![(ids.end - 1) as i64])?;
        }
        Ok(ids)
    }
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
        Ok(opened)
    }

    /// [`Store::open`] once this process holds the state directory.
    pub(crate) fn open_locked(state: &Path, resume: bool, now_ms: i64) -> anyhow::Result<Opened> {
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
            return Ok(Opened {
                store,
                failed_by_resume,
                archived: None,
            });
        }
        let archived = if path.exists() {
            Some(archive(state, &path, now_ms)?)
        } else {
            None
        };
        let conn = connect(&path)?;
        let store = Store::create(conn, ids::session_id(), now_ms)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Opened {
            store,
            failed_by_resume: Vec::new(),
            archived,
        })
    }

    /// A session kept in memory only: nothing survives the process. For an
    /// embedder that needs no record, and for tests.
    pub fn in_memory(now_ms: i64) -> anyhow::Result<Store> {
        let conn = Connection::open_in_memory()?;
        Store::create(conn, ids::session_id(), now_ms)
    }

    fn create(conn: Connection, session_id: String, now_ms: i64) -> anyhow::Result<Store> {
        conn.execute_batch(&format!(
            "BEGIN; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        ))?;
        conn.execute(
            "INSERT INTO session (id, session_id, created_ms) VALUES (1, ?, ?)",
            params![session_id, now_ms],
        )?;
        Ok(Store {
            session_id,
            created_ms: now_ms,
            inner: Mutex::new(Inner {
                conn,
                last_change: 0,
                last_event: 0,
            }),
            restarted: Mutex::new(Vec::new()),
            _lock: None,
        })
    }

    fn from_connection(conn: Connection) -> anyhow::Result<Store> {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version == 1 {
            // Before events were numbered: none was.
            conn.execute_batch(&format!(
                "BEGIN;
                 ALTER TABLE session ADD COLUMN last_event INTEGER NOT NULL DEFAULT 0;
                 PRAGMA user_version = {SCHEMA_VERSION};
                 COMMIT;"
            ))
            .context("bringing a version 1 session up to date")?;
        } else if version != SCHEMA_VERSION {
            bail!("not a murmur-door session of this version (schema {version})");
        }
        let (session_id, created_ms, last_event): (String, i64, i64) = conn
            .query_row(
                "SELECT session_id, created_ms, last_event FROM session WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?
            .context("the file holds no session")?;
        let last_change: i64 =
            conn.query_row("SELECT COALESCE(MAX(change), 0) FROM tasks", [], |r| {
                r.get(0)
            })?;
        Ok(Store {
            session_id,
            created_ms,
            inner: Mutex::new(Inner {
                conn,
                last_change: last_change as u64,
                last_event: last_event as u64,
            }),
            restarted: Mutex::new(Vec::new()),
            _lock: None,
        })
    }

    /// `ses_…`
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// When the session started, in milliseconds since the Unix epoch.
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }

    /// The id of the newest event numbered, 0 before the first.
    pub fn last_event(&self) -> u64 {
        self.lock().last_event
    }

    /// The tasks `--resume` failed and their events' ids, once: the hub
    /// publishes them when it starts.
    pub fn take_restarted(&self) -> Vec<Restarted> {
        std::mem::take(&mut self.restarted.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Numbers `events` event ids that go with no write of a task (an
    /// agent's frames): one small UPDATE.
    pub fn number(&self, events: u64) -> rusqlite::Result<Range<u64>> {
        let mut inner = self.lock();
        let ids = inner.number(&inner.conn, events)?;
        inner.last_event = ids.end - 1;
        Ok(ids)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the connection usable: every
        // write is one statement or transaction, which SQLite keeps whole.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a new task, its first change, and numbers `events` event ids
    /// in the same transaction.
    pub fn insert(
        &self,
        record: &NewRecord,
        now_ms: i64,
        events: u64,
    ) -> rusqlite::Result<(Task, Range<u64>)> {
        let mut inner = self.lock();
        let change = inner.last_change + 1;
        let (owner_kind, owner_name) = record.owner.columns();
        let tx = inner.conn.unchecked_transaction()?;
        tx.prepare_cached(
            "INSERT INTO tasks (id, context_id, owner_kind, owner_name, origin, trust, state,
                    status_message, status_ms, response, prompt, residue, running_commands,
                    reference_task_ids, forget_session, created_ms, change)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, '[]', '[]', ?, ?, ?, ?)",
        )?
        .execute(params![
            record.id,
            record.context_id,
            owner_kind,
            owner_name,
            origin_word(record.origin),
            record.trust,
            state_word(record.state),
            record.status_message,
            now_ms,
            json!(record.reference_task_ids).to_string(),
            record.forget_session,
            now_ms,
            change as i64,
        ])?;
        let ids = inner.number(&tx, events)?;
        tx.commit()?;
        inner.last_change = change;
        inner.last_event = ids.end - 1;
        let task = Task {
            id: record.id.clone(),
            context_id: record.context_id.clone(),
            status: Status {
                state: record.state,
                message: record.status_message.clone(),
                timestamp_ms: now_ms,
            },
            response: None,
            prompt: None,
            residue: Vec::new(),
            metadata: metadata(Vec::new()),
            change,
        };
        Ok((task, ids))
    }

    /// Moves a task to a new status: a change, timestamped `now_ms`, and
    /// `events` event ids numbered in the same transaction. `None` when no
    /// task has that id (and nothing is numbered).
    pub fn transition(
        &self,
        id: &str,
        to: &Transition,
        now_ms: i64,
        events: u64,
    ) -> rusqlite::Result<Option<(Task, Range<u64>)>> {
        let mut inner = self.lock();
        let change = inner.last_change + 1;
        let tx = inner.conn.unchecked_transaction()?;
        let context_id: Option<String> = tx
            .prepare_cached(
                "UPDATE tasks SET state = ?, status_message = ?, status_ms = ?, response = ?,
                    prompt = ?, residue = ?, running_commands = ?, change = ?
                 WHERE id = ? RETURNING context_id",
            )?
            .query_row(
                params![
                    state_word(to.state),
                    to.message,
                    now_ms,
                    to.response,
                    to.prompt,
                    residue_json(&to.residue).to_string(),
                    running_json(&to.running_commands).to_string(),
                    change as i64,
                    id,
                ],
                |r| r.get(0),
            )
            .optional()?;
        let Some(context_id) = context_id else {
            return Ok(None);
        };
        let ids = inner.number(&tx, events)?;
        tx.commit()?;
        inner.last_change = change;
        inner.last_event = ids.end - 1;
        let task = Task {
            id: id.to_string(),
            context_id,
            status: Status {
                state: to.state,
                message: to.message.clone(),
                timestamp_ms: now_ms,
            },
            response: to.response.clone(),
            prompt: to.prompt.clone(),
            residue: to.residue.clone(),
            metadata: metadata(to.running_commands.clone()),
            change,
        };
        Ok(Some((task, ids)))
    }

    /// A progress note on a working task: its status message, without a
    /// change (the state did not change, so neither do its place in the
    /// change order nor its status timestamp), and `events` event ids
    /// numbered in the same transaction.
    pub fn note(&self, id: &str, message: &str, events: u64) -> rusqlite::Result<Range<u64>> {
        let mut inner = self.lock();
        let tx = inner.conn.unchecked_transaction()?;
        tx.prepare_cached("UPDATE tasks SET status_message = ? WHERE id = ?")?
            .execute(params![message, id])?;
        let ids = inner.number(&tx, events)?;
        tx.commit()?;
        inner.last_event = ids.end - 1;
        Ok(ids)
    }

    /// The task `id`, when it exists and `sees` covers it.
    pub fn get(&self, id: &str, sees: &Sees) -> rusqlite::Result<Option<Task>> {
        let inner = self.lock();
        let mut sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?");
        let mut values: Vec<SqlValue> = vec![id.to_string().into()];
        if let Some((condition, params)) = sees.condition() {
            sql.push_str(" AND ");
            sql.push_str(condition);
            values.extend(params);
        }
        inner
            .conn
            .prepare_cached(&sql)?
            .query_row(params_from_iter(values), task_from_row)
            .optional()
    }

    /// One page of the tasks `sees` covers that match `query`, most recently
    /// changed first.
    pub fn list(&self, sees: &Sees, query: &ListQuery) -> rusqlite::Result<Page> {
        let mut conditions: Vec<&str> = Vec::new();
        let mut values: Vec<SqlValue> = Vec::new();
        if let Some(context) = &query.context_id {
            conditions.push("context_id = ?");
            values.push(context.clone().into());
        }
        if let Some(state) = query.state {
            conditions.push("state = ?");
            values.push(state_word(state).to_string().into());
        }
        if let Some(after) = query.status_after_ms {
            conditions.push("status_ms >= ?");
            values.push(after.into());
        }
        if let Some((condition, params)) = sees.condition() {
            conditions.push(condition);
            values.extend(params);
        }
        let filters = if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        };

        let inner = self.lock();
        let total: i64 = inner
            .conn
            .prepare_cached(&format!("SELECT COUNT(*) FROM tasks{filters}"))?
            .query_row(params_from_iter(values.iter()), |r| r.get(0))?;

        let mut page_values = values;
        let position = match &query.after {
            Some(cursor) => {
                page_values.push((cursor.change.min(i64::MAX as u64) as i64).into());
                if filters.is_empty() {
                    " WHERE change < ?"
                } else {
                    " AND change < ?"
                }
            }
            None => "",
        };
        // One more than the page holds tells whether another page follows.
        page_values.push((i64::from(query.limit) + 1).into());
        let mut tasks: Vec<Task> = inner
            .conn
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks{filters}{position} ORDER BY change DESC LIMIT ?"
            ))?
            .query_map(params_from_iter(page_values), task_from_row)?
            .collect::<rusqlite::Result<_>>()?;
        let more = tasks.len() > query.limit as usize;
        tasks.truncate(query.limit as usize);
        let next = match tasks.last() {
            Some(last) if more => Some(Cursor {
                change: last.change,
                task_id: last.id.clone(),
            }),
            _ => None,
        };
        Ok(Page {
            tasks,
            next,
            total: u32::try_from(total).unwrap_or(u32::MAX),
        })
    }

    /// The ids of the live tasks (submitted, working, input-required), in
    /// the order they last changed.
    pub fn live_ids(&self) -> rusqlite::Result<Vec<String>> {
        let inner = self.lock();
        let mut statement = inner.conn.prepare_cached(
            "SELECT id FROM tasks WHERE state IN ('submitted', 'working', 'input-required')
             ORDER BY change",
        )?;
        statement
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()
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

/// Opens (creating) a database file with the store's settings.
fn connect(path: &Path) -> anyhow::Result<Connection> {
    let conn = Connection::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // The record is the session's own: only its owner reads it. SQLite gives
    // its log files the same mode.
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))?;
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

fn task_from_row(row: &Row<'_>) -> rusqlite::Result<Task> {
    let state: String = row.get(2)?;
    let residue: String = row.get(7)?;
    let running: String = row.get(8)?;
    let change: i64 = row.get(9)?;
    Ok(Task {
        id: row.get(0)?,
        context_id: row.get(1)?,
        status: Status {
            state: parse_state(&state).ok_or_else(|| corrupt(2, format!("state {state}")))?,
            message: row.get(3)?,
            timestamp_ms: row.get(4)?,
        },
        response: row.get(5)?,
        prompt: row.get(6)?,
        residue: parse_residue(&residue).ok_or_else(|| corrupt(7, residue.clone()))?,
        metadata: metadata(parse_running(&running).ok_or_else(|| corrupt(8, running.clone()))?),
        change: change as u64,
    })
}

fn corrupt(column: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        column,
        rusqlite::types::Type::Text,
        format!("unreadable value in the task record: {what}").into(),
    )
}

fn metadata(running_commands: Vec<RunningCommand>) -> TaskMetadata {
    TaskMetadata {
        no_answer: false,
        no_answer_below: Vec::new(),
        running_commands,
    }
}

/// Murmur's word for a state, as the store and the trace spell it.
pub fn state_word(state: TaskState) -> &'static str {
    match state {
        TaskState::Submitted => "submitted",
        TaskState::Working => "working",
        TaskState::InputRequired => "input-required",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Rejected => "rejected",
        TaskState::Canceled => "canceled",
    }
}

fn parse_state(word: &str) -> Option<TaskState> {
    Some(match word {
        "submitted" => TaskState::Submitted,
        "working" => TaskState::Working,
        "input-required" => TaskState::InputRequired,
        "completed" => TaskState::Completed,
        "failed" => TaskState::Failed,
        "rejected" => TaskState::Rejected,
        "canceled" => TaskState::Canceled,
        _ => return None,
    })
}

fn origin_word(origin: Origin) -> &'static str {
    match origin {
        Origin::Client => "client",
        Origin::Peer => "peer",
        Origin::Session => "session",
    }
}

/// Residue items as the reference spells them (`kind`, snake_case keys).
fn residue_json(items: &[ResidueItem]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|item| match item {
                ResidueItem::DetachedShell(d) => json!({
                    "kind": "detached_shell",
                    "work_id": d.work_id,
                    "binary": d.binary,
                    "command": d.command,
                    "started_at_ms": d.started_at_ms,
                }),
                ResidueItem::Delegation(d) => json!({
                    "kind": "delegation",
                    "delegation_id": d.delegation_id,
                    "capsule": d.capsule,
                    "version": d.version,
                    "child_session_id": d.child_session_id,
                    "child_workdir": d.child_workdir,
                }),
            })
            .collect(),
    )
}

fn parse_residue(text: &str) -> Option<Vec<ResidueItem>> {
    let items: Vec<Value> = serde_json::from_str(text).ok()?;
    let s = |v: &Value, key: &str| v.get(key)?.as_str().map(str::to_string);
    items
        .iter()
        .map(|v| match v.get("kind")?.as_str()? {
            "detached_shell" => Some(ResidueItem::DetachedShell(DetachedShell {
                work_id: s(v, "work_id")?,
                binary: s(v, "binary")?,
                command: s(v, "command")?,
                started_at_ms: v.get("started_at_ms")?.as_u64()?,
            })),
            "delegation" => Some(ResidueItem::Delegation(Delegation {
                delegation_id: s(v, "delegation_id")?,
                capsule: s(v, "capsule")?,
                version: s(v, "version")?,
                child_session_id: s(v, "child_session_id")?,
                child_workdir: s(v, "child_workdir")?,
            })),
            _ => None,
        })
        .collect()
}

fn running_json(commands: &[RunningCommand]) -> Value {
    Value::Array(
        commands
            .iter()
            .map(|c| {
                json!({
                    "workId": c.work_id,
                    "binary": c.binary,
                    "command": c.command,
                    "runningMs": c.running_ms,
                })
            })
            .collect(),
    )
}

fn parse_running(text: &str) -> Option<Vec<RunningCommand>> {
    let items: Vec<Value> = serde_json::from_str(text).ok()?;
    items
        .iter()
        .map(|v| {
            Some(RunningCommand {
                work_id: v.get("workId")?.as_str()?.to_string(),
                binary: v.get("binary")?.as_str()?.to_string(),
                command: v.get("command")?.as_str()?.to_string(),
                running_ms: v.get("runningMs")?.as_u64()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::testing::TempDir;

    fn record(owner: Owner, context: &str, state: TaskState) -> NewRecord {
        NewRecord {
            id: ids::task_id(),
            context_id: context.to_string(),
            owner,
            origin: Origin::Client,
            trust: None,
            state,
            status_message: None,
            reference_task_ids: Vec::new(),
            forget_session: false,
        }
    }

    fn query(limit: u32) -> ListQuery {
        ListQuery {
            context_id: None,
            state: None,
            status_after_ms: None,
            after: None,
            limit,
        }
    }

    fn ids_of(page: &Page) -> Vec<&str> {
        page.tasks.iter().map(|t| t.id.as_str()).collect()
    }

    #[test]
    fn insert_then_get_and_change_order() {
        let store = Store::in_memory(1).unwrap();
        let a = store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 10, 0)
            .unwrap()
            .0;
        let b = store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 11, 0)
            .unwrap()
            .0;
        assert_eq!((a.change, b.change), (1, 2));
        assert_eq!(store.get(&a.id, &Sees::Every).unwrap(), Some(a.clone()));
        let mut done = Transition::to(TaskState::Completed);
        done.response = Some("four".into());
        let ended = store.transition(&a.id, &done, 20, 0).unwrap().unwrap().0;
        assert_eq!(ended.change, 3);
        assert_eq!(ended.status.timestamp_ms, 20);
        assert_eq!(store.get(&a.id, &Sees::Every).unwrap(), Some(ended));
        // a changed last, so it is listed first.
        let page = store.list(&Sees::Every, &query(10)).unwrap();
        assert_eq!(ids_of(&page), [a.id.as_str(), b.id.as_str()]);
        assert!(
            store
                .transition("tsk_nope", &done, 21, 0)
                .unwrap()
                .is_none()
        );
        assert_eq!(store.get("tsk_nope", &Sees::Every).unwrap(), None);
    }

    #[test]
    fn a_progress_note_is_not_a_change() {
        let store = Store::in_memory(1).unwrap();
        let a = store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 10, 0)
            .unwrap()
            .0;
        let working = store
            .transition(&a.id, &Transition::to(TaskState::Working), 12, 0)
            .unwrap()
            .unwrap()
            .0;
        store.note(&a.id, "step 2", 0).unwrap();
        let read = store.get(&a.id, &Sees::Every).unwrap().unwrap();
        assert_eq!(read.status.message.as_deref(), Some("step 2"));
        assert_eq!(read.change, working.change);
        assert_eq!(read.status.timestamp_ms, 12);
    }

    #[test]
    fn artifacts_and_metadata_round_trip() {
        let store = Store::in_memory(1).unwrap();
        let a = store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 10, 0)
            .unwrap()
            .0;
        let mut canceled = Transition::to(TaskState::Canceled);
        canceled.residue = vec![
            ResidueItem::DetachedShell(DetachedShell {
                work_id: "wrk_1".into(),
                binary: "sleep".into(),
                command: "sleep 30".into(),
                started_at_ms: 5,
            }),
            ResidueItem::Delegation(Delegation {
                delegation_id: "dlg_1".into(),
                capsule: "worker".into(),
                version: "0.1.0".into(),
                child_session_id: "ses_1".into(),
                child_workdir: "/w".into(),
            }),
        ];
        canceled.running_commands = vec![RunningCommand {
            work_id: "wrk_1".into(),
            binary: "sleep".into(),
            command: "sleep 30".into(),
            running_ms: 7,
        }];
        let written = store
            .transition(&a.id, &canceled, 12, 0)
            .unwrap()
            .unwrap()
            .0;
        let read = store.get(&a.id, &Sees::Every).unwrap().unwrap();
        assert_eq!(read, written);
        assert_eq!(read.residue, canceled.residue);
        assert_eq!(read.metadata.running_commands, canceled.running_commands);
    }

    #[test]
    fn visibility_follows_the_owner() {
        let store = Store::in_memory(1).unwrap();
        let alice = Owner::Declared("alice".into());
        let bob = Owner::Declared("bob".into());
        let member = Owner::Member("alice".into());
        let mut by = Vec::new();
        for owner in [
            Owner::Public,
            Owner::Operator,
            alice.clone(),
            bob.clone(),
            member.clone(),
        ] {
            by.push(
                store
                    .insert(&record(owner, "ctx_a", TaskState::Submitted), 10, 0)
                    .unwrap()
                    .0
                    .id,
            );
        }
        let alices = Sees::of(&Some(Credential::Declared("alice".into())));
        assert_eq!(alices, Sees::Own(alice));
        assert_eq!(Sees::of(&None), Sees::Every);
        assert_eq!(Sees::of(&Some(Credential::Operator)), Sees::Every);
        // A declared credential and a member of the same name are different.
        let page = store.list(&alices, &query(50)).unwrap();
        assert_eq!(ids_of(&page), [by[2].as_str()]);
        assert_eq!(page.total, 1);
        let members = Sees::of(&Some(Credential::Member("alice".into())));
        assert_eq!(
            ids_of(&store.list(&members, &query(50)).unwrap()),
            [by[4].as_str()]
        );
        assert_eq!(store.list(&Sees::Every, &query(50)).unwrap().total, 5);
        // Another owner's task is exactly not there.
        assert_eq!(store.get(&by[3], &alices).unwrap(), None);
        assert_eq!(store.get(&by[0], &alices).unwrap(), None);
        assert!(store.get(&by[2], &alices).unwrap().is_some());
        assert!(store.get(&by[3], &Sees::Every).unwrap().is_some());
    }

    #[test]
    fn list_pages_filters_and_totals() {
        let store = Store::in_memory(1).unwrap();
        // Seven tasks, ctx_a and ctx_b alternating, at 100, 101, … ms.
        let mut all = Vec::new();
        for i in 0..7 {
            let context = if i % 2 == 0 { "ctx_a" } else { "ctx_b" };
            all.push(
                store
                    .insert(
                        &record(Owner::Public, context, TaskState::Submitted),
                        100 + i,
                        0,
                    )
                    .unwrap()
                    .0,
            );
        }
        // The second task completes last: it moves to the front.
        store
            .transition(&all[1].id, &Transition::to(TaskState::Completed), 200, 0)
            .unwrap();
        let expected: Vec<&str> = [1, 6, 5, 4, 3, 2, 0]
            .iter()
            .map(|&i| all[i].id.as_str())
            .collect();

        // Walk in pages of 3: every task once, in order; total on each page.
        let mut walked = Vec::new();
        let mut q = query(3);
        let mut pages = 0;
        loop {
            let page = store.list(&Sees::Every, &q).unwrap();
            assert_eq!(page.total, 7);
            pages += 1;
            walked.extend(page.tasks.iter().map(|t| t.id.clone()));
            match page.next {
                Some(cursor) => {
                    assert_eq!(&cursor.task_id, walked.last().unwrap());
                    q.after = Some(cursor);
                }
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(walked, expected);

        // An exact fit has no next page.
        let page = store.list(&Sees::Every, &query(7)).unwrap();
        assert_eq!(page.tasks.len(), 7);
        assert_eq!(page.next, None);

        // Context filter.
        let mut q = query(50);
        q.context_id = Some("ctx_b".into());
        let page = store.list(&Sees::Every, &q).unwrap();
        assert_eq!(
            ids_of(&page),
            [all[1].id.as_str(), all[5].id.as_str(), all[3].id.as_str()]
        );
        assert_eq!(page.total, 3);

        // State filter.
        let mut q = query(50);
        q.state = Some(TaskState::Completed);
        let page = store.list(&Sees::Every, &q).unwrap();
        assert_eq!(ids_of(&page), [all[1].id.as_str()]);
        q.state = Some(TaskState::Canceled);
        assert_eq!(store.list(&Sees::Every, &q).unwrap().total, 0);

        // Status timestamp, inclusive.
        let mut q = query(2);
        q.status_after_ms = Some(104);
        let page = store.list(&Sees::Every, &q).unwrap();
        assert_eq!(page.total, 4, "104, 105, 106 and the one changed at 200");
        assert_eq!(ids_of(&page), [all[1].id.as_str(), all[6].id.as_str()]);
        // The total ignores the cursor; the page after it keeps the filters.
        q.after = page.next.clone();
        let page = store.list(&Sees::Every, &q).unwrap();
        assert_eq!(page.total, 4);
        assert_eq!(ids_of(&page), [all[5].id.as_str(), all[4].id.as_str()]);
        assert_eq!(page.next, None);

        // Filters combine.
        let mut q = query(50);
        q.context_id = Some("ctx_a".into());
        q.status_after_ms = Some(102);
        let page = store.list(&Sees::Every, &q).unwrap();
        assert_eq!(
            ids_of(&page),
            [all[6].id.as_str(), all[4].id.as_str(), all[2].id.as_str()]
        );

        // A cursor names a position only: below change 1 there is nothing.
        let mut q = query(50);
        q.after = Some(Cursor {
            change: 1,
            task_id: "tsk_whatever".into(),
        });
        let page = store.list(&Sees::Every, &q).unwrap();
        assert!(page.tasks.is_empty());
        assert_eq!(page.total, 7);
    }

    #[test]
    fn list_paging_respects_visibility() {
        let store = Store::in_memory(1).unwrap();
        let alice = Owner::Declared("alice".into());
        let mut alices = Vec::new();
        for i in 0..6 {
            let owner = if i % 2 == 0 {
                alice.clone()
            } else {
                Owner::Operator
            };
            let task = store
                .insert(&record(owner, "ctx_a", TaskState::Submitted), i, 0)
                .unwrap()
                .0;
            if i % 2 == 0 {
                alices.push(task.id);
            }
        }
        alices.reverse();
        let sees = Sees::Own(alice);
        let first = store.list(&sees, &query(2)).unwrap();
        assert_eq!(first.total, 3);
        assert_eq!(ids_of(&first), [alices[0].as_str(), alices[1].as_str()]);
        let mut q = query(2);
        q.after = first.next;
        let second = store.list(&sees, &q).unwrap();
        assert_eq!(ids_of(&second), [alices[2].as_str()]);
        assert_eq!(second.next, None);
    }

    #[test]
    fn the_queries_use_indexes() {
        let store = Store::in_memory(1).unwrap();
        let inner = store.lock();
        for sql in [
            "SELECT id FROM tasks ORDER BY change DESC LIMIT 5",
            "SELECT id FROM tasks WHERE change < 9 ORDER BY change DESC LIMIT 5",
            "SELECT id FROM tasks WHERE context_id = 'c' ORDER BY change DESC LIMIT 5",
            "SELECT id FROM tasks WHERE state = 'working' AND change < 9 ORDER BY change DESC LIMIT 5",
            "SELECT id FROM tasks WHERE owner_kind = 'declared' AND owner_name = 'a' ORDER BY change DESC LIMIT 5",
            "SELECT COUNT(*) FROM tasks WHERE status_ms >= 5",
            // The live tasks (a few) are found by index, then sorted.
            "SELECT id FROM tasks WHERE state IN ('submitted', 'working', 'input-required')",
        ] {
            let plan: Vec<String> = inner
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let plan = plan.join("; ");
            assert!(
                !plan.contains("SCAN tasks") || plan.contains("USING"),
                "{sql}: {plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
        }
    }

    #[test]
    fn a_fresh_launch_archives_the_previous_session() {
        let dir = TempDir::new("store-archive");
        let first = Store::open(dir.path(), false, 1).unwrap();
        assert!(first.archived.is_none());
        let first_id = first.store.session_id().to_string();
        let task = first
            .store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 5, 0)
            .unwrap()
            .0;
        drop(first);

        let mode = fs::metadata(dir.path().join(SESSION_DB))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let second = Store::open(dir.path(), false, 2).unwrap();
        assert_ne!(second.store.session_id(), first_id);
        let archived = second.archived.clone().unwrap();
        assert_eq!(
            archived,
            dir.path().join(ARCHIVE_DIR).join(format!("{first_id}.db"))
        );
        // The new session starts empty; the old one is whole in its archive.
        assert_eq!(
            second.store.list(&Sees::Every, &query(50)).unwrap().total,
            0
        );
        drop(second);
        let old = Store::from_connection(connect(&archived).unwrap()).unwrap();
        assert_eq!(old.session_id(), first_id);
        assert_eq!(old.get(&task.id, &Sees::Every).unwrap(), Some(task));
    }

    #[test]
    fn resume_keeps_the_session_and_fails_live_tasks() {
        let dir = TempDir::new("store-resume");
        let opened = Store::open(dir.path(), false, 1).unwrap();
        let store = opened.store;
        let session = store.session_id().to_string();
        let submitted = store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 5, 0)
            .unwrap()
            .0;
        let mut done = store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 6, 0)
            .unwrap()
            .0;
        let mut finished = Transition::to(TaskState::Completed);
        finished.response = Some("ok".into());
        done = store
            .transition(&done.id, &finished, 7, 0)
            .unwrap()
            .unwrap()
            .0;
        let asking = store
            .insert(&record(Owner::Public, "ctx_b", TaskState::Submitted), 8, 0)
            .unwrap()
            .0;
        let mut ask = Transition::to(TaskState::InputRequired);
        ask.prompt = Some("which?".into());
        store.transition(&asking.id, &ask, 9, 0).unwrap();
        let working = store
            .insert(&record(Owner::Public, "ctx_b", TaskState::Submitted), 10, 0)
            .unwrap()
            .0;
        store
            .transition(&working.id, &Transition::to(TaskState::Working), 11, 0)
            .unwrap();
        let last_change = store.list(&Sees::Every, &query(1)).unwrap().tasks[0].change;
        drop(store);

        let resumed = Store::open(dir.path(), true, 1000).unwrap();
        assert!(resumed.archived.is_none());
        assert_eq!(resumed.store.session_id(), session);
        assert_eq!(
            resumed.failed_by_resume,
            [submitted.id.clone(), asking.id.clone(), working.id.clone()]
        );
        let store = resumed.store;
        for (i, id) in resumed.failed_by_resume.iter().enumerate() {
            let task = store.get(id, &Sees::Every).unwrap().unwrap();
            assert_eq!(task.status.state, TaskState::Failed);
            assert_eq!(task.status.message.as_deref(), Some(RESTARTED));
            assert_eq!(task.status.timestamp_ms, 1000);
            assert_eq!(task.prompt, None);
            assert_eq!(task.change, last_change + 1 + i as u64);
        }
        // An ended task is as it was.
        assert_eq!(store.get(&done.id, &Sees::Every).unwrap(), Some(done));
        // New changes continue the order.
        let next = store
            .insert(
                &record(Owner::Public, "ctx_c", TaskState::Submitted),
                1001,
                0,
            )
            .unwrap()
            .0;
        assert_eq!(next.change, last_change + 4);
        assert!(store.live_ids().unwrap() == [next.id]);
        // Each failure is an event, numbered with it, waiting for the hub.
        let restarted = store.take_restarted();
        assert_eq!(
            restarted,
            [
                (1, &submitted.id, "ctx_a"),
                (2, &asking.id, "ctx_b"),
                (3, &working.id, "ctx_b")
            ]
            .map(|(event_id, id, context)| Restarted {
                event_id,
                task_id: id.clone(),
                context_id: context.to_string(),
                timestamp_ms: 1000,
            })
        );
        assert_eq!(store.last_event(), 3);
        assert!(store.take_restarted().is_empty());
    }

    #[test]
    fn writes_number_their_events_in_the_same_transaction() {
        let store = Store::in_memory(1).unwrap();
        let (a, ids) = store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 10, 1)
            .unwrap();
        assert_eq!(ids, 1..2);
        let working = Transition::to(TaskState::Working);
        let (_, ids) = store.transition(&a.id, &working, 11, 1).unwrap().unwrap();
        assert_eq!(ids, 2..3);
        assert_eq!(store.note(&a.id, "step", 1).unwrap(), 3..4);
        let mut done = Transition::to(TaskState::Completed);
        done.response = Some("ok".into());
        let (_, ids) = store.transition(&a.id, &done, 12, 2).unwrap().unwrap();
        assert_eq!(ids, 4..6);
        // No such task: nothing written, nothing numbered.
        assert!(
            store
                .transition("tsk_nope", &done, 13, 2)
                .unwrap()
                .is_none()
        );
        assert_eq!(store.last_event(), 5);
        assert_eq!(store.number(2).unwrap(), 6..8);
        let persisted: i64 = store
            .lock()
            .conn
            .query_row("SELECT last_event FROM session", [], |r| r.get(0))
            .unwrap();
        assert_eq!(persisted, 7);
    }

    #[test]
    fn a_version_1_session_resumes_with_no_event_numbered() {
        let dir = TempDir::new("store-v1");
        let opened = Store::open(dir.path(), false, 1).unwrap();
        let task = opened
            .store
            .insert(&record(Owner::Public, "ctx_a", TaskState::Submitted), 5, 0)
            .unwrap()
            .0;
        drop(opened);
        // The file as version 1 wrote it.
        let conn = connect(&dir.path().join(SESSION_DB)).unwrap();
        conn.execute_batch("ALTER TABLE session DROP COLUMN last_event; PRAGMA user_version = 1;")
            .unwrap();
        drop(conn);

        let resumed = Store::open(dir.path(), true, 9).unwrap();
        assert_eq!(resumed.failed_by_resume, std::slice::from_ref(&task.id));
        let store = resumed.store;
        assert_eq!(store.take_restarted()[0].event_id, 1);
        assert_eq!(store.last_event(), 1);
        let version: i64 = store
            .lock()
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[test]
    fn resume_without_a_session_is_refused() {
        let dir = TempDir::new("store-noresume");
        let error = Store::open(dir.path(), true, 1).err().unwrap();
        let message = format!("{error:#}");
        assert!(message.contains("no session to resume"), "{message}");
        assert!(message.contains("session.db"), "{message}");
        assert!(!dir.path().join(SESSION_DB).exists());
    }
}
