//! `cargo bench -p murmur-door-host --bench listing [-- SIZES...]`: what one
//! ListTasks costs the task store as the session grows (default 1,000,
//! 10,000, 100,000 and 1,000,000 tasks).
//!
//! One session's file, in a temporary directory, grows through the store's
//! own writes (`insert` and `transition`, one transaction each, as the hub
//! makes them) to each size in turn. Its tasks: four in five in `ctx-a`, the
//! rest in `ctx-b` or a context of their own (a message that names none);
//! most completed, some failed, canceled, rejected, input-required or still
//! working; most started by a public caller, one in ten by each of two
//! declared credentials. Each status is a millisecond after the last.
//!
//! At each size it times `Store::list` (a page of 50, as the issue's
//! clients asked) for each filter, on the first page and on a page deep in
//! the order (a cursor at the middle change), and prints µs per call, p50
//! and p99, then the ratio of the largest size to the smallest (p50). The
//! fill's cost per write is printed as it goes.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use murmur_door_host::bindings::task_store::{Cursor, ListQuery, Origin, TaskState};
use murmur_door_host::tasks::store::{NewRecord, Owner, Sees, Store, Transition};

const PAGE: u32 = 50;
/// Each (query, page) runs for this long, or `MAX_CALLS` calls.
const RUN_FOR: Duration = Duration::from_millis(1500);
const MAX_CALLS: usize = 2000;
const MIN_CALLS: usize = 5;
/// The session starts here; each change is one millisecond later.
const START_MS: i64 = 1_800_000_000_000;
/// "Recent": the cutoff of the `since recent` query is this many changes
/// before the last.
const RECENT: i64 = 500;

/// The queries measured at each size, `now` the session's last change: a
/// label, whether the caller is a declared one (else it sees every task),
/// and the query.
fn cases(now: i64) -> Vec<(&'static str, bool, ListQuery)> {
    vec![
        ("no filter", false, query()),
        (
            "status completed",
            false,
            ListQuery {
                state: Some(TaskState::Completed),
                ..query()
            },
        ),
        (
            "contextId ctx-a",
            false,
            ListQuery {
                context_id: Some("ctx-a".into()),
                ..query()
            },
        ),
        (
            "completed + ctx-a",
            false,
            ListQuery {
                context_id: Some("ctx-a".into()),
                state: Some(TaskState::Completed),
                ..query()
            },
        ),
        (
            "working + ctx-a (rare)",
            false,
            ListQuery {
                context_id: Some("ctx-a".into()),
                state: Some(TaskState::Working),
                ..query()
            },
        ),
        (
            "after: recent",
            false,
            ListQuery {
                status_after_ms: Some(now - RECENT),
                ..query()
            },
        ),
        (
            "after: recent + ctx-a",
            false,
            ListQuery {
                context_id: Some("ctx-a".into()),
                status_after_ms: Some(now - RECENT),
                ..query()
            },
        ),
        (
            "after: before all",
            false,
            ListQuery {
                status_after_ms: Some(START_MS - 1),
                ..query()
            },
        ),
        (
            "after: half",
            false,
            ListQuery {
                status_after_ms: Some((START_MS + now) / 2),
                ..query()
            },
        ),
        ("declared caller", true, query()),
        (
            "declared, completed + ctx-a",
            true,
            ListQuery {
                context_id: Some("ctx-a".into()),
                state: Some(TaskState::Completed),
                ..query()
            },
        ),
    ]
}

/// The table: per query and size, p50/p99 and total, and the write cost.
fn print(sizes: &[u64], results: &[(String, Vec<Timing>)], write_cost: &[f64]) {
    println!(
        "# Store::list, pageSize {PAGE}: µs per call, p50/p99 (totalSize); ratio = p50 at {} / p50 at {}",
        sizes.last().unwrap(),
        sizes[0]
    );
    let mut head = format!("{:<36}", "query");
    for size in sizes {
        head.push_str(&format!(" {:>22}", format!("{size} tasks")));
    }
    println!("{head} {:>7}", "ratio");
    for (label, cells) in results {
        let mut line = format!("{label:<36}");
        for t in cells {
            line.push_str(&format!(
                " {:>22}",
                format!("{}/{} ({})", t.p50, t.p99, t.total)
            ));
        }
        let ratio = cells.last().unwrap().p50 as f64 / cells[0].p50.max(1) as f64;
        println!("{line} {ratio:>7.2}");
    }
    let mut line = format!("{:<36}", "fill: µs per write (mean)");
    for cost in write_cost {
        line.push_str(&format!(" {cost:>22.1}"));
    }
    println!("{line}");
}

