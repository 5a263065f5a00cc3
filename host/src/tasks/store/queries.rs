//! The store's reads and writes of tasks, and the numbering of the events
//! that go with them.

use std::ops::Range;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde_json::json;

use crate::bindings::task_store::{Cursor, ListQuery, Page, Status, Task};

use super::codecs::{
    TASK_COLUMNS, metadata, origin_word, residue_json, running_json, state_word, task_from_row,
};
use super::{Inner, NewRecord, Sees, Store, Transition};

impl Inner {
    /// Numbers `events` ids after the last one, writing the new last id to
    /// the session row through `conn` (the caller's open transaction). The
    /// caller sets `last_event` to the range's end - 1 once it commits.
    pub(super) fn number(&self, conn: &Connection, events: u64) -> rusqlite::Result<Range<u64>> {
        let ids = self.last_event + 1..self.last_event + 1 + events;
        if events > 0 {
            conn.prepare_cached("UPDATE session SET last_event = ? WHERE id = 1")?
                .execute(params![(ids.end - 1) as i64])?;
        }
        Ok(ids)
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
        self.insert_ended(record, None, now_ms, events)
    }

    /// [`Store::insert`], for a task that has ended by the time it is
    /// written when `ended` is given: its row holds the status `ended`
    /// leaves, in one change, and the task answered is as `ended` leaves it.
    pub fn insert_ended(
        &self,
        record: &NewRecord,
        ended: Option<&Transition>,
        now_ms: i64,
        events: u64,
    ) -> rusqlite::Result<(Task, Range<u64>)> {
        let mut inner = self.lock();
        let change = inner.last_change + 1;
        let (owner_kind, owner_name) = record.owner.columns();
        let (state, message) = match ended {
            Some(to) => (to.state, to.message.clone()),
            None => (record.state, record.status_message.clone()),
        };
        let response = ended.and_then(|to| to.response.clone());
        let prompt = ended.and_then(|to| to.prompt.clone());
        let residue = ended.map_or(Vec::new(), |to| to.residue.clone());
        let running = ended.map_or(Vec::new(), |to| to.running_commands.clone());
        let tx = inner.conn.unchecked_transaction()?;
        tx.prepare_cached(
            "INSERT INTO tasks (id, context_id, owner_kind, owner_name, origin, trust, state,
                    status_message, status_ms, response, prompt, residue, running_commands,
                    reference_task_ids, forget_session, created_ms, change)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            running_json(&running).to_string(),
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
                state,
                message,
                timestamp_ms: now_ms,
            },
            response,
            prompt,
            residue,
            metadata: metadata(running),
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

    /// How many tasks are in each state (murmur's words), for metrics.
    pub fn count_by_state(&self) -> rusqlite::Result<Vec<(String, u64)>> {
        let inner = self.lock();
        let mut statement = inner
            .conn
            .prepare_cached("SELECT state, COUNT(*) FROM tasks GROUP BY state")?;
        let rows = statement.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
        rows.collect()
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
}
