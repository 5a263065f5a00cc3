//! Real A2A clients from the registries, unmodified, drive the door: the
//! JSON-RPC clients of PyPI a2a-sdk and of npm @a2a-js/sdk (the versions
//! pinned in tests/proto/requirements.txt and tests/interop/package-lock.json).
//!
//! Each client resolves the card with its own card resolver (GET
//! /.well-known/agent-card.json), is built from that card by its own client
//! factory, and then sends a held message ("Answers"), sends one with
//! returnImmediately and polls GetTask, answers a task waiting for input
//! ("Continuing a task"), reads tasks ("GetTask"), lists them with filters and
//! pages ("ListTasks"), cancels a working task and cancels it again (-32002),
//! and reads a task never held (-32001) ("Errors"). The npm client's
//! `listTasks({})` sends `status: "UNRECOGNIZED"`, which "ListTasks" refuses
//! with -32602: that refusal is checked, and the client lists with an
//! explicit status.
//!
//! The streams are driven by the same clients' streaming calls, in their own
//! scripts: a2a-sdk's streaming `send_message` (SendStreamingMessage) and
//! `subscribe` (SubscribeToTask), @a2a-js/sdk's `sendMessageStream` and
//! `resubscribeTask`. Each checks a task stream from its opening task to its
//! end (the response artifact, then TASK_STATE_COMPLETED), a subscription to
//! a task started with returnImmediately, a streaming turn that ends at
//! TASK_STATE_INPUT_REQUIRED while a subscription stays open across the pause
//! to the streaming reply's end, and the refusals a stream answers as one JSON
//! body ("SubscribeToTask", "Continuing a task"). On the wire, every SSE event
//! echoes the request id and its result is an lf.a2a.v1 StreamResponse
//! (strictly parsed by the Python script; round-tripped through the npm
//! types by the JS one).
//!
//! The steps are scripts in tests/interop/, run against a fresh door each;
//! they exit non-zero naming the first mismatch. The test installs what they
//! need itself: the Python client in the virtualenv target/py-venv from
//! tests/proto/requirements.txt (the venv and `.installed` marker of
//! tests/card_proto.rs), the npm one with `npm ci` of
//! tests/interop/package-lock.json in target/js-interop.

use crate::common;

use std::process::Command;
use std::time::Instant;

use common::Door;
use common::setup::{interop, node_modules, python, show};

/// A public door under task_acceptance: single, running the script agent.
const MANIFEST: &str = "name: my-agent\nversion: 0.1.0\n";

/// Runs a client script against a fresh door and asserts it succeeded,
/// showing its output and the door's log when it did not.
fn drive(client: &str, script: &mut Command) {
    let door = Door::start(MANIFEST);
    let started = Instant::now();
    let output = script
        .arg(&door.url)
        .output()
        .unwrap_or_else(|e| panic!("running the {client} script: {e}"));
    let took = started.elapsed();
    let log = door.stop();
    assert!(
        output.status.success(),
        "{client} does not drive the door as the reference says\n{}\n--- door log\n{}",
        show(&output),
        log.join("\n")
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprint!("{stdout}");
    eprintln!("{client}: {took:.1?}");
    assert!(
        stdout.lines().last().is_some_and(|l| l.starts_with("ok: ")),
        "{client} did not finish\n{}",
        show(&output)
    );
}

#[test]
fn the_python_a2a_sdk_client_drives_the_door() {
    let python = python();
    drive(
        "a2a-sdk (PyPI)",
        Command::new(python).arg(interop("a2a_python_client.py")),
    );
}

#[test]
fn the_npm_a2a_js_sdk_client_drives_the_door() {
    let modules = node_modules();
    drive(
        "@a2a-js/sdk (npm)",
        Command::new("node")
            .env("NODE_PATH", modules)
            .arg(interop("a2a_js_client.cjs")),
    );
}

#[test]
fn the_python_a2a_sdk_client_follows_the_streams() {
    let python = python();
    drive(
        "a2a-sdk streams (PyPI)",
        Command::new(python).arg(interop("a2a_python_streams.py")),
    );
}

#[test]
fn the_npm_a2a_js_sdk_client_follows_the_streams() {
    let modules = node_modules();
    drive(
        "@a2a-js/sdk streams (npm)",
        Command::new("node")
            .env("NODE_PATH", modules)
            .arg(interop("a2a_js_streams.cjs")),
    );
}
