//! The store's reads and writes of tasks, and the numbering of the events
//! that go with them.

use std::ops::Range;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde_json::json;

use crate::bindings::session::DetachedShell;
use crate::bindings::task_store::{Cursor, Image, ListQuery, Page, Status, Task, TaskState};

use super::base::{Inner, NewRecord, Store, Transition};
use super::codecs::{
    TASK_COLUMNS, below_json, origin_word, residue_json, running_json, state_word, task_from_row,
};
use super::visibility::Sees;

impl Inner {
    /// Numbers `events` ids after the last one, writing the new last id to
    /// the session row through `conn` (the caller's open transaction). The
    /// caller sets `last_event` to the range's end - 1 once it commits.
    pub(super) fn number(&self, conn: &Connection, events: u64) -> rusqlite::Result<Range<u64>> {
        number(conn, self.last_event, events)
    }
}

/// Why a broken batch committed nothing.
fn rolled_back() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
        Some("the transaction was rolled back".into()),
    )
}

/// Numbers `events` ids after `last_event`, writing the new last id to the
/// session row through `conn`, in the caller's open transaction.
fn number(conn: &Connection, last_event: u64, events: u64) -> rusqlite::Result<Range<u64>> {
    let ids = last_event + 1..last_event + 1 + events;
    if events > 0 {
        conn.prepare_cached("UPDATE session SET last_event = ? WHERE id = 1")?
            .execute(params![(ids.end - 1) as i64])?;
    }
    Ok(ids)
}

/// Writes [`Store::batch`] makes in one transaction.
pub struct Batch<'a> {
    conn: &'a Connection,
    /// The counters as the writes so far leave them.
    last_change: u64,
    last_event: u64,
    /// The transaction is open: begun by the batch's first write, so a
    /// batch that writes nothing touches nothing.
    begun: bool,
    /// A write of the batch is in the transaction.
    written: bool,
    /// The transaction was lost: the batch commits nothing.
    broken: bool,
    /// The tasks its writes changed.
    changed: Vec<String>,
}

