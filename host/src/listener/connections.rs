//! The open connections: at most `--max-connections`, and at the cap the one
//! that has done least is closed to let a new one in, so idle or stalled
//! sockets cannot starve new clients. Also notices when the client of an
//! event stream has gone, so its door instance is released at once rather
//! than at the stream's next write, and drops a connection whose client
//! takes none of an answer's bytes for `--write-timeout-ms`.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::time::Sleep;

/// Connections open at once (`--max-connections`).
pub const MAX_CONNECTIONS: usize = 4096;
/// Descriptors kept free beside the connections: the listener, the task
/// store's files, agents' pipes, the state directory's lock.
pub const SPARE_DESCRIPTORS: usize = 128;
/// How often an open stream's socket is checked for its client's close.
pub const GONE_CHECK: Duration = Duration::from_millis(250);
/// How long a client may take no byte of an answer (`--write-timeout-ms`).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Every open connection, by id.
pub struct Connections {
    max: usize,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Connection>>>,
    started: Instant,
    /// Connections dropped because their client took no byte of an answer
    /// for the write timeout.
    write_timeouts: AtomicU64,
}

/// One open connection, as the registry sees it.
pub struct Connection {
    id: u64,
    /// Requests being answered: from the head until the response's body ends.
    busy: AtomicU32,
    /// Event streams being written.
    streaming: AtomicU32,
    /// Responses whose body ended.
    answered: AtomicU64,
    /// Milliseconds from the registry's start to the last response's end,
    /// or to the connection's opening.
    active_ms: AtomicU64,
    /// Told when the registry closes the connection to let another in.
    evicted: Notify,
    /// Told when a stream starts.
    stream_started: Notify,
}

impl Connections {
    /// A registry of at most `max` open connections (at least 1).
    pub fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            max: max.max(1),
            next: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            started: Instant::now(),
            write_timeouts: AtomicU64::new(0),
        })
    }

    /// Connections dropped so far because their client took no byte of an
    /// answer for the write timeout.
    pub fn write_timeouts(&self) -> u64 {
        self.write_timeouts.load(Ordering::Relaxed)
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Registers a new connection. At the cap, first closes the one that has
    /// done least: no request in progress, fewest answered, then idle
    /// longest. None when every open connection is answering a request: the
    /// new one is then closed at once.
    pub fn admit(self: &Arc<Self>) -> Option<Registered> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= self.max {
            let victim = open
                .values()
                .filter(|c| c.busy.load(Ordering::Relaxed) == 0)
                .min_by_key(|c| {
                    (
                        c.answered.load(Ordering::Relaxed),
                        c.active_ms.load(Ordering::Relaxed),
                    )
                })
                .map(|c| c.id)?;
            if let Some(victim) = open.remove(&victim) {
                victim.evicted.notify_one();
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection {
            id,
            busy: AtomicU32::new(0),
            streaming: AtomicU32::new(0),
            answered: AtomicU64::new(0),
            active_ms: AtomicU64::new(self.now_ms()),
            evicted: Notify::new(),
            stream_started: Notify::new(),
        });
        open.insert(id, connection.clone());
        Some(Registered {
            connections: self.clone(),
            connection,
        })
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }
}

/// A connection while it is open; dropping it unregisters it.
pub struct Registered {
    connections: Arc<Connections>,
    pub(crate) connection: Arc<Connection>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections
            .open
            .lock()
            .unwrap()
            .remove(&self.connection.id);
    }
}

impl Registered {
    /// A request begins; it ends when the returned guard drops (with its
    /// response's body).
    pub fn begin(&self) -> Busy {
        self.connection.busy.fetch_add(1, Ordering::Relaxed);
        Busy {
            connections: self.connections.clone(),
            connection: self.connection.clone(),
            streaming: false,
        }
    }

    /// Resolves when the registry closed this connection to let another in.
    pub async fn evicted(&self) {
        self.connection.evicted.notified().await
    }

    /// Resolves when the client of an event stream on this connection has
    /// closed its side. Only streams are watched: a client may half-close
    /// after a whole request and still read its answer, but an event stream
    /// has no end to wait for, and a stream's door would otherwise notice
    /// the client only at its next write.
    pub async fn stream_client_gone(&self, fd: RawFd) {
        loop {
            while self.connection.streaming.load(Ordering::Relaxed) == 0 {
                self.connection.stream_started.notified().await;
            }
            tokio::time::sleep(GONE_CHECK).await;
            if self.connection.streaming.load(Ordering::Relaxed) > 0 && peer_closed(fd) {
                return;
            }
        }
    }
}

