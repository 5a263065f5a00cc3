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
//!
//! One its agent answered while another task waits (which the agent is
//! handed at once) keeps its ending here too, to be written with the
//! endings after it: at the next write of the session, once
//! [`ENDED_AT_ONCE`] wait, or [`ENDED_AT_MOST`] later at most (at once,
//! beside the agent's work, when no task waits behind the one handed
//! over). Its request is answered once it is written.

use std::collections::{HashMap, VecDeque};

use super::store::{NewRecord, Transition};

/// How long a held task may wait unwritten, in milliseconds.
pub const UNWRITTEN_AT_MOST: i64 = 50;

/// How long a held task its agent answered may wait unwritten: its
/// request is answered once it is written.
pub const ENDED_AT_MOST: std::time::Duration = std::time::Duration::from_millis(1);

/// Held tasks answered and not written yet that make a write at once.
pub const ENDED_AT_ONCE: usize = 16;

/// A held task not written yet.
pub(super) struct Kept {
    pub(super) record: NewRecord,
    /// Once its agent answered it: the ending, and when. It is written
    /// `working`, then ended.
    pub(super) ending: Option<(Transition, i64)>,
}

impl From<NewRecord> for Kept {
    fn from(record: NewRecord) -> Kept {
        Kept {
            record,
            ending: None,
        }
    }
}

/// The held tasks not written yet, by id, in the order they came.
pub(super) struct Unwritten {
    kept: HashMap<String, Kept>,
    /// `(created_ms, id)` oldest first; an id taken since is passed over.
    order: VecDeque<(i64, String)>,
    /// A task writes the records that have waited too long, while any waits.
    watched: bool,
    /// How many have an ending.
    ended: usize,
    /// [`ENDED_AT_MOST`], which a test may stretch.
    pub(super) ended_at_most: std::time::Duration,
}

impl Default for Unwritten {
    fn default() -> Unwritten {
        Unwritten {
            kept: HashMap::new(),
            order: VecDeque::new(),
            watched: false,
            ended: 0,
            ended_at_most: ENDED_AT_MOST,
        }
    }
}

impl Unwritten {
    pub(super) fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Whether task `id` waits unwritten.
    pub(super) fn holds(&self, id: &str) -> bool {
        self.kept.contains_key(id)
    }

    /// Keeps `record`, the newest. True when nothing watches the records
    /// yet: the caller starts what does.
    pub(super) fn keep(&mut self, record: NewRecord) -> bool {
        self.order.push_back((record.created_ms, record.id.clone()));
        self.kept.insert(record.id.clone(), record.into());
        !std::mem::replace(&mut self.watched, true)
    }

    /// Task `id`'s agent answered it `to` at `at`: kept to be written so.
    /// Answers how many wait with an ending; none when `id` is not kept
    /// or has one already.
    pub(super) fn end(&mut self, id: &str, to: Transition, at: i64) -> Option<usize> {
        let kept = self.kept.get_mut(id).filter(|k| k.ending.is_none())?;
        kept.ending = Some((to, at));
        self.ended += 1;
        Some(self.ended)
    }

    /// The watch ends: nothing waits (answers None), or when the oldest
    /// record will have waited [`UNWRITTEN_AT_MOST`].
    pub(super) fn watch_until(&mut self) -> Option<i64> {
        let until = self.oldest().map(|oldest| oldest + UNWRITTEN_AT_MOST);
        self.watched = until.is_some();
        until
    }

    /// Task `id`'s record, for its first write, unless it has an ending
    /// (written by [`Unwritten::take_ended`] first).
    pub(super) fn take(&mut self, id: &str) -> Option<NewRecord> {
        if self.kept.get(id)?.ending.is_some() {
            return None;
        }
        let kept = self.remove(id);
        if self.kept.is_empty() {
            self.order.clear();
        }
        kept.map(|k| k.record)
    }

    fn remove(&mut self, id: &str) -> Option<Kept> {
        let kept = self.kept.remove(id)?;
        self.ended -= usize::from(kept.ending.is_some());
        Some(kept)
    }

