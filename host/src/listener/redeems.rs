//! Guessing at peer handles, bounded: failed redeems (a 404 on the peer
//! plane) are counted per client address, and past [`BUDGET`] of them in a
//! [`WINDOW`] the address is answered 429 with `retry-after` until its
//! window ends, before any door runs. A handle is 256 bits, so the budget
//! is not what keeps it secret: it keeps a client from spending the host's
//! CPU on guesses, and shows one in the metrics.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed redeems an address may make in one window.
pub const BUDGET: u32 = 30;
/// How long a window lasts, from an address's first failure in it.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses counted at once: past it the expired windows go, and if none
/// has, every window does (an attacker with that many addresses gets a
/// fresh budget on each, as it would anyway).
const MAX_ADDRESSES: usize = 65_536;

/// A capsule's failed redeems, by client address.
#[derive(Default)]
pub struct Redeems {
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Redeems {
    /// How long `address` must wait before it may redeem again, once it
    /// has spent its budget; None when it may redeem now.
    pub fn limited(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let (started, count) = failures.get(&address)?;
        let ends = *started + WINDOW;
        (*count >= BUDGET && now < ends).then(|| ends - now)
    }

    /// `address` failed a redeem at `now`.
    pub fn failed(&self, address: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= MAX_ADDRESSES && !failures.contains_key(&address) {
            failures.retain(|_, (started, _)| now < *started + WINDOW);
            if failures.len() >= MAX_ADDRESSES {
                failures.clear();
            }
        }
        let window = failures.entry(address).or_insert((now, 0));
        if now >= window.0 + WINDOW {
            *window = (now, 0);
        }
        window.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, "Guessing": past a documented budget, 429 with
    /// retry-after; another address, and the same one a window later, may
    /// redeem again.
    #[test]
    fn an_address_that_keeps_failing_waits_out_its_window() {
        let redeems = Redeems::default();
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        let now = Instant::now();
        for _ in 0..BUDGET - 1 {
            redeems.failed(a, now);
        }
        assert_eq!(redeems.limited(a, now), None);
        redeems.failed(a, now);
        let later = now + Duration::from_secs(15);
        assert_eq!(redeems.limited(a, later), Some(Duration::from_secs(45)));
        assert_eq!(redeems.limited(b, later), None);
        assert_eq!(redeems.limited(a, now + WINDOW), None);
        redeems.failed(a, now + WINDOW);
        assert_eq!(redeems.limited(a, now + WINDOW), None);
    }
}