/// A connection's socket whose writes fail once its client has taken no
/// byte for `timeout` while an answer that is not an event stream waits to
/// be written: hyper then drops the connection and the answer with it. A
/// stream is left alone: what it queues is bounded (the response stream
/// import's `--stream-queue-bytes`, and the events import, which tells a
/// stream that falls behind it lagged), it heartbeats, and its client may
/// come back.
pub struct WriteDeadline<T> {
    io: T,
    registered: Arc<Registered>,
    timeout: Duration,
    /// Armed when a write first finds the socket full, disarmed by any
    /// byte taken.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    /// `io`, its writes failing once its client has taken no byte for
    /// `timeout`; `registered` tells whether a stream is being written.
    pub fn new(io: T, registered: Arc<Registered>, timeout: Duration) -> WriteDeadline<T> {
        WriteDeadline {
            io,
            registered,
            timeout,
            stalled: None,
        }
    }

    /// The socket, without its deadline.
    pub fn into_inner(self) -> T {
        self.io
    }

    /// What a write polled, unless the client has taken nothing for the
    /// timeout: then the write fails.
    fn deadline(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<usize>>,
    ) -> Poll<std::io::Result<usize>> {
        if !polled.is_pending() {
            self.stalled = None;
            return polled;
        }
        if self.registered.connection.streaming.load(Ordering::Relaxed) > 0 {
            self.stalled = None;
            return Poll::Pending;
        }
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stalled.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.registered
            .connections
            .write_timeouts
            .fetch_add(1, Ordering::Relaxed);
        Poll::Ready(Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the client took no byte of its answer for {} ms (--write-timeout-ms)",
                timeout.as_millis()
            ),
        )))
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.deadline(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.deadline(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Whether the peer of `fd` has closed its side: a non-blocking peek that
/// finds the end of the stream (or an error). Bytes waiting (a pipelined
/// request) mean it has not.
fn peer_closed(fd: RawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: `fd` is the connection's socket, open for as long as the
    // connection's task (which calls this) runs; the peek reads at most one
    // byte into `byte` and consumes nothing.
    let n = unsafe {
        libc::recv(
            fd,
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => {
            let e = std::io::Error::last_os_error();
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            )
        }
    }
}

/// A request in progress on a connection.
pub struct Busy {
    connections: Arc<Connections>,
    connection: Arc<Connection>,
    streaming: bool,
}

impl Busy {
    /// The response is an event stream: watch for its client leaving.
    pub fn streaming(&mut self) {
        if !self.streaming {
            self.streaming = true;
            self.connection.streaming.fetch_add(1, Ordering::Relaxed);
            self.connection.stream_started.notify_one();
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let c = &self.connection;
        if self.streaming {
            c.streaming.fetch_sub(1, Ordering::Relaxed);
        }
        c.answered.fetch_add(1, Ordering::Relaxed);
        c.active_ms
            .store(self.connections.now_ms(), Ordering::Relaxed);
        c.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Raises the soft limit on open files to the hard limit, so the
/// connection cap, not the default soft limit (often 1,024), bounds the
/// sockets; answers the soft limit now in force.
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    let limit = open_files_limit()?;
    // SAFETY: setrlimit reads the one struct given.
    unsafe {
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Ok(limit.rlim_cur);
            }
            return Ok(raised.rlim_cur);
        }
    }
    Ok(limit.rlim_cur)
}

/// Descriptors the process's table is grown to hold at launch, at most
/// (see [`reserve_descriptors`]).
pub const RESERVED_DESCRIPTORS: u64 = 1 << 16;

/// Grows the process's descriptor table at once to hold `wanted`
/// descriptors (at most [`RESERVED_DESCRIPTORS`], and the open-files
/// limit); answers its size now.
///
/// The kernel grows the table when a new descriptor is past its end
/// (64, 128, 256, ... entries), and in a process with more than one thread
/// each growth waits for an RCU grace period: 10 to 20 ms in which the
/// thread opening that descriptor (a capsule being added, a connection
/// being accepted) does nothing else. Grown at launch, before the runtime's
/// threads start, it costs microseconds and the kernel's memory for the
/// table (8 bytes an entry: 256 KiB for 32,768), and never happens again
/// below that size.
pub fn reserve_descriptors(wanted: u64) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    let top = wanted
        .min(open_files_limit()?.rlim_cur)
        .clamp(1, RESERVED_DESCRIPTORS)
        - 1;
    let probe = std::fs::File::open("/dev/null")?;
    // SAFETY: F_DUPFD_CLOEXEC duplicates `probe` to the lowest free
    // descriptor at or above `top`, never one in use; it is closed at once.
    let high = unsafe {
        libc::fcntl(
            probe.as_raw_fd(),
            libc::F_DUPFD_CLOEXEC,
            libc::c_int::try_from(top).unwrap_or(libc::c_int::MAX),
        )
    };
    if high < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `high` was just made here and nothing else holds it.
    unsafe { libc::close(high) };
    descriptor_table_size()
}

/// How many descriptors the process's table holds now (`FDSize`).
pub fn descriptor_table_size() -> std::io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no FDSize in /proc/self/status"))
}

