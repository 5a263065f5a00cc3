//! Held tasks not written yet. A task whose request answers only once it
//! settles (a held SendMessage) is kept here when it is submitted instead
//! of being written then: nobody has been told of it, and its first write
//! records it in the state that write gives it, with the events of its
//! submission first. A task its agent ends within
//! [`WORKING_WITHIN`](super::lifecycle::WORKING_WITHIN) of running it (or
//! that is cancelled while it waits) so costs one write, as one its agent
//! ends at once does.
//!
//! It is written as submitted sooner: before anything reads it (GetTask, a
//! cancel, a reply, a settle pollable on it, its images) or every task
//! (ListTasks, the counts), when the session closes (the ones waiting
//! then are written together, in the order they came), and once it has
//! waited [`UNWRITTEN_AT_MOST`]. Whatever reads the store finds every task
//! the session took.

use std::collections::{HashMap, VecDeque};

use super::store::NewRecord;

/// How long a held task may wait unwritten, in milliseconds.
pub const UNWRITTEN_AT_MOST: i64 = 50;

/// The held tasks not written yet, by id, in the order they came.
#[derive(Default)]
pub(super) struct Unwritten {
    records: HashMap<String, NewRecord>,
    /// `(created_ms, id)` oldest first; an id whose record was taken since
    /// is passed over.
    order: VecDeque<(i64, String)>,
    /// A task writes the records that have waited too long, while any waits.
    watched: bool,
}

impl Unwritten {
    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether task `id` waits unwritten.
    pub(super) fn holds(&self, id: &str) -> bool {
        self.records.contains_key(id)
    }

    /// Keeps `record`, the newest. True when nothing watches the records
    /// yet: the caller starts what does.
    pub(super) fn keep(&mut self, record: NewRecord) -> bool {
        self.order.push_back((record.created_ms, record.id.clone()));
        self.records.insert(record.id.clone(), record);
        !std::mem::replace(&mut self.watched, true)
    }

    /// The watch ends: nothing waits (answers None), or when the oldest
    /// record will have waited [`UNWRITTEN_AT_MOST`].
    pub(super) fn watch_until(&mut self) -> Option<i64> {
        let until = self.oldest().map(|oldest| oldest + UNWRITTEN_AT_MOST);
        self.watched = until.is_some();
        until
    }

    /// Task `id`'s record, for its first write.
    pub(super) fn take(&mut self, id: &str) -> Option<NewRecord> {
        let record = self.records.remove(id);
        if self.records.is_empty() {
            self.order.clear();
        }
        record
    }

    /// A record whose write failed: kept again, with the oldest.
    pub(super) fn put_back(&mut self, record: NewRecord) {
        self.order
            .push_front((record.created_ms, record.id.clone()));
        self.records.insert(record.id.clone(), record);
    }

    /// When the oldest record came.
    pub(super) fn oldest(&mut self) -> Option<i64> {
        while let Some((created, id)) = self.order.front() {
            if self.records.contains_key(id) {
                return Some(*created);
            }
            self.order.pop_front();
        }
        None
    }

    /// The records that have waited [`UNWRITTEN_AT_MOST`] at `now`, oldest
    /// first.
    pub(super) fn take_overdue(&mut self, now: i64) -> Vec<NewRecord> {
        let mut overdue = Vec::new();
        while let Some(created) = self.oldest() {
            if now - created < UNWRITTEN_AT_MOST {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                overdue.extend(self.records.remove(&id));
            }
        }
        overdue
    }

    /// Every record, oldest first.
    pub(super) fn take_all(&mut self) -> Vec<NewRecord> {
        let order = std::mem::take(&mut self.order);
        order
            .into_iter()
            .filter_map(|(_, id)| self.records.remove(&id))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::task_store::{Origin, TaskState};
    use crate::session::tasks::store::Owner;

    fn record(id: &str, created_ms: i64) -> NewRecord {
        NewRecord {
            id: id.to_string(),
            context_id: "ctx".to_string(),
            owner: Owner::Public,
            origin: Origin::Client,
            trust: None,
            state: TaskState::Submitted,
            status_message: None,
            reference_task_ids: Vec::new(),
            forget_session: false,
            images: Vec::new(),
            created_ms,
        }
    }

    fn ids(records: Vec<NewRecord>) -> Vec<String> {
        records.into_iter().map(|r| r.id).collect()
    }

    #[test]
    fn records_are_taken_once_and_overdue_in_the_order_they_came() {
        let mut unwritten = Unwritten::default();
        assert_eq!(unwritten.oldest(), None);
        assert!(unwritten.keep(record("a", 100)), "the first is watched");
        assert!(!unwritten.keep(record("b", 120)));
        assert!(!unwritten.keep(record("c", 130)));
        assert!(unwritten.holds("b"));
        assert_eq!(unwritten.oldest(), Some(100));
        assert_eq!(unwritten.take("a").map(|r| r.id), Some("a".to_string()));
        assert!(unwritten.take("a").is_none());
        assert!(!unwritten.holds("a"));
        // "a" is gone: "b" is the oldest.
        assert_eq!(unwritten.oldest(), Some(120));
        assert!(
            unwritten
                .take_overdue(120 + UNWRITTEN_AT_MOST - 1)
                .is_empty()
        );
        assert_eq!(ids(unwritten.take_overdue(125 + UNWRITTEN_AT_MOST)), ["b"]);
        assert_eq!(unwritten.watch_until(), Some(130 + UNWRITTEN_AT_MOST));
        unwritten.put_back(record("a", 100));
        assert!(!unwritten.keep(record("d", 140)));
        assert_eq!(ids(unwritten.take_all()), ["a", "c", "d"]);
        assert!(unwritten.is_empty());
        assert_eq!(unwritten.oldest(), None);
        assert_eq!(unwritten.watch_until(), None);
        assert!(unwritten.keep(record("e", 150)), "watched again");
    }
}
