//! The event log alone (numbering, replay, gaps, lags, closing, waking), then
//! the events the hub and the embedded agents write, read as a stream reads
//! them. Deliveries are written as one line each, so a test reads like the
//! stream it checks.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::bindings::tokens::Credential;
use crate::session::agents::{CommandAgent, ScriptAgent};
use crate::session::tasks::store::{self, Store};
use crate::session::tasks::testing::{TempDir, hub_buffered, hub_with, new_task, settle, until};
use crate::session::tasks::{Hub, Task, TaskAcceptance, TaskError, TaskState, now_ms};

/// One line per delivery: `3 tsk_a working`, `4 tsk_a working: step 1
/// (msg_)`, `5 tsk_a frame text {"text":"x"}`, `6 tsk_a response: four`,
/// `gap 1..2`, `lagged 5..7`, `closed`, and an event a stream framed as
/// `7 framed working {"id":<id>}`, its request id cut out at `<id>` (a
/// frame's: `8 framed frame …`). Task ids of
/// the hub's tests read `task`.
pub(crate) fn line(delivery: &Delivery) -> String {
    let event = match delivery {
        Delivery::Framed(framed) => {
            let kind = match (framed.state, framed.frame) {
                (Some(state), _) => crate::session::tasks::store::state_word(state),
                (None, true) => "frame",
                (None, false) => "artifact",
            };
            let (head, tail) = framed.sse.split_at(framed.request_id_at as usize);
            let (head, tail) = (String::from_utf8_lossy(head), String::from_utf8_lossy(tail));
            return format!("{} framed {kind} {head}<id>{tail}", framed.id);
        }
        Delivery::Gap((a, b)) => return format!("gap {a}..{b}"),
        Delivery::Lagged((a, b)) => return format!("lagged {a}..{b}"),
        Delivery::Closed => return "closed".to_string(),
        Delivery::Event(event) => event,
    };
    let task = if event.task_id.starts_with("tsk_") {
        "task"
    } else {
        &event.task_id
    };
    let what = match &event.body {
        EventBody::Status(update) => {
            let mut s = crate::session::tasks::store::state_word(update.status.state).to_string();
            if let Some(message) = &update.status.message {
                s.push_str(&format!(": {message}"));
            }
            if let Some(id) = &update.message_id {
                assert!(id.starts_with("msg_") && id.len() == 36, "{id}");
                s.push_str(" (msg_)");
            }
            s
        }
        EventBody::Artifact(artifact) => match &artifact.text {
            Some(text) => format!("{}: {text}", artifact.artifact_id),
            None => format!("{}: {} items", artifact.artifact_id, artifact.residue.len()),
        },
        EventBody::Frame(frame) => format!("frame {} {}", frame.kind, frame.body),
    };
    format!("{} {task} {what}", event.id)
}

/// Everything the reader has now, one line each.
fn drain(reader: &mut Reader) -> Vec<String> {
    std::iter::from_fn(|| reader.next_delivery())
        .map(|d| line(&d))
        .collect()
}

/// Reads until `last` is read (5 s at most), waiting on the reader's
/// wait between deliveries.
pub(crate) async fn read_until(reader: &mut Reader, last: &str) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        match reader.next_delivery() {
            Some(delivery) => {
                let line = line(&delivery);
                let done = line.ends_with(last);
                lines.push(line);
                if done {
                    return lines;
                }
            }
            None => tokio::time::timeout(Duration::from_secs(5), reader.wait())
                .await
                .unwrap_or_else(|_| panic!("no {last:?} after {lines:#?}")),
        }
    }
}

/// Publishes one status event of task `task` as id `id`.
fn publish(log: &EventLog, id: u64, task: &str) {
    log.publish(
        id..id + 1,
        task,
        "ctx_1",
        vec![status(TaskState::Working, None, None, id as i64)],
    );
}

fn ids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

// The log alone.

#[test]
fn ids_follow_the_last_one_and_latest_names_the_newest() {
    let log = EventLog::new(8, 0);
    assert_eq!(log.latest(), 0);
    assert_eq!(log.oldest(), 1);
    publish(&log, 1, "a");
    publish(&log, 2, "a");
    assert_eq!(log.latest(), 2);
    // A log resumed after id 41 starts at 42.
    let resumed = EventLog::new(8, 41);
    assert_eq!(resumed.latest(), 41);
    assert_eq!(resumed.oldest(), 42);
    publish(&resumed, 42, "a");
    let mut reader = resumed.session_reader(None);
    assert_eq!(drain(&mut reader), ["42 a working"]);
}

#[test]
fn a_session_reader_reads_every_task_from_the_oldest_buffered() {
    let log = EventLog::new(8, 0);
    publish(&log, 1, "a");
    publish(&log, 2, "b");
    let mut all = log.session_reader(None);
    let mut after_one = log.session_reader(Some(1));
    publish(&log, 3, "a");
    assert_eq!(
        drain(&mut all),
        ["1 a working", "2 b working", "3 a working"]
    );
    assert_eq!(drain(&mut after_one), ["2 b working", "3 a working"]);
    assert_eq!(all.next_delivery(), None);
    publish(&log, 4, "c");
    assert_eq!(drain(&mut all), ["4 c working"]);
}

