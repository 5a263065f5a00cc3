//! A rolling restart (issue 37, "Graceful rolling restarts"): on SIGTERM
//! the door stops accepting connections first, then answers every request
//! in flight (a held SendMessage with its task as it stands, as the
//! reference answers one when the door closes), and exits 0 within
//! `--drain-ms`. No acknowledged task is lost: a resumed launch holds each.

use crate::common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Door, post};
use serde_json::json;

#[test]
fn sigterm_stops_accepting_then_answers_what_is_in_flight() {
    let mut door = Door::start_flagged(
        "name: drain\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n",
        &["--drain-ms", "3000"],
    );
    // Five held sends, each on a connection of its own: one working, four
    // waiting their turn.
    let held: Vec<_> = (0..5)
        .map(|i| {
            let addr = door.addr.clone();
            let body = json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {
                "message": {"messageId": format!("m{i}"), "role": "ROLE_USER",
                            "parts": [{"text": "sleep 60000"}]}}})
            .to_string();
            std::thread::spawn(move || post(&addr, &body))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while door.result(None, "ListTasks", json!({}))["totalSize"] != 5 {
        assert!(
            Instant::now() < deadline,
            "the five tasks were never written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let signalled = Instant::now();
    // SAFETY: kill takes plain integers.
    unsafe { libc::kill(door.pid() as i32, libc::SIGTERM) };
    // The listener goes first: a new connection is refused.
    while TcpStream::connect(&door.addr).is_ok() {
        assert!(
            signalled.elapsed() < Duration::from_secs(2),
            "new connections are still accepted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Every request in flight is answered, none reset: its task as it
    // stands.
    common::answered_as_the_door_closed(held);
    let status = door
        .exited_within(Duration::from_secs(6))
        .expect("the door exits within its drain");
    assert!(status.success(), "{status:?}");
    assert!(signalled.elapsed() < Duration::from_secs(6));

    // No acknowledged task is lost.
    let door = door.restart(&["--resume"]);
    assert_eq!(door.result(None, "ListTasks", json!({}))["totalSize"], 5);
}
