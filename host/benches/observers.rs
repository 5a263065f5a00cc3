//! `cargo bench -p murmur-door-host --bench observers [-- N...]`: N concurrent
//! murmur.WatchSession observers (default 100 and 1,000) on the real
//! `murmur-door` binary, over loopback.
//!
//! For each N it opens N streams, measures the host's resident memory before
//! and after (memory per open stream), then runs tasks whose script writes a
//! progress status every 50 ms and reports, over every observer and event:
//! - events delivered (must be N × events written: nothing lost),
//! - events fanned out per second,
//! - delivery latency p50/p99: from the instant the host recorded the status
//!   (its `timestamp`, ms precision) to the instant the observer read it,
//! - CPU a delivery, in µs, while the tasks run: the door process's, the
//!   part of it spent in the kernel (mostly writing to the sockets), and
//!   this process's (the observers' reading). All share the machine's
//!   cores, so their sum bounds how soon an event reaches its last observer.
//!
//! `MURMUR_DOOR_BIN=path` measures that build of `murmur-door` instead.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROGRESS_PER_TASK: usize = 20;
const TASKS: usize = 5;
/// The script sleeps this long between progress statuses: events arrive
/// at a steady 20 a second, each fanned out to every observer.
const PACE_MS: u64 = 50;

fn main() {
    // `cargo bench` adds flags of its own; the numbers are observer counts.
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![100, 1000]
    } else {
        counts
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "{:>9} {:>10} {:>12} {:>12} {:>9} {:>9} {:>14} {:>13} {:>12} {:>12}",
        "observers",
        "events",
        "delivered",
        "events/s",
        "p50 ms",
        "p99 ms",
        "KiB per stream",
        "door µs/del",
        "of it kernel",
        "reader µs/del"
    );
    for n in counts {
        runtime.block_on(run(n));
    }
}

/// A door on an ephemeral port, stopped when dropped.
struct Door {
    child: std::process::Child,
    addr: String,
    _state: std::path::PathBuf,
}

impl Drop for Door {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._state);
    }
}