#[test]
fn a_task_reader_reads_its_task_only() {
    let log = EventLog::new(8, 0);
    publish(&log, 1, "a");
    publish(&log, 2, "b");
    let mut replay = log.task_reader("a", Some(0));
    let mut from_now = log.task_reader("b", None);
    publish(&log, 3, "b");
    publish(&log, 4, "a");
    publish(&log, 5, "c");
    assert_eq!(ids(&drain(&mut replay)), ["1", "4"]);
    // `after` none: only what is written from now on.
    assert_eq!(drain(&mut from_now), ["3 b working"]);
    assert_eq!(from_now.task_id(), Some("b"));
}

#[test]
fn an_id_older_than_the_buffer_reads_a_gap_first() {
    let log = EventLog::new(3, 0);
    for id in 1..=5 {
        publish(&log, id, "a");
    }
    assert_eq!(log.oldest(), 3);
    let mut reader = log.session_reader(Some(1));
    assert_eq!(
        drain(&mut reader),
        ["gap 1..2", "3 a working", "4 a working", "5 a working"]
    );
    // The buffer supplies every event after 2: no gap.
    assert_eq!(
        ids(&drain(&mut log.session_reader(Some(2)))),
        ["3", "4", "5"]
    );
    // No id, no gap: the replay starts at the oldest buffered.
    assert_eq!(ids(&drain(&mut log.session_reader(None))), ["3", "4", "5"]);
    // A task reader reports the gap too: the lost events may be its own.
    assert_eq!(
        drain(&mut log.task_reader("a", Some(0))),
        ["gap 0..2", "3 a working", "4 a working", "5 a working"]
    );
}

/// `--replay-buffer-bytes`: the buffer drops its oldest events to stay
/// within its bytes, keeps the newest whatever its size, and a reconnect
/// from a dropped id reads a gap.
#[test]
fn the_buffer_is_bounded_in_bytes() {
    let big = |id: u64| {
        let text = text_artifact("response", "x".repeat(1000));
        (id..id + 1, text)
    };
    let per_event = |log: &EventLog| log.bytes() / (log.latest() - log.oldest() + 1) as usize;
    let log = EventLog::new(
        Replay {
            events: 100,
            bytes: 3500,
        },
        0,
    );
    for id in 1..=10 {
        let (ids, body) = big(id);
        log.publish(ids, "a", "ctx", vec![body]);
    }
    // Each event holds a little over 1000 bytes: three fit.
    assert_eq!(log.oldest(), 8);
    assert!(
        per_event(&log) > 1000 && log.bytes() <= 3500,
        "{}",
        log.bytes()
    );
    let lines = drain(&mut log.session_reader(Some(2)));
    assert_eq!(lines[0], "gap 2..7");
    assert_eq!(ids(&lines[1..]), ["8", "9", "10"]);
    // One event larger than the whole buffer is still kept, alone.
    log.publish(
        11..12,
        "a",
        "ctx",
        vec![text_artifact("response", "y".repeat(10_000))],
    );
    assert_eq!((log.oldest(), log.latest()), (11, 11));
}

/// Keeps `sse` as the reader's framing of event `id`, cut at `<id>`.
fn keep(reader: &mut Reader, id: u64, sse: &str) {
    let at = sse.find("<id>").unwrap_or(sse.len() + 1);
    reader.keep_framed(id, sse.replace("<id>", "").into_bytes(), at);
}

/// Framed once: what one stream of a door version framed is what every
/// other reader of that version gets; another version frames its own.
#[test]
fn a_framed_event_is_passed_on_to_the_readers_of_its_door_version() {
    let log = EventLog::new(8, 0);
    publish(&log, 1, "a");
    log.publish(
        2..3,
        "a",
        "ctx_1",
        vec![text_artifact("response", "hi".into())],
    );
    let mut first = log.session_reader(None).for_version(1);
    assert_eq!(drain(&mut first), ["1 a working", "2 a response: hi"]);
    // Only the event it last delivered: not 1.
    keep(&mut first, 1, "{\"early\":1}");
    keep(&mut first, 2, "{\"id\":<id>,\"v\":1}");
    // A second framing by the same version changes nothing.
    keep(&mut first, 2, "{\"again\":2}");
    assert_eq!(
        drain(&mut log.session_reader(None).for_version(1)),
        ["1 a working", "2 framed artifact {\"id\":<id>,\"v\":1}"]
    );
    // Door version 2 gets the event, frames its own, and version 1's
    // framing stays version 1's.
    let mut other = log.task_reader("a", Some(1)).for_version(2);
    assert_eq!(drain(&mut other), ["2 a response: hi"]);
    keep(&mut other, 2, "{\"id\":<id>,\"v\":2}");
    assert_eq!(
        drain(&mut log.task_reader("a", Some(1)).for_version(2)),
        ["2 framed artifact {\"id\":<id>,\"v\":2}"]
    );
    assert_eq!(
        drain(&mut log.task_reader("a", Some(1)).for_version(1)),
        ["2 framed artifact {\"id\":<id>,\"v\":1}"]
    );
    // A framed status says its state, where a task's stream may end.
    publish(&log, 3, "a");
    let mut third = log.session_reader(Some(2)).for_version(1);
    assert_eq!(drain(&mut third), ["3 a working"]);
    // A cut past the end is no framing.
    keep(&mut third, 3, "{}");
    assert_eq!(
        drain(&mut log.session_reader(Some(2)).for_version(1)),
        ["3 a working"]
    );
    keep(&mut third, 3, "<id>{}");
    assert_eq!(
        drain(&mut log.session_reader(Some(2)).for_version(1)),
        ["3 framed working <id>{}"]
    );
}