impl Batch<'_> {
    /// Records a new task, its first change, and `events` event ids, in its
    /// final state when `ended` (one change); undone alone if it fails.
    pub fn insert_ended(
        &mut self,
        record: &NewRecord,
        ended: Option<&Transition>,
        now_ms: i64,
        events: u64,
    ) -> rusqlite::Result<(Task, Range<u64>)> {
        let written = self.write(|batch| batch.insert_ended_now(record, ended, now_ms, events))?;
        self.changed.push(record.id.clone());
        Ok(written)
    }

    /// Runs one write so that a failure undoes it and leaves the batch's
    /// other writes: in a savepoint of its own, but for the batch's first
    /// (most batches hold one), which the whole transaction undoes. Should
    /// SQLite roll the whole transaction back itself (a full disk, an I/O
    /// error), or a statement the transaction hangs on fail, the batch
    /// breaks: no more writes, and none of it is committed.
    fn write<T>(
        &mut self,
        write: impl FnOnce(&mut Self) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        if self.broken {
            return Err(rolled_back());
        }
        if !self.begun {
            self.control("BEGIN")?;
            self.begun = true;
        }
        let first = !self.written;
        if !first {
            self.control("SAVEPOINT write")?;
        }
        let (last_change, last_event) = (self.last_change, self.last_event);
        match write(self) {
            Ok(done) => {
                if !first {
                    self.control("RELEASE write")?;
                }
                self.written = true;
                Ok(done)
            }
            Err(e) => {
                self.last_change = last_change;
                self.last_event = last_event;
                if self.conn.is_autocommit() {
                    // Gone with the transaction: the batch's writes before
                    // this one too, unless it was the first (the next
                    // write begins another).
                    if first {
                        self.begun = false;
                    } else {
                        self.broken = true;
                    }
                } else if first {
                    self.control("ROLLBACK")?;
                    self.begun = false;
                } else {
                    self.control("ROLLBACK TO write")?;
                    self.control("RELEASE write")?;
                }
                Err(e)
            }
        }
    }

    /// Runs a statement the batch's transaction hangs on: if it fails, the
    /// batch breaks.
    fn control(&mut self, sql: &str) -> rusqlite::Result<()> {
        let ran = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute([]));
        if ran.is_err() {
            self.broken = true;
        }
        ran.map(drop)
    }

    fn insert_ended_now(
        &mut self,
        record: &NewRecord,
        ended: Option<&Transition>,
        now_ms: i64,
        events: u64,
    ) -> rusqlite::Result<(Task, Range<u64>)> {
        let change = self.last_change + 1;
        let (owner_kind, owner_name) = record.owner.columns();
        let (state, message) = match ended {
            Some(to) => (to.state, to.message.clone()),
            None => (record.state, record.status_message.clone()),
        };
        let response = ended.and_then(|to| to.response.clone());
        let prompt = ended.and_then(|to| to.prompt.clone());
        let residue = ended.map_or(Vec::new(), |to| to.residue.clone());
        let metadata =
            ended.map_or_else(|| Transition::to(state).metadata, |to| to.metadata.clone());
        self.conn
            .prepare_cached(
                "INSERT INTO tasks (id, context_id, owner_kind, owner_name, origin, trust, state,
                    status_message, status_ms, response, prompt, residue, running_commands,
                    reference_task_ids, forget_session, created_ms, change, no_answer,
                    no_answer_below)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?
            .execute(params![
                record.id,
                record.context_id,
                owner_kind,
                owner_name,
                origin_word(record.origin),
                record.trust,
                state_word(state),
                message,
                now_ms,
                response,
                prompt,
                residue_json(&residue).to_string(),
                running_json(&metadata.running_commands).to_string(),
                json!(record.reference_task_ids).to_string(),
                record.forget_session,
                record.created_ms,
                change as i64,
                metadata.no_answer,
                below_json(&metadata.no_answer_below).to_string(),
            ])?;
        if record.state != TaskState::Rejected && !record.images.is_empty() {
            let mut keep = self.conn.prepare_cached(
                "INSERT INTO images (task_id, position, media_type, bytes) VALUES (?, ?, ?, ?)",
            )?;
            for (position, image) in record.images.iter().enumerate() {
                keep.execute(params![
                    record.id,
                    position as i64,
                    image.media_type,
                    image.bytes
                ])?;
            }
        }
        let ids = number(self.conn, self.last_event, events)?;
        self.last_change = change;
        self.last_event = ids.end - 1;
        let task = Task {
            id: record.id.clone(),
            context_id: record.context_id.clone(),
            status: Status {
                state,
                message,
                timestamp_ms: now_ms,
            },
            response,
            prompt,
            residue,
            metadata,
            change,
        };
        Ok((task, ids))
    }
}

impl Store {
    /// Numbers `events` event ids that go with no write of a task (an
    /// agent's frames): one small UPDATE.
    pub fn number(&self, events: u64) -> rusqlite::Result<Range<u64>> {
        let mut inner = self.lock();
        let ids = inner.number(&inner.conn, events)?;
        inner.last_event = ids.end - 1;
        Ok(ids)
    }

    /// Records a new task, its first change, and numbers `events` event ids
    /// in the same transaction.
    pub fn insert(
        &self,
        record: &NewRecord,
        now_ms: i64,
        events: u64,
    ) -> rusqlite::Result<(Task, Range<u64>)> {
        self.batch(|batch| batch.insert_ended(record, None, now_ms, events))?
    }