    /// One whose write failed: kept again, with the oldest.
    pub(super) fn put_back(&mut self, kept: Kept) {
        self.order
            .push_front((kept.record.created_ms, kept.record.id.clone()));
        self.ended += usize::from(kept.ending.is_some());
        self.kept.insert(kept.record.id.clone(), kept);
    }

    /// When the oldest record came.
    pub(super) fn oldest(&mut self) -> Option<i64> {
        while let Some((created, id)) = self.order.front() {
            if self.kept.contains_key(id) {
                return Some(*created);
            }
            self.order.pop_front();
        }
        None
    }

    /// The ones that have waited [`UNWRITTEN_AT_MOST`] at `now`, oldest
    /// first.
    pub(super) fn take_overdue(&mut self, now: i64) -> Vec<Kept> {
        let mut overdue = Vec::new();
        while let Some(created) = self.oldest() {
            if now - created < UNWRITTEN_AT_MOST {
                break;
            }
            if let Some((_, id)) = self.order.pop_front() {
                overdue.extend(self.remove(&id));
            }
        }
        overdue
    }

    /// The ones with an ending, oldest first.
    pub(super) fn take_ended(&mut self) -> Vec<Kept> {
        if self.ended == 0 {
            return Vec::new();
        }
        // Passes over the ids taken since, at the front.
        self.oldest();
        let ended: Vec<String> = self
            .order
            .iter()
            .filter(|(_, id)| self.kept.get(id).is_some_and(|k| k.ending.is_some()))
            .map(|(_, id)| id.clone())
            .collect();
        ended.iter().filter_map(|id| self.remove(id)).collect()
    }

    /// Every one, oldest first.
    pub(super) fn take_all(&mut self) -> Vec<Kept> {
        let order = std::mem::take(&mut self.order);
        order
            .into_iter()
            .filter_map(|(_, id)| self.remove(&id))
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

    fn ids(kept: Vec<Kept>) -> Vec<String> {
        kept.into_iter().map(|k| k.record.id).collect()
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
        unwritten.put_back(record("a", 100).into());
        assert!(!unwritten.keep(record("d", 140)));
        assert_eq!(ids(unwritten.take_all()), ["a", "c", "d"]);
        assert!(unwritten.is_empty());
        assert_eq!(unwritten.oldest(), None);
        assert_eq!(unwritten.watch_until(), None);
        assert!(unwritten.keep(record("e", 150)), "watched again");
    }

    #[test]
    fn endings_are_kept_with_their_records_and_taken_together() {
        let mut unwritten = Unwritten::default();
        for (id, created) in [("a", 100), ("b", 110), ("c", 120)] {
            unwritten.keep(record(id, created));
        }
        let done = || Transition::to(TaskState::Completed);
        assert_eq!(unwritten.end("b", done(), 130), Some(1));
        assert_eq!(unwritten.end("b", done(), 131), None, "ended once");
        assert_eq!(unwritten.end("x", done(), 131), None, "not kept");
        assert_eq!(unwritten.end("a", done(), 132), Some(2));
        assert!(unwritten.take("a").is_none(), "written with its ending");
        let ended = unwritten.take_ended();
        assert_eq!(
            ended
                .iter()
                .map(|k| k.ending.as_ref().unwrap().1)
                .collect::<Vec<_>>(),
            [132, 130],
            "in the order they came"
        );
        assert_eq!(ids(ended), ["a", "b"]);
        assert!(unwritten.take_ended().is_empty());
        assert!(unwritten.holds("c"));
        // One put back after a failed write keeps its ending.
        let mut again: Kept = record("b", 110).into();
        again.ending = Some((done(), 130));
        unwritten.put_back(again);
        assert_eq!(unwritten.end("c", done(), 140), Some(2));
        assert_eq!(ids(unwritten.take_all()), ["b", "c"]);
        assert!(unwritten.take_ended().is_empty());
        assert!(unwritten.is_empty());
    }
}