fn start(instances: usize) -> Door {
    let state = std::env::temp_dir().join(format!(
        "murmur-observers-{}-{instances}",
        std::process::id()
    ));
    std::fs::create_dir_all(&state).unwrap();
    let manifest = state.join("murmur.yaml");
    std::fs::write(
        &manifest,
        "name: bench\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n",
    )
    .unwrap();
    // MURMUR_DOOR_BIN: another build to measure, for a before/after.
    let binary = std::env::var("MURMUR_DOOR_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_murmur-door").to_string());
    let mut child = std::process::Command::new(binary)
        .args([
            "serve",
            manifest.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--state",
            state.to_str().unwrap(),
        ])
        .args(["--max-instances", &(instances + 64).to_string()])
        // Every observer is one public caller (127.0.0.1).
        .args(["--max-instances-per-caller", &(instances + 64).to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting murmur-door");
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("murmur-door exited").unwrap();
        if let Some(at) = line.find("url=http://") {
            break line[at + 11..].trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Door {
        child,
        addr,
        _state: state,
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// CPU time the process `pid` has used, user and system, in µs.
fn cpu_us(pid: &str) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's closing parenthesis: utime and stime
    // are the 14th and 15th of the line, in clock ticks (100 a second).
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks = |i: usize| fields[i].parse::<f64>().unwrap() * 10_000.0;
    (ticks(11), ticks(12))
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// Milliseconds since the epoch of an RFC 3339 `…T09:00:00.123Z` timestamp.
fn parse_ms(timestamp: &str) -> f64 {
    let at = time::OffsetDateTime::parse(timestamp, &time::format_description::well_known::Rfc3339)
        .unwrap();
    (at.unix_timestamp_nanos() / 1_000_000) as f64
}

async fn post(addr: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\nA2A-Version: 1.0\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

/// Opens one observer and reads until it has seen `expected` progress
/// statuses; returns their delivery latencies in ms.
async fn observe(addr: String, ready: tokio::sync::mpsc::Sender<()>, expected: usize) -> Vec<f64> {
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"murmur.WatchSession","params":{}}"#;
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\nA2A-Version: 1.0\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let mut body = Dechunked::default();
    let mut buffer = Vec::new();
    let mut chunk = vec![0u8; 65536];
    let mut latencies = Vec::new();
    let mut acked = false;
    let mut scanned = 0;
    while latencies.len() < expected {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the stream closed early");
        let received = now_ms();
        raw.extend_from_slice(&chunk[..n]);
        body.take(&mut raw, &mut buffer);
        // Scan the new complete lines for data events.
        while let Some(end) = buffer[scanned..].iter().position(|b| *b == b'\n') {
            let line = &buffer[scanned..scanned + end];
            scanned += end + 1;
            let Some(data) = line.strip_prefix(b"data: ") else {
                continue;
            };
            // The client reads as little as it must, so the two cores go to
            // the door: the ack by its frame, a progress status by its text
            // part ("p<n>") and its timestamp.
            let line = std::str::from_utf8(data).unwrap();
            if !acked && line.contains("connection-ack") {
                acked = true;
                ready.send(()).await.unwrap();
            }
            if line.contains(r#""statusUpdate""#) && line.contains(r#""text":"p"#) {
                let at = line.find(r#""timestamp":""#).expect("a status timestamp") + 13;
                latencies.push(received - parse_ms(&line[at..at + 24]));
            }
        }
        if scanned > 1 << 20 {
            buffer.drain(..scanned);
            scanned = 0;
        }
    }
    latencies
}

/// The body of a chunked response, as its bytes arrive: an SSE event may
/// span several chunks.
#[derive(Default)]
struct Dechunked {
    /// The response head has been passed over.
    in_body: bool,
}

impl Dechunked {
    /// Moves every whole chunk's payload from `raw` to `body`.
    fn take(&mut self, raw: &mut Vec<u8>, body: &mut Vec<u8>) {
        let find = |bytes: &[u8], what: &[u8]| bytes.windows(what.len()).position(|w| w == what);
        if !self.in_body {
            let Some(end) = find(raw, b"\r\n\r\n") else {
                return;
            };
            raw.drain(..end + 4);
            self.in_body = true;
        }
        loop {
            let Some(line) = find(raw, b"\r\n") else {
                return;
            };
            let size = std::str::from_utf8(&raw[..line]).unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let start = line + 2;
            if raw.len() < start + size + 2 {
                return;
            }
            body.extend_from_slice(&raw[start..start + size]);
            raw.drain(..start + size + 2);
        }
    }
}

async fn run(n: usize) {
    let door = start(n);
    let pid = door.child.id();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib(pid);
    let expected = TASKS * PROGRESS_PER_TASK;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(n);
    // Open the streams a hundred at a time, each batch acknowledged before
    // the next, so the listener's accept backlog never overflows.
    let mut observers = Vec::with_capacity(n);
    for batch in (0..n).collect::<Vec<_>>().chunks(100) {
        for _ in batch {
            observers.push(tokio::spawn(observe(
                door.addr.clone(),
                ready_tx.clone(),
                expected,
            )));
        }
        for _ in batch {
            ready_rx.recv().await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = rss_kib(pid);

    let script: String = (0..PROGRESS_PER_TASK)
        .map(|i| format!("progress p{i}\\nsleep {PACE_MS}\\n"))
        .collect::<String>()
        + "reply done";
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"text":"{script}"}}]}}}}}}"#
    );
    let door_before = cpu_us(&pid.to_string());
    let own_before = cpu_us("self");
    let started = Instant::now();
    for _ in 0..TASKS {
        let answer = post(&door.addr, &body).await;
        assert!(answer.contains("TASK_STATE_COMPLETED"), "{answer}");
    }
    let mut latencies = Vec::new();
    for observer in observers {
        latencies.extend(
            tokio::time::timeout(Duration::from_secs(120), observer)
                .await
                .expect("observers finish")
                .unwrap(),
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    let door_after = cpu_us(&pid.to_string());
    let own_after = cpu_us("self");
    let delivered = latencies.len() as f64;
    let per_delivery = |us: f64| us / delivered;
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "{n:>9} {expected:>10} {:>12} {:>12.0} {:>9.1} {:>9.1} {:>14.1} {:>13.1} {:>12.1} {:>12.1}",
        latencies.len(),
        latencies.len() as f64 / elapsed,
        at(0.5),
        at(0.99),
        after.saturating_sub(before) as f64 / n as f64,
        per_delivery(door_after.0 + door_after.1 - door_before.0 - door_before.1),
        per_delivery(door_after.1 - door_before.1),
        per_delivery(own_after.0 + own_after.1 - own_before.0 - own_before.1)
    );
    assert_eq!(latencies.len(), n * expected, "an observer missed an event");
}
