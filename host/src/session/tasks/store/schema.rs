//! The tables of a session's file: created for a new session, read (and
//! brought up to date from an older version) for one reopened.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use anyhow::{Context, bail};
use rusqlite::{Connection, OptionalExtension, params};

use super::base::{Inner, Store};
use super::file::keep_statements;

/// Bumped when the tables change shape; a file of another version is refused
/// (versions 1, before events were numbered, 2, before ListTasks was served
/// from indexes and counts, and 3, before tasks kept their images, the
/// answers they lack and the session its detached commands, are brought up
/// to date).
pub(super) const SCHEMA_VERSION: i64 = 4;

/// The tables of version 2 and the indexes they had then, but for the ones
/// on owners and status timestamps, which [`LISTING`] makes anew.
const TABLES: &str = "
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
";

/// What ListTasks reads, so that a page and its total cost the same in a
/// session of a million tasks as in one of a thousand (version 3).
///
/// A page: every combination of the equality filters (the caller's owner,
/// contextId, status) has an index of those columns followed by `change`,
/// so the page is read from the cursor down in change order and every row
/// read is on it. The combinations without an owner that have one filter
/// are in [`TABLES`].
///
/// Only a declared credential's or a member's tasks are ever listed by
/// owner (a public door's callers and the operator see every task), so
/// the owner indexes hold only theirs: a public door's tasks, and the
/// operator's, cost no write to them. A listing by owner names the kind
/// as a literal, which is how SQLite knows such an index covers it.
///
/// totalSize: how many tasks each owner holds in each state, overall and in
/// each context, kept by triggers in the transaction of every write to
/// `tasks` (insert, any change of state, delete), so no write can forget
/// them. A group that empties is deleted: the tables hold only what is
/// there, a row per (owner, state) and per (context, owner, state) in use.
///
/// statusTimestampAfter: `tasks_by_status` holds every column the other
/// filters read, so the tasks changed at or after a cutoff (or those
/// before it) are counted from the index alone (`queries.rs` says how).
const LISTING: &str = "
CREATE INDEX tasks_by_context_state ON tasks (context_id, state, change);
CREATE INDEX tasks_by_owner ON tasks (owner_kind, owner_name, change)
    WHERE owner_kind = 'declared' OR owner_kind = 'member';
CREATE INDEX tasks_by_owner_context ON tasks (owner_kind, owner_name, context_id, change)
    WHERE owner_kind = 'declared' OR owner_kind = 'member';
CREATE INDEX tasks_by_owner_state ON tasks (owner_kind, owner_name, state, change)
    WHERE owner_kind = 'declared' OR owner_kind = 'member';
CREATE INDEX tasks_by_owner_context_state
    ON tasks (owner_kind, owner_name, context_id, state, change)
    WHERE owner_kind = 'declared' OR owner_kind = 'member';
CREATE INDEX tasks_by_status
    ON tasks (status_ms, context_id, state, owner_kind, owner_name, change);

CREATE TABLE owner_counts (
    owner_kind  TEXT    NOT NULL,
    owner_name  TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    tasks       INTEGER NOT NULL,
    PRIMARY KEY (owner_kind, owner_name, state)
) WITHOUT ROWID;
CREATE TABLE context_counts (
    context_id  TEXT    NOT NULL,
    owner_kind  TEXT    NOT NULL,
    owner_name  TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    tasks       INTEGER NOT NULL,
    PRIMARY KEY (context_id, owner_kind, owner_name, state)
) WITHOUT ROWID;

CREATE TRIGGER tasks_count_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO owner_counts VALUES (NEW.owner_kind, NEW.owner_name, NEW.state, 1)
        ON CONFLICT DO UPDATE SET tasks = tasks + 1;
    INSERT INTO context_counts
        VALUES (NEW.context_id, NEW.owner_kind, NEW.owner_name, NEW.state, 1)
        ON CONFLICT DO UPDATE SET tasks = tasks + 1;
END;
CREATE TRIGGER tasks_count_delete AFTER DELETE ON tasks BEGIN
    UPDATE owner_counts SET tasks = tasks - 1
        WHERE owner_kind = OLD.owner_kind AND owner_name = OLD.owner_name
          AND state = OLD.state;
    DELETE FROM owner_counts
        WHERE owner_kind = OLD.owner_kind AND owner_name = OLD.owner_name
          AND state = OLD.state AND tasks = 0;
    UPDATE context_counts SET tasks = tasks - 1
        WHERE context_id = OLD.context_id AND owner_kind = OLD.owner_kind
          AND owner_name = OLD.owner_name AND state = OLD.state;
    DELETE FROM context_counts
        WHERE context_id = OLD.context_id AND owner_kind = OLD.owner_kind
          AND owner_name = OLD.owner_name AND state = OLD.state AND tasks = 0;
END;
CREATE TRIGGER tasks_count_update
    AFTER UPDATE OF context_id, owner_kind, owner_name, state ON tasks
    WHEN (OLD.context_id, OLD.owner_kind, OLD.owner_name, OLD.state)
        != (NEW.context_id, NEW.owner_kind, NEW.owner_name, NEW.state)
