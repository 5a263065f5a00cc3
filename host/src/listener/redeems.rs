//! Guessing at peer handles, bounded: failed redeems (a 404 on the peer
//! plane) are counted per client address, and past [`BUDGET`] of them in a
//! [`WINDOW`] the address is answered 429 with `retry-after` until its
//! window ends, before any door runs. A handle is 256 bits, so the budget
//! is not what keeps it secret: it keeps a client from spending the host's
//! CPU on guesses, and shows one in the metrics.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed redeems an address may make in one window.
pub const BUDGET: u32 = 30;
/// How long a window lasts, from an address's first failure in it.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses (IPv6 /64 networks) counted at once. Past it the windows that
/// limit nothing go (expired ones, and those still under budget: an
/// attacker with that many addresses gets a fresh budget on each, as it
/// would anyway), and limited ones stay until their window ends. When
/// limited windows alone fill it, a new address is not counted until one
/// ends: a guesser already limited stays limited, at the price of leaving
/// new ones unlimited for at most a window, and the memory stays bounded.
const MAX_ADDRESSES: usize = 65_536;
/// Once a sweep leaves the table this full of limited windows, the next
/// waits [`SWEEP_PAUSE`] (or for the first window to end), so a flood of
/// new addresses against a full table costs no scan per failure.
const CROWDED: usize = MAX_ADDRESSES / 4 * 3;
const SWEEP_PAUSE: Duration = Duration::from_secs(1);

/// A capsule's failed redeems, by client address.
#[derive(Default)]
pub struct Redeems {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    failures: HashMap<IpAddr, (Instant, u32)>,
    /// No sweep before this, and no new address while full.
    paused_until: Option<Instant>,
}

/// What an address is counted under: an IPv4 address alone, an IPv6 one
/// by its /64, the smallest network a site is given (a host picks any of
/// its 2^64 addresses, so counting each would give it as many budgets),
/// an IPv4-mapped IPv6 address as its IPv4 one.
fn key(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u128::from(u64::MAX)))),
        v4 => v4,
    }
}

impl Redeems {
    /// How long `address` must wait before it may redeem again, once it
    /// has spent its budget; None when it may redeem now.
    pub fn limited(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let (started, count) = table.failures.get(&key(address))?;
        let ends = *started + WINDOW;
        (*count >= BUDGET && now < ends).then(|| ends - now)
    }

    /// `address` failed a redeem at `now`.
    pub fn failed(&self, address: IpAddr, now: Instant) {
        let address = key(address);
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if table.failures.len() >= MAX_ADDRESSES
            && !table.failures.contains_key(&address)
            && !table.sweep(now)
        {
            return;
        }
        let window = table.failures.entry(address).or_insert((now, 0));
        if now >= window.0 + WINDOW {
            *window = (now, 0);
        }
        window.1 = window.1.saturating_add(1);
    }

    /// Addresses counted now.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.table.lock().unwrap().failures.len()
    }
}

