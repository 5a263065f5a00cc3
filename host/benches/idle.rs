//! `cargo bench -p murmur-door-host --bench idle`: what one pool slot costs
//! the host while its instance waits. First N bare instances, then N held
//! SendMessages (an instance suspended in `poll` on a pollable, the shape of
//! an open stream); prints the resident memory before and after each, and
//! the cost of one.

use std::sync::Arc;

use bytes::Bytes;
use murmur_door_host::engine::{Door, EMBEDDED_DOOR, engine};
use murmur_door_host::internal::memory::{DoorMemory, MAX_MEMORY_BYTES};
use murmur_door_host::manifest::Manifest;
use murmur_door_host::request::{Limits, RequestState, store};
use murmur_door_host::server::Server;
use murmur_door_host::session::Session;

/// The resident set of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn main() {
    const N: usize = 200;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let engine = engine().unwrap();
    let door = Door::load(&engine, EMBEDDED_DOOR).unwrap();
    let manifest =
        Manifest::parse("name: m\nversion: 0.1.0\nlifecycle: {task_acceptance: queue}\n").unwrap();
    let session = Arc::new(Session::launch(&manifest, "http://127.0.0.1:1".into()).unwrap());
    let server = Arc::new(Server::new(door.clone(), session.clone()));
    // Warm up: one of each, so lazily built state is not counted.
    runtime.block_on(async {
        let mut store = store(
            &engine,
            RequestState::new(session.clone(), DoorMemory::unshared(MAX_MEMORY_BYTES)),
            Limits::default(),
        );
        door.instantiate(&mut store).await.unwrap();
    });

    let before = rss_kib();
    let stores: Vec<_> = (0..N)
        .map(|_| {
            runtime.block_on(async {
                let mut store = store(
                    &engine,
                    RequestState::new(session.clone(), DoorMemory::unshared(MAX_MEMORY_BYTES)),
                    Limits::default(),
                );
                let instance = door.instantiate(&mut store).await.unwrap();
                (store, instance)
            })
        })
        .collect();
    let bare = rss_kib();
    drop(stores);

    let held = rss_kib();
    let send = |n: usize| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"SendMessage","params":{{"message":{{"messageId":"m{n}","role":"ROLE_USER","parts":[{{"text":"sleep 100000"}}]}}}}}}"#
        );
        hyper::Request::post("/")
            .header("content-type", "application/json")
            .header("a2a-version", "1.0")
            .body(Bytes::from(body))
            .unwrap()
    };
    let waiting: Vec<_> = (0..N)
        .map(|n| {
            let server = server.clone();
            runtime.spawn(async move { server.respond(send(n)).await })
        })
        .collect();
    runtime.block_on(async {
        while session
            .tasks
            .list(
                &None,
                &murmur_door_host::bindings::task_store::ListQuery {
                    context_id: None,
                    state: None,
                    status_after_ms: None,
                    after: None,
                    limit: 1,
                },
            )
            .unwrap()
            .total
            < N as u32
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    });
    let after = rss_kib();
    assert!(waiting.iter().all(|w| !w.is_finished()));
    println!(
        "RSS {before} KiB with no instance; {N} bare instances: {bare} KiB (+{} KiB each); \
         {N} held SendMessage: {held} -> {after} KiB (+{} KiB each)",
        bare.saturating_sub(before) / N as u64,
        after.saturating_sub(held) / N as u64,
    );
    session.close();
    runtime.block_on(async {
        for w in waiting {
            w.await.unwrap();
        }
    });
}
