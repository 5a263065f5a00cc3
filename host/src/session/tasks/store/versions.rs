//! Versions of what the store answers, for an answer the door declared
//! reusable (`crate::versions::reuse`): a number every committed write to
//! a task moves on, and which tasks each of the last [`RECENT`] writes
//! changed. An answer read at version `v` still holds while no write since
//! `v` changed a task it read, nor, for a page of the listing, any task.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes remembered: an answer older than the last this many writes is
/// read again, whatever they changed.
pub const RECENT: usize = 256;

/// The store's write version, and the tasks its last writes changed.
#[derive(Debug, Default)]
pub struct Versions {
    now: AtomicU64,
    /// `(version, tasks it changed)`, oldest first.
    recent: Mutex<VecDeque<(u64, Vec<String>)>>,
}

impl Versions {
    /// The version now: taken before a read, it is one the read's answer
    /// is at least as new as.
    pub fn now(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }

    /// A write that changed `tasks` was committed. Called under the
    /// store's writer lock, after the commit, so versions follow commits.
    pub(super) fn committed(&self, tasks: Vec<String>) {
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        let version = self.now.load(Ordering::Relaxed) + 1;
        recent.push_back((version, tasks));
        if recent.len() > RECENT {
            recent.pop_front();
        }
        // After the push: whoever sees this version finds its write.
        self.now.store(version, Ordering::Release);
    }

    /// Whether an answer read at version `since`, of `tasks` (and of the
    /// listing, when `listing`), still holds: the version it holds at now,
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
            .filter(|(version, _)| *version > since && *version <= now)
            .any(|(_, changed)| changed.iter().any(|id| tasks.contains(id)));
        (!changed).then_some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::{RECENT, Versions};

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| id.to_string()).collect()
    }

    #[test]
    fn an_answer_holds_until_a_write_changes_what_it_read() {
        let versions = Versions::default();
        let since = versions.now();
        assert_eq!(versions.unchanged(since, &ids(&["a"]), false), Some(0));
        assert_eq!(versions.unchanged(since, &[], true), Some(0));
        versions.committed(ids(&["b"]));
        // Another task's write leaves a read of `a` standing, not a page.
        assert_eq!(versions.unchanged(since, &ids(&["a"]), false), Some(1));
        assert_eq!(versions.unchanged(since, &[], true), None);
        versions.committed(ids(&["c", "a"]));
        assert_eq!(versions.unchanged(since, &ids(&["a"]), false), None);
        assert_eq!(versions.unchanged(1, &ids(&["b"]), false), Some(2));
        // An answer that read nothing of the store holds whatever changes.
        assert_eq!(versions.unchanged(0, &[], false), Some(2));
    }

    #[test]
    fn an_answer_older_than_the_writes_remembered_does_not_hold() {
        let versions = Versions::default();
        for _ in 0..RECENT {
            versions.committed(ids(&["b"]));
        }
        assert_eq!(
            versions.unchanged(0, &ids(&["a"]), false),
            Some(RECENT as u64)
        );
        versions.committed(ids(&["b"]));
        assert_eq!(versions.unchanged(0, &ids(&["a"]), false), None);
        assert_eq!(
            versions.unchanged(1, &ids(&["a"]), false),
            Some(RECENT as u64 + 1)
        );
    }
}