impl Table {
    /// Drops every window that limits nothing at `now`; whether a new
    /// address now has room.
    fn sweep(&mut self, now: Instant) -> bool {
        if self.paused_until.is_some_and(|until| now < until) {
            return false;
        }
        let limits =
            |(started, count): &(Instant, u32)| *count >= BUDGET && now < *started + WINDOW;
        self.failures.retain(|_, window| limits(window));
        if self.failures.len() >= CROWDED {
            let first_end = self
                .failures
                .values()
                .map(|(started, _)| *started + WINDOW)
                .min();
            self.paused_until = first_end.map(|end| end.max(now + SWEEP_PAUSE));
        } else {
            self.paused_until = None;
        }
        self.failures.len() < MAX_ADDRESSES
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

    /// Issue 47: IPv6 addresses are counted by their /64, since one host
    /// may send from any address of its network; IPv4 ones alone.
    #[test]
    fn ipv6_is_counted_by_its_64() {
        let redeems = Redeems::default();
        let now = Instant::now();
        for n in 0..BUDGET {
            let address: IpAddr = format!("2001:db8:0:7::{:x}", n + 1).parse().unwrap();
            redeems.failed(address, now);
        }
        assert_eq!(redeems.tracked(), 1);
        let same_64: IpAddr = "2001:db8:0:7:ffff:ffff:ffff:ffff".parse().unwrap();
        assert_eq!(redeems.limited(same_64, now), Some(WINDOW));
        let next_64: IpAddr = "2001:db8:0:8::1".parse().unwrap();
        assert_eq!(redeems.limited(next_64, now), None);
        // An IPv4-mapped address is its IPv4 address, which is alone.
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..BUDGET {
            redeems.failed("::ffff:192.0.2.1".parse().unwrap(), now);
        }
        assert_eq!(redeems.limited(v4, now), Some(WINDOW));
        assert_eq!(redeems.limited("192.0.2.2".parse().unwrap(), now), None);
    }

    fn nth(n: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n))
    }

    /// Issue 47: a full table drops the windows that limit nothing and
    /// keeps the limited ones (it used to drop them all).
    #[test]
    fn a_full_table_keeps_its_limited_windows() {
        let redeems = Redeems::default();
        let now = Instant::now();
        let guesser: IpAddr = "198.51.100.7".parse().unwrap();
        for _ in 0..BUDGET {
            redeems.failed(guesser, now);
        }
        for n in 1..MAX_ADDRESSES as u32 {
            redeems.failed(nth(n), now);
        }
        assert_eq!(redeems.tracked(), MAX_ADDRESSES);
        let later = now + Duration::from_secs(10);
        let newcomer: IpAddr = "203.0.113.1".parse().unwrap();
        redeems.failed(newcomer, later);
        assert_eq!(redeems.tracked(), 2);
        assert_eq!(
            redeems.limited(guesser, later),
            Some(Duration::from_secs(50))
        );
        assert_eq!(redeems.limited(newcomer, later), None);
    }

    /// Issue 47: when limited windows alone fill the table, a new address
    /// is not counted (the table stays bounded) until a window ends; every
    /// limited address stays limited meanwhile.
    #[test]
    fn limited_windows_alone_keep_the_table_bounded() {
        let redeems = Redeems::default();
        let now = Instant::now();
        for n in 0..MAX_ADDRESSES as u32 {
            for _ in 0..BUDGET {
                redeems.failed(nth(n), now);
            }
        }
        let newcomer: IpAddr = "203.0.113.1".parse().unwrap();
        let later = now + Duration::from_secs(30);
        for _ in 0..BUDGET {
            redeems.failed(newcomer, later);
        }
        assert_eq!(redeems.tracked(), MAX_ADDRESSES);
        assert_eq!(redeems.limited(newcomer, later), None);
        assert_eq!(
            redeems.limited(nth(0), later),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            redeems.limited(nth(MAX_ADDRESSES as u32 - 1), later),
            Some(Duration::from_secs(30))
        );
        // Once their windows end, the newcomer is counted again.
        let after = now + WINDOW;
        for _ in 0..BUDGET {
            redeems.failed(newcomer, after);
        }
        assert_eq!(redeems.tracked(), 1);
        assert_eq!(redeems.limited(newcomer, after), Some(WINDOW));
        assert_eq!(redeems.limited(nth(0), after), None);
    }

    /// A sweep that leaves the table crowded with limited windows is not
    /// repeated for every new address: the next waits a second.
    #[test]
    fn a_crowded_table_is_swept_at_most_once_a_second() {
        let redeems = Redeems::default();
        let now = Instant::now();
        // More than CROWDED limited, their windows ending over a second
        // from `now + WINDOW`; the rest under budget.
        let limited = CROWDED as u32 + 2000;
        for n in 0..limited {
            let started = now + Duration::from_millis(u64::from(n % 1000));
            for _ in 0..BUDGET {
                redeems.failed(nth(n), started);
            }
        }
        for n in limited..MAX_ADDRESSES as u32 {
            redeems.failed(nth(n), now);
        }
        let at = now + WINDOW;
        redeems.failed("203.0.113.1".parse().unwrap(), at);
        // Dropped: the windows under budget, and the limited ones that
        // started at `now` (every thousandth); the newcomer counted.
        let ended = limited.div_ceil(1000) as usize;
        assert_eq!(redeems.tracked(), limited as usize - ended + 1);
        let mut n = MAX_ADDRESSES as u32;
        while redeems.tracked() < MAX_ADDRESSES {
            redeems.failed(nth(n), at);
            n += 1;
        }
        // Full and still crowded: though half the limited windows have
        // ended by then, no sweep runs for a new address within the second.
        let soon = at + Duration::from_millis(500);
        let refused: IpAddr = "203.0.113.2".parse().unwrap();
        for _ in 0..BUDGET {
            redeems.failed(refused, soon);
        }
        assert_eq!(redeems.tracked(), MAX_ADDRESSES);
        assert_eq!(redeems.limited(refused, soon), None);
        // A second on, the next sweep runs: every limited window has ended.
        let next = at + SWEEP_PAUSE;
        redeems.failed(refused, next);
        assert_eq!(redeems.tracked(), 1);
    }
}
