//! A door's linear memory: at most `--max-memory-mb` an instance, and at
//! most `--max-door-memory-mb` across every live instance together, so the
//! pool's worst case is a figure the machine can hold rather than instances
//! × their limit. Memory is counted as the door asks for it (its initial
//! pages and every `memory.grow`) and given back when its store drops.
//!
//! A door refused memory fails its request (Rust aborts on a failed
//! allocation); the limit that refused it tells the host how to answer:
//! the instance's own limit means the request needs more than a door has
//! (413), the shared one that the doors are busy (503).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A door's linear memory may grow to this many bytes per request
/// (`--max-memory-mb`).
pub const MAX_MEMORY_BYTES: usize = 128 << 20;
/// Bytes of linear memory all live door instances may hold together
/// (`--max-door-memory-mb`).
pub const MAX_DOOR_MEMORY_BYTES: usize = 4 << 30;

/// Core instances a request's door may make (a Rust wasip2 door makes 3).
const MAX_CORE_INSTANCES: usize = 8;

/// The limit that refused a door memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimit {
    /// `--max-memory-mb`: the request needs more than one door may have.
    Instance(usize),
    /// `--max-door-memory-mb`: the live doors hold all they may.
    Shared(usize),
}

/// The memory every live door instance shares.
#[derive(Debug)]
pub struct MemoryPool {
    total: usize,
    free: AtomicUsize,
}

impl MemoryPool {
    /// A pool of `total` bytes, all free.
    pub fn new(total: usize) -> Arc<MemoryPool> {
        Arc::new(MemoryPool {
            total,
            free: AtomicUsize::new(total),
        })
    }

    /// Bytes no door holds now.
    pub fn free(&self) -> usize {
        self.free.load(Ordering::Relaxed)
    }

    fn take(&self, bytes: usize) -> bool {
        self.free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                free.checked_sub(bytes)
            })
            .is_ok()
    }

    fn give(&self, bytes: usize) {
        self.free.fetch_add(bytes, Ordering::AcqRel);
    }
}

/// One request's store limiter.
pub struct DoorMemory {
    per_instance: usize,
    pool: Arc<MemoryPool>,
    taken: usize,
    /// Whether `taken` is counted in the pool: not while the instance is
    /// kept idle.
    counted: bool,
    refused: Arc<OnceLock<MemoryLimit>>,
}

impl DoorMemory {
    /// A door limited to `per_instance` bytes, and to what `pool` has free.
    pub fn new(per_instance: usize, pool: Arc<MemoryPool>) -> DoorMemory {
        DoorMemory {
            per_instance,
            pool,
            taken: 0,
            counted: true,
            refused: Arc::default(),
        }
    }

    /// A door limited only by `per_instance` (benchmarks, tests).
    pub fn unshared(per_instance: usize) -> DoorMemory {
        DoorMemory::new(per_instance, MemoryPool::new(usize::MAX))
    }

    /// Set once a limit refuses this door memory.
    pub fn refused(&self) -> Arc<OnceLock<MemoryLimit>> {
        self.refused.clone()
    }

    /// Gives what the door holds back to the pool while its instance is
    /// kept idle: kept instances are bounded on their own, and must not
    /// leave live doors short.
    pub fn set_aside(&mut self) {
        if self.counted {
            self.pool.give(self.taken);
            self.counted = false;
        }
    }

    /// Counts what the door holds in the pool again, for an instance taken
    /// back into use; false, and nothing counted, when the pool has not
    /// that much free.
    pub fn reclaim(&mut self) -> bool {
        self.counted = self.counted || self.pool.take(self.taken);
        self.counted
    }

    /// Bytes of linear memory the door holds now.
    pub fn taken(&self) -> usize {
        self.taken
    }
}

impl wasmtime::ResourceLimiter for DoorMemory {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.per_instance {
            let _ = self.refused.set(MemoryLimit::Instance(self.per_instance));
            return Ok(false);
        }
        let more = desired.saturating_sub(current);
        if !self.pool.take(more) {
            let _ = self.refused.set(MemoryLimit::Shared(self.pool.total));
            return Ok(false);
        }
        self.taken += more;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // The pool bounds each table's size.
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_CORE_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_CORE_INSTANCES
    }
}

impl Drop for DoorMemory {
    fn drop(&mut self) {
        if self.counted {
            self.pool.give(self.taken);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn each_door_and_all_doors_are_bounded() {
        let pool = MemoryPool::new(100);
        let mut a = DoorMemory::new(60, pool.clone());
        let mut b = DoorMemory::new(60, pool.clone());
        assert!(a.memory_growing(0, 50, None).unwrap());
        assert!(!a.memory_growing(50, 61, None).unwrap());
        assert_eq!(a.refused().get(), Some(&MemoryLimit::Instance(60)));
        assert!(b.memory_growing(0, 40, None).unwrap());
        assert!(!b.memory_growing(40, 51, None).unwrap());
        assert_eq!(b.refused().get(), Some(&MemoryLimit::Shared(100)));
        assert_eq!(pool.free(), 10);
        drop(a);
        assert_eq!(pool.free(), 60);
        assert!(b.memory_growing(40, 60, None).unwrap());
        drop(b);
        assert_eq!(pool.free(), 100);
    }

    /// A door set aside (its instance kept idle) counts nothing in the pool,
    /// and counts again only when the pool has room for it.
    #[test]
    fn a_door_set_aside_holds_nothing_of_the_pool() {
        let pool = MemoryPool::new(100);
        let mut idle = DoorMemory::new(100, pool.clone());
        assert!(idle.memory_growing(0, 60, None).unwrap());
        idle.set_aside();
        idle.set_aside();
        assert_eq!(pool.free(), 100);
        let mut live = DoorMemory::new(100, pool.clone());
        assert!(live.memory_growing(0, 50, None).unwrap());
        assert!(!idle.reclaim(), "60 bytes do not fit in the 50 free");
        assert_eq!(pool.free(), 50);
        drop(live);
        assert!(idle.reclaim());
        assert!(idle.reclaim());
        assert_eq!(pool.free(), 40);
        drop(idle);
        assert_eq!(pool.free(), 100);
    }
}