BEGIN
    UPDATE owner_counts SET tasks = tasks - 1
        WHERE owner_kind = OLD.owner_kind AND owner_name = OLD.owner_name
          AND state = OLD.state;
    DELETE FROM owner_counts
        WHERE owner_kind = OLD.owner_kind AND owner_name = OLD.owner_name
          AND state = OLD.state AND tasks = 0;
    UPDATE context_counts SET tasks = tasks - 1
        WHERE context_id = OLD.context_id AND owner_kind = OLD.owner_kind
          AND owner_name = OLD.owner_name AND state = OLD.state;
    DELETE FROM context_counts
        WHERE context_id = OLD.context_id AND owner_kind = OLD.owner_kind
          AND owner_name = OLD.owner_name AND state = OLD.state AND tasks = 0;
    INSERT INTO owner_counts VALUES (NEW.owner_kind, NEW.owner_name, NEW.state, 1)
        ON CONFLICT DO UPDATE SET tasks = tasks + 1;
    INSERT INTO context_counts
        VALUES (NEW.context_id, NEW.owner_kind, NEW.owner_name, NEW.state, 1)
        ON CONFLICT DO UPDATE SET tasks = tasks + 1;
END;
";

/// What version 4 added: a terminal task's `noAnswer` and `noAnswerBelow`,
/// the images a task started with (read by the runtime, never by the
/// door), and the detached commands still running, so that a launch that
/// resumes the session can report those its last run lost.
const ANSWERS_IMAGES_COMMANDS: &str = "
ALTER TABLE tasks ADD COLUMN no_answer INTEGER NOT NULL DEFAULT 0;
-- JSON: [{member, status}]
ALTER TABLE tasks ADD COLUMN no_answer_below TEXT NOT NULL DEFAULT '[]';
CREATE TABLE images (
    task_id     TEXT    NOT NULL,
    -- The image's place among the message's images, from 0.
    position    INTEGER NOT NULL,
    media_type  TEXT    NOT NULL,
    bytes       BLOB    NOT NULL,
    PRIMARY KEY (task_id, position)
);
CREATE TABLE detached (
    work_id        TEXT    PRIMARY KEY,
    task_id        TEXT    NOT NULL,
    binary         TEXT    NOT NULL,
    command        TEXT    NOT NULL,
    started_at_ms  INTEGER NOT NULL
);
";

/// The counts of [`LISTING`] taken from the rows, for a file that had tasks
/// before it kept them.
const COUNT_TASKS: &str = "
INSERT INTO owner_counts
    SELECT owner_kind, owner_name, state, COUNT(*) FROM tasks
    GROUP BY owner_kind, owner_name, state;
INSERT INTO context_counts
    SELECT context_id, owner_kind, owner_name, state, COUNT(*) FROM tasks
    GROUP BY context_id, owner_kind, owner_name, state;
";

impl Store {
    pub(super) fn create(
        conn: Connection,
        session_id: String,
        now_ms: i64,
    ) -> anyhow::Result<Store> {
        conn.execute_batch(&format!(
            "BEGIN; {TABLES} {LISTING} {ANSWERS_IMAGES_COMMANDS}
             PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        ))?;
        conn.execute(
            "INSERT INTO session (id, session_id, created_ms) VALUES (1, ?, ?)",
            params![session_id, now_ms],
        )?;
        keep_statements(&conn)?;
        Ok(Store {
            session_id,
            created_ms: now_ms,
            inner: Mutex::new(Inner {
                conn,
                last_change: 0,
                last_event: 0,
            }),
            restarted: Mutex::new(Vec::new()),
            commits: AtomicU64::new(0),
            writes: Default::default(),
            _lock: None,
            checkpoints: None,
            readers: None,
        })
    }

    pub(super) fn from_connection(conn: Connection) -> anyhow::Result<Store> {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if !(1..=SCHEMA_VERSION).contains(&version) {
            bail!("not a murmur-door session of this version (schema {version})");
        }
        if version < SCHEMA_VERSION {
            // Every step from the file's version on, in one transaction: a
            // file is either as it was or up to date.
            let mut steps = String::from("BEGIN;");
            if version < 2 {
                // Before events were numbered: none was.
                steps.push_str(
                    "ALTER TABLE session ADD COLUMN last_event INTEGER NOT NULL DEFAULT 0;",
                );
            }
            if version < 3 {
                // Before ListTasks read indexes and counts: the owner index
                // of every task and the narrow status index give way to
                // LISTING's, and the tasks are counted.
                steps.push_str("DROP INDEX tasks_by_owner; DROP INDEX tasks_by_status;");
                steps.push_str(LISTING);
                steps.push_str(COUNT_TASKS);
            }
            // Before tasks kept images and answers: none had any.
            steps.push_str(ANSWERS_IMAGES_COMMANDS);
            steps.push_str(&format!("PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"));
            conn.execute_batch(&steps)
                .with_context(|| format!("bringing a version {version} session up to date"))?;
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
        keep_statements(&conn)?;
        Ok(Store {
            session_id,
            created_ms,
            inner: Mutex::new(Inner {
                conn,
                last_change: last_change as u64,
                last_event: last_event as u64,
            }),
            restarted: Mutex::new(Vec::new()),
            commits: AtomicU64::new(0),
            writes: Default::default(),
            _lock: None,
            checkpoints: None,
            readers: None,
        })
    }
}