/// A framing counts in the buffer's bytes: keeping one can push the oldest
/// events out, and a framing leaves with its event.
#[test]
fn framings_count_in_the_buffer_bytes() {
    let log = EventLog::new(
        Replay {
            events: 100,
            bytes: 3000,
        },
        0,
    );
    let x = || vec![text_artifact("response", "x".repeat(1000))];
    log.publish(1..2, "a", "ctx", x());
    log.publish(2..3, "a", "ctx", x());
    let one_event = log.bytes() / 2;
    let mut reader = log.session_reader(Some(1)).for_version(1);
    assert_eq!(ids(&drain(&mut reader)), ["2"]);
    reader.keep_framed(2, vec![b' '; 1200], 0);
    // Event 2 and its framing fill the buffer: event 1 went.
    assert_eq!((log.oldest(), log.latest()), (2, 2));
    assert_eq!(
        log.bytes(),
        one_event + std::mem::size_of::<Framing>() + 1200
    );
    publish(&log, 3, "a");
    publish(&log, 4, "a");
    log.publish(
        5..6,
        "a",
        "ctx",
        vec![text_artifact("response", "y".repeat(1500))],
    );
    // Event 2 went with its framing: the buffer holds what 3..5 hold.
    assert_eq!(log.oldest(), 3);
    let mut rest = log.session_reader(Some(2));
    let bytes: usize = std::iter::from_fn(|| rest.next_delivery())
        .map(|d| match d {
            Delivery::Event(event) => event_bytes(&event),
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(log.bytes(), bytes);
}

#[test]
fn a_session_reader_that_falls_behind_reads_lagged_then_the_live_edge() {
    let log = EventLog::new(3, 0);
    publish(&log, 1, "a");
    let mut reader = log.session_reader(Some(0));
    assert_eq!(drain(&mut reader), ["1 a working"]);
    for id in 2..=7 {
        publish(&log, id, "a");
    }
    // What it missed, the buffered events included: it goes on from now.
    assert_eq!(drain(&mut reader), ["lagged 1..7"]);
    publish(&log, 8, "a");
    assert_eq!(drain(&mut reader), ["8 a working"]);
    // A reader overrun before its first read lagged too: its id was in the
    // buffer when it opened.
    let mut slow = log.session_reader(Some(6));
    // A task reader goes on from the oldest buffered event instead, so it
    // still reads how its task ends.
    let mut task = log.task_reader("a", Some(7));
    for id in 9..=11 {
        publish(&log, id, "a");
    }
    assert_eq!(drain(&mut slow), ["lagged 6..11"]);
    assert_eq!(ids(&drain(&mut task)), ["lagged", "9", "10", "11"]);
}

/// Reads with claims, as `pass-on` does, one line a read: `frame N` when
/// the reader is to have event N framed, `wait` when another reader is.
fn claim(reader: &mut Reader) -> Option<String> {
    Some(match reader.read_claiming()? {
        Claimed::Read(read) => line(&read.into_delivery()),
        Claimed::Frame(events) => {
            let ids: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
            format!("frame {}", ids.join(" "))
        }
        Claimed::Wait => "wait".to_string(),
    })
}

// Framed apart: the first reader of a version to meet an event claims its
// framing, the others wait without moving past it, and all read the one
// framing kept; a framing that failed gives each reader the event.
#[test]
fn an_event_is_framed_once_by_the_reader_that_claims_it() {
    let log = EventLog::new(8, 0);
    let mut first = log.session_reader(None).for_version(1);
    let mut second = log.session_reader(None).for_version(1);
    let mut other = log.session_reader(None).for_version(2);
    publish(&log, 1, "a");
    assert_eq!(claim(&mut first).as_deref(), Some("frame 1"));
    assert_eq!(claim(&mut second).as_deref(), Some("wait"));
    assert_eq!(claim(&mut first).as_deref(), Some("wait"));
    // Another version frames its own.
    assert_eq!(claim(&mut other).as_deref(), Some("frame 1"));
    publish(&log, 2, "a");
    log.framed(
        1,
        1,
        Some((b"id: 1\ndata: {\"id\":,\"n\":1}\n\n".to_vec(), 18)),
    );
    let framed = r#"1 framed working id: 1
data: {"id":<id>,"n":1}

"#;
    assert_eq!(claim(&mut first).as_deref(), Some(framed));
    assert_eq!(claim(&mut second).as_deref(), Some(framed));
    // Event 2 could not be framed: each reader is given the event.
    assert_eq!(claim(&mut second).as_deref(), Some("frame 2"));
    log.framed(2, 1, None);
    assert_eq!(claim(&mut first).as_deref(), Some("2 a working"));
    assert_eq!(claim(&mut second).as_deref(), Some("2 a working"));
    assert_eq!(claim(&mut first), None);
    // So is a reader of a version whose framing failed.
    log.framed(1, 2, None);
    assert_eq!(claim(&mut other).as_deref(), Some("1 a working"));
}

// A claim takes the unframed events after the first that its reader reads
// too, so that a burst (a task's statuses and artifact) is framed on one
// instance: a task reader passes over other tasks' events, a claim stops
// at an event its version framed or claimed, and holds FRAME_BATCH at most.
#[test]
fn a_claim_takes_the_burst_its_reader_reads() {
    let log = EventLog::new(64, 0);
    let mut task = log.task_reader("a", None).for_version(1);
    let mut session = log.session_reader(None).for_version(1);
    for (id, task) in [(1, "a"), (2, "b"), (3, "a"), (4, "a")] {
        publish(&log, id, task);
    }
    assert_eq!(claim(&mut task).as_deref(), Some("frame 1 3 4"));
    // Event 1 is claimed: the session reader waits for it, then claims
    // what the task reader left.
    assert_eq!(claim(&mut session).as_deref(), Some("wait"));
    for id in [1, 3, 4] {
        log.framed(id, 1, None);
    }
    assert_eq!(claim(&mut session).as_deref(), Some("1 a working"));
    assert_eq!(claim(&mut session).as_deref(), Some("frame 2"));
    // A claim stops at an event its version claimed.
    for id in 5..=7 {
        publish(&log, id, "c");
    }
    let mut late = log.session_reader(Some(5)).for_version(1);
    assert_eq!(claim(&mut late).as_deref(), Some("frame 6 7"));
    let mut early = log.session_reader(Some(4)).for_version(1);
    assert_eq!(claim(&mut early).as_deref(), Some("frame 5"));
    // And holds FRAME_BATCH at most.
    let batch = FRAME_BATCH as u64;
    let mut burst = log.task_reader("d", None).for_version(2);
    for id in 8..8 + batch + 2 {
        publish(&log, id, "d");
    }
    let claimed = claim(&mut burst).unwrap();
    let ids: Vec<String> = (8..8 + batch).map(|id| id.to_string()).collect();
    assert_eq!(claimed, format!("frame {}", ids.join(" ")));
    // And FRAME_BATCH_BYTES but for its first: a large event is framed alone.
    let mut large = log.task_reader("e", None).for_version(3);
    let next = 8 + batch + 2;
    for id in next..next + 2 {
        let message = "x".repeat(FRAME_BATCH_BYTES * 2 / 3);
        let body = status(TaskState::Working, Some(message), None, id as i64);
        log.publish(id..id + 1, "e", "ctx_1", vec![body]);
    }
    assert_eq!(claim(&mut large), Some(format!("frame {next}")));
}

#[test]
fn an_id_the_log_never_wrote_reads_everything() {
    // Another log's id (a fresh launch restarts at 1): everything this log
    // holds, with a gap when it lost some.
    let log = EventLog::new(2, 0);
    publish(&log, 1, "a");
    publish(&log, 2, "a");
    assert_eq!(ids(&drain(&mut log.session_reader(Some(500)))), ["1", "2"]);
    publish(&log, 3, "a");
    assert_eq!(
        ids(&drain(&mut log.session_reader(Some(500)))),
        ["gap", "2", "3"]
    );
    assert_eq!(
        ids(&drain(&mut log.task_reader("a", Some(500)))),
        ["gap", "2", "3"]
    );
}

#[test]
fn closing_ends_every_reader_after_what_was_written() {
    let log = EventLog::new(8, 0);
    publish(&log, 1, "a");
    let mut session = log.session_reader(None);
    let mut task = log.task_reader("b", None);
    publish(&log, 2, "a");
    log.close();
    // Written after the close: no reader reads it.
    publish(&log, 3, "b");
    assert_eq!(
        drain(&mut session),
        ["1 a working", "2 a working", "closed"]
    );
    assert_eq!(drain(&mut task), ["closed"]);
    // Nothing for good after closed.
    assert_eq!(session.next_delivery(), None);
    assert_eq!(task.next_delivery(), None);
    // A reader opened after the close replays, then ends too.
    assert_eq!(
        drain(&mut log.session_reader(Some(1))),
        ["2 a working", "closed"]
    );
}

#[test]
fn publishing_out_of_order_keeps_the_buffer_whole() {
    let log = EventLog::new(8, 0);
    publish(&log, 1, "a");
    let mut reader = log.session_reader(None);
    // An id published twice is dropped.
    publish(&log, 1, "b");
    // A hole: the buffer restarts at the new id, so readers see the loss.
    publish(&log, 5, "a");
    assert_eq!(drain(&mut reader), ["lagged 0..5"]);
    assert_eq!(log.latest(), 5);
}

#[test]
fn dropping_a_reader_frees_it() {
    let log = EventLog::new(8, 0);
    let a = log.session_reader(None);
    let b = log.task_reader("a", None);
    assert_eq!(log.readers(), 2);
    drop(a);
    drop(b);
    assert_eq!(log.readers(), 0);
    assert_eq!(Arc::strong_count(&log), 1);
}

#[tokio::test]
async fn a_waiting_reader_wakes_on_a_new_event_and_not_before() {
    let log = EventLog::new(8, 0);
    publish(&log, 1, "b");
    let mut reader = log.task_reader("a", None);
    // Nothing to read: not ready, even when another task writes.
    assert!(
        tokio::time::timeout(Duration::from_millis(50), reader.wait())
            .await
            .is_err()
    );
    publish(&log, 2, "b");
    assert!(
        tokio::time::timeout(Duration::from_millis(50), reader.wait())
            .await
            .is_err()
    );
    // Its task writes: ready, and stays ready until read.
    let writer = log.clone();
    let wrote = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        publish(&writer, 3, "a");
    });
    tokio::time::timeout(Duration::from_secs(5), reader.wait())
        .await
        .expect("ready once its task writes");
    wrote.await.unwrap();
    tokio::time::timeout(Duration::from_millis(10), reader.wait())
        .await
        .expect("still ready");
    assert_eq!(drain(&mut reader), ["3 a working"]);
    assert!(
        tokio::time::timeout(Duration::from_millis(20), reader.wait())
            .await
            .is_err()
    );
    // The door closes: ready, to read `closed`; and ready for good after.
    log.close();
    tokio::time::timeout(Duration::from_secs(5), reader.wait())
        .await
        .expect("ready once the door closes");
    assert_eq!(drain(&mut reader), ["closed"]);
    tokio::time::timeout(Duration::from_millis(10), reader.wait())
        .await
        .expect("an ended reader never blocks");
}