fn main() {
    // `cargo bench` adds flags of its own; the numbers are sizes.
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 100_000, 1_000_000]
    } else {
        sizes
    };
    let dir = std::env::temp_dir().join(format!("murmur-listing-{}", std::process::id()));
    let _cleanup = Cleanup(dir.clone());
    let store = Store::open(&dir, false, START_MS).unwrap().store;
    let mut fill = Fill {
        store,
        tasks: 0,
        clock: START_MS,
    };

    let alice = Sees::Own(Owner::Declared("alice".into()));
    // Per (query, page): its label and, per size, p50, p99 and total.
    let mut results: Vec<(String, Vec<Timing>)> = Vec::new();
    let mut write_cost: Vec<f64> = Vec::new();
    for &size in &sizes {
        let started = Instant::now();
        let writes = fill.grow_to(size);
        let spent = started.elapsed();
        write_cost.push(spent.as_secs_f64() * 1e6 / writes.max(1) as f64);
        eprintln!(
            "{size} tasks: filled in {:.1} s, {:.1} µs per write; measuring",
            spent.as_secs_f64(),
            spent.as_secs_f64() * 1e6 / writes.max(1) as f64
        );
        let now = fill.clock;
        let middle = Cursor {
            change: fill.last_change() / 2,
            task_id: String::new(),
        };
        let everyone = Sees::Every;
        let mut row = 0;
        for (name, declared, q) in cases(now) {
            let sees = if declared { &alice } else { &everyone };
            for deep in [false, true] {
                let q = ListQuery {
                    after: deep.then(|| middle.clone()),
                    ..q.clone()
                };
                let label = format!("{name}, {}", if deep { "deep" } else { "page 1" });
                if results.len() <= row {
                    results.push((label, Vec::new()));
                }
                results[row].1.push(time(&fill.store, sees, &q));
                row += 1;
            }
        }
    }

    print(&sizes, &results, &write_cost);
}

struct Timing {
    p50: u64,
    p99: u64,
    /// The totalSize answered.
    total: u32,
}

fn query() -> ListQuery {
    ListQuery {
        context_id: None,
        state: None,
        status_after_ms: None,
        after: None,
        limit: PAGE,
    }
}

/// p50 and p99 in µs of `Store::list`, and the total it answered.
fn time(store: &Store, sees: &Sees, q: &ListQuery) -> Timing {
    let total = store.list(sees, q).unwrap().total;
    let mut samples = Vec::new();
    let started = Instant::now();
    while samples.len() < MAX_CALLS && (samples.len() < MIN_CALLS || started.elapsed() < RUN_FOR) {
        let t = Instant::now();
        let page = store.list(sees, q).unwrap();
        samples.push(t.elapsed());
        std::hint::black_box(page);
    }
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize].as_micros() as u64;
    Timing {
        p50: at(0.5),
        p99: at(0.99),
        total,
    }
}

struct Fill {
    store: Store,
    tasks: u64,
    /// The status timestamp of the last change.
    clock: i64,
}

impl Fill {
    fn tick(&mut self) -> i64 {
        self.clock += 1;
        self.clock
    }

    fn last_change(&self) -> u64 {
        self.store
            .list(
                &Sees::Every,
                &ListQuery {
                    limit: 1,
                    ..query()
                },
            )
            .unwrap()
            .tasks
            .first()
            .map_or(0, |t| t.change)
    }

    /// Adds tasks until the session holds `size`; answers how many writes
    /// that took.
    fn grow_to(&mut self, size: u64) -> u64 {
        let mut writes = 0;
        while self.tasks < size {
            let i = self.tasks;
            self.tasks += 1;
            let owner = match i % 10 {
                3 => Owner::Declared("alice".into()),
                7 => Owner::Declared("bob".into()),
                _ => Owner::Public,
            };
            let context_id = match i % 20 {
                0..=15 => "ctx-a".to_string(),
                16 | 17 => "ctx-b".to_string(),
                _ => format!("ctx-{i}"),
            };
            let rejected = i % 50 == 11;
            let now = self.tick();
            let record = NewRecord {
                id: format!("tsk_{i:032x}"),
                context_id,
                owner,
                origin: Origin::Client,
                trust: None,
                state: if rejected {
                    TaskState::Rejected
                } else {
                    TaskState::Submitted
                },
                status_message: None,
                reference_task_ids: Vec::new(),
                forget_session: false,
                images: Vec::new(),
                created_ms: now,
            };
            self.store.insert(&record, now, 1).unwrap();
            writes += 1;
            if rejected {
                continue;
            }
            let path: &[TaskState] = match i % 100 {
                13 | 57 => &[TaskState::Canceled],
                21 | 42 | 88 => &[TaskState::Working, TaskState::Failed],
                29 => &[TaskState::Working, TaskState::InputRequired],
                64 => &[TaskState::Working],
                _ => &[TaskState::Working, TaskState::Completed],
            };
            for &state in path {
                let mut to = Transition::to(state);
                if state == TaskState::Completed {
                    to.response = Some("hi".into());
                }
                let now = self.tick();
                self.store.transition(&record.id, &to, now, 1).unwrap();
                writes += 1;
            }
        }
        writes
    }
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
