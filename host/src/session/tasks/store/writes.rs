//! The store's committed writes, numbered, for an answer the door declared
//! reusable (`crate::versions::reuse`): a number every committed write to
//! a task moves on, and which tasks each of the last [`RECENT`] writes
//! changed. An answer read after write `w` still holds while no write since
//! `w` changed a task it read, nor, for a page of the listing, any task.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes remembered: an answer older than the last this many writes is
/// read again, whatever they changed.
pub const RECENT: usize = 256;

/// The number of the store's last write, and the tasks its last writes
/// changed.
#[derive(Debug, Default)]
pub struct Writes {
    now: AtomicU64,
    /// `(write, tasks it changed)`, oldest first.
    recent: Mutex<VecDeque<(u64, Vec<String>)>>,
}

impl Writes {
    /// The last write's number: taken before a read, the read's answer is
    /// at least as new as it.
    pub fn now(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }

    /// A write that changed `tasks` was committed. Called under the
    /// store's writer lock, after the commit, so writes follow commits.
    pub(super) fn committed(&self, tasks: Vec<String>) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let write = self.now.load(Ordering::Relaxed) + 1;
        recent.push_back((write, tasks));
        if recent.len() > RECENT {
            recent.pop_front();
        }
        // After the push: whoever sees this number finds its write.
        self.now.store(write, Ordering::Release);
    }

    /// Whether an answer read after write `since`, of `tasks` (and of the
    /// listing, when `listing`), still holds: the write it holds after now,
    /// or None once a write since changed what it read, or is forgotten.
    pub fn unchanged(&self, since: u64, tasks: &[String], listing: bool) -> Option<u64> {
        let now = self.now();
        if now == since || tasks.is_empty() && !listing {
            return Some(now);
        }
        if listing {
            return None;
        }
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        // The first write after `since` must still be remembered.
        if recent.front().is_none_or(|(first, _)| *first > since + 1) {
            return None;
        }
        let changed = recent
            .iter()
            .filter(|(write, _)| *write > since && *write <= now)
            .any(|(_, changed)| changed.iter().any(|id| tasks.contains(id)));
        (!changed).then_some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::{RECENT, Writes};

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| id.to_string()).collect()
    }

    #[test]
    fn an_answer_holds_until_a_write_changes_what_it_read() {
        let writes = Writes::default();
        let since = writes.now();
        assert_eq!(writes.unchanged(since, &ids(&["a"]), false), Some(0));
        assert_eq!(writes.unchanged(since, &[], true), Some(0));
        writes.committed(ids(&["b"]));
        // Another task's write leaves a read of `a` standing, not a page.
        assert_eq!(writes.unchanged(since, &ids(&["a"]), false), Some(1));
        assert_eq!(writes.unchanged(since, &[], true), None);
        writes.committed(ids(&["c", "a"]));
        assert_eq!(writes.unchanged(since, &ids(&["a"]), false), None);
        assert_eq!(writes.unchanged(1, &ids(&["b"]), false), Some(2));
        // An answer that read nothing of the store holds whatever changes.
        assert_eq!(writes.unchanged(0, &[], false), Some(2));
    }

    #[test]
    fn an_answer_older_than_the_writes_remembered_does_not_hold() {
        let writes = Writes::default();
        for _ in 0..RECENT {
            writes.committed(ids(&["b"]));
        }
        assert_eq!(
            writes.unchanged(0, &ids(&["a"]), false),
            Some(RECENT as u64)
        );
        writes.committed(ids(&["b"]));
        assert_eq!(writes.unchanged(0, &ids(&["a"]), false), None);
        assert_eq!(
            writes.unchanged(1, &ids(&["a"]), false),
            Some(RECENT as u64 + 1)
        );
    }
}
