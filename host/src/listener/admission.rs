//! Who gets a door instance: at most `--max-instances` at once, and no one
//! caller more than `--max-instances-per-caller` of them, so one credential
//! (or, on a public door, one client address) opening streams without end
//! cannot take the instances every other caller needs. A request that finds
//! the pool full waits a moment (`--instance-wait-ms`) for an instance to be
//! released before it is turned away.
//!
//! In a host of many capsules the pool is the host's, and each capsule may
//! hold at most its share of it (`--capsule-instances`), so one capsule's
//! streams cannot take the instances the others need.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Door instances one caller may hold at once (`--max-instances-per-caller`)
/// when `--max-instances` leaves room for it: see [`caller_share`].
pub const MAX_INSTANCES_PER_CALLER: u32 = 512;

/// A caller's share of `max_instances`: what the operator set, or else half
/// of them, and at most [`MAX_INSTANCES_PER_CALLER`], so that however low
/// `--max-instances` is set one caller never takes every instance.
pub fn caller_share(max_instances: u32, explicit: Option<u32>) -> u32 {
    explicit.unwrap_or((max_instances / 2).clamp(1, MAX_INSTANCES_PER_CALLER))
}
/// How long a request waits for an instance when every one is in use
/// (`--instance-wait-ms`).
pub const INSTANCE_WAIT: Duration = Duration::from_millis(1000);

/// Who a request counts against: on an authenticated door the
/// `Authorization` it presents (one per credential; a forged one is refused
/// at once), else the client's address. Kept as a keyed hash (the keys are
/// random per process), never as the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Account(u64);

impl Account {
    /// Who a request counts against: its `authorization` when the door is
    /// `authenticated`, else its client's `address`.
    pub fn of(authenticated: bool, authorization: Option<&[u8]>, address: IpAddr) -> Account {
        use std::hash::{BuildHasher, Hash, Hasher};
        static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        let mut hasher = KEYS.get_or_init(std::hash::RandomState::new).build_hasher();
        match authorization.filter(|_| authenticated) {
            Some(value) => {
                hasher.write_u8(0);
                hasher.write(value);
            }
            None => {
                hasher.write_u8(1);
                address.hash(&mut hasher);
            }
        }
        Account(hasher.finish())
    }
}

/// Why a request got no instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The caller holds its share.
    CallerShare(u32),
    /// Every instance stayed in use for the whole wait.
    Full,
}

/// Hands out a door's instances: within its share of the pool, and within
/// each caller's share of those.
pub struct Admission {
    /// The instances this door may hold: its share of the pool.
    instances: Arc<Semaphore>,
    share: u32,
    /// The pool every door of the host draws from; None when the door's
    /// own share is the whole pool.
    pool: Option<Arc<Semaphore>>,
    per_caller: u32,
    wait: Duration,
    held: Mutex<HashMap<Account, u32>>,
}

/// One door instance, held until it drops.
pub struct Slot(Option<(Arc<Admission>, Account, Permits)>);

/// A share's permit, and the pool's when the pool is shared.
type Permits = (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>);

impl Slot {
    /// An instance counted against no admission: for requests that reach
    /// the door from inside the host (benchmarks, embedders).
    pub fn unlimited() -> Slot {
        Slot(None)
    }
}

impl Admission {
    /// A door's own pool of `instances`, `per_caller` (at least 1) for each
    /// caller, a request waiting up to `wait` for one.
    pub fn new(instances: u32, per_caller: u32, wait: Duration) -> Arc<Admission> {
        Admission::within(None, instances, per_caller, wait)
    }