/// The open-files limit in force: soft and hard.
fn open_files_limit() -> std::io::Result<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the one struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(limit)
}

/// The connection cap that fits `open_files` descriptors.
pub fn fit_connections(wanted: usize, open_files: u64) -> usize {
    let room = (open_files as usize)
        .saturating_sub(SPARE_DESCRIPTORS)
        .max(1);
    wanted.min(room)
}

/// A warning logged at most once per interval, saying how many it stood
/// for: a flood of failures costs one log line a second, not one a failure.
pub struct Throttled {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttled {
    /// Logs at most once per `every`.
    pub const fn new(every: Duration) -> Throttled {
        Throttled {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Some(how many happened since the last one logged, this one
    /// included) when this one is to be logged.
    pub fn due(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 += 1;
        let now = Instant::now();
        if state
            .0
            .is_some_and(|last| now.duration_since(last) < self.every)
        {
            return None;
        }
        let count = state.1;
        *state = (Some(now), 0);
        Some(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is grown to what is asked (rounded up by the kernel), within
    /// the open-files limit and RESERVED_DESCRIPTORS, and no descriptor is
    /// left open.
    #[test]
    fn the_descriptor_table_is_grown_ahead() {
        let limit = raise_open_files_limit().unwrap();
        // The highest descriptor open: the probe's copy sits near the top
        // (other tests open and close low ones meanwhile).
        let highest = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
                .max()
                .unwrap_or(0)
        };
        let wanted = limit.min(3000);
        let size = reserve_descriptors(wanted).unwrap();
        assert!(size >= wanted, "{size} < {wanted}");
        assert_eq!(size, descriptor_table_size().unwrap());
        assert!(highest() < wanted - 1, "{}", highest());
        // Past the limit: the table stops at it, and nothing fails.
        let size = reserve_descriptors(u64::MAX).unwrap();
        assert!(size >= limit.min(RESERVED_DESCRIPTORS), "{size}");
    }

    #[test]
    fn at_the_cap_the_connection_that_did_least_goes() {
        let connections = Connections::new(3);
        let idle_new = connections.admit().unwrap();
        let answered_once = connections.admit().unwrap();
        drop(answered_once.begin());
        let busy = connections.admit().unwrap();
        let _request = busy.begin();
        // The idle one that answered nothing goes first.
        let fourth = connections.admit().unwrap();
        assert_eq!(connections.open(), 3);
        let open = connections.open.lock().unwrap_or_else(|e| e.into_inner());
        assert!(!open.contains_key(&idle_new.connection.id));
        assert!(open.contains_key(&answered_once.connection.id));
        assert!(open.contains_key(&fourth.connection.id));
        drop(open);
        // Unregistering the evicted one later changes nothing.
        drop(idle_new);
        assert_eq!(connections.open(), 3);
    }

    #[test]
    fn when_every_connection_is_busy_the_new_one_is_refused() {
        let connections = Connections::new(2);
        let a = connections.admit().unwrap();
        let b = connections.admit().unwrap();
        let (_x, _y) = (a.begin(), b.begin());
        assert!(connections.admit().is_none());
        assert_eq!(connections.open(), 2);
    }

    #[test]
    fn the_cap_leaves_descriptors_spare() {
        assert_eq!(fit_connections(4096, 1024), 1024 - SPARE_DESCRIPTORS);
        assert_eq!(fit_connections(100, 1 << 20), 100);
        assert_eq!(fit_connections(100, 10), 1);
    }

    #[test]
    fn a_throttled_warning_counts_what_it_stood_for() {
        let warn = Throttled::new(Duration::from_secs(3600));
        assert_eq!(warn.due(), Some(1));
        assert_eq!(warn.due(), None);
        assert_eq!(warn.due(), None);
        let warn = Throttled::new(Duration::ZERO);
        assert_eq!(warn.due(), Some(1));
        assert_eq!(warn.due(), Some(1));
    }
}