    /// Runs `writes` in one transaction: its writes are committed together,
    /// each page they touch written to the log once for them all. A write
    /// that fails is undone alone and the others are committed; when the
    /// commit fails, none is. The change and event counters move on only
    /// once the transaction commits.
    pub fn batch<R>(&self, writes: impl FnOnce(&mut Batch<'_>) -> R) -> rusqlite::Result<R> {
        let mut inner = self.lock();
        let conn = &inner.conn;
        let mut batch = Batch {
            conn,
            last_change: inner.last_change,
            last_event: inner.last_event,
            begun: false,
            written: false,
            broken: false,
            changed: Vec::new(),
        };
        let out = writes(&mut batch);
        let end = match (batch.broken, batch.begun && batch.written) {
            (true, _) => Err(rolled_back()),
            // Nothing written: nothing begun, or nothing left to commit.
            (false, false) => Ok(false),
            (false, true) => conn
                .prepare_cached("COMMIT")
                .and_then(|mut commit| commit.execute([]))
                .map(|_| true),
        };
        let committed = match end {
            Ok(committed) => committed,
            Err(e) => {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                return Err(e);
            }
        };
        if batch.begun && !conn.is_autocommit() && !committed {
            conn.execute_batch("ROLLBACK")?;
        }
        if !committed {
            return Ok(out);
        }
        let (last_change, last_event) = (batch.last_change, batch.last_event);
        let changed = std::mem::take(&mut batch.changed);
        self.committed(&inner.conn, changed);
        self.commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        inner.last_change = last_change;
        inner.last_event = last_event;
        Ok(out)
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
                    prompt = ?, residue = ?, running_commands = ?, change = ?, no_answer = ?,
                    no_answer_below = ?
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
                    running_json(&to.metadata.running_commands).to_string(),
                    change as i64,
                    to.metadata.no_answer,
                    below_json(&to.metadata.no_answer_below).to_string(),
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
        self.committed(&inner.conn, vec![id.to_string()]);
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
            metadata: to.metadata.clone(),
            change,
        };
        Ok(Some((task, ids)))
    }

    /// The images task `id` started with, in part order; none for a task
    /// the session never held.
    pub fn images(&self, id: &str) -> rusqlite::Result<Vec<Image>> {
        let inner = self.lock();
        let mut read = inner.conn.prepare_cached(
            "SELECT media_type, bytes FROM images WHERE task_id = ? ORDER BY position",
        )?;
        read.query_map([id], |r| {
            Ok(Image {
                media_type: r.get(0)?,
                bytes: r.get(1)?,
            })
        })?
        .collect()
    }

    /// Records that task `task_id` detached `item`, until
    /// [`Store::detached_ended`]: what a resumed launch finds here was lost
    /// with the process that ran it.
    pub fn detached_started(&self, task_id: &str, item: &DetachedShell) -> rusqlite::Result<()> {
        let inner = self.lock();
        inner
            .conn
            .prepare_cached(
                "INSERT INTO detached (work_id, task_id, binary, command, started_at_ms)
                 VALUES (?, ?, ?, ?, ?)",
            )?
            .execute(params![
                item.work_id,
                task_id,
                item.binary,
                item.command,
                item.started_at_ms as i64
            ])?;
        Ok(())
    }

    /// The detached command `work_id` has ended.
    pub fn detached_ended(&self, work_id: &str) -> rusqlite::Result<()> {
        let inner = self.lock();
        inner
            .conn
            .prepare_cached("DELETE FROM detached WHERE work_id = ?")?
            .execute([work_id])?;
        Ok(())
    }