    /// `share` instances of `pool` (a door's own pool when None).
    pub fn within(
        pool: Option<Arc<Semaphore>>,
        share: u32,
        per_caller: u32,
        wait: Duration,
    ) -> Arc<Admission> {
        Arc::new(Admission {
            instances: Arc::new(Semaphore::new(share as usize)),
            share,
            pool,
            per_caller: per_caller.max(1),
            wait,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// An instance for `caller`, within its share, waiting up to the wait
    /// for one to be free.
    pub async fn admit(self: &Arc<Self>, caller: Account) -> Result<Slot, Refused> {
        {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let count = held.entry(caller).or_default();
            if *count >= self.per_caller {
                return Err(Refused::CallerShare(self.per_caller));
            }
            *count += 1;
        }
        // Counted before the wait, so a caller cannot queue past its share.
        let slot = |permit| Slot(Some((self.clone(), caller, permit)));
        let acquire = async {
            let share = self.instances.clone().acquire_owned().await?;
            let pool = match &self.pool {
                Some(pool) => Some(pool.clone().acquire_owned().await?),
                None => None,
            };
            Ok::<_, tokio::sync::AcquireError>((share, pool))
        };
        match tokio::time::timeout(self.wait, acquire).await {
            Ok(Ok(permits)) => Ok(slot(permits)),
            _ => {
                self.release(&caller);
                Err(Refused::Full)
            }
        }
    }

    /// Instances held now.
    pub fn in_use(&self) -> usize {
        (self.share as usize).saturating_sub(self.instances.available_permits())
    }

    fn release(&self, caller: &Account) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(caller) {
            *count -= 1;
            if *count == 0 {
                held.remove(caller);
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((admission, caller, _)) = &self.0 {
            admission.release(caller);
        }
    }
}

#[cfg(test)]
mod tests {
    /// Half of `--max-instances` unless the operator says otherwise, and
    /// never more than the default share.
    #[test]
    fn a_share_is_half_the_instances_unless_set() {
        use super::caller_share;
        assert_eq!(caller_share(1100, None), 512);
        assert_eq!(caller_share(200, None), 100);
        assert_eq!(caller_share(1, None), 1);
        assert_eq!(caller_share(200, Some(300)), 300);
        assert_eq!(caller_share(200, Some(7)), 7);
    }

    use super::*;

    fn caller(n: u8) -> Account {
        Account::of(false, None, IpAddr::from([10, 0, 0, n]))
    }

    #[tokio::test]
    async fn one_caller_holds_at_most_its_share() {
        let admission = Admission::new(10, 2, Duration::ZERO);
        let a = admission.admit(caller(1)).await.unwrap();
        let _b = admission.admit(caller(1)).await.unwrap();
        assert_eq!(
            admission.admit(caller(1)).await.err(),
            Some(Refused::CallerShare(2))
        );
        // Another caller still gets in; the first gets one back on release.
        let _c = admission.admit(caller(2)).await.unwrap();
        drop(a);
        assert!(admission.admit(caller(1)).await.is_ok());
    }

    #[tokio::test]
    async fn a_full_pool_is_waited_for_then_refused() {
        let admission = Admission::new(1, 5, Duration::from_millis(50));
        let held = admission.admit(caller(1)).await.unwrap();
        assert_eq!(admission.admit(caller(2)).await.err(), Some(Refused::Full));
        // A refused request gives its count back.
        assert!(
            admission
                .held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&caller(2))
                .is_none()
        );
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(caller(2)).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(held);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test]
    async fn a_door_holds_at_most_its_share_of_a_shared_pool() {
        let pool = Arc::new(Semaphore::new(3));
        let a = Admission::within(Some(pool.clone()), 2, 5, Duration::from_millis(20));
        let b = Admission::within(Some(pool.clone()), 2, 5, Duration::from_millis(20));
        let a1 = a.admit(caller(1)).await.unwrap();
        let _a2 = a.admit(caller(2)).await.unwrap();
        // Its share is full, though the pool has room: b still gets in.
        assert_eq!(a.admit(caller(3)).await.err(), Some(Refused::Full));
        let _b1 = b.admit(caller(1)).await.unwrap();
        // The pool is full: b waits, then is refused, within its share.
        assert_eq!(b.admit(caller(2)).await.err(), Some(Refused::Full));
        assert_eq!(pool.available_permits(), 0);
        drop(a1);
        assert!(b.admit(caller(2)).await.is_ok());
    }

    #[test]
    fn the_caller_is_the_credential_on_an_authenticated_door() {
        let here = IpAddr::from([127, 0, 0, 1]);
        let there = IpAddr::from([127, 0, 0, 2]);
        assert_eq!(
            Account::of(true, Some(b"Bearer x"), here),
            Account::of(true, Some(b"Bearer x"), there)
        );
        assert_ne!(
            Account::of(true, Some(b"Bearer x"), here),
            Account::of(true, Some(b"Bearer y"), here)
        );
        assert_eq!(
            Account::of(false, Some(b"Bearer x"), here),
            Account::of(false, Some(b"Bearer y"), here)
        );
        assert_ne!(
            Account::of(false, None, here),
            Account::of(false, None, there)
        );
    }
}
