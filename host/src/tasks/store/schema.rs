//! The tables of a session's file: created for a new session, read (and
//! brought up to date from an older version) for one reopened.

use std::sync::Mutex;

use anyhow::{Context, bail};
use rusqlite::{Connection, OptionalExtension, params};

use super::{Inner, Store};

/// Bumped when the tables change shape; a file of another version is refused
/// (version 1, before events were numbered, is brought up to date).
pub(super) const SCHEMA_VERSION: i64 = 2;

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

impl Store {
    pub(super) fn create(
        conn: Connection,
        session_id: String,
        now_ms: i64,
    ) -> anyhow::Result<Store> {
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

    pub(super) fn from_connection(conn: Connection) -> anyhow::Result<Store> {
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
}
