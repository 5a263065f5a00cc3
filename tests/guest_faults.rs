//! A door that traps or answers nothing costs only its own request: the
//! client gets -32603 (or 500 without a JSON-RPC id), and the host keeps
//! serving. The broken doors are components written in text here.

mod common;

use std::sync::Arc;

use murmur_door_host::engine::{self, Door, MAX_INSTANCES};
use murmur_door_host::manifest::Manifest;
use murmur_door_host::server::Server;
use murmur_door_host::session::Session;
use serde_json::json;

/// A component exporting `wasi:http/incoming-handler` whose `handle` runs
/// `body` (core wasm) instead of answering.
fn broken_door(body: &str) -> Vec<u8> {
    let text = format!(
        r#"(component
  (import "wasi:http/types@0.2.12" (instance $types
    (export "incoming-request" (type (sub resource)))
    (export "response-outparam" (type (sub resource)))))
  (alias export $types "incoming-request" (type $request))
  (alias export $types "response-outparam" (type $outparam))
  (core module $m (func (export "handle") (param i32 i32) {body}))
  (core instance $i (instantiate $m))
  (func $handle (param "request" (own $request)) (param "response-out" (own $outparam))
    (canon lift (core func $i "handle")))
  (instance $handler (export "handle" (func $handle)))
  (export "wasi:http/incoming-handler@0.2.12" (instance $handler)))"#
    );
    wat::parse_str(text).expect("a valid component")
}

/// Serves `component` on an ephemeral port from a runtime of its own.
fn serve(component: &[u8]) -> (tokio::runtime::Runtime, String) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = runtime.block_on(async {
        let engine = engine::engine().unwrap();
        let door = Door::load(&engine, component).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let manifest = Manifest::parse("name: broken\nversion: 0.0.1\n").unwrap();
        let session = Arc::new(Session::launch(&manifest, format!("http://{addr}")).unwrap());
        let server = Arc::new(Server::new(door, session));
        tokio::spawn(server.serve(listener));
        addr.to_string()
    });
    (runtime, addr)
}

const INTERNAL: &str = "Internal error: the door failed while answering this request";

#[test]
fn a_trapping_door_costs_only_its_request() {
    let (_runtime, addr) = serve(&broken_door("unreachable"));
    // More requests than the pool has instances: a trap frees its slot.
    for n in 0..(MAX_INSTANCES + 44) {
        let reply = common::post(
            &addr,
            &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"GetTask"}}"#),
        );
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.json(),
            json!({"jsonrpc": "2.0", "id": n, "error": {"code": -32603, "message": INTERNAL}})
        );
    }
    // Without a JSON-RPC id the answer is a 500.
    for body in ["", "{", r#"{"id":1.5}"#] {
        let reply = common::post(&addr, body);
        assert_eq!(reply.status, 500);
        assert_eq!(
            reply.json(),
            json!({"error": "internal", "message": INTERNAL})
        );
    }
    let head = format!(
        "GET /.well-known/agent-card.json HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    );
    assert_eq!(common::exchange(&addr, head.as_bytes(), b"").status, 500);
}

#[test]
fn a_door_that_never_answers_is_answered_for() {
    let (_runtime, addr) = serve(&broken_door("nop"));
    let reply = common::post(&addr, r#"{"jsonrpc":"2.0","id":"q","method":"GetTask"}"#);
    assert_eq!(
        reply.json(),
        json!({"jsonrpc": "2.0", "id": "q", "error": {"code": -32603, "message": INTERNAL}})
    );
    let reply = common::post(&addr, "not json");
    assert_eq!(reply.status, 500);
}
