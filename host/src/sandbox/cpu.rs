//! `--max-cpu-ms`: how long a request's door may run without waiting.
//!
//! What counts is the time the door keeps a worker thread busy: each poll of
//! its future, which runs its wasm and the host calls it makes (a SQLite
//! read, a JSON copy), timed with the monotonic clock. Time between polls,
//! when the thread serves other requests, never counts. The count starts
//! over each time the door waits (its future is pending on a body write, an
//! event, a timer): an idle stream costs nothing, and a stream woken by an
//! event every millisecond costs only what each event costs. A door that
//! runs without waiting for more than the budget is stopped at the next
//! epoch tick (see [`crate::sandbox::request::store`]).
//!
//! The thread's own CPU clock would leave out time the OS gives other
//! processes, but reading it is a system call (about 0.5 µs, against 25 ns
//! for the monotonic clock) twice a poll; on a machine that busy the budget
//! runs out sooner, which errs toward the host.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Milliseconds a request's door may run without waiting (`--max-cpu-ms`).
pub const MAX_CPU_MS: u64 = 1000;
/// How often the epoch ticks: a running door yields to other requests once
/// per tick, and its running time is checked against the budget.
pub const TICK: Duration = Duration::from_millis(10);

/// How long one request's door has run since it last waited.
#[derive(Debug, Default)]
pub struct Meter {
    /// Nanoseconds used in earlier polls since the door last waited.
    ran: AtomicU64,
    /// [`now`] when the poll in progress began; 0 when the door is not
    /// being polled through [`metered`].
    poll_started: AtomicU64,
    /// The door is pending on the meter's own yield at an epoch tick, which
    /// is no wait of its own.
    yielding: AtomicBool,
}

// One request's future is polled by one thread at a time, and tokio orders
// a task's polls across threads, so relaxed atomics suffice.
const ORDER: Ordering = Ordering::Relaxed;

impl Meter {
    /// How long the door has run since it last waited, the poll in
    /// progress included. Outside [`metered`] the meter cannot see waits, so it
    /// counts `tick` for each call instead: an unmetered loop is still cut.
    pub fn used(&self, tick: Duration) -> Duration {
        let started = self.poll_started.load(ORDER);
        if started == 0 {
            let ran = self.ran.fetch_add(nanos(tick), ORDER) + nanos(tick);
            return Duration::from_nanos(ran);
        }
        let now = now();
        Duration::from_nanos(self.ran.load(ORDER) + now.saturating_sub(started))
    }

    /// The door yields at an epoch tick: the pending poll that follows is
    /// not a wait.
    pub fn yielding(&self) {
        self.yielding.store(true, ORDER);
    }

    /// The door's yield is over.
    pub fn resumed(&self) {
        self.yielding.store(false, ORDER);
    }

    /// Counts from nothing: for an instance kept from an earlier request.
    pub fn start_over(&self) {
        self.ran.store(0, ORDER);
        self.poll_started.store(0, ORDER);
        self.yielding.store(false, ORDER);
    }

    fn poll_started(&self) {
        self.poll_started.store(now(), ORDER);
    }

    fn poll_ended(&self, pending: bool) {
        let started = self.poll_started.swap(0, ORDER);
        if pending && !self.yielding.load(ORDER) {
            self.ran.store(0, ORDER);
        } else {
            self.ran.fetch_add(now().saturating_sub(started), ORDER);
        }
    }
}

/// Runs `future`, the door's work for one request, on `meter`.
pub async fn metered<F: Future>(meter: &Meter, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        meter.poll_started();
        let polled = future.as_mut().poll(cx);
        meter.poll_ended(polled.is_pending());
        polled
    })
    .await
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds since the first call, never 0.
fn now() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    nanos(START.get_or_init(Instant::now).elapsed()) + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Poll;

    /// Runs for about `d`.
    fn spin(d: Duration) {
        let start = Instant::now();
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[tokio::test]
    async fn counts_cpu_across_yields_and_starts_over_after_a_wait() {
        let meter = Meter::default();
        let ms = Duration::from_millis(1);
        metered(&meter, async {
            spin(5 * ms);
            assert!(meter.used(ms) >= 5 * ms);
            // A yield at a tick: the count goes on.
            meter.yielding();
            tokio::task::yield_now().await;
            meter.resumed();
            spin(5 * ms);
            assert!(meter.used(ms) >= 10 * ms, "{:?}", meter.used(ms));
            // Sleeping is waiting: the count starts over, and the sleep
            // itself does not count.
            tokio::time::sleep(20 * ms).await;
            assert!(meter.used(ms) < 5 * ms, "{:?}", meter.used(ms));
        })
        .await;
    }

    #[test]
    fn unmetered_counts_a_tick_per_look() {
        let meter = Meter::default();
        let tick = Duration::from_millis(10);
        assert_eq!(meter.used(tick), tick);
        assert_eq!(meter.used(tick), 2 * tick);
        // Polled and pending on a wait: it starts over.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut once = std::pin::pin!(metered(&meter, std::future::pending::<()>()));
        assert!(matches!(once.as_mut().poll(&mut cx), Poll::Pending));
        assert_eq!(meter.used(tick), tick);
    }
}