#[tokio::test]
async fn a_thousand_waiting_readers_all_wake() {
    let log = EventLog::new(16, 0);
    let mut waiting = Vec::new();
    for _ in 0..1000 {
        let mut reader = log.session_reader(None);
        waiting.push(tokio::spawn(async move {
            reader.wait().await;
            reader.next_delivery()
        }));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(waiting.iter().all(|w| !w.is_finished()));
    publish(&log, 1, "a");
    for w in waiting {
        let delivery = tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(line(&delivery.unwrap()), "1 a working");
    }
    assert_eq!(log.readers(), 0);
}

// The hub's events.

/// The id of the newest event: a stream notes it before starting its task.
fn noted(hub: &Hub) -> Option<u64> {
    Some(hub.events().latest())
}

#[tokio::test]
async fn a_task_writes_its_statuses_its_frames_then_its_response() {
    let hub = hub_with(ScriptAgent, TaskAcceptance::Queue);
    let before = noted(&hub);
    let task = hub
        .start(new_task(None, "progress step 1 of 2\nreply four"))
        .unwrap();
    let mut reader = hub.task_events(&None, &task.id, before).unwrap();
    let lines = read_until(&mut reader, "completed").await;
    assert_eq!(
        lines,
        [
            "1 task submitted",
            "2 task working",
            "3 task working: step 1 of 2 (msg_)",
            r#"4 task frame text {"text":"step 1 of 2"}"#,
            "5 task response: four",
            "6 task completed: task completed",
        ]
    );
    // Every event names the task and its context.
    let mut again = hub.task_events(&None, &task.id, before).unwrap();
    let mut timestamps = Vec::new();
    while let Some(Delivery::Event(event)) = again.next_delivery() {
        assert_eq!(event.task_id, task.id);
        assert_eq!(event.context_id, task.context_id);
        if let EventBody::Status(update) = event.body {
            timestamps.push(update.status.timestamp_ms);
        }
    }
    // A transition's status carries the instant GetTask shows.
    let done = hub.get(&None, &task.id).unwrap();
    assert_eq!(timestamps[0], task.status.timestamp_ms);
    assert_eq!(*timestamps.last().unwrap(), done.status.timestamp_ms);
    assert!(timestamps.is_sorted());
    assert_eq!(hub.events().latest(), 6);
}

// A script that only replies ends at once: started with nothing running, it
// is written ended with the task itself, one change, before `start`
// returns (which answers it as first recorded), with the events of every
// state; queued behind a running task, such tasks end one after another as
// soon as it ends, each in one change.
#[tokio::test]
async fn a_task_its_agent_ends_at_once_is_one_change_with_every_event() {
    let hub = hub_with(ScriptAgent, TaskAcceptance::Queue);
    let task = hub.start(new_task(None, "reply four")).unwrap();
    assert_eq!(task.status.state, TaskState::Submitted);
    assert_eq!(task.response, None);
    let done = hub.get(&None, &task.id).unwrap();
    assert_eq!(done.status.state, TaskState::Completed);
    assert_eq!(done.response.as_deref(), Some("four"));
    assert_eq!(done.change, task.change);
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    assert_eq!(
        read_until(&mut reader, "completed").await,
        [
            "1 task submitted",
            "2 task working",
            "3 task response: four",
            "4 task completed: task completed",
        ]
    );

    let first = hub.start(new_task(None, "sleep 50\nreply a")).unwrap();
    let queued: Vec<Task> = ["reply b", "fail c", "sleep soon"]
        .iter()
        .map(|text| hub.start(new_task(None, text)).unwrap())
        .collect();
    assert!(
        queued
            .iter()
            .all(|t| hub.get(&None, &t.id).unwrap().status.state == TaskState::Submitted)
    );
    let last = until(&hub, &queued[2].id, TaskState::Failed).await;
    // Each queued task: inserted, then ended in one change; the first is
    // recorded working after them (WORKING_WITHIN: the test's runtime runs
    // nothing until it awaits), then ended.
    assert_eq!(last.change, queued[2].change + 5);
    let ended: Vec<(TaskState, Option<String>)> = queued
        .iter()
        .map(|t| hub.get(&None, &t.id).unwrap())
        .map(|t| (t.status.state, t.response.or(t.status.message)))
        .collect();
    assert_eq!(
        ended,
        [
            (TaskState::Completed, Some("b".to_string())),
            (TaskState::Failed, Some("c".to_string())),
            (
                TaskState::Failed,
                Some("script: sleep takes milliseconds, not \"soon\"".to_string())
            ),
        ]
    );
    assert_eq!(
        hub.get(&None, &first.id).unwrap().status.state,
        TaskState::Completed
    );
}

#[tokio::test]
async fn a_question_writes_its_prompt_then_pauses_and_the_reply_resumes() {
    let hub = hub_with(ScriptAgent, TaskAcceptance::Queue);
    let task = hub.start(new_task(None, "ask Which branch?")).unwrap();
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    let asked = read_until(&mut reader, "(msg_)").await;
    assert_eq!(
        asked,
        [
            "1 task submitted",
            "2 task working",
            "3 task prompt: Which branch?",
            "4 task input-required: Which branch? (msg_)",
        ]
    );
    hub.reply(&None, &task.id, None, "fail no branch".into())
        .unwrap();
    assert_eq!(
        read_until(&mut reader, "failed: no branch").await,
        ["5 task working", "6 task failed: no branch"]
    );
}

#[tokio::test]
async fn a_cancel_writes_its_residue_then_canceled() {
    let hub = hub_with(ScriptAgent, TaskAcceptance::Queue);
    let task = hub
        .start(new_task(None, "detach sleep 30\nsleep 10000"))
        .unwrap();
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    until(&hub, &task.id, TaskState::Working).await;
    while hub.residue().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    hub.cancel(&None, &task.id).unwrap();
    assert_eq!(
        read_until(&mut reader, "canceled").await,
        [
            "1 task submitted",
            "2 task working",
            "3 task residue: 1 items",
            "4 task canceled",
        ]
    );
    hub.close();
}

#[tokio::test]
async fn a_rejected_task_writes_one_status() {
    let hub = hub_with(ScriptAgent, TaskAcceptance::Single);
    let first = hub.start(new_task(None, "sleep 10000")).unwrap();
    let mut session = hub.session_events(None);
    let second = hub.start(new_task(None, "reply b")).unwrap();
    let lines = read_until(&mut session, crate::session::tasks::BUSY).await;
    let rejected = format!("task rejected: {}", crate::session::tasks::BUSY);
    assert!(lines.last().unwrap().ends_with(&rejected), "{lines:?}");
    let mut reader = hub.task_events(&None, &second.id, Some(0)).unwrap();
    assert_eq!(drain(&mut reader).len(), 1);
    hub.cancel(&None, &first.id).unwrap();
}

#[tokio::test]
async fn a_task_reader_sees_what_get_task_sees() {
    let hub = hub_with(ScriptAgent, TaskAcceptance::Queue);
    let alice = Some(Credential::Declared("alice".into()));
    let task = hub.start(new_task(alice.clone(), "reply x")).unwrap();
    for stranger in [
        Some(Credential::Declared("bob".into())),
        Some(Credential::Member("alice".into())),
    ] {
        assert!(matches!(
            hub.task_events(&stranger, &task.id, None),
            Err(TaskError::NotFound)
        ));
    }
    assert!(matches!(
        hub.task_events(&None, "tsk_nope", None),
        Err(TaskError::NotFound)
    ));
    assert!(hub.task_events(&alice, &task.id, None).is_ok());
    assert!(
        hub.task_events(&Some(Credential::Operator), &task.id, None)
            .is_ok()
    );
    // An ended task opens, and from now on there is nothing.
    let done = settle(&hub, &task.id).await;
    assert_eq!(done.status.state, TaskState::Completed);
    let mut after = hub.task_events(&alice, &task.id, None).unwrap();
    assert_eq!(after.next_delivery(), None);
}

#[tokio::test]
async fn the_session_reader_follows_every_task_and_closes_with_the_door() {
    let hub = hub_with(ScriptAgent, TaskAcceptance::Queue);
    let mut watcher = hub.session_events(None);
    let a = hub.start(new_task(None, "reply a")).unwrap();
    settle(&hub, &a.id).await;
    let b = hub.start(new_task(None, "sleep 10000")).unwrap();
    until(&hub, &b.id, TaskState::Working).await;
    let lines = read_until(&mut watcher, "6 task working").await;
    assert_eq!(ids(&lines), ["1", "2", "3", "4", "5", "6"]);
    hub.close();
    assert_eq!(read_until(&mut watcher, "closed").await, ["closed"]);
    assert_eq!(watcher.next_delivery(), None);
}

#[tokio::test]
async fn a_tiny_buffer_reports_a_gap_to_a_late_reader_and_lags_a_slow_one() {
    let hub = hub_buffered(ScriptAgent, TaskAcceptance::Queue, 2);
    let mut slow = hub.session_events(None);
    let task = hub
        .start(new_task(None, "progress a\nprogress b\nreply c"))
        .unwrap();
    settle(&hub, &task.id).await;
    // 1 submitted, 2 working, 3-4 progress a, 5-6 progress b, 7 response,
    // 8 completed: the buffer holds 7 and 8.
    assert_eq!(
        drain(&mut hub.session_events(Some(3))),
        [
            "gap 3..6",
            "7 task response: c",
            "8 task completed: task completed"
        ]
    );
    assert_eq!(drain(&mut slow), ["lagged 0..8",]);
}

#[tokio::test]
async fn agent_cmd_stdout_lines_become_text_frames_as_they_arrive() {
    let hub = hub_with(
        CommandAgent::new("echo one; sleep 0.3; printf 'two\\r\\nthree'"),
        TaskAcceptance::Single,
    );
    let task = hub.start(new_task(None, "")).unwrap();
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    let first = read_until(&mut reader, r#"{"text":"one"}"#).await;
    assert_eq!(
        first,
        [
            "1 task submitted",
            "2 task working",
            r#"3 task frame text {"text":"one"}"#,
        ]
    );
    // The line arrived while the command still ran.
    assert_eq!(
        hub.get(&None, &task.id).unwrap().status.state,
        TaskState::Working
    );
    assert_eq!(
        read_until(&mut reader, "completed").await,
        [
            r#"4 task frame text {"text":"two"}"#,
            r#"5 task frame text {"text":"three"}"#,
            "6 task response: one\ntwo\r\nthree",
            "7 task completed: task completed",
        ]
    );
}

#[tokio::test]
async fn an_agent_reports_frames_of_any_kind() {
    use crate::session::agents::{Agent, AgentFuture, Outcome, RunningTask, TaskInput};

    struct Tools;
    impl Agent for Tools {
        fn run(&self, _input: TaskInput, task: RunningTask) -> AgentFuture {
            Box::pin(async move {
                let body = json!({"toolCallId": "call_1", "name": "bash"});
                task.frame(FrameKind::ToolCallStarted, body.as_object().unwrap());
                task.frame(
                    FrameKind::Thinking,
                    json!({"text": "hm"}).as_object().unwrap(),
                );
                Outcome::Completed("ok".into())
            })
        }
    }
    let hub = hub_with(Tools, TaskAcceptance::Single);
    let task = hub.start(new_task(None, "")).unwrap();
    let mut reader = hub.task_events(&None, &task.id, Some(0)).unwrap();
    let lines = read_until(&mut reader, "completed").await;
    assert_eq!(
        lines[2..4],
        [
            // The fields as the agent wrote them, in its order.
            r#"3 task frame tool-call-started {"toolCallId":"call_1","name":"bash"}"#,
            r#"4 task frame thinking {"text":"hm"}"#,
        ]
    );
}

#[tokio::test]
async fn event_ids_survive_a_resume_and_an_old_id_reads_a_gap() {
    let dir = TempDir::new("events-resume");
    let opened = Store::open(dir.path(), false, now_ms()).unwrap();
    let hub = Hub::new(
        opened.store,
        Arc::new(ScriptAgent),
        TaskAcceptance::Queue,
        16,
    );
    let done = hub
        .start(new_task(None, "progress half\nreply ok"))
        .unwrap();
    settle(&hub, &done.id).await;
    let live = hub.start(new_task(None, "sleep 100000")).unwrap();
    until(&hub, &live.id, TaskState::Working).await;
    // 1-6 the first task, 7-8 the live one.
    assert_eq!(hub.events().latest(), 8);
    hub.close();

    // What a crash leaves: the file and its log as they are now, with the
    // first store still open (it holds the file, as a live process would).
    let crashed = TempDir::new("events-resume-crashed");
    for name in ["session.db", "session.db-wal"] {
        let from = dir.path().join(name);
        if from.exists() {
            std::fs::copy(&from, crashed.path().join(name)).unwrap();
        }
    }
    let resumed = Store::open(crashed.path(), true, now_ms()).unwrap();
    assert_eq!(resumed.failed_by_resume, std::slice::from_ref(&live.id));
    let hub = Hub::new(
        resumed.store,
        Arc::new(ScriptAgent),
        TaskAcceptance::Queue,
        16,
    );
    // The resume's failure is event 9, the new log's first.
    assert_eq!(hub.events().latest(), 9);
    assert_eq!(
        drain(&mut hub.session_events(Some(5))),
        [
            "gap 5..8".to_string(),
            format!("9 task failed: {}", store::RESTARTED)
        ]
    );
    assert_eq!(ids(&drain(&mut hub.session_events(Some(8)))), ["9"]);
    assert!(drain(&mut hub.session_events(Some(9))).is_empty());
    let mut reader = hub.task_events(&None, &live.id, Some(0)).unwrap();
    assert_eq!(ids(&drain(&mut reader)), ["gap", "9"]);
    // New events follow.
    let next = hub.start(new_task(None, "reply again")).unwrap();
    settle(&hub, &next.id).await;
    assert_eq!(
        ids(&drain(&mut hub.session_events(Some(9)))),
        ["10", "11", "12", "13"]
    );
    hub.close();
}

#[test]
fn frames_are_numbered_and_the_last_id_is_durable() {
    let dir = TempDir::new("events-frames");
    let opened = Store::open(dir.path(), false, 1).unwrap();
    let store = opened.store;
    assert_eq!(store.number(3).unwrap(), 1..4);
    assert_eq!(store.number(0).unwrap(), 4..4);
    assert_eq!(store.last_event(), 3);
    drop(store);
    let resumed = Store::open(dir.path(), true, 2).unwrap();
    assert_eq!(resumed.store.last_event(), 3);
    assert!(resumed.store.take_restarted().is_empty());
}

// WORKING_WITHIN: an agent that ends its task within it has `working` and
// the ending recorded in one change, with the events of both in order; one
// that runs on is recorded working meanwhile; one that reports at once is
// recorded working before its report.
#[tokio::test]
async fn working_is_recorded_with_a_quick_ending_or_before_anything_else() {
    use crate::session::agents::{Agent, AgentFuture, Outcome, RunningTask, TaskInput};

    struct Quick;
    impl Agent for Quick {
        fn run(&self, input: TaskInput, task: RunningTask) -> AgentFuture {
            Box::pin(async move {
                match input.text.as_str() {
                    "report" => task.text("at once"),
                    "slow" => tokio::time::sleep(Duration::from_millis(200)).await,
                    _ => tokio::task::yield_now().await,
                }
                Outcome::Completed(input.text)
            })
        }
    }
    let hub = hub_with(Quick, TaskAcceptance::Queue);
    let quick = hub.start(new_task(None, "quick")).unwrap();
    let done = settle(&hub, &quick.id).await;
    assert_eq!(done.change, quick.change + 1, "one change");
    let mut reader = hub.task_events(&None, &quick.id, Some(0)).unwrap();
    let quick_events = read_until(&mut reader, "completed").await;
    assert_eq!(
        quick_events,
        [
            "1 task submitted",
            "2 task working",
            "3 task response: quick",
            "4 task completed: task completed",
        ]
    );

    let report = hub.start(new_task(None, "report")).unwrap();
    let mut reader = hub.task_events(&None, &report.id, Some(0)).unwrap();
    let reported = read_until(&mut reader, "completed").await;
    assert_eq!(
        reported,
        [
            "5 task submitted",
            "6 task working",
            r#"7 task frame text {"text":"at once"}"#,
            "8 task response: report",
            "9 task completed: task completed",
        ]
    );

    let slow = hub.start(new_task(None, "slow")).unwrap();
    let working = until(&hub, &slow.id, TaskState::Working).await;
    assert_eq!(working.change, slow.change + 1);
    assert_eq!(settle(&hub, &slow.id).await.change, slow.change + 2);
}