    /// Every detached command recorded as running, oldest first, and the
    /// record of them cleared: on a resumed launch, the ones the last run
    /// lost.
    pub(super) fn take_detached(&self) -> rusqlite::Result<Vec<DetachedShell>> {
        let inner = self.lock();
        let tx = inner.conn.unchecked_transaction()?;
        let lost = tx
            .prepare(
                "SELECT work_id, binary, command, started_at_ms FROM detached
                 ORDER BY started_at_ms, work_id",
            )?
            .query_map([], |r| {
                Ok(DetachedShell {
                    work_id: r.get(0)?,
                    binary: r.get(1)?,
                    command: r.get(2)?,
                    started_at_ms: r.get::<_, i64>(3)?.max(0) as u64,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        tx.execute("DELETE FROM detached", [])?;
        tx.commit()?;
        Ok(lost)
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
        self.committed(&inner.conn, vec![id.to_string()]);
        inner.last_event = ids.end - 1;
        Ok(ids)
    }

    /// The task `id`, when it exists and `sees` covers it.
    pub fn get(&self, id: &str, sees: &Sees) -> rusqlite::Result<Option<Task>> {
        let mut sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?");
        let mut values: Vec<SqlValue> = vec![id.to_string().into()];
        if let Some((condition, owner)) = sees.condition() {
            sql.push_str(" AND ");
            sql.push_str(condition);
            values.push(owner);
        }
        self.read(|conn| {
            conn.prepare_cached(&sql)?
                .query_row(params_from_iter(values), task_from_row)
                .optional()
        })
    }

    /// How many tasks are in each state (murmur's words), for metrics: read
    /// from the kept counts, a row per owner and state.
    pub fn count_by_state(&self) -> rusqlite::Result<Vec<(String, u64)>> {
        self.read(|conn| {
            conn.prepare_cached("SELECT state, SUM(tasks) FROM owner_counts GROUP BY state")?
                .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?
                .collect()
        })
    }

    /// One page of the tasks `sees` covers that match `query`, most recently
    /// changed first.
    ///
    /// Neither the page nor its total reads a number of tasks that grows
    /// with the session (the indexes and counts are in `schema.rs`): the
    /// page reads an index of its equality filters in change order from
    /// the cursor down, and the total adds up the kept counts of those
    /// filters. A status timestamp cutoff is the one filter no count
    /// answers: see [`Since`].
    pub fn list(&self, sees: &Sees, query: &ListQuery) -> rusqlite::Result<Page> {
        let filters = Equalities::of(sees, query);
        // The total and the page read one snapshot of the session.
        self.read(|conn| snapshot(conn, |conn| page(conn, &filters, query)))
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
}

/// Runs `read` in one read transaction on `conn`, which it ends whatever
/// `read` returns. Its statements are kept prepared, where rusqlite's
/// transactions parse theirs again each time.
fn snapshot<T>(
    conn: &Connection,
    read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.prepare_cached("BEGIN")?.execute([])?;
    let out = read(conn);
    let ended = conn
        .prepare_cached("COMMIT")
        .and_then(|mut end| end.execute([]));
    if ended.is_err() && !conn.is_autocommit() {
        // A reader left in its transaction would read this snapshot on.
        let _ = conn.execute_batch("ROLLBACK");
    }
    let out = out?;
    ended?;
    Ok(out)
}

/// [`Store::list`] on `conn`.
fn page(conn: &Connection, filters: &Equalities, query: &ListQuery) -> rusqlite::Result<Page> {
    // The conditions beyond the equalities, and their values.
    let mut more: Vec<&str> = Vec::new();
    let mut values: Vec<SqlValue> = filters.values.clone();
    let total = match query.status_after_ms {
        None => filters.counted(conn)?,
        Some(cutoff) => {
            // `+` keeps the status index out of the page's plan: the
            // page is read in change order, skipping the tasks before
            // the cutoff (see `Since` for how many).
            more.push("+status_ms >= ?");
            values.push(cutoff.into());
            let since = Since::probe(conn, filters, cutoff)?;
            if since.matching == 0 {
                return Ok(Page {
                    tasks: Vec::new(),
                    next: None,
                    total: 0,
                });
            }
            if let Some(oldest) = since.oldest {
                // Every match changed at or after `oldest`: the page
                // stops there, with only tasks changed since the
                // cutoff behind it.
                more.push("change >= ?");
                values.push(oldest.into());
            }
            since.matching
        }
    };
    if let Some(cursor) = &query.after {
        more.push("change < ?");
        values.push((cursor.change.min(i64::MAX as u64) as i64).into());
    }
    // One more than the page holds tells whether another page follows.
    values.push((i64::from(query.limit) + 1).into());
    let mut tasks: Vec<Task> = conn
        .prepare_cached(&filters.page(TASK_COLUMNS, &more))?
        .query_map(params_from_iter(values), task_from_row)?
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

/// The filters of a listing that are equalities: the caller's owner, the
/// context and the state. Their conditions read the same on `tasks` and on
/// the counts tables, whose columns have the same names.
pub(super) struct Equalities {
    pub(super) conditions: Vec<&'static str>,
    pub(super) values: Vec<SqlValue>,
    /// The index that holds these columns and then `change` (`schema.rs`):
    /// `tasks_by_` and the filters, owner, context, state in that order.
    /// None without a filter (or with only an owner those indexes do not
    /// hold), when the change order's own index serves.
    index: Option<String>,
    /// Whether the context is one of them: which counts table answers.
    by_context: bool,
}

impl Equalities {
    pub(super) fn of(sees: &Sees, query: &ListQuery) -> Equalities {
        let mut conditions = Vec::new();
        let mut values: Vec<SqlValue> = Vec::new();
        let mut index = String::from("tasks_by");
        if let Some((condition, owner)) = sees.condition() {
            conditions.push(condition);
            values.push(owner);
            if sees.by_owner_index() {
                index.push_str("_owner");
            }
        }
        if let Some(context) = &query.context_id {
            conditions.push("context_id = ?");
            values.push(context.clone().into());
            index.push_str("_context");
        }
        if let Some(state) = query.state {
            conditions.push("state = ?");
            values.push(state_word(state).to_string().into());
            index.push_str("_state");
        }
        Equalities {
            index: (index != "tasks_by").then_some(index),
            conditions,
            values,
            by_context: query.context_id.is_some(),
        }
    }

    /// How many tasks match, from the kept counts: a row per owner and
    /// state, of one context when the context is a filter.
    pub(super) fn counted(&self, conn: &Connection) -> rusqlite::Result<i64> {
        let table = if self.by_context {
            "context_counts"
        } else {
            "owner_counts"
        };
        conn.prepare_cached(&format!(
            "SELECT COALESCE(SUM(tasks), 0) FROM {table}{}",
            where_clause(&self.conditions)
        ))?
        .query_row(params_from_iter(self.values.iter()), |r| r.get(0))
    }

    /// The statement of a page: `columns` of the tasks that match these
    /// filters and the conditions in `more`, most recently changed first,
    /// read from the index of these filters, and a LIMIT.
    ///
    /// The index is named, not left to the planner: without statistics it
    /// can prefer the index of one filter with a change range over the index
    /// of them all, and read every task of that one filter.
    pub(super) fn page(&self, columns: &str, more: &[&str]) -> String {
        let indexed = self
            .index
            .as_ref()
            .map_or(String::new(), |index| format!(" INDEXED BY {index}"));
        let conditions: Vec<&str> = self.conditions.iter().chain(more).copied().collect();
        format!(
            "SELECT {columns} FROM tasks{indexed}{} ORDER BY change DESC LIMIT ?",
            where_clause(&conditions)
        )
    }

    /// The conditions as one expression: true when there are none.
    fn expression(&self) -> String {
        if self.conditions.is_empty() {
            "1".to_string()
        } else {
            self.conditions.join(" AND ")
        }
    }
}

/// What a status timestamp cutoff leaves of a listing: how many tasks
/// match, and, when the tasks changed at or after the cutoff were few
/// enough to read, the lowest change among the matches, below which the
/// page need not read.
///
/// No kept count answers "changed at or after this instant", and reading
/// every task that did costs a session of a million tasks a million reads
/// for a cutoff that all of them pass. So the count reads one side of the
/// cutoff, those changed at or after it or those before it, and takes the
/// matches before it from the kept total. Both sides are read from
/// `tasks_by_status` alone, an index holding every column a filter reads.
///
/// First the side at or after the cutoff, then the side before it, is read
/// up to [`FIRST_PROBE`] entries: a client asking what changed since its
/// last look, or for every task since the session began, is answered from
/// those, whatever the session's size. A cutoff with more tasks than that
/// on both sides is counted on the side it is nearer the end of in time
/// (the smaller one when tasks change at a steady rate), and its page may
/// read past the tasks before the cutoff, as every listing with a cutoff
/// did before: the one listing whose cost grows with the session.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Since {
    pub(super) matching: i64,
    pub(super) oldest: Option<i64>,
}

/// How many entries of the status index [`Since::probe`] reads on each side
/// of a cutoff before it counts one side whole.
pub(super) const FIRST_PROBE: i64 = 256;

impl Since {
    pub(super) fn probe(
        conn: &Connection,
        filters: &Equalities,
        cutoff: i64,
    ) -> rusqlite::Result<Since> {
        let (read, matching, oldest) = Since::side(conn, filters, ">=", cutoff, FIRST_PROBE)?;
        if read < FIRST_PROBE {
            return Ok(Since { matching, oldest });
        }
        let (read, before, _) = Since::side(conn, filters, "<", cutoff, FIRST_PROBE)?;
        if read < FIRST_PROBE {
            return Ok(Since {
                matching: filters.counted(conn)? - before,
                oldest: None,
            });
        }
        // Each a seek to one end of the status index.
        let (first, last): (i64, i64) = conn
            .prepare_cached(
                "SELECT (SELECT MIN(status_ms) FROM tasks), (SELECT MAX(status_ms) FROM tasks)",
            )?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let matching = if last.saturating_sub(cutoff) <= cutoff.saturating_sub(first) {
            Since::count(conn, filters, ">=", cutoff)?
        } else {
            filters.counted(conn)? - Since::count(conn, filters, "<", cutoff)?
        };
        Ok(Since {
            matching,
            oldest: None,
        })
    }

    /// Reads at most `limit` entries of the status index on one side of
    /// `cutoff` (`side` is `>=` or `<`): how many it read, how many of
    /// those match `filters`, and the lowest change of a match.
    fn side(
        conn: &Connection,
        filters: &Equalities,
        side: &str,
        cutoff: i64,
        limit: i64,
    ) -> rusqlite::Result<(i64, i64, Option<i64>)> {
        let mut values = filters.values.clone();
        values.push(cutoff.into());
        values.push(limit.into());
        conn.prepare_cached(&Since::side_sql(filters, side))?
            .query_row(params_from_iter(values), |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
    }

    pub(super) fn side_sql(filters: &Equalities, side: &str) -> String {
        format!(
            "SELECT COUNT(*), COALESCE(SUM(m), 0), MIN(CASE WHEN m THEN change END)
             FROM (SELECT ({}) AS m, change FROM tasks INDEXED BY tasks_by_status
                   WHERE status_ms {side} ? LIMIT ?)",
            filters.expression()
        )
    }

    /// How many tasks on one side of `cutoff` match `filters`, from every
    /// entry of the status index there.
    fn count(
        conn: &Connection,
        filters: &Equalities,
        side: &str,
        cutoff: i64,
    ) -> rusqlite::Result<i64> {
        let mut values: Vec<SqlValue> = vec![cutoff.into()];
        values.extend(filters.values.iter().cloned());
        conn.prepare_cached(&Since::count_sql(filters, side))?
            .query_row(params_from_iter(values), |r| r.get(0))
    }

    pub(super) fn count_sql(filters: &Equalities, side: &str) -> String {
        let side = format!("status_ms {side} ?");
        let conditions: Vec<&str> = std::iter::once(side.as_str())
            .chain(filters.conditions.iter().copied())
            .collect();
        format!(
            "SELECT COUNT(*) FROM tasks INDEXED BY tasks_by_status{}",
            where_clause(&conditions)
        )
    }
}

/// ` WHERE a AND b`, or nothing when there are no conditions.
fn where_clause(conditions: &[&str]) -> String {
    if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    }
}
